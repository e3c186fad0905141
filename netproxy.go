package main

// The per-process managed network proxy (docs/network.md): for a process/start with
// networkProxy, an HTTP proxy and (with enableSocks5) a SOCKS5 proxy on 127.0.0.1 ephemeral
// ports, the child's proxy variables, one decision per proxied request (the policy of
// netproxy_policy.go, then the client when the policy leaves a host undecided), and an end
// that takes every listener, connection and goroutine with it. The core supplies the hooks:
// its notifications, its server→client requests, and (for tests) the dialer and resolver.
// Names are resolved by Go's resolver, the system's or one aimed at netProxyConfig.nameserver.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Limits of one process's proxy (docs/network.md §5).
const (
	// netProxyMaxConns bounds the client connections open at once, both listeners together;
	// one more is closed as soon as it is accepted.
	netProxyMaxConns = 256
	// netProxyMaxHeaderBytes bounds an HTTP request head (request line and headers).
	netProxyMaxHeaderBytes = 32 << 10
	// netProxyMaxPendingDecisions bounds the network/policyRequest calls awaiting the client;
	// a request beyond it is refused at once, as on a timeout.
	netProxyMaxPendingDecisions = 256
	// netProxyHeadTimeout bounds the wait for a request head or a SOCKS handshake.
	netProxyHeadTimeout = 30 * time.Second
	// netProxyIdleTimeout ends a tunnel or a forwarded exchange that moved no byte, in either
	// direction, for so long (netProxyConfig.idleTimeout overrides it).
	netProxyIdleTimeout = 10 * time.Minute
	// netProxyDialTimeout bounds a connection to a destination.
	netProxyDialTimeout = 30 * time.Second
	// netProxyDecisionSlack is added to policyDecisionTimeoutMs: the client's own timeout
	// should answer first (the reference's slack).
	netProxyDecisionSlack = 5 * time.Second
	// netProxyCopyBuffer is the buffer of one direction of a relayed connection that is not
	// TCP to TCP.
	netProxyCopyBuffer = 64 << 10
	// netProxyDrainBytes and netProxyDrainTimeout bound what is read and dropped from a
	// client after its answer (a refusal, or a forwarded request's response) before the
	// close, so that the close does not reset the connection before the client reads it.
	netProxyDrainBytes   = 64 << 10
	netProxyDrainTimeout = time.Second
)

// netProxyConfig is what a process's proxy is started with.
type netProxyConfig struct {
	processID string
	params    *networkProxyParams
	// upstreamHTTP and upstreamHTTPS are the server's HTTP_PROXY and HTTPS_PROXY, used when
	// proxy.allowUpstreamProxy is set (empty: connect directly).
	upstreamHTTP, upstreamHTTPS string
	// tcpUpstream is the server's --tcp-upstream-proxy ("host:port"): every raw TCP
	// connection of the SOCKS side goes through it by CONNECT (docs/network.md §7); "": none.
	tcpUpstream string
	// idleTimeout ends a tunnel idle for so long; 0: netProxyIdleTimeout (tests shorten it).
	idleTimeout time.Duration
	// intercept, when set, intercepts the CONNECTs to credential destinations
	// (netproxy_intercept.go); nil: every CONNECT is spliced.
	intercept *interceptConfig
	// nameserver, when set, is the one DNS server the proxy's resolver asks (UDP, and TCP
	// for an answer too large for a datagram) instead of those of the system's resolv.conf;
	// the lookup code is the same (docs/network.md §3, "Resolution"). The tests aim it at a
	// server they run; the zero value is the system's resolver.
	nameserver netip.AddrPort
}

// netProxyHooks are what the core gives a proxy. Every field may be nil: decided drops the
// notification, ask refuses (as a timeout does), dial and resolve use the system's.
type netProxyHooks struct {
	// decided receives one network/policyDecision notification per decision.
	decided func(policyDecision)
	// ask sends network/policyRequest to the client and returns its result, or an error; it
	// must return when ctx ends.
	ask func(ctx context.Context, req policyRequestParams) (json.RawMessage, error)
	// dial connects to a destination ("tcp" or "udp", "host:port").
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// resolve resolves a host name for the local-address check and for dialing; nil: the
	// proxy's own resolver (proxyResolver, netProxyConfig.nameserver). Tests that need a
	// lookup to change between two steps of one request use it; the others run a DNS server.
	resolve resolveFunc
}

