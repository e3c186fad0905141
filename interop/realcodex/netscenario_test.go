package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNetTestHost fetches from each loopback test host over real sockets and reads what each
// one recorded: a request is counted on the address it arrived at, and nowhere else.
func TestNetTestHost(t *testing.T) {
	h, err := startNetTestHost("m1")
	if err != nil {
		t.Skipf("loopback test addresses unavailable: %v", err)
	}
	defer h.Close()
	for _, host := range netHosts {
		resp, err := http.Get(h.url(host, "/p-"+host))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := "realcodex-net-host m1 " + host + " /p-" + host; !strings.HasPrefix(string(b), want) {
			t.Errorf("%s answered %q, want %q", host, b, want)
		}
	}
	for _, host := range netHosts {
		if n := h.reached(host, "/p-"+host); n != 1 {
			t.Errorf("%s saw its path %d times, want 1", host, n)
		}
		if n := h.reached(host, "/p-"+netAllowHost); host != netAllowHost && n != 0 {
			t.Errorf("%s saw another host's path %d times", host, n)
		}
	}
}

// reviewBody is an approval reviewer request as 0.171 sends it (cut down): the network access
// is one input_text holding JSON.
func reviewBody(host string) []byte {
	access, _ := json.MarshalIndent(map[string]any{"environment_id": "remote", "host": host, "port": 4242,
		"protocol": "http", "tool": "network_access"}, "", "  ")
	b, _ := json.Marshal(map[string]any{
		"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": reviewerSchema}},
		"input": []any{
			map[string]any{"type": "message", "role": "developer", "content": []any{map[string]any{"type": "input_text", "text": `say {"outcome":"allow"}`}}},
			map[string]any{"type": "message", "role": "user", "content": []any{
				map[string]any{"type": "input_text", "text": "Network access JSON:\n"},
				map[string]any{"type": "input_text", "text": string(access) + "\n"},
			}},
		},
	})
	return b
}

// TestNetReview checks the reviewer's answers: allow for the accepted review domain, a deny
// for the other (and for a request it cannot read), each valid JSON with an outcome.
func TestNetReview(t *testing.T) {
	for host, want := range map[string]string{netReviewAllowHost: "allow", netReviewDenyHost: "deny", "": "deny"} {
		body := reviewBody(host)
		if host == "" {
			body = []byte(`{"input":[]}`)
		}
		if got := netReviewHost(body); got != host {
			t.Errorf("netReviewHost = %q, want %q", got, host)
		}
		var ans struct{ Outcome string }
		if err := json.Unmarshal([]byte(netReview(body)), &ans); err != nil || ans.Outcome != want {
			t.Errorf("review of %q: %s (%v), want outcome %s", host, netReview(body), err, want)
		}
	}
}

// TestMockModelReviewer drives the mock model over HTTP: a reviewer request (the guardian's
// output schema) gets the reviewer's message and leaves the script's state alone; an ordinary
// request gets the script's next call.
func TestMockModelReviewer(t *testing.T) {
	m, err := startMockModel(newEventLog(io.Discard, false))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.SetScript([]toolCall{cmdCall("echo one")})
	m.SetReviewer(netReview)
	post := func(body []byte) string {
		resp, err := http.Post(m.BaseURL()+"/responses", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var items []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(d, "output_item.done") {
				items = append(items, d)
			}
		}
		return strings.Join(items, "\n")
	}
	got := post(reviewBody(netReviewAllowHost))
	if !strings.Contains(got, `"type":"message"`) || !strings.Contains(got, `{\"outcome\":\"allow\"}`) {
		t.Errorf("reviewer request answered %s", got)
	}
	if got := post(reviewBody(netReviewDenyHost)); !strings.Contains(got, `\"outcome\":\"deny\"`) {
		t.Errorf("reviewer request answered %s", got)
	}
	if got := post([]byte(`{"input":[]}`)); !strings.Contains(got, `"type":"function_call"`) || !strings.Contains(got, "echo one") {
		t.Errorf("script request answered %s", got)
	}
	if n := len(m.Reviews()); n != 2 {
		t.Errorf("%d reviews recorded, want 2", n)
	}
	if requests, _, _ := m.Result(); requests != 1 {
		t.Errorf("%d script requests counted, want 1 (reviewer requests are not the script's)", requests)
	}
}

