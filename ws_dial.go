package main

// The client side of a websocket: the dial, through an HTTP CONNECT proxy if one is set, and
// the upgrade request (the relay's rendezvous socket, docs/remote.md §3; tests).

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// dialTunnel connects to addr, the host of u, directly or through the HTTP CONNECT proxy that
// proxy picks for u; control vets the address of a direct dial. The proxy's address is not
// vetted: the user chose it, and it says nothing of the target's (a caller that cares checks
// an address written in u itself, as the rendezvous dial does).
func dialTunnel(ctx context.Context, u *url.URL, addr string, proxy func(*http.Request) (*url.URL, error),
	control func(network, address string, c syscall.RawConn) error) (net.Conn, error) {
	d := net.Dialer{Control: control}
	if proxy == nil {
		return d.DialContext(ctx, "tcp", addr)
	}
	target := &url.URL{Scheme: "http", Host: u.Host}
	if u.Scheme == "wss" {
		target.Scheme = "https"
	}
	pu, err := proxy(&http.Request{Method: http.MethodGet, URL: target, Host: u.Host, Header: http.Header{}})
	if err != nil || pu == nil {
		var rule proxyRuleError
		switch {
		case errors.As(err, &rule):
			// remoteProxy's reason (a plain request refused a proxy) quotes no value.
			return nil, fmt.Errorf("proxy: %w", err)
		case err != nil:
			// Not wrapped: the error may quote the variable's value, password included.
			return nil, errors.New("proxy: the proxy variable (HTTPS_PROXY, HTTP_PROXY or ALL_PROXY) is not a valid URL")
		}
		return d.DialContext(ctx, "tcp", addr)
	}
	if pu.Scheme != "http" {
		return nil, fmt.Errorf("proxy scheme %q is not supported (http only)", pu.Scheme)
	}
	paddr := pu.Host
	if pu.Port() == "" {
		paddr = net.JoinHostPort(pu.Hostname(), "80")
	}
	var pd net.Dialer
	pc, err := pd.DialContext(ctx, "tcp", paddr)
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", pu.Host, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		pc.SetDeadline(dl)
	} else {
		pc.SetDeadline(time.Now().Add(wsHandshakeLimit))
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: addr}, Host: addr, Header: http.Header{}}
	if pu.User != nil {
		pass, _ := pu.User.Password()
		cred := base64.StdEncoding.EncodeToString([]byte(pu.User.Username() + ":" + pass))
		req.Header.Set("Proxy-Authorization", "Basic "+cred)
	}
	req.Header["User-Agent"] = []string{""}
	if err := req.Write(pc); err != nil {
		pc.Close()
		return nil, fmt.Errorf("proxy %s: %w", pu.Host, err)
	}
	// The proxy says nothing after its answer until we speak, so no byte is left buffered.
	resp, err := http.ReadResponse(bufio.NewReaderSize(&headLimit{r: pc, left: wsMaxAnswerHeadBytes}, 512), req)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("proxy %s: %w", pu.Host, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		pc.Close()
		return nil, fmt.Errorf("proxy %s refused the tunnel: %s", pu.Host, resp.Status)
	}
	pc.SetDeadline(time.Time{})
	return pc, nil
}

// redactQuery renders u without its query: a rendezvous URL carries its credential there.
func redactQuery(u *url.URL) string {
	v := *u
	v.RawQuery, v.ForceQuery = "", false
	return v.Redacted()
}

// upgradeHeader is one extra header of a client upgrade request, such as the rendezvous
// dial's x-request-id or the direct dial's SigV4 headers.
type upgradeHeader struct{ name, value string }

