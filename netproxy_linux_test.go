package main

// The managed network proxy with real sockets in a network namespace the test makes
// (docs/network.md §5): the test re-executes itself in a new network namespace, puts
// documentation addresses (192.0.2.10, 198.51.100.10, 2001:db8::10) on its lo (the only
// interface there; a dummy one needs a module this kernel may lack), runs its test hosts on them and answers DNS from a server it runs on the namespace's
// 127.0.0.1 (startTestDNS), which the proxy's own resolver asks. No other address is ever
// contacted. Every verdict is read on the test host's side (did the
// request reach it?), not only from what the proxy answered.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	xproxy "golang.org/x/net/proxy"
)

// netProxyNSEnv marks the re-executed test inside the namespace.
const netProxyNSEnv = "EXEC_SERVER_NETPROXY_NAMESPACE"

// Test hosts: documentation addresses only.
var (
	nsHost4a = netip.MustParseAddr("192.0.2.10")
	nsHost4b = netip.MustParseAddr("198.51.100.10")
	nsHost6  = netip.MustParseAddr("2001:db8::10")
)

// inNetProxyNamespace returns true inside the test's network namespace (set up). Outside, it
// runs the calling test again in a new one, reports its outcome and returns false.
func inNetProxyNamespace(t *testing.T) bool {
	t.Helper()
	if os.Getenv(netProxyNSEnv) == "1" {
		for _, args := range [][]string{
			{"addr", "add", nsHost4a.String() + "/32", "dev", "lo"},
			{"addr", "add", nsHost4b.String() + "/32", "dev", "lo"},
			{"-6", "addr", "add", nsHost6.String() + "/128", "dev", "lo", "nodad"},
			{"link", "set", "lo", "up"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		// An address on a freshly raised lo can lose a first SYN (an IPv6 connect then fails
		// a second later, "network is unreachable"); there is no event to wait on, so
		// poll until a connection to each address goes through, within a deadline.
		for _, a := range []netip.Addr{nsHost4a, nsHost4b, nsHost6} {
			ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(20 * time.Second); ; {
				c, err := net.DialTimeout("tcp", ln.Addr().String(), 100*time.Millisecond)
				if err == nil {
					c.Close()
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s is not reachable in the namespace: %v", a, err)
				}
			}
			ln.Close()
		}
		return true
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip(8) to set up the test's network namespace")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), netProxyNSEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Skipf("network namespaces are unavailable here (%v)", err)
	}
	t.Logf("in a new network namespace:\n%s", strings.TrimSpace(string(out)))
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("the test in the network namespace failed: %v", err)
	}
	return false
}

// nsWeb is a test host: an HTTP and an HTTPS server on one address, counting the requests
// that reach it.
type nsWeb struct {
	http, https *httptest.Server
	hits        atomic.Int64
}

func startNSWeb(t *testing.T, addr netip.Addr) *nsWeb {
	t.Helper()
	w := &nsWeb{}
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.hits.Add(1)
		io.Copy(io.Discard, r.Body)
		fmt.Fprintf(rw, "hello %s %s", r.Method, r.URL.Path)
	})
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	w.http = &httptest.Server{Listener: listen(), Config: &http.Server{Handler: h}}
	w.http.Start()
	w.https = &httptest.Server{Listener: listen(), Config: &http.Server{Handler: h}}
	w.https.StartTLS()
	t.Cleanup(func() { w.http.Close(); w.https.Close() })
	return w
}

func (w *nsWeb) port(s *httptest.Server) string {
	return fmt.Sprint(s.Listener.Addr().(*net.TCPAddr).Port)
}

// nsZone is what the test's DNS server answers: names of the test hosts.
var nsZone = testDNSZone{
	"web.example":    {{nsHost6}},
	"review.example": {{nsHost6}},
	"priv.example":   {{nsHost4a}},
	"mixed.example":  {{nsHost6, nsHost4b}},
}

// nsDNSAddr is where the test's DNS servers listen in the namespace.
var nsDNSAddr = netip.MustParseAddr("127.0.0.1")

// proxyClient is an HTTP client that goes through the proxy and trusts the test hosts.
func proxyClient(p *netProxy, w *nsWeb) *http.Client {
	pu, _ := url.Parse("http://" + p.httpAddr())
	tr := w.https.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(pu)
	tr.TLSClientConfig = &tls.Config{RootCAs: tr.TLSClientConfig.RootCAs, ServerName: "example.com"}
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// startTestProxy starts a proxy whose resolver asks a DNS server of the test answering
// nsZone (unless hooks.resolve replaces the resolver).
func startTestProxy(t *testing.T, over string, timeoutMs *uint64, hooks netProxyHooks) (*netProxy, *decisionLog) {
	t.Helper()
	p, log, _ := startTestProxyZone(t, over, timeoutMs, hooks, nsZone)
	return p, log
}

// startTestProxyZone is startTestProxy with a DNS server answering zone, which it returns.
func startTestProxyZone(t *testing.T, over string, timeoutMs *uint64, hooks netProxyHooks, zone testDNSZone) (*netProxy, *decisionLog, *testDNS) {
	t.Helper()
	log := &decisionLog{}
	dns := startTestDNS(t, nsDNSAddr, zone)
	hooks.decided = log.add
	if hooks.dial == nil { // the system's, with its failures in the test's log
		d := &net.Dialer{}
		hooks.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				t.Logf("dial %s %s: %v", network, addr, err)
			}
			return c, err
		}
	}
	p, err := startNetProxy(netProxyConfig{processID: "p1", params: netProxyParamsFor(t, over, timeoutMs), nameserver: dns.addr}, hooks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return p, log, dns
}