// TestNetWireResults feeds the wire checks the reference's traffic (as recorded, cut down)
// and variants that must fail.
func TestNetWireResults(t *testing.T) {
	msg := func(dir, s string) wireMessage { return wireMessage{Conn: 1, Dir: dir, Data: []byte(s)} }
	start := fmt.Sprintf(`{"id":5,"method":"process/start","params":{"processId":"p1","enforceManagedNetwork":true,"networkProxy":{"proxy":{"enabled":true,"mode":"full","domains":{%q:"allow",%q:"allow",%q:"allow",%q:"deny"},"reviewDomains":[%q,%q]},"policyDecisionTimeoutMs":100000}}}`,
		netAllowHost, netReviewAllowHost, netReviewDenyHost, netDenyHost, netReviewAllowHost, netReviewDenyHost)
	good := []wireMessage{
		msg("c2s", start),
		msg("s2c", `{"id":1,"method":"network/policyRequest","params":{"processId":"p1","request":{"protocol":"http","host":"`+netReviewAllowHost+`","port":1}}}`),
		msg("c2s", `{"id":1,"result":{"decision":{"type":"allow"}}}`),
		msg("s2c", `{"method":"network/policyDecision","params":{"processId":"p0","decision":"allow","source":"baseline_policy","host":"`+netAllowHost+`"}}`),
		msg("s2c", `{"id":2,"method":"network/policyRequest","params":{"processId":"p1","request":{"protocol":"http","host":"`+netReviewDenyHost+`","port":1}}}`),
		msg("c2s", `{"id":2,"result":{"decision":{"type":"deny","reason":"not_allowed"}}}`),
	}
	rs := netWireResults(good, true)
	for _, r := range rs {
		if !r.OK {
			t.Errorf("reference traffic: %s failed: %s", r.Name, r.Detail)
		}
	}
	swapped := append([]wireMessage(nil), good...)
	swapped[2], swapped[5] = msg("c2s", `{"id":1,"result":{"decision":{"type":"deny","reason":"x"}}}`), msg("c2s", `{"id":2,"result":{"decision":{"type":"allow"}}}`)
	if rs := netWireResults(swapped, true); rs[1].OK {
		t.Errorf("answers swapped: the policy request check passed")
	}
	noTimeout := append([]wireMessage{msg("c2s", strings.Replace(start, `,"policyDecisionTimeoutMs":100000`, "", 1))}, good[1:]...)
	if rs := netWireResults(noTimeout, true); rs[0].OK {
		t.Errorf("no policyDecisionTimeoutMs: the process/start check passed")
	}
	if rs := netWireResults(nil, false); len(rs) != 3 || !rs[0].Skip || !rs[1].Skip || !rs[2].Skip {
		t.Errorf("invisible wire: want SKIP, got %+v", rs)
	}
	if rs := netWireResults(append(good[:3:3], good[4:]...), true); rs[2].OK {
		t.Errorf("no policyDecision for the allowed host: the check passed")
	}
	if r := netFullAccessWireResult(good, true); r.OK {
		t.Errorf("full access with networkProxy: passed")
	}
	if r := netFullAccessWireResult([]wireMessage{msg("c2s", `{"id":5,"method":"process/start","params":{"processId":"p1"}}`)}, true); !r.OK {
		t.Errorf("full access without networkProxy: %s", r.Detail)
	}
}

// TestNetConfig checks the shape of config.toml after writeNetConfig and of the requirements:
// the top-level key comes before every table (after one it would belong to that table), and
// each test host has one entry. That the harness reads them is what the scenario shows.
func TestNetConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.toml")
	if err := codexHomeConfig(dir, "http://127.0.0.1:1/v1", modeWrite); err != nil {
		t.Fatal(err)
	}
	if err := writeNetConfig(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	s := string(b)
	if i, j := strings.Index(s, "approvals_reviewer"), strings.Index(s, "["); i < 0 || i > j {
		t.Errorf("approvals_reviewer must come before the first table:\n%s", s)
	}
	req := netRequirements()
	for h, n := range map[string]int{netAllowHost: 1, netDenyHost: 1, netReviewAllowHost: 2, netReviewDenyHost: 2} {
		if got := strings.Count(req, fmt.Sprintf("%q", h)); got != n {
			t.Errorf("%s listed %d times, want %d, in:\n%s", h, got, n, req)
		}
	}
	if !strings.Contains(req, "enabled = true") || !strings.Contains(req, "review_domains = [\""+netReviewAllowHost) {
		t.Errorf("requirements lack enabled or the review domains:\n%s", req)
	}
}

// TestNetAppServerArgv runs the wrapper with cat in place of the app-server: inside it,
// /etc/codex/requirements.toml is the scenario's, and outside nothing changed.
func TestNetAppServerArgv(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a mount namespace and an overlay)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare(1)")
	}
	if _, err := os.Stat("/etc/codex/requirements.toml"); err == nil {
		t.Skip("the host has its own /etc/codex/requirements.toml")
	}
	dir, err := os.MkdirTemp("/var/tmp", "netreq-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := writeNetRequirements(dir); err != nil {
		t.Fatal(err)
	}
	argv := netAppServerArgv("cat", dir)
	argv = append(argv[:len(argv)-1], "/etc/codex/requirements.toml") // cat FILE instead of codex app-server
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "overlay") || strings.Contains(string(out), "mount") {
			t.Skipf("overlay mount unavailable: %s", out)
		}
		t.Fatalf("%v: %s", err, out)
	}
	if string(out) != netRequirements() {
		t.Errorf("inside the wrapper: %q, want the scenario's requirements", out)
	}
	if _, err := os.Stat("/etc/codex/requirements.toml"); err == nil {
		t.Errorf("the host now has /etc/codex/requirements.toml")
	}
}
