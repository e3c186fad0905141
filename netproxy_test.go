package main

// Tests of the managed network proxy (docs/network.md): its params as the reference decodes
// them, its policy table, and the proxy itself with real sockets in a network namespace the
// test makes, with test hosts on documentation addresses only.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestNetProxyParamsVectors decodes testdata/netproxy/params.txt's values as process/start
// would, and compares each answer with the reference's.
func TestNetProxyParamsVectors(t *testing.T) {
	type startNetFields struct {
		NetworkProxy   *networkProxyParams   `json:"networkProxy,omitempty"`
		ManagedNetwork *managedNetworkParams `json:"managedNetwork,omitempty"`
	}
	for _, c := range readVectors(t, "testdata/netproxy/params.txt") {
		c.only(t, "name", "networkProxy", "managedNetwork", "result", "error")
		key, val := "networkProxy", c.fields["networkProxy"]
		if v, ok := c.fields["managedNetwork"]; ok {
			key, val = "managedNetwork", v
		}
		raw, _ := json.Marshal(map[string]json.RawMessage{key: json.RawMessage(val)})
		var p startNetFields
		err := decodeParams(raw, "ExecParams", &p)
		var rerr *rpcError
		res := json.RawMessage("ok")
		if err != nil {
			rerr = toRPCErrorForTest(err)
			res = nil
		}
		c.checkCall(t, c.name(), res, rerr)
	}
}

func toRPCErrorForTest(err error) *rpcError {
	if re, ok := err.(*rpcError); ok {
		return re
	}
	return &rpcError{Code: -1, Message: err.Error()}
}

// netProxyBaseConfig is the proxy config the tests start from.
const netProxyBaseConfig = `{"enabled":true,"enableSocks5":true,"enableSocks5Udp":true,"allowUpstreamProxy":false,"dangerouslyAllowAllUnixSockets":false,"mode":"full","allowLocalBinding":false}`

// netProxyParamsFor decodes the base config with over's fields on top, as process/start would.
func netProxyParamsFor(t testing.TB, over string, timeoutMs *uint64) *networkProxyParams {
	t.Helper()
	var base, extra map[string]json.RawMessage
	if err := json.Unmarshal([]byte(netProxyBaseConfig), &base); err != nil {
		t.Fatal(err)
	}
	if over != "" {
		if err := json.Unmarshal([]byte(over), &extra); err != nil {
			t.Fatalf("proxy %s: %v", over, err)
		}
	}
	for k, v := range extra {
		base[k] = v
	}
	np := map[string]any{"proxy": base}
	if timeoutMs != nil {
		np["policyDecisionTimeoutMs"] = *timeoutMs
	}
	raw, _ := json.Marshal(np)
	var p networkProxyParams
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return &p
}

// staticResolver answers from a table: the test's DNS.
func staticResolver(table map[string][]netip.Addr) resolveFunc {
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		if a, ok := table[host]; ok {
			return a, nil
		}
		return nil, fmt.Errorf("resolve %s: no such host", host)
	}
}

// TestNetProxyPolicyTable judges each request of testdata/netproxy/policy.txt with the
// proxy's decide and compares the verdict, the notifications and whether the client was
// asked with the reference's.
func TestNetProxyPolicyTable(t *testing.T) {
	for _, c := range readVectors(t, "testdata/netproxy/policy.txt") {
		c.only(t, "name", "proxy", "timeout", "answer", "request", "dns", "want", "decisions", "asked")
		t.Run(c.name(), func(t *testing.T) {
			var timeout *uint64
			if ms, ok := c.fields["timeout"]; ok {
				n, err := strconv.ParseUint(ms, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				timeout = &n
			}
			dns := map[string][]netip.Addr{}
			for _, e := range strings.Fields(c.fields["dns"]) {
				name, addrs, _ := strings.Cut(e, "=")
				for _, a := range strings.Split(addrs, ",") {
					dns[name] = append(dns[name], netip.MustParseAddr(a))
				}
			}
			var mu sync.Mutex
			var got []string
			asked := false
			hooks := netProxyHooks{
				resolve: staticResolver(dns),
				decided: func(d policyDecision) {
					mu.Lock()
					defer mu.Unlock()
					s := d.Scope + " " + d.Decision + " " + d.Source + " " + d.Reason
					if d.PolicyOverride {
						s += " override"
					}
					got = append(got, s)
				},
				ask: func(ctx context.Context, req policyRequestParams) (json.RawMessage, error) {
					asked = true
					if c.fields["answer"] == "none" {
						<-ctx.Done()
						return nil, ctx.Err()
					}
					return json.RawMessage(c.fields["answer"]), nil
				},
			}
			p, err := startNetProxy(netProxyConfig{processID: "p1", params: netProxyParamsFor(t, c.fields["proxy"], timeout)}, hooks)
			if err != nil {
				t.Fatal(err)
			}
			defer p.close()
			if p.timeout > 0 {
				p.timeout = 50 * time.Millisecond // the client's silence, shortened
			}
			f := strings.Fields(c.field(t, "request"))
			port, _ := strconv.ParseUint(f[2], 10, 16)
			r := netRequest{protocol: f[0], host: normalizeHost(f[1]), port: uint16(port), client: "127.0.0.1:1"}
			if len(f) > 3 {
				r.method = f[3]
			}
			v := p.decide(context.Background(), r)
			verdict := "allow"
			if !v.allowed {
				verdict = v.decision + " " + v.reason + " " + v.source
			}
			if want := c.field(t, "want"); verdict != want {
				t.Errorf("verdict %q, want %q", verdict, want)
			}
			if g, want := strings.Join(got, "; "), c.fields["decisions"]; g != want {
				t.Errorf("decisions %q, want %q", g, want)
			}
			if want := c.fields["asked"] == "yes"; asked != want {
				t.Errorf("asked the client: %v, want %v", asked, want)
			}
		})
	}
}
