package main

// Adversarial tests of the managed network proxy (docs/network.md §4, §7; SECURITY.md): each
// is an attack a sandboxed, possibly prompt-injected command makes on its proxy, and each
// verdict is read on the host (what the host-side listener really accepted), never from what
// the command prints. A failing TestAdv22* is an open break.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// advConnectProxy is an operator's HTTP CONNECT proxy on this host (a corporate proxy, or
// the one --tcp-upstream-proxy names): it connects wherever it is asked, as such proxies do
// for loopback targets, and records each target.
type advConnectProxy struct {
	ln      net.Listener
	wg      sync.WaitGroup
	mu      sync.Mutex
	targets []string
	// dns is the upstream's own name service, when set: a name it knows is reached at that
	// address (a second lookup, which need not agree with the exec-server's).
	dns map[string]string
}

func startAdvConnectProxy(t *testing.T) *advConnectProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &advConnectProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *advConnectProxy) serve(c net.Conn) {
	defer c.Close()
	buf, n, err := readHead(c)
	if err != nil {
		return
	}
	h, err := parseRequestHead(buf[:n])
	if err != nil || h.method != "CONNECT" {
		return
	}
	p.mu.Lock()
	p.targets = append(p.targets, h.target)
	p.mu.Unlock()
	target := h.target
	if host, port, err := net.SplitHostPort(target); err == nil && p.dns[host] != "" {
		target = net.JoinHostPort(p.dns[host], port)
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer up.Close()
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	up.Write(buf[n:])
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(up, c)
		up.(*net.TCPConn).CloseWrite()
	}()
	io.Copy(c, up)
	c.Close()
	<-done
}

// advCountedServer starts a test server with a second websocket listener whose accepted
// connections are counted: the host-side verdict of a connect-back attempt.
func advCountedServer(t *testing.T, opts ...func(*server)) (*testServer, *countingListener, int) {
	t.Helper()
	ts := startTestServer(t, opts...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingListener{Listener: ln}
	ws := newWSServer(ts.srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		ws.serve(counted)
	}()
	t.Cleanup(func() {
		ws.close()
		<-served
	})
	return ts, counted, ln.Addr().(*net.TCPAddr).Port
}

const advUpgrade = `-H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=='`

func (p *advConnectProxy) addr() string { return p.ln.Addr().String() }

func (p *advConnectProxy) asked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.targets...)
}

// TestAdv22UpstreamConnectBack: a routed command whose policy allows 127.0.0.1 (a dev server,
// say) must not reach this exec-server's own websocket listener (SECURITY.md: "a policy
// allowing 127.0.0.1 does not let a command ask its own server for an unsandboxed process").
// guardedDial refuses the listener as a direct destination, but when the allowed connection
// goes through an upstream proxy (allowUpstreamProxy with the server's HTTPS_PROXY, or
// --tcp-upstream-proxy for SOCKS) only the upstream's address is checked, and the upstream
// dials the server's listener for the command. The routed stage is not registered for the
// connect-back check, and the peer the listener sees is the upstream proxy anyway.
// Verdict on the host: the server's listener accepted a connection.
func TestAdv22UpstreamConnectBack(t *testing.T) {
	requireUserNamespaces(t)
	up := startAdvConnectProxy(t)
	t.Setenv("HTTPS_PROXY", "http://"+up.addr())
	t.Setenv("HTTP_PROXY", "")
	ts, counted, port := advCountedServer(t, func(s *server) { s.cfg.netproxy.tcpUpstream = tcpUpstreamFlag(up.addr()) })
	tc := ts.connect(t)

	t.Run("allowUpstreamProxy", func(t *testing.T) {
		before := counted.accepted()
		script := fmt.Sprintf(`curl -sS -m 5 -p -o /dev/null -w 'tunnel=%%{http_code}\n' %s http://127.0.0.1:%d/`, advUpgrade, port)
		params := netProxyStartParams(t, "adv-up", script, map[string]any{
			"domains":            map[string]string{"127.0.0.1": "allow"},
			"allowUpstreamProxy": true,
		}, 0)
		params["sandbox"] = netProxyTestSandbox("restricted")
		params["enforceManagedNetwork"] = true
		r := tc.run(params)
		t.Logf("child output: %q %q; upstream asked for %q", r.stdout(), r.stderr(), up.asked())
		if n := counted.accepted() - before; n != 0 {
			t.Errorf("the server's own listener accepted %d connections from the routed command (through the upstream proxy)", n)
		}
	})

	t.Run("tcpUpstream", func(t *testing.T) {
		before := counted.accepted()
		script := fmt.Sprintf(`curl -sS -m 5 -o /dev/null -w 'socks=%%{http_code}\n' %s --proxy "$ALL_PROXY" http://127.0.0.1:%d/`, advUpgrade, port)
		params := netProxyStartParams(t, "adv-tcpup", script, map[string]any{
			"domains":      map[string]string{"127.0.0.1": "allow"},
			"enableSocks5": true,
		}, 0)
		params["sandbox"] = netProxyTestSandbox("restricted")
		params["enforceManagedNetwork"] = true
		r := tc.run(params)
		t.Logf("child output: %q %q; upstream asked for %q", r.stdout(), r.stderr(), up.asked())
		if !strings.Contains(r.stdout()+r.stderr(), "socks=") {
			t.Logf("curl did not report a status")
		}
		if n := counted.accepted() - before; n != 0 {
			t.Errorf("the server's own listener accepted %d connections from the routed command (through --tcp-upstream-proxy)", n)
		}
	})
}

