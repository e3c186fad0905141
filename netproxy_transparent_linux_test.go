package main

// Tests of transparent TCP (docs/network.md §7) and of the SOCKS side's --tcp-upstream-proxy.
// The stage test runs in the test's own network namespace (inNetProxyNamespace), whose lo
// carries the documentation addresses the test hosts listen on; a command that ignores every
// proxy variable connects to them by address from inside its sandbox, and the verdict is what
// each test host received.

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ttProbeEnv makes the test binary the transparent command: argv[1..] are "host:port"
// addresses it connects to directly, each sent "tt:<addr>"; then it reports what it saw to
// the first address's host again, or, when that fails, on stdout.
const ttProbeEnv = "EXEC_SERVER_TTTEST"

func init() {
	if isSandboxStage() {
		return
	}
	if os.Getenv(ttProbeEnv) == "command" {
		os.Exit(ttCommand(os.Args[1:]))
	}
}

func ttCommand(addrs []string) int {
	report := "report:"
	for _, addr := range addrs {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			report += fmt.Sprintf(" | %s: dial: %v", addr, err)
			continue
		}
		c.Write([]byte("tt:" + addr + "\n"))
		reply, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		report += fmt.Sprintf(" | %s: reply %q %v", addr, reply, err)
	}
	if u := os.Getenv("TT_UDP"); u != "" { // a datagram, which nothing carries out
		c, err := net.Dial("udp", u)
		if err == nil {
			c.Write([]byte("udp-from-sandbox"))
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, err = c.Read(make([]byte, 16))
			c.Close()
		}
		report += fmt.Sprintf(" | udp %s: %v", u, err)
	}
	if p := strings.TrimPrefix(os.Getenv("HTTP_PROXY"), "http://"); p != "" {
		c, err := net.DialTimeout("tcp", p, 5*time.Second)
		report += fmt.Sprintf(" | bridge: %v", err)
		if err == nil {
			c.Close()
		}
	}
	start := time.Now()
	addrs, err := net.DefaultResolver.LookupHost(context.Background(), "name.example")
	report += fmt.Sprintf(" | dns: %v %v in %v", addrs, err, time.Since(start).Round(time.Millisecond))
	fmt.Println(report)
	return 0
}

// ttHost is a test host: it records the first line of each connection and answers "ok".
type ttHost struct {
	ln  net.Listener
	mu  sync.Mutex
	got []string
	wg  sync.WaitGroup
}

func newTTHost(t *testing.T, a netip.Addr) *ttHost {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	h := &ttHost{ln: ln}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				h.mu.Lock()
				h.got = append(h.got, strings.TrimSpace(line))
				h.mu.Unlock()
				c.Write([]byte("ok\n"))
			}()
		}
	}()
	return h
}

func (h *ttHost) addr() string { return h.ln.Addr().String() }

func (h *ttHost) stop() []string {
	h.ln.Close()
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got
}

