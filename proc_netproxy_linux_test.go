package main

// Tests of process/start routing a sandboxed command through the bridge into its network
// namespace (proc_netproxy.go, docs/network.md §4): real children under the namespace stage,
// curl through $HTTP_PROXY and directly to the host's listeners. Every verdict is read on the
// host: which paths the test hosts received. A new file: these tests need the Linux
// namespace stage, which proc_netproxy_test.go's do not.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// npLocalEnv makes the test binary the local-binding probe: it listens on 127.0.0.1:0 in its
// network namespace, connects to itself and passes a byte, printing "local=ok" or
// "local=<error>".
const npLocalEnv = "EXEC_SERVER_NPLOCAL"

func init() {
	if os.Getenv(npLocalEnv) == "" || isSandboxStage() {
		return
	}
	os.Exit(npLocalProbe())
}

func npLocalProbe() int {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		fmt.Printf("local=%v\n", err)
		return 0
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		fmt.Printf("local=%v\n", err)
		return 0
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		fmt.Printf("local=%v\n", err)
		return 0
	}
	defer s.Close()
	c.Write([]byte{'x'})
	b := make([]byte, 1)
	if _, err := s.Read(b); err != nil || b[0] != 'x' {
		fmt.Printf("local=read %v\n", err)
		return 0
	}
	fmt.Println("local=ok")
	return 0
}

// npLocalScript runs the local-binding probe in the command's namespace.
func npLocalScript(t *testing.T) string {
	return npLocalEnv + "=1 GORACE='" + sbGORACE + "' " + testBinary(t) + "; "
}

// routedHost is a test HTTP server answering "hello <path>" on 127.0.0.1, on ::1 and on a
// non-loopback IPv4 address of the host when there is one, each on a port of its own, and
// recording every path it was asked for (absolute-form requests, as a proxy gets them,
// included).
type routedHost struct {
	mu    sync.Mutex
	paths []string
	v4    int    // port on 127.0.0.1
	v6    int    // port on ::1, 0 when the host has no IPv6 loopback
	ifURL string // "http://IP:PORT" on a host interface, "" when there is none
}

func newRoutedHost(t *testing.T) *routedHost {
	t.Helper()
	netProxyTestHost(t) // skips without curl
	h := &routedHost{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.paths = append(h.paths, r.URL.Path)
		h.mu.Unlock()
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	})}
	serve := func(network, addr string) int {
		ln, err := net.Listen(network, addr)
		if err != nil {
			return 0
		}
		go srv.Serve(ln)
		return ln.Addr().(*net.TCPAddr).Port
	}
	t.Cleanup(func() { srv.Close() })
	if h.v4 = serve("tcp4", "127.0.0.1:0"); h.v4 == 0 {
		t.Fatal("cannot listen on 127.0.0.1")
	}
	h.v6 = serve("tcp6", "[::1]:0")
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
				if port := serve("tcp4", ipn.IP.String()+":0"); port != 0 {
					h.ifURL = fmt.Sprintf("http://%s:%d", ipn.IP, port)
					break
				}
			}
		}
	}
	return h
}

// got returns the paths received so far.
func (h *routedHost) got() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.paths)
}

// directScript tries the host's listeners directly (curl ignoring the proxy variables), each
// printing "=<status>"; none may arrive.
func (h *routedHost) directScript() string {
	s := curlDirect(fmt.Sprintf("http://127.0.0.1:%d/direct-v4", h.v4))
	if h.v6 != 0 {
		s += curlDirect(fmt.Sprintf("http://[::1]:%d/direct-v6", h.v6))
	}
	if h.ifURL != "" {
		s += curlDirect(h.ifURL + "/direct-if")
	}
	return s
}

// curlDirect fetches url without a proxy, printing the status (000: no connection).
func curlDirect(url string) string {
	return `curl -sS -g -m 5 --noproxy '*' -o /dev/null -w 'direct=%{http_code}\n' ` + url + `; `
}

// listeningScript prints the TCP ports listening in the command's network namespace, as
// "listen=PORT" lines (from /proc/net/tcp{,6}, state 0A).
const listeningScript = `for f in /proc/net/tcp /proc/net/tcp6; do tail -n +2 $f; done | ` +
	`while read -r _ l _ st _; do [ "$st" = 0A ] && printf 'listen=%d\n' 0x${l##*:}; done | sort; `

var (
	listenRE    = regexp.MustCompile(`(?m)^listen=(\d+)$`)
	proxyPortRE = regexp.MustCompile(`(?m)^(?:HTTP_PROXY=http|ALL_PROXY=socks5h)://127\.0\.0\.1:(\d+)$`)
)

// netBridgeGoroutines counts the goroutines running the bridge's code.
func netBridgeGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("(*netBridge)")) {
			n++
		}
	}
	return n
}

// waitNoNetBridgeGoroutines waits briefly (the bridges were closed, their goroutines are
// returning) until no goroutine runs the bridge's code.
func waitNoNetBridgeGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for netBridgeGoroutines() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of the bridge still run after process/closed", netBridgeGoroutines())
		}
		runtime.Gosched()
	}
}

// workspaceTestSandbox is a managed sandbox reading everything and writing dir only.
func workspaceTestSandbox(network, dir string) map[string]any {
	return map[string]any{
		"permissions": map[string]any{
			"type": "managed", "network": network,
			"file_system": map[string]any{"type": "restricted", "entries": []any{
				map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "root"}}, "access": "read"},
				map[string]any{"path": map[string]any{"type": "path", "path": fileURI(dir)}, "access": "write"},
			}},
		},
		"windowsSandboxLevel": "disabled",
	}
}

