package main

// A cold review of the relay's hardening (docs/remote.md §12.5, SECURITY.md §3.1): each test
// here shows a place where the relay does not do what those sections say, through a real
// relay process (relayd_test.go's startRelayProcess) or, where the test must move the relay's
// clock or read which connections it holds, a relay served in this process on a real
// listener. Real sockets throughout.
//
// A new file: the reviewer's tests, kept apart from the relay's own and the adversary's
// (adv24_test.go).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestReview24EnvironmentTokensShareOneScope: every per-environment harness token of one
// environment is named "env:harness:ID" (relaydConfig.perEnvironment), and the caps that
// are meant to keep one token's holder from denying another's count by that name. Two
// holders of two different tokens minted for box-pe (say two users a broker gave one each)
// are one token to the relay: bob's 64 connects forget alice's bundle, so her socket is
// refused (the break TestAdv24ConnectFloodEvictsAnotherTokensBundle fixed for static
// tokens). The same name shares max_connections_per_token (256 sockets) between them.
func TestReview24EnvironmentTokensShareOneScope(t *testing.T) {
	f := newRelaydFixture(t, "")
	_, base := startRelayProcess(t, f, "127.0.0.1:0")
	startAdv24Executor(t, base, "box-pe", f.fleet)
	raw, err := os.ReadFile(filepath.Join(f.dir, "env.secret"))
	if err != nil {
		t.Fatal(err)
	}
	secret := bytes.TrimSpace(raw)
	now := time.Now()
	aliceTok := relaydMintToken(secret, relaydRoleHarness, "box-pe", now.Add(time.Hour))
	bobTok := relaydMintToken(secret, relaydRoleHarness, "box-pe", now.Add(2*time.Hour))
	if aliceTok == bobTok {
		t.Fatal("the two minted tokens are the same")
	}
	alice := newRelaydHarnessClient(t, base, aliceTok)
	b := alice.connect("box-pe")
	bob := newRelaydHarnessClient(t, base, bobTok)
	for range relaydMaxTokenAuthorizations {
		if status, v := relaydPost(t, nil, base, "box-pe", "connect", bobTok, map[string]any{"harness_public_key": bob.id.publicKey()}); status != http.StatusOK {
			t.Fatalf("bob's connect: %d %v", status, v)
		}
	}
	if _, err := alice.dial(b); err != nil {
		t.Errorf("alice's socket, with the bundle of her own token: %v: bob's %d connects with another token forgot it", err, relaydMaxTokenAuthorizations)
	}
}

// TestReview24OneTokenTakesEveryStreamSlot: SECURITY.md §3.1 says one token's holder cannot
// deny another's, but max_streams_per_environment is one pool for every token of the
// environment, and a stream takes a slot once the executor answers it, which it does for
// any holder of a connect bundle. Mallory (a connect token of her own) opens as many real
// streams as the pool holds (4 here; the default 128 is the same with more handshakes) and
// keeps them; alice's stream is then reset stream_limit.
func TestReview24OneTokenTakesEveryStreamSlot(t *testing.T) {
	const slots = 4
	f, toks := adv24Fixture(t, map[string][2][]string{
		"exec": {{"box-*"}, nil}, "alice": {nil, {"box-*"}}, "mallory": {nil, {"box-*"}}}, fmt.Sprintf(`,"max_streams_per_environment":%d`, slots))
	_, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-pool", toks["exec"])
	m := newRelaydHarnessClient(t, base, toks["mallory"])
	mb := m.connect("box-pool")
	mh, err := m.dial(mb)
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for i := range slots {
		// Since the fix, a token holds at most its share of the slots: the streams past it
		// are refused (stream_limit).
		if _, err := relaydOpenStream(mh, mb, fmt.Sprintf("m-%d", i), mb.Authorization); err != nil {
			t.Logf("mallory's stream %d: %v", i, err)
			continue
		}
		held++
	}
	if held == 0 {
		t.Fatal("mallory opened no stream")
	}
	alice := newRelaydHarnessClient(t, base, toks["alice"])
	ab := alice.connect("box-pool")
	ah, err := alice.dial(ab)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relaydOpenStream(ah, ab, "a-1", ab.Authorization); err != nil {
		t.Errorf("alice's stream: %v: mallory's %d streams, one token, hold every slot of the environment", err, held)
	}
}

