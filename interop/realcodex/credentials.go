package main

// The credentials check: for each registry credential mode (docs/remote.md §8, §10) the
// reference executor and ours start with identical inputs against one loopback registry that
// records every request (method, path, headers, body). Each runs until the registry has seen
// its rendezvous (or direct) websocket upgrade, and then the recorded requests are masked
// (clock, randomness, version) and compared kind by kind. In every Noise mode each executor
// then also gets a real harness (`codex app-server`), whose handshake through the rendezvous
// makes the executor send validate; the handshake must complete and the validate request is
// compared too (credvalidate.go). The direct mode has no Noise and so no validate.

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

const (
	credEnvID     = "env-cred-1"
	credAccountID = "acct-realcodex-1"
	credAgentID   = "agent-runtime-realcodex"
	credTaskID    = "task-realcodex-1"
)

// recordedRequest is one request as the registry received it.
type recordedRequest struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// credHarnessToken is the bearer the harness sends to /connect in the validate step.
const credHarnessToken = "realcodex-cred-harness-token"

// credRegistry answers register (noise and direct), the websocket upgrades, the OAuth token
// endpoint and the Agent Identity JWKS and task endpoints, and records every request an
// executor sends. For the validate step it also answers the harness's /connect, forwards
// frames between the harness and the executor (noiseRelay), and answers /validate; the
// harness's own requests are kept apart from the executor's.
type credRegistry struct {
	log   *eventLog
	url   string // http(s)://127.0.0.1:P
	ws    string // ws(s)://127.0.0.1:P
	ln    net.Listener
	srv   *http.Server
	noise *noiseRelay
	jwks  []byte // answer of …/agent-identities/jwks
	// refreshed is the token answer of /oauth/token.
	refreshed map[string]string

	mu       sync.Mutex
	rec      credRecord
	upgraded chan struct{} // closed and replaced on each executor upgrade
}

// credRecord is what the registry saw of one executor and its harness.
type credRecord struct {
	reqs             []recordedRequest // the executor's requests
	harness          []string          // the harness's requests, "METHOD path status"
	upgrades         int               // executor websocket upgrades
	validateProblems []string          // what noiseRelay.validateProblems found in the executor's validates
}

func startCredRegistry(log *eventLog, cert *tls.Certificate) (*credRegistry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("credentials registry listen: %w", err)
	}
	r := &credRegistry{log: log, ln: ln, upgraded: make(chan struct{})}
	r.url, r.ws = "http://"+ln.Addr().String(), "ws://"+ln.Addr().String()
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	if cert != nil {
		r.url, r.ws = "https://"+ln.Addr().String(), "wss://"+ln.Addr().String()
		r.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}}
	}
	// A fixed authorization per connect, numbered from 1 for each executor, so that the
	// validate bodies of the reference and ours can be compared as they are.
	r.noise = newNoiseRelay(log, credEnvID, r.ws, func(n int) string { return fmt.Sprintf("hka-realcodex-%d", n) })
	if cert != nil {
		go r.srv.ServeTLS(ln, "", "")
	} else {
		go r.srv.Serve(ln)
	}
	return r, nil
}

func (r *credRegistry) Close() {
	r.srv.Close()
	r.noise.Close()
}

// Take returns what was recorded so far and starts a new record; the Noise state (the key
// registered, the authorizations issued) starts afresh too.
func (r *credRegistry) Take() credRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.rec
	r.rec = credRecord{}
	r.noise.forget()
	return out
}

