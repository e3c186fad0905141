package main

// process/start's managed network proxy (docs/network.md §4, §6): what a start asks for is
// checked here, the proxy is started with the session as its client (policyDecision
// notifications, policyRequest questions), and the routing of a sandboxed command through
// the bridge into its network namespace is planned (planProxyRoutes): which loopback proxy
// endpoints of its environment the bridge carries, refusing a start whose routing would not
// hold. The proxy itself is netproxy*.go, the bridge netproxy_bridge_linux.go; both end with
// the process (process.go's sendClosing, the stage's exit) or with a failed start (launch).

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	policyDecisionHead = `{"method":"network/policyDecision","params":`
	policyRequestName  = "network/policyRequest"
)

// checkNetworkProxyEnabled refuses a networkProxy whose proxy is disabled, as the reference
// does before anything else of the start is checked: an executor-local launch is asked for,
// and there would be nothing to launch.
func checkNetworkProxyEnabled(np *networkProxyParams) error {
	if np != nil && !np.Proxy.Enabled {
		return errInvalidParams("invalid network proxy config: executor-local network proxy launch requires an enabled proxy")
	}
	return nil
}

// Transparent TCP's refusals, in the reference's words (docs/network.md §7, measured).
const (
	errTransparentNoSandbox = "transparent TCP requires a managed Linux sandbox"
	errTransparentNoProxy   = "transparent TCP requires an executor-local managed proxy"
	errTransparentNoSocks   = "invalid network proxy config: transparent_tcp requires an enabled managed SOCKS5 proxy"
)

// checkNetworkProxyRequest checks what a start asks of the managed network before anything
// starts, in the reference's order (measured): managedNetwork.transparentTcp without the
// proxy's, the proxy's without a sandbox, a disabled proxy, transparentTcp without SOCKS5.
// Then what the reference starts and then fails (its child dies) is refused here instead:
// transparentTcp under a sandbox that confines nothing or off Linux, and the operator's
// --linux-sandbox-transparent-tcp (transparentFlag) for a routed start that has no proxy to
// judge its connections. A start that asks for transparency never runs without it.
func checkNetworkProxyRequest(p *startParams, sb *processSandbox, transparentFlag bool) error {
	asked := p.NetworkProxy != nil && bool(p.NetworkProxy.Proxy.TransparentTCP)
	switch {
	case p.ManagedNetwork != nil && bool(p.ManagedNetwork.TransparentTCP) && !asked:
		return errInvalidParams(errTransparentNoProxy)
	case asked && sb == nil:
		return errInvalidParams(errTransparentNoSandbox)
	}
	if err := checkNetworkProxyEnabled(p.NetworkProxy); err != nil {
		return err
	}
	switch {
	case asked && !p.NetworkProxy.Proxy.EnableSocks5:
		return errInvalidParams(errTransparentNoSocks)
	case asked && !sandboxConfines(sb):
		return errInvalidParams("%s: this start's sandbox confines nothing (danger-full-access, or a managed sandbox this server runs unsandboxed); refusing rather than run it untransparent (docs/network.md §7)", errTransparentNoSandbox)
	case transparentFlag && bool(p.EnforceManagedNetwork) && sandboxConfines(sb) && p.NetworkProxy == nil:
		return errInvalidParams("%s: --linux-sandbox-transparent-tcp makes this enforceManagedNetwork start transparent, and it has no networkProxy whose policy would judge its connections; refusing rather than run it untransparent (docs/network.md §7)", errTransparentNoProxy)
	case wantsTransparentTCP(p, sb, transparentFlag) && runtime.GOOS != "linux":
		return errInvalidParams("%s: transparent TCP is Linux-only (the capabilities say so: networkProxyTransparentTcp is false here); refusing rather than run it untransparent (docs/network.md §7)", errTransparentNoSandbox)
	}
	return nil
}

// wantsTransparentTCP is the reference's rule (docs/network.md §7): every TCP connection of
// the process goes through its proxy when its sandbox confines it and either it asks
// (networkProxy.proxy.transparentTcp) or the operator's --linux-sandbox-transparent-tcp is on
// and it asks for enforceManagedNetwork. A request's false does not turn the flag off.
func wantsTransparentTCP(p *startParams, sb *processSandbox, transparentFlag bool) bool {
	asked := p.NetworkProxy != nil && bool(p.NetworkProxy.Proxy.TransparentTCP)
	return sandboxConfines(sb) && (asked || transparentFlag && bool(p.EnforceManagedNetwork))
}

