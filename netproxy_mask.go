package main

// Credential masking (docs/network.md §8): the providers (built-in, and the request's
// credentialProviders compiled), where each credential may go (destinations), the server-wide
// registry of stand-ins, and one process's binding: its environment with stand-ins in place of
// the real values, and the swap back in the headers of requests to the hosts a credential
// belongs to. The TLS interception that calls the binding is netproxy_intercept.go; the CA,
// netproxy_mitm.go; stand-in generation, netproxy_mask_gen.go.

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

const (
	// maskRegistryMax bounds the credentials a server registers over its life; past it a
	// masked start is refused.
	maskRegistryMax = 4096
	// maskDrawAttempts is how many stand-ins a credential gets to find one that cannot be
	// mistaken for a real value; past it the start is refused (upstream skips masking).
	maskDrawAttempts = 64
	// maskMinEmbedded is the shortest match of a custom pattern that counts when the pattern
	// has no literal prefix of maskDistinctivePrefix characters.
	maskMinEmbedded       = 16
	maskDistinctivePrefix = 4

	// maskDiscoveryRounds bounds the credentials of one provider found in one variable.
	maskDiscoveryRounds = 16
	// maskEncodedMin is the shortest real value whose encoded forms (base64, percent, hex)
	// are looked for in other variables: shorter, an encoded fragment could match by chance.
	// Every built-in shape is longer (an AWS key id, the shortest, has 20 bytes).
	maskEncodedMin = 16

	maskMarkerActive = "CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE"
	maskMarkerList   = "CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS"
)

// Auth methods of a provider: how its credential travels in a request.
const (
	maskAuthBearer = "bearer"
	maskAuthToken  = "token"
	maskAuthBasic  = "basic"
	maskAuthHeader = "header"
)

// maskDest is one destination a credential may be sent to: https (or http to a loopback
// host), an exact host or the subdomains of a suffix, a port, and a path prefix matched on
// segment boundaries.
type maskDest struct {
	https    bool
	host     string // lower case, no brackets; for a wildcard, the suffix
	wildcard bool   // "*.suffix": subdomains only, never the apex
	port     uint16
	path     string // "/" or a prefix without a trailing slash
}

// parseMaskDest reads a destination: scheme://host[:port][/path], or a bare host[:port][/path]
// (https, or http for a loopback host). Userinfo, query, fragment, a "*" other than a leading
// "*.", and plain http to a non-loopback host are refused; so is a wildcard when noWildcard.
func parseMaskDest(s string, noWildcard bool) (maskDest, error) {
	raw := strings.TrimSpace(s)
	if raw == "" {
		return maskDest{}, errors.New("empty destination")
	}
	explicit := strings.Contains(raw, "://")
	if !explicit {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return maskDest{}, fmt.Errorf("destination %q does not parse", s)
	}
	switch {
	case u.User != nil:
		return maskDest{}, fmt.Errorf("destination %q has userinfo", s)
	case u.RawQuery != "" || u.ForceQuery:
		return maskDest{}, fmt.Errorf("destination %q has a query", s)
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return maskDest{}, fmt.Errorf("destination %q has a fragment", s)
	case u.Scheme != "https" && u.Scheme != "http":
		return maskDest{}, fmt.Errorf("destination %q: scheme must be https (or http to loopback)", s)
	case u.Opaque != "":
		return maskDest{}, fmt.Errorf("destination %q does not parse", s)
	}
	d := maskDest{https: u.Scheme == "https", host: normMaskHost(u.Hostname())}
	if strings.HasPrefix(d.host, "*.") {
		d.wildcard, d.host = true, d.host[2:]
	}
	switch {
	case d.host == "":
		return maskDest{}, fmt.Errorf("destination %q has no host", s)
	case strings.Contains(d.host, "*"):
		return maskDest{}, fmt.Errorf("destination %q: a wildcard is only allowed as a leading \"*.\"", s)
	case d.wildcard && noWildcard:
		return maskDest{}, fmt.Errorf("destination %q: no wildcard allowed here", s)
	}
	if _, err := netip.ParseAddr(d.host); err != nil && !validLeafName(d.host) {
		return maskDest{}, fmt.Errorf("destination %q: not a host name or an IP address", s)
	}
	if !explicit && !d.wildcard && maskLoopbackHost(d.host) {
		d.https = false
	}
	if !d.https && (d.wildcard || !maskLoopbackHost(d.host)) {
		return maskDest{}, fmt.Errorf("destination %q: credential destination must use HTTPS unless it targets loopback over HTTP", s)
	}
	d.port = 443
	if !d.https {
		d.port = 80
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return maskDest{}, fmt.Errorf("destination %q: bad port", s)
		}
		d.port = uint16(n)
	}
	path := u.EscapedPath()
	if strings.ContainsAny(path, "%\\") || slices.ContainsFunc(strings.Split(path, "/"), func(seg string) bool { return seg == "." || seg == ".." }) {
		return maskDest{}, fmt.Errorf("destination %q: the path must be plain (no escapes, no dot segments)", s)
	}
	d.path = strings.TrimSuffix(path, "/")
	if d.path == "" {
		d.path = "/"
	}
	return d, nil
}

// normMaskHost is host in lower case without brackets or a trailing dot; an IP in its
// canonical form.
func normMaskHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String()
	}
	return h
}

func maskLoopbackHost(h string) bool {
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}

// matchHost reports whether a request to host:port over https (or not) is this destination's.
func (d maskDest) matchHost(https bool, host string, port uint16) bool {
	if https != d.https || port != d.port {
		return false
	}
	host = normMaskHost(host)
	if d.wildcard {
		return strings.HasSuffix(host, "."+d.host)
	}
	return host == d.host
}

// matchPath reports whether path (decoded, checked by safeMaskPath) is under the prefix.
func (d maskDest) matchPath(path string) bool {
	if d.path == "/" {
		return true
	}
	return path == d.path || strings.HasPrefix(path, d.path+"/")
}

