package main

// End-to-end tests of remote mode (docs/remote.md) on loopback: runRemote against a test
// registry (registry_test.go) and a test rendezvous that also plays the harness on the
// executor's own socket, driving streams with our Noise initiator.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
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
	e := &remoteEnv{t: t, reg: newTestRegistry(t), rv: newTestRendezvous(t), done: make(chan error, 1), logs: &remoteLog{written: make(chan struct{}, 1)}}
	e.reg.url = e.rv.url()
	if flags == nil {
		flags = []string{"--registration-bearer-stdin"}
		stdin = strings.NewReader("TOKEN\n")
	}
	cfg := testConfig(t, e.reg.srv.URL, flags...)
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
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

// skipIfMissing skips a test whose method another part of the server does not have yet.
func skipIfMissing(t *testing.T, r rpcReply, method string) {
	if r.Error != nil && r.Error.Code == codeMethodNotFound {
		t.Skipf("%s is not implemented in this build: %s", method, r.Error.Message)
	}
}

func TestRemoteInitializeAndEnvironmentInfo(t *testing.T) {
	e := startRemote(t, nil, nil)
	h := e.harness()
	s := h.mustOpen("00000000-0000-4000-8000-000000000001")
	s.initialize()
	var info map[string]any
	if err := json.Unmarshal(s.mustCall("environment/info", nil), &info); err != nil || info["platformOs"] == nil {
		t.Fatalf("environment/info = %v, %v", info, err)
	}

	ups := e.rv.upgradeHeaders()
	if len(ups) != 1 || !regexp.MustCompile(`^req_[0-9a-f]{32}$`).MatchString(ups[0].Get("X-Request-Id")) ||
		ups[0].Get("Authorization") != "" {
		t.Fatalf("upgrade headers %v", ups)
	}
	var v registryRequest
	for _, r := range e.reg.snapshot() {
		if strings.HasSuffix(r.path, "/validate") {
			v = r
		}
	}
	var body struct {
		RegID string          `json:"executor_registration_id"`
		Key   *noisePublicKey `json:"harness_public_key"`
		Auth  string          `json:"harness_key_authorization"`
	}
	if err := json.Unmarshal(v.body, &body); err != nil || body.RegID != "reg-1" || body.Auth != "harness-auth-token" ||
		!body.Key.equal(h.id.publicKey()) || v.header.Get("X-Codex-Noise-Stream-Id") != s.id {
		t.Fatalf("validate request %s %v: %v", v.body, v.header, err)
	}
	if strings.Contains(e.logs.String(), "TOKEN") || strings.Contains(e.logs.String(), "harness-auth-token") {
		t.Fatalf("secrets in the log:\n%s", e.logs.String())
	}
}

