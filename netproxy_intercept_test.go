package main

// Tests of TLS interception (docs/network.md, "Credential masking", "Interception") with real
// sockets, real TLS and a real origin: a TLS test host on loopback with its own test CA, names
// that resolve (through the proxy's resolve hook) to documentation addresses which the proxy's
// dial hook maps to that host, so no other address is ever contacted. The CA of interception
// and the credential registry are test fakes of the two interfaces. Every verdict is read on
// the origin's side: which header value reached it, over which protocol.

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// testCA is a test certificate authority: the fake masking CA, or an origin's own.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool, leaves: map[string]*tls.Certificate{},
		pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leafFor is the test leafIssuer: one leaf per host, cached.
func (ca *testCA) leafFor(host string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok {
		return c, nil
	}
	c, err := ca.issue(host)
	if err == nil {
		ca.leaves[host] = c
	}
	return c, err
}

func (ca *testCA) issue(hosts ...string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if a, err := netip.ParseAddr(h); err == nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// Test credential: one stand-in, one real value, one host it belongs to.
const (
	testStandIn  = "ghp_STANDINstandin0123456789abcdefABCDEF"
	testRealCred = "ghp_REALrealREAL0123456789abcdefABCDEFxy"
)

// testInjector is the test credentialInjector: it intercepts port 443 of its hosts and swaps
// "Bearer <stand-in>" for "Bearer <real>" in Authorization, only for https://credHost:443.
type testInjector struct {
	hosts    map[string]bool
	credHost string
}

func (i *testInjector) intercepts(host string, port uint16) bool { return port == 443 && i.hosts[host] }

func (i *testInjector) inject(r *http.Request) []string {
	if r.URL.Scheme != "https" || r.URL.Hostname() != i.credHost || r.URL.Port() != "443" {
		return nil
	}
	if r.Header.Get("Authorization") != "Bearer "+testStandIn {
		return nil
	}
	r.Header.Set("Authorization", "Bearer "+testRealCred)
	return []string{"github"}
}

// unmask: the D6 response-header scan.
func (i *testInjector) unmask(h http.Header) {
	for _, vs := range h {
		for j, v := range vs {
			vs[j] = strings.ReplaceAll(v, testRealCred, testStandIn)
		}
	}
}

// unmaskPairs: the D6 body scan. The stand-in is longer than the real value here, so the
// body's length changes too.
func (i *testInjector) unmaskPairs() []unmaskPair {
	return []unmaskPair{{real: []byte(testRealCred), standIn: []byte(testStandIn + "LONGER")}}
}

// originSeen is one request as the origin received it.
type originSeen struct {
	host, auth, proto, method, path string
	acceptEncoding                  string
}

// testOrigin is a TLS host (HTTP/1.1 and HTTP/2) with its own CA, for the names api.test,
// echo.test and plain.test. It records every request, echoes the Authorization it got in
// X-Echo-Auth, and on /ws answers a websocket-style upgrade with 101, then echoes bytes.
type testOrigin struct {
	ca   *testCA
	srv  *httptest.Server
	mu   sync.Mutex
	seen []originSeen
}

func startTestOrigin(t testing.TB) *testOrigin {
	t.Helper()
	o := &testOrigin{ca: newTestCA(t, "origin test CA")}
	leaf, err := o.ca.issue("api.test", "echo.test", "plain.test")
	if err != nil {
		t.Fatal(err)
	}
	o.srv = httptest.NewUnstartedServer(http.HandlerFunc(o.serve))
	o.srv.EnableHTTP2 = true
	o.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	o.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	o.srv.StartTLS()
	t.Cleanup(o.srv.Close)
	return o
}

func (o *testOrigin) serve(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.seen = append(o.seen, originSeen{r.Host, r.Header.Get("Authorization"), r.Proto, r.Method, r.URL.Path, r.Header.Get("Accept-Encoding")})
	o.mu.Unlock()
	if r.URL.Path == "/ws" {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "no upgrade", 400)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		io.Copy(c, brw)
		return
	}
	if r.URL.Path == "/echo-body" {
		// The Authorization it got, in two parts flushed apart, and with a known length.
		a := r.Header.Get("Authorization")
		w.Header().Set("Content-Length", fmt.Sprint(len("got ")+len(a)+len(" end")))
		if r.URL.Query().Get("gzip") != "" {
			w.Header().Set("Content-Encoding", "gzip") // a label only: the body is not scanned
		}
		io.WriteString(w, "got "+a[:len(a)/2])
		http.NewResponseController(w).Flush()
		io.WriteString(w, a[len(a)/2:]+" end")
		return
	}
	if r.URL.Path == "/big" {
		w.Header().Set("Content-Type", "application/octet-stream")
		io.Copy(w, io.LimitReader(zeroReader{}, benchDownloadSize(r)))
		return
	}
	io.Copy(io.Discard, r.Body)
	w.Header().Set("X-Echo-Auth", r.Header.Get("Authorization"))
	fmt.Fprintf(w, "hello %s %s", r.Method, r.URL.Path)
}

