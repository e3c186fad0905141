package main

// Remote mode against a hostile registry and relay (docs/remote.md §3, §8; SECURITY.md §3):
// a validate-401 storm must not burn the Codex sign-in, no credential may reach a proxy for
// any spelling of localhost, a flood of malformed frames or refused handshakes must not fill
// the log, the validate calls a relay can draw are bounded, and a registry cannot aim the
// rendezvous dial at link-local or metadata addresses. Every test plays the hostile party on
// loopback against the real executor (runRemote).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hostileSetup starts an executor like startRemoteWith, but with a --remote URL of the test's
// making (remote turns the test registry's URL into it) and the log at a level of its choice.
type hostileSetup struct {
	remote func(registryURL string) string // nil: the registry's own URL
	env    func(string) (string, bool)
	flags  []string  // nil: --registration-bearer-stdin with TOKEN
	stdin  io.Reader // with flags
	level  logLevel
	opts   []remoteOption
	tls    bool                    // the registry over HTTPS (httptest's certificate: example.com, 127.0.0.1)
	before func(reg *testRegistry) // called before the configuration is read
}

func startHostile(t *testing.T, s hostileSetup) *remoteEnv {
	t.Helper()
	e := &remoteEnv{t: t, reg: newTestRegistryServer(t, s.tls), rv: newTestRendezvous(t), done: make(chan error, 1), logs: &remoteLog{written: make(chan struct{}, 1)}}
	e.reg.url = e.rv.url()
	if s.before != nil {
		s.before(e.reg)
	}
	flags, stdin := s.flags, s.stdin
	if flags == nil {
		flags, stdin = []string{"--registration-bearer-stdin"}, strings.NewReader("TOKEN\n")
	}
	env := s.env
	if env == nil {
		env = noEnv
	}
	remote := e.reg.srv.URL
	if s.remote != nil {
		remote = s.remote(remote)
	}
	cfg := testConfigEnv(t, remote, env, flags...)
	log := newTextLogger(e.logs, s.level)
	ctx, cancel := context.WithCancel(context.Background())
	srv := newServer(ctx, serverConfig{sessionTTL: defaultSessionTTL, retention: defaultRetention}, log)
	e.srv = srv
	for _, o := range s.opts {
		o(e, cfg)
	}
	go func() { e.done <- runRemote(ctx, cfg, srv, stdin, log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-e.done:
		case <-time.After(remoteTestTimeout):
			t.Error("runRemote did not return after cancel")
		}
		srv.shutdown()
		if g := relayGoroutines(); g != "" {
			t.Errorf("relay goroutines left after runRemote returned:\n%s", g)
		}
		if t.Failed() {
			t.Logf("executor log (%d bytes), first 4 KiB:\n%.4096s", len(e.logs.String()), e.logs.String())
		}
	})
	return e
}

// Row 1: a registry that answers 401 to every validate, with a relay sending one well-formed
// msg1 after another, must cost the sign-in at most one refresh: the token refreshed for the
// first 401 is not refreshed again when it is refused in turn, and the refusals count toward
// the failed-handshake pause. On 08cbb97 every handshake refreshed (and rewrote auth.json).
func TestRemoteHostileValidate401StormRefreshesOnce(t *testing.T) {
	const handshakes = 40
	te := newTokenEndpoint(t)
	old := chatGPTTestToken("acct-1", time.Now().Add(time.Hour), nil)
	home := writeAuthDoc(t, chatGPTAuthDoc(old, "rt-old", "acct-1"))
	e := startHostile(t, hostileSetup{flags: []string{}, env: envOf("CODEX_HOME", home), level: levelDebug,
		opts: []remoteOption{func(e *remoteEnv, _ *remoteConfig) {
			e.reg.validate = func(w http.ResponseWriter, _ map[string]json.RawMessage) { w.WriteHeader(http.StatusUnauthorized) }
		}}})
	h := e.harness()
	rejected, reset := 0, 0
	for i := range handshakes {
		switch _, err := h.open(fmt.Sprintf("storm-%d", i)); {
		case errors.Is(err, errNoiseRegistryRejected):
			rejected++
		case err != nil && err.Error() == "reset":
			reset++
		default:
			t.Fatalf("handshake %d under a validate 401: %v", i, err)
		}
	}
	refreshes := te.requests.Load()
	t.Logf("%d handshakes: %d answered with the registry rejection, %d reset; %d token refreshes, %d validate calls",
		handshakes, rejected, reset, refreshes, e.count("/validate"))
	if refreshes != 1 {
		t.Errorf("%d refresh_token exchanges under a validate-401 storm, want 1 (the first 401 only)", refreshes)
	}
	if got := readAuthJSON(t, home)["tokens"].(map[string]any)["refresh_token"]; got != "rt-new-1" {
		t.Errorf("auth.json refresh_token %v, want rt-new-1: rewritten once", got)
	}
	if rejected > relayMaxFailedHandshakes || reset < handshakes-relayMaxFailedHandshakes {
		t.Errorf("%d handshakes reached the registry, want at most %d before the pause", rejected, relayMaxFailedHandshakes)
	}
}

