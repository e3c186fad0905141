package main

// The bridge from a sandbox's network namespace to the per-process proxy (docs/network.md
// §4). A command whose network is restricted lives in a namespace where only lo exists, so
// it cannot reach the proxy on the server's 127.0.0.1. The stage binds a listener on
// 127.0.0.1:0 inside that namespace (bridgeListen), hands the listening descriptor to the
// server over a unix socket (sendBridgeListeners, receiveBridgeListeners) and points the
// command's proxy variables at it (bridgeRewriteEnv); the server accepts on it and hands each
// connection to the process's proxy in this very process (serveBridged), or, for a client's
// own loopback proxy (managedNetwork.loopbackPorts), splices it there (netBridge). The stage
// starts the command only once the server said the bridge is served (awaitBridgeServed). A
// listening socket keeps the namespace it was made in, so no process has to stay behind in
// the namespace for the bridge to work.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// netBridgeBacklog is the listen(2) backlog of a bridge listener.
	netBridgeBacklog = 128
	// netBridgeAcceptRetry is how long an accept that failed for want of descriptors or
	// memory waits before it tries again.
	netBridgeAcceptRetry = 50 * time.Millisecond
	// netBridgeServed is the byte the server sends the stage once it serves every listener
	// the stage sent; anything else on the socket is the server's reason for not serving
	// them (at most netBridgeMaxRefusal bytes), and the stage fails with it.
	netBridgeServed = 'B'
	// netBridgeMaxRefusal bounds the server's reason.
	netBridgeMaxRefusal = 1024
)

// awaitBridgeServed waits, in the stage, for the server's word on the listeners it sent
// (docs/network.md §4): nil once it serves them, else its reason. The command is started only
// after: a command whose bridge is not served must never run, nor run unregistered while
// process/start waits for it.
func awaitBridgeServed(sock int) error {
	buf := make([]byte, netBridgeMaxRefusal)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(sock, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			break
		}
		n += m
		if n == 1 && buf[0] == netBridgeServed {
			return nil
		}
	}
	if n == 0 {
		return errors.New("netbridge: the server did not serve the bridge (no answer)")
	}
	return errors.New(string(buf[:n])) // the server's reason
}

// refuseBridge sends the stage the server's reason for not serving its listeners.
func refuseBridge(sock *os.File, err error) {
	msg := err.Error()
	if msg == "" || msg == string(rune(netBridgeServed)) {
		msg = "netbridge: refused"
	}
	sock.Write([]byte(msg[:min(len(msg), netBridgeMaxRefusal)]))
}

// bridgeListen binds a TCP listener on 127.0.0.1:0 in the calling process's network
// namespace (the stage's, once lo is up) and returns it with its port. The descriptor is
// close-on-exec: the command never inherits it.
func bridgeListen() (*os.File, uint16, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("netbridge: socket: %w", err)
	}
	sa := &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("netbridge: bind 127.0.0.1:0: %w", err)
	}
	if err := unix.Listen(fd, netBridgeBacklog); err != nil {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("netbridge: listen: %w", err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("netbridge: getsockname: %w", err)
	}
	in4, ok := got.(*unix.SockaddrInet4)
	if !ok {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("netbridge: listener bound to %T", got)
	}
	return os.NewFile(uintptr(fd), "netbridge"), uint16(in4.Port), nil
}

// sendBridgeListeners sends the listening descriptors lns to the server over the unix
// socket sock, in one message (SCM_RIGHTS); the data byte is their count.
func sendBridgeListeners(sock int, lns []*os.File) error {
	if len(lns) == 0 || len(lns) > netBridgeMaxListeners {
		return fmt.Errorf("netbridge: %d listeners to send", len(lns))
	}
	fds := make([]int, len(lns))
	for i, f := range lns {
		fds[i] = int(f.Fd())
	}
	if err := unix.Sendmsg(sock, []byte{byte(len(lns))}, unix.UnixRights(fds...), nil, 0); err != nil {
		return fmt.Errorf("netbridge: send the listeners: %w", err)
	}
	return nil
}

