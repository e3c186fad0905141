package main

// The name service of a transparent sandbox (docs/network.md §7). A command that ignores the
// proxy variables also resolves names itself, and its namespace has no resolver: the server
// answers its queries, on the nameserver addresses its /etc/resolv.conf names (every address
// is local in that namespace), with a synthetic IPv4 address per name from the benchmarking
// block 198.18.0.0/15. A connection to such an address is then judged and dialled as the name
// it stands for, as a SOCKS5 CONNECT to that name would be (socks5h), so the policy's domain
// patterns apply and the proxy resolves the name, not the sandbox. Nothing is ever resolved
// for the command: a name the policy denies still gets an address, whose connections are
// refused.

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

const (
	// transparentDNSMaxNames bounds the names one sandbox may have addresses for; past it a
	// query for a new name gets SERVFAIL.
	transparentDNSMaxNames = 4096
	// transparentDNSMaxPacket bounds a query read (a UDP DNS message is at most 512 bytes
	// without EDNS; larger ones are refused).
	transparentDNSMaxPacket = 1232
	// transparentDNSTTL is the answers' TTL in seconds: the mapping holds for the
	// namespace's life.
	transparentDNSTTL = 60
	// transparentDNSMaxServers bounds the nameserver addresses served (resolv.conf's MAXNS).
	transparentDNSMaxServers = 3
	// transparentDNSRetry is the pause after a failed read of a nameserver socket.
	transparentDNSRetry = 50 * time.Millisecond
)

// transparentPool is the block synthetic addresses come from (RFC 2544 benchmarking).
var transparentPool = netip.MustParsePrefix("198.18.0.0/15")

// DNS message constants (RFC 1035).
const (
	dnsTypeA         = 1
	dnsTypeAAAA      = 28
	dnsClassIN       = 1
	dnsRcodeServFail = 2
	dnsRcodeNotImp   = 4
	dnsHeaderLen     = 12
)

var errDNSQuery = errors.New("not a DNS query this server answers")

// dnsQuestion is a parsed query: its header fields and its one question.
type dnsQuestion struct {
	id, flags     uint16
	name          string // lower case, without the final dot; "" for the root
	qtype, qclass uint16
	end           int // the question's end in the message
}

// parseDNSQuery parses a standard query with one question whose name is written without
// compression, of labels of letters, digits, '-' and '_'.
func parseDNSQuery(b []byte) (q dnsQuestion, err error) {
	if len(b) < dnsHeaderLen || len(b) > transparentDNSMaxPacket {
		return q, errDNSQuery
	}
	q.id, q.flags = binary.BigEndian.Uint16(b), binary.BigEndian.Uint16(b[2:])
	if q.flags&0xf800 != 0 || binary.BigEndian.Uint16(b[4:]) != 1 { // QR=0, OPCODE=0; QDCOUNT=1
		return q, errDNSQuery
	}
	var name strings.Builder
	i := dnsHeaderLen
	for {
		if i >= len(b) {
			return q, errDNSQuery
		}
		l := int(b[i])
		i++
		if l == 0 {
			break
		}
		if l > 63 || i+l > len(b) || name.Len()+l+1 > 254 {
			return q, errDNSQuery
		}
		if name.Len() > 0 {
			name.WriteByte('.')
		}
		for _, c := range b[i : i+l] {
			switch {
			case c >= 'A' && c <= 'Z':
				c += 'a' - 'A'
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			default:
				return q, errDNSQuery
			}
			name.WriteByte(c)
		}
		i += l
	}
	if i+4 > len(b) {
		return q, errDNSQuery
	}
	q.name = name.String()
	q.qtype, q.qclass = binary.BigEndian.Uint16(b[i:]), binary.BigEndian.Uint16(b[i+2:])
	q.end = i + 4
	return q, nil
}

// transparentNames is one sandbox's table of synthetic addresses.
type transparentNames struct {
	mu     sync.Mutex
	byName map[string]netip.Addr
	byAddr map[netip.Addr]string
}

func newTransparentNames() *transparentNames {
	return &transparentNames{byName: map[string]netip.Addr{}, byAddr: map[netip.Addr]string{}}
}

