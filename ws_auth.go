package main

// Websocket upgrade authentication (--ws-auth), docs/protocol.md §2.3.
//
// The check runs on the HTTP upgrade request, before any websocket framing.
// /readyz is never authenticated; the caller routes it before calling check.
// Every rejection is a 401 whose text/plain body is one of the exact 0.169
// strings below.
//
// Authorization header, both modes (parsed like 0.169):
//
//	value    = scheme SP rest        split at the FIRST space only (a tab does not split)
//	scheme   = "Bearer"              ASCII case-insensitive ("bearer", "BEARER")
//	token    = rest trimmed of SP/HTAB; must be non-empty
//	value bytes must be visible ASCII, SP or HTAB, else the header is invalid
//
//	Authorization                     401 body
//	(absent, or passed as "")         missing websocket bearer token
//	"tok", "Basic x", "Bearer", "Bearer   "
//	  or non-ASCII bytes              invalid authorization header
//
// capability-token: the token is compared by SHA-256 digest, in constant time.
// The configured digest comes from --ws-token-file (file content trimmed of
// surrounding whitespace) or --ws-token-sha256 (64 hex digits), exactly one.
//
//	Bearer <wrong token>              invalid websocket bearer token
//
// signed-bearer-token: a JWS compact token (RFC 7515 §7.1) signed with
// HMAC-SHA256 over the trimmed content of --ws-shared-secret-file.
//
//	token   = B64(header) "." B64(claims) "." B64(HMAC-SHA256(secret, B64(header) "." B64(claims)))
//	B64     = base64url, no padding, canonical: "=", "+", "/", CR/LF or
//	          non-zero trailing bits make the token malformed
//	header  = JSON object; "alg" exactly "HS256"; "crit" present is rejected
//	claims  = JSON object, UTF-8, no duplicate member names:
//	  exp   integer, required        now > exp+skew  → expired websocket jwt
//	  nbf   integer or null          now < nbf-skew  → websocket jwt is not valid yet
//	  iss   string or null           != --ws-issuer (when given)   → websocket jwt issuer mismatch
//	  aud   string, [string] or null lacks --ws-audience (when given) → websocket jwt audience mismatch
//	anything else wrong (shape, base64, signature, alg, JSON, types, missing exp)
//	                                 → invalid websocket jwt
//
// Order of checks: the signature first, so no attacker-chosen JSON is parsed
// before the token is known to come from a holder of the secret; then alg,
// then the claims' types, then exp, nbf, iss, aud (the first failure names
// the body). Claim types are
// checked even for claims no flag asks about (0.169 rejects a numeric "iss"
// whether or not --ws-issuer is set). Times are whole Unix seconds.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Exact 401 bodies sent by 0.169 (docs/protocol.md §2.3).
const (
	wsAuthMissingToken      = "missing websocket bearer token"
	wsAuthInvalidHeader     = "invalid authorization header"
	wsAuthInvalidToken      = "invalid websocket bearer token"
	wsAuthInvalidJWT        = "invalid websocket jwt"
	wsAuthExpiredJWT        = "expired websocket jwt"
	wsAuthJWTNotYetValid    = "websocket jwt is not valid yet"
	wsAuthJWTIssuerMismatch = "websocket jwt issuer mismatch"
	wsAuthJWTAudMismatch    = "websocket jwt audience mismatch"
)

// --ws-auth mode names as given on the command line.
const (
	wsAuthModeNone              = "none"
	wsAuthModeCapabilityToken   = "capability-token"
	wsAuthModeSignedBearerToken = "signed-bearer-token"
)

// Limits. The --ws-max-clock-skew-seconds default, defaultWSMaxClockSkew
// (30 s: 0.169 accepts exp 30 s past and rejects 50 s), lives with the flags
// in main.go.
const (
	// maxWSBearerTokenBytes bounds the bearer token before any hashing or
	// decoding. Real capability tokens and JWTs are well under 1 KiB.
	maxWSBearerTokenBytes = 8 << 10

	// maxWSAuthFileBytes bounds how much of a token or secret file is read,
	// so a flag pointing at /dev/zero or a log file fails fast.
	maxWSAuthFileBytes = 64 << 10

	// minWSSharedSecretBytes: RFC 7518 §3.2 requires an HS256 key of at
	// least the hash size; upstream Codex enforces the same 32 bytes.
	minWSSharedSecretBytes = 32
)

