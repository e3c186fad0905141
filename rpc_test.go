package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestInitializeReturnsSessionAndEnvironment(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.dial(t)
	res := tc.mustCall("initialize", map[string]any{"clientName": "x"})
	var r struct {
		SessionID       string          `json:"sessionId"`
		EnvironmentInfo json.RawMessage `json:"environmentInfo"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.SessionID) != 36 || r.SessionID[14] != '4' {
		t.Errorf("sessionId %q is not a UUIDv4", r.SessionID)
	}
	for _, key := range []string{"shell", "executorVersion", "providerId", "cwd", "userHomeDir", "platformOs", "prependPathDirs", "temporaryDirectories", "tempDir", "capabilities"} {
		if !strings.Contains(string(r.EnvironmentInfo), `"`+key+`":`) {
			t.Errorf("environmentInfo lacks %s: %s", key, r.EnvironmentInfo)
		}
	}
	if e := tc.callErr("initialize", map[string]any{"clientName": "x"}); e.Code != codeInvalidRequest || e.Message != "initialize may only be sent once per connection" {
		t.Errorf("second initialize: %+v", e)
	}
}

func TestLifecycleGate(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.dial(t)
	e := tc.callErr("environment/status", nil)
	if e.Message != "client must call initialize before using environment status methods" {
		t.Errorf("before initialize: %q", e.Message)
	}
	tc.mustCall("initialize", map[string]any{"clientName": "x"})
	e = tc.callErr("environment/info", nil)
	if e.Message != "client must send initialized before using environment info methods" {
		t.Errorf("before initialized: %q", e.Message)
	}
	tc.notify("initialized", nil)
	tc.mustCall("environment/status", map[string]any{})
}

func TestEnvelopeErrors(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	for _, tt := range []struct {
		name, msg, want string
	}{
		{"malformed", `{nope`, `"code":-32600`},
		{"batch", `[]`, `expected a JSON-RPC object`},
		{"bad id", `{"id":1.5,"method":"environment/status"}`, `untagged enum RequestId`},
		{"empty", ``, `EOF while parsing`},
		{"unexpected notification", `{"method":"foo/bar"}`, "unexpected notification"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc.send(tt.msg)
			got := tc.waitOther(5 * time.Second)
			if !strings.Contains(string(got), tt.want) || !strings.HasSuffix(string(got), `"id":-1}`) {
				t.Errorf("got %s, want it to contain %s and id -1", got, tt.want)
			}
		})
	}
	if e := tc.callErr("nope/nope", nil); e.Code != codeMethodNotFound || e.Message != "exec-server stub does not implement `nope/nope` yet" {
		t.Errorf("unknown method: %+v", e)
	}
	tc.send(`{"id":"str-id","method":"environment/status"}`)
	// The string id is echoed as a string; the reply goes to "other" since the harness did not send it.
	if got := tc.waitOther(5 * time.Second); !strings.HasPrefix(string(got), `{"id":"str-id","result":`) {
		t.Errorf("string id reply: %s", got)
	}
}

func TestInitializedBeforeInitializeClosesConnection(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.dial(t)
	tc.notify("initialized", nil)
	tc.waitClosed(5 * time.Second)
}
