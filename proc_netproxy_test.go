package main

// Tests of process/start's managed network proxy (proc_netproxy.go, docs/network.md §6):
// real children running curl through the proxy to a test HTTP server on 127.0.0.1 (allowed
// by the policy's exact allow entries, the local rules), the decisions the session is told,
// a review domain put to a real websocket client, the refusals, and the proxy's end with the
// process.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// netProxyTestHost serves "hello <path>" on 127.0.0.1 and returns its port.
func netProxyTestHost(t *testing.T) int {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is needed to play the child's HTTP client")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

// netProxyStartParams is a process/start running script under sh with a networkProxy whose
// proxy has the base config and over's fields.
func netProxyStartParams(t *testing.T, id, script string, over map[string]any, timeoutMs int) map[string]any {
	var proxy map[string]any
	json.Unmarshal([]byte(netProxyBaseConfig), &proxy)
	proxy["enableSocks5"], proxy["enableSocks5Udp"] = false, false
	for k, v := range over {
		proxy[k] = v
	}
	np := map[string]any{"proxy": proxy}
	if timeoutMs > 0 {
		np["policyDecisionTimeoutMs"] = timeoutMs
	}
	return with(procStart(t, id, "sh", "-c", script), "networkProxy", np)
}

// curlLine fetches url through the child's proxy variables and prints the body, then the
// status on a line of its own.
func curlLine(url string) string {
	return `curl -sS -w '\n=%{http_code}\n' ` + url + `; `
}

var proxyURLRE = regexp.MustCompile(`HTTP_PROXY=http://(127\.0\.0\.1:\d+)`)

// netProxyGoroutines counts the goroutines running the proxy's code.
func netProxyGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("(*netProxy)")) {
			n++
		}
	}
	return n
}

// waitNoNetProxyGoroutines waits (briefly: wg.Wait returned, the goroutines are returning)
// until no goroutine runs the proxy's code.
func waitNoNetProxyGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for netProxyGoroutines() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of the proxy still run after process/closed", netProxyGoroutines())
		}
		runtime.Gosched()
	}
}

// TestProcessNetProxyFetches runs a child with a proxy whose policy allows 127.0.0.1 only:
// its environment carries the proxy's variables (over the client's own HTTP_PROXY), curl
// through it reaches the test host, gets the 403 body for localhost, the session is told
// both decisions, and the proxy's listener and goroutines are gone once the process closed.
func TestProcessNetProxyFetches(t *testing.T) {
	t.Run("unsandboxed", func(t *testing.T) { testProcessNetProxyFetches(t, nil) })
	t.Run("sandbox with network", func(t *testing.T) {
		requireSandbox(t)
		testProcessNetProxyFetches(t, netProxyTestSandbox("enabled"))
	})
}

func testProcessNetProxyFetches(t *testing.T, sandbox map[string]any) {
	port := netProxyTestHost(t)
	tc := startTestServer(t).connect(t)
	script := `env | grep -E '^(HTTP_PROXY|http_proxy|CODEX_NETWORK_PROXY_ACTIVE|NO_PROXY)=' | sort; ` +
		curlLine(fmt.Sprintf("http://127.0.0.1:%d/ok", port)) +
		curlLine(fmt.Sprintf("http://localhost:%d/no", port))
	params := netProxyStartParams(t, "np", script, map[string]any{"domains": map[string]string{"127.0.0.1": "allow"}}, 0)
	params["env"].(map[string]string)["HTTP_PROXY"] = "http://client.invalid:1"
	if sandbox != nil {
		params["sandbox"] = sandbox
	}
	r := tc.run(params)
	out := r.stdout()
	t.Logf("child output:\n%s%s", out, r.stderr())
	m := proxyURLRE.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "http_proxy=http://"+m[1]+"\n") || !strings.Contains(out, "CODEX_NETWORK_PROXY_ACTIVE=1\n") {
		t.Fatalf("the child's environment lacks the proxy's variables (or the client's HTTP_PROXY won)")
	}
	if !strings.Contains(out, "hello /ok\n=200\n") {
		t.Errorf("the allowed fetch did not reach the test host")
	}
	if !strings.Contains(out, `"status":"blocked"`) || !strings.Contains(out, `"reason":"not_allowed_local"`) || !strings.Contains(out, "\n=403\n") {
		t.Errorf("the denied fetch did not get the 403 body")
	}
	for _, want := range []string{`"decision":"allow"`, `"decision":"deny"`} {
		n, _ := tc.waitNote(0, procWait, func(n testNote) bool {
			return n.Method == "network/policyDecision" && bytes.Contains(n.Params, []byte(want))
		})
		t.Logf("network/policyDecision %s", n.Params)
		if !bytes.Contains(n.Params, []byte(`"processId":"np"`)) {
			t.Errorf("decision %s does not name the process", n.Params)
		}
	}
	// process/closed follows the proxy's close: its listener is gone already.
	if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
		c.Close()
		t.Errorf("the proxy still listens on %s after process/closed", m[1])
	}
	waitNoNetProxyGoroutines(t)
}

