package main

// Tests of the managed network proxy (docs/network.md): its params as the reference decodes
// them, its policy table, and the proxy itself with real sockets in a network namespace the
// test makes, with test hosts on documentation addresses only.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestNetProxyParamsVectors decodes testdata/netproxy/params.txt's values as process/start
// would, and compares each answer with the reference's.
func TestNetProxyParamsVectors(t *testing.T) {
	type startNetFields struct {
		NetworkProxy   *networkProxyParams   `json:"networkProxy,omitempty"`
		ManagedNetwork *managedNetworkParams `json:"managedNetwork,omitempty"`
	}
	for _, c := range readVectors(t, "testdata/netproxy/params.txt") {
		c.only(t, "name", "networkProxy", "managedNetwork", "result", "error")
		key, val := "networkProxy", c.fields["networkProxy"]
		if v, ok := c.fields["managedNetwork"]; ok {
			key, val = "managedNetwork", v
		}
		raw, _ := json.Marshal(map[string]json.RawMessage{key: json.RawMessage(val)})
		var p startNetFields
		err := decodeParams(raw, "ExecParams", &p)
		var rerr *rpcError
		res := json.RawMessage("ok")
		if err != nil {
			rerr = toRPCErrorForTest(err)
			res = nil
		}
		c.checkCall(t, c.name(), res, rerr)
	}
}

func toRPCErrorForTest(err error) *rpcError {
	if re, ok := err.(*rpcError); ok {
		return re
	}
	return &rpcError{Code: -1, Message: err.Error()}
}

// netProxyBaseConfig is the proxy config the tests start from.
const netProxyBaseConfig = `{"enabled":true,"enableSocks5":true,"enableSocks5Udp":true,"allowUpstreamProxy":false,"dangerouslyAllowAllUnixSockets":false,"mode":"full","allowLocalBinding":false}`

// netProxyParamsFor decodes the base config with over's fields on top, as process/start would.
func netProxyParamsFor(t testing.TB, over string, timeoutMs *uint64) *networkProxyParams {
	t.Helper()
	var base, extra map[string]json.RawMessage
	if err := json.Unmarshal([]byte(netProxyBaseConfig), &base); err != nil {
		t.Fatal(err)
	}
	if over != "" {
		if err := json.Unmarshal([]byte(over), &extra); err != nil {
			t.Fatalf("proxy %s: %v", over, err)
		}
	}
	for k, v := range extra {
		base[k] = v
	}
	np := map[string]any{"proxy": base}
	if timeoutMs != nil {
		np["policyDecisionTimeoutMs"] = *timeoutMs
	}
	raw, _ := json.Marshal(np)
	var p networkProxyParams
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return &p
}

// staticResolver answers from a table, in place of the proxy's resolver. The proxy's own
// tests run a DNS server instead (startTestDNS); this remains for tests that need a lookup
// to do what no DNS server could in time (a name changing between two steps of one request).
func staticResolver(table map[string][]netip.Addr) resolveFunc {
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		if a, ok := table[host]; ok {
			return a, nil
		}
		return nil, fmt.Errorf("resolve %s: no such host", host)
	}
}

