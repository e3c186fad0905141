package main

// Harness of the end-to-end tests of remote mode (docs/remote.md) on loopback: runRemote
// against a test registry (remote_registry_test.go) and a test rendezvous that also plays the harness
// on the executor's own socket, driving streams with our Noise initiator.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// remoteTestTimeout bounds every wait, so a broken executor fails a test instead of hanging it.
const remoteTestTimeout = 20 * time.Second

// upgradeRefusal is a scripted answer to one rendezvous upgrade.
type upgradeRefusal struct {
	status     int
	reason     string // x-codex-rendezvous-rejection-reason
	retryAfter string // Retry-After
}

// testRendezvous accepts the executor's websocket.
type testRendezvous struct {
	srv *httptest.Server

	mu       sync.Mutex
	refuse   []upgradeRefusal
	upgrades []http.Header
	conns    chan *wsConn
	seen     chan struct{} // one token per upgrade request
}

func newTestRendezvous(t *testing.T) *testRendezvous {
	r := &testRendezvous{conns: make(chan *wsConn, 16), seen: make(chan struct{}, 64)}
	r.srv = httptest.NewServer(r)
	t.Cleanup(func() {
		r.srv.CloseClientConnections()
		r.srv.Close()
		for {
			select {
			case c := <-r.conns:
				c.closeTCP()
			default:
				return
			}
		}
	})
	return r
}

func (r *testRendezvous) url() string {
	return "ws://" + strings.TrimPrefix(r.srv.URL, "http://") + "/relay?role=environment&sig=SECRETSIG"
}

func (r *testRendezvous) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.upgrades = append(r.upgrades, req.Header.Clone())
	var refusal *upgradeRefusal
	if len(r.refuse) > 0 {
		refusal = &r.refuse[0]
		r.refuse = r.refuse[1:]
	}
	r.mu.Unlock()
	defer func() { r.seen <- struct{}{} }()
	if refusal != nil {
		if refusal.reason != "" {
			w.Header().Set("x-codex-rendezvous-rejection-reason", refusal.reason)
		}
		if refusal.retryAfter != "" {
			w.Header().Set("Retry-After", refusal.retryAfter)
		}
		w.WriteHeader(refusal.status)
		return
	}
	nc, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: "+
		acceptKey(req.Header.Get("Sec-WebSocket-Key"))+"\r\n\r\n")
	r.conns <- newWSConn(nc, brw.Reader, false, wsOptions{})
}

func (r *testRendezvous) upgradeHeaders() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.upgrades...)
}

// next waits for the executor's next accepted socket.
func (r *testRendezvous) next(t *testing.T) *wsConn {
	t.Helper()
	select {
	case c := <-r.conns:
		return c
	case <-time.After(remoteTestTimeout):
		t.Fatal("the executor did not connect to the rendezvous")
		return nil
	}
}

// remoteEnv is one executor under test with its registry and rendezvous.
type remoteEnv struct {
	t    *testing.T
	reg  *testRegistry
	rv   *testRendezvous
	srv  *server // options may add test methods before the executor starts
	done chan error
	logs *remoteLog
}

// remoteLog collects the executor's log and lets a test wait for a line.
type remoteLog struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // a token after each write
}

func (s *remoteLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.written <- struct{}{}:
	default:
	}
	return s.b.Write(p)
}

// waitFor waits until the log contains text.
func (s *remoteLog) waitFor(t *testing.T, text string) {
	t.Helper()
	timeout := time.After(remoteTestTimeout)
	for !strings.Contains(s.String(), text) {
		select {
		case <-s.written:
		case <-timeout:
			t.Fatalf("the log never said %q", text)
		}
	}
}