// receiveBridgeListeners receives what sendBridgeListeners sent on sock. Every descriptor
// received is either returned or closed, and each must be a listening TCP socket: a stage
// cannot hand the server anything else to serve.
func receiveBridgeListeners(sock *os.File) ([]*os.File, error) {
	conn, err := sock.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("netbridge: %w", err)
	}
	data := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*netBridgeMaxListeners))
	var n, oobn int
	var rerr error
	if err := conn.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), data, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	}); err != nil {
		return nil, fmt.Errorf("netbridge: receive the listeners: %w", err)
	}
	if rerr != nil {
		return nil, fmt.Errorf("netbridge: receive the listeners: %w", rerr)
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, fmt.Errorf("netbridge: parse the listeners: %w", err)
		}
		for i := range msgs {
			got, err := unix.ParseUnixRights(&msgs[i])
			if err == nil {
				fds = append(fds, got...)
			}
		}
	}
	files := make([]*os.File, 0, len(fds))
	for _, fd := range fds {
		files = append(files, os.NewFile(uintptr(fd), "netbridge"))
	}
	fail := func(err error) ([]*os.File, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, err
	}
	if n != 1 || int(data[0]) != len(files) || len(files) == 0 || len(files) > netBridgeMaxListeners {
		return fail(fmt.Errorf("netbridge: expected %d listeners, got %d", data[0], len(files)))
	}
	for _, f := range files {
		if err := isListeningTCP(int(f.Fd())); err != nil {
			return fail(err)
		}
	}
	return files, nil
}

// isListeningTCP checks that fd is a listening TCP socket.
func isListeningTCP(fd int) error {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return fmt.Errorf("netbridge: not a socket: %w", err)
	}
	proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	if err != nil {
		return fmt.Errorf("netbridge: socket protocol: %w", err)
	}
	listening, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if err != nil {
		return fmt.Errorf("netbridge: socket state: %w", err)
	}
	if typ != unix.SOCK_STREAM || proto != unix.IPPROTO_TCP || listening != 1 {
		return errors.New("netbridge: a descriptor received is not a listening TCP socket")
	}
	return nil
}

// bridgeRewriteEnv points env's proxy variables at the bridge: each proxy variable
// (isProxyEnvKey) whose value names an endpoint of to ("127.0.0.1:H", as planProxyRoutes
// wrote it: after a scheme and user information, before a path, or alone) names to[that]
// instead ("127.0.0.1:B"). Each value is rewritten once, from what it was: a namespace port
// may be the number of another host endpoint. Other variables are left as they are.
func bridgeRewriteEnv(env []string, to map[string]string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		out[i] = kv
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !isProxyEnvKey(k) {
			continue
		}
		if start, end, ok := proxyEndpointSpan(v); ok {
			if b, ok := to[v[start:end]]; ok {
				out[i] = k + "=" + v[:start] + b + v[end:]
			}
		}
	}
	return out
}

// netBridge serves one listener handed over by a stage: each connection the command makes to
// it is handed to the process's proxy (hand), or, without one, spliced to target, a loopback
// proxy of the client's on the server's host.
type netBridge struct {
	ln     net.Listener
	target string
	hand   func(net.Conn) // the proxy's serving function (serveBridged); nil: splice to target
	slots  chan struct{}  // one per open connection (netProxyMaxConns)
	done   chan struct{}  // closed by close
	// ctx ends at close: it bounds the dials to target, so that a target that never answers
	// does not hold close (and the process's exit) for the whole dial timeout.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	idle   time.Duration  // a carried connection's idle time; 0: netProxyIdleTimeout (tests shorten it)
	wg     sync.WaitGroup // the accept loop and every connection's goroutines
}

