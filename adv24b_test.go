package main

// The second adversary's tests of `exec-server relay` (docs/remote.md §12), after the fixes
// of the first (adv24_test.go): a holder of a token, or of no token at all, tries to get
// around each fix and to deny service to the holders of other tokens. The relay and the
// executor are real processes (relayd_test.go's startRelayProcess and startRelayExecutor);
// every verdict is read on the host: what the honest client got, the relay's and the
// executor's logs, the relay process's fds, threads and RSS (/proc).
//
// A new file: these tests are the second adversary's, kept apart from the first's
// (adv24_test.go) and from the relay's own (relayd_test.go).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestAdv24bFailedHandshakesPauseEveryHarness: the executor pauses every handshake of its
// socket for 10 s after 8 failed ones (relayMaxFailedHandshakes, handshakePause), and behind
// the relay every harness of an environment shares that one executor socket. Mallory, with a
// connect token of her own, sends 8 handshakes whose message 1 is not Noise, again every
// 200 ms: Alice, with another token and a good bundle, is refused every stream she opens.
func TestAdv24bFailedHandshakesPauseEveryHarness(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{
		"exec": {{"box-*"}, nil}, "alice": {nil, {"box-*"}}, "mallory": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	execP := startRelayExecutor(t, base, "box-pause", toks["exec"])
	alice := newRelaydHarnessClient(t, base, toks["alice"])
	ab := alice.connect("box-pause")
	ah, err := alice.dial(ab)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relaydOpenStream(ah, ab, "a-0", ab.Authorization); err != nil {
		t.Fatalf("alice's first stream, before mallory: %v", err)
	}
	mallory := newRelaydHarnessClient(t, base, toks["mallory"])
	mh, err := mallory.dial(mallory.connect("box-pause"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("relay before: %s", adv24Status(relay))

	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() { // mallory: a batch of 8 bad handshakes every 200 ms, until stop
		defer close(stopped)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			for i := range relayMaxFailedHandshakes {
				id := fmt.Sprintf("m-%d-%d", n, i)
				for _, fr := range []relayFrame{{streamID: id, body: relayBodyResume}, {streamID: id, body: relayBodyHandshake, payload: []byte("not noise")}} {
					fr.version = relayFrameVersion
					mh.ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &fr)) // a refused one is harmless to her
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	// Alice opens a stream every 500 ms for 12 s: past one whole pause (10 s).
	const tries = 24
	served := 0
	var refusals []string
	start := time.Now()
	for i := range tries {
		if _, err := relaydOpenStream(ah, ab, fmt.Sprintf("a-%d", i+1), ab.Authorization); err != nil {
			refusals = append(refusals, err.Error())
		} else {
			served++
		}
		time.Sleep(500 * time.Millisecond) // alice's pace: the attack is as good at any pace
	}
	close(stop)
	<-stopped
	pauses := strings.Count(execP.stderr.String(), "pausing Noise relay handshakes")
	t.Logf("over %v: alice served %d of %d streams (refused: %q); the executor logged %d pauses; relay after: %s",
		time.Since(start).Round(time.Millisecond), served, tries, uniqueStrings(refusals), pauses, adv24Status(relay))
	if served < tries {
		t.Errorf("alice, with a good bundle of her own token, was refused %d of %d streams: mallory's bad handshakes pause the executor socket every harness shares", tries-served, tries)
	}
}

// uniqueStrings is the distinct values of ss, in their first order.
func uniqueStrings(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// adv24bBusyConns opens n connections from source address src to addr, each sending a whole
// request head that announces a body it never sends: net/http reads that body (to keep the
// connection) after the handler's answer, so the connection is active, not idle, until the
// relay's read timeout (20 s). No token is needed.
func adv24bBusyConns(t *testing.T, src, addr string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	var cs []net.Conn
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d from %s: %v", len(cs), src, err)
		}
		if _, err := c.Write([]byte("POST /cloud/environment/box-1/register HTTP/1.1\r\nHost: relay\r\nContent-Length: 65536\r\n\r\n")); err != nil {
			t.Fatalf("connection %d from %s: %v", len(cs), src, err)
		}
		cs = append(cs, c)
	}
	return cs
}

// adv24bAwaitFDs waits until process pid holds at least n fds (the accept loop has no event
// a test can wait on), or until answered says the relay answered and closed them all
// instead, up to remoteTestTimeout.
func adv24bAwaitFDs(pid, n int, answered func() bool) int {
	deadline := time.Now().Add(remoteTestTimeout)
	for {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if len(fds) >= n || answered() || time.Now().After(deadline) {
			return len(fds)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// adv24bRegister sends one register with a fresh connection; it returns the status or the
// transport error.
func adv24bRegister(base, envID, bearer string) string {
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		return err.Error()
	}
	body, _ := json.Marshal(map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()})
	req, _ := http.NewRequest("POST", base+"/cloud/environment/"+envID+"/register", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return "error: " + err.Error()
	}
	resp.Body.Close()
	return resp.Status
}

// TestAdv24bBusyConnectionsLockOut: the fix of TestAdv24PendingConnectionsLockOut closes the
// oldest *idle* connection to admit a new one, and the new one when every other is busy. A
// connection that sent a request head announcing a body is busy for the relay's read timeout
// (20 s). From 4 source addresses (127.0.0.2-5 on loopback; any IPv6 host has a /64 of them),
// 256 each, 1024 such connections and no token: the executor's register with its valid token
// is closed unanswered.
func TestAdv24bBusyConnectionsLockOut(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{"fleet": {{"box-*"}, nil}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	before := adv24Status(relay)
	fds0, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", relay.cmd.Process.Pid))
	addr := strings.TrimPrefix(base, "http://")
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	start := time.Now()
	for i := range relaydMaxPending / relaydMaxPendingPerSource {
		conns = append(conns, adv24bBusyConns(t, fmt.Sprintf("127.0.0.%d", i+2), addr, relaydMaxPendingPerSource)...)
	}
	var ended atomic.Int64 // connections the relay closed (after answering them)
	for _, c := range conns {
		go func() { // ends when the relay or the cleanup closes c
			io.Copy(io.Discard, c)
			ended.Add(1)
		}()
	}
	got := adv24bAwaitFDs(relay.cmd.Process.Pid, len(fds0)+len(conns), func() bool { return ended.Load() == int64(len(conns)) })
	t.Logf("%d busy connections from 4 sources, no token, opened in %v; relay fds %d → %d, %d closed by the relay; relay before: %s; now: %s",
		len(conns), time.Since(start).Round(time.Millisecond), len(fds0), got, ended.Load(), before, adv24Status(relay))
	refused := 0
	for range 5 {
		st := adv24bRegister(base, "box-1", toks["fleet"])
		if !strings.HasPrefix(st, "200") {
			refused++
		}
		t.Logf("the executor's register, %v into the attack: %s", time.Since(start).Round(time.Millisecond), st)
	}
	if refused > 0 {
		t.Errorf("%d of 5 registers with a valid token were cut off while %d connections of nobody, from 4 addresses, announced bodies they never sent", refused, len(conns))
	}
}

// adv24bHandshakesPerSocket is how many unanswered handshakes the attack keeps on each of its
// sockets: the relay's per-socket bound when the attack was found (8); the relay now bounds
// them per token over all its sockets (relaydMaxUnansweredPerToken).
const adv24bHandshakesPerSocket = 8

// adv24bSoundHandshakes keeps, on each of socks harness sockets of mallory's (one bundle,
// reused: a ticket opens sockets for its 5 minutes), adv24bHandshakesPerSocket handshakes in
// flight: each a sound Noise message 1 of her own key and bundle, reset as soon as the
// executor answers it, and opened again. None fails, so no pause; they hold the executor
// socket's /validate budget (relayMaxPendingValidations in flight, relayValidatePerSecond).
// It returns the count of handshakes answered; stop ends it.
func adv24bSoundHandshakes(t *testing.T, c *relaydHarnessClient, b relaydBundle, socks int, stop chan struct{}) (answered func() int, wait func()) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	var wg sync.WaitGroup
	for s := range socks {
		h, err := c.dial(b)
		if err != nil {
			t.Fatalf("mallory's socket %d: %v", s, err)
		}
		for w := range adv24bHandshakesPerSocket {
			wg.Add(1)
			go func() { // one of mallory's handshakers: ends at stop or with her socket
				defer wg.Done()
				for k := 0; ; k++ {
					id := fmt.Sprintf("m-%d-%d-%d", s, w, k)
					i, err := newNoiseInitiator(c.id, b.ExecutorKey, noisePrologue(b.EnvironmentID, b.RegID, id))
					if err != nil {
						return
					}
					m, err := i.initiate([]byte(b.Authorization))
					if err != nil {
						return
					}
					for _, fr := range []relayFrame{{streamID: id, body: relayBodyResume}, {streamID: id, body: relayBodyHandshake, payload: m}} {
						fr.version = relayFrameVersion
						if h.ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &fr)) != nil {
							return
						}
					}
					select {
					case fr := <-h.frames(id):
						if fr.body == relayBodyHandshake {
							mu.Lock()
							n++
							mu.Unlock()
						}
					case <-h.ended:
						return
					case <-stop:
						return
					}
					fr := relayFrame{version: relayFrameVersion, streamID: id, body: relayBodyReset, reason: "done"}
					h.ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &fr))
				}
			}()
		}
	}
	return func() int { mu.Lock(); defer mu.Unlock(); return n }, wg.Wait
}