func (o *testOrigin) all() []originSeen {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]originSeen(nil), o.seen...)
}

func (o *testOrigin) last(t testing.TB) originSeen {
	t.Helper()
	s := o.all()
	if len(s) == 0 {
		t.Fatal("the origin saw no request")
	}
	return s[len(s)-1]
}

type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) { clear(b); return len(b), nil }

// benchDownloadSize is the size a /big request asks for (?n=bytes), 1 MiB by default.
func benchDownloadSize(r *http.Request) int64 {
	var n int64 = 1 << 20
	fmt.Sscan(r.URL.Query().Get("n"), &n)
	return n
}

// Documentation addresses the test names resolve to; the dial hook maps them to the origin.
var (
	mitmAddrAPI   = netip.MustParseAddr("2001:db8::a")
	mitmAddrEcho  = netip.MustParseAddr("2001:db8::e")
	mitmAddrPlain = netip.MustParseAddr("2001:db8::f")
)

// startInterceptProxy starts a proxy that intercepts api.test and echo.test (the credential
// belongs to api.test only) with mitmCA, trusting only the origin's CA upstream; every
// connection to the test addresses on port 443 goes to the origin.
func startInterceptProxy(t testing.TB, o *testOrigin, mitmCA *testCA, over string) (*netProxy, *decisionLog) {
	t.Helper()
	return startInterceptProxyWith(t, o, mitmCA, over, &testInjector{hosts: map[string]bool{"api.test": true, "echo.test": true}, credHost: "api.test"})
}

// startInterceptProxyWith is startInterceptProxy with another injector.
func startInterceptProxyWith(t testing.TB, o *testOrigin, mitmCA *testCA, over string, inj credentialInjector) (*netProxy, *decisionLog) {
	t.Helper()
	originAddr := o.srv.Listener.Addr().String()
	known := map[string]bool{}
	for _, a := range []netip.Addr{mitmAddrAPI, mitmAddrEcho, mitmAddrPlain} {
		known[netip.AddrPortFrom(a, 443).String()] = true
	}
	var d net.Dialer
	hooks := netProxyHooks{
		resolve: staticResolver(map[string][]netip.Addr{
			"api.test": {mitmAddrAPI}, "echo.test": {mitmAddrEcho}, "plain.test": {mitmAddrPlain},
		}),
		dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if !known[addr] {
				return nil, fmt.Errorf("test dial: %s is not a test host", addr)
			}
			return d.DialContext(ctx, network, originAddr)
		},
	}
	decisions := &decisionLog{}
	hooks.decided = decisions.add
	if over == "" {
		over = `{"domains":{"*.test":"allow"}}`
	}
	cfg := netProxyConfig{processID: "p1", params: netProxyParamsFor(t, over, nil),
		intercept: &interceptConfig{issuer: mitmCA, roots: o.ca.pool, injector: inj}}
	p, err := startNetProxy(cfg, hooks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return p, decisions
}

