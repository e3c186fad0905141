package main

// The SOCKS5 side of the managed network proxy (docs/network.md §2): RFC 1928 with no
// authentication, CONNECT, and UDP ASSOCIATE when the process enables SOCKS5 UDP. Every
// destination is judged by the same policy as the HTTP side (protocol socks5_tcp or
// socks5_udp); limited mode refuses SOCKS altogether, as the reference does. The raw TCP of
// this side (CONNECT, and the transparent connections of a sandbox, docs/network.md §7) goes
// through the --tcp-upstream-proxy when the server has one.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SOCKS5 reply codes (RFC 1928 §6).
const (
	socksSucceeded        = 0x00
	socksGeneralFailure   = 0x01
	socksNotAllowed       = 0x02
	socksHostUnreachable  = 0x04
	socksCmdNotSupported  = 0x07
	socksAddrNotSupported = 0x08
)

const (
	socksCmdConnect      = 0x01
	socksCmdUDPAssociate = 0x03
	socksMaxUDPDatagram  = 65507
	// socksMaxGreeting is the longest greeting: VER NMETHODS and up to 255 methods.
	socksMaxGreeting = 2 + 255
	// socksMaxRequest is the longest request: VER CMD RSV ATYP, a name of up to 255 bytes
	// with its length byte, PORT.
	socksMaxRequest = 4 + 1 + 255 + 2
	// socksMaxUDPHeader is the longest header of a UDP datagram to relay (RFC 1928 §7): RSV
	// RSV FRAG ATYP, a name with its length byte, PORT.
	socksMaxUDPHeader = 4 + 1 + 255 + 2
	// socksMaxUDPDestinations bounds the destinations one UDP association judges; a datagram
	// to one more is dropped.
	socksMaxUDPDestinations = 256
)

var errSocks = errors.New("malformed SOCKS5 message")

// socksRequest is a parsed SOCKS5 request.
type socksRequest struct {
	cmd  byte
	host string // a name or an IP literal
	port uint16
}

// parseSocksGreeting checks a client greeting (VER NMETHODS METHODS) and reports whether it
// offers "no authentication", and the greeting's length; n == 0 when b is not whole yet.
func parseSocksGreeting(b []byte) (noAuth bool, n int, err error) {
	if len(b) < 2 {
		return false, 0, nil
	}
	if b[0] != 5 || b[1] == 0 {
		return false, 0, errSocks
	}
	n = 2 + int(b[1])
	if len(b) < n {
		return false, 0, nil
	}
	for _, m := range b[2:n] {
		if m == 0 {
			noAuth = true
		}
	}
	return noAuth, n, nil
}

// parseSocksAddr parses ATYP ADDR PORT at the start of b and returns it and its length;
// n == 0 when b is not whole yet.
func parseSocksAddr(b []byte) (host string, port uint16, n int, err error) {
	if len(b) < 1 {
		return "", 0, 0, nil
	}
	switch b[0] {
	case 1:
		n = 1 + 4
		if len(b) < n+2 {
			return "", 0, 0, nil
		}
		host = netip.AddrFrom4([4]byte(b[1:5])).String()
	case 4:
		n = 1 + 16
		if len(b) < n+2 {
			return "", 0, 0, nil
		}
		host = netip.AddrFrom16([16]byte(b[1:17])).String()
	case 3:
		if len(b) < 2 {
			return "", 0, 0, nil
		}
		l := int(b[1])
		n = 2 + l
		if len(b) < n+2 {
			return "", 0, 0, nil
		}
		host = string(b[2:n])
		if l == 0 {
			return "", 0, 0, errSocks
		}
		for _, c := range b[2:n] {
			if c <= ' ' || c >= 0x7f {
				return "", 0, 0, errSocks
			}
		}
	default:
		return "", 0, 0, errSocks
	}
	return host, binary.BigEndian.Uint16(b[n:]), n + 2, nil
}

// parseSocksRequest parses VER CMD RSV ATYP ADDR PORT; n == 0 when b is not whole yet.
func parseSocksRequest(b []byte) (r socksRequest, n int, err error) {
	if len(b) < 4 {
		return r, 0, nil
	}
	if b[0] != 5 || b[2] != 0 {
		return r, 0, errSocks
	}
	host, port, m, err := parseSocksAddr(b[3:])
	if err != nil || m == 0 {
		return r, 0, err
	}
	return socksRequest{cmd: b[1], host: host, port: port}, 3 + m, nil
}

