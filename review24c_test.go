package main

// The third review of the self-hosted relay (docs/remote.md §12), cold, after its third round
// of hardening: failing tests of the defects found, against real relay processes and real
// sockets (relayd_test.go's startRelayProcess). A new file: the review's own, as
// review24_test.go was the first review's.

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// review24cStatus reads a field of /proc/PID/status in KiB (VmRSS, VmHWM).
func review24cStatus(t *testing.T, pid int, field string) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// review24cSetup starts a relay process, registers box-q with a raw executor socket (the
// test's: it reads every frame, and answers pings), and opens a raw harness socket with a
// small receive buffer that the test never reads. It returns the relay, both sockets, and a
// channel of the frames the executor socket receives (their payloads left out).
func review24cSetup(t *testing.T) (*relaydProc, *wsConn, *wsConn, chan relayFrame) {
	t.Helper()
	f := newRelaydFixture(t, "")
	p, base := startRelayProcess(t, f, "127.0.0.1:0")
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	status, v := relaydPost(t, nil, base, "box-q", "register", f.fleet, map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()})
	if status != http.StatusOK {
		t.Fatalf("register: %d %v", status, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
	defer cancel()
	exec, _, err := dialWebsocket(ctx, v["url"].(string), nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(exec.closeTCP)
	got := make(chan relayFrame, 1<<16)
	go func() { // the executor socket's reader: ends with the socket
		for {
			_, data, err := exec.readFrameMessage()
			if err != nil {
				return
			}
			if fr, err := decodeRelayFrame(data); err == nil {
				fr.payload = nil
				select {
				case got <- fr:
				default:
				}
			}
		}
	}()
	c := newRelaydHarnessClient(t, base, f.alice)
	b := c.connect("box-q")
	small := func(network, address string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}
	h, _, err := dialWebsocket(ctx, b.URL, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage, control: small})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.closeTCP)
	return p, exec, h, got
}

// TestReview24cSmallFramesOutgrowTheQueueBound: the queues' bounds count a frame's length,
// but each queued copy is a recycled buffer of its class (relaydQueues.clone): a frame of
// 120 bytes holds 4 KiB. An executor sending small frames to a harness that does not read
// makes the relay hold about 34 times relaydQueueBytes for that one socket (and
// relaydQueueBudget times 34 over the relay), not the 4 MiB docs/remote.md §12.5 states.
func TestReview24cSmallFramesOutgrowTheQueueBound(t *testing.T) {
	p, exec, h, got := review24cSetup(t)
	// The harness claims s-1 (its Resume reaches the executor), then never reads.
	if err := h.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: "s-1", body: relayBodyResume})); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(remoteTestTimeout):
		t.Fatal("the harness's Resume did not reach the executor")
	}
	pid := p.cmd.Process.Pid
	before := review24cStatus(t, pid, "VmHWM")
	frame := appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: "s-1", body: relayBodyData, segmentCount: 1, payload: make([]byte, 100)})
	// 3 times the socket's bound, in frames of ~120 bytes: the queue fills, the executor's
	// reader waits relaydQueueWait, and the socket is closed; what follows is dropped.
	n := 3 * relaydQueueBytes / len(frame)
	for i := range n {
		if err := exec.writeMessageOp(wsOpBinary, frame); err != nil {
			t.Fatalf("frame %d of %d: %v", i, n, err)
		}
	}
	// A round trip on the executor socket: every frame sent before it was read by the relay.
	if !exec.answersPing(remoteTestTimeout) {
		t.Fatal("the relay did not answer the executor's ping")
	}
	after := review24cStatus(t, pid, "VmHWM")
	grew := (after - before) << 10
	t.Logf("%d frames of %d bytes (%.1f MiB) to a harness that does not read: the relay's peak RSS grew %.1f MiB (bound per socket %d MiB)",
		n, len(frame), float64(n*len(frame))/(1<<20), float64(grew)/(1<<20), relaydQueueBytes>>20)
	if limit := 8 * relaydQueueBytes; grew > limit {
		t.Errorf("the relay grew %.1f MiB for one unread harness socket; want at most %d MiB (8 x relaydQueueBytes: the queue, the GC's slack, -race's shadow)", float64(grew)/(1<<20), limit>>20)
	}
}