// Row 1, the rate limit itself: a token endpoint that hands out tokens already stale (so that
// every request wants a refresh) is asked once per codexRefreshMinInterval, and the requests
// go on with the current token meanwhile.
func TestCodexAuthRefreshRateLimit(t *testing.T) {
	te := newTokenEndpoint(t)
	home := t.TempDir()
	writeCodexAuth(t, home, chatGPTAuthDoc(chatGPTTestToken("acct-1", codexTestNow.Add(-time.Minute), nil), "rt-old", "acct-1"))
	later := func() time.Time { return codexTestNow.Add(2 * time.Hour) } // the endpoint's tokens expire at +1 h
	l, err := loadCodexLogin(home, nil, later)
	if err != nil {
		t.Fatal(err)
	}
	var last http.Header
	for i := range 20 {
		h, err := l.headers(context.Background())
		if err != nil {
			t.Fatalf("headers %d: %v", i, err)
		}
		if err := l.onUnauthorized(context.Background(), h); !errors.Is(err, errCodexRefreshTooSoon) {
			t.Fatalf("recovery %d: %v, want errCodexRefreshTooSoon", i, err)
		}
		last = h
	}
	if n := te.requests.Load(); n != 1 {
		t.Fatalf("%d token exchanges for 20 stale requests and 20 401s within the interval, want 1", n)
	}
	ageLastExchange(l)
	if err := l.onUnauthorized(context.Background(), last); err != nil || te.requests.Load() != 2 {
		t.Fatalf("after codexRefreshMinInterval: %v, %d exchanges; want a second one", err, te.requests.Load())
	}
}

// recordingProxy is a loopback "proxy" that records every byte it is sent and answers
// nothing useful.
type recordingProxy struct {
	ln  net.Listener
	mu  sync.Mutex
	got bytes.Buffer
	hit chan struct{} // a token on each connection
	wg  sync.WaitGroup
}

func newRecordingProxy(t *testing.T) *recordingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &recordingProxy{ln: ln, hit: make(chan struct{}, 64)}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(remoteTestTimeout))
				buf := make([]byte, 4096)
				n, _ := c.Read(buf)
				p.mu.Lock()
				p.got.Write(buf[:n])
				p.mu.Unlock()
				select { // after the bytes are recorded
				case p.hit <- struct{}{}:
				default:
				}
				io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *recordingProxy) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got.String()
}

