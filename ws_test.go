package main

// Websocket tests on real sockets: the HTTP routes of docs/protocol.md §2.1, the 401 tables of
// docs/protocol.md §2.3, and Autobahn-equivalent frame cases (categories 1–7 and 9) crafted
// byte by byte on a raw TCP connection after a hand-written upgrade. The server answers
// JSON-RPC, not echo: a data message is "echoed" as the reply to the request it carries (an
// unknown method's error quotes the method name, which lets UTF-8 round-trip).

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// wsTestKey masks the frames the raw client sends; it is not zero, so unmasking is exercised.
var wsTestKey = [4]byte{0x37, 0xfa, 0x21, 0x3d}

// wsTestFrame is one parsed frame, payload unmasked.
type wsTestFrame struct {
	fin     bool
	rsv     byte
	op      byte
	masked  bool
	payload []byte
}

// maskedFrame builds a client frame: first byte b0 (FIN, RSV, opcode) as given, masked with key.
func maskedFrame(b0 byte, key [4]byte, payload []byte) []byte {
	f := appendFrameHeader([]byte{b0}, true, len(payload))
	f = append(f, key[:]...)
	for i, c := range payload {
		f = append(f, c^key[i&3])
	}
	return f
}

// appendFrameHeader appends the length byte(s) of a frame, with the mask bit when masked.
func appendFrameHeader(f []byte, masked bool, n int) []byte {
	m := byte(0)
	if masked {
		m = 0x80
	}
	switch {
	case n <= 125:
		return append(f, m|byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(f, m|126), uint16(n))
	}
	return binary.BigEndian.AppendUint64(append(f, m|127), uint64(n))
}

// readTestFrame reads one frame from r.
func readTestFrame(r io.Reader) (wsTestFrame, error) {
	var h [14]byte
	if _, err := io.ReadFull(r, h[:2]); err != nil {
		return wsTestFrame{}, err
	}
	fr := wsTestFrame{fin: h[0]&0x80 != 0, rsv: h[0] & 0x70 >> 4, op: h[0] & 0x0f, masked: h[1]&0x80 != 0}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		if _, err := io.ReadFull(r, h[2:4]); err != nil {
			return fr, fmt.Errorf("16-bit length: %w", err)
		}
		n = uint64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		if _, err := io.ReadFull(r, h[2:10]); err != nil {
			return fr, fmt.Errorf("64-bit length: %w", err)
		}
		n = binary.BigEndian.Uint64(h[2:10])
	}
	if n > 128<<20 {
		return fr, fmt.Errorf("frame length %d", n)
	}
	var key []byte
	if fr.masked {
		if _, err := io.ReadFull(r, h[10:14]); err != nil {
			return fr, fmt.Errorf("masking key: %w", err)
		}
		key = h[10:14]
	}
	fr.payload = make([]byte, n)
	if _, err := io.ReadFull(r, fr.payload); err != nil {
		return fr, fmt.Errorf("payload: %w", err)
	}
	for i := range fr.payload {
		if key != nil {
			fr.payload[i] ^= key[i&3]
		}
	}
	return fr, nil
}

// parseFrame parses the frame at the start of b and returns it with its length.
func parseFrame(b []byte) (wsTestFrame, int, error) {
	r := bytes.NewReader(b)
	fr, err := readTestFrame(r)
	return fr, len(b) - r.Len(), err
}

// Frames the raw client sends, masked with wsTestKey.
func cFrame(b0 byte, payload string) []byte { return maskedFrame(b0, wsTestKey, []byte(payload)) }
func cText(p string) []byte                 { return cFrame(0x81, p) }
func cBinary(p string) []byte               { return cFrame(0x82, p) }
func cPing(p string) []byte                 { return cFrame(0x89, p) }
func cPong(p string) []byte                 { return cFrame(0x8a, p) }
func cTextStart(p string) []byte            { return cFrame(0x01, p) } // text, FIN clear
func cCont(p string) []byte                 { return cFrame(0x00, p) } // continuation, FIN clear
func cContFin(p string) []byte              { return cFrame(0x80, p) } // continuation, FIN set
func cClose(code int, reason string) []byte {
	return cFrame(0x88, string(binary.BigEndian.AppendUint16(nil, uint16(code)))+reason)
}

// wsReq is a request whose reply quotes method: an unknown method's error names it.
func wsReq(id int, method string) string {
	return `{"id":` + strconv.Itoa(id) + `,"method":"` + method + `"}`
}

// perByteFragments sends msg as a text message of one fragment per byte.
func perByteFragments(msg string) []byte {
	f := cTextStart(msg[:1])
	for i := 1; i < len(msg)-1; i++ {
		f = append(f, cCont(msg[i:i+1])...)
	}
	return append(f, cContFin(msg[len(msg)-1:])...)
}

