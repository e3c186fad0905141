package main

// Adversarial tests of the core's second pass (issue 21): a hostile client against requests
// from the server to the client (docs/protocol.md §3.2), the scheduler's message buffers
// (§3.4) and the outgoing queue's bound (§5.4), each verdict read on the server.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// nextRequest reads the next message, which must be a test/ask request for {"n":n}, and
// returns its id.
func (p *rpcPeer) nextRequest(n int) json.RawMessage {
	p.t.Helper()
	m, ok := p.recv()
	if !ok || m.Method != "test/ask" || string(m.Params) != fmt.Sprintf(`{"n":%d}`, n) {
		p.t.Fatalf("got %+v (ok %v), want a test/ask request for {\"n\":%d}", m, ok, n)
	}
	return m.ID
}

// TestAdv21AnswerForThePreviousConnectionNeverReachesTheNext: a session's client asked
// request 1 on connection A, which dropped before the answer; the client resumes on B and
// sends the answer it owed A. The server asks B a new question meanwhile: A's answer must not
// be taken as B's (ids of one session are never given twice), and B goes on.
func TestAdv21AnswerForThePreviousConnectionNeverReachesTheNext(t *testing.T) {
	ts := startTestServer(t)
	a := wsPeer(t, ts)
	sid := a.initialize()
	s := serverSession(ts, sid)
	out := make(chan askResult, 1)
	ask(context.Background(), s, 1, out)
	idA := a.nextRequest(1)
	a.end()
	if r := waitAsk(t, out); !errors.Is(r.err, errClientGone) {
		t.Fatalf("A's request when A dropped: %+v, want errClientGone", r)
	}
	waitDetached(t, ts, sid)

	b := wsPeer(t, ts)
	b.mustSend(`{"id":"init","method":"initialize","params":{"clientName":"asked","resumeSessionId":"` + sid + `"}}`)
	if m, ok := b.recv(); !ok || m.Error != nil {
		t.Fatalf("resume: %+v", m)
	}
	b.mustSend(`{"method":"initialized"}`)
	ask(context.Background(), s, 2, out)
	idB := b.nextRequest(2)
	b.mustSend(`{"id":` + string(idA) + `,"result":{"answers":"A"}}`) // owed to A
	b.mustSend(`{"id":"after","method":"environment/status"}`)
	if m, ok := b.recv(); !ok || string(m.ID) != `"after"` {
		t.Fatalf("after A's late answer on B: %+v (ok %v), want B to go on", m, ok)
	}
	select {
	case r := <-out:
		t.Fatalf("B's request %s (A's was %s) took A's answer: %+v", idB, idA, r)
	default:
	}
	b.mustSend(`{"id":` + string(idB) + `,"result":{"answers":"B"}}`)
	if r := waitAsk(t, out); r.err != nil || string(r.result) != `{"answers":"B"}` {
		t.Fatalf("B's request: %+v, want B's own answer", r)
	}
}