// policyDecision is the params of the network/policyDecision notification, in the
// reference's key order.
type policyDecision struct {
	ProcessID      string `json:"processId"`
	Timestamp      string `json:"timestamp"`
	Scope          string `json:"scope"`
	Decision       string `json:"decision"`
	Source         string `json:"source"`
	Reason         string `json:"reason"`
	Protocol       string `json:"protocol"`
	Host           string `json:"host"`
	Port           uint16 `json:"port"`
	Method         string `json:"method,omitempty"`
	Client         string `json:"client,omitempty"`
	PolicyOverride bool   `json:"policyOverride"`
}

// policyRequestParams is the params of the network/policyRequest server→client request.
type policyRequestParams struct {
	ProcessID string              `json:"processId"`
	Request   policyRequestTarget `json:"request"`
}

type policyRequestTarget struct {
	Protocol string `json:"protocol"`
	Host     string `json:"host"`
	Port     uint16 `json:"port"`
}

// policyAnswer is the client's result of a network/policyRequest.
type policyAnswer struct {
	Decision *struct {
		Type   string `json:"type"`
		Reason string `json:"reason"`
	} `json:"decision"`
}

// Protocols of a proxied request, in the reference's words.
const (
	protoHTTP         = "http"
	protoHTTPSConnect = "https_connect"
	protoSocksTCP     = "socks5_tcp"
	protoSocksUDP     = "socks5_udp"
)

// netProxy is one process's proxy.
type netProxy struct {
	cfg     netProxyConfig
	policy  *netPolicy
	hooks   netProxyHooks
	timeout time.Duration // the client's decision timeout with slack; 0: no client review

	httpLn, socksLn net.Listener
	udpAllowed      bool
	mitm            *mitmProxy // nil: no interception

	ctx    context.Context // ends at close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the proxy started
	slots  chan struct{}  // one per open client connection (netProxyMaxConns)
	asks   chan struct{}  // one per pending client decision (netProxyMaxPendingDecisions)

	mu     sync.Mutex
	conns  map[io.Closer]struct{} // every open socket, closed by close
	closed bool
}

// startNetProxy starts a process's proxy, or returns nil when the config does not enable one
// (the child then gets no proxy variables, as with the reference).
func startNetProxy(cfg netProxyConfig, hooks netProxyHooks) (*netProxy, error) {
	if cfg.params == nil || !cfg.params.Proxy.Enabled {
		return nil, nil
	}
	pc := &cfg.params.Proxy
	if hooks.resolve == nil {
		hooks.resolve = proxyResolver(cfg.nameserver)
	}
	if hooks.dial == nil {
		d := &net.Dialer{Timeout: netProxyDialTimeout}
		hooks.dial = d.DialContext
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &netProxy{
		cfg: cfg, policy: compilePolicy(pc), hooks: hooks,
		udpAllowed: pc.EnableSocks5UDP,
		ctx:        ctx, cancel: cancel,
		slots: make(chan struct{}, netProxyMaxConns),
		asks:  make(chan struct{}, netProxyMaxPendingDecisions),
		conns: map[io.Closer]struct{}{},
	}
	if t := cfg.params.PolicyDecisionTimeoutMs; t != nil {
		p.timeout = time.Duration(min(*t, uint64(time.Duration(1<<62)/time.Millisecond)))*time.Millisecond + netProxyDecisionSlack
	}
	if cfg.intercept != nil {
		p.mitm = newMITMProxy(p, *cfg.intercept)
	}
	var err error
	if p.httpLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		cancel()
		return nil, fmt.Errorf("network proxy: listen for HTTP: %w", err)
	}
	if pc.EnableSocks5 {
		if p.socksLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			p.httpLn.Close()
			cancel()
			return nil, fmt.Errorf("network proxy: listen for SOCKS5: %w", err)
		}
	}
	p.goServe(p.httpLn, p.serveHTTP)
	if p.socksLn != nil {
		p.goServe(p.socksLn, p.serveSocks)
	}
	return p, nil
}

// goServe accepts on ln until close, each connection served by serve in its own goroutine.
func (p *netProxy) goServe(ln net.Listener, serve func(net.Conn)) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		backoff := time.Duration(0)
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) || p.ctx.Err() != nil {
					return
				}
				// Out of descriptors or the like: wait, then go on accepting.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
				case <-p.ctx.Done():
					return
				}
				continue
			}
			backoff = 0
			select {
			case p.slots <- struct{}{}:
			default:
				c.Close() // over netProxyMaxConns
				continue
			}
			if !p.track(c) {
				<-p.slots
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer func() { <-p.slots }()
				defer p.untrackClose(c)
				serve(c)
			}()
		}
	}()
}