// padTo pads a JSON message with trailing spaces to exactly n bytes.
func padTo(msg string, n int) string { return msg + strings.Repeat(" ", n-len(msg)) }

// rawWS is a websocket client made of a TCP socket and hand-made bytes.
type rawWS struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

// rawUpgrade connects to ts and performs the upgrade by hand (RFC 6455 §1.3's sample key).
func rawUpgrade(t *testing.T, ts *testServer) *rawWS {
	t.Helper()
	nc, br, resp := rawHTTP(t, ts, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("upgrade: %s %v", resp.Status, resp.Header)
	}
	return &rawWS{t: t, nc: nc, br: br}
}

// rawHTTP sends one hand-written request and reads the response head; the connection stays
// open (for an upgrade) and is closed when the test ends.
func rawHTTP(t *testing.T, ts *testServer, req string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "ws://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	method, _, _ := strings.Cut(req, " ")
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	nc.SetDeadline(time.Time{})
	return nc, br, resp
}

// send writes the frames in one write, so that frames meant to follow a close reach the
// server before it can close.
func (r *rawWS) send(frames ...[]byte) {
	r.t.Helper()
	if _, err := r.nc.Write(bytes.Join(frames, nil)); err != nil {
		r.t.Fatalf("send: %v", err)
	}
}

// sendChunked writes the frames n bytes per write, so the server sees headers and payloads
// split across reads.
func (r *rawWS) sendChunked(n int, frames ...[]byte) {
	r.t.Helper()
	all := bytes.Join(frames, nil)
	for len(all) > 0 {
		k := min(n, len(all))
		if _, err := r.nc.Write(all[:k]); err != nil {
			r.t.Fatalf("send: %v", err)
		}
		all = all[k:]
	}
}

// next reads the server's next frame and checks what every server frame must be: final,
// no reserved bits, unmasked.
func (r *rawWS) next() wsTestFrame {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	fr, err := readTestFrame(r.br)
	if err != nil {
		r.t.Fatalf("reading a frame: %v", err)
	}
	if !fr.fin || fr.rsv != 0 || fr.masked {
		r.t.Fatalf("server frame fin=%v rsv=%d masked=%v", fr.fin, fr.rsv, fr.masked)
	}
	return fr
}

// expectReply reads a text frame holding the reply to request id, containing each of want.
func (r *rawWS) expectReply(id string, want ...string) string {
	r.t.Helper()
	fr := r.next()
	if fr.op != wsOpText {
		r.t.Fatalf("want the reply to %s in a text frame, got opcode %d % x", id, fr.op, fr.payload[:min(len(fr.payload), 40)])
	}
	var m struct{ ID json.RawMessage }
	if err := json.Unmarshal(fr.payload, &m); err != nil || string(m.ID) != id {
		r.t.Fatalf("want the reply to %s, got %.200q", id, fr.payload)
	}
	for _, w := range want {
		if !bytes.Contains(fr.payload, []byte(w)) {
			r.t.Fatalf("reply %.200q lacks %q", fr.payload, w)
		}
	}
	return string(fr.payload)
}

func (r *rawWS) expectPong(payload string) {
	r.t.Helper()
	if fr := r.next(); fr.op != wsOpPong || string(fr.payload) != payload {
		r.t.Fatalf("want pong %q, got opcode %d %q", payload, fr.op, fr.payload)
	}
}

// expectClose reads the server's close frame; code 0 means an empty payload.
func (r *rawWS) expectClose(code int) {
	r.t.Helper()
	fr := r.next()
	if fr.op != wsOpClose {
		r.t.Fatalf("want close %d, got opcode %d %.100q", code, fr.op, fr.payload)
	}
	got := 0
	if len(fr.payload) >= 2 {
		got = int(binary.BigEndian.Uint16(fr.payload))
	}
	if got != code || len(fr.payload) == 1 {
		r.t.Fatalf("want close code %d, got payload %q", code, fr.payload)
	}
}

// expectEOF waits for the server to close TCP, with nothing more sent before.
func (r *rawWS) expectEOF() {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := r.br.ReadByte()
	switch {
	case err == nil:
		r.t.Fatalf("want TCP closed, got more bytes (%#x...)", b)
	case errors.Is(err, os.ErrDeadlineExceeded):
		r.t.Fatalf("TCP still open after 10 s")
	case !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET):
		r.t.Fatalf("want EOF, got %v", err)
	}
}

// expectOpen checks that the server has not closed TCP within a short window.
func (r *rawWS) expectOpen(window time.Duration) {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(window))
	if _, err := r.br.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
		r.t.Fatalf("want the connection open and silent, got %v", err)
	}
}

