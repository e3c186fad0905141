package main

// Sessions outlive connections (docs/protocol.md §5.1): processes keep running and buffering
// while detached, a resume recovers missed output by cursor, and a session nobody resumes takes
// its process groups down with it.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serverSession returns the live session id of ts, or nil.
func serverSession(ts *testServer, id string) *session {
	ts.srv.sessions.mu.Lock()
	defer ts.srv.sessions.mu.Unlock()
	return ts.srv.sessions.byID[id]
}

// waitFor polls cond: the server's internal state changes without an event a client can see.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(procWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitDetached waits until the server has detached session id from its connection.
func waitDetached(t *testing.T, ts *testServer, id string) {
	waitFor(t, "the session is detached", func() bool {
		s := serverSession(ts, id)
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.conn == nil
	})
}

// processNextSeq is the seq process id of session sid will give its next event.
func processNextSeq(ts *testServer, sid, id string) uint64 {
	p := serverSession(ts, sid).procs.get(id)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nextSeq
}

func TestSessionResumeReplaysMissedOutputByCursorOnce(t *testing.T) {
	ts := startTestServer(t)
	a := ts.connect(t)
	fifo := filepath.Join(t.TempDir(), "two")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	a.mustCall("process/start", with(procStart(t, "p", "sh", "-c", `echo one; cat "$0"; read x; echo three`, fifo), "pipeStdin", true))
	waitOutput(a, "p", "stdout", "one\n")
	sid := a.sessionID
	a.close()
	waitDetached(t, ts, sid)

	// Output while detached: kept, not sent anywhere.
	if err := os.WriteFile(fifo, []byte("two\n"), 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the detached output is numbered", func() bool { return processNextSeq(ts, sid, "p") == 3 })

	b := ts.dial(t)
	b.initialize(&sid)
	if b.sessionID != sid {
		t.Fatalf("resumed session %q, want %q", b.sessionID, sid)
	}
	rr := b.read(map[string]any{"processId": "p", "afterSeq": 1})
	if len(rr.Chunks) != 1 || rr.Chunks[0].Seq != 2 || string(rr.Chunks[0].Chunk) != "two\n" || rr.NextSeq != 3 {
		t.Fatalf("replay after seq 1: %+v", rr)
	}
	b.mustCall("process/write", map[string]any{"processId": "p", "chunk": b64("go\n"), "writeId": "w1"})
	waitEvent(b, "p", "process/closed")
	var seqs []string
	for _, e := range procEvents(b, "p") {
		seqs = append(seqs, fmt.Sprintf("%s:%q:%d", e.Method, e.Chunk, e.Seq))
	}
	// The new connection sees events from the resume on, with seqs continuing; nothing twice.
	if got := strings.Join(seqs, " "); got != `process/output:"three\n":3 process/exited:"":4 process/closed:"":5` {
		t.Errorf("notifications after resume: %q", got)
	}
}

func TestSessionResumeErrors(t *testing.T) {
	ts := startTestServer(t)
	a := ts.connect(t)
	b := ts.dial(t)
	for _, tt := range []struct {
		id   string
		code int
		msg  string
	}{
		{"nope", codeInvalidRequest, "unknown session id nope"},
		{"", codeInvalidRequest, "unknown session id "},
		{a.sessionID, codeSessionAttached, "session " + a.sessionID + " is already attached to another connection"},
	} {
		e := b.callErr("initialize", map[string]any{"clientName": "b", "resumeSessionId": tt.id})
		if e.Code != tt.code || e.Message != tt.msg {
			t.Errorf("resume %q: %+v, want %d %s", tt.id, e, tt.code, tt.msg)
		}
	}
	// A failed initialize does not count: the connection may still initialize.
	b.initialize(nil)
	if b.sessionID == "" || b.sessionID == a.sessionID {
		t.Errorf("new session %q", b.sessionID)
	}
	// A session sees only its own processes.
	a.mustCall("process/start", procStart(t, "mine", "sleep", "600"))
	if e := b.callErr("process/read", map[string]any{"processId": "mine"}); e.Message != "unknown process id mine" {
		t.Errorf("other session's read: %+v", e)
	}
	if res := b.mustCall("process/terminate", map[string]any{"processId": "mine"}); string(res) != `{"running":false}` {
		t.Errorf("other session's terminate: %s", res)
	}
}

// startGroup starts a shell that prints its pid and a background child's pid, then waits.
func startGroup(t *testing.T, tc *testClient, id string, tty bool) (leader, child int) {
	t.Helper()
	tc.mustCall("process/start", with(procStart(t, id, "sh", "-c", "sleep 600 & echo $$ $!; wait"), "tty", tty))
	waitOutput(tc, id, map[bool]string{false: "stdout", true: "pty"}[tty], "\n")
	out := procOutput(tc, id)
	f := strings.Fields(out)
	if len(f) < 2 {
		t.Fatalf("output %q", out)
	}
	return firstLineInt(t, f[0]), firstLineInt(t, f[1])
}

func TestSessionTTLExpiryKillsProcessGroups(t *testing.T) {
	const ttl = time.Second
	ts := startTestServer(t, func(s *server) { s.cfg.sessionTTL = ttl })
	a := ts.connect(t)
	var pids []int
	for _, tty := range []bool{false, true} {
		l, c := startGroup(t, a, "g"+map[bool]string{false: "pipe", true: "pty"}[tty], tty)
		pids = append(pids, l, c)
	}
	sid := a.sessionID

	// Resumed in time: the expiry is cancelled, and re-armed by the next disconnect.
	a.close()
	waitDetached(t, ts, sid)
	b := ts.dial(t)
	b.initialize(&sid)
	rr := b.read(map[string]any{"processId": "gpipe", "afterSeq": 1, "waitMs": 2 * ttl / time.Millisecond})
	if rr.Exited {
		t.Fatalf("the resumed session's process died: %+v", rr)
	}

	start := time.Now()
	b.close()
	for _, pid := range pids {
		waitPidGone(t, pid)
	}
	if d := time.Since(start); d < ttl {
		t.Errorf("processes died %v after the disconnect, before the %v TTL", d, ttl)
	}
	c := ts.dial(t)
	if e := c.callErr("initialize", map[string]any{"clientName": "c", "resumeSessionId": sid}); e.Message != "unknown session id "+sid {
		t.Errorf("resume after expiry: %+v", e)
	}
}

func TestSessionServerShutdownKillsProcesses(t *testing.T) {
	ts := startTestServer(t)
	a := ts.connect(t)
	leader, child := startGroup(t, a, "s", false)
	detached := ts.connect(t)
	dl, dc := startGroup(t, detached, "d", true)
	detached.close()
	ts.srv.shutdown()
	for _, pid := range []int{leader, child, dl, dc} {
		waitPidGone(t, pid)
	}
	if r := waitClosed(a, "s"); r.exitCode != 137 {
		t.Errorf("exit code %d after shutdown, want 137", r.exitCode)
	}
}

// TestClientResponseEndsTheConnection: a JSON-RPC response from the client (the server never
// asks anything) ends the connection as 0.169 does; its session detaches as on any drop and
// can be resumed with its processes.
func TestClientResponseEndsTheConnection(t *testing.T) {
	ts := startTestServer(t)
	a := ts.connect(t)
	a.mustCall("process/start", procStart(t, "kept", "sleep", "600"))
	a.send(`{"id":7,"result":{}}`)
	a.waitClosed(procWait)
	waitDetached(t, ts, a.sessionID)
	b := ts.dial(t)
	b.initialize(&a.sessionID)
	if rr := b.read(map[string]any{"processId": "kept"}); rr.Exited {
		t.Errorf("the resumed session's process: %+v", rr)
	}
	b.mustCall("process/terminate", map[string]any{"processId": "kept"})
}

// TestResumeRightAfterADropIsAccepted: the harness dials again and resumes within
// milliseconds of a network drop, often before the old connection's reader has read its EOF.
// The resume waits for that connection to detach instead of answering -32010 (0.169 accepts
// the first attempt too). Repeated, since the race is a matter of scheduling.
func TestResumeRightAfterADropIsAccepted(t *testing.T) {
	ts := startTestServer(t)
	a := ts.connect(t)
	a.mustCall("fs/watchMissing", map[string]any{"watchId": 1, "missing": []string{fileURI(filepath.Join(t.TempDir(), "never"))}})
	id := a.sessionID
	for i := range 20 {
		a.ws.closeTCP()
		b := ts.dial(t)
		res, err := b.call("initialize", map[string]any{"clientName": "again", "resumeSessionId": id})
		if err != nil {
			t.Fatalf("resume %d right after a drop: %+v", i, err)
		}
		_ = res
		b.notify("initialized", map[string]any{})
		a = b
	}
}
