package main

// Adversarial tests of the transparent-TCP path and the bridge hand-off of a routed sandbox
// (docs/network.md §4, §7; SECURITY.md): each is an attack by a sandboxed, possibly
// prompt-injected command, and each verdict is read on the host (what a host-side socket
// really received, which sockets really exist), never from what the command prints. A
// failing TestAdv22T* is an open break. The attacks on the HTTP and SOCKS5 proxy themselves
// are in adv22_linux_test.go.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// adv22tEnv makes the test binary the sandboxed command of these tests; its value names the
// attack.
const adv22tEnv = "EXEC_SERVER_ADV22T"

func init() {
	if os.Getenv(adv22tEnv) == "" || isSandboxStage() {
		return
	}
	switch os.Getenv(adv22tEnv) {
	case "udp-associate":
		os.Exit(adv22tUDPAssociate())
	case "escapes":
		os.Exit(adv22tEscapes(os.Args[1], os.Args[2]))
	}
	os.Exit(2)
}

// adv22tUDPAssociate is the command: through the SOCKS5 endpoint its ALL_PROXY names (the
// bridge), it asks for a UDP association, prints the reply ("assoc=<code> <address>"), then
// holds the control connection open until its stdin ends.
func adv22tUDPAssociate() int {
	proxy := os.Getenv("ALL_PROXY")
	_, hostport, ok := strings.Cut(proxy, "://")
	if !ok {
		fmt.Printf("assoc=no ALL_PROXY (%q)\n", proxy)
		return 1
	}
	c, err := net.DialTimeout("tcp", hostport, 5*time.Second)
	if err != nil {
		fmt.Printf("assoc=dial %v\n", err)
		return 1
	}
	defer c.Close()
	c.Write([]byte{5, 1, 0})
	r := bufio.NewReader(c)
	greet := make([]byte, 2)
	if _, err := io.ReadFull(r, greet); err != nil || greet[1] != 0 {
		fmt.Printf("assoc=greeting %v %x\n", err, greet)
		return 1
	}
	c.Write([]byte{5, 3, 0, 1, 0, 0, 0, 0, 0, 0}) // UDP ASSOCIATE, client address unknown
	reply := make([]byte, 10)
	if _, err := io.ReadFull(r, reply); err != nil {
		fmt.Printf("assoc=reply %v\n", err)
		return 1
	}
	bound := netip.AddrPortFrom(netip.AddrFrom4([4]byte(reply[4:8])), binary.BigEndian.Uint16(reply[8:]))
	fmt.Printf("assoc=%d %s\n", reply[1], bound)
	bufio.NewReader(os.Stdin).ReadString('\n') // the test's word that it is done
	return 0
}

// loopbackUDPSockets lists the UDP sockets bound on 127.0.0.1 in this network namespace
// (/proc/net/udp), by port.
func loopbackUDPSockets(t *testing.T) map[uint16]bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint16]bool{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		ip, port, ok := strings.Cut(f[1], ":")
		var p uint16
		if _, err := fmt.Sscanf(port, "%X", &p); ok && err == nil && ip == "0100007F" {
			out[p] = true
		}
	}
	return out
}