// WaitUpgrade waits until an executor websocket upgrade has been recorded since the last Take.
func (r *credRegistry) WaitUpgrade(d time.Duration, exited func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		n, ch := r.rec.upgrades, r.upgraded
		r.mu.Unlock()
		if n > 0 {
			return true
		}
		if exited() {
			return false
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}

// fromHarness reports whether a request is the harness's rather than the executor's.
func fromHarness(req *http.Request) bool {
	switch {
	case req.Method == "POST" && req.URL.Path == "/cloud/environment/"+credEnvID+"/connect":
		return true
	case req.Method == "GET" && req.URL.Path == "/relay":
		return req.URL.Query().Get("role") == "harness"
	}
	return false
}

func (r *credRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if fromHarness(req) {
		r.log.Printf("cred-registry: harness %s %s body=%s", req.Method, req.URL.RequestURI(), clip(string(body), 200))
		r.serveHarness(w, req, body)
		return
	}
	r.mu.Lock()
	r.rec.reqs = append(r.rec.reqs, recordedRequest{Method: req.Method, Path: req.URL.RequestURI(), Header: req.Header.Clone(), Body: body})
	r.mu.Unlock()
	r.log.Printf("cred-registry: %s %s body=%s", req.Method, req.URL.RequestURI(), clip(string(body), 200))
	p := req.URL.Path
	base := "/cloud/environment/" + credEnvID
	switch {
	case req.Method == "POST" && p == base+"/register":
		var v struct {
			ExecutorPublicKey json.RawMessage `json:"executor_public_key"`
		}
		if json.Unmarshal(body, &v) == nil && len(v.ExecutorPublicKey) > 0 {
			r.noise.setExecutorKey(v.ExecutorPublicKey)
		}
		writeJSON(w, 200, map[string]string{
			"environment_id": credEnvID, "url": r.ws + "/relay?role=environment",
			"security_profile": securityProfile, "executor_registration_id": registrationID,
		})
	case req.Method == "POST" && p == base+"/validate":
		problems := r.noise.validateProblems(req.Header, body)
		if len(problems) > 0 {
			r.log.Printf("cred-registry: validate problems: %v", problems)
			r.mu.Lock()
			r.rec.validateProblems = append(r.rec.validateProblems, problems...)
			r.mu.Unlock()
		}
		writeJSON(w, 200, map[string]bool{"valid": len(problems) == 0})
	case req.Method == "POST" && p == base+"/direct/register":
		writeJSON(w, 200, map[string]string{
			"environment_id": credEnvID, "transport": "direct_jsonrpc_v1",
			"registration_id": "dreg-1", "url": r.ws + "/direct",
		})
	case req.Method == "GET" && p == "/relay":
		r.noise.acceptRelay(w, req, func(string, error) { r.countUpgrade() })
	case req.Method == "GET" && p == "/direct":
		c, err := upgrader.Upgrade(w, req, nil)
		r.countUpgrade()
		if err != nil {
			return
		}
		defer c.Close()
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	case req.Method == "POST" && p == "/oauth/token":
		writeJSON(w, 200, r.refreshed)
	case req.Method == "GET" && strings.HasSuffix(p, "/agent-identities/jwks"):
		w.Header().Set("Content-Type", "application/json")
		w.Write(r.jwks)
	case req.Method == "POST" && strings.HasSuffix(p, "/task/register"):
		writeJSON(w, 200, map[string]string{"task_id": credTaskID})
	default:
		writeJSON(w, 404, map[string]any{"error": map[string]string{"code": "not_found", "message": "no such endpoint"}})
	}
}

// countUpgrade records an executor websocket upgrade and wakes WaitUpgrade.
func (r *credRegistry) countUpgrade() {
	r.mu.Lock()
	r.rec.upgrades++
	close(r.upgraded)
	r.upgraded = make(chan struct{})
	r.mu.Unlock()
}

// serveHarness answers the harness's /connect (with its bearer checked) and its rendezvous
// socket, and notes each request in the record.
func (r *credRegistry) serveHarness(w http.ResponseWriter, req *http.Request, body []byte) {
	note := func(status string) {
		r.mu.Lock()
		r.rec.harness = append(r.rec.harness, req.Method+" "+req.URL.RequestURI()+" "+status)
		r.mu.Unlock()
	}
	if req.Method == "GET" {
		r.noise.acceptRelay(w, req, func(_ string, err error) {
			if err != nil {
				note("upgrade failed: " + err.Error())
			} else {
				note("upgraded")
			}
		})
		return
	}
	var v struct {
		HarnessPublicKey json.RawMessage `json:"harness_public_key"`
	}
	if json.Unmarshal(body, &v) != nil || len(v.HarnessPublicKey) == 0 || !bearerIs(req, credHarnessToken) {
		note("401")
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]string{"code": "unauthorized", "message": "bad connect"}})
		return
	}
	bundle, ok := r.noise.connectBundle(v.HarnessPublicKey)
	if !ok {
		note("404 (no executor registered)")
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]string{"code": "not_registered", "message": "no executor"}})
		return
	}
	note("200")
	writeJSON(w, http.StatusOK, bundle)
}

