package interop

// Cross-check of the root module's hand-written websocket server (ws.go) against independent
// implementations, through the built exec-server binary on a loopback socket:
//
//   - one scripted session (initialize, initialized, environment/info, environment/status, an
//     unknown method, a ping with payload, a 1 MiB message, a fragmented message, the close
//     handshake) spoken by gorilla/websocket, coder/websocket and Node's ws package
//     (node/session.js; skipped when node or node/node_modules is missing: .ci/run runs
//     `npm ci` first), each checked against the same expectations;
//   - malformed frames written with gobwas/ws, each answered by the close code RFC 6455 wants.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coder "github.com/coder/websocket"
	"github.com/gobwas/ws"
	"github.com/gorilla/websocket"
)

// buildExecServer builds the root module's binary into the test's temporary directory.
func buildExecServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "exec-server")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of exec-server: %v\n%s", err, out)
	}
	return bin
}

// startExecServer runs the binary with args (none: --listen ws://127.0.0.1:0) and returns the
// ws:// URL it prints; the process is stopped with SIGTERM when the test ends.
func startExecServer(t *testing.T, bin string, args ...string) string {
	t.Helper()
	if len(args) == 0 {
		args = []string{"--listen", "ws://127.0.0.1:0"}
	}
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("exec-server stderr:\n%s", stderr.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ws://") {
		t.Fatalf("listen URL line %q: %v", line, err)
	}
	go io.Copy(io.Discard, stdout)
	return strings.TrimSpace(line)
}

// The scripted session. Requests are written exactly so by every client.
const (
	reqInitialize  = `{"id":1,"method":"initialize","params":{"clientName":"interop"}}`
	noteInitalized = `{"method":"initialized","params":{}}`
	reqInfo        = `{"id":2,"method":"environment/info"}`
	reqStatus      = `{"id":3,"method":"environment/status"}`
	reqUnknown     = `{"id":4,"method":"nope/nope"}`
	reqFragmented  = `{"id":6,"method":"environment/status"}`
	pingPayload    = "interop-ping"
)

var (
	largeMethod = strings.Repeat("m", 1<<20)
	reqLarge    = `{"id":5,"method":"` + largeMethod + `"}`
)

// checkStep checks the reply a client received for a step of the session.
func checkStep(step, reply string) error {
	var ok bool
	switch step {
	case "initialize":
		ok = strings.HasPrefix(reply, `{"id":1,"result":{"sessionId":"`) && strings.Contains(reply, `"environmentInfo":{`)
	case "environment/info":
		ok = strings.HasPrefix(reply, `{"id":2,"result":{`) && strings.Contains(reply, `"executorVersion":"0.171.0"`)
	case "environment/status":
		ok = reply == `{"id":3,"result":{"status":"ready"}}`
	case "unknown":
		ok = reply == "{\"error\":{\"code\":-32601,\"message\":\"exec-server stub does not implement `nope/nope` yet\"},\"id\":4}"
	case "large":
		ok = reply == "{\"error\":{\"code\":-32601,\"message\":\"exec-server stub does not implement `"+largeMethod+"` yet\"},\"id\":5}"
	case "fragmented":
		ok = reply == `{"id":6,"result":{"status":"ready"}}`
	default:
		return fmt.Errorf("unknown step %q", step)
	}
	if !ok {
		return fmt.Errorf("%s: unexpected reply %.300s", step, reply)
	}
	return nil
}

// expectClosed checks that the server closed TCP after the close handshake.
func expectClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	if _, err := nc.Read(b[:]); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("TCP still open after the close handshake (%v)", err)
	}
}

// TestWSInterop builds the binary once and runs every client against a server of its own.
func TestWSInterop(t *testing.T) {
	bin := buildExecServer(t)
	t.Run("gorilla", func(t *testing.T) { testGorillaSession(t, startExecServer(t, bin)) })
	t.Run("coder", func(t *testing.T) { testCoderSession(t, startExecServer(t, bin)) })
	t.Run("node-ws", func(t *testing.T) { testNodeSession(t, bin) })
	t.Run("gobwas-malformed", func(t *testing.T) { testGobwasMalformedFrames(t, startExecServer(t, bin)) })
}

