package main

// Adversarial tests of `exec-server relay` (docs/remote.md §12): a holder of a valid token
// for an environment, or of a token for other environments, tries to deny service to the
// holders of other tokens. The relay is a real process (relayd_test.go's startRelayProcess);
// the executor is either `exec-server --remote` or, where the test must decide what the
// executor sends, a websocket client of the test that registers and answers like one (the
// relay routes on stream id and body kind only, docs/remote.md §12).
//
// A new file: these are the adversary's tests of the relay, kept apart from its own tests.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// adv24Fixture writes a relay configuration with the given static tokens (name → register
// and connect patterns) and returns the config path and each token's value.
func adv24Fixture(t *testing.T, grants map[string][2][]string, extra string) (*relaydFixture, map[string]string) {
	t.Helper()
	f := &relaydFixture{dir: t.TempDir()}
	toks := map[string]string{}
	var entries []string
	for name, g := range grants {
		tok := name + "-" + randomRelaydID("", 16)
		toks[name] = tok
		if err := os.WriteFile(filepath.Join(f.dir, name+".token"), []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		q := func(ps []string) string {
			if len(ps) == 0 {
				return "[]"
			}
			return `["` + strings.Join(ps, `","`) + `"]`
		}
		entries = append(entries, fmt.Sprintf(`{"name":%q,"file":%q,"register":%s,"connect":%s}`, name, name+".token", q(g[0]), q(g[1])))
	}
	f.config = filepath.Join(f.dir, "relay.json")
	cfg := `{"tokens":[` + strings.Join(entries, ",") + `]` + extra + `}`
	if err := os.WriteFile(f.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return f, toks
}

// adv24Executor is the test playing an executor: it registers, dials its rendezvous URL,
// answers every harness Resume with a Handshake, and sends what the test asks.
type adv24Executor struct {
	t       *testing.T
	ws      *wsConn
	opened  chan string // stream ids whose Resume arrived (and were answered)
	wmu     sync.Mutex
	stopped chan struct{}
}

func startAdv24Executor(t *testing.T, base, envID, bearer string) *adv24Executor {
	t.Helper()
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	status, v := relaydPost(t, nil, base, envID, "register", bearer,
		map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()})
	if status != http.StatusOK {
		t.Fatalf("register %s: %d %v", envID, status, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
	defer cancel()
	ws, _, err := dialWebsocket(ctx, v["url"].(string), nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage})
	if err != nil {
		t.Fatalf("executor dial: %v", err)
	}
	e := &adv24Executor{t: t, ws: ws, opened: make(chan string, 64), stopped: make(chan struct{})}
	go func() { // the executor's reader: ends when the socket does (cleanup closes it)
		defer close(e.stopped)
		for {
			op, data, err := ws.readFrameMessage()
			if err != nil {
				return
			}
			if op != wsOpBinary {
				continue
			}
			f, err := decodeRelayFrame(data)
			if err != nil || f.body != relayBodyResume {
				continue
			}
			e.send(relayFrame{streamID: f.streamID, body: relayBodyHandshake, payload: []byte("msg2")})
			select { // the test reads the first ones; more are not waited for
			case e.opened <- f.streamID:
			default:
			}
		}
	}()
	t.Cleanup(func() { ws.closeTCP(); <-e.stopped })
	return e
}

func (e *adv24Executor) send(f relayFrame) error {
	f.version = relayFrameVersion
	e.wmu.Lock()
	defer e.wmu.Unlock()
	return e.ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &f))
}

// relaydPID is the pid of a relay process, for /proc figures.
func adv24Status(p *relaydProc) string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "VmRSS:") || strings.HasPrefix(l, "Threads:") {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
	return strings.Join(out, ", ") + fmt.Sprintf(", fds %d", len(fds))
}