// fullWriteTestSandbox is a managed sandbox writing everything: it confines no file, only
// the network.
func fullWriteTestSandbox(network string) map[string]any {
	return map[string]any{
		"permissions": map[string]any{
			"type": "managed", "network": network,
			"file_system": map[string]any{"type": "restricted", "entries": []any{
				map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "root"}}, "access": "write"},
			}},
		},
		"windowsSandboxLevel": "disabled",
	}
}

// TestProcessNetProxyRouted: with enforceManagedNetwork, a sandboxed command (read-only,
// workspace-write or full-write, network restricted or enabled) runs in a network namespace
// whose only listeners are the bridge's (its proxy variables name them), an allowed fetch
// through $HTTP_PROXY and one through $ALL_PROXY (SOCKS5) reach the host, a denied one gets
// the 403 body, every direct connection (the host's 127.0.0.1, ::1 and interface addresses)
// fails, it may listen on and connect to its namespace's lo (as with the reference,
// allowLocalBinding or not), and once the process closed neither the proxy nor the bridge
// has a goroutine left.
func TestProcessNetProxyRouted(t *testing.T) {
	requireUserNamespaces(t)
	for _, c := range []struct {
		name    string
		sandbox func(dir string) map[string]any
	}{
		{"read-only restricted", func(string) map[string]any { return netProxyTestSandbox("restricted") }},
		{"read-only enabled", func(string) map[string]any { return netProxyTestSandbox("enabled") }},
		{"workspace-write restricted", func(dir string) map[string]any { return workspaceTestSandbox("restricted", dir) }},
		{"workspace-write enabled", func(dir string) map[string]any { return workspaceTestSandbox("enabled", dir) }},
		{"full-write restricted", func(string) map[string]any { return fullWriteTestSandbox("restricted") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newRoutedHost(t)
			tc := startTestServer(t).connect(t)
			script := `env | grep -E '^(HTTP_PROXY|ALL_PROXY)=' | sort; ` + listeningScript +
				curlLine(fmt.Sprintf("http://127.0.0.1:%d/ok", h.v4)) +
				curlLine(fmt.Sprintf("http://localhost:%d/no", h.v4)) +
				`curl -sS -m 5 --proxy "$ALL_PROXY" -w '\n=%{http_code}\n' ` + fmt.Sprintf("http://127.0.0.1:%d/socks; ", h.v4) +
				h.directScript() + npLocalScript(t)
			params := netProxyStartParams(t, "rt", script, map[string]any{
				"domains": map[string]string{"127.0.0.1": "allow"}, "enableSocks5": true,
			}, 0)
			params["sandbox"] = c.sandbox(t.TempDir())
			params["enforceManagedNetwork"] = true
			r := tc.run(params)
			out := r.stdout()
			got := h.got()
			t.Logf("child output:\n%s%s\nhost received %q", out, r.stderr(), got)
			var listening, named []string
			for _, m := range listenRE.FindAllStringSubmatch(out, -1) {
				listening = append(listening, m[1])
			}
			for _, m := range proxyPortRE.FindAllStringSubmatch(out, -1) {
				named = append(named, m[1])
			}
			slices.Sort(named)
			if len(named) != 2 || !slices.Equal(listening, named) {
				t.Errorf("the namespace listens on %v, the proxy variables name %v: want the same two ports", listening, named)
			}
			if !strings.Contains(out, "hello /ok\n=200\n") || !slices.Contains(got, "/ok") {
				t.Errorf("the allowed fetch through $HTTP_PROXY did not reach the host")
			}
			if !strings.Contains(out, "hello /socks\n=200\n") || !slices.Contains(got, "/socks") {
				t.Errorf("the allowed fetch through $ALL_PROXY (SOCKS5) did not reach the host")
			}
			if !strings.Contains(out, `"reason":"not_allowed_local"`) || !strings.Contains(out, "\n=403\n") || slices.Contains(got, "/no") {
				t.Errorf("the denied fetch did not get the 403 body")
			}
			for _, p := range got {
				if strings.HasPrefix(p, "/direct") {
					t.Errorf("a direct connection reached the host: %s", p)
				}
			}
			if n := strings.Count(out, "direct=000\n"); n != strings.Count(h.directScript(), "curl") {
				t.Errorf("%d direct attempts failed to connect, want all", n)
			}
			if !strings.Contains(out, "local=ok\n") {
				t.Errorf("the command cannot listen on and connect to its namespace's lo (the reference lets it)")
			}
			waitNoNetProxyGoroutines(t)
			waitNoNetBridgeGoroutines(t)
		})
	}
}

// TestProcessNetProxyUnrouted: without enforceManagedNetwork a sandbox restricting the
// network runs its command with the proxy's variables naming the host's ports, which it
// cannot reach (the reference's behaviour, measured): nothing listens in its namespace, the
// fetch fails, the host receives nothing, and no IP socket opens (managedNetwork's
// allowLocalBinding changes none of it, as with the reference).
func TestProcessNetProxyUnrouted(t *testing.T) {
	requireUserNamespaces(t)
	h := newRoutedHost(t)
	tc := startTestServer(t).connect(t)
	script := `env | grep -E '^HTTP_PROXY=' ; ` + listeningScript +
		`curl -sS -m 5 -o /dev/null -w 'proxied=%{http_code}\n' ` + fmt.Sprintf("http://127.0.0.1:%d/via", h.v4) + `; ` + h.directScript() + npLocalScript(t)
	params := netProxyStartParams(t, "un", script, map[string]any{"domains": map[string]string{"127.0.0.1": "allow"}}, 0)
	params["sandbox"] = netProxyTestSandbox("restricted")
	params["managedNetwork"] = map[string]any{"allowLocalBinding": true}
	r := tc.run(params)
	out := r.stdout()
	got := h.got()
	t.Logf("child output:\n%s%s\nhost received %q", out, r.stderr(), got)
	if !proxyURLRE.MatchString(out) {
		t.Errorf("the child lacks the proxy's variables")
	}
	if listenRE.MatchString(out) {
		t.Errorf("something listens in the command's namespace")
	}
	if !strings.Contains(out, "proxied=000\n") || len(got) != 0 {
		t.Errorf("the restricted command reached the host")
	}
	if !strings.Contains(out, "local=socket: operation not permitted") && !strings.Contains(out, "local=listen tcp4 127.0.0.1:0: socket: operation not permitted") {
		t.Errorf("the restricted, unrouted command could open an IP socket (the reference denies it)")
	}
	waitNoNetProxyGoroutines(t)
}