func testGorillaSession(t *testing.T, url string) {
	// A small write buffer makes gorilla fragment every message longer than it.
	d := websocket.Dialer{WriteBufferSize: 512, HandshakeTimeout: 10 * time.Second}
	conn, resp, err := d.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if resp.Header.Get("Sec-WebSocket-Extensions") != "" || resp.Header.Get("Sec-WebSocket-Protocol") != "" {
		t.Errorf("101 negotiated something: %v", resp.Header)
	}
	pongs := make(chan string, 1)
	conn.SetPongHandler(func(s string) error { pongs <- s; return nil })
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	roundTrip := func(step, req string) {
		t.Helper()
		if err := conn.WriteMessage(websocket.TextMessage, []byte(req)); err != nil {
			t.Fatalf("%s: write: %v", step, err)
		}
		typ, reply, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("%s: read: %v", step, err)
		}
		if typ != websocket.TextMessage {
			t.Errorf("%s: server sent message type %d, want text", step, typ)
		}
		if err := checkStep(step, string(reply)); err != nil {
			t.Error(err)
		}
	}
	roundTrip("initialize", reqInitialize)
	if err := conn.WriteMessage(websocket.TextMessage, []byte(noteInitalized)); err != nil {
		t.Fatal(err)
	}
	roundTrip("environment/info", reqInfo)
	if err := conn.WriteControl(websocket.PingMessage, []byte(pingPayload), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	roundTrip("environment/status", reqStatus) // the pong arrives first, seen by the handler
	select {
	case p := <-pongs:
		if p != pingPayload {
			t.Errorf("pong payload %q", p)
		}
	default:
		t.Error("no pong before the reply to the next request")
	}
	roundTrip("unknown", reqUnknown)
	roundTrip("large", reqLarge)
	roundTrip("fragmented", reqFragmented)

	if err := conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")); err != nil {
		t.Fatal(err)
	}
	_, _, err = conn.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseNormalClosure {
		t.Fatalf("after our close: %v, want the server's close 1000", err)
	}
	expectClosed(t, conn.UnderlyingConn())
}

func testCoderSession(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, resp, err := coder.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if resp.Header.Get("Sec-WebSocket-Extensions") != "" {
		t.Errorf("101 negotiated an extension: %v", resp.Header)
	}
	c.SetReadLimit(4 << 20)
	read := func(step string) {
		t.Helper()
		typ, reply, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("%s: read: %v", step, err)
		}
		if typ != coder.MessageText {
			t.Errorf("%s: server sent %v, want text", step, typ)
		}
		if err := checkStep(step, string(reply)); err != nil {
			t.Error(err)
		}
	}
	roundTrip := func(step, req string) {
		t.Helper()
		if err := c.Write(ctx, coder.MessageText, []byte(req)); err != nil {
			t.Fatalf("%s: write: %v", step, err)
		}
		read(step)
	}
	roundTrip("initialize", reqInitialize)
	if err := c.Write(ctx, coder.MessageText, []byte(noteInitalized)); err != nil {
		t.Fatal(err)
	}
	roundTrip("environment/info", reqInfo)
	roundTrip("environment/status", reqStatus)
	roundTrip("unknown", reqUnknown)
	roundTrip("large", reqLarge)

	// coder writes one frame per Write: three fragments.
	w, err := c.Writer(ctx, coder.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{reqFragmented[:10], reqFragmented[10:20], reqFragmented[20:]} {
		if _, err := io.WriteString(w, part); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	read("fragmented")

	// Ping (coder picks the payload and checks the pong's) needs a reader for the pong.
	pinged := make(chan error, 1)
	go func() { pinged <- c.Ping(ctx) }()
	for i := 0; ; i++ {
		roundTrip("environment/status", reqStatus)
		select {
		case err := <-pinged:
			if err != nil {
				t.Fatalf("ping: %v", err)
			}
		default:
			if i < 100 {
				continue
			}
			t.Fatal("no pong after 100 round trips")
		}
		break
	}

	if err := c.Close(coder.StatusNormalClosure, ""); err != nil {
		t.Fatalf("close handshake: %v", err)
	}
}

func testNodeSession(t *testing.T, bin string) {
	node, err := exec.LookPath("node")
	if err != nil {
		skipNoNode(t, "node is not installed")
	}
	if _, err := os.Stat(filepath.Join("node", "node_modules", "ws")); err != nil {
		skipNoNode(t, "node/node_modules/ws is missing: run npm ci in interop/node")
	}
	url := startExecServer(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "session.js", url)
	cmd.Dir = "node"
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node session.js: %v\n%.2000s", err, out)
	}
	var steps []string
	for line := range strings.Lines(string(out)) {
		var ev struct {
			Step, Kind, Text string
			Binary           bool
			Code             int
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("bad line %.200q: %v", line, err)
		}
		steps = append(steps, ev.Step)
		switch ev.Step {
		case "ping":
			if ev.Kind != "pong" || ev.Text != pingPayload {
				t.Errorf("ping: got %s %q", ev.Kind, ev.Text)
			}
		case "close":
			if ev.Kind != "close" || ev.Code != 1000 {
				t.Errorf("close: got %s code %d, want the server's close 1000", ev.Kind, ev.Code)
			}
		default:
			if ev.Kind != "message" || ev.Binary {
				t.Errorf("%s: got %s binary=%v, want a text message", ev.Step, ev.Kind, ev.Binary)
			}
			if err := checkStep(ev.Step, ev.Text); err != nil {
				t.Error(err)
			}
		}
	}
	if got := strings.Join(steps, ","); got != "initialize,environment/info,environment/status,unknown,ping,large,fragmented,close" {
		t.Errorf("steps %s", got)
	}
}