// mitmClient is a client through p's HTTP proxy trusting roots; h2 offers HTTP/2.
func mitmClient(p *netProxy, roots *x509.CertPool, h2 bool) *http.Client {
	pu, _ := url.Parse("http://" + p.httpAddr())
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func doAuth(t testing.TB, c *http.Client, method, u, auth string) (*http.Response, string, error) {
	t.Helper()
	req, _ := http.NewRequest(method, u, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

// connectTLS opens a CONNECT tunnel to target through p and a TLS client on it, with sni
// and roots; proto is the ALPN list.
func connectTLS(t testing.TB, p *netProxy, target, sni string, roots *x509.CertPool, proto ...string) (*tls.Conn, error) {
	t.Helper()
	c, err := net.Dial("tcp", p.httpAddr())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %v %v", target, resp, err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: roots, NextProtos: proto})
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

func TestNetProxyIntercept(t *testing.T) {
	o := startTestOrigin(t)
	mitmCA := newTestCA(t, "masking test CA")
	p, decisions := startInterceptProxy(t, o, mitmCA, "")
	bearer := "Bearer " + testStandIn

	for _, h2 := range []bool{false, true} {
		name := map[bool]string{false: "h1", true: "h2"}[h2]
		t.Run(name+" credential host gets the real value", func(t *testing.T) {
			resp, body, err := doAuth(t, mitmClient(p, mitmCA.pool, h2), "GET", "https://api.test/v1/x?q=1", bearer)
			if err != nil || resp.StatusCode != 200 || body != "hello GET /v1/x" {
				t.Fatalf("GET: %v %q %v", resp, body, err)
			}
			s := o.last(t)
			if s.auth != "Bearer "+testRealCred || s.host != "api.test" || s.path != "/v1/x" {
				t.Fatalf("the origin saw %+v", s)
			}
			// Both sides speak HTTP/2 when the child offers it: the origin always can.
			if s.proto != "HTTP/2.0" {
				t.Fatalf("the origin saw %s, want HTTP/2.0", s.proto)
			}
			if want := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != want {
				t.Fatalf("the child spoke %s", resp.Proto)
			}
			// D6: the origin's echo of the real value reaches the child as the stand-in.
			if got := resp.Header.Get("X-Echo-Auth"); got != bearer {
				t.Fatalf("X-Echo-Auth %q reached the child", got)
			}
		})
	}

	t.Run("real value in a response body comes back as the stand-in", func(t *testing.T) {
		c := mitmClient(p, mitmCA.pool, false)
		c.Transport.(*http.Transport).DisableCompression = true
		resp, body, err := doAuth(t, c, "GET", "https://api.test/echo-body", bearer)
		if want := "got Bearer " + testStandIn + "LONGER end"; err != nil || resp.StatusCode != 200 || body != want {
			t.Fatalf("GET: %v %q %v, want %q", resp, body, err, want)
		}
		if s := o.last(t); s.auth != "Bearer "+testRealCred {
			t.Fatalf("the origin saw %+v", s)
		}
		// The proxy asks the origin for no compression; an answer compressed all the same
		// cannot be scanned, and is refused (docs/network.md "Interception").
		if s := o.last(t); s.acceptEncoding != "identity" {
			t.Fatalf("the origin was asked Accept-Encoding %q, want identity", s.acceptEncoding)
		}
		resp, body, err = doAuth(t, c, "GET", "https://api.test/echo-body?gzip=1", bearer)
		if err != nil || resp.StatusCode != http.StatusBadGateway || strings.Contains(body, testRealCred) {
			t.Fatalf("GET gzip: %v %q %v, want 502 without the real value", resp, body, err)
		}
	})

	t.Run("stand-in to another intercepted host is not swapped", func(t *testing.T) {
		resp, _, err := doAuth(t, mitmClient(p, mitmCA.pool, false), "POST", "https://echo.test/leak", bearer)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("POST: %v %v", resp, err)
		}
		if s := o.last(t); s.auth != bearer || s.host != "echo.test" {
			t.Fatalf("the origin saw %+v", s)
		}
	})

	t.Run("non-credential CONNECT is spliced", func(t *testing.T) {
		// The child sees the origin's own chain: our CA does not verify it, the origin's does.
		if _, _, err := doAuth(t, mitmClient(p, mitmCA.pool, false), "GET", "https://plain.test/a", bearer); err == nil {
			t.Fatal("plain.test verified against the masking CA: it was intercepted")
		}
		resp, _, err := doAuth(t, mitmClient(p, o.ca.pool, false), "GET", "https://plain.test/a", bearer)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET plain.test with the origin's CA: %v %v", resp, err)
		}
		if s := o.last(t); s.auth != bearer || s.host != "plain.test" {
			t.Fatalf("the origin saw %+v", s)
		}
		// And the credential host's chain is ours, not the origin's.
		if _, _, err := doAuth(t, mitmClient(p, o.ca.pool, false), "GET", "https://api.test/a", bearer); err == nil {
			t.Fatal("api.test verified against the origin's CA: it was not intercepted")
		}
	})

	t.Run("SNI other than the CONNECT host is refused", func(t *testing.T) {
		before := len(o.all())
		if tc, err := connectTLS(t, p, "api.test:443", "echo.test", mitmCA.pool); err == nil {
			tc.Close()
			t.Fatal("a handshake with SNI echo.test inside CONNECT api.test succeeded")
		}
		tc, err := connectTLS(t, p, "api.test:443", "api.test", mitmCA.pool)
		if err != nil {
			t.Fatalf("the matching SNI: %v", err)
		}
		tc.Close()
		if n := len(o.all()) - before; n != 0 {
			t.Fatalf("the origin saw %d requests", n)
		}
	})

	t.Run("inner host mismatch 400, inner CONNECT 405", func(t *testing.T) {
		before := len(o.all())
		for _, c := range []struct{ req, want string }{
			{"GET /x HTTP/1.1\r\nHost: echo.test\r\n\r\n", "HTTP/1.1 400 "},
			{"GET /x HTTP/1.1\r\nHost: api.test:444\r\n\r\n", "HTTP/1.1 400 "},
			{"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n", "HTTP/1.1 405 "},
		} {
			tc, err := connectTLS(t, p, "api.test:443", "api.test", mitmCA.pool, "http/1.1")
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(tc, c.req)
			line, _ := bufio.NewReader(tc).ReadString('\n')
			tc.Close()
			if !strings.HasPrefix(line, c.want) {
				t.Fatalf("%q: %q, want %q", c.req, line, c.want)
			}
		}
		if n := len(o.all()) - before; n != 0 {
			t.Fatalf("the origin saw %d requests", n)
		}
	})

	t.Run("websocket upgrade relayed", func(t *testing.T) {
		tc, err := connectTLS(t, p, "api.test:443", "api.test", mitmCA.pool, "http/1.1")
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		io.WriteString(tc, "GET /ws HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nAuthorization: "+bearer+"\r\n\r\n")
		br := bufio.NewReader(tc)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 101 {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		io.WriteString(tc, "ping over the upgraded tunnel")
		buf := make([]byte, len("ping over the upgraded tunnel"))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping over the upgraded tunnel" {
			t.Fatalf("echo %q %v", buf, err)
		}
		if s := o.last(t); s.path != "/ws" || s.auth != "Bearer "+testRealCred || s.proto != "HTTP/1.1" {
			t.Fatalf("the origin saw %+v", s)
		}
	})

	t.Run("non-TLS bytes in full mode are spliced", func(t *testing.T) {
		c, err := net.Dial("tcp", p.httpAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\nGET / HTTP/1.0\r\n\r\n")
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		// The origin's TLS server itself answers plain HTTP.
		b, _ := io.ReadAll(br)
		if !strings.Contains(string(b), "HTTP request to an HTTPS server") {
			t.Fatalf("the tunnel answered %q", b)
		}
	})

	if curl, err := exec.LookPath("curl"); err == nil {
		t.Run("curl --http2", func(t *testing.T) {
			ca := filepath.Join(t.TempDir(), "ca.pem")
			os.WriteFile(ca, mitmCA.pem, 0o644)
			out, err := exec.Command(curl, "-sS", "--http2", "-x", "http://"+p.httpAddr(), "--cacert", ca,
				"-H", "Authorization: "+bearer, "-o", "/dev/null", "-w", "%{http_version} %{http_code}", "https://api.test/curl").CombinedOutput()
			if err != nil || string(out) != "2 200" {
				t.Fatalf("curl: %q %v", out, err)
			}
			if s := o.last(t); s.path != "/curl" || s.auth != "Bearer "+testRealCred || s.proto != "HTTP/2.0" {
				t.Fatalf("the origin saw %+v", s)
			}
		})
	}

	if ds := decisions.all(); len(ds) == 0 || ds[0].Protocol != protoHTTPSConnect {
		t.Fatalf("decisions %+v", ds)
	}
}

// TestNetProxyInterceptSocks: a SOCKS5 CONNECT to a credential host is intercepted too.
func TestNetProxyInterceptSocks(t *testing.T) {
	o := startTestOrigin(t)
	mitmCA := newTestCA(t, "masking test CA")
	p, _ := startInterceptProxy(t, o, mitmCA, "")
	su, _ := url.Parse("socks5h://" + p.socksAddr())
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(su),
		TLSClientConfig: &tls.Config{RootCAs: mitmCA.pool}, ForceAttemptHTTP2: true}}
	resp, _, err := doAuth(t, c, "GET", "https://api.test/socks", "Bearer "+testStandIn)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET over SOCKS5: %v %v", resp, err)
	}
	if s := o.last(t); s.auth != "Bearer "+testRealCred || s.path != "/socks" {
		t.Fatalf("the origin saw %+v", s)
	}
}