// dialWebsocket opens a client websocket to a ws:// or wss:// URL. On an answer other than
// 101 it returns the response (body read, up to 64 KiB) with an error, so callers can act on
// the status.
func dialWebsocket(ctx context.Context, rawURL string, extra []upgradeHeader, tlsConf *tls.Config, opts wsOptions) (*wsConn, *http.Response, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("websocket dial: %w", err)
	}
	for _, h := range extra {
		if !validUpgradeHeader(h) {
			return nil, nil, fmt.Errorf("websocket dial %s: header %q: invalid name or value", redactQuery(u), h.name)
		}
	}
	if !requestLineSafe(u) {
		return nil, nil, fmt.Errorf("websocket dial %s: the URL holds a space or a control character", redactQuery(u))
	}
	host := u.Host
	switch u.Scheme {
	case "ws":
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "80")
		}
	case "wss":
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "443")
		}
	default:
		return nil, nil, fmt.Errorf("websocket dial %s: scheme must be ws or wss", redactQuery(u))
	}
	nc, err := dialTunnel(ctx, u, host, opts.proxy, opts.control)
	if err != nil {
		return nil, nil, fmt.Errorf("websocket dial %s: %w", redactQuery(u), err)
	}
	if u.Scheme == "wss" {
		conf := &tls.Config{}
		if tlsConf != nil {
			conf = tlsConf.Clone()
		}
		if conf.ServerName == "" {
			conf.ServerName = u.Hostname()
		}
		tc := tls.Client(nc, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("websocket dial %s: %w", redactQuery(u), err)
		}
		nc = tc
	}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	} else {
		nc.SetDeadline(time.Now().Add(wsHandshakeLimit))
	}
	var rawKey [16]byte
	rand.Read(rawKey[:])
	key := base64.StdEncoding.EncodeToString(rawKey[:])
	if _, err := nc.Write(appendUpgradeRequest(nil, u, key, extra)); err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("websocket dial %s: %w", redactQuery(u), err)
	}
	req := &http.Request{Method: http.MethodGet, URL: u}
	limit := &headLimit{r: nc, left: wsMaxAnswerHeadBytes}
	br := bufio.NewReader(limit)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("websocket dial %s: %w", redactQuery(u), err)
	}
	limit.left = -1 // the frames that follow are bounded by the websocket's own limits
	if resp.StatusCode != http.StatusSwitchingProtocols ||
		!headerHasToken(resp.Header, "Upgrade", "websocket") ||
		resp.Header.Get("Sec-WebSocket-Accept") != acceptKey(key) {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		nc.Close()
		return nil, resp, fmt.Errorf("websocket dial %s: upgrade refused: %s", redactQuery(u), resp.Status)
	}
	nc.SetDeadline(time.Time{})
	return newWSConn(nc, br, true, opts), resp, nil
}

// appendUpgradeRequest appends the head of a client upgrade request as 0.169's client writes
// it, byte for byte (docs/remote.md §3): Host, Connection, Upgrade, Sec-WebSocket-Version and
// Sec-WebSocket-Key, then the extra headers in the order given, named in lower case, and no
// User-Agent. The caller has checked the extra headers' names and values.
func appendUpgradeRequest(b []byte, u *url.URL, key string, extra []upgradeHeader) []byte {
	b = append(b, "GET "...)
	b = append(b, u.RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, hostWithoutZone(u.Host)...)
	b = append(b, "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "...)
	b = append(b, key...)
	b = append(b, "\r\n"...)
	for _, h := range extra {
		b = append(b, strings.ToLower(h.name)...)
		b = append(b, ": "...)
		b = append(b, h.value...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// validUpgradeHeader reports whether h can be written as it is: a token for a name, a value
// without control characters but tab (http.go's rules). A token file holding a line break
// would otherwise add headers of its own.
func validUpgradeHeader(h upgradeHeader) bool {
	return isToken(h.name) && validHeaderValue(h.value)
}

// requestLineSafe reports whether u's path and query can go into a request line as they are:
// a space or a control character there would end the line or the request early.
func requestLineSafe(u *url.URL) bool {
	return !strings.ContainsFunc(u.RequestURI(), func(r rune) bool { return r <= ' ' || r == 0x7f })
}

// wsMaxAnswerHeadBytes bounds the head of an answer to a client upgrade or to a CONNECT: a
// rendezvous, a direct endpoint, a forward target or a proxy that never ends its head is
// refused instead of filling memory.
const wsMaxAnswerHeadBytes = 64 << 10

// errAnswerHeadTooLarge is what reading past wsMaxAnswerHeadBytes returns.
var errAnswerHeadTooLarge = fmt.Errorf("the answer's head is over %d bytes", wsMaxAnswerHeadBytes)

// headLimit passes at most left bytes of r, then fails, until left is set below zero: the
// buffered reader that reads an answer's head through it goes on to carry websocket frames.
type headLimit struct {
	r    io.Reader
	left int
}

func (l *headLimit) Read(p []byte) (int, error) {
	switch {
	case l.left < 0:
		return l.r.Read(p)
	case l.left == 0:
		return 0, errAnswerHeadTooLarge
	case len(p) > l.left:
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= n
	return n, err
}

// hostWithoutZone drops an IPv6 zone ("[fe80::1%eth0]:80" → "[fe80::1]:80"): the zone names an
// interface of this host, which means nothing to the peer and is no part of a Host header
// (RFC 6874 §4), as net/http leaves it out too.
func hostWithoutZone(host string) string {
	if !strings.HasPrefix(host, "[") {
		return host
	}
	if zone := strings.IndexByte(host, '%'); zone >= 0 {
		if end := strings.IndexByte(host, ']'); end > zone {
			return host[:zone] + host[end:]
		}
	}
	return host
}