// TestAdv24bSoundHandshakesStarveValidation: the executor validates at most 32 handshakes of
// its socket at a time, 4 a second, and behind the relay every harness of an environment
// shares that socket. Mallory, with a connect token of her own, keeps 32 sound handshakes in
// flight (4 harness sockets, 8 each: the relay's cap per socket) and resets each once it is
// answered: none fails, so nothing pauses, and the fix of the failure pause would not touch
// it. Alice, with another token, opens streams meanwhile: refused ("too many pending
// validations"), or answered after the queue of mallory's handshakes.
func TestAdv24bSoundHandshakesStarveValidation(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{
		"exec": {{"box-*"}, nil}, "alice": {nil, {"box-*"}}, "mallory": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	execP := startRelayExecutor(t, base, "box-starve", toks["exec"])
	alice := newRelaydHarnessClient(t, base, toks["alice"])
	ab := alice.connect("box-starve")
	ah, err := alice.dial(ab)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := relaydOpenStream(ah, ab, "a-0", ab.Authorization); err != nil {
		t.Fatalf("alice's first stream, before mallory: %v", err)
	}
	alone := time.Since(t0)
	t.Logf("alice's stream before mallory: %v; relay: %s", alone.Round(time.Millisecond), adv24Status(relay))

	mallory := newRelaydHarnessClient(t, base, toks["mallory"])
	stop := make(chan struct{})
	answered, wait := adv24bSoundHandshakes(t, mallory, mallory.connect("box-starve"), relayMaxPendingValidations/adv24bHandshakesPerSocket, stop)
	// Alice opens a stream every 250 ms, 16 times, each waited for in full.
	const tries = 16
	var refusals []string
	var slowest time.Duration
	start := time.Now()
	for i := range tries {
		time.Sleep(250 * time.Millisecond) // alice's pace; the first lets mallory's queue fill
		t1 := time.Now()
		_, err := relaydOpenStream(ah, ab, fmt.Sprintf("a-%d", i+1), ab.Authorization)
		took := time.Since(t1)
		slowest = max(slowest, took)
		if err != nil {
			refusals = append(refusals, err.Error())
		}
	}
	close(stop)
	wait()
	elog := execP.stderr.String()
	t.Logf("over %v: mallory's handshakes answered %d; alice refused %d of %d (%q), slowest answer %v; executor log lines (throttled) \"too many pending validations\": %d, pauses: %d; relay after: %s",
		time.Since(start).Round(time.Millisecond), answered(), len(refusals), tries, uniqueStrings(refusals), slowest.Round(time.Millisecond),
		strings.Count(elog, "too many pending validations"), strings.Count(elog, "pausing Noise relay handshakes"), adv24Status(relay))
	if len(refusals) > 0 {
		t.Errorf("alice, with a good bundle of her own token, was refused %d of %d streams: mallory's sound handshakes hold the executor socket's validations", len(refusals), tries)
	}
	// Behind at most 4 of mallory's at the executor's 4 validations a second, about 1 s; the
	// bound is wide because the verdict is a count of handshakes waited behind, not a speed,
	// and a loaded 2-core machine (the race detector, other tests) stretches the second.
	if limit := 4*time.Second + alone; slowest > limit {
		t.Errorf("alice's handshake waited %v behind mallory's (it took %v alone; want at most %v)", slowest.Round(time.Millisecond), alone.Round(time.Millisecond), limit)
	}
}

// TestAdv24bOneTokenHoldsEveryStream: the fix of TestAdv24StreamSlotsTakenByOneHarness counts
// a stream in max_streams_per_environment (128) once the executor answers it, and an honest
// executor answers every sound handshake of a harness the relay vouches for. Mallory, with a
// connect token of her own, completes 128 handshakes on one socket and keeps the streams (a
// frame now and then keeps the socket from its idle timeout): Alice, with another token, can
// open none. The relay has no share per token of an environment's streams.
func TestAdv24bOneTokenHoldsEveryStream(t *testing.T) {
	if testing.Short() {
		t.Skip("128 handshakes at the executor's 4 validations a second")
	}
	f, toks := adv24Fixture(t, map[string][2][]string{
		"exec": {{"box-*"}, nil}, "alice": {nil, {"box-*"}}, "mallory": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-hog", toks["exec"])
	mallory := newRelaydHarnessClient(t, base, toks["mallory"])
	mb := mallory.connect("box-hog")
	mh, err := mallory.dial(mb)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	held := 0
	for i := range relaydDefaultStreamsPerEnvironment {
		if _, err := relaydOpenStream(mh, mb, fmt.Sprintf("m-%d", i), mb.Authorization); err != nil {
			t.Logf("mallory's stream %d: %v", i, err)
			continue
		}
		held++
	}
	t.Logf("mallory holds %d streams, opened in %v on one socket; relay: %s", held, time.Since(start).Round(time.Millisecond), adv24Status(relay))
	alice := newRelaydHarnessClient(t, base, toks["alice"])
	ab := alice.connect("box-hog")
	ah, err := alice.dial(ab)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for i := range 3 {
		_, err := relaydOpenStream(ah, ab, fmt.Sprintf("a-%d", i), ab.Authorization)
		t.Logf("alice's stream %d: %v", i, err)
		if err != nil {
			refused++
		}
	}
	if refused > 0 {
		t.Errorf("alice, with a good bundle of her own token, was refused %d of 3 streams while mallory's one token holds %d", refused, held)
	}
}

// TestAdv24bPerEnvironmentTokensShareABudget: the fixes of the connect flood and of the
// socket limit count per token *name*, and every per-environment token of one environment
// and role has the same name (env:harness:ID), whoever it was minted for and whatever its
// expiry. Mallory, given a harness token for box-1 of her own, asks 64 bundles: the one
// Alice, given another, was handed just before is forgotten, and her socket refused.
func TestAdv24bPerEnvironmentTokensShareABudget(t *testing.T) {
	secret := randomRelaydID("", 32)
	f, toks := adv24Fixture(t, map[string][2][]string{"exec": {{"box-*"}, nil}}, `,"environment_token_secret_file":"env.secret"`)
	if err := os.WriteFile(f.dir+"/env.secret", []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-1", toks["exec"])
	// Two holders, two tokens (different expiries, as a broker mints them).
	aliceTok := relaydMintToken([]byte(secret), relaydRoleHarness, "box-1", time.Now().Add(time.Hour))
	malloryTok := relaydMintToken([]byte(secret), relaydRoleHarness, "box-1", time.Now().Add(2*time.Hour))
	alice := newRelaydHarnessClient(t, base, aliceTok)
	ab := alice.connect("box-1")
	mallory := newRelaydHarnessClient(t, base, malloryTok)
	for range relaydMaxTokenAuthorizations {
		if status, v := relaydPost(t, nil, base, "box-1", "connect", malloryTok, map[string]any{"harness_public_key": mallory.id.publicKey()}); status != http.StatusOK {
			t.Fatalf("mallory's connect: %d %v", status, v)
		}
	}
	t.Logf("mallory, with a token of her own, asked %d bundles; relay: %s", relaydMaxTokenAuthorizations, adv24Status(relay))
	if _, err := alice.dial(ab); err != nil {
		t.Errorf("alice's socket with the bundle she was just given: %v (mallory's connects, with another token, evicted it: both are named env:harness:box-1)", err)
	}
}

// TestAdv24bLeakedTicketLocksOutItsToken: a connect bundle's ticket opens any number of
// harness sockets for its 5 minutes, each counted against the token that asked for the
// bundle, and a socket opened lives on past the ticket as long as something comes on it (a
// text message, dropped, still pushes its idle deadline back). Eve holds no token, only the
// URL of one of Alice's bundles (a rendezvous URL carries its ticket in the query, which a
// reverse proxy's access log records by default): she opens max_connections_per_token (256)
// sockets with it, and Alice's own token can open no socket, with any bundle, while Eve
// keeps them.
func TestAdv24bLeakedTicketLocksOutItsToken(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{"exec": {{"box-*"}, nil}, "alice": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-1", toks["exec"])
	alice := newRelaydHarnessClient(t, base, toks["alice"])
	leaked := alice.connect("box-1")
	t.Logf("relay before: %s", adv24Status(relay))
	eve := &relaydHarnessClient{t: t, base: base, http: http.DefaultClient} // no token
	opened := 0
	for range relaydDefaultConnectionsPerToken {
		h, err := eve.dial(leaked)
		if err != nil {
			t.Logf("eve's socket %d: %v", opened, err)
			break
		}
		if err := h.ws.writeMessageOp(wsOpText, []byte("keep me")); err != nil { // what she would send every few minutes
			t.Fatal(err)
		}
		opened++
	}
	t.Logf("eve, with no token, opened %d sockets with one leaked ticket of alice's; relay: %s", opened, adv24Status(relay))
	fresh := alice.connect("box-1")
	if _, err := alice.dial(fresh); err != nil {
		t.Errorf("alice's socket with a fresh bundle of her own token: %v: eve's sockets, opened with a leaked ticket, count against alice's token", err)
	}
}

// TestAdv24bBusyPeerLosesItsEnvironments: in a fleet, a node's view of a peer is its /readyz
// probe, which comes in as a new connection like any other. Nobody (no token) holds n2's
// 1024 pending connections busy (TestAdv24bBusyConnectionsLockOut): n1's probes of n2 are
// closed, n1 leaves n2 out and takes n2's environments for its own while their executors
// stay connected to n2. A harness's connect through n1 for such an environment is then
// answered 404 not_registered (which the real harness takes as final for its session,
// docs/remote.md 12.7), not forwarded.
func TestAdv24bBusyPeerLosesItsEnvironments(t *testing.T) {
	addrs := relaydFreePorts(t, 2)
	peers := `,"peers":[{"id":"n1","url":"http://` + addrs[0] + `"},{"id":"n2","url":"http://` + addrs[1] + `"}]`
	f, toks := adv24Fixture(t, map[string][2][]string{"exec": {{"box-*"}, nil}, "alice": {nil, {"box-*"}}}, peers)
	_, b1 := startRelayProcess(t, f, addrs[0], "--node-id", "n1")
	r2, b2 := startRelayProcess(t, f, addrs[1], "--node-id", "n2")
	relaydAwaitLive(t, b1, []string{"n1", "n2"})
	relaydAwaitLive(t, b2, []string{"n1", "n2"})
	ps := []relaydPeer{{"n1", b1}, {"n2", b2}}
	envID := ""
	for i := 0; envID == ""; i++ {
		if o, _ := relaydOwner(ps, fmt.Sprintf("box-%d", i), func(string) bool { return true }); o.ID == "n2" {
			envID = fmt.Sprintf("box-%d", i)
		}
	}
	startRelayExecutor(t, b2, envID, toks["exec"])
	alice := newRelaydHarnessClient(t, b1, toks["alice"])
	b := alice.connect(envID) // through n1, forwarded to n2
	if !strings.HasPrefix(b.URL, "ws://"+addrs[1]) {
		t.Fatalf("the bundle names %s, not n2", b.URL)
	}
	if _, err := relaydOpenStream(func() *testHarness {
		h, err := alice.dial(b)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}(), b, "a-0", b.Authorization); err != nil {
		t.Fatalf("alice's stream before the attack: %v", err)
	}
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	start := time.Now()
	for i := range relaydMaxPending / relaydMaxPendingPerSource {
		conns = append(conns, adv24bBusyConns(t, fmt.Sprintf("127.0.0.%d", i+2), addrs[1], relaydMaxPendingPerSource)...)
	}
	// n1 probes every second; its view is read on its /readyz (not attacked).
	var live []string
	for time.Since(start) < 5*time.Second {
		live, _ = relaydReadyz(b1)
		if len(live) == 1 {
			break
		}
		time.Sleep(50 * time.Millisecond) // the probe has no event to wait on from outside
	}
	t.Logf("%v after %d busy connections to n2 (no token): n1 sees %v live; n2: %s", time.Since(start).Round(time.Millisecond), len(conns), live, adv24Status(r2))
	status, v := relaydPost(t, nil, b1, envID, "connect", toks["alice"], map[string]any{"harness_public_key": alice.id.publicKey()})
	t.Logf("alice's connect through n1 for %s (its executor still on n2), %v into the attack: %d %v", envID, time.Since(start).Round(time.Millisecond), status, v)
	if status == http.StatusNotFound {
		t.Errorf("n1 answered 404 for %s, whose executor is registered and connected on n2: a peer's busy connections split the fleet", envID)
	}
}

// TestAdv24bReadingHarnessStallClosed: the fix of TestAdv24SlowHarnessStallsOtherStreams
// closes a harness socket whose outbound queue (16 frames) stays full for 250 ms
// (docs/remote.md 12.5 says so). What that means for an honest harness: one that reads at
// full speed, but whose command writes faster than its link carries, is cut off by any
// hiccup of 250 ms on its path (a lost packet's retransmission, a radio handover), all its
// streams reset, though it was reading and no one else was waiting on it (the environment
// has no other stream). Before the fix the bound was the 10 s write timeout. Alice stops
// reading until the executor's writes stop advancing for 100 ms, then 200 ms more, then
// reads on; the stall is logged (0.44 s without -race; longer under it, where the
// executor's own send buffer hides the relay's wait, so its writes go on past the close).
func TestAdv24bReadingHarnessStallClosed(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{"exec": {{"box-*"}, nil}, "alice": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	exec := startAdv24Executor(t, base, "box-stall", toks["exec"])
	ab := newRelaydHarnessClient(t, base, toks["alice"]).connect("box-stall")
	ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
	defer cancel()
	ws, _, err := dialWebsocket(ctx, ab.URL, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ws.closeTCP)
	if err := ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: "s-1", body: relayBodyResume})); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exec.opened:
	case <-time.After(remoteTestTimeout):
		t.Fatal("the executor did not see the stream")
	}
	// The command's output: 48 MiB in 192 KiB frames, after the handshake.
	const chunk, chunks = 192 << 10, 256
	var written atomic.Int64
	sent := make(chan error, 1)
	go func() { // the executor's writer: ends after its frames or at the first error
		payload := make([]byte, chunk)
		for i := range chunks {
			if err := exec.send(relayFrame{streamID: "s-1", body: relayBodyData, seq: uint32(i + 1), segmentCount: 1, payload: payload}); err != nil {
				sent <- err
				return
			}
			written.Add(1)
		}
		sent <- nil
	}()
	got, ended := 0, ""
	var stalled time.Duration
	var ahead int64
	const stallAt = 8
	start := time.Now()
	for got < chunks {
		op, data, err := ws.readFrameMessage()
		if err != nil {
			ended = " (socket ended: " + err.Error() + ")"
			break
		}
		if op != wsOpBinary {
			continue
		}
		fr, err := decodeRelayFrame(data)
		if err != nil {
			continue
		}
		switch fr.body {
		case relayBodyData:
			got++
			if got != stallAt {
				continue
			}
			s0 := time.Now()
			for last, since := written.Load(), time.Now(); time.Since(since) < 100*time.Millisecond; {
				time.Sleep(5 * time.Millisecond) // the executor's blocked write has no event to wait on
				if n := written.Load(); n != last {
					last, since = n, time.Now()
				}
			}
			ahead = written.Load() - stallAt
			time.Sleep(200 * time.Millisecond) // the hiccup past a full queue
			stalled = time.Since(s0)
		case relayBodyReset:
			ended += " reset " + fr.reason
		}
	}
	t.Logf("alice read %d of %d frames in %v; she stalled %v after frame %d (it ended %d frames, %d MiB, past her: its writes stopped for 100 ms, then 200 ms more)%s; relay: %s",
		got, chunks, time.Since(start).Round(time.Millisecond), stalled.Round(time.Millisecond), stallAt, ahead, ahead*chunk>>20, ended, adv24Status(relay))
	if got < chunks {
		t.Errorf("alice, reading at full speed but for one stall, got %d of %d frames of her command's output: the relay closed her socket", got, chunks)
	}
	exec.ws.closeTCP()
	<-sent
}

// TestAdv24bManyUnreadSocketsStallEveryStream: the fix of TestAdv24SlowHarnessStallsOtherStreams
// bounds what one harness socket that does not read costs the others: the executor
// socket's reader waits 250 ms on its full queue, then closes it. The bound is per socket,
// and a token holds 256. Mallory (a connect token of her own) opens 40 sockets, one stream
// each, with a small receive buffer, and reads none; the executor sends each stream some
// output (40 frames of 16 KiB, 25 MiB in all), then one frame to Alice, who reads. Alice's
// frame waits 250 ms per socket of mallory's (the relay's fds show them closed): 10 s, 64 s
// with 256, and Mallory can open them again (with an honest executor, at its 4 handshakes
// a second: 4 × 250 ms, the executor socket's reader is held all the time).
func TestAdv24bManyUnreadSocketsStallEveryStream(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{
		"exec": {{"box-*"}, nil}, "alice": {nil, {"box-*"}}, "mallory": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	exec := startAdv24Executor(t, base, "box-many", toks["exec"])
	const socks, frames, chunk = 40, 40, 16 << 10
	mallory := newRelaydHarnessClient(t, base, toks["mallory"])
	// Mallory's choice: a receive buffer of 4 KiB, and an Ethernet-sized segment (loopback's
	// 64 KiB one would make the relay's send buffer, sized in segments, hold megabytes).
	small := func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) {
			if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10); serr == nil {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 1400)
			}
		})
		return serr
	}
	for i := range socks {
		mb := mallory.connect("box-many") // a bundle per socket: one opens relaydMaxTicketSockets
		ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
		ws, _, err := dialWebsocket(ctx, mb.URL, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage, control: small})
		cancel()
		if err != nil {
			t.Fatalf("mallory's socket %d: %v", i, err)
		}
		t.Cleanup(ws.closeTCP)
		if err := ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: fmt.Sprintf("m-%d", i), body: relayBodyResume})); err != nil {
			t.Fatal(err)
		}
		<-exec.opened
	}
	alice := newRelaydHarnessClient(t, base, toks["alice"])
	ah, err := alice.dial(alice.connect("box-many"))
	if err != nil {
		t.Fatal(err)
	}
	ah.send(relayFrame{streamID: "a-1", body: relayBodyResume})
	if fr := ah.nextFrame("a-1"); fr.body != relayBodyHandshake {
		t.Fatalf("a-1: %v, want the handshake", fr.body)
	}
	t.Logf("relay before: %s", adv24Status(relay))
	start := time.Now()
	sent := make(chan error, 1)
	go func() { // the executor's writer: ends after its frames or at the first error
		payload := make([]byte, chunk)
		for i := range socks {
			for k := range frames {
				if err := exec.send(relayFrame{streamID: fmt.Sprintf("m-%d", i), body: relayBodyData, seq: uint32(k + 1), segmentCount: 1, payload: payload}); err != nil {
					sent <- err
					return
				}
			}
		}
		sent <- exec.send(relayFrame{streamID: "a-1", body: relayBodyData, seq: 1, segmentCount: 1, payload: []byte("hello")})
	}()
	var took time.Duration
	select {
	case fr := <-ah.frames("a-1"):
		took = time.Since(start)
		t.Logf("alice's frame (%v) arrived %v after the executor began; relay: %s", fr.body, took.Round(time.Millisecond), adv24Status(relay))
	case <-time.After(remoteTestTimeout):
		took = remoteTestTimeout
		t.Logf("alice's frame did not arrive within %v", remoteTestTimeout)
	}
	// One token's unread sockets hold the executor's reader relaydQueueWait, then its next
	// ones are closed at once (relaydQueueCooldown); the rest is carrying the bytes.
	if bound := 2*relaydQueueWait + time.Second; took > bound {
		t.Errorf("alice's frame waited %v behind %d sockets of mallory's that do not read (%d MiB carried), past %v: the per-socket wait adds up per token", took.Round(time.Millisecond), socks, socks*frames*chunk>>20, bound)
	}
	exec.ws.closeTCP()
	<-sent
}