func TestRemoteProcessStartStreamsOutput(t *testing.T) {
	e := startRemote(t, nil, nil)
	s := e.harness().mustOpen("s-proc")
	s.initialize()
	var out bytes.Buffer
	closed := false
	note := func(r rpcReply) {
		var p struct {
			Chunk string `json:"chunk"`
		}
		json.Unmarshal(r.Params, &p)
		switch r.Method {
		case "process/output":
			b, _ := base64.StdEncoding.DecodeString(p.Chunk)
			out.Write(b)
		case "process/closed":
			closed = true
		}
	}
	r := s.call("process/start", map[string]any{"processId": "p1", "argv": []string{"/bin/sh", "-c", "for i in 1 2 3; do echo line$i; done"},
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
	if out.String() != "line1\nline2\nline3\n" {
		t.Fatalf("output %q", out.String())
	}
}

func TestRemoteReadFileSpansManyRecords(t *testing.T) {
	e := startRemote(t, nil, nil)
	s := e.harness().mustOpen("s-big")
	s.initialize()
	data := make([]byte, 5<<20)
	rand.Read(data)
	path := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r := s.call("fs/readFile", map[string]any{"path": "file://" + path}, nil)
	skipIfMissing(t, r, "fs/readFile")
	if r.Error != nil {
		t.Fatalf("fs/readFile: %s", r.Error.Message)
	}
	var v struct {
		Data string `json:"dataBase64"`
	}
	json.Unmarshal(r.Result, &v)
	got, _ := base64.StdEncoding.DecodeString(v.Data)
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, want the %d written", len(got), len(data))
	}
	if want := (5<<20)*4/3/noiseRecordPlaintextMax - 1; s.frames < want {
		t.Fatalf("the reply came in %d records, want at least %d", s.frames, want)
	}
}

// TestRemoteLargeRequestSpansRecords sends a request bigger than one record and gets the
// same answer, whatever methods the build has.
func TestRemoteLargeRequestSpansRecords(t *testing.T) {
	e := startRemote(t, nil, nil)
	s := e.harness().mustOpen("s-large")
	name := strings.Repeat("n", 3*noiseRecordPlaintextMax)
	s.mustCall("initialize", map[string]any{"clientName": name})
}

func TestRemoteThreeConcurrentStreams(t *testing.T) {
	e := startRemote(t, nil, nil)
	h := e.harness()
	var wg sync.WaitGroup
	results := make(chan string, 3)
	for i := range 3 {
		s := h.mustOpen(fmt.Sprintf("stream-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.initialize()
			for range 5 {
				s.mustCall("environment/info", nil)
			}
			results <- s.id
		}()
	}
	wg.Wait()
	if len(results) != 3 {
		t.Fatalf("%d streams finished", len(results))
	}
}

func TestRemoteHarnessResetTearsDownOneStream(t *testing.T) {
	e := startRemote(t, nil, nil)
	h := e.harness()
	a, b := h.mustOpen("a"), h.mustOpen("b")
	a.initialize()
	b.initialize()
	h.send(relayFrame{streamID: "a", body: relayBodyReset, reason: "harness_disconnected"})
	b.mustCall("environment/info", nil) // b lives on; its reply orders after any echo on a
	h.expectQuiet("a")                  // a harness reset is not echoed
	h.send(relayFrame{streamID: "a", body: relayBodyData, segmentCount: 1, payload: []byte{1}})
	h.expectReset("a") // a is gone
	a2 := h.mustOpen("a")
	a2.initialize() // and its id is free again
}

func TestRemoteValidateRefusals(t *testing.T) {
	tests := []struct {
		name   string
		answer func(w http.ResponseWriter, m map[string]json.RawMessage)
	}{
		{"valid false", func(w http.ResponseWriter, _ map[string]json.RawMessage) { io.WriteString(w, `{"valid":false}`) }},
		{"403", func(w http.ResponseWriter, _ map[string]json.RawMessage) { w.WriteHeader(403) }},
		{"500", func(w http.ResponseWriter, _ map[string]json.RawMessage) { w.WriteHeader(500) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startRemote(t, nil, nil, func(e *remoteEnv, _ *remoteConfig) { e.reg.validate = tt.answer })
			h := e.harness()
			if _, err := h.open("s-1"); err == nil || err.Error() != "reset" {
				t.Fatalf("open = %v, want a reset", err)
			}
			if e.count("/validate") != 1 {
				t.Fatal("no validate call")
			}
		})
	}
}

func TestRemoteValidate401SendsRejectionPayload(t *testing.T) {
	e := startRemote(t, nil, nil, func(e *remoteEnv, _ *remoteConfig) {
		e.reg.validate = func(w http.ResponseWriter, _ map[string]json.RawMessage) { w.WriteHeader(401) }
	})
	h := e.harness()
	i, m := h.msg1("s-1", "harness-auth-token")
	h.send(relayFrame{streamID: "s-1", body: relayBodyHandshake, payload: m})
	f := h.nextFrame("s-1")
	if f.body != relayBodyHandshake || len(f.payload) != noiseMsg2Overhead+len(noiseRegistryRejected) {
		t.Fatalf("got %v frame of %d bytes, want msg2 of 3465", f.body, len(f.payload))
	}
	if _, err := i.readResponse(f.payload); !errors.Is(err, errNoiseRegistryRejected) {
		t.Fatalf("readResponse = %v", err)
	}
	h.send(relayFrame{streamID: "s-1", body: relayBodyData, segmentCount: 1, payload: []byte{1, 2}})
	h.expectReset("s-1") // no stream was activated
}

func TestRemoteRendezvousDropReconnectsWithoutRegistering(t *testing.T) {
	e := startRemote(t, nil, nil)
	first := e.rv.next(t)
	first.closeTCP()
	h := e.harness()
	h.mustOpen("s-1").initialize()
	ups := e.rv.upgradeHeaders()
	if len(ups) != 2 || ups[0].Get("X-Request-Id") == ups[1].Get("X-Request-Id") {
		t.Fatalf("upgrades %v", ups)
	}
	if n := e.count("/register"); n != 1 {
		t.Fatalf("%d registrations, want 1", n)
	}
}

func TestRemoteUpgradeRefusedReregisters(t *testing.T) {
	e := startRemote(t, nil, nil, func(e *remoteEnv, _ *remoteConfig) {
		e.rv.refuse = []upgradeRefusal{{status: 403, reason: "invalid_signature"}, {status: 404, reason: "unknown_route"}, {status: 409},
			{status: 400, reason: "route_unavailable"}, {status: 503}}
	})
	h := e.harness()
	h.mustOpen("s-1").initialize()
	// Four refusals call for a new URL; the 503 retries the same one.
	if n := e.count("/register"); n != 5 {
		t.Fatalf("%d registrations, want 5", n)
	}
	if n := len(e.rv.upgradeHeaders()); n != 6 {
		t.Fatalf("%d upgrades, want 6", n)
	}
	if logs := e.logs.String(); strings.Contains(logs, "SECRETSIG") || !strings.Contains(logs, "rendezvous connection failed") {
		t.Fatalf("the log leaks the signed URL or misses the failure:\n%s", logs)
	}
}

func TestRemoteRegistrationRetriedThenServes(t *testing.T) {
	e := startRemote(t, nil, nil, func(e *remoteEnv, _ *remoteConfig) {
		e.reg.register = []func(http.ResponseWriter){status(503), status(503, "Retry-After", "0")}
	})
	e.harness().mustOpen("s-1").initialize()
	if n := e.count("/register"); n != 3 {
		t.Fatalf("%d registrations, want 3", n)
	}
}

func TestRemotePermanentFailuresEndRunRemote(t *testing.T) {
	expired, _ := json.Marshal(map[string]any{"version": 1, "environment_id": "env-test-1", "token": "t", "expires_at": 1})
	tests := []struct {
		name    string
		stdin   string
		flags   []string
		opt     remoteOption
		wantErr string
	}{
		{"registration 401", "", nil, func(e *remoteEnv, _ *remoteConfig) { e.reg.register = []func(http.ResponseWriter){status(401)} }, "HTTP 401"},
		{"registration 404", "", nil, func(e *remoteEnv, _ *remoteConfig) { e.reg.register = []func(http.ResponseWriter){status(404)} }, "HTTP 404"},
		{"bad registration", "", nil, func(e *remoteEnv, _ *remoteConfig) { e.reg.register = []func(http.ResponseWriter){body(`{}`)} }, "invalid registration response"},
		{"expired credential", string(expired) + "\n", []string{"--executor-credential-stdin"}, func(*remoteEnv, *remoteConfig) {}, "expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdin io.Reader
			if tt.flags != nil {
				stdin = strings.NewReader(tt.stdin)
			}
			e := startRemote(t, stdin, tt.flags, tt.opt)
			select {
			case err := <-e.done:
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("runRemote = %v, want %q", err, tt.wantErr)
				}
				e.done <- nil // for the cleanup
			case <-time.After(remoteTestTimeout):
				t.Fatal("runRemote kept running")
			}
		})
	}
}

