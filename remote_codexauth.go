package main

// Codex sign-in state as a registry credential: the auth.json that `codex login` writes in
// $CODEX_HOME (default ~/.codex), the headers 0.169 derives from it for register and validate,
// the OAuth refresh of an expired ChatGPT access token, and the --chatgpt-token-stdin mode that
// takes a ChatGPT access token from a pipe instead. Agent Identity auth is remote_agentidentity.go.
//
// auth.json, one JSON object, written pretty-printed with mode 0600:
//
//	member                 JSON type          use here
//	auth_mode              string, optional   "apikey" or "chatgpt"; absent: "apikey" when
//	                                          OPENAI_API_KEY is a string, else "chatgpt"
//	OPENAI_API_KEY         string or null     the bearer in API-key mode
//	tokens                 object, optional   ChatGPT mode:
//	  id_token             string, a JWT        claims read unverified; its
//	                                            "https://api.openai.com/auth" object may say
//	                                            chatgpt_account_is_fedramp: true
//	  access_token         string, a JWT        the bearer; its exp says when to refresh
//	  refresh_token        string               traded for new tokens
//	  account_id           string or null       sent as ChatGPT-Account-ID
//	last_refresh           RFC 3339, optional  when the tokens were last refreshed; used only when
//	                                          the access token has no exp (refresh after 8 days)
//	anything else          kept               rewritten unchanged, after the members above
//
// Headers sent to the registry:
//
//	API key     Authorization: Bearer <OPENAI_API_KEY>
//	ChatGPT     Authorization: Bearer <access_token>
//	            ChatGPT-Account-ID: <account_id>          if known
//	            X-OpenAI-Fedramp: true                    if the id_token claim says so
//
// Refresh (docs/remote.md §8, as Codex's own sign-in does it): POST
// https://auth.openai.com/oauth/token, or $CODEX_REFRESH_TOKEN_URL_OVERRIDE, Content-Type:
// application/json, body
// {"client_id":"app_EMoamEEZ73f0CkXaXp7hrann","grant_type":"refresh_token","refresh_token":…}.
// Each of id_token, access_token and refresh_token in the answer replaces the stored one, and
// last_refresh becomes the current time. A 401, or an error code refresh_token_expired,
// refresh_token_reused or refresh_token_invalidated, means the sign-in is over.
//
// Several executors, and Codex itself, may share one auth.json, and a refresh token can be used
// only once. A refresh therefore holds an exclusive flock on auth.json.lock beside the file, reads
// auth.json again under it, and uses the tokens found there if another process has refreshed in
// the meantime; only otherwise does it call the token endpoint. The new file is written to a
// temporary file in the same directory and renamed over the old one, so a reader never sees half
// a file.
//
// Within the process, one refresh runs at a time, and a 401 leads to a refresh only while the
// rejected access token is still the current one, as in Codex: requests refused together share
// one renewal. A refresh, once it holds the lock, runs to its end under its own 30 s limit even
// if the request that wanted it gives up, since the token endpoint has by then used up the old
// refresh token.
//
// The token endpoint is asked at most once per codexRefreshMinInterval, whatever the cause: a
// registry that answers 401 to every request (or a relay that makes us ask it to validate
// again and again) must not make us rotate the refresh token, and rewrite the auth.json other
// Codex processes share, in a loop (docs/remote.md §8). Tokens another process wrote to
// auth.json are taken whenever they appear; they cost no exchange.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Codex login constants: the values Codex's sign-in uses (docs/remote.md §8).
const (
	codexAuthFile           = "auth.json"
	codexAuthLockFile       = "auth.json.lock"
	codexAuthMaxBytes       = 1 << 20
	codexRefreshTokenURL    = "https://auth.openai.com/oauth/token"
	codexRefreshTokenURLEnv = "CODEX_REFRESH_TOKEN_URL_OVERRIDE"
	codexOAuthClientID      = "app_EMoamEEZ73f0CkXaXp7hrann"
	codexRefreshInterval    = 8 * 24 * time.Hour // without an exp claim, refresh tokens this old
	codexRefreshTimeout     = 30 * time.Second
	// codexRefreshMinInterval is the least time between two calls to the token endpoint. An
	// access token it has just issued is good for hours, so a 401 soon after a refresh is the
	// registry refusing the sign-in, not a stale token, and another exchange cannot help; a
	// registry or relay that keeps answering 401 can then rotate the sign-in at most 12
	// times an hour instead of many times a second. Five minutes is also far below any
	// lifetime Codex gives an access token, so a token that truly expires is always renewed.
	codexRefreshMinInterval  = 5 * time.Minute
	codexLockPollInterval    = 20 * time.Millisecond
	codexOriginator          = "codex_cli_rs" // the originator header of Codex's own HTTP client
	codexAuthModeAPIKey      = "apikey"
	codexAuthModeChatGPT     = "chatgpt"
	codexAuthModeAgentID     = "agentIdentity"
	chatGPTAccountIDHeader   = "ChatGPT-Account-ID"
	openAIFedrampHeader      = "X-OpenAI-Fedramp"
	chatGPTAuthClaim         = "https://api.openai.com/auth"
	chatGPTTokenMaxLine      = credentialMaxLine
	chatGPTAccountIDMaxBytes = 256
)

