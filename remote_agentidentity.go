package main

// Agent Identity auth for remote registration (--use-agent-identity-auth): a container is given
// an Agent Identity JWT in CODEX_ACCESS_TOKEN, and each registry request carries an
// AgentAssertion signed with the Ed25519 key inside it, as Codex's own client does it
// (docs/remote.md §8).
//
// The JWT, RS256, verified against the JWKS the ChatGPT backend publishes:
//
//	header   kid                         selects the JWKS key (kty RSA, n, e)
//	payload  iss                         "https://chatgpt.com/codex-backend/agent-identity"
//	         aud                         "codex-app-server"
//	         iat, exp                    integers; exp is checked with 60 s of leeway
//	         agent_runtime_id            string, names the agent
//	         agent_private_key           string, base64 of a PKCS#8 Ed25519 private key
//	         account_id                  string, sent as ChatGPT-Account-ID
//	         chatgpt_user_id, email      strings
//	         plan_type                   string
//	         chatgpt_account_is_fedramp  bool, adds X-OpenAI-Fedramp: true
//
// Start-up, once per process:
//
//	GET  {jwks base}/…/agent-identities/jwks   base: $CODEX_AGENT_IDENTITY_JWKS_BASE_URL or the
//	                                           ChatGPT base URL (https://chatgpt.com/backend-api)
//	POST {authapi}/v1/agent/{agent_runtime_id}/task/register
//	     authapi: $CODEX_AGENT_IDENTITY_AUTHAPI_BASE_URL or https://auth.openai.com/api/accounts
//	     body {"timestamp":T,"signature":base64(Ed25519(agent_runtime_id ":" T))}, T = RFC 3339 UTC seconds
//	     answer {"task_id"|"taskId": id} or {"encrypted_task_id"|"encryptedTaskId": base64 sealed box
//	     for the X25519 key derived from the Ed25519 key}
//
// Every register and validate request then carries
//
//	Authorization: AgentAssertion base64url({"agent_runtime_id","signature","task_id","timestamp"})
//	               signature = base64(Ed25519(agent_runtime_id ":" task_id ":" timestamp)), fresh each time
//	ChatGPT-Account-ID: <account_id>
//	X-OpenAI-Fedramp: true                      when chatgpt_account_is_fedramp

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/crypto/curve25519"
)

// Agent Identity constants: the values Codex uses (measured on the 0.169 binary; docs/remote.md §8).
const (
	codexAccessTokenEnv               = "CODEX_ACCESS_TOKEN"
	agentIdentityJWKSBaseEnv          = "CODEX_AGENT_IDENTITY_JWKS_BASE_URL"
	agentIdentityAuthAPIBaseEnv       = "CODEX_AGENT_IDENTITY_AUTHAPI_BASE_URL"
	agentIdentityDefaultChatGPTBase   = "https://chatgpt.com/backend-api"
	agentIdentityDefaultAuthAPIBase   = "https://auth.openai.com/api/accounts"
	agentIdentityJWTIssuer            = "https://chatgpt.com/codex-backend/agent-identity"
	agentIdentityJWTAudience          = "codex-app-server"
	agentIdentityJWTLeeway            = 60 * time.Second
	agentIdentityJWKSTimeout          = 10 * time.Second
	agentTaskRegistrationTimeout      = 30 * time.Second
	agentTaskRegistrationAttempts     = 3
	agentTaskRegistrationRetryBackoff = time.Second
	agentAssertionScheme              = "AgentAssertion"
)

// agentIdentityOptions are the inputs besides the JWT; zero values take the defaults.
type agentIdentityOptions struct {
	client         *http.Client                               // nil: http.DefaultClient (with per-call timeouts)
	chatGPTBaseURL string                                     // Codex's chatgpt_base_url; "": the default
	lookupEnv      func(string) (string, bool)                // nil: no environment overrides
	now            func() time.Time                           // nil: time.Now
	sleep          func(context.Context, time.Duration) error // nil: sleepCtx
}