func TestRemoteCredentialRotationReachesValidate(t *testing.T) {
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	exp := time.Now().Add(time.Hour).Unix()
	frame := func(tok string) string {
		b, _ := json.Marshal(map[string]any{"version": 1, "environment_id": "env-test-1", "token": tok, "expires_at": exp})
		return string(b) + "\n"
	}
	go io.WriteString(pw, frame("tok-1"))
	e := startRemote(t, pr, []string{"--executor-credential-stdin"})
	h := e.harness()
	io.WriteString(pw, frame("tok-2"))
	e.logs.waitFor(t, "registry credential rotated")
	h.mustOpen("s-1")
	var auth []string
	for _, r := range e.reg.snapshot() {
		auth = append(auth, r.path+" "+r.header.Get("Authorization"))
	}
	want := []string{"/cloud/environment/env-test-1/register Bearer tok-1", "/cloud/environment/env-test-1/validate Bearer tok-2"}
	if strings.Join(auth, ",") != strings.Join(want, ",") {
		t.Fatalf("requests %q, want %q", auth, want)
	}
	pw.Close() // the credential stream ends: so does the executor
	select {
	case err := <-e.done:
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("runRemote = %v", err)
		}
		e.done <- nil
	case <-time.After(remoteTestTimeout):
		t.Fatal("runRemote kept running after the credential stream closed")
	}
}

