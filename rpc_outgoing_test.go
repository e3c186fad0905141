package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOutgoingRequestsRouteAnswers: ids are integers from 1; each answer reaches the request
// it names, once; an id we never gave, or one given up on, is not ours.
func TestOutgoingRequestsRouteAnswers(t *testing.T) {
	var o outgoingRequests
	id1, a1, err := o.begin()
	if err != nil || id1 != 1 {
		t.Fatalf("first id %d, %v; want 1", id1, err)
	}
	id2, a2, _ := o.begin()
	if id2 != 2 {
		t.Fatalf("second id %d, want 2", id2)
	}
	if !o.deliver(json.RawMessage("2"), clientAnswer{result: json.RawMessage(`{"decision":{"type":"allow"}}`)}) {
		t.Fatal("the answer to 2 found no request")
	}
	if o.deliver(json.RawMessage("2"), clientAnswer{}) {
		t.Error("a second answer to 2 was taken")
	}
	for _, id := range []string{"3", `"1"`, "1.0", "-1"} {
		if o.deliver(json.RawMessage(id), clientAnswer{}) {
			t.Errorf("an answer to %s was taken", id)
		}
	}
	got, err := o.await(context.Background(), id2, a2)
	if err != nil || string(got.result) != `{"decision":{"type":"allow"}}` {
		t.Fatalf("await 2: %s %v", got.result, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := o.await(ctx, id1, a1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("await 1 without an answer: %v, want the deadline", err)
	}
	if o.deliver(json.RawMessage("1"), clientAnswer{}) {
		t.Error("an answer after its request gave up was taken")
	}
}

// TestOutgoingRequestsBoundAndClose: at most maxPendingClientRequests wait; the connection's
// end ends every wait with its error and refuses new requests.
func TestOutgoingRequestsBoundAndClose(t *testing.T) {
	var o outgoingRequests
	answers := make(map[int64]<-chan clientAnswer)
	for range maxPendingClientRequests {
		id, a, err := o.begin()
		if err != nil {
			t.Fatal(err)
		}
		answers[id] = a
	}
	if _, _, err := o.begin(); !errors.Is(err, errTooManyClientRequests) {
		t.Fatalf("request %d: %v, want errTooManyClientRequests", maxPendingClientRequests+1, err)
	}
	gone := errors.New("the connection ended")
	var wg sync.WaitGroup
	errs := make(chan error, len(answers))
	for id, a := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := o.await(context.Background(), id, a)
			errs <- err
		}()
	}
	o.close(gone)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, gone) {
			t.Fatalf("a wait ended with %v, want the connection's end", err)
		}
	}
	if _, _, err := o.begin(); !errors.Is(err, gone) {
		t.Errorf("a request after the end: %v, want the connection's end", err)
	}
}

// TestOutgoingRequestsConcurrent: answers delivered while requests begin, wait and give up
// reach their own request only (run with -race).
func TestOutgoingRequestsConcurrent(t *testing.T) {
	var o outgoingRequests
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, a, err := o.begin()
			if err != nil {
				t.Error(err)
				return
			}
			go o.deliver(json.RawMessage(jsonInt(id)), clientAnswer{result: json.RawMessage(jsonInt(id))})
			got, err := o.await(context.Background(), id, a)
			if err != nil || string(got.result) != jsonInt(id) {
				t.Errorf("request %d got %s %v", id, got.result, err)
			}
		}()
	}
	wg.Wait()
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// rpcPeer is the client end of a real transport, for the tests of requests from the server:
// what the server writes arrives on msgs (a goroutine of its own reads it, until the transport
// ends), and send writes one message.
type rpcPeer struct {
	t    *testing.T
	send func(msg string) error
	msgs chan peerMsg
	end  func() // the client hangs up
}

// peerMsg is any message the server sends: a reply, a notification or a request of its own.
type peerMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *clientError    `json:"error"`
}

// pump reads messages with read until it fails, then closes msgs.
func (p *rpcPeer) pump(read func() ([]byte, error)) {
	p.msgs = make(chan peerMsg, 512)
	go func() {
		defer close(p.msgs)
		for {
			b, err := read()
			if err != nil {
				return
			}
			var m peerMsg
			if err := json.Unmarshal(b, &m); err != nil {
				p.t.Errorf("the server sent %q: %v", b, err)
				return
			}
			p.msgs <- m
		}
	}()
}

// recv returns the next message; ok is false once the transport has ended.
func (p *rpcPeer) recv() (m peerMsg, ok bool) {
	p.t.Helper()
	select {
	case m, ok = <-p.msgs:
		return m, ok
	case <-time.After(procWait):
		p.t.Fatal("no message from the server")
	}
	return
}

