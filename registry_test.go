package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func testRelayTimings() *relayTimings {
	t := defaultRelayTimings()
	t.backoff = backoffPolicy{initial: time.Millisecond, max: 4 * time.Millisecond, retryAfterCap: 20 * time.Millisecond}
	t.stableConnection = time.Hour
	t.handshakePause = time.Hour
	t.initialCredential = 5 * time.Second
	return &t
}

func noEnv(string) (string, bool) { return "", false }

func TestRemoteConfigValidate(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	os.WriteFile(ca, pemCert(srv.Certificate().Raw), 0o600)
	notPEM := filepath.Join(t.TempDir(), "x.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	apiKey := func(string) (string, bool) { return "sk-test", true }

	tests := []struct {
		name    string
		args    []string
		env     func(string) (string, bool)
		wantErr string // "" = valid
	}{
		{"https with bearer", []string{"--remote", "https://registry.example/api/", "--environment-id", "env-1", "--registration-bearer-stdin"}, noEnv, ""},
		{"loopback http", []string{"--remote", "http://127.0.0.1:9", "--environment-id", "e_1", "--executor-credential-stdin"}, noEnv, ""},
		{"localhost http", []string{"--remote", "http://localhost:9", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, ""},
		{"ipv6 loopback http", []string{"--remote", "http://[::1]:9", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, ""},
		{"api key to loopback", []string{"--remote", "http://127.0.0.1:9", "--environment-id", "e"}, apiKey, ""},
		{"api key to openai", []string{"--remote", "https://api.openai.com", "--environment-id", "e"}, apiKey, ""},
		{"remote CA", []string{"--remote", "https://r.example", "--environment-id", "e", "--registration-bearer-stdin", "--remote-ca", ca}, noEnv, ""},
		{"env id without remote", []string{"--environment-id", "e"}, noEnv, "need --remote"},
		{"remote without env id", []string{"--remote", "https://r.example", "--registration-bearer-stdin"}, noEnv, "needs --environment-id"},
		{"plain http off loopback", []string{"--remote", "http://registry.example", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "must use https"},
		{"userinfo", []string{"--remote", "https://u:p@registry.example", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "userinfo"},
		{"fragment", []string{"--remote", "https://registry.example/#x", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "fragment"},
		{"empty fragment", []string{"--remote", "https://registry.example/#", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "fragment"},
		{"query", []string{"--remote", "https://registry.example/?a=b", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "query"},
		{"relative", []string{"--remote", "registry.example", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "absolute URL"},
		{"ws scheme", []string{"--remote", "ws://127.0.0.1:9", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "must use https"},
		{"env id with slash", []string{"--remote", "https://r.example", "--environment-id", "bad/id", "--registration-bearer-stdin"}, noEnv, "only letters"},
		{"env id with space", []string{"--remote", "https://r.example", "--environment-id", "a b", "--registration-bearer-stdin"}, noEnv, "only letters"},
		{"env id too long", []string{"--remote", "https://r.example", "--environment-id", strings.Repeat("a", 257), "--registration-bearer-stdin"}, noEnv, "1 to 256"},
		{"two stdin credentials", []string{"--remote", "https://r.example", "--environment-id", "e", "--registration-bearer-stdin", "--executor-credential-stdin"}, noEnv, "cannot be combined"},
		{"no credential", []string{"--remote", "https://r.example", "--environment-id", "e"}, noEnv, "needs a registry credential"},
		{"api key to a foreign host", []string{"--remote", "https://r.example", "--environment-id", "e"}, apiKey, "only sent to HTTPS openai.com"},
		{"api key over http to openai", []string{"--remote", "http://api.openai.com", "--environment-id", "e"}, apiKey, "must use https"},
		{"missing CA file", []string{"--remote", "https://r.example", "--environment-id", "e", "--registration-bearer-stdin", "--remote-ca", "/nonexistent/ca.pem"}, noEnv, "--remote-ca"},
		{"CA file without PEM", []string{"--remote", "https://r.example", "--environment-id", "e", "--registration-bearer-stdin", "--remote-ca", notPEM}, noEnv, "no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			var c remoteConfig
			c.registerFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if !c.enabled() {
				t.Fatal("enabled() = false with remote flags")
			}
			c.lookupEnv = tt.env
			err := c.validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("validate = %v, want an error containing %q", err, tt.wantErr)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
	t.Run("no remote flags: disabled", func(t *testing.T) {
		var c remoteConfig
		c.registerFlags(flag.NewFlagSet("x", flag.ContinueOnError))
		if c.enabled() {
			t.Fatal("enabled() = true without flags")
		}
	})
}

func TestCredentialFrames(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name, line, wantTok, wantErr string
	}{
		{"valid", `{"version":1,"environment_id":"env-1","token":"tok-1","expires_at":1800000100}`, "tok-1", ""},
		{"extra keys ignored", `{"version":1,"environment_id":"env-1","token":"t","expires_at":1800000100,"x":2}`, "t", ""},
		{"expired", `{"version":1,"environment_id":"env-1","token":"t","expires_at":1799999999}`, "", "expired"},
		{"expires now", `{"version":1,"environment_id":"env-1","token":"t","expires_at":1800000000}`, "", "expired"},
		{"iso expiry", `{"version":1,"environment_id":"env-1","token":"t","expires_at":"2027-01-01T00:00:00Z"}`, "", "invalid executor credential frame"},
		{"string expiry number", `{"version":1,"environment_id":"env-1","token":"t","expires_at":"1800000100"}`, "", "invalid executor credential frame"},
		{"version 2", `{"version":2,"environment_id":"env-1","token":"t","expires_at":1800000100}`, "", "version 2"},
		{"other environment", `{"version":1,"environment_id":"env-2","token":"t","expires_at":1800000100}`, "", "different environment"},
		{"missing token", `{"version":1,"environment_id":"env-1","expires_at":1800000100}`, "", "required"},
		{"empty token", `{"version":1,"environment_id":"env-1","token":"","expires_at":1800000100}`, "", "empty token"},
		{"token with newline", `{"version":1,"environment_id":"env-1","token":"a\nb","expires_at":1800000100}`, "", "control"},
		{"not JSON", `tok-1`, "", "invalid executor credential frame"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := parseCredentialFrame([]byte(tt.line), "env-1", now)
			if tt.wantErr == "" {
				if err != nil || tok != tt.wantTok {
					t.Fatalf("= %q, %v; want %q", tok, err, tt.wantTok)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), `"t"`) || strings.Contains(err.Error(), "a\nb") {
				t.Fatalf("error leaks the token: %v", err)
			}
		})
	}
}

func testConfig(t *testing.T, remote string, extra ...string) *remoteConfig {
	t.Helper()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c := &remoteConfig{lookupEnv: noEnv, timings: testRelayTimings()}
	c.registerFlags(fs)
	if err := fs.Parse(append([]string{"--remote", remote, "--environment-id", "env-test-1"}, extra...)); err != nil {
		t.Fatal(err)
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStartCredentials(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	t.Run("bearer line", func(t *testing.T) {
		c := testConfig(t, "http://127.0.0.1:9", "--registration-bearer-stdin")
		rc, err := c.startCredentials(ctx, strings.NewReader("TOKEN\nrest"), log)
		if err != nil {
			t.Fatal(err)
		}
		if tok, _ := rc.bearer(); tok != "TOKEN" {
			t.Fatalf("token %q", tok)
		}
	})
	t.Run("bearer line too long", func(t *testing.T) {
		c := testConfig(t, "http://127.0.0.1:9", "--registration-bearer-stdin")
		if _, err := c.startCredentials(ctx, strings.NewReader(strings.Repeat("a", 17<<10)+"\n"), log); err == nil {
			t.Fatal("accepted a 17 KiB bearer")
		}
	})
	t.Run("bearer missing", func(t *testing.T) {
		c := testConfig(t, "http://127.0.0.1:9", "--registration-bearer-stdin")
		if _, err := c.startCredentials(ctx, strings.NewReader(""), log); err == nil {
			t.Fatal("accepted an empty stdin")
		}
	})
	t.Run("rotation and end of stream", func(t *testing.T) {
		c := testConfig(t, "http://127.0.0.1:9", "--executor-credential-stdin")
		pr, pw := io.Pipe()
		exp := time.Now().Add(time.Hour).Unix()
		frame := func(tok string) string {
			b, _ := json.Marshal(map[string]any{"version": 1, "environment_id": "env-test-1", "token": tok, "expires_at": exp})
			return string(b) + "\n"
		}
		go io.WriteString(pw, frame("tok-1"))
		rc, err := c.startCredentials(ctx, pr, log)
		if err != nil {
			t.Fatal(err)
		}
		if tok, _ := rc.bearer(); tok != "tok-1" {
			t.Fatalf("token %q", tok)
		}
		io.WriteString(pw, frame("tok-2"))
		io.WriteString(pw, frame("tok-3")) // the pipe is unbuffered: tok-2 has been read now
		if tok, _ := rc.bearer(); tok != "tok-2" && tok != "tok-3" {
			t.Fatalf("token %q after rotation", tok)
		}
		pw.Close()
		<-rc.dead
		if _, err := rc.bearer(); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("after EOF: %v", err)
		}
	})
	t.Run("first frame invalid", func(t *testing.T) {
		c := testConfig(t, "http://127.0.0.1:9", "--executor-credential-stdin")
		_, err := c.startCredentials(ctx, strings.NewReader(`{"version":1,"environment_id":"env-test-1","token":"t","expires_at":1}`+"\n"), log)
		if err == nil || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("first frame never comes", func(t *testing.T) {
		c := testConfig(t, "http://127.0.0.1:9", "--executor-credential-stdin")
		c.timings.initialCredential = time.Millisecond
		pr, pw := io.Pipe()
		defer pw.Close()
		_, err := c.startCredentials(ctx, pr, log)
		if err == nil || !strings.Contains(err.Error(), "timed out waiting for the initial") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("api key", func(t *testing.T) {
		c := &remoteConfig{remote: "http://127.0.0.1:9", environmentID: "e", lookupEnv: func(string) (string, bool) { return "sk-x", true }}
		if err := c.validate(); err != nil {
			t.Fatal(err)
		}
		rc, err := c.startCredentials(ctx, nil, log)
		if err != nil {
			t.Fatal(err)
		}
		if tok, _ := rc.bearer(); tok != "sk-x" {
			t.Fatalf("token %q", tok)
		}
	})
}

func TestBackoff(t *testing.T) {
	b := &backoff{p: backoffPolicy{initial: time.Second, max: 8 * time.Second, retryAfterCap: 30 * time.Second}}
	bounds := [][2]time.Duration{{500 * time.Millisecond, time.Second}, {time.Second, 2 * time.Second},
		{2 * time.Second, 4 * time.Second}, {4 * time.Second, 8 * time.Second}, {4 * time.Second, 8 * time.Second}}
	for i, bd := range bounds {
		if d := b.next(0); d < bd[0] || d > bd[1] {
			t.Fatalf("delay %d = %v, want in [%v, %v]", i, d, bd[0], bd[1])
		}
	}
	if d := b.next(20 * time.Second); d != 20*time.Second {
		t.Fatalf("Retry-After 20s: delay %v", d)
	}
	if d := b.next(time.Hour); d != 30*time.Second {
		t.Fatalf("Retry-After 1h is capped: delay %v", d)
	}
	b.reset()
	if d := b.next(0); d > time.Second {
		t.Fatalf("after reset: %v", d)
	}
	for range 100 { // no overflow however long it runs
		if d := b.next(0); d <= 0 || d > 8*time.Second {
			t.Fatalf("delay %v", d)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"7":                             7 * time.Second,
		"-3":                            0,
		"soon":                          0,
		"Thu, 01 Jan 2026 00:00:30 GMT": 30 * time.Second,
		"Wed, 31 Dec 2025 00:00:00 GMT": 0,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

// testRegistry is a registry on loopback whose answers a test scripts. It records every
// request it sees.
type testRegistry struct {
	t   *testing.T
	srv *httptest.Server

	mu        sync.Mutex
	requests  []registryRequest
	register  []func(w http.ResponseWriter) // scripted answers, consumed in order; then registerOK
	validate  func(w http.ResponseWriter, body map[string]json.RawMessage)
	url       string // rendezvous URL handed out
	regID     string
	regCount  int
	registers chan struct{} // one token per register request
}

type registryRequest struct {
	path   string
	header http.Header
	body   []byte
}

func newTestRegistry(t *testing.T) *testRegistry {
	r := &testRegistry{t: t, regID: "reg-1", registers: make(chan struct{}, 100)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *testRegistry) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.requests = append(r.requests, registryRequest{req.URL.Path, req.Header.Clone(), body})
	var next func(http.ResponseWriter)
	if strings.HasSuffix(req.URL.Path, "/register") && len(r.register) > 0 {
		next, r.register = r.register[0], r.register[1:]
	}
	validate := r.validate
	r.mu.Unlock()
	switch {
	case req.Method != http.MethodPost:
		http.Error(w, "method", http.StatusMethodNotAllowed)
	case req.URL.Path == "/cloud/environment/env-test-1/register":
		r.mu.Lock()
		r.regCount++
		r.mu.Unlock()
		if next != nil {
			next(w)
		} else {
			r.registerOK(w)
		}
		r.registers <- struct{}{}
	case req.URL.Path == "/cloud/environment/env-test-1/validate":
		var m map[string]json.RawMessage
		json.Unmarshal(body, &m)
		if validate != nil {
			validate(w, m)
			return
		}
		io.WriteString(w, `{"valid":true}`)
	default:
		http.NotFound(w, req)
	}
}

func (r *testRegistry) registerOK(w http.ResponseWriter) {
	r.mu.Lock()
	u := r.url
	r.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]string{"environment_id": "env-test-1", "url": u,
		"security_profile": "noise_hybrid_ik_v1", "executor_registration_id": r.regID, "transport_policy": "ignored"})
}

func (r *testRegistry) snapshot() []registryRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]registryRequest(nil), r.requests...)
}

func status(code int, header ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		io.WriteString(w, `{"error":{"code":"some_code","message":"secret-free message"}}`)
	}
}

func body(s string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) { io.WriteString(w, s) }
}

func newTestRegistryClient(t *testing.T, reg *testRegistry) *registryClient {
	c := testConfig(t, reg.srv.URL, "--registration-bearer-stdin")
	rc, err := c.startCredentials(context.Background(), strings.NewReader("TOKEN\n"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return newRegistryClient(c, rc, slog.New(slog.DiscardHandler))
}

func TestRegistryRegister(t *testing.T) {
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ok := func(mod func(m map[string]any)) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			m := map[string]any{"environment_id": "env-test-1", "url": "ws://127.0.0.1:1/relay?role=environment",
				"security_profile": "noise_hybrid_ik_v1", "executor_registration_id": "reg-1", "foo": 1}
			mod(m)
			json.NewEncoder(w).Encode(m)
		}
	}
	tests := []struct {
		name      string
		answer    func(w http.ResponseWriter)
		wantErr   string
		permanent bool
	}{
		{"ok with extra keys", ok(func(map[string]any) {}), "", false},
		{"empty registration id accepted", ok(func(m map[string]any) { m["executor_registration_id"] = "" }), "", false},
		{"localhost ws url accepted", ok(func(m map[string]any) { m["url"] = "ws://localhost:9/x" }), "", false},
		{"wss url accepted", ok(func(m map[string]any) { m["url"] = "wss://rendezvous.example/route?sig=x" }), "", false},
		{"different environment", ok(func(m map[string]any) { m["environment_id"] = "env-2" }), "different environment id", true},
		{"other security profile", ok(func(m map[string]any) { m["security_profile"] = "x" }), "unsupported security profile", true},
		{"missing registration id", ok(func(m map[string]any) { delete(m, "executor_registration_id") }), "required", true},
		{"registration id not a string", ok(func(m map[string]any) { m["executor_registration_id"] = 5 }), "not a JSON object", true},
		{"plain ws off loopback", ok(func(m map[string]any) { m["url"] = "ws://rendezvous.example/x" }), "rendezvous url must use wss", true},
		{"http url", ok(func(m map[string]any) { m["url"] = "https://rendezvous.example/x" }), "rendezvous url must use wss", true},
		{"not JSON", body("<html>"), "invalid registration response", true},
		{"401", status(401), "HTTP 401: response body omitted", true},
		{"403", status(403), "HTTP 403: response body omitted", true},
		{"404", status(404), "HTTP 404: some_code secret-free message", true},
		{"400", status(400), "HTTP 400", true},
		{"redirect", status(307, "Location", "http://elsewhere.example/"), "not followed", true},
		{"409", status(409), "HTTP 409", false},
		{"429", status(429), "HTTP 429", false},
		{"500", status(500), "HTTP 500", false},
		{"503", status(503), "HTTP 503", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := newTestRegistry(t)
			reg.register = []func(http.ResponseWriter){tt.answer}
			c := newTestRegistryClient(t, reg)
			r, err := c.register(context.Background(), id.publicKey())
			if tt.wantErr == "" {
				if err != nil || r.environmentID != "env-test-1" {
					t.Fatalf("register = %+v, %v", r, err)
				}
			} else {
				var re *registryError
				if !errors.As(err, &re) || !strings.Contains(err.Error(), tt.wantErr) || re.permanent != tt.permanent {
					t.Fatalf("register error = %v (%+v), want %q permanent=%v", err, re, tt.wantErr, tt.permanent)
				}
			}
			reqs := reg.snapshot()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1 (redirects are not followed)", len(reqs))
			}
			h := reqs[0].header
			if h.Get("Authorization") != "Bearer TOKEN" || h.Get("Content-Type") != "application/json" ||
				h.Get("Accept") != "*/*" || h.Get("User-Agent") != "" || h.Get("Accept-Encoding") != "" {
				t.Fatalf("headers %v", h)
			}
			var sent map[string]json.RawMessage
			if err := json.Unmarshal(reqs[0].body, &sent); err != nil || len(sent) != 2 ||
				string(sent["security_profile"]) != `"noise_hybrid_ik_v1"` {
				t.Fatalf("body %s", reqs[0].body)
			}
			var key noisePublicKey
			if err := json.Unmarshal(sent["executor_public_key"], &key); err != nil || !key.equal(id.publicKey()) {
				t.Fatalf("executor_public_key %s: %v", sent["executor_public_key"], err)
			}
		})
	}
}

func TestRegistryRegisterWithRetry(t *testing.T) {
	id, _ := newNoiseIdentity(rand.Reader)
	var logs bytes.Buffer
	reg := newTestRegistry(t)
	reg.url = "ws://127.0.0.1:1/relay"
	reg.register = []func(http.ResponseWriter){status(503), status(429, "Retry-After", "0"), status(409), status(500)}
	c := newTestRegistryClient(t, reg)
	var mu sync.Mutex
	c.log = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	bo := &backoff{p: testRelayTimings().backoff}
	r, err := c.registerWithRetry(context.Background(), id.publicKey(), bo)
	if err != nil || r.url != reg.url {
		t.Fatalf("= %+v, %v", r, err)
	}
	if n := len(reg.snapshot()); n != 5 {
		t.Fatalf("%d attempts, want 5", n)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if strings.Count(out, "registering with the registry") != 5 || strings.Contains(out, "TOKEN") {
		t.Fatalf("logs:\n%s", out)
	}

	t.Run("permanent failure stops", func(t *testing.T) {
		reg := newTestRegistry(t)
		reg.register = []func(http.ResponseWriter){status(503), status(403)}
		c := newTestRegistryClient(t, reg)
		_, err := c.registerWithRetry(context.Background(), id.publicKey(), &backoff{p: testRelayTimings().backoff})
		if err == nil || !strings.Contains(err.Error(), "HTTP 403") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("network failure is retried until cancelled", func(t *testing.T) {
		reg := newTestRegistry(t)
		c := newTestRegistryClient(t, reg)
		reg.srv.Close() // connection refused from now on
		ctx, cancel := context.WithCancel(context.Background())
		attempts := 0
		c.log = slog.New(slog.NewTextHandler(funcWriter(func(p []byte) {
			if bytes.Contains(p, []byte("registration failed")) {
				if attempts++; attempts == 3 {
					cancel()
				}
			}
		}), nil))
		_, err := c.registerWithRetry(ctx, id.publicKey(), &backoff{p: testRelayTimings().backoff})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

type funcWriter func(p []byte)

func (f funcWriter) Write(p []byte) (int, error) { f(p); return len(p), nil }

func TestRegistryValidate(t *testing.T) {
	harness, _ := newNoiseIdentity(rand.Reader)
	tests := []struct {
		name   string
		answer func(w http.ResponseWriter, m map[string]json.RawMessage)
		want   validateOutcome
	}{
		{"valid", func(w http.ResponseWriter, _ map[string]json.RawMessage) { io.WriteString(w, `{"valid":true}`) }, validateAccepted},
		{"invalid", func(w http.ResponseWriter, _ map[string]json.RawMessage) { io.WriteString(w, `{"valid":false}`) }, validateRejected},
		{"403", func(w http.ResponseWriter, _ map[string]json.RawMessage) { w.WriteHeader(403) }, validateRejected},
		{"401", func(w http.ResponseWriter, _ map[string]json.RawMessage) { w.WriteHeader(401) }, validateCredentialsRejected},
		{"500", func(w http.ResponseWriter, _ map[string]json.RawMessage) { w.WriteHeader(500) }, validateFailed},
		{"no valid key", func(w http.ResponseWriter, _ map[string]json.RawMessage) { io.WriteString(w, `{}`) }, validateFailed},
		{"valid as string", func(w http.ResponseWriter, _ map[string]json.RawMessage) { io.WriteString(w, `{"valid":"true"}`) }, validateFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := newTestRegistry(t)
			reg.validate = tt.answer
			c := newTestRegistryClient(t, reg)
			got, err := c.validate(context.Background(), "reg-1", "stream-9", harness.publicKey(), []byte("auth-✓"))
			if got != tt.want || (got == validateAccepted) != (err == nil) {
				t.Fatalf("validate = %v, %v; want %v", got, err, tt.want)
			}
			req := reg.snapshot()[0]
			if req.path != "/cloud/environment/env-test-1/validate" || req.header.Get("X-Codex-Noise-Stream-Id") != "stream-9" ||
				req.header.Get("Authorization") != "Bearer TOKEN" {
				t.Fatalf("request %s %v", req.path, req.header)
			}
			var m map[string]json.RawMessage
			json.Unmarshal(req.body, &m)
			var key noisePublicKey
			if len(m) != 3 || string(m["executor_registration_id"]) != `"reg-1"` || string(m["harness_key_authorization"]) != `"auth-✓"` ||
				json.Unmarshal(m["harness_public_key"], &key) != nil || !key.equal(harness.publicKey()) {
				t.Fatalf("body %s", req.body)
			}
		})
	}
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