// TestReview24BadHandshakesPauseEveryHarness: the executor pauses every handshake on its
// socket for 10 s after relayMaxFailedHandshakes (8) failed ones (relay_demux.go, as the
// reference does, against a relay that sends garbage). Behind this relay one executor socket
// carries every harness of the environment, and the relay forwards any harness's Handshake
// frames: mallory, with a connect bundle, sends 8 msg1 that are not Noise (8 is also her
// socket's per-socket bound of unanswered streams then), and alice's stream, opened right after with a sound
// handshake and a good bundle, is refused. Mallory can do it again every 10 s.
func TestReview24BadHandshakesPauseEveryHarness(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{
		"exec": {{"box-*"}, nil}, "alice": {nil, {"box-*"}}, "mallory": {nil, {"box-*"}}}, "")
	_, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-pause", toks["exec"])
	m := newRelaydHarnessClient(t, base, toks["mallory"])
	mb := m.connect("box-pause")
	mh, err := m.dial(mb)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 96)
	rand.Read(junk)
	for i := range relayMaxFailedHandshakes {
		id := fmt.Sprintf("m-%d", i)
		mh.send(relayFrame{streamID: id, body: relayBodyResume})
		mh.send(relayFrame{streamID: id, body: relayBodyHandshake, payload: junk})
	}
	for i := range relayMaxFailedHandshakes {
		if fr := mh.nextFrame(fmt.Sprintf("m-%d", i)); fr.body != relayBodyReset {
			t.Fatalf("mallory's junk handshake %d: %v, want a reset", i, fr.body)
		}
	}
	alice := newRelaydHarnessClient(t, base, toks["alice"])
	ab := alice.connect("box-pause")
	ah, err := alice.dial(ab)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relaydOpenStream(ah, ab, "a-1", ab.Authorization); err != nil {
		t.Errorf("alice's stream, right after mallory's %d junk handshakes: %v: one harness paused the executor for every other", relayMaxFailedHandshakes, err)
	}
}

// review24Listener hands out connections that say when the relay first read a byte from
// them.
type review24Listener struct {
	net.Listener
	firstRead chan struct{} // closed at the first read of the first connection that has one
	once      atomic.Bool
}

func (l *review24Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &review24Conn{Conn: c, l: l}, nil
}

type review24Conn struct {
	net.Conn
	l *review24Listener
}

func (c *review24Conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.l.once.CompareAndSwap(false, true) {
		close(c.l.firstRead)
	}
	return n, err
}

// review24Closes counts the connections it accepted that were closed.
type review24Closes struct {
	net.Listener
	closed atomic.Int64
}

func (l *review24Closes) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &review24ClosesConn{Conn: c, l: l}, nil
}

type review24ClosesConn struct {
	net.Conn
	l    *review24Closes
	once sync.Once
}

func (c *review24ClosesConn) Close() error {
	c.once.Do(func() { c.l.closed.Add(1) })
	return c.Conn.Close()
}

// review24InProcess serves a relay in this process on ln, on a clock skewed by *skew, until
// the test ends.
func review24InProcess(t *testing.T, f *relaydFixture, ln net.Listener, skew *atomic.Int64) *relayd {
	t.Helper()
	cfg, err := loadRelaydConfig(f.config)
	if err != nil {
		t.Fatal(err)
	}
	d := newRelayd(cfg, "http://"+ln.Addr().String(), newTextLogger(io.Discard, levelInfo))
	d.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay serve: %v", err)
		}
	})
	return d
}