// holdValidations makes the registry sit on every /validate until unblock (or the end of
// the test), then answer valid:true.
func holdValidations(t *testing.T) (remoteOption, func()) {
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // before the registry's own cleanup, which waits for its handlers
	return func(e *remoteEnv, _ *remoteConfig) {
		e.reg.validate = func(w http.ResponseWriter, _ map[string]json.RawMessage) {
			<-release
			io.WriteString(w, `{"valid":true}`)
		}
	}, unblock
}

// TestRemoteNegativeConformance walks the failure cases of docs/remote.md §3–§6 that concern
// one socket: bad handshakes, frames and records, an oversized message, missing pongs.
func TestRemoteNegativeConformance(t *testing.T) {
	badMsg1 := []struct {
		name string
		msg1 func(h *testHarness) []byte
	}{
		{"wrong prologue width", func(h *testHarness) []byte {
			var p []byte
			for _, f := range []string{noisePrologueTag, "env-test-1", "reg-1", "s-1"} {
				p = append(p, byte(len(f)>>24), byte(len(f)>>16), byte(len(f)>>8), byte(len(f)))
				p = append(p, f...)
			}
			i, _ := newNoiseInitiator(h.id, h.execKey, p)
			m, _ := i.initiate([]byte("a"))
			return m
		}},
		{"wrong registration id in the prologue", func(h *testHarness) []byte {
			i, _ := newNoiseInitiator(h.id, h.execKey, noisePrologue("env-test-1", "reg-2", "s-1"))
			m, _ := i.initiate([]byte("a"))
			return m
		}},
		{"suite label used as the protocol name", func(h *testHarness) []byte {
			wrong := noiseProtocol{name: noiseSuiteLabel, pattern: &noisePatternHybridIK, hash: noiseSHA256}
			hs, _ := newNoiseHandshake(&wrong, true, h.id, h.execKey, noisePrologue("env-test-1", "reg-1", "s-1"))
			m, _ := hs.writeMessage(nil, []byte("a"))
			return m
		}},
		{"authorization over 4096 bytes", func(h *testHarness) []byte {
			_, m := h.msg1("s-1", strings.Repeat("a", noiseMaxAuthorization+1))
			return m
		}},
		{"authorization not UTF-8", func(h *testHarness) []byte {
			_, m := h.msg1("s-1", "\xff\xfe")
			return m
		}},
		{"truncated message 1", func(h *testHarness) []byte {
			_, m := h.msg1("s-1", "a")
			return m[:len(m)-1]
		}},
	}
	for _, tt := range badMsg1 {
		t.Run(tt.name+": reset, no validate", func(t *testing.T) {
			e := startRemote(t, nil, nil)
			h := e.harness()
			h.send(relayFrame{streamID: "s-1", body: relayBodyHandshake, payload: tt.msg1(h)})
			h.expectReset("s-1")
			if e.count("/validate") != 0 {
				t.Fatal("validate was called")
			}
		})
	}
	t.Run("data before msg2: reset, and msg2 never follows", func(t *testing.T) {
		hold, unblock := holdValidations(t)
		e := startRemote(t, nil, nil, hold)
		h := e.harness()
		_, m := h.msg1("s-1", "a")
		h.send(relayFrame{streamID: "s-1", body: relayBodyHandshake, payload: m})
		h.send(relayFrame{streamID: "s-1", body: relayBodyData, segmentCount: 1, payload: []byte{1}})
		h.expectReset("s-1")
		unblock()
		h.mustOpen("s-2").initialize() // ordered after any late msg2 on s-1
		h.expectQuiet("s-1")
	})
	t.Run("data for an unknown stream: reset", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		h.send(relayFrame{streamID: "nobody", body: relayBodyData, segmentCount: 1, payload: []byte{1}})
		h.expectReset("nobody")
	})
	t.Run("ignored frames keep the stream and the socket", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		s := h.mustOpen("s-1")
		s.initialize()
		h.send(relayFrame{streamID: "s-1", body: relayBodyHeartbeat})
		h.send(relayFrame{streamID: "s-1", body: relayBodyAck, ack: 3, ackBits: 0xffffffff})
		h.send(relayFrame{streamID: "s-1", body: relayBodyResume, nextSeq: 9})
		h.sendRaw(appendRelayFrame(nil, &relayFrame{version: 2, streamID: "s-1", body: relayBodyData, segmentCount: 1, payload: []byte{1}}))
		h.send(relayFrame{streamID: "s-1", body: relayBodyData, segmentCount: 2, payload: []byte{1}}) // invalid segmentation: dropped
		h.sendRaw([]byte{0xff, 0xff})                                                                 // not protobuf: dropped
		h.ws.writeMessageOp(wsOpText, []byte(`{"id":1}`))                                             // text: dropped
		s.mustCall("environment/info", nil)
		h.expectQuiet("s-1")
	})
	t.Run("unknown protobuf fields are ignored", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		s := h.mustOpen("s-1")
		b, _ := json.Marshal(map[string]any{"id": 1, "method": "initialize", "params": map[string]any{"clientName": "x"}})
		for _, f := range s.records(b) {
			f.version = relayFrameVersion
			raw := appendRelayFrame(nil, &f)
			raw = append(raw, 0x5a, 0x03, 'a', 'b', 'c', 0x62, 0x00, 0x78, 0x63) // fields 11, 12 (strings), 15 (varint)
			h.sendRaw(raw)
		}
		if r := s.recv(); !bytes.Contains(r, []byte(`"sessionId"`)) {
			t.Fatalf("reply %s", r)
		}
	})
	t.Run("duplicate and out-of-order records are reassembled", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		s := h.mustOpen("s-1")
		b, _ := json.Marshal(map[string]any{"id": 1, "method": "initialize", "params": map[string]any{"clientName": strings.Repeat("x", 2*noiseRecordPlaintextMax)}})
		recs := s.records(b)
		if len(recs) != 3 {
			t.Fatalf("%d records", len(recs))
		}
		for _, i := range []int{2, 0, 0, 2, 1, 1} {
			h.send(recs[i])
		}
		if r := s.recv(); !bytes.Contains(r, []byte(`"sessionId"`)) {
			t.Fatalf("reply %s", r)
		}
		s.nextID = 1
		s.sendJSON(map[string]any{"method": "initialized"})
		s.mustCall("environment/info", nil)
	})
	t.Run("re-handshake on an active stream: reset", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		h.mustOpen("s-1").initialize()
		_, m := h.msg1("s-1", "a")
		h.send(relayFrame{streamID: "s-1", body: relayBodyHandshake, payload: m})
		h.expectReset("s-1")
	})
	t.Run("non-JSON record: reset", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		s := h.mustOpen("s-1")
		for _, f := range s.records([]byte("{not json")) {
			h.send(f)
		}
		h.expectReset("s-1")
	})
	t.Run("record that fails to decrypt: reset", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		s := h.mustOpen("s-1")
		recs := s.records([]byte(`{"id":1,"method":"environment/info"}`))
		recs[0].payload[0] ^= 1
		h.send(recs[0])
		h.expectReset("s-1")
	})
	t.Run("frame over 256 KiB: socket dropped, same URL again", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		// The executor may drop the socket before all of it is written: ignore write errors.
		h.ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: 1, streamID: "s-1", body: relayBodyData, segmentCount: 1, payload: make([]byte, relayMaxMessage)}))
		h2 := e.harness()
		h2.mustOpen("s-1").initialize()
		if n := e.count("/register"); n != 1 {
			t.Fatalf("%d registrations, want 1", n)
		}
	})
	t.Run("no pongs: socket dropped after the pong timeout", func(t *testing.T) {
		e := startRemote(t, nil, nil, func(_ *remoteEnv, cfg *remoteConfig) {
			cfg.timings.pingInterval = 10 * time.Millisecond
			cfg.timings.pongTimeout = 50 * time.Millisecond
		})
		silent := e.rv.next(t) // never read: pings go unanswered
		defer silent.closeTCP()
		h := e.harness() // the reconnect; this harness reads, so it answers pings
		h.mustOpen("s-1").initialize()
		if n := e.count("/register"); n != 1 {
			t.Fatalf("%d registrations, want 1", n)
		}
	})
	t.Run("8 failed handshakes pause handshakes; the socket stays", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		for i := range relayMaxFailedHandshakes {
			id := fmt.Sprintf("bad-%d", i)
			h.send(relayFrame{streamID: id, body: relayBodyHandshake, payload: []byte("not a noise message")})
			h.expectReset(id)
		}
		if _, err := h.open("good"); err == nil {
			t.Fatal("a handshake was accepted during the pause")
		}
		if e.count("/validate") != 0 {
			t.Fatal("validate was called during the pause")
		}
		if !strings.Contains(e.logs.String(), "pausing Noise relay handshakes after repeated failures") {
			t.Fatal("the pause was not logged")
		}
	})
	t.Run("handshakes resume after the pause", func(t *testing.T) {
		e := startRemote(t, nil, nil, func(_ *remoteEnv, cfg *remoteConfig) { cfg.timings.handshakePause = time.Millisecond })
		h := e.harness()
		for i := range relayMaxFailedHandshakes {
			id := fmt.Sprintf("bad-%d", i)
			h.send(relayFrame{streamID: id, body: relayBodyHandshake, payload: []byte("x")})
			h.expectReset(id)
		}
		for i := 0; ; i++ {
			if _, err := h.open(fmt.Sprintf("good-%d", i)); err == nil {
				break
			}
			if i == 50 {
				t.Fatal("handshakes never resumed")
			}
		}
	})
	t.Run("stream and validation limits", func(t *testing.T) {
		hold, unblock := holdValidations(t)
		e := startRemote(t, nil, nil, hold)
		h := e.harness()
		var msg1s [][]byte
		for i := range relayMaxPendingValidations + 1 {
			_, m := h.msg1(fmt.Sprintf("p-%d", i), "a")
			msg1s = append(msg1s, m)
		}
		for i, m := range msg1s {
			h.send(relayFrame{streamID: fmt.Sprintf("p-%d", i), body: relayBodyHandshake, payload: m})
		}
		h.expectReset(fmt.Sprintf("p-%d", relayMaxPendingValidations)) // the 33rd
		unblock()
		for i := range relayMaxPendingValidations {
			if f := h.nextFrame(fmt.Sprintf("p-%d", i)); f.body != relayBodyHandshake {
				t.Fatalf("p-%d: %v", i, f.body)
			}
		}
		// 32 streams are open: 96 more fill the table, the next one is refused.
		for i := relayMaxPendingValidations; i < relayMaxActiveStreams; i++ {
			h.mustOpen(fmt.Sprintf("q-%d", i))
		}
		if _, err := h.open("one-too-many"); err == nil {
			t.Fatalf("stream %d was accepted", relayMaxActiveStreams+1)
		}
	})
}