// addrFor returns name's synthetic address, giving it the next one on first use; false when
// the table is full.
func (n *transparentNames) addrFor(name string) (netip.Addr, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a, ok := n.byName[name]; ok {
		return a, true
	}
	if len(n.byName) >= transparentDNSMaxNames {
		return netip.Addr{}, false
	}
	base := transparentPool.Addr().As4()
	slot := uint32(len(n.byName)) + 1 // 198.18.0.1 onwards
	v := binary.BigEndian.Uint32(base[:]) + slot
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	a := netip.AddrFrom4(b)
	n.byName[name], n.byAddr[a] = a, name
	return a, true
}

// nameOf returns the name a synthetic address was given to; ok is false for an address
// outside the pool, and name is "" for one in it that was never given.
func (n *transparentNames) nameOf(a netip.Addr) (name string, ok bool) {
	if n == nil || !transparentPool.Contains(a) {
		return "", false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.byAddr[a], true
}

// answer builds the reply to query q (the message b): A for a name gets its synthetic
// address ("localhost" 127.0.0.1), AAAA and the other types of class IN get no record (so
// that clients use the A record), anything else NOTIMP.
func (n *transparentNames) answer(b []byte, q dnsQuestion) []byte {
	rcode, ancount := uint16(0), uint16(0)
	var rdata netip.Addr
	switch {
	case q.qclass != dnsClassIN:
		rcode = dnsRcodeNotImp
	case q.qtype != dnsTypeA || q.name == "":
	case q.name == "localhost":
		rdata, ancount = netip.AddrFrom4([4]byte{127, 0, 0, 1}), 1
	default:
		a, ok := n.addrFor(q.name)
		if !ok {
			rcode = dnsRcodeServFail
			break
		}
		rdata, ancount = a, 1
	}
	out := make([]byte, 0, q.end+16)
	out = binary.BigEndian.AppendUint16(out, q.id)
	out = binary.BigEndian.AppendUint16(out, 0x8080|q.flags&0x0100|rcode) // QR, RA, RD as asked
	out = binary.BigEndian.AppendUint16(out, 1)
	out = binary.BigEndian.AppendUint16(out, ancount)
	out = append(out, 0, 0, 0, 0) // NSCOUNT, ARCOUNT
	out = append(out, b[dnsHeaderLen:q.end]...)
	if ancount == 1 {
		a4 := rdata.As4()
		out = append(out, 0xc0, dnsHeaderLen) // the question's name
		out = binary.BigEndian.AppendUint16(out, dnsTypeA)
		out = binary.BigEndian.AppendUint16(out, dnsClassIN)
		out = binary.BigEndian.AppendUint32(out, transparentDNSTTL)
		out = binary.BigEndian.AppendUint16(out, 4)
		out = append(out, a4[:]...)
	}
	return out
}

// serveTransparentDNS answers the queries that reach c, one of a sandbox's nameserver
// sockets, until the proxy's close.
func (p *netProxy) serveTransparentDNS(c *net.UDPConn, names *transparentNames) {
	if !p.track(c) {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.untrackClose(c)
		buf := make([]byte, transparentDNSMaxPacket+1)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) || p.ctx.Err() != nil {
					return
				}
				select { // a transient error (ICMP, memory): go on after a pause
				case <-p.ctx.Done():
					return
				case <-time.After(transparentDNSRetry):
				}
				continue
			}
			q, err := parseDNSQuery(buf[:n])
			if err != nil {
				continue
			}
			c.WriteToUDPAddrPort(names.answer(buf[:n], q), from)
		}
	}()
}

// resolvConfServers returns the nameserver addresses of a resolv.conf (at most
// transparentDNSMaxServers, without zones), or 127.0.0.1 when it names none, as resolvers
// then do.
func resolvConfServers(conf string) []netip.Addr {
	var out []netip.Addr
	for _, line := range strings.Split(conf, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil || a.Zone() != "" {
			continue
		}
		a = a.Unmap()
		dup := false
		for _, b := range out {
			dup = dup || a == b
		}
		if !dup && len(out) < transparentDNSMaxServers {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		out = append(out, netip.AddrFrom4([4]byte{127, 0, 0, 1}))
	}
	return out
}