// wsAct is one step of a scripted case.
type wsAct func(r *rawWS)

func send(frames ...[]byte) wsAct { return func(r *rawWS) { r.send(frames...) } }
func sendChunked(n int, frames ...[]byte) wsAct {
	return func(r *rawWS) { r.sendChunked(n, frames...) }
}
func reply(id string, want ...string) wsAct { return func(r *rawWS) { r.expectReply(id, want...) } }
func pong(payload string) wsAct             { return func(r *rawWS) { r.expectPong(payload) } }

// failed: the server fails the connection with code; we echo, and it closes TCP on the echo.
func failed(code int) wsAct {
	return func(r *rawWS) {
		r.expectClose(code)
		r.send(cClose(code, ""))
		r.expectEOF()
	}
}

// failedUnparseable: as failed, after a frame whose length cannot be skipped; the server
// cannot find our echo behind it, so, like a real client, we also end our side of TCP.
func failedUnparseable(code int) wsAct {
	return func(r *rawWS) {
		r.expectClose(code)
		r.send(cClose(code, ""))
		r.nc.(*net.TCPConn).CloseWrite()
		r.expectEOF()
	}
}

// echoed: the server answers our close with code (0: empty) and closes TCP.
func echoed(code int) wsAct {
	return func(r *rawWS) {
		r.expectClose(code)
		r.expectEOF()
	}
}

type wsCase struct {
	name   string
	script []wsAct
}

func script(acts ...wsAct) []wsAct { return acts }

// startWSServer is a test server whose upgraded connections use opts. A close wait of a
// minute makes every close in a test finish by the handshake itself, never by the timer.
func startWSServer(t *testing.T, opts wsOptions, srvOpts ...func(*server)) *testServer {
	t.Helper()
	ts := startTestServer(t, srvOpts...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ws := newWSServer(ts.srv)
	ws.opts = opts
	done := make(chan struct{})
	go func() {
		defer close(done)
		ws.serve(ln)
	}()
	t.Cleanup(func() {
		ws.close()
		<-done
	})
	return &testServer{srv: ts.srv, url: "ws://" + ln.Addr().String()}
}

var strictCloseOpts = wsOptions{closeWait: time.Minute}

func runWSCases(t *testing.T, ts *testServer, cases []wsCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rawUpgrade(t, ts)
			for _, act := range tc.script {
				act(r)
			}
		})
	}
}

// TestWSFramingAutobahn1 pins category 1: every length encoding (7-bit, 16-bit, 64-bit) for
// text and binary, frames split across writes, and length fields a server must refuse.
func TestWSFramingAutobahn1(t *testing.T) {
	var cases []wsCase
	for _, n := range []int{125, 126, 127, 128, 65535, 65536} {
		msg := padTo(wsReq(1, "x"), n)
		cases = append(cases,
			wsCase{fmt.Sprintf("text %d bytes", n), script(send(cText(msg)), reply("1"))},
			wsCase{fmt.Sprintf("binary %d bytes", n), script(send(cBinary(msg)), reply("1"))})
	}
	long := padTo(wsReq(1, "x"), 65536)
	nonMinimal := append([]byte{0x81, 0x80 | 126, 0, byte(len(wsReq(1, "x")))}, wsTestKey[:]...)
	for i, c := range []byte(wsReq(1, "x")) {
		nonMinimal = append(nonMinimal, c^wsTestKey[i&3])
	}
	cases = append(cases, []wsCase{
		{"empty text is a parse error with id -1", script(send(cText("")), reply("-1", "EOF while parsing a value at line 1 column 0"))},
		{"empty binary is a parse error with id -1", script(send(cBinary("")), reply("-1", "EOF while parsing"))},
		{"text 65536 bytes in 997-byte writes", script(sendChunked(997, cText(long)), reply("1"))},
		{"header and payload one byte per write", script(sendChunked(1, cText(wsReq(7, "x"))), reply("7"))},
		{"two messages in one write", script(send(bytes.Join([][]byte{cText(wsReq(1, "a")), cText(wsReq(2, "b"))}, nil)), reply("1"), reply("2"))},
		{"16-bit length for a short payload is accepted", script(send(nonMinimal), reply("1"))},
		{"64-bit length with the high bit set", script(send(append([]byte{0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 1}, wsTestKey[:]...)), failedUnparseable(wsCloseProtocolError))},
		{"unmasked client frame", script(send(append([]byte{0x81, byte(len(wsReq(1, "x")))}, wsReq(1, "x")...)), failed(wsCloseProtocolError))},
		{"binary message with JSON is answered like text", script(send(cBinary(`  {"id":"b","method":"environment/status"}  `)), reply(`"b"`, "client must call initialize"))},
	}...)
	runWSCases(t, startWSServer(t, strictCloseOpts), cases)
}