// safeMaskPath is the decoded path of a request whose path may carry a credential: it must
// start with "/", hold no backslash, no encoded dot, slash, backslash or NUL, and no dot
// segment, so that no decoding by the origin can move the request out of the prefix.
func safeMaskPath(u *url.URL) (string, bool) {
	raw := u.EscapedPath()
	if raw == "" {
		raw = "/"
	}
	low := strings.ToLower(raw)
	if raw[0] != '/' || strings.ContainsAny(raw, "\\") || strings.Contains(low, "%2e") ||
		strings.Contains(low, "%2f") || strings.Contains(low, "%5c") || strings.Contains(low, "%00") {
		return "", false
	}
	p, err := url.PathUnescape(raw)
	if err != nil || strings.ContainsAny(p, "\\\x00") {
		return "", false
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return "", false
		}
	}
	return p, true
}

// maskProvider is one kind of credential: where its variables' values may go and how they
// travel. The built-ins are maskBuiltins; custom ones come from compileMaskProvider.
type maskProvider struct {
	name      string
	id        string // the registry's key: a custom provider's whole configuration
	custom    bool
	extension bool // a built-in of ours, not of the reference (docs/network.md §8)
	env       []string
	dests     []maskDest
	auth      []string
	header    string // the header of maskAuthHeader
	prefix    string // what precedes the value in that header
	// authContains: an Authorization header containing the stand-in anywhere becomes
	// "Bearer <real>" (OpenAI's rule).
	authContains bool
	// sigv4: the value travels inside an AWS signature; nothing is swapped in headers here.
	sigv4    bool
	trim     bool // built-in values are whitespace-trimmed
	standIn  func(real string, r maskRand) (string, error)
	find     func(s string) [][2]int // credentials of this provider inside s
	patterns []*maskPattern
	// unusable says why the provider cannot mask (no destination, invalid configuration):
	// its variables are removed from the command's environment (D2).
	unusable string
}

func (p *maskProvider) hasAuth(m string) bool { return slices.Contains(p.auth, m) }

// maskContextKeys are the variables that say where a built-in credential may go.
var maskContextKeys = []string{"GH_HOST", "OPENAI_BASE_URL", "AWS_ENDPOINT_URL"}

// maskBuiltinSources are the variables of the built-in providers.
var maskBuiltinSources = []string{
	"GH_TOKEN", "GITHUB_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN",
	"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENROUTER_API_KEY",
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
}

var (
	ghPrefixes     = []string{"github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_"}
	openaiPrefixes = []string{"sk-proj-", "sk-svcacct-", "sk-admin-", "sk-"}
)

func keepPrefix(real string, prefixes []string, fallback string) string {
	for _, p := range prefixes {
		if strings.HasPrefix(real, p) {
			return p
		}
	}
	return fallback
}

// findRE adapts a recogniser pattern to maskProvider.find, skipping matches for which skip
// says no.
func findRE(re *regexp.Regexp, skip func(m string) bool) func(string) [][2]int {
	return func(s string) [][2]int {
		var out [][2]int
		for _, m := range re.FindAllStringIndex(s, -1) {
			if skip == nil || !skip(s[m[0]:m[1]]) {
				out = append(out, [2]int{m[0], m[1]})
			}
		}
		return out
	}
}

// maskBuiltins are the built-in providers, their destinations computed from env's context
// variables (GH_HOST, OPENAI_BASE_URL, AWS_ENDPOINT_URL).
func maskBuiltins(env map[string]string) []*maskProvider {
	https := func(hosts ...string) []maskDest {
		var ds []maskDest
		for _, h := range hosts {
			d := maskDest{https: true, host: h, port: 443, path: "/"}
			if strings.HasPrefix(h, "*.") {
				d.wildcard, d.host = true, h[2:]
			}
			ds = append(ds, d)
		}
		return ds
	}
	ghStandIn := func(real string, r maskRand) (string, error) {
		s := shapedStandIn(real, keepPrefix(real, ghPrefixes, "ghp_"), 40, "", r)
		return breakGitHubChecksum(s, r), nil
	}
	ghFind := findRE(ghCredRE, nil)
	shaped := func(prefixes []string, fallback string, minLen int, alphabet string) func(string, maskRand) (string, error) {
		return func(real string, r maskRand) (string, error) {
			return shapedStandIn(real, keepPrefix(real, prefixes, fallback), minLen, alphabet, r), nil
		}
	}
	ghAuth := []string{maskAuthBearer, maskAuthToken, maskAuthBasic}

	enterprise := &maskProvider{name: "github-enterprise", env: []string{"GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN"},
		auth: ghAuth, trim: true, standIn: ghStandIn, find: ghFind}
	if h, ok := env["GH_HOST"]; ok {
		if host, port, ok := parseGHHost(h); ok {
			enterprise.dests = []maskDest{{https: true, host: host, port: port, path: "/"}}
		}
	}
	openai := &maskProvider{name: "openai", env: []string{"OPENAI_API_KEY"}, dests: https("api.openai.com"),
		auth: []string{maskAuthBearer}, authContains: true, trim: true,
		standIn: shaped(openaiPrefixes, "sk-", 51, ""),
		find: findRE(openaiCredRE, func(m string) bool {
			return strings.HasPrefix(m, "sk-ant-") || strings.HasPrefix(m, "sk-or-")
		})}
	if v, ok := env["OPENAI_BASE_URL"]; ok {
		if d, err := parseMaskDest(v, true); err == nil && d.https && strings.Contains(v, "://") {
			openai.dests = append(openai.dests, maskDest{https: true, host: d.host, port: d.port, path: "/"})
		}
	}
	aws := &maskProvider{name: "aws", extension: true, sigv4: true, trim: true,
		env:   []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"},
		dests: https("*.amazonaws.com", "*.amazonaws.com.cn", "*.api.aws"),
		standIn: func(real string, r maskRand) (string, error) {
			switch {
			case len(real) == 20 && (strings.HasPrefix(real, "AKIA") || strings.HasPrefix(real, "ASIA")):
				return shapedStandIn(real, real[:4], 20, maskDigits+maskUpper, r), nil
			case len(real) == 40:
				return shapedStandIn(real, "", 40, maskAlnum+"/+", r), nil
			}
			return shapedStandIn(real, "", 0, maskAlnum+"/+", r), nil
		},
		find: findRE(awsKeyIDCredRE, nil)}
	if v, ok := env["AWS_ENDPOINT_URL"]; ok {
		if d, err := parseMaskDest(v, true); err == nil && strings.Contains(v, "://") {
			d.path = "/"
			aws.dests = append(aws.dests, d)
		}
	}
	return []*maskProvider{
		{name: "github", env: []string{"GH_TOKEN", "GITHUB_TOKEN"},
			dests: https("api.github.com", "github.com", "uploads.github.com", "*.ghe.com"),
			auth:  ghAuth, trim: true, standIn: ghStandIn, find: ghFind},
		enterprise,
		openai,
		{name: "anthropic", extension: true, env: []string{"ANTHROPIC_API_KEY"}, dests: https("api.anthropic.com"),
			auth: []string{maskAuthHeader}, header: "X-Api-Key", trim: true,
			standIn: shaped([]string{"sk-ant-"}, "sk-ant-", 0, ""), find: findRE(anthropicCredRE, nil)},
		{name: "anthropic-auth-token", extension: true, env: []string{"ANTHROPIC_AUTH_TOKEN"}, dests: https("api.anthropic.com"),
			auth: []string{maskAuthBearer}, trim: true, standIn: shaped(nil, "", 0, "")},
		{name: "openrouter", extension: true, env: []string{"OPENROUTER_API_KEY"}, dests: https("openrouter.ai"),
			auth: []string{maskAuthBearer}, trim: true,
			standIn: shaped([]string{"sk-or-v1-", "sk-or-"}, "sk-or-", 0, ""), find: findRE(openrouterCredRE, nil)},
		aws,
	}
}