// TestProcessNetProxyLoopbackPorts: with enforceManagedNetwork and no networkProxy, the
// command's own proxy variables naming a loopback port that managedNetwork.loopbackPorts
// lists (here the test host, playing an HTTP proxy, named as localhost) are bridged: the
// variable names the namespace's listener (127.0.0.1), a fetch through it arrives on the
// host, a variable naming anything else is left as it is, and direct connections fail.
func TestProcessNetProxyLoopbackPorts(t *testing.T) {
	requireUserNamespaces(t)
	for _, network := range []string{"restricted", "enabled"} {
		t.Run(network, func(t *testing.T) {
			h := newRoutedHost(t)
			tc := startTestServer(t).connect(t)
			script := `env | grep -E '^(HTTP_PROXY|http_proxy|PIP_PROXY)=' | sort; ` + listeningScript +
				curlLine("http://example.invalid/lp") + h.directScript()
			params := procStart(t, "lp", "sh", "-c", script)
			env := params["env"].(map[string]string)
			env["HTTP_PROXY"] = fmt.Sprintf("http://localhost:%d", h.v4)
			env["http_proxy"] = fmt.Sprintf("http://127.0.0.1:%d/", h.v4)
			env["PIP_PROXY"] = "http://proxy.example:3128"
			params["sandbox"] = netProxyTestSandbox(network)
			params["enforceManagedNetwork"] = true
			params["managedNetwork"] = map[string]any{"loopbackPorts": []int{h.v4}}
			r := tc.run(params)
			out := r.stdout()
			got := h.got()
			t.Logf("child output:\n%s%s\nhost received %q", out, r.stderr(), got)
			listening := listenRE.FindAllStringSubmatch(out, -1)
			if len(listening) != 1 {
				t.Fatalf("the namespace listens on %d ports, want 1", len(listening))
			}
			ns := "127.0.0.1:" + listening[0][1]
			if !strings.Contains(out, "HTTP_PROXY=http://"+ns+"\n") || !strings.Contains(out, "http_proxy=http://"+ns+"/\n") {
				t.Errorf("the proxy variables do not name the namespace's listener %s", ns)
			}
			if !strings.Contains(out, "PIP_PROXY=http://proxy.example:3128\n") {
				t.Errorf("a proxy variable naming no loopback endpoint was changed")
			}
			if !strings.Contains(out, "hello /lp\n=200\n") || !slices.Contains(got, "/lp") {
				t.Errorf("the fetch through the bridged proxy variable did not arrive")
			}
			for _, p := range got {
				if strings.HasPrefix(p, "/direct") {
					t.Errorf("a direct connection reached the host: %s", p)
				}
			}
			waitNoNetBridgeGoroutines(t)
		})
	}
}

// TestProcessNetProxyRoutedStages: a stage that cannot hold the bridge refuses a routed start
// with a reason, and no process runs: --linux-sandbox-pid-namespace inherit, and the
// Landlock fallback.
func TestProcessNetProxyRoutedStages(t *testing.T) {
	requireUserNamespaces(t)
	for _, c := range []struct{ name, pidns, mech string }{
		{"pid namespace inherit", "inherit", "namespaces"},
		{"landlock", "isolate", "landlock"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sbx, err := newSandboxer(c.pidns, c.mech)
			if err != nil {
				t.Fatal(err)
			}
			tc := startTestServer(t, func(s *server) { s.sandbox = sbx }).connect(t)
			params := netProxyStartParams(t, "st", "true", nil, 0)
			params["sandbox"] = netProxyTestSandbox("restricted")
			params["enforceManagedNetwork"] = true
			err2 := tc.callErr("process/start", params)
			if err2 == nil || err2.Code != codeInvalidParams || !strings.Contains(err2.Message, "pid namespace of its own") {
				t.Fatalf("error %+v, want -32602 naming the stage it needs", err2)
			}
			t.Logf("%d %s", err2.Code, err2.Message)
			waitNoNetProxyGoroutines(t)
		})
	}
}

