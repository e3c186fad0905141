package main

// The server's own listeners as the managed network proxy must see them (docs/network.md §4):
// the addresses this exec-server accepts clients on, which no process's proxy may connect to.
// It is its own file because it is server state (server.go holds it, ws_server.go fills it)
// used by every process's proxy (proc_netproxy.go), belonging to neither.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
)

// selfListeners are the addresses this server accepts clients on (its websocket listeners).
// No process's proxy ever connects to them (guardedDial): the proxy dials from the
// server itself, so the connect-back check (docs/sandbox.md §2), which traces a connection
// to the process holding its other end, would find the server there, not the sandbox behind
// it, and a sandboxed command could ask its own server for an unsandboxed process, directly
// or through the proxy of another process, sandboxed or not, whose port any local client may
// use.
type selfListeners struct {
	mu    sync.Mutex
	addrs []*net.TCPAddr
}

// add records a listener's address and returns the function that forgets it.
func (l *selfListeners) add(a net.Addr) (remove func()) {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return func() {}
	}
	l.mu.Lock()
	l.addrs = append(l.addrs, ta)
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if i := slices.Index(l.addrs, ta); i >= 0 {
			l.addrs = slices.Delete(l.addrs, i, i+1)
		}
	}
}

// reaches reports whether a connection to ip:port on this host may land on one of the
// listeners: the same port, and the listener's own address or a wildcard one (which any
// local address reaches; only local addresses get here, as the dialled end of a connection
// this host made, or a loopback port).
func (l *selfListeners) reaches(ip net.IP, port int) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.addrs {
		if a.Port == port && (a.IP == nil || a.IP.IsUnspecified() || a.IP.Equal(ip)) {
			return true
		}
	}
	return false
}

// guardedDial dials as the proxy does by default, but never one of the server's own
// listeners: an address naming one is refused before any connection, and a connection that
// lands on one anyway (a name) is closed, by the address it connected to.
func (l *selfListeners) guardedDial(ctx context.Context, network, addr string) (net.Conn, error) {
	if ap, err := netip.ParseAddrPort(addr); err == nil && l.reaches(net.IP(ap.Addr().Unmap().AsSlice()), int(ap.Port())) {
		return nil, fmt.Errorf("dial %s: the destination is this exec-server's own listener, which a sandboxed process must not reach", addr)
	}
	d := net.Dialer{Timeout: netProxyDialTimeout}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if ra, ok := c.RemoteAddr().(*net.TCPAddr); ok && l.reaches(ra.IP, ra.Port) {
		c.Close()
		return nil, fmt.Errorf("dial %s: the destination is this exec-server's own listener, which a sandboxed process must not reach", addr)
	}
	return c, nil
}