// TestNetProxyInterceptLimited: in limited mode a credential host's CONNECT is intercepted
// (other hosts keep mitm_required); inside, GET goes through with the swap, POST is refused
// with the mode guard's 403 body and a decision, and never reaches the origin; bytes other
// than TLS end the tunnel.
func TestNetProxyInterceptLimited(t *testing.T) {
	o := startTestOrigin(t)
	mitmCA := newTestCA(t, "masking test CA")
	p, decisions := startInterceptProxy(t, o, mitmCA, `{"mode":"limited","domains":{"*.test":"allow"}}`)
	c := mitmClient(p, mitmCA.pool, true)
	bearer := "Bearer " + testStandIn

	resp, _, err := doAuth(t, c, "GET", "https://api.test/g", bearer)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET: %v %v", resp, err)
	}
	if s := o.last(t); s.auth != "Bearer "+testRealCred || s.method != "GET" {
		t.Fatalf("the origin saw %+v", s)
	}
	before := len(o.all())
	resp, body, err := doAuth(t, c, "POST", "https://api.test/p", bearer)
	want := `{"status":"blocked","host":"api.test","reason":"method_not_allowed","decision":"deny","source":"mode_guard","protocol":"https","port":443,"message":"Method not allowed in limited mode."}`
	if err != nil || resp.StatusCode != 403 || body != want || resp.Header.Get("X-Proxy-Error") != "blocked-by-method-policy" {
		t.Fatalf("POST: %v %q %v", resp, body, err)
	}
	if n := len(o.all()) - before; n != 0 {
		t.Fatalf("the origin saw %d requests", n)
	}
	var refused []policyDecision
	for _, d := range decisions.all() {
		if d.Protocol == protoHTTPS {
			refused = append(refused, d)
		}
	}
	if len(refused) != 1 || refused[0].Method != "POST" || refused[0].Reason != reasonMethodNotAllowed || refused[0].Decision != decisionDeny || refused[0].Source != sourceModeGuard {
		t.Fatalf("decisions of inner requests %+v", refused)
	}
	// A host without a credential keeps mitm_required.
	if _, _, err := doAuth(t, mitmClient(p, o.ca.pool, false), "GET", "https://plain.test/", ""); err == nil {
		t.Fatal("CONNECT plain.test went through in limited mode")
	}
	// Plain bytes inside a credential host's tunnel end it: no opaque tunnel in limited mode.
	nc, err := net.Dial("tcp", p.httpAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	io.WriteString(nc, "CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\nGET / HTTP/1.0\r\n\r\n")
	br := bufio.NewReader(nc)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	if b, _ := io.ReadAll(br); len(b) != 0 {
		t.Fatalf("an opaque tunnel answered %q", b)
	}
}

