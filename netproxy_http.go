package main

// The HTTP side of the managed network proxy (docs/network.md §2): absolute-form requests
// (`GET http://host/path`), several per client connection, each judged and forwarded on a
// connection of its own to its host, and CONNECT tunnels. The request
// head is parsed here, bounded by netProxyMaxHeaderBytes; a head it cannot parse gets 400,
// a refused request 403 with the reference's body, a destination that cannot be reached 502.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// httpHead is a parsed request head. The slices alias the buffer it was parsed from.
type httpHead struct {
	method, target, proto string
	headers               []proxyHeaderField
}

type proxyHeaderField struct{ name, value string }

var (
	errHeadTooLarge = errors.New("request head too large")
	errBadHead      = errors.New("malformed request head")
	errBadBody      = errors.New("malformed or unsupported request body framing")
)

const (
	// netProxyHeadBuffer is the first buffer of a request head, grown up to
	// netProxyMaxHeaderBytes.
	netProxyHeadBuffer = 2 << 10
	// netProxyMaxChunkLine bounds a chunk-size line or a trailer line of a chunked body.
	netProxyMaxChunkLine = 4 << 10
	// netProxyMaxChunkHexDigits bounds a chunk size's hex digits (a size below 2^60).
	netProxyMaxChunkHexDigits = 15
)

// requestBody is a reader of exactly the body of the request head h (RFC 9112 §6), read from
// r: Content-Length bytes, or a chunked body up to its last chunk and trailer section, passed
// on verbatim; none when neither header is there. Any other framing (another transfer
// coding, both headers, several or malformed lengths) is errBadBody: a host could read it
// another way and find a second request in it.
func requestBody(h *httpHead, r *bufio.Reader) (io.Reader, error) {
	te, cl := h.count("Transfer-Encoding"), h.count("Content-Length")
	switch {
	case te > 0 && cl > 0, te > 1, cl > 1:
		return nil, errBadBody
	case te == 1:
		v, _ := h.header("Transfer-Encoding")
		if !strings.EqualFold(strings.TrimSpace(v), "chunked") {
			return nil, errBadBody
		}
		return &chunkedBody{r: r}, nil
	case cl == 1:
		v, _ := h.header("Content-Length")
		if v == "" || strings.TrimLeft(v, "0123456789") != "" {
			return nil, errBadBody
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, errBadBody
		}
		return io.LimitReader(r, n), nil
	}
	return bytes.NewReader(nil), nil
}

// chunkedBody passes a chunked body on verbatim up to its end (RFC 9112 §7.1), checking its
// framing as it goes: chunk-size lines, each chunk's data and CRLF, the trailer lines and
// the blank line; it ends (io.EOF) there, before any following byte.
type chunkedBody struct {
	r       *bufio.Reader
	pending []byte // framing bytes read and still to pass on
	left    int64  // data bytes of the current chunk still to pass on
	crlf    bool   // the current chunk's data is passed; its CRLF is next
	trailer bool   // the last chunk is passed; trailer lines up to a blank one are next
	done    bool
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	for {
		if len(b.pending) > 0 {
			n := copy(p, b.pending)
			b.pending = b.pending[n:]
			return n, nil
		}
		if b.done {
			return 0, io.EOF
		}
		if b.left > 0 {
			if int64(len(p)) > b.left {
				p = p[:b.left]
			}
			n, err := b.r.Read(p)
			b.left -= int64(n)
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		}
		line, err := b.r.ReadSlice('\n')
		if err != nil {
			if err == io.EOF || err == bufio.ErrBufferFull {
				err = errBadBody
			}
			return 0, err
		}
		b.pending = append(b.pending[:0], line...)
		blank := string(line) == "\r\n"
		switch {
		case b.crlf:
			if !blank {
				return 0, errBadBody
			}
			b.crlf = false
		case b.trailer:
			if blank {
				b.done = true
				break
			}
			// A trailer line is a header field ended by CRLF: a lenient reader that ends the
			// trailers at a bare LF would find a message in what passes here as a trailer.
			field, ok := strings.CutSuffix(string(line), "\r\n")
			if !ok {
				return 0, errBadBody
			}
			if _, err := parseHeaderLines([]string{field}); err != nil {
				return 0, errBadBody
			}
		default:
			size, ok := chunkSize(line)
			if !ok {
				return 0, errBadBody
			}
			b.trailer = size == 0
			b.left, b.crlf = size, size > 0
		}
	}
}

