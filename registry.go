package main

// Remote mode: the command line, the registry credentials and the registry HTTP client
// (docs/remote.md §2, §8). The rest of remote mode is relay.go (wire format), relay_executor.go
// (register, dial, reconnect) and relay_demux.go (streams).
//
// Registry API (docs/remote.md §2.1–§2.3), JSON over HTTPS, base URL = --remote without a trailing
// "/", environment id checked against [A-Za-z0-9_-]{1,256} before it is pasted into the path:
//
//	POST {base}/cloud/environment/{id}/register
//	  headers  content-type: application/json, accept: */*, authorization: Bearer <credential>
//	  body     {"security_profile":"noise_hybrid_ik_v1","executor_public_key":{suite,x25519_public_key,mlkem768_public_key}}
//	  200      {"environment_id":<id>,"url":<wss:// or loopback ws://>,"security_profile":"noise_hybrid_ik_v1",
//	            "executor_registration_id":<string, may be empty, must be present>}   other keys ignored
//	POST {base}/cloud/environment/{id}/validate          one per harness handshake, before msg2
//	  headers  as register, plus X-Codex-Noise-Stream-Id: <stream_id>
//	  body     {"executor_registration_id":…,"harness_public_key":{…},"harness_key_authorization":<msg1 payload>}
//	  200      {"valid":true} -> msg2; {"valid":false}, 403, 5xx, anything else -> stream reset;
//	  401      -> msg2 carrying "codex-registry-authentication-rejected/v1", no stream
//	errors     {"error":{"code":…,"message":…}}; never echoed for 401/403
//
// Which failures are retried, and how (unlike 0.169, a first registration that fails is
// retried too): docs/remote.md §2.4, §9.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Registry constants (docs/remote.md §2, §8).
const (
	registrySecurityProfile   = "noise_hybrid_ik_v1"
	registryRequestTimeout    = 10 * time.Second // per request, as 0.169
	registryMaxResponse       = 1 << 20          // bytes of response body read
	registryMaxErrorText      = 200              // bytes of a registry error message kept for logs
	registryStreamIDHeader    = "X-Codex-Noise-Stream-Id"
	registryMaxEnvironmentID  = 256
	credentialMaxLine         = 16 << 10 // a bearer line or a credential frame
	credentialVersion         = 1
	credentialInitialTimeout  = 30 * time.Second // wait for the first --executor-credential-stdin frame
	backoffInitial            = time.Second      // 0.169: ~0.6–0.9 s, then ~1.4–2 s
	backoffMax                = time.Minute
	backoffRetryAfterCap      = 5 * time.Minute // Retry-After is honoured up to this
	backoffStableConnection   = time.Minute     // a socket up this long resets the backoff
	rendezvousRequestIDPrefix = "req_"
)

// remoteConfig is the command line of remote mode.
type remoteConfig struct {
	remote            string // --remote: registry base URL
	environmentID     string
	executorID        string // --executor-id: the SEED name of --environment-id (mergeExecutorID)
	name              string // --name: logged only; 0.169 does not send it either
	bearerStdin       bool   // --registration-bearer-stdin
	executorCredStdin bool   // --executor-credential-stdin
	caFile            string // --remote-ca
	identityFile      string // --identity

	// Set by validate.
	base    string // --remote without the trailing "/"
	apiKey  string
	rootCAs *x509.CertPool

	lookupEnv        func(string) (string, bool) // nil: os.LookupEnv
	timings          *relayTimings               // nil: defaultRelayTimings()
	streamInboxBytes int                         // 0: relayStreamInboxBytes
}

func (c *remoteConfig) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.remote, "remote", "", "registry base `URL`: serve through a rendezvous relay instead of listening")
	fs.StringVar(&c.environmentID, "environment-id", "", "`ID` of the environment to register (letters, digits, _ and -)")
	fs.StringVar(&c.executorID, "executor-id", "", "another name of --environment-id (the exec-server README's): the `ID` to register")
	fs.StringVar(&c.name, "name", "", "display `NAME` of this executor (logged only)")
	fs.BoolVar(&c.bearerStdin, "registration-bearer-stdin", false, "read the registry bearer token, one line, from stdin")
	fs.BoolVar(&c.executorCredStdin, "executor-credential-stdin", false, "read rotating registry credentials, one JSON frame per line, from stdin")
	fs.StringVar(&c.caFile, "remote-ca", "", "PEM `FILE` of extra CA certificates for the registry and rendezvous")
	fs.StringVar(&c.identityFile, "identity", "", "`FILE` holding the executor's Noise identity (created 0600 if missing)")
}