// track registers a socket for close; false when the proxy is already closed (c is closed).
func (p *netProxy) track(c io.Closer) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *netProxy) untrackClose(c io.Closer) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// close ends the listeners and every proxied connection, cancels pending client decisions,
// and returns when every goroutine the proxy started has ended. It may be called twice.
func (p *netProxy) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	already := p.closed
	p.closed = true
	conns := p.conns
	p.conns = map[io.Closer]struct{}{}
	p.mu.Unlock()
	if !already {
		p.cancel()
		p.httpLn.Close()
		if p.socksLn != nil {
			p.socksLn.Close()
		}
		for c := range conns {
			c.Close()
		}
	}
	p.wg.Wait()
}

// httpAddr and socksAddr are the listeners' addresses ("" for SOCKS when not enabled).
func (p *netProxy) httpAddr() string { return p.httpLn.Addr().String() }

func (p *netProxy) socksAddr() string {
	if p.socksLn == nil {
		return ""
	}
	return p.socksLn.Addr().String()
}

// proxyEnvNoProxyLocal is NO_PROXY and its kin when local binding is allowed: local
// destinations then bypass the proxy.
const proxyEnvNoProxyLocal = "localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"

// env returns the variables the child gets, exactly the reference's set (docs/network.md §2):
// the HTTP proxy's URL for HTTP(S), websockets and the package managers, the SOCKS5 one
// (socks5h, so names resolve at the proxy) for ALL_PROXY and FTP_PROXY when SOCKS5 is
// enabled (else the HTTP one), NO_PROXY empty unless local binding is allowed.
func (p *netProxy) env() map[string]string {
	httpURL := "http://" + p.httpAddr()
	allURL := httpURL
	if p.socksLn != nil {
		allURL = "socks5h://" + p.socksAddr()
	}
	noProxy, localBinding := "", "0"
	if p.policy.allowLocalBinding {
		noProxy, localBinding = proxyEnvNoProxyLocal, "1"
	}
	env := map[string]string{
		"CODEX_NETWORK_ALLOW_LOCAL_BINDING": localBinding,
		"CODEX_NETWORK_PROXY_ACTIVE":        "1",
		"ELECTRON_GET_USE_PROXY":            "true",
		"NODE_USE_ENV_PROXY":                "1",
	}
	for _, k := range []string{"ALL_PROXY", "FTP_PROXY", "all_proxy", "ftp_proxy"} {
		env[k] = allURL
	}
	for _, k := range []string{
		"HTTP_PROXY", "HTTPS_PROXY", "WS_PROXY", "WSS_PROXY",
		"http_proxy", "https_proxy", "ws_proxy", "wss_proxy",
		"BUNDLE_HTTP_PROXY", "BUNDLE_HTTPS_PROXY", "DOCKER_HTTP_PROXY", "DOCKER_HTTPS_PROXY",
		"YARN_HTTP_PROXY", "YARN_HTTPS_PROXY", "PIP_PROXY",
		"NPM_CONFIG_PROXY", "NPM_CONFIG_HTTP_PROXY", "NPM_CONFIG_HTTPS_PROXY",
		"npm_config_proxy", "npm_config_http_proxy", "npm_config_https_proxy",
	} {
		env[k] = httpURL
	}
	for _, k := range []string{"NO_PROXY", "no_proxy", "BUNDLE_NO_PROXY", "NPM_CONFIG_NOPROXY", "npm_config_noproxy"} {
		env[k] = noProxy
	}
	return env
}

// netRequest is one request to judge.
type netRequest struct {
	protocol string
	host     string
	port     uint16
	method   string // HTTP only
	client   string
}

// Decisions of a policy notification, a refusal's body and a client's answer, in the
// reference's words.
const (
	decisionAllow = "allow"
	decisionDeny  = "deny"
	decisionAsk   = "ask"
)

// netVerdict is a judgement: allowed, or refused with the words of the refusal.
type netVerdict struct {
	allowed  bool
	decision string // decisionDeny or decisionAsk when refused
	reason   string
	source   string
	addrs    []netip.Addr // the addresses the policy checked, to connect to; nil: resolve
}

func (v netVerdict) message() string {
	if v.source == sourceDecider && v.reason != reasonNotAllowed {
		return blockedMessage("")
	}
	return blockedMessage(v.reason)
}

