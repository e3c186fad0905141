package main

// process/start's networkProxy and managedNetwork fields as they decode (docs/network.md §1):
// their types, the defaults the reference fills in, the patterns it refuses, and serde's words
// for whatever does not decode, as the reference answers them. What the decoded config means
// for a connection is netproxy_policy.go.

import (
	"bytes"
	"encoding/json"
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
	// CredentialMasking and CredentialProviders: credential masking (proc_mask.go, docs/network.md §8).
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

// credentialProviders is proxy.credentialProviders: the custom providers of credential masking
// (netproxy_mask.go). The reference reads it strictly (unknown fields refused) and names numbers by value.
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
