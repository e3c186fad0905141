package main

// Tests of websocket upgrade authentication (ws_auth.go; docs/protocol.md §2.3): the fixtures under
// testdata, the capability-token and signed-bearer vectors, configuration errors, a fuzz target.

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Fixtures in testdata/auth. The files end in a newline that the server
// must trim; the constants are the trimmed values.
const (
	testTokenFile        = "testdata/auth/token"
	testSharedSecretFile = "testdata/auth/shared-secret"
	testToken            = "s3cret-capability-token"
	testSharedSecret     = "exec-server-test-shared-secret-0123456789"
)

// testAuthNow is the clock used by the vectors (NOW in signed-bearer-token.txt).
var testAuthNow = time.Unix(1750000000, 0)

func TestWSAuthFixturesEndInNewline(t *testing.T) {
	for path, want := range map[string]string{testTokenFile: testToken, testSharedSecretFile: testSharedSecret} {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want+"\n" {
			t.Errorf("%s = %q, want %q (a trailing newline the server trims)", path, got, want+"\n")
		}
	}
}

func TestWSAuthDisabledAcceptsAnyHeader(t *testing.T) {
	none, err := newWSAuth("none", "", "", "", "", "", defaultWSMaxClockSkew)
	if err != nil {
		t.Fatal(err)
	}
	empty, err := newWSAuth("", "", "", "", "", "", defaultWSMaxClockSkew)
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]*wsAuthConfig{"nil": nil, "none": none, "empty mode": empty} {
		if a.enabled() {
			t.Errorf("%s: enabled() = true", name)
		}
		for _, h := range []string{"", "Bearer x", "garbage\x00"} {
			if body, ok := a.check(h, testAuthNow); !ok || body != "" {
				t.Errorf("%s: check(%q) = %q, %v; want accepted", name, h, body, ok)
			}
		}
	}
}

// readCapabilityVectors reads capability-token.txt: each case an authorization (Go-quoted) and
// what check gives for it.
func readCapabilityVectors(t *testing.T) []vectorCase {
	t.Helper()
	cases := readVectors(t, "testdata/auth/capability-token.txt")
	for i := range cases {
		c := &cases[i]
		c.only(t, "authorization", "expect")
		authorization, err := strconv.Unquote(c.field(t, "authorization"))
		if err != nil {
			t.Fatalf("%s: authorization: %v", c.where(), err)
		}
		c.fields["authorization"] = authorization
		c.field(t, "expect")
	}
	return cases
}

func TestWSAuthCapabilityTokenVectors(t *testing.T) {
	digest := sha256.Sum256([]byte(testToken))
	configs := map[string][2]string{ // name → token file, token sha256
		"token-file":   {testTokenFile, ""},
		"token-sha256": {"", hex.EncodeToString(digest[:])},
		"token-SHA256": {"", strings.ToUpper(hex.EncodeToString(digest[:]))},
	}
	vectors := readCapabilityVectors(t)
	for name, flags := range configs {
		a, err := newWSAuth("capability-token", flags[0], flags[1], "", "", "", defaultWSMaxClockSkew)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, v := range vectors {
			authorization, expect := v.fields["authorization"], v.fields["expect"]
			body, ok := a.check(authorization, testAuthNow)
			if got := authResult(body, ok); got != expect {
				t.Errorf("%s: %s: check(%q) = %q, want %q", name, v.where(), authorization, got, expect)
			}
		}
	}
}

func TestWSAuthCapabilityTokenRejectsOverlongToken(t *testing.T) {
	long := strings.Repeat("a", maxWSBearerTokenBytes+1)
	dir := t.TempDir()
	// The longest configurable token still works; one byte more is never hashed.
	path := writeAuthFile(t, dir, "token", strings.Repeat("a", maxWSBearerTokenBytes))
	a, err := newWSAuth("capability-token", path, "", "", "", "", defaultWSMaxClockSkew)
	if err != nil {
		t.Fatal(err)
	}
	if body, ok := a.check("Bearer "+long[:maxWSBearerTokenBytes], testAuthNow); !ok {
		t.Errorf("token of %d bytes: %q", maxWSBearerTokenBytes, body)
	}
	if body, _ := a.check("Bearer "+long, testAuthNow); body != wsAuthInvalidToken {
		t.Errorf("token of %d bytes: body %q, want %q", len(long), body, wsAuthInvalidToken)
	}
}