// readSocks reads from c into buf until parse reports a whole message.
func readSocks(c net.Conn, buf []byte, parse func([]byte) (int, error)) ([]byte, int, error) {
	for {
		if n, err := parse(buf); err != nil || n > 0 {
			return buf, n, err
		}
		if len(buf) == cap(buf) {
			return buf, 0, errSocks
		}
		m, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err != nil {
			if n, perr := parse(buf); perr == nil && n > 0 {
				return buf, n, nil
			}
			return buf, 0, err
		}
	}
}

// socksReply writes a reply with bound address addr (0.0.0.0:0 when nil).
func socksReply(c net.Conn, code byte, addr *net.UDPAddr) error {
	b := []byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0}
	if addr != nil {
		if ip4 := addr.IP.To4(); ip4 != nil {
			copy(b[4:8], ip4)
			binary.BigEndian.PutUint16(b[8:], uint16(addr.Port))
		}
	}
	_, err := c.Write(b)
	return err
}

// serveSocks serves one SOCKS5 client connection of the proxy's own listener.
func (p *netProxy) serveSocks(c net.Conn) { p.serveSocksFrom(c, false) }

// serveSocksFrom serves one SOCKS5 client connection. A bridged one, which a routed command
// made through its bridge (docs/network.md §4), is never given a UDP association: the relay
// socket would be on the host's 127.0.0.1, which the command cannot reach from its
// namespace, so it would serve only other local processes, as a hop under this process's
// policy; it gets "command not supported" instead.
func (p *netProxy) serveSocksFrom(c net.Conn, bridged bool) {
	c.SetReadDeadline(time.Now().Add(netProxyHeadTimeout))
	buf := make([]byte, 0, socksMaxGreeting+socksMaxRequest)
	var noAuth bool
	buf, n, err := readSocks(c, buf, func(b []byte) (int, error) {
		var n int
		var err error
		noAuth, n, err = parseSocksGreeting(b)
		return n, err
	})
	if err != nil {
		return
	}
	if !noAuth {
		c.Write([]byte{5, 0xff})
		return
	}
	if _, err := c.Write([]byte{5, 0}); err != nil {
		return
	}
	buf = buf[:copy(buf, buf[n:])]
	var req socksRequest
	buf, n, err = readSocks(c, buf, func(b []byte) (int, error) {
		var n int
		var err error
		req, n, err = parseSocksRequest(b)
		return n, err
	})
	if err != nil {
		if errors.Is(err, errSocks) {
			socksReply(c, socksAddrNotSupported, nil)
		}
		return
	}
	rest := buf[n:]
	c.SetReadDeadline(time.Time{})
	client := c.RemoteAddr().String()
	switch {
	case req.cmd == socksCmdConnect:
		r := netRequest{protocol: protoSocksTCP, host: normalizeHost(req.host), port: req.port, client: client}
		v := p.decide(p.ctx, r)
		if !v.allowed {
			socksReply(c, socksNotAllowed, nil)
			return
		}
		if p.mitm.intercepts(r.host, req.port) {
			p.mitm.serveTunnel(c, r, v, rest, func() error { return socksReply(c, socksSucceeded, nil) },
				func(_ netVerdict, blocked bool) { socksConnectRefusal(c, blocked) })
			return
		}
		up, early, err := p.dialRawTCP(r.host, req.port, v.addrs)
		if err != nil {
			code := byte(socksHostUnreachable)
			if errors.Is(err, errTCPUpstreamRefused) {
				code = socksGeneralFailure
			}
			if _, ok := p.refusedAtConnect(r, err); ok {
				code = socksNotAllowed
			}
			socksReply(c, code, nil)
			return
		}
		if !p.track(up) {
			return
		}
		defer p.untrackClose(up)
		if socksReply(c, socksSucceeded, nil) != nil {
			return
		}
		p.splice(c, up, rest, early)
	case req.cmd == socksCmdUDPAssociate && p.udpAllowed && !bridged:
		p.serveUDPAssociate(c, client)
	default:
		socksReply(c, socksCmdNotSupported, nil)
	}
}