// decide judges a request as the reference does (docs/network.md §3) and sends its
// notifications. SOCKS in limited mode is refused before the host is looked at; otherwise
// the host policy decides, the client where the policy leaves it undecided and the process
// gave a decision timeout, and then the mode guard.
func (p *netProxy) decide(ctx context.Context, r netRequest) netVerdict {
	socks := r.protocol == protoSocksTCP || r.protocol == protoSocksUDP
	if socks && p.policy.mode == modeLimited {
		return p.refuse(r, scopeNonDomain, decisionDeny, reasonMethodNotAllowed, sourceModeGuard, false)
	}
	reason, addrs := p.policy.hostVerdict(ctx, r.host, p.hooks.resolve)
	switch {
	case reason == "":
		p.notify(r, scopeDomain, decisionAllow, reasonAllow, sourceBaseline, false)
	case reason == reasonNotAllowed && p.timeout > 0:
		v := p.askClient(ctx, r)
		if !v.allowed {
			return p.refuse(r, scopeDomain, v.decision, v.reason, v.source, false)
		}
		p.notify(r, scopeDomain, decisionAllow, reasonNotAllowed, sourceDecider, true)
	default:
		return p.refuse(r, scopeDomain, decisionDeny, reason, sourceBaseline, false)
	}
	if !socks && !p.policy.mode.allowsMethod(r.method) && !(r.method == "CONNECT" && p.mitm.intercepts(r.host, r.port)) {
		reason := reasonMethodNotAllowed
		if r.method == "CONNECT" {
			reason = reasonMITMRequired
		}
		return p.refuse(r, scopeNonDomain, decisionDeny, reason, sourceModeGuard, false)
	}
	return netVerdict{allowed: true, addrs: addrs}
}

func (p *netProxy) refuse(r netRequest, scope, decision, reason, source string, override bool) netVerdict {
	p.notify(r, scope, decision, reason, source, override)
	return netVerdict{decision: decision, reason: reason, source: source}
}

// notify sends one network/policyDecision.
func (p *netProxy) notify(r netRequest, scope, decision, reason, source string, override bool) {
	if p.hooks.decided == nil {
		return
	}
	p.hooks.decided(policyDecision{
		ProcessID: p.cfg.processID,
		Timestamp: time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
		Scope:     scope, Decision: decision, Source: source, Reason: reason,
		Protocol: r.protocol, Host: r.host, Port: r.port, Method: r.method, Client: r.client,
		PolicyOverride: override,
	})
}

// askClient puts a request to the client and maps its answer; no answer in time, an error,
// a malformed answer or too many pending questions deny it as not allowed.
func (p *netProxy) askClient(ctx context.Context, r netRequest) netVerdict {
	deny := netVerdict{decision: decisionDeny, reason: reasonNotAllowed, source: sourceDecider}
	if p.hooks.ask == nil {
		return deny
	}
	select {
	case p.asks <- struct{}{}:
		defer func() { <-p.asks }()
	default:
		return deny
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	raw, err := p.hooks.ask(ctx, policyRequestParams{
		ProcessID: p.cfg.processID,
		Request:   policyRequestTarget{Protocol: r.protocol, Host: r.host, Port: r.port},
	})
	if err != nil {
		return deny
	}
	var a policyAnswer
	if json.Unmarshal(raw, &a) != nil || a.Decision == nil {
		return deny
	}
	switch a.Decision.Type {
	case decisionAllow:
		return netVerdict{allowed: true}
	case decisionDeny, decisionAsk:
		reason := a.Decision.Reason
		if reason == "" {
			reason = reasonPolicyDenied
		}
		return netVerdict{decision: a.Decision.Type, reason: reason, source: sourceDecider}
	}
	return deny
}

// dialTarget connects to an allowed destination: to the addresses the policy checked when
// it resolved the host, else to what the host resolves to now (a name the client approved,
// which the policy did not resolve: its addresses are checked here, checkResolved); through
// the server's upstream proxy instead when the process allows it and the server has one,
// except for a local destination, which is always dialled here, through hooks.dial (the
// guard against this server's own listeners): an upstream would dial it from where that
// guard cannot see, and "loopback stays local" as with the reference. early is what an
// upstream proxy sent after its answer's head (a server that speaks first), for the client.
// An upstream setting this proxy cannot use fails the dial (errUpstreamUnusable): going
// direct instead would bypass the proxy the server was told to use.
func (p *netProxy) dialTarget(ctx context.Context, host string, port uint16, checked []netip.Addr) (c net.Conn, early []byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, netProxyDialTimeout)
	defer cancel()
	addr := net.JoinHostPort(normalizeHost(host), strconv.Itoa(int(port)))
	if !isLocalDestination(host, checked) {
		up, err := p.upstream()
		if err != nil {
			return nil, nil, err
		}
		if up != "" {
			return dialUpstreamConnect(ctx, p.hooks.dial, up, addr)
		}
	}
	c, err = p.dialDirect(ctx, host, addr, port, checked)
	return c, nil, err
}

