package main

// Adversarial tests of the core's second pass (issue 21): a hostile client against requests
// from the server to the client (docs/protocol.md §3.2), each verdict read on the server.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"testing"
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
