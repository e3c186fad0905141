package main

// The managed network proxy's request fields and its policy (docs/network.md): how
// process/start.networkProxy decodes (serde's words, as the reference answers them), how a
// host is judged (deny globs, then local and private addresses, then the allow globs), which
// methods `limited` mode lets through, and the words a refusal carries.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// networkProxyParams is process/start.networkProxy (docs/network.md §1).
type networkProxyParams struct {
	Proxy         proxyConfig        `json:"proxy"`
	AuditMetadata proxyAuditMetadata `json:"auditMetadata,omitempty"`
	EnvironmentID *string            `json:"environmentId"`
	ExecutionID   *string            `json:"executionId"`
	// PolicyDecisionTimeoutMs, when present, puts undecided hosts and review domains to
	// the client (network/policyRequest); without it they are refused.
	PolicyDecisionTimeoutMs *uint64 `json:"policyDecisionTimeoutMs"`
}

func (p *networkProxyParams) UnmarshalJSON(raw []byte) error {
	type plain networkProxyParams
	if err := decodeParams(raw, "RemoteNetworkProxyLaunchConfig", (*plain)(p)); err != nil {
		return err
	}
	return p.Proxy.validate()
}

// proxyConfig is networkProxy.proxy. Its field order is the reference's: a missing field is
// named in this order.
type proxyConfig struct {
	Enabled                        bool                      `json:"enabled"`
	EnableSocks5                   bool                      `json:"enableSocks5"`
	EnableSocks5UDP                bool                      `json:"enableSocks5Udp"`
	AllowUpstreamProxy             bool                      `json:"allowUpstreamProxy"`
	DangerouslyAllowAllUnixSockets bool                      `json:"dangerouslyAllowAllUnixSockets"`
	Mode                           networkMode               `json:"mode"`
	Domains                        map[string]domainPerm     `json:"domains,omitempty"`
	UnixSockets                    map[string]unixSocketPerm `json:"unixSockets,omitempty"`
	AllowLocalBinding              bool                      `json:"allowLocalBinding"`
	ReviewDomains                  defaultStrings            `json:"reviewDomains,omitempty"`
	CredentialMasking              defaultBool               `json:"credentialMasking,omitempty"`
	// CredentialProviders are decoded and kept; masking is not offered yet (docs/network.md).
	CredentialProviders credentialProviders `json:"credentialProviders,omitempty"`
	TransparentTCP      defaultBool         `json:"transparentTcp,omitempty"`
}

func (c *proxyConfig) UnmarshalJSON(raw []byte) error {
	type plain proxyConfig
	return decodeParams(raw, "RemoteNetworkProxyConfig", (*plain)(c))
}

func (*proxyConfig) decodesNull() {}

// defaultBool is a boolean that may be absent (false) but not null, as serde's
// #[serde(default)] bool.
type defaultBool bool

func (b *defaultBool) UnmarshalJSON(raw []byte) error {
	switch t := string(bytes.TrimSpace(raw)); t {
	case "true", "false":
		*b = t == "true"
		return nil
	}
	return errInvalidParams("invalid type: %s, expected a boolean", jsonKind(raw))
}

// defaultStrings is a list that may be absent (empty) but not null.
type defaultStrings []string

func (s *defaultStrings) UnmarshalJSON(raw []byte) error {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '[' {
		return errInvalidParams("invalid type: %s, expected a sequence", jsonKind(t))
	}
	return decodeField(reflect.ValueOf((*[]string)(s)).Elem(), "", raw)
}

