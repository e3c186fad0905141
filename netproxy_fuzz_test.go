package main

// Fuzz targets of the managed network proxy's parsers (docs/network.md §5): the HTTP
// request head with its target, and the SOCKS5 messages. Neither may panic on any input;
// what they accept must hold what their callers rely on.

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func FuzzNetProxyRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET http://web.example/hello HTTP/1.1\r\nHost: web.example\r\n\r\n",
		"CONNECT web.example:443 HTTP/1.1\r\nHost: web.example:443\r\n\r\n",
		"POST http://[2001:db8::10]:8080/x?y=1 HTTP/1.0\nContent-Length: 0\n\n",
		"CONNECT [fe80::1%25lo]:22 HTTP/1.1\r\n\r\n",
		"GARBAGE\r\n\r\n",
		"GET http://user@h/ HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	policy := compilePolicy(&proxyConfig{Mode: modeLimited, Domains: map[string]domainPerm{
		"**.example": domainAllow, "bad.example": domainDeny, "[::1]": domainAllow}})
	noDNS := func(ctx context.Context, host string) ([]netip.Addr, error) {
		return nil, errors.New("no DNS in the fuzz test")
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > netProxyMaxHeaderBytes {
			return
		}
		n := headEnd(b)
		if n < 0 {
			return
		}
		h, err := parseRequestHead(b[:n])
		if err != nil {
			return
		}
		if !isToken(h.method) || h.proto != "HTTP/1.1" && h.proto != "HTTP/1.0" || strings.ContainsAny(h.target, " \r\n") {
			t.Fatalf("accepted a bad request line: %q", b[:n])
		}
		for _, f := range h.headers {
			if !isToken(f.name) || strings.ContainsAny(f.value, "\r\n") {
				t.Fatalf("accepted a bad header: %q", f)
			}
		}
		var host string
		if h.method == "CONNECT" {
			host, _, err = splitHostPort(h.target, 0)
		} else {
			host, _, _, err = absoluteTarget(h.target)
		}
		if err != nil {
			return
		}
		policy.hostVerdict(context.Background(), host, noDNS)
	})
}

func FuzzNetProxySocks(f *testing.F) {
	for _, s := range [][]byte{
		{5, 1, 0},
		{5, 2, 0, 2},
		{5, 1, 0, 1, 192, 0, 2, 10, 0, 80},
		append([]byte{5, 1, 0, 3, 11}, append([]byte("web.example"), 1, 187)...),
		append([]byte{5, 3, 0, 4}, append(netip.MustParseAddr("2001:db8::10").AsSlice(), 0, 53)...),
		{0, 0, 0, 3, 0, 0, 0},
	} {
		f.Add(s)
	}
	socksPolicy := compilePolicy(&proxyConfig{Mode: modeFull, Domains: map[string]domainPerm{"*.example": domainAllow}})
	socksNoDNS := func(ctx context.Context, host string) ([]netip.Addr, error) {
		return nil, errors.New("no DNS in the fuzz test")
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, n, err := parseSocksGreeting(b); err == nil && n > len(b) {
			t.Fatalf("greeting of %d bytes in %d", n, len(b))
		}
		if r, n, err := parseSocksRequest(b); err == nil && n > 0 {
			if n > len(b) || r.host == "" {
				t.Fatalf("request %+v of %d bytes in %d", r, n, len(b))
			}
			socksPolicy.hostVerdict(context.Background(), r.host, socksNoDNS)
		}
		if len(b) >= 3 { // a UDP datagram's header after RSV RSV FRAG
			if _, _, n, err := parseSocksAddr(b[3:]); err == nil && n > len(b)-3 {
				t.Fatalf("address of %d bytes in %d", n, len(b)-3)
			}
		}
	})
}

// FuzzTransparentDNS: the transparent sandbox's name service (netproxy_dns.go) parses any
// datagram without panicking, and answers what it accepts with a reply of the same ID and
// question whose address, if any, is in the pool and maps back to the name asked.
func FuzzTransparentDNS(f *testing.F) {
	f.Add([]byte("\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03web\x07example\x00\x00\x01\x00\x01"))
	f.Add([]byte("\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x01\x09localhost\x00\x00\x1c\x00\x01\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("\x00\x01\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01"))
	names := newTransparentNames()
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := parseDNSQuery(b)
		if err != nil {
			return
		}
		if len(q.name) > 253 || strings.Trim(q.name, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" {
			t.Fatalf("accepted the name %q", q.name)
		}
		a := names.answer(b, q)
		back, err := parseDNSQuery(append(append([]byte{}, a[:2]...), append([]byte{0, 0}, a[4:]...)...))
		if err != nil || back.id != q.id || back.name != q.name || back.qtype != q.qtype {
			t.Fatalf("the answer %x does not carry the question of %x", a, b)
		}
		if an := binary.BigEndian.Uint16(a[6:]); an == 1 {
			addr := netip.AddrFrom4([4]byte(a[len(a)-4:]))
			if name, ok := names.nameOf(addr); q.name != "localhost" && (!ok || name != q.name) {
				t.Fatalf("%q answered with %s, which maps to %q", q.name, addr, name)
			}
		}
	})
}