// credMode is one credential mode: how both executors are started.
type credMode struct {
	name   string
	tls    bool
	direct bool
	// setup writes the CODEX_HOME files and returns the environment, extra flags and stdin.
	setup func(home string, reg *credRegistry) (env, args []string, stdin string, err error)
	// authJSON: also compare $CODEX_HOME/auth.json after the run.
	authJSON bool
}

// fakeJWT is an unsigned-looking JWT with claims (the signature is not checked for ChatGPT
// tokens: Codex reads their claims only).
func fakeJWT(claims map[string]any) string {
	h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT","kid":"fake"}`))
	p, _ := json.Marshal(claims)
	return h + "." + base64.RawURLEncoding.EncodeToString(p) + "." + base64.RawURLEncoding.EncodeToString([]byte("not-a-signature"))
}

func chatGPTClaims(exp time.Time) map[string]any {
	return map[string]any{
		"exp": exp.Unix(), "iat": exp.Add(-3 * time.Hour).Unix(), "sub": "user-realcodex",
		"email": "realcodex@example.com",
		"https://api.openai.com/auth": map[string]any{
			"chatgpt_account_id": credAccountID, "chatgpt_plan_type": "plus", "chatgpt_user_id": "user-realcodex",
		},
		"https://api.openai.com/profile": map[string]any{"email": "realcodex@example.com"},
	}
}

func writeAuthJSON(home string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(home, "auth.json"), b, 0o600)
}

func chatGPTAuth(now time.Time, access string) map[string]any {
	return map[string]any{
		"auth_mode":      "chatgpt",
		"OPENAI_API_KEY": nil,
		"tokens": map[string]any{
			"id_token":      fakeJWT(chatGPTClaims(now.Add(time.Hour))),
			"access_token":  access,
			"refresh_token": "rt-realcodex-old",
			"account_id":    credAccountID,
		},
		"last_refresh": now.Add(-time.Hour).UTC().Format(time.RFC3339Nano),
	}
}

// agentIdentityFixture is a test RS256 key, its JWKS and a CODEX_ACCESS_TOKEN signed with it.
func agentIdentityFixture(now time.Time) (jwks []byte, token string, err error) {
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, "", err
	}
	_, ek, _ := ed25519.GenerateKey(rand.Reader)
	pkcs8, err := x509.MarshalPKCS8PrivateKey(ek)
	if err != nil {
		return nil, "", err
	}
	jwks, _ = json.Marshal(map[string]any{"keys": []any{map[string]any{
		"kty": "RSA", "kid": "realcodex-k1", "alg": "RS256", "use": "sig",
		"n": base64.RawURLEncoding.EncodeToString(rk.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(rk.E)).Bytes()),
	}}})
	h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT","kid":"realcodex-k1"}`))
	p, _ := json.Marshal(map[string]any{
		"iss": "https://chatgpt.com/codex-backend/agent-identity", "aud": "codex-app-server",
		"iat": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix(),
		"agent_runtime_id": credAgentID, "agent_private_key": base64.StdEncoding.EncodeToString(pkcs8),
		"account_id": credAccountID, "chatgpt_user_id": "user-realcodex", "email": "realcodex@example.com",
		"plan_type": "plus", "chatgpt_account_is_fedramp": false,
	})
	signed := h + "." + base64.RawURLEncoding.EncodeToString(p)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, rk, crypto.SHA256, sum[:])
	if err != nil {
		return nil, "", err
	}
	return jwks, signed + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// testCA writes a CA certificate to caPath and returns a server certificate it signed for