// TestNetTransparentStage: a command in the real namespace stage, bridged and transparent,
// connects by address to three test hosts without any proxy: the two the policy allows
// (192.0.2.10 by an exact entry, 2001:db8::10) receive its line through the proxy, the one it
// does not (198.51.100.10) receives nothing; the proxy judged each as socks5_tcp to the IP
// literal; the bridge on the namespace's loopback still works.
func TestNetTransparentStage(t *testing.T) {
	if !inNetProxyNamespace(t) {
		return
	}
	requireUserNamespaces(t)
	allowed, denied, allowed6 := newTTHost(t, nsHost4a), newTTHost(t, nsHost4b), newTTHost(t, nsHost6)
	resolve := staticResolver(map[string][]netip.Addr{"web.example": {nsHost6}, "blocked.example": {nsHost4b}})
	p, log := startTestProxy(t, `{"domains":{"192.0.2.10":"allow","[2001:db8::10]":"allow","web.example":"allow","blocked.example":"deny"}}`,
		nil, netProxyHooks{resolve: resolve})
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(nsHost4a, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	byName := func(name string, h *ttHost) string {
		return net.JoinHostPort(name, strconv.Itoa(h.ln.Addr().(*net.TCPAddr).Port))
	}
	out, code := runTransparent(t, p, []string{allowed.addr(), denied.addr(), allowed6.addr(), byName("web.example", allowed6), byName("blocked.example", denied)},
		"HTTP_PROXY=http://"+p.httpAddr(), "TT_UDP="+udp.LocalAddr().String())
	gotA, gotD, got6 := allowed.stop(), denied.stop(), allowed6.stop()
	t.Logf("command: %s", out)
	t.Logf("hosts received: allowed %q, denied %q, allowed v6 %q", gotA, gotD, got6)
	if code != 0 {
		t.Fatalf("command: exit %d", code)
	}
	if len(gotA) != 1 || gotA[0] != "tt:"+allowed.addr() {
		t.Errorf("the allowed host received %q, want the command's line", gotA)
	}
	if len(got6) != 2 || got6[0] != "tt:"+allowed6.addr() || got6[1] != "tt:"+byName("web.example", allowed6) {
		t.Errorf("the allowed IPv6 host received %q, want the command's lines by address and by name", got6)
	}
	if len(gotD) != 0 {
		t.Errorf("the denied host received %q", gotD)
	}
	// Datagrams on lo keep their order: if ours comes first, none came from the sandbox.
	if _, err := udp.WriteTo([]byte("marker"), udp.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, _, err := udp.ReadFrom(buf); err != nil || string(buf[:n]) != "marker" {
		t.Errorf("the test host's UDP socket received %q %v: a datagram left the sandbox", buf[:n], err)
	}
	if !strings.Contains(out, "| bridge: <nil>") {
		t.Errorf("the bridge on the namespace's loopback no longer answers")
	}
	want := map[string]string{nsHost4a.String(): "allow", nsHost4b.String(): "deny", nsHost6.String(): "allow",
		"web.example": "allow", "blocked.example": "deny"}
	ds := log.all()
	for _, d := range ds {
		if d.Protocol != protoSocksTCP || want[d.Host] != d.Decision {
			t.Errorf("decision %+v", d)
		}
		delete(want, d.Host)
	}
	if len(want) != 0 {
		t.Errorf("no decision for %v (decisions %+v)", want, ds)
	}
	p.close()
	waitNoNetProxyGoroutines(t) // the listener, the name service and the link end with the proxy
}

// runTransparent runs the test binary as ttCommand with args under the real namespace stage,
// read-only and without the network, bridged to p and transparent, and returns its output
// and exit status.
func runTransparent(t *testing.T, p *netProxy, args []string, env ...string) (string, int) {
	t.Helper()
	sbx, err := newSandboxer("isolate", "namespaces")
	if err != nil {
		t.Fatal(err)
	}
	defer sbx.close()
	prof, err := sandboxCommandProfile(true, false, nil, "/")
	if err != nil {
		t.Fatal(err)
	}
	bin := testBinary(t)
	spec := &launchSpec{path: bin, argv: append([]string{bin}, args...), dir: "/",
		env: append([]string{ttProbeEnv + "=command", "GORACE=" + sbGORACE}, env...)}
	if _, err := sbx.confine(spec, prof); err != nil {
		t.Fatal(err)
	}
	if err := spec.stage.bridgeTo(p.httpAddr(), p.socksAddr()); err != nil {
		t.Fatal(err)
	}
	if err := spec.stage.transparentTo(p); err != nil {
		t.Fatal(err)
	}
	child, exit, err := startChild(spec)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var outWG sync.WaitGroup
	var outMu sync.Mutex
	for _, o := range child.outs {
		outWG.Add(1)
		go func() {
			defer outWG.Done()
			b, _ := io.ReadAll(o.f)
			outMu.Lock()
			out.Write(b)
			outMu.Unlock()
		}()
	}
	exit.wait(child.proc.Pid)
	ps, err := child.proc.Wait()
	exit.close()
	child.stage.exited()
	outWG.Wait()
	for _, o := range child.outs {
		o.f.Close()
	}
	if err != nil {
		t.Fatalf("command: %v: %s", err, out.String())
	}
	return out.String(), ps.ExitCode()
}

// TestNetTransparentUpstream: with a TCP upstream proxy, a transparent sandbox's allowed
// connections, by name and by address, go through it as CONNECT to what was judged (the name
// for a synthetic address), and the banner the upstream sends first reaches the command; a
// denied one never reaches the upstream, nor does an allowed local address (192.0.2.10, a
// documentation address, counts as local): loopback and private destinations stay local, as
// with the reference, where the upstream would dial them out of the guard's sight.
func TestNetTransparentUpstream(t *testing.T) {
	requireUserNamespaces(t)
	u := newUpstreamRecorder(t, "200 Connection established")
	resolve := staticResolver(map[string][]netip.Addr{"web.example": {nsHost6}})
	p, err := startNetProxy(netProxyConfig{processID: "p1", tcpUpstream: u.ln.Addr().String(),
		params: netProxyParamsFor(t, `{"domains":{"web.example":"allow","192.0.2.10":"allow","2001:db8::10":"allow"}}`, nil)}, netProxyHooks{resolve: resolve})
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	out, code := runTransparent(t, p, []string{"web.example:443", "[2001:db8::10]:22", "192.0.2.10:22", "other.example:80"})
	got := u.requests()
	t.Logf("command: %s\nthe upstream was asked %q", out, got)
	if code != 0 {
		t.Fatalf("command: exit %d", code)
	}
	if len(got) != 2 || got[0] != "CONNECT web.example:443 HTTP/1.1" || got[1] != "CONNECT [2001:db8::10]:22 HTTP/1.1" {
		t.Errorf("the upstream was asked %q, want the name and the public address, not the local one nor the denied one", got)
	}
	if strings.Count(out, `reply "hello\n" <nil>`) != 2 {
		t.Errorf("the upstream's banner did not reach the command twice")
	}
}

// upstreamRecorder is a test CONNECT proxy: it records each request line, answers with
// status (and, on 2xx, the banner "hello\n" at once), then echoes.
type upstreamRecorder struct {
	ln     net.Listener
	status string
	mu     sync.Mutex
	asked  []string
	wg     sync.WaitGroup
}

func newUpstreamRecorder(t *testing.T, status string) *upstreamRecorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstreamRecorder{ln: ln, status: status}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				line, _ := br.ReadString('\n')
				for {
					h, err := br.ReadString('\n')
					if err != nil || h == "\r\n" {
						break
					}
				}
				u.mu.Lock()
				u.asked = append(u.asked, strings.TrimSpace(line))
				u.mu.Unlock()
				if !strings.HasPrefix(u.status, "2") {
					fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Length: 0\r\n\r\n", u.status)
					return
				}
				fmt.Fprintf(c, "HTTP/1.1 %s\r\n\r\nhello\n", u.status)
				io.Copy(c, br)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); u.wg.Wait() })
	return u
}

