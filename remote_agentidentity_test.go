package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/curve25519"
	"golang.org/x/crypto/nacl/box"
)

// agentIdentityFixture is a loopback ChatGPT backend (JWKS) and AuthAPI (task registration).
type agentIdentityFixture struct {
	srv        *httptest.Server
	rsaKey     *rsa.PrivateKey
	agentKey   ed25519.PrivateKey
	keyB64     string // agent_private_key
	encrypt    bool   // answer with encrypted_task_id
	failFirst  int32  // answer 503 to this many registrations
	registered atomic.Int32
	jwksGets   atomic.Int32
	t          *testing.T
}

const agentTestRuntime = "agent-runtime-1"

func newAgentIdentityFixture(t *testing.T) *agentIdentityFixture {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	agentKey := ed25519.NewKeyFromSeed(make([]byte, 32))
	der, err := x509.MarshalPKCS8PrivateKey(agentKey)
	if err != nil {
		t.Fatal(err)
	}
	f := &agentIdentityFixture{rsaKey: rsaKey, agentKey: agentKey, keyB64: base64.StdEncoding.EncodeToString(der), t: t}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /backend-api/wham/agent-identities/jwks", func(w http.ResponseWriter, r *http.Request) {
		f.jwksGets.Add(1)
		b64 := base64.RawURLEncoding.EncodeToString
		json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{
			{"kty": "RSA", "kid": "other", "n": b64(big.NewInt(3).Bytes()), "e": "AQAB"},
			{"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256", "n": b64(rsaKey.N.Bytes()), "e": b64(big.NewInt(int64(rsaKey.E)).Bytes())},
		}})
	})
	mux.HandleFunc("POST /api/accounts/v1/agent/{rid}/task/register", func(w http.ResponseWriter, r *http.Request) {
		n := f.registered.Add(1)
		if n <= f.failFirst {
			http.Error(w, `{"error":{"code":"unavailable","message":"try later"}}`, http.StatusServiceUnavailable)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var req map[string]string
		if json.Unmarshal(raw, &req) != nil || len(req) != 2 || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		sig, _ := base64.StdEncoding.DecodeString(req["signature"])
		if r.PathValue("rid") != agentTestRuntime || !strings.HasSuffix(req["timestamp"], "Z") ||
			!ed25519.Verify(agentKey.Public().(ed25519.PublicKey), []byte(agentTestRuntime+":"+req["timestamp"]), sig) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if !f.encrypt {
			json.NewEncoder(w).Encode(map[string]string{"task_id": "task-plain"})
			return
		}
		digest := sha512.Sum512(agentKey.Seed())
		var pub [32]byte
		p, _ := curve25519.X25519(digest[:32], curve25519.Basepoint)
		copy(pub[:], p)
		sealed, err := box.SealAnonymous(nil, []byte("task-sealed"), &pub, rand.Reader)
		if err != nil {
			t.Error(err)
		}
		json.NewEncoder(w).Encode(map[string]string{"encryptedTaskId": base64.StdEncoding.EncodeToString(sealed)})
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// jwt mints an Agent Identity JWT signed with key (nil: the fixture's JWKS key) under kid.
func (f *agentIdentityFixture) jwt(kid string, key *rsa.PrivateKey, edit func(map[string]any)) string {
	if key == nil {
		key = f.rsaKey
	}
	claims := map[string]any{
		"iss": agentIdentityJWTIssuer, "aud": agentIdentityJWTAudience,
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
		"agent_runtime_id": agentTestRuntime, "agent_private_key": f.keyB64,
		"account_id": "acct-agent", "chatgpt_user_id": "user-1", "email": "a@example.invalid",
		"plan_type": "pro", "chatgpt_account_is_fedramp": true,
	}
	if edit != nil {
		edit(claims)
	}
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signed := enc(map[string]string{"alg": "RS256", "typ": "JWT", "kid": kid}) + "." + enc(claims)
	digest := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	if err != nil {
		f.t.Fatal(err)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func (f *agentIdentityFixture) options() agentIdentityOptions {
	env := map[string]string{agentIdentityAuthAPIBaseEnv: f.srv.URL + "/api/accounts/"}
	return agentIdentityOptions{
		client:         f.srv.Client(),
		chatGPTBaseURL: f.srv.URL + "/backend-api/",
		lookupEnv:      func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		sleep:          func(context.Context, time.Duration) error { return nil },
	}
}

func TestAgentIdentityAssertionHeaders(t *testing.T) {
	for _, encrypt := range []bool{false, true} {
		f := newAgentIdentityFixture(t)
		f.encrypt = encrypt
		a, err := newAgentIdentityAuth(context.Background(), f.jwt("k1", nil, nil), f.options())
		if err != nil {
			t.Fatal(err)
		}
		wantTask := map[bool]string{false: "task-plain", true: "task-sealed"}[encrypt]
		h, err := a.headers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if h.Get("ChatGPT-Account-ID") != "acct-agent" || h.Get("X-OpenAI-Fedramp") != "true" {
			t.Errorf("headers %v", h)
		}
		value, ok := strings.CutPrefix(h.Get("Authorization"), "AgentAssertion ")
		if !ok {
			t.Fatalf("Authorization %q is not an AgentAssertion", h.Get("Authorization"))
		}
		raw, err := base64.RawURLEncoding.DecodeString(value)
		if err != nil {
			t.Fatal(err)
		}
		var env map[string]string
		json.Unmarshal(raw, &env)
		wantPrefix := `{"agent_runtime_id":"` + agentTestRuntime + `","signature":"`
		if !strings.HasPrefix(string(raw), wantPrefix) || !strings.Contains(string(raw), `","task_id":"`+wantTask+`","timestamp":"`) {
			t.Errorf("envelope %s: members not in sorted order or wrong task", raw)
		}
		if _, err := time.Parse("2006-01-02T15:04:05Z", env["timestamp"]); err != nil {
			t.Errorf("timestamp %q: %v", env["timestamp"], err)
		}
		sig, _ := base64.StdEncoding.DecodeString(env["signature"])
		msg := agentTestRuntime + ":" + wantTask + ":" + env["timestamp"]
		if !ed25519.Verify(f.agentKey.Public().(ed25519.PublicKey), []byte(msg), sig) {
			t.Errorf("assertion signature does not verify over %q", msg)
		}
		if f.registered.Load() != 1 || f.jwksGets.Load() != 1 {
			t.Errorf("%d registrations, %d JWKS fetches", f.registered.Load(), f.jwksGets.Load())
		}
		if err := a.onUnauthorized(context.Background(), h); err == nil {
			t.Error("Agent Identity 'recovered' after a 401")
		}
	}
}

func TestAgentIdentityRejectsBadJWT(t *testing.T) {
	f := newAgentIdentityFixture(t)
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKCS8PrivateKey(ecKey) // well-formed PKCS#8, of another type
	if err != nil {
		t.Fatal(err)
	}
	const keyErr = "Agent Identity JWT: agent_private_key is not an Ed25519 key in PKCS#8"
	for name, jwt := range map[string]string{
		"unknown kid":   f.jwt("k9", nil, nil),
		"wrong key":     f.jwt("k1", otherKey, nil),
		"expired":       f.jwt("k1", nil, func(c map[string]any) { c["exp"] = time.Now().Add(-2 * time.Minute).Unix() }),
		"wrong aud":     f.jwt("k1", nil, func(c map[string]any) { c["aud"] = "someone-else" }),
		"wrong iss":     f.jwt("k1", nil, func(c map[string]any) { c["iss"] = "https://evil.example" }),
		"missing claim": f.jwt("k1", nil, func(c map[string]any) { delete(c, "account_id") }),
		"bad key": f.jwt("k1", nil, func(c map[string]any) {
			c["agent_private_key"] = base64.StdEncoding.EncodeToString([]byte("not pkcs8 at all, secret"))
		}),
		"bad key: ECDSA in PKCS#8": f.jwt("k1", nil, func(c map[string]any) {
			c["agent_private_key"] = base64.StdEncoding.EncodeToString(ecDER)
		}),
		"not a jwt": "only.two",
	} {
		_, err := newAgentIdentityAuth(context.Background(), jwt, f.options())
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.HasPrefix(name, "bad key") && err.Error() != keyErr {
			t.Errorf("%s: %q, want %q", name, err, keyErr)
		}
		assertNoSecrets(t, err, jwt, f.keyB64)
	}
	if f.registered.Load() != 0 {
		t.Errorf("a task was registered for a rejected JWT")
	}
	// Within the 60 s leeway, a just-expired JWT still passes.
	if _, err := newAgentIdentityAuth(context.Background(), f.jwt("k1", nil, func(c map[string]any) { c["exp"] = time.Now().Add(-30 * time.Second).Unix() }), f.options()); err != nil {
		t.Errorf("within leeway: %v", err)
	}
}

func TestAgentIdentityTaskRegistrationRetries(t *testing.T) {
	f := newAgentIdentityFixture(t)
	f.failFirst = 2
	if _, err := newAgentIdentityAuth(context.Background(), f.jwt("k1", nil, nil), f.options()); err != nil || f.registered.Load() != 3 {
		t.Fatalf("%v after %d attempts", err, f.registered.Load())
	}
	f = newAgentIdentityFixture(t)
	f.failFirst = 5
	_, err := newAgentIdentityAuth(context.Background(), f.jwt("k1", nil, nil), f.options())
	if err == nil || !strings.Contains(err.Error(), "HTTP 503") || f.registered.Load() != agentTaskRegistrationAttempts {
		t.Fatalf("%v after %d attempts", err, f.registered.Load())
	}
}

func TestAgentIdentityAccessTokenAndURLs(t *testing.T) {
	env := map[string]string{codexAccessTokenEnv: "  \n"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if _, err := readCodexAccessToken(lookup); err == nil || !strings.Contains(err.Error(), "CODEX_ACCESS_TOKEN") {
		t.Errorf("blank CODEX_ACCESS_TOKEN: %v", err)
	}
	env[codexAccessTokenEnv] = " tok\n"
	if v, err := readCodexAccessToken(lookup); v != "tok" || err != nil {
		t.Errorf("CODEX_ACCESS_TOKEN = %q, %v", v, err)
	}
	for base, want := range map[string]string{
		"https://chatgpt.com/backend-api": "https://chatgpt.com/backend-api/wham/agent-identities/jwks",
		"http://localhost:8080/api/codex": "http://localhost:8080/api/codex/agent-identities/jwks",
		"https://jwks.example":            "https://jwks.example/api/codex/agent-identities/jwks",
	} {
		if got := agentIdentityJWKSURL(base); got != want {
			t.Errorf("%s: %s, want %s", base, got, want)
		}
	}
	if _, err := parseAgentIdentityKey("%%%"); err == nil {
		t.Error("bad base64 key accepted")
	}
}