// 127.0.0.1 and localhost.
func testCA(caPath string) (*tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "realcodex test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	if err := os.WriteFile(caPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// credModes returns the modes; every fixture is made once, from now, so that both executors
// get byte-identical inputs.
func credModes(now time.Time) ([]credMode, error) {
	jwks, agentToken, err := agentIdentityFixture(now)
	if err != nil {
		return nil, err
	}
	none := func(env ...string) func(string, *credRegistry) ([]string, []string, string, error) {
		return func(string, *credRegistry) ([]string, []string, string, error) { return env, nil, "", nil }
	}
	return []credMode{
		{name: "CODEX_API_KEY", setup: none("CODEX_API_KEY=sk-test-realcodex-env-0123456789")},
		{name: "auth.json api key", setup: func(home string, _ *credRegistry) ([]string, []string, string, error) {
			return nil, nil, "", writeAuthJSON(home, map[string]any{"auth_mode": "apikey", "OPENAI_API_KEY": "sk-test-realcodex-authjson"})
		}},
		{name: "auth.json chatgpt", authJSON: true, setup: func(home string, _ *credRegistry) ([]string, []string, string, error) {
			return nil, nil, "", writeAuthJSON(home, chatGPTAuth(now, fakeJWT(chatGPTClaims(now.Add(time.Hour)))))
		}},
		{name: "auth.json chatgpt expired (refresh)", authJSON: true, setup: func(home string, reg *credRegistry) ([]string, []string, string, error) {
			reg.refreshed = map[string]string{
				"id_token":      fakeJWT(chatGPTClaims(now.Add(2 * time.Hour))),
				"access_token":  fakeJWT(chatGPTClaims(now.Add(2 * time.Hour))),
				"refresh_token": "rt-realcodex-new",
			}
			return []string{"CODEX_REFRESH_TOKEN_URL_OVERRIDE=" + reg.url + "/oauth/token"}, nil, "",
				writeAuthJSON(home, chatGPTAuth(now, fakeJWT(chatGPTClaims(now.Add(-time.Hour)))))
		}},
		{name: "--chatgpt-token-stdin", tls: true, setup: func(string, *credRegistry) ([]string, []string, string, error) {
			return nil, []string{"--chatgpt-token-stdin", "--chatgpt-account-id", credAccountID}, fakeJWT(chatGPTClaims(now.Add(time.Hour))) + "\n", nil
		}},
		{name: "--use-agent-identity-auth", setup: func(_ string, reg *credRegistry) ([]string, []string, string, error) {
			reg.jwks = jwks
			return []string{"CODEX_ACCESS_TOKEN=" + agentToken,
				"CODEX_AGENT_IDENTITY_JWKS_BASE_URL=" + reg.url + "/backend-api",
				"CODEX_AGENT_IDENTITY_AUTHAPI_BASE_URL=" + reg.url + "/api/accounts",
			}, []string{"--use-agent-identity-auth"}, "", nil
		}},
		{name: "direct --aws-sigv4", direct: true, setup: none(
			"AWS_ACCESS_KEY_ID=AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
			"AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true")},
	}, nil
}

// credRun is what one executor left behind.
type credRun struct {
	credRecord
	upgraded  bool
	handshake credHandshake // Noise modes: the validate step's harness handshake
	authJSON  []byte
	authMode  os.FileMode
	log       string
}

func runCredentials(ctx context.Context, cfg config, log *eventLog, m modeRun) []stepResult {
	var out []stepResult
	modes, err := credModes(time.Now().Truncate(time.Second))
	if err != nil {
		return append(out, stepResult{Name: "fixtures", Detail: err.Error()})
	}
	for i, mode := range modes {
		if ctx.Err() != nil {
			break
		}
		out = append(out, runCredMode(ctx, cfg, log, filepath.Join(m.dir, "credentials", fmt.Sprintf("%d", i+1)), mode)...)
	}
	return out
}

// runCredMode runs the reference and then ours in one credential mode against one recording
// registry. In a Noise mode each executor, once it holds its rendezvous socket, gets a real
// harness whose handshake makes it send validate (credvalidate.go).
func runCredMode(ctx context.Context, cfg config, log *eventLog, dir string, mode credMode) []stepResult {
	name := mode.name
	fail := func(err error) []stepResult { return []stepResult{{Name: name, Detail: err.Error()}} }
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(err)
	}
	log.Printf("==== credentials: %s", name)
	var cert *tls.Certificate
	caPath := filepath.Join(dir, "ca.pem")
	if mode.tls {
		var err error
		if cert, err = testCA(caPath); err != nil {
			return fail(err)
		}
	}
	reg, err := startCredRegistry(log, cert)
	if err != nil {
		return fail(err)
	}
	defer reg.Close()
	runs := map[string]*credRun{}
	for _, target := range []string{"ref", "ours"} {
		tdir := filepath.Join(dir, target)
		home := filepath.Join(tdir, "codex-home")
		userHome := filepath.Join(tdir, "home")
		for _, d := range []string{home, userHome} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return fail(err)
			}
		}
		env, extra, stdin, err := mode.setup(home, reg)
		if err != nil {
			return fail(err)
		}
		env = append([]string{"CODEX_HOME=" + home, "HOME=" + userHome}, env...)
		if mode.tls {
			env = append(env, "SSL_CERT_FILE="+caPath, "CODEX_CA_CERTIFICATE="+caPath)
		}
		bin, args := execServerCommand(cfg, target)
		args = append(args, "--remote", reg.url, "--environment-id", credEnvID)
		if mode.direct {
			args = append(args, "--remote-transport", "direct", "--aws-sigv4")
		}
		args = append(args, extra...)
		if target == "ours" {
			args = append(args, "--log-level", "debug")
			if mode.tls {
				args = append(args, "--remote-ca", caPath)
			}
		} else {
			env = append(env, "RUST_LOG=codex_exec_server=debug,info")
		}
		logPath := filepath.Join(tdir, "executor.log")
		reg.Take()
		exe, _, err := startChild("cred/"+target, bin, args, env, tdir, stdin, logPath, false)
		if err != nil {
			return fail(err)
		}
		cr := &credRun{upgraded: reg.WaitUpgrade(20*time.Second, exe.Exited)}
		if cr.upgraded && !mode.direct {
			harnessCA := ""
			if mode.tls {
				harnessCA = caPath
			}
			cr.handshake = handshakeThrough(ctx, cfg, log, tdir, "cred/"+target, reg, harnessCA)
		}
		time.Sleep(300 * time.Millisecond) // let a request racing the upgrade land
		exe.Stop()
		cr.credRecord = reg.Take()
		validates, _ := splitValidates(cr.reqs)
		for _, v := range validates {
			log.Printf("credentials %s: validate as compared: %s", target, strings.Join(maskRequest(v), " | "))
		}
		if b, err := os.ReadFile(logPath); err == nil {
			cr.log = string(b)
		}
		if fi, err := os.Stat(filepath.Join(home, "auth.json")); err == nil {
			cr.authMode = fi.Mode().Perm()
			cr.authJSON, _ = os.ReadFile(filepath.Join(home, "auth.json"))
		}
		runs[target] = cr
	}
	ref, ours := runs["ref"], runs["ours"]
	out := []stepResult{compareCredRuns(name, mode.direct, ref, ours)}
	if mode.direct {
		out = append(out, stepResult{Name: name + ": validate: not applicable (the direct transport has no Noise handshake, so an executor sends no validate)", Skip: true})
	} else {
		out = append(out, validateResults(name, ref, ours)...)
	}
	if mode.authJSON && ref.upgraded && ours.upgraded {
		a := stepResult{Name: name + ": auth.json afterwards is the reference's (fields, format, mode)"}
		d := compareAuthJSON(ref.authJSON, ref.authMode, ours.authJSON, ours.authMode)
		a.OK, a.Detail = d == "", d
		out = append(out, a)
	}
	return out
}