// agentIdentityAuth signs an AgentAssertion for every request. It holds the private key from
// the JWT and is safe for concurrent use: all fields are read-only after construction.
type agentIdentityAuth struct {
	runtimeID string
	taskID    string
	accountID string
	fedramp   bool
	key       ed25519.PrivateKey
	now       func() time.Time
}

// agentIdentityClaims is the payload of an Agent Identity JWT.
type agentIdentityClaims struct {
	Iss             string `json:"iss"`
	Aud             string `json:"aud"`
	Iat             int64  `json:"iat"`
	Exp             int64  `json:"exp"`
	AgentRuntimeID  string `json:"agent_runtime_id"`
	AgentPrivateKey string `json:"agent_private_key"`
	AccountID       string `json:"account_id"`
	ChatGPTUserID   string `json:"chatgpt_user_id"`
	Email           string `json:"email"`
	PlanType        string `json:"plan_type"`
	Fedramp         bool   `json:"chatgpt_account_is_fedramp"`
}

// readCodexAccessToken returns CODEX_ACCESS_TOKEN, trimmed, which --use-agent-identity-auth
// requires.
func readCodexAccessToken(lookupEnv func(string) (string, bool)) (string, error) {
	v, _ := lookupEnv(codexAccessTokenEnv)
	if v = strings.TrimSpace(v); v == "" {
		return "", errors.New("--use-agent-identity-auth needs the Agent Identity JWT in CODEX_ACCESS_TOKEN")
	}
	return v, nil
}

// newAgentIdentityAuth verifies the Agent Identity JWT against the backend's JWKS and registers
// the Agent task whose id every assertion names, as 0.169 does before it registers the
// environment. Errors never contain the JWT or the key.
func newAgentIdentityAuth(ctx context.Context, jwt string, opts agentIdentityOptions) (*agentIdentityAuth, error) {
	if opts.client == nil {
		opts.client = http.DefaultClient
	}
	if opts.now == nil {
		opts.now = time.Now
	}
	if opts.sleep == nil {
		opts.sleep = sleepCtx
	}
	env := func(name string) string {
		if opts.lookupEnv == nil {
			return ""
		}
		v, _ := opts.lookupEnv(name)
		return strings.TrimRight(strings.TrimSpace(v), "/")
	}
	chatGPTBase := strings.TrimRight(opts.chatGPTBaseURL, "/")
	if chatGPTBase == "" {
		chatGPTBase = agentIdentityDefaultChatGPTBase
	}
	jwksBase := env(agentIdentityJWKSBaseEnv)
	if jwksBase == "" {
		jwksBase = chatGPTBase
	}
	authAPIBase := env(agentIdentityAuthAPIBaseEnv)
	if authAPIBase == "" {
		authAPIBase = agentIdentityDefaultAuthAPIBase
	}

	header, claims, signed, sig, err := splitAgentIdentityJWT(jwt)
	if err != nil {
		return nil, err
	}
	jwks, err := fetchAgentIdentityJWKS(ctx, opts.client, agentIdentityJWKSURL(jwksBase))
	if err != nil {
		return nil, err
	}
	if err := verifyAgentIdentityJWT(header, claims, signed, sig, jwks, opts.now()); err != nil {
		return nil, err
	}
	key, err := parseAgentIdentityKey(claims.AgentPrivateKey)
	if err != nil {
		return nil, err
	}
	a := &agentIdentityAuth{
		runtimeID: claims.AgentRuntimeID,
		accountID: claims.AccountID,
		fedramp:   claims.Fedramp,
		key:       key,
		now:       opts.now,
	}
	if a.taskID, err = a.registerTask(ctx, opts, authAPIBase); err != nil {
		return nil, err
	}
	return a, nil
}