// TestNetProxyInterceptClose: close with intercepted connections open (HTTP/1.1 keep-alive,
// HTTP/2, an upgraded tunnel) ends them all; goroutines and descriptors go back to baseline.
func TestNetProxyInterceptClose(t *testing.T) {
	o := startTestOrigin(t)
	mitmCA := newTestCA(t, "masking test CA")
	baseG, baseF := settle(runtime.NumGoroutine(), openFDs())
	p, _ := startInterceptProxy(t, o, mitmCA, "")
	var clients []*http.Client
	for _, h2 := range []bool{false, true} {
		c := mitmClient(p, mitmCA.pool, h2)
		clients = append(clients, c)
		if resp, _, err := doAuth(t, c, "GET", "https://api.test/k", "Bearer "+testStandIn); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET: %v %v", resp, err)
		}
	}
	ws, err := connectTLS(t, p, "api.test:443", "api.test", mitmCA.pool, "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(ws, "GET /ws HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(ws)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	p.close()
	// The proxy's end reaches the child's side: the upgraded tunnel reads its end.
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the upgraded tunnel is still open after close: %v", err)
	}
	ws.Close()
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	g, f := settle(baseG, baseF)
	t.Logf("after close: goroutines %d (baseline %d), fds %d (baseline %d)", g, baseG, f, baseF)
	if g > baseG {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines left:\n%s", g-baseG, buf[:runtime.Stack(buf, true)])
	}
	if f > baseF {
		t.Errorf("%d descriptors left", f-baseF)
	}
}