// compareCredRuns is a mode's first step: the executors' requests other than validate
// (which validateResults compares) are the reference's. In the direct mode every request is
// compared, so that a validate there shows as a difference.
func compareCredRuns(name string, direct bool, ref, ours *credRun) stepResult {
	refReqs, oursReqs := ref.reqs, ours.reqs
	if !direct {
		_, refReqs = splitValidates(refReqs)
		_, oursReqs = splitValidates(oursReqs)
	}
	r := stepResult{Name: name + ": auth-relevant requests are the reference's"}
	switch {
	case !ref.upgraded && !ours.upgraded:
		r.Skip = true
		r.Detail = "neither executor reached the websocket upgrade\nreference log: " + logTail(ref.log) + "\nours log: " + logTail(ours.log)
		if d := compareRecorded(refReqs, oursReqs); d != "" {
			r.Skip = false
			r.Detail += "\n" + d
		}
	case !ref.upgraded:
		r.Skip = true
		r.Detail = "the reference did not reach the websocket upgrade, ours did: " + logTail(ref.log)
		if len(refReqs) > 0 {
			r.Skip = false
			r.Detail += "\n" + compareRecorded(refReqs, oursReqs)
		}
	case !ours.upgraded:
		r.Detail = "ours did not reach the websocket upgrade: " + logTail(ours.log) + "\n" + compareRecorded(refReqs, oursReqs)
	default:
		d := compareRecorded(refReqs, oursReqs)
		r.OK, r.Detail = d == "", d
	}
	return r
}