// splitAgentIdentityJWT decodes the three parts of the JWT without trusting them yet.
func splitAgentIdentityJWT(jwt string) (header map[string]json.RawMessage, claims *agentIdentityClaims, signed, sig []byte, err error) {
	bad := func(what string) error {
		return fmt.Errorf("CODEX_ACCESS_TOKEN is not a valid Agent Identity JWT: %s", what)
	}
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return nil, nil, nil, nil, bad("not three dot-separated parts")
	}
	if header, err = decodeJWTObject(parts[0]); err != nil {
		return nil, nil, nil, nil, bad("bad header")
	}
	payload, err := decodeJWTSegment(parts[1])
	if err != nil {
		return nil, nil, nil, nil, bad("payload is not base64url")
	}
	members, err := decodeJWTObject(parts[1])
	if err != nil {
		return nil, nil, nil, nil, bad("payload is not a JSON object")
	}
	for _, name := range []string{"iss", "aud", "iat", "exp", "agent_runtime_id", "agent_private_key",
		"account_id", "chatgpt_user_id", "email", "plan_type", "chatgpt_account_is_fedramp"} {
		if jwtIsNull(members[name]) {
			return nil, nil, nil, nil, bad("claim " + name + " is missing")
		}
	}
	claims = new(agentIdentityClaims)
	if json.Unmarshal(payload, claims) != nil {
		return nil, nil, nil, nil, bad("a claim has the wrong type")
	}
	if sig, err = decodeJWTSegment(parts[2]); err != nil {
		return nil, nil, nil, nil, bad("signature is not base64url")
	}
	return header, claims, []byte(parts[0] + "." + parts[1]), sig, nil
}

// agentIdentityJWKSURL places the JWKS under a ChatGPT base URL the way Codex does for its
// three styles of base.
func agentIdentityJWKSURL(base string) string {
	switch {
	case strings.Contains(base, "/backend-api"):
		return base + "/wham/agent-identities/jwks"
	case strings.Contains(base, "/api/codex"):
		return base + "/agent-identities/jwks"
	}
	return base + "/api/codex/agent-identities/jwks"
}

// agentIdentityJWK is one RSA key of the JWKS.
type agentIdentityJWK struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	N   string `json:"n"`
	E   string `json:"e"`
}

