package main

// The third adversary's tests of `exec-server relay` (docs/remote.md §12), after the fixes of
// adv24_test.go, adv24b_test.go and review24_test.go: each one attacks one of those fixes
// (the 409 executor_connected probe, the per-token shares of an environment's streams) and
// fails while the attack works. The relay is a real process (relayd_test.go's
// startRelayProcess); every verdict is read on the host: which socket the relay closed,
// which one a harness's frame reached, what the relay logged.
//
// A new file: the third adversary's tests, kept apart from the relay's own and from the
// earlier adversaries' (adv24_test.go, adv24b_test.go).

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestAdv24cSlowHarnessHidesTheExecutorsPong: the 409 executor_connected probe
// (relaydExecutorProbe, 2 s) asks the live executor socket for a pong, and the pong is read by
// that socket's reader, the goroutine that routes the executor's frames to the harnesses. A
// harness that reads slowly, but never 2 s behind (docs/remote.md 12.5: "held up to 2 s per
// frame ... slows the environment's other streams to its pace"), paces that reader; the
// executor's pong waits behind the output already on its way, more than 2 s of it at the
// harness's pace. Mallory (a connect token) reads her stream at 50 KB/s while the executor
// sends her output; Eve (no token, the executor's URL from a proxy's access log) dials the
// URL: the probe takes the honest executor for dead, Eve's socket replaces it, and Alice's
// Resume comes to Eve.
func TestAdv24cSlowHarnessHidesTheExecutorsPong(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{
		"exec": {{"box-*"}, nil}, "alice": {nil, {"box-*"}}, "mallory": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	status, v := relaydPost(t, nil, base, "box-pong", "register", toks["exec"], map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()})
	if status != http.StatusOK {
		t.Fatalf("register: %d %v", status, v)
	}
	leaked := v["url"].(string)
	dial := func(opts wsOptions, u string) (*wsConn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
		defer cancel()
		ws, _, err := dialWebsocket(ctx, u, nil, nil, opts)
		if err == nil {
			t.Cleanup(ws.closeTCP)
		}
		return ws, err
	}
	wsOpts := wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage}
	honest, err := dial(wsOpts, leaked)
	if err != nil {
		t.Fatal(err)
	}
	send := func(ws *wsConn, fr relayFrame) error {
		fr.version = relayFrameVersion
		return ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &fr))
	}
	// The honest executor: answers each Resume with a Handshake (its reader also answers the
	// relay's pings, as every websocket peer does), and reports when its socket ends.
	honestEnded := make(chan error, 1)
	opened := make(chan string, 16)
	go func() { // ends when the relay closes the socket (or the cleanup does)
		for {
			op, data, err := honest.readFrameMessage()
			if err != nil {
				honestEnded <- err
				return
			}
			if fr, err := decodeRelayFrame(data); err == nil && op == wsOpBinary && fr.body == relayBodyResume {
				send(honest, relayFrame{streamID: fr.streamID, body: relayBodyHandshake, payload: []byte("msg2")})
				select {
				case opened <- fr.streamID:
				default:
				}
			}
		}
	}()
	// Mallory: one socket, one stream, read at 50 KB/s through a small receive buffer.
	small := func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) {
			if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10); serr == nil {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 1400)
			}
		})
		return serr
	}
	mallory := newRelaydHarnessClient(t, base, toks["mallory"])
	mws, err := dial(wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage, control: small}, mallory.connect("box-pong").URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := send(mws, relayFrame{streamID: "m-1", body: relayBodyResume}); err != nil {
		t.Fatal(err)
	}
	<-opened
	var received atomic.Int64
	go func() { // mallory's reader: 4 KiB per 80 ms, until her socket ends
		buf := make([]byte, 4<<10)
		tick := time.NewTicker(80 * time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			n, err := mws.nc.Read(buf)
			received.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	var sent atomic.Int64
	go func() { // the honest executor's output to mallory: until its socket ends
		payload := make([]byte, 16<<10)
		for k := 1; ; k++ {
			if err := send(honest, relayFrame{streamID: "m-1", body: relayBodyData, seq: uint32(k), segmentCount: 1, payload: payload}); err != nil {
				return
			}
			sent.Add(int64(len(payload)))
		}
	}()
	// Wait for the relay's queue for mallory to be full (4 MiB) and output to be waiting
	// behind it: what the executor sent less what mallory read.
	deadline := time.Now().Add(remoteTestTimeout)
	for sent.Load()-received.Load() < relaydQueueBytes+(512<<10) {
		if time.Now().After(deadline) {
			t.Fatalf("the executor's output did not back up: sent %d, mallory read %d", sent.Load(), received.Load())
		}
		time.Sleep(50 * time.Millisecond) // polling two counters of the test's own goroutines
	}
	t.Logf("backed up: executor sent %d KiB, mallory read %d KiB; relay: %s", sent.Load()>>10, received.Load()>>10, adv24Status(relay))
	start := time.Now()
	eve, err := dial(wsOpts, leaked)
	took := time.Since(start)
	t.Logf("eve's dial of the leaked URL: %v after %v; the honest socket still up: %v", err, took.Round(time.Millisecond), len(honestEnded) == 0)
	if err != nil {
		return // refused: the attack did not work
	}
	select {
	case err := <-honestEnded:
		t.Logf("the honest executor's socket ended: %v (mallory had read %d KiB, never 2 s behind)", err, received.Load()>>10)
	case <-time.After(2 * time.Second):
	}
	alice := newRelaydHarnessClient(t, base, toks["alice"])
	ah, err := alice.dial(alice.connect("box-pong"))
	if err != nil {
		t.Fatal(err)
	}
	ah.send(relayFrame{streamID: "a-1", body: relayBodyResume})
	got := ""
	eve.nc.SetReadDeadline(time.Now().Add(3 * time.Second))
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
	var ups []string
	for _, l := range strings.Split(relay.stderr.String(), "\n") {
		if strings.Contains(l, "socket up") && strings.Contains(l, "role=environment") {
			ups = append(ups, l)
		}
	}
	t.Logf("relay log, executor sockets up: %d; relay: %s", len(ups), adv24Status(relay))
	t.Errorf("eve, with no token, took the executor socket of a live, answering executor with its leaked URL "+
		"(upgraded after %v, the probe's pong behind output paced by mallory's 50 KB/s reads); alice's frame came to her: %q",
		took.Round(time.Millisecond), got)
}

// TestAdv24cOneUsersUnansweredStreamsHoldNoOther: the relay's shares of an environment are
// per token: 4 unanswered streams (relaydMaxUnansweredPerToken), held until the executor
// answers or the handshake timeout (30 s). Mallory sends 4 Resumes and no handshake on them:
// the executor (`exec-server --remote`) has nothing to answer. When docs/remote.md 12.1 gave
// every Codex user one token, Alice, holding the same one, was refused each stream
// `stream_limit` for 30 s, renewed with 4 frames; 12.1 now gives each user a token of their
// own, and Alice, with hers, is served (holders of one token share its holds: 12.5).
func TestAdv24cOneUsersUnansweredStreamsHoldNoOther(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{"exec": {{"box-*"}, nil}, "codex": {nil, {"box-*"}}, "mallory": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-shared", toks["exec"])
	alice := newRelaydHarnessClient(t, base, toks["codex"])
	ah, as := alice.open("box-shared", "a-0") // the environment works for alice
	_ = as
	ah.ws.closeTCP()
	t.Logf("before: relay %s", adv24Status(relay))
	mallory := newRelaydHarnessClient(t, base, toks["mallory"])
	mh, err := mallory.dial(mallory.connect("box-shared"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range relaydMaxUnansweredPerToken {
		mh.send(relayFrame{streamID: fmt.Sprintf("m-%d", i), body: relayBodyResume})
	}
	// The relay has claimed mallory's streams once its Resume for a fifth is refused.
	mh.send(relayFrame{streamID: "m-probe", body: relayBodyResume})
	if fr := mh.nextFrame("m-probe"); fr.body != relayBodyReset {
		t.Fatalf("mallory's fifth resume: %v, want a reset", fr.body)
	}
	start := time.Now()
	refused := 0
	var last error
	tick := time.NewTicker(time.Second) // alice retries once a second, as a user would
	defer tick.Stop()
	for i := 0; i < 4; i++ {
		if i > 0 {
			<-tick.C
		}
		b := alice.connect("box-shared")
		h, err := alice.dial(b)
		if err != nil {
			t.Fatal(err)
		}
		s, err := relaydOpenStream(h, b, fmt.Sprintf("a-%d", i+1), b.Authorization)
		if err == nil {
			_ = s
			h.ws.closeTCP()
			break
		}
		refused, last = refused+1, err
		h.ws.closeTCP()
	}
	t.Logf("alice: %d streams refused over %v (last: %v); relay %s", refused, time.Since(start).Round(time.Millisecond), last, adv24Status(relay))
	n := strings.Count(relay.stderr.String(), "reason=stream_limit")
	t.Logf("relay log: %d lines \"stream refused ... token=codex reason=stream_limit\"", n)
	if refused > 0 {
		t.Errorf("one holder of the shared token (4 Resumes, no handshake) refused every stream of another holder of it for %v (%d refused: %v); the hold lasts the handshake timeout, 30 s, renewed with 4 frames",
			time.Since(start).Round(time.Millisecond), refused, last)
	}
}

// adv24cSmallBuffers gives a socket a 4 KiB receive buffer and Ethernet-sized segments, so
// that what the relay queues for it, not the kernel's buffers, holds the bytes it has not
// read yet.
func adv24cSmallBuffers(_, _ string, c syscall.RawConn) error {
	var serr error
	c.Control(func(fd uintptr) {
		if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10); serr == nil {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 1400)
		}
	})
	return serr
}

// TestAdv24cOneUsersCooldownCutsNoOther: a harness socket whose queue stays full for
// relaydQueueWait (2 s) is closed, and its token gets no wait at all for relaydQueueCooldown
// (30 s): the next full queue of any socket of that token closes it at once. Mallory leaves
// one socket unread; Alice then receives output faster than she reads it (4 MB/s, at which
// she read 24 MiB whole before the attack). When docs/remote.md 12.1 gave every Codex user
// one token, Alice's socket was closed as soon as its queue was full, though she never fell
// behind by a moment; with a token of her own (12.1 now), she is not.
func TestAdv24cOneUsersCooldownCutsNoOther(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{"exec": {{"box-*"}, nil}, "codex": {nil, {"box-*"}}, "mallory": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	exec := startAdv24Executor(t, base, "box-cool", toks["exec"])
	const total, chunk = 24 << 20, 128 << 10
	open := func(who, stream string, control func(_, _ string, c syscall.RawConn) error) *wsConn {
		tok := toks["codex"]
		if who == "mallory" {
			tok = toks["mallory"]
		}
		c := newRelaydHarnessClient(t, base, tok)
		ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
		ws, _, err := dialWebsocket(ctx, c.connect("box-cool").URL, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage, control: control})
		cancel()
		if err != nil {
			t.Fatalf("%s's socket: %v", who, err)
		}
		t.Cleanup(ws.closeTCP)
		if err := ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: stream, body: relayBodyResume})); err != nil {
			t.Fatal(err)
		}
		<-exec.opened
		return ws
	}
	output := func(stream string) { // the executor's output on stream: total bytes, or until its socket ends
		payload := make([]byte, chunk)
		for k := range total / chunk {
			if exec.send(relayFrame{streamID: stream, body: relayBodyData, seq: uint32(k + 1), segmentCount: 1, payload: payload}) != nil {
				return
			}
		}
	}
	// alice (the kernel's own buffers) reads at 4 MB/s (64 KiB per 16 ms) until she has the output whole or her socket
	// ends; it returns what she read and when it ended.
	alice := func(stream string) (int, time.Duration, error) {
		ws := open("alice", stream, nil)
		start := time.Now()
		go output(stream)
		buf := make([]byte, 64<<10)
		tick := time.NewTicker(16 * time.Millisecond)
		defer tick.Stop()
		got := 0
		for got < total {
			<-tick.C
			ws.nc.SetReadDeadline(time.Now().Add(remoteTestTimeout))
			n, err := ws.nc.Read(buf)
			if got += n; err != nil {
				return got, time.Since(start), err
			}
		}
		ws.closeTCP()
		return got, time.Since(start), nil
	}
	got, took, err := alice("a-1")
	t.Logf("before the attack, alice read %d KiB at her pace in %v (%v); relay %s", got>>10, took.Round(time.Millisecond), err, adv24Status(relay))
	if err != nil {
		t.Fatalf("alice's pace does not keep up even without the attack: %v", err)
	}
	downs := func() int { return strings.Count(relay.stderr.String(), `msg="relay: socket down" role=harness`) }
	awaitDowns := func(n int, what string) {
		for deadline := time.Now().Add(remoteTestTimeout); downs() < n; {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
			time.Sleep(20 * time.Millisecond) // polling the relay's log
		}
	}
	awaitDowns(1, "alice's first socket is not down on the relay")
	// Mallory: one socket of the shared token, one stream, never read.
	open("mallory", "m-1", adv24cSmallBuffers)
	output("m-1")
	awaitDowns(2, "mallory's unread socket was not closed")

	t.Logf("mallory's unread socket closed by the relay; relay %s", adv24Status(relay))
	got, took, err = alice("a-2")
	t.Logf("after it, alice read %d KiB in %v: %v; relay %s", got>>10, took.Round(time.Millisecond), err, adv24Status(relay))
	if err != nil {
		t.Errorf("alice, reading at the pace that carried %d KiB whole before, was cut off after %d KiB (%v, %v): mallory's unread socket of the shared token put it in its %v cooldown",
			total>>10, got>>10, took.Round(time.Millisecond), err, relaydQueueCooldown)
	}
}