// chunkSize parses a chunk-size line "HEX[;extensions]\r\n".
func chunkSize(line []byte) (int64, bool) {
	s, ok := strings.CutSuffix(string(line), "\r\n")
	if !ok {
		return 0, false
	}
	hex, ext, _ := strings.Cut(s, ";")
	hex = strings.TrimRight(hex, " \t")
	if hex == "" || len(hex) > netProxyMaxChunkHexDigits {
		return 0, false
	}
	for _, c := range []byte(ext) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(hex, 16, 64)
	return n, err == nil && n >= 0 && !strings.HasPrefix(hex, "+") && !strings.HasPrefix(hex, "-")
}

// headEnd returns the length of the head at the start of b (up to and including the blank
// line), or -1 when b does not hold a whole head yet.
func headEnd(b []byte) int {
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		line := b[i : i+j]
		i += j + 1
		if len(line) == 0 || len(line) == 1 && line[0] == '\r' {
			return i
		}
	}
	return -1
}

// parseRequestHead parses a whole request head: a request line "METHOD SP target SP
// HTTP/1.x" and header lines "name: value" (no obsolete line folding), each ending in CRLF
// or LF. Names must be tokens; values must not hold control bytes other than tab.
func parseRequestHead(b []byte) (httpHead, error) {
	var h httpHead
	lines, err := headLines(b)
	if err != nil {
		return h, err
	}
	parts := strings.Split(lines[0], " ")
	if len(parts) != 3 || !isToken(parts[0]) || parts[1] == "" || (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0") {
		return h, errBadHead
	}
	for _, c := range []byte(parts[1]) {
		if c <= ' ' || c == 0x7f {
			return h, errBadHead
		}
	}
	h.method, h.target, h.proto = parts[0], parts[1], parts[2]
	if h.headers, err = parseHeaderLines(lines[1:]); err != nil {
		return h, err
	}
	return h, nil
}