// parseGHHost reads GH_HOST strictly: no "/ \ @ ? # *", an optional port (443 without one),
// an IPv6 literal allowed; a GitHub cloud host is not an enterprise host. The reference drops
// the port and sends the token to any port of the host; the credential goes to the one
// GH_HOST names here.
func parseGHHost(v string) (string, uint16, bool) {
	v = strings.TrimSpace(v)
	if v == "" || strings.ContainsAny(v, "/\\@?#* \t") {
		return "", 0, false
	}
	host, port := v, uint16(443)
	if h, p, err := net.SplitHostPort(v); err == nil {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return "", 0, false
		}
		host, port = h, uint16(n)
	} else if strings.HasPrefix(v, "[") {
		if !strings.HasSuffix(v, "]") {
			return "", 0, false
		}
	} else if strings.Count(v, ":") == 1 {
		return "", 0, false // a host:port whose port did not parse
	}
	host = normMaskHost(host)
	if _, err := netip.ParseAddr(host); err != nil && !validLeafName(host) {
		return "", 0, false
	}
	for _, cloud := range []string{"github.com", "ghe.com"} {
		if host == cloud || strings.HasSuffix(host, "."+cloud) {
			return "", 0, false
		}
	}
	return host, port, true
}

// compileMaskProvider turns one decoded credentialProviders entry into a provider, checking
// each rule of docs/network.md §8 ("Custom providers"); an error names the rule, never a value.
// env is the command's environment (for url_prefix_from_env).
func compileMaskProvider(name string, c credentialProvider, env map[string]string, r maskRand) (*maskProvider, error) {
	switch {
	case strings.TrimSpace(name) == "":
		return nil, errors.New("the provider name is empty")
	case len(c.Env) == 0:
		return nil, errors.New("env is empty")
	case len(c.Patterns) == 0:
		return nil, errors.New("patterns is empty")
	case len(c.URLPrefixes) == 0 && c.URLPrefixFromEnv == "":
		return nil, errors.New("no destination: url_prefixes is empty and url_prefix_from_env unset")
	}
	for _, k := range c.Env {
		switch {
		case !validEnvKey(k):
			return nil, fmt.Errorf("env key %q is not a variable name", k)
		case slices.Contains(maskBuiltinSources, k) || slices.Contains(maskContextKeys, k):
			return nil, fmt.Errorf("env key %s overlaps a built-in credential source", k)
		}
	}
	if k := c.URLPrefixFromEnv; k != "" && (!validEnvKey(k) || slices.Contains(c.Env, k)) {
		return nil, fmt.Errorf("url_prefix_from_env %q is not a variable name distinct from env", k)
	}
	p := &maskProvider{name: name, custom: true, env: slices.Clone(c.Env), header: c.Header, prefix: c.Prefix,
		auth: slices.Clone(c.Auth)}
	if len(p.auth) == 0 {
		p.auth = []string{maskAuthBearer}
	}
	for _, s := range c.URLPrefixes {
		d, err := parseMaskDest(s, false)
		if err != nil {
			return nil, fmt.Errorf("url_prefixes: %w", err)
		}
		p.dests = append(p.dests, d)
	}
	switch {
	case c.Header != "" && !isToken(c.Header):
		return nil, fmt.Errorf("header %q is not a valid header name", c.Header)
	case (c.Header != "") != p.hasAuth(maskAuthHeader):
		return nil, errors.New("header must be set exactly when auth contains \"header\"")
	case c.Prefix != "" && c.Header == "":
		return nil, errors.New("prefix needs header")
	case c.Prefix != "" && !validHeaderValue(c.Prefix):
		return nil, errors.New("prefix is not a valid header value")
	}
	for i, src := range c.Patterns {
		pat, err := compileMaskPattern(src, r)
		if err != nil {
			return nil, fmt.Errorf("patterns[%d]: %w", i, err)
		}
		p.patterns = append(p.patterns, pat)
	}
	if k := c.URLPrefixFromEnv; k != "" {
		if v, ok := env[k]; ok {
			// present but unusable: the dynamic destination is dropped, never guessed
			if d, err := parseMaskDest(v, true); err == nil {
				p.dests = append(p.dests, d)
			}
		}
	}
	if len(p.dests) == 0 {
		p.unusable = "no usable destination"
	}
	id, _ := json.Marshal([]any{name, c.Env, c.Patterns, c.Auth, c.Header, c.Prefix})
	p.id = "custom:" + string(id)
	p.standIn = p.customStandIn
	p.find = p.customFind
	return p, nil
}