// TestAdv24cOneUsersFailuresHoldNoOther: the relay holds back a token's new streams
// (`handshake_failures`) while relaydMaxTokenFailedHandshakes (2) of its handshakes the
// executor refused are not yet forgotten (one per 5 s). Mallory sends 2 handshakes the
// executor (`exec-server --remote`) refuses, then one more each time one is forgotten (a
// Resume every 100 ms, refused until then). When docs/remote.md 12.1 gave every Codex user one
// token, Alice, holding the same one, was refused each stream for as long as Mallory went on;
// with a token of her own (12.1 now), she is served.
func TestAdv24cOneUsersFailuresHoldNoOther(t *testing.T) {
	f, toks := adv24Fixture(t, map[string][2][]string{"exec": {{"box-*"}, nil}, "codex": {nil, {"box-*"}}, "mallory": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-fail", toks["exec"])
	alice := newRelaydHarnessClient(t, base, toks["codex"])
	alice.open("box-fail", "a-0") // the environment works for alice
	mallory := newRelaydHarnessClient(t, base, toks["mallory"])
	mh, err := mallory.dial(mallory.connect("box-fail"))
	if err != nil {
		t.Fatal(err)
	}
	junk := 0
	fail := func() string { // one handshake the executor refuses; the reset's reason
		junk++
		id := fmt.Sprintf("m-%d", junk)
		mh.send(relayFrame{streamID: id, body: relayBodyResume})
		mh.send(relayFrame{streamID: id, body: relayBodyHandshake, payload: bytes.Repeat([]byte{0x5a}, 96)})
		return mh.nextFrame(id).reason
	}
	t.Logf("mallory's junk handshakes: %q, %q", fail(), fail())
	// Then one more each time the relay forgets one: she tries every 100 ms, and the relay
	// refuses the Resumes in between (handshake_failures).
	stop, stopped := make(chan struct{}), make(chan struct{})
	var renewed atomic.Int32
	go func() { // mallory's renewals: until the test stops them
		defer close(stopped)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if fail() != "handshake_failures" {
				renewed.Add(1)
			}
		}
	}()
	start := time.Now()
	refused, tries := 0, 0
	var last error
	tick := time.NewTicker(time.Second) // alice retries once a second, as a user would
	defer tick.Stop()
	for ; tries < 8; tries++ {
		if tries > 0 {
			<-tick.C
		}
		b := alice.connect("box-fail")
		h, err := alice.dial(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := relaydOpenStream(h, b, fmt.Sprintf("a-%d", tries+1), b.Authorization); err != nil {
			refused, last = refused+1, err
		}
		h.ws.closeTCP()
	}
	close(stop)
	<-stopped
	t.Logf("mallory: %d Resumes, %d of them junk handshakes the executor refused", junk, 2+renewed.Load())
	t.Logf("alice: %d of %d streams refused over %v (last: %v); relay log: %d \"reason=handshake_failures\"; relay %s",
		refused, tries, time.Since(start).Round(time.Millisecond), last, strings.Count(relay.stderr.String(), "reason=handshake_failures"), adv24Status(relay))
	if refused > 0 {
		t.Errorf("one holder of the shared token (%d junk handshakes over %v) had %d of %d streams of another holder of it refused (%v)",
			2+renewed.Load(), time.Since(start).Round(time.Second), refused, tries, last)
	}
}

// TestAdv24cRefusalsFillTheRelaysMemory: a Reset the relay sends a harness is a control frame,
// queued "whatever the queues hold" (relaydSocket.reset), and every queued frame is a copy in a
// recycled buffer of at least 4 KiB (relaydFrameClasses) while the bounds count its length (a
// Reset: some 40 bytes). Mallory (a connect token) holds her token's 4 unanswered streams,
// then sends Resumes on new ids from a socket she never reads: each is refused, each refusal
// is a Reset queued for her, 4 KiB each, until her socket's writer gives up (10 s,
// relaydWriteTimeout). The relay's peak resident memory grows by far more than every queue
// of the relay may hold (relaydQueueBudget, 128 MiB).
func TestAdv24cRefusalsFillTheRelaysMemory(t *testing.T) {
	const resumes = 100_000 // a cap, so that the test does not take the host's memory
	f, toks := adv24Fixture(t, map[string][2][]string{"exec": {{"box-*"}, nil}, "mallory": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-resets", toks["exec"])
	mallory := newRelaydHarnessClient(t, base, toks["mallory"])
	ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
	mws, _, err := dialWebsocket(ctx, mallory.connect("box-resets").URL, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage, control: adv24cSmallBuffers})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mws.closeTCP)
	before := review24HWM(t, relay)
	t.Logf("relay before: %s, VmHWM %d MiB", adv24Status(relay), before>>10)
	start := time.Now()
	sent := 0
	var werr error
	for ; sent < resumes; sent++ {
		if werr = mws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: strconv.FormatInt(int64(sent), 36), body: relayBodyResume})); werr != nil {
			break
		}
	}
	// The relay closes her socket once its writer has been blocked relaydWriteTimeout; until
	// then what it queued for her is held.
	mws.nc.SetReadDeadline(time.Now().Add(remoteTestTimeout))
	var buf [4 << 10]byte
	for {
		if _, err := mws.nc.Read(buf[:]); err != nil {
			break
		}
	}
	after := review24HWM(t, relay)
	t.Logf("mallory sent %d Resumes (%d KiB) in %v (%v); the relay closed her socket after %v; relay after: %s, VmHWM %d MiB (+%d MiB)",
		sent, sent*24>>10, time.Since(start).Round(time.Millisecond), werr, time.Since(start).Round(time.Millisecond), adv24Status(relay), after>>10, (after-before)>>10)
	if grew := (after - before) << 10; grew > relaydQueueBudget {
		t.Errorf("one harness socket that reads nothing grew the relay's peak memory by %d MiB with %d refused Resumes, past the %d MiB every queue of the relay may hold",
			grew>>20, sent, relaydQueueBudget>>20)
	}
}