// startNetBridge serves f (which it takes over) towards target until close. With a proxy p,
// target must name one of p's listeners, and each connection is handed to p as if that
// listener had accepted it; nothing is dialled. Without one, each is spliced to target.
func startNetBridge(f *os.File, target string, p *netProxy) (*netBridge, error) {
	var hand func(net.Conn)
	if p != nil {
		switch target {
		case p.httpAddr():
			hand = func(c net.Conn) { p.serveBridged(bridgeHTTP, c) }
		case p.socksAddr():
			hand = func(c net.Conn) { p.serveBridged(bridgeSOCKS, c) }
		default:
			f.Close()
			return nil, fmt.Errorf("netbridge: %s is not a listener of the process's proxy", target)
		}
	}
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("netbridge: %w", err)
	}
	b := &netBridge{ln: ln, target: target, hand: hand, slots: make(chan struct{}, netProxyMaxConns),
		done: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

// serve accepts until the listener is closed.
func (b *netBridge) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			t := time.NewTimer(netBridgeAcceptRetry)
			select {
			case <-b.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		if b.hand != nil {
			b.hand(c) // the proxy's slots, tracking and goroutine from here
			continue
		}
		select {
		case b.slots <- struct{}{}:
		default:
			c.Close() // over netProxyMaxConns
			continue
		}
		if !b.track(c) {
			<-b.slots
			c.Close()
			return
		}
		b.wg.Add(1)
		go b.carry(c)
	}
}

// track registers c so that close ends it; false once the bridge is closed.
func (b *netBridge) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

// untrack closes c and forgets it.
func (b *netBridge) untrack(c net.Conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
	c.Close()
}

// carry relays client to a new connection to the target, both ways, until both ends are done
// or the pair's one idle clock ends them (relayConns).
func (b *netBridge) carry(client net.Conn) {
	defer b.wg.Done()
	defer func() { <-b.slots }()
	defer b.untrack(client)
	ctx, cancel := context.WithTimeout(b.ctx, netProxyDialTimeout)
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", b.target)
	cancel()
	if err != nil {
		return
	}
	if !b.track(up) {
		up.Close()
		return
	}
	defer b.untrack(up)
	b.mu.Lock()
	idle := b.idle
	b.mu.Unlock()
	if idle <= 0 {
		idle = netProxyIdleTimeout
	}
	relayConns(client, up, idle)
}

// close stops the listener, ends every connection and returns once every goroutine of the
// bridge has ended.
func (b *netBridge) close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.done)
		b.cancel()
		for c := range b.conns {
			c.Close()
		}
	}
	b.mu.Unlock()
	b.ln.Close()
	b.wg.Wait()
}

// bridgeKind says which of its servers a proxy runs on a bridged connection.
type bridgeKind int

const (
	bridgeHTTP bridgeKind = iota
	bridgeSOCKS
)

// serveBridged serves c, a connection the bridge accepted in a routed command's namespace,
// as the proxy's HTTP or SOCKS5 listener would have (docs/network.md §4): under the same
// netProxyMaxConns (one more is closed at once), tracked so that close ends it, in a
// goroutine of the proxy's. A routed process's proxy listens on no host port (its listeners
// are closed as soon as it started, closeHostListeners), so only its command takes these
// slots.
func (p *netProxy) serveBridged(kind bridgeKind, c net.Conn) {
	serve := p.serveHTTP
	if kind == bridgeSOCKS {
		serve = func(c net.Conn) { p.serveSocksFrom(c, true) }
	}
	select {
	case p.slots <- struct{}{}:
	default:
		c.Close() // over netProxyMaxConns
		return
	}
	// Registered and counted under the lock close takes first: once close has begun no
	// goroutine is added to the group it waits for.
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		c.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		defer func() { <-p.slots }()
		defer p.untrackClose(c)
		serve(c)
	}()
}

// addr is the listener's address, in the namespace it was made in.
func (b *netBridge) addr() string { return b.ln.Addr().String() }

// bridgePortText is port as the proxy variables write it.
func bridgePortText(port uint16) string { return "127.0.0.1:" + strconv.Itoa(int(port)) }