// Errors a caller may test with errors.Is. Their text names the fix, never a credential.
var (
	errCodexNotLoggedIn    = errors.New("remote registration needs a Codex sign-in: run `codex login` (or set CODEX_API_KEY)")
	errCodexLoginExpired   = errors.New("the Codex ChatGPT sign-in can no longer be refreshed: run `codex login` again")
	errCodexAccountChanged = errors.New("auth.json was signed out or now belongs to another ChatGPT account: run `codex login` again")
	errChatGPTAccountID    = errors.New("--chatgpt-account-id does not match the account in the ChatGPT token")
	errCodexRefreshTooSoon = errors.New("the sign-in was refreshed moments ago; a registry that still refuses it is not helped by another refresh")
)

// registryAuth supplies the credential headers of register and validate requests.
//
// headers is called for every request; it may refresh an expired token first. onUnauthorized
// is called when the registry answers 401, with the headers the rejected request carried (as
// headers returned them): nil means a new credential is in place and the request may be sent
// once more; a second 401 after that is final, as in Codex, which makes one recovery attempt
// per request. Knowing what was rejected lets concurrent requests that were refused the same
// token share one renewal.
type registryAuth interface {
	headers(ctx context.Context) (http.Header, error)
	onUnauthorized(ctx context.Context, rejected http.Header) error
}

// codexRefreshError is a failed token refresh. Temporary failures (network, 5xx, a malformed
// answer) may be retried later; the others need a new `codex login`.
type codexRefreshError struct {
	permanent bool
	reason    string // what went wrong, without any token
	err       error  // errCodexLoginExpired for permanent failures, else the cause if any
}

func (e *codexRefreshError) Error() string {
	msg := "refreshing the Codex ChatGPT token: " + e.reason
	if e.err != nil {
		msg += ": " + e.err.Error()
	}
	return msg
}

func (e *codexRefreshError) Unwrap() error { return e.err }

// Permanent reports whether only a new sign-in can help.
func (e *codexRefreshError) Permanent() bool { return e.permanent }

// codexHomeDir is $CODEX_HOME, or ~/.codex when it is unset or empty, as Codex resolves it.
func codexHomeDir(lookupEnv func(string) (string, bool)) (string, error) {
	if dir, ok := lookupEnv("CODEX_HOME"); ok && strings.TrimSpace(dir) != "" {
		return dir, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("locating the Codex home: %w", err)
	}
	return filepath.Join(home, ".codex"), nil
}

// chatGPTClaims are the claims of a ChatGPT JWT that matter for registry headers.
type chatGPTClaims struct {
	accountID string // https://api.openai.com/auth → chatgpt_account_id
	fedramp   bool   // https://api.openai.com/auth → chatgpt_account_is_fedramp
	exp       int64
	hasExp    bool
}

// chatGPTClaimsOf decodes a JWT's payload without verifying it, as Codex does with the tokens
// it holds: they are the server's business, the client only reads routing hints from them.
func chatGPTClaimsOf(token string) (chatGPTClaims, error) {
	var c chatGPTClaims
	parts := strings.Split(token, ".")
	if len(parts) < 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return c, errors.New("not a JWT")
	}
	members, err := decodeJWTObject(parts[1])
	if err != nil {
		return c, errors.New("JWT payload is not a base64url JSON object")
	}
	c.exp, c.hasExp = jwtInt(members["exp"])
	if raw := members[chatGPTAuthClaim]; !jwtIsNull(raw) {
		var auth struct {
			AccountID *string `json:"chatgpt_account_id"`
			Fedramp   *bool   `json:"chatgpt_account_is_fedramp"`
		}
		if json.Unmarshal(raw, &auth) != nil {
			return c, errors.New("JWT claim " + chatGPTAuthClaim + " is malformed")
		}
		if auth.AccountID != nil {
			c.accountID = *auth.AccountID
		}
		c.fedramp = auth.Fedramp != nil && *auth.Fedramp
	}
	return c, nil
}