// customStandIn draws from the pattern the real value matches (else the first), keeping the
// value's trimmed-ness and, for basic, whether it holds a ":". One draw: the registry's
// maskDrawAttempts retries bound the work (each draw is itself at most maskGenAttempts tries).
func (p *maskProvider) customStandIn(real string, r maskRand) (string, error) {
	pat := p.patterns[0]
	for _, q := range p.patterns {
		if q.anchored.MatchString(real) {
			pat = q
			break
		}
	}
	s, err := pat.generate(r)
	switch {
	case err != nil:
		return "", err
	case (strings.TrimSpace(s) == s) != (strings.TrimSpace(real) == real),
		p.hasAuth(maskAuthBasic) && strings.Contains(s, ":") != strings.Contains(real, ":"):
		return "", errors.New("no stand-in of the same form as the value")
	}
	return s, nil
}

func (p *maskProvider) customFind(s string) [][2]int {
	var out [][2]int
	for _, pat := range p.patterns {
		for _, m := range pat.find.FindAllStringIndex(s, -1) {
			if m[1]-m[0] >= maskMinEmbedded || len(pat.literalPrefix) >= maskDistinctivePrefix {
				out = append(out, [2]int{m[0], m[1]})
			}
		}
	}
	return out
}

func validEnvKey(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// maskEntry is one registered credential: a real value, under one provider and variable name,
// and its stand-in.
type maskEntry struct {
	provider, env, real, standIn string
}

type maskKey struct{ provider, env, real string }

// maskRegistry holds the server's credentials and their stand-ins, for its life (never on
// disk): the same (provider, variable, real value) always gets the same stand-in, whichever
// process it comes from (docs/network.md §8, "Stand-ins"). Safe for concurrent use.
type maskRegistry struct {
	mu        sync.Mutex
	r         maskRand
	entries   map[maskKey]*maskEntry
	byStandIn map[string]*maskEntry
}

func newMaskRegistry() *maskRegistry {
	return &maskRegistry{r: newCryptoRand(), entries: map[maskKey]*maskEntry{}, byStandIn: map[string]*maskEntry{}}
}

// errMaskIsStandIn: the "real" value holds a stand-in already (a command of a masked command):
// there is nothing to hide.
var errMaskIsStandIn = errors.New("the value holds a stand-in")

// register returns real's entry under p and variable key, drawing its stand-in the first
// time: up to maskDrawAttempts draws until one equals and contains no real value or stand-in
// and is contained in none, appears in no value of env, and holds no other provider's
// credential.
func (reg *maskRegistry) register(p *maskProvider, key, real string, env map[string]string, others []*maskProvider) (*maskEntry, error) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	k := maskKey{p.id, key, real}
	if e := reg.entries[k]; e != nil {
		return e, nil
	}
	for s := range reg.byStandIn {
		if strings.Contains(real, s) {
			return nil, errMaskIsStandIn
		}
	}
	if len(reg.entries) >= maskRegistryMax {
		return nil, fmt.Errorf("credential masking: more than %d credentials registered", maskRegistryMax)
	}
	var lastErr error
	for range maskDrawAttempts {
		s, err := p.standIn(real, reg.r)
		if err != nil {
			lastErr = err
			continue
		}
		if reg.mistakable(s, real, p, env, others) {
			continue
		}
		e := &maskEntry{provider: p.name, env: key, real: real, standIn: s}
		reg.entries[k] = e
		reg.byStandIn[s] = e
		return e, nil
	}
	if lastErr != nil {
		return nil, fmt.Errorf("no stand-in for %s (provider %s): %w", key, p.name, lastErr)
	}
	return nil, fmt.Errorf("no stand-in for %s (provider %s) that cannot be mistaken for a real value in %d draws", key, p.name, maskDrawAttempts)
}

// mistakable reports whether stand-in s could be mistaken for, or reveal, a real value.
func (reg *maskRegistry) mistakable(s, real string, p *maskProvider, env map[string]string, others []*maskProvider) bool {
	overlap := func(a, b string) bool { return strings.Contains(a, b) || strings.Contains(b, a) }
	if s == "" || overlap(s, real) || !validHeaderValue(s) || strings.IndexByte(s, 0) >= 0 {
		return true
	}
	if reg.byStandIn[s] != nil {
		return true
	}
	for _, e := range reg.entries {
		if overlap(s, e.standIn) || overlap(s, e.real) {
			return true
		}
	}
	for _, v := range env {
		if strings.Contains(v, s) {
			return true
		}
	}
	for _, q := range others {
		if q == p || q.find == nil {
			continue
		}
		for _, m := range q.find(s) {
			if m[1]-m[0] < len(s) { // another provider's credential strictly inside it
				return true
			}
		}
	}
	return false
}

// maskBound is one credential a process's proxy may swap back, with its provider.
type maskBound struct {
	e *maskEntry
	p *maskProvider
}

// maskBinding is one process's masking: the credentials registered at its start, which its
// proxy alone may put back (docs/network.md §8). Read-only once built: safe for concurrent use.
type maskBinding struct {
	bound []maskBound
	// providers are the start's providers, built-in and custom: what a shell snapshot may not
	// carry (maskSnapshotVar).
	providers []*maskProvider
}

// maskUnset is a variable removed from a command's environment because its provider cannot
// mask it (D2), for the log: names and a reason, never a value.
type maskUnset struct{ key, provider, reason string }