// mergeExecutorID makes --executor-id a second name of --environment-id: either may be given,
// or both with one value.
func (c *remoteConfig) mergeExecutorID() error {
	switch {
	case c.executorID == "":
	case c.environmentID == "":
		c.environmentID = c.executorID
	case c.environmentID != c.executorID:
		return fmt.Errorf("--executor-id %q and --environment-id %q differ: they name the same thing", c.executorID, c.environmentID)
	}
	return nil
}

// enabled reports whether any remote-mode flag was given.
func (c *remoteConfig) enabled() bool {
	return c.remote != "" || c.environmentID != "" || c.name != "" || c.bearerStdin ||
		c.executorCredStdin || c.caFile != "" || c.identityFile != ""
}

// validate checks the flags and picks the credential source. Errors are one line.
func (c *remoteConfig) validate() error {
	if c.remote == "" {
		return errors.New("remote-mode flags need --remote URL")
	}
	if c.environmentID == "" {
		return errors.New("--remote needs --environment-id")
	}
	if err := checkEnvironmentID(c.environmentID); err != nil {
		return err
	}
	c.base = strings.TrimRight(c.remote, "/")
	u, err := parseRemoteURL(c.base, "https", "http")
	if err != nil {
		return fmt.Errorf("--remote %s", err)
	}
	if u.RawQuery != "" || u.ForceQuery {
		return errors.New("--remote must not have a query")
	}
	if c.bearerStdin && c.executorCredStdin {
		return errors.New("--registration-bearer-stdin and --executor-credential-stdin cannot be combined")
	}
	if !c.bearerStdin && !c.executorCredStdin {
		if err := c.useAPIKey(u); err != nil {
			return err
		}
	}
	if c.caFile != "" {
		return c.loadCA()
	}
	return nil
}

// useAPIKey falls back to CODEX_API_KEY, which 0.169 sends only to OpenAI hosts or loopback.
func (c *remoteConfig) useAPIKey(u *url.URL) error {
	lookup := c.lookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	c.apiKey, _ = lookup("CODEX_API_KEY")
	if c.apiKey == "" {
		return errors.New("remote mode needs a registry credential: --registration-bearer-stdin, --executor-credential-stdin or CODEX_API_KEY")
	}
	if !apiKeyHostAllowed(u) {
		return fmt.Errorf("CODEX_API_KEY is only sent to HTTPS openai.com or openai.org registries or to loopback, not %s; use --registration-bearer-stdin", u.Host)
	}
	if err := checkBearer(c.apiKey); err != nil {
		return fmt.Errorf("CODEX_API_KEY: %v", err)
	}
	return nil
}

// loadCA adds --remote-ca to the system roots, for a registry or rendezvous behind a private CA.
func (c *remoteConfig) loadCA() error {
	pem, err := os.ReadFile(c.caFile)
	if err != nil {
		return fmt.Errorf("--remote-ca: %v", err)
	}
	if c.rootCAs, err = x509.SystemCertPool(); err != nil || c.rootCAs == nil {
		c.rootCAs = x509.NewCertPool()
	}
	if !c.rootCAs.AppendCertsFromPEM(pem) {
		return fmt.Errorf("--remote-ca %s: no PEM certificate found", c.caFile)
	}
	return nil
}

// relayTimings are the clocks of remote mode; tests shrink them.
type relayTimings struct {
	backoff           backoffPolicy
	stableConnection  time.Duration // a socket up this long resets the backoff
	handshakePause    time.Duration // handshakes refused after relayMaxFailedHandshakes failures
	validateTimeout   time.Duration // one registry /validate call
	initialCredential time.Duration // first --executor-credential-stdin frame
	pingInterval      time.Duration // websocket ping to the rendezvous
	pongTimeout       time.Duration // drop the socket when no pong came for this long
	dialTimeout       time.Duration // one rendezvous dial: TCP, TLS and the upgrade
}

func defaultRelayTimings() relayTimings {
	return relayTimings{
		backoff:           backoffPolicy{initial: backoffInitial, max: backoffMax, retryAfterCap: backoffRetryAfterCap},
		stableConnection:  backoffStableConnection,
		handshakePause:    10 * time.Second, // 0.169: refused at +9 s, accepted at +10 s
		validateTimeout:   registryRequestTimeout,
		initialCredential: credentialInitialTimeout,
		pingInterval:      30 * time.Second,
		pongTimeout:       60 * time.Second,
		dialTimeout:       rendezvousDialTimeout,
	}
}