// jwtVectorKeys are the keys of signed-bearer-token.txt.
var jwtVectorKeys = []string{
	"name", "issuer", "audience", "skew", "header", "claims", "sign", "encode", "mutate", "token",
	"suffix", "authorization", "expect",
}

// readJWTVectors reads signed-bearer-token.txt, with the Go-quoted values unquoted.
func readJWTVectors(t *testing.T) []vectorCase {
	t.Helper()
	vectors := readVectors(t, "testdata/auth/signed-bearer-token.txt")
	for i := range vectors {
		v := &vectors[i]
		v.only(t, jwtVectorKeys...)
		for key, value := range v.fields {
			if key == "authorization" || (key == "issuer" || key == "audience") && strings.HasPrefix(value, `"`) {
				u, err := strconv.Unquote(value)
				if err != nil {
					t.Fatalf("%s: %s: %v", v.where(), key, err)
				}
				v.fields[key] = u
			}
		}
		if v.fields["name"] == "" || v.fields["expect"] == "" {
			t.Fatalf("%s: a case needs name: and expect:", v.where())
		}
		if _, ok := v.fields["claims"]; !ok && v.fields["token"] == "" {
			t.Fatalf("%s: a case needs claims: or token:", v.where())
		}
	}
	return vectors
}

var authNowExpr = regexp.MustCompile(`NOW([+-][0-9]+)?`)

// expandNow replaces NOW, NOW+n and NOW-n with Unix seconds.
func authExpandNow(s string, now time.Time) string {
	return authNowExpr.ReplaceAllStringFunc(s, func(m string) string {
		off, _ := strconv.ParseInt(strings.TrimPrefix(m, "NOW"), 10, 64)
		return strconv.FormatInt(now.Unix()+off, 10)
	})
}

// signJWT builds a compact token the way a (possibly lax) signer would: the
// signature covers the segments as encoded.
func signTestJWT(header, claims []byte, secret, alg string, enc *base64.Encoding) string {
	signed := enc.EncodeToString(header) + "." + enc.EncodeToString(claims)
	var newHash func() hash.Hash
	switch alg {
	case "HS256":
		newHash = sha256.New
	case "HS512":
		newHash = sha512.New
	case "none":
		return signed + "."
	default:
		panic("signJWT: unknown alg " + alg)
	}
	mac := hmac.New(newHash, []byte(secret))
	mac.Write([]byte(signed))
	return signed + "." + enc.EncodeToString(mac.Sum(nil))
}

// buildJWTVectorToken turns a case's header/claims/sign/encode/mutate keys into
// a token.
func buildJWTVectorToken(t *testing.T, f map[string]string) string {
	t.Helper()
	if tok, ok := f["token"]; ok {
		return tok + f["suffix"]
	}
	header := f["header"]
	if header == "" {
		header = `{"alg":"HS256","typ":"JWT"}`
	}
	claims := authExpandNow(f["claims"], testAuthNow)
	enc := base64.RawURLEncoding
	switch f["encode"] {
	case "", "raw":
	case "padded":
		enc = base64.URLEncoding
	case "std":
		enc = base64.RawStdEncoding
	default:
		t.Fatalf("unknown encode %q", f["encode"])
	}
	secret, alg := testSharedSecret, f["sign"]
	switch alg {
	case "":
		alg = "HS256"
	case "wrong-secret":
		secret, alg = testSharedSecret+"x", "HS256"
	}
	tok := signTestJWT([]byte(header), []byte(claims), secret, alg, enc)
	if enc != base64.RawURLEncoding && tok == signTestJWT([]byte(header), []byte(claims), secret, alg, base64.RawURLEncoding) {
		t.Fatalf("encode %s produced plain base64url: the case no longer tests the encoding", f["encode"])
	}
	switch f["mutate"] {
	case "":
	case "sig-trailing-bits":
		// A 32-byte MAC is 43 characters; the last carries 4 data bits and
		// 2 zero bits. Setting the lowest bit keeps the bytes for a lax decoder.
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		last := strings.IndexByte(alphabet, tok[len(tok)-1])
		tok = tok[:len(tok)-1] + string(alphabet[last|1])
		sig := tok[strings.LastIndexByte(tok, '.')+1:]
		if b, err := base64.RawURLEncoding.DecodeString(sig); err != nil || len(b) != sha256.Size {
			t.Fatalf("sig-trailing-bits: lax decoder rejects the mutated signature (%v)", err)
		}
	default:
		t.Fatalf("unknown mutate %q", f["mutate"])
	}
	return tok + f["suffix"]
}