// TestWSPingPongAutobahn2 pins category 2: pongs echo the ping payload up to 125 bytes, a
// bigger ping fails the connection, unsolicited pongs are ignored.
func TestWSPingPongAutobahn2(t *testing.T) {
	p125 := strings.Repeat("\xfe", 125)
	var tenPings, tenPongs []wsAct
	var pings [][]byte
	for i := range 10 {
		pings = append(pings, cPing("ping "+strconv.Itoa(i)))
		tenPongs = append(tenPongs, pong("ping "+strconv.Itoa(i)))
	}
	tenPings = append([]wsAct{send(pings...)}, tenPongs...)
	tenPingsChunked := append([]wsAct{sendChunked(1, pings...)}, tenPongs...)
	runWSCases(t, startWSServer(t, strictCloseOpts), []wsCase{
		{"2.1 ping without payload", script(send(cPing("")), pong(""))},
		{"2.2 ping with text payload", script(send(cPing("Hello, world!")), pong("Hello, world!"))},
		{"2.3 ping with binary payload", script(send(cPing("\x00\xff\xfe\xfd\xfc\xfb\x00\xff")), pong("\x00\xff\xfe\xfd\xfc\xfb\x00\xff"))},
		{"2.4 ping with 125-byte payload", script(send(cPing(p125)), pong(p125))},
		{"2.5 ping with 126-byte payload", script(send(cPing(p125+"x"), cText(wsReq(1, "x"))), failed(wsCloseProtocolError))},
		{"2.6 ping with 125-byte payload one byte per write", script(sendChunked(1, cPing(p125)), pong(p125))},
		{"2.7 unsolicited empty pong is ignored", script(send(cPong(""), cText(wsReq(1, "x"))), reply("1"))},
		{"2.8 unsolicited pong with payload is ignored", script(send(cPong("unsolicited"), cText(wsReq(1, "x"))), reply("1"))},
		{"2.9 unsolicited pong, then ping", script(send(cPong("unsolicited"), cPing("solicited")), pong("solicited"))},
		{"2.10 ten pings", tenPings},
		{"2.11 ten pings one byte per write", tenPingsChunked},
	})
}

// TestWSReservedBitsAutobahn3 pins category 3: any RSV bit fails the connection with 1002,
// on data and control frames alike, and what follows the bad frame is not processed.
func TestWSReservedBitsAutobahn3(t *testing.T) {
	runWSCases(t, startWSServer(t, strictCloseOpts), []wsCase{
		{"3.1 text with RSV1", script(send(cFrame(0x81|0x40, wsReq(1, "x"))), failed(wsCloseProtocolError))},
		{"3.2 text, then text with RSV2, then ping", script(send(cText(wsReq(1, "x"))), reply("1"),
			send(cFrame(0x81|0x20, wsReq(2, "x")), cPing("p")), failed(wsCloseProtocolError))},
		{"3.3 text, then text with RSV3, then ping, one byte per write", script(send(cText(wsReq(1, "x"))), reply("1"),
			sendChunked(1, cFrame(0x81|0x10, wsReq(2, "x")), cPing("p")), failed(wsCloseProtocolError))},
		{"3.4 text with RSV1+2+3", script(send(cFrame(0x81|0x70, wsReq(1, "x"))), failed(wsCloseProtocolError))},
		{"3.5 binary with RSV1+3", script(send(cFrame(0x82|0x50, wsReq(1, "x"))), failed(wsCloseProtocolError))},
		{"3.6 ping with RSV2+3", script(send(cFrame(0x89|0x30, "p")), failed(wsCloseProtocolError))},
		{"3.7 close with RSV1+2+3", script(send(cFrame(0x88|0x70, "\x03\xe8")), failed(wsCloseProtocolError))},
	})
}

// TestWSOpcodesAutobahn4 pins category 4: reserved data (3–7) and control (0xB–0xF) opcodes
// fail the connection with 1002; nothing after them is answered.
func TestWSOpcodesAutobahn4(t *testing.T) {
	var cases []wsCase
	for _, op := range []byte{3, 4, 5, 6, 7, 0xb, 0xc, 0xd, 0xe, 0xf} {
		cases = append(cases,
			wsCase{fmt.Sprintf("opcode %#x empty", op), script(send(cFrame(0x80|op, "")), failed(wsCloseProtocolError))},
			wsCase{fmt.Sprintf("opcode %#x with payload, after a text, before a ping", op), script(
				send(cText(wsReq(1, "x"))), reply("1"),
				send(cFrame(0x80|op, "reserved opcode payload"), cPing("p")), failed(wsCloseProtocolError))})
	}
	runWSCases(t, startWSServer(t, strictCloseOpts), cases)
}

