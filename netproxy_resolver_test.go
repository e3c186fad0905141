package main

// The DNS server the managed network proxy's tests run (docs/network.md §3, "Resolution"):
// the proxy's own resolver (netProxyConfig.nameserver) asks it instead of the host's, so
// that the real lookup code runs in the tests and no query ever leaves the test. It answers
// A and AAAA from a zone over UDP and TCP on one port, NXDOMAIN for any other name, truncates
// a UDP answer larger than the query allows (the resolver then asks again over TCP), and can
// answer a name differently from one query to the next (DNS rebinding). Each query is
// counted, by name, type and transport, so that a test reads what the resolver asked.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// testDNSZone is what a test DNS server answers: by name (lower case, no final dot), the
// addresses of the first query of each type, then of the second, and so on (the last set
// answers every later query). A set's IPv4 addresses answer A, its IPv6 ones AAAA.
type testDNSZone map[string][][]netip.Addr

// Limits of the test DNS server.
const (
	testDNSMaxMessage = 64 << 10 // a message over TCP
	testDNSPlainUDP   = 512      // a UDP answer without EDNS (RFC 1035)
	testDNSTTL        = 1
)

// testDNS is a DNS server on one address, UDP and TCP on the same port.
type testDNS struct {
	addr netip.AddrPort
	udp  *net.UDPConn
	tcp  *net.TCPListener
	zone testDNSZone
	wg   sync.WaitGroup

	mu      sync.Mutex
	queries map[string]int // "name TYPE transport" → count (TYPE "A", "AAAA", …; transport "udp", "tcp")
	tcpOpen map[net.Conn]struct{}
}

// startTestDNS runs a DNS server for zone on ip (an ephemeral port, the same for UDP and
// TCP) until the test ends.
func startTestDNS(t testing.TB, ip netip.Addr, zone testDNSZone) *testDNS {
	t.Helper()
	s := &testDNS{zone: zone, queries: map[string]int{}, tcpOpen: map[net.Conn]struct{}{}}
	var err error
	for range 20 { // the UDP port may be taken for TCP: try another
		s.udp, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
		if err != nil {
			t.Fatal(err)
		}
		s.addr = s.udp.LocalAddr().(*net.UDPAddr).AddrPort()
		s.addr = netip.AddrPortFrom(ip, s.addr.Port())
		s.tcp, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(s.addr))
		if err == nil {
			break
		}
		s.udp.Close()
	}
	if err != nil {
		t.Fatalf("test DNS server: %v", err)
	}
	s.wg.Add(2)
	go s.serveUDP()
	go s.serveTCP()
	t.Cleanup(s.close)
	return s
}

func (s *testDNS) close() {
	s.udp.Close()
	s.tcp.Close()
	s.mu.Lock()
	for c := range s.tcpOpen {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// count is how many queries for name of type qtype ("A", "AAAA") came over transport ("udp",
// "tcp", or "" for both).
func (s *testDNS) count(name, qtype, transport string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if transport == "" {
		return s.queries[name+" "+qtype+" udp"] + s.queries[name+" "+qtype+" tcp"]
	}
	return s.queries[name+" "+qtype+" "+transport]
}

func (s *testDNS) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, testDNSMaxMessage)
	for {
		n, from, err := s.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if out := s.answer(buf[:n], "udp"); out != nil {
			s.udp.WriteToUDPAddrPort(out, from)
		}
	}
}

func (s *testDNS) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.tcpOpen[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.tcpOpen, c)
				s.mu.Unlock()
				c.Close()
			}()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			for {
				var l [2]byte
				if _, err := io.ReadFull(c, l[:]); err != nil {
					return
				}
				msg := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := io.ReadFull(c, msg); err != nil {
					return
				}
				out := s.answer(msg, "tcp")
				if out == nil {
					return
				}
				if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
					return
				}
			}
		}()
	}
}

// answer builds the answer to one query message, or nil for a message that is not one.
func (s *testDNS) answer(msg []byte, transport string) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	p.SkipAllQuestions()
	p.SkipAllAnswers()
	p.SkipAllAuthorities()
	limit := testDNSPlainUDP
	for {
		rh, err := p.AdditionalHeader()
		if err != nil {
			break
		}
		if rh.Type == dnsmessage.TypeOPT && int(rh.Class) > limit {
			limit = int(rh.Class) // EDNS0: the class is the requester's UDP payload size
		}
		p.SkipAdditional()
	}
	name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
	qtype := strings.TrimPrefix(q.Type.String(), "Type")
	s.mu.Lock()
	// The TCP retry of a truncated answer asks the same question: one query of the count.
	key := name + " " + qtype
	nth := s.queries[key+" udp"] + s.queries[key+" tcp"] - s.queries[key+" truncated"]
	s.queries[name+" "+qtype+" "+transport]++
	s.mu.Unlock()

	resp := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	sets, known := s.zone[name]
	if !known {
		resp.RCode = dnsmessage.RCodeNameError
	}
	var addrs []netip.Addr
	if known && len(sets) > 0 {
		for _, a := range sets[min(nth, len(sets)-1)] {
			if a.Is4() && q.Type == dnsmessage.TypeA || !a.Is4() && q.Type == dnsmessage.TypeAAAA {
				addrs = append(addrs, a)
			}
		}
	}
	build := func(records []netip.Addr, truncated bool) []byte {
		resp.Truncated = truncated
		b := dnsmessage.NewBuilder(nil, resp)
		b.EnableCompression()
		b.StartQuestions()
		b.Question(q)
		b.StartAnswers()
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: testDNSTTL}
		for _, a := range records {
			if a.Is4() {
				b.AResource(rh, dnsmessage.AResource{A: a.As4()})
			} else {
				b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
		}
		out, err := b.Finish()
		if err != nil {
			panic(fmt.Sprintf("test DNS server: build the answer: %v", err))
		}
		return out
	}
	out := build(addrs, false)
	if transport == "udp" && len(out) > limit {
		s.mu.Lock()
		s.queries[name+" "+qtype+" truncated"]++
		s.mu.Unlock()
		out = build(nil, true)
	}
	return out
}
