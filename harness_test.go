package main

// Test harness: a real server on a loopback socket and a websocket client speaking to it.
// Every concern's tests drive the server through these, as a client would.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testServer is an exec-server listening on 127.0.0.1 for one test.
type testServer struct {
	srv *server
	url string
}

// startTestServer starts a server whose lifetime is the test's; opts may adjust its config.
func startTestServer(t testing.TB, opts ...func(*server)) *testServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := newTextLogger(io.Discard, levelInfo)
	srv := newServer(ctx, serverConfig{sessionTTL: defaultSessionTTL, retention: defaultRetention, stallTimeout: defaultStallTimeout}, log)
	for _, o := range opts {
		o(srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ws := newWSServer(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ws.serve(ln)
	}()
	t.Cleanup(func() {
		ws.close()
		cancel()
		srv.shutdown()
		srv.conns.Wait()
		<-done
	})
	return &testServer{srv: srv, url: "ws://" + ln.Addr().String()}
}

// testNote is one notification a test client received.
type testNote struct {
	Method string
	Params json.RawMessage
}

type testReply struct {
	Result json.RawMessage
	Err    *rpcError
}

// testClient is a websocket JSON-RPC client for tests.
type testClient struct {
	t         testing.TB
	ws        *wsConn
	nextID    atomic.Int64
	sessionID string

	mu      sync.Mutex
	pending map[string]chan testReply
	notes   []testNote
	other   []json.RawMessage // replies with id -1 and anything unexpected
	changed chan struct{}     // closed and replaced whenever notes or other grow
	done    chan struct{}     // closed when the connection ends
}

// dial opens a websocket to the server without initializing.
func (ts *testServer) dial(t testing.TB) *testClient {
	t.Helper()
	ws, _, err := dialWebsocket(context.Background(), ts.url, nil, nil, wsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc := &testClient{t: t, ws: ws, pending: map[string]chan testReply{}, changed: make(chan struct{}), done: make(chan struct{})}
	go tc.readLoop()
	t.Cleanup(tc.close)
	return tc
}

// connect dials and runs initialize + initialized.
func (ts *testServer) connect(t testing.TB) *testClient {
	t.Helper()
	tc := ts.dial(t)
	tc.initialize(nil)
	return tc
}

// initialize runs initialize (resuming resume when non-nil) and sends initialized.
func (tc *testClient) initialize(resume *string) {
	tc.t.Helper()
	params := map[string]any{"clientName": "test"}
	if resume != nil {
		params["resumeSessionId"] = *resume
	}
	res := tc.mustCall("initialize", params)
	var r struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(res, &r)
	tc.sessionID = r.SessionID
	tc.notify("initialized", map[string]any{})
}

func (tc *testClient) close() {
	tc.ws.close(nil)
	select {
	case <-tc.done:
	case <-time.After(5 * time.Second):
		tc.ws.closeTCP()
	}
}

func (tc *testClient) readLoop() {
	defer close(tc.done)
	for {
		msg, err := tc.ws.readMessage()
		if err != nil {
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
			Error  *rpcError       `json:"error"`
		}
		if err := json.Unmarshal(msg, &m); err != nil {
			tc.t.Errorf("server sent invalid JSON: %v: %.200s", err, msg)
			return
		}
		tc.mu.Lock()
		switch {
		case m.Method != "":
			tc.notes = append(tc.notes, testNote{m.Method, append(json.RawMessage(nil), m.Params...)})
			close(tc.changed)
			tc.changed = make(chan struct{})
		case tc.pending[string(m.ID)] != nil:
			tc.pending[string(m.ID)] <- testReply{append(json.RawMessage(nil), m.Result...), m.Error}
			delete(tc.pending, string(m.ID))
		default:
			tc.other = append(tc.other, append(json.RawMessage(nil), msg...))
			close(tc.changed)
			tc.changed = make(chan struct{})
		}
		tc.mu.Unlock()
	}
}

// send writes a raw message.
func (tc *testClient) send(msg string) {
	tc.t.Helper()
	if err := tc.ws.writeMessageOp(wsOpText, []byte(msg)); err != nil {
		tc.t.Fatalf("send: %v", err)
	}
}

// start sends a request and returns a channel for its reply.
func (tc *testClient) start(method string, params any) <-chan testReply {
	tc.t.Helper()
	id := strconv.FormatInt(tc.nextID.Add(1), 10)
	ch := make(chan testReply, 1)
	tc.mu.Lock()
	tc.pending[id] = ch
	tc.mu.Unlock()
	p, err := json.Marshal(params)
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.send(fmt.Sprintf(`{"id":%s,"method":%q,"params":%s}`, id, method, p))
	return ch
}

// call sends a request and waits for its reply.
func (tc *testClient) call(method string, params any) (json.RawMessage, *rpcError) {
	tc.t.Helper()
	select {
	case r := <-tc.start(method, params):
		return r.Result, r.Err
	case <-tc.done:
		tc.t.Fatalf("%s: connection closed before the reply", method)
	case <-time.After(60 * time.Second):
		tc.t.Fatalf("%s: no reply within a minute", method)
	}
	return nil, nil
}

// mustCall is call that fails the test on an error reply.
func (tc *testClient) mustCall(method string, params any) json.RawMessage {
	tc.t.Helper()
	res, err := tc.call(method, params)
	if err != nil {
		tc.t.Fatalf("%s: error %d %s", method, err.Code, err.Message)
	}
	return res
}

// callErr is call that fails the test unless the reply is an error.
func (tc *testClient) callErr(method string, params any) *rpcError {
	tc.t.Helper()
	res, err := tc.call(method, params)
	if err == nil {
		tc.t.Fatalf("%s: want an error, got %s", method, res)
	}
	return err
}

func (tc *testClient) notify(method string, params any) {
	tc.t.Helper()
	p, _ := json.Marshal(params)
	tc.send(fmt.Sprintf(`{"method":%q,"params":%s}`, method, p))
}

// waitNote waits until a notification after position from satisfies match, and returns it
// with its position. Use from=0 to search from the first notification.
func (tc *testClient) waitNote(from int, timeout time.Duration, match func(n testNote) bool) (testNote, int) {
	tc.t.Helper()
	deadline := time.After(timeout)
	for {
		tc.mu.Lock()
		for i := from; i < len(tc.notes); i++ {
			if match(tc.notes[i]) {
				n := tc.notes[i]
				tc.mu.Unlock()
				return n, i
			}
		}
		from = len(tc.notes)
		changed := tc.changed
		tc.mu.Unlock()
		select {
		case <-changed:
		case <-tc.done:
			tc.t.Fatalf("connection closed while waiting for a notification")
		case <-deadline:
			tc.t.Fatalf("no matching notification within %v", timeout)
		}
	}
}

// notesSnapshot returns a copy of every notification received so far.
func (tc *testClient) notesSnapshot() []testNote {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return append([]testNote(nil), tc.notes...)
}

// waitOther waits for a message that was neither a notification nor a reply to a pending
// request (such as an error with id -1).
func (tc *testClient) waitOther(timeout time.Duration) json.RawMessage {
	tc.t.Helper()
	deadline := time.After(timeout)
	for {
		tc.mu.Lock()
		if len(tc.other) > 0 {
			m := tc.other[0]
			tc.other = tc.other[1:]
			tc.mu.Unlock()
			return m
		}
		changed := tc.changed
		tc.mu.Unlock()
		select {
		case <-changed:
		case <-tc.done:
			tc.t.Fatalf("connection closed while waiting for a message")
		case <-deadline:
			tc.t.Fatalf("no message within %v", timeout)
		}
	}
}

// waitClosed waits for the server to end the connection.
func (tc *testClient) waitClosed(timeout time.Duration) {
	tc.t.Helper()
	select {
	case <-tc.done:
	case <-time.After(timeout):
		tc.t.Fatalf("connection still open after %v", timeout)
	}
}
