package main

// Fuzz targets for the two parsers that face the network: the websocket frame reader and the
// JSON-RPC dispatcher. Both run over in-memory transports (memConn, memTransport), so a fuzz
// iteration costs microseconds and touches no socket; the socket-level behaviour is pinned by
// ws_test.go on real TCP connections.
//
//	go test -run '^$' -fuzz FuzzWSReadFrame -fuzztime 30s .
//	go test -run '^$' -fuzz FuzzDispatch -fuzztime 30s .

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// memConn is a net.Conn whose reads come from r and whose writes are kept (or dropped when
// discard is set). Deadlines are accepted and ignored: every read ends at r's EOF.
type memConn struct {
	r       io.Reader
	discard bool

	mu      sync.Mutex
	written bytes.Buffer
	closed  bool
}

func (m *memConn) Read(p []byte) (int, error) { return m.r.Read(p) }

func (m *memConn) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, net.ErrClosed
	}
	if !m.discard {
		m.written.Write(p)
	}
	return len(p), nil
}

func (m *memConn) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}

// output returns a copy of everything written so far.
func (m *memConn) output() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return bytes.Clone(m.written.Bytes())
}

func (m *memConn) LocalAddr() net.Addr                { return memAddr{} }
func (m *memConn) RemoteAddr() net.Addr               { return memAddr{} }
func (m *memConn) SetDeadline(t time.Time) error      { return nil }
func (m *memConn) SetReadDeadline(t time.Time) error  { return nil }
func (m *memConn) SetWriteDeadline(t time.Time) error { return nil }

type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "mem" }

// memTransport is a msgTransport over channels: the test plays the client by sending on in
// and receiving on out. close (by the server) is recorded and unblocks readMessage.
type memTransport struct {
	in        chan []byte
	out       chan []byte
	closed    chan struct{}
	closeOnce sync.Once
	reason    error // set before closed is closed
}

func newMemTransport() *memTransport {
	return &memTransport{in: make(chan []byte), out: make(chan []byte, 64), closed: make(chan struct{})}
}

func (m *memTransport) next() (message, error) {
	select {
	case b, ok := <-m.in:
		if !ok {
			return message{}, io.EOF
		}
		return message{data: b}, nil
	case <-m.closed:
		return message{}, io.EOF
	}
}

func (m *memTransport) peer() string { return "mem" }

func (m *memTransport) writeMessage(b []byte) error {
	select {
	case m.out <- b:
		return nil
	case <-m.closed:
		return net.ErrClosed
	}
}

func (m *memTransport) close(reason error) {
	m.closeOnce.Do(func() {
		m.reason = reason
		close(m.closed)
	})
}

// memSession is one connection of a server, served by serveConn over a memTransport.
type memSession struct {
	t       testing.TB
	tr      *memTransport
	done    chan struct{} // serveConn returned
	timeout *time.Timer   // reused by recv, so that a benchmark measures the server's allocations only
}

func startMemSession(t testing.TB, srv *server) *memSession {
	ms := &memSession{t: t, tr: newMemTransport(), done: make(chan struct{}), timeout: time.NewTimer(time.Hour)}
	go func() {
		defer close(ms.done)
		srv.serveConn(ms.tr, "failed to parse websocket JSON-RPC message from exec-server websocket mem")
	}()
	return ms
}

// send hands msg to the server; false if the server closed the connection first.
func (ms *memSession) send(msg []byte) bool {
	select {
	case ms.tr.in <- msg:
		return true
	case <-ms.tr.closed:
		return false
	}
}

// recv returns the next server message; false if the connection closed first.
func (ms *memSession) recv() ([]byte, bool) {
	ms.timeout.Reset(10 * time.Second)
	select {
	case b := <-ms.tr.out:
		return b, true
	case <-ms.tr.closed:
		select { // a message queued before the close still counts
		case b := <-ms.tr.out:
			return b, true
		default:
			return nil, false
		}
	case <-ms.timeout.C:
		ms.t.Fatalf("no server message within 10 s")
		return nil, false
	}
}

// end closes the client side and waits until serveConn has returned.
func (ms *memSession) end() {
	close(ms.tr.in)
	<-ms.done
	ms.timeout.Stop()
}

// initialize runs initialize and initialized.
func (ms *memSession) initialize() {
	ms.send([]byte(`{"id":0,"method":"initialize","params":{"clientName":"mem"}}`))
	if b, ok := ms.recv(); !ok || !bytes.HasPrefix(b, []byte(`{"id":0,"result":`)) {
		ms.t.Fatalf("initialize: %s", b)
	}
	ms.send([]byte(`{"method":"initialized"}`))
}

