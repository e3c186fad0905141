package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestMaskStreamID(t *testing.T) {
	h := http.Header{}
	h.Set("X-Codex-Noise-Stream-Id", "3a199c97-c153-4b81-a07c-d475ae6e7767")
	a := recordedRequest{Method: "POST", Path: "/cloud/environment/e/validate", Header: h}
	b := a
	b.Header = http.Header{}
	b.Header.Set("X-Codex-Noise-Stream-Id", "492fc8cd-c9b2-4f55-af4c-0c0f5dc69643")
	if d := compareRecorded([]recordedRequest{a}, []recordedRequest{b}); d != "" {
		t.Errorf("random stream ids not masked:\n%s", d)
	}
	// Another form, or no header at all, stays visible.
	for _, v := range []string{"stream-1", "3A199C97-C153-4B81-A07C-D475AE6E7767", ""} {
		c := a
		c.Header = http.Header{}
		if v != "" {
			c.Header.Set("X-Codex-Noise-Stream-Id", v)
		}
		if compareRecorded([]recordedRequest{a}, []recordedRequest{c}) == "" {
			t.Errorf("stream id %q masked away", v)
		}
	}
}

func TestSplitValidates(t *testing.T) {
	reqs := []recordedRequest{
		{Method: "POST", Path: "/cloud/environment/e/register"},
		{Method: "GET", Path: "/relay?role=environment"},
		{Method: "POST", Path: "/cloud/environment/e/validate"},
	}
	v, o := splitValidates(reqs)
	if len(v) != 1 || len(o) != 2 || v[0].Path != "/cloud/environment/e/validate" {
		t.Errorf("validates %v, others %v", v, o)
	}
}

// TestValidateResults checks that a reference which did not complete the handshake or sent no
// validate gives SKIP, never PASS, and that ours failing where the reference passed is FAIL.
func TestValidateResults(t *testing.T) {
	validate := func(auth string) recordedRequest {
		h := http.Header{}
		h.Set("Authorization", auth)
		return recordedRequest{Method: "POST", Path: "/cloud/environment/e/validate", Header: h, Body: []byte(`{"harness_key_authorization":"hka-realcodex-1"}`)}
	}
	run := func(ready bool, reqs ...recordedRequest) *credRun {
		return &credRun{credRecord: credRecord{reqs: reqs}, upgraded: true, handshake: credHandshake{ready: ready, detail: "d"}}
	}
	status := func(r stepResult) string {
		switch {
		case r.Skip:
			return "SKIP"
		case r.OK:
			return "PASS"
		}
		return "FAIL"
	}
	for _, tc := range []struct {
		name      string
		ref, ours *credRun
		want      string // handshake step, validate step
	}{
		{"both", run(true, validate("Bearer k")), run(true, validate("Bearer k")), "PASS PASS"},
		{"ours differs", run(true, validate("Bearer k")), run(true, validate("Bearer other")), "PASS FAIL"},
		{"ours sent none", run(true, validate("Bearer k")), run(false), "FAIL FAIL"},
		{"reference not ready", run(false, validate("Bearer k")), run(true, validate("Bearer k")), "SKIP PASS"},
		{"reference sent none", run(false), run(true, validate("Bearer k")), "SKIP SKIP"},
		{"reference not upgraded", &credRun{}, run(true, validate("Bearer k")), "SKIP SKIP"},
	} {
		rs := validateResults("m", tc.ref, tc.ours)
		if got := status(rs[0]) + " " + status(rs[1]); got != tc.want {
			t.Errorf("%s: %s, want %s (%+v)", tc.name, got, tc.want, rs)
		}
	}
}

// TestNoiseRelayValidate checks the registry's validate check: the stream must be one a harness
// opened, and the authorization must have been issued for exactly that harness key.
func TestNoiseRelayValidate(t *testing.T) {
	n := newNoiseRelay(nil, "e", "ws://127.0.0.1:1", func(i int) string { return "hka-" + strings.Repeat("x", i) })
	if _, ok := n.connectBundle(json.RawMessage(`{"k":1}`)); ok {
		t.Fatal("connect bundle before register")
	}
	n.forget()
	n.setExecutorKey(json.RawMessage(`{"e":1}`))
	bundle, ok := n.connectBundle(json.RawMessage(`{"k":1}`))
	if !ok || bundle["harness_key_authorization"] != "hka-x" || bundle["url"] != "ws://127.0.0.1:1/relay?role=harness" {
		t.Fatalf("bundle %v", bundle)
	}
	n.handshakes["s1"] = true
	h := http.Header{}
	h.Set("X-Codex-Noise-Stream-Id", "s1")
	good := `{"executor_registration_id":"` + registrationID + `","harness_public_key":{"k":1},"harness_key_authorization":"hka-x"}`
	if p := n.validateProblems(h, []byte(good)); len(p) != 0 {
		t.Errorf("good validate: %v", p)
	}
	for name, body := range map[string]string{
		"key":  strings.Replace(good, `{"k":1}`, `{"k":2}`, 1),
		"auth": strings.Replace(good, "hka-x", "hka-y", 1),
		"reg":  strings.Replace(good, registrationID, "other", 1),
	} {
		if p := n.validateProblems(h, []byte(body)); len(p) == 0 {
			t.Errorf("%s: no problem found", name)
		}
	}
	h.Set("X-Codex-Noise-Stream-Id", "s2")
	if p := n.validateProblems(h, []byte(good)); len(p) == 0 {
		t.Error("unknown stream: no problem found")
	}
}