// Row 2: with HTTP_PROXY and HTTPS_PROXY set, --remote http://<any spelling of localhost> and
// a rendezvous URL ws://<any spelling of localhost> go direct: the proxy receives nothing,
// neither the registration bearer nor a CONNECT. On 08cbb97 the upper-case spellings sent
// "Authorization: Bearer …" to the proxy.
func TestRemoteHostileNoCredentialToProxyForLocalhost(t *testing.T) {
	for _, tt := range []struct{ name, host, registryHost string }{
		{"localhost", "localhost", "localhost"},
		{"LOCALHOST", "LOCALHOST", "LOCALHOST"},
		{"LocalHost", "LocalHost", "LocalHost"},
		{"lOCALHOSt", "lOCALHOSt", "lOCALHOSt"},
		{"rendezvous only LOCALHOST", "LOCALHOST", "127.0.0.1"}, // a registry handing out ws://LOCALHOST
	} {
		host := tt.host
		t.Run(tt.name, func(t *testing.T) {
			proxy := newRecordingProxy(t)
			purl := "http://" + proxy.ln.Addr().String()
			// The executor reads the proxy variables through its configuration's environment;
			// they are set in the process too, for net/http's own reading (08cbb97 used it).
			for _, v := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
				t.Setenv(v, purl)
			}
			e := startHostile(t, hostileSetup{
				remote: func(u string) string { return strings.Replace(u, "127.0.0.1", tt.registryHost, 1) },
				env:    envOf("HTTP_PROXY", purl, "HTTPS_PROXY", purl, "http_proxy", purl, "https_proxy", purl),
				flags:  []string{"--registration-bearer-stdin"}, stdin: strings.NewReader("bearer-secret\n"),
				level: levelDebug,
				opts: []remoteOption{func(e *remoteEnv, _ *remoteConfig) {
					e.reg.url = strings.Replace(e.rv.url(), "127.0.0.1", host, 1)
				}},
			})
			select {
			case c := <-e.rv.conns:
				e.rv.conns <- c
			case <-proxy.hit:
				got := proxy.String()
				t.Fatalf("the proxy was sent %d bytes (bearer included: %v):\n%.300s", len(got), strings.Contains(got, "bearer-secret"), got)
			case <-time.After(remoteTestTimeout):
				t.Fatal("neither the rendezvous nor the proxy was reached")
			}
			e.harness().mustOpen("s-1").initialize()
			if got := proxy.String(); got != "" || len(proxy.hit) != 0 {
				t.Fatalf("the proxy received %d bytes (bearer included: %v):\n%.300s", len(got), strings.Contains(got, "bearer-secret"), got)
			}
			if e.count("/register") != 1 || e.count("/validate") != 1 {
				t.Fatalf("%d registrations and %d validations reached the registry directly, want 1 and 1", e.count("/register"), e.count("/validate"))
			}
		})
	}
}

// Row 2, the rule itself: a plain request is never handed to a proxy, loopback never goes
// through one, and NO_PROXY is honoured.
func TestRemoteProxyRule(t *testing.T) {
	c := &remoteConfig{lookupEnv: envOf("HTTPS_PROXY", "proxy.example:3128", "HTTP_PROXY", "http://proxy.example:3128", "NO_PROXY", "internal.example,10.0.0.0/8")}
	pick := c.remoteProxy()
	for _, tt := range []struct {
		url, want string
		err       bool
	}{
		{"https://registry.example/x", "http://proxy.example:3128", false},
		{"https://LOCALHOST:8443/x", "", false},
		{"http://LocalHost:8080/x", "", false},
		{"http://[::1]:8080/x", "", false},
		{"https://reg.internal.example/x", "", false},
		{"https://10.1.2.3/x", "", false},
		{"http://registry.example/x", "", true},
	} {
		req, _ := http.NewRequest(http.MethodGet, tt.url, nil)
		u, err := pick(req)
		got := ""
		if u != nil {
			got = u.String()
		}
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("%s: proxy %q, error %v; want %q, error %v", tt.url, got, err, tt.want, tt.err)
		}
	}
}

// Row 3: a relay sending a flood of two-byte malformed frames, then a storm of handshakes
// while handshakes are paused, gets a bounded log at the default level: a few lines per
// message and interval, and a count of the rest. On 08cbb97 each frame wrote a WARN line of
// about a hundred bytes, and each refused handshake an INFO line.
func TestRemoteHostileFloodLogIsBounded(t *testing.T) {
	const frames, refused = 20000, 2000
	const maxBytesPerEvent = 0.5
	e := startHostile(t, hostileSetup{level: levelInfo})
	h := e.harness()

	before := len(e.logs.String())
	bad := []byte{0x08, 0x02} // version 2: dropped
	for range frames {
		h.sendRaw(bad)
	}
	// The reader handles frames in order: once data for no stream draws its reset, every
	// malformed frame before it has been logged, or not.
	h.send(relayFrame{streamID: "sentinel", body: relayBodyData, segmentCount: 1, payload: []byte{1}})
	h.expectReset("sentinel")
	perFrame := float64(len(e.logs.String())-before) / frames
	t.Logf("%d malformed frames (%d bytes) wrote %d bytes of log: %.3f bytes per frame", frames, 2*frames,
		len(e.logs.String())-before, perFrame)

	for i := range relayMaxFailedHandshakes { // unsound msg1s pause the socket
		h.send(relayFrame{streamID: fmt.Sprintf("bad-%d", i), body: relayBodyHandshake, payload: []byte("x")})
		h.expectReset(fmt.Sprintf("bad-%d", i))
	}
	e.logs.waitFor(t, "pausing Noise relay handshakes")
	before = len(e.logs.String())
	for i := range refused {
		h.send(relayFrame{streamID: fmt.Sprintf("p-%d", i), body: relayBodyHandshake, payload: []byte("x")})
	}
	for i := range refused {
		h.expectReset(fmt.Sprintf("p-%d", i))
	}
	perRefusal := float64(len(e.logs.String())-before) / refused
	t.Logf("%d handshakes refused while paused wrote %d bytes of log: %.3f bytes each", refused,
		len(e.logs.String())-before, perRefusal)
	if perFrame > maxBytesPerEvent || perRefusal > maxBytesPerEvent {
		t.Fatalf("%.3f log bytes per malformed frame, %.3f per refused handshake; want at most %v", perFrame, perRefusal, maxBytesPerEvent)
	}
}