// gobwasFrame writes one client frame with gobwas/ws: header as given, payload masked.
func gobwasFrame(t *testing.T, w io.Writer, h ws.Header, payload []byte) {
	t.Helper()
	h.Masked = true
	h.Mask = ws.NewMask()
	h.Length = int64(len(payload))
	p := append([]byte(nil), payload...)
	ws.Cipher(p, h.Mask, 0)
	if err := ws.WriteHeader(w, h); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(p); err != nil {
		t.Fatal(err)
	}
}

// gobwasConn is a gobwas-dialed connection and the reader its frames come from.
type gobwasConn struct {
	net.Conn
	r io.Reader
}

func dialGobwas(t *testing.T, url string) gobwasConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, br, _, err := ws.Dialer{}.Dial(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := gobwasConn{Conn: nc, r: nc}
	if br != nil {
		c.r = br
	}
	return c
}

// next reads the server's next frame with gobwas/ws.
func (c gobwasConn) next(t *testing.T) ws.Frame {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, err := ws.ReadHeader(c.r)
	if err != nil {
		t.Fatalf("reading a frame header: %v", err)
	}
	if h.Masked || !h.Fin || h.Rsv != 0 || h.Length > 8<<20 {
		t.Fatalf("server frame %+v", h)
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(c.r, p); err != nil {
		t.Fatalf("reading a payload: %v", err)
	}
	return ws.Frame{Header: h, Payload: p}
}

// testGobwasMalformedFrames sends frames RFC 6455 forbids and checks the close code the
// server answers with, then completes the close handshake and sees TCP closed. Valid but
// unusual frames (126/127 length forms, a code point split between fragments) are answered.
func testGobwasMalformedFrames(t *testing.T, url string) {
	status := []byte(`{"id":1,"method":"environment/status"}`)
	text := func(rsv byte, p []byte) func(t *testing.T, w io.Writer) {
		return func(t *testing.T, w io.Writer) {
			gobwasFrame(t, w, ws.Header{Fin: true, Rsv: rsv, OpCode: ws.OpText}, p)
		}
	}
	frame := func(fin bool, op ws.OpCode, p []byte) func(t *testing.T, w io.Writer) {
		return func(t *testing.T, w io.Writer) { gobwasFrame(t, w, ws.Header{Fin: fin, OpCode: op}, p) }
	}
	then := func(steps ...func(t *testing.T, w io.Writer)) func(t *testing.T, w io.Writer) {
		return func(t *testing.T, w io.Writer) {
			for _, s := range steps {
				s(t, w)
			}
		}
	}
	closeCode := func(code uint16) func(t *testing.T, w io.Writer) {
		return frame(true, ws.OpClose, binary.BigEndian.AppendUint16(nil, code))
	}
	padded := func(n int) []byte {
		return append(append([]byte(nil), status...), strings.Repeat(" ", n-len(status))...)
	}
	kosme := "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5"
	utf8Req := []byte(`{"id":1,"method":"` + kosme + `"}`)
	split := strings.Index(string(utf8Req), "\xe1\xbd") + 1 // inside a 3-byte code point

	for _, tt := range []struct {
		name  string
		write func(t *testing.T, w io.Writer)
		close int // 0: the server must answer the request (id 1) instead
	}{
		{"RSV1", text(ws.Rsv(true, false, false), status), 1002},
		{"RSV2", text(ws.Rsv(false, true, false), status), 1002},
		{"RSV3", text(ws.Rsv(false, false, true), status), 1002},
		{"opcode 3", frame(true, 3, status), 1002},
		{"opcode 0xB", frame(true, 0xb, nil), 1002},
		{"126-byte length form", text(0, padded(126)), 0},
		{"127-byte length form", text(0, padded(70000)), 0},
		{"ping of 125 bytes", then(frame(true, ws.OpPing, make([]byte, 125)), text(0, status)), 0},
		{"ping of 126 bytes", frame(true, ws.OpPing, make([]byte, 126)), 1002},
		{"fragmented ping", then(frame(false, ws.OpPing, []byte("a")), frame(true, ws.OpContinuation, []byte("b"))), 1002},
		{"fragmented close", frame(false, ws.OpClose, []byte{3, 0xe8}), 1002},
		{"continuation without a start", frame(true, ws.OpContinuation, status), 1002},
		{"code point split between fragments", then(frame(false, ws.OpText, utf8Req[:split]), frame(true, ws.OpContinuation, utf8Req[split:])), 0},
		// Fail fast: the final fragment is never sent; the close must come without it.
		{"bad UTF-8 split mid code point", then(frame(false, ws.OpText, utf8Req[:split]), frame(false, ws.OpContinuation, []byte("\x41"))), 1007},
		{"close 1005", closeCode(1005), 1002},
		{"close 1006", closeCode(1006), 1002},
		{"close 1015", closeCode(1015), 1002},
		{"close 999", closeCode(999), 1002},
		{"close with a one-byte payload", frame(true, ws.OpClose, []byte{3}), 1002},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := dialGobwas(t, url)
			tt.write(t, c)
			f := c.next(t)
			if tt.close == 0 {
				if f.Header.OpCode == ws.OpPong { // the answer to a ping comes first
					f = c.next(t)
				}
				var reply struct{ ID json.RawMessage }
				if f.Header.OpCode != ws.OpText || json.Unmarshal(f.Payload, &reply) != nil || string(reply.ID) != "1" {
					t.Fatalf("want the reply to id 1, got opcode %v %.200q", f.Header.OpCode, f.Payload)
				}
				return
			}
			if f.Header.OpCode != ws.OpClose {
				t.Fatalf("want close %d, got opcode %v %.200q", tt.close, f.Header.OpCode, f.Payload)
			}
			code, _ := ws.ParseCloseFrameData(f.Payload)
			if int(code) != tt.close {
				t.Fatalf("close code %d, want %d", code, tt.close)
			}
			gobwasFrame(t, c, ws.Header{Fin: true, OpCode: ws.OpClose}, f.Payload[:2])
			expectClosed(t, c)
		})
	}

	// A 64-bit length with its high bit set, written by hand (gobwas refuses to). The server
	// cannot step over such a frame to see our close, so we also end our side of TCP, as a
	// client does after the handshake.
	t.Run("127-byte length form with the high bit set", func(t *testing.T) {
		c := dialGobwas(t, url)
		c.Write([]byte{0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0})
		f := c.next(t)
		if code, _ := ws.ParseCloseFrameData(f.Payload); f.Header.OpCode != ws.OpClose || code != 1002 {
			t.Fatalf("want close 1002, got opcode %v %q", f.Header.OpCode, f.Payload)
		}
		gobwasFrame(t, c, ws.Header{Fin: true, OpCode: ws.OpClose}, f.Payload[:2])
		c.Conn.(*net.TCPConn).CloseWrite()
		expectClosed(t, c)
	})
}

// skipNoNode skips a test that needs Node and its ws package, unless .ci/run asked for them
// (EXEC_SERVER_REQUIRE_NODE=1): there a missing Node fails, so that CI cannot go green
// without running the Node client and the README's script.
func skipNoNode(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("EXEC_SERVER_REQUIRE_NODE") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}