// TestProcessNetProxyRoutedFailedStart: a routed start that fails after the stage made and
// handed over its bridge listeners (the program is in a directory the sandbox denies) ends
// the proxy and the bridge: no goroutine of either is left, and the id is free again.
func TestProcessNetProxyRoutedFailedStart(t *testing.T) {
	requireUserNamespaces(t)
	dir := t.TempDir()
	denied := dir + "/denied"
	prog := denied + "/prog"
	if err := os.MkdirAll(denied, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tc := startTestServer(t).connect(t)
	sandbox := netProxyTestSandbox("restricted")
	entries := sandbox["permissions"].(map[string]any)["file_system"].(map[string]any)["entries"].([]any)
	sandbox["permissions"].(map[string]any)["file_system"].(map[string]any)["entries"] = append(entries,
		map[string]any{"path": map[string]any{"type": "path", "path": fileURI(denied)}, "access": "none"})
	params := netProxyStartParams(t, "fs", "true", nil, 0)
	params["argv"] = []string{prog}
	params["sandbox"] = sandbox
	params["enforceManagedNetwork"] = true
	err := tc.callErr("process/start", params)
	if err == nil {
		t.Fatal("the start of a denied program succeeded")
	}
	t.Logf("%d %s", err.Code, err.Message)
	if !strings.Contains(err.Message, "Permission denied") {
		t.Fatalf("the start failed before the stage ran the program: %s", err.Message)
	}
	waitNoNetProxyGoroutines(t)
	waitNoNetBridgeGoroutines(t)
	r := tc.run(with(procStart(t, "fs", "echo", "free")))
	if r.stdout() != "free\n" {
		t.Errorf("the id was not freed: %q", r.stdout())
	}
}

// TestCapabilityNetworkProxyLaunch backs networkProxyLaunch: process/start launches the
// proxy and its child reaches it unsandboxed, under a sandbox with the network, and routed
// through the bridge under enforceManagedNetwork; the routing refuses what cannot hold.
func TestCapabilityNetworkProxyLaunch(t *testing.T) {
	t.Run("fetches", TestProcessNetProxyFetches)
	t.Run("routed", TestProcessNetProxyRouted)
	t.Run("unrouted", TestProcessNetProxyUnrouted)
	t.Run("loopbackPorts", TestProcessNetProxyLoopbackPorts)
	t.Run("refusals", TestProcessNetProxyRefusals)
	t.Run("failed start", TestProcessNetProxyRoutedFailedStart)
}

// TestCapabilityNetworkProxyReviewDomains backs networkProxyReviewDomains: a review domain
// is put to the client as network/policyRequest, whose answer decides, and a question left
// unanswered ends with the process.
func TestCapabilityNetworkProxyReviewDomains(t *testing.T) {
	t.Run("review", TestProcessNetProxyReviewOverWebsocket)
	t.Run("end", TestProcessNetProxyEndCancelsQuestion)
}

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	mu sync.Mutex
	n  int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.n++
		l.mu.Unlock()
	}
	return c, err
}

func (l *countingListener) accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// TestProcessNetProxyNoConnectBack: a sandboxed command whose proxy policy allows this host's
// 127.0.0.1 cannot reach its own exec-server through the proxy (a CONNECT tunnel carrying a
// websocket upgrade, a plain request), routed or on the host's network, and a routed one
// cannot list the server's port in loopbackPorts: read on the host, the server's listener
// accepted no connection. The proxy dials from the server, where the connect-back check
// would not see the sandbox behind it.
func TestProcessNetProxyNoConnectBack(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingListener{Listener: ln}
	ws := newWSServer(ts.srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		ws.serve(counted)
	}()
	defer func() {
		ws.close()
		<-served
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	tc := ts.connect(t)
	upgrade := `-H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=='`
	script := fmt.Sprintf(`curl -sS -m 5 -p -o /dev/null -w 'tunnel=%%{http_code}\n' %s http://127.0.0.1:%d/; `+
		`curl -sS -m 5 -o /dev/null -w 'plain=%%{http_code}\n' http://127.0.0.1:%d/; `, upgrade, port, port)
	for _, c := range []struct {
		name    string
		network string
		enforce bool
	}{{"routed", "restricted", true}, {"host network", "enabled", false}} {
		t.Run(c.name, func(t *testing.T) {
			params := netProxyStartParams(t, "cb-"+c.network, script, map[string]any{"domains": map[string]string{"127.0.0.1": "allow"}}, 0)
			params["sandbox"] = netProxyTestSandbox(c.network)
			params["enforceManagedNetwork"] = c.enforce
			r := tc.run(params)
			t.Logf("child output:\n%s%s", r.stdout(), r.stderr())
			if n := counted.accepted(); n != 0 {
				t.Errorf("the server's listener accepted %d connections from the sandboxed command's proxy", n)
			}
		})
	}
	t.Run("loopbackPorts", func(t *testing.T) {
		params := procStart(t, "cb-lp", "true")
		params["env"].(map[string]string)["HTTP_PROXY"] = fmt.Sprintf("http://127.0.0.1:%d", port)
		params["sandbox"] = netProxyTestSandbox("restricted")
		params["enforceManagedNetwork"] = true
		params["managedNetwork"] = map[string]any{"loopbackPorts": []int{port}}
		e := tc.callErr("process/start", params)
		if e == nil || e.Code != codeInvalidParams || !strings.Contains(e.Message, "own listener") {
			t.Errorf("error %+v, want -32602 naming the server's own listener", e)
		} else {
			t.Logf("%d %s", e.Code, e.Message)
		}
	})
}

// TestShellSnapshotCaptureIsRouted: the login shell a routed command's shell snapshot is
// captured from is routed as the command is: under enforceManagedNetwork with a profile that
// has the network, the profile's direct fetch never reaches the host, its fetch through the
// proxy does, and the command still sees the profile's export.
func TestShellSnapshotCaptureIsRouted(t *testing.T) {
	requireUserNamespaces(t)
	h := newRoutedHost(t)
	tc := startTestServer(t).connect(t)
	bash := shellPath(t, "bash")
	home := snapshotHome(t, "bash", fmt.Sprintf(`curl -sS -m 3 --noproxy '*' -o /dev/null http://127.0.0.1:%d/profile-direct 2>/dev/null
curl -sS -m 3 -o /dev/null http://127.0.0.1:%d/profile-proxied 2>/dev/null
`, h.v4, h.v4))
	params := snapshotStart(t, "sr", "bash", bash, home, "routed", `echo "var=$SNAP_VAR"`)
	var proxy map[string]any
	json.Unmarshal([]byte(netProxyBaseConfig), &proxy)
	proxy["domains"] = map[string]string{"127.0.0.1": "allow"}
	params["networkProxy"] = map[string]any{"proxy": proxy}
	params["sandbox"] = netProxyTestSandbox("enabled")
	params["enforceManagedNetwork"] = true
	r := tc.run(params)
	got := h.got()
	t.Logf("command: %q %q; host received %q", r.stdout(), r.stderr(), got)
	if r.stdout() != "var=from profile\n" {
		t.Errorf("the command did not see the snapshot's export")
	}
	if slices.Contains(got, "/profile-direct") {
		t.Errorf("the capture's login shell connected to the host directly")
	}
	if !slices.Contains(got, "/profile-proxied") {
		t.Errorf("the capture's login shell did not reach the host through the proxy")
	}
}

// transparentScript is a bash command that ignores every proxy: it unsets the proxy
// variables, then opens a TCP connection to each address with bash's /dev/tcp, sends
// "tt:<addr>" and prints "<addr>=<the first line back>" (empty when the connection was reset).
func transparentScript(addrs ...string) string {
	s := `for v in $(env | grep -io '^[a-z_]*proxy[a-z_]*='); do unset "${v%=}"; done; ` +
		`echo "proxyvars=$(env | cut -d= -f1 | grep -ic proxy)"; `
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		s += fmt.Sprintf(`if exec 3<>/dev/tcp/%s/%s; then echo "tt:%s" >&3; r=; read -r -t 5 r <&3; echo "%s=$r"; exec 3<&-; else echo "%s=refused"; fi; `,
			host, port, a, a, a)
	}
	return s
}