func get(t *testing.T, c *http.Client, method, u string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(""))
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestNetProxySockets drives the proxy with real clients and test hosts.
func TestNetProxySockets(t *testing.T) {
	if !inNetProxyNamespace(t) {
		return
	}
	w := startNSWeb(t, nsHost6)
	priv := startNSWeb(t, nsHost4a)
	webHTTP := "http://web.example:" + w.port(w.http) + "/hello"
	webHTTPS := "https://web.example:" + w.port(w.https) + "/hello"

	t.Run("allowed over HTTP and CONNECT", func(t *testing.T) {
		p, log := startTestProxy(t, `{"domains":{"web.example":"allow"}}`, nil, netProxyHooks{})
		c := proxyClient(p, w)
		before := w.hits.Load()
		for _, u := range []string{webHTTP, webHTTPS} {
			code, body, err := get(t, c, "GET", u)
			if err != nil || code != 200 || body != "hello GET /hello" {
				t.Fatalf("GET %s: %d %q %v", u, code, body, err)
			}
		}
		if n := w.hits.Load() - before; n != 2 {
			t.Fatalf("the test host saw %d requests, want 2", n)
		}
		ds := log.all()
		if len(ds) != 2 || ds[0].Decision != "allow" || ds[0].Protocol != protoHTTP || ds[1].Protocol != protoHTTPSConnect || ds[1].Method != "CONNECT" {
			t.Fatalf("decisions %+v", ds)
		}
	})

	t.Run("denied gets the 403 body", func(t *testing.T) {
		p, _ := startTestProxy(t, `{"domains":{"web.example":"deny","*.example":"allow"}}`, nil, netProxyHooks{})
		before := w.hits.Load()
		code, body, err := get(t, proxyClient(p, w), "GET", webHTTP)
		want := `{"status":"blocked","host":"web.example","reason":"denied","decision":"deny","source":"baseline_policy","protocol":"http","port":` +
			w.port(w.http) + `,"message":"Domain denied by the sandbox policy."}`
		if err != nil || code != 403 || body != want {
			t.Fatalf("got %d %q %v, want 403 %s", code, body, err, want)
		}
		_, _, err = get(t, proxyClient(p, w), "GET", webHTTPS)
		if err == nil || !strings.Contains(err.Error(), "Forbidden") {
			t.Fatalf("CONNECT to a denied host: %v, want the tunnel to fail with 403", err)
		}
		if n := w.hits.Load() - before; n != 0 {
			t.Fatalf("the denied host saw %d requests", n)
		}
	})

	t.Run("private address refused after resolution", func(t *testing.T) {
		p, _ := startTestProxy(t, `{"domains":{"priv.example":"allow","mixed.example":"allow"}}`, nil, netProxyHooks{})
		before := priv.hits.Load()
		for _, host := range []string{"priv.example:" + priv.port(priv.http), "mixed.example:" + w.port(w.http)} {
			code, body, err := get(t, proxyClient(p, w), "GET", "http://"+host+"/")
			if err != nil || code != 403 || !strings.Contains(body, `"reason":"not_allowed_local"`) {
				t.Fatalf("%s: %d %q %v", host, code, body, err)
			}
		}
		if n := priv.hits.Load() - before; n != 0 {
			t.Fatalf("the private host saw %d requests", n)
		}
	})

	t.Run("the checked addresses are the ones reached", func(t *testing.T) {
		// A name whose DNS server answers a public address to the policy's lookup and a
		// private one to any later query (DNS rebinding) must reach the public one.
		p, _, dns := startTestProxyZone(t, `{"domains":{"rebind.example":"allow"}}`, nil, netProxyHooks{},
			testDNSZone{"rebind.example": {{nsHost6}, {nsHost4a}}})
		beforeWeb, beforePriv := w.hits.Load(), priv.hits.Load()
		// A connection to the rebound address would reach 192.0.2.10 (the private host, or
		// nothing on this port): the request must reach the public host, after one lookup.
		code, body, err := get(t, proxyClient(p, w), "GET", "http://rebind.example:"+w.port(w.http)+"/r")
		aaaa, a := dns.count("rebind.example", "AAAA", ""), dns.count("rebind.example", "A", "")
		if err != nil || code != 200 || body != "hello GET /r" {
			t.Fatalf("GET: %d %q %v", code, body, err)
		}
		if w.hits.Load()-beforeWeb != 1 || priv.hits.Load() != beforePriv || aaaa != 1 || a != 1 {
			t.Fatalf("public host %d, private host %d requests, %d AAAA and %d A queries: want 1, 0, 1, 1",
				w.hits.Load()-beforeWeb, priv.hits.Load()-beforePriv, aaaa, a)
		}
	})

	t.Run("names resolved by the test's DNS server", func(t *testing.T) {
		// The proxy's own resolver against a DNS server of the test: names answering loopback,
		// private, NAT64, IPv4-mapped and 6to4 forms are refused after resolution and never
		// dialled; a name answering many addresses (too many for a datagram: asked again over
		// TCP) is allowed when all are public and reaches its host, refused when one is local;
		// a name that does not exist is refused. Read on the hosts: the loopback listener and
		// the private host see nothing; and on the dial hook: no local address was dialled.
		loop := startNSWeb(t, netip.MustParseAddr("127.0.0.1"))
		var many, manyLocal []netip.Addr
		for i := range 60 {
			a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: 0x10, 15: byte(i + 1)}) // 2001:db8::10xx, nothing there
			many, manyLocal = append(many, a), append(manyLocal, a)
		}
		many = append(many, nsHost6)
		manyLocal = append(manyLocal, netip.MustParseAddr("::1"))
		zone := testDNSZone{
			"loop.example":      {{netip.MustParseAddr("127.0.0.1")}},
			"ten.example":       {{netip.MustParseAddr("10.1.2.3")}},
			"priv.example":      {{nsHost4a}},
			"nat64.example":     {{netip.MustParseAddr("64:ff9b::7f00:1")}},
			"mapped.example":    {{netip.MustParseAddr("::ffff:127.0.0.1")}},
			"sixtofour.example": {{netip.MustParseAddr("2002:7f00:1::1")}},
			"many.example":      {many},
			"manylocal.example": {manyLocal},
		}
		var mu sync.Mutex
		var dialed []string
		d := &net.Dialer{}
		p, log, dns := startTestProxyZone(t, `{"domains":{"*.example":"allow"}}`, nil, netProxyHooks{
			dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
				mu.Lock()
				dialed = append(dialed, addr)
				mu.Unlock()
				return d.DialContext(ctx, network, addr)
			},
		}, zone)
		c := proxyClient(p, w)
		beforeLoop, beforePriv := loop.hits.Load(), priv.hits.Load()
		for _, tc := range []struct{ name, port string }{
			{"loop.example", loop.port(loop.http)}, {"ten.example", "80"}, {"priv.example", priv.port(priv.http)},
			{"nat64.example", "80"}, {"mapped.example", loop.port(loop.http)}, {"sixtofour.example", "80"},
			{"manylocal.example", w.port(w.http)}, {"nx.example", w.port(w.http)},
		} {
			code, body, err := get(t, c, "GET", "http://"+tc.name+":"+tc.port+"/")
			if err != nil || code != 403 || !strings.Contains(body, `"reason":"not_allowed_local"`) {
				t.Errorf("%s: %d %q %v, want 403 not_allowed_local", tc.name, code, body, err)
			}
			if dns.count(tc.name, "A", "")+dns.count(tc.name, "AAAA", "") == 0 {
				t.Errorf("%s: the DNS server was not asked", tc.name)
			}
		}
		before := w.hits.Load()
		if code, body, err := get(t, c, "GET", "http://many.example:"+w.port(w.http)+"/many"); err != nil || code != 200 || body != "hello GET /many" {
			t.Errorf("many.example: %d %q %v, want 200", code, body, err)
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("dialled %d addresses; many.example: %d AAAA queries over UDP, %d over TCP; manylocal.example: %d over TCP",
			len(dialed), dns.count("many.example", "AAAA", "udp"), dns.count("many.example", "AAAA", "tcp"), dns.count("manylocal.example", "AAAA", "tcp"))
		if w.hits.Load()-before != 1 {
			t.Errorf("the host of many.example saw %d requests, want 1", w.hits.Load()-before)
		}
		if dns.count("many.example", "AAAA", "tcp") != 1 || dns.count("manylocal.example", "AAAA", "tcp") != 1 {
			t.Errorf("the answers too large for a datagram were not asked again over TCP")
		}
		if loop.hits.Load() != beforeLoop || priv.hits.Load() != beforePriv {
			t.Errorf("a local host was reached: loopback %d, private %d requests", loop.hits.Load()-beforeLoop, priv.hits.Load()-beforePriv)
		}
		for _, a := range dialed {
			ap, err := netip.ParseAddrPort(a)
			if err != nil || isNonPublicIP(ap.Addr()) {
				t.Errorf("the proxy dialled %s", a)
			}
		}
		if n := len(log.all()); n != 9 {
			t.Errorf("%d decisions, want 9", n)
		}
	})

	t.Run("limited mode refuses POST and CONNECT", func(t *testing.T) {
		p, _ := startTestProxy(t, `{"domains":{"web.example":"allow"},"mode":"limited"}`, nil, netProxyHooks{})
		c := proxyClient(p, w)
		before := w.hits.Load()
		code, body, err := get(t, c, "POST", webHTTP)
		if err != nil || code != 403 || !strings.Contains(body, `"reason":"method_not_allowed","decision":"deny","source":"mode_guard"`) {
			t.Fatalf("POST: %d %q %v", code, body, err)
		}
		if _, _, err := get(t, c, "GET", webHTTPS); err == nil {
			t.Fatal("CONNECT in limited mode succeeded")
		}
		if code, _, err := get(t, c, "GET", webHTTP); err != nil || code != 200 {
			t.Fatalf("GET in limited mode: %d %v", code, err)
		}
		if n := w.hits.Load() - before; n != 1 {
			t.Fatalf("the test host saw %d requests, want only the GET", n)
		}
	})

	t.Run("review domain goes to the client", func(t *testing.T) {
		ms := uint64(1000)
		for _, tc := range []struct {
			answer string
			code   int
			reason string
		}{
			{`{"decision":{"type":"allow"}}`, 200, ""},
			{`{"decision":{"type":"deny","reason":"nope"}}`, 403, `"reason":"nope","decision":"deny","source":"decider"`},
			{"", 403, `"reason":"not_allowed","decision":"deny","source":"decider"`}, // no answer
		} {
			var asked atomic.Int64
			p, _ := startTestProxy(t, `{"domains":{"review.example":"allow"},"reviewDomains":["review.example"]}`, &ms, netProxyHooks{
				ask: func(ctx context.Context, req policyRequestParams) (json.RawMessage, error) {
					asked.Add(1)
					if req.ProcessID != "p1" || req.Request.Host != "review.example" || req.Request.Protocol != protoHTTP {
						t.Errorf("policy request %+v", req)
					}
					if tc.answer == "" {
						<-ctx.Done()
						return nil, ctx.Err()
					}
					return json.RawMessage(tc.answer), nil
				},
			})
			p.timeout = 100 * time.Millisecond
			code, body, err := get(t, proxyClient(p, w), "GET", "http://review.example:"+w.port(w.http)+"/r")
			if err != nil || code != tc.code || !strings.Contains(body, tc.reason) || asked.Load() != 1 {
				t.Fatalf("answer %s: %d %q %v, asked %d", tc.answer, code, body, err, asked.Load())
			}
		}
	})

	t.Run("SOCKS5 CONNECT and UDP", func(t *testing.T) {
		p, log := startTestProxy(t, `{"domains":{"web.example":"allow"}}`, nil, netProxyHooks{})
		d, err := xproxy.SOCKS5("tcp", p.socksAddr(), nil, xproxy.Direct)
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{Dial: d.Dial}
		resp, err := (&http.Client{Transport: tr}).Get(webHTTP)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if string(b) != "hello GET /hello" {
			t.Fatalf("through SOCKS5: %q", b)
		}
		if _, err := d.Dial("tcp", "priv.example:80"); err == nil {
			t.Fatal("SOCKS5 CONNECT to a host not allowed succeeded")
		}
		echo, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(nsHost6, 0)))
		if err != nil {
			t.Fatal(err)
		}
		defer echo.Close()
		go func() {
			buf := make([]byte, 2048)
			for {
				n, from, err := echo.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				echo.WriteToUDPAddrPort(append([]byte("echo "), buf[:n]...), from)
			}
		}()
		got := socksUDPRoundTrip(t, p.socksAddr(), "web.example", uint16(echo.LocalAddr().(*net.UDPAddr).Port), "ping")
		if got != "echo ping" {
			t.Fatalf("UDP through SOCKS5: %q", got)
		}
		var protos []string
		for _, d := range log.all() {
			protos = append(protos, d.Protocol+"/"+d.Decision)
		}
		if strings.Join(protos, " ") != "socks5_tcp/allow socks5_tcp/deny socks5_udp/allow" {
			t.Fatalf("decisions %v", protos)
		}
	})

	t.Run("through the server's upstream proxy", func(t *testing.T) {
		up, tunnels := startConnectProxy(t, nsHost4b)
		log := &decisionLog{}
		params := netProxyParamsFor(t, `{"domains":{"web.example":"allow"},"allowUpstreamProxy":true}`, nil)
		dns := startTestDNS(t, nsDNSAddr, nsZone)
		p, err := startNetProxy(netProxyConfig{processID: "p1", params: params, upstreamHTTPS: "http://" + up, nameserver: dns.addr}, netProxyHooks{decided: log.add})
		if err != nil {
			t.Fatal(err)
		}
		defer p.close()
		for _, u := range []string{webHTTP, webHTTPS} {
			if code, body, err := get(t, proxyClient(p, w), "GET", u); err != nil || code != 200 || body != "hello GET /hello" {
				t.Fatalf("GET %s: %d %q %v", u, code, body, err)
			}
		}
		if n := tunnels.Load(); n != 2 {
			t.Fatalf("the upstream proxy carried %d tunnels, want 2", n)
		}
	})

	t.Run("a bad request line gets 400", func(t *testing.T) {
		p, _ := startTestProxy(t, `{"domains":{"web.example":"allow"}}`, nil, netProxyHooks{})
		for _, head := range []string{"GARBAGE\r\n\r\n", "GET /relative HTTP/1.1\r\nHost: x\r\n\r\n", "GET http://web.example/ HTTP/9\r\n\r\n", "CONNECT web.example HTTP/1.1\r\n\r\n",
			"GET http://web.example:" + w.port(w.http) + "/ HTTP/1.1\r\nHost: priv.example:" + w.port(w.http) + "\r\n\r\n"} {
			c, err := net.Dial("tcp", p.httpAddr())
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, head)
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if line != "HTTP/1.1 400 Bad Request\r\n" {
				t.Fatalf("%q: %q", head, line)
			}
		}
	})
}