// headLines splits a whole head into its lines without their ends and without the blank
// line; the first (the start line) is there.
func headLines(b []byte) ([]string, error) {
	lines := strings.Split(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n")
	if len(lines) < 2 || lines[len(lines)-1] != "" || lines[len(lines)-2] != "" {
		return nil, errBadHead
	}
	lines = lines[:len(lines)-2]
	if len(lines) == 0 {
		return nil, errBadHead
	}
	return lines, nil
}

// parseHeaderLines parses header lines "name: value": names must be tokens; values, trimmed,
// must not hold control bytes other than tab.
func parseHeaderLines(lines []string) ([]proxyHeaderField, error) {
	var out []proxyHeaderField
	for _, l := range lines {
		name, value, ok := strings.Cut(l, ":")
		if !ok || !isToken(name) {
			return nil, errBadHead
		}
		value = strings.Trim(value, " \t")
		for _, c := range []byte(value) {
			if c < ' ' && c != '\t' || c == 0x7f || c == '\r' {
				return nil, errBadHead
			}
		}
		out = append(out, proxyHeaderField{name, value})
	}
	return out, nil
}

// count is how many header fields are named name.
func (h *httpHead) count(name string) int {
	n := 0
	for _, f := range h.headers {
		if strings.EqualFold(f.name, name) {
			n++
		}
	}
	return n
}

func (h *httpHead) header(name string) (string, bool) {
	for _, f := range h.headers {
		if strings.EqualFold(f.name, name) {
			return f.value, true
		}
	}
	return "", false
}

// readHead reads from c until buf holds a whole head, and returns the head's length and the
// bytes read (the head and whatever followed it).
func readHead(c net.Conn) (buf []byte, n int, err error) {
	buf = make([]byte, 0, netProxyHeadBuffer)
	for {
		if len(buf) == cap(buf) {
			if cap(buf) >= netProxyMaxHeaderBytes {
				return buf, 0, errHeadTooLarge
			}
			buf = append(buf[:cap(buf)], make([]byte, min(cap(buf), netProxyMaxHeaderBytes-cap(buf)))...)[:len(buf)]
		}
		m, rerr := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if n := headEnd(buf); n >= 0 {
			return buf, n, nil
		}
		if rerr != nil {
			return buf, 0, rerr
		}
	}
}

// splitHostPort splits an authority "host:port" or "[v6]:port"; without a port it takes def,
// and def 0 requires one.
func splitHostPort(authority string, def uint16) (string, uint16, error) {
	host, portText, err := net.SplitHostPort(authority)
	if err != nil {
		if def == 0 || strings.Count(authority, ":") > 1 && !strings.HasPrefix(authority, "[") {
			return "", 0, errBadHead
		}
		host, portText = strings.TrimSuffix(strings.TrimPrefix(authority, "["), "]"), strconv.Itoa(int(def))
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 || host == "" {
		return "", 0, errBadHead
	}
	return host, uint16(port), nil
}

// parseIPHost parses host as an IP literal (brackets and zone allowed).
func parseIPHost(host string) (netip.Addr, error) {
	return netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
}

// absoluteTarget parses the absolute-form target of a forwarded request ("http://host[:port]/…";
// no user info) into the host (normalized), the port and the URL.
func absoluteTarget(target string) (string, uint16, *url.URL, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil {
		return "", 0, nil, errBadHead
	}
	host, port, err := splitHostPort(u.Host, 80)
	if err != nil {
		return "", 0, nil, err
	}
	return normalizeHost(host), port, u, nil
}

// serveHTTP serves one client connection of the HTTP proxy: its requests one after the
// other, each judged anew (docs/network.md §2, "Keep-alive"), until one cannot be followed
// by another on the connection (a CONNECT's tunnel, a head that does not parse, a response
// read to its end, a request that asks to close) or the client ends. The first head must
// come within netProxyHeadTimeout; between two requests the client may stay silent for the
// proxy's idle time, and a head, once begun, must be whole within netProxyHeadTimeout.
func (p *netProxy) serveHTTP(c net.Conn) {
	br := bufio.NewReaderSize(c, netProxyMaxChunkLine)
	c.SetReadDeadline(time.Now().Add(netProxyHeadTimeout))
	for p.serveHTTPRequest(c, br) {
		c.SetReadDeadline(time.Now().Add(p.idleOf()))
		if _, err := br.Peek(1); err != nil {
			return
		}
		c.SetReadDeadline(time.Now().Add(netProxyHeadTimeout))
	}
}

// serveHTTPRequest serves one request read from br (c's reader) and reports whether c may
// carry another.
func (p *netProxy) serveHTTPRequest(c net.Conn, br *bufio.Reader) bool {
	raw, err := readHeadFrom(br)
	if err != nil {
		if errors.Is(err, errHeadTooLarge) {
			writeStatus(c, "431 Request Header Fields Too Large")
		}
		return false
	}
	head, err := parseRequestHead(raw)
	if err != nil {
		writeStatus(c, "400 Bad Request")
		finishRefused(c)
		return false
	}
	c.SetReadDeadline(time.Time{})
	if head.method == "CONNECT" {
		rest, _ := br.Peek(br.Buffered())
		p.serveConnect(c, &head, append([]byte(nil), rest...))
		return false
	}
	host, port, u, err := absoluteTarget(head.target)
	if err != nil {
		writeStatus(c, "400 Bad Request")
		finishRefused(c)
		return false
	}
	if head.count("Host") > 1 {
		// Which of two Host headers a host reads is its own choice, not the judged one.
		writeText(c, "400 Bad Request", "", "duplicate Host header")
		finishRefused(c)
		return false
	}
	if hh, ok := head.header("Host"); ok {
		if h, hp, err := splitHostPort(hh, 80); err != nil || normalizeHost(h) != host || hp != port {
			// The host judged must be the host the request reaches.
			writeText(c, "400 Bad Request", "", "Host header does not match request target")
			finishRefused(c)
			return false
		}
	}
	// Only this request's own body goes to the host: the next request on the connection is
	// read and judged after it (docs/network.md §3).
	body, err := requestBody(&head, br)
	if err != nil {
		writeText(c, "400 Bad Request", "", "unsupported request body framing")
		finishRefused(c)
		return false
	}
	keep := head.proto == "HTTP/1.1" && !head.hasToken("Connection", "close")
	// A refused request's body is dropped before the next request is read; a client that
	// waits for "100 Continue" may never send it, and its next request would be dropped as
	// that body: such a refusal ends the connection.
	keepRefused := keep && !head.hasToken("Expect", "100-continue")
	r := netRequest{protocol: protoHTTP, host: host, port: port, method: head.method, client: c.RemoteAddr().String()}
	v := p.decide(p.ctx, r)
	if !v.allowed {
		writeBlockedJSON(c, r, v, !keepRefused)
		return afterRefusal(c, body, keepRefused)
	}
	up, early, err := p.dialTarget(p.ctx, r.host, port, v.addrs)
	if err != nil {
		if v, ok := p.refusedAtConnect(r, err); ok {
			writeBlockedJSON(c, r, v, !keepRefused)
			return afterRefusal(c, body, keepRefused)
		}
		writeText(c, "502 Bad Gateway", "", "upstream failure")
		return afterRefusal(c, body, false)
	}
	if !p.track(up) {
		return false
	}
	defer p.untrackClose(up)
	var out bytes.Buffer
	fmt.Fprintf(&out, "%s %s %s\r\n", head.method, u.RequestURI(), head.proto)
	hop := hopHeaders(&head)
	hasHost := false
	for _, f := range head.headers {
		if hop[strings.ToLower(f.name)] {
			continue
		}
		hasHost = hasHost || strings.EqualFold(f.name, "Host")
		fmt.Fprintf(&out, "%s: %s\r\n", f.name, f.value)
	}
	if !hasHost {
		fmt.Fprintf(&out, "Host: %s\r\n", u.Host)
	}
	// One host connection per request: the next request may go elsewhere.
	out.WriteString("Connection: close\r\n\r\n")
	if _, err := up.Write(out.Bytes()); err != nil {
		writeText(c, "502 Bad Gateway", "", "upstream failure")
		return afterRefusal(c, body, false)
	}
	return p.exchange(c, up, early, &head, body, keep)
}

// afterRefusal ends a refused request (403, 502) and reports whether c may carry another:
// with keep, the request's body is read and dropped, up to netProxyDrainBytes within
// netProxyDrainTimeout, and the next request follows; a longer or slower body, or a client
// that did not ask to keep the connection, ends it as finishRefused does.
func afterRefusal(c net.Conn, body io.Reader, keep bool) bool {
	if keep {
		c.SetReadDeadline(time.Now().Add(netProxyDrainTimeout))
		n, err := io.CopyN(io.Discard, body, netProxyDrainBytes+1)
		if err == io.EOF && n <= netProxyDrainBytes {
			c.SetReadDeadline(time.Time{})
			return true
		}
	}
	finishRefused(c)
	return false
}

// exchange sends a forwarded request's body to up while it relays up's answer to the client
// (relayResponse), under one idle clock, and reports whether c may carry another request:
// the answer was framed, the client did not ask to close, and the request's body was read
// to its end. A body the host did not wait for (an early answer) is cut after
// netProxyDrainTimeout and ends the connection: its rest would be read as a request.
func (p *netProxy) exchange(c, up net.Conn, early []byte, head *httpHead, body io.Reader, keep bool) bool {
	k := startIdleClock(p.idleOf(), c, up)
	defer k.stop()
	sent := make(chan error, 1)
	// The body's copy ends with the body, or when c or up fails. A body cut short (the client
	// left mid-body) closes up: the host, waiting for the rest, would never answer, and the
	// answer's wait would hold the host connection and the slot for the idle time.
	go func() {
		err := k.copy(up, body)
		if lr, ok := body.(*io.LimitedReader); ok && err == nil && lr.N > 0 {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			up.Close()
		}
		sent <- err
	}()
	again := p.relayResponse(k, c, up, early, head, keep)
	wait := time.NewTimer(netProxyDrainTimeout)
	defer wait.Stop()
	select {
	case err := <-sent:
		again = again && err == nil
	case <-wait.C:
		again = false
		c.SetReadDeadline(time.Now())
		up.Close()
		<-sent
	}
	if !again {
		finishRefused(c)
	}
	return again
}

// netProxyMaxInterim bounds the interim (1xx) answers relayed before a request's final one.
const netProxyMaxInterim = 8

// relayResponse reads up's answer (interim 1xx heads, then the final one) and relays it to
// the client with the hop-by-hop headers removed, in the client's HTTP version, and its
// body framed as the host framed it (RFC 9112 §6.3): none (a HEAD's answer, 1xx, 204,
// 304), Content-Length bytes, a chunked body up to its end, or, without either, everything
// until the host closes, after which the client's connection ends too ("connection: close"
// is added). It reports whether the whole answer reached the client framed and keep allows
// another request. An answer whose head or length does not parse gets 502 when nothing was
// relayed yet, and ends the connection.
func (p *netProxy) relayResponse(k *idleClock, c, up net.Conn, early []byte, req *httpHead, keep bool) bool {
	earlyR := bytes.NewReader(early)
	ur := bufio.NewReaderSize(io.MultiReader(earlyR, up), netProxyMaxChunkLine)
	proto := "HTTP/1.1"
	if req.proto == "HTTP/1.0" {
		proto = "HTTP/1.0"
	}
	wrote := false
	fail := func() bool {
		if !wrote {
			writeText(c, "502 Bad Gateway", "", "upstream failure")
		}
		return false
	}
	for interim := 0; ; interim++ {
		raw, err := readHeadFrom(ur)
		if err != nil {
			return fail()
		}
		resp, err := parseResponseHead(raw)
		if err != nil {
			return fail()
		}
		if resp.code >= 100 && resp.code < 200 && resp.code != 101 {
			if interim >= netProxyMaxInterim {
				return fail()
			}
			if proto == "HTTP/1.0" {
				continue // an HTTP/1.0 client gets no interim answer (RFC 9110 §15.2)
			}
			if _, err := c.Write(resp.encode(proto, false)); err != nil {
				return false
			}
			wrote = true
			continue
		}
		length, framing := int64(0), frameNone
		switch {
		case req.method == "HEAD" || resp.code == 204 || resp.code == 304:
		case resp.code == 101:
			framing = frameClose // an upgrade the request did not ask for (Upgrade is not forwarded)
		case resp.count("Transfer-Encoding") > 0:
			framing = frameClose
			if te := resp.values("Transfer-Encoding"); strings.EqualFold(te[len(te)-1], "chunked") {
				framing = frameChunked
			}
		case resp.count("Content-Length") > 0:
			if length, err = resp.contentLength(); err != nil {
				return fail()
			}
			framing = frameLength
		default:
			framing = frameClose
		}
		keep = keep && framing != frameClose
		if _, err := c.Write(resp.encode(proto, !keep)); err != nil {
			return false
		}
		// The body: first what the head's reads left buffered, then the host's socket itself
		// where the bytes may move by splice(2).
		direct := func() bool { return ur.Buffered() == 0 && earlyR.Len() == 0 }
		switch framing {
		case frameLength:
			lr := &io.LimitedReader{R: ur, N: length}
			if n := int64(ur.Buffered()); n > 0 {
				if k.copy(c, io.LimitReader(lr, n)) != nil {
					return false
				}
			}
			if direct() {
				lr.R = up
			}
			return k.copy(c, lr) == nil && lr.N == 0 && keep
		case frameChunked:
			return k.copy(c, &chunkedBody{r: ur}) == nil && keep
		case frameClose:
			if n := ur.Buffered(); n > 0 {
				if k.copy(c, io.LimitReader(ur, int64(n))) != nil {
					return false
				}
			}
			var src io.Reader = ur
			if direct() {
				src = up
			}
			k.copy(c, src)
			return false
		}
		return keep
	}
}

// Framings of an answer's body.
const (
	frameNone = iota
	frameLength
	frameChunked
	frameClose
)

// httpResponseHead is a parsed answer head: the status code, the rest of the status line
// after the version ("200 OK"), the header fields.
type httpResponseHead struct {
	code    int
	status  string
	headers []proxyHeaderField
}

// parseResponseHead parses a whole answer head: "HTTP/1.x SP 3DIGIT [SP reason]" and header
// lines as parseRequestHead reads them.
func parseResponseHead(b []byte) (httpResponseHead, error) {
	var h httpResponseHead
	lines, err := headLines(b)
	if err != nil {
		return h, err
	}
	version, status, _ := strings.Cut(lines[0], " ")
	if version != "HTTP/1.1" && version != "HTTP/1.0" || len(status) < 3 || len(status) > 3 && status[3] != ' ' {
		return h, errBadHead
	}
	if strings.Trim(status[:3], "0123456789") != "" || status[0] == '0' {
		return h, errBadHead
	}
	code, _ := strconv.Atoi(status[:3])
	for _, c := range []byte(status) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return h, errBadHead
		}
	}
	h.code, h.status = code, status
	if h.headers, err = parseHeaderLines(lines[1:]); err != nil {
		return h, err
	}
	return h, nil
}