func TestWSAuthSignedBearerTokenVectors(t *testing.T) {
	for _, v := range readJWTVectors(t) {
		f := v.fields
		t.Run(f["name"], func(t *testing.T) {
			skew := defaultWSMaxClockSkew
			if s, ok := f["skew"]; ok {
				n, err := strconv.Atoi(s)
				if err != nil {
					t.Fatalf("%s: skew: %v", v.where(), err)
				}
				skew = time.Duration(n) * time.Second
			}
			a, err := newWSAuth("signed-bearer-token", "", "", testSharedSecretFile, f["issuer"], f["audience"], skew)
			if err != nil {
				t.Fatalf("%s: %v", v.where(), err)
			}
			tok := buildJWTVectorToken(t, f)
			authorization := "Bearer " + tok
			if h, ok := f["authorization"]; ok {
				authorization = strings.ReplaceAll(h, "$TOKEN", tok)
			}
			body, ok := a.check(authorization, testAuthNow)
			if got := authResult(body, ok); got != f["expect"] {
				t.Errorf("%s: check(%q) = %q, want %q", v.where(), authorization, got, f["expect"])
			}
		})
	}
}

// TestWSAuthSignedBearerTokenRejectsUndecodableInput covers inputs a text
// vector cannot spell.
func TestWSAuthSignedBearerTokenRejectsUndecodableInput(t *testing.T) {
	a, err := newWSAuth("signed-bearer-token", "", "", testSharedSecretFile, "", "", defaultWSMaxClockSkew)
	if err != nil {
		t.Fatal(err)
	}
	header := []byte(`{"alg":"HS256"}`)
	exp := strconv.FormatInt(testAuthNow.Unix()+60, 10)
	padded := `{"exp":` + exp + `,"pad":"` + strings.Repeat("x", maxWSBearerTokenBytes) + `"}`
	cases := []struct {
		name   string
		claims string
	}{
		{"claims not UTF-8", `{"exp":` + exp + `,"iss":"` + "\xff" + `"}`},
		{"claims NUL", "\x00"},
		{"token over the length limit", padded},
	}
	for _, c := range cases {
		tok := signTestJWT(header, []byte(c.claims), testSharedSecret, "HS256", base64.RawURLEncoding)
		if body, _ := a.check("Bearer "+tok, testAuthNow); body != wsAuthInvalidJWT {
			t.Errorf("%s: body %q, want %q", c.name, body, wsAuthInvalidJWT)
		}
	}
	// The same padding below the limit is accepted, so the limit is what rejects.
	short := `{"exp":` + exp + `,"pad":"` + strings.Repeat("x", maxWSBearerTokenBytes/2) + `"}`
	if body, ok := a.check("Bearer "+signTestJWT(header, []byte(short), testSharedSecret, "HS256", base64.RawURLEncoding), testAuthNow); !ok {
		t.Errorf("padded token under the limit: %q", body)
	}
}

// TestWSAuthSignedBearerTokenRejectsLineBreaks pins the alphabet check that
// keeps Go's base64 decoder from skipping CR and LF, which would give one
// signature many spellings. The Authorization header check already refuses
// them, so checkJWT is called directly.
func TestWSAuthSignedBearerTokenRejectsLineBreaks(t *testing.T) {
	a, err := newWSAuth("signed-bearer-token", "", "", testSharedSecretFile, "", "", defaultWSMaxClockSkew)
	if err != nil {
		t.Fatal(err)
	}
	claims := []byte(`{"exp":` + strconv.FormatInt(testAuthNow.Unix()+60, 10) + `}`)
	tok := signTestJWT([]byte(`{"alg":"HS256"}`), claims, testSharedSecret, "HS256", base64.RawURLEncoding)
	if body := a.checkJWT(tok, testAuthNow.Unix()); body != "" {
		t.Fatalf("valid token: %q", body)
	}
	for _, brk := range []string{"\n", "\r", "\r\n", "="} {
		bad := tok[:len(tok)-2] + brk + tok[len(tok)-2:]
		if body := a.checkJWT(bad, testAuthNow.Unix()); body != wsAuthInvalidJWT {
			t.Errorf("signature with %q inside: %q, want %q", brk, body, wsAuthInvalidJWT)
		}
	}
}