// chatGPTHeaders builds the headers of ChatGPT auth.
func chatGPTHeaders(accessToken, accountID string, fedramp bool) http.Header {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+accessToken)
	if accountID != "" {
		h.Set(chatGPTAccountIDHeader, accountID)
	}
	if fedramp {
		h.Set(openAIFedrampHeader, "true")
	}
	return h
}

// codexLogin is the sign-in in auth.json, kept fresh. It is safe for concurrent use.
type codexLogin struct {
	path           string // auth.json
	lockPath       string // auth.json.lock
	client         *http.Client
	now            func() time.Time
	tokenURL       string
	refreshTimeout time.Duration // bounds a token exchange, whatever its caller's context
	minInterval    time.Duration // least time between two token exchanges (codexRefreshMinInterval)

	// turn admits one refresh at a time within the process, as the flock on auth.json.lock
	// does among processes. It is a channel, not a mutex, so that a caller's context can end
	// the wait; whoever sends into it receives back out of it when done.
	turn chan struct{}

	mu         sync.Mutex    // guards doc and refreshErr; never held across I/O
	doc        *codexAuthDoc // the latest reading or writing of auth.json
	refreshErr error         // a permanent refresh failure for doc's tokens: fail without a request
	// unsaved, after a refresh whose tokens could not be written, is what auth.json still
	// holds: tokens the endpoint has used up, not another process's, so not to be taken.
	unsaved *codexTokens
	// lastExchange is when this process last got new tokens from the token endpoint
	// (monotonic clock: the rate limit is about elapsed time, not the wall clock of now);
	// zero: never.
	lastExchange time.Time
}

// loadCodexLogin reads $CODEX_HOME/auth.json (codexHome "" means the default Codex home).
// client makes the refresh requests (nil: a client with a 30 s timeout) and now is the clock
// (nil: time.Now). Only API-key and ChatGPT sign-ins can register, as in 0.169.
func loadCodexLogin(codexHome string, client *http.Client, now func() time.Time) (*codexLogin, error) {
	if codexHome == "" {
		var err error
		if codexHome, err = codexHomeDir(os.LookupEnv); err != nil {
			return nil, err
		}
	}
	if client == nil {
		client = &http.Client{Timeout: codexRefreshTimeout, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}} // Accept-Encoding: gzip, as the registry client
	}
	if now == nil {
		now = time.Now
	}
	l := &codexLogin{
		path:           filepath.Join(codexHome, codexAuthFile),
		lockPath:       filepath.Join(codexHome, codexAuthLockFile),
		client:         client,
		now:            now,
		tokenURL:       codexRefreshTokenURL,
		refreshTimeout: codexRefreshTimeout,
		minInterval:    codexRefreshMinInterval,
		turn:           make(chan struct{}, 1),
	}
	if u, ok := os.LookupEnv(codexRefreshTokenURLEnv); ok && u != "" {
		l.tokenURL = u
	}
	doc, err := l.read()
	if err != nil {
		return nil, err
	}
	switch doc.mode {
	case codexAuthModeAPIKey:
		if err := checkBearer(doc.apiKey); err != nil {
			return nil, fmt.Errorf("%s: API-key sign-in without a usable key (%v): %w", l.path, err, errCodexNotLoggedIn)
		}
	case codexAuthModeChatGPT:
		if doc.tokens == nil {
			return nil, fmt.Errorf("%s: no ChatGPT tokens: %w", l.path, errCodexNotLoggedIn)
		}
	case codexAuthModeAgentID:
		return nil, fmt.Errorf("%s holds Agent Identity auth, which registers only with --use-agent-identity-auth and CODEX_ACCESS_TOKEN", l.path)
	default:
		return nil, fmt.Errorf("%s: auth_mode %q cannot register; remote registration takes a ChatGPT sign-in or an API key", l.path, truncateForError(doc.mode))
	}
	l.doc = doc
	return l, nil
}