// socksUDPRoundTrip sends one datagram to host:port through a SOCKS5 UDP association and
// returns the answer.
func socksUDPRoundTrip(t *testing.T, socks, host string, port uint16, msg string) string {
	t.Helper()
	c, err := net.Dial("tcp", socks)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "\x05\x01\x00")
	r := bufio.NewReader(c)
	if b := make([]byte, 2); !(readFull(r, b) && b[1] == 0) {
		t.Fatal("SOCKS5 greeting refused")
	}
	c.Write([]byte{5, 3, 0, 1, 0, 0, 0, 0, 0, 0})
	rep := make([]byte, 10)
	if !readFull(r, rep) || rep[1] != 0 {
		t.Fatalf("UDP ASSOCIATE refused: % x", rep)
	}
	relay := netip.AddrPortFrom(netip.AddrFrom4([4]byte(rep[4:8])), binary.BigEndian.Uint16(rep[8:]))
	u, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(relay))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	dg := append([]byte{0, 0, 0, 3, byte(len(host))}, host...)
	dg = binary.BigEndian.AppendUint16(dg, port)
	u.Write(append(dg, msg...))
	u.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2048)
	n, err := u.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	_, _, m, err := parseSocksAddr(buf[3:n])
	if err != nil || m == 0 {
		t.Fatalf("answer datagram % x", buf[:n])
	}
	return string(buf[3+m : n])
}