// TestProcessNetProxyReviewOverWebsocket puts a review domain to a real websocket client as
// network/policyRequest: its allow lets the first fetch through, its deny refuses the second
// with the 403 body.
func TestProcessNetProxyReviewOverWebsocket(t *testing.T) {
	port := netProxyTestHost(t)
	ts := startTestServer(t)
	p := wsPeer(t, ts)
	p.initialize()
	script := curlLine(fmt.Sprintf("http://localhost:%d/first", port)) + curlLine(fmt.Sprintf("http://localhost:%d/second", port))
	params := netProxyStartParams(t, "rv", script, map[string]any{
		"domains": map[string]string{"localhost": "allow"}, "reviewDomains": []string{"localhost"},
	}, 20000)
	start, _ := json.Marshal(map[string]any{"id": 1, "method": "process/start", "params": params})
	p.mustSend(string(start))
	answers := []string{`{"decision":{"type":"allow"}}`, `{"decision":{"type":"deny","reason":"no"}}`}
	var out []byte
	asked := 0
	for closed := false; !closed; {
		m, ok := p.recv()
		if !ok {
			t.Fatal("the websocket ended")
		}
		switch m.Method {
		case "network/policyRequest":
			t.Logf("request id %s params %s", m.ID, m.Params)
			if !bytes.Contains(m.Params, []byte(`"processId":"rv"`)) || !bytes.Contains(m.Params, []byte(`"host":"localhost"`)) {
				t.Errorf("policyRequest params %s", m.Params)
			}
			if asked >= len(answers) {
				t.Fatalf("asked %d times", asked+1)
			}
			p.mustSend(`{"id":` + string(m.ID) + `,"result":` + answers[asked] + `}`)
			asked++
		case "process/output":
			var o struct {
				Chunk []byte `json:"chunk"`
			}
			json.Unmarshal(m.Params, &o)
			out = append(out, o.Chunk...)
		case "process/closed":
			closed = true
		}
		if m.Error != nil {
			t.Fatalf("error %+v", m.Error)
		}
	}
	t.Logf("child output:\n%s", out)
	if asked != 2 {
		t.Errorf("the client was asked %d times, want 2", asked)
	}
	if !bytes.Contains(out, []byte("hello /first\n=200\n")) {
		t.Errorf("the fetch the client allowed did not reach the test host")
	}
	if bytes.Contains(out, []byte("hello /second")) || !bytes.Contains(out, []byte(`"source":"decider"`)) || !bytes.Contains(out, []byte("\n=403\n")) {
		t.Errorf("the fetch the client denied was not refused with the 403 body")
	}
	waitNoNetProxyGoroutines(t)
}

// netProxyTestSandbox is a managed sandbox reading everything, writing nothing, with the
// network "enabled" or "restricted".
func netProxyTestSandbox(network string) map[string]any {
	return map[string]any{
		"permissions": map[string]any{
			"type": "managed", "network": network,
			"file_system": map[string]any{"type": "restricted", "entries": []any{
				map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "root"}}, "access": "read"},
			}},
		},
		"windowsSandboxLevel": "disabled",
	}
}

// TestProcessNetProxyParams: process/start decodes networkProxy, managedNetwork and
// enforceManagedNetwork with the reference's answers (each measured on Codex 0.171.0), and
// refuses a disabled proxy before anything else of the start, as it does.
func TestProcessNetProxyParams(t *testing.T) {
	tc := startTestServer(t).connect(t)
	disabled := map[string]any{}
	json.Unmarshal([]byte(netProxyBaseConfig), &disabled)
	disabled["enabled"] = false
	cases := []struct {
		field string
		value any
		want  string // "" when the start succeeds
	}{
		{"enforceManagedNetwork", nil, "invalid type: null, expected a boolean"},
		{"enforceManagedNetwork", "x", `invalid type: string "x", expected a boolean`},
		{"networkProxy", nil, ""},
		{"managedNetwork", nil, ""},
		{"networkProxy", map[string]any{}, "missing field `proxy`"},
		{"networkProxy", map[string]any{"proxy": map[string]any{}}, "missing field `enabled`"},
		{"managedNetwork", map[string]any{"loopbackPorts": nil}, "invalid type: null, expected a sequence"},
		{"managedNetwork", map[string]any{"loopbackPorts": []int{8080}, "allowLocalBinding": true}, ""},
		{"networkProxy", map[string]any{"proxy": disabled}, "invalid network proxy config: executor-local network proxy launch requires an enabled proxy"},
	}
	for i, c := range cases {
		id := fmt.Sprintf("p%d", i)
		params := with(procStart(t, id, "true"), c.field, c.value)
		if c.want == "" {
			if r := tc.run(params); r.exitCode != 0 {
				t.Errorf("%s=%v: exit code %d", c.field, c.value, r.exitCode)
			}
			continue
		}
		// Before argv's own check, as the reference's.
		params["argv"] = []string{}
		err := tc.callErr("process/start", params)
		if err == nil || err.Code != codeInvalidParams || err.Message != c.want {
			t.Errorf("%s=%v: error %+v, want -32602 %q", c.field, c.value, err, c.want)
		}
	}
}