// Row 4: a relay that sends sound msg1s as fast as it can, for a harness the registry refuses,
// draws a bounded number of validate calls (each carrying our credential): the refusals
// count toward the pause, and the socket's validate rate is capped. On 08cbb97 the calls
// went on at the rate of the relay's messages (about 1,200 a second in the report).
func TestRemoteHostileValidateRateIsBounded(t *testing.T) {
	const storm = 1500 * time.Millisecond
	var calls atomic.Int32
	e := startHostile(t, hostileSetup{level: levelInfo, opts: []remoteOption{func(e *remoteEnv, _ *remoteConfig) {
		e.reg.validate = func(w http.ResponseWriter, _ map[string]json.RawMessage) {
			calls.Add(1)
			io.WriteString(w, `{"valid":false}`)
		}
	}}})
	h := e.harness()
	var ids []string
	start := time.Now()
	for i := 0; time.Since(start) < storm; i++ {
		id := fmt.Sprintf("s-%d", i)
		_, m := h.msg1(id, "harness-auth-token")
		h.send(relayFrame{streamID: id, body: relayBodyHandshake, payload: m})
		ids = append(ids, id)
		if len(ids) == relayMaxPendingValidations/2 {
			for _, id := range ids { // keep under the pending limit, so that each msg1 is considered
				h.expectReset(id)
			}
			ids = ids[:0]
		}
	}
	for _, id := range ids {
		h.expectReset(id)
	}
	elapsed := time.Since(start)
	n := int(calls.Load())
	bound := relayValidateBurst + int(elapsed.Seconds()*relayValidatePerSecond)
	t.Logf("handshakes for %v drew %d validate calls (%.1f/s); bound %d", elapsed.Round(time.Millisecond), n,
		float64(n)/elapsed.Seconds(), bound)
	if n > bound {
		t.Fatalf("%d validate calls in %v, want at most %d (burst %d + %d/s)", n, elapsed, bound, relayValidateBurst, relayValidatePerSecond)
	}
}

