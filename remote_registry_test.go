package main

// Tests of the registry client (docs/remote.md §2): register, validate, errors and backoff.

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
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

func newTestRegistry(t *testing.T) *testRegistry { return newTestRegistryServer(t, false) }

// newTestRegistryServer is newTestRegistry over HTTPS when tls is set.
func newTestRegistryServer(t *testing.T, tls bool) *testRegistry {
	r := &testRegistry{t: t, regID: "reg-1", registers: make(chan struct{}, 100)}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	if tls {
		r.srv.StartTLS()
	} else {
		r.srv.Start()
	}
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
	rc, err := c.startCredentials(context.Background(), strings.NewReader("TOKEN\n"), discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	return newRegistryClient(c, rc, discardLogger())
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
		{"ok, gzip-encoded", func(w http.ResponseWriter) {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			json.NewEncoder(zw).Encode(map[string]any{"environment_id": "env-test-1", "url": "ws://127.0.0.1:1/relay?role=environment",
				"security_profile": "noise_hybrid_ik_v1", "executor_registration_id": "reg-1"})
			zw.Close()
		}, "", false},
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
				h.Get("Accept") != "*/*" || h.Get("User-Agent") != "" || h.Get("Accept-Encoding") != "gzip" {
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
	c.log = newTextLogger(lockedWriter{&mu, &logs}, levelInfo)
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
		c.log = newTextLogger(funcWriter(func(p []byte) {
			if bytes.Contains(p, []byte("registration failed")) {
				if attempts++; attempts == 3 {
					cancel()
				}
			}
		}), levelInfo)
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