// TestAdv24SlowHarnessStallsOtherStreams: a harness (valid connect token) opens a stream and
// never reads its socket while the executor sends on that stream. The relay writes the
// executor's frames in the executor socket's reader, with relaydWriteTimeout (10 s) per write,
// so every other stream of the environment waits behind the one that is not read: another
// harness's frame must get through in well under that.
func TestAdv24SlowHarnessStallsOtherStreams(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{
		"exec": {{"box-*"}, nil}, "alice": {nil, {"box-*"}}, "mallory": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	exec := startAdv24Executor(t, base, "box-hol", toks["exec"])

	// Mallory's socket: opens s-slow and never reads.
	mb := newRelaydHarnessClient(t, base, toks["mallory"]).connect("box-hol")
	ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
	defer cancel()
	mws, _, err := dialWebsocket(ctx, mb.URL, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mws.closeTCP)
	if err := mws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: "s-slow", body: relayBodyResume})); err != nil {
		t.Fatal(err)
	}
	// Alice's socket: s-fast, read as it comes.
	ac := newRelaydHarnessClient(t, base, toks["alice"])
	h, err := ac.dial(ac.connect("box-hol"))
	if err != nil {
		t.Fatal(err)
	}
	h.send(relayFrame{streamID: "s-fast", body: relayBodyResume})
	for range 2 {
		select {
		case <-exec.opened:
		case <-time.After(remoteTestTimeout):
			t.Fatal("the executor did not see both streams")
		}
	}
	if fr := h.nextFrame("s-fast"); fr.body != relayBodyHandshake {
		t.Fatalf("s-fast: %v, want the handshake", fr.body)
	}
	t.Logf("relay before: %s", adv24Status(relay))

	// The executor sends 48 MiB on s-slow (output of a command Mallory started, say), then
	// one frame on s-fast.
	const chunk, chunks = 192 << 10, 256
	start := time.Now()
	sent := make(chan error, 1)
	go func() { // the executor's writer: ends after its frames or at the first error
		payload := make([]byte, chunk)
		for i := range chunks {
			if err := exec.send(relayFrame{streamID: "s-slow", body: relayBodyData, seq: uint32(i + 1), segmentCount: 1, payload: payload}); err != nil {
				sent <- err
				return
			}
		}
		sent <- exec.send(relayFrame{streamID: "s-fast", body: relayBodyData, seq: 1, segmentCount: 1, payload: []byte("hello")})
	}()
	// Measured, not just bounded: the wait is read up to past the 90 s pong timeout.
	select {
	case fr := <-h.frames("s-fast"):
		t.Logf("s-fast's frame (%v %q) reached alice %v after the executor began sending on mallory's unread stream", fr.body, fr.reason, time.Since(start).Round(time.Millisecond))
		if fr.body != relayBodyData {
			t.Errorf("alice got a %v (%q) instead of the executor's data: the relay dropped the executor", fr.body, fr.reason)
		}
	case <-time.After(relaydPongTimeout + 10*time.Second):
		t.Logf("s-fast's frame did not reach alice within %v", relaydPongTimeout+10*time.Second)
	}
	took := time.Since(start)
	t.Logf("relay after: %s", adv24Status(relay))
	// Not a speed bound: the time includes the executor's own 48 MiB (slow under -race on a
	// busy machine). What the break showed was alice waiting until the executor was dropped
	// at the pong timeout; her data arriving before it (checked above) is the fix.
	if took >= relaydPongTimeout {
		t.Errorf("alice's stream waited %v behind mallory's unread one (the pong timeout is %v): one harness stalls every stream of the environment", took.Round(time.Millisecond), relaydPongTimeout)
	}
	exec.ws.closeTCP()
	<-sent
}