// validate refuses the patterns the reference refuses when it builds its policy.
func (c *proxyConfig) validate() error {
	for pattern, perm := range c.Domains {
		p := strings.TrimSpace(pattern)
		switch {
		case p == "":
			return errInvalidParams("invalid network proxy config: domain pattern is empty")
		case strings.HasPrefix(p, "[") && !strings.HasSuffix(p, "]") ||
			strings.HasPrefix(p, "[") && !isBracketedHost(p):
			return errInvalidParams("invalid network proxy config: brackets are only supported for IPv6 literals or [*]: %s", pattern)
		case strings.Contains(strings.TrimPrefix(p, "**."), "**"):
			return errInvalidParams("invalid network proxy config: unsupported repeated wildcard: %s", pattern)
		case perm == domainDeny && isGlobalWildcard(p):
			return errInvalidParams("invalid network proxy config: invalid value for network.denied_domains: %s (allowed exact hosts or scoped wildcards like *.example.com or **.example.com)", pattern)
		}
	}
	i := 0
	for path := range c.UnixSockets {
		if !filepath.IsAbs(path) || strings.IndexByte(path, 0) >= 0 {
			return errInvalidParams("invalid network proxy config: invalid network.allow_unix_sockets[%d]: expected a NUL-free absolute path for Linux, got %q", i, path)
		}
		i++
	}
	return nil
}

func isBracketedHost(p string) bool {
	inner := p[1 : len(p)-1]
	if inner == "*" {
		return true
	}
	if ip, _, _ := strings.Cut(inner, "%"); ip != "" {
		a, err := netip.ParseAddr(ip)
		return err == nil && a.Is6()
	}
	return false
}

// isGlobalWildcard reports whether a pattern matches every host ("*", "**.", "[*]").
func isGlobalWildcard(p string) bool {
	return p == "*" || p == "[*]" || p == "**.*" || p == "*.*"
}

// proxyAuditMetadata is networkProxy.auditMetadata: kept for the process's records.
type proxyAuditMetadata struct {
	ConversationID *string `json:"conversationId"`
	AppVersion     *string `json:"appVersion"`
	UserAccountID  *string `json:"userAccountId"`
	AuthMode       *string `json:"authMode"`
	Originator     *string `json:"originator"`
	UserEmail      *string `json:"userEmail"`
	TerminalType   *string `json:"terminalType"`
	Model          *string `json:"model"`
	Slug           *string `json:"slug"`
}

func (*proxyAuditMetadata) decodesNull() {}

func (m *proxyAuditMetadata) UnmarshalJSON(raw []byte) error {
	type plain proxyAuditMetadata
	return decodeParams(raw, "NetworkProxyAuditMetadata", (*plain)(m))
}

// credentialProviders is proxy.credentialProviders: kept, not yet used (masking is a later
// step). The reference reads it strictly (unknown fields refused) and names numbers by value.
type credentialProviders map[string]credentialProvider

func (c *credentialProviders) UnmarshalJSON(raw []byte) error {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '{' {
		return errInvalidParams("invalid type: %s, expected a map", serdeKind(t))
	}
	m := credentialProviders{}
	var ferr error
	if !scanObject(t, func(name string, val []byte) bool {
		var p credentialProvider
		ferr = p.decode(val)
		m[name] = p
		return ferr == nil
	}) && ferr == nil {
		ferr = errInvalidParams("invalid JSON in params: %s", jsonSyntaxError(t))
	}
	*c = m
	return ferr
}

// credentialProvider is one entry of proxy.credentialProviders.
type credentialProvider struct {
	Env              []string
	Patterns         []string
	URLPrefixes      []string
	URLPrefixFromEnv string
	Auth             []string // "bearer", "token", "basic" or "header"
	Header           string
	Prefix           string
}

// credentialProviderFields are its keys, in the reference's order (its error names them).
var credentialProviderFields = []string{"env", "patterns", "url_prefixes", "url_prefix_from_env", "auth", "header", "prefix"}