func fetchAgentIdentityJWKS(ctx context.Context, client *http.Client, jwksURL string) ([]agentIdentityJWK, error) {
	ctx, cancel := context.WithTimeout(ctx, agentIdentityJWKSTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, jwksURL, nil)
	if err != nil {
		return nil, fmt.Errorf("Agent Identity JWKS URL: %w", redactURLError(err))
	}
	setCodexClientHeaders(req)
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching the Agent Identity JWKS: %w", redactURLError(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, registryMaxResponse))
	if err != nil {
		return nil, fmt.Errorf("fetching the Agent Identity JWKS: %w", redactURLError(err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("fetching the Agent Identity JWKS: HTTP %d", resp.StatusCode)
	}
	var set struct {
		Keys []agentIdentityJWK `json:"keys"`
	}
	if json.Unmarshal(data, &set) != nil {
		return nil, errors.New("the Agent Identity JWKS is not a JSON key set")
	}
	return set.Keys, nil
}

// verifyAgentIdentityJWT checks the RS256 signature with the JWKS key named by kid, then the
// issuer, audience and expiry, as Codex's jsonwebtoken validation does.
func verifyAgentIdentityJWT(header map[string]json.RawMessage, claims *agentIdentityClaims, signed, sig []byte, jwks []agentIdentityJWK, now time.Time) error {
	if alg, _ := jwtString(header["alg"]); alg != "RS256" {
		return errors.New("Agent Identity JWT: algorithm is not RS256")
	}
	kid, ok := jwtString(header["kid"])
	if !ok || kid == "" {
		return errors.New("Agent Identity JWT: header has no kid")
	}
	var pub *rsa.PublicKey
	for _, k := range jwks {
		if k.Kid == kid && k.Kty == "RSA" {
			n, errN := decodeJWTSegment(k.N)
			e, errE := decodeJWTSegment(k.E)
			if errN != nil || errE != nil || len(e) == 0 || len(e) > 4 {
				return fmt.Errorf("Agent Identity JWKS key %q is malformed", truncateForError(kid))
			}
			pub = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
			break
		}
	}
	if pub == nil {
		return fmt.Errorf("Agent Identity JWT: key %q is not in the JWKS", truncateForError(kid))
	}
	digest := sha256.Sum256(signed)
	if rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig) != nil {
		return errors.New("Agent Identity JWT: signature does not verify")
	}
	switch {
	case claims.Iss != agentIdentityJWTIssuer:
		return errors.New("Agent Identity JWT: wrong issuer")
	case claims.Aud != agentIdentityJWTAudience:
		return errors.New("Agent Identity JWT: wrong audience")
	case jwtAddSeconds(claims.Exp, int64(agentIdentityJWTLeeway/time.Second)) < now.Unix():
		return errors.New("Agent Identity JWT has expired; the launcher must issue a new CODEX_ACCESS_TOKEN")
	}
	return nil
}

// parseAgentIdentityKey decodes agent_private_key: standard base64 of PKCS#8 DER, Ed25519.
func parseAgentIdentityKey(b64 string) (ed25519.PrivateKey, error) {
	der, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("Agent Identity JWT: agent_private_key is not base64")
	}
	// One answer for a malformed key and a key of another type: neither can sign here.
	key, err := x509.ParsePKCS8PrivateKey(der)
	priv, ok := key.(ed25519.PrivateKey)
	if err != nil || !ok {
		return nil, errors.New("Agent Identity JWT: agent_private_key is not an Ed25519 key in PKCS#8")
	}
	return priv, nil
}

// agentTimestamp is the RFC 3339 form Codex signs: UTC, whole seconds, "Z".
func agentTimestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// registerTask asks for the task id this process acts under. 429, 5xx and network failures are
// retried a few times, as 0.169 retries agent identity registration.
func (a *agentIdentityAuth) registerTask(ctx context.Context, opts agentIdentityOptions, authAPIBase string) (string, error) {
	endpoint := authAPIBase + "/v1/agent/" + url.PathEscape(a.runtimeID) + "/task/register"
	var last error
	for attempt := 1; attempt <= agentTaskRegistrationAttempts; attempt++ {
		if attempt > 1 {
			if err := opts.sleep(ctx, time.Duration(attempt-1)*agentTaskRegistrationRetryBackoff); err != nil {
				return "", err
			}
		}
		taskID, retry, err := a.registerTaskOnce(ctx, opts.client, endpoint)
		if err == nil {
			return taskID, nil
		}
		last = err
		if !retry {
			break
		}
	}
	return "", last
}