// TestAdv24ConnectFloodEvictsAnotherTokensBundle: the relay keeps at most 256 connect bundles
// per environment and forgets the oldest, whoever asked for it. Bob (a connect token of his
// own) asks 256 times; Alice's bundle, fetched just before, is gone: her socket is refused,
// and a socket she already holds can no longer open a stream (validate finds no bundle).
func TestAdv24ConnectFloodEvictsAnotherTokensBundle(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{
		"exec": {{"box-*"}, nil}, "alice": {nil, {"box-*"}}, "bob": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-ev", toks["exec"])
	alice := newRelaydHarnessClient(t, base, toks["alice"])
	held := alice.connect("box-ev") // waits for the registration
	h, err := alice.dial(held)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relaydOpenStream(h, held, "s-1", held.Authorization); err != nil {
		t.Fatalf("alice's first stream: %v", err)
	}
	fresh := alice.connect("box-ev")

	bob := newRelaydHarnessClient(t, base, toks["bob"])
	for range relaydMaxAuthorizations {
		status, v := relaydPost(t, nil, base, "box-ev", "connect", toks["bob"], map[string]any{"harness_public_key": bob.id.publicKey()})
		if status != http.StatusOK {
			t.Fatalf("bob's connect: %d %v", status, v)
		}
	}
	t.Logf("bob asked %d bundles; relay: %s", relaydMaxAuthorizations, adv24Status(relay))

	if _, err := alice.dial(fresh); err != nil {
		t.Errorf("alice's socket with the bundle she was just given: %v (bob's connects evicted it)", err)
	}
	if _, err := relaydOpenStream(h, held, "s-2", held.Authorization); err != nil {
		t.Errorf("a second stream on alice's socket: %v (bob's connects evicted her bundle, validate refuses)", err)
	}
}

// TestAdv24OneTokenFillsTheRegistry: relaydMaxEnvironments (16384) bounds the registrations
// of the whole relay, not of a token, and a registration stays without an executor socket
// ever dialling it. A token granted box-* registers that many ids; the holder of another
// token, granted its one environment, is then refused (503 capacity) for good.
func TestAdv24OneTokenFillsTheRegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("16384 registrations")
	}
	f, toks := adv24Fixture(t, map[string][2][]string{
		"fleet": {{"box-*"}, nil}, "solo": {{"solo-1"}, nil}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	t.Logf("relay before: %s", adv24Status(relay))
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()}
	start := time.Now()
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { // one of 8 registering clients: ends when the ids are used up
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= relaydMaxEnvironments {
					return
				}
				// A 256-byte id: the most memory one registration may hold.
				envID := fmt.Sprintf("box-%05d-%s", i, strings.Repeat("x", 256-10))
				if status, _ := relaydPost(t, nil, base, envID, "register", toks["fleet"], body); status == http.StatusOK {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("fleet registered %d environments in %v, no executor socket; relay: %s", ok.Load(), time.Since(start).Round(time.Millisecond), adv24Status(relay))
	status, v := relaydPost(t, nil, base, "solo-1", "register", toks["solo"], body)
	if status != http.StatusOK {
		t.Errorf("solo registering its one environment: %d %v: one token's registrations deny every other token", status, v)
	}
}

// TestAdv24PendingConnectionsLockOut: someone with no token opens relaydMaxPending (1024) TCP
// connections to the relay and sends nothing. The relay closes every connection past that
// cap at once, whoever opens it, for as long as the idle ones are held (a silent one up to
// relaydHeaderTimeout, 10 s, and the attacker opens it again): the executor that comes to
// register, with its valid token, is turned away.
func TestAdv24PendingConnectionsLockOut(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{"fleet": {{"box-*"}, nil}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	t.Logf("relay before: %s", adv24Status(relay))
	addr := strings.TrimPrefix(base, "http://")
	var idle []net.Conn
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	for range relaydMaxPending {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", len(idle), err)
		}
		idle = append(idle, c)
	}
	// The relay has accepted them all once its fd count has grown by that much.
	deadline := time.Now().Add(remoteTestTimeout)
	for {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", relay.cmd.Process.Pid))
		if len(fds) >= relaydMaxPending || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // the accept loop has no event the test can wait on
	}
	t.Logf("%d silent connections, no token; relay: %s", len(idle), adv24Status(relay))

	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()})
	refused := 0
	for range 5 {
		req, _ := http.NewRequest("POST", base+"/cloud/environment/box-1/register", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+toks["fleet"])
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			refused++
			t.Logf("the executor's register: %v", err)
			continue
		}
		resp.Body.Close()
		t.Logf("the executor's register: %s", resp.Status)
	}
	if refused > 0 {
		t.Errorf("%d of 5 registers with a valid token were cut off while %d silent connections of nobody were held", refused, len(idle))
	}
}

