package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMaskTestHost makes real TLS requests to the masking scenario's test host: a client that
// trusts its CA gets an answer and the host records the Authorization it received; a client
// that trusts only the system roots is refused, so nothing reaches the host unless the test
// (or an intercepting proxy that trusts the test's CA) says so.
func TestMaskTestHost(t *testing.T) {
	h, err := startMaskTestHost(t.TempDir())
	if err != nil {
		t.Skipf("loopback test address unavailable: %v", err)
	}
	defer h.Close()
	pemBytes, err := os.ReadFile(h.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatal("the CA file holds no certificate")
	}
	get := func(c *http.Client, path, auth string) (string, error) {
		req, _ := http.NewRequest("GET", h.url(path), nil)
		req.Header.Set("Authorization", auth)
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	body, err := get(trusting, "/p1", "Bearer one")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(body, "realcodex-mask-host /p1") {
		t.Errorf("answer %q", body)
	}
	if _, err := get(&http.Client{}, "/p2", "Bearer two"); err == nil {
		t.Error("a client without the test CA was answered")
	}
	if got := h.received("/p1"); len(got) != 1 || got[0] != "Bearer one" {
		t.Errorf("received /p1: %q, want [Bearer one]", got)
	}
	if got := h.received("/p2"); len(got) != 0 {
		t.Errorf("received /p2: %q, want nothing", got)
	}
}

// TestFakeGitHubToken checks the fake token has a real GitHub token's shape and is new each time.
func TestFakeGitHubToken(t *testing.T) {
	a, b := fakeGitHubToken(), fakeGitHubToken()
	for _, tok := range []string{a, b} {
		if len(tok) != maskTokenLen || !strings.HasPrefix(tok, maskTokenPrefix) {
			t.Errorf("token %q: want %d characters starting %s", tok, maskTokenLen, maskTokenPrefix)
		}
		for _, c := range tok[len(maskTokenPrefix):] {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
				t.Errorf("token %q has %q", tok, c)
			}
		}
	}
	if a == b {
		t.Error("two tokens are equal")
	}
}

func wireJSON(dir string, v any) wireMessage {
	b, _ := json.Marshal(v)
	return wireMessage{Conn: 1, Dir: dir, Data: b}
}

// TestMaskWireResults reads cut-down wires as 0.171 and the reference produce them: the
// request for masking, and the real token in a process/output chunk (base64) or not.
func TestMaskWireResults(t *testing.T) {
	const real = "ghp_realrealrealrealrealrealrealrealreal"
	start := func(masking bool) wireMessage {
		proxy := map[string]any{"enabled": true}
		if masking {
			proxy["credentialMasking"] = true
		}
		return wireJSON("c2s", map[string]any{"id": 3, "method": "process/start", "params": map[string]any{
			"processId": "p", "networkProxy": map[string]any{"proxy": proxy}}})
	}
	output := func(text string) wireMessage {
		return wireJSON("s2c", map[string]any{"method": "process/output", "params": map[string]any{
			"processId": "p", "stream": "stdout", "chunk": base64.StdEncoding.EncodeToString([]byte(text))}})
	}
	caps := wireJSON("s2c", map[string]any{"id": 1, "result": map[string]any{"environmentInfo": map[string]any{
		"capabilities": map[string]bool{"credentialMasking": true}}}})
	for _, tc := range []struct {
		name            string
		msgs            []wireMessage
		startOK, leakOK bool
	}{
		{"masked", []wireMessage{caps, start(true), output("token=ghp_maskedXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX\n")}, true, true},
		{"real token in a chunk", []wireMessage{caps, start(true), output("token=" + real + "\n")}, true, false},
		{"no masking asked", []wireMessage{caps, start(false), output("token=x\n")}, false, true},
		{"no output at all", []wireMessage{caps, start(true)}, true, false},
	} {
		rs := maskWireResults(tc.msgs, real)
		if len(rs) != 2 || rs[0].OK != tc.startOK || rs[1].OK != tc.leakOK {
			t.Errorf("%s: got %+v, want start %t leak %t", tc.name, rs, tc.startOK, tc.leakOK)
		}
	}
}

// TestMaskRolloutResult greps rollout files laid out as the harness writes them.
func TestMaskRolloutResult(t *testing.T) {
	const real, id = "ghp_realrealrealrealrealrealrealrealreal", "01a226dc-6709-7620-abf7-ed1895f33be6"
	home := t.TempDir()
	d := filepath.Join(home, "sessions", "2026", "11", "29")
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if r := maskRolloutResult(home, id, real); r.OK {
		t.Errorf("no rollout file passed: %+v", r)
	}
	f := filepath.Join(d, "rollout-2026-11-29T10-31-48-"+id+".jsonl")
	os.WriteFile(f, []byte(`{"output":"token=ghp_maskedXXXX"}`+"\n"), 0o600)
	if r := maskRolloutResult(home, id, real); !r.OK {
		t.Errorf("a clean rollout failed: %+v", r)
	}
	os.WriteFile(f, []byte(`{"output":"token=`+real+`"}`+"\n"), 0o600)
	if r := maskRolloutResult(home, id, real); r.OK {
		t.Errorf("a rollout with the real token passed: %+v", r)
	}
}

// TestMaskWarningResult finds the harness's warning notification and the executor's log line,
// both measured on 0.171.
func TestMaskWarningResult(t *testing.T) {
	dir := t.TempDir()
	clean := filepath.Join(dir, "clean.log")
	os.WriteFile(clean, []byte("INFO nothing to see\n"), 0o600)
	if r := maskWarningResult(nil, clean, filepath.Join(dir, "missing.log")); !r.OK {
		t.Errorf("clean: %+v", r)
	}
	note := rpcMessage{Method: "warning", Params: json.RawMessage(`{"message":"Credential masking is unavailable on environment ` +
		"`remote`" + ` because its exec-server does not support it. This command will run with unmasked credentials."}`)}
	if r := maskWarningResult([]rpcMessage{note}, clean); r.OK || !strings.Contains(r.Detail, "does not support it") {
		t.Errorf("harness warning: %+v", r)
	}
	exe := filepath.Join(dir, "exec-server.log")
	os.WriteFile(exe, []byte("WARN codex_exec_server::process_sandbox: Credential masking is unavailable for this shell startup; preserving shell profiles and snapshots and running with unmasked credentials.\n"), 0o600)
	if r := maskWarningResult(nil, exe); r.OK || !strings.Contains(r.Detail, "shell startup") {
		t.Errorf("executor warning: %+v", r)
	}
}