// startConnectProxy runs a minimal CONNECT proxy on addr (the server's upstream proxy in the
// tests) and counts the tunnels it opens.
func startConnectProxy(t *testing.T, addr netip.Addr) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				line, _ := r.ReadString('\n')
				f := strings.Fields(line)
				for {
					if l, err := r.ReadString('\n'); err != nil || l == "\r\n" {
						break
					}
				}
				if len(f) < 2 || f[0] != "CONNECT" {
					return
				}
				host, port, _ := net.SplitHostPort(f[1])
				if sets, ok := nsZone[host]; ok {
					host = sets[0][0].String() // the upstream's DNS knows the test hosts too
				}
				d, err := net.Dial("tcp", net.JoinHostPort(host, port))
				if err != nil {
					io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
					return
				}
				defer d.Close()
				n.Add(1)
				io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
				go func() { io.Copy(d, r); d.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, d)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String(), &n
}

// Idle clock tests (docs/network.md §5): the idle time shortened to netIdleTestIdle, a
// stream moving a byte every netIdleTestEvery for netIdleTestFor keeps its tunnel, and once
// silent (its host keeps the connection open) the tunnel ends between idle and
// idle+idle/idleClockTicks after the last byte, plus scheduling slack. Read on the
// receiving side: every byte arrived, and when the end came.
const (
	netIdleTestIdle  = 2 * time.Second
	netIdleTestEvery = 500 * time.Millisecond
	netIdleTestFor   = 6 * time.Second
	netIdleTestSlack = 750 * time.Millisecond
)