// dialDirect connects to an allowed destination from here (dialTarget without upstream).
func (p *netProxy) dialDirect(ctx context.Context, host, addr string, port uint16, checked []netip.Addr) (net.Conn, error) {
	if _, err := parseIPHost(host); err != nil {
		addrs := checked
		if addrs == nil {
			var err error
			if addrs, err = p.hooks.resolve(ctx, normalizeHost(host)); err != nil {
				if p.checkResolved(host, nil) != nil {
					return nil, fmt.Errorf("%w: %v", errResolvedLocal, err)
				}
				return nil, err
			}
			if err := p.checkResolved(host, addrs); err != nil {
				return nil, err
			}
		}
		var last error
		for _, a := range addrs {
			c, err := p.hooks.dial(ctx, "tcp", net.JoinHostPort(a.String(), strconv.Itoa(int(port))))
			if err == nil {
				return c, nil
			}
			last = err
		}
		if last == nil {
			last = fmt.Errorf("resolve %s: no address", host)
		}
		return nil, last
	}
	return p.hooks.dial(ctx, "tcp", addr)
}

// errUpstreamUnusable: the server's upstream proxy setting is one this proxy cannot speak to.
var errUpstreamUnusable = errors.New("the upstream proxy setting is not an http:// proxy")

// upstream is the upstream proxy's host:port to use, or "" for none: the first of
// HTTPS_PROXY and HTTP_PROXY that is a plain HTTP proxy; errUpstreamUnusable when the
// process allows an upstream and the server has one set, but none it can use
// (https://, socks5://, a malformed URL).
func (p *netProxy) upstream() (string, error) {
	if !p.cfg.params.Proxy.AllowUpstreamProxy {
		return "", nil
	}
	set := false
	for _, u := range []string{p.cfg.upstreamHTTPS, p.cfg.upstreamHTTP} {
		if hp := upstreamHostPort(u); hp != "" {
			return hp, nil
		}
		set = set || u != ""
	}
	if set {
		return "", errUpstreamUnusable
	}
	return "", nil
}

// idleOf is the proxy's idle time (netProxyConfig.idleTimeout, else netProxyIdleTimeout).
func (p *netProxy) idleOf() time.Duration {
	if p.cfg.idleTimeout > 0 {
		return p.cfg.idleTimeout
	}
	return netProxyIdleTimeout
}

// relay copies between client and up in both directions (relayConns) with the proxy's idle
// time.
func (p *netProxy) relay(client, up net.Conn) {
	relayConns(client, up, p.idleOf())
}

// relayConns copies between client and up in both directions until both sides end, or until
// the tunnel's one idle clock finds that neither direction moved a byte for idle
// (docs/network.md §5). It returns when its copying goroutine has ended.
func relayConns(client, up net.Conn, idle time.Duration) {
	k := startIdleClock(idle, client, up)
	defer k.stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if k.copy(up, client) != nil {
			up.Close()
			client.Close()
			return
		}
		closeWrite(up)
	}()
	if err := k.copy(client, up); err != nil {
		up.Close()
		client.Close()
	} else {
		closeWrite(client)
	}
	<-done
}

// drainClient reads and drops what the client still sends, up to netProxyDrainBytes and
// until its read deadline, so that closing c after an answer does not reset the connection
// (a close with unread bytes sends RST, and the client may lose the answer).
func drainClient(c net.Conn) {
	io.CopyN(io.Discard, c, netProxyDrainBytes)
}

// finishRefused ends a connection the proxy answered with a refusal (403, 400): a FIN after
// the answer, then drainClient for at most netProxyDrainTimeout.
func finishRefused(c net.Conn) {
	closeWrite(c)
	c.SetReadDeadline(time.Now().Add(netProxyDrainTimeout))
	drainClient(c)
}

// idleClockTicks is how many times per idle time a tunnel's idle clock looks: a silent
// tunnel ends between idle and idle+idle/idleClockTicks after its last byte.
const idleClockTicks = 4

