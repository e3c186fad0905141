package main

// The managed network proxy's policy (docs/network.md §3): how a host is judged (deny globs,
// then local and private addresses, then the allow globs), which methods `limited` mode lets
// through, and the words a refusal carries. How the config it judges by decodes from
// process/start is netproxy_params.go.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Reasons, sources and scopes of a decision, in the reference's words (docs/network.md §3).
const (
	reasonAllow            = "allow"
	reasonDenied           = "denied"
	reasonNotAllowed       = "not_allowed"
	reasonNotAllowedLocal  = "not_allowed_local"
	reasonMethodNotAllowed = "method_not_allowed"
	reasonMITMRequired     = "mitm_required"
	reasonPolicyDenied     = "policy_denied"

	sourceBaseline  = "baseline_policy"
	sourceModeGuard = "mode_guard"
	sourceDecider   = "decider"

	scopeDomain    = "domain"
	scopeNonDomain = "non_domain"
)

// refusalWords is what a refusal says, by its reason, in the reference's words
// (docs/network.md §3): message is the human text (a 403's body, a policyDecision's message),
// header the x-proxy-error value of an HTTP refusal. A reason not listed here
// (policy_denied, a client's refusal) says refusalOther.
var refusalWords = map[string]refusalText{
	reasonNotAllowed:       {"Domain not in allowlist.", "blocked-by-allowlist"},
	reasonDenied:           {"Domain denied by the sandbox policy.", "blocked-by-denylist"},
	reasonNotAllowedLocal:  {"Sandbox policy blocks local/private network addresses.", "blocked-by-allowlist"},
	reasonMethodNotAllowed: {"Method not allowed in limited mode.", "blocked-by-method-policy"},
	reasonMITMRequired:     {"MITM required for limited HTTPS.", "blocked-by-mitm-required"},
}

// refusalOther is the words of a refusal whose reason refusalWords does not list.
var refusalOther = refusalText{"Request blocked by network policy.", "blocked-by-policy"}

// refusalText is one row of refusalWords.
type refusalText struct{ message, header string }

// blockedMessage is the human text of a refusal for reason (refusalWords).
func blockedMessage(reason string) string {
	if w, ok := refusalWords[reason]; ok {
		return w.message
	}
	return refusalOther.message
}

// blockedHeader is the x-proxy-error value of an HTTP refusal for reason (refusalWords).
func blockedHeader(reason string) string {
	if w, ok := refusalWords[reason]; ok {
		return w.header
	}
	return refusalOther.header
}

// allowsMethod reports whether the mode lets an HTTP method through. CONNECT and SOCKS are
// never allowed in limited mode: what they carry cannot be inspected.
func (m networkMode) allowsMethod(method string) bool {
	if m == modeFull {
		return true
	}
	switch method {
	case "GET", "HEAD", "OPTIONS":
		return true
	}
	return false
}

// netPolicy is a proxy config compiled for matching.
type netPolicy struct {
	mode              networkMode
	allow, deny       []string // normalized glob patterns
	explicitAllow     []string // allow entries without wildcards, normalized (local rules)
	review            []string // review-domain globs
	allowListEmpty    bool     // no allow entry at all: every host is not_allowed
	allowLocalBinding bool
}

// compilePolicy expands the config's domain patterns into globs.
func compilePolicy(c *proxyConfig) *netPolicy {
	p := &netPolicy{mode: c.Mode, allowLocalBinding: c.AllowLocalBinding, allowListEmpty: true}
	for pattern, perm := range c.Domains {
		switch perm {
		case domainAllow:
			p.allowListEmpty = false
			p.allow = append(p.allow, expandPattern(pattern)...)
			if t := strings.TrimSpace(pattern); !strings.ContainsAny(t, "*?") {
				p.explicitAllow = append(p.explicitAllow, normalizeHost(t))
			}
		case domainDeny:
			p.deny = append(p.deny, expandPattern(pattern)...)
		}
	}
	for _, r := range c.ReviewDomains {
		p.review = append(p.review, expandPattern(r)...)
	}
	return p
}

// expandPattern turns a domain pattern into the globs it stands for: "*.d" any subdomain of d,
// "**.d" d and its subdomains, anything else the host (with * and ? as globs).
func expandPattern(pattern string) []string {
	p := strings.TrimSpace(pattern)
	if p == "*" {
		return []string{"*"}
	}
	switch {
	case strings.HasPrefix(p, "**."):
		d := normalizeHost(p[3:])
		return []string{d, "?*." + d}
	case strings.HasPrefix(p, "*."):
		return []string{"?*." + normalizeHost(p[2:])}
	}
	return []string{normalizeHost(p)}
}

// normalizeHost lowercases a host, strips brackets, a port after a single colon and trailing
// dots, so that patterns and requests compare alike.
func normalizeHost(h string) string {
	h = strings.TrimSpace(h)
	if strings.HasPrefix(h, "[") {
		if end := strings.IndexByte(h, ']'); end > 0 {
			h = h[1:end]
		}
	} else if strings.Count(h, ":") == 1 {
		h, _, _ = strings.Cut(h, ":")
	}
	h = strings.TrimRight(strings.ToLower(h), ".")
	if ip, scope, ok := strings.Cut(h, "%25"); ok {
		h = ip + "%" + scope
	}
	return h
}

// hostGlobMatch matches host against a glob where * is any run of bytes (dots included) and ? one
// byte; both are ASCII-lowercased already.
func hostGlobMatch(pattern, host string) bool {
	px, hx := 0, 0
	nextPx, nextHx := -1, -1
	for px < len(pattern) || hx < len(host) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				nextPx, nextHx = px, hx+1
				px++
				continue
			case '?':
				if hx < len(host) {
					px++
					hx++
					continue
				}
			default:
				if hx < len(host) && host[hx] == c {
					px++
					hx++
					continue
				}
			}
		}
		if nextPx >= 0 && nextHx <= len(host) {
			px, hx = nextPx, nextHx
			continue
		}
		return false
	}
	return true
}