// TestAdv24cTinyFramesFillTheRelaysMemory: the queue bounds (relaydQueueBytes, 4 MiB a socket)
// count a frame's length, and each queued frame is a copy in a recycled buffer of at least
// 4 KiB (relaydFrameClasses). A command's output that comes a few bytes at a time is a frame
// of some 40 bytes each: 4 MiB of them is 100,000 buffers, 400 MiB. Mallory (a connect token)
// opens a stream she never reads, and the executor sends her small frames (her command's
// output, one line at a time).
func TestAdv24cTinyFramesFillTheRelaysMemory(t *testing.T) {
	const frames = 60_000 // a cap, so that the test does not take the host's memory
	f, toks := adv24Fixture(t, map[string][2][]string{"exec": {{"box-*"}, nil}, "mallory": {nil, {"box-*"}}}, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	exec := startAdv24Executor(t, base, "box-tiny", toks["exec"])
	mallory := newRelaydHarnessClient(t, base, toks["mallory"])
	ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
	mws, _, err := dialWebsocket(ctx, mallory.connect("box-tiny").URL, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage, control: adv24cSmallBuffers})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mws.closeTCP)
	if err := mws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: "m-1", body: relayBodyResume})); err != nil {
		t.Fatal(err)
	}
	<-exec.opened
	before := review24HWM(t, relay)
	t.Logf("relay before: %s, VmHWM %d MiB", adv24Status(relay), before>>10)
	start := time.Now()
	for k := range frames {
		if err := exec.send(relayFrame{streamID: "m-1", body: relayBodyData, seq: uint32(k + 1), segmentCount: 1, payload: []byte("line\n")}); err != nil {
			t.Fatal(err)
		}
	}
	// A mark on a stream of another socket of hers: the relay routes it once it has read every
	// frame before it.
	alice := newRelaydHarnessClient(t, base, toks["mallory"])
	ah, err := alice.dial(alice.connect("box-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	ah.send(relayFrame{streamID: "a-1", body: relayBodyResume})
	<-exec.opened
	exec.send(relayFrame{streamID: "a-1", body: relayBodyData, seq: 1, segmentCount: 1, payload: []byte("mark")})
	if fr := ah.nextFrame("a-1"); fr.body != relayBodyHandshake {
		t.Fatalf("a-1: %v", fr.body)
	}
	ah.nextFrame("a-1") // the mark: the relay has routed every frame sent before it
	after := review24HWM(t, relay)
	t.Logf("the executor sent %d frames of 5 bytes in %v; relay after: %s, VmHWM %d MiB (+%d MiB)",
		frames, time.Since(start).Round(time.Millisecond), adv24Status(relay), after>>10, (after-before)>>10)
	if grew := (after - before) << 10; grew > relaydQueueBytes+(32<<20) {
		t.Errorf("one harness socket that reads nothing grew the relay's peak memory by %d MiB with %d frames of 5 bytes, past its %d MiB queue bound (and 32 MiB more)",
			grew>>20, frames, relaydQueueBytes>>20)
	}
}