// TestWSFragmentationAutobahn5 pins category 5: fragmented messages with control frames
// between the fragments, and the fragment sequences a server must refuse.
func TestWSFragmentationAutobahn5(t *testing.T) {
	req := wsReq(1, "fragmented")
	a, b := req[:10], req[10:]
	many := perByteFragments(req)
	five := [][]byte{cTextStart(req[0:5]), cCont(req[5:10]), cPing("p1"), cCont(req[10:15]), cCont(req[15:20]), cPing("p2"), cContFin(req[20:])}
	runWSCases(t, startWSServer(t, strictCloseOpts), []wsCase{
		{"5.1 ping in two fragments", script(send(cFrame(0x09, "fr"), cFrame(0x80, "ag")), failed(wsCloseProtocolError))},
		{"5.2 pong in two fragments", script(send(cFrame(0x0a, "fr"), cFrame(0x80, "ag")), failed(wsCloseProtocolError))},
		{"5.3 text in two fragments", script(send(cTextStart(a), cContFin(b)), reply("1", "`fragmented`"))},
		{"5.4 text in two fragments one byte per write", script(sendChunked(1, cTextStart(a), cContFin(b)), reply("1"))},
		{"5.6 ping between fragments", script(send(cTextStart(a), cPing("between"), cContFin(b)), pong("between"), reply("1"))},
		{"5.7 ping between fragments one byte per write", script(sendChunked(1, cTextStart(a), cPing("between"), cContFin(b)), pong("between"), reply("1"))},
		{"5.8 pong between fragments", script(send(cTextStart(a), cPong("between"), cContFin(b)), reply("1"))},
		{"binary in two fragments", script(send(cFrame(0x02, a), cContFin(b)), reply("1"))},
		{"one byte per fragment", script(send(many), reply("1", "`fragmented`"))},
		{"empty fragments", script(send(cTextStart(""), cCont(a), cCont(""), cContFin(b)), reply("1"))},
		{"5.9 continuation with FIN and nothing to continue", script(send(cContFin(req)), failed(wsCloseProtocolError))},
		{"5.10 continuation without FIN and nothing to continue", script(send(cCont(a), cText(req)), failed(wsCloseProtocolError))},
		{"5.15 whole message, then continuation without a start", script(send(cTextStart(a), cContFin(b)), reply("1"),
			send(cCont("x"), cText(wsReq(2, "x"))), failed(wsCloseProtocolError))},
		{"5.16 continuation first, then a fragmented text", script(send(cCont(a), cTextStart(a), cContFin(b)), failed(wsCloseProtocolError))},
		{"5.18 new text inside a fragmented text", script(send(cTextStart(a), cText(req)), failed(wsCloseProtocolError))},
		{"new binary inside a fragmented text", script(send(cTextStart(a), cFrame(0x02, b)), failed(wsCloseProtocolError))},
		{"5.19 five fragments with pings between", script(send(five...), pong("p1"), pong("p2"), reply("1"))},
		{"5.20 five fragments with pings between, 3 bytes per write", script(sendChunked(3, five...), pong("p1"), pong("p2"), reply("1"))},
		{"close between fragments ends the message unanswered", script(send(cTextStart(a), cClose(1000, ""), cContFin(b)), echoed(1000))},
	})
}

// utf8Hello is Autobahn 6.2's valid text.
const utf8Hello = "Hello-\xc2\xb5@\xc3\x9f\xc3\xb6\xc3\xa4\xc3\xbc\xc3\xa0\xc3\xa1-UTF-8!!"

// kosme is "κόσμε", the UTF-8 sample of Markus Kuhn's test file used by Autobahn 6.
const kosme = "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5"