// TestAdv22TRoutedUDPAssociateHop: a routed command (enforceManagedNetwork, SOCKS5 with UDP
// enabled) asks its proxy, through the bridge, for a SOCKS5 UDP association. The relay
// socket the proxy would open is on the host's 127.0.0.1, out of the namespace's reach
// (docs/network.md §4: "SOCKS5 UDP ASSOCIATE does not work routed"), so it serves nobody
// but other local processes: any of them that sends it the first datagram becomes its
// client, and relays UDP under the sandboxed process's policy, its decisions reported as
// that process's, through a proxy that "has no listener on the host" (§4, step 1). Read on
// the host: no new UDP socket may appear on 127.0.0.1 while the association is held, and a
// local process's datagram sent to any that did must not reach the allowed UDP host.
func TestAdv22TRoutedUDPAssociateHop(t *testing.T) {
	if !inNetProxyNamespace(t) {
		return
	}
	requireUserNamespaces(t)
	target, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(nsHost4a, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	tc := startTestServer(t).connect(t)
	before := loopbackUDPSockets(t)
	params := netProxyStartParams(t, "assoc", "", map[string]any{
		"domains": map[string]string{nsHost4a.String(): "allow"}, "enableSocks5": true, "enableSocks5Udp": true,
	}, 0)
	params["argv"] = []string{testBinary(t)}
	params["env"] = map[string]string{adv22tEnv: "udp-associate", "GORACE": sbGORACE}
	params["enforceManagedNetwork"] = true
	params["sandbox"] = netProxyTestSandbox("restricted")
	params["pipeStdin"] = true
	tc.mustCall("process/start", params)
	waitOutput(tc, "assoc", "stdout", "assoc=")
	var out string
	for _, e := range procEvents(tc, "assoc") {
		if e.Method == "process/output" {
			out += string(e.Chunk)
		}
	}
	t.Logf("the command: %s", strings.TrimSpace(out))
	var opened []uint16
	for p := range loopbackUDPSockets(t) {
		if !before[p] {
			opened = append(opened, p)
		}
	}
	// Another local process uses each as a hop to the allowed UDP host.
	hop, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer hop.Close()
	dst := netip.MustParseAddrPort(target.LocalAddr().String())
	msg := append([]byte{0, 0, 0, 1}, nsHost4a.AsSlice()...)
	msg = binary.BigEndian.AppendUint16(msg, dst.Port())
	msg = append(msg, "hop-from-another-local-process"...)
	for _, p := range opened {
		hop.WriteToUDPAddrPort(msg, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), p))
	}
	var got string
	if len(opened) > 0 {
		// A relayed datagram takes the proxy's goroutine; wait for it a bounded time.
		target.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 256)
		if n, _, err := target.ReadFrom(buf); err == nil {
			got = string(buf[:n])
		} else if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal(err)
		}
	}
	tc.mustCall("process/closeStdin", map[string]any{"processId": "assoc"})
	waitClosed(tc, "assoc")
	t.Logf("UDP sockets opened on the host's 127.0.0.1 while the association was held: %v; the UDP host received %q", opened, got)
	if len(opened) != 0 {
		t.Errorf("a routed command made its proxy open %d UDP socket(s) on the host's loopback", len(opened))
	}
	if got != "" {
		t.Errorf("another local process relayed a datagram through the routed process's proxy: %q", got)
	}
	if !strings.Contains(out, "assoc=7 ") {
		t.Errorf("the command's association was not refused as not supported (reply 07): %q", out)
	}
	waitNoNetProxyGoroutines(t)
	waitNoNetBridgeGoroutines(t)
}

// adv22tEscapeTargets are the destinations the escapes command connects to directly (each
// sent "esc:<label>"), every one of which must stay in its namespace or be refused by the
// proxy; P is the test host's port. Only "allowed" may arrive.
var adv22tEscapeTargets = []struct{ label, addr string }{
	{"allowed", "192.0.2.10:P"},
	{"loopback-2", "127.0.0.2:P"},
	{"v6-loopback", "[::1]:P"},
	{"v4-mapped-loopback", "[::ffff:127.0.0.1]:P"},
	{"v4-compatible-loopback", "[::7f00:1]:P"},
	{"siit-loopback", "[::ffff:0:7f00:1]:P"},
	{"nat64-denied", "[64:ff9b::c633:640a]:P"},
	{"link-local", "[fe80::1%lo]:P"},
	{"denied-v4", "198.51.100.10:P"},
	{"denied-v6", "[2001:db8::10]:P"}, // by a deny entry: the policy counts 2001:db8::/32 public
	{"pool-unassigned", "198.18.0.77:P"},
	{"nameserver-tcp", "NS:53"},
}