// panicLog fails the test when a server logs a handler panic (callSafely hides panics from the
// client, so the log is where a fuzzer can see them).
type panicLog struct {
	mu     sync.Mutex
	panics []string
}

func (p *panicLog) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("handler panic")) {
		p.mu.Lock()
		p.panics = append(p.panics, string(b))
		p.mu.Unlock()
	}
	return len(b), nil
}

func (p *panicLog) check(t testing.TB) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.panics) > 0 {
		t.Fatalf("a handler panicked: %s", p.panics[0])
	}
}

// fuzzFrame builds one frame for the seed corpus: masked with a zero key when mask is set,
// so the payload reads as written.
func fuzzFrame(b0 byte, mask bool, payload string) []byte {
	if mask {
		return maskedFrame(b0, [4]byte{}, []byte(payload))
	}
	return append(appendFrameHeader([]byte{b0}, false, len(payload)), payload...)
}

// FuzzWSReadFrame feeds arbitrary bytes to the frame reader in either role. It must never
// panic or hang, every message it returns must respect the limits (and be UTF-8 when text),
// and when it ends the connection with a close frame, that frame must be well formed and
// carry one of the codes we send.
func FuzzWSReadFrame(f *testing.F) {
	seeds := [][]byte{
		fuzzFrame(0x81, true, `{"id":1,"method":"environment/status"}`),
		append(fuzzFrame(0x01, true, "frag"), append(fuzzFrame(0x89, true, "ping"), fuzzFrame(0x80, true, "ment")...)...),
		fuzzFrame(0x81, true, "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80"),
		append(fuzzFrame(0x01, true, "\xce"), fuzzFrame(0x80, true, "\xba")...),
		fuzzFrame(0x88, true, "\x03\xe8bye"),
		fuzzFrame(0x88, true, "\x03"),
		fuzzFrame(0x88, true, "\x03\xedclose"),
		fuzzFrame(0x88, true, "\x03\xe8\xff"),
		fuzzFrame(0xc1, true, "rsv"),
		fuzzFrame(0x83, true, "op3"),
		fuzzFrame(0x09, true, "fragmented ping"),
		fuzzFrame(0x80, true, "continuation"),
		fuzzFrame(0x89, true, strings.Repeat("p", 126)),
		fuzzFrame(0x82, true, strings.Repeat("b", 300)),
		append([]byte{0x82, 0xff, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0}, "bytes"...),
		fuzzFrame(0x81, false, "unmasked"),
		{0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0},
		{0x82, 0xff, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff},
		{0x82, 0xfe, 0xff},
	}
	for _, s := range seeds {
		f.Add(byte(0), s)
		f.Add(byte(1), s)
	}
	f.Fuzz(func(t *testing.T, flags byte, data []byte) {
		client := flags&1 != 0
		if client { // a server's frames are unmasked: flip the seeds' mask bit
			data = bytes.Clone(data)
			if len(data) > 1 {
				data[1] ^= 0x80
			}
		}
		const maxFrame, maxMessage = 1 << 10, 4 << 10
		mc := &memConn{r: bytes.NewReader(data)}
		c := newWSConn(mc, bufio.NewReader(mc), client, wsOptions{maxFrame: maxFrame, maxMessage: maxMessage})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				op, msg, err := c.readFrameMessage()
				if err != nil {
					return
				}
				if len(msg) > maxMessage {
					t.Errorf("message of %d bytes passed the %d limit", len(msg), maxMessage)
				}
				if op == wsOpText && !utf8.Valid(msg) {
					t.Errorf("invalid UTF-8 text message %q", msg)
				}
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("frame reader did not finish on finite input")
		}
		c.closeTCP()
		checkServerFrames(t, mc.output(), client)
	})
}

// checkServerFrames parses what a wsConn wrote in reply to fuzz input: well-formed pong and
// close frames only, masked exactly when we are the client, at most one close, and a close
// code we may send.
func checkServerFrames(t *testing.T, out []byte, client bool) {
	closes := 0
	for len(out) > 0 {
		fr, n, err := parseFrame(out)
		if err != nil {
			t.Fatalf("wrote a malformed frame: %v (% x)", err, out)
		}
		out = out[n:]
		if fr.masked != client {
			t.Errorf("frame masked=%v from the client=%v side", fr.masked, client)
		}
		switch fr.op {
		case wsOpPong:
		case wsOpClose:
			closes++
			if len(fr.payload) == 0 {
				continue
			}
			code := int(binary.BigEndian.Uint16(fr.payload))
			if len(fr.payload) < 2 || !validCloseCode(code) || !utf8.Valid(fr.payload[2:]) {
				t.Errorf("bad close frame payload % x", fr.payload)
			}
		default:
			t.Errorf("unexpected frame opcode %d", fr.op)
		}
	}
	if closes > 1 {
		t.Errorf("%d close frames written", closes)
	}
}