func TestWSAuthSharedSecretIsTrimmed(t *testing.T) {
	dir := t.TempDir()
	path := writeAuthFile(t, dir, "secret", "\r\n  "+testSharedSecret+" \r\n\n")
	a, err := newWSAuth("signed-bearer-token", "", "", path, "", "", defaultWSMaxClockSkew)
	if err != nil {
		t.Fatal(err)
	}
	claims := []byte(`{"exp":` + strconv.FormatInt(testAuthNow.Unix()+60, 10) + `}`)
	header := []byte(`{"alg":"HS256"}`)
	for secret, want := range map[string]string{
		testSharedSecret:        "ok",
		testSharedSecret + "\n": wsAuthInvalidJWT,
		" " + testSharedSecret:  wsAuthInvalidJWT,
	} {
		tok := signTestJWT(header, claims, secret, "HS256", base64.RawURLEncoding)
		body, ok := a.check("Bearer "+tok, testAuthNow)
		if got := authResult(body, ok); got != want {
			t.Errorf("signed with %q: %q, want %q", secret, got, want)
		}
	}
}

func TestWSAuthTokenFileIsTrimmed(t *testing.T) {
	dir := t.TempDir()
	path := writeAuthFile(t, dir, "token", "\t "+testToken+"\r\n")
	a, err := newWSAuth("capability-token", path, "", "", "", "", defaultWSMaxClockSkew)
	if err != nil {
		t.Fatal(err)
	}
	if body, ok := a.check("Bearer "+testToken, testAuthNow); !ok {
		t.Errorf("trimmed token rejected: %q", body)
	}
}