func (p *rpcPeer) mustSend(msg string) {
	p.t.Helper()
	if err := p.send(msg); err != nil {
		p.t.Fatalf("send %s: %v", msg, err)
	}
}

// initialize opens the session and returns its id.
func (p *rpcPeer) initialize() string {
	p.t.Helper()
	p.mustSend(`{"id":"init","method":"initialize","params":{"clientName":"asked"}}`)
	m, ok := p.recv()
	var r struct {
		SessionID string `json:"sessionId"`
	}
	if !ok || json.Unmarshal(m.Result, &r) != nil || r.SessionID == "" {
		p.t.Fatalf("initialize: %+v", m)
	}
	p.mustSend(`{"method":"initialized"}`)
	return r.SessionID
}

// wsPeer connects to the test server's websocket.
func wsPeer(t *testing.T, ts *testServer) *rpcPeer {
	ws, _, err := dialWebsocket(context.Background(), ts.url, nil, nil, wsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.closeTCP() })
	p := &rpcPeer{t: t, send: func(msg string) error { return ws.writeMessageOp(wsOpText, []byte(msg)) }, end: func() { ws.close(nil) }}
	p.pump(ws.readMessage)
	return p
}

// initializedWS connects to the test server's websocket as a raw client whose reading the test
// controls (it reads nothing unless the test does), initializes a session and returns the
// connection, a send that fails the test on error, and the session's id.
func initializedWS(t *testing.T, ts *testServer) (*wsConn, func(string), string) {
	t.Helper()
	ws, _, err := dialWebsocket(context.Background(), ts.url, nil, nil, wsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.closeTCP() })
	send := func(msg string) {
		t.Helper()
		if err := ws.writeMessageOp(wsOpText, []byte(msg)); err != nil {
			t.Fatalf("send %s: %v", msg, err)
		}
	}
	send(`{"id":"init","method":"initialize","params":{"clientName":"raw"}}`)
	var init struct {
		Result struct {
			SessionID string `json:"sessionId"`
		} `json:"result"`
	}
	b, err := ws.readMessage()
	if err != nil || json.Unmarshal(b, &init) != nil || init.Result.SessionID == "" {
		t.Fatalf("initialize: %s %v", b, err)
	}
	send(`{"method":"initialized"}`)
	return ws, send, init.Result.SessionID
}

// stdioPeer serves a connection of the test server over a stdio transport on two pipes, as
// `--listen stdio` does over the process's stdin and stdout.
func stdioPeer(t *testing.T, ts *testServer) *rpcPeer {
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ts.srv.conns.Add(1)
	served := make(chan struct{})
	go func() {
		defer ts.srv.conns.Done()
		defer close(served)
		ts.srv.serveConn(newStdioTransport(inR, outW), "failed to parse JSON-RPC message from exec-server stdio")
		outW.Close() // the client's read ends with the server's output, as at process exit
	}()
	t.Cleanup(func() {
		inW.Close()
		<-served
		inR.Close()
		outR.Close()
	})
	var endOnce sync.Once
	p := &rpcPeer{t: t, send: func(msg string) error {
		_, err := inW.WriteString(msg + "\n")
		return err
	}, end: func() { endOnce.Do(func() { inW.Close() }) }}
	lines := bufio.NewReaderSize(outR, 1<<20)
	p.pump(func() ([]byte, error) { return lines.ReadBytes('\n') })
	return p
}

// askResult is what one askClient returned.
type askResult struct {
	n      int
	result json.RawMessage
	err    error
}

// ask runs session.askClient for test/ask with params {"n":n} on a goroutine of its own.
func ask(ctx context.Context, s *session, n int, out chan<- askResult) {
	go func() {
		r, err := s.askClient(ctx, "test/ask", json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), 0)
		out <- askResult{n, r, err}
	}()
}

// expectRequest reads the next message, which must be request id asking test/ask {"n":n}.
func (p *rpcPeer) expectRequest(id int64, n int) {
	p.t.Helper()
	m, ok := p.recv()
	if !ok || string(m.ID) != jsonInt(id) || m.Method != "test/ask" || string(m.Params) != fmt.Sprintf(`{"n":%d}`, n) {
		p.t.Fatalf("got %+v (ok %v), want request %d of test/ask {\"n\":%d}", m, ok, id, n)
	}
}

func waitAsk(t *testing.T, out <-chan askResult) askResult {
	t.Helper()
	select {
	case r := <-out:
		return r
	case <-time.After(procWait):
		t.Fatal("askClient never returned")
	}
	return askResult{}
}