// testMethodOption adds a method to the executor's server, without a lifecycle gate.
func testMethodOption(name string, call func(c *conn, params json.RawMessage) (any, error)) remoteOption {
	return func(e *remoteEnv, _ *remoteConfig) { e.srv.methods[name] = method{call: call} }
}

// blocker is a handler that blocks, ignoring cancellation as a read from a hung NFS mount
// would, until the test ends. Its release must be registered with t.Cleanup after
// startRemote, so that it runs before the executor is asked to stop.
type blocker struct {
	started chan struct{}
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}, 64), release: make(chan struct{})}
}

func (b *blocker) block() {
	b.started <- struct{}{}
	<-b.release
}

func (b *blocker) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-b.started:
	case <-time.After(remoteTestTimeout):
		t.Fatal("the blocking handler never ran")
	}
}

// TestRemoteStalledStreamDoesNotStallTheSocket: one stream whose dispatcher is stuck must not
// stop the socket reader, or every other stream on the physical socket (and the pongs behind
// them) would stall with it. Its messages wait in its own queue, which is bounded: past the
// bound that stream alone is reset.
func TestRemoteStalledStreamDoesNotStallTheSocket(t *testing.T) {
	tests := []struct {
		name      string
		limit     int  // cfg.streamInboxBytes; 0: the default
		wantReset bool // 200 small requests pass the limit
	}{
		{"queued below the limit", 0, false},
		{"reset past the limit", 4 << 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBlocker()
			e := startRemote(t, nil, nil, testMethodOption("test/block", func(*conn, json.RawMessage) (any, error) {
				b.block() // synchronous: the stream's dispatcher itself is stuck
				return "released", nil
			}), func(_ *remoteEnv, cfg *remoteConfig) { cfg.streamInboxBytes = tt.limit })
			t.Cleanup(func() { close(b.release) })
			h := e.harness()
			a := h.mustOpen("a")
			a.sendJSON(map[string]any{"id": 1, "method": "test/block"})
			b.waitStarted(t)
			for i := range 200 {
				a.sendJSON(map[string]any{"id": i + 2, "method": "environment/info"})
			}
			other := h.mustOpen("b")
			other.initialize()
			other.mustCall("environment/info", nil)
			if tt.wantReset {
				h.expectReset("a")
			} else {
				h.expectQuiet("a")
			}
		})
	}
}