// serveUDPAssociate relays the client's datagrams (RFC 1928 §7) to the destinations the
// policy allows, and their answers back, for as long as the control connection c lasts. The
// client talks to a socket on 127.0.0.1; destinations are reached from a second, unbound
// one, whose datagrams are passed back only from destinations judged allowed.
func (p *netProxy) serveUDPAssociate(c net.Conn, client string) {
	if p.policy.mode == modeLimited {
		p.decide(p.ctx, netRequest{protocol: protoSocksUDP, client: client})
		socksReply(c, socksNotAllowed, nil)
		return
	}
	in, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		socksReply(c, socksGeneralFailure, nil)
		return
	}
	if !p.track(in) {
		return
	}
	defer p.untrackClose(in)
	out, err := net.ListenUDP("udp", nil)
	if err != nil {
		socksReply(c, socksGeneralFailure, nil)
		return
	}
	if !p.track(out) {
		return
	}
	defer p.untrackClose(out)
	if socksReply(c, socksSucceeded, in.LocalAddr().(*net.UDPAddr)) != nil {
		return
	}
	var mu sync.Mutex
	allowed := map[netip.AddrPort]bool{} // destinations judged allowed, by address
	var clientAddr netip.AddrPort        // the client's socket, from its first datagram
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the association ends with its control connection
		defer wg.Done()
		io.Copy(io.Discard, c)
		in.Close()
		out.Close()
	}()
	go func() { // answers back to the client
		defer wg.Done()
		defer in.Close()
		buf := make([]byte, socksMaxUDPDatagram)
		for {
			out.SetReadDeadline(time.Now().Add(p.idleOf()))
			n, from, err := out.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
			mu.Lock()
			ok, to := allowed[from], clientAddr
			mu.Unlock()
			if !ok || !to.IsValid() {
				continue
			}
			hdr := []byte{0, 0, 0, 1}
			if a := from.Addr(); a.Is4() {
				b := a.As4()
				hdr = append(hdr, b[:]...)
			} else {
				b := a.As16()
				hdr[3] = 4
				hdr = append(hdr, b[:]...)
			}
			hdr = binary.BigEndian.AppendUint16(hdr, from.Port())
			in.WriteToUDPAddrPort(append(hdr, buf[:n]...), to)
		}
	}()
	judged := map[string]netip.AddrPort{} // host:port judged once per association; invalid: refused
	buf := make([]byte, socksMaxUDPDatagram+socksMaxUDPHeader)
	for {
		in.SetReadDeadline(time.Now().Add(p.idleOf()))
		n, from, err := in.ReadFromUDPAddrPort(buf)
		if err != nil {
			break
		}
		mu.Lock()
		if !clientAddr.IsValid() && from.Addr().IsLoopback() {
			clientAddr = from
		}
		mine := from == clientAddr
		mu.Unlock()
		// RSV RSV FRAG ATYP ADDR PORT DATA; fragments are dropped.
		if !mine || n < 4 || buf[0] != 0 || buf[1] != 0 || buf[2] != 0 {
			continue
		}
		host, port, m, err := parseSocksAddr(buf[3:n])
		if err != nil || m == 0 {
			continue
		}
		key := net.JoinHostPort(host, strconv.Itoa(int(port)))
		dst, seen := judged[key]
		if !seen {
			if len(judged) >= socksMaxUDPDestinations {
				continue
			}
			dst, _ = p.udpTarget(netRequest{protocol: protoSocksUDP, host: normalizeHost(host), port: port, client: client})
			judged[key] = dst
			if dst.IsValid() {
				mu.Lock()
				allowed[dst] = true
				mu.Unlock()
			}
		}
		if dst.IsValid() {
			out.WriteToUDPAddrPort(buf[3+m:n], dst)
		}
	}
	c.Close()
	out.Close()
	wg.Wait()
}

// udpTarget judges a datagram's destination and resolves it.
func (p *netProxy) udpTarget(r netRequest) (netip.AddrPort, bool) {
	v := p.decide(p.ctx, r)
	if !v.allowed {
		return netip.AddrPort{}, false
	}
	if a, err := parseIPHost(r.host); err == nil {
		return netip.AddrPortFrom(a.Unmap(), r.port), true
	}
	if len(v.addrs) > 0 {
		return netip.AddrPortFrom(v.addrs[0].Unmap(), r.port), true
	}
	addrs, err := p.hooks.resolve(p.ctx, r.host)
	if err != nil || len(addrs) == 0 || p.checkResolved(r.host, addrs) != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(addrs[0].Unmap(), r.port), true
}

// errTCPUpstreamRefused is an upstream proxy (--tcp-upstream-proxy, or the server's
// HTTP(S)_PROXY) that answered a CONNECT with other than 2xx.
var errTCPUpstreamRefused = errors.New("upstream proxy refused CONNECT")

// dialRawTCP connects the SOCKS side's raw TCP to an allowed destination: through the
// server's --tcp-upstream-proxy when it has one (every such connection, whatever the
// process's allowUpstreamProxy), else as every destination (dialTarget). early is what the
// upstream proxy sent after its answer's head, to give the client first.
func (p *netProxy) dialRawTCP(host string, port uint16, checked []netip.Addr) (up net.Conn, early []byte, err error) {
	if p.cfg.tcpUpstream == "" || isLocalDestination(host, checked) {
		return p.dialTarget(p.ctx, host, port, checked)
	}
	ctx, cancel := context.WithTimeout(p.ctx, netProxyDialTimeout)
	defer cancel()
	return dialUpstreamConnect(ctx, p.hooks.dial, p.cfg.tcpUpstream, net.JoinHostPort(normalizeHost(host), strconv.Itoa(int(port))))
}