// apiKeyMode reports whether the sign-in is an API key: the caller must then keep it to the
// hosts 0.169 allows for API keys (apiKeyHostAllowed).
func (l *codexLogin) apiKeyMode() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.doc.mode == codexAuthModeAPIKey
}

// read reads and parses auth.json.
func (l *codexLogin) read() (*codexAuthDoc, error) {
	f, err := os.Open(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no %s: %w", l.path, errCodexNotLoggedIn)
	}
	if err != nil {
		return nil, fmt.Errorf("reading Codex sign-in: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, codexAuthMaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading Codex sign-in: %w", err)
	}
	if len(data) > codexAuthMaxBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", l.path, codexAuthMaxBytes)
	}
	doc, err := parseCodexAuth(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %v; run `codex login` again", l.path, err)
	}
	return doc, nil
}

// headers returns the registry headers, refreshing an expired ChatGPT access token first.
func (l *codexLogin) headers(ctx context.Context) (http.Header, error) {
	l.mu.Lock()
	if l.doc.mode == codexAuthModeAPIKey {
		h := http.Header{}
		h.Set("Authorization", "Bearer "+l.doc.apiKey)
		l.mu.Unlock()
		return h, nil
	}
	stale := l.refreshErr != nil || l.staleLocked()
	l.mu.Unlock()
	if stale {
		err := l.refresh(ctx, false, func() bool { return l.refreshErr != nil || l.staleLocked() })
		// Refreshed moments ago and stale again (a token endpoint handing out short-lived
		// tokens): the current token goes out, and the registry judges it.
		if err != nil && !errors.Is(err, errCodexRefreshTooSoon) {
			return nil, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.doc.tokens
	if err := checkBearer(t.accessToken); err != nil {
		return nil, fmt.Errorf("%s: tokens.access_token: %v; run `codex login` again", l.path, err)
	}
	return chatGPTHeaders(t.accessToken, t.accountID, t.fedramp), nil
}

// onUnauthorized recovers from a registry 401 the way Codex does: if the rejected access token
// has been replaced meanwhile (by a concurrent recovery here, or by a reading of auth.json),
// the caller just sends again with the new one; otherwise it takes the tokens another process
// has written to auth.json, or else refreshes. An API key cannot be renewed.
func (l *codexLogin) onUnauthorized(ctx context.Context, rejected http.Header) error {
	l.mu.Lock()
	apiKey := l.doc.mode == codexAuthModeAPIKey
	l.mu.Unlock()
	if apiKey {
		return errors.New("the registry rejected the API key in auth.json")
	}
	bearer, known := strings.CutPrefix(rejected.Get("Authorization"), "Bearer ")
	return l.refresh(ctx, true, func() bool { return !known || l.doc.tokens.accessToken == bearer })
}

// staleLocked reports whether the access token should be refreshed before use: its exp has
// passed or, without exp, the last refresh is more than 8 days old.
func (l *codexLogin) staleLocked() bool {
	now := l.now()
	if c, err := chatGPTClaimsOf(l.doc.tokens.accessToken); err == nil && c.hasExp {
		return c.exp <= now.Unix()
	}
	return !l.doc.lastRefresh.IsZero() && l.doc.lastRefresh.Before(now.Add(-codexRefreshInterval))
}

// refresh renews the ChatGPT tokens, one refresh at a time: once it is this caller's turn,
// needed (called with l.mu held) says whether an earlier refresh has made this one
// unnecessary.
//
// ctx bounds only the caller's waits: for its turn, for the lock on auth.json.lock, and for
// the outcome. The refresh itself, once the lock is held, runs to its end in a goroutine of
// its own under l.refreshTimeout: the token endpoint uses a refresh token up when it answers,
// so an exchange cut short by an impatient caller would lose the only tokens that still work,
// and the next attempt would present a used refresh token, which ends the sign-in.
func (l *codexLogin) refresh(ctx context.Context, afterReject bool, needed func() bool) error {
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		return &codexRefreshError{reason: "waiting for another refresh to finish", err: ctx.Err()}
	}
	release := func() { <-l.turn }
	if err := ctx.Err(); err != nil { // select picks at random when both were ready
		release()
		return &codexRefreshError{reason: "waiting for another refresh to finish", err: err}
	}
	l.mu.Lock()
	need := needed()
	l.mu.Unlock()
	if !need {
		release()
		return nil
	}
	unlock, err := lockCodexAuth(ctx, l.lockPath)
	if err == nil && ctx.Err() != nil { // the flock is tried before ctx is looked at
		unlock()
		err = ctx.Err()
	}
	if err != nil {
		release()
		if ctx.Err() != nil {
			return &codexRefreshError{reason: "waiting for the lock on " + l.lockPath, err: ctx.Err()}
		}
		return err
	}
	// From here on the exchange is not the caller's to stop: it starts only for a caller
	// still waiting, and finishes, or times out, even if that caller leaves.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.refreshTimeout)
	done := make(chan error, 1)
	go func() {
		defer release()
		defer unlock()
		defer cancel()
		done <- l.refreshHeld(rctx, afterReject)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return &codexRefreshError{reason: "stopped waiting; the refresh goes on", err: ctx.Err()}
	}
}

// finish waits, at most d, until no refresh is under way: a refresh that has reached the
// token endpoint must be given the chance to store what it got before the process exits.
func (l *codexLogin) finish(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case l.turn <- struct{}{}:
		<-l.turn
		return true
	case <-t.C:
		return false
	}
}