// maskResult is maskEnv's answer.
type maskResult struct {
	env     map[string]string
	binding *maskBinding
	unset   []maskUnset
	// aliases are the variables other than a provider's own in which a credential was found
	// and replaced.
	aliases []string
}

// maskDiscoverySkip reports whether the value of key is left out of discovery: search paths,
// the proxy's and the CA's variables, and the providers' context variables.
func maskDiscoverySkip(key string, context []string) bool {
	u := strings.ToUpper(key)
	switch {
	case u == "PATH" || strings.HasSuffix(u, "_PATH"),
		strings.HasSuffix(u, "_PROXY"),
		slices.Contains(mitmCAEnvKeys, key), slices.Contains(context, key),
		key == maskMarkerActive, key == maskMarkerList:
		return true
	}
	return false
}

// maskEnv masks a command's environment (its final one, after every other change): each
// provider's variables get their stand-ins, credentials found inside other variables (a
// registered real value, one of this server's own environment under another name, or a value
// of a provider's shape) are replaced in place, a variable holding one encoded is removed, a
// provider that cannot mask has its variables removed (D2), NO_PROXY loses the hosts of
// masked destinations (D7), and the markers are set.
// parent is this server's own environment (os.Environ()). The input map is not changed.
func (reg *maskRegistry) maskEnv(in map[string]string, custom credentialProviders, parent []string) (*maskResult, error) {
	env := make(map[string]string, len(in)+2)
	for k, v := range in {
		env[k] = v
	}
	res := &maskResult{env: env, binding: &maskBinding{}}
	providers := maskBuiltins(in)
	context := slices.Clone(maskContextKeys)
	owner := map[string]*maskProvider{}
	for _, p := range providers {
		if len(p.dests) == 0 {
			p.unusable = "no usable destination" // GitHub Enterprise without a valid GH_HOST
		}
		for _, k := range p.env {
			owner[k] = p
		}
	}
	names := make([]string, 0, len(custom))
	for n := range custom {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := custom[n]
		if c.URLPrefixFromEnv != "" {
			context = append(context, c.URLPrefixFromEnv)
		}
		p, err := compileMaskProvider(n, c, in, reg.r0())
		if err == nil {
			for _, k := range p.env {
				if owner[k] != nil {
					err = fmt.Errorf("env key %s overlaps provider %s", k, owner[k].name)
					break
				}
			}
		}
		if err != nil {
			for _, k := range c.Env {
				if _, ok := env[k]; ok && owner[k] == nil {
					delete(env, k)
					res.unset = append(res.unset, maskUnset{k, n, "invalid credential provider: " + err.Error()})
				}
			}
			continue
		}
		for _, k := range p.env {
			owner[k] = p
		}
		providers = append(providers, p)
	}
	res.binding.providers = providers

	markers := map[string]string{}
	bound := map[*maskEntry]bool{}
	bind := func(e *maskEntry, p *maskProvider) {
		if !bound[e] {
			bound[e] = true
			res.binding.bound = append(res.binding.bound, maskBound{e, p})
		}
	}
	// 1. the providers' own variables
	for _, p := range providers {
		for _, k := range p.env {
			v, ok := env[k]
			if !ok {
				continue
			}
			real := v
			if p.trim {
				real = strings.TrimSpace(v)
			}
			switch {
			case real == "":
				continue
			case p.unusable != "":
				delete(env, k)
				res.unset = append(res.unset, maskUnset{k, p.name, p.unusable})
				continue
			case !validHeaderValue(real):
				delete(env, k)
				res.unset = append(res.unset, maskUnset{k, p.name, "the value cannot travel in a header"})
				continue
			}
			e, err := reg.register(p, k, real, in, providers)
			if errors.Is(err, errMaskIsStandIn) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("credential masking: %w", err)
			}
			env[k] = e.standIn
			markers[k] = e.standIn
			bind(e, p)
		}
	}
	// 2. credentials inside other variables
	parentVals := map[string]*maskProvider{}
	parentKey := map[string]string{}
	for _, kv := range parent {
		k, v, _ := strings.Cut(kv, "=")
		if p := owner[k]; p != nil && !p.custom && p.unusable == "" {
			if p.trim {
				v = strings.TrimSpace(v)
			}
			if v != "" && validHeaderValue(v) {
				parentVals[v], parentKey[v] = p, k
			}
		}
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if owner[k] != nil || maskDiscoverySkip(k, context) {
			continue
		}
		v := env[k]
		orig := v
		var found *maskEntry
		// a real value already bound, or one of the server's own, under another name
		for _, b := range res.binding.byLength() {
			if strings.Contains(v, b.e.real) {
				v = strings.ReplaceAll(v, b.e.real, b.e.standIn)
				found = b.e
			}
		}
		for real, p := range parentVals {
			if !strings.Contains(v, real) {
				continue
			}
			e, err := reg.register(p, parentKey[real], real, in, providers)
			if errors.Is(err, errMaskIsStandIn) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("credential masking: %w", err)
			}
			v = strings.ReplaceAll(v, real, e.standIn)
			found = e
			bind(e, p)
		}
		// a value of a provider's shape
		for _, p := range providers {
			if p.find == nil || p.unusable != "" {
				continue
			}
			// each replacement makes the indexes stale: find again, at most
			// maskDiscoveryRounds times per provider and variable
			for range maskDiscoveryRounds {
				e, err := reg.discoverOne(p, k, v, in, providers)
				if err != nil {
					return nil, fmt.Errorf("credential masking: %w", err)
				}
				if e == nil {
					break
				}
				v = strings.ReplaceAll(v, e.real, e.standIn)
				found = e
				bind(e, p)
			}
		}
		if v != orig {
			env[k] = v
			markers[k] = found.standIn
			res.aliases = append(res.aliases, k)
		}
	}
	// 2b. credentials encoded inside other variables: the variable goes
	maskDropEncoded(res, owner, context, parentVals, parentKey, markers)
	// 3. D7: no bypass of the proxy for a masked destination
	for _, k := range []string{"NO_PROXY", "no_proxy"} {
		if v, ok := env[k]; ok {
			if nv := res.binding.trimNoProxy(v); nv != "" {
				env[k] = nv
			} else {
				delete(env, k)
			}
		}
	}
	// 4. the markers (names and stand-ins only)
	list := make([][2]string, 0, len(markers))
	for k, s := range markers {
		list = append(list, [2]string{k, s})
	}
	sort.Slice(list, func(i, j int) bool { return list[i][0] < list[j][0] })
	js, _ := json.Marshal(list)
	env[maskMarkerActive] = "1"
	env[maskMarkerList] = string(js)
	return res, nil
}