// streamInboxLimit is the byte limit of one relay stream's queue (relayInbox).
func (c *remoteConfig) streamInboxLimit() int {
	if c.streamInboxBytes > 0 {
		return c.streamInboxBytes
	}
	return relayStreamInboxBytes
}

func (c *remoteConfig) relayTimings() relayTimings {
	if c.timings != nil {
		return *c.timings
	}
	return defaultRelayTimings()
}

// checkEnvironmentID restricts ids to what older Codex source allowed; 0.169 pastes any id
// into the URL path unescaped (docs/remote.md §9), which allows path injection.
func checkEnvironmentID(id string) error {
	if len(id) == 0 || len(id) > registryMaxEnvironmentID {
		return fmt.Errorf("--environment-id must be 1 to %d characters", registryMaxEnvironmentID)
	}
	for i := 0; i < len(id); i++ {
		switch b := id[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '_', b == '-':
		default:
			return fmt.Errorf("--environment-id %q: only letters, digits, _ and - are allowed", id)
		}
	}
	return nil
}

// parseRemoteURL parses a registry or rendezvous URL and enforces docs/remote.md §2.1: the TLS
// scheme, or the plain one on loopback only; no userinfo and no fragment. The fragment test
// reads the raw string because url.Parse drops an empty one ("https://r/#"), and the registry
// base is joined to its endpoint paths as a string, where a '#' would cut them all off.
// Errors are phrased to follow the URL's name and never quote the URL.
func parseRemoteURL(raw, tlsScheme, plainScheme string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("is not a URL: %v", redactURLError(err))
	}
	switch {
	case u.Host == "" || u.Hostname() == "":
		return nil, errors.New("must be an absolute URL with a host")
	case u.User != nil:
		return nil, errors.New("must not carry userinfo")
	case strings.Contains(raw, "#"):
		return nil, errors.New("must not have a fragment")
	case u.Scheme == tlsScheme:
		return u, nil
	case u.Scheme == plainScheme && isLoopbackHost(u.Hostname()):
		return u, nil
	}
	return nil, fmt.Errorf("must use %s (or %s on loopback), got %s://%s", tlsScheme, plainScheme, u.Scheme, u.Host)
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// apiKeyHostAllowed keeps an OpenAI API key from going to arbitrary registries, as 0.169 does.
func apiKeyHostAllowed(u *url.URL) bool {
	h := strings.ToLower(u.Hostname())
	if isLoopbackHost(h) {
		return true
	}
	if u.Scheme != "https" {
		return false
	}
	for _, d := range []string{"openai.com", "openai.org"} {
		if h == d || strings.HasSuffix(h, "."+d) {
			return true
		}
	}
	return false
}

// checkBearer rejects tokens that cannot travel in an Authorization header.
func checkBearer(tok string) error {
	if tok == "" {
		return errors.New("empty token")
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < 0x20 || tok[i] == 0x7f {
			return errors.New("token contains control characters")
		}
	}
	return nil
}

// tlsConfig is the client TLS configuration for the registry and the rendezvous.
func (c *remoteConfig) tlsConfig() *tls.Config {
	return &tls.Config{RootCAs: c.rootCAs, MinVersion: tls.VersionTLS12}
}

// registryCredentials holds the bearer used for register and validate. With
// --executor-credential-stdin it rotates as frames arrive, and dead is closed (err set) when
// the stream ends or a frame is invalid: 0.169 exits then, and so do we.
type registryCredentials struct {
	mu    sync.Mutex
	token string
	err   error
	dead  chan struct{}
}

func (rc *registryCredentials) bearer() (string, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.token, rc.err
}

func (rc *registryCredentials) setToken(tok string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.token = tok
}

func (rc *registryCredentials) fail(err error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.err == nil {
		rc.err = err
		close(rc.dead)
	}
}

// credentialFrame is one line of --executor-credential-stdin (docs/remote.md §8).
type credentialFrame struct {
	Version       *int    `json:"version"`
	EnvironmentID *string `json:"environment_id"`
	Token         *string `json:"token"`
	ExpiresAt     *int64  `json:"expires_at"` // Unix seconds; an ISO string is invalid
}

