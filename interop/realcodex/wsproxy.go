package main

// A logging websocket proxy: the harness connects here, each accepted socket is paired with a
// fresh socket to the upstream exec-server, and every message both ways is copied unchanged
// and recorded. It is how the local check sees what the real harness sends and what each
// exec-server answers, and how the forward checks see what each forward sends its target,
// down to the bytes of its upgrade request.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// wireMessage is one recorded websocket message.
type wireMessage struct {
	Conn   int    // 1-based connection number
	Dir    string // "c2s" or "s2c"
	Binary bool
	Data   []byte
	At     time.Duration
}

// wsProxy forwards ws://127.0.0.1:PORT/ to upstream.
type wsProxy struct {
	log      *eventLog
	name     string
	upstream string
	pass     []string // request headers copied to the upstream upgrade (e.g. Authorization)
	ln       *headListener
	srv      *http.Server
	start    time.Time

	mu       sync.Mutex
	conns    int
	msgs     []wireMessage
	upgrades []string // request line and headers of each upgrade, as the harness sent them
	heads    [][]byte // each upgrade request's head (request line and headers) byte for byte
	closes   []string
	live     []*websocket.Conn
}

// startWSProxy listens on a loopback port and forwards each websocket to upstream. The
// request headers named in pass are copied to the upstream upgrade (the rest belong to the
// client's hop); the upstream's refusal of an upgrade is answered with its status.
func startWSProxy(log *eventLog, name, upstream string, pass ...string) (*wsProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	hl := &headListener{Listener: ln, heads: map[string][]byte{}}
	p := &wsProxy{log: log, name: name, upstream: upstream, pass: pass, ln: hl, start: time.Now()}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(hl) // ends when Close closes the listener
	return p, nil
}

// URL is what the harness should dial.
func (p *wsProxy) URL() string { return "ws://" + p.ln.Addr().String() }

func (p *wsProxy) Close() {
	p.srv.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.live {
		c.Close()
	}
}

// DropAll closes every live connection on both sides without a close frame, the way a
// network failure would, and returns how many proxied connections (client and upstream
// socket pairs) it dropped.
func (p *wsProxy) DropAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.live {
		c.NetConn().Close()
	}
	n := len(p.live) / 2
	p.live = nil
	p.log.Printf("%s proxy: dropped all %d connections", p.name, n)
	return n
}

// Messages returns a copy of the recorded traffic.
func (p *wsProxy) Messages() []wireMessage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]wireMessage(nil), p.msgs...)
}

// Upgrades returns the harness's upgrade requests.
func (p *wsProxy) Upgrades() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.upgrades...)
}

// Heads returns the head of each upgrade request received, refused upstream or not, byte for
// byte as the client sent it: the request line and the header lines in the client's order and
// spelling, which net/http's parsed Header loses.
func (p *wsProxy) Heads() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.heads...)
}

func (p *wsProxy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var hdr []string
	for k, v := range req.Header {
		if k != "Sec-Websocket-Key" {
			hdr = append(hdr, k+": "+strings.Join(v, ","))
		}
	}
	if !websocket.IsWebSocketUpgrade(req) {
		p.log.Printf("%s proxy: plain HTTP %s %s %v", p.name, req.Method, req.URL, hdr)
		http.Error(w, "websocket only", http.StatusBadRequest)
		return
	}
	if head := p.ln.take(req.RemoteAddr); head != nil {
		p.mu.Lock()
		p.heads = append(p.heads, head)
		p.mu.Unlock()
	}
	upHeader := http.Header{}
	for _, k := range p.pass {
		if v := req.Header.Values(k); len(v) > 0 {
			upHeader[http.CanonicalHeaderKey(k)] = v
		}
	}
	up, resp, err := websocket.DefaultDialer.Dial(p.upstream+req.URL.RequestURI(), upHeader)
	if err != nil {
		status := http.StatusBadGateway
		if resp != nil {
			status = resp.StatusCode
		}
		p.log.Printf("%s proxy: upstream dial: %v", p.name, err)
		w.WriteHeader(status)
		return
	}
	// The pair is registered under the same lock as the upgrade answer is written, so a
	// DropAll that follows the client's seeing 101 finds it.
	p.mu.Lock()
	c, err := upgrader.Upgrade(w, req, nil)
	if err != nil {
		p.mu.Unlock()
		up.Close()
		return
	}
	c.SetReadLimit(-1)
	up.SetReadLimit(-1)
	p.conns++
	n := p.conns
	p.upgrades = append(p.upgrades, fmt.Sprintf("GET %s %v", req.URL.RequestURI(), hdr))
	p.live = append(p.live, c, up)
	p.mu.Unlock()
	p.log.Printf("%s proxy: conn %d upgrade GET %s %v", p.name, n, req.URL.RequestURI(), hdr)
	done := make(chan struct{}, 2)
	go p.pump(n, "c2s", c, up, done)
	go p.pump(n, "s2c", up, c, done)
	<-done
	c.Close()
	up.Close()
	<-done
	p.forget(c, up)
}