func (s *remoteLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// remoteOption adjusts the registry, rendezvous or configuration before the executor starts.
type remoteOption func(e *remoteEnv, cfg *remoteConfig)

// startRemote runs runRemote until the test ends. stdin feeds the credential flags.
func startRemote(t *testing.T, stdin io.Reader, flags []string, opts ...remoteOption) *remoteEnv {
	t.Helper()
	return startRemoteWith(t, remoteSetup{stdin: stdin, flags: flags}, opts...)
}

// remoteSetup is what startRemoteWith needs before the configuration is validated.
type remoteSetup struct {
	stdin io.Reader
	flags []string                    // nil: --registration-bearer-stdin with TOKEN
	env   func(string) (string, bool) // nil: an empty environment
	tls   bool                        // an HTTPS registry, trusted through --remote-ca
}

// startRemoteWith is startRemote with an environment and, optionally, an HTTPS registry.
func startRemoteWith(t *testing.T, s remoteSetup, opts ...remoteOption) *remoteEnv {
	t.Helper()
	e := &remoteEnv{t: t, reg: newTestRegistryServer(t, s.tls), rv: newTestRendezvous(t), done: make(chan error, 1), logs: &remoteLog{written: make(chan struct{}, 1)}}
	e.reg.url = e.rv.url()
	flags, stdin := s.flags, s.stdin
	if flags == nil {
		flags = []string{"--registration-bearer-stdin"}
		stdin = strings.NewReader("TOKEN\n")
	}
	if s.tls {
		ca := filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(ca, pemCert(e.reg.srv.Certificate().Raw), 0o600); err != nil {
			t.Fatal(err)
		}
		flags = append(append([]string(nil), flags...), "--remote-ca", ca)
	}
	env := s.env
	if env == nil {
		env = noEnv
	}
	cfg := testConfigEnv(t, e.reg.srv.URL, env, flags...)
	log := newTextLogger(e.logs, levelDebug)
	ctx, cancel := context.WithCancel(context.Background())
	srv := newServer(ctx, serverConfig{sessionTTL: defaultSessionTTL, retention: defaultRetention}, log)
	e.srv = srv
	for _, o := range opts {
		o(e, cfg)
	}
	go func() { e.done <- runRemote(ctx, cfg, srv, stdin, log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-e.done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Logf("runRemote: %v", err)
			}
		case <-time.After(remoteTestTimeout):
			t.Error("runRemote did not return after cancel")
		}
		srv.shutdown()
		if g := relayGoroutines(); g != "" {
			t.Errorf("relay goroutines left after runRemote returned:\n%s", g)
		}
		if t.Failed() {
			t.Logf("executor log:\n%s", e.logs.String())
		}
	})
	return e
}

// relayGoroutines returns the stacks of goroutines still running relay code. A goroutine
// that signalled its WaitGroup may still be unwinding, so it looks again for up to a second
// before it reports one, as goleak does.
func relayGoroutines() string {
	var stacks string
	for wait := time.Millisecond; wait < time.Second; wait *= 2 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var out []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "exec-server.(*relay") || strings.Contains(g, "exec-server.runRemote") ||
				strings.Contains(g, "exec-server.(*registry") {
				out = append(out, g)
			}
		}
		if stacks = strings.Join(out, "\n\n"); stacks == "" {
			return ""
		}
		time.Sleep(wait)
	}
	return stacks
}

// executorKey is the public key the executor registered.
func (e *remoteEnv) executorKey() *noisePublicKey {
	for _, r := range e.reg.snapshot() {
		if strings.HasSuffix(r.path, "/register") {
			var m struct {
				Key *noisePublicKey `json:"executor_public_key"`
			}
			if err := json.Unmarshal(r.body, &m); err != nil {
				e.t.Fatal(err)
			}
			return m.Key
		}
	}
	e.t.Fatal("no register request")
	return nil
}

func (e *remoteEnv) count(suffix string) int {
	n := 0
	for _, r := range e.reg.snapshot() {
		if strings.HasSuffix(r.path, suffix) {
			n++
		}
	}
	return n
}

// harness connects the test harness to the executor's next socket.
func (e *remoteEnv) harness() *testHarness {
	return newTestHarness(e.t, e.rv.next(e.t), e.executorKey())
}

// testHarness drives streams over the executor's socket and routes its frames by stream.
type testHarness struct {
	t       *testing.T
	ws      *wsConn
	execKey *noisePublicKey
	id      *noiseIdentity

	mu      sync.Mutex
	streams map[string]chan relayFrame
	ended   chan struct{} // the socket is gone
}

func newTestHarness(t *testing.T, ws *wsConn, execKey *noisePublicKey) *testHarness {
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h := &testHarness{t: t, ws: ws, execKey: execKey, id: id, streams: map[string]chan relayFrame{}, ended: make(chan struct{})}
	go h.readLoop()
	t.Cleanup(func() { ws.closeTCP(); <-h.ended })
	return h
}