func logTail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 600 {
		s = "…" + s[len(s)-600:]
	}
	return s
}

// Masking. Only the parts that differ by clock, randomness or version are replaced.
var (
	amzDatePattern    = regexp.MustCompile(`^\d{8}T\d{6}Z$`)
	sigV4CredPattern  = regexp.MustCompile(`(Credential=[^/,\s]+/)\d{8}/`)
	sigV4SigPattern   = regexp.MustCompile(`Signature=[0-9a-f]{64}`)
	versionPattern    = regexp.MustCompile(`\d+(\.\d+)+(-[0-9A-Za-z.]+)?`)
	lastRefreshRegexp = regexp.MustCompile(`("last_refresh"\s*:\s*)"[^"]*"`)
)

// maskHeader returns the header value with its clock- and randomness-dependent parts replaced.
func maskHeader(name, v string) string {
	switch http.CanonicalHeaderKey(name) {
	case "X-Amz-Date":
		if amzDatePattern.MatchString(v) {
			return "<amz-date>"
		}
	case "X-Request-Id":
		if requestIDPattern.MatchString(v) {
			return "req_<32 hex>"
		}
	case "Traceparent", "Tracestate":
		return "<trace>"
	case "Sec-Websocket-Key":
		return "<random>"
	case "X-Codex-Noise-Stream-Id":
		return maskStreamID(v)
	case "User-Agent":
		return versionPattern.ReplaceAllString(v, "<version>")
	case "Accept-Encoding":
		// 0.171 offers "zstd,gzip"; ours offers gzip alone, the one the standard library
		// decodes (docs/protocol.md §12). Either offers gzip.
		if v == "gzip" || v == "zstd,gzip" {
			return "<gzip offered>"
		}
	case "Host":
		if h, _, err := net.SplitHostPort(v); err == nil {
			return h + ":<port>"
		}
	case "Authorization":
		switch {
		case strings.HasPrefix(v, "AWS4-HMAC-SHA256 "):
			v = sigV4CredPattern.ReplaceAllString(v, "${1}<day>/")
			return sigV4SigPattern.ReplaceAllString(v, "Signature=<signature>")
		case strings.HasPrefix(v, "AgentAssertion "):
			return "AgentAssertion " + maskAssertion(strings.TrimPrefix(v, "AgentAssertion "))
		}
	}
	return v
}

// maskAssertion decodes an AgentAssertion envelope and masks its timestamp and signature.
func maskAssertion(s string) string {
	var raw []byte
	var err error
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.StdEncoding, base64.RawStdEncoding} {
		if raw, err = enc.DecodeString(s); err == nil {
			break
		}
	}
	if err != nil {
		return "<undecodable " + clip(s, 40) + ">"
	}
	var v map[string]any
	if json.Unmarshal(raw, &v) != nil {
		return "<not JSON " + clip(string(raw), 60) + ">"
	}
	return "base64(" + jsonText(maskJSON(v)) + ")"
}

// maskJSON masks Noise public keys (by decoded length), RFC 3339 timestamps and signatures.
func maskJSON(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			s, isStr := x.(string)
			switch {
			case isStr && (k == "x25519_public_key" || k == "mlkem768_public_key"):
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					out[k] = "<not std base64>"
				} else {
					out[k] = fmt.Sprintf("<base64 %d bytes>", len(b))
				}
			case isStr && k == "timestamp":
				if _, err := time.Parse(time.RFC3339, s); err == nil {
					out[k] = "<RFC 3339>"
				} else {
					out[k] = "<not RFC 3339: " + s + ">"
				}
			case isStr && k == "signature":
				out[k] = "<signature>"
			default:
				out[k] = maskJSON(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = maskJSON(x)
		}
		return out
	}
	return v
}