// TestAdv21ResponseStormHeld: a client answers one timed-out request 20000 times, and
// answers each of 256 pending requests twice; the connection goes on, every waiter gets its
// own answer, and the server's goroutines come back to where they were.
func TestAdv21ResponseStormHeld(t *testing.T) {
	ts := startTestServer(t)
	baseG := runtime.NumGoroutine()
	p := wsPeer(t, ts)
	s := serverSession(ts, p.initialize())
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan askResult, 1)
	ask(ctx, s, 0, out)
	id0 := p.nextRequest(0)
	cancel()
	waitAsk(t, out)
	const late = 20000
	for range late {
		p.mustSend(`{"id":` + string(id0) + `,"result":{"late":true}}`)
	}
	many := make(chan askResult, maxPendingClientRequests)
	ids := map[int]json.RawMessage{}
	for n := 1; n <= maxPendingClientRequests; n++ {
		ask(context.Background(), s, n, many)
		ids[n] = p.nextRequest(n)
	}
	for n := maxPendingClientRequests; n >= 1; n-- {
		for range 2 {
			p.mustSend(fmt.Sprintf(`{"id":%s,"result":{"n":%d}}`, ids[n], n))
		}
	}
	for range maxPendingClientRequests {
		r := waitAsk(t, many)
		if r.err != nil || string(r.result) != fmt.Sprintf(`{"n":%d}`, r.n) {
			t.Fatalf("request %d: %+v", r.n, r)
		}
	}
	p.mustSend(`{"id":"after","method":"environment/status"}`)
	if m, ok := p.recv(); !ok || string(m.ID) != `"after"` {
		t.Fatalf("after the storm: %+v (ok %v)", m, ok)
	}
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	c.requests.mu.Lock()
	n := len(c.requests.pending)
	c.requests.mu.Unlock()
	if n != 0 {
		t.Errorf("%d requests still pending after every answer", n)
	}
	p.end()
	for range p.msgs {
	}
	if g, _ := settle(baseG, openFDs()); g > baseG {
		t.Errorf("%d goroutines left after the storm", g-baseG)
	}
	t.Logf("%d late answers to one id and %d duplicate answers to %d pending requests: the connection went on", late, maxPendingClientRequests, maxPendingClientRequests)
}

// TestAdv21LongPollRepliesKeepTheQueueBound: a client registers maxLongPollsPerConn
// process/read long polls on a process that has printed nothing, then stops reading; the
// process prints 1 MiB (its retained window). Every poll wakes with that output: their
// replies must not pile up past the connection's queue bound (16 MiB, --max-queued-bytes) as
// if the client were reading. Measured on the server: the bytes its queue holds at most, and
// the heap the process holds.
func TestAdv21LongPollRepliesKeepTheQueueBound(t *testing.T) {
	ts := startTestServer(t, func(s *server) { s.cfg.stallTimeout = time.Hour })
	ws, send, sid := initializedWS(t, ts)
	trigger := filepath.Join(t.TempDir(), "go")
	start, _ := json.Marshal(procStart(t, "p", "sh", "-c", `while [ ! -e "$0" ]; do sleep 0.01; done; head -c 1048576 /dev/zero`, trigger))
	send(`{"id":1,"method":"process/start","params":` + string(start) + `}`)
	if b, err := ws.readMessage(); err != nil || !bytes.Contains(b, []byte(`"processId"`)) {
		t.Fatalf("process/start: %s %v", b, err)
	}
	s := serverSession(ts, sid)
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	for i := range maxLongPollsPerConn {
		send(fmt.Sprintf(`{"id":%d,"method":"process/read","params":{"processId":"p","afterSeq":0,"waitMs":600000}}`, 100+i))
	}
	waitFor(t, "every long poll to wait", func() bool { return len(c.sched.polls) == maxLongPollsPerConn })
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	// The client now stops reading; the process prints its megabyte.
	fsWrite(t, trigger, "")
	peak, heap := 0, uint64(0)
	deadline := time.Now().Add(5 * time.Second) // past it: already 700 MiB on int21
	for len(c.sched.polls) > 0 && time.Now().Before(deadline) {
		c.out.mu.Lock()
		peak = max(peak, c.out.bytes)
		c.out.mu.Unlock()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		heap = max(heap, m.HeapInuse)
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d long polls woke while their client did not read: %d long polls still waiting, queue at most %d bytes, heap in use at most %d MiB (%d MiB before)",
		maxLongPollsPerConn, len(c.sched.polls), peak, heap>>20, before.HeapInuse>>20)
	if limit := defaultLimits.queuedBytes + 2<<20; peak > limit {
		t.Errorf("the queue held %d bytes of replies, past its bound of %d", peak, defaultLimits.queuedBytes)
	}
}