// startTrickleHost listens on 127.0.0.1 and, to its first connection, writes a byte every
// netIdleTestEvery for netIdleTestFor (or, with up, reads what comes until the end), then
// stays silent with the connection open until the test ends. got receives what it read.
func startTrickleHost(t *testing.T, up bool) (addr string, got <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	ch := make(chan []byte, 1)
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			ch <- nil
			return
		}
		defer c.Close()
		if up {
			b, _ := io.ReadAll(c)
			ch <- b
			return
		}
		tick := time.NewTicker(netIdleTestEvery)
		defer tick.Stop()
		for i := 0; i < int(netIdleTestFor/netIdleTestEvery); i++ {
			if _, err := c.Write([]byte{'.'}); err != nil {
				break
			}
			<-tick.C // the stream's pace is the point of the test
		}
		ch <- nil
		<-done
	}()
	return ln.Addr().String(), ch
}

// checkTrickleDown reads the trickle from c and checks what arrived and when the tunnel ended.
func checkTrickleDown(t *testing.T, c io.Reader) {
	t.Helper()
	want := int(netIdleTestFor / netIdleTestEvery)
	var n int
	var last time.Time
	buf := make([]byte, 64)
	for {
		m, err := c.Read(buf)
		if m > 0 {
			n, last = n+m, time.Now()
		}
		if err != nil {
			break
		}
	}
	quiet := time.Since(last)
	t.Logf("got %d of %d bytes (one each %v, idle %v); the tunnel ended %v after the last", n, want, netIdleTestEvery, netIdleTestIdle, quiet)
	if n != want {
		t.Errorf("the tunnel was cut after %d of %d bytes, though a byte moved every %v", n, want, netIdleTestEvery)
	}
	if max := netIdleTestIdle + netIdleTestIdle/idleClockTicks + netIdleTestSlack; quiet < netIdleTestIdle-netIdleTestSlack || quiet > max {
		t.Errorf("a silent tunnel ended %v after its last byte, want about %v..%v", quiet, netIdleTestIdle, netIdleTestIdle+netIdleTestIdle/idleClockTicks)
	}
}

func startIdleTestProxy(t *testing.T) *netProxy {
	t.Helper()
	return startIdleTestProxyWith(t, `{"enableSocks5":true,"domains":{"127.0.0.1":"allow"}}`)
}

// startIdleTestProxyWith is startIdleTestProxy with the proxy config over.
func startIdleTestProxyWith(t *testing.T, over string) *netProxy {
	t.Helper()
	p, err := startNetProxy(netProxyConfig{processID: "idle", idleTimeout: netIdleTestIdle,
		params: netProxyParamsFor(t, over, nil)}, netProxyHooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return p
}

// connectTunnel opens a CONNECT tunnel to addr through p and returns it past the answer.
func connectTunnel(t *testing.T, p *netProxy, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.httpAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr)
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		t.Fatalf("CONNECT: %q %v", status, err)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if l == "\r\n" {
			return c, br
		}
	}
}