// adv22tEscapes is the command of TestAdv22TTransparentEscapes: every way out it tries, by
// address, by a name of the namespace's name service, with TCP Fast Open, through a listener
// of its own on a denied address, by UDP; it prints what it saw, which the test only logs.
func adv22tEscapes(port, udpPort string) int {
	conf, _ := os.ReadFile("/etc/resolv.conf")
	ns := resolvConfServers(string(conf))[0]
	nsText := ns.String()
	if ns.Is6() {
		nsText = "[" + nsText + "]"
	}
	try := func(label, addr string) {
		addr = strings.Replace(strings.Replace(addr, "NS", nsText, 1), ":P", ":"+port, 1)
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			fmt.Printf("%s %s: %v\n", label, addr, err)
			return
		}
		defer c.Close()
		c.Write([]byte("esc:" + label + "\n"))
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		fmt.Printf("%s %s: %q %v\n", label, addr, line, err)
	}
	for _, d := range adv22tEscapeTargets {
		try(d.label, d.addr)
	}
	// Names: the name service gives each a synthetic address, judged as the name.
	for _, name := range []string{"192.0.2.10", "127.0.0.1", "foo.localhost", "198.51.100.10", "2130706433", "localhost"} {
		a, err := adv22tLookup(netip.AddrPortFrom(ns, 53), name)
		if err != nil {
			fmt.Printf("name %s: %v\n", name, err)
			continue
		}
		label := "name-" + name
		if name == "192.0.2.10" {
			label = "allowed-by-name"
		}
		try(label, netip.AddrPortFrom(a, 0).Addr().String()+":P")
	}
	// TCP Fast Open: the SYN carries the data.
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0); err == nil {
		p, _ := strconv.Atoi(port)
		err := unix.Sendto(fd, []byte("esc:fastopen\n"), unix.MSG_FASTOPEN, &unix.SockaddrInet4{Port: p, Addr: [4]byte{198, 51, 100, 10}})
		fmt.Printf("fastopen: %v\n", err)
		unix.Close(fd)
	}
	// A listener of the command's own on a denied address and the test host's port, with
	// SO_REUSEPORT, racing the transparent listener for the connection.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		})
	}}
	if ln, err := lc.Listen(context.Background(), "tcp4", "198.51.100.10:"+port); err == nil {
		go func() {
			if c, err := ln.Accept(); err == nil {
				fmt.Printf("own listener accepted %s\n", c.RemoteAddr())
				c.Close()
			}
		}()
		try("own-listener", "198.51.100.10:P")
		ln.Close()
	} else {
		fmt.Printf("own listener: %v\n", err)
	}
	for _, a := range []string{"198.51.100.10", "[2001:db8::10]", "192.0.2.10"} {
		if c, err := net.Dial("udp", a+":"+udpPort); err == nil {
			c.Write([]byte("esc:udp " + a))
			c.Close()
		}
	}
	return 0
}

// adv22tLookup asks the nameserver ns for name's A record.
func adv22tLookup(ns netip.AddrPort, name string) (netip.Addr, error) {
	c, err := net.Dial("udp", ns.String())
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	q := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, l := range strings.Split(name, ".") {
		q = append(append(q, byte(len(l))), l...)
	}
	q = append(q, 0, 0, 1, 0, 1)
	c.Write(q)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	b := make([]byte, 512)
	n, err := c.Read(b)
	if err != nil {
		return netip.Addr{}, err
	}
	if n < 4 || binary.BigEndian.Uint16(b[6:]) != 1 {
		return netip.Addr{}, fmt.Errorf("no answer (rcode %d)", b[3]&15)
	}
	return netip.AddrFrom4([4]byte(b[n-4 : n])), nil
}