// TestUnmaskReader: the body scan gives strings.ReplaceAll's result however the body is cut
// into reads, and holds back only a tail that could start a real value.
func TestUnmaskReader(t *testing.T) {
	pairs := []unmaskPair{{[]byte("SECRETone"), []byte("standin1-longer")}, {[]byte("SEC2"), []byte("xx")}}
	in := "aSECRETonebSECRETSECRETonecSEC2SEC2SECRETon" + strings.Repeat("z", 200) + "SECRETone" + "SECRE"
	want := strings.NewReplacer("SECRETone", "standin1-longer", "SEC2", "xx").Replace(in)
	for cut := 1; cut <= len(in); cut++ {
		u := newUnmaskReader(io.NopCloser(&cutReader{s: in, n: cut}), pairs)
		got, err := io.ReadAll(u)
		if err != nil || string(got) != want {
			t.Fatalf("reads of %d: %q %v, want %q", cut, got, err, want)
		}
	}
	// A read that ends in text that cannot start a real value is passed on at once.
	pr, pw := io.Pipe()
	u := newUnmaskReader(pr, pairs)
	go pw.Write([]byte("data: event\n\n"))
	buf := make([]byte, 64)
	if n, err := u.Read(buf); err != nil || string(buf[:n]) != "data: event\n\n" {
		t.Fatalf("first read %q %v", buf[:n], err)
	}
	pw.Close()
}

// cutReader reads s n bytes at a time.
type cutReader struct {
	s string
	n int
}

func (r *cutReader) Read(b []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	n := copy(b[:min(len(b), r.n)], r.s)
	r.s = r.s[n:]
	return n, nil
}

// FuzzMITMPeek: the classification of a tunnel's first bytes never panics, calls TLS only
// a handshake record of version 3.0 to 1.3, asks for more bytes only while fewer than three
// could still open one, and gives the same answer on every longer input once it decided.
func FuzzMITMPeek(f *testing.F) {
	for _, s := range []string{"", "\x16", "\x16\x03", "\x16\x03\x01\x02\x00", "\x16\x03\x05", "GET / HTTP/1.1\r\n", "PRI * HTTP/2.0", "\x16\x02\x01", "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tlsLike, more := mitmClassify(b)
		if tlsLike && (len(b) < 3 || b[0] != 0x16 || b[1] != 3 || b[2] > 4) {
			t.Fatalf("%x called TLS", b)
		}
		if more && (len(b) >= 3 || len(b) > 0 && b[0] != 0x16 || len(b) > 1 && b[1] != 3) {
			t.Fatalf("%x asks for more", b)
		}
		if !more && !tlsLike && len(b) >= 3 && b[0] == 0x16 && b[1] == 3 && b[2] <= 4 {
			t.Fatalf("%x is a TLS record header", b)
		}
		for i := range len(b) {
			pt, pm := mitmClassify(b[:i])
			if !pm && (pt != tlsLike || more) {
				t.Fatalf("%x: prefix %d decided %v, the whole %v/%v", b, i, pt, tlsLike, more)
			}
		}
	})
}