// refreshHeld is refresh with the turn and the file lock held. It first reads auth.json
// again: tokens another process wrote there are taken instead of calling the token endpoint.
// After a 401 (afterReject) new tokens on disk are enough; otherwise they must not be stale.
func (l *codexLogin) refreshHeld(ctx context.Context, afterReject bool) error {
	disk, err := l.read()
	if err != nil {
		return err
	}
	l.mu.Lock()
	if disk.mode != codexAuthModeChatGPT || disk.tokens == nil || disk.tokens.accountID != l.doc.tokens.accountID {
		l.mu.Unlock()
		return errCodexAccountChanged
	}
	cur := l.doc // documents are never changed once published; cur is safe to read unlocked
	if !disk.tokens.sameCredential(l.doc.tokens) && (l.unsaved == nil || !disk.tokens.sameCredential(l.unsaved)) {
		l.doc, l.refreshErr, l.unsaved = disk, nil, nil
		cur = disk
		if afterReject || !l.staleLocked() {
			l.mu.Unlock()
			return nil
		}
	}
	if err := l.refreshErr; err != nil {
		l.mu.Unlock()
		return err
	}
	if !l.lastExchange.IsZero() && time.Since(l.lastExchange) < l.minInterval {
		l.mu.Unlock()
		return &codexRefreshError{reason: fmt.Sprintf("at most one refresh per %v", l.minInterval), err: errCodexRefreshTooSoon}
	}
	l.mu.Unlock()

	reason := "proactive_expiry"
	if afterReject {
		reason = "unauthorized_recovery"
	}
	fresh, err := l.requestRefresh(ctx, cur.tokens.refreshToken, reason)
	if err != nil {
		var re *codexRefreshError
		if errors.As(err, &re) && re.permanent {
			l.mu.Lock()
			l.doc, l.refreshErr = cur, err
			l.mu.Unlock()
		}
		return err
	}
	// Only an exchange that issued tokens counts against the rate limit: a failed one rotated
	// nothing (a used-up refresh token fails for good, through refreshErr).
	l.mu.Lock()
	l.lastExchange = time.Now()
	l.mu.Unlock()
	// The new tokens go into a copy: cur may be l.doc, which others read.
	next := cur.clone()
	t := next.tokens
	if fresh.IDToken != nil {
		setJSONString(t.members, "id_token", *fresh.IDToken)
		t.idToken = *fresh.IDToken
		claims, _ := chatGPTClaimsOf(t.idToken) // checked in requestRefresh
		t.fedramp = claims.fedramp
	}
	if fresh.AccessToken != nil {
		setJSONString(t.members, "access_token", *fresh.AccessToken)
		t.accessToken = *fresh.AccessToken
	}
	if fresh.RefreshToken != nil {
		setJSONString(t.members, "refresh_token", *fresh.RefreshToken)
		t.refreshToken = *fresh.RefreshToken
	}
	next.lastRefresh = l.now().UTC()
	setJSONString(next.members, "last_refresh", formatCodexTime(next.lastRefresh))
	data, err := next.marshal()
	// The token endpoint has used up the old refresh token: keep the new tokens in memory even
	// if they cannot be saved, though the next process will then have to sign in again.
	l.mu.Lock()
	l.doc, l.refreshErr, l.unsaved = next, nil, disk.tokens
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("encoding %s: %w", l.path, err)
	}
	if err := writeFileAtomic(l.path, data, 0o600); err != nil {
		return fmt.Errorf("saving refreshed Codex tokens: %w", err)
	}
	l.mu.Lock()
	if l.doc == next {
		l.unsaved = nil
	}
	l.mu.Unlock()
	return nil
}