// TestRemoteReconnectIsNotHeldByAStuckHandler: when the physical socket drops, the executor
// reconnects at once, even while a handler of an old stream ignores its cancellation.
func TestRemoteReconnectIsNotHeldByAStuckHandler(t *testing.T) {
	b := newBlocker()
	e := startRemote(t, nil, nil, testMethodOption("test/stuck", func(*conn, json.RawMessage) (any, error) {
		return later{run: func(context.Context) (any, error) {
			b.block()
			return nil, nil
		}}, nil
	}))
	t.Cleanup(func() { close(b.release) })
	h := e.harness()
	s := h.mustOpen("s-1")
	s.sendJSON(map[string]any{"id": 1, "method": "test/stuck"})
	b.waitStarted(t)
	h.ws.closeTCP()
	e.harness().mustOpen("s-2").initialize()
}

// TestRemoteHarnessResetDuringALongReply resets a stream while the executor is writing a
// reply of many records: the other stream is unaffected and nothing leaks (startRemote's
// cleanup checks the goroutines).
func TestRemoteHarnessResetDuringALongReply(t *testing.T) {
	e := startRemote(t, nil, nil)
	h := e.harness()
	a, other := h.mustOpen("a"), h.mustOpen("b")
	a.initialize()
	other.initialize()
	path := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(path, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	a.sendJSON(map[string]any{"id": 9, "method": "fs/readFile", "params": map[string]any{"path": "file://" + path}})
	if f := h.nextFrame("a"); f.body != relayBodyData {
		t.Fatalf("got %v, want the first record of the reply", f.body)
	}
	h.send(relayFrame{streamID: "a", body: relayBodyReset, reason: "harness_disconnected"})
	other.mustCall("environment/info", nil)
	h.send(relayFrame{streamID: "a", body: relayBodyData, segmentCount: 1, payload: []byte{1}})
	for {
		f := h.nextFrame("a") // records already on their way, then the reset for the data
		if f.body == relayBodyReset {
			break
		}
	}
}

// TestRemoteRendezvousThatNeverAnswersIsRetried: a rendezvous that accepts TCP and then says
// nothing (no TLS handshake) costs one dial timeout, not the executor.
func TestRemoteRendezvousThatNeverAnswersIsRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case accepted <- c:
			default:
				c.Close()
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	})
	e := startRemote(t, nil, nil, func(e *remoteEnv, cfg *remoteConfig) {
		e.reg.url = "wss://" + ln.Addr().String() + "/relay?role=environment&sig=SECRETSIG"
		cfg.timings.dialTimeout = 50 * time.Millisecond
	})
	var held []net.Conn
	for range 2 {
		select {
		case c := <-accepted:
			held = append(held, c) // keep it open and silent
		case <-time.After(remoteTestTimeout):
			t.Fatalf("the executor stopped dialing after %d silent rendezvous connections", len(held))
		}
	}
	for _, c := range held {
		c.Close()
	}
	e.logs.waitFor(t, "rendezvous connection failed")
	if strings.Contains(e.logs.String(), "SECRETSIG") {
		t.Fatalf("the log leaks the signed URL:\n%s", e.logs.String())
	}
}