func (u *upstreamRecorder) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.asked...)
}

// socksConnect runs a SOCKS5 CONNECT to host:port (a name) through addr and returns the
// connection and the reply code.
func socksConnect(t *testing.T, addr, host string, port uint16) (net.Conn, byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	req := []byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}
	req = binary.BigEndian.AppendUint16(append(req, host...), port)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, 2+10)
	if _, err := io.ReadFull(c, reply); err != nil {
		t.Fatalf("SOCKS reply: %v", err)
	}
	return c, reply[3]
}

// TestNetProxyTCPUpstream: with --tcp-upstream-proxy, an allowed SOCKS CONNECT goes through
// that proxy as CONNECT name:port (what the client asked, not an address), the bytes the
// upstream sends right after its 2xx reach the client, and the tunnel carries both ways; a
// refusal by the upstream is a SOCKS general failure; a host the policy denies never reaches
// the upstream.
func TestNetProxyTCPUpstream(t *testing.T) {
	resolve := staticResolver(map[string][]netip.Addr{"web.example": {nsHost6}})
	start := func(up string) *netProxy {
		p, err := startNetProxy(netProxyConfig{processID: "p1", tcpUpstream: up,
			params: netProxyParamsFor(t, `{"domains":{"web.example":"allow"}}`, nil)}, netProxyHooks{resolve: resolve})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.close)
		return p
	}
	t.Run("allowed", func(t *testing.T) {
		u := newUpstreamRecorder(t, "200 Connection established")
		p := start(u.ln.Addr().String())
		c, code := socksConnect(t, p.socksAddr(), "web.example", 443)
		defer c.Close()
		if code != socksSucceeded {
			t.Fatalf("SOCKS reply %d", code)
		}
		br := bufio.NewReader(c)
		if banner, err := br.ReadString('\n'); banner != "hello\n" {
			t.Fatalf("banner %q %v", banner, err)
		}
		c.Write([]byte("ping\n"))
		if echo, err := br.ReadString('\n'); echo != "ping\n" {
			t.Fatalf("echo %q %v", echo, err)
		}
		if got := u.requests(); len(got) != 1 || got[0] != "CONNECT web.example:443 HTTP/1.1" {
			t.Fatalf("the upstream was asked %q", got)
		}
	})
	t.Run("refused by the upstream", func(t *testing.T) {
		u := newUpstreamRecorder(t, "403 Forbidden")
		p := start(u.ln.Addr().String())
		c, code := socksConnect(t, p.socksAddr(), "web.example", 22)
		c.Close()
		if code != socksGeneralFailure {
			t.Fatalf("SOCKS reply %d, want general failure", code)
		}
		if got := u.requests(); len(got) != 1 || got[0] != "CONNECT web.example:22 HTTP/1.1" {
			t.Fatalf("the upstream was asked %q", got)
		}
	})
	t.Run("denied by the policy", func(t *testing.T) {
		u := newUpstreamRecorder(t, "200 OK")
		p := start(u.ln.Addr().String())
		c, code := socksConnect(t, p.socksAddr(), "other.example", 443)
		c.Close()
		if code != socksNotAllowed {
			t.Fatalf("SOCKS reply %d, want not allowed", code)
		}
		if got := u.requests(); len(got) != 0 {
			t.Fatalf("the upstream was asked %q", got)
		}
	})
}