func TestNewWSAuthRejectsBadConfiguration(t *testing.T) {
	dir := t.TempDir()
	token := writeAuthFile(t, dir, "token", testToken+"\n")
	secret := writeAuthFile(t, dir, "secret", testSharedSecret+"\n")
	blank := writeAuthFile(t, dir, "blank", " \n\t\r\n")
	empty := writeAuthFile(t, dir, "empty", "")
	shortSecret := writeAuthFile(t, dir, "short", strings.Repeat("s", minWSSharedSecretBytes-1)+"\n")
	binary := writeAuthFile(t, dir, "binary", "\xff\xfe"+strings.Repeat("s", minWSSharedSecretBytes))
	nonASCII := writeAuthFile(t, dir, "non-ascii", "tökén\n")
	control := writeAuthFile(t, dir, "control", "tok\x00en\n")
	longToken := writeAuthFile(t, dir, "long-token", strings.Repeat("t", maxWSBearerTokenBytes+1))
	huge := writeAuthFile(t, dir, "huge", strings.Repeat("s", maxWSAuthFileBytes+1))
	missing := filepath.Join(dir, "missing")
	digest := sha256.Sum256([]byte(testToken))
	hexDigest := hex.EncodeToString(digest[:])

	cases := []struct {
		name                                            string
		mode, tokenFile, tokenHex, secretFile, iss, aud string
		skew                                            time.Duration
		wantErr                                         string
	}{
		{name: "unknown mode", mode: "jwt", wantErr: `unknown --ws-auth mode "jwt"`},
		{name: "mode is case-sensitive", mode: "Capability-Token", tokenFile: token, wantErr: "unknown --ws-auth mode"},
		{name: "negative skew", mode: "signed-bearer-token", secretFile: secret, skew: -time.Second, wantErr: "must not be negative"},
		{name: "none with token file", mode: "none", tokenFile: token, wantErr: "require --ws-auth"},
		{name: "no mode with secret file", secretFile: secret, wantErr: "require --ws-auth"},
		{name: "no mode with issuer", iss: "x", wantErr: "require --ws-auth"},
		{name: "capability without token", mode: "capability-token", wantErr: "requires --ws-token-file or --ws-token-sha256"},
		{name: "capability with both token flags", mode: "capability-token", tokenFile: token, tokenHex: hexDigest, wantErr: "mutually exclusive"},
		{name: "capability with secret file", mode: "capability-token", tokenFile: token, secretFile: secret, wantErr: "require --ws-auth signed-bearer-token"},
		{name: "capability with issuer", mode: "capability-token", tokenFile: token, iss: "x", wantErr: "require --ws-auth signed-bearer-token"},
		{name: "capability with audience", mode: "capability-token", tokenFile: token, aud: "x", wantErr: "require --ws-auth signed-bearer-token"},
		{name: "token file missing", mode: "capability-token", tokenFile: missing, wantErr: "no such file or directory"},
		{name: "token file is a directory", mode: "capability-token", tokenFile: dir, wantErr: "is a directory"},
		{name: "token file empty", mode: "capability-token", tokenFile: empty, wantErr: "file is empty"},
		{name: "token file whitespace only", mode: "capability-token", tokenFile: blank, wantErr: "file is empty"},
		{name: "token file not UTF-8", mode: "capability-token", tokenFile: binary, wantErr: "not UTF-8"},
		{name: "token not ASCII", mode: "capability-token", tokenFile: nonASCII, wantErr: "printable ASCII"},
		{name: "token with a control byte", mode: "capability-token", tokenFile: control, wantErr: "printable ASCII"},
		{name: "token too long for a header", mode: "capability-token", tokenFile: longToken, wantErr: "longer than"},
		{name: "token file too large", mode: "capability-token", tokenFile: huge, wantErr: "larger than"},
		{name: "token file endless", mode: "capability-token", tokenFile: "/dev/zero", wantErr: "larger than"},
		{name: "token sha256 not hex", mode: "capability-token", tokenHex: strings.Repeat("zz", 32), wantErr: "--ws-token-sha256"},
		{name: "token sha256 too short", mode: "capability-token", tokenHex: hexDigest[:62], wantErr: "--ws-token-sha256"},
		{name: "token sha256 too long", mode: "capability-token", tokenHex: hexDigest + "00", wantErr: "--ws-token-sha256"},
		{name: "token sha256 odd length", mode: "capability-token", tokenHex: hexDigest + "0", wantErr: "--ws-token-sha256"},
		{name: "token sha256 with prefix", mode: "capability-token", tokenHex: "sha256:" + hexDigest, wantErr: "--ws-token-sha256"},
		{name: "signed without secret file", mode: "signed-bearer-token", wantErr: "requires --ws-shared-secret-file"},
		{name: "signed with token file", mode: "signed-bearer-token", tokenFile: token, secretFile: secret, wantErr: "require --ws-auth capability-token"},
		{name: "signed with token sha256", mode: "signed-bearer-token", tokenHex: hexDigest, secretFile: secret, wantErr: "require --ws-auth capability-token"},
		{name: "secret file missing", mode: "signed-bearer-token", secretFile: missing, wantErr: "no such file or directory"},
		{name: "secret file empty", mode: "signed-bearer-token", secretFile: empty, wantErr: "file is empty"},
		{name: "secret file whitespace only", mode: "signed-bearer-token", secretFile: blank, wantErr: "file is empty"},
		{name: "secret too short", mode: "signed-bearer-token", secretFile: shortSecret, wantErr: "must be at least 32"},
		{name: "secret not UTF-8", mode: "signed-bearer-token", secretFile: binary, wantErr: "not UTF-8"},
		{name: "secret file too large", mode: "signed-bearer-token", secretFile: huge, wantErr: "larger than"},
	}
	for _, c := range cases {
		a, err := newWSAuth(c.mode, c.tokenFile, c.tokenHex, c.secretFile, c.iss, c.aud, c.skew)
		switch {
		case err == nil:
			t.Errorf("%s: accepted (%+v), want error containing %q", c.name, a, c.wantErr)
		case !strings.Contains(err.Error(), c.wantErr):
			t.Errorf("%s: error %q, want it to contain %q", c.name, err, c.wantErr)
		case strings.ContainsAny(err.Error(), "\r\n"):
			t.Errorf("%s: error %q is not one line", c.name, err)
		}
	}
}