// codexRefreshAnswer is the token endpoint's answer; absent members keep the stored values.
type codexRefreshAnswer struct {
	IDToken      *string `json:"id_token"`
	AccessToken  *string `json:"access_token"`
	RefreshToken *string `json:"refresh_token"`
}

// requestRefresh trades a refresh token for new tokens.
// reason is Codex's refresh_reason: proactive_expiry for a token past its exp,
// unauthorized_recovery after a 401.
func (l *codexLogin) requestRefresh(ctx context.Context, refreshToken, reason string) (*codexRefreshAnswer, error) {
	body, err := json.Marshal(struct {
		ClientID      string `json:"client_id"`
		GrantType     string `json:"grant_type"`
		RefreshReason string `json:"refresh_reason"`
		RefreshToken  string `json:"refresh_token"`
	}{codexOAuthClientID, "refresh_token", reason, refreshToken})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.tokenURL, bytes.NewReader(body))
	if err != nil {
		return nil, &codexRefreshError{reason: "bad token endpoint URL", err: redactURLError(err)}
	}
	req.Header.Set("Content-Type", "application/json")
	setCodexClientHeaders(req)
	resp, err := l.client.Do(req)
	if err != nil {
		reason := "token endpoint unreachable"
		if isTimeout(err) {
			reason = "timed out waiting for the token endpoint"
		}
		return nil, &codexRefreshError{reason: reason, err: redactURLError(err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, registryMaxResponse))
	if err != nil {
		reason := "reading the token endpoint's answer"
		if isTimeout(err) {
			reason = "timed out reading the token endpoint's answer"
		}
		return nil, &codexRefreshError{reason: reason, err: redactURLError(err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, classifyRefreshFailure(resp.StatusCode, data)
	}
	var ans codexRefreshAnswer
	if json.Unmarshal(data, &ans) != nil {
		return nil, &codexRefreshError{reason: fmt.Sprintf("HTTP %d with a body that is not the expected JSON", resp.StatusCode)}
	}
	for name, v := range map[string]*string{"id_token": ans.IDToken, "access_token": ans.AccessToken, "refresh_token": ans.RefreshToken} {
		if v != nil && checkBearer(*v) != nil {
			return nil, &codexRefreshError{reason: "the answer's " + name + " is empty or has control characters"}
		}
	}
	if ans.IDToken != nil {
		if _, err := chatGPTClaimsOf(*ans.IDToken); err != nil {
			return nil, &codexRefreshError{reason: "the answer's id_token", err: err}
		}
	}
	return &ans, nil
}

// isTimeout reports whether err is a deadline running out, of a context or of a connection,
// rather than a refusal or a broken connection.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout()
}

// classifyRefreshFailure turns a non-2xx answer into an error. The error code is read from
// {"error":{"code":…}}, {"error":"…"} or {"code":…}; 401 or a refresh-token code is final.
func classifyRefreshFailure(status int, body []byte) error {
	var v struct {
		Error json.RawMessage `json:"error"`
		Code  json.RawMessage `json:"code"`
	}
	var code string
	if json.Unmarshal(body, &v) == nil {
		var obj struct {
			Code json.RawMessage `json:"code"`
		}
		if s, ok := jwtString(v.Error); ok {
			code = s
		} else if json.Unmarshal(v.Error, &obj) == nil {
			code, _ = jwtString(obj.Code)
		}
		if code == "" {
			code, _ = jwtString(v.Code)
		}
	}
	var why string
	switch strings.ToLower(code) {
	case "refresh_token_expired":
		why = "the refresh token has expired"
	case "refresh_token_reused":
		why = "the refresh token was already used"
	case "refresh_token_invalidated":
		why = "the refresh token was revoked"
	}
	switch {
	case why != "":
		return &codexRefreshError{permanent: true, reason: why, err: errCodexLoginExpired}
	case status == http.StatusUnauthorized:
		return &codexRefreshError{permanent: true, reason: "HTTP 401", err: errCodexLoginExpired}
	case code != "":
		return &codexRefreshError{reason: fmt.Sprintf("HTTP %d: %s", status, truncateForError(code))}
	}
	return &codexRefreshError{reason: fmt.Sprintf("HTTP %d", status)}
}

// truncateForError bounds text from a file or a server before it goes into an error message.
func truncateForError(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return s
}

// chatGPTTokenAuth is --chatgpt-token-stdin: a ChatGPT access token handed over by a parent
// process. It cannot be refreshed; a 401 is final.
type chatGPTTokenAuth struct {
	header http.Header
}

// newChatGPTTokenAuth checks a ChatGPT access token and the --chatgpt-account-id that goes
// with it (accountID may be ""). As in 0.169 the token must be a JWT; the account comes from
// the flag or from the token's claim, and when both are present they must agree.
func newChatGPTTokenAuth(token, accountID string) (*chatGPTTokenAuth, error) {
	if checkBearer(token) != nil || strings.ContainsAny(token, " \t") {
		return nil, errors.New("--chatgpt-token-stdin: invalid ChatGPT access token")
	}
	claims, err := chatGPTClaimsOf(token)
	if err != nil {
		return nil, fmt.Errorf("--chatgpt-token-stdin: invalid ChatGPT access token: %v", err)
	}
	if accountID != "" && !validChatGPTAccountID(accountID) {
		return nil, errors.New("--chatgpt-account-id: invalid ChatGPT account ID")
	}
	switch {
	case accountID == "" && claims.accountID == "":
		return nil, errors.New("--chatgpt-token-stdin: the token names no ChatGPT account; pass --chatgpt-account-id")
	case accountID == "":
		if !validChatGPTAccountID(claims.accountID) {
			return nil, errors.New("--chatgpt-token-stdin: the token's ChatGPT account ID is invalid")
		}
		accountID = claims.accountID
	case claims.accountID != "" && claims.accountID != accountID:
		return nil, errChatGPTAccountID
	}
	return &chatGPTTokenAuth{header: chatGPTHeaders(token, accountID, claims.fedramp)}, nil
}

// validChatGPTAccountID accepts what can travel in a header without quoting surprises.
func validChatGPTAccountID(id string) bool {
	if id == "" || len(id) > chatGPTAccountIDMaxBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= 0x20 || id[i] >= 0x7f {
			return false
		}
	}
	return true
}