func matchAny(globs []string, host string) bool {
	for _, g := range globs {
		if hostGlobMatch(g, host) {
			return true
		}
	}
	return false
}

// isLoopbackProxyHost reports whether host is "localhost" or a loopback literal.
func isLoopbackProxyHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, _, _ := strings.Cut(host, "%")
	a, err := netip.ParseAddr(ip)
	return err == nil && a.Unmap().IsLoopback()
}

// nonPublicPrefixes are the IPv4 blocks that are not the public internet beyond what
// netip.Addr classifies (docs/network.md §3: the documentation blocks count as local).
var nonPublicPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// More IPv6 prefixes that carry an IPv4 address: 6to4 (RFC 3056: 2002:7f00:1:: names
// 127.0.0.1) is judged as that address, like NAT64's well-known prefix (nat64Prefix,
// relay_executor.go); NAT64's local-use prefix (RFC 8215) places the IPv4 address where its
// operator chose, so it counts as local whole.
var (
	nat64LocalPrefix = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFourPrefix  = netip.MustParsePrefix("2002::/16")
)

// isNonPublicIP reports whether a is loopback, private, link-local, unspecified, multicast,
// broadcast or one of nonPublicPrefixes (an IPv4-mapped or -compatible, NAT64 or 6to4 IPv6
// address is judged as its IPv4 address).
func isNonPublicIP(a netip.Addr) bool {
	a = a.WithZone("")
	if a.Is6() {
		b := a.As16()
		if a.Is4In6() || (b == [16]byte{12: b[12], 13: b[13], 14: b[14], 15: b[15]} && !a.IsUnspecified() && !a.IsLoopback()) ||
			nat64Prefix.Contains(a) {
			return isNonPublicIP(netip.AddrFrom4([4]byte(b[12:])))
		}
		if sixToFourPrefix.Contains(a) {
			return isNonPublicIP(netip.AddrFrom4([4]byte(b[2:6])))
		}
		if nat64LocalPrefix.Contains(a) {
			return true
		}
		return a.IsLoopback() || a.IsUnspecified() || a.IsMulticast() || a.IsPrivate() || a.IsLinkLocalUnicast()
	}
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast() ||
		a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return true
	}
	for _, p := range nonPublicPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// resolveFunc resolves a host name to its addresses.
type resolveFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// hostVerdict is the baseline policy's verdict on a host: "" when allowed, else a reason,
// and the addresses it checked when it resolved the host (the ones to connect to: a second
// lookup could answer otherwise).
// Its order is the reference's (docs/network.md §3): a deny entry always wins; then, unless
// allowLocalBinding, a local literal needs an exact allow entry; a review domain counts as not
// allowed (the caller may put it to the client); an allowed name must resolve to public
// addresses only (a failed lookup counts as local); then the allow list decides.
func (p *netPolicy) hostVerdict(ctx context.Context, rawHost string, resolve resolveFunc) (string, []netip.Addr) {
	host := normalizeHost(rawHost)
	if host == "" {
		return reasonNotAllowed, nil
	}
	if matchAny(p.deny, host) {
		return reasonDenied, nil
	}
	ipText, _, _ := strings.Cut(host, "%")
	a, ipErr := netip.ParseAddr(ipText)
	literal := ipErr == nil
	if !p.allowLocalBinding && (isLoopbackProxyHost(host) || literal && isNonPublicIP(a)) &&
		!containsString(p.explicitAllow, host) {
		return reasonNotAllowedLocal, nil
	}
	if p.allowListEmpty || !matchAny(p.allow, host) || matchAny(p.review, host) {
		return reasonNotAllowed, nil
	}
	return p.resolvePublic(ctx, host, resolve)
}

// resolvePublic is the policy's last step for a host allowed so far, by the lists or by the
// client: unless allowLocalBinding, a name must resolve, and to public addresses only (a
// failed lookup counts as local); the addresses it checked are the ones to connect to.
func (p *netPolicy) resolvePublic(ctx context.Context, rawHost string, resolve resolveFunc) (string, []netip.Addr) {
	host := normalizeHost(rawHost)
	if p.allowLocalBinding || isLoopbackProxyHost(host) {
		return "", nil
	}
	if _, err := parseIPHost(host); err == nil {
		return "", nil
	}
	addrs, err := resolve(ctx, host)
	if err != nil || len(addrs) == 0 {
		return reasonNotAllowedLocal, nil
	}
	for _, a := range addrs {
		if isNonPublicIP(a) {
			return reasonNotAllowedLocal, nil
		}
	}
	return "", addrs
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// netProxyDNSDialTimeout bounds one connection to the nameserver of netProxyConfig; each
// query's own time is the resolver's (resolv.conf's timeout and attempts).
const netProxyDNSDialTimeout = 5 * time.Second

// proxyResolver is the lookup a proxy resolves names with: the system's resolver, or, with
// nameserver set, Go's own resolver with every query sent to that one server, by UDP and
// by TCP when an answer comes back truncated (docs/network.md §3, "Resolution"). Both run
// the same code from here on: the addresses of A and AAAA, checked by resolvePublic.
func proxyResolver(nameserver netip.AddrPort) resolveFunc {
	r := net.DefaultResolver
	if nameserver.IsValid() {
		d := &net.Dialer{Timeout: netProxyDNSDialTimeout}
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			// The address resolv.conf names is ignored: only the configured server is asked.
			return d.DialContext(ctx, network, nameserver.String())
		}}
	}
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		addrs, err := r.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		return addrs, nil
	}
}