// maskRequest renders a request as lines: the request line, "Name: value" per header sorted,
// then the body (masked JSON, or the raw text).
func maskRequest(r recordedRequest) []string {
	lines := []string{r.Method + " " + r.Path}
	var hdr []string
	for k, vs := range r.Header {
		for _, v := range vs {
			hdr = append(hdr, http.CanonicalHeaderKey(k)+": "+maskHeader(k, v))
		}
	}
	sort.Strings(hdr)
	lines = append(lines, hdr...)
	if len(r.Body) > 0 {
		var v any
		if json.Unmarshal(r.Body, &v) == nil {
			lines = append(lines, "body "+jsonText(maskJSON(v)))
		} else {
			lines = append(lines, "body "+clip(string(r.Body), 300))
		}
	}
	return lines
}

// compareRecorded compares two executors' requests: the kinds (method and path) in order of
// first appearance, their counts, and each kind's first request after masking. It returns ""
// when they agree, else the differences.
func compareRecorded(ref, ours []recordedRequest) string {
	group := func(rs []recordedRequest) ([]string, map[string][]recordedRequest) {
		var order []string
		m := map[string][]recordedRequest{}
		for _, r := range rs {
			k := r.Method + " " + r.Path
			if _, ok := m[k]; !ok {
				order = append(order, k)
			}
			m[k] = append(m[k], r)
		}
		return order, m
	}
	ro, rm := group(ref)
	oo, om := group(ours)
	var diffs []string
	if strings.Join(ro, "\n") != strings.Join(oo, "\n") {
		diffs = append(diffs, fmt.Sprintf("request order: reference [%s], ours [%s]", strings.Join(ro, "; "), strings.Join(oo, "; ")))
	}
	for _, k := range unionKeys(rm, om) {
		a, b := rm[k], om[k]
		switch {
		case len(a) == 0:
			diffs = append(diffs, "only ours sends "+k+":\n  + "+strings.Join(maskRequest(b[0])[1:], "\n  + "))
			continue
		case len(b) == 0:
			diffs = append(diffs, "only the reference sends "+k+":\n  - "+strings.Join(maskRequest(a[0])[1:], "\n  - "))
			continue
		case len(a) != len(b):
			diffs = append(diffs, fmt.Sprintf("%s: reference sent %d, ours %d", k, len(a), len(b)))
		}
		if d := lineDiff(maskRequest(a[0]), maskRequest(b[0])); d != "" {
			diffs = append(diffs, k+" (- reference, + ours):\n"+d)
		}
	}
	return strings.Join(diffs, "\n")
}

// lineDiff lists the lines only in a ("  - ") and only in b ("  + "), as multisets.
func lineDiff(a, b []string) string {
	count := map[string]int{}
	for _, l := range b {
		count[l]++
	}
	var out []string
	for _, l := range a {
		if count[l] > 0 {
			count[l]--
		} else {
			out = append(out, "  - "+l)
		}
	}
	countA := map[string]int{}
	for _, l := range a {
		countA[l]++
	}
	for _, l := range b {
		if countA[l] > 0 {
			countA[l]--
		} else {
			out = append(out, "  + "+l)
		}
	}
	return strings.Join(out, "\n")
}

// compareAuthJSON compares two auth.json files byte for byte after masking last_refresh, and
// their permissions.
func compareAuthJSON(ref []byte, refMode os.FileMode, ours []byte, oursMode os.FileMode) string {
	var diffs []string
	if refMode != oursMode {
		diffs = append(diffs, fmt.Sprintf("auth.json mode: reference %v, ours %v", refMode, oursMode))
	}
	mask := func(b []byte) []string {
		s := lastRefreshRegexp.ReplaceAllString(string(b), `$1"<time>"`)
		return strings.Split(s, "\n")
	}
	if d := lineDiff(mask(ref), mask(ours)); d != "" {
		diffs = append(diffs, "auth.json (- reference, + ours):\n"+d)
	}
	return strings.Join(diffs, "\n")
}