// TestNetProxyPolicyTable judges each request of testdata/netproxy/policy.txt with the
// proxy's decide and compares the verdict, the notifications and whether the client was
// asked with the reference's.
func TestNetProxyPolicyTable(t *testing.T) {
	for _, c := range readVectors(t, "testdata/netproxy/policy.txt") {
		c.only(t, "name", "proxy", "timeout", "answer", "request", "dns", "want", "decisions", "asked")
		t.Run(c.name(), func(t *testing.T) {
			var timeout *uint64
			if ms, ok := c.fields["timeout"]; ok {
				n, err := strconv.ParseUint(ms, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				timeout = &n
			}
			zone := testDNSZone{}
			for _, e := range strings.Fields(c.fields["dns"]) {
				name, addrs, _ := strings.Cut(e, "=")
				var set []netip.Addr
				for _, a := range strings.Split(addrs, ",") {
					set = append(set, netip.MustParseAddr(a))
				}
				zone[name] = [][]netip.Addr{set}
			}
			dns := startTestDNS(t, netip.MustParseAddr("127.0.0.1"), zone)
			var mu sync.Mutex
			var got []string
			asked := false
			hooks := netProxyHooks{
				decided: func(d policyDecision) {
					mu.Lock()
					defer mu.Unlock()
					s := d.Scope + " " + d.Decision + " " + d.Source + " " + d.Reason
					if d.PolicyOverride {
						s += " override"
					}
					got = append(got, s)
				},
				ask: func(ctx context.Context, req policyRequestParams) (json.RawMessage, error) {
					asked = true
					if c.fields["answer"] == "none" {
						<-ctx.Done()
						return nil, ctx.Err()
					}
					return json.RawMessage(c.fields["answer"]), nil
				},
			}
			p, err := startNetProxy(netProxyConfig{processID: "p1", params: netProxyParamsFor(t, c.fields["proxy"], timeout), nameserver: dns.addr}, hooks)
			if err != nil {
				t.Fatal(err)
			}
			defer p.close()
			if p.timeout > 0 {
				p.timeout = 50 * time.Millisecond // the client's silence, shortened
			}
			f := strings.Fields(c.field(t, "request"))
			port, _ := strconv.ParseUint(f[2], 10, 16)
			r := netRequest{protocol: f[0], host: normalizeHost(f[1]), port: uint16(port), client: "127.0.0.1:1"}
			if len(f) > 3 {
				r.method = f[3]
			}
			v := p.decide(context.Background(), r)
			verdict := "allow"
			if !v.allowed {
				verdict = v.decision + " " + v.reason + " " + v.source
			}
			if want := c.field(t, "want"); verdict != want {
				t.Errorf("verdict %q, want %q", verdict, want)
			}
			if g, want := strings.Join(got, "; "), c.fields["decisions"]; g != want {
				t.Errorf("decisions %q, want %q", g, want)
			}
			if want := c.fields["asked"] == "yes"; asked != want {
				t.Errorf("asked the client: %v, want %v", asked, want)
			}
		})
	}
}

// loopbackEcho is a test host on 127.0.0.1 that echoes what it reads; close waits for its
// connections, which it closes itself.
type loopbackEcho struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func startLoopbackEcho(t testing.TB) *loopbackEcho {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &loopbackEcho{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns = append(e.conns, c)
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				// Not io.Copy: its splice keeps a pipe pair cached, which the
				// descriptor count would see.
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						c.Write(buf[:n])
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return e
}

func (e *loopbackEcho) port() int { return e.ln.Addr().(*net.TCPAddr).Port }

func (e *loopbackEcho) close() {
	e.ln.Close()
	e.mu.Lock()
	for _, c := range e.conns {
		c.Close()
	}
	e.mu.Unlock()
	e.wg.Wait()
}

// openSockets lists this process's open socket descriptors: what a proxy holds. (Pipes are
// left out: the runtime keeps the pipe pairs of splice(2) cached for reuse.)
func openSockets(t testing.TB) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot list file descriptors: %v", err)
	}
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			out = append(out, e.Name()+"→"+l)
		}
	}
	return out
}

// proxyGoroutines lists the stacks of goroutines running the proxy's code.
func proxyGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "main.(*netProxy)") {
			out = append(out, g)
		}
	}
	return out
}