// openFDsAndLinks counts this process's open descriptors, and among them the BPF links.
func openFDsAndLinks(t *testing.T) (n, bpfLinks int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(target, "bpf-link") {
			bpfLinks++
		}
	}
	return len(ents), bpfLinks
}

// waitOpenFDs waits briefly (the test hosts close their ends as their goroutines return)
// until this process holds no more descriptors than before, and no BPF link.
func waitOpenFDs(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, links := openFDsAndLinks(t)
		if n <= before && links == 0 {
			t.Logf("open descriptors: %d before the start, %d after process/closed, BPF links %d", before, n, links)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("open descriptors: %d before the start, %d after process/closed, BPF links %d", before, n, links)
		}
		runtime.Gosched()
	}
}

// TestProcessNetProxyTransparent: process/start makes a sandboxed command transparent (docs/
// network.md §7), asked by the request (proxy.transparentTcp, no enforceManagedNetwork) and by
// the server's --linux-sandbox-transparent-tcp with enforceManagedNetwork (under a sandbox
// with the network, SOCKS5 off, as the reference allows). A bash command that ignores every
// proxy variable connects with /dev/tcp to two test hosts on documentation addresses in the
// test's network namespace: the one the policy allows (192.0.2.10) receives its line, the
// denied one (198.51.100.10) receives nothing, both read on the hosts; the session is told
// each decision as socks5_tcp; once the process closed, no goroutine of the proxy or the
// bridge, no BPF link and no extra descriptor is left in the server (this test process).
func TestProcessNetProxyTransparent(t *testing.T) {
	if !inNetProxyNamespace(t) {
		return
	}
	requireUserNamespaces(t)
	for _, c := range []struct {
		name string
		flag bool
		set  func(params, proxy map[string]any)
	}{
		{"request field", false, func(params, proxy map[string]any) {
			proxy["transparentTcp"] = true
			params["managedNetwork"] = map[string]any{"transparentTcp": true}
			params["sandbox"] = netProxyTestSandbox("restricted")
		}},
		{"server flag", true, func(params, proxy map[string]any) {
			proxy["enableSocks5"] = false
			params["enforceManagedNetwork"] = true
			params["sandbox"] = netProxyTestSandbox("enabled")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tc := startTestServer(t, func(s *server) { s.cfg.netproxy.transparentTCP = c.flag }).connect(t)
			before, _ := openFDsAndLinks(t) // the test hosts' listeners are closed before the count after
			allowed, denied := newTTHost(t, nsHost4a), newTTHost(t, nsHost4b)
			params := netProxyStartParams(t, "tt", "", map[string]any{
				"domains": map[string]string{nsHost4a.String(): "allow"}, "enableSocks5": true,
			}, 0)
			params["argv"] = []string{"bash", "-c", transparentScript(allowed.addr(), denied.addr())}
			c.set(params, params["networkProxy"].(map[string]any)["proxy"].(map[string]any))
			r := tc.run(params)
			out := r.stdout()
			gotA, gotD := allowed.stop(), denied.stop()
			t.Logf("child output:\n%s%s\nhosts received: allowed %q, denied %q", out, r.stderr(), gotA, gotD)
			if !strings.Contains(out, "proxyvars=0\n") {
				t.Errorf("the command still had proxy variables")
			}
			if len(gotA) != 1 || gotA[0] != "tt:"+allowed.addr() || !strings.Contains(out, allowed.addr()+"=ok\n") {
				t.Errorf("the allowed host received %q, want the command's line, answered", gotA)
			}
			if len(gotD) != 0 || strings.Contains(out, denied.addr()+"=ok\n") {
				t.Errorf("the denied host received %q", gotD)
			}
			for _, d := range []struct{ host, decision string }{{nsHost4a.String(), "allow"}, {nsHost4b.String(), "deny"}} {
				n, _ := tc.waitNote(0, procWait, func(n testNote) bool {
					return n.Method == "network/policyDecision" && bytes.Contains(n.Params, []byte(`"host":"`+d.host+`"`))
				})
				t.Logf("network/policyDecision %s", n.Params)
				if !bytes.Contains(n.Params, []byte(`"protocol":"socks5_tcp"`)) || !bytes.Contains(n.Params, []byte(`"decision":"`+d.decision+`"`)) ||
					!bytes.Contains(n.Params, []byte(`"processId":"tt"`)) {
					t.Errorf("decision for %s: %s, want socks5_tcp %s", d.host, n.Params, d.decision)
				}
			}
			waitNoNetProxyGoroutines(t)
			waitNoNetBridgeGoroutines(t)
			waitOpenFDs(t, before)
		})
	}
}