// TestWSUTF8Autobahn6 pins category 6: text messages are validated incrementally across
// fragments, code points split between fragments are fine, and an invalid sequence fails the
// connection with 1007 as soon as the fragment holding it arrives (fail fast: the final
// fragment is never sent in those cases). Binary messages are not validated.
func TestWSUTF8Autobahn6(t *testing.T) {
	var cases []wsCase
	hello := wsReq(1, utf8Hello)
	cases = append(cases,
		wsCase{"6.2.1 valid text in one frame", script(send(cText(hello)), reply("1", utf8Hello))},
		wsCase{"6.2.2 valid text in two fragments on a code point boundary", script(send(cTextStart(hello[:22]), cContFin(hello[22:])), reply("1", utf8Hello))})
	cases = append(cases, wsCase{"6.2.3 valid text one byte per fragment", script(send(perByteFragments(hello)), reply("1", utf8Hello))})
	msg := wsReq(1, kosme)
	at := strings.Index(msg, kosme)
	for split := at + 1; split < at+len(kosme); split++ {
		cases = append(cases, wsCase{fmt.Sprintf("6.2.4 kosme split at byte %d", split-at),
			script(send(cTextStart(msg[:split]), cContFin(msg[split:])), reply("1", kosme))})
	}

	// Fail fast: the bad fragment is not final, and the close comes before any more is sent.
	prefix := `{"id":1,"method":"` + kosme
	cases = append(cases,
		wsCase{"6.4.1 valid fragment, then one with U+110000", script(send(cTextStart(prefix), cCont("\xf4\x90\x80\x80")), failed(wsCloseInvalidUTF8))},
		wsCase{"6.4.2 fragment ends with F4, next starts with 90", script(send(cTextStart(prefix+"\xf4"), cCont("\x90")), failed(wsCloseInvalidUTF8))},
		wsCase{"6.4.2 split sequence that can never complete, in the first fragment", script(send(cTextStart(prefix+"\xf4\x90")), failed(wsCloseInvalidUTF8))},
		wsCase{"truncated 4-byte sequence with a bad third byte", script(send(cTextStart(prefix+"\xf1\x80\x41")), failed(wsCloseInvalidUTF8))},
		wsCase{"surrogate lead at the end of a fragment", script(send(cTextStart(prefix+"\xed\xa0")), failed(wsCloseInvalidUTF8))},
		wsCase{"6.3.2 invalid text one byte per fragment", script(send(cTextStart(prefix[:1]), cCont(prefix[1:]), cCont("\xed"), cCont("\xa0")), failed(wsCloseInvalidUTF8))},
		wsCase{"code point cut by the final fragment", script(send(cTextStart(prefix), cContFin("\xce")), failed(wsCloseInvalidUTF8))},
		wsCase{"binary with invalid UTF-8 is a parse error, not a close", script(send(cBinary(wsReq(1, "\xff\xfe"))), reply("-1", "invalid unicode code point"), send(cBinary(wsReq(2, "x"))), reply("2"))},
	)
	for _, bad := range []string{
		"\x80", "\xbf", "\x80\xbf\x80", // lone continuation bytes
		"\xc0\xaf", "\xe0\x80\xaf", "\xf0\x80\x80\xaf", "\xc1\xbf", "\xe0\x9f\xbf", "\xf0\x8f\xbf\xbf", // overlong
		"\xf8\x88\x80\x80\x80", "\xfc\x84\x80\x80\x80\x80", "\xfe", "\xff", "\xc0", // impossible bytes, 5- and 6-byte forms
		"\xed\xa0\x80", "\xed\xbf\xbf", "\xed\xa0\x80\xed\xb0\x80", // surrogates
		"\xf4\x90\x80\x80", "\xf7\xbf\xbf\xbf", // above U+10FFFF
		"\xce\x41", "\xe1\x80\x41", // truncated by an ASCII byte
		kosme + "\xed\xa0\x80edited",
	} {
		cases = append(cases, wsCase{fmt.Sprintf("6.3 invalid % x in one frame", bad), script(send(cText(wsReq(1, bad))), failed(wsCloseInvalidUTF8))})
	}
	for _, good := range []string{
		"\x7f", "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80", "\xef\xbf\xbd",
		"\xef\xbf\xbe", "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf",
	} {
		cases = append(cases, wsCase{fmt.Sprintf("6.x valid boundary % x", good), script(send(cText(wsReq(1, good))), reply("1", good))})
	}
	runWSCases(t, startWSServer(t, strictCloseOpts), cases)
}