func (h *testHarness) readLoop() {
	defer close(h.ended)
	for {
		op, data, err := h.ws.readFrameMessage()
		if err != nil {
			return
		}
		if op != wsOpBinary {
			h.t.Errorf("executor sent opcode %d", op)
			continue
		}
		f, err := decodeRelayFrame(data)
		if err != nil || checkRelayFrame(&f) != nil {
			h.t.Errorf("executor sent a bad frame %x: %v", data, err)
			continue
		}
		f.payload = bytes.Clone(f.payload)
		h.frames(f.streamID) <- f
	}
}

// frames is the channel of frames the executor sent on a stream id.
func (h *testHarness) frames(id string) chan relayFrame {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.streams[id]
	if c == nil {
		c = make(chan relayFrame, 4096)
		h.streams[id] = c
	}
	return c
}

func (h *testHarness) send(f relayFrame) {
	h.t.Helper()
	f.version = relayFrameVersion
	if err := h.ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &f)); err != nil {
		h.t.Fatalf("send %v frame: %v", f.body, err)
	}
}

func (h *testHarness) sendRaw(b []byte) {
	h.t.Helper()
	if err := h.ws.writeMessageOp(wsOpBinary, b); err != nil {
		h.t.Fatalf("send: %v", err)
	}
}

// nextFrame waits for the executor's next frame on stream id.
func (h *testHarness) nextFrame(id string) relayFrame {
	h.t.Helper()
	select {
	case f := <-h.frames(id):
		return f
	case <-h.ended:
		select {
		case f := <-h.frames(id):
			return f
		default:
		}
		h.t.Fatalf("stream %s: the socket ended", id)
	case <-time.After(remoteTestTimeout):
		h.t.Fatalf("stream %s: no frame from the executor", id)
	}
	return relayFrame{}
}

// expectReset waits for a Reset on stream id.
func (h *testHarness) expectReset(id string) {
	h.t.Helper()
	if f := h.nextFrame(id); f.body != relayBodyReset || f.reason != relayResetReason {
		h.t.Fatalf("stream %s: got %v frame, want a reset", id, f.body)
	}
}

// expectQuiet checks that nothing arrived on stream id so far.
func (h *testHarness) expectQuiet(id string) {
	h.t.Helper()
	select {
	case f := <-h.frames(id):
		h.t.Fatalf("stream %s: unexpected %v frame", id, f.body)
	default:
	}
}

// msg1 builds a handshake message 1 with our initiator.
func (h *testHarness) msg1(id, auth string) (*noiseInitiator, []byte) {
	h.t.Helper()
	i, err := newNoiseInitiator(h.id, h.execKey, noisePrologue("env-test-1", "reg-1", id))
	if err != nil {
		h.t.Fatal(err)
	}
	m, err := i.initiate([]byte(auth))
	if err != nil {
		h.t.Fatal(err)
	}
	return i, m
}

// open performs Resume + Handshake and returns the stream, or the error of a refused one.
func (h *testHarness) open(id string) (*testStream, error) {
	h.t.Helper()
	i, m := h.msg1(id, "harness-auth-token")
	h.send(relayFrame{streamID: id, body: relayBodyResume})
	h.send(relayFrame{streamID: id, body: relayBodyHandshake, payload: m})
	f := h.nextFrame(id)
	switch f.body {
	case relayBodyReset:
		return nil, errors.New("reset")
	case relayBodyHandshake:
	default:
		h.t.Fatalf("stream %s: %v frame instead of msg2", id, f.body)
	}
	t, err := i.readResponse(f.payload)
	if err != nil {
		return nil, fmt.Errorf("msg2 (%d bytes): %w", len(f.payload), err)
	}
	return &testStream{h: h, id: id, t: t}, nil
}

func (h *testHarness) mustOpen(id string) *testStream {
	h.t.Helper()
	s, err := h.open(id)
	if err != nil {
		h.t.Fatalf("open %s: %v", id, err)
	}
	return s
}

// testStream is the harness end of one authenticated stream.
type testStream struct {
	h      *testHarness
	id     string
	t      *noiseTransport
	nextID int
	inbox  []json.RawMessage
	frames int // data frames received
}