// TestAdv24bLeakedExecutorURLTakesTheEnvironment: an executor's rendezvous URL carries its
// registration's secret in the query (sig=…), good until the environment registers again,
// and a new executor socket with it replaces the one up (docs/remote.md 12.3; the executor
// reconnects with the same URL). Eve holds no token, only that URL (a reverse proxy's access
// log records the query by default): she dials it, the relay closes the executor's own
// socket, and the harnesses' handshakes come to her.
func TestAdv24bLeakedExecutorURLTakesTheEnvironment(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{"exec": {{"box-*"}, nil}, "alice": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	exec := startAdv24Executor(t, base, "box-take", toks["exec"])
	// The URL the executor was answered: registered again here by the test, as the executor
	// would after a restart, so that the test holds it.
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	status, v := relaydPost(t, nil, base, "box-take", "register", toks["exec"], map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()})
	if status != http.StatusOK {
		t.Fatalf("register: %d %v", status, v)
	}
	leaked := v["url"].(string)
	<-exec.stopped // the earlier registration's socket is closed by the new registration
	dial := func() *wsConn {
		ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
		defer cancel()
		ws, _, err := dialWebsocket(ctx, leaked, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ws.closeTCP)
		return ws
	}
	honest := dial()
	honestEnded := make(chan error, 1)
	honestGot := make(chan string, 16)
	go func() { // the honest executor's reader: ends when the relay closes its socket
		for {
			op, data, err := honest.readFrameMessage()
			if err != nil {
				honestEnded <- err
				return
			}
			if fr, err := decodeRelayFrame(data); err == nil && op == wsOpBinary {
				select {
				case honestGot <- fmt.Sprintf("%v on %s", fr.body, fr.streamID):
				default:
				}
			}
		}
	}()
	// Eve: no token, the URL alone. A relay that keeps a live executor's socket refuses her.
	ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
	eve, _, err := dialWebsocket(ctx, leaked, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage})
	cancel()
	if err != nil {
		t.Logf("eve's dial of the leaked URL: %v", err)
	} else {
		t.Cleanup(eve.closeTCP)
	}
	select {
	case err := <-honestEnded:
		t.Errorf("the executor's socket ended when eve dialled its URL: %v", err)
	case <-time.After(2 * time.Second):
		t.Logf("the executor's socket is still up 2 s after eve dialled its URL")
	}
	alice := newRelaydHarnessClient(t, base, toks["alice"])
	ah, err := alice.dial(alice.connect("box-take"))
	if err != nil {
		t.Fatal(err)
	}
	ah.send(relayFrame{streamID: "a-1", body: relayBodyResume})
	got := ""
	if eve != nil {
		eve.nc.SetReadDeadline(time.Now().Add(2 * time.Second))
		for {
			op, data, err := eve.readFrameMessage()
			if err != nil {
				break
			}
			if fr, err := decodeRelayFrame(data); err == nil && op == wsOpBinary {
				got = fmt.Sprintf("%v on %s", fr.body, fr.streamID)
				break
			}
		}
	}
	t.Logf("eve's socket got alice's frame: %q; relay: %s", got, adv24Status(relay))
	if got != "" {
		t.Errorf("eve, with no token, took the environment's executor socket with a leaked URL: alice's %s came to her", got)
	}
	select {
	case g := <-honestGot:
		t.Logf("the executor got alice's frame: %s", g)
	case <-time.After(remoteTestTimeout):
		t.Errorf("alice's resume never reached the environment's executor")
	}
}