// Row 4, the rate when the registry accepts: harnesses that open streams at once are
// validated at most relayValidateBurst at a time, then relayValidatePerSecond, and all open.
func TestRemoteValidateRateAcceptedHarnesses(t *testing.T) {
	const streams = 16
	var mu sync.Mutex
	var at []time.Time
	e := startHostile(t, hostileSetup{level: levelInfo, opts: []remoteOption{func(e *remoteEnv, _ *remoteConfig) {
		e.reg.validate = func(w http.ResponseWriter, _ map[string]json.RawMessage) {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
			io.WriteString(w, `{"valid":true}`)
		}
	}}})
	h := e.harness()
	type pending struct {
		id string
		i  *noiseInitiator
	}
	var ps []pending
	for k := range streams {
		id := fmt.Sprintf("s-%d", k)
		i, m := h.msg1(id, "harness-auth-token")
		h.send(relayFrame{streamID: id, body: relayBodyHandshake, payload: m})
		ps = append(ps, pending{id, i})
	}
	for _, p := range ps {
		f := h.nextFrame(p.id)
		if f.body != relayBodyHandshake {
			t.Fatalf("stream %s: %v, want msg2", p.id, f.body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// Within any one second at most burst + rate calls.
	for i := range at {
		n := 0
		for _, b := range at[i:] {
			if b.Sub(at[i]) < time.Second {
				n++
			}
		}
		if n > relayValidateBurst+relayValidatePerSecond {
			t.Fatalf("%d validate calls within one second, want at most %d", n, relayValidateBurst+relayValidatePerSecond)
		}
	}
}

// Row 4, the decay: failures spread out are forgotten, a burst pauses.
func TestRelayFailureBudgetDecays(t *testing.T) {
	var b failureBudget
	now := time.Unix(1_800_000_000, 0)
	for i := range 10 * relayMaxFailedHandshakes {
		if b.add(now.Add(time.Duration(i) * relayFailureDecay)) {
			t.Fatalf("failure %d, one per relayFailureDecay, paused the socket", i)
		}
	}
	b = failureBudget{}
	for i := range relayMaxFailedHandshakes - 1 {
		if b.add(now.Add(time.Duration(i) * time.Millisecond)) {
			t.Fatalf("failure %d of a burst paused early", i)
		}
	}
	if !b.add(now.Add(time.Second)) {
		t.Fatalf("%d failures within a second did not pause", relayMaxFailedHandshakes)
	}
}

// addLoopbackAddr puts addr on the loopback interface for the test, so that a listener can
// stand in for a metadata or link-local service; it skips where that cannot be done.
func addLoopbackAddr(t *testing.T, cidr string) {
	t.Helper()
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("no ip command to put a test address on lo")
	}
	args := []string{"addr", "add", cidr, "dev", "lo"}
	if strings.Contains(cidr, ":") {
		args = append(args, "nodad") // usable at once, not tentative
	}
	out, err := exec.Command(ip, args...).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "File exists") {
		t.Skipf("cannot add %s to lo (root needed): %v %s", cidr, err, out)
	}
	t.Cleanup(func() { exec.Command(ip, "addr", "del", cidr, "dev", "lo").Run() })
}

// Row 5: a registry (on loopback) that hands out a wss:// rendezvous URL at a link-local or
// metadata address is refused before a TCP connection is made: a listener on that address
// (put on lo for the test) sees no connection. On 08cbb97 the executor connected and tried
// TLS there.
func TestRemoteHostileRendezvousAddressRefused(t *testing.T) {
	for _, tt := range []struct{ name, cidr, host string }{
		{"link-local", "169.254.77.1/32", "169.254.77.1"},
		{"metadata", "100.100.100.200/32", "100.100.100.200"},
		{"metadata v6", "fd00:ec2::254/128", "[fd00:ec2::254]"},
		{"private from loopback", "10.254.77.1/32", "10.254.77.1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addLoopbackAddr(t, tt.cidr)
			ln, err := net.Listen("tcp", net.JoinHostPort(strings.Trim(tt.host, "[]"), "0"))
			if err != nil {
				t.Skipf("listen on %s: %v", tt.host, err)
			}
			var accepted atomic.Int32
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					accepted.Add(1)
					c.Close()
				}
			}()
			t.Cleanup(func() { ln.Close(); <-done })
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			e := startHostile(t, hostileSetup{level: levelInfo, opts: []remoteOption{func(e *remoteEnv, _ *remoteConfig) {
				e.reg.url = "wss://" + net.JoinHostPort(strings.Trim(tt.host, "[]"), port) + "/relay?sig=SECRETSIG"
			}}})
			e.logs.waitFor(t, "rendezvous connection failed")
			if n := accepted.Load(); n != 0 {
				t.Fatalf("the executor connected %d times to %s, a %s address handed out by a loopback registry", n, tt.host, tt.name)
			}
			if !strings.Contains(e.logs.String(), errRendezvousAddr.Error()) {
				t.Fatalf("the log does not say the address was refused")
			}
		})
	}
}

