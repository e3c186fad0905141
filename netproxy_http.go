package main

// The HTTP side of the managed network proxy (docs/network.md §2): absolute-form requests
// (`GET http://host/path`), forwarded one per connection, and CONNECT tunnels. The request
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
			b.done = blank
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
	lines := strings.Split(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n")
	if len(lines) < 2 || lines[len(lines)-1] != "" || lines[len(lines)-2] != "" {
		return h, errBadHead
	}
	lines = lines[:len(lines)-2]
	if len(lines) == 0 {
		return h, errBadHead
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
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok || !isToken(name) {
			return h, errBadHead
		}
		value = strings.Trim(value, " \t")
		for _, c := range []byte(value) {
			if c < ' ' && c != '\t' || c == 0x7f || c == '\r' {
				return h, errBadHead
			}
		}
		h.headers = append(h.headers, proxyHeaderField{name, value})
	}
	return h, nil
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

// splitHostPort splits an authority "host:port" or "[v6]:port" (port required when
// needPort, else def).
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

// serveHTTP serves one client connection of the HTTP proxy: one request, then the end.
func (p *netProxy) serveHTTP(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(netProxyHeadTimeout))
	buf, n, err := readHead(c)
	if err != nil {
		if errors.Is(err, errHeadTooLarge) {
			writeStatus(c, "431 Request Header Fields Too Large")
		}
		return
	}
	head, err := parseRequestHead(buf[:n])
	if err != nil {
		writeStatus(c, "400 Bad Request")
		finishRefused(c)
		return
	}
	c.SetReadDeadline(time.Time{})
	if head.method == "CONNECT" {
		p.serveConnect(c, &head, buf[n:])
		return
	}
	host, port, u, err := absoluteTarget(head.target)
	if err != nil {
		writeStatus(c, "400 Bad Request")
		finishRefused(c)
		return
	}
	if head.count("Host") > 1 {
		// Which of two Host headers a host reads is its own choice, not the judged one.
		writeText(c, "400 Bad Request", "", "duplicate Host header")
		finishRefused(c)
		return
	}
	if hh, ok := head.header("Host"); ok {
		if h, hp, err := splitHostPort(hh, 80); err != nil || normalizeHost(h) != host || hp != port {
			// The host judged must be the host the request reaches.
			writeText(c, "400 Bad Request", "", "Host header does not match request target")
			finishRefused(c)
			return
		}
	}
	// Only this request's own body goes to the host: a second request on the connection
	// would reach it unjudged (docs/network.md §3).
	body, err := requestBody(&head, bufio.NewReaderSize(io.MultiReader(bytes.NewReader(buf[n:]), c), netProxyMaxChunkLine))
	if err != nil {
		writeText(c, "400 Bad Request", "", "unsupported request body framing")
		finishRefused(c)
		return
	}
	r := netRequest{protocol: protoHTTP, host: host, port: port, method: head.method, client: c.RemoteAddr().String()}
	v := p.decide(p.ctx, r)
	if !v.allowed {
		writeBlockedJSON(c, r, v)
		finishRefused(c)
		return
	}
	up, early, err := p.dialTarget(p.ctx, r.host, port, v.addrs)
	if err != nil {
		if v, ok := p.refusedAtConnect(r, err); ok {
			writeBlockedJSON(c, r, v)
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
	target := u.RequestURI()
	var out bytes.Buffer
	fmt.Fprintf(&out, "%s %s %s\r\n", head.method, target, head.proto)
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
	out.WriteString("Connection: close\r\n\r\n")
	if _, err := up.Write(out.Bytes()); err != nil {
		writeText(c, "502 Bad Gateway", "", "upstream failure")
		return
	}
	if len(early) > 0 {
		if _, err := c.Write(early); err != nil {
			return
		}
	}
	p.relay(c, up, true, body)
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

func writeBlockedJSON(c net.Conn, r netRequest, v netVerdict) {
	body, _ := json.Marshal(blockedBody{Status: "blocked", Host: r.host, Reason: v.reason, Decision: v.decision,
		Source: v.source, Protocol: r.protocol, Port: r.port, Message: v.message()})
	fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\nx-proxy-error: %s\r\ncontent-length: %d\r\ndate: %s\r\n\r\n%s",
		blockedHeader(v.reason), len(body), httpDate(), body)
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
