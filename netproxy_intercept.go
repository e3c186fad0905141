package main

// TLS interception of credential destinations (docs/network.md, "Credential masking",
// "Interception"): after an allowed CONNECT (HTTP or SOCKS5) to a destination some credential
// of the process belongs to, the proxy answers the tunnel itself. It peeks at the first bytes,
// completes a TLS handshake with the child under a leaf of the server's masking CA, serves the
// inner HTTP/1.1 or HTTP/2 requests, checks each one, lets the injector swap stand-ins for
// real values, and forwards it over its own TLS connection to the origin, verified against the
// server's roots. Every other CONNECT stays a spliced tunnel: no interception, no new trust.
// It is a file of its own because interception is its own concern; the CA, the leaves and the
// credential registry behind the two interfaces below live elsewhere.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// leafIssuer issues the certificate the proxy shows the child for host (a DNS name or an IP
// literal), signed by the server's masking CA. Safe for concurrent use.
type leafIssuer interface {
	leafFor(host string) (*tls.Certificate, error)
}

// credentialInjector is one process's masking: which destinations it intercepts and the swap.
type credentialInjector interface {
	// intercepts reports whether a CONNECT to host:port must be intercepted (some credential
	// bound to this process belongs to an https destination matching it).
	intercepts(host string, port uint16) bool
	// inject replaces stand-ins by real values in r's headers, only where r's destination
	// (https, host, port, path) is one the credential belongs to; it reports the names of the
	// providers it injected for (for logs: names only, never values).
	inject(r *http.Request) []string
}

// responseUnmasker is what an injector may add (decision D6, docs/network.md "Interception"):
// unmask replaces, in the headers of a response from an intercepted destination, every real
// value of the process's credentials by its stand-in, so that an origin that echoes a
// credential back does not hand the child the real value.
type responseUnmasker interface{ unmask(h http.Header) }

// bodyUnmasker is what an injector may add for response bodies (D6): the real value of each
// of the process's credentials with its stand-in. A response body that is not compressed
// (no Content-Encoding, or identity) then reaches the child with every real value replaced
// by its stand-in (unmaskReader).
type bodyUnmasker interface{ unmaskPairs() []unmaskPair }

// unmaskPair is one real value and the stand-in that replaces it in responses.
type unmaskPair struct{ real, standIn []byte }

// interceptConfig is what a process's proxy intercepts with.
type interceptConfig struct {
	issuer   leafIssuer
	injector credentialInjector
	// roots verify the origins; nil: the system's roots. Only tests set it.
	roots *x509.CertPool
}

// Limits of interception (docs/network.md "Interception").
const (
	// mitmPeekBudget is how long an intercepted tunnel waits for the child's first bytes
	// before it takes the tunnel for a protocol other than TLS.
	mitmPeekBudget = 250 * time.Millisecond
	// mitmMaxIdlePerHost bounds the idle connections the proxy keeps to one origin.
	mitmMaxIdlePerHost = 4
)

// The fixed bodies of interception's own answers: they never carry request data.
const (
	mitmTextHostMismatch  = "host mismatch"
	mitmTextInnerConnect  = "CONNECT inside an intercepted tunnel is not supported"
	mitmTextUpstreamError = "mitm upstream error"
)

// protoHTTPS is the protocol of a policy decision on a request inside an intercepted tunnel.
const protoHTTPS = "https"

// mitmProxy is a proxy's interception: one HTTP server for every intercepted connection, fed
// by a channel listener, and one transport to the origins. Its goroutines and sockets end at
// the proxy's close (it is tracked as one of the proxy's sockets: Close).
type mitmProxy struct {
	p   *netProxy
	cfg interceptConfig
	ln  *mitmListener
	srv *http.Server
	tr  *http.Transport
	rp  *httputil.ReverseProxy
}

// mitmTarget is what an intercepted connection was allowed for: the CONNECT host (normalized)
// and port, and the addresses the policy checked (nil: resolve at the dial).
type mitmTarget struct {
	host   string
	port   uint16
	addrs  []netip.Addr
	client string
}