func (a *chatGPTTokenAuth) headers(context.Context) (http.Header, error) {
	return a.header.Clone(), nil
}

func (a *chatGPTTokenAuth) onUnauthorized(context.Context, http.Header) error {
	return errors.New("the registry rejected the --chatgpt-token-stdin token, which cannot be refreshed")
}

// readChatGPTToken reads the --chatgpt-token-stdin line: at most 16 KiB and, as 0.169 insists,
// ending in a newline. stdin must be a pipe or a socket (checkChatGPTTokenStdin).
func readChatGPTToken(r io.Reader) (string, error) {
	br := bufio.NewReaderSize(r, 4096)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > chatGPTTokenMaxLine+1 {
			return "", fmt.Errorf("--chatgpt-token-stdin: token line longer than %d bytes", chatGPTTokenMaxLine)
		}
		if err == nil {
			return string(bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))), nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return "", errors.New("--chatgpt-token-stdin: expected one newline-terminated ChatGPT access token")
		}
	}
}

// checkChatGPTTokenStdin refuses a terminal or a regular file on stdin, as 0.169 does: the
// token must come from the parent process, not be typed in or left lying in a file.
func checkChatGPTTokenStdin(fi os.FileInfo) error {
	if fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return errors.New("--chatgpt-token-stdin: stdin must be a pipe or a socket")
	}
	return nil
}

// checkChatGPTTokenRegistryURL refuses plain HTTP, even on loopback, as 0.169 does for
// --chatgpt-token-stdin.
func checkChatGPTTokenRegistryURL(u *url.URL) error {
	if u.Scheme != "https" {
		return fmt.Errorf("--chatgpt-token-stdin: the registry URL must use HTTPS, not %s", u.Scheme)
	}
	return nil
}