// TestProcessNetProxyTransparentRefusals: a start asking for transparent TCP that cannot have
// it is refused before anything starts (-32602; the program, which would write a file, never
// runs; no proxy goroutine is left): the reference's three refusals with its words and in its
// order (measured), and ours where the reference starts a process that then dies: a sandbox
// that confines nothing (danger-full-access, --managed-sandbox run-unsandboxed), the server's flag with no proxy to judge, and a stage that cannot
// hold the bridge (--linux-sandbox-pid-namespace inherit, the Landlock fallback).
func TestProcessNetProxyTransparentRefusals(t *testing.T) {
	requireUserNamespaces(t)
	marker := t.TempDir() + "/ran"
	proxy := func(over map[string]any) map[string]any {
		var p map[string]any
		json.Unmarshal([]byte(netProxyBaseConfig), &p)
		for k, v := range over {
			p[k] = v
		}
		return map[string]any{"proxy": p}
	}
	tt := map[string]any{"transparentTcp": true}
	ttNoSocks := map[string]any{"transparentTcp": true, "enableSocks5": false}
	disabled := map[string]any{"permissions": map[string]any{"type": "disabled"}, "windowsSandboxLevel": "disabled"}
	const (
		noSandbox = "transparent TCP requires a managed Linux sandbox"
		noProxy   = "transparent TCP requires an executor-local managed proxy"
		noSocks   = "invalid network proxy config: transparent_tcp requires an enabled managed SOCKS5 proxy"
		notEnbl   = "invalid network proxy config: executor-local network proxy launch requires an enabled proxy"
	)
	cases := []struct {
		name   string
		flag   bool
		pidns  string
		mech   string
		fields []any
		want   string
		exact  bool
	}{
		{"transparentTcp without a sandbox", false, "", "", []any{"networkProxy", proxy(tt)}, noSandbox, true},
		{"transparentTcp without a sandbox nor SOCKS5", false, "", "", []any{"networkProxy", proxy(ttNoSocks)}, noSandbox, true},
		{"transparentTcp without a sandbox, proxy disabled", false, "", "", []any{"networkProxy", proxy(map[string]any{"transparentTcp": true, "enabled": false})}, noSandbox, true},
		{"transparentTcp without SOCKS5", false, "", "", []any{"networkProxy", proxy(ttNoSocks), "sandbox", netProxyTestSandbox("restricted")}, noSocks, true},
		{"transparentTcp without SOCKS5, empty argv", false, "", "", []any{"argv", []string{}, "networkProxy", proxy(ttNoSocks), "sandbox", netProxyTestSandbox("restricted")}, noSocks, true},
		{"transparentTcp, proxy disabled, a sandbox", false, "", "", []any{"networkProxy", proxy(map[string]any{"transparentTcp": true, "enabled": false, "enableSocks5": false}), "sandbox", netProxyTestSandbox("restricted")}, notEnbl, true},
		{"managedNetwork.transparentTcp without a proxy", false, "", "", []any{"managedNetwork", tt, "sandbox", netProxyTestSandbox("restricted")}, noProxy, true},
		{"managedNetwork.transparentTcp, the proxy's false", false, "", "", []any{"managedNetwork", tt, "networkProxy", proxy(nil), "sandbox", netProxyTestSandbox("restricted")}, noProxy, true},
		{"managedNetwork.transparentTcp, proxy disabled", false, "", "", []any{"managedNetwork", tt, "networkProxy", proxy(map[string]any{"enabled": false})}, noProxy, true},
		{"transparentTcp, danger-full-access", false, "", "", []any{"networkProxy", proxy(tt), "sandbox", disabled}, noSandbox + ": ", false},
		{"transparentTcp, --managed-sandbox run-unsandboxed", false, "unsandboxed", "", []any{"networkProxy", proxy(tt), "sandbox", netProxyTestSandbox("restricted")}, noSandbox + ": ", false},
		{"flag, enforce, no proxy", true, "", "", []any{"enforceManagedNetwork", true, "sandbox", netProxyTestSandbox("restricted"),
			"env", map[string]string{"PATH": os.Getenv("PATH"), "HTTP_PROXY": "http://127.0.0.1:3128"}, "managedNetwork", map[string]any{"loopbackPorts": []int{3128}}}, noProxy + ": ", false},
		{"transparentTcp, pid namespace inherit", false, "inherit", "namespaces", []any{"networkProxy", proxy(tt), "sandbox", netProxyTestSandbox("restricted")}, noSandbox + ": sandbox: the managed network bridge needs the namespace sandbox with a pid namespace of its own", false},
		{"transparentTcp, landlock", false, "isolate", "landlock", []any{"networkProxy", proxy(tt), "sandbox", netProxyTestSandbox("restricted")}, noSandbox + ": sandbox: the managed network bridge needs the namespace sandbox with a pid namespace of its own", false},
		{"flag, enforce, landlock", true, "isolate", "landlock", []any{"networkProxy", proxy(nil), "enforceManagedNetwork", true, "sandbox", netProxyTestSandbox("restricted")}, noSandbox + ": sandbox: the managed network bridge needs", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc := startTestServer(t, func(s *server) {
				s.cfg.netproxy.transparentTCP = c.flag
				s.cfg.runManagedUnsandboxed = c.pidns == "unsandboxed"
				if c.pidns != "" && c.pidns != "unsandboxed" {
					sbx, err := newSandboxer(c.pidns, c.mech)
					if err != nil {
						t.Fatal(err)
					}
					s.sandbox = sbx
				}
			}).connect(t)
			params := with(procStart(t, "r", "sh", "-c", "echo ran > "+marker), c.fields...)
			e := tc.callErr("process/start", params)
			switch {
			case e == nil:
				t.Errorf("started, want -32602 %q", c.want)
			case e.Code != codeInvalidParams || c.exact && e.Message != c.want || !c.exact && !strings.HasPrefix(e.Message, c.want):
				t.Errorf("error %d %q, want -32602 %q", e.Code, e.Message, c.want)
			default:
				t.Logf("%d %s", e.Code, e.Message)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("the program ran")
			}
			waitNoNetProxyGoroutines(t)
		})
	}
}

