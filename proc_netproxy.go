package main

// process/start's managed network proxy (docs/network.md §6): what a start asks for is
// checked here, the proxy is started with the session as its client (policyDecision
// notifications, policyRequest questions), and a start the proxy cannot serve yet is refused
// rather than run with a proxy its child cannot reach. The proxy itself is netproxy*.go; it
// ends with the process (process.go's sendClosing) or with a failed start (launch).

import (
	"context"
	"encoding/json"
	"os"
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

// startProcessNetProxy starts the proxy p asks for, or returns nil when it asks for none
// (docs/network.md §4, §6). What it refuses, rather than run a process whose network is not
// what the client was promised:
//   - enforceManagedNetwork under a sandbox without a proxy: the child would have no proxy
//     variables (the reference's sandbox helper fails the same way, after the start);
//   - a proxy under a sandbox that restricts the network, or enforceManagedNetwork under any
//     sandbox: the child could reach the proxy only through a listener inside its network
//     namespace, which this server does not make yet.
//
// Without a sandbox (or with one the operator runs unenforced, or danger-full-access)
// enforceManagedNetwork has nothing to enforce, as with the reference.
func (c *call) startProcessNetProxy(p *startParams, sb *processSandbox) (*netProxy, error) {
	enabled := p.NetworkProxy != nil && p.NetworkProxy.Proxy.Enabled
	confined := sandboxConfines(sb)
	if confined && bool(p.EnforceManagedNetwork) && !enabled {
		return nil, errInvalidParams("enforceManagedNetwork: the managed network needs a proxy and networkProxy enables none, so the sandboxed process would have no proxy variables; refusing to start it")
	}
	if !enabled {
		return nil, nil
	}
	if confined && (bool(p.EnforceManagedNetwork) || !sb.req.network) {
		return nil, errInvalidParams("networkProxy: a sandbox with a managed or restricted network needs the bridge that lets the process reach its proxy from inside its network namespace, which this server does not have yet (docs/network.md §4); refusing rather than start a process that cannot reach its proxy")
	}
	s := c.session()
	if s == nil {
		return nil, errInvalidRequest("networkProxy: no session")
	}
	np, err := startNetProxy(netProxyConfig{
		processID:     p.ProcessID,
		params:        p.NetworkProxy,
		upstreamHTTP:  os.Getenv("HTTP_PROXY"),
		upstreamHTTPS: os.Getenv("HTTPS_PROXY"),
		tcpUpstream:   string(c.srv.cfg.netproxy.tcpUpstream),
	}, sessionNetProxyHooks(s))
	if err != nil {
		return nil, errInternal("%s", err)
	}
	return np, nil
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