// parseCredentialFrame validates a frame; the error never includes the token.
func parseCredentialFrame(line []byte, envID string, now time.Time) (string, error) {
	var f credentialFrame
	if err := json.Unmarshal(line, &f); err != nil {
		return "", errors.New("invalid executor credential frame: want one JSON object per line with integer expires_at")
	}
	switch {
	case f.Version == nil || f.EnvironmentID == nil || f.Token == nil || f.ExpiresAt == nil:
		return "", errors.New("invalid executor credential frame: version, environment_id, token and expires_at are required")
	case *f.Version != credentialVersion:
		return "", fmt.Errorf("invalid executor credential frame: version %d, want %d", *f.Version, credentialVersion)
	case *f.EnvironmentID != envID:
		return "", errors.New("executor credential is for a different environment")
	case !now.Before(time.Unix(*f.ExpiresAt, 0)):
		return "", errors.New("executor credential is expired")
	}
	if err := checkBearer(*f.Token); err != nil {
		return "", fmt.Errorf("invalid executor credential frame: %v", err)
	}
	return *f.Token, nil
}

// readCredentialLine reads one newline-terminated line of at most credentialMaxLine bytes (a
// last line without a newline is accepted). It returns io.EOF only when nothing was read.
func readCredentialLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > credentialMaxLine+1 {
			return nil, fmt.Errorf("credential line longer than %d bytes", credentialMaxLine)
		}
		switch {
		case err == nil:
			return bytes.TrimRight(line, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return bytes.TrimRight(line, "\r\n"), nil
		default:
			return nil, err
		}
	}
}

// startCredentials reads the credential source chosen by validate.
func (c *remoteConfig) startCredentials(ctx context.Context, stdin io.Reader, log *slog.Logger) (*registryCredentials, error) {
	rc := &registryCredentials{dead: make(chan struct{})}
	switch {
	case c.bearerStdin:
		line, err := readCredentialLine(bufio.NewReaderSize(stdin, 4096))
		if err != nil {
			return nil, fmt.Errorf("--registration-bearer-stdin: reading the token: %w", err)
		}
		if err := checkBearer(string(line)); err != nil {
			return nil, fmt.Errorf("--registration-bearer-stdin: %w", err)
		}
		rc.token = string(line)
	case c.executorCredStdin:
		if err := c.startCredentialFrames(ctx, stdin, rc, log); err != nil {
			return nil, err
		}
	default:
		rc.token = c.apiKey
	}
	return rc, nil
}

// startCredentialFrames starts the reader of --executor-credential-stdin and waits for its
// first frame, as 0.169 does (docs/remote.md §8). The reader cannot be interrupted while blocked
// in Read, so it lives as long as stdin.
func (c *remoteConfig) startCredentialFrames(ctx context.Context, stdin io.Reader, rc *registryCredentials, log *slog.Logger) error {
	first := make(chan struct{})
	go c.readCredentialFrames(stdin, rc, first, log)
	t := time.NewTimer(c.relayTimings().initialCredential)
	defer t.Stop()
	select {
	case <-first:
	case <-t.C:
		return errors.New("--executor-credential-stdin: timed out waiting for the initial executor credential")
	case <-ctx.Done():
		return ctx.Err()
	}
	_, err := rc.bearer()
	return err
}

// readCredentialFrames applies each frame of --executor-credential-stdin as it arrives. An
// invalid frame or the end of stdin kills the credentials, and with them remote mode. first
// is closed once the first frame is applied or has failed.
func (c *remoteConfig) readCredentialFrames(stdin io.Reader, rc *registryCredentials, first chan<- struct{}, log *slog.Logger) {
	defer func() {
		if first != nil {
			close(first)
		}
	}()
	br := bufio.NewReaderSize(stdin, 4096)
	for n := 1; ; n++ {
		line, err := readCredentialLine(br)
		if errors.Is(err, io.EOF) {
			err = errors.New("executor credential stream closed")
		}
		var tok string
		if err == nil {
			tok, err = parseCredentialFrame(line, c.environmentID, time.Now())
		}
		if err != nil {
			rc.fail(fmt.Errorf("--executor-credential-stdin: %w", err))
			return
		}
		rc.setToken(tok)
		if first != nil {
			close(first)
			first = nil
		} else {
			log.Info("registry credential rotated", "frame", n)
		}
	}
}

// backoffPolicy shapes retry delays; tests shrink it.
type backoffPolicy struct {
	initial, max, retryAfterCap time.Duration
}

// backoff yields exponentially growing delays with "equal jitter" (half fixed, half random),
// which spreads a fleet of executors reconnecting after a rendezvous restart.
type backoff struct {
	p       backoffPolicy
	attempt int
}