func (p *credentialProvider) decode(raw []byte) error {
	if len(raw) == 0 || raw[0] != '{' {
		return errInvalidParams("invalid type: %s, expected struct CredentialProviderConfig", serdeKind(raw))
	}
	var ferr error
	ok := scanObject(raw, func(key string, val []byte) bool {
		switch key {
		case "env":
			p.Env, ferr = decodeStrictStrings(val, nil)
		case "patterns":
			p.Patterns, ferr = decodeStrictStrings(val, nil)
		case "url_prefixes":
			p.URLPrefixes, ferr = decodeStrictStrings(val, nil)
		case "auth":
			p.Auth, ferr = decodeStrictStrings(val, []string{"bearer", "token", "basic", "header"})
		case "url_prefix_from_env":
			p.URLPrefixFromEnv, ferr = decodeStrictString(val)
		case "header":
			p.Header, ferr = decodeStrictString(val)
		case "prefix":
			p.Prefix, ferr = decodeStrictString(val)
		default:
			ferr = errInvalidParams("unknown field `%s`, expected one of `%s`", key, strings.Join(credentialProviderFields, "`, `"))
		}
		return ferr == nil
	})
	if ferr == nil && !ok {
		ferr = errInvalidParams("invalid JSON in params: %s", jsonSyntaxError(raw))
	}
	return ferr
}

// decodeStrictString decodes an optional string (null: empty).
func decodeStrictString(val []byte) (string, error) {
	if string(val) == "null" {
		return "", nil
	}
	var s string
	if val[0] != '"' || json.Unmarshal(val, &s) != nil {
		return "", errInvalidParams("invalid type: %s, expected a string", serdeKind(val))
	}
	return s, nil
}

// decodeStrictStrings decodes a list of strings (each one of variants, when given).
func decodeStrictStrings(val []byte, variants []string) ([]string, error) {
	if val[0] != '[' {
		return nil, errInvalidParams("invalid type: %s, expected a sequence", serdeKind(val))
	}
	var items []json.RawMessage
	if err := json.Unmarshal(val, &items); err != nil {
		return nil, errInvalidParams("invalid JSON in params: %s", jsonSyntaxError(val))
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		s, err := decodeStrictString(bytes.TrimSpace(it))
		if err == nil && string(bytes.TrimSpace(it)) == "null" {
			err = errInvalidParams("invalid type: null, expected a string")
		}
		if err != nil {
			return nil, err
		}
		if variants != nil && !slices.Contains(variants, s) {
			return nil, errUnknownVariant(s, variants...)
		}
		out = append(out, s)
	}
	return out, nil
}

// serdeKind is jsonKind with numbers named by value, as serde_json names them when it reads
// a value it has already parsed ("integer `1`", "floating point `1.5`").
func serdeKind(raw []byte) string {
	t := bytes.TrimSpace(raw)
	k := jsonKind(t)
	if k != "number" {
		return k
	}
	if _, err := strconv.ParseInt(string(t), 10, 64); err == nil {
		return "integer `" + string(t) + "`"
	}
	if _, err := strconv.ParseUint(string(t), 10, 64); err == nil {
		return "integer `" + string(t) + "`"
	}
	if f, err := strconv.ParseFloat(string(t), 64); err == nil {
		return "floating point `" + strconv.FormatFloat(f, 'f', -1, 64) + "`"
	}
	return k
}

// managedNetworkParams is process/start.managedNetwork: what the sandbox side of a managed
// network needs (docs/network.md §4; the sandbox plumbing is not part of this component).
type managedNetworkParams struct {
	LoopbackPorts     loopbackPorts `json:"loopbackPorts,omitempty"`
	AllowLocalBinding defaultBool   `json:"allowLocalBinding,omitempty"`
	TransparentTCP    defaultBool   `json:"transparentTcp,omitempty"`
}

// loopbackPorts is managedNetwork.loopbackPorts: a list of u16 that may be absent, not null.
type loopbackPorts []uint16

func (l *loopbackPorts) UnmarshalJSON(raw []byte) error {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '[' {
		return errInvalidParams("invalid type: %s, expected a sequence", jsonKind(t))
	}
	var items []json.RawMessage
	if err := json.Unmarshal(t, &items); err != nil {
		return errInvalidParams("invalid JSON in params: %s", jsonSyntaxError(t))
	}
	ports := make(loopbackPorts, 0, len(items))
	for _, it := range items {
		it = bytes.TrimSpace(it)
		if k := jsonKind(it); k != "number" {
			return errInvalidParams("invalid type: %s, expected u16", k)
		}
		n, err := strconv.ParseUint(string(it), 10, 16)
		if err != nil {
			return errInvalidParams("invalid number")
		}
		ports = append(ports, uint16(n))
	}
	*l = ports
	return nil
}