// maskNeedle is one encoded form of a real value, looked for in other variables.
type maskNeedle struct {
	s, form, provider, env string
}

// maskEncodedForms are the encoded forms of real that differ from it, each with its name:
// base64 (standard and URL-safe) at each of the three alignments the value may have inside a
// longer encoded string, without the edge characters that also depend on the bytes around it
// (so padded, unpadded and embedded encodings all hold it); percent-encoding (query and path
// escaping, upper- and lower-case hex digits); hex (both cases).
func maskEncodedForms(real string) [][2]string {
	var out [][2]string
	add := func(s, form string) {
		if s != "" && s != real && !slices.ContainsFunc(out, func(x [2]string) bool { return x[0] == s }) {
			out = append(out, [2]string{s, form})
		}
	}
	for _, enc := range []struct {
		e    *base64.Encoding
		name string
	}{{base64.RawStdEncoding, "base64"}, {base64.RawURLEncoding, "base64url"}} {
		for shift := range 3 {
			b := make([]byte, shift, shift+len(real))
			b = append(b, real...)
			full := enc.e.EncodeToString(b)
			// character i holds bits 6i..6i+5: keep those that hold bits of real only
			start, end := (8*shift+5)/6, 8*(shift+len(real))/6
			add(full[start:end], enc.name)
		}
	}
	for _, q := range []string{url.QueryEscape(real), url.PathEscape(real)} {
		add(q, "percent-encoded")
		add(lowerPercentHex(q), "percent-encoded")
	}
	h := hex.EncodeToString([]byte(real))
	add(h, "hex")
	add(strings.ToUpper(h), "hex")
	return out
}

// lowerPercentHex writes the hex digits of s's %XX escapes in lower case.
func lowerPercentHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lowerASCII(b[i+1]), lowerASCII(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// maskDropEncoded removes every variable that step 2 looks into and that holds an encoded form
// of a real value being masked (bound to the start, or the server's own credential), and
// logs it by name (res.unset): its value cannot be re-encoded with the stand-in safely (the
// bytes around the credential share its characters), so the whole variable goes. Only real
// values of maskEncodedMin bytes or more (docs/network.md §8, step 2b).
func maskDropEncoded(res *maskResult, owner map[string]*maskProvider, context []string,
	parentVals map[string]*maskProvider, parentKey, markers map[string]string) {
	var needles []maskNeedle
	seen := map[string]bool{}
	add := func(real, provider, env string) {
		if len(real) < maskEncodedMin || seen[real] {
			return
		}
		seen[real] = true
		for _, f := range maskEncodedForms(real) {
			needles = append(needles, maskNeedle{f[0], f[1], provider, env})
		}
	}
	for _, b := range res.binding.bound {
		add(b.e.real, b.p.name, b.e.env)
	}
	reals := make([]string, 0, len(parentVals))
	for real := range parentVals {
		reals = append(reals, real)
	}
	sort.Strings(reals)
	for _, real := range reals {
		add(real, parentVals[real].name, parentKey[real])
	}
	if len(needles) == 0 {
		return
	}
	keys := make([]string, 0, len(res.env))
	for k := range res.env {
		if owner[k] == nil && !maskDiscoverySkip(k, context) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	set := newMaskNeedleSet(needles)
	for _, k := range keys {
		n := set.find(res.env[k])
		if n == nil {
			continue
		}
		delete(res.env, k)
		delete(markers, k)
		res.aliases = slices.DeleteFunc(res.aliases, func(a string) bool { return a == k })
		res.unset = append(res.unset, maskUnset{k, n.provider, "holds the credential of " + n.env + ", " + n.form})
	}
}

// maskNeedleWindow is the length of the needles' prefixes that a rolling hash looks for: no
// needle is shorter (a real value of maskEncodedMin bytes has no encoded form under 20).
const maskNeedleWindow = 16

// maskNeedleSet finds any of many needles in one pass over a value (Rabin-Karp on their
// first maskNeedleWindow bytes, a bit filter before the map), so that a start with many
// credentials and a large environment stays fast; a needle shorter than the window is looked
// for with strings.Contains.
type maskNeedleSet struct {
	needles []maskNeedle
	short   []int
	byHash  map[uint64][]int
	filter  [1 << 10]uint64 // 1<<16 bits, indexed by the mixed hash's top 16 bits
	pow     uint64          // maskHashBase^(maskNeedleWindow-1)
}

const maskHashBase = 1099511628211

func newMaskNeedleSet(needles []maskNeedle) *maskNeedleSet {
	s := &maskNeedleSet{needles: needles, byHash: map[uint64][]int{}, pow: 1}
	for range maskNeedleWindow - 1 {
		s.pow *= maskHashBase
	}
	for i, n := range needles {
		if len(n.s) < maskNeedleWindow {
			s.short = append(s.short, i)
			continue
		}
		h := maskWindowHash(n.s)
		s.byHash[h] = append(s.byHash[h], i)
		b := maskHashBit(h)
		s.filter[b>>6] |= 1 << (b & 63)
	}
	return s
}

func maskWindowHash(s string) uint64 {
	var h uint64
	for i := range maskNeedleWindow {
		h = h*maskHashBase + uint64(s[i])
	}
	return h
}

func maskHashBit(h uint64) uint64 { return (h * 0x9E3779B97F4A7C15) >> 48 }

// find returns the needle that occurs first in v, nil when none does.
func (s *maskNeedleSet) find(v string) *maskNeedle {
	for _, i := range s.short {
		if strings.Contains(v, s.needles[i].s) {
			return &s.needles[i]
		}
	}
	if len(v) < maskNeedleWindow || len(s.byHash) == 0 {
		return nil
	}
	h := maskWindowHash(v)
	for i := 0; ; i++ {
		if b := maskHashBit(h); s.filter[b>>6]&(1<<(b&63)) != 0 {
			for _, j := range s.byHash[h] {
				if strings.HasPrefix(v[i:], s.needles[j].s) {
					return &s.needles[j]
				}
			}
		}
		if i+maskNeedleWindow >= len(v) {
			return nil
		}
		h = (h-uint64(v[i])*s.pow)*maskHashBase + uint64(v[i+maskNeedleWindow])
	}
}

// r0 is the registry's entropy for a provider's compile check, under the lock.
func (reg *maskRegistry) r0() maskRand { return lockedRand{reg} }

type lockedRand struct{ reg *maskRegistry }

func (l lockedRand) IntN(n int) int {
	l.reg.mu.Lock()
	defer l.reg.mu.Unlock()
	return l.reg.r.IntN(n)
}

// discoverOne registers the first whole credential of p's shape in v (under variable k) that
// is not a stand-in already; nil when there is none.
func (reg *maskRegistry) discoverOne(p *maskProvider, k, v string, env map[string]string, providers []*maskProvider) (*maskEntry, error) {
	for _, m := range p.find(v) {
		if m[1] < len(v) && isCredByte(v[m[1]]) {
			continue // it goes on: not a whole credential
		}
		real := v[m[0]:m[1]]
		if reg.isStandIn(real) {
			continue
		}
		e, err := reg.register(p, k, real, env, providers)
		if errors.Is(err, errMaskIsStandIn) {
			continue
		}
		return e, err
	}
	return nil, nil
}

func (reg *maskRegistry) isStandIn(s string) bool {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return reg.byStandIn[s] != nil
}

// isCredByte reports whether c may continue a credential (a match must end before another).
func isCredByte(c byte) bool {
	return c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

// byLength is the bound credentials, the longest real value first (so that a value inside
// another is replaced after it).
func (b *maskBinding) byLength() []maskBound {
	out := slices.Clone(b.bound)
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].e.real) > len(out[j].e.real) })
	return out
}