// next returns the next delay; floor (a Retry-After) raises it, capped at retryAfterCap.
func (b *backoff) next(floor time.Duration) time.Duration {
	d := b.p.max
	if b.attempt < 30 && b.p.initial<<b.attempt < b.p.max {
		d = b.p.initial << b.attempt
	}
	b.attempt++
	if half := d / 2; half > 0 {
		d = half + rand.N(half+1)
	}
	return max(d, min(floor, b.p.retryAfterCap))
}

func (b *backoff) reset() { b.attempt = 0 }

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// registryError is a failed registry call.
type registryError struct {
	op         string // "register", "validate"
	status     int    // 0: no HTTP answer
	detail     string // registry error code and message, or what was wrong
	retryAfter time.Duration
	permanent  bool
	err        error
}

func (e *registryError) Error() string {
	var b strings.Builder
	b.WriteString("registry " + e.op)
	if e.status != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.status)
	}
	if e.detail != "" {
		b.WriteString(": " + e.detail)
	}
	if e.err != nil {
		b.WriteString(": " + e.err.Error())
	}
	return b.String()
}

func (e *registryError) Unwrap() error { return e.err }

// registration is a successful register response.
type registration struct {
	environmentID  string
	url            string // rendezvous websocket URL; it carries its own credential
	registrationID string
}

// registryClient talks to the registry. It follows no redirects and never logs tokens,
// keys or payloads.
type registryClient struct {
	base  string // --remote without the trailing "/"
	envID string
	creds *registryCredentials
	http  *http.Client
	log   *slog.Logger
}