// TestReview24cResetsBypassTheQueueBound: a Reset the relay sends a harness is queued
// whatever the queues hold ("a control frame always fits": relaydSocket.reset), and it
// echoes the stream id, which may be up to relayMaxStreamID (~190 KiB) long. A harness that
// reads nothing and sends Resumes the relay refuses (here stream_limit: its token already
// has relaydMaxUnansweredPerToken streams unanswered) makes the relay queue, for itself, a
// Reset as long as each Resume, without bound until relaydWriteTimeout closes the socket:
// any ticket holder can make the relay hold what it can send in 10 s.
func TestReview24cResetsBypassTheQueueBound(t *testing.T) {
	p, _, h, got := review24cSetup(t)
	send := func(id string, body relayBody) error {
		return h.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: id, body: body, reason: "x"}))
	}
	for i := range relaydMaxUnansweredPerToken { // claimed, never answered
		if err := send(fmt.Sprintf("s-%d", i+1), relayBodyResume); err != nil {
			t.Fatal(err)
		}
	}
	for range relaydMaxUnansweredPerToken {
		select {
		case <-got:
		case <-time.After(remoteTestTimeout):
			t.Fatal("the harness's Resumes did not reach the executor")
		}
	}
	pid := p.cmd.Process.Pid
	before := review24cStatus(t, pid, "VmHWM")
	const idLen = 100 << 10
	n := 16 * relaydQueueBytes / idLen
	closed := false // the relay closed the socket: a bound held
	for i := range n {
		if err := send(fmt.Sprintf("%0*d", idLen, i), relayBodyResume); err != nil { // refused: stream_limit
			t.Logf("the relay closed the harness socket at Resume %d: %v", i+1, err)
			closed = true
			break
		}
	}
	// The harness ends s-1: once its Reset reaches the executor, the relay has read (and
	// refused) every Resume before it.
	if !closed {
		if err := send("s-1", relayBodyReset); err != nil {
			t.Logf("the relay closed the harness socket: %v", err)
			closed = true
		}
	}
	for !closed {
		select {
		case fr := <-got:
			closed = fr.streamID == "s-1" && fr.body == relayBodyReset
		case <-time.After(remoteTestTimeout):
			t.Fatal("the harness's Reset of s-1 did not reach the executor")
		}
	}
	after := review24cStatus(t, pid, "VmHWM")
	grew := (after - before) << 10
	t.Logf("%d refused Resumes with %d KiB stream ids (%.1f MiB) from a harness that does not read: the relay's peak RSS grew %.1f MiB (bound per socket %d MiB)",
		n, idLen>>10, float64(n*idLen)/(1<<20), float64(grew)/(1<<20), relaydQueueBytes>>20)
	if limit := 8 * relaydQueueBytes; grew > limit {
		t.Errorf("the relay grew %.1f MiB for one unread harness socket's own Resets; want at most %d MiB (8 x relaydQueueBytes: the queue, the GC's slack, -race's shadow)", float64(grew)/(1<<20), limit>>20)
	}
}

// TestReview24cExecutorProbeWaitsForAStuckWrite: a new socket on the executor's URL replaces
// the live one "only if the old one answers no ping within 2 s" (relaydExecutorProbe,
// docs/remote.md §12.3). But answersPing writes its ping through the socket's writer: when a
// harness's frame is stuck in a write to the old socket (half-open, its peer reads nothing),
// the ping waits for that write's relaydWriteTimeout (10 s), then for its own. The new
// executor's dial is answered only then, past the executor's own rendezvousDialTimeout
// (10 s), which gives up first and dials again after its backoff.
func TestReview24cExecutorProbeWaitsForAStuckWrite(t *testing.T) {
	f := newRelaydFixture(t, "")
	_, base := startRelayProcess(t, f, "127.0.0.1:0")
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	status, v := relaydPost(t, nil, base, "box-p", "register", f.fleet, map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()})
	if status != http.StatusOK {
		t.Fatalf("register: %d %v", status, v)
	}
	url := v["url"].(string)
	small := func(network, address string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*remoteTestTimeout)
	defer cancel()
	// The old executor socket: half-open as far as the relay can tell, it reads nothing.
	old, _, err := dialWebsocket(ctx, url, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage, control: small})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(old.closeTCP)
	c := newRelaydHarnessClient(t, base, f.alice)
	b := c.connect("box-p")
	// The harness writes with a short deadline: its first write that cannot finish says the
	// relay's reader of it is stuck, in its write to the old executor socket.
	h, _, err := dialWebsocket(ctx, b.URL, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage, writeTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.closeTCP)
	if err := h.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: "s-1", body: relayBodyResume})); err != nil {
		t.Fatal(err)
	}
	data := appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: "s-1", body: relayBodyData, segmentCount: 1, payload: make([]byte, 128<<10)})
	stuck := time.Time{}
	for i := 0; i < 1000; i++ {
		if err := h.writeMessageOp(wsOpBinary, data); err != nil {
			stuck = time.Now()
			t.Logf("the harness's frame %d did not go out in 500 ms: the relay's write to the old executor socket is stuck", i+1)
			break
		}
	}
	if stuck.IsZero() {
		t.Fatal("1000 frames of 128 KiB went through: the relay's write to the old socket never blocked")
	}
	began := time.Now()
	next, resp, err := dialWebsocket(ctx, url, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage})
	took := time.Since(began)
	if err == nil {
		t.Cleanup(next.closeTCP)
	}
	status = 101
	if resp != nil {
		status = resp.StatusCode
	}
	t.Logf("the executor's new socket was answered %d after %v (the old socket's probe: %v)", status, took.Round(time.Millisecond), relaydExecutorProbe)
	if limit := relaydExecutorProbe + time.Second; took > limit {
		t.Errorf("the new executor socket waited %v for its answer; want at most %v (relaydExecutorProbe and a second): the executor's own dial gives up at %v", took.Round(time.Millisecond), limit, rendezvousDialTimeout)
	}
}