// wsAuthConfig is the parsed --ws-auth configuration. A nil *wsAuthConfig,
// like mode none, authenticates nothing. It holds no mutable state, so one
// value serves all connections concurrently.
type wsAuthConfig struct {
	mode string // wsAuthMode*

	// capability-token: SHA-256 of the token; the token itself is not kept.
	tokenDigest [sha256.Size]byte

	// signed-bearer-token.
	secret      []byte
	issuer      string // "" = not checked
	audience    string // "" = not checked
	skewSeconds int64
}

// newWSAuth builds the configuration from the --ws-* flag values; an empty
// string means the flag was not given, and mode "" means "none". Errors are
// one line, fit to print before exiting with status 2.
//
// Decisions (0.169 / upstream behaviour unless noted):
//   - Token and secret files are read whole (at most maxWSAuthFileBytes), must
//     be UTF-8, and are trimmed of surrounding whitespace, so `echo secret >f`
//     works; a file empty after trimming is an error.
//   - --ws-token-file and --ws-token-sha256 are mutually exclusive; a token
//     that could never be sent in a header (non-printable-ASCII, or longer
//     than maxWSBearerTokenBytes) is a configuration error [I].
//   - --ws-issuer / --ws-audience are trimmed; blank means "not checked".
//   - Flags of the other mode, or any flag with mode none, are errors.
//     maxSkew cannot be checked that way (main always passes a value).
func newWSAuth(mode, tokenFile, tokenSHA256Hex, sharedSecretFile, issuer, audience string, maxSkew time.Duration) (*wsAuthConfig, error) {
	issuer = strings.TrimSpace(issuer)
	audience = strings.TrimSpace(audience)
	if maxSkew < 0 {
		return nil, fmt.Errorf("--ws-max-clock-skew-seconds must not be negative, got %v", maxSkew)
	}
	tokenFlags := tokenFile != "" || tokenSHA256Hex != ""
	signedFlags := sharedSecretFile != "" || issuer != "" || audience != ""

	switch mode {
	case "", wsAuthModeNone:
		if tokenFlags || signedFlags {
			return nil, errors.New("websocket auth flags require --ws-auth capability-token or --ws-auth signed-bearer-token")
		}
		return &wsAuthConfig{mode: wsAuthModeNone}, nil

	case wsAuthModeCapabilityToken:
		if signedFlags {
			return nil, errors.New("--ws-shared-secret-file, --ws-issuer and --ws-audience require --ws-auth signed-bearer-token")
		}
		a := &wsAuthConfig{mode: wsAuthModeCapabilityToken}
		switch {
		case tokenFile != "" && tokenSHA256Hex != "":
			return nil, errors.New("--ws-token-file and --ws-token-sha256 are mutually exclusive")
		case tokenFile != "":
			token, err := readWSAuthFile("--ws-token-file", tokenFile)
			if err != nil {
				return nil, err
			}
			if len(token) > maxWSBearerTokenBytes {
				return nil, fmt.Errorf("--ws-token-file %s: token is %d bytes, longer than the %d accepted in a header", tokenFile, len(token), maxWSBearerTokenBytes)
			}
			if !isAuthHeaderText(string(token)) {
				return nil, fmt.Errorf("--ws-token-file %s: token must be printable ASCII to be sent in an Authorization header", tokenFile)
			}
			a.tokenDigest = sha256.Sum256(token)
		case tokenSHA256Hex != "":
			h := strings.TrimSpace(tokenSHA256Hex)
			digest, err := hex.DecodeString(h)
			if err != nil || len(digest) != sha256.Size {
				return nil, fmt.Errorf("--ws-token-sha256: want %d hex digits (a SHA-256 digest), got %q", 2*sha256.Size, h)
			}
			copy(a.tokenDigest[:], digest)
		default:
			return nil, errors.New("--ws-auth capability-token requires --ws-token-file or --ws-token-sha256")
		}
		return a, nil

	case wsAuthModeSignedBearerToken:
		if tokenFlags {
			return nil, errors.New("--ws-token-file and --ws-token-sha256 require --ws-auth capability-token")
		}
		if sharedSecretFile == "" {
			return nil, errors.New("--ws-auth signed-bearer-token requires --ws-shared-secret-file")
		}
		secret, err := readWSAuthFile("--ws-shared-secret-file", sharedSecretFile)
		if err != nil {
			return nil, err
		}
		if len(secret) < minWSSharedSecretBytes {
			return nil, fmt.Errorf("--ws-shared-secret-file %s: secret is %d bytes, must be at least %d", sharedSecretFile, len(secret), minWSSharedSecretBytes)
		}
		return &wsAuthConfig{
			mode:        wsAuthModeSignedBearerToken,
			secret:      secret,
			issuer:      issuer,
			audience:    audience,
			skewSeconds: int64(maxSkew / time.Second),
		}, nil

	default:
		return nil, fmt.Errorf("unknown --ws-auth mode %q; expected %s or %s", mode, wsAuthModeCapabilityToken, wsAuthModeSignedBearerToken)
	}
}