// TestTCPUpstreamFlag: --tcp-upstream-proxy is checked as the reference checks it (each
// reason measured on Codex 0.171.0: `codex exec-server --tcp-upstream-proxy VALUE`), and the
// parsed flags reach the server's configuration.
func TestTCPUpstreamFlag(t *testing.T) {
	for _, c := range []struct{ value, want string }{
		{"proxy.example:3128", ""},
		{"[::1]:80", ""},
		{"10.0.0.1:8080", ""},
		{"nonsense", "missing port"},
		{":80", "parse host"},
		{"http://h:80", "parse host"},
		{"h h:80", "parse host"},
		{"host:0", "TCP upstream proxy port must be nonzero"},
		{"host:99999", "parse port as u16: number too large to fit in target type"},
		{"h:x", "parse port as u16: invalid digit found in string"},
		{"::1:80", "missing brackets for IPv6 address with port"},
	} {
		var o cliOptions
		_, err := parseFlags([]string{"--tcp-upstream-proxy", c.value, "--linux-sandbox-transparent-tcp"}, &o)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.value, err)
		case c.want == "" && (string(o.netproxy.tcpUpstream) != c.value || !o.netproxy.transparentTCP):
			t.Errorf("%q: parsed as %+v", c.value, o.netproxy)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want %q", c.value, err, c.want)
		}
	}
	var o cliOptions
	if _, err := parseFlags([]string{"--tcp-upstream-proxy", "a:1", "--tcp-upstream-proxy", "b:2"}, &o); err == nil || !strings.Contains(err.Error(), "cannot be used multiple times") {
		t.Errorf("a repeated --tcp-upstream-proxy: %v", err)
	}
}

