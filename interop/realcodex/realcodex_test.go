package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseModes(t *testing.T) {
	for in, want := range map[string][]string{
		"danger-full-access":                     {modeFull},
		"all":                                    allModes,
		"read-only, workspace-write,read-only":   {modeRead, modeWrite},
		"workspace-write,all":                    {modeWrite, modeFull, modeRead},
		"danger-full-access,workspace-write,all": allModes,
	} {
		got, err := parseModes(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseModes(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseModes("workspace"); err == nil {
		t.Error("parseModes accepted an unknown mode")
	}
	if sandboxed([]string{modeFull}) || !sandboxed([]string{modeFull, modeRead}) {
		t.Error("sandboxed is wrong")
	}
}

func TestUnderTempDir(t *testing.T) {
	t.Setenv("TMPDIR", "")
	for path, want := range map[string]string{
		"/tmp":              "/tmp",
		"/tmp/x/y":          "/tmp",
		"/tmpx/y":           "",
		"/var/tmp/realcode": "",
		"/root/.cache/x":    "",
	} {
		if got := underTempDir(path); got != want {
			t.Errorf("underTempDir(%q) = %q, want %q", path, got, want)
		}
	}
	t.Setenv("TMPDIR", "/scratch/t/")
	if got := underTempDir("/scratch/t/rc"); got != "/scratch/t" {
		t.Errorf("under $TMPDIR: %q", got)
	}
}

func TestNewWorkdirAvoidsTmp(t *testing.T) {
	home := t.TempDir() // under /tmp: must be skipped
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", home)
	d, err := newWorkdir()
	if err != nil {
		t.Skipf("no /var/tmp here: %v", err)
	}
	defer os.RemoveAll(d)
	if underTempDir(d) != "" || !strings.HasPrefix(d, "/var/tmp/realcodex-") {
		t.Errorf("newWorkdir() = %s", d)
	}
}

func TestModelCatalog(t *testing.T) {
	var c struct {
		Models []map[string]any `json:"models"`
	}
	if err := json.Unmarshal(modelCatalog(), &c); err != nil || len(c.Models) != 1 {
		t.Fatalf("catalog: %v %v", err, c)
	}
	m := c.Models[0]
	if m["slug"] != "realcodex-mock" || m["apply_patch_tool_type"] != "freeform" || m["base_instructions"] == "" {
		t.Errorf("catalog entry %v", m)
	}
}

func TestTurnSandboxPolicy(t *testing.T) {
	for mode, typ := range map[string]string{modeFull: "dangerFullAccess", modeWrite: "workspaceWrite", modeRead: "readOnly"} {
		if got := turnSandboxPolicy(mode)["type"]; got != typ {
			t.Errorf("%s: type %v", mode, got)
		}
	}
}

// TestMockModelCustomToolCall checks that apply_patch is called with a custom_tool_call item
// and that its custom_tool_call_output counts as the step's output.
func TestMockModelCustomToolCall(t *testing.T) {
	logf, _ := os.Create(filepath.Join(t.TempDir(), "events.log"))
	defer logf.Close()
	m, err := startMockModel(newEventLog(logf, false))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.SetScript([]toolCall{patchCall("a.txt", "hello"), cmdCall("true")})
	post := func(input []any) string {
		body, _ := json.Marshal(map[string]any{"input": input, "tools": []any{map[string]string{"type": "custom", "name": "apply_patch"}}})
		resp, err := http.Post(m.BaseURL()+"/responses", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	first := post(nil)
	if !strings.Contains(first, `"type":"custom_tool_call"`) || !strings.Contains(first, `"input":"*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n"`) {
		t.Fatalf("first answer: %s", first)
	}
	second := post([]any{map[string]any{"type": "custom_tool_call_output", "call_id": m.CallID(0), "output": "Success."}})
	if !strings.Contains(second, `"type":"function_call"`) || !strings.Contains(second, `"name":"exec_command"`) {
		t.Fatalf("second answer: %s", second)
	}
	if _, _, outs := m.Result(); len(outs) != 1 || outs[0] != "Success." {
		t.Errorf("outputs %q", outs)
	}
}

func TestCredentialMasking(t *testing.T) {
	sigv4 := func(day, sig string) string {
		return "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/" + day + "/us-east-1/execute-api/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=" + sig
	}
	assertion := func(ts, sig string) string {
		b, _ := json.Marshal(map[string]string{"agent_runtime_id": "a", "task_id": "t", "timestamp": ts, "signature": sig})
		return "AgentAssertion " + base64.RawURLEncoding.EncodeToString(b)
	}
	req := func(date, auth, agent, rid, key string) recordedRequest {
		h := http.Header{}
		h.Set("X-Amz-Date", date)
		h.Set("Authorization", auth)
		h.Set("X-Codex-Assertion-Probe", maskHeader("Authorization", agent))
		h.Set("X-Request-Id", rid)
		h.Set("User-Agent", "codex_cli_rs/0.169.0 (Debian 12.5; x86_64)")
		body := `{"executor_public_key":{"x25519_public_key":"` + key + `"},"timestamp":"2026-01-01T00:00:0` + date[len(date)-2:len(date)-1] + `Z"}`
		return recordedRequest{Method: "POST", Path: "/r", Header: h, Body: []byte(body)}
	}
	k1 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	k2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
	a := req("20260101T000001Z", sigv4("20260101", strings.Repeat("a", 64)), assertion("2026-01-01T00:00:01Z", "c2ln"), "req_"+strings.Repeat("0", 32), k1)
	b := req("20260102T000002Z", sigv4("20260102", strings.Repeat("b", 64)), assertion("2026-01-02T00:00:02Z", "b3RoZXI="), "req_"+strings.Repeat("f", 32), k2)
	b.Header.Set("User-Agent", "codex_cli_rs/0.170.1 (Debian 12.6; x86_64)")
	if d := compareRecorded([]recordedRequest{a}, []recordedRequest{b}); d != "" {
		t.Errorf("clock-only differences not masked:\n%s", d)
	}
	if got := maskHeader("Authorization", a.Header.Get("Authorization")); !strings.Contains(got, "Credential=AKIDEXAMPLE/<day>/us-east-1/execute-api/aws4_request") ||
		!strings.Contains(got, "SignedHeaders=content-type;host;x-amz-date") || !strings.Contains(got, "Signature=<signature>") {
		t.Errorf("SigV4 mask: %s", got)
	}
	// What must stay visible: credential scope, signed headers, a changed bearer, a missing
	// header, a body field, a changed runtime id, and a key of another size.
	for name, mutate := range map[string]func(*recordedRequest){
		"region": func(r *recordedRequest) {
			r.Header.Set("Authorization", strings.Replace(sigv4("20260102", strings.Repeat("b", 64)), "us-east-1", "eu-west-1", 1))
		},
		"signedheaders": func(r *recordedRequest) {
			r.Header.Set("Authorization", strings.Replace(sigv4("20260102", strings.Repeat("b", 64)), "content-type;", "", 1))
		},
		"missing": func(r *recordedRequest) { r.Header.Del("X-Request-Id") },
		"extra":   func(r *recordedRequest) { r.Header.Set("Accept-Encoding", "gzip") },
		"body": func(r *recordedRequest) {
			r.Body = []byte(`{"executor_public_key":{"x25519_public_key":"` + k1 + `"}}`)
		},
		"keysize": func(r *recordedRequest) {
			r.Body = []byte(`{"executor_public_key":{"x25519_public_key":"AAAA"},"timestamp":"2026-01-01T00:00:00Z"}`)
		},
		"assertion": func(r *recordedRequest) {
			bb, _ := json.Marshal(map[string]string{"agent_runtime_id": "other", "task_id": "t", "timestamp": "2026-01-01T00:00:00Z", "signature": "x"})
			r.Header.Set("X-Codex-Assertion-Probe", maskHeader("Authorization", "AgentAssertion "+base64.RawURLEncoding.EncodeToString(bb)))
		},
	} {
		c := b
		c.Header = b.Header.Clone()
		mutate(&c)
		if compareRecorded([]recordedRequest{a}, []recordedRequest{c}) == "" {
			t.Errorf("%s: difference masked away", name)
		}
	}
	if got := maskHeader("Authorization", assertion("2026-01-01T00:00:01Z", "c2ln")); !strings.Contains(got, `"timestamp":"<RFC 3339>"`) || !strings.Contains(got, `"signature":"<signature>"`) {
		t.Errorf("assertion mask: %s", got)
	}
	if d := compareRecorded(nil, []recordedRequest{a}); !strings.Contains(d, "only ours sends POST /r") {
		t.Errorf("extra request not reported: %q", d)
	}
	ref := []byte("{\n  \"tokens\": {},\n  \"last_refresh\": \"2026-01-01T00:00:00Z\"\n}")
	ours := []byte("{\n  \"tokens\": {},\n  \"last_refresh\": \"2026-02-02T00:00:00.123Z\"\n}")
	if d := compareAuthJSON(ref, 0o600, ours, 0o600); d != "" {
		t.Errorf("last_refresh not masked: %s", d)
	}
	if d := compareAuthJSON(ref, 0o600, ours, 0o644); !strings.Contains(d, "mode") {
		t.Errorf("mode difference not reported: %q", d)
	}
}