type mitmTargetKey struct{}

// newMITMProxy starts p's interception; p.close ends it.
func newMITMProxy(p *netProxy, cfg interceptConfig) *mitmProxy {
	m := &mitmProxy{p: p, cfg: cfg, ln: &mitmListener{ch: make(chan net.Conn), done: make(chan struct{})}}
	quiet := log.New(io.Discard, "", 0) // the stdlib's messages could quote request data
	m.tr = &http.Transport{
		DialContext:         m.dialOrigin,
		TLSClientConfig:     &tls.Config{RootCAs: cfg.roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		DisableCompression:  true, // bodies as the origin sends them; rewrite asks for identity
		MaxConnsPerHost:     netProxyMaxConns,
		MaxIdleConnsPerHost: mitmMaxIdlePerHost,
		IdleConnTimeout:     p.idleOf(),
		TLSHandshakeTimeout: netProxyDialTimeout,
	}
	m.rp = &httputil.ReverseProxy{
		Rewrite:        m.rewrite,
		Transport:      unmask1xxTransport{m.tr, cfg.injector},
		FlushInterval:  -1,
		ErrorLog:       quiet,
		ModifyResponse: m.modifyResponse,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeMITMText(w, http.StatusBadGateway, mitmTextUpstreamError)
		},
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	m.srv = &http.Server{
		Handler:           http.HandlerFunc(m.serveInner),
		ReadHeaderTimeout: netProxyHeadTimeout,
		IdleTimeout:       p.idleOf(),
		MaxHeaderBytes:    netProxyMaxHeaderBytes,
		ErrorLog:          quiet,
		Protocols:         &protocols,
		BaseContext:       func(net.Listener) context.Context { return p.ctx },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*tls.Conn); ok {
				if mc, ok := tc.NetConn().(*mitmConn); ok {
					return context.WithValue(ctx, mitmTargetKey{}, mc.target)
				}
			}
			return ctx
		},
	}
	if !p.track(m) {
		return m
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		m.srv.Serve(m.ln) // returns at Close
	}()
	return m
}

// Close ends the server (its listener and every connection it holds) and the transport's
// idle connections; the proxy's close calls it.
func (m *mitmProxy) Close() error {
	m.srv.Close()
	m.ln.Close()
	m.tr.CloseIdleConnections()
	return nil
}

// intercepts reports whether a CONNECT to host:port is intercepted; false on a nil m.
func (m *mitmProxy) intercepts(host string, port uint16) bool {
	return m != nil && m.cfg.injector != nil && m.cfg.injector.intercepts(host, port)
}

// serveTunnel serves an allowed CONNECT that intercepts says to intercept. c is the child's
// connection, rest what it sent after its request, accept the answer that opens the tunnel
// (the 200 or the SOCKS5 success). r and v are the request and its verdict. A name the policy
// did not resolve (one the client approved) is resolved and checked here, before the tunnel
// opens, as dialTarget would (refuse answers that: blocked with the refusal, else a failure to
// connect). The first bytes decide: a TLS record is intercepted; anything
// else (or nothing within mitmPeekBudget) is spliced to the destination in full mode and
// refused in limited mode, where an opaque tunnel would carry what the mode guard cannot see.
func (m *mitmProxy) serveTunnel(c net.Conn, r netRequest, v netVerdict, rest []byte, accept func() error, refuse func(v netVerdict, blocked bool)) {
	p := m.p
	addrs := v.addrs
	if _, err := parseIPHost(r.host); err != nil && addrs == nil && !m.viaUpstream(r.host) {
		a, err := p.hooks.resolve(p.ctx, r.host)
		if cerr := p.checkResolved(r.host, a); err != nil || cerr != nil {
			v, ok := p.refusedAtConnect(r, cerr)
			refuse(v, ok)
			return
		}
		addrs = a
	}
	if accept() != nil {
		return
	}
	head, isTLS := m.peek(c, rest)
	if !isTLS {
		if p.policy.mode == modeLimited {
			p.refuse(r, scopeNonDomain, decisionDeny, reasonMITMRequired, sourceModeGuard, false)
			return
		}
		up, early, err := p.dialTarget(p.ctx, r.host, r.port, addrs)
		if err != nil || !p.track(up) {
			return
		}
		defer p.untrackClose(up)
		p.splice(c, up, head, early)
		return
	}
	mc := &mitmConn{Conn: c, head: head, closed: make(chan struct{}),
		target: mitmTarget{host: r.host, port: r.port, addrs: addrs, client: r.client}}
	tc := tls.Server(mc, m.tlsConfig(r.host))
	ctx, cancel := context.WithTimeout(p.ctx, netProxyHeadTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		return
	}
	select {
	case m.ln.ch <- tc:
	case <-m.ln.done:
		tc.Close()
		return
	}
	// The server owns tc now; the connection keeps its slot until the server closes it.
	select {
	case <-mc.closed:
	case <-p.ctx.Done():
		tc.Close()
	}
}