// TestAdv22ChainThroughOtherProxy: the guard against connect-back is on the dial of a
// sandboxed process's proxy only. The proxy of a process started without a sandbox (same
// session, a policy allowing 127.0.0.1, harmless for that process, which can reach the
// server anyway) is an ordinary local service on 127.0.0.1: a routed command whose own
// policy allows 127.0.0.1 goes through its SOCKS5 proxy to that proxy's port (not one of the
// server's listeners, so guardedDial lets it through) and asks it for a CONNECT to the
// server's websocket listener, which that unguarded proxy dials.
// Verdict on the host: the server's listener accepted a connection.
func TestAdv22ChainThroughOtherProxy(t *testing.T) {
	requireUserNamespaces(t)
	ts, counted, port := advCountedServer(t)
	tc := ts.connect(t)
	fifo := filepath.Join(t.TempDir(), "b-proxy")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	b := netProxyStartParams(t, "adv-b", `echo "$HTTP_PROXY" > `+fifo+`; exec sleep 60`,
		map[string]any{"domains": map[string]string{"127.0.0.1": "allow"}}, 0)
	tc.mustCall("process/start", b)
	defer func() {
		tc.call("process/terminate", map[string]any{"processId": "adv-b"})
		waitClosed(tc, "adv-b")
	}()
	raw, err := os.ReadFile(fifo)
	if err != nil {
		t.Fatal(err)
	}
	bProxy := strings.TrimSpace(string(raw))
	for _, c := range []struct {
		name, network, via string
		enforce            bool
	}{
		// routed: through its own SOCKS5 proxy (policy: 127.0.0.1) to B's proxy.
		{"routed", "restricted", `--preproxy "$ALL_PROXY"`, true},
		// a network-enabled sandbox: straight to B's proxy; the connect-back check runs, but
		// the listener's peer is the server itself (B's proxy), not the sandbox.
		{"host network", "enabled", `--noproxy ''`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := counted.accepted()
			script := fmt.Sprintf(`curl -sS -m 3 -p -o /dev/null -w 'chain=%%{http_code}\n' %s --proxy %s %s http://127.0.0.1:%d/`, c.via, bProxy, advUpgrade, port)
			a := netProxyStartParams(t, "adv-a-"+c.network, script, map[string]any{
				"domains":      map[string]string{"127.0.0.1": "allow"},
				"enableSocks5": true,
			}, 0)
			a["sandbox"] = netProxyTestSandbox(c.network)
			a["enforceManagedNetwork"] = c.enforce
			r := tc.run(a)
			t.Logf("B's proxy %s; A's output: %q %q", bProxy, r.stdout(), r.stderr())
			if n := counted.accepted() - before; n != 0 {
				t.Errorf("the server's own listener accepted %d connections from the sandboxed command (through another process's proxy)", n)
			}
		})
	}
}

// TestAdv22RoutedUnixSockets: a command whose profile restricts the network cannot connect a
// unix socket (docs/sandbox.md: connect fails with EPERM under the restricted filter), and
// the proxy offers no unix sockets (proxy.unixSockets is decoded and checked only,
// docs/network.md §4). Routed (enforceManagedNetwork), the same command gets
// seccompProxyRouted, which allows connect for its namespace's lo, but a unix socket's path
// is not in the namespace: every socket of the host's file system it can see (a container
// runtime's, a bus, another service's control socket) is reachable, whatever the policy.
// Verdict on the host: the unix listener accepted a connection.
func TestAdv22RoutedUnixSockets(t *testing.T) {
	requireUserNamespaces(t)
	dir, err := os.MkdirTemp("/var/tmp", "adv22-unix-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "service.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingListener{Listener: ln}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := counted.Accept()
			if err != nil {
				return
			}
			if raw, err := c.(*net.UnixConn).SyscallConn(); err == nil {
				raw.Control(func(fd uintptr) {
					if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
						t.Logf("the host's service sees its peer as pid %d uid %d gid %d (what a bus or a container runtime authorizes by)", cred.Pid, cred.Uid, cred.Gid)
					}
				})
			}
			readHead(c) // the request, so that the client reads the whole answer
			io.WriteString(c, "HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\nhi\n")
			c.Close()
		}
	}()
	defer func() {
		ln.Close()
		wg.Wait()
	}()
	tc := startTestServer(t).connect(t)
	script := `curl -sS -m 3 --noproxy '*' --unix-socket ` + path + ` -w 'unix=%{http_code}\n' http://x/`
	for _, c := range []struct {
		name    string
		enforce bool
	}{{"restricted", false}, {"routed", true}} {
		t.Run(c.name, func(t *testing.T) {
			before := counted.accepted()
			params := netProxyStartParams(t, "adv-unix-"+c.name, script, map[string]any{"domains": map[string]string{"example.com": "allow"}}, 0)
			params["sandbox"] = netProxyTestSandbox("restricted")
			params["enforceManagedNetwork"] = c.enforce
			r := tc.run(params)
			t.Logf("child output: %q %q", r.stdout(), r.stderr())
			if n := counted.accepted() - before; n != 0 {
				t.Errorf("the host's unix socket %s accepted %d connections from a command whose network is restricted", path, n)
			}
		})
	}
}