// TestNetProxyIdleClock: one idle clock per tunnel, renewed by either direction (a download
// whose client sends nothing; an upload whose host sends nothing), through the spliced TCP
// path of CONNECT, SOCKS5 (whose relay the transparent path shares: splice) and the
// sandbox bridge's carry.
func TestNetProxyIdleClock(t *testing.T) {
	t.Run("connect-down", func(t *testing.T) {
		t.Parallel()
		addr, _ := startTrickleHost(t, false)
		_, br := connectTunnel(t, startIdleTestProxy(t), addr)
		checkTrickleDown(t, br)
	})
	t.Run("connect-up", func(t *testing.T) {
		t.Parallel()
		addr, got := startTrickleHost(t, true)
		c, _ := connectTunnel(t, startIdleTestProxy(t), addr)
		want := int(netIdleTestFor / netIdleTestEvery)
		tick := time.NewTicker(netIdleTestEvery)
		defer tick.Stop()
		var last time.Time
		for i := 0; i < want; i++ {
			if i > 0 {
				<-tick.C
			}
			if _, err := c.Write([]byte{'.'}); err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
			last = time.Now()
		}
		b := <-got // the host's read ends when the proxy ends the silent tunnel
		quiet := time.Since(last)
		t.Logf("the host got %d of %d bytes; the tunnel ended %v after the last", len(b), want, quiet)
		if len(b) != want {
			t.Errorf("the host got %d of %d bytes", len(b), want)
		}
		if quiet > netIdleTestIdle+netIdleTestIdle/idleClockTicks+netIdleTestSlack {
			t.Errorf("a silent tunnel ended %v after its last byte", quiet)
		}
	})
	t.Run("socks", func(t *testing.T) {
		t.Parallel()
		addr, _ := startTrickleHost(t, false)
		p := startIdleTestProxy(t)
		d, err := xproxy.SOCKS5("tcp", p.socksAddr(), nil, xproxy.Direct)
		if err != nil {
			t.Fatal(err)
		}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkTrickleDown(t, c)
	})
	t.Run("bridge", func(t *testing.T) {
		t.Parallel()
		addr, _ := startTrickleHost(t, false)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f, err := ln.(*net.TCPListener).File()
		ln.Close()
		if err != nil {
			t.Fatal(err)
		}
		b, err := startNetBridge(f, addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.close()
		b.mu.Lock()
		b.idle = netIdleTestIdle
		b.mu.Unlock()
		c, err := net.Dial("tcp", b.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkTrickleDown(t, c)
	})
}

// TestNetProxyIdleClockPipe: the fallback for connections that are not TCP (no kernel
// counters: the copying loop counts), with in-memory pipes on both sides.
func TestNetProxyIdleClockPipe(t *testing.T) {
	client, clientFar := net.Pipe()
	up, upFar := net.Pipe()
	defer clientFar.Close()
	defer upFar.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		relayConns(client, up, netIdleTestIdle)
	}()
	go func() { // the host: a trickle, then silence with the pipe open
		tick := time.NewTicker(netIdleTestEvery)
		defer tick.Stop()
		for i := 0; i < int(netIdleTestFor/netIdleTestEvery); i++ {
			if _, err := upFar.Write([]byte{'.'}); err != nil {
				return
			}
			<-tick.C
		}
	}()
	checkTrickleDown(t, clientFar)
	<-done
}

// TestNetProxyRequestFraming: a forwarded request reaches its host with exactly its own body
// (Content-Length, or chunked up to its end), and nothing the client sent after it (which is
// read as the next request); framing a
// host could read another way (another transfer coding, both headers, a malformed length, two
// Host headers) is refused with 400 before any host is reached. Read on the host: it records
// every byte it received until the proxy closed the connection.
func TestNetProxyRequestFraming(t *testing.T) {
	const next = "GET /second HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
	for _, tc := range []struct {
		name, headers, body string
		want                string // the body the host must get; "400": refused
	}{
		{"length", "Content-Length: 5\r\n", "hello", "hello"},
		{"none", "", "", ""},
		{"chunked", "Transfer-Encoding: chunked\r\n", "5;x=1\r\nhello\r\n0\r\nT: v\r\n\r\n", "5;x=1\r\nhello\r\n0\r\nT: v\r\n\r\n"},
		{"gzip", "Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n", "400"},
		{"both", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n", "400"},
		{"two-lengths", "Content-Length: 5\r\nContent-Length: 5\r\n", "hello", "400"},
		{"bad-length", "Content-Length: +5\r\n", "hello", "400"},
		{"two-hosts", "Host: 127.0.0.1\r\n", "", "400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := make(chan []byte, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					got <- nil
					return
				}
				defer c.Close()
				var raw bytes.Buffer
				br := bufio.NewReader(io.TeeReader(c, &raw))
				if req, err := http.ReadRequest(br); err == nil {
					io.Copy(io.Discard, req.Body)
				}
				c.Write([]byte("HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"))
				c.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, br)
				got <- raw.Bytes()
			}()
			p := startIdleTestProxy(t)
			c, err := net.Dial("tcp", p.httpAddr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			host := ln.Addr().String()
			fmt.Fprintf(c, "POST http://%s/first HTTP/1.1\r\nHost: %s\r\n%s\r\n%s%s", host, host, tc.headers, tc.body, next)
			resp, _ := io.ReadAll(c)
			ln.Close()
			b := <-got
			t.Logf("the client got %q; the host received %q", resp, b)
			if tc.want == "400" {
				if !bytes.HasPrefix(resp, []byte("HTTP/1.1 400 ")) || b != nil {
					t.Errorf("want 400 and no host reached")
				}
				return
			}
			_, body, _ := bytes.Cut(b, []byte("\r\n\r\n"))
			if string(body) != tc.want {
				t.Errorf("the host got the body %q, want %q", body, tc.want)
			}
			// The request after it is read as a request of its own (an origin-form one: 400).
			if !bytes.Contains(resp, []byte("\r\n\r\nokHTTP/1.1 400 ")) {
				t.Errorf("the client did not get the answer, then the next request's 400")
			}
		})
	}
}

