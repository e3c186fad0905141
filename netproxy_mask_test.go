package main

// Tests of credential masking's providers, stand-ins, registry, environment masking and header
// translation (docs/network.md §8). The header table is testdata/netproxy/mask_headers.txt.

import (
	"bufio"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"hash/crc32"
	"maps"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func testRand(seed uint64) *mrand.Rand {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return mrand.New(mrand.NewChaCha8(s))
}

// Fixed test credentials (not real ones).
const (
	testGHToken     = "ghp_R3alT0kenAbcdefghijklmnopqrstuvwxyz"
	testGitHubToken = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456"
	testOpenAIKey   = "sk-proj-Abc123_def456-GHI789jklMNOpqrSTUvwxYZ0123456789abcdefgh"
	testOpenAIAlias = "sk-svcacct-Zyx987wvuTSRqpoNMLkjiHGFedcBA0123456789zyxwvutsrqpo"
	testAnthropic   = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcdef"
	testOpenRouter  = "sk-or-v1-0123456789abcdef0123456789abcdef0123456789abcdef01234567"
	testVendor      = "vendor_abcdefghijklmnopqrstuvwx"
	testOther       = "other_abcdefghijklmnopqrstuvwx"
	testAWSKeyID    = "AKIAIOSFODNN7EXAMPLE"
	testAWSSecret   = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
)

func testMaskProviders() credentialProviders {
	return credentialProviders{
		"vendor": {Env: []string{"VENDOR_TOKEN"}, Patterns: []string{"vendor_[a-z]{24}"},
			URLPrefixes: []string{"https://vendor.test/v1", "http://127.0.0.1:8080/api"},
			Auth:        []string{"bearer", "basic", "header"}, Header: "X-Vendor-Key", Prefix: "Key "},
		"other": {Env: []string{"OTHER_TOKEN"}, Patterns: []string{"other_[a-z]{24}"},
			URLPrefixes: []string{"https://vendor.test/v1"}, Auth: []string{"basic"}},
	}
}

func testMaskEnv() map[string]string {
	return map[string]string{
		"GH_TOKEN": testGHToken, "GITHUB_TOKEN": testGitHubToken, "OPENAI_API_KEY": testOpenAIKey,
		"ANTHROPIC_API_KEY": testAnthropic, "OPENROUTER_API_KEY": testOpenRouter,
		"VENDOR_TOKEN": testVendor, "OTHER_TOKEN": testOther, "OPENAI_ALIAS": testOpenAIAlias,
		"AWS_ACCESS_KEY_ID": testAWSKeyID, "AWS_SECRET_ACCESS_KEY": testAWSSecret,
		"HOME": "/home/u", "PATH": "/usr/bin",
	}
}

// reals are every real value of testMaskEnv.
var testReals = []string{testGHToken, testGitHubToken, testOpenAIKey, testOpenAIAlias, testAnthropic,
	testOpenRouter, testVendor, testOther, testAWSKeyID, testAWSSecret}

func maskTestEnv(t testing.TB, reg *maskRegistry, env map[string]string, custom credentialProviders) *maskResult {
	t.Helper()
	res, err := reg.maskEnv(env, custom, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func entryOf(t testing.TB, b *maskBinding, key string) *maskEntry {
	t.Helper()
	for _, x := range b.bound {
		if x.e.env == key {
			return x.e
		}
	}
	t.Fatalf("no credential bound under %s", key)
	return nil
}

func TestMaskDestinations(t *testing.T) {
	ok := []struct {
		in   string
		want maskDest
	}{
		{"https://api.vendor.test", maskDest{https: true, host: "api.vendor.test", port: 443, path: "/"}},
		{"api.vendor.test", maskDest{https: true, host: "api.vendor.test", port: 443, path: "/"}},
		{"API.Vendor.Test.:8443/v1/", maskDest{https: true, host: "api.vendor.test", port: 8443, path: "/v1"}},
		{"*.vendor.test", maskDest{https: true, host: "vendor.test", wildcard: true, port: 443, path: "/"}},
		{"127.0.0.1:8080", maskDest{https: false, host: "127.0.0.1", port: 8080, path: "/"}},
		{"localhost", maskDest{https: false, host: "localhost", port: 80, path: "/"}},
		{"http://[::1]:9/x", maskDest{https: false, host: "::1", port: 9, path: "/x"}},
		{"https://127.0.0.1/", maskDest{https: true, host: "127.0.0.1", port: 443, path: "/"}},
	}
	for _, c := range ok {
		got, err := parseMaskDest(c.in, false)
		if err != nil || got != c.want {
			t.Errorf("parseMaskDest(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "http://vendor.test", "ftp://vendor.test", "https://u:p@vendor.test",
		"https://vendor.test/?q=1", "https://vendor.test/#f", "https://vend*r.test", "https://*", "*.*.test",
		"https://vendor.test:0", "https://vendor.test:99999", "https://vendor.test/a/../b", "https://vendor.test/a%2fb",
		"http://*.localhost", "https://ven dor.test"} {
		if d, err := parseMaskDest(bad, false); err == nil {
			t.Errorf("parseMaskDest(%q) = %+v, want an error", bad, d)
		}
	}
	if _, err := parseMaskDest("*.vendor.test", true); err == nil {
		t.Error("a wildcard was accepted where none may be")
	}
	wild, _ := parseMaskDest("*.vendor.test", false)
	for host, want := range map[string]bool{"a.vendor.test": true, "a.b.vendor.test": true, "vendor.test": false, "avendor.test": false} {
		if got := wild.matchHost(true, host, 443); got != want {
			t.Errorf("*.vendor.test matches %s: %v", host, got)
		}
	}
	pre, _ := parseMaskDest("https://v.test/v1", false)
	for p, want := range map[string]bool{"/v1": true, "/v1/": true, "/v1/x": true, "/v10": false, "/": false, "/v": false} {
		if got := pre.matchPath(p); got != want {
			t.Errorf("/v1 matches %s: %v", p, got)
		}
	}
}

func TestMaskProviderCompile(t *testing.T) {
	base := credentialProvider{Env: []string{"VENDOR_TOKEN"}, Patterns: []string{"vendor_[a-z]{24}"}, URLPrefixes: []string{"https://vendor.test"}}
	mod := func(f func(*credentialProvider)) credentialProvider {
		c := base
		c.Env, c.Patterns, c.URLPrefixes = slices.Clone(c.Env), slices.Clone(c.Patterns), slices.Clone(c.URLPrefixes)
		f(&c)
		return c
	}
	cases := []struct {
		name string
		c    credentialProvider
		want string // "" = compiles
	}{
		{"ok", base, ""},
		{"empty env", mod(func(c *credentialProvider) { c.Env = nil }), "env is empty"},
		{"empty patterns", mod(func(c *credentialProvider) { c.Patterns = nil }), "patterns is empty"},
		{"no destination", mod(func(c *credentialProvider) { c.URLPrefixes = nil }), "no destination"},
		{"from env only", mod(func(c *credentialProvider) { c.URLPrefixes = nil; c.URLPrefixFromEnv = "VENDOR_URL" }), ""},
		{"bad env key", mod(func(c *credentialProvider) { c.Env = []string{"1X"} }), "not a variable name"},
		{"built-in source", mod(func(c *credentialProvider) { c.Env = []string{"GH_TOKEN"} }), "overlaps a built-in"},
		{"built-in context", mod(func(c *credentialProvider) { c.Env = []string{"GH_HOST"} }), "overlaps a built-in"},
		{"from env is a source", mod(func(c *credentialProvider) { c.URLPrefixFromEnv = "VENDOR_TOKEN" }), "distinct from env"},
		{"bad prefix url", mod(func(c *credentialProvider) { c.URLPrefixes = []string{"http://vendor.test"} }), "must use HTTPS"},
		{"header without auth header", mod(func(c *credentialProvider) { c.Header = "X-Key" }), "exactly when"},
		{"auth header without header", mod(func(c *credentialProvider) { c.Auth = []string{"header"} }), "exactly when"},
		{"bad header name", mod(func(c *credentialProvider) { c.Auth = []string{"header"}; c.Header = "X Key" }), "not a valid header name"},
		{"prefix without header", mod(func(c *credentialProvider) { c.Prefix = "Key " }), "prefix needs header"},
		{"header ok", mod(func(c *credentialProvider) { c.Auth = []string{"header"}; c.Header = "X-Key"; c.Prefix = "Key " }), ""},
		{"pattern bad", mod(func(c *credentialProvider) { c.Patterns = []string{"("} }), "does not parse"},
		{"pattern empty match", mod(func(c *credentialProvider) { c.Patterns = []string{"a*"} }), "empty string"},
		{"pattern unbounded", mod(func(c *credentialProvider) { c.Patterns = []string{"a{100}"} }), "cannot generate"},
		{"pattern too long", mod(func(c *credentialProvider) { c.Patterns = []string{strings.Repeat("a", 2049)} }), "longer than"},
		{"pattern no match", mod(func(c *credentialProvider) { c.Patterns = []string{`a\bb`} }), "cannot generate"},
	}
	for _, c := range cases {
		p, err := compileMaskProvider("vendor", c.c, map[string]string{"VENDOR_URL": "https://api.vendor.test"}, testRand(1))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want == "" && p.unusable != "":
			t.Errorf("%s: unusable: %s", c.name, p.unusable)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	if _, err := compileMaskProvider("", base, nil, testRand(1)); err == nil {
		t.Error("an empty name compiled")
	}
	// url_prefix_from_env present but unusable, and nothing else: no usable destination
	c := mod(func(c *credentialProvider) { c.URLPrefixes = nil; c.URLPrefixFromEnv = "VENDOR_URL" })
	for _, v := range []string{"", "not a destination", "http://vendor.test", "https://*.vendor.test"} {
		p, err := compileMaskProvider("vendor", c, map[string]string{"VENDOR_URL": v}, testRand(1))
		if err != nil || p.unusable == "" {
			t.Errorf("VENDOR_URL=%q: %v, unusable %q", v, err, p.unusable)
		}
	}
	p, _ := compileMaskProvider("vendor", c, map[string]string{}, testRand(1))
	if p.unusable == "" {
		t.Error("no VENDOR_URL: usable")
	}
}

// TestMaskStandInShapes draws 10,000 stand-ins per built-in shape and checks each property.
func TestMaskStandInShapes(t *testing.T) {
	reals := map[string]string{
		"GH_TOKEN": testGHToken, "GITHUB_TOKEN": testGitHubToken, "OPENAI_API_KEY": testOpenAIKey,
		"ANTHROPIC_API_KEY": testAnthropic, "OPENROUTER_API_KEY": testOpenRouter,
		"AWS_ACCESS_KEY_ID": testAWSKeyID, "AWS_SECRET_ACCESS_KEY": testAWSSecret,
		"ANTHROPIC_AUTH_TOKEN": "short", "GH_TOKEN_OLD": "0123456789abcdef0123456789abcdef01234567",
	}
	prefixes := map[string]string{"GH_TOKEN": "ghp_", "GITHUB_TOKEN": "github_pat_", "OPENAI_API_KEY": "sk-proj-",
		"ANTHROPIC_API_KEY": "sk-ant-", "OPENROUTER_API_KEY": "sk-or-v1-", "AWS_ACCESS_KEY_ID": "AKIA", "GH_TOKEN_OLD": "ghp_"}
	minLen := map[string]int{"GH_TOKEN": 40, "GH_TOKEN_OLD": 40, "OPENAI_API_KEY": 51}
	byName := map[string]*maskProvider{}
	for _, p := range maskBuiltins(nil) {
		for _, k := range p.env {
			byName[k] = p
		}
	}
	byName["GH_TOKEN_OLD"] = byName["GH_TOKEN"]
	const draws = 10000
	r := newCryptoRand()
	for key, real := range reals {
		p := byName[key]
		seen := map[string]bool{}
		for range draws {
			s, err := p.standIn(real, r)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			want := max(len(real), minLen[key], len(prefixes[key])+maskStandInMinTail)
			switch {
			case s == real || strings.Contains(s, real) || strings.Contains(real, s):
				t.Fatalf("%s: stand-in %q overlaps the real value", key, s)
			case !strings.HasPrefix(s, prefixes[key]):
				t.Fatalf("%s: stand-in %q lost the prefix %q", key, s, prefixes[key])
			case len(s) != want:
				t.Fatalf("%s: stand-in %q is %d long, want %d", key, s, len(s), want)
			case !validHeaderValue(s):
				t.Fatalf("%s: stand-in %q is no header value", key, s)
			}
			for i := len(prefixes[key]); i < len(real) && i < len(s); i++ {
				if class(real[i]) != class(s[i]) && !(key == "AWS_SECRET_ACCESS_KEY" && strings.ContainsRune("/+", rune(real[i]))) {
					t.Fatalf("%s: position %d: %q for %q", key, i, s[i], real[i])
				}
			}
			if strings.HasPrefix(key, "GH_TOKEN") && gitHubChecksumValid(s) {
				t.Fatalf("%s: stand-in %q has a valid checksum", key, s)
			}
			seen[s] = true
		}
		if len(seen) != draws {
			t.Errorf("%s: %d distinct stand-ins in %d draws", key, len(seen), draws)
		}
	}
}

// class is a character's class as shapedStandIn keeps it: digit, upper, lower, or itself.
func class(c byte) string {
	switch {
	case c >= '0' && c <= '9':
		return "digit"
	case c >= 'A' && c <= 'Z':
		return "upper"
	case c >= 'a' && c <= 'z':
		return "lower"
	}
	return string(c)
}

func TestMaskGitHubChecksum(t *testing.T) {
	r := testRand(7)
	valid := 0
	for range 10000 {
		body := make([]byte, ghChecksumBodyLen)
		for i := range body {
			body[i] = maskAlnum[r.IntN(len(maskAlnum))]
		}
		tok := "ghp_" + string(body) + base62Pad(crc32.ChecksumIEEE(body), ghChecksumAlphabets[0], ghChecksumLen)
		if !gitHubChecksumValid(tok) {
			t.Fatalf("%s: a correct checksum does not verify", tok)
		}
		broken := breakGitHubChecksum(tok, r)
		if gitHubChecksumValid(broken) || broken[:34] != tok[:34] || len(broken) != len(tok) {
			t.Fatalf("%s → %s: not broken, or more than the checksum changed", tok, broken)
		}
		if !isGitHubChecksummedShape(broken) {
			t.Fatalf("%s lost its shape", broken)
		}
		valid++
	}
	if gitHubChecksumValid(testGitHubToken) || gitHubChecksumValid("ghp_short") {
		t.Error("a token of another shape verifies")
	}
	t.Logf("%d checksummed tokens broken", valid)
}

func TestMaskGenCorpus(t *testing.T) {
	corpus := []string{
		`vendor_[a-z]{24}`, `[A-Z0-9]{20}`, `xox[baprs]-[0-9]{10,13}-[0-9]{10,13}-[a-zA-Z0-9]{24}`,
		`(?i)tok_[a-f0-9]{32}`, `glpat-[0-9a-zA-Z_\-]{20}`, `sk_(live|test)_[0-9a-zA-Z]{24,99}`,
		`[\w.-]+@[\w-]+\.\w{2,4}`, `AIza[0-9A-Za-z_-]{35}`, `\d{4}-\d{4}`, `[^\s:]{8}:[^\s:]{8}`,
		`npm_[A-Za-z0-9]{36}`, `key-.+`, `[α-ω]{5}`, `\p{Greek}{3}x`, `^abc[0-9]+$`, `a|b|c`,
	}
	for _, src := range corpus {
		r := testRand(uint64(len(src)))
		p, err := compileMaskPattern(src, r)
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		check := regexp.MustCompile(`^(?:` + src + `)$`)
		for range 500 {
			v, err := p.generate(r)
			if err != nil {
				t.Fatalf("%s: %v", src, err)
			}
			if !check.MatchString(v) || len(v) > maskGenMaxBytes || !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
				t.Fatalf("%s: generated %q", src, v)
			}
		}
	}
	// nests of repetitions of something empty end within the work bound (each was 64^depth)
	for _, slow := range []string{`(((((((\b)*)*)*)*)*)*)*x`, `((((((()*)*)*)*)*)*)*y`, `((((((((^)*)*)*)*)*)*)*)*z`} {
		if p, err := compileMaskPattern(slow, testRand(5)); err == nil {
			if v, err := p.generate(testRand(6)); err == nil && !p.anchored.MatchString(v) {
				t.Errorf("%s generated %q", slow, v)
			}
		}
	}
	for _, bad := range []string{`a*`, `(?:)`, `x{65}`, `\bx\B`, `[^\x00-\x{10FFFF}]`, `$a`, strings.Repeat("a", 2049)} {
		if _, err := compileMaskPattern(bad, testRand(1)); err == nil {
			t.Errorf("%q compiled", bad)
		}
	}
}

func TestMaskEnv(t *testing.T) {
	reg := newMaskRegistry()
	in := testMaskEnv()
	in["AUTH_HEADER"] = "Bearer " + testGHToken
	in["HOMEBREW_GITHUB_API_TOKEN"] = "ghp_Another0ne1234567890abcdefghijklmnopq"
	in["TWO"] = testVendor + "," + testOther
	in["NOT_WHOLE"] = "ghp_Unrelated1234567890abcdefghijklmnopq_x"
	in["PATH_LIKE_PATH"] = "/x/" + testGHToken
	in["GH_ENTERPRISE_TOKEN"] = "ghp_Enterpr1se234567890abcdefghijklmnopqr"
	in["BROKEN_TOKEN"] = "broken_abc"
	in["ANTHROPIC_AUTH_TOKEN"] = "line1\nline2"
	in["NO_PROXY"] = "localhost,127.0.0.1,.github.com,api.openai.com:443,ghe.com,vendor.test,example.org,10.0.0.0/8"
	in["no_proxy"] = "*"
	in["MY_COPY"] = "x=" + "ghp_Parent0nly34567890abcdefghijklmnopqrs"
	custom := testMaskProviders()
	custom["broken"] = credentialProvider{Env: []string{"BROKEN_TOKEN"}, Patterns: []string{"("}, URLPrefixes: []string{"https://b.test"}}
	orig := maps.Clone(in)
	res, err := reg.maskEnv(in, custom, []string{"GH_TOKEN=ghp_Parent0nly34567890abcdefghijklmnopqrs", "HOME=/root"})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(in, orig) {
		t.Fatal("maskEnv changed its input")
	}
	env := res.env
	// no real value anywhere in the masked environment
	all := append(slices.Clone(testReals), "ghp_Another0ne1234567890abcdefghijklmnopq", "ghp_Parent0nly34567890abcdefghijklmnopqrs",
		"ghp_Enterpr1se234567890abcdefghijklmnopqr", "broken_abc", "line1")
	for k, v := range env {
		for _, real := range all {
			if strings.Contains(v, real) && k != "NOT_WHOLE" && k != "PATH_LIKE_PATH" {
				t.Errorf("%s still holds a real value: %q", k, v)
			}
		}
	}
	for _, k := range []string{"GH_TOKEN", "GITHUB_TOKEN", "OPENAI_API_KEY", "VENDOR_TOKEN", "AWS_ACCESS_KEY_ID"} {
		if e := entryOf(t, res.binding, k); env[k] != e.standIn {
			t.Errorf("%s = %q, want its stand-in", k, env[k])
		}
	}
	if env["AUTH_HEADER"] != "Bearer "+entryOf(t, res.binding, "GH_TOKEN").standIn {
		t.Errorf("alias by value: %q", env["AUTH_HEADER"])
	}
	if v := env["HOMEBREW_GITHUB_API_TOKEN"]; !strings.HasPrefix(v, "ghp_") || v == in["HOMEBREW_GITHUB_API_TOKEN"] {
		t.Errorf("alias by shape: %q", v)
	}
	if v := env["TWO"]; strings.Contains(v, testVendor) || strings.Contains(v, testOther) {
		t.Errorf("two custom credentials in one variable: %q", v)
	}
	if env["NOT_WHOLE"] != in["NOT_WHOLE"] {
		t.Errorf("a token that goes on was taken for one: %q", env["NOT_WHOLE"])
	}
	if env["PATH_LIKE_PATH"] != in["PATH_LIKE_PATH"] || env["PATH"] != "/usr/bin" || env["HOME"] != "/home/u" {
		t.Error("a search path or an ordinary variable changed")
	}
	if strings.Contains(env["MY_COPY"], "Parent0nly") || !strings.HasPrefix(env["MY_COPY"], "x=ghp_") {
		t.Errorf("the server's own credential under another name: %q", env["MY_COPY"])
	}
	// D2: removed, never passed real
	for _, k := range []string{"GH_ENTERPRISE_TOKEN", "BROKEN_TOKEN", "ANTHROPIC_AUTH_TOKEN"} {
		if v, ok := env[k]; ok {
			t.Errorf("%s kept: %q", k, v)
		}
	}
	unset := map[string]string{}
	for _, u := range res.unset {
		unset[u.key] = u.provider + ": " + u.reason
	}
	if len(unset) != 3 || !strings.Contains(unset["BROKEN_TOKEN"], "invalid credential provider") ||
		!strings.Contains(unset["GH_ENTERPRISE_TOKEN"], "no usable destination") {
		t.Errorf("unset: %v", unset)
	}
	// D7: no masked destination bypasses the proxy
	// (127.0.0.1 goes: vendor's http://127.0.0.1:8080 is a masked destination)
	if got, want := env["NO_PROXY"], "localhost,example.org,10.0.0.0/8"; got != want {
		t.Errorf("NO_PROXY = %q, want %q", got, want)
	}
	if _, ok := env["no_proxy"]; ok {
		t.Errorf("no_proxy=* kept: %q", env["no_proxy"])
	}
	// D10: the markers
	if env[maskMarkerActive] != "1" {
		t.Error("no active marker")
	}
	var list [][2]string
	if err := json.Unmarshal([]byte(env[maskMarkerList]), &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range list {
		got[kv[0]] = kv[1]
		if slices.Contains(all, kv[1]) {
			t.Errorf("marker holds a real value for %s", kv[0])
		}
	}
	for _, k := range []string{"GH_TOKEN", "AUTH_HEADER", "HOMEBREW_GITHUB_API_TOKEN", "MY_COPY", "AWS_SECRET_ACCESS_KEY"} {
		if got[k] == "" {
			t.Errorf("marker lacks %s: %v", k, got)
		}
	}
	if !slices.Contains(res.aliases, "AUTH_HEADER") {
		t.Errorf("aliases %v", res.aliases)
	}
	// argv and snapshot text
	if s := res.binding.maskText("curl -H 'Authorization: Bearer " + testGHToken + "' -u " + testVendor); strings.Contains(s, testGHToken) || strings.Contains(s, testVendor) {
		t.Errorf("maskText left a real value: %s", s)
	}
	// intercepts: https destinations of bound credentials only
	for _, c := range []struct {
		host string
		port uint16
		want bool
	}{
		{"api.github.com", 443, true}, {"API.GITHUB.COM", 443, true}, {"acme.ghe.com", 443, true},
		{"api.github.com", 80, false}, {"attacker.test", 443, false}, {"vendor.test", 443, true},
		{"127.0.0.1", 8080, false}, {"s3.amazonaws.com", 443, true}, {"b.test", 443, false},
		{"api.anthropic.com", 443, true},
	} {
		if got := res.binding.intercepts(c.host, c.port); got != c.want {
			t.Errorf("intercepts(%s, %d) = %v", c.host, c.port, got)
		}
	}
}

// TestMaskRegistryStable: one stand-in per (provider, variable, real value) for the
// registry's life, whichever process; another variable or value gets another.
func TestMaskRegistryStable(t *testing.T) {
	reg := newMaskRegistry()
	a := maskTestEnv(t, reg, testMaskEnv(), testMaskProviders())
	b := maskTestEnv(t, reg, testMaskEnv(), testMaskProviders())
	for _, k := range []string{"GH_TOKEN", "OPENAI_API_KEY", "VENDOR_TOKEN", "OPENAI_ALIAS"} {
		if a.env[k] != b.env[k] {
			t.Errorf("%s: %q then %q", k, a.env[k], b.env[k])
		}
	}
	env := testMaskEnv()
	env["GITHUB_TOKEN"] = testGHToken // same value, other name
	c := maskTestEnv(t, reg, env, testMaskProviders())
	if c.env["GITHUB_TOKEN"] == c.env["GH_TOKEN"] {
		t.Error("one stand-in for two variables")
	}
	other := newMaskRegistry()
	if d := maskTestEnv(t, other, testMaskEnv(), testMaskProviders()); d.env["GH_TOKEN"] == a.env["GH_TOKEN"] {
		t.Error("two registries drew the same stand-in")
	}
	// a value that is a stand-in already (a masked command's own start) is not registered
	again := maskTestEnv(t, reg, map[string]string{"GH_TOKEN": a.env["GH_TOKEN"]}, nil)
	if again.env["GH_TOKEN"] != a.env["GH_TOKEN"] || len(again.binding.bound) != 0 {
		t.Errorf("a stand-in was masked again: %q", again.env["GH_TOKEN"])
	}
}

// TestMaskFailClosed: a provider whose every draw could be mistaken refuses the start.
func TestMaskFailClosed(t *testing.T) {
	reg := newMaskRegistry()
	custom := credentialProviders{"fixed": {Env: []string{"FIXED_TOKEN"}, Patterns: []string{"fixed_token_literal"}, URLPrefixes: []string{"https://f.test"}}}
	// the only value the pattern can produce is already in the environment
	_, err := reg.maskEnv(map[string]string{"FIXED_TOKEN": "secret-value-1234", "ELSEWHERE": "fixed_token_literal"}, custom, nil)
	if err == nil || !strings.Contains(err.Error(), "cannot be mistaken") || strings.Contains(err.Error(), "secret-value") {
		t.Fatalf("err = %v", err)
	}
	// the same with room: it works
	if _, err := reg.maskEnv(map[string]string{"FIXED_TOKEN": "secret-value-1234"}, custom, nil); err != nil {
		t.Fatal(err)
	}
}

// maskVector is one line of testdata/netproxy/mask_headers.txt.
type maskVector struct {
	line                       int
	url, header, sent, want, p string
}

func readMaskVectors(t testing.TB) []maskVector {
	f, err := os.Open("testdata/netproxy/mask_headers.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []maskVector
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Split(line, "\t")
		if len(fs) != 5 {
			t.Fatalf("mask_headers.txt:%d: %d fields", n, len(fs))
		}
		out = append(out, maskVector{n, fs[0], fs[1], fs[2], fs[3], fs[4]})
	}
	return out
}

var maskPlaceholder = regexp.MustCompile(`\{([SR]):([A-Z_]+)\}`)
var maskB64 = regexp.MustCompile(`b64\(([^)]*)\)`)

func expandMaskVector(t testing.TB, b *maskBinding, s string) string {
	s = maskPlaceholder.ReplaceAllStringFunc(s, func(m string) string {
		g := maskPlaceholder.FindStringSubmatch(m)
		e := entryOf(t, b, g[2])
		if g[1] == "S" {
			return e.standIn
		}
		return e.real
	})
	return maskB64.ReplaceAllStringFunc(s, func(m string) string {
		return base64.StdEncoding.EncodeToString([]byte(maskB64.FindStringSubmatch(m)[1]))
	})
}

func TestMaskHeaderVectors(t *testing.T) {
	res := maskTestEnv(t, newMaskRegistry(), testMaskEnv(), testMaskProviders())
	vs := readMaskVectors(t)
	if len(vs) < 60 {
		t.Fatalf("%d vectors", len(vs))
	}
	for _, v := range vs {
		r, err := http.NewRequest("GET", v.url, nil)
		if err != nil {
			t.Fatalf("line %d: %v", v.line, err)
		}
		sent := expandMaskVector(t, res.binding, v.sent)
		r.Header[http.CanonicalHeaderKey(v.header)] = []string{sent}
		r.Header.Set("X-Untouched", sent)
		who := res.binding.inject(r)
		want := sent
		if v.want != "=" {
			want = expandMaskVector(t, res.binding, v.want)
		}
		wantWho := []string{}
		if v.p != "-" {
			wantWho = strings.Split(v.p, ",")
		}
		if got := r.Header.Get(v.header); got != want || !slices.Equal(append([]string{}, who...), wantWho) {
			t.Errorf("mask_headers.txt:%d: %s %s: %q\n  got  %q %v\n  want %q %v", v.line, v.url, v.header, sent, got, who, want, wantWho)
		}
		if r.Header.Get("X-Untouched") != sent {
			t.Errorf("line %d: another header was rewritten", v.line)
		}
	}
	t.Logf("%d header vectors", len(vs))
}

// FuzzMaskHeaderTranslate: whatever the request, a real value appears in a header only where
// the sender put the matching stand-in, in a header that carries that credential, for a
// destination (scheme, host, port) it belongs to; nothing panics.
func FuzzMaskHeaderTranslate(f *testing.F) {
	res := maskTestEnv(f, newMaskRegistry(), testMaskEnv(), testMaskProviders())
	for _, v := range readMaskVectors(f) {
		f.Add(v.url, v.header, expandMaskVector(f, res.binding, v.sent))
	}
	f.Fuzz(func(t *testing.T, rawURL, header, value string) {
		r, err := http.NewRequest("GET", rawURL, nil)
		if err != nil || r.URL.Host == "" {
			return
		}
		name := http.CanonicalHeaderKey(header)
		r.Header[name] = []string{value}
		res.binding.inject(r)
		out := strings.Join(r.Header[name], "\n")
		if out == value {
			return
		}
		var culprits []maskBound
		for _, x := range res.binding.bound {
			if strings.Contains(out, x.e.real) && !strings.Contains(value, x.e.real) {
				culprits = append(culprits, x)
			}
		}
		if len(culprits) == 0 {
			// a basic value re-encoded is the only other change
			if !strings.HasPrefix(strings.ToLower(value), "basic ") {
				t.Fatalf("header changed without a credential: %q → %q", value, out)
			}
			return
		}
		https := r.URL.Scheme == "https"
		port := uint16(443)
		if !https {
			port = 80
		}
		if p := r.URL.Port(); p != "" {
			n := 0
			for _, c := range p {
				n = n*10 + int(c-'0')
			}
			port = uint16(n)
		}
		for _, x := range culprits {
			okDest := false
			for _, d := range x.p.dests {
				okDest = okDest || d.matchHost(https, r.URL.Hostname(), port)
			}
			okHeader := name == "Authorization" || x.p.hasAuth(maskAuthHeader) && name == http.CanonicalHeaderKey(x.p.header)
			dec := value
			if sch, rest, ok := strings.Cut(value, " "); ok && strings.EqualFold(sch, "basic") {
				if b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest)); err == nil {
					dec = string(b)
				}
			}
			if !okDest || !okHeader || !strings.Contains(dec, x.e.standIn) || x.p.sigv4 {
				t.Fatalf("%s's real value injected: %s %s: %q → %q", x.e.env, rawURL, name, value, out)
			}
		}
	})
}

// FuzzMaskGen: a pattern that compiles generates only values that fully match it, bounded,
// valid UTF-8 without NUL.
func FuzzMaskGen(f *testing.F) {
	for _, s := range []string{`vendor_[a-z]{24}`, `(?i)ab+c?`, `[^a]{3}`, `x|y{2,5}`, `\w+@\d{2}`, `.{1,9}`, `\p{Han}{2}`, `(a|)b`} {
		f.Add(s, uint64(1))
	}
	f.Fuzz(func(t *testing.T, pattern string, seed uint64) {
		r := testRand(seed)
		p, err := compileMaskPattern(pattern, r)
		if err != nil {
			return
		}
		check, err := regexp.Compile(`^(?:` + pattern + `)$`)
		if err != nil {
			t.Fatalf("%q compiled for masking but not for the check: %v", pattern, err)
		}
		for range 4 {
			v, err := p.generate(r)
			if err != nil {
				continue
			}
			if !check.MatchString(v) || len(v) > maskGenMaxBytes || !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
				t.Fatalf("%q generated %q", pattern, v)
			}
		}
	})
}

// TestMaskCustomStandInForm: a custom stand-in keeps, for basic, whether the value holds a
// ":", and always whether it is trimmed; it matches the pattern the real value matches.
func TestMaskCustomStandInForm(t *testing.T) {
	c := credentialProvider{Env: []string{"PAIR"}, Patterns: []string{`[a-z]{6}(:[a-z]{6})?`, `tok [a-z]{12}`},
		URLPrefixes: []string{"https://pair.test"}, Auth: []string{"basic"}}
	p, err := compileMaskProvider("pair", c, nil, testRand(3))
	if err != nil {
		t.Fatal(err)
	}
	reg := newMaskRegistry()
	second := regexp.MustCompile(`^tok [a-z]{12}$`)
	for i := range 300 {
		real := []string{"abcdef:ghijkl", "abcdef", "tok abcdefghijkl"}[i%3]
		e, err := reg.register(p, "PAIR", real+strings.Repeat("x", 0), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(e.standIn, ":") != strings.Contains(real, ":") || second.MatchString(e.standIn) != second.MatchString(real) {
			t.Fatalf("%q → %q", real, e.standIn)
		}
		reg = newMaskRegistry() // a fresh draw each time
	}
}

// TestMaskBindingUnmask: what the interception hands back to the child from an origin that
// echoes a credential (D6) carries the stand-in: in response headers, and as the pairs the
// body scan replaces, the longest real value first.
func TestMaskBindingUnmask(t *testing.T) {
	res, err := newMaskRegistry().maskEnv(testMaskEnv(), testMaskProviders(), nil)
	if err != nil {
		t.Fatal(err)
	}
	gh := entryOf(t, res.binding, "GH_TOKEN")
	h := http.Header{"X-Echo": {"token " + gh.real, "none"}, "Www-Authenticate": {gh.real}}
	res.binding.unmask(h)
	if h.Get("X-Echo") != "token "+gh.standIn || h.Values("X-Echo")[1] != "none" || h.Get("Www-Authenticate") != gh.standIn {
		t.Errorf("unmasked headers: %v", h)
	}
	pairs := res.binding.unmaskPairs()
	if len(pairs) != len(res.binding.bound) {
		t.Fatalf("%d pairs for %d credentials", len(pairs), len(res.binding.bound))
	}
	for i, p := range pairs {
		if i > 0 && len(p.real) > len(pairs[i-1].real) {
			t.Errorf("pair %d is longer than the one before it", i)
		}
		if string(p.real) == gh.real && string(p.standIn) != gh.standIn {
			t.Errorf("GH_TOKEN's pair has another stand-in")
		}
	}
}

// TestMaskGHHostPort: GitHub Enterprise's token goes to the host GH_HOST names, on the port it
// names, 443 without one (the reference drops the port and matches every port of the host).
func TestMaskGHHostPort(t *testing.T) {
	for _, c := range []struct {
		ghHost string
		host   string
		port   uint16
	}{
		{"ghe.corp.example", "ghe.corp.example", 443},
		{"ghe.corp.example:8443", "ghe.corp.example", 8443},
		{"127.0.0.5:40123", "127.0.0.5", 40123},
		{"[::1]:9443", "::1", 9443},
	} {
		var ent *maskProvider
		for _, p := range maskBuiltins(map[string]string{"GH_HOST": c.ghHost}) {
			if p.name == "github-enterprise" {
				ent = p
			}
		}
		if ent == nil || len(ent.dests) != 1 {
			t.Fatalf("GH_HOST=%s: no enterprise destination", c.ghHost)
		}
		d := ent.dests[0]
		if !d.matchHost(true, c.host, c.port) {
			t.Errorf("GH_HOST=%s: %s:%d not a destination", c.ghHost, c.host, c.port)
		}
		for _, other := range []uint16{443, 8080} {
			if other != c.port && d.matchHost(true, c.host, other) {
				t.Errorf("GH_HOST=%s: port %d is a destination too", c.ghHost, other)
			}
		}
	}
	for _, bad := range []string{"ghe.corp.example:0", "ghe.corp.example:x", "github.com:8443", "a/b:1"} {
		if _, _, ok := parseGHHost(bad); ok {
			t.Errorf("GH_HOST=%s accepted", bad)
		}
	}
}

// TestMaskEnvEncodedForms: a real value being masked, or the server's own credential, found
// encoded in another variable (base64 standard or URL-safe, padded or not, at each alignment
// inside a longer encoded string; percent-encoded; hex) removes that variable, logged by name
// with its provider and a reason, never the value; a real value under maskEncodedMin bytes,
// a skipped variable and unrelated base64 are left as they are.
func TestMaskEnvEncodedForms(t *testing.T) {
	const short = "short_abcdefgh" // 14 bytes: its encoded forms are not looked for
	parentOnly := "ghp_Parent0nly34567890abcdefghijklmnopqrs"
	in := testMaskEnv()
	in["SHORT_TOKEN"] = short
	custom := testMaskProviders()
	custom["short"] = credentialProvider{Env: []string{"SHORT_TOKEN"}, Patterns: []string{"short_[a-z]{8}"},
		URLPrefixes: []string{"https://short.test"}, Auth: []string{"bearer"}}
	want := map[string]string{} // variable -> the credential's variable named in the reason
	encs := []struct {
		name string
		e    *base64.Encoding
	}{{"std", base64.StdEncoding}, {"rawstd", base64.RawStdEncoding}, {"url", base64.URLEncoding}, {"rawurl", base64.RawURLEncoding}}
	// a value whose runs of '?' and '~' encode to '/' and '+' (URL-safe: '_' and '-') at every
	// alignment: the two alphabets differ on it
	const symbols = "tok-???????-~~~~~~~-end"
	in["ANTHROPIC_AUTH_TOKEN"] = symbols
	// the three alignments, twice each, and every length of what follows mod 3
	prefixes := []string{"", "x", "x-", "x-a", "x-access-token:", "user:"}
	for _, real := range []struct{ key, v string }{{"GH_TOKEN", testGHToken}, {"AWS_SECRET_ACCESS_KEY", testAWSSecret},
		{"ANTHROPIC_AUTH_TOKEN", symbols}} {
		for _, enc := range encs {
			for i, pre := range prefixes {
				for suf := range 3 {
					k := "ENC_" + real.key + "_" + enc.name + "_" + strconv.Itoa(i) + "_" + strconv.Itoa(suf)
					b64 := enc.e.EncodeToString([]byte(pre + real.v + strings.Repeat("!", suf)))
					alphabet := "+/"
					if strings.Contains(enc.name, "url") {
						alphabet = "-_"
					}
					if real.v == symbols && !strings.ContainsAny(b64, alphabet) {
						t.Fatalf("%s: the fixture does not exercise its alphabet: %s", k, b64)
					}
					in[k] = "AUTHORIZATION: basic " + b64
					want[k] = real.key
				}
			}
		}
	}
	// the AWS secret holds '/': its percent-encodings differ from it
	in["PCT_QUERY"] = "https://x.test/?s=" + url.QueryEscape(testAWSSecret) + "&a=b"
	in["PCT_SEGMENT"] = "/p/" + url.PathEscape("a b"+testAWSSecret)
	in["PCT_LOWER"] = strings.ReplaceAll(url.QueryEscape(testAWSSecret), "%2F", "%2f")
	in["HEX_LOWER"] = "0x" + hex.EncodeToString([]byte(testGHToken))
	in["HEX_EXACT"] = hex.EncodeToString([]byte(testAWSKeyID)) // the whole value, first byte to last
	in["HEX_UPPER"] = strings.ToUpper(hex.EncodeToString([]byte("k=" + testVendor)))
	in["PARENT_B64"] = base64.StdEncoding.EncodeToString([]byte("x-access-token:" + parentOnly))
	for _, k := range []string{"PCT_QUERY", "PCT_SEGMENT", "PCT_LOWER"} {
		want[k] = "AWS_SECRET_ACCESS_KEY"
	}
	want["HEX_LOWER"], want["HEX_UPPER"], want["PARENT_B64"] = "GH_TOKEN", "VENDOR_TOKEN", "GH_TOKEN"
	want["HEX_EXACT"] = "AWS_ACCESS_KEY_ID"
	// a variable whose plain alias step 2 replaced, and that holds an encoded one too
	in["BOTH"] = testGHToken + " " + base64.StdEncoding.EncodeToString([]byte(testGHToken))
	want["BOTH"] = "GH_TOKEN"
	// left alone
	keep := map[string]string{
		"SHORT_B64":    base64.StdEncoding.EncodeToString([]byte("x-access-token:" + short)),
		"SHORT_HEX":    hex.EncodeToString([]byte(short)),
		"UNRELATED":    base64.StdEncoding.EncodeToString([]byte("x-access-token:ghp_Unrelated1234567890abcdefghijklmnop")),
		"SKIPPED_PATH": "/x/" + base64.StdEncoding.EncodeToString([]byte(testGHToken)),
	}
	maps.Copy(in, keep)

	res, err := newMaskRegistry().maskEnv(in, custom, []string{"GH_TOKEN=" + parentOnly})
	if err != nil {
		t.Fatal(err)
	}
	unset := map[string]maskUnset{}
	for _, u := range res.unset {
		unset[u.key] = u
	}
	for k, cred := range want {
		if v, ok := res.env[k]; ok {
			t.Errorf("%s kept: %q", k, v)
			continue
		}
		u, ok := unset[k]
		if !ok || !strings.Contains(u.reason, cred) || u.provider == "" {
			t.Errorf("%s: not logged with its provider and %s: %+v", k, cred, u)
		}
		for _, real := range append(slices.Clone(testReals), parentOnly) {
			if strings.Contains(u.reason, real) || strings.Contains(u.provider, real) {
				t.Errorf("%s: the log holds a real value: %+v", k, u)
			}
		}
	}
	for k, v := range keep {
		if res.env[k] != v {
			t.Errorf("%s changed: %q, want %q", k, res.env[k], v)
		}
	}
	if slices.Contains(res.aliases, "BOTH") || strings.Contains(res.env[maskMarkerList], `"BOTH"`) {
		t.Errorf("a removed variable is still an alias: %v %s", res.aliases, res.env[maskMarkerList])
	}
	if res.env["GH_TOKEN"] == testGHToken || res.env["HOME"] != "/home/u" {
		t.Error("the provider's own variable or an ordinary one went wrong")
	}
}

// BenchmarkMaskEnvLarge: maskEnv over a large environment (maskBenchVars variables of 1 KiB
// of base64-like text, plus testMaskEnv's ten credentials), which step 2b scans for every
// encoded form of every credential: its cost is the start's.
func BenchmarkMaskEnvLarge(b *testing.B) {
	const maskBenchVars = 500
	in := testMaskEnv()
	r := testRand(1)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := range maskBenchVars {
		v := make([]byte, 1024)
		for j := range v {
			v[j] = alphabet[r.IntN(len(alphabet))]
		}
		in["BENCH_"+strconv.Itoa(i)] = string(v)
	}
	reg := newMaskRegistry()
	custom := testMaskProviders()
	b.Run("maskEnv", func(b *testing.B) {
		for b.Loop() {
			if _, err := reg.maskEnv(in, custom, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	// step 2b alone, on the masked environment
	res, err := reg.maskEnv(in, custom, nil)
	if err != nil {
		b.Fatal(err)
	}
	owner := map[string]*maskProvider{}
	for _, p := range res.binding.providers {
		for _, k := range p.env {
			owner[k] = p
		}
	}
	n := len(res.env)
	b.Run("encoded", func(b *testing.B) {
		for b.Loop() {
			maskDropEncoded(res, owner, maskContextKeys, nil, nil, map[string]string{})
		}
		if len(res.env) != n {
			b.Fatal("a variable was removed")
		}
	})
}
