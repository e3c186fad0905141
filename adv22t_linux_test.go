package main

// Adversarial tests of the transparent-TCP path and the bridge hand-off of a routed sandbox
// (docs/network.md §4, §7; SECURITY.md): each is an attack by a sandboxed, possibly
// prompt-injected command, and each verdict is read on the host (what a host-side socket
// really received, which sockets really exist), never from what the command prints. A
// failing TestAdv22T* is an open break. The attacks on the HTTP and SOCKS5 proxy themselves
// are in adv22_linux_test.go.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
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