// TestServerRequestsToTheClient runs requests from the server to the client over a real
// websocket and a real stdio transport: ids go out as 1, 2, 3; answers given out of order
// reach their own waiter, an error answer comes back as the client's error, a request
// past its deadline gives up and its late answer is dropped without harm; the 257th pending
// request is refused at once; the client hanging up ends every wait, a detached session
// refuses at once, and no goroutine is left behind.
func TestServerRequestsToTheClient(t *testing.T) {
	for _, tr := range []struct {
		name string
		dial func(*testing.T, *testServer) *rpcPeer
	}{{"websocket", wsPeer}, {"stdio", stdioPeer}} {
		t.Run(tr.name, func(t *testing.T) {
			ts := startTestServer(t)
			baseG := runtime.NumGoroutine()
			p := tr.dial(t, ts)
			sid := p.initialize()
			s := serverSession(ts, sid)
			out := make(chan askResult, 1)

			// Three at once, answered 3, 1, 2.
			for n := 1; n <= 3; n++ {
				ask(context.Background(), s, n, out)
				p.expectRequest(int64(n), n)
			}
			p.mustSend(`{"id":3,"result":{"n":3}}`)
			if r := waitAsk(t, out); r.n != 3 || string(r.result) != `{"n":3}` || r.err != nil {
				t.Fatalf("request 3 answered first: %+v", r)
			}
			p.mustSend(`{"id":1,"error":{"code":-32000,"message":"denied by the user"}}`)
			var ce *clientError
			if r := waitAsk(t, out); r.n != 1 || !errors.As(r.err, &ce) || ce.Code != -32000 || ce.Message != "denied by the user" {
				t.Fatalf("request 1 answered with an error: %+v", r)
			}
			p.mustSend(`{"id":2,"result":{"n":2}}`)
			if r := waitAsk(t, out); r.n != 2 || string(r.result) != `{"n":2}` || r.err != nil {
				t.Fatalf("request 2: %+v", r)
			}

			// A deadline: the wait gives up; the answer that comes after is dropped, and the
			// connection goes on.
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond) // long enough to be queued, under -race too
			ask(ctx, s, 4, out)
			p.expectRequest(4, 4)
			if r := waitAsk(t, out); !errors.Is(r.err, context.DeadlineExceeded) {
				t.Fatalf("request 4 past its deadline: %+v", r)
			}
			cancel()
			p.mustSend(`{"id":4,"result":{"n":4}}`)
			p.mustSend(`{"id":"after","method":"environment/status"}`)
			if m, ok := p.recv(); !ok || string(m.ID) != `"after"` || string(m.Result) != `{"status":"ready"}` {
				t.Fatalf("after a late answer: %+v (ok %v), want environment/status answered", m, ok)
			}

			// The bound: maxPendingClientRequests wait, the next is refused at once.
			many := make(chan askResult, maxPendingClientRequests)
			for n := range maxPendingClientRequests {
				ask(context.Background(), s, 5+n, many)
				p.expectRequest(int64(5+n), 5+n)
			}
			if _, err := s.askClient(context.Background(), "test/ask", nil, 0); !errors.Is(err, errTooManyClientRequests) {
				t.Fatalf("request %d: %v, want errTooManyClientRequests", maxPendingClientRequests+1, err)
			}

			// The client hangs up: every wait ends with the connection's end.
			p.end()
			for range maxPendingClientRequests {
				if r := waitAsk(t, many); !errors.Is(r.err, errClientGone) {
					t.Fatalf("request %d when the client hung up: %v, want errClientGone", r.n, r.err)
				}
			}
			waitDetached(t, ts, sid)
			if _, err := s.askClient(context.Background(), "test/ask", nil, 0); err == nil || !strings.Contains(err.Error(), "no client is attached") {
				t.Fatalf("asking a detached session: %v", err)
			}
			for range p.msgs { // the transport's end ends the client's reader
			}
			if g, _ := settle(baseG, openFDs()); g > baseG {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines left:\n%s", g-baseG, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}

// TestServerRequestsUnknownAnswerEndsTheConnection: an answer to an id the server never
// gave ends the connection as 0.171 does ("closing exec-server connection after unexpected
// client response"), even while a request of its own is pending, and that request ends with
// the connection.
func TestServerRequestsUnknownAnswerEndsTheConnection(t *testing.T) {
	for _, id := range []string{"2", `"1"`, "0"} {
		t.Run(id, func(t *testing.T) {
			ts := startTestServer(t)
			p := wsPeer(t, ts)
			s := serverSession(ts, p.initialize())
			out := make(chan askResult, 1)
			ask(context.Background(), s, 1, out)
			p.expectRequest(1, 1)
			p.mustSend(`{"id":` + id + `,"result":{}}`)
			if r := waitAsk(t, out); !errors.Is(r.err, errClientGone) {
				t.Fatalf("the pending request: %+v, want errClientGone", r)
			}
			if m, ok := p.recv(); ok {
				t.Fatalf("the connection goes on: %+v", m)
			}
		})
	}
}

// TestServerRequestNeverQueuedIsNotGiven: a response to an id the server has not sent closes
// the connection (docs/protocol.md §3.1), and that includes the id of a request that gave up
// while it waited for room in the outgoing queue: it was numbered, never sent
// (outgoingRequests.queued). Found by the cold review of issue 21.
//
// The queue is filled for real: a client that stops reading its websocket while the server
// writes 32 MiB, with --max-queued-bytes at 1 KiB.
func TestServerRequestNeverQueuedIsNotGiven(t *testing.T) {
	ts := startTestServer(t, func(s *server) { s.cfg.limits.queuedBytes = 1 << 10 })
	ws, send, sid := initializedWS(t, ts)
	s := serverSession(ts, sid)

	// Fill the queue: the writer takes the first 32 MiB and blocks in the socket (the client
	// reads nothing), the second stays queued, far over the 1 KiB bound. Each notify returns
	// once its message is queued.
	big := `{"method":"test/fill","params":"` + strings.Repeat("x", 32<<20) + `"}`
	s.notify([]byte(big))
	s.notify([]byte(big))

	// The request waits for room and gives up: it is never sent.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := s.askClient(ctx, "test/ask", nil, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("askClient with a full queue: %v, want context.DeadlineExceeded", err)
	}

	// The client reads what was queued: the two fills, and no request.
	for range 2 {
		b, err := ws.readMessage()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), `{"method":"test/fill"`) {
			t.Fatalf("got %.80s, want a fill", b)
		}
	}
	// The client answers id 1, which it was never sent, then asks something.
	send(`{"id":1,"result":{}}`)
	send(`{"id":"after","method":"environment/status"}`)
	b, err := ws.readMessage()
	if err == nil {
		t.Errorf("a response to id 1, never sent, did not close the connection (docs/protocol.md §3.1): the server answered %s", b)
	}
}

// TestRelayTooLargeLeavesServerRequestsAlone: on a relay stream, a reply over
// noiseMaxRPCMessage becomes an error response to its id (relayTooLarge). A request of the
// server ({"id":N,"method":…}) has an id too, but N is the server's own numbering
// (docs/protocol.md §3.2): turned into {"error":…,"id":N} it would answer a request of the
// client's it never sent. Found by the cold review of issue 21.
func TestRelayTooLargeLeavesServerRequestsAlone(t *testing.T) {
	params := json.RawMessage(`"` + strings.Repeat("x", noiseMaxRPCMessage) + `"`)
	req := appendClientRequest(nil, 7, "network/policyRequest", params)
	if out := relayTooLarge(req); out != nil {
		t.Errorf("an oversized server request became %s: a reply to the client's id 7", out)
	}
}

// TestServerRequestTimesOut: a request to the client waits at most its own timeout, even
// when its caller's context has none (conn.request).
func TestServerRequestTimesOut(t *testing.T) {
	ts := startTestServer(t)
	p := wsPeer(t, ts)
	s := serverSession(ts, p.initialize())
	done := make(chan error, 1)
	go func() {
		_, err := s.askClient(context.Background(), "test/ask", json.RawMessage(`{"n":1}`), 500*time.Millisecond)
		done <- err
	}()
	p.expectRequest(1, 1)
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("askClient unanswered: %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(procWait):
		t.Fatal("askClient outlived its timeout")
	}
}

// TestOutgoingAnswerBeforeQueued: the client may answer a request the writer already sent
// before its sender marked it queued; that answer is no protocol violation.
func TestOutgoingAnswerBeforeQueued(t *testing.T) {
	var o outgoingRequests
	id, _, err := o.begin()
	if err != nil {
		t.Fatal(err)
	}
	raw := json.RawMessage(strconv.FormatInt(id, 10))
	if !o.gave(raw) {
		t.Fatalf("an answer to pending request %d, not yet marked queued, is judged a violation", id)
	}
	o.forget(id)
	if o.gave(raw) {
		t.Errorf("an answer to request %d, forgotten and never queued, is accepted", id)
	}
}