// TestAdv22ApprovedNameResolvesLocal: with policyDecisionTimeoutMs, a name outside the allow
// list is put to the client, which sees only {protocol, host, port}: the user approves
// "docs.approved.example:443", a public-looking name. docs/network.md §3 step 5 refuses an
// allowed name that resolves to a local address (a loopback service, 169.254.169.254), but a
// client-approved name skips that check (decide returns no checked addresses and dialTarget
// resolves afresh, unchecked): the name, pointed at 127.0.0.1 by whoever controls its DNS,
// reaches the host's loopback services. A local literal is never put to the client
// (not_allowed_local); its name form is.
// Verdict on the host: the loopback service accepted a connection.
func TestAdv22ApprovedNameResolvesLocal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{}, 4)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			got <- struct{}{}
		}
	}()
	defer func() {
		ln.Close()
		wg.Wait()
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	var mu sync.Mutex
	var asked []string
	timeout := uint64(5000)
	p, err := startNetProxy(netProxyConfig{processID: "p1",
		params: netProxyParamsFor(t, `{"domains":{"allowed.example":"allow"}}`, &timeout)},
		netProxyHooks{
			resolve: staticResolver(map[string][]netip.Addr{"docs.approved.example": {netip.MustParseAddr("127.0.0.1")}}),
			ask: func(ctx context.Context, req policyRequestParams) (json.RawMessage, error) {
				mu.Lock()
				asked = append(asked, fmt.Sprintf("%s %s:%d", req.Request.Protocol, req.Request.Host, req.Request.Port))
				mu.Unlock()
				return json.RawMessage(`{"decision":{"type":"allow"}}`), nil
			},
		})
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	t.Run("CONNECT", func(t *testing.T) {
		c, err := net.Dial("tcp", p.httpAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT docs.approved.example:%d HTTP/1.1\r\n\r\n", port)
		line, _ := bufio.NewReader(c).ReadString('\n')
		mu.Lock()
		t.Logf("the client was asked %q; the proxy answered %q", asked, strings.TrimSpace(line))
		mu.Unlock()
		if strings.HasPrefix(line, "HTTP/1.1 200") {
			select {
			case <-got:
				t.Errorf("the host's loopback service accepted a connection for an approved name that resolves to 127.0.0.1")
			case <-time.After(5 * time.Second):
			}
		}
	})
	t.Run("SOCKS5 UDP", func(t *testing.T) {
		host, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer host.Close()
		c, err := net.Dial("tcp", p.socksAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "\x05\x01\x00")
		r := bufio.NewReader(c)
		if b := make([]byte, 2); !(readFull(r, b) && b[1] == 0) {
			t.Fatal("SOCKS5 greeting refused")
		}
		c.Write([]byte{5, 3, 0, 1, 0, 0, 0, 0, 0, 0})
		rep := make([]byte, 10)
		if !readFull(r, rep) || rep[1] != 0 {
			t.Fatalf("UDP ASSOCIATE refused: % x", rep)
		}
		relay := netip.AddrPortFrom(netip.AddrFrom4([4]byte(rep[4:8])), binary.BigEndian.Uint16(rep[8:]))
		u, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(relay))
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		name := "docs.approved.example"
		dg := append([]byte{0, 0, 0, 3, byte(len(name))}, name...)
		dg = binary.BigEndian.AppendUint16(dg, uint16(host.LocalAddr().(*net.UDPAddr).Port))
		u.Write(append(dg, "exfil"...))
		host.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 64)
		if n, from, err := host.ReadFrom(buf); err == nil {
			t.Errorf("the host's loopback UDP socket received %q from %v for an approved name that resolves to 127.0.0.1", buf[:n], from)
		}
	})
}
