package main

// The websocket listener (docs/protocol.md §2.1): /readyz, the upgrade on /, the checks
// before it (Origin, authentication, --max-connections), and the hand-off to serveConn.

import (
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// wsServer serves the websocket endpoint and the HTTP routes of docs/protocol.md §2.1.
type wsServer struct {
	srv  *server
	http *http.Server
	opts wsOptions // for each upgraded connection; tests shorten the intervals

	mu       sync.Mutex
	pending  map[net.Conn]struct{} // connections not (yet) upgraded
	upgraded int                   // websocket connections being served
}

func newWSServer(srv *server) *wsServer {
	w := &wsServer{srv: srv, opts: wsOptions{pingInterval: wsPingInterval}, pending: map[net.Conn]struct{}{}}
	w.http = &http.Server{
		Handler:           w,
		ReadHeaderTimeout: wsHandshakeLimit,
		IdleTimeout:       wsIdleLimit,
		MaxHeaderBytes:    wsMaxHeaderBytes,
		ErrorLog:          srv.log.stdLogger(levelDebug),
		ConnState:         w.connState,
	}
	return w
}

// connState keeps the set of connections that have not upgraded, and closes a new one past
// wsMaxPending.
func (w *wsServer) connState(nc net.Conn, st http.ConnState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch st {
	case http.StateNew:
		if len(w.pending) >= wsMaxPending {
			nc.Close()
			return
		}
		w.pending[nc] = struct{}{}
	case http.StateHijacked, http.StateClosed:
		delete(w.pending, nc)
	}
}

// admit counts one more websocket connection, unless --max-connections are being served.
func (w *wsServer) admit() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if max := w.srv.cfg.maxConnections; max > 0 && w.upgraded >= max {
		return false
	}
	w.upgraded++
	return true
}

func (w *wsServer) leave() {
	w.mu.Lock()
	w.upgraded--
	w.mu.Unlock()
}

func (w *wsServer) serve(ln net.Listener) error {
	defer w.srv.listening.add(ln.Addr())()
	err := w.http.Serve(peerCheckedListener{ln, w})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// peerCheckedListener hands each connection over wrapped in a peerCheckedConn.
type peerCheckedListener struct {
	net.Listener
	w *wsServer
}

func (l peerCheckedListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &peerCheckedConn{Conn: nc, w: l.w, due: l.w.srv.sandbox.peerCheckDue()}, nil
}

// peerCheckedConn refuses a peer that is one of our own sandboxes (peer_linux.go) on its first
// read, before a byte of it is parsed or answered: on the connection's own goroutine, so the
// accept loop never waits for the check.
type peerCheckedConn struct {
	net.Conn
	w       *wsServer
	due     bool // a network-enabled sandbox ran at accept, or had just ended: check, whatever now
	once    sync.Once
	refused error
}

func (c *peerCheckedConn) Read(b []byte) (int, error) {
	c.once.Do(func() {
		if why := c.w.srv.sandbox.refusePeer(c.Conn, c.due); why != "" {
			c.w.srv.log.Warn("refused a connection from a sandboxed process", "peer", c.Conn.RemoteAddr().String(), "reason", why)
			c.refused = errors.New("connection refused: " + why)
			c.Conn.Close()
		}
	})
	if c.refused != nil {
		return 0, c.refused
	}
	return c.Conn.Read(b)
}

// SyscallConn keeps the socket reachable for peerHungUp.
func (c *peerCheckedConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a socket")
	}
	return sc.SyscallConn()
}

// close stops accepting. Upgraded connections end through the server's context.
func (w *wsServer) close() { w.http.Close() }

// plainError answers code with body. Every refusal closes the connection: a client that was
// refused has no reason to keep it, and an idle refused socket only holds a descriptor.
func plainError(rw http.ResponseWriter, code int, body string) {
	if code >= 400 {
		rw.Header().Set("Connection", "close")
	}
	if body == "" {
		rw.Header().Set("Content-Length", "0")
		rw.WriteHeader(code)
		return
	}
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.WriteHeader(code)
	io.WriteString(rw, body)
}

// ServeHTTP routes /readyz and the upgrade on /.
func (w *wsServer) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.URL.Path == readyzPath {
		if _, ok := r.Header["Origin"]; ok { // a browser page has no business here either
			plainError(rw, http.StatusForbidden, "")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			rw.Header().Set("Allow", "GET,HEAD")
			plainError(rw, http.StatusMethodNotAllowed, "")
			return
		}
		plainError(rw, http.StatusOK, "")
		return
	}
	if r.URL.Path != "/" {
		plainError(rw, http.StatusNotFound, "")
		return
	}
	if r.Method != http.MethodGet {
		plainError(rw, http.StatusMethodNotAllowed, "Request method must be `GET`")
		return
	}
	if _, ok := r.Header["Origin"]; ok {
		plainError(rw, http.StatusForbidden, "")
		return
	}
	if !headerHasToken(r.Header, "Connection", "upgrade") {
		plainError(rw, http.StatusBadRequest, "Connection header did not include 'upgrade'")
		return
	}
	if !headerHasToken(r.Header, "Upgrade", "websocket") {
		plainError(rw, http.StatusBadRequest, "`Upgrade` header did not include 'websocket'")
		return
	}
	if r.Header.Get("Sec-WebSocket-Version") != "13" {
		rw.Header().Set("Sec-WebSocket-Version", "13")
		plainError(rw, http.StatusBadRequest, "`Sec-WebSocket-Version` header did not include '13'")
		return
	}
	key := r.Header.Get("Sec-WebSocket-Key")
	if key == "" {
		plainError(rw, http.StatusBadRequest, "`Sec-WebSocket-Key` header missing")
		return
	}
	if body, ok := w.srv.auth.check(r.Header.Get("Authorization"), time.Now()); !ok {
		plainError(rw, http.StatusUnauthorized, body)
		return
	}
	if !w.admit() {
		plainError(rw, http.StatusServiceUnavailable, "too many connections: the server is at --max-connections")
		return
	}
	defer w.leave()
	hj, ok := rw.(http.Hijacker)
	if !ok {
		plainError(rw, http.StatusInternalServerError, "")
		return
	}
	nc, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	nc.SetDeadline(time.Time{})
	resp := "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\nsec-websocket-accept: " +
		acceptKey(key) + "\r\ndate: " + time.Now().UTC().Format(http.TimeFormat) + "\r\n\r\n"
	if _, err := io.WriteString(nc, resp); err != nil {
		nc.Close()
		return
	}
	c := newWSConn(nc, brw.Reader, false, w.opts)
	w.srv.conns.Add(1)
	defer w.srv.conns.Done()
	w.srv.serveConn(c, fmt.Sprintf(websocketParsePrefixFm, nc.RemoteAddr()))
}

// headerHasToken reports whether a comma-separated header holds token, case-insensitively.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// peerHungUp reports whether the peer has closed or reset the socket, which the reader may not
// have read yet (peerProber); it reads nothing (tcpPeerHungUp).
func (c *wsConn) peerHungUp() bool {
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	hungUp := false
	rc.Control(func(fd uintptr) { hungUp = tcpPeerHungUp(int(fd)) })
	return hungUp
}