// TestAdv21PipelinedReadsKeepTheQueueBound: a client sends 64 fs/readFile of a 32 MiB file
// back to back and reads nothing. Each answer is 43 MiB; the outgoing queue may hold its
// bound and about one answer past it, not every answer the hand-over of quick work let be
// built at once.
// Measured on the server: the queue's bytes and the heap in use, at most.
func TestAdv21PipelinedReadsKeepTheQueueBound(t *testing.T) {
	ts := startTestServer(t, func(s *server) { s.cfg.stallTimeout = time.Hour })
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	fsMust(t, os.WriteFile(big, bytes.Repeat([]byte("0123456789abcdef"), 2<<20), 0o644))
	ws, _, sid := initializedWS(t, ts)
	s := serverSession(ts, sid)
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const reads = 64
	go func() {
		for i := range reads {
			if ws.writeMessageOp(wsOpText, []byte(fmt.Sprintf(`{"id":%d,"method":"fs/readFile","params":{"path":%q}}`, 10+i, fileURI(big)))) != nil {
				return
			}
		}
	}()
	peak, heap := 0, uint64(0)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		c.out.mu.Lock()
		peak = max(peak, c.out.bytes)
		c.out.mu.Unlock()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		heap = max(heap, m.HeapInuse)
	}
	t.Logf("%d fs/readFile of 32 MiB sent, none read: queue at most %d MiB, heap in use at most %d MiB (%d MiB before)", reads, peak>>20, heap>>20, before.HeapInuse>>20)
	// The bound and two answers (one queued past it, one being built) with their file's
	// bytes, and the race detector's share.
	if limit := uint64(defaultLimits.queuedBytes+3*(32<<20+43<<20)) + 2*before.HeapInuse; heap > limit {
		t.Errorf("the heap held %d MiB for answers nobody read, past the queue's bound of %d MiB and two answers", heap>>20, defaultLimits.queuedBytes>>20)
	}
}

// TestAdv21ClientThatNeverReadsHeld: a client starts a process printing 64 MiB, then reads
// nothing. The stall timeout ends its connection and detaches its session; the process goes
// on to its end on the host (its output is drained, not left blocking it); a resume reads
// its exit and its last output.
func TestAdv21ClientThatNeverReadsHeld(t *testing.T) {
	ts := startTestServer(t, func(s *server) { s.cfg.stallTimeout = 500 * time.Millisecond })
	_, send, sid := initializedWS(t, ts)
	pidFile := filepath.Join(t.TempDir(), "pid")
	start, _ := json.Marshal(procStart(t, "big", "sh", "-c", `echo $$ >"$0"; head -c 67108864 /dev/zero; echo; echo last`, pidFile))
	send(`{"id":1,"method":"process/start","params":` + string(start) + `}`)
	began := time.Now()
	waitDetached(t, ts, sid)
	detachedAfter := time.Since(began)
	var pid int
	waitFor(t, "the pid file", func() bool {
		b, err := os.ReadFile(pidFile)
		_, serr := fmt.Sscan(string(b), &pid)
		return err == nil && serr == nil && pid > 0
	})
	waitFor(t, "the process to end on the host", func() bool { return syscall.Kill(pid, 0) != nil })
	endedAfter := time.Since(began)
	tc := ts.dial(t)
	tc.initialize(&sid)
	var r readResultJSON
	waitFor(t, "the exit to be readable", func() bool {
		r = tc.read(map[string]any{"processId": "big", "afterSeq": 0, "maxBytes": 1 << 20})
		for r.NextSeq > 0 && !r.Exited {
			r = tc.read(map[string]any{"processId": "big", "afterSeq": r.NextSeq - 1})
		}
		return r.Exited
	})
	all := tc.read(map[string]any{"processId": "big", "afterSeq": 0})
	var tail []byte
	for _, c := range all.Chunks {
		tail = append(tail, c.Chunk...)
	}
	if r.ExitCode == nil || *r.ExitCode != 0 || !bytes.HasSuffix(tail, []byte("\nlast\n")) {
		t.Fatalf("after resume: exit %v, output ends %q", r.ExitCode, tail[max(0, len(tail)-16):])
	}
	t.Logf("64 MiB printed for a client that read nothing: detached after %v, process %d ended on the host after %v (exit 0), the retained %d bytes end with its last line", detachedAfter.Round(time.Millisecond), pid, endedAfter.Round(time.Millisecond), len(tail))
}