// review24Get sends GET /readyz on c and reads the answer.
func review24Get(c net.Conn, br *bufio.Reader) (*http.Response, error) {
	c.SetDeadline(time.Now().Add(remoteTestTimeout))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /readyz HTTP/1.1\r\nHost: relay\r\n\r\n"); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// TestReview24PartialHeadCountedSilent: docs/remote.md §12.5 closes "a connection silent 3 s
// after it opened" when a new one comes, and relaydPending.fresh says "no byte of a request
// read yet"; but net/http reports a connection active only once its whole request head is
// read, so a client that has sent (and the relay has read) most of its head is closed as
// silent. On TLS the handshake counts too. The relay's clock is moved 4 s instead of waiting.
func TestReview24PartialHeadCountedSilent(t *testing.T) {
	f := newRelaydFixture(t, "")
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &review24Listener{Listener: raw, firstRead: make(chan struct{})}
	var skew atomic.Int64
	review24InProcess(t, f, ln, &skew)
	addr := raw.Addr().String()

	a, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := io.WriteString(a, "POST /cloud/environment/box-1/register HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ln.firstRead: // the relay has read the start of a's request
	case <-time.After(remoteTestTimeout):
		t.Fatal("the relay read nothing of the request")
	}
	skew.Store(int64(relaydFirstByteTimeout + time.Second))

	b, err := net.Dial("tcp", addr) // a new connection: its admission sweeps the silent ones
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if resp, err := review24Get(b, bufio.NewReader(b)); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the second connection's /readyz: %v %v", resp, err)
	}

	a.SetDeadline(time.Now().Add(remoteTestTimeout))
	_, werr := io.WriteString(a, "Content-Length: 2\r\n\r\n{}")
	resp, rerr := http.ReadResponse(bufio.NewReader(a), nil)
	if rerr != nil {
		t.Errorf("a request whose head was being sent (and read) %v ago on the relay's clock was cut when another connection came: write %v, read %v", relaydFirstByteTimeout+time.Second, werr, rerr)
		return
	}
	resp.Body.Close()
	t.Logf("the slow request was answered %s", resp.Status)
}