// idleClock is one tunnel's idle clock: one timer (no goroutine while it waits) that every
// idle/idleClockTicks reads how far the tunnel got, each TCP socket's kernel counters of
// bytes received and bytes acknowledged (tcpProgress, which sees what splice(2) moves) plus
// the bytes the copying loops counted themselves (moved), and closes both ends once that
// figure did not change for idle. Either direction's bytes renew it.
type idleClock struct {
	idle  time.Duration
	conns [2]net.Conn
	moved atomic.Uint64 // bytes the plain copying loops moved

	mu      sync.Mutex
	timer   *time.Timer
	last    uint64    // progress at the last change
	since   time.Time // when the last change was seen
	stopped bool
}

func startIdleClock(idle time.Duration, a, b net.Conn) *idleClock {
	k := &idleClock{idle: idle, conns: [2]net.Conn{a, b}}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.last, k.since = k.progress(), time.Now()
	k.timer = time.AfterFunc(idle/idleClockTicks, k.tick)
	return k
}

// progress is a figure that grows whenever a byte moves on the tunnel.
func (k *idleClock) progress() uint64 {
	n := k.moved.Load()
	for _, c := range k.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			if m, ok := tcpProgress(tc); ok {
				n += m
			}
		}
	}
	return n
}

func (k *idleClock) tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	now := time.Now()
	if n := k.progress(); n != k.last {
		k.last, k.since = n, now
	} else if now.Sub(k.since) >= k.idle {
		k.stopped = true
		for _, c := range k.conns {
			c.Close()
		}
		return
	}
	k.timer.Reset(k.idle / idleClockTicks)
}

// stop ends the clock; a tick already running finishes first.
func (k *idleClock) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	k.timer.Stop()
}

// copy copies src to dst until src's end (nil) or an error. Between two TCP sockets, where
// the kernel counts the bytes for the clock, they move by splice(2) (net.TCPConn.ReadFrom);
// otherwise through a buffer, counted in moved.
func (k *idleClock) copy(dst net.Conn, src io.Reader) error {
	if tcpCountsKernel {
		if d, ok := dst.(*net.TCPConn); ok {
			s := src
			if lr, ok := src.(*io.LimitedReader); ok { // a length-framed body: splice too
				s = lr.R
			}
			if _, ok := s.(*net.TCPConn); ok {
				_, err := d.ReadFrom(src)
				return err
			}
		}
	}
	buf := make([]byte, netProxyCopyBuffer)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			k.moved.Add(uint64(n))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// closeWrite half-closes c where it can, else closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// isLocalDestination reports whether host (or an address the policy checked for it) is local:
// loopback, private, link-local or the like (isNonPublicIP), or localhost.
func isLocalDestination(host string, checked []netip.Addr) bool {
	h := normalizeHost(host)
	if isLoopbackProxyHost(h) {
		return true
	}
	if a, err := parseIPHost(h); err == nil && isNonPublicIP(a) {
		return true
	}
	for _, a := range checked {
		if isNonPublicIP(a) {
			return true
		}
	}
	return false
}

// errResolvedLocal: a name resolved at connect time has a local address the policy refuses.
var errResolvedLocal = errors.New("the name resolves to a local address")

// checkResolved refuses a name resolved at connect time (one the policy did not resolve: a
// name the client approved) when it has a local address or none, unless allowLocalBinding:
// the client approved a name, not whatever it points at. The reference checks at connect
// time too, and answers not_allowed_local (docs/network.md §3, step 5).
func (p *netProxy) checkResolved(host string, addrs []netip.Addr) error {
	if p.policy.allowLocalBinding || isLoopbackProxyHost(normalizeHost(host)) {
		return nil
	}
	if len(addrs) == 0 {
		return fmt.Errorf("%w: %s has no address", errResolvedLocal, host)
	}
	for _, a := range addrs {
		if isNonPublicIP(a) {
			return fmt.Errorf("%w: %s resolves to %s", errResolvedLocal, host, a)
		}
	}
	return nil
}

// refusedAtConnect is the verdict of a dial that checkResolved refused, with its
// notification; ok is false for any other dial error.
func (p *netProxy) refusedAtConnect(r netRequest, err error) (netVerdict, bool) {
	if !errors.Is(err, errResolvedLocal) {
		return netVerdict{}, false
	}
	return p.refuse(r, scopeDomain, decisionDeny, reasonNotAllowedLocal, sourceBaseline, false), true
}