// TestAdv24WorldReadableTLSKey: the relay refuses a token or secret file that group or others
// may read, but serves with a --tls-key of mode 0644: the key every client's TLS trusts is
// taken as readily as one only its owner may read.
func TestAdv24WorldReadableTLSKey(t *testing.T) {
	f, _ := adv24Fixture(t, map[string][2][]string{"fleet": {{"box-*"}, nil}}, "")
	certFile, keyFile, _, _ := relaydTestCert(t)
	if err := os.Chmod(keyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	p, base := startPrinting(t, nil, "relay", "--config", f.config, "--listen", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile)
	if p != nil {
		t.Errorf("the relay serves %s with a private key of mode 0644 (%s); token files of that mode are refused", base, keyFile)
		return
	}
	t.Logf("refused: the relay exited without serving (a 0644 %s)", filepath.Base(keyFile)) // p is nil here: no stderr to show
}

// TestAdv24ForgedForwardedHeader: X-Exec-Server-Relay-Forwarded-By, which marks a registry
// request a peer forwarded, is taken from any client. Sent to a node that does not own the
// environment, it makes that node serve the register itself: a registration the owner never
// holds, answered with the owner's rendezvous URL, so the executor's dial is refused
// (unknown_route), and the node drops the registration at its next rebalance.
func TestAdv24ForgedForwardedHeader(t *testing.T) {
	addrs := relaydFreePorts(t, 2)
	peers := `,"peers":[{"id":"n1","url":"http://` + addrs[0] + `"},{"id":"n2","url":"http://` + addrs[1] + `"}]`
	f, toks := adv24Fixture(t, map[string][2][]string{"fleet": {{"box-*"}, nil}}, peers)
	_, b1 := startRelayProcess(t, f, addrs[0], "--node-id", "n1")
	_, b2 := startRelayProcess(t, f, addrs[1], "--node-id", "n2")
	relaydAwaitLive(t, b1, []string{"n1", "n2"})
	relaydAwaitLive(t, b2, []string{"n1", "n2"})
	ps := []relaydPeer{{"n1", b1}, {"n2", b2}}
	envID := ""
	for i := 0; envID == ""; i++ {
		if o, _ := relaydOwner(ps, fmt.Sprintf("box-%d", i), func(string) bool { return true }); o.ID == "n1" {
			envID = fmt.Sprintf("box-%d", i)
		}
	}
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()})
	req, _ := http.NewRequest("POST", b2+"/cloud/environment/"+envID+"/register", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+toks["fleet"])
	req.Header.Set(relaydForwardedHeader, "n1") // forged: this client is no peer
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	t.Logf("register of %s (owner n1) sent to n2 with a forged %s: %s %v", envID, relaydForwardedHeader, resp.Status, v)
	u, _ := v["url"].(string)
	if resp.StatusCode != http.StatusOK || u == "" {
		t.Fatalf("register: %s %v", resp.Status, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
	defer cancel()
	ws, dresp, err := dialWebsocket(ctx, u, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage})
	if err != nil {
		reason := ""
		if dresp != nil {
			reason = dresp.Header.Get(rendezvousRejectionHeader)
		}
		t.Errorf("the executor's dial of the URL its register was answered: %v (%s): n2 served a forwarded-looking request from a non-peer as if it owned %s", err, reason, envID)
		return
	}
	ws.closeTCP()
}

// TestAdv24StreamSlotsTakenByOneHarness: max_streams_per_environment (128) counts the streams
// of every harness of an environment together, and a Resume alone claims one until the
// handshake timeout (30 s). A harness with a connect token of its own sends 128 Resumes and
// never handshakes: another token's harness can open no stream (stream_limit), and the
// claims are renewed as fast as they lapse.
func TestAdv24StreamSlotsTakenByOneHarness(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{
		"exec": {{"box-*"}, nil}, "alice": {nil, {"box-*"}}, "mallory": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-slots", toks["exec"])
	mb := newRelaydHarnessClient(t, base, toks["mallory"]).connect("box-slots")
	ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
	defer cancel()
	mws, _, err := dialWebsocket(ctx, mb.URL, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mws.closeTCP)
	for i := range relaydDefaultStreamsPerEnvironment {
		f := relayFrame{version: relayFrameVersion, streamID: fmt.Sprintf("m-%d", i), body: relayBodyResume}
		if err := mws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &f)); err != nil {
			t.Fatal(err)
		}
	}
	alice := newRelaydHarnessClient(t, base, toks["alice"])
	b := alice.connect("box-slots")
	h, err := alice.dial(b)
	if err != nil {
		t.Fatal(err)
	}
	_, err = relaydOpenStream(h, b, "a-1", b.Authorization)
	t.Logf("mallory holds %d Resume-only claims; alice's stream: %v; relay: %s", relaydDefaultStreamsPerEnvironment, err, adv24Status(relay))
	if err != nil {
		t.Errorf("alice's stream: %v: one harness's unanswered Resumes take every stream of the environment", err)
	}
}