// dialUpstreamConnect opens a tunnel to addr through the HTTP CONNECT proxy proxyAddr, the
// one rule of every upstream (--tcp-upstream-proxy, HTTP(S)_PROXY): any 2xx answer opens it,
// and the bytes that came after the answer's head (a server that speaks first) are returned
// with it; any other answer is errTCPUpstreamRefused.
func dialUpstreamConnect(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), proxyAddr, addr string) (net.Conn, []byte, error) {
	c, err := dial(ctx, "tcp", proxyAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("upstream proxy %s: %w", proxyAddr, err)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("upstream proxy %s: %w", proxyAddr, err)
	}
	buf, n, err := readHead(c)
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("upstream proxy %s: %w", proxyAddr, err)
	}
	line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") || len(f[1]) != 3 || f[1][0] != '2' {
		c.Close()
		return nil, nil, fmt.Errorf("%w (%q) for %s", errTCPUpstreamRefused, line, addr)
	}
	if !stop() {
		c.Close()
		return nil, nil, ctx.Err()
	}
	c.SetDeadline(time.Time{})
	return c, buf[n:], nil
}

// splice sends rest (what the client sent after its request) to up and early (what up sent
// before the relay) to the client, then relays both ways.
func (p *netProxy) splice(client, up net.Conn, rest, early []byte) {
	if len(rest) > 0 {
		if _, err := up.Write(rest); err != nil {
			return
		}
	}
	if len(early) > 0 {
		if _, err := client.Write(early); err != nil {
			return
		}
	}
	p.relay(client, up)
}

// serveTransparentListener serves f, the transparent listener of a sandbox's namespace, and
// dns, its nameserver sockets (docs/network.md §7), until the proxy's close, which also
// closes link (the program that feeds the listener). It takes every descriptor over.
func (p *netProxy) serveTransparentListener(f *os.File, link io.Closer, dns []*os.File) error {
	var conns []*net.UDPConn
	var err error
	for _, d := range dns {
		c, cerr := net.FilePacketConn(d)
		d.Close()
		switch u, ok := c.(*net.UDPConn); {
		case cerr != nil:
			err = cerr
		case !ok:
			c.Close()
			err = errors.New("a nameserver socket is not UDP")
		default:
			conns = append(conns, u)
		}
	}
	ln, lerr := net.FileListener(f)
	f.Close()
	if err == nil {
		err = lerr
	}
	if err == nil && (!p.track(link) || !p.track(ln)) {
		err = errors.New("the proxy has ended")
	}
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		link.Close()
		for _, c := range conns {
			c.Close()
		}
		return fmt.Errorf("transparent TCP: %w", err)
	}
	names := newTransparentNames()
	for _, c := range conns {
		p.serveTransparentDNS(c, names)
	}
	p.goServe(ln, func(c net.Conn) { p.serveTransparent(c, names) })
	return nil
}

// serveTransparent serves one connection of a sandboxed command routed to the transparent
// listener: its local address is the destination the command connected to, judged as a
// SOCKS5 CONNECT to that address (protocol socks5_tcp, the host an IP literal) or, for an
// address names gave a name (netproxy_dns.go), to that name; then relayed. A refused or
// unreachable destination resets the connection, as a refusing host would.
func (p *netProxy) serveTransparent(c net.Conn, names *transparentNames) {
	dst, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return
	}
	ap := dst.AddrPort()
	addr := ap.Addr().Unmap().WithZone("")
	reset := func() {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
	}
	if addr.IsLoopback() {
		// The program never routes a loopback destination: this is the command connecting to
		// the listener's own port on its loopback, not to a destination to judge.
		reset()
		return
	}
	r := netRequest{protocol: protoSocksTCP, host: addr.String(), port: ap.Port(), client: c.RemoteAddr().String()}
	if name, synthetic := names.nameOf(addr); synthetic {
		if name == "" { // an address of the pool no query was answered with
			reset()
			return
		}
		r.host = name
	}
	v := p.decide(p.ctx, r)
	if !v.allowed {
		reset()
		return
	}
	up, early, err := p.dialRawTCP(r.host, r.port, v.addrs)
	if err != nil {
		p.refusedAtConnect(r, err) // its notification; the connection is reset either way
		reset()
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrackClose(up)
	p.splice(c, up, nil, early)
}