// viaUpstream reports whether a connection to host goes through the server's upstream proxy
// (which then resolves the name itself).
func (m *mitmProxy) viaUpstream(host string) bool {
	up, err := m.p.upstream()
	return (up != "" || err != nil) && !isLocalDestination(host, nil)
}

// peek reads the child's first bytes, for at most mitmPeekBudget until one byte came and
// netProxyHeadTimeout until a whole TLS record header did, and reports whether they open a
// TLS handshake. head is every byte read, rest first.
func (m *mitmProxy) peek(c net.Conn, rest []byte) (head []byte, isTLS bool) {
	head = append([]byte(nil), rest...)
	c.SetReadDeadline(time.Now().Add(mitmPeekBudget))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 5)
	for {
		tlsLike, more := mitmClassify(head)
		if !more {
			return head, tlsLike
		}
		if len(head) > 0 {
			c.SetReadDeadline(time.Now().Add(netProxyHeadTimeout))
		}
		n, err := c.Read(buf)
		head = append(head, buf[:n]...)
		if err != nil && n == 0 {
			return head, false
		}
	}
}

// mitmClassify looks at a tunnel's first bytes: whether they open a TLS handshake (a
// handshake record, 0x16, of version 3.0 to 1.3: 0x03 0x00..0x04), and whether more bytes are
// needed to tell.
func mitmClassify(b []byte) (tlsLike, needMore bool) {
	switch {
	case len(b) == 0:
		return false, true
	case b[0] != 0x16:
		return false, false
	case len(b) < 3:
		if len(b) == 2 && b[1] != 0x03 {
			return false, false
		}
		return false, true
	}
	return b[1] == 0x03 && b[2] <= 0x04, false
}

// tlsConfig is the child side's TLS for an intercepted connection to host: the leaf for host
// (never for the SNI: a child that names another host in its SNI is refused), TLS 1.2 or
// later, HTTP/2 or HTTP/1.1.
func (m *mitmProxy) tlsConfig(host string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName != "" && normalizeHost(hello.ServerName) != host {
				return nil, errors.New("the TLS server name is not the CONNECT host")
			}
			return m.cfg.issuer.leafFor(host)
		},
	}
}