// Row 5, the rule: public addresses always; the others only from a registry on the same kind
// of network, so a self-hosted registry on 10.x keeps its 10.x rendezvous.
func TestRendezvousAddrRule(t *testing.T) {
	set := func(cs ...addrClass) *addrClassSet {
		s := new(addrClassSet)
		for _, c := range cs {
			s.add(c)
		}
		return s
	}
	for _, tt := range []struct {
		addr    string
		reached *addrClassSet
		ok      bool
	}{
		{"93.184.216.34", set(addrLoopback), true},
		{"2606:2800:220:1::1", set(addrPublic), true},
		{"10.1.2.3", set(addrPrivate), true},
		{"10.1.2.3", set(addrPublic), false},
		{"192.168.1.5", set(addrLoopback), false},
		{"100.101.102.103", set(addrPrivate), true}, // a tailnet
		{"127.0.0.1", set(addrLoopback), true},
		{"127.0.0.1", set(addrPublic), false},
		{"169.254.169.254", set(addrPublic, addrPrivate, addrLoopback), false},
		{"169.254.10.10", set(addrPrivate), false},
		{"169.254.10.10", set(addrLinkLocal), true},
		{"fe80::1", set(addrPublic), false},
		{"::ffff:169.254.169.254", set(addrPublic), false},
		{"100.100.100.200", set(addrPrivate), false},
		{"fd00:ec2::254", set(addrPrivate), false},
		{"168.63.129.16", set(addrPublic), false},
		{"0.0.0.0", set(addrLoopback), false},
		{"224.0.0.1", set(addrPublic, addrPrivate), false},
		{"64:ff9b::a9fe:a9fe", set(addrPublic), false}, // NAT64 of 169.254.169.254
		{"64:ff9b::a00:1", set(addrPublic), false},     // NAT64 of 10.0.0.1
		{"64:ff9b::5db8:d822", set(addrPublic), true},  // NAT64 of 93.184.216.34
	} {
		err := rendezvousAddrAllowed(netip.MustParseAddr(tt.addr), tt.reached)
		if (err == nil) != tt.ok {
			t.Errorf("%s from a registry on %b: %v, want allowed=%v", tt.addr, tt.reached.bits.Load(), err, tt.ok)
		}
	}
}

// Row 3, the size of a line: the throttle bounds lines, and a line must be bounded too. A
// stream_id may be relayMaxStreamID bytes (about 190 KB) of the relay's choosing, and every
// line about a handshake names it: a relay sending unsound handshakes with such ids (failed
// handshakes, then a pause and refusals during it) must get short lines. On f79d9f1
// each of the throttled lines quoted the whole id, escaped: about 760 KB a line, some
// 10 lines per message per 10 s, a megabyte of log a second for as long as the relay goes on.
func TestRemoteHostileLongStreamIDLogIsBounded(t *testing.T) {
	const frames = 3 * relayMaxFailedHandshakes
	const maxLogBytes = 64 << 10
	e := startHostile(t, hostileSetup{level: levelInfo, opts: []remoteOption{func(e *remoteEnv, _ *remoteConfig) {
		e.reg.validate = func(w http.ResponseWriter, _ map[string]json.RawMessage) { io.WriteString(w, `{"valid":false}`) }
	}}})
	h := e.harness()
	longID := func(i int) string { return fmt.Sprintf("%04d", i) + strings.Repeat("\x01", relayMaxStreamID-4) }
	before := len(e.logs.String())
	sent := 0
	for i := range frames { // unsound msg1s: failed handshakes, a pause, refusals during it
		id := longID(i)
		h.send(relayFrame{streamID: id, body: relayBodyHandshake, payload: []byte("x")})
		h.expectReset(id)
		sent += len(id)
	}
	logged := len(e.logs.String()) - before
	t.Logf("%d handshakes with %d-byte stream ids (%d bytes sent) wrote %d bytes of log", frames, relayMaxStreamID, sent, logged)
	if logged > maxLogBytes {
		t.Fatalf("%d bytes of log for %d handshakes with long stream ids, want at most %d", logged, frames, maxLogBytes)
	}
}