// startProcessNetProxy starts the proxy p asks for (nil when it asks for none) and says how
// the command reaches a proxy (docs/network.md §4): route is nil when it is not routed, else
// the loopback ports its proxy variables may name, which the bridge carries into its network
// namespace. As with the reference, routing follows enforceManagedNetwork under a sandbox
// that confines the process, whatever the network mode: with a proxy, the ports are the
// proxy's listeners (the client's managedNetwork is replaced by the proxy's, as the
// reference does); without one, managedNetwork.loopbackPorts (the client's own proxy on this
// host). Without enforceManagedNetwork nothing is routed: a restricted command cannot reach
// the proxy, an enabled one reaches it and everything else directly, as with the reference.
// Without a sandbox (or with one the operator runs unenforced, or danger-full-access)
// enforceManagedNetwork has nothing to enforce, as with the reference.
func (c *call) startProcessNetProxy(p *startParams, sb *processSandbox) (np *netProxy, route *proxyRoute, err error) {
	enabled := p.NetworkProxy != nil && p.NetworkProxy.Proxy.Enabled
	transparent := wantsTransparentTCP(p, sb, c.srv.cfg.netproxy.transparentTCP)
	if transparent && !enabled {
		// checkNetworkProxyRequest refused it already; never route it untransparent.
		return nil, nil, errInvalidParams(errTransparentNoProxy)
	}
	if sandboxConfines(sb) && (bool(p.EnforceManagedNetwork) || transparent) {
		// A transparent process is routed too: its namespace's lo carries its proxy
		// variables' endpoints, every other address the transparent listener.
		if runtime.GOOS != "linux" {
			return nil, nil, errInvalidParams("enforceManagedNetwork: routing a sandboxed process through its proxy needs the Linux namespace bridge; refusing rather than run it with the host's network (docs/network.md §4)")
		}
		route = &proxyRoute{}
		if !enabled && p.ManagedNetwork != nil {
			route.ports = slices.Clone([]uint16(p.ManagedNetwork.LoopbackPorts))
		}
		for _, port := range route.ports {
			if c.srv.listening.reaches(net.IPv4(127, 0, 0, 1), int(port)) {
				return nil, nil, errInvalidParams("enforceManagedNetwork: managedNetwork.loopbackPorts lists %d, a port of this exec-server's own listener: a sandboxed process must not reach it (docs/network.md §4)", port)
			}
		}
	}
	if !enabled {
		return nil, route, nil
	}
	s := c.session()
	if s == nil {
		return nil, nil, errInvalidRequest("networkProxy: no session")
	}
	hooks := sessionNetProxyHooks(s)
	// Every proxy, a sandboxed process's or not: an unsandboxed process's proxy is a hop
	// any local client may take, a sandboxed command included (TestAdv22ChainThroughOtherProxy).
	hooks.dial = c.srv.listening.guardedDial
	// Credential masking (docs/network.md §8): the interception, whose injector gets the
	// process's binding once its environment is final (maskLaunch).
	intercept, err := c.maskIntercept(p)
	if err != nil {
		return nil, nil, err
	}
	np, err = startNetProxy(netProxyConfig{
		processID:     p.ProcessID,
		params:        p.NetworkProxy,
		upstreamHTTP:  os.Getenv("HTTP_PROXY"),
		upstreamHTTPS: os.Getenv("HTTPS_PROXY"),
		tcpUpstream:   string(c.srv.cfg.netproxy.tcpUpstream),
		intercept:     intercept,
	}, hooks)
	if err != nil {
		return nil, nil, errInternal("%s", err)
	}
	if route != nil {
		for _, addr := range []string{np.httpAddr(), np.socksAddr()} {
			if _, port, ok := loopbackEndpoint(addr); ok {
				route.ports = append(route.ports, port)
			}
		}
		if transparent {
			route.transparent = np
		}
		route.proxy = np
		np.closeHostListeners()
	}
	return np, route, nil
}

// closeHostListeners closes a routed process's proxy listeners on the host's 127.0.0.1: its
// command reaches the proxy only through the bridge, which hands the proxy each connection
// itself (serveBridged), so those listeners would serve nobody but other local processes,
// which could take the proxy's connection slots from the command or use it as a hop
// (docs/network.md §4). Their addresses stay the names the routes are planned with; nothing
// dials them. close still closes them (again).
func (p *netProxy) closeHostListeners() {
	p.httpLn.Close()
	if p.socksLn != nil {
		p.socksLn.Close()
	}
}

// netBridgeMaxListeners is how many distinct proxy endpoints one command's bridge carries:
// the proxy's HTTP and SOCKS5 listeners, or the client's own loopback proxies.
const netBridgeMaxListeners = 8

// proxyRoute is a routed command's managed network: the loopback ports of this host its proxy
// variables may name (docs/network.md §4).
type proxyRoute struct {
	ports []uint16
	// proxy, when set, is the process's proxy, whose ports are the routes: the bridge hands
	// it each connection instead of dialling it (serveBridged). Nil with
	// managedNetwork.loopbackPorts (the client's own proxies, dialled).
	proxy *netProxy
	// transparent, when set, is the proxy every other TCP connection of the command goes
	// to (transparent TCP, docs/network.md §7): confine makes the stage transparent to it.
	transparent *netProxy
}

// proxyEnvKeys are the variables whose value names a proxy, upper-cased: the ones the bridge
// routes (any case), as the reference's sandbox reads them (measured: WS_PROXY and
// WSS_PROXY too).
var proxyEnvKeys = []string{
	"HTTP_PROXY", "HTTPS_PROXY", "WS_PROXY", "WSS_PROXY", "ALL_PROXY", "FTP_PROXY",
	"YARN_HTTP_PROXY", "YARN_HTTPS_PROXY", "NPM_CONFIG_HTTP_PROXY", "NPM_CONFIG_HTTPS_PROXY",
	"NPM_CONFIG_PROXY", "BUNDLE_HTTP_PROXY", "BUNDLE_HTTPS_PROXY", "PIP_PROXY",
	"DOCKER_HTTP_PROXY", "DOCKER_HTTPS_PROXY",
}