// TestNetProxyUpstreamRules: an upstream proxy setting the proxy cannot speak to (https://,
// socks5://) fails the request with 502 instead of going direct; an upstream that opens a
// tunnel with any 2xx and speaks first has its early bytes reach the client (one CONNECT
// rule for every upstream). Read on the dialing side: which addresses the proxy dialled.
func TestNetProxyUpstreamRules(t *testing.T) {
	// public.example has a public address, which the dial hooks never reach.
	dns := startTestDNS(t, netip.MustParseAddr("127.0.0.1"), testDNSZone{"public.example": {{netip.MustParseAddr("8.8.8.8")}}})
	for _, setting := range []string{"https://127.0.0.1:1", "socks5://127.0.0.1:1"} {
		t.Run(setting, func(t *testing.T) {
			var mu sync.Mutex
			var dialed []string
			p, err := startNetProxy(netProxyConfig{processID: "u", upstreamHTTPS: setting, nameserver: dns.addr,
				params: netProxyParamsFor(t, `{"domains":{"public.example":"allow"},"allowUpstreamProxy":true}`, nil)},
				netProxyHooks{dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
					mu.Lock()
					dialed = append(dialed, addr)
					mu.Unlock()
					return nil, errors.New("the test dials nothing")
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer p.close()
			c, err := net.Dial("tcp", p.httpAddr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "GET http://public.example/ HTTP/1.1\r\nHost: public.example\r\n\r\n")
			resp, _ := io.ReadAll(c)
			mu.Lock()
			defer mu.Unlock()
			t.Logf("the client got %q; dialled %q", resp, dialed)
			if !bytes.HasPrefix(resp, []byte("HTTP/1.1 502 ")) || len(dialed) != 0 {
				t.Errorf("want 502 and no dial")
			}
		})
	}
	t.Run("2xx-early-bytes", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		asked := make(chan string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				asked <- ""
				return
			}
			defer c.Close()
			buf, n, _ := readHead(c)
			asked <- string(buf[:n])
			c.Write([]byte("HTTP/1.1 204 No Content\r\n\r\nEARLY"))
			io.Copy(io.Discard, c)
		}()
		p, err := startNetProxy(netProxyConfig{processID: "u", upstreamHTTPS: "http://" + ln.Addr().String(), nameserver: dns.addr,
			params: netProxyParamsFor(t, `{"domains":{"public.example":"allow"},"allowUpstreamProxy":true}`, nil)},
			netProxyHooks{dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if addr != ln.Addr().String() {
					return nil, fmt.Errorf("the test dials only its upstream, not %s", addr)
				}
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.close()
		_, br := connectTunnel(t, p, "public.example:443")
		got := make([]byte, 5)
		_, err = io.ReadFull(br, got)
		t.Logf("the upstream was asked %q; the client got %q (%v)", <-asked, got, err)
		if string(got) != "EARLY" {
			t.Errorf("the upstream's early bytes did not reach the client")
		}
	})
}

// TestNetProxyRefusalDrained: a refused request whose body the client already sent gets its
// 403 read by the client, not a reset: before the close the proxy reads and drops up to
// netProxyDrainBytes of what the client sent.
func TestNetProxyRefusalDrained(t *testing.T) {
	p := startIdleTestProxy(t)
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", p.httpAddr())
		if err != nil {
			t.Fatal(err)
		}
		const size = 32 << 10
		// Connection: close: the refusal ends the connection (without it the body is dropped
		// and the connection waits for the next request, TestNetProxyKeepAlive).
		fmt.Fprintf(c, "POST http://denied.example/ HTTP/1.1\r\nHost: denied.example\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", size, strings.Repeat("x", size))
		resp, err := io.ReadAll(c)
		c.Close()
		if !bytes.HasPrefix(resp, []byte("HTTP/1.1 403 ")) || err != nil {
			t.Fatalf("attempt %d: the client got %q, %v; want the whole 403", i, resp, err)
		}
	}
	t.Logf("20 of 20 refusals with a %d-byte unread body read whole", 32<<10)
}

// keepAliveHost is a test host on a loopback address that answers by path (below) and
// records every request that reaches it ("METHOD /path body").
type keepAliveHost struct {
	addr string
	mu   sync.Mutex
	got  []string
}

// startKeepAliveHost listens on ip. Answers: /nolen a body without length, then the close;
// /chunked a chunked body; /204 204; /304 304 with a Content-Length but no body (these three
// keep the host's connection open); any other path "hello IP /path" with its Content-Length
// and Connection: close, then the close (a HEAD's answer the same head, no body).
func startKeepAliveHost(t *testing.T, ip string) *keepAliveHost {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	h := &keepAliveHost{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					b, _ := io.ReadAll(req.Body)
					h.mu.Lock()
					h.got = append(h.got, strings.TrimSpace(req.Method+" "+req.URL.Path+" "+string(b)))
					h.mu.Unlock()
					var resp string
					switch req.URL.Path {
					case "/nolen":
						io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nno length body")
						return
					case "/chunked":
						resp = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
					case "/204":
						resp = "HTTP/1.1 204 No Content\r\n\r\n"
					case "/304":
						resp = "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"
					default:
						body := "hello " + ip + " " + req.URL.Path
						resp = fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(body))
						if req.Method != "HEAD" {
							resp += body
						}
					}
					if _, err := io.WriteString(c, resp); err != nil || strings.Contains(resp, "Connection: close") {
						return
					}
				}
			}()
		}
	}()
	return h
}

func (h *keepAliveHost) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

// keepAliveRequest is an absolute-form request to path on h.
func keepAliveRequest(method string, h *keepAliveHost, path, extra, body string) string {
	if body != "" {
		extra += fmt.Sprintf("Content-Length: %d\r\n", len(body))
	}
	return fmt.Sprintf("%s http://%s%s HTTP/1.1\r\nHost: %s\r\n%s\r\n%s", method, h.addr, path, h.addr, extra, body)
}

// readAnswer reads one answer to a request of method from br: its status, body and whether
// it says the connection closes.
func readAnswer(t *testing.T, br *bufio.Reader, method string) (int, string, bool) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read the answer to a %s: %v", method, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read the body of the answer to a %s: %v", method, err)
	}
	return resp.StatusCode, string(b), resp.Close
}