func (a *agentIdentityAuth) registerTaskOnce(ctx context.Context, client *http.Client, endpoint string) (taskID string, retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, agentTaskRegistrationTimeout)
	defer cancel()
	ts := agentTimestamp(a.now())
	body, err := json.Marshal(struct {
		Timestamp string `json:"timestamp"`
		Signature string `json:"signature"`
	}{ts, base64.StdEncoding.EncodeToString(ed25519.Sign(a.key, []byte(a.runtimeID+":"+ts)))})
	if err != nil {
		return "", false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return "", false, fmt.Errorf("Agent task registration URL: %w", redactURLError(err))
	}
	req.Header.Set("Content-Type", "application/json")
	setCodexClientHeaders(req)
	resp, err := client.Do(req)
	if err != nil {
		return "", ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded),
			fmt.Errorf("registering the Agent task: %w", redactURLError(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, registryMaxResponse))
	if err != nil {
		return "", true, fmt.Errorf("registering the Agent task: %w", redactURLError(err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		err := fmt.Errorf("registering the Agent task: HTTP %d", resp.StatusCode)
		if text := registryErrorText(data); text != "" {
			err = fmt.Errorf("%w: %s", err, text)
		}
		return "", resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500, err
	}
	var ans struct {
		TaskID             *string `json:"task_id"`
		TaskIDCamel        *string `json:"taskId"`
		EncryptedTask      *string `json:"encrypted_task_id"`
		EncryptedTaskCamel *string `json:"encryptedTaskId"`
	}
	if json.Unmarshal(data, &ans) != nil {
		return "", false, errors.New("registering the Agent task: the answer is not JSON")
	}
	switch {
	case ans.TaskID != nil:
		taskID = *ans.TaskID
	case ans.TaskIDCamel != nil:
		taskID = *ans.TaskIDCamel
	case ans.EncryptedTask != nil:
		taskID, err = a.decryptTaskID(*ans.EncryptedTask)
	case ans.EncryptedTaskCamel != nil:
		taskID, err = a.decryptTaskID(*ans.EncryptedTaskCamel)
	default:
		err = errors.New("registering the Agent task: the answer has no task id")
	}
	if err == nil && checkBearer(taskID) != nil {
		err = errors.New("registering the Agent task: the task id is empty or has control characters")
	}
	return taskID, false, err
}

// decryptTaskID opens a libsodium sealed box addressed to the X25519 form of the agent key:
// the first half of SHA-512 of the Ed25519 seed, clamped.
func (a *agentIdentityAuth) decryptTaskID(b64 string) (string, error) {
	sealed, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", errors.New("registering the Agent task: encrypted task id is not base64")
	}
	digest := sha512.Sum512(a.key.Seed())
	var priv, pub [32]byte
	copy(priv[:], digest[:32])
	priv[0] &= 248
	priv[31] &= 127
	priv[31] |= 64
	p, err := curve25519.X25519(priv[:], curve25519.Basepoint)
	if err != nil {
		return "", err
	}
	copy(pub[:], p)
	plain, ok := openSealedBox(sealed, &pub, &priv)
	if !ok {
		return "", errors.New("registering the Agent task: cannot decrypt the task id")
	}
	return string(plain), nil
}

// assertion builds a fresh Authorization value: the signed envelope with its members in
// sorted order, JSON, base64url without padding.
func (a *agentIdentityAuth) assertion() (string, error) {
	ts := agentTimestamp(a.now())
	envelope := struct { // members in sorted order, as Codex serializes them
		AgentRuntimeID string `json:"agent_runtime_id"`
		Signature      string `json:"signature"`
		TaskID         string `json:"task_id"`
		Timestamp      string `json:"timestamp"`
	}{
		AgentRuntimeID: a.runtimeID,
		Signature:      base64.StdEncoding.EncodeToString(ed25519.Sign(a.key, []byte(a.runtimeID+":"+a.taskID+":"+ts))),
		TaskID:         a.taskID,
		Timestamp:      ts,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(envelope); err != nil {
		return "", err
	}
	return agentAssertionScheme + " " + base64.RawURLEncoding.EncodeToString(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

func (a *agentIdentityAuth) headers(context.Context) (http.Header, error) {
	v, err := a.assertion()
	if err != nil {
		return nil, fmt.Errorf("building the AgentAssertion: %w", err)
	}
	h := http.Header{}
	h.Set("Authorization", v)
	if a.accountID != "" {
		h.Set(chatGPTAccountIDHeader, a.accountID)
	}
	if a.fedramp {
		h.Set(openAIFedrampHeader, "true")
	}
	return h, nil
}

// onUnauthorized: Codex has no recovery for Agent Identity auth; a 401 is final.
func (a *agentIdentityAuth) onUnauthorized(context.Context, http.Header) error {
	return errors.New("the registry rejected the Agent Identity assertion; the launcher must issue a new CODEX_ACCESS_TOKEN")
}