// readWSAuthFile returns the trimmed, non-empty UTF-8 content of a token or
// secret file named by flag.
func readWSAuthFile(flag, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxWSAuthFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if len(data) > maxWSAuthFileBytes {
		return nil, fmt.Errorf("%s %s: file is larger than %d bytes", flag, path, maxWSAuthFileBytes)
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%s %s: file is not UTF-8 text", flag, path)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("%s %s: file is empty", flag, path)
	}
	return data, nil
}

// enabled reports whether upgrades need an Authorization header.
func (a *wsAuthConfig) enabled() bool {
	return a != nil && a.mode != wsAuthModeNone
}

// check validates the Authorization header of an upgrade request at time
// now. authorization is the first Authorization header's value (as
// http.Header.Get returns it; 0.169 also reads only the first), or "" when
// there is none; an empty header is therefore treated as absent. ok=false
// gives the exact 401 body.
func (a *wsAuthConfig) check(authorization string, now time.Time) (body string, ok bool) {
	if !a.enabled() {
		return "", true
	}
	token, body := wsBearerToken(authorization)
	if body != "" {
		return body, false
	}
	switch a.mode {
	case wsAuthModeCapabilityToken:
		if len(token) > maxWSBearerTokenBytes {
			return wsAuthInvalidToken, false
		}
		got := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(got[:], a.tokenDigest[:]) != 1 {
			return wsAuthInvalidToken, false
		}
		return "", true
	case wsAuthModeSignedBearerToken:
		body = a.checkJWT(token, now.Unix())
		return body, body == ""
	}
	// Unreachable for values built by newWSAuth; fail closed.
	return wsAuthInvalidHeader, false
}

// wsBearerToken extracts the token from an Authorization value, or returns the
// 401 body explaining why it cannot.
func wsBearerToken(authorization string) (token, body string) {
	if authorization == "" {
		return "", wsAuthMissingToken
	}
	if !isAuthHeaderText(authorization) {
		return "", wsAuthInvalidHeader
	}
	scheme, rest, found := strings.Cut(authorization, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", wsAuthInvalidHeader
	}
	token = strings.Trim(rest, " \t")
	if token == "" {
		return "", wsAuthInvalidHeader
	}
	return token, ""
}

// isAuthHeaderText reports whether s holds only visible ASCII, SP and HTAB,
// the bytes 0.169 accepts in an Authorization value.
func isAuthHeaderText(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 || c > 0x7e) && c != '\t' {
			return false
		}
	}
	return true
}