// records seals msg and returns its Data frames without sending them.
func (s *testStream) records(msg []byte) []relayFrame {
	s.h.t.Helper()
	var out []relayFrame
	err := s.t.sealMessage(msg, func(seq uint32, rec []byte) error {
		out = append(out, relayFrame{streamID: s.id, body: relayBodyData, seq: seq, segmentCount: 1, payload: bytes.Clone(rec)})
		return nil
	})
	if err != nil {
		s.h.t.Fatal(err)
	}
	return out
}

func (s *testStream) sendJSON(v any) {
	s.h.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		s.h.t.Fatal(err)
	}
	for _, f := range s.records(b) {
		s.h.send(f)
	}
}

// recv returns the next JSON-RPC message from the executor.
func (s *testStream) recv() json.RawMessage {
	s.h.t.Helper()
	for len(s.inbox) == 0 {
		f := s.h.nextFrame(s.id)
		if f.body != relayBodyData {
			s.h.t.Fatalf("stream %s: %v frame while waiting for data", s.id, f.body)
		}
		s.frames++
		err := s.t.openRecord(f.seq, f.payload, func(m []byte) error {
			s.inbox = append(s.inbox, m)
			return nil
		})
		if err != nil {
			s.h.t.Fatalf("stream %s: %v", s.id, err)
		}
	}
	m := s.inbox[0]
	s.inbox = s.inbox[1:]
	return m
}

type rpcReply struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// call sends a request and returns its reply; notifications that arrive first are handed
// to onNote.
func (s *testStream) call(method string, params any, onNote func(rpcReply)) rpcReply {
	s.h.t.Helper()
	s.nextID++
	id := s.nextID
	s.sendJSON(map[string]any{"id": id, "method": method, "params": params})
	for {
		var r rpcReply
		if err := json.Unmarshal(s.recv(), &r); err != nil {
			s.h.t.Fatal(err)
		}
		if r.Method != "" && r.ID == nil {
			if onNote != nil {
				onNote(r)
			}
			continue
		}
		if string(r.ID) != fmt.Sprint(id) {
			s.h.t.Fatalf("reply id %s, want %d", r.ID, id)
		}
		return r
	}
}

func (s *testStream) mustCall(method string, params any) json.RawMessage {
	s.h.t.Helper()
	r := s.call(method, params, nil)
	if r.Error != nil {
		s.h.t.Fatalf("%s: error %d %s", method, r.Error.Code, r.Error.Message)
	}
	return r.Result
}

// initialize runs the lifecycle of docs/protocol.md §4.
func (s *testStream) initialize() {
	s.h.t.Helper()
	res := s.mustCall("initialize", map[string]any{"clientName": "remote-test"})
	var v struct {
		SessionID string `json:"sessionId"`
	}
	if json.Unmarshal(res, &v) != nil || v.SessionID == "" {
		s.h.t.Fatalf("initialize result %s", res)
	}
	s.sendJSON(map[string]any{"method": "initialized", "params": map[string]any{}})
}

// runScript runs sh -c script as process p1 of the stream's session and returns its output
// once process/closed has arrived.
func (s *testStream) runScript(script string) string {
	t := s.h.t
	t.Helper()
	var out bytes.Buffer
	closed := false
	note := processNotes(&out, &closed)
	r := s.call("process/start", map[string]any{"processId": "p1", "argv": []string{"/bin/sh", "-c", script},
		"cwd": "file://" + t.TempDir(), "env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": false}, note)
	skipIfMissing(t, r, "process/start")
	if r.Error != nil {
		t.Fatalf("process/start: %s", r.Error.Message)
	}
	for !closed {
		var n rpcReply
		json.Unmarshal(s.recv(), &n)
		note(n)
	}
	return out.String()
}

// processNotes collects process/output chunks into out and sets closed on process/closed.
func processNotes(out *bytes.Buffer, closed *bool) func(rpcReply) {
	return func(r rpcReply) {
		var p struct {
			Chunk string `json:"chunk"`
		}
		json.Unmarshal(r.Params, &p)
		switch r.Method {
		case "process/output":
			b, _ := base64.StdEncoding.DecodeString(p.Chunk)
			out.Write(b)
		case "process/closed":
			*closed = true
		}
	}
}

// skipIfMissing skips a test whose method another part of the server does not have yet.
func skipIfMissing(t *testing.T, r rpcReply, method string) {
	if r.Error != nil && r.Error.Code == codeMethodNotFound {
		t.Skipf("%s is not implemented in this build: %s", method, r.Error.Message)
	}
}