// TestProcessNetProxyRefusals: a routed start whose routing cannot hold is refused with
// -32602 and the reference's reason, and no process runs: enforceManagedNetwork under a
// sandbox with no proxy variables, with none naming a loopback endpoint, or with one on a
// port managedNetwork.loopbackPorts does not list. Unsandboxed, enforceManagedNetwork without
// a proxy runs, as with the reference.
func TestProcessNetProxyRefusals(t *testing.T) {
	requireSandbox(t)
	tc := startTestServer(t).connect(t)
	enforced := func(network string, env map[string]string, mn map[string]any) map[string]any {
		p := with(procStart(t, "a", "true"), "enforceManagedNetwork", true, "sandbox", netProxyTestSandbox(network))
		for k, v := range env {
			p["env"].(map[string]string)[k] = v
		}
		if mn != nil {
			p["managedNetwork"] = mn
		}
		return p
	}
	cases := []struct {
		name   string
		params map[string]any
		want   string
	}{
		{"enforce without proxy, restricted sandbox", enforced("restricted", nil, nil), "managed proxy mode requires proxy environment variables"},
		{"enforce without proxy, enabled sandbox", enforced("enabled", nil, nil), "managed proxy mode requires proxy environment variables"},
		{"enforce, a remote proxy only", enforced("restricted", map[string]string{"HTTP_PROXY": "http://proxy.example:3128"}, nil), "managed proxy mode requires parseable loopback proxy endpoints"},
		{"enforce, a loopback proxy not listed", enforced("restricted", map[string]string{"HTTP_PROXY": "http://127.0.0.1:3128"}, map[string]any{"loopbackPorts": []int{3129}}), "proxy endpoint is outside the managed sandbox context"},
		{"enforce, one listed and one not", enforced("enabled", map[string]string{"HTTP_PROXY": "http://127.0.0.1:3128", "all_proxy": "socks5h://localhost:1080"}, map[string]any{"loopbackPorts": []int{3128}}), "proxy endpoint is outside the managed sandbox context"},
	}
	for _, c := range cases {
		err := tc.callErr("process/start", c.params)
		if err == nil || err.Code != codeInvalidParams || !strings.Contains(err.Message, c.want) {
			t.Errorf("%s: error %+v, want -32602 naming %q", c.name, err, c.want)
			continue
		}
		t.Logf("%s: %d %s", c.name, err.Code, err.Message)
	}
	if n := netProxyGoroutines(); n > 0 {
		t.Errorf("%d goroutines of a refused start's proxy", n)
	}
	// The id is free again (nothing was started), and unsandboxed enforce runs.
	r := tc.run(with(procStart(t, "a", "echo", "free"), "enforceManagedNetwork", true))
	if r.stdout() != "free\n" {
		t.Errorf("unsandboxed enforceManagedNetwork: %q, exit code %d", r.stdout(), r.exitCode)
	}
}

// TestProcessNetProxyEndCancelsQuestion: a question the client never answers (its timeout a
// minute away) ends with the process: the child gives up, process/closed arrives at once,
// and the proxy's goroutines are gone.
func TestProcessNetProxyEndCancelsQuestion(t *testing.T) {
	port := netProxyTestHost(t)
	ts := startTestServer(t)
	p := wsPeer(t, ts)
	p.initialize()
	script := `curl -sS -m 1 http://localhost:` + fmt.Sprint(port) + `/; echo curl=$?`
	params := netProxyStartParams(t, "q", script, map[string]any{
		"domains": map[string]string{"localhost": "allow"}, "reviewDomains": []string{"localhost"},
	}, 60000)
	start, _ := json.Marshal(map[string]any{"id": 1, "method": "process/start", "params": params})
	p.mustSend(string(start))
	began := time.Now()
	asked := false
	for closed := false; !closed; {
		m, ok := p.recv()
		if !ok {
			t.Fatal("the websocket ended")
		}
		switch m.Method {
		case "network/policyRequest":
			asked = true // never answered
		case "process/closed":
			closed = true
		}
	}
	if !asked {
		t.Fatal("the client was not asked")
	}
	took := time.Since(began)
	t.Logf("process/closed %v after the start, with the question unanswered", took.Round(time.Millisecond))
	if took > 30*time.Second {
		t.Errorf("process/closed took %v: the pending question held the process", took)
	}
	waitNoNetProxyGoroutines(t)
}