// TestReview24EvictionWithoutAdmission: with relaydMaxPending connections held, a new one
// from a source that holds relaydMaxPendingPerSource busy connections (no idle one of its
// own) makes admitLocked close the oldest idle connection of another source, and is then
// closed itself because its source is at its cap: an honest client's connection is closed
// and nobody is admitted. Each further connection from that source closes one more.
func TestReview24EvictionWithoutAdmission(t *testing.T) {
	f := newRelaydFixture(t, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var skew atomic.Int64
	d := review24InProcess(t, f, ln, &skew)
	addr := ln.Addr().String()
	dialFrom := func(src string) net.Conn {
		t.Helper()
		dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := dl.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial from %s: %v", src, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// pendingOf counts the connections the relay holds not upgraded from src, and how many
	// of them are idle.
	pendingOf := func(src string) (n, idle int) {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, p := range d.pending {
			if p.source == src {
				n++
				if p.phase != relaydPhaseBusy {
					idle++
				}
			}
		}
		return n, idle
	}
	await := func(src string, n, idle int) {
		t.Helper()
		deadline := time.Now().Add(remoteTestTimeout)
		for {
			gn, gi := pendingOf(src)
			if gn == n && gi == idle {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the relay holds %d connections (%d idle), want %d (%d idle)", src, gn, gi, n, idle)
			}
			time.Sleep(5 * time.Millisecond) // connState has no event the test can wait on
		}
	}

	// 127.0.0.2 holds its 256 busy: each sent a request head, with a valid token, whose body
	// never comes (busy for the relay's ReadTimeout, 20 s; without a token the relay answers
	// 401 and closes the connection at once).
	const busySrc = "127.0.0.2"
	for range relaydMaxPendingPerSource {
		c := dialFrom(busySrc)
		if _, err := io.WriteString(c, "POST /cloud/environment/box-1/register HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer "+f.fleet+"\r\nContent-Length: 100\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	await(busySrc, relaydMaxPendingPerSource, 0)
	// Three other sources hold the rest, kept alive between requests (idle).
	var honest []net.Conn
	var readers []*bufio.Reader
	for i := range (relaydMaxPending - relaydMaxPendingPerSource) / relaydMaxPendingPerSource {
		src := fmt.Sprintf("127.0.0.%d", 3+i)
		for range relaydMaxPendingPerSource {
			c := dialFrom(src)
			br := bufio.NewReader(c)
			if resp, err := review24Get(c, br); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("an honest /readyz from %s: %v %v", src, resp, err)
			}
			honest, readers = append(honest, c), append(readers, br)
		}
		await(src, relaydMaxPendingPerSource, relaydMaxPendingPerSource)
	}

	// One more from the busy source.
	extra := dialFrom(busySrc)
	extra.SetReadDeadline(time.Now().Add(remoteTestTimeout))
	if n, err := extra.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the connection past its source's cap read %d bytes, want it closed", n)
	}
	lost := 0
	for i, c := range honest {
		if _, err := review24Get(c, readers[i]); err != nil {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("a connection from %s, closed for its source's cap, also closed %d idle connection(s) of other sources", busySrc, lost)
	}
}

// TestReview24BusyConnectionsLockOut: past relaydMaxPending the relay closes the oldest idle
// connection, and the new one "only when all are busy"; but anyone, with no token, makes a
// connection busy for the relay's ReadTimeout (20 s) by sending a request head whose body
// never comes (net/http discards the body before it writes the 401), and opens it again when
// it ends. From four source addresses (256 each; on IPv6 one host has a /64 of them) 1,024
// such connections turn away the executor that comes to register with a valid token: the
// lock-out of TestAdv24PendingConnectionsLockOut, with busy connections instead of silent
// ones.
func TestReview24BusyConnectionsLockOut(t *testing.T) {
	f := newRelaydFixture(t, "")
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &review24Closes{Listener: raw}
	var skew atomic.Int64
	d := review24InProcess(t, f, ln, &skew)
	addr := ln.Addr().String()
	start := time.Now()
	for i := range relaydMaxPending / relaydMaxPendingPerSource {
		dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.0.%d", 2+i))}}
		for range relaydMaxPendingPerSource {
			c, err := dl.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if _, err := io.WriteString(c, "POST /cloud/environment/box-1/register HTTP/1.1\r\nHost: relay\r\nContent-Length: 100\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(remoteTestTimeout)
	// Each is busy, or was answered and closed already (the relay answers 401 without
	// waiting for the body).
	for busy := 0; busy+int(ln.closed.Load()) < relaydMaxPending; {
		d.mu.Lock()
		busy = 0
		for _, p := range d.pending {
			if p.phase == relaydPhaseBusy {
				busy++
			}
		}
		d.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections busy, %d closed", busy, relaydMaxPending, ln.closed.Load())
		}
		time.Sleep(5 * time.Millisecond) // connState has no event the test can wait on
	}
	t.Logf("%d connections announced a body that never comes, %v after the first (%d closed by the relay); no token", relaydMaxPending, time.Since(start).Round(time.Millisecond), ln.closed.Load())

	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()})
	refused := 0
	for range 5 {
		req, _ := http.NewRequest("POST", "http://"+addr+"/cloud/environment/box-1/register", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+f.fleet)
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			refused++
			t.Logf("the executor's register: %v", err)
			continue
		}
		resp.Body.Close()
		t.Logf("the executor's register: %s", resp.Status)
	}
	if took := time.Since(start); took >= relaydHeaderTimeout+relaydBodyTimeout {
		t.Fatalf("the test took %v, past the busy connections' ReadTimeout: no verdict", took)
	}
	if refused > 0 {
		t.Errorf("%d of 5 registers with a valid token were cut off while %d connections of nobody waited for their bodies", refused, relaydMaxPending)
	}
}

// TestReview24TokenRegistrationsOutnumberItsSockets: a token may hold
// max_registrations_per_token (1,024) registrations, but its executor sockets count against
// max_connections_per_token (256). With the defaults and the setup of docs/remote.md 12.1
// (one "executors" token for every executor), the 257th executor registers (200) and its
// rendezvous upgrade is refused 429 for as long as the others are up: a registration the
// relay lets the token hold can never be served.
func TestReview24TokenRegistrationsOutnumberItsSockets(t *testing.T) {
	f := newRelaydFixture(t, "")
	_, base := startRelayProcess(t, f, "127.0.0.1:0")
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
	defer cancel()
	for i := range relaydDefaultConnectionsPerToken + 1 {
		envID := fmt.Sprintf("box-%d", i)
		status, v := relaydPost(t, nil, base, envID, "register", f.fleet, body)
		if status != http.StatusOK {
			t.Fatalf("register %s: %d %v", envID, status, v)
		}
		ws, resp, err := dialWebsocket(ctx, v["url"].(string), nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage})
		if err != nil {
			st := 0
			if resp != nil {
				st = resp.StatusCode
			}
			t.Errorf("executor %d of the token's %d allowed registrations: registered, but its socket: %v (status %d)", i+1, relaydDefaultRegistrationsPerToken, err, st)
			return
		}
		t.Cleanup(ws.closeTCP)
	}
}

// review24HWM is a process's peak resident memory (VmHWM) in KiB.
func review24HWM(t *testing.T, p *relaydProc) int {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var kib int
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kib)
			return kib
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestReview24HarnessQueuesHoldTheRelaysMemory: each harness socket's outbound queue holds
// up to relaydQueueFrames frames (4 MiB), copied, and nothing bounds their sum: one token's
// sockets (256 allowed; 64 here) that do not read, while the executor sends
// on their streams, make the relay hold 64 x 4 MiB at once, over issue 24's budget of
// 200 MiB for a relay carrying 1,000 streams. relaydMaxSockets (16,384) such queues are
// 64 GiB: one token's holder can take the memory every environment on the relay needs.
func TestReview24HarnessQueuesHoldTheRelaysMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("312 MiB through the relay: about a minute under -race")
	}
	const sockets = 64
	f, toks := adv24Fixture(t, map[string][2][]string{"exec": {{"box-*"}, nil}, "mallory": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	exec := startAdv24Executor(t, base, "box-mem", toks["exec"])
	mallory := newRelaydHarnessClient(t, base, toks["mallory"])
	ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
	defer cancel()
	// Small receive buffers and segments, so that the kernel takes little of what the relay
	// sends them and the test need send little more than the queues hold.
	small := func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 1024)
		})
	}
	for i := range sockets {
		// A bundle for each socket: since the fix, one ticket opens relaydMaxTicketSockets.
		mb := mallory.connect("box-mem")
		ws, _, err := dialWebsocket(ctx, mb.URL, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage, control: small})
		if err != nil {
			t.Fatalf("mallory's socket %d: %v", i, err)
		}
		t.Cleanup(ws.closeTCP)
		if err := ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: fmt.Sprintf("m-%d", i), body: relayBodyResume})); err != nil {
			t.Fatal(err)
		}
	}
	for range sockets {
		select {
		case <-exec.opened:
		case <-time.After(remoteTestTimeout):
			t.Fatal("the executor did not see every stream")
		}
	}
	before := review24HWM(t, relay)
	// The executor sends on every stream in turn, a few frames more than each queue takes.
	payload := make([]byte, 250<<10)
	rounds := relaydQueueFrames + 4
	start := time.Now()
	for r := range rounds {
		for i := range sockets {
			if err := exec.send(relayFrame{streamID: fmt.Sprintf("m-%d", i), body: relayBodyData, seq: uint32(r + 1), segmentCount: 1, payload: payload}); err != nil {
				t.Fatalf("the executor's send: %v", err)
			}
		}
	}
	after := review24HWM(t, relay)
	t.Logf("the executor sent %d MiB on %d streams whose harness sockets do not read, in %v; relay peak RSS %d MiB before, %d MiB after",
		rounds*sockets*len(payload)>>20, sockets, time.Since(start).Round(time.Millisecond), before>>10, after>>10)
	if grew := (after - before) >> 10; grew >= 200 {
		t.Errorf("one token's %d unread harness sockets grew the relay's peak RSS by %d MiB (issue 24's budget: 200 MiB for 1,000 streams)", sockets, grew)
	}
}
