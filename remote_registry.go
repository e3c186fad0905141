package main

// Remote mode: the registry HTTP client, its errors and the retry backoff (docs/remote.md §2).
// The rest of remote mode is remote_config.go (command line), remote_credentials.go (the
// bearer), relay.go (wire format), relay_executor.go (register, dial, reconnect) and
// relay_demux.go (streams).
//
// Registry API (docs/remote.md §2.1–§2.3), JSON over HTTPS, base URL = --remote without a trailing
// "/", environment id checked against [A-Za-z0-9_-]{1,256} before it is pasted into the path:
//
//	POST {base}/cloud/environment/{id}/register
//	  headers  content-type: application/json, accept: */*, and the credential's (docs/remote.md §8):
//	           authorization: Bearer <token>, or the ChatGPT or Agent Identity set
//	           (authorization, chatgpt-account-id, x-openai-fedramp)
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
// A 401 on either call asks the credential to recover once (a Codex sign-in refreshes its
// token) and, if it did, sends the request once more; a second 401 is final.
//
// Which failures are retried, and how (unlike 0.169, a first registration that fails is
// retried too): docs/remote.md §2.4, §9.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Registry constants (docs/remote.md §2, §2.4).
const (
	registrySecurityProfile   = "noise_hybrid_ik_v1"
	registryRequestTimeout    = 10 * time.Second // per request, as 0.169
	registryMaxResponse       = 1 << 20          // bytes of response body read
	registryMaxErrorText      = 200              // bytes of a registry error message kept for logs
	registryStreamIDHeader    = "X-Codex-Noise-Stream-Id"
	backoffInitial            = time.Second // 0.169: ~0.6–0.9 s, then ~1.4–2 s
	backoffMax                = time.Minute
	backoffRetryAfterCap      = 5 * time.Minute // Retry-After is honoured up to this
	backoffStableConnection   = time.Minute     // a socket up this long resets the backoff
	rendezvousRequestIDPrefix = "req_"
)

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
	reached *addrClassSet // where the registry was reached: by address class
	base    string        // --remote without the trailing "/"
	envID   string
	creds   *registryCredentials
	http    *http.Client
	log     *logger
}

func newRegistryClient(cfg *remoteConfig, creds *registryCredentials, log *logger) *registryClient {
	reached := new(addrClassSet)
	// Through a proxy the dial below reaches the proxy, whose address says nothing of the
	// registry's network: a proxy on loopback would let a registry anywhere hand out
	// loopback rendezvous URLs. A registry behind a proxy counts as public, unless --remote
	// names an address.
	viaProxy := false
	if req, err := http.NewRequest(http.MethodPost, cfg.base, nil); err == nil && cfg.proxy != nil {
		if pu, _ := cfg.proxy(req); pu != nil {
			viaProxy = true
			if a, err := netip.ParseAddr(req.URL.Hostname()); err == nil {
				reached.add(classifyAddr(a))
			}
		}
	}
	var d net.Dialer
	tr := &http.Transport{
		// The classes of the addresses the registry was reached at decide which rendezvous
		// addresses are allowed (rendezvousAddrAllowed).
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err == nil && !viaProxy {
				if ap, perr := netip.ParseAddrPort(conn.RemoteAddr().String()); perr == nil {
					reached.add(classifyAddr(ap.Addr()))
				}
			}
			return conn, err
		},
		Proxy:                 cfg.proxy,
		TLSClientConfig:       cfg.tlsConfig(),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   registryRequestTimeout,
		ResponseHeaderTimeout: registryRequestTimeout,
		// Accept-Encoding: gzip, answered bodies decoded. Codex 0.171 offers "zstd,gzip"; the
		// standard library decodes gzip only (docs/protocol.md §12).
	}
	return &registryClient{
		reached: reached,
		base:    cfg.base,
		envID:   cfg.environmentID,
		creds:   creds,
		log:     log,
		http: &http.Client{
			Transport:     tr,
			Timeout:       registryRequestTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

func (c *registryClient) close() { c.http.CloseIdleConnections() }

// post sends one JSON request and reads at most registryMaxResponse bytes of the answer. A 401
// asks the credential to recover once and, if it did, sends the request once more; when it
// cannot, the error says why (status 401), and the answer is not returned.
func (c *registryClient) post(ctx context.Context, op string, body any, header http.Header) (*http.Response, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, nil, &registryError{op: op, permanent: true, err: err}
	}
	resp, data, auth, err := c.send(ctx, op, b, header)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, data, err
	}
	if uerr := c.creds.onUnauthorized(ctx, auth); uerr != nil {
		return nil, nil, &registryError{op: op, status: resp.StatusCode, permanent: authErrorPermanent(uerr),
			detail: "response body omitted", err: uerr}
	}
	c.log.Info("registry credential renewed after a 401; sending again", "op", op)
	resp, data, _, err = c.send(ctx, op, b, header)
	return resp, data, err
}

// send is one attempt of post. It also returns the credential headers it sent, for
// onUnauthorized.
func (c *registryClient) send(ctx context.Context, op string, b []byte, extra http.Header) (*http.Response, []byte, http.Header, error) {
	auth, err := c.creds.headers(ctx)
	if err != nil {
		return nil, nil, nil, &registryError{op: op, permanent: authErrorPermanent(err), err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/cloud/environment/"+c.envID+"/"+op, bytes.NewReader(b))
	if err != nil {
		return nil, nil, nil, &registryError{op: op, permanent: true, err: err}
	}
	req.Header = extra.Clone()
	for k, v := range auth {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "*/*")
	req.Header["User-Agent"] = []string{""} // 0.169 sends none
	resp, data, err := c.do(req, op)
	return resp, data, auth, err
}

// do sends req and reads at most registryMaxResponse bytes of the answer.
func (c *registryClient) do(req *http.Request, op string) (*http.Response, []byte, error) {
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

// authErrorPermanent reports whether a credential failure needs the user: a Codex token
// refresh that failed for a network error or a 5xx may work later; everything else is final.
func authErrorPermanent(err error) bool {
	var p interface{ Permanent() bool }
	if errors.As(err, &p) {
		return p.Permanent()
	}
	return true
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
	return retryRegistration(ctx, c.log, c.envID, bo, func() (*registration, error) { return c.register(ctx, key) })
}

// retryRegistration calls register until it succeeds, a permanent registryError, or ctx
// ends, spacing attempts with bo: the registration loop of both transports.
func retryRegistration[T any](ctx context.Context, log *logger, envID string, bo *backoff, register func() (T, error)) (T, error) {
	var zero T
	for attempt := 1; ; attempt++ {
		log.Info("registering with the registry", "environment_id", envID, "attempt", attempt)
		reg, err := register()
		if err == nil {
			log.Info("registered", "environment_id", envID, "attempt", attempt)
			return reg, nil
		}
		if ctx.Err() != nil {
			return zero, ctx.Err()
		}
		var re *registryError
		if !errors.As(err, &re) || re.permanent {
			return zero, err
		}
		d := bo.next(re.retryAfter)
		log.Info("registration failed; retrying", "error", err.Error(), "retry_in", d.Round(time.Millisecond))
		if err := sleepCtx(ctx, d); err != nil {
			return zero, err
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
	var re *registryError
	switch {
	case errors.As(err, &re) && re.status == http.StatusUnauthorized:
		return validateCredentialsRejected, err
	case err != nil:
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
