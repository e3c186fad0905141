package main

// A logging websocket proxy: the harness connects here, each accepted socket is paired with a
// fresh socket to the upstream exec-server, and every message both ways is copied unchanged
// and recorded. It is how the local check sees what the real harness sends and what each
// exec-server answers.

import (
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
	ln       net.Listener
	srv      *http.Server
	start    time.Time

	mu       sync.Mutex
	conns    int
	msgs     []wireMessage
	upgrades []string // request line and headers of each upgrade, as the harness sent them
	closes   []string
	live     []*websocket.Conn
}

func startWSProxy(log *eventLog, name, upstream string) (*wsProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	p := &wsProxy{log: log, name: name, upstream: upstream, ln: ln, start: time.Now()}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
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
// network failure would.
func (p *wsProxy) DropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.live {
		c.NetConn().Close()
	}
	p.live = nil
	p.log.Printf("%s proxy: dropped all connections", p.name)
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
	up, resp, err := websocket.DefaultDialer.Dial(p.upstream+req.URL.RequestURI(), nil)
	if err != nil {
		status := http.StatusBadGateway
		if resp != nil {
			status = resp.StatusCode
		}
		p.log.Printf("%s proxy: upstream dial: %v", p.name, err)
		w.WriteHeader(status)
		return
	}
	c, err := upgrader.Upgrade(w, req, nil)
	if err != nil {
		up.Close()
		return
	}
	c.SetReadLimit(-1)
	up.SetReadLimit(-1)
	p.mu.Lock()
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