// TestReview24cReplacedExecutorStreamsNotReset: when a new executor socket replaces a dead
// one on the registration's URL (relaydExecutorProbe), the old socket ends, but its streams
// are not reset towards their harnesses (docs/remote.md §12.4: executor_disconnected "when
// the executor socket ends"): serveExecutor resets them only while env.executor is still
// the old socket, and join has already put the new one there. The streams stay routed to
// an executor socket that never opened them, counted in the environment's and the token's
// slots, and a harness waiting for output hears nothing.
func TestReview24cReplacedExecutorStreamsNotReset(t *testing.T) {
	f := newRelaydFixture(t, "")
	_, base := startRelayProcess(t, f, "127.0.0.1:0")
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	status, v := relaydPost(t, nil, base, "box-r", "register", f.fleet, map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()})
	if status != http.StatusOK {
		t.Fatalf("register: %d %v", status, v)
	}
	url := v["url"].(string)
	opts := wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage}
	ctx, cancel := context.WithTimeout(context.Background(), 3*remoteTestTimeout)
	defer cancel()
	old, _, err := dialWebsocket(ctx, url, nil, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(old.closeTCP)
	c := newRelaydHarnessClient(t, base, f.alice)
	h, _, err := dialWebsocket(ctx, c.connect("box-r").URL, nil, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.closeTCP)
	frame := func(body relayBody, payload []byte) []byte {
		return appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: "s-1", body: body, payload: payload})
	}
	next := func(ws *wsConn, who string) relayFrame {
		t.Helper()
		ws.nc.SetReadDeadline(time.Now().Add(remoteTestTimeout))
		for {
			op, data, err := ws.readFrameMessage()
			if err != nil {
				t.Fatalf("%s: %v", who, err)
			}
			if fr, err := decodeRelayFrame(data); err == nil && op == wsOpBinary {
				return fr
			}
		}
	}
	// s-1 is opened, and the old executor socket answers its handshake.
	h.writeMessageOp(wsOpBinary, frame(relayBodyResume, nil))
	h.writeMessageOp(wsOpBinary, frame(relayBodyHandshake, []byte("msg1")))
	for next(old, "the old executor socket").body != relayBodyHandshake {
	}
	old.writeMessageOp(wsOpBinary, frame(relayBodyHandshake, []byte("msg2")))
	if fr := next(h, "the harness"); fr.body != relayBodyHandshake {
		t.Fatalf("the harness got %v, not the executor's handshake answer", fr.body)
	}
	// The old socket is read no more (it answers no ping); the executor dials its URL again.
	replaced, _, err := dialWebsocket(ctx, url, nil, nil, opts)
	if err != nil {
		t.Fatalf("the executor's new socket: %v", err)
	}
	t.Cleanup(replaced.closeTCP)
	go func() { // the new socket's reader, answering pings: ends with the socket
		for {
			if _, _, err := replaced.readFrameMessage(); err != nil {
				return
			}
		}
	}()
	h.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		op, data, err := h.readFrameMessage()
		if err != nil {
			t.Fatalf("the harness's stream s-1 was not reset within 5 s of its executor socket being replaced (%v): it is still routed to a socket that never opened it", err)
		}
		if fr, err := decodeRelayFrame(data); err == nil && op == wsOpBinary && fr.streamID == "s-1" && fr.body == relayBodyReset {
			t.Logf("s-1 reset %q after its executor socket was replaced", fr.reason)
			return
		}
	}
}