// checkJWT validates a signed bearer token at Unix time now and returns ""
// or the 401 body.
func (a *wsAuthConfig) checkJWT(token string, now int64) string {
	if len(token) > maxWSBearerTokenBytes {
		return wsAuthInvalidJWT
	}
	// A fourth segment ends up in sigB64, whose '.' the strict decoder refuses.
	headerB64, rest, _ := strings.Cut(token, ".")
	claimsB64, sigB64, found := strings.Cut(rest, ".")
	if !found {
		return wsAuthInvalidJWT
	}

	// 1. Signature, over the segments exactly as received.
	sig, err := decodeJWTSegment(sigB64)
	if err != nil {
		return wsAuthInvalidJWT
	}
	mac := hmac.New(sha256.New, a.secret)
	io.WriteString(mac, token[:len(headerB64)+1+len(claimsB64)])
	if !hmac.Equal(sig, mac.Sum(nil)) {
		return wsAuthInvalidJWT
	}

	// 2. Header: HS256 only, no extensions.
	header, err := decodeJWTObject(headerB64)
	if err != nil {
		return wsAuthInvalidJWT
	}
	if alg, ok := jwtString(header["alg"]); !ok || alg != "HS256" {
		return wsAuthInvalidJWT
	}
	if _, ok := header["crit"]; ok {
		return wsAuthInvalidJWT
	}

	// 3. Claims and their types.
	claims, err := decodeJWTObject(claimsB64)
	if err != nil {
		return wsAuthInvalidJWT
	}
	exp, ok := jwtInt(claims["exp"])
	if !ok {
		return wsAuthInvalidJWT
	}
	nbf, hasNBF := int64(0), false
	if raw := claims["nbf"]; !jwtIsNull(raw) {
		if nbf, hasNBF = jwtInt(raw); !hasNBF {
			return wsAuthInvalidJWT
		}
	}
	iss, hasISS := "", false
	if raw := claims["iss"]; !jwtIsNull(raw) {
		if iss, hasISS = jwtString(raw); !hasISS {
			return wsAuthInvalidJWT
		}
	}
	aud, ok := jwtAudience(claims["aud"])
	if !ok {
		return wsAuthInvalidJWT
	}

	// 4. Time window, then issuer and audience.
	if now > jwtAddSeconds(exp, a.skewSeconds) {
		return wsAuthExpiredJWT
	}
	if hasNBF && now < jwtAddSeconds(nbf, -a.skewSeconds) {
		return wsAuthJWTNotYetValid
	}
	if a.issuer != "" && (!hasISS || iss != a.issuer) {
		return wsAuthJWTIssuerMismatch
	}
	if a.audience != "" && !jwtAudienceHas(aud, a.audience) {
		return wsAuthJWTAudMismatch
	}
	return ""
}

// jwtBase64 is the only encoding accepted in a JWT segment: base64url without
// padding (RFC 7515 §2), rejecting non-zero trailing bits so every token has
// exactly one spelling.
var jwtBase64 = base64.RawURLEncoding.Strict()

// isJWTBase64 reports whether s uses only the base64url alphabet. Go's
// decoder silently skips CR and LF, and the padding or standard-alphabet
// spellings are other tokens than the one signed, so all are refused here.
func isJWTBase64(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// decodeJWTSegment decodes one strict base64url segment.
func decodeJWTSegment(s string) ([]byte, error) {
	if !isJWTBase64(s) {
		return nil, errors.New("jwt segment: not base64url")
	}
	return jwtBase64.DecodeString(s)
}

// decodeJWTObject decodes a segment holding one JSON object and returns its
// members. Member names are matched exactly (encoding/json's struct decoding
// would also match "EXP" to exp), and duplicate names are rejected, as
// RFC 7515 §4 and RFC 7519 §4 allow, so no two parsers can disagree on which
// "exp" counts.
func decodeJWTObject(s string) (map[string]json.RawMessage, error) {
	data, err := decodeJWTSegment(s)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(data) {
		return nil, errors.New("jwt segment: not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("jwt segment: not a JSON object")
	}
	members := make(map[string]json.RawMessage)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, ok := tok.(string)
		if !ok {
			return nil, errors.New("jwt segment: bad member name")
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		if _, dup := members[name]; dup {
			return nil, fmt.Errorf("jwt segment: duplicate member %q", name)
		}
		members[name] = bytes.TrimSpace(value)
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("jwt segment: data after the JSON object")
	}
	return members, nil
}

// jwtIsNull reports whether a member is absent or null.
func jwtIsNull(raw json.RawMessage) bool {
	return raw == nil || string(raw) == "null"
}

// jwtInt parses a JSON integer that fits in int64. ParseInt refuses the
// JSON spellings "1.0" and "1e9", which 0.169 does not take as integers
// either, and strings, null and booleans.
func jwtInt(raw json.RawMessage) (int64, bool) {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}

// jwtString parses a JSON string (not null).
func jwtString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}

// jwtAudience parses "aud": absent/null, a string, or an array of strings.
func jwtAudience(raw json.RawMessage) ([]string, bool) {
	switch {
	case jwtIsNull(raw):
		return nil, true
	case raw[0] == '"':
		s, ok := jwtString(raw)
		return []string{s}, ok
	case raw[0] == '[':
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil, false
		}
		aud := make([]string, 0, len(items))
		for _, item := range items {
			s, ok := jwtString(item)
			if !ok {
				return nil, false
			}
			aud = append(aud, s)
		}
		return aud, true
	}
	return nil, false
}

func jwtAudienceHas(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// jwtAddSeconds returns a+b clamped to the int64 range, so exp near
// MaxInt64 or nbf near MinInt64 cannot wrap around into acceptance.
func jwtAddSeconds(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}