// TestNetProxyCloseLeavesNothing closes a proxy in the middle of everything it does (a head
// half read, an open tunnel, a SOCKS handshake half done, a UDP association, a question to
// the client) and checks that close ends every connection, goroutine and socket.
func TestNetProxyCloseLeavesNothing(t *testing.T) {
	echo := startLoopbackEcho(t)
	defer echo.close()
	dns := startTestDNS(t, netip.MustParseAddr("127.0.0.1"), nil)
	fdsBefore := openSockets(t)
	asked := make(chan struct{})
	ms := uint64(60000)
	p, err := startNetProxy(netProxyConfig{processID: "p1", params: netProxyParamsFor(t, `{"domains":{"127.0.0.1":"allow"}}`, &ms), nameserver: dns.addr}, netProxyHooks{
		ask: func(ctx context.Context, req policyRequestParams) (json.RawMessage, error) {
			close(asked)
			<-ctx.Done()
			return nil, ctx.Err()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var clients []net.Conn
	dial := func(addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		return c
	}
	// A head half read.
	io.WriteString(dial(p.httpAddr()), "GET http://127.0.0.1/ HTTP/1.1\r\nHost: x\r\n")
	// An open tunnel, checked to carry bytes.
	tun := dial(p.httpAddr())
	fmt.Fprintf(tun, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", echo.port())
	tr := bufio.NewReader(tun)
	if err := skipHead(tr, "200"); err != nil {
		t.Fatalf("CONNECT: %v", err)
	}
	io.WriteString(tun, "x")
	if b, _ := tr.ReadByte(); b != 'x' {
		t.Fatal("the tunnel does not carry bytes")
	}
	// A SOCKS handshake half done, and a UDP association.
	dial(p.socksAddr()).Write([]byte{5})
	udp := dial(p.socksAddr())
	udp.Write([]byte{5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0})
	if rep := make([]byte, 12); !readFull(udp, rep) || rep[3] != 0 {
		t.Fatalf("UDP ASSOCIATE: % x", rep)
	}
	// A question to the client.
	io.WriteString(dial(p.httpAddr()), "GET http://unk.example/ HTTP/1.1\r\n\r\n")
	<-asked

	done := make(chan struct{})
	go func() { p.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("close did not return; the proxy's goroutines:\n%s", strings.Join(proxyGoroutines(), "\n\n"))
	}
	if g := proxyGoroutines(); len(g) != 0 {
		t.Fatalf("%d of the proxy's goroutines outlive close:\n%s", len(g), strings.Join(g, "\n\n"))
	}
	for i, c := range clients {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("client connection %d still open after close", i)
			}
		}
		c.Close()
	}
	echo.close() // its connections, and its listener, which the baseline counted
	if fds := openSockets(t); len(fds) != len(fdsBefore)-1 {
		t.Errorf("%d sockets open after close, %d before (with the test host's listener): %v", len(fds), len(fdsBefore), fds)
	}
	p.close() // a second close is harmless
}

// TestNetProxyIdleMemory reports (and bounds) what an idle process's proxy costs: heap and
// goroutine stacks of 64 proxies with HTTP and SOCKS5 listeners, divided by 64.
func TestNetProxyIdleMemory(t *testing.T) {
	const n = 64
	params := netProxyParamsFor(t, `{"domains":{"x.example":"allow"}}`, nil)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ps := make([]*netProxy, n)
	for i := range ps {
		p, err := startNetProxy(netProxyConfig{processID: "p", params: params}, netProxyHooks{})
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	for _, p := range ps {
		p.close()
	}
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	stack := int64(after.StackInuse) - int64(before.StackInuse)
	per := (heap + stack) / n
	t.Logf("idle proxy: %d bytes each (heap %d, stacks %d)", per, heap/n, stack/n)
	if per > 64<<10 {
		t.Errorf("an idle proxy costs %d bytes, more than 64 KiB", per)
	}
}

// TestNetProxyPendingDecisionsBounded puts more questions to a silent client than the bound:
// netProxyMaxPendingDecisions wait, the rest are refused at once, and all end with the proxy.
func TestNetProxyPendingDecisionsBounded(t *testing.T) {
	ms := uint64(60000)
	var waiting sync.WaitGroup
	waiting.Add(netProxyMaxPendingDecisions)
	dns := startTestDNS(t, netip.MustParseAddr("127.0.0.1"), nil)
	p, err := startNetProxy(netProxyConfig{processID: "p1", params: netProxyParamsFor(t, `{"domains":{"x.example":"allow"}}`, &ms), nameserver: dns.addr}, netProxyHooks{
		ask: func(ctx context.Context, req policyRequestParams) (json.RawMessage, error) {
			waiting.Done()
			<-ctx.Done()
			return nil, ctx.Err()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := netRequest{protocol: protoHTTP, host: "unk.example", port: 80, method: "GET"}
	verdicts := make(chan netVerdict, netProxyMaxPendingDecisions)
	for range netProxyMaxPendingDecisions {
		go func() { verdicts <- p.decide(p.ctx, r) }()
	}
	waiting.Wait() // every slot is taken by a question the client leaves unanswered
	for i := range 10 {
		if v := p.decide(p.ctx, r); v.allowed || v.reason != reasonNotAllowed || v.source != sourceDecider {
			t.Fatalf("question %d beyond the bound: %+v, want refused at once", i, v)
		}
	}
	p.close()
	for range netProxyMaxPendingDecisions {
		if v := <-verdicts; v.allowed || v.reason != reasonNotAllowed {
			t.Fatalf("a pending question ended as %+v at close, want refused", v)
		}
	}
}

func readFull(r io.Reader, b []byte) bool {
	_, err := io.ReadFull(r, b)
	return err == nil
}

// TestNetProxyEnv compares the child's variables with the reference's, read from the env of
// a child the reference 0.171 started (H: the HTTP proxy's port, S: the SOCKS5 one's).
func TestNetProxyEnv(t *testing.T) {
	const httpVars = "BUNDLE_HTTPS_PROXY BUNDLE_HTTP_PROXY DOCKER_HTTPS_PROXY DOCKER_HTTP_PROXY HTTPS_PROXY HTTP_PROXY " +
		"NPM_CONFIG_HTTPS_PROXY NPM_CONFIG_HTTP_PROXY NPM_CONFIG_PROXY PIP_PROXY WSS_PROXY WS_PROXY YARN_HTTPS_PROXY " +
		"YARN_HTTP_PROXY http_proxy https_proxy npm_config_http_proxy npm_config_https_proxy npm_config_proxy ws_proxy wss_proxy"
	const noProxyVars = "BUNDLE_NO_PROXY NO_PROXY NPM_CONFIG_NOPROXY no_proxy npm_config_noproxy"
	const allVars = "ALL_PROXY FTP_PROXY all_proxy ftp_proxy"
	for _, tc := range []struct {
		over         string
		all, noProxy string
		localBinding string
	}{
		{`{"enableSocks5":true}`, "socks5h://127.0.0.1:S", "", "0"},
		{`{"enableSocks5":false}`, "http://127.0.0.1:H", "", "0"},
		{`{"enableSocks5":true,"allowLocalBinding":true}`, "socks5h://127.0.0.1:S",
			"localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16", "1"},
	} {
		p, err := startNetProxy(netProxyConfig{params: netProxyParamsFor(t, tc.over, nil)}, netProxyHooks{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"CODEX_NETWORK_ALLOW_LOCAL_BINDING": tc.localBinding, "CODEX_NETWORK_PROXY_ACTIVE": "1",
			"ELECTRON_GET_USE_PROXY": "true", "NODE_USE_ENV_PROXY": "1",
		}
		for _, k := range strings.Fields(httpVars) {
			want[k] = "http://127.0.0.1:H"
		}
		for _, k := range strings.Fields(noProxyVars) {
			want[k] = tc.noProxy
		}
		for _, k := range strings.Fields(allVars) {
			want[k] = tc.all
		}
		got := map[string]string{}
		for k, v := range p.env() {
			v = strings.Replace(v, p.httpAddr(), "127.0.0.1:H", 1)
			if s := p.socksAddr(); s != "" {
				v = strings.Replace(v, s, "127.0.0.1:S", 1)
			}
			got[k] = v
		}
		p.close()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: env\n got %v\nwant %v", tc.over, got, want)
		}
	}
	if p, err := startNetProxy(netProxyConfig{params: netProxyParamsFor(t, `{"enabled":false}`, nil)}, netProxyHooks{}); p != nil || err != nil {
		t.Errorf("enabled false: %v %v, want no proxy", p, err)
	}
}

// decisionLog collects a proxy's notifications.
type decisionLog struct {
	mu sync.Mutex
	ds []policyDecision
}

func (l *decisionLog) add(d policyDecision) { l.mu.Lock(); l.ds = append(l.ds, d); l.mu.Unlock() }
func (l *decisionLog) all() []policyDecision {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]policyDecision(nil), l.ds...)
}