// Row 5, through a proxy: only an address written in the rendezvous URL can be checked there,
// since the proxy resolves what it is given, so every spelling of an address must be caught,
// not only the one netip reads. A proxy resolving with getaddrinfo (inet_aton) takes
// 2852039166, 0xa9fea9fe, 0251.0376.0251.0376, 169.254.43518 or 169.16689662 for
// 169.254.169.254. A loopback registry handing out such a wss:// URL, with HTTPS_PROXY set,
// must send the proxy nothing. On f79d9f1 the proxy was asked to CONNECT to each.
func TestRemoteHostileRendezvousAddressSpellingsThroughProxy(t *testing.T) {
	for _, host := range []string{"2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "169.254.43518", "169.16689662",
		"0xa9.0xfe.0xa9.0xfe", "169.254.169.254.", "[::ffff:a9fe:a9fe]", "[64:ff9b::a9fe:a9fe]"} {
		t.Run(host, func(t *testing.T) {
			proxy := newRecordingProxy(t)
			purl := "http://" + proxy.ln.Addr().String()
			e := startHostile(t, hostileSetup{level: levelInfo, env: envOf("HTTPS_PROXY", purl),
				opts: []remoteOption{func(e *remoteEnv, _ *remoteConfig) {
					e.reg.url = "wss://" + host + ":443/relay?sig=SECRETSIG"
				}}})
			e.logs.waitFor(t, "rendezvous connection failed")
			if got := proxy.String(); got != "" {
				t.Fatalf("the proxy was asked for %s by a loopback registry:\n%.200s", host, got)
			}
			if !strings.Contains(e.logs.String(), errRendezvousAddr.Error()) {
				t.Fatalf("the log does not say the address was refused")
			}
		})
	}
}

// Row 5, the host of the URL: names pass (the dial checks what they resolve to), addresses
// follow the rule, and numeric spellings that are not plain addresses are refused.
func TestRendezvousHostRule(t *testing.T) {
	loopback := new(addrClassSet)
	loopback.add(addrLoopback)
	for _, tt := range []struct {
		host string
		ok   bool
	}{
		{"relay.example.com", true},
		{"1e100.net", true},
		{"relay-0x1.example", true},
		{"127.0.0.1", true},
		{"localhost", true},
		{"93.184.216.34.", true},
		{"169.254.169.254", false},
		{"169.254.169.254.", false},
		{"2852039166", false},
		{"0XA9FEA9FE", false},
		{"0251.0376.0251.0376", false},
		{"169.254.43518", false},
		{"relay.example.0x10", false},
	} {
		if err := rendezvousHostAllowed(tt.host, loopback); (err == nil) != tt.ok {
			t.Errorf("%s: %v, want allowed=%v", tt.host, err, tt.ok)
		}
	}
}

// Row 2, the wording: a websocket dial that the proxy rule refuses (a plain ws:// URL to
// another host with HTTP_PROXY set) says so, and never quotes the proxy variable. On f79d9f1
// it said the proxy variable was not a valid URL, whatever the reason.
func TestRemoteProxyRefusalWording(t *testing.T) {
	c := &remoteConfig{lookupEnv: envOf("HTTP_PROXY", "http://user:pw-secret@proxy.invalid:3128")}
	_, _, err := dialWebsocket(context.Background(), "ws://relay.invalid/relay?sig=SECRETSIG", nil, nil, wsOptions{proxy: c.remoteProxy()})
	if err == nil || !strings.Contains(err.Error(), "refusing to send an unencrypted request (http or ws)") ||
		strings.Contains(err.Error(), "pw-secret") || strings.Contains(err.Error(), "SECRETSIG") {
		t.Fatalf("dial refused by the proxy rule: %v; want the refusal, without the proxy's password or the query", err)
	}
}

// tunnelProxy is a loopback HTTP CONNECT proxy that tunnels every CONNECT, whatever its
// target, to one address: it stands in for a proxy that resolves a registry's name.
type tunnelProxy struct {
	ln       net.Listener
	connects atomic.Int32
	wg       sync.WaitGroup
}

func newTunnelProxy(t *testing.T, to string) *tunnelProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tunnelProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil || req.Method != http.MethodConnect {
					return
				}
				p.connects.Add(1)
				up, err := net.Dial("tcp", to)
				if err != nil {
					return
				}
				defer up.Close()
				io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
				go func() { io.Copy(up, br); up.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, up)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