// TestAdv22TTransparentEscapes: a transparent command (docs/network.md §7) whose policy
// allows every public destination but 2001:db8::10 and, of the local ones, 192.0.2.10 only
// (docs/network.md §3: the IPv4 documentation blocks are local), tries every way
// out of its namespace the kernel offers it: TCP to other loopback addresses, ::1, IPv4-
// mapped, -compatible and SIIT forms of 127.0.0.1, NAT64 and link-local addresses, denied
// IPv4 and IPv6 hosts, an unassigned synthetic address, its nameserver over TCP; names the
// name service maps (IP literals, a .localhost name, a decimal address); TCP Fast Open; a
// SO_REUSEPORT listener of its own on a denied address; UDP. Read on the host, where one TCP
// listener takes every address of the test's namespace on the test port and on 53, and one
// UDP socket every address on another (the nameserver's address is put on the test
// namespace's lo, so that a leak to it would arrive): the only connections are the allowed
// host's, by address and by name; no datagram arrives; nothing of the proxy is left after
// the process. (It passes on the base commit too: a regression guard of refused attacks.)
func TestAdv22TTransparentEscapes(t *testing.T) {
	if !inNetProxyNamespace(t) {
		return
	}
	requireUserNamespaces(t)
	conf, _ := os.ReadFile("/etc/resolv.conf")
	for _, a := range resolvConfServers(string(conf)) {
		if !a.IsLoopback() {
			if out, err := exec.Command("ip", "addr", "add", netip.PrefixFrom(a, a.BitLen()).String(), "dev", "lo").CombinedOutput(); err != nil {
				t.Fatalf("ip addr add %s: %v %s", a, err, out)
			}
		}
	}
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	var lns []net.Listener
	for _, a := range []string{"[::]:0", "[::]:53"} {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				line, _ := bufio.NewReader(c).ReadString('\n')
				mu.Lock()
				got = append(got, fmt.Sprintf("%s %s", strings.TrimSpace(line), c.LocalAddr()))
				mu.Unlock()
				c.Write([]byte("ok\n"))
				c.Close()
			}
		}()
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	port := lns[0].Addr().(*net.TCPAddr).Port
	tc := startTestServer(t).connect(t)
	before, _ := openFDsAndLinks(t)
	params := netProxyStartParams(t, "esc", "", map[string]any{
		"domains": map[string]string{"*": "allow", nsHost4a.String(): "allow", "[" + nsHost6.String() + "]": "deny"}, "enableSocks5": true,
	}, 0)
	params["argv"] = []string{testBinary(t), strconv.Itoa(port), strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port)}
	params["env"] = map[string]string{adv22tEnv: "escapes", "GORACE": sbGORACE}
	params["networkProxy"].(map[string]any)["proxy"].(map[string]any)["transparentTcp"] = true
	params["sandbox"] = netProxyTestSandbox("restricted")
	r := tc.run(params)
	for _, ln := range lns {
		ln.Close()
	}
	wg.Wait()
	t.Logf("the command:\n%s%s", r.stdout(), r.stderr())
	t.Logf("the host received: %q", got)
	want := []string{"esc:allowed " + netip.AddrPortFrom(nsHost4a, uint16(port)).String(),
		"esc:allowed-by-name " + netip.AddrPortFrom(nsHost4a, uint16(port)).String()}
	if !slices.Equal(got, want) {
		t.Errorf("the host's listeners received %q, want only %q", got, want)
	}
	// Datagrams on lo keep their order: if ours comes first, none came from the sandbox.
	if _, err := udp.WriteTo([]byte("marker"), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: udp.LocalAddr().(*net.UDPAddr).Port}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, _, err := udp.ReadFrom(buf); err != nil || string(buf[:n]) != "marker" {
		t.Errorf("the host's UDP socket received %q %v: a datagram left the sandbox", buf[:n], err)
	}
	waitNoNetProxyGoroutines(t)
	waitNoNetBridgeGoroutines(t)
	waitOpenFDs(t, before)
}
