package main

// Adversarial tests of the managed network proxy (docs/network.md §4, §7; SECURITY.md): each
// is an attack a sandboxed, possibly prompt-injected command makes on its proxy, and each
// verdict is read on the host (what the host-side listener really accepted), never from what
// the command prints. A failing TestAdv22* is an open break.

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// advConnectProxy is an operator's HTTP CONNECT proxy on this host (a corporate proxy, or
// the one --tcp-upstream-proxy names): it connects wherever it is asked, as such proxies do
// for loopback targets, and records each target.
type advConnectProxy struct {
	ln      net.Listener
	wg      sync.WaitGroup
	mu      sync.Mutex
	targets []string
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
	up, err := net.Dial("tcp", h.target)
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
	ts := startTestServer(t, func(s *server) { s.cfg.netproxy.tcpUpstream = tcpUpstreamFlag(up.addr()) })
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
	defer func() {
		ws.close()
		<-served
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	tc := ts.connect(t)
	upgrade := `-H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=='`

	t.Run("allowUpstreamProxy", func(t *testing.T) {
		before := counted.accepted()
		script := fmt.Sprintf(`curl -sS -m 5 -p -o /dev/null -w 'tunnel=%%{http_code}\n' %s http://127.0.0.1:%d/`, upgrade, port)
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
		script := fmt.Sprintf(`curl -sS -m 5 -o /dev/null -w 'socks=%%{http_code}\n' %s --proxy "$ALL_PROXY" http://127.0.0.1:%d/`, upgrade, port)
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