// TestTransparentDNS: the name service answers A with a pool address that maps back to the
// name (the same one each time), AAAA with no record, other classes NOTIMP, refuses what is
// not a plain query, and reads the nameservers of a resolv.conf.
func TestTransparentDNS(t *testing.T) {
	query := func(id uint16, name string, qtype, qclass uint16) []byte {
		b := binary.BigEndian.AppendUint16(nil, id)
		b = append(b, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0)
		for _, l := range strings.Split(name, ".") {
			b = append(append(b, byte(len(l))), l...)
		}
		b = append(b, 0)
		b = binary.BigEndian.AppendUint16(b, qtype)
		return binary.BigEndian.AppendUint16(b, qclass)
	}
	names := newTransparentNames()
	ask := func(b []byte) (rcode byte, addrs []netip.Addr) {
		t.Helper()
		q, err := parseDNSQuery(b)
		if err != nil {
			t.Fatalf("%x: %v", b, err)
		}
		a := names.answer(b, q)
		if binary.BigEndian.Uint16(a) != q.id || a[2]&0x80 == 0 {
			t.Fatalf("answer %x", a)
		}
		if binary.BigEndian.Uint16(a[6:]) == 1 {
			addrs = append(addrs, netip.AddrFrom4([4]byte(a[len(a)-4:])))
		}
		return a[3] & 0x0f, addrs
	}
	_, a1 := ask(query(1, "Web.Example", dnsTypeA, dnsClassIN))
	_, a2 := ask(query(2, "web.example", dnsTypeA, dnsClassIN))
	_, b1 := ask(query(3, "other.example", dnsTypeA, dnsClassIN))
	if len(a1) != 1 || len(a2) != 1 || a1[0] != a2[0] || len(b1) != 1 || b1[0] == a1[0] || !transparentPool.Contains(a1[0]) {
		t.Fatalf("A answers %v %v %v", a1, a2, b1)
	}
	if name, ok := names.nameOf(a1[0]); !ok || name != "web.example" {
		t.Fatalf("%s maps to %q %v", a1[0], name, ok)
	}
	if name, ok := names.nameOf(netip.MustParseAddr("198.19.255.254")); !ok || name != "" {
		t.Fatalf("an unassigned pool address maps to %q %v", name, ok)
	}
	if _, ok := names.nameOf(nsHost4a); ok {
		t.Fatalf("%s is taken for a pool address", nsHost4a)
	}
	if rc, addrs := ask(query(4, "web.example", dnsTypeAAAA, dnsClassIN)); rc != 0 || len(addrs) != 0 {
		t.Fatalf("AAAA: rcode %d %v", rc, addrs)
	}
	if rc, _ := ask(query(5, "web.example", dnsTypeA, 3)); rc != dnsRcodeNotImp {
		t.Fatalf("class CH: rcode %d", rc)
	}
	for _, bad := range [][]byte{query(6, "a b.example", 1, 1), append(query(7, "x", 1, 1)[:2], 0x81, 0), {1, 2, 3}} {
		if _, err := parseDNSQuery(bad); err == nil {
			t.Errorf("%x parsed", bad)
		}
	}
	got := resolvConfServers("# c\nnameserver 10.255.255.53\nnameserver fe80::1%eth0\nnameserver ::1\nnameserver 10.255.255.53\nnameserver 1.1.1.1\nnameserver 8.8.8.8\n")
	if fmt.Sprint(got) != "[10.255.255.53 ::1 1.1.1.1]" {
		t.Errorf("resolv.conf servers %v", got)
	}
	if got := resolvConfServers(""); fmt.Sprint(got) != "[127.0.0.1]" {
		t.Errorf("no nameserver: %v", got)
	}
}

// TestReceiveTransparentTruncated: when this server cannot take every descriptor the stage
// sent (it is out of descriptors: the kernel installs what it can and says MSG_CTRUNC), the
// hand-over fails, instead of the server serving the first ones as if they were all.
func TestReceiveTransparentTruncated(t *testing.T) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours := os.NewFile(uintptr(pair[0]), "ours")
	defer ours.Close()
	defer unix.Close(pair[1])
	// A listener as the stage makes one (net.Listen's would be MPTCP).
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		t.Fatal(err)
	}
	lf := os.NewFile(uintptr(lfd), "listener")
	defer lf.Close()
	if err := unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(lfd, 1); err != nil {
		t.Fatal(err)
	}
	ns, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	fds := []int{int(lf.Fd()), int(ns.Fd())}
	for range transparentDNSMaxServers {
		u, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		uf, err := u.(*net.UDPConn).File()
		if err != nil {
			t.Fatal(err)
		}
		defer uf.Close()
		fds = append(fds, int(uf.Fd()))
	}
	if err := unix.Sendmsg(pair[1], []byte{transparentMsg}, unix.UnixRights(fds...), nil, 0); err != nil {
		t.Fatal(err)
	}
	// Leave this process exactly three free descriptor numbers: the three lowest free ones,
	// under a limit just above them.
	var free [3]int
	for i := range free {
		if free[i], err = unix.Dup(0); err != nil {
			t.Fatal(err)
		}
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	for _, fd := range free {
		unix.Close(fd)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: uint64(free[2] + 1), Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	l, n, dns, err := receiveTransparent(ours)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if err == nil {
		l.Close()
		n.Close()
		for _, f := range dns {
			f.Close()
		}
		t.Fatalf("%d descriptors sent, %d nameservers of %d taken: the truncated hand-over was served", len(fds), len(dns), transparentDNSMaxServers)
	}
	t.Logf("refused: %v", err)
}
