package main

// The relay's connections before they are upgraded or answered (docs/remote.md §12.5): which
// of them count as silent, busy or idle, the caps on them in all and per source, and which
// one makes room for a new one. A file of its own because it is one concern, admission, and
// relayd.go had grown past 1,100 lines with it.

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"
)

// relaydListener hands out its connections as relaydConns.
type relaydListener struct{ net.Listener }

func (l relaydListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &relaydConn{Conn: c}, nil
}

// relaydConn is an accepted connection, beneath its TLS if any, that records whether a byte
// was ever read from it: what tells a silent connection from one whose TLS handshake or
// request head is under way, which net/http reports alike (StateNew).
type relaydConn struct {
	net.Conn
	heard atomic.Bool
}

func (c *relaydConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.heard.Load() {
		c.heard.Store(true)
	}
	return n, err
}

// CloseWrite passes net/http's half-close on, which it sends before it closes a connection
// after an answer (so that the answer is read before the reset that unread bytes cause).
func (c *relaydConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// relaydConnKey is the request context's key of its connection (as ConnState has it).
type relaydConnKey struct{}

// relaydPhase is where a connection not hijacked stands, for admitLocked.
type relaydPhase uint8

const (
	// relaydPhaseNew: no whole request head read yet (perhaps no byte at all: silent).
	relaydPhaseNew relaydPhase = iota
	// relaydPhaseBusy: the relay serves a request of it (reads its body, or waits for a
	// registration or a peer's answer).
	relaydPhaseBusy
	// relaydPhaseDone: the relay answered, and waits for the next request or for the
	// connection's end; what net/http does meanwhile (write the answer to a client that may
	// not read it, read what is left of a body, wait before it closes) serves nobody.
	relaydPhaseDone
)

// relaydPending is a connection not hijacked.
type relaydPending struct {
	raw    *relaydConn // beneath TLS: its first byte, and what to close
	source string      // relaydSource
	peer   bool        // from a fleet peer's address (relaydFleet.isPeer): never closed for another
	phase  relaydPhase
	since  time.Time // when it entered phase
}

// silent says that not one byte was read from the connection since it was accepted.
func (p *relaydPending) silent() bool { return p.phase == relaydPhaseNew && !p.raw.heard.Load() }

// connState keeps the set of connections not hijacked, and admits a new one under
// relaydMaxPending and relaydMaxPendingPerSource (admitLocked).
func (d *relayd) connState(nc net.Conn, st http.ConnState) {
	now := d.now()
	var p *relaydPending
	if st == http.StateNew {
		p = d.newPending(nc, now)
	}
	d.mu.Lock()
	var drop []*relaydConn
	admitted := true
	switch st {
	case http.StateNew:
		admitted, drop = d.admitLocked(p, now)
		if !admitted {
			drop = append(drop, p.raw)
			break
		}
		d.pending[nc] = p
		d.sources[p.source]++
	case http.StateActive:
		d.enterLocked(nc, relaydPhaseBusy, now)
	case http.StateIdle:
		d.enterLocked(nc, relaydPhaseDone, now)
	case http.StateHijacked, http.StateClosed:
		d.forgetPendingLocked(nc)
	}
	d.mu.Unlock()
	// The connection beneath TLS: tls.Conn.Close would send close_notify, and wait up to 5 s
	// for a peer that does not read, on the accept loop.
	for _, c := range drop {
		c.Close()
	}
	switch {
	case !admitted:
		d.peerLog.Info("relay: new connection closed: every other one of its scope is busy", "source", p.source, "closed", len(drop)-1)
	case len(drop) > 0:
		d.peerLog.Info("relay: connections closed to admit new ones", "closed", len(drop))
	}
}

// newPending describes a new connection: where from, and whether from a fleet peer (never
// behind a proxy, where every connection comes from the proxy).
func (d *relayd) newPending(nc net.Conn, now time.Time) *relaydPending {
	raw := relaydRawConn(nc)
	if raw == nil { // not relaydListener's: never taken for silent
		raw = &relaydConn{Conn: nc}
		raw.heard.Store(true)
	}
	src, addr := relaydSource(nc.RemoteAddr())
	peer := d.fleet != nil && !d.behindProxy && addr.IsValid() && d.fleet.isPeer(addr)
	return &relaydPending{raw: raw, source: src, peer: peer, phase: relaydPhaseNew, since: now}
}

// enterLocked moves a connection to phase.
func (d *relayd) enterLocked(nc net.Conn, phase relaydPhase, now time.Time) {
	if p := d.pending[nc]; p != nil {
		p.phase, p.since = phase, now
	}
}

// answered marks the connection of r done with it, when its handler returns.
func (d *relayd) answered(r *http.Request) {
	nc, _ := r.Context().Value(relaydConnKey{}).(net.Conn)
	now := d.now()
	d.mu.Lock()
	d.enterLocked(nc, relaydPhaseDone, now)
	d.mu.Unlock()
}

// relaydRawConn is nc as relaydListener accepted it, beneath its TLS; nil if it is not one.
func relaydRawConn(nc net.Conn) *relaydConn {
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	c, _ := nc.(*relaydConn)
	return c
}

// admitLocked decides on a new connection p. First it takes out, for the caller to close,
// every connection silent for relaydFirstByteTimeout. Then, if p's source holds
// relaydMaxPendingPerSource connections, one of that source's is taken out to admit p, or p
// is refused: a source at its cap never closes another's. Else, if the relay holds
// relaydMaxPending, one of any source's is taken out, or p is refused; a fleet peer's
// connection comes in past relaydMaxPending instead (a peer's probes must reach this node).
// The one taken out is chosen by evictableLocked.
func (d *relayd) admitLocked(p *relaydPending, now time.Time) (admitted bool, drop []*relaydConn) {
	for c, q := range d.pending {
		if !q.peer && q.silent() && now.Sub(q.since) >= relaydFirstByteTimeout {
			drop = append(drop, q.raw)
			d.forgetPendingLocked(c)
		}
	}
	var c net.Conn
	switch {
	case d.sources[p.source] >= relaydMaxPendingPerSource:
		c = d.evictableLocked(p.source, now)
	case len(d.pending) >= relaydMaxPending && !p.peer:
		c = d.evictableLocked("", now)
	default:
		return true, drop
	}
	if c == nil {
		return false, drop
	}
	drop = append(drop, d.pending[c].raw)
	d.forgetPendingLocked(c)
	return true, drop
}

// evictableLocked picks the connection of source (all of them if "") to close for a new
// one: the oldest not busy (relaydPhaseNew or relaydPhaseDone), else the oldest busy with
// one request for longer than relaydRequestTime, which no registry request needs; never a
// fleet peer's. Nil if there is none.
func (d *relayd) evictableLocked(source string, now time.Time) net.Conn {
	var waiting, busy net.Conn
	for c, q := range d.pending {
		switch {
		case q.peer || source != "" && q.source != source:
		case q.phase != relaydPhaseBusy:
			if waiting == nil || q.since.Before(d.pending[waiting].since) {
				waiting = c
			}
		case now.Sub(q.since) > relaydRequestTime:
			if busy == nil || q.since.Before(d.pending[busy].since) {
				busy = c
			}
		}
	}
	if waiting != nil {
		return waiting
	}
	return busy
}

// forgetPendingLocked takes a connection out of pending and its source's count.
func (d *relayd) forgetPendingLocked(nc net.Conn) {
	p := d.pending[nc]
	if p == nil {
		return
	}
	delete(d.pending, nc)
	if d.sources[p.source]--; d.sources[p.source] <= 0 {
		delete(d.sources, p.source)
	}
}

// relaydIPv6SourceBits is the prefix of an IPv6 address that relaydSource counts as one
// source: a /64 is what one host, or one customer, is commonly given.
const relaydIPv6SourceBits = 64

// relaydSource is the scope of relaydMaxPendingPerSource that a connection's remote address
// falls in (an IPv4 address, an IPv6 /64), and the address itself; the zero Addr if a is
// not an IP address. Behind a reverse proxy both are the proxy's.
func relaydSource(a net.Addr) (string, netip.Addr) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String(), netip.Addr{}
	}
	addr := ap.Addr().Unmap().WithZone("")
	if addr.Is4() {
		return addr.String(), addr
	}
	return netip.PrefixFrom(addr, relaydIPv6SourceBits).Masked().String(), addr
}