// TestWSCloseAutobahn7 pins category 7: the server echoes a valid close (with the peer's code,
// or an empty payload for an empty one) and closes TCP; an invalid close code, a one-byte
// payload, an oversized or non-UTF-8 reason fail with 1002 or 1007; nothing after a close is
// processed.
func TestWSCloseAutobahn7(t *testing.T) {
	cases := []wsCase{
		{"7.1.1 close 1000", script(send(cClose(1000, "")), echoed(1000))},
		{"7.1.2 two closes", script(send(cClose(1000, ""), cClose(1000, "")), echoed(1000))},
		{"7.1.3 ping after close is not answered", script(send(cClose(1000, ""), cPing("late")), echoed(1000))},
		{"7.1.4 text after close is not answered", script(send(cClose(1000, ""), cText(wsReq(1, "x"))), echoed(1000))},
		{"7.1.5 close inside a fragmented text", script(send(cTextStart("{"), cClose(1000, ""), cContFin("}")), echoed(1000))},
		{"7.3.1 empty close payload is echoed empty", script(send(cFrame(0x88, "")), echoed(0))},
		{"7.3.2 one-byte close payload", script(send(cFrame(0x88, "\x03")), failed(wsCloseProtocolError))},
		{"7.3.3 close code without reason", script(send(cFrame(0x88, "\x03\xe8")), echoed(1000))},
		{"7.3.4 close code with reason", script(send(cClose(1000, "Hello World!")), echoed(1000))},
		{"7.3.5 close with a 123-byte reason", script(send(cClose(1000, strings.Repeat("*", 123))), echoed(1000))},
		{"7.3.6 close with a 124-byte reason", script(send(cClose(1000, strings.Repeat("*", 124))), failed(wsCloseProtocolError))},
		{"7.5.1 close reason with invalid UTF-8", script(send(cClose(1000, kosme+"\xed\xa0\x80edited")), failed(wsCloseInvalidUTF8))},
		{"close with any code after data", script(send(cText(wsReq(1, "x"))), reply("1"), send(cClose(4001, "bye")), echoed(4001))},
	}
	for _, code := range []int{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999} {
		cases = append(cases, wsCase{fmt.Sprintf("7.7 valid code %d is echoed", code), script(send(cClose(code, "")), echoed(code))})
	}
	for _, code := range []int{0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535} {
		cases = append(cases, wsCase{fmt.Sprintf("7.9 invalid code %d", code), script(send(cClose(code, "")), failed(wsCloseProtocolError))})
	}
	runWSCases(t, startWSServer(t, strictCloseOpts), cases)
}

// TestWSServerCloseWaitsForEcho: when the server closes, it keeps TCP open until the peer's
// close arrives, and closes it then. Both the reader's own failure and a close decided by the
// connection (here: initialized before initialize, with no reader left) behave so. The close
// wait is a minute, so the end can only come from the echo.
func TestWSServerCloseWaitsForEcho(t *testing.T) {
	ts := startWSServer(t, strictCloseOpts)
	for _, tt := range []struct {
		name string
		bad  []byte
	}{
		{"protocol error", cFrame(0xc1, "rsv1")},
		{"initialized before initialize", cText(`{"method":"initialized"}`)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := rawUpgrade(t, ts)
			r.send(tt.bad)
			fr := r.next()
			if fr.op != wsOpClose || len(fr.payload) < 2 {
				t.Fatalf("want a close frame with a code, got opcode %d %q", fr.op, fr.payload)
			}
			r.expectOpen(200 * time.Millisecond)
			r.send(cFrame(0x88, string(fr.payload[:2])))
			r.expectEOF()
		})
	}
}

// TestWSServerCloseWithoutEchoEndsTCP: a peer that never echoes our close loses TCP after the
// close wait (the production default here).
func TestWSServerCloseWithoutEchoEndsTCP(t *testing.T) {
	ts := startTestServer(t)
	r := rawUpgrade(t, ts)
	r.send(cFrame(0xc1, "rsv1"))
	r.expectClose(wsCloseProtocolError)
	r.expectEOF()
}

// TestWSServerPings: the server pings with an empty payload every pingInterval (30 s in
// production, shortened here), and keeps a client that never answers.
func TestWSServerPings(t *testing.T) {
	srv := startTestServer(t).srv
	if got := newWSServer(srv).opts.pingInterval; got != 30*time.Second {
		t.Fatalf("production ping interval %v, want 30s", got)
	}
	ts := startWSServer(t, wsOptions{pingInterval: 20 * time.Millisecond, closeWait: time.Minute})
	r := rawUpgrade(t, ts)
	for range 3 {
		if fr := r.next(); fr.op != wsOpPing || len(fr.payload) != 0 {
			t.Fatalf("want an empty ping, got opcode %d %q", fr.op, fr.payload)
		}
	}
	r.send(cText(wsReq(1, "x")))
	for { // pings may come before the reply
		fr := r.next()
		if fr.op == wsOpText {
			break
		}
		if fr.op != wsOpPing {
			t.Fatalf("unexpected opcode %d", fr.op)
		}
	}
}