// serveInner checks one request from an intercepted connection, in this order: its authority
// must be the CONNECT target (400), it must not be a CONNECT (405), limited mode's method
// guard (403 with the refusal's body, and a policy decision); then it is forwarded, the
// injector's swap applied by rewrite.
func (m *mitmProxy) serveInner(w http.ResponseWriter, r *http.Request) {
	t, ok := r.Context().Value(mitmTargetKey{}).(mitmTarget)
	if !ok {
		writeMITMText(w, http.StatusInternalServerError, mitmTextUpstreamError)
		return
	}
	nr := netRequest{protocol: protoHTTPS, host: t.host, port: t.port, method: r.Method, client: t.client}
	if h, port, err := splitHostPort(r.Host, 443); err != nil || normalizeHost(h) != t.host || port != t.port {
		writeMITMText(w, http.StatusBadRequest, mitmTextHostMismatch)
		return
	}
	if r.Method == http.MethodConnect {
		writeMITMText(w, http.StatusMethodNotAllowed, mitmTextInnerConnect)
		return
	}
	if !m.p.policy.mode.allowsMethod(r.Method) {
		v := m.p.refuse(nr, scopeNonDomain, decisionDeny, reasonMethodNotAllowed, sourceModeGuard, false)
		body, _ := json.Marshal(blockedBody{Status: "blocked", Host: nr.host, Reason: v.reason, Decision: v.decision,
			Source: v.source, Protocol: nr.protocol, Port: nr.port, Message: v.message()})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Proxy-Error", blockedHeader(v.reason))
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusForbidden)
		w.Write(body)
		return
	}
	if rs, ok := m.cfg.injector.(requestResigner); ok {
		if out := rs.resign(r, t.host, t.port); out.status != 0 {
			writeMITMText(w, out.status, out.text)
			return
		}
	}
	m.rp.ServeHTTP(w, r)
}

// requestResigner is an injector that also re-signs a request the command signed with a
// stand-in (AWS SigV4, netproxy_sigv4.go). It runs before the request is forwarded, so that
// a request it refuses (a body signed chunk by chunk, one too large to hash) is answered
// here and never reaches the origin.
type requestResigner interface {
	resign(r *http.Request, host string, port uint16) sigv4Outcome
}

// rewrite builds the request to the origin: https to the CONNECT target (the URL names the
// port always, the Host header only when it is not 443), the child's path and query, the stdlib's hop-by-hop removal and no X-Forwarded-* header, then the injector's swap.
func (m *mitmProxy) rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(mitmTargetKey{}).(mitmTarget)
	hostPort := net.JoinHostPort(t.host, strconv.Itoa(int(t.port)))
	pr.Out.URL = &url.URL{Scheme: "https", Host: hostPort, Path: pr.In.URL.Path, RawPath: pr.In.URL.RawPath, RawQuery: pr.In.URL.RawQuery}
	pr.Out.Host = strings.TrimSuffix(hostPort, ":443")
	// A compressed body cannot be scanned for real values (D6): ask for none. The child's
	// client decodes nothing it did not get.
	pr.Out.Header.Set("Accept-Encoding", "identity")
	// Nor a compressed upgraded stream: a websocket's permessage-deflate frames could not be
	// scanned either (review 31b).
	pr.Out.Header.Del("Sec-WebSocket-Extensions")
	m.cfg.injector.inject(pr.Out)
}

// errCompressedAnswer refuses an answer that came compressed though identity was asked for:
// its body could hand the child a real value D6 cannot see (TestAdv31GzipEcho).
var errCompressedAnswer = errors.New("intercepted answer compressed")

// modifyResponse lets the injector take real values out of the response (D6): its headers
// now, its trailers when its body ends, its body as it streams, and, after a 101, what the
// origin sends on the upgraded connection.
func (m *mitmProxy) modifyResponse(resp *http.Response) error {
	u, unmasks := m.cfg.injector.(responseUnmasker)
	if unmasks {
		u.unmask(resp.Header)
		u.unmask(resp.Trailer)
	}
	var pairs []unmaskPair
	if bu, ok := m.cfg.injector.(bodyUnmasker); ok {
		for _, pr := range bu.unmaskPairs() {
			if len(pr.real) > 0 {
				pairs = append(pairs, pr)
			}
		}
	}
	if resp.Body == nil || len(pairs) == 0 && !unmasks {
		return nil
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if rwc, ok := resp.Body.(io.ReadWriteCloser); ok && len(pairs) > 0 {
			resp.Body = upgradeUnmasker{newUnmaskReader(rwc, pairs), rwc} // TestAdv31UpgradeEcho
		}
		return nil
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") && len(pairs) > 0 {
		return errCompressedAnswer
	}
	if unmasks {
		// Trailers get their values as the body ends, after this hook: unmask them then,
		// before the proxy copies them (TestAdv31TrailerEcho).
		resp.Body = &trailerUnmasker{ReadCloser: resp.Body, resp: resp, u: u}
	}
	if len(pairs) == 0 {
		return nil
	}
	for _, pr := range pairs {
		if len(pr.real) != len(pr.standIn) {
			// The body's length may change: let it be framed by its end.
			resp.ContentLength = -1
			resp.Header.Del("Content-Length")
			break
		}
	}
	resp.Body = newUnmaskReader(resp.Body, pairs)
	return nil
}

