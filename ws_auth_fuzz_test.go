package main

// FuzzWSAuthJWT: signed bearer tokens of the fuzzer's making, checked against a reference
// reading of the claims (docs/protocol.md §2.3).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// refJWTObject decodes a JWT segment's JSON with encoding/json: one object, UTF-8, no member
// name twice (after unescaping).
func refJWTObject(b []byte) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if !utf8.Valid(b) || !json.Valid(b) || bytes.Trim(b, " \t\r\n")[0] != '{' || json.Unmarshal(b, &m) != nil {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.Token()
	n := 0
	for ; dec.More(); n++ {
		var v json.RawMessage
		if _, err := dec.Token(); err != nil || dec.Decode(&v) != nil {
			return nil, false
		}
	}
	return m, n == len(m)
}

// refJWTInt reads a JSON integer in the i64 range; absent says whether the member is absent or
// null.
func refJWTInt(raw json.RawMessage) (v *big.Int, absent, ok bool) {
	if raw == nil || string(raw) == "null" {
		return nil, true, true
	}
	var n json.Number // which would also take a string holding a number
	if raw[0] == '"' || json.Unmarshal(raw, &n) != nil || strings.ContainsAny(n.String(), ".eE") {
		return nil, false, false
	}
	v, ok = new(big.Int).SetString(n.String(), 10)
	return v, false, ok && v.IsInt64()
}

// refJWTString reads a JSON string (not null).
func refJWTString(raw json.RawMessage) (string, bool) {
	var s string
	return s, len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil
}

// refJWTBody is docs/protocol.md §2.3's answer for a token signed with the right secret, from
// encoding/json and exact integer arithmetic.
func refJWTBody(a *wsAuthConfig, token string, header, claims []byte, now int64) string {
	if len(token) > maxWSBearerTokenBytes {
		return wsAuthInvalidJWT
	}
	h, ok := refJWTObject(header)
	if !ok {
		return wsAuthInvalidJWT
	}
	if alg, ok := refJWTString(h["alg"]); !ok || alg != "HS256" {
		return wsAuthInvalidJWT
	}
	if _, crit := h["crit"]; crit {
		return wsAuthInvalidJWT
	}
	c, ok := refJWTObject(claims)
	if !ok {
		return wsAuthInvalidJWT
	}
	exp, absent, ok := refJWTInt(c["exp"])
	if !ok || absent {
		return wsAuthInvalidJWT
	}
	nbf, noNBF, ok := refJWTInt(c["nbf"])
	if !ok {
		return wsAuthInvalidJWT
	}
	var iss string
	hasISS := c["iss"] != nil && string(c["iss"]) != "null"
	if hasISS {
		if iss, ok = refJWTString(c["iss"]); !ok {
			return wsAuthInvalidJWT
		}
	}
	var aud []string
	switch raw := c["aud"]; {
	case raw == nil || string(raw) == "null":
	case raw[0] == '"':
		s, _ := refJWTString(raw)
		aud = []string{s}
	case raw[0] == '[':
		var items []any
		json.Unmarshal(raw, &items)
		for _, item := range items {
			s, ok := item.(string)
			if !ok {
				return wsAuthInvalidJWT
			}
			aud = append(aud, s)
		}
	default:
		return wsAuthInvalidJWT
	}
	n, skew := big.NewInt(now), big.NewInt(a.skewSeconds)
	switch {
	case n.Cmp(new(big.Int).Add(exp, skew)) > 0:
		return wsAuthExpiredJWT
	case !noNBF && n.Cmp(new(big.Int).Sub(nbf, skew)) < 0:
		return wsAuthJWTNotYetValid
	case a.issuer != "" && (!hasISS || iss != a.issuer):
		return wsAuthJWTIssuerMismatch
	case a.audience != "" && !slices.Contains(aud, a.audience):
		return wsAuthJWTAudMismatch
	}
	return ""
}

// FuzzWSAuthJWT signs the fuzzer's header and claims with the configured secret, so that every
// input reaches the JSON rules, and compares check's answer, body for body, with refJWTBody:
// the header's alg and crit, the claims' types, duplicates, the time window with and without
// skew (near the int64 bounds too), issuer and audience. FuzzWSAuthCheck covers the
// Authorization header, the segments' encoding and the signature.
func FuzzWSAuthJWT(f *testing.F) {
	var configs []*wsAuthConfig
	for _, c := range []struct {
		iss, aud string
		skew     time.Duration
	}{
		{skew: defaultWSMaxClockSkew},
		{iss: "exec-issuer", aud: "exec-server", skew: defaultWSMaxClockSkew},
		{iss: "exec-issuer", skew: 0},
		{aud: "exec-server", skew: 0},
	} {
		a, err := newWSAuth("signed-bearer-token", "", "", testSharedSecretFile, c.iss, c.aud, c.skew)
		if err != nil {
			f.Fatal(err)
		}
		configs = append(configs, a)
	}
	f.Fuzz(func(t *testing.T, header, claims []byte, now int64, sel uint8) { // seeds: testdata/fuzz/FuzzWSAuthJWT
		a := configs[int(sel)%len(configs)]
		token := signTestJWT(header, claims, testSharedSecret, "HS256", base64.RawURLEncoding)
		body, ok := a.check("Bearer "+token, time.Unix(now, 0))
		if want := refJWTBody(a, token, header, claims, now); body != want || ok != (want == "") {
			t.Fatalf("header %q claims %q at %d (issuer %q, audience %q, skew %d): %q, %v; want %q",
				header, claims, now, a.issuer, a.audience, a.skewSeconds, body, ok, want)
		}
	})
}