// TestWSLargeMessagesAutobahn9 pins category 9 at the reference's limits: one frame of
// exactly 16 MiB and one message of exactly 64 MiB (four fragments) are accepted; one byte
// more of either fails the connection with 1009. Payloads are a request padded with spaces,
// masked with a zero key and streamed from a small buffer, so the test holds no big buffer.
func TestWSLargeMessagesAutobahn9(t *testing.T) {
	ts := startWSServer(t, strictCloseOpts)
	spaces := bytes.Repeat([]byte{' '}, 1<<20)
	// stream writes one frame of n bytes: req, then spaces.
	stream := func(t *testing.T, r *rawWS, b0 byte, req string, n int) {
		t.Helper()
		h := append(appendFrameHeader([]byte{b0}, true, n), 0, 0, 0, 0)
		r.send(h, []byte(req))
		for left := n - len(req); left > 0; left -= min(left, len(spaces)) {
			r.send(spaces[:min(left, len(spaces))])
		}
	}
	req := wsReq(1, "x")
	t.Run("frame of 16 MiB", func(t *testing.T) {
		r := rawUpgrade(t, ts)
		stream(t, r, 0x81, req, wsMaxFrame)
		r.expectReply("1")
		r.send(cClose(1000, ""))
		echoed(1000)(r)
	})
	t.Run("frame of 16 MiB + 1", func(t *testing.T) {
		r := rawUpgrade(t, ts)
		stream(t, r, 0x81, req, wsMaxFrame+1)
		failed(wsCloseTooBig)(r)
	})
	t.Run("message of 64 MiB in four fragments", func(t *testing.T) {
		r := rawUpgrade(t, ts)
		stream(t, r, 0x02, req, wsMaxFrame)
		stream(t, r, 0x00, "", wsMaxFrame)
		stream(t, r, 0x00, "", wsMaxFrame)
		stream(t, r, 0x80, "", wsMaxMessage-3*wsMaxFrame)
		r.expectReply("1")
	})
	t.Run("message of 64 MiB + 1 in five fragments", func(t *testing.T) {
		r := rawUpgrade(t, ts)
		stream(t, r, 0x02, req, wsMaxFrame)
		for range 3 {
			stream(t, r, 0x00, "", wsMaxFrame)
		}
		r.send(cContFin(" "))
		failed(wsCloseTooBig)(r)
	})
	t.Run("1 MiB method name round-trips through a nonzero mask", func(t *testing.T) {
		r := rawUpgrade(t, ts)
		name := strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789κόσμε", (1<<20)/45)
		r.send(cText(wsReq(1, name)))
		r.expectReply("1", "`"+name+"`")
	})
}

// TestValidUTF8Prefix pins the incremental validator: whether what came so far may still
// become valid, and then how much of it is already known good.
func TestValidUTF8Prefix(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		more bool
	}{
		{"", 0, true},
		{"abc", 3, true},
		{kosme, len(kosme), true},
		{"a\xce", 1, true},
		{"a\xe1\xbd", 1, true},
		{"a\xf0\x9f\x98", 1, true},
		{"a\xf4\x90", 1, false},
		{"a\xed\xa0", 1, false},
		{"a\xe0\x80", 1, false},
		{"a\xf1\x80\x41", 1, false},
		{"a\xf1\x41", 1, false},
		{"a\xc0", 1, false},
		{"a\xff", 1, false},
		{"a\x80b", 1, false},
		{"a\xceb", 1, false},
		{"\xbf\xbf\xbf", 0, false},
		{"a\xbf\xbf\xbf\xbf", 0, false},
		{"\xce\xbaa\xce", 3, true},
		{"\xff" + "a\xce", 0, false},
	} {
		n, more := validUTF8Prefix([]byte(tt.in))
		if more != tt.more || more && n != tt.n {
			t.Errorf("validUTF8Prefix(%q) = %d, %v; want %d, %v", tt.in, n, more, tt.n, tt.more)
		}
	}
}

// TestWSLargeOutgoingMessageIsFragmented: a reply larger than one frame may be (16 MiB, the
// limit of tungstenite and so of the Codex client) goes out as a text frame without FIN and
// continuation frames, each within the limit, that reassemble to the whole reply.
func TestWSLargeOutgoingMessageIsFragmented(t *testing.T) {
	big := strings.Repeat("y", wsMaxFrame+wsMaxFrame/2)
	ts := startTestServer(t, testMethod("test/big", func(c *conn, _ json.RawMessage) (result, error) {
		return jsonOf(big), nil
	}))
	r := rawUpgrade(t, ts)
	r.send(cText(`{"id":1,"method":"test/big"}`))
	var msg []byte
	var frames []int
	for {
		r.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		fr, err := readTestFrame(r.br)
		if err != nil {
			t.Fatalf("reading a frame: %v", err)
		}
		want := byte(wsOpContinuation)
		if len(frames) == 0 {
			want = wsOpText
		}
		if fr.op != want {
			t.Fatalf("frame %d has opcode %d, want %d", len(frames), fr.op, want)
		}
		if len(fr.payload) > wsMaxFrame {
			t.Fatalf("frame %d carries %d bytes, over %d", len(frames), len(fr.payload), wsMaxFrame)
		}
		frames = append(frames, len(fr.payload))
		msg = append(msg, fr.payload...)
		if fr.fin {
			break
		}
	}
	want := `{"id":1,"result":"` + big + `"}`
	if len(frames) < 2 || string(msg) != want {
		t.Fatalf("got %d frames %v and a %d-byte message, want fragments of a %d-byte message", len(frames), frames, len(msg), len(want))
	}
}