// FuzzDispatch sends one arbitrary message on a fresh connection and then a sentinel request.
// The server must never panic (not even inside a handler), must answer with well-formed
// messages, must answer a request with its own id, and must then either answer the sentinel
// or have closed the connection.
//
// Safety: with ready=false the connection is never initialized, so every gated method stops
// at its gate after decoding params, and no process or file is touched. With ready=true the
// method table holds only initialize and the environment methods.
func FuzzDispatch(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"method":"environment/status"}`,
		`{"id":"x","method":"environment/info","params":null}`,
		`{"id":-5,"method":"initialize","params":{"clientName":"f"}}`,
		`{"id":2,"method":"initialize","params":{}}`,
		`{"id":3,"method":"process/start","params":{"processId":"p","argv":["true"],"cwd":"file:///"}}`,
		`{"id":4,"method":"fs/readFile","params":{"path":"file:///etc/hostname"}}`,
		`{"id":5,"method":"process/write","params":{"processId":"p","chunk":"!!","writeId":"w"}}`,
		`{"method":"initialized"}`,
		`{"method":"foo/bar"}`,
		`{"id":9,"result":{}}`,
		`{"id":9,"error":{"code":1,"message":"x"}}`,
		`{"id":14}`,
		`[]`,
		`[{"id":1,"method":"environment/status"}]`,
		`{"id":1.5,"method":"x"}`,
		`{"id":18446744073709551615,"method":"x"}`,
		`{"id":1,"method":5}`,
		`{"id":1,"id":2,"method":"environment/status"}`,
		`  {"id":1,"method":"environment/status"}  `,
		`{"id":1,"method":"environment/status"}{}`,
		`{"id":1,"method":"environment/status","params":[]}`,
		`{"id":1,"method":"environment/status","params":{"a":1}}`,
		``,
		"\xff\xfe",
		`{"id":"\u0000","method":"\ud800"}`,
	} {
		f.Add(false, []byte(s))
		f.Add(true, []byte(s))
	}
	var logs panicLog
	srv := newServer(f.Context(), serverConfig{sessionTTL: time.Minute, retention: time.Minute, limits: fuzzLimits}, newTextLogger(&logs, levelInfo))
	safe := newServer(f.Context(), serverConfig{sessionTTL: time.Minute, retention: time.Minute, limits: fuzzLimits}, newTextLogger(&logs, levelInfo))
	safe.methods = methodTable{}
	for _, name := range []string{"initialize", "environment/info", "environment/status"} {
		safe.methods[name] = srv.methods[name]
	}
	f.Cleanup(func() {
		srv.shutdown()
		safe.shutdown()
	})
	const sentinelID = `"fuzz-dispatch-sentinel"`
	f.Fuzz(func(t *testing.T, ready bool, msg []byte) {
		if bytes.Contains(msg, []byte("fuzz-dispatch-sentinel")) {
			t.Skip()
		}
		s := srv
		if ready {
			s = safe
		}
		ms := startMemSession(t, s)
		defer ms.end()
		if ready {
			ms.initialize()
		}
		in, _, perr := parseMessage(msg, false, nil)
		isRequest := perr == nil && in.ID != nil && in.Method != nil
		ms.send(bytes.Clone(msg)) // the server may keep the slice until its next read
		ms.send([]byte(`{"id":` + sentinelID + `,"method":"environment/status"}`))
		repliedToRequest := false
		for {
			b, ok := ms.recv()
			if !ok {
				break // the connection was closed: a clean end
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("server sent invalid JSON %q: %v", b, err)
			}
			if _, ok := m["jsonrpc"]; ok {
				t.Fatalf("server sent a jsonrpc member: %s", b)
			}
			id, hasID := m["id"]
			_, hasResult := m["result"]
			_, hasError := m["error"]
			if !hasID || hasResult == hasError {
				t.Fatalf("server sent neither a result nor an error: %s", b)
			}
			if isRequest && bytes.Equal(id, in.ID) {
				repliedToRequest = true
			}
			if string(id) == sentinelID {
				if isRequest && !repliedToRequest {
					t.Fatalf("request %s got no reply before the next request's", msg)
				}
				break
			}
		}
		logs.check(t)
	})
}

// fuzzLimits lets a fuzz target's one server take a session per input: its sessions stay
// for the session TTL after each input's connection ends.
var fuzzLimits = serverLimits{sessions: 1 << 30}