// TestRemoteUpgradeRetryAfterIsAFloor: a refused upgrade's Retry-After delays the next dial
// like a registry's does (docs/remote.md §2.4, §3); the test policy caps it at 20 ms.
func TestRemoteUpgradeRetryAfterIsAFloor(t *testing.T) {
	e := startRemote(t, nil, nil, func(e *remoteEnv, _ *remoteConfig) {
		e.rv.refuse = []upgradeRefusal{{status: 503, retryAfter: "1"}}
	})
	e.harness().mustOpen("s-1").initialize()
	if logs := e.logs.String(); !strings.Contains(logs, "retry_in=20ms") {
		t.Fatalf("the reconnect did not wait for Retry-After:\n%s", logs)
	}
}

// TestRemoteOversizedReplyBecomesAnError: a reply over the 64 MiB message limit cannot
// cross the relay; the request gets an error and the stream lives on. fs/readFile knows the
// limit up front (docs/remote.md §6: a 49 MiB file is 65 MiB of base64) and refuses as the
// reference refuses a file over its limit; any other reply that turns out too large becomes
// an internal error.
func TestRemoteOversizedReplyBecomesAnError(t *testing.T) {
	big := strings.Repeat("z", noiseMaxRPCMessage)
	e := startRemote(t, nil, nil, testMethodOption("test/huge", func(*conn, json.RawMessage) (any, error) {
		return big, nil
	}))
	s := e.harness().mustOpen("s-1")
	s.initialize()
	path := filepath.Join(t.TempDir(), "sparse.bin")
	f, err := os.Create(path)
	if err == nil {
		err = f.Truncate(49 << 20)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	r := s.call("fs/readFile", map[string]any{"path": "file://" + path}, nil)
	skipIfMissing(t, r, "fs/readFile")
	if r.Error == nil || r.Error.Code != codeInvalidRequest || !strings.Contains(r.Error.Message, "file is too large to read") {
		t.Fatalf("fs/readFile of 49 MiB: error %+v, want -32600 file is too large to read", r.Error)
	}
	r = s.call("test/huge", nil, nil)
	if r.Error == nil || r.Error.Code != codeInternal || !strings.Contains(r.Error.Message, "message limit") {
		t.Fatalf("a 64 MiB reply: error %+v, want an internal error about the message limit", r.Error)
	}
	s.mustCall("environment/info", nil)
}

// TestRemoteStalledRendezvousIsDropped: a rendezvous that stops reading while the executor
// writes a large reply is dropped after the pong timeout and redialled, even though the
// stuck write holds the socket's write lock.
func TestRemoteStalledRendezvousIsDropped(t *testing.T) {
	e := startRemote(t, nil, nil, func(_ *remoteEnv, cfg *remoteConfig) {
		cfg.timings.pingInterval = 20 * time.Millisecond
		cfg.timings.pongTimeout = 1000 * time.Millisecond
	})
	ws := e.rv.next(t)
	defer ws.closeTCP()
	hid, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	i, err := newNoiseInitiator(hid, e.executorKey(), noisePrologue("env-test-1", "reg-1", "s"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := i.initiate([]byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: 1, streamID: "s", body: relayBodyHandshake, payload: m}))
	_, data, err := ws.readFrameMessage()
	if err != nil {
		t.Fatal(err)
	}
	f, _ := decodeRelayFrame(data)
	tr, err := i.readResponse(f.payload)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(path, make([]byte, 20<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	send := func(v any) {
		b, _ := json.Marshal(v)
		tr.sealMessage(b, func(seq uint32, rec []byte) error {
			return ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: 1, streamID: "s", body: relayBodyData, seq: seq, segmentCount: 1, payload: rec}))
		})
	}
	send(map[string]any{"id": 1, "method": "initialize", "params": map[string]any{"clientName": "x"}})
	send(map[string]any{"method": "initialized"})
	for k := 2; k < 6; k++ {
		send(map[string]any{"id": k, "method": "fs/readFile", "params": map[string]any{"path": "file://" + path}})
	}
	ws.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for n := 0; n < 3; n++ { // read (answering pings) until the reply is flowing
		if _, _, err := ws.readFrameMessage(); err != nil {
			t.Fatal(err)
		}
	}
	// never read again: the executor's writes stall; it should drop the socket and redial
	select {
	case c := <-e.rv.conns:
		c.closeTCP()
		t.Log("redialled")
	case <-time.After(10 * time.Second):
		t.Fatal("the executor never dropped the stalled socket")
	}
}