func (h *httpResponseHead) count(name string) int {
	return (&httpHead{headers: h.headers}).count(name)
}

// values lists the comma-separated elements of every field named name, trimmed.
func (h *httpResponseHead) values(name string) []string {
	var out []string
	for _, f := range h.headers {
		if strings.EqualFold(f.name, name) {
			for _, v := range strings.Split(f.value, ",") {
				out = append(out, strings.TrimSpace(v))
			}
		}
	}
	return out
}

// contentLength is the answer's Content-Length: every value the same run of digits.
func (h *httpResponseHead) contentLength() (int64, error) {
	var n int64 = -1
	for _, v := range h.values("Content-Length") {
		if v == "" || strings.TrimLeft(v, "0123456789") != "" {
			return 0, errBadBody
		}
		m, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n >= 0 && m != n {
			return 0, errBadBody
		}
		n = m
	}
	if n < 0 {
		return 0, errBadBody
	}
	return n, nil
}

// encode is the head as relayed to the client: the proxy's HTTP version, the hop-by-hop
// fields removed (and Content-Length beside a Transfer-Encoding, which frames the body:
// RFC 9112 §6.3), "connection: close" when the connection ends after it.
func (h *httpResponseHead) encode(proto string, closing bool) []byte {
	hop := hopHeaders(&httpHead{headers: h.headers})
	if h.count("Transfer-Encoding") > 0 {
		hop["content-length"] = true
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s\r\n", proto, h.status)
	for _, f := range h.headers {
		if !hop[strings.ToLower(f.name)] {
			fmt.Fprintf(&b, "%s: %s\r\n", f.name, f.value)
		}
	}
	if closing {
		b.WriteString("connection: close\r\n")
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

// hasToken reports whether a field named name lists token (case-insensitive), as Connection
// lists "close".
func (h *httpHead) hasToken(name, token string) bool {
	for _, f := range h.headers {
		if strings.EqualFold(f.name, name) {
			for _, v := range strings.Split(f.value, ",") {
				if strings.EqualFold(strings.TrimSpace(v), token) {
					return true
				}
			}
		}
	}
	return false
}

// readHeadFrom reads a whole head (up to and including its blank line) from br, at most
// netProxyMaxHeaderBytes; what follows stays in br.
func readHeadFrom(br *bufio.Reader) ([]byte, error) {
	var head []byte
	whole := true // the next slice starts a line (the one before ended with its LF)
	for {
		start := whole
		line, err := br.ReadSlice('\n')
		whole = err != bufio.ErrBufferFull
		if len(head)+len(line) > netProxyMaxHeaderBytes {
			return nil, errHeadTooLarge
		}
		head = append(head, line...)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err != nil:
			return nil, err
		case start && (len(line) == 1 || len(line) == 2 && line[0] == '\r'):
			// Only a line of its own is the blank line: the CRLF ending a line longer than the
			// buffer is not.
			return head, nil
		}
	}
}

// hopHeaders are the header names (lowercase) not forwarded: the hop-by-hop ones and those
// the Connection header names.
func hopHeaders(h *httpHead) map[string]bool {
	hop := map[string]bool{"connection": true, "proxy-connection": true, "keep-alive": true,
		"proxy-authorization": true, "proxy-authenticate": true, "te": true, "trailer": true, "upgrade": true}
	for _, f := range h.headers {
		if strings.EqualFold(f.name, "Connection") {
			for _, n := range strings.Split(f.value, ",") {
				hop[strings.ToLower(strings.TrimSpace(n))] = true
			}
		}
	}
	// The framing and the host are never the sender's to drop: the proxy frames the message
	// by them, so the next hop must see the same ones, or it reads another message boundary.
	delete(hop, "content-length")
	delete(hop, "transfer-encoding")
	delete(hop, "host")
	return hop
}

// serveConnect serves a CONNECT: a refusal fails the tunnel with 403 and the refusal's text.
func (p *netProxy) serveConnect(c net.Conn, head *httpHead, rest []byte) {
	host, port, err := splitHostPort(head.target, 0)
	if err != nil {
		writeStatus(c, "400 Bad Request")
		finishRefused(c)
		return
	}
	r := netRequest{protocol: protoHTTPSConnect, host: normalizeHost(host), port: port, method: "CONNECT", client: c.RemoteAddr().String()}
	v := p.decide(p.ctx, r)
	if !v.allowed {
		writeText(c, "403 Forbidden", blockedHeader(v.reason), v.message())
		finishRefused(c)
		return
	}
	if p.mitm.intercepts(r.host, port) {
		p.mitm.serveTunnel(c, r, v, rest, func() error {
			_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\ndate: %s\r\n\r\n", httpDate())
			return err
		}, func(v netVerdict, blocked bool) { writeConnectRefusal(c, v, blocked) })
		return
	}
	up, early, err := p.dialTarget(p.ctx, r.host, port, v.addrs)
	if err != nil {
		if v, ok := p.refusedAtConnect(r, err); ok {
			writeText(c, "403 Forbidden", blockedHeader(v.reason), v.message())
			finishRefused(c)
			return
		}
		writeText(c, "502 Bad Gateway", "", "upstream failure")
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrackClose(up)
	if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\ndate: %s\r\n\r\n", httpDate()); err != nil {
		return
	}
	p.splice(c, up, rest, early)
}

// blockedBody is the JSON body of a refused HTTP request, in the reference's key order.
type blockedBody struct {
	Status   string `json:"status"`
	Host     string `json:"host"`
	Reason   string `json:"reason"`
	Decision string `json:"decision"`
	Source   string `json:"source"`
	Protocol string `json:"protocol"`
	Port     uint16 `json:"port"`
	Message  string `json:"message"`
}

// writeBlockedJSON answers a refused request: 403 with the reference's JSON body, and
// "connection: close" when the connection ends after it.
func writeBlockedJSON(c net.Conn, r netRequest, v netVerdict, closing bool) {
	body, _ := json.Marshal(blockedBody{Status: "blocked", Host: r.host, Reason: v.reason, Decision: v.decision,
		Source: v.source, Protocol: r.protocol, Port: r.port, Message: v.message()})
	conn := ""
	if closing {
		conn = "connection: close\r\n"
	}
	fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\nx-proxy-error: %s\r\ncontent-length: %d\r\n%sdate: %s\r\n\r\n%s",
		blockedHeader(v.reason), len(body), conn, httpDate(), body)
}

func writeText(c net.Conn, status, proxyError, body string) {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %s\r\ncontent-type: text/plain\r\n", status)
	if proxyError != "" {
		fmt.Fprintf(&b, "x-proxy-error: %s\r\n", proxyError)
	}
	fmt.Fprintf(&b, "content-length: %d\r\ndate: %s\r\n\r\n%s", len(body), httpDate(), body)
	c.Write([]byte(b.String()))
}

func writeStatus(c net.Conn, status string) {
	fmt.Fprintf(c, "HTTP/1.1 %s\r\nconnection: close\r\ncontent-length: 0\r\ndate: %s\r\n\r\n", status, httpDate())
}

// httpDate is the date header's value now (RFC 9110 §5.6.7).
func httpDate() string { return time.Now().UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT") }

// upstreamHostPort is the host:port of a proxy URL from the server's environment, or "".
func upstreamHostPort(raw string) string {
	if raw == "" {
		return ""
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return ""
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "80")
	}
	return u.Host
}