// maskText replaces every real value bound to the process by its stand-in: for argv and a
// snapshot's text.
func (b *maskBinding) maskText(s string) string {
	for _, x := range b.byLength() {
		s = strings.ReplaceAll(s, x.e.real, x.e.standIn)
	}
	return s
}

// unmask replaces, in a response's headers from an intercepted destination, every real value
// bound to the process by its stand-in (D6): an origin that echoes a credential back must not
// hand the child the real one.
func (b *maskBinding) unmask(h http.Header) {
	for k, vs := range h {
		for i, v := range vs {
			vs[i] = b.maskText(v)
		}
		h[k] = vs
	}
}

// unmaskPairs is the real value and stand-in of each bound credential, the longest real value
// first, for the interception's response-body scan (D6).
func (b *maskBinding) unmaskPairs() []unmaskPair {
	var out []unmaskPair
	for _, x := range b.byLength() {
		out = append(out, unmaskPair{real: []byte(x.e.real), standIn: []byte(x.e.standIn)})
	}
	return out
}

// What the interception needs from masking (netproxy_intercept.go).
var (
	_ credentialInjector = (*maskBinding)(nil)
	_ responseUnmasker   = (*maskBinding)(nil)
	_ bodyUnmasker       = (*maskBinding)(nil)
	_ leafIssuer         = (*mitmCA)(nil)
)

// trimNoProxy drops from a NO_PROXY list every entry that would let a masked destination
// bypass the proxy (D7): "*", the host, a parent domain of it, a wildcard's suffix or a name
// under it, an address or a CIDR holding it.
func (b *maskBinding) trimNoProxy(list string) string {
	var keep []string
	for _, ent := range strings.Split(list, ",") {
		e := strings.TrimSpace(ent)
		if e == "" {
			continue
		}
		if !b.noProxyCovers(e) {
			keep = append(keep, e)
		}
	}
	return strings.Join(keep, ",")
}

func (b *maskBinding) noProxyCovers(e string) bool {
	if e == "*" {
		return true
	}
	pfx, perr := netip.ParsePrefix(e)
	h := e
	if host, _, err := net.SplitHostPort(e); err == nil {
		h = host
	}
	h = normMaskHost(strings.TrimPrefix(strings.TrimPrefix(h, "*"), "."))
	for _, x := range b.bound {
		for _, d := range x.p.dests {
			if a, err := netip.ParseAddr(d.host); err == nil {
				if perr == nil && pfx.Contains(a) || h == d.host {
					return true
				}
				continue
			}
			if h == d.host || strings.HasSuffix(d.host, "."+h) {
				return true
			}
			if d.wildcard && strings.HasSuffix(h, "."+d.host) {
				return true
			}
		}
	}
	return false
}

// intercepts reports whether a CONNECT to host:port must be intercepted: some credential
// bound to the process belongs to an https destination there.
func (b *maskBinding) intercepts(host string, port uint16) bool {
	for _, x := range b.bound {
		for _, d := range x.p.dests {
			if d.matchHost(true, host, port) {
				return true
			}
		}
	}
	return false
}