// trailerUnmasker unmasks a response's trailers once its body has been read to its end, when
// the transport has filled them in: into a new map when none was announced, so the response
// is read again then (TestReview31bUndeclaredTrailerEcho).
type trailerUnmasker struct {
	io.ReadCloser
	resp *http.Response
	u    responseUnmasker
}

func (t *trailerUnmasker) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if err == io.EOF {
		t.u.unmask(t.resp.Trailer)
	}
	return n, err
}

// upgradeUnmasker is the origin's side of an upgraded connection: what the origin sends is
// unmasked on its way to the child, what the child sends goes on as it is.
type upgradeUnmasker struct {
	*unmaskReader
	rwc io.ReadWriteCloser
}

func (c upgradeUnmasker) Write(p []byte) (int, error) { return c.rwc.Write(p) }
func (c upgradeUnmasker) Close() error                { return c.rwc.Close() }

// unmask1xxTransport unmasks the headers of an informational answer (a 103 Early Hints) before
// the reverse proxy passes them to the child, which it does from its own trace hook, past
// modifyResponse (TestAdv31EarlyHintsEcho): a hook added later runs first.
type unmask1xxTransport struct {
	rt http.RoundTripper
	in credentialInjector
}

func (t unmask1xxTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	u, ok := t.in.(responseUnmasker)
	if !ok {
		return t.rt.RoundTrip(r)
	}
	trace := &httptrace.ClientTrace{Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
		u.unmask(http.Header(h))
		return nil
	}}
	return t.rt.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
}

// unmaskReader passes a body on with every real value of its pairs replaced by the stand-in.
// It holds back only a tail that could be the start of a real value (so a streamed event is
// passed on at once unless it ends in such a prefix) and scans nothing twice.
type unmaskReader struct {
	src   io.ReadCloser
	pairs []unmaskPair
	buf   []byte // bytes read and not yet passed on: out first, then held
	out   int    // buf[:out] is ready to pass on
	err   error  // src's end or error, returned once buf is empty
}

func newUnmaskReader(src io.ReadCloser, pairs []unmaskPair) *unmaskReader {
	return &unmaskReader{src: src, pairs: pairs}
}

func (u *unmaskReader) Read(p []byte) (int, error) {
	for u.out == 0 {
		if u.err != nil {
			if len(u.buf) > 0 { // the end: what was held cannot start a match any more
				u.out = len(u.buf)
				break
			}
			return 0, u.err
		}
		held := len(u.buf)
		u.buf = slices.Grow(u.buf, netProxyCopyBuffer)
		n, err := u.src.Read(u.buf[held : held+netProxyCopyBuffer])
		u.buf = u.buf[:held+n]
		u.err = err
		u.scan(held)
	}
	n := copy(p, u.buf[:u.out])
	u.buf = u.buf[:copy(u.buf, u.buf[n:])]
	u.out -= n
	return n, nil
}

