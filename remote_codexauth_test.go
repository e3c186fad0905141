package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// codexTestNow is the clock of these tests, shared with the helper processes.
var codexTestNow = time.Date(2031, 1, 2, 3, 4, 5, 123456789, time.UTC)

func codexTestClock() time.Time { return codexTestNow }

// fakeJWT builds an unsigned JWT-shaped token with the given payload.
func fakeJWT(payload map[string]any) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "none", "typ": "JWT"}) + "." + enc(payload) + ".c2ln"
}

// chatGPTTestToken is an access or id token for account acct, expiring at exp.
func chatGPTTestToken(acct string, exp time.Time, extra map[string]any) string {
	auth := map[string]any{"chatgpt_account_id": acct}
	for k, v := range extra {
		auth[k] = v
	}
	return fakeJWT(map[string]any{"exp": exp.Unix(), chatGPTAuthClaim: auth, "nonce": fmt.Sprint(exp.UnixNano())})
}

// writeCodexAuth writes auth.json with mode 0600.
func writeCodexAuth(t *testing.T, home string, doc map[string]any) {
	t.Helper()
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, codexAuthFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func chatGPTAuthDoc(access, refresh, acct string) map[string]any {
	return map[string]any{
		"auth_mode":      "chatgpt",
		"OPENAI_API_KEY": nil,
		"tokens": map[string]any{
			"id_token":      chatGPTTestToken(acct, codexTestNow.Add(time.Hour), nil),
			"access_token":  access,
			"refresh_token": refresh,
			"account_id":    acct,
		},
		"last_refresh":  "2030-12-30T00:00:00Z",
		"future_member": map[string]any{"kept": true},
	}
}

// tokenEndpoint is a loopback OAuth token endpoint. Each refresh hands out numbered tokens; a
// refresh token presented a second time is refused as refresh_token_reused, as the real
// endpoint refuses it.
type tokenEndpoint struct {
	*httptest.Server
	requests atomic.Int32
	delay    time.Duration
	status   int                            // non-zero: fail with this status
	body     string                         // and this body
	gate     func(r *http.Request, n int32) // if set, called before the answer to request n
	mu       sync.Mutex
	seen     []string // refresh tokens presented
}

// seenTokens returns the refresh tokens presented so far.
func (te *tokenEndpoint) seenTokens() []string {
	te.mu.Lock()
	defer te.mu.Unlock()
	return append([]string(nil), te.seen...)
}

func newTokenEndpoint(t *testing.T) *tokenEndpoint {
	te := &tokenEndpoint{}
	te.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := te.requests.Add(1)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Originator") != codexOriginator ||
			r.Header.Get("Accept") != "*/*" || !strings.HasPrefix(r.Header.Get("User-Agent"), codexOriginator+"/"+executorVersion+" (") || r.Header.Get("Accept-Encoding") != "gzip" {
			http.Error(w, "bad request line or headers", http.StatusBadRequest)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var req map[string]string
		if json.Unmarshal(raw, &req) != nil || len(req) != 4 || req["client_id"] != codexOAuthClientID || req["grant_type"] != "refresh_token" ||
			req["refresh_reason"] != "proactive_expiry" && req["refresh_reason"] != "unauthorized_recovery" {
			http.Error(w, "bad body "+string(raw), http.StatusBadRequest)
			return
		}
		te.mu.Lock()
		reused := slices.Contains(te.seen, req["refresh_token"])
		te.seen = append(te.seen, req["refresh_token"])
		te.mu.Unlock()
		if te.gate != nil {
			te.gate(r, n)
		}
		time.Sleep(te.delay)
		if te.status != 0 {
			w.WriteHeader(te.status)
			io.WriteString(w, te.body)
			return
		}
		if reused {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"code":"refresh_token_reused","message":"Your refresh token has already been used"}}`)
			return
		}
		json.NewEncoder(w).Encode(map[string]string{
			"id_token":      chatGPTTestToken("acct-1", codexTestNow.Add(time.Hour), map[string]any{"chatgpt_account_is_fedramp": true}),
			"access_token":  fmt.Sprintf("%s.new%d", chatGPTTestToken("acct-1", codexTestNow.Add(time.Hour), nil), n),
			"refresh_token": fmt.Sprintf("rt-new-%d", n),
		})
	}))
	t.Cleanup(te.Close)
	t.Setenv(codexRefreshTokenURLEnv, te.URL+"/oauth/token")
	return te
}

func readAuthJSON(t *testing.T, home string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(home, codexAuthFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("auth.json is not valid JSON after a refresh: %v", err)
	}
	return doc
}

// assertNoSecrets fails if an error text contains any of the secrets.
func assertNoSecrets(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range secrets {
		for _, part := range strings.Split(s, ".") {
			if len(part) > 8 && strings.Contains(err.Error(), part) {
				t.Errorf("error text %q contains a secret", err.Error())
			}
		}
	}
}

func TestCodexAuthRefreshesExpiredToken(t *testing.T) {
	te := newTokenEndpoint(t)
	home := t.TempDir()
	expired := chatGPTTestToken("acct-1", codexTestNow.Add(-time.Minute), nil)
	writeCodexAuth(t, home, chatGPTAuthDoc(expired, "rt-old", "acct-1"))

	l, err := loadCodexLogin(home, nil, codexTestClock)
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.headers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if te.requests.Load() != 1 || te.seen[0] != "rt-old" {
		t.Fatalf("token endpoint saw %d requests with %v, want one with rt-old", te.requests.Load(), te.seen)
	}
	doc := readAuthJSON(t, home)
	tokens := doc["tokens"].(map[string]any)
	if got := h.Get("Authorization"); got != "Bearer "+tokens["access_token"].(string) || !strings.HasSuffix(got, ".new1") {
		t.Errorf("Authorization = %q, auth.json access_token = %q", got, tokens["access_token"])
	}
	if h.Get("ChatGPT-Account-ID") != "acct-1" || h.Get("X-OpenAI-Fedramp") != "true" {
		t.Errorf("headers = %v, want the account id and the fedramp flag of the new id_token", h)
	}
	if tokens["refresh_token"] != "rt-new-1" || tokens["account_id"] != "acct-1" {
		t.Errorf("tokens after refresh = %v", tokens)
	}
	if doc["last_refresh"] != "2031-01-02T03:04:05.123456789Z" {
		t.Errorf("last_refresh = %v, want the clock's time", doc["last_refresh"])
	}
	if doc["future_member"] == nil || doc["auth_mode"] != "chatgpt" || doc["OPENAI_API_KEY"] != nil {
		t.Errorf("other members not kept: %v", doc)
	}
	fi, err := os.Stat(filepath.Join(home, codexAuthFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("auth.json mode = %v, %v; want 0600", fi.Mode(), err)
	}
	raw, _ := os.ReadFile(filepath.Join(home, codexAuthFile))
	if !bytes.HasPrefix(raw, []byte("{\n  \"auth_mode\": \"chatgpt\",\n  \"OPENAI_API_KEY\": null,\n  \"tokens\": {\n    \"id_token\"")) {
		t.Errorf("auth.json is not laid out as Codex writes it:\n%s", raw)
	}
	entries, _ := os.ReadDir(home)
	for _, e := range entries {
		if e.Name() != codexAuthFile && e.Name() != codexAuthLockFile {
			t.Errorf("stray file %s left behind", e.Name())
		}
	}

	// Fresh now: no second request.
	if _, err := l.headers(context.Background()); err != nil || te.requests.Load() != 1 {
		t.Errorf("second headers: %v, %d requests", err, te.requests.Load())
	}
}

func TestCodexAuthTokenWithoutExpUsesLastRefresh(t *testing.T) {
	te := newTokenEndpoint(t)
	home := t.TempDir()
	noExp := fakeJWT(map[string]any{"sub": "x"})
	doc := chatGPTAuthDoc(noExp, "rt-old", "acct-1")
	doc["last_refresh"] = codexTestNow.Add(-7 * 24 * time.Hour).Format(time.RFC3339)
	writeCodexAuth(t, home, doc)
	l, err := loadCodexLogin(home, nil, codexTestClock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.headers(context.Background()); err != nil || te.requests.Load() != 0 {
		t.Fatalf("7-day-old token: %v, %d refreshes; want none", err, te.requests.Load())
	}
	doc["last_refresh"] = codexTestNow.Add(-9 * 24 * time.Hour).Format(time.RFC3339)
	writeCodexAuth(t, home, doc)
	l, _ = loadCodexLogin(home, nil, codexTestClock)
	if _, err := l.headers(context.Background()); err != nil || te.requests.Load() != 1 {
		t.Fatalf("9-day-old token: %v, %d refreshes; want one", err, te.requests.Load())
	}
}

func TestCodexAuthUnauthorizedRefreshes(t *testing.T) {
	te := newTokenEndpoint(t)
	home := t.TempDir()
	valid := chatGPTTestToken("acct-1", codexTestNow.Add(time.Hour), nil)
	writeCodexAuth(t, home, chatGPTAuthDoc(valid, "rt-old", "acct-1"))
	l, err := loadCodexLogin(home, nil, codexTestClock)
	if err != nil {
		t.Fatal(err)
	}
	rejected, err := l.headers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.onUnauthorized(context.Background(), rejected); err != nil {
		t.Fatal(err)
	}
	h, _ := l.headers(context.Background())
	if te.requests.Load() != 1 || !strings.HasSuffix(h.Get("Authorization"), ".new1") {
		t.Fatalf("after a 401: %d refreshes, Authorization %q", te.requests.Load(), h.Get("Authorization"))
	}

	// Another process refreshed meanwhile: its tokens are used, without a request.
	other := chatGPTTestToken("acct-1", codexTestNow.Add(2*time.Hour), nil)
	writeCodexAuth(t, home, chatGPTAuthDoc(other, "rt-other", "acct-1"))
	if err := l.onUnauthorized(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	h, _ = l.headers(context.Background())
	if te.requests.Load() != 1 || h.Get("Authorization") != "Bearer "+other {
		t.Fatalf("after another process refreshed: %d refreshes, Authorization %q", te.requests.Load(), h.Get("Authorization"))
	}
}

func TestCodexAuthAPIKey(t *testing.T) {
	for _, name := range []string{"apikey.json", "apikey_legacy.json"} {
		home := t.TempDir()
		data, err := os.ReadFile(filepath.Join("testdata", "codexauth", name))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(home, codexAuthFile), data, 0o600)
		l, err := loadCodexLogin(home, nil, codexTestClock)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var want struct {
			Key string `json:"OPENAI_API_KEY"`
		}
		json.Unmarshal(data, &want)
		h, err := l.headers(context.Background())
		if err != nil || h.Get("Authorization") != "Bearer "+want.Key || h.Get("ChatGPT-Account-ID") != "" || len(h) != 1 {
			t.Errorf("%s: headers %v, %v", name, h, err)
		}
		if !l.apiKeyMode() {
			t.Errorf("%s: apiKeyMode() = false", name)
		}
		err = l.onUnauthorized(context.Background(), h)
		if err == nil {
			t.Errorf("%s: an API key was 'recovered' after a 401", name)
		}
		assertNoSecrets(t, err, want.Key)
	}
}

func TestCodexAuthMissingLogin(t *testing.T) {
	home := t.TempDir()
	_, err := loadCodexLogin(home, nil, codexTestClock)
	if !errors.Is(err, errCodexNotLoggedIn) || !strings.Contains(err.Error(), "codex login") {
		t.Errorf("no auth.json: %v", err)
	}
	os.WriteFile(filepath.Join(home, codexAuthFile), []byte(`{"auth_mode":"chatgpt","OPENAI_API_KEY":null}`), 0o600)
	if _, err := loadCodexLogin(home, nil, codexTestClock); !errors.Is(err, errCodexNotLoggedIn) {
		t.Errorf("no tokens: %v", err)
	}
	secret := "sk-" + strings.Repeat("s", 30)
	os.WriteFile(filepath.Join(home, codexAuthFile), []byte(`{"OPENAI_API_KEY":"`+secret+`",`), 0o600)
	_, err = loadCodexLogin(home, nil, codexTestClock)
	if err == nil || !strings.Contains(err.Error(), "codex login") {
		t.Errorf("torn auth.json: %v", err)
	}
	assertNoSecrets(t, err, secret)

	t.Setenv("CODEX_HOME", home)
	if dir, err := codexHomeDir(os.LookupEnv); err != nil || dir != home {
		t.Errorf("codexHomeDir = %q, %v", dir, err)
	}
	t.Setenv("CODEX_HOME", "")
	if dir, err := codexHomeDir(os.LookupEnv); err != nil || filepath.Base(dir) != ".codex" {
		t.Errorf("codexHomeDir without CODEX_HOME = %q, %v", dir, err)
	}
}

func TestCodexAuthRefreshRejected(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		final  bool
	}{
		{401, `{"error":{"code":"refresh_token_expired","message":"x"}}`, true},
		{400, `{"error":"refresh_token_reused"}`, true},
		{400, `{"code":"REFRESH_TOKEN_INVALIDATED"}`, true},
		{401, `not json`, true},
		{500, `{"error":{"code":"server_error"}}`, false},
		{400, `{"error":{"code":"invalid_request"}}`, false},
	} {
		te := newTokenEndpoint(t)
		te.status, te.body = tc.status, tc.body
		home := t.TempDir()
		access := chatGPTTestToken("acct-1", codexTestNow.Add(-time.Hour), nil)
		refresh := "rt-" + strings.Repeat("r", 40)
		writeCodexAuth(t, home, chatGPTAuthDoc(access, refresh, "acct-1"))
		before, _ := os.ReadFile(filepath.Join(home, codexAuthFile))
		l, err := loadCodexLogin(home, nil, codexTestClock)
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.headers(context.Background())
		var re *codexRefreshError
		if !errors.As(err, &re) || re.Permanent() != tc.final || errors.Is(err, errCodexLoginExpired) != tc.final {
			t.Errorf("%d %s: %v", tc.status, tc.body, err)
		}
		if tc.final && !strings.Contains(err.Error(), "codex login") {
			t.Errorf("%d %s: %q does not say to sign in again", tc.status, tc.body, err)
		}
		assertNoSecrets(t, err, access, refresh)
		_, err2 := l.headers(context.Background())
		want := int32(2)
		if tc.final {
			want = 1 // the failure is remembered for these tokens
		}
		if err2 == nil || te.requests.Load() != want {
			t.Errorf("%d %s: second call %v after %d requests, want %d", tc.status, tc.body, err2, te.requests.Load(), want)
		}
		if after, _ := os.ReadFile(filepath.Join(home, codexAuthFile)); !bytes.Equal(before, after) {
			t.Errorf("%d %s: auth.json changed after a failed refresh", tc.status, tc.body)
		}
	}
}

func TestCodexAuthAccountChanged(t *testing.T) {
	newTokenEndpoint(t)
	home := t.TempDir()
	writeCodexAuth(t, home, chatGPTAuthDoc(chatGPTTestToken("acct-1", codexTestNow.Add(-time.Hour), nil), "rt-1", "acct-1"))
	l, err := loadCodexLogin(home, nil, codexTestClock)
	if err != nil {
		t.Fatal(err)
	}
	writeCodexAuth(t, home, chatGPTAuthDoc(chatGPTTestToken("acct-2", codexTestNow.Add(time.Hour), nil), "rt-2", "acct-2"))
	if _, err := l.headers(context.Background()); !errors.Is(err, errCodexAccountChanged) {
		t.Errorf("other account on disk: %v", err)
	}
	os.Remove(filepath.Join(home, codexAuthFile))
	if err := l.onUnauthorized(context.Background(), nil); !errors.Is(err, errCodexNotLoggedIn) {
		t.Errorf("signed out: %v", err)
	}
}

func TestCodexAuthRefreshFollowsSymlink(t *testing.T) {
	newTokenEndpoint(t)
	home, real := t.TempDir(), t.TempDir()
	writeCodexAuth(t, real, chatGPTAuthDoc(chatGPTTestToken("acct-1", codexTestNow.Add(-time.Hour), nil), "rt-1", "acct-1"))
	if err := os.Symlink(filepath.Join(real, codexAuthFile), filepath.Join(home, codexAuthFile)); err != nil {
		t.Skip(err)
	}
	l, err := loadCodexLogin(home, nil, codexTestClock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.headers(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(home, codexAuthFile)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced: %v %v", fi.Mode(), err)
	}
	if tokens := readAuthJSON(t, real)["tokens"].(map[string]any); tokens["refresh_token"] != "rt-new-1" {
		t.Errorf("target not updated: %v", tokens)
	}
}

// TestCodexAuthConcurrentRefreshGoroutines: two logins on one auth.json (as two processes
// would hold) and several goroutines on each make one network refresh between them.
func TestCodexAuthConcurrentRefreshGoroutines(t *testing.T) {
	te := newTokenEndpoint(t)
	te.delay = 100 * time.Millisecond
	home := t.TempDir()
	writeCodexAuth(t, home, chatGPTAuthDoc(chatGPTTestToken("acct-1", codexTestNow.Add(-time.Hour), nil), "rt-old", "acct-1"))
	var logins []*codexLogin
	for i := 0; i < 2; i++ {
		l, err := loadCodexLogin(home, nil, codexTestClock)
		if err != nil {
			t.Fatal(err)
		}
		logins = append(logins, l)
	}
	var wg sync.WaitGroup
	got := make([]string, 6)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := logins[i%2].headers(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = h.Get("Authorization")
		}()
	}
	wg.Wait()
	if n := te.requests.Load(); n != 1 {
		t.Fatalf("%d network refreshes, want 1", n)
	}
	tokens := readAuthJSON(t, home)["tokens"].(map[string]any)
	for i, g := range got {
		if g != "Bearer "+tokens["access_token"].(string) {
			t.Errorf("goroutine %d used %q, auth.json holds %q", i, g, tokens["access_token"])
		}
	}
}

// TestCodexAuthConcurrentRefreshProcesses runs the refresh in separate processes (this test
// binary again) that start together: one network refresh, one valid auth.json.
func TestCodexAuthConcurrentRefreshProcesses(t *testing.T) {
	te := newTokenEndpoint(t)
	te.delay = 200 * time.Millisecond
	home := t.TempDir()
	writeCodexAuth(t, home, chatGPTAuthDoc(chatGPTTestToken("acct-1", codexTestNow.Add(-time.Hour), nil), "rt-old", "acct-1"))

	const procs = 3
	outs := make([]bytes.Buffer, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCodexAuthHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "CODEXAUTH_TEST_HELPER=1", "CODEX_HOME="+home)
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		cmds[i] = cmd
	}
	for _, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, outs[i].String())
		}
	}
	if n := te.requests.Load(); n != 1 {
		t.Fatalf("%d network refreshes across %d processes, want 1", n, procs)
	}
	tokens := readAuthJSON(t, home)["tokens"].(map[string]any)
	for i := range outs {
		if !strings.Contains(outs[i].String(), "AUTH=Bearer "+tokens["access_token"].(string)+"\n") {
			t.Errorf("helper %d did not use the token in auth.json:\n%s", i, outs[i].String())
		}
	}
}

// TestCodexAuthHelperProcess is one refreshing process of the test above.
func TestCodexAuthHelperProcess(t *testing.T) {
	if os.Getenv("CODEXAUTH_TEST_HELPER") != "1" {
		t.Skip("helper process only")
	}
	l, err := loadCodexLogin("", nil, codexTestClock)
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.headers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("AUTH=%s\n", h.Get("Authorization"))
}

func TestChatGPTTokenStdin(t *testing.T) {
	exp := time.Now().Add(time.Hour)
	withClaim := chatGPTTestToken("acct-a", exp, nil)
	noClaim := fakeJWT(map[string]any{"exp": exp.Unix()})

	a, err := newChatGPTTokenAuth(withClaim, "")
	if err != nil {
		t.Fatal(err)
	}
	h, _ := a.headers(context.Background())
	if h.Get("Authorization") != "Bearer "+withClaim || h.Get("ChatGPT-Account-ID") != "acct-a" {
		t.Errorf("claim only: %v", h)
	}
	if _, err := newChatGPTTokenAuth(withClaim, "acct-a"); err != nil {
		t.Errorf("matching --chatgpt-account-id: %v", err)
	}
	_, err = newChatGPTTokenAuth(withClaim, "acct-b")
	if !errors.Is(err, errChatGPTAccountID) {
		t.Errorf("mismatch: %v", err)
	}
	assertNoSecrets(t, err, withClaim)
	if a, err := newChatGPTTokenAuth(noClaim, "acct-c"); err != nil {
		t.Errorf("flag only: %v", err)
	} else if h, _ := a.headers(context.Background()); h.Get("ChatGPT-Account-ID") != "acct-c" {
		t.Errorf("flag only: %v", h)
	}
	if _, err := newChatGPTTokenAuth(noClaim, ""); err == nil || !strings.Contains(err.Error(), "--chatgpt-account-id") {
		t.Errorf("no account at all: %v", err)
	}
	if _, err := newChatGPTTokenAuth(noClaim, "bad id"); err == nil {
		t.Error("account id with a space accepted")
	}
	secret := "opaque-" + strings.Repeat("t", 40)
	_, err = newChatGPTTokenAuth(secret, "acct-a")
	if err == nil {
		t.Error("non-JWT token accepted")
	}
	assertNoSecrets(t, err, secret)
	if err := a.onUnauthorized(context.Background(), h); err == nil {
		t.Error("a stdin token was 'recovered' after a 401")
	}

	if tok, err := readChatGPTToken(strings.NewReader(withClaim + "\nrest")); err != nil || tok != withClaim {
		t.Errorf("read: %q, %v", tok, err)
	}
	if tok, err := readChatGPTToken(strings.NewReader(withClaim + "\r\n")); err != nil || tok != withClaim {
		t.Errorf("read CRLF: %q, %v", tok, err)
	}
	for _, in := range []string{withClaim, "", strings.Repeat("x", chatGPTTokenMaxLine+1) + "\n"} {
		_, err := readChatGPTToken(strings.NewReader(in))
		if err == nil {
			t.Errorf("read %d bytes without a proper line: accepted", len(in))
		}
		assertNoSecrets(t, err, withClaim)
	}

	for raw, ok := range map[string]bool{"https://r.example": true, "http://127.0.0.1:1": false, "http://r.example": false} {
		u, _ := url.Parse(raw)
		if err := checkChatGPTTokenRegistryURL(u); (err == nil) != ok {
			t.Errorf("%s: %v", raw, err)
		}
	}
	pr, pw, _ := os.Pipe()
	defer pr.Close()
	defer pw.Close()
	fi, _ := pr.Stat()
	if err := checkChatGPTTokenStdin(fi); err != nil {
		t.Errorf("pipe: %v", err)
	}
	fi, _ = os.Stat(filepath.Join("testdata", "codexauth", "chatgpt.json"))
	if err := checkChatGPTTokenStdin(fi); err == nil {
		t.Error("regular file accepted as token stdin")
	}
}

// heldTokenEndpoint is a token endpoint that keeps its first request waiting: arrived is
// closed once that request has come in, and unblock lets it be answered.
func heldTokenEndpoint(t *testing.T) (te *tokenEndpoint, arrived <-chan struct{}, unblock func()) {
	te = newTokenEndpoint(t)
	in, release := make(chan struct{}), make(chan struct{})
	unblock = sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // before the server's Close, which waits for the handler
	te.gate = func(_ *http.Request, n int32) {
		if n == 1 {
			close(in)
			<-release
		}
	}
	return te, in, unblock
}

// testCodexLogin writes an auth.json for acct-1 whose access token expires at exp, refresh
// token rt-old, and loads it with client (nil: the default).
func testCodexLogin(t *testing.T, exp time.Time, client *http.Client) (home string, l *codexLogin) {
	t.Helper()
	home = t.TempDir()
	writeCodexAuth(t, home, chatGPTAuthDoc(chatGPTTestToken("acct-1", exp, nil), "rt-old", "acct-1"))
	l, err := loadCodexLogin(home, client, codexTestClock)
	if err != nil {
		t.Fatal(err)
	}
	return home, l
}

// TestCodexAuthRefreshOutlivesCaller: a caller that gives up while the token endpoint is
// answering must not lose the answer. The endpoint has used the refresh token up by then, so
// the new tokens have to reach auth.json, and the next caller must not present the old refresh
// token again (the real endpoint refuses it as refresh_token_reused, which ends the sign-in).
func TestCodexAuthRefreshOutlivesCaller(t *testing.T) {
	te, arrived, unblock := heldTokenEndpoint(t)
	home, l := testCodexLogin(t, codexTestNow.Add(-time.Minute), nil)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := l.headers(ctx)
		errc <- err
	}()
	<-arrived // the endpoint holds rt-old
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("headers with a cancelled context = %v, want context.Canceled", err)
	}
	unblock() // now the endpoint answers

	h, err := l.headers(context.Background())
	if err != nil {
		t.Fatalf("headers after a cancelled refresh: %v", err)
	}
	if seen := te.seenTokens(); len(seen) != 1 || seen[0] != "rt-old" {
		t.Fatalf("token endpoint saw refresh tokens %v, want rt-old once", seen)
	}
	tokens := readAuthJSON(t, home)["tokens"].(map[string]any)
	if tokens["refresh_token"] != "rt-new-1" || h.Get("Authorization") != "Bearer "+tokens["access_token"].(string) {
		t.Fatalf("auth.json refresh_token %v; Authorization %q, auth.json access_token %q", tokens["refresh_token"], h.Get("Authorization"), tokens["access_token"])
	}
}

// TestCodexAuthWaitForRefreshHonoursContext: while one refresh is under way, another caller's
// context still ends its wait. The refresh starts from tokens another process wrote, expired
// too: it presents their refresh token, not the one loaded at start.
func TestCodexAuthWaitForRefreshHonoursContext(t *testing.T) {
	te, arrived, unblock := heldTokenEndpoint(t)
	home, l := testCodexLogin(t, codexTestNow.Add(-time.Minute), nil)
	writeCodexAuth(t, home, chatGPTAuthDoc(chatGPTTestToken("acct-1", codexTestNow.Add(-time.Second), nil), "rt-other", "acct-1"))
	first := make(chan error, 1)
	go func() {
		_, err := l.headers(context.Background())
		first <- err
	}()
	<-arrived
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.headers(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("second caller with a cancelled context: %v, want context.Canceled", err)
	} else if authErrorPermanent(err) {
		t.Errorf("a caller's own deadline was classed as permanent: %v", err)
	}
	unblock()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if seen := te.seenTokens(); len(seen) != 1 || seen[0] != "rt-other" {
		t.Fatalf("token endpoint saw %v, want rt-other once", seen)
	}
}

// hangingTokenEndpoint is a token endpoint that answers only when the client gives up.
func hangingTokenEndpoint(t *testing.T) *tokenEndpoint {
	te := newTokenEndpoint(t)
	te.gate = func(r *http.Request, _ int32) { <-r.Context().Done() }
	return te
}

// checkRefreshTimedOut asserts err is a temporary refresh failure that says it timed out.
func checkRefreshTimedOut(t *testing.T, err error) {
	t.Helper()
	var re *codexRefreshError
	if !errors.As(err, &re) || re.Permanent() || !strings.Contains(err.Error(), "timed out") || strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("refresh without an answer: %v; want a temporary error saying it timed out", err)
	}
}

// TestCodexAuthRefreshTimeoutReported: no answer in time is a timeout, not "unreachable".
func TestCodexAuthRefreshTimeoutReported(t *testing.T) {
	hangingTokenEndpoint(t)
	_, l := testCodexLogin(t, codexTestNow.Add(-time.Minute), &http.Client{Timeout: 200 * time.Millisecond, Transport: &http.Transport{}})
	_, err := l.headers(context.Background())
	checkRefreshTimedOut(t, err)
}

// TestCodexAuthRefreshOwnTimeout: the exchange has its own limit, even for a caller without a
// deadline and a client without a timeout.
func TestCodexAuthRefreshOwnTimeout(t *testing.T) {
	hangingTokenEndpoint(t)
	_, l := testCodexLogin(t, codexTestNow.Add(-time.Minute), &http.Client{Transport: &http.Transport{}})
	if l.refreshTimeout != codexRefreshTimeout {
		t.Fatalf("refreshTimeout = %v, want %v", l.refreshTimeout, codexRefreshTimeout)
	}
	l.refreshTimeout = 200 * time.Millisecond
	_, err := l.headers(context.Background())
	checkRefreshTimedOut(t, err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v does not wrap context.DeadlineExceeded", err)
	}
}

// TestCodexAuthConcurrentUnauthorizedRefreshOnce: requests that were all refused the same
// access token share one refresh; a recovery for a token already replaced makes none.
func TestCodexAuthConcurrentUnauthorizedRefreshOnce(t *testing.T) {
	te := newTokenEndpoint(t)
	_, l := testCodexLogin(t, codexTestNow.Add(time.Hour), nil)
	rejected, err := l.headers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.onUnauthorized(context.Background(), rejected); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := te.requests.Load(); n != 1 {
		t.Fatalf("%d token requests for 8 recoveries from one rejected token, want 1", n)
	}
	h, _ := l.headers(context.Background())
	if h.Get("Authorization") == rejected.Get("Authorization") {
		t.Fatal("the rejected token is still in use")
	}
	// The new token is rejected at once in turn: a token just issued is not stale, and no
	// refresh is made (docs/remote.md §8) until codexRefreshMinInterval has passed.
	if err := l.onUnauthorized(context.Background(), h); !errors.Is(err, errCodexRefreshTooSoon) || te.requests.Load() != 1 {
		t.Fatalf("recovery from the new token at once: %v, %d token requests; want errCodexRefreshTooSoon and 1", err, te.requests.Load())
	}
	if _, err := l.headers(context.Background()); err != nil {
		t.Fatalf("headers after a refused recovery: %v", err)
	}
	ageLastExchange(l)
	if err := l.onUnauthorized(context.Background(), h); err != nil || te.requests.Load() != 2 {
		t.Fatalf("recovery from the new token after the interval: %v, %d token requests; want 2", err, te.requests.Load())
	}
}

// ageLastExchange makes the last token exchange codexRefreshMinInterval old, as if that much
// time had passed.
func ageLastExchange(l *codexLogin) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastExchange = l.lastExchange.Add(-l.minInterval)
}

// TestCodexAuthConcurrent401sThroughRegistry: eight registry requests refused together with
// the same token make one refresh between them, and each is sent again with the new token.
func TestCodexAuthConcurrent401sThroughRegistry(t *testing.T) {
	const n = 8
	te := newTokenEndpoint(t)
	old := chatGPTTestToken("acct-1", time.Now().Add(time.Hour), nil)
	home := t.TempDir()
	writeCodexAuth(t, home, chatGPTAuthDoc(old, "rt-old", "acct-1"))

	var arrivals atomic.Int32
	all := make(chan struct{})
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer "+old {
			if arrivals.Add(1) == n {
				close(all)
			}
			select { // refuse none until all n carry the old token
			case <-all:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		io.WriteString(w, `{"valid":true}`)
	}))
	t.Cleanup(reg.Close)

	log := discardLogger()
	cfg := testConfigEnv(t, reg.URL, envOf("CODEX_HOME", home))
	rc, err := cfg.startCredentials(context.Background(), strings.NewReader(""), log)
	if err != nil {
		t.Fatal(err)
	}
	c := newRegistryClient(cfg, rc, log)
	defer c.close()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _, err := c.post(context.Background(), "validate", struct{}{}, http.Header{})
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("validate after a 401: %v", err)
			}
		}()
	}
	wg.Wait()
	if got := te.requests.Load(); got != 1 {
		t.Fatalf("%d token requests for %d concurrent 401s of one token, want 1", got, n)
	}
}

// TestCodexAuthGoneCallerStartsNoRefresh: a caller whose context has already ended never starts
// a token exchange, even when its turn and the file lock are free at once.
func TestCodexAuthGoneCallerStartsNoRefresh(t *testing.T) {
	te := newTokenEndpoint(t)
	_, l := testCodexLogin(t, codexTestNow.Add(-time.Minute), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 40 {
		if _, err := l.headers(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("headers with a cancelled context = %v, want context.Canceled", err)
		}
	}
	if !l.finish(time.Minute) { // an exchange started anyway would be under way
		t.Fatal("a refresh never finished")
	}
	if seen := te.seenTokens(); len(seen) != 0 {
		t.Fatalf("cancelled callers started %d token exchanges", len(seen))
	}
}

// TestCodexAuthFinishWaitsForARefresh: finish, which remote mode calls before it exits, returns
// only once a refresh under way has stored its tokens.
func TestCodexAuthFinishWaitsForARefresh(t *testing.T) {
	_, arrived, unblock := heldTokenEndpoint(t)
	home, l := testCodexLogin(t, codexTestNow.Add(-time.Minute), nil)
	ctx, cancel := context.WithCancel(context.Background())
	go l.headers(ctx)
	<-arrived
	cancel()
	if l.finish(0) {
		t.Fatal("finish reported no refresh while the token endpoint held one")
	}
	unblock()
	if !l.finish(time.Minute) {
		t.Fatal("finish timed out")
	}
	if tokens := readAuthJSON(t, home)["tokens"].(map[string]any); tokens["refresh_token"] != "rt-new-1" {
		t.Fatalf("after finish, auth.json holds refresh token %v", tokens["refresh_token"])
	}
}

// TestCodexAuthUnsavedTokensAreNotReplacedByTheFile: when the refreshed tokens cannot be
// written, auth.json still holds the used-up ones. Those are not another process's tokens:
// the next recovery must refresh with the new refresh token in memory, not take the file's and
// present a used refresh token (which ends the sign-in).
func TestCodexAuthUnsavedTokensAreNotReplacedByTheFile(t *testing.T) {
	te := newTokenEndpoint(t)
	home, l := testCodexLogin(t, codexTestNow.Add(-time.Minute), nil)
	testHookTempCreated = func(f *os.File) { f.Close() } // the save fails
	_, err := l.headers(context.Background())
	testHookTempCreated = nil
	if err == nil || !strings.Contains(err.Error(), "saving refreshed Codex tokens") {
		t.Fatalf("headers with a failing save: %v", err)
	}
	if tokens := readAuthJSON(t, home)["tokens"].(map[string]any); tokens["refresh_token"] != "rt-old" {
		t.Fatalf("auth.json after a failed save holds %v", tokens["refresh_token"])
	}
	h, err := l.headers(context.Background())
	if err != nil {
		t.Fatalf("headers after the failed save: %v", err)
	}
	ageLastExchange(l)
	if err := l.onUnauthorized(context.Background(), h); err != nil {
		t.Fatalf("recovery from a 401: %v", err)
	}
	if seen := te.seenTokens(); !slices.Equal(seen, []string{"rt-old", "rt-new-1"}) {
		t.Fatalf("token endpoint saw refresh tokens %v, want rt-old then rt-new-1", seen)
	}
	if tokens := readAuthJSON(t, home)["tokens"].(map[string]any); tokens["refresh_token"] != "rt-new-2" {
		t.Fatalf("auth.json holds refresh token %v, want rt-new-2", tokens["refresh_token"])
	}
}