// Row 5, a registry behind a proxy: the executor reaches the proxy, not the registry, so the
// proxy's address (here loopback, as a local forwarding proxy is) says nothing of the
// registry's network. A registry reached as https://example.com through a loopback
// HTTPS_PROXY that hands out a loopback rendezvous URL is refused: the loopback rendezvous
// sees no connection. On f79d9f1 the proxy's loopback address counted as the registry's, and
// the executor connected to whatever loopback port the registry named.
func TestRemoteHostileRendezvousLoopbackViaProxiedRegistry(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	var proxy *tunnelProxy
	e := startHostile(t, hostileSetup{tls: true, level: levelInfo,
		remote: func(u string) string { return strings.Replace(u, "127.0.0.1", "example.com", 1) },
		flags:  []string{"--registration-bearer-stdin", "--remote-ca", ca}, stdin: strings.NewReader("TOKEN\n"),
		env: func(k string) (string, bool) {
			if k == "HTTPS_PROXY" {
				return "http://" + proxy.ln.Addr().String(), true
			}
			return "", false
		},
		before: func(reg *testRegistry) {
			os.WriteFile(ca, pemCert(reg.srv.Certificate().Raw), 0o600)
			proxy = newTunnelProxy(t, reg.srv.Listener.Addr().String())
		},
	})
	select {
	case c := <-e.rv.conns:
		e.rv.conns <- c
		t.Fatalf("the executor connected to the loopback rendezvous %s named by a registry it reached through %d proxy CONNECTs",
			e.rv.url(), proxy.connects.Load())
	case <-waitLog(e.logs, "rendezvous connection failed"):
	case <-time.After(remoteTestTimeout):
		t.Fatal("the rendezvous dial neither connected nor failed")
	}
	if proxy.connects.Load() == 0 {
		t.Fatal("the registry was not reached through the proxy")
	}
	if !strings.Contains(e.logs.String(), errRendezvousAddr.Error()) {
		t.Fatal("the log does not say the address was refused")
	}
}

// waitLog is closed once the log contains text; it gives up after remoteTestTimeout.
func waitLog(l *remoteLog, text string) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		timeout := time.After(remoteTestTimeout)
		for !strings.Contains(l.String(), text) {
			select {
			case <-l.written:
			case <-timeout:
				return
			}
		}
		close(c)
	}()
	return c
}

// Row 5, the direct transport: its registry names the websocket too, and the upgrade carries
// the executor's SigV4 headers, so the same address rule holds. A loopback registry handing
// out a link-local endpoint (put on lo for the test) is refused before a connection is made.
// On f79d9f1 the direct transport did not apply the rule and connected.
func TestRemoteHostileDirectAddressRefused(t *testing.T) {
	addLoopbackAddr(t, "169.254.77.2/32")
	ln, err := net.Listen("tcp", "169.254.77.2:0")
	if err != nil {
		t.Skipf("listen on 169.254.77.2: %v", err)
	}
	var accepted atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	d := newTestDirect(t)
	d.answers = []func(w http.ResponseWriter){func(w http.ResponseWriter) {
		json.NewEncoder(w).Encode(map[string]string{"environment_id": "env-test-1", "transport": "direct_jsonrpc_v1",
			"registration_id": "dreg-1", "url": "wss://" + ln.Addr().String() + "/ws?sig=SECRETSIG"})
	}}
	d.start()
	d.logs.waitFor(t, "direct connection failed")
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the direct transport connected %d times to %s, a link-local address named by a loopback registry", n, ln.Addr())
	}
	if !strings.Contains(d.logs.String(), errRendezvousAddr.Error()) {
		t.Fatal("the log does not say the address was refused")
	}
}

// Row 2 and 5, a plain ws:// rendezvous: allowed for a loopback host only, so its dial must
// end on loopback whatever the name resolves to (a host without localhost in /etc/hosts asks
// DNS). The control refuses any other address for it, even one the registry's network allows.
func TestRendezvousControlPlainIsLoopbackOnly(t *testing.T) {
	reached := new(addrClassSet)
	reached.add(addrLoopback)
	reached.add(addrPrivate)
	for _, tt := range []struct {
		addr  string
		plain bool
		ok    bool
	}{
		{"127.0.0.1:80", true, true},
		{"[::1]:80", true, true},
		{"[::ffff:127.0.0.1]:80", true, true},
		{"10.0.0.7:80", true, false},
		{"93.184.216.34:80", true, false},
		{"10.0.0.7:443", false, true},
	} {
		if err := rendezvousControl(reached, tt.plain)("tcp", tt.addr, nil); (err == nil) != tt.ok {
			t.Errorf("%s (plain %v): %v, want allowed=%v", tt.addr, tt.plain, err, tt.ok)
		}
	}
}