// scan replaces the real values in u.buf (whose first from bytes were held: no match starts
// before from-maxLen) and sets u.out to what can be passed on: all of it at the end, else
// up to the tail that is a proper prefix of a real value.
func (u *unmaskReader) scan(from int) {
	maxLen := 0
	for _, pr := range u.pairs {
		maxLen = max(maxLen, len(pr.real))
	}
	start := max(0, from-maxLen)
	out := u.buf
	if u.anyReal(start) {
		out = append(make([]byte, 0, len(u.buf)+64), u.buf[:start]...)
	} else {
		start = len(u.buf) // nothing to replace: pass the buffer on as it is
	}
	for i := start; i < len(u.buf); {
		best, which := -1, -1
		for k, pr := range u.pairs {
			if j := bytes.Index(u.buf[i:], pr.real); j >= 0 && (best < 0 || j < best) {
				best, which = j, k
			}
		}
		if best < 0 {
			out = append(out, u.buf[i:]...)
			break
		}
		out = append(out, u.buf[i:i+best]...)
		out = append(out, u.pairs[which].standIn...)
		i += best + len(u.pairs[which].real)
	}
	u.buf = out
	u.out = len(out)
	if u.err != nil {
		return
	}
	for l := min(maxLen-1, len(out)); l > 0; l-- {
		tail := out[len(out)-l:]
		for _, pr := range u.pairs {
			if bytes.HasPrefix(pr.real, tail) {
				u.out = len(out) - l
				return
			}
		}
	}
}

// anyReal reports whether a real value occurs in u.buf[from:].
func (u *unmaskReader) anyReal(from int) bool {
	for _, pr := range u.pairs {
		if bytes.Contains(u.buf[from:], pr.real) {
			return true
		}
	}
	return false
}

func (u *unmaskReader) Close() error { return u.src.Close() }

// dialOrigin connects the transport to an intercepted connection's destination: the
// addresses the policy checked, through the upstream proxy where the process allows it
// (dialTarget). The socket is the proxy's, closed by its close.
func (m *mitmProxy) dialOrigin(ctx context.Context, network, addr string) (net.Conn, error) {
	t, ok := ctx.Value(mitmTargetKey{}).(mitmTarget)
	if !ok {
		return nil, errors.New("interception: a dial without its target")
	}
	if h, port, err := splitHostPort(addr, 0); err != nil || normalizeHost(h) != t.host || port != t.port {
		return nil, errors.New("interception: a dial to another destination than the target")
	}
	c, early, err := m.p.dialTarget(ctx, t.host, t.port, t.addrs)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, p: m.p}
	if len(early) > 0 {
		tc.head = early
	}
	if !m.p.track(tc.Conn) {
		return nil, net.ErrClosed
	}
	return tc, nil
}

// trackedConn is an origin connection registered with the proxy (closed by its close), and
// the bytes an upstream proxy sent before it, to read first.
type trackedConn struct {
	net.Conn
	p    *netProxy
	head []byte
	once sync.Once
}

func (c *trackedConn) Read(b []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(b, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.p.untrackClose(c.Conn) })
	return nil
}

// mitmConn is the child's side of an intercepted connection under its TLS: the peeked bytes
// first, the target it was allowed for, and a signal when the server closes it.
type mitmConn struct {
	net.Conn
	head   []byte
	target mitmTarget
	once   sync.Once
	closed chan struct{}
}

func (c *mitmConn) Read(b []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(b, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

func (c *mitmConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

// mitmListener hands intercepted connections to the proxy's HTTP server.
type mitmListener struct {
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func (l *mitmListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *mitmListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *mitmListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// writeMITMText answers an intercepted request with one of interception's fixed texts.
func writeMITMText(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", strconv.Itoa(len(text)))
	w.WriteHeader(code)
	io.WriteString(w, text)
}

// writeConnectRefusal answers a CONNECT that serveTunnel refused before the tunnel opened:
// 403 with the refusal when blocked, else 502 (as serveConnect answers a failed dial).
func writeConnectRefusal(c net.Conn, v netVerdict, blocked bool) {
	if !blocked {
		writeText(c, "502 Bad Gateway", "", "upstream failure")
		return
	}
	writeText(c, "403 Forbidden", blockedHeader(v.reason), v.message())
	finishRefused(c)
}

// socksConnectRefusal answers a SOCKS5 CONNECT that serveTunnel refused before the tunnel
// opened, as serveSocks answers a failed dial.
func socksConnectRefusal(c net.Conn, blocked bool) {
	code := byte(socksHostUnreachable)
	if blocked {
		code = socksNotAllowed
	}
	socksReply(c, code, nil)
}