// TestNetProxyKeepAlive: a client connection carries several plain requests, as with the
// reference (docs/network.md §2, "Keep-alive", measured): each is judged anew (a denied host
// between two allowed ones gets its 403 and the connection goes on), pipelined requests are
// answered in order, an answer without length ends the connection after it, answers without
// a body (HEAD, 204, 304) leave it usable, and limited mode judges each method. Read on the
// hosts: which requests reached which host.
func TestNetProxyKeepAlive(t *testing.T) {
	a, b, denied := startKeepAliveHost(t, "127.0.0.1"), startKeepAliveHost(t, "127.0.0.2"), startKeepAliveHost(t, "127.0.0.4")
	const policy = `{"domains":{"127.0.0.1":"allow","127.0.0.2":"allow","127.0.0.4":"deny"}}`
	dial := func(t *testing.T, p *netProxy) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.httpAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(20 * time.Second))
		return c, bufio.NewReader(c)
	}
	expectEOF := func(t *testing.T, br *bufio.Reader) {
		t.Helper()
		if n, err := io.Copy(io.Discard, br); n != 0 || err != nil {
			t.Errorf("after the last answer: %d more bytes, %v; want the end", n, err)
		}
	}
	hostsSaw := func(t *testing.T, before [3]int, want ...[]string) {
		t.Helper()
		for i, h := range []*keepAliveHost{a, b, denied} {
			got := h.requests()[before[i]:]
			if fmt.Sprint(got) != fmt.Sprint(want[i]) {
				t.Errorf("host %s received %q, want %q", h.addr, got, want[i])
			}
		}
	}
	counts := func() [3]int { return [3]int{len(a.requests()), len(b.requests()), len(denied.requests())} }

	t.Run("one after another", func(t *testing.T) {
		p := startIdleTestProxyWith(t, policy)
		before := counts()
		c, br := dial(t, p)
		for i, step := range []struct {
			req, method string
			code        int
			body        string
		}{
			{keepAliveRequest("GET", a, "/1", "", ""), "GET", 200, "hello 127.0.0.1 /1"},
			{keepAliveRequest("GET", b, "/2", "", ""), "GET", 200, "hello 127.0.0.2 /2"},
			{keepAliveRequest("GET", denied, "/3", "", ""), "GET", 403, `"reason":"denied"`},
			{keepAliveRequest("POST", a, "/4", "", "four"), "POST", 200, "hello 127.0.0.1 /4"},
			{keepAliveRequest("GET", b, "/5", "Connection: close\r\n", ""), "GET", 200, "hello 127.0.0.2 /5"},
		} {
			io.WriteString(c, step.req)
			code, body, closing := readAnswer(t, br, step.method)
			if code != step.code || !strings.Contains(body, step.body) || closing != (i == 4) {
				t.Fatalf("request %d: %d %q (closing %v), want %d %q", i+1, code, body, closing, step.code, step.body)
			}
		}
		expectEOF(t, br)
		hostsSaw(t, before, []string{"GET /1", "POST /4 four"}, []string{"GET /2", "GET /5"}, nil)
	})

	t.Run("pipelined", func(t *testing.T) {
		p := startIdleTestProxyWith(t, policy)
		before := counts()
		c, br := dial(t, p)
		io.WriteString(c, keepAliveRequest("GET", a, "/p1", "", "")+keepAliveRequest("POST", denied, "/p2", "", strings.Repeat("x", 100))+
			keepAliveRequest("GET", b, "/p3", "", "")+keepAliveRequest("HEAD", a, "/p4", "", "")+keepAliveRequest("GET", a, "/p5", "", ""))
		for i, want := range []struct {
			method string
			code   int
			body   string
		}{{"GET", 200, "hello 127.0.0.1 /p1"}, {"POST", 403, `"reason":"denied"`}, {"GET", 200, "hello 127.0.0.2 /p3"}, {"HEAD", 200, ""}, {"GET", 200, "hello 127.0.0.1 /p5"}} {
			code, body, _ := readAnswer(t, br, want.method)
			if code != want.code || !strings.Contains(body, want.body) || want.body == "" && body != "" {
				t.Fatalf("answer %d: %d %q, want %d %q", i+1, code, body, want.code, want.body)
			}
		}
		hostsSaw(t, before, []string{"GET /p1", "HEAD /p4", "GET /p5"}, []string{"GET /p3"}, nil)
	})

	t.Run("no body and chunked", func(t *testing.T) {
		p := startIdleTestProxyWith(t, policy)
		c, br := dial(t, p)
		for i, step := range []struct {
			method, path string
			code         int
			body         string
		}{{"HEAD", "/h", 200, ""}, {"GET", "/204", 204, ""}, {"GET", "/304", 304, ""}, {"GET", "/chunked", 200, "hello"}, {"GET", "/last", 200, "hello 127.0.0.1 /last"}} {
			io.WriteString(c, keepAliveRequest(step.method, a, step.path, "", ""))
			code, body, closing := readAnswer(t, br, step.method)
			if code != step.code || body != step.body || closing {
				t.Fatalf("request %d (%s %s): %d %q closing %v, want %d %q", i+1, step.method, step.path, code, body, closing, step.code, step.body)
			}
		}
	})

	t.Run("an answer without length ends the connection", func(t *testing.T) {
		p := startIdleTestProxyWith(t, policy)
		before := counts()
		c, br := dial(t, p)
		io.WriteString(c, keepAliveRequest("GET", a, "/nolen", "", "")+keepAliveRequest("GET", a, "/after", "", ""))
		code, body, closing := readAnswer(t, br, "GET")
		if code != 200 || body != "no length body" || !closing {
			t.Fatalf("got %d %q closing %v, want 200 %q and connection: close", code, body, closing, "no length body")
		}
		expectEOF(t, br)
		hostsSaw(t, before, []string{"GET /nolen"}, nil, nil)
	})

	t.Run("a silent connection ends after the idle time", func(t *testing.T) {
		p := startIdleTestProxyWith(t, policy) // idle time netIdleTestIdle
		c, br := dial(t, p)
		io.WriteString(c, keepAliveRequest("GET", a, "/i", "", ""))
		if code, _, _ := readAnswer(t, br, "GET"); code != 200 {
			t.Fatalf("got %d", code)
		}
		last := time.Now()
		expectEOF(t, br)
		quiet := time.Since(last)
		t.Logf("the silent connection ended %v after the answer (idle time %v)", quiet, netIdleTestIdle)
		if quiet < netIdleTestIdle-netIdleTestSlack || quiet > netIdleTestIdle+netIdleTestSlack {
			t.Errorf("a silent kept-alive connection ended %v after its last answer, want about %v", quiet, netIdleTestIdle)
		}
	})

	t.Run("limited mode judges each method", func(t *testing.T) {
		p := startIdleTestProxyWith(t, `{"mode":"limited","domains":{"127.0.0.1":"allow"}}`)
		before := counts()
		c, br := dial(t, p)
		io.WriteString(c, keepAliveRequest("GET", a, "/g1", "", "")+keepAliveRequest("POST", a, "/smuggled", "", "abc")+keepAliveRequest("GET", a, "/g2", "", ""))
		for i, want := range []struct {
			code int
			body string
		}{{200, "hello 127.0.0.1 /g1"}, {403, `"reason":"method_not_allowed","decision":"deny","source":"mode_guard"`}, {200, "hello 127.0.0.1 /g2"}} {
			code, body, _ := readAnswer(t, br, "GET")
			if code != want.code || !strings.Contains(body, want.body) {
				t.Fatalf("answer %d: %d %q, want %d %q", i+1, code, body, want.code, want.body)
			}
		}
		hostsSaw(t, before, []string{"GET /g1", "GET /g2"}, nil, nil)
	})
}