func TestNewWSAuthAcceptsGoodConfiguration(t *testing.T) {
	dir := t.TempDir()
	exact := writeAuthFile(t, dir, "exact", strings.Repeat("s", minWSSharedSecretBytes))
	digest := sha256.Sum256([]byte(testToken))
	cases := []struct {
		name                                            string
		mode, tokenFile, tokenHex, secretFile, iss, aud string
	}{
		{name: "token sha256 with surrounding space", mode: "capability-token", tokenHex: " " + hex.EncodeToString(digest[:]) + "\n"},
		{name: "secret of exactly the minimum", mode: "signed-bearer-token", secretFile: exact},
		{name: "blank issuer and audience are not checked", mode: "signed-bearer-token", secretFile: exact, iss: "  ", aud: "\t"},
		{name: "blank issuer with no mode", iss: " "},
	}
	for _, c := range cases {
		if _, err := newWSAuth(c.mode, c.tokenFile, c.tokenHex, c.secretFile, c.iss, c.aud, defaultWSMaxClockSkew); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// wsAuthBodies is every 401 body check may return.
var wsAuthBodies = map[string]bool{
	wsAuthMissingToken: true, wsAuthInvalidHeader: true, wsAuthInvalidToken: true,
	wsAuthInvalidJWT: true, wsAuthExpiredJWT: true, wsAuthJWTNotYetValid: true,
	wsAuthJWTIssuerMismatch: true, wsAuthJWTAudMismatch: true,
}

// FuzzWSAuthCheck feeds arbitrary Authorization values, and tokens the fuzzer
// builds and signs itself (so claims parsing is reached past the signature),
// to every mode. check must never panic and must answer ok with no body or a
// known body with !ok.
func FuzzWSAuthCheck(f *testing.F) {
	digest := sha256.Sum256([]byte(testToken))
	var configs []*wsAuthConfig
	for _, c := range []struct {
		mode, tokenFile, tokenHex, secretFile, iss, aud string
		skew                                            time.Duration
	}{
		{mode: "capability-token", tokenFile: testTokenFile},
		{mode: "capability-token", tokenHex: hex.EncodeToString(digest[:])},
		{mode: "signed-bearer-token", secretFile: testSharedSecretFile, skew: defaultWSMaxClockSkew},
		{mode: "signed-bearer-token", secretFile: testSharedSecretFile, iss: "exec-issuer", aud: "exec-server", skew: defaultWSMaxClockSkew},
		{mode: "signed-bearer-token", secretFile: testSharedSecretFile, skew: 0},
	} {
		a, err := newWSAuth(c.mode, c.tokenFile, c.tokenHex, c.secretFile, c.iss, c.aud, c.skew)
		if err != nil {
			f.Fatal(err)
		}
		configs = append(configs, a)
	}

	f.Add("Bearer "+testToken, []byte(`{"alg":"HS256"}`), []byte(`{"exp":1750000060}`), int64(1750000000))
	f.Add("bearer   x.y.z", []byte(`{"alg":"HS256","crit":[]}`), []byte(`{"exp":1,"nbf":2,"iss":"exec-issuer","aud":["exec-server"]}`), int64(0))
	f.Add("", []byte(`{}`), []byte(`{"exp":9223372036854775807,"nbf":-9223372036854775808}`), int64(-1))
	f.Add("Basic \xff", []byte(`[`), []byte(`{"exp":1e3,"exp":1}`), int64(9223372036854775807))
	for _, line := range []string{
		"Bearer eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjF9.",
		"Bearer ..",
		"Bearer a.b.c.d",
		"Bearer " + strings.Repeat("A", maxWSBearerTokenBytes+1),
	} {
		f.Add(line, []byte(nil), []byte(nil), int64(0))
	}

	f.Fuzz(func(t *testing.T, authorization string, header, claims []byte, unix int64) {
		now := time.Unix(unix, 0)
		signed := "Bearer " + signTestJWT(header, claims, testSharedSecret, "HS256", base64.RawURLEncoding)
		for _, a := range configs {
			for _, h := range []string{authorization, signed} {
				body, ok := a.check(h, now)
				if ok != (body == "") || (!ok && !wsAuthBodies[body]) {
					t.Fatalf("mode %s: check(%q) = %q, %v", a.mode, h, body, ok)
				}
				if ok && a.mode == wsAuthModeCapabilityToken {
					if tok, _ := wsBearerToken(h); tok != testToken {
						t.Fatalf("check(%q) accepted token %q", h, tok)
					}
				}
			}
		}
	})
}

func authResult(body string, ok bool) string {
	if ok {
		if body != "" {
			return "ok with body " + strconv.Quote(body)
		}
		return "ok"
	}
	return body
}

func writeAuthFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