func (m *managedNetworkParams) UnmarshalJSON(raw []byte) error {
	type plain managedNetworkParams
	return decodeParams(raw, "ManagedNetworkSandboxContext", (*plain)(m))
}

// networkMode is proxy.mode: "limited" lets only reading methods through, "full" all.
type networkMode string

const (
	modeLimited networkMode = "limited"
	modeFull    networkMode = "full"
)

func (m *networkMode) UnmarshalJSON(raw []byte) error {
	s, err := decodeStringOrMapVariant(raw, string(modeLimited), string(modeFull))
	*m = networkMode(s)
	return err
}

func (*networkMode) decodesNull() {}

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

// domainPerm is one value of proxy.domains.
type domainPerm string

const (
	domainNone  domainPerm = "none"
	domainAllow domainPerm = "allow"
	domainDeny  domainPerm = "deny"
)

func (d *domainPerm) UnmarshalJSON(raw []byte) error {
	s, err := decodeStringOrMapVariant(raw, "none", "allow", "deny")
	*d = domainPerm(s)
	return err
}

// unixSocketPerm is one value of proxy.unixSockets.
type unixSocketPerm string

func (u *unixSocketPerm) UnmarshalJSON(raw []byte) error {
	s, err := decodeStringOrMapVariant(raw, "allow", "deny")
	*u = unixSocketPerm(s)
	return err
}

// decodeStringOrMapVariant decodes a serde unit enum, written as a string or as a map with
// one key (the variant) whose value is null, with serde's words for anything else.
func decodeStringOrMapVariant(raw []byte, variants ...string) (string, error) {
	t := bytes.TrimSpace(raw)
	switch {
	case len(t) > 0 && t[0] == '"':
		return decodeVariant(t, variants...)
	case len(t) > 0 && t[0] == '{':
		var keys []string
		var val []byte
		if !scanObject(t, func(k string, v []byte) bool {
			keys, val = append(keys, k), v
			return true
		}) {
			return "", errInvalidParams("invalid JSON in params: %s", jsonSyntaxError(t))
		}
		if len(keys) != 1 {
			return "", errInvalidParams("invalid value: map, expected map with a single key")
		}
		if !slices.Contains(variants, keys[0]) {
			return "", errUnknownVariant(keys[0], variants...)
		}
		if string(val) != "null" {
			return "", errInvalidParams("invalid type: %s, expected unit", jsonKind(val))
		}
		return keys[0], nil
	}
	return "", errInvalidParams("invalid type: %s, expected string or map", serdeKind(t))
}

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

// blockedMessage is the human text of a refusal, and blockedHeader its x-proxy-error value.
func blockedMessage(reason, source string) string {
	switch {
	case reason == reasonNotAllowed:
		return "Domain not in allowlist."
	case reason == reasonDenied:
		return "Domain denied by the sandbox policy."
	case reason == reasonNotAllowedLocal:
		return "Sandbox policy blocks local/private network addresses."
	case reason == reasonMethodNotAllowed:
		return "Method not allowed in limited mode."
	case reason == reasonMITMRequired:
		return "MITM required for limited HTTPS."
	}
	return "Request blocked by network policy."
}

func blockedHeader(reason string) string {
	switch reason {
	case reasonNotAllowed, reasonNotAllowedLocal:
		return "blocked-by-allowlist"
	case reasonDenied:
		return "blocked-by-denylist"
	case reasonMethodNotAllowed:
		return "blocked-by-method-policy"
	case reasonMITMRequired:
		return "blocked-by-mitm-required"
	}
	return "blocked-by-policy"
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

// systemResolve is the resolver a proxy uses when its hooks give none.
func systemResolve(ctx context.Context, host string) ([]netip.Addr, error) {
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	return addrs, nil
}