// isProxyEnvKey reports whether key (any case) is one of proxyEnvKeys.
func isProxyEnvKey(key string) bool {
	return slices.Contains(proxyEnvKeys, strings.ToUpper(key))
}

// proxyEndpointSpan finds the host:port of a proxy variable's value ("scheme://user@host:port/
// path", or "host:port"): the byte offsets of host:port in v, or ok false.
func proxyEndpointSpan(v string) (start, end int, ok bool) {
	if i := strings.Index(v, "://"); i >= 0 {
		start = i + 3
	}
	end = len(v)
	if i := strings.IndexAny(v[start:], "/?#"); i >= 0 {
		end = start + i
	}
	if i := strings.LastIndexByte(v[start:end], '@'); i >= 0 {
		start += i + 1
	}
	return start, end, start < end
}

// loopbackEndpoint parses hostport as an IPv4 loopback endpoint the bridge can carry:
// 127.0.0.1 or localhost (any case) with an explicit port; it returns it as "127.0.0.1:P".
// The reference routes these and leaves any other value (an IPv6 loopback included,
// measured) as it is.
func loopbackEndpoint(hostport string) (string, uint16, bool) {
	host, portText, found := strings.Cut(hostport, ":")
	if !found || (host != "127.0.0.1" && !strings.EqualFold(host, "localhost")) {
		return "", 0, false
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return "", 0, false
	}
	return "127.0.0.1:" + portText, uint16(port), true
}

// The reference's words for a managed routing that cannot be set up (its sandbox helper
// reports them when the command is already started; we refuse the start).
var (
	errRouteNoProxyEnv  = errors.New("managed proxy mode requires proxy environment variables")
	errRouteNoLoopback  = errors.New("managed proxy mode requires parseable loopback proxy endpoints")
	errRouteOutside     = errors.New("proxy endpoint is outside the managed sandbox context")
	errRouteTooManyEnds = errors.New("managed proxy mode: more distinct loopback proxy endpoints than the bridge carries")
)

// planProxyRoutes plans the bridge of a routed command whose environment is env
// (docs/network.md §4): every proxy variable naming a loopback endpoint is written
// "127.0.0.1:P" (the stage rewrites that text to its namespace's listener), and each distinct
// endpoint is returned once, in order, for the server to dial. Each must be one of r's
// ports; at most max endpoints. A proxy variable naming anything else is left as it is (the
// command cannot reach it). Fails closed, with the reference's reasons.
func planProxyRoutes(env []string, r *proxyRoute, max int) (targets []string, out []string, err error) {
	out = make([]string, len(env))
	hasProxy := false
	for i, kv := range env {
		out[i] = kv
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !isProxyEnvKey(k) || strings.TrimSpace(v) == "" {
			continue
		}
		hasProxy = true
		start, end, ok := proxyEndpointSpan(v)
		if !ok {
			continue
		}
		ep, port, ok := loopbackEndpoint(v[start:end])
		if !ok {
			continue
		}
		if !slices.Contains(r.ports, port) {
			return nil, nil, errRouteOutside
		}
		out[i] = k + "=" + v[:start] + ep + v[end:]
		if !slices.Contains(targets, ep) {
			targets = append(targets, ep)
		}
	}
	switch {
	case !hasProxy:
		return nil, nil, errRouteNoProxyEnv
	case len(targets) == 0:
		return nil, nil, errRouteNoLoopback
	case len(targets) > max:
		return nil, nil, errRouteTooManyEnds
	}
	return targets, out, nil
}

// sandboxConfines reports whether sb really confines the process: present, not left
// unenforced by the operator, not danger-full-access.
func sandboxConfines(sb *processSandbox) bool {
	return sb != nil && !sb.unenforced && sb.req.kind != profileDisabled
}

// sessionNetProxyHooks makes session s the proxy's client: decisions become notifications to
// its attached connection, questions server→client requests that end with the proxy.
func sessionNetProxyHooks(s *session) netProxyHooks {
	return netProxyHooks{
		decided: func(d policyDecision) {
			params, err := json.Marshal(d)
			if err != nil {
				return
			}
			msg := make([]byte, 0, len(policyDecisionHead)+len(params)+1)
			msg = append(append(append(msg, policyDecisionHead...), params...), '}')
			s.notify(msg)
		},
		ask: func(ctx context.Context, req policyRequestParams) (json.RawMessage, error) {
			params, err := json.Marshal(req)
			if err != nil {
				return nil, err
			}
			timeout := netProxyDecisionSlack
			if dl, ok := ctx.Deadline(); ok {
				timeout = time.Until(dl)
			}
			return s.askClient(ctx, policyRequestName, params, timeout)
		},
	}
}