// forget removes an ended pair from the live connections, so DropAll counts only live ones.
func (p *wsProxy) forget(c, up *websocket.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	live := p.live[:0]
	for _, x := range p.live {
		if x != c && x != up {
			live = append(live, x)
		}
	}
	p.live = live
}

// pump copies messages from src to dst, recording each. Pings are answered by gorilla's
// default handlers on each hop; close frames end the pair.
func (p *wsProxy) pump(n int, dir string, src, dst *websocket.Conn, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	for {
		typ, data, err := src.ReadMessage()
		if err != nil {
			p.mu.Lock()
			p.closes = append(p.closes, fmt.Sprintf("conn %d %s: %v", n, dir, err))
			p.mu.Unlock()
			p.log.Printf("%s proxy: conn %d %s ended: %v", p.name, n, dir, err)
			if ce, ok := err.(*websocket.CloseError); ok {
				dst.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(ce.Code, ce.Text), time.Now().Add(time.Second))
			}
			return
		}
		p.mu.Lock()
		p.msgs = append(p.msgs, wireMessage{Conn: n, Dir: dir, Binary: typ == websocket.BinaryMessage, Data: data, At: time.Since(p.start)})
		p.mu.Unlock()
		kind := "text"
		if typ == websocket.BinaryMessage {
			kind = "binary"
		}
		p.log.Printf("%s ws conn %d %s %s %s", p.name, n, dir, kind, clip(string(data), 800))
		if err := dst.WriteMessage(typ, data); err != nil {
			p.log.Printf("%s proxy: conn %d %s write: %v", p.name, n, dir, err)
			return
		}
	}
}

// writeWire saves the raw traffic, one JSON line per websocket message.
func writeWire(path string, msgs []wireMessage) {
	writeJSONLines(path, func(enc *json.Encoder) {
		for _, m := range msgs {
			rec := map[string]any{"t": m.At.Seconds(), "conn": m.Conn, "dir": m.Dir, "binary": m.Binary}
			if json.Valid(m.Data) {
				rec["msg"] = json.RawMessage(m.Data)
			} else {
				rec["raw"] = string(m.Data)
			}
			enc.Encode(rec)
		}
	})
}

// writeJSONLines creates path and lets each write JSON lines to it (HTML characters kept).
// The files are diagnostics, so a failure to write them is not a check failure.
func writeJSONLines(path string, each func(*json.Encoder)) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	enc.SetEscapeHTML(false)
	each(enc)
}

// maxHead bounds the recorded head of one request; a longer one is recorded cut short.
const maxHead = 16 << 10

// headListener records the first request head (up to the blank line) read on each accepted
// connection, keyed by the peer address that net/http reports as Request.RemoteAddr. The
// handler takes it out of the map, so a connection's entry lives until its request is served
// (a connection that never sends a complete head leaves one small entry behind).
type headListener struct {
	net.Listener
	mu    sync.Mutex
	heads map[string][]byte
}

func (l *headListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &headConn{Conn: c, l: l}, nil
}

// take returns and forgets the head recorded for the connection from addr.
func (l *headListener) take(addr string) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.heads[addr]
	delete(l.heads, addr)
	return h
}

// headConn copies what is read into buf until the head is complete, then stores it once.
type headConn struct {
	net.Conn
	l    *headListener
	buf  []byte
	done bool
}

func (c *headConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if !c.done && n > 0 {
		c.buf = append(c.buf, b[:n]...)
		end := bytes.Index(c.buf, []byte("\r\n\r\n"))
		if end >= 0 || len(c.buf) >= maxHead {
			if end >= 0 {
				c.buf = c.buf[:end+4]
			}
			c.done = true
			c.l.mu.Lock()
			c.l.heads[c.RemoteAddr().String()] = c.buf
			c.l.mu.Unlock()
			c.buf = nil
		}
	}
	return n, err
}