// TestCapabilityNetworkProxyTransparentTcp backs networkProxyTransparentTcp: process/start
// makes a sandboxed command's every TCP connection go through its proxy's policy, asked by
// the request or by the server's flag, and refuses what cannot be made transparent (a
// request the reference refuses, a stage without the bridge, a server without CAP_BPF).
func TestCapabilityNetworkProxyTransparentTcp(t *testing.T) {
	t.Run("transparent", TestProcessNetProxyTransparent)
	t.Run("refusals", TestProcessNetProxyTransparentRefusals)
	t.Run("no CAP_BPF", TestProcessNetProxyTransparentNoCapBPF)
}

// noCapBPFEnv marks the run of TestProcessNetProxyTransparentNoCapBPF that setpriv(1) started
// without CAP_BPF and CAP_SYS_ADMIN.
const noCapBPFEnv = "EXEC_SERVER_NOCAPBPF"

// TestProcessNetProxyTransparentNoCapBPF: a server that cannot load BPF (run again by
// setpriv(1) with CAP_BPF and CAP_SYS_ADMIN out of its bounding set: the host property is
// real, not simulated) refuses a transparent start with the kernel's reason, and the program,
// which would write a file, never runs: never an untransparent command where transparency
// was asked. Nothing of the proxy or the bridge is left.
func TestProcessNetProxyTransparentNoCapBPF(t *testing.T) {
	requireUserNamespaces(t)
	if os.Getenv(noCapBPFEnv) != "1" {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("no setpriv(1) to run the server without CAP_BPF")
		}
		cmd := exec.Command(setpriv, "--bounding-set", "-bpf,-sys_admin", os.Args[0],
			"-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), noCapBPFEnv+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("without CAP_BPF and CAP_SYS_ADMIN:\n%s", strings.TrimSpace(string(out)))
		if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
			t.Fatalf("the test without CAP_BPF failed: %v", err)
		}
		return
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", regexp.MustCompile(`(?m)^CapEff:.*$`).Find(status))
	marker := t.TempDir() + "/ran"
	tc := startTestServer(t).connect(t)
	params := netProxyStartParams(t, "nb", "echo ran > "+marker, map[string]any{"transparentTcp": true, "enableSocks5": true}, 0)
	params["sandbox"] = netProxyTestSandbox("restricted")
	e := tc.callErr("process/start", params) // fails the test when the start succeeds
	t.Logf("%d %s", e.Code, e.Message)
	if !strings.Contains(e.Message, "transparent TCP: ") || !strings.Contains(e.Message, "operation not permitted") {
		t.Errorf("error %q, want the kernel's reason for transparent TCP", e.Message)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the program ran")
	}
	waitNoNetProxyGoroutines(t)
	waitNoNetBridgeGoroutines(t)
}

// ownLoopbackListeners returns the TCP ports this process (the server) listens on at
// 127.0.0.1, read from /proc/net/tcp (state 0A) and kept when the socket's inode is one of
// this process's descriptors.
func ownLoopbackListeners(t *testing.T) map[int]bool {
	t.Helper()
	inodes := map[string]bool{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	ports := map[int]bool{}
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] {
			continue
		}
		ip, port, ok := strings.Cut(f[1], ":")
		if !ok || ip != "0100007F" {
			continue
		}
		var n int
		fmt.Sscanf(port, "%X", &n)
		ports[n] = true
	}
	return ports
}