// inject puts the real values back in r's headers where r's destination is one their
// credential belongs to, and only there: Authorization (bearer, token, basic: whole, user or
// password) and a provider's own header (exactly prefix+stand-in). A header value two
// different translations would claim is left alone. Query, path and body are never touched.
// It returns the providers injected for (names only).
func (b *maskBinding) inject(r *http.Request) []string {
	if r == nil || r.URL == nil || len(b.bound) == 0 {
		return nil
	}
	https := r.URL.Scheme == "https" || r.URL.Scheme == "" && r.TLS != nil
	hostport := r.URL.Host
	if hostport == "" {
		hostport = r.Host
	}
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		host, portStr = hostport, ""
	}
	port := uint16(80)
	if https {
		port = 443
	}
	if portStr != "" {
		n, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil {
			return nil
		}
		port = uint16(n)
	}
	path, safe := safeMaskPath(r.URL)
	var cands []maskBound
	for _, x := range b.bound {
		if x.p.sigv4 {
			continue // re-signed, not swapped (docs/network.md §8)
		}
		for _, d := range x.p.dests {
			if !d.matchHost(https, host, port) {
				continue
			}
			if (x.p.custom || d.path != "/") && (!safe || !d.matchPath(path)) {
				continue
			}
			cands = append(cands, x)
			break
		}
	}
	if len(cands) == 0 {
		return nil
	}
	used := map[string]bool{}
	headers := []string{"Authorization"}
	for _, x := range cands {
		if x.p.hasAuth(maskAuthHeader) && !slices.Contains(headers, http.CanonicalHeaderKey(x.p.header)) {
			headers = append(headers, http.CanonicalHeaderKey(x.p.header))
		}
	}
	for _, name := range headers {
		vals := r.Header[name]
		for i, v := range vals {
			nv, who, ok := translateMaskHeader(name, v, cands)
			if ok {
				vals[i] = nv
				for _, p := range who {
					used[p] = true
				}
			}
		}
	}
	out := make([]string, 0, len(used))
	for n := range used {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// translateMaskHeader is the one translation of header name's value v by the candidates, or
// false when none or more than one different one applies.
func translateMaskHeader(name, v string, cands []maskBound) (string, []string, bool) {
	type tr struct {
		val  string
		who  []string
		from *maskEntry
	}
	var trs []tr
	scheme, rest, hasScheme := strings.Cut(v, " ")
	rest = strings.TrimSpace(rest)
	if name == "Authorization" {
		for _, x := range cands {
			switch {
			case hasScheme && strings.EqualFold(scheme, "bearer") && x.p.hasAuth(maskAuthBearer) && rest == x.e.standIn,
				hasScheme && strings.EqualFold(scheme, "token") && x.p.hasAuth(maskAuthToken) && rest == x.e.standIn:
				trs = append(trs, tr{scheme + " " + x.e.real, []string{x.p.name}, x.e})
			case x.p.authContains && strings.Contains(v, x.e.standIn):
				trs = append(trs, tr{"Bearer " + x.e.real, []string{x.p.name}, x.e})
			}
		}
		if hasScheme && strings.EqualFold(scheme, "basic") {
			if t, who, ok := translateBasic(scheme, rest, cands); ok {
				trs = append(trs, tr{t, who, nil})
			} else if who != nil {
				return "", nil, false // ambiguous
			}
		}
	}
	for _, x := range cands {
		if x.p.hasAuth(maskAuthHeader) && http.CanonicalHeaderKey(x.p.header) == name && v == x.p.prefix+x.e.standIn {
			trs = append(trs, tr{x.p.prefix + x.e.real, []string{x.p.name}, x.e})
		}
	}
	if len(trs) == 0 {
		return "", nil, false
	}
	for _, t := range trs[1:] {
		if t.val != trs[0].val {
			return "", nil, false // two credentials claim it: no injection
		}
	}
	return trs[0].val, trs[0].who, true
}

// translateBasic swaps stand-ins in a Basic credential: the whole decoded value, or the user
// and/or the password (each may be a different credential's). It returns who != nil and
// false when the parts are ambiguous.
func translateBasic(scheme, b64 string, cands []maskBound) (string, []string, bool) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", nil, false
	}
	dec := string(raw)
	var basic []maskBound
	for _, x := range cands {
		if x.p.hasAuth(maskAuthBasic) {
			basic = append(basic, x)
		}
	}
	pick := func(s string) ([]maskBound, bool) {
		var m []maskBound
		for _, x := range basic {
			if x.e.standIn == s {
				m = append(m, x)
			}
		}
		return m, len(m) <= 1
	}
	enc := func(s string) string { return scheme + " " + base64.StdEncoding.EncodeToString([]byte(s)) }
	whole, ok := pick(dec)
	if !ok {
		return "", []string{}, false
	}
	if len(whole) == 1 {
		return enc(whole[0].e.real), []string{whole[0].p.name}, true
	}
	user, pass, colon := strings.Cut(dec, ":")
	if !colon {
		return "", nil, false
	}
	u, okU := pick(user)
	w, okP := pick(pass)
	if !okU || !okP {
		return "", []string{}, false
	}
	var who []string
	if len(u) == 1 {
		user, who = u[0].e.real, append(who, u[0].p.name)
	}
	if len(w) == 1 {
		pass = w[0].e.real
		if !slices.Contains(who, w[0].p.name) {
			who = append(who, w[0].p.name)
		}
	}
	if who == nil {
		return "", nil, false
	}
	return enc(user + ":" + pass), who, true
}

// The built-in providers' recognisers (value discovery, docs/network.md §8).
var (
	ghCredRE         = regexp.MustCompile(`github_pat_[A-Za-z0-9_]{22,}|gh[pousr]_[A-Za-z0-9]{36,}`)
	openaiCredRE     = regexp.MustCompile(`sk-[A-Za-z0-9_-]{40,}`)
	anthropicCredRE  = regexp.MustCompile(`sk-ant-[A-Za-z0-9_-]{20,}`)
	openrouterCredRE = regexp.MustCompile(`sk-or-[A-Za-z0-9_-]{20,}`)
	awsKeyIDCredRE   = regexp.MustCompile(`(?:AKIA|ASIA)[A-Z0-9]{16}`)
)