func newRegistryClient(cfg *remoteConfig, creds *registryCredentials, log *slog.Logger) *registryClient {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		TLSClientConfig:       cfg.tlsConfig(),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   registryRequestTimeout,
		ResponseHeaderTimeout: registryRequestTimeout,
		DisableCompression:    true, // no Accept-Encoding: gzip, as 0.169 sends none
	}
	return &registryClient{
		base:  cfg.base,
		envID: cfg.environmentID,
		creds: creds,
		log:   log,
		http: &http.Client{
			Transport:     tr,
			Timeout:       registryRequestTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

func (c *registryClient) close() { c.http.CloseIdleConnections() }

// post sends one JSON request and reads at most registryMaxResponse bytes of the answer.
func (c *registryClient) post(ctx context.Context, op string, body any, header http.Header) (*http.Response, []byte, error) {
	bearer, err := c.creds.bearer()
	if err != nil {
		return nil, nil, &registryError{op: op, permanent: true, err: err}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, nil, &registryError{op: op, permanent: true, err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/cloud/environment/"+c.envID+"/"+op, bytes.NewReader(b))
	if err != nil {
		return nil, nil, &registryError{op: op, permanent: true, err: err}
	}
	req.Header = header
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "*/*")
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header["User-Agent"] = []string{""} // 0.169 sends none
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, &registryError{op: op, err: redactURLError(err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, registryMaxResponse+1))
	if err != nil {
		return nil, nil, &registryError{op: op, status: resp.StatusCode, err: redactURLError(err)}
	}
	if len(data) > registryMaxResponse {
		return nil, nil, &registryError{op: op, status: resp.StatusCode, permanent: true, detail: fmt.Sprintf("response larger than %d bytes", registryMaxResponse)}
	}
	return resp, data, nil
}

// redactURLError drops the URL from a *url.Error: the message keeps the cause only.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// statusError classifies a non-2xx answer as transient or permanent (docs/remote.md §2.4).
func statusError(op string, resp *http.Response, body []byte) *registryError {
	e := &registryError{op: op, status: resp.StatusCode}
	switch s := resp.StatusCode; {
	case s >= 300 && s < 400:
		e.permanent = true
		e.detail = "redirect to " + strconv.Quote(resp.Header.Get("Location")) + " not followed"
		return e
	case s == http.StatusRequestTimeout, s == http.StatusConflict, s == http.StatusTooEarly,
		s == http.StatusTooManyRequests, s >= 500:
		e.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	default:
		e.permanent = true
	}
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		e.detail = registryErrorText(body)
	} else {
		e.detail = "response body omitted"
	}
	return e
}

// registryErrorText renders {"error":{"code":…,"message":…}} for logs: bounded, one line.
func registryErrorText(body []byte) string {
	var v struct {
		Error struct {
			Code    json.RawMessage `json:"code"`
			Message string          `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	code := strings.Trim(string(v.Error.Code), `"`)
	text := strings.TrimSpace(code + " " + v.Error.Message)
	text = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, text)
	if len(text) > registryMaxErrorText {
		text = text[:registryMaxErrorText] + "…"
	}
	return text
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 if absent or invalid.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// register performs one registration attempt (docs/remote.md §2.2).
func (c *registryClient) register(ctx context.Context, key *noisePublicKey) (*registration, error) {
	body := struct {
		SecurityProfile   string          `json:"security_profile"`
		ExecutorPublicKey *noisePublicKey `json:"executor_public_key"`
	}{registrySecurityProfile, key}
	resp, data, err := c.post(ctx, "register", body, http.Header{})
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, statusError("register", resp, data)
	}
	bad := func(format string, a ...any) error {
		return &registryError{op: "register", status: resp.StatusCode, permanent: true, detail: "invalid registration response: " + fmt.Sprintf(format, a...)}
	}
	var v struct {
		EnvironmentID   *string `json:"environment_id"`
		URL             *string `json:"url"`
		SecurityProfile *string `json:"security_profile"`
		RegistrationID  *string `json:"executor_registration_id"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, bad("not a JSON object with string fields")
	}
	switch {
	case v.EnvironmentID == nil || v.URL == nil || v.SecurityProfile == nil || v.RegistrationID == nil:
		return nil, bad("environment_id, url, security_profile and executor_registration_id are required")
	case *v.EnvironmentID != c.envID:
		return nil, bad("the registry returned a different environment id %q", *v.EnvironmentID)
	case *v.SecurityProfile != registrySecurityProfile:
		return nil, bad("unsupported security profile %q", *v.SecurityProfile)
	}
	if _, err := parseRemoteURL(*v.URL, "wss", "ws"); err != nil {
		return nil, bad("rendezvous url %s", err)
	}
	return &registration{environmentID: *v.EnvironmentID, url: *v.URL, registrationID: *v.RegistrationID}, nil
}

// registerWithRetry registers until it succeeds, retrying transient failures for ever.
func (c *registryClient) registerWithRetry(ctx context.Context, key *noisePublicKey, bo *backoff) (*registration, error) {
	for attempt := 1; ; attempt++ {
		c.log.Info("registering with the registry", "environment_id", c.envID, "attempt", attempt)
		reg, err := c.register(ctx, key)
		if err == nil {
			c.log.Info("registered", "environment_id", c.envID, "attempt", attempt)
			return reg, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var re *registryError
		if !errors.As(err, &re) || re.permanent {
			return nil, err
		}
		d := bo.next(re.retryAfter)
		c.log.Info("registration failed; retrying", "error", err.Error(), "retry_in", d.Round(time.Millisecond))
		if err := sleepCtx(ctx, d); err != nil {
			return nil, err
		}
	}
}

// validateOutcome is the registry's verdict on one harness handshake (docs/remote.md §2.3).
type validateOutcome int

const (
	validateAccepted            validateOutcome = iota // 200 {"valid":true}: answer msg2
	validateRejected                                   // 200 {"valid":false} or 403: reset
	validateFailed                                     // any other answer or no answer: reset
	validateCredentialsRejected                        // 401: msg2 with the rejection payload
)

// validate asks whether a harness key and its authorization may open streamID.
func (c *registryClient) validate(ctx context.Context, registrationID, streamID string, harness *noisePublicKey, authorization []byte) (validateOutcome, error) {
	body := struct {
		RegistrationID string          `json:"executor_registration_id"`
		HarnessKey     *noisePublicKey `json:"harness_public_key"`
		Authorization  string          `json:"harness_key_authorization"`
	}{registrationID, harness, string(authorization)}
	resp, data, err := c.post(ctx, "validate", body, http.Header{registryStreamIDHeader: {streamID}})
	if err != nil {
		return validateFailed, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		return validateCredentialsRejected, statusError("validate", resp, data)
	case http.StatusForbidden:
		return validateRejected, statusError("validate", resp, data)
	default:
		return validateFailed, statusError("validate", resp, data)
	}
	var v struct {
		Valid *bool `json:"valid"`
	}
	if json.Unmarshal(data, &v) != nil || v.Valid == nil {
		return validateFailed, &registryError{op: "validate", status: resp.StatusCode, detail: `response is not {"valid":bool}`}
	}
	if !*v.Valid {
		return validateRejected, &registryError{op: "validate", status: resp.StatusCode, detail: "valid:false"}
	}
	return validateAccepted, nil
}