// TestProcessNetProxyRoutedNoHostPort: a routed process's proxy listens on no port of the
// host (read in /proc/net/tcp of the server: no new listener on 127.0.0.1 once the process
// started), so another local process cannot take its 256 connection slots with half request
// heads, nor use it as a hop: the test, as such a client, holds 256 half heads on every new
// listener it finds (and logs what one more gets), then lets the command fetch through
// $HTTP_PROXY, which must still reach the host (on the base, where the proxy listened there,
// the fetch got an empty reply).
func TestProcessNetProxyRoutedNoHostPort(t *testing.T) {
	requireUserNamespaces(t)
	h := newRoutedHost(t)
	tc := startTestServer(t).connect(t)
	before := ownLoopbackListeners(t)
	params := netProxyStartParams(t, "nh", "read -r go; "+curlLine(fmt.Sprintf("http://127.0.0.1:%d/ok", h.v4)), map[string]any{
		"domains": map[string]string{"127.0.0.1": "allow"}, "enableSocks5": true,
	}, 0)
	params["sandbox"] = netProxyTestSandbox("restricted")
	params["enforceManagedNetwork"] = true
	params["pipeStdin"] = true
	tc.mustCall("process/start", params)
	var added []int
	for p := range ownLoopbackListeners(t) {
		if !before[p] {
			added = append(added, p)
		}
	}
	if len(added) > 0 {
		t.Errorf("the routed process's proxy listens on 127.0.0.1:%v of the host", added)
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for _, port := range added {
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		for range netProxyMaxConns {
			c, err := net.Dial("tcp4", addr)
			if err != nil {
				t.Fatalf("foreign client: %v", err)
			}
			c.Write([]byte("GET http://127.0.0.1/ HTTP/1.1\r\nHo"))
			held = append(held, c)
		}
		// One more: closed at once when every slot is taken.
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatalf("foreign client: %v", err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, rerr := c.Read(make([]byte, 1))
		c.Close()
		t.Logf("foreign client holds %d half heads on %s; one more: %v", netProxyMaxConns, addr, rerr)
	}
	tc.mustCall("process/write", map[string]any{"processId": "nh", "chunk": b64("go\n"), "writeId": "w"})
	r := waitClosed(tc, "nh")
	out := r.stdout()
	got := h.got()
	t.Logf("child output:\n%s%s\nhost received %q", out, r.stderr(), got)
	if !strings.Contains(out, "hello /ok\n=200\n") || !slices.Contains(got, "/ok") {
		t.Errorf("the routed command's fetch through $HTTP_PROXY did not reach the host")
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	waitNoNetProxyGoroutines(t)
	waitNoNetBridgeGoroutines(t)
}

// TestProcessNetProxyRoutedBridgeFault: when the server cannot serve the bridge listeners
// the stage handed over (a test hook fails serveBridges, as net.FileListener would out of
// descriptors), process/start fails at once with the reason, the command (which would
// write a file, then sleep) never runs (the file is absent, read on the host), and nothing
// is left: no goroutine of the proxy or the bridge, no extra descriptor, the id free again.
func TestProcessNetProxyRoutedBridgeFault(t *testing.T) {
	requireUserNamespaces(t)
	sbx, err := newSandboxer("isolate", "namespaces")
	if err != nil {
		t.Fatal(err)
	}
	defer sbx.close()
	const reason = "netbridge: test fault: too many open files"
	sbx.bridgeFault = func() error { return errors.New(reason) }
	tc := startTestServer(t, func(s *server) { s.sandbox = sbx }).connect(t)
	dir := t.TempDir()
	marker := dir + "/ran"
	fds, _ := openFDsAndLinks(t)
	params := netProxyStartParams(t, "bf", "echo ran > "+marker+"; sleep 30", nil, 0)
	params["sandbox"] = workspaceTestSandbox("restricted", dir)
	params["enforceManagedNetwork"] = true
	start := time.Now()
	select {
	case r := <-tc.start("process/start", params):
		t.Logf("after %v: %+v", time.Since(start).Round(time.Millisecond), r.Err)
		if r.Err == nil || !strings.Contains(r.Err.Message, reason) {
			t.Errorf("process/start answered %s %+v, want the bridge's failure", r.Result, r.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("process/start still blocked after 10 s: it waits for the command's lifetime")
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the command ran with a bridge nobody serves")
	}
	waitNoNetProxyGoroutines(t)
	waitNoNetBridgeGoroutines(t)
	waitOpenFDs(t, fds)
	r := tc.run(with(procStart(t, "bf", "echo", "free")))
	if r.stdout() != "free\n" {
		t.Errorf("the id was not freed: %q", r.stdout())
	}
}

// TestNetProxyForeignHalfHeadBounded: on an unrouted process's proxy, whose listeners stay
// on the host's 127.0.0.1 (docs/network.md §5), a foreign local client's half request head
// (HTTP) or half greeting (SOCKS5) holds its connection slot no longer than
// netProxyHeadTimeout from its connection, even when it trickles a byte before then: the
// proxy closes it (read on the client's socket) between 30 s and 30 s plus 5 s.
func TestNetProxyForeignHalfHeadBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 30 s head timeout")
	}
	p, err := startNetProxy(netProxyConfig{processID: "hh", params: netProxyParamsFor(t, `{"enableSocks5":true}`, nil)}, netProxyHooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	type held struct {
		name       string
		addr       string
		head, more string
	}
	cases := []held{
		{"http", p.httpAddr(), "GET http://127.0.0.1/ HTTP/1.1\r\nHo", "s"},
		{"socks5", p.socksAddr(), "\x05\x02", "\x00"},
	}
	took := make([]time.Duration, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		conn, err := net.Dial("tcp4", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		conn.Write([]byte(c.head))
		// The renewal: one more byte of the head, well before the timeout.
		trickle := time.AfterFunc(netProxyHeadTimeout*2/3, func() { conn.Write([]byte(c.more)) })
		defer trickle.Stop()
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn.SetReadDeadline(start.Add(2 * netProxyHeadTimeout))
			io.Copy(io.Discard, conn)
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i, c := range cases {
		t.Logf("%s: the half head was closed after %v", c.name, took[i].Round(time.Millisecond))
		if took[i] < netProxyHeadTimeout-time.Second || took[i] > netProxyHeadTimeout+5*time.Second {
			t.Errorf("%s: the half head held its slot %v, want about %v", c.name, took[i], netProxyHeadTimeout)
		}
	}
}
