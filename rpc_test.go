package main

import (
	"encoding/json"
	"errors"
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

// TestParseIncomingRejectsMalformedObjects pins the structural checks of the envelope
// scanner, which skips params without decoding them.
func TestParseIncomingRejectsMalformedObjects(t *testing.T) {
	for _, msg := range []string{
		`{"id":1,}`, `{"id" 1}`, `{"id":1}x`, `{"id":1,"method":"a"`, `{"a":"\"}`, `{"id":1 "method":"a"}`,
		`{"params":{"a":1}}}`, `{"id":tru,"method":"a"}`, `{,}`, `{"id":1,"method":"a","x":[1,}`,
		// Found by FuzzParseIncoming: whitespace JSON does not know around the message, and
		// invalid JSON in a params member that a later one overrides.
		"\v{\"id\":1,\"method\":\"a\"}", "{\"id\":1,\"method\":\"a\"}\u00a0\f",
		`{"id":1,"method":"a","params":tru,"params":{}}`, "{\"\x10\":1,\"id\":1,\"method\":\"a\"}",
		"{\"id\":1,\"method\":\"a\",\"params\":\v{}}", "{\"id\":1,\"method\":\"a\",\"params\":null\v}",
		`{"id":1,"method":"a","params":1{}}`, `{"id":1,"method":"a","params":1"x"}`,
	} {
		if _, _, err := parseIncoming([]byte(msg)); err == nil {
			t.Errorf("%s: parsed without an error", msg)
		}
	}
	for _, msg := range []string{
		`{}`, ` { "id" : 1 , "method" : "a" , "params" : { "k" : [ 1 , { } ] } } `,
		`{"id":"a\"b","method":"m\\"}`, `{"method":"a","params":"x\\\""}`, `{"\u0010":1}`,
	} {
		if _, _, err := parseIncoming([]byte(msg)); err != nil && !strings.Contains(err.Error(), "untagged enum JSONRPCMessage") {
			t.Errorf("%s: %v", msg, err)
		}
	}
}

// TestNoParamsMustBeJSON: found by FuzzMethodParams, a method without params took "{]" (whose
// brackets the envelope scanner balances without checking their kind) and "null" followed by
// whitespace JSON does not know as no params at all.
func TestNoParamsMustBeJSON(t *testing.T) {
	m := newMethodTable()["environment/status"]
	for _, params := range []string{`{]`, `{ ]`, "null\v", "null\u00a0", `{"a":1]`} {
		msg := []byte(`{"id":1,"method":"environment/status","params":` + params + `}`)
		in, _, err := parseIncoming(msg)
		if err != nil {
			continue
		}
		_, err = m.call(&conn{state: stateReady}, in.Params)
		var re *rpcError
		if !errors.As(err, &re) || re.Code != codeInvalidParams || !strings.HasPrefix(re.Message, "invalid JSON in params: ") {
			t.Errorf("params %q: %v", params, err)
		}
	}
}

// TestParamsFieldsAreJSON: found by FuzzMethodParams, a sandbox field that a decoder trimmed
// with bytes.TrimSpace took whitespace JSON does not know before or after null.
func TestParamsFieldsAreJSON(t *testing.T) {
	for _, params := range []string{"{\"path\":\"/\",\"sandbox\":\vnull}", "{\"path\":\"/\",\"sandbox\":null\u00a0}"} {
		var p pathParams
		if err := decodeParams(json.RawMessage(params), "PathParams", &p); err == nil {
			t.Errorf("%q: decoded", params)
		}
	}
}

// TestDecodeParamsReportsInDocumentOrder: as serde, the first bad value in the document is
// reported before any missing field.
func TestDecodeParamsReportsInDocumentOrder(t *testing.T) {
	type params struct {
		A string  `json:"a"`
		B uint64  `json:"b"`
		C *string `json:"c"`
	}
	for _, tt := range []struct{ in, want string }{
		{`{"b":"1"}`, "invalid type: string \"1\", expected u64"},
		{`{"b":-1}`, "invalid number"},
		{`{"b":1}`, "missing field `a`"},
		{`{"a":null,"b":1}`, "invalid type: null, expected a string"},
		{`{"A":"x","b":1}`, "missing field `a`"},
		{`{"a":"x","b":1,"c":null,"z":{"deep":[1,2]}}`, ""},
		{`{"a":"x","b":1,"z":[1,}`, "invalid JSON in params field `z`"},
	} {
		var p params
		err := decodeParams(json.RawMessage(tt.in), "Params", &p)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.in, got, tt.want)
		}
	}
}
