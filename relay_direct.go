package main

// Remote mode's direct transport, --remote-transport direct --aws-sigv4 (docs/remote.md §10):
// register with the registry's direct endpoint, open the websocket it names with a
// SigV4-signed upgrade, and serve plain exec-server JSON-RPC on it, one text message per
// message, exactly like a local websocket connection. There are no relay frames and no Noise:
// TLS alone protects the socket, and the peer is the JSON-RPC client.
//
//	POST {base}/cloud/environment/{id}/direct/register
//	  headers  Content-Type: application/json, X-Amz-Date,
//	           Authorization: AWS4-HMAC-SHA256 Credential=…/execute-api/aws4_request,
//	           SignedHeaders=content-type;host;x-amz-date, Signature=…
//	           (X-Amz-Security-Token, signed too, with temporary keys)
//	  body     {"transport":"direct_jsonrpc_v1"}
//	  200      {"environment_id":<id>,"transport":"direct_jsonrpc_v1","registration_id":<non-empty>,
//	            "url":<wss://, or ws:// on loopback>}      anything else is a permanent failure
//	GET {url}  the websocket upgrade: X-Amz-Date, Authorization with SignedHeaders=host;x-amz-date
//
// The loop:
//
//	register            transient failures retried for ever, permanent ones fatal (as remote_registry.go)
//	upgrade refused     409: register again; 408, 425, 429, 5xx: the same URL again; other 4xx: fatal
//	no answer, dropped  the same URL again, signed afresh
//	between attempts    the backoff of the relay (remote_registry.go), reset by a socket that stayed up
//
// The URL may carry a credential in its query, so it is never logged whole (scrubURL).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

const (
	directTransportName = "direct_jsonrpc_v1"
	directParsePrefixFm = "failed to parse JSON-RPC message from exec-server direct transport %s"
)

// directRegistration is a successful direct register response.
type directRegistration struct {
	url            string
	registrationID string
}

// directExecutor keeps the executor registered and connected over the direct transport.
type directExecutor struct {
	cfg     *remoteConfig
	reg     *registryClient // its HTTP client and response reading; no registry credential
	timings relayTimings
	srv     *server
	log     *logger
	now     func() time.Time
}

// runDirect serves srv over the direct transport until ctx ends (nil) or a permanent failure.
func runDirect(ctx context.Context, cfg *remoteConfig, srv *server, log *logger) error {
	x := &directExecutor{cfg: cfg, reg: newRegistryClient(cfg, nil, log), timings: cfg.relayTimings(), srv: srv, log: log, now: time.Now}
	defer x.reg.close()
	log.Info("remote mode", "transport", remoteTransportDirect, "registry", cfg.base, "environment_id", cfg.environmentID,
		"name", cfg.name, "aws_credentials", cfg.aws.CredentialSource, "aws_region", cfg.aws.Region, "aws_service", x.service())
	return quietCancel(ctx, x.run(ctx))
}

func (x *directExecutor) service() string {
	if x.cfg.awsService != "" {
		return x.cfg.awsService
	}
	return defaultAWSService
}

// sign adds X-Amz-Date and the SigV4 Authorization to req for body.
func (x *directExecutor) sign(req *http.Request, body []byte) error {
	a := x.cfg.aws
	if err := signSigV4(req, body, a.Credentials, a.Region, x.service(), x.now()); err != nil {
		return fmt.Errorf("signing with AWS SigV4: %w", err)
	}
	return nil
}

func (x *directExecutor) run(ctx context.Context) error {
	bo := &backoff{p: x.timings.backoff}
	reg, err := x.registerWithRetry(ctx, bo)
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		ws, resp, err := x.dial(ctx, reg, attempt)
		var floor time.Duration // a Retry-After on a refused upgrade
		switch {
		case ctx.Err() != nil:
			if ws != nil {
				ws.closeTCP()
			}
			return nil
		case err == nil:
			start := time.Now()
			x.log.Info("connected to the direct endpoint", "connection_attempt", attempt)
			x.serve(ctx, ws)
			x.log.Info("direct connection ended", "connection_attempt", attempt)
			if time.Since(start) >= x.timings.stableConnection {
				bo.reset()
			}
		case resp != nil && resp.StatusCode == http.StatusConflict:
			x.log.Info("the direct endpoint refused the connection with 409; registering again")
			floor = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
			if reg, err = x.registerWithRetry(ctx, bo); err != nil {
				return err
			}
		case resp != nil && directUpgradeFatal(resp.StatusCode):
			return fmt.Errorf("direct transport: the websocket upgrade was refused: HTTP %s", resp.Status)
		default:
			x.log.Info("direct connection failed", "connection_attempt", attempt, "error", scrubURL(err, reg.url))
			if resp != nil {
				floor = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
			}
		}
		d := bo.next(floor)
		x.log.Info("reconnecting to the direct endpoint", "retry_in", d.Round(time.Millisecond))
		if sleepCtx(ctx, d) != nil {
			return nil
		}
	}
}

// directUpgradeFatal reports whether a refused upgrade ends remote mode: a 4xx but 408, 409
// (handled by registering again), 425 and 429.
func directUpgradeFatal(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status >= 400 && status < 500
}

// serve runs JSON-RPC on the socket until it ends or ctx does.
func (x *directExecutor) serve(ctx context.Context, ws *wsConn) {
	stop := context.AfterFunc(ctx, func() { ws.closeWith(wsCloseGoingAway, "") })
	defer stop()
	x.srv.conns.Add(1)
	defer x.srv.conns.Done()
	x.srv.serveConn(ws, fmt.Sprintf(directParsePrefixFm, ws.peer()))
}

// dial opens the websocket with a freshly signed upgrade, within the dial timeout. On a
// refused upgrade it returns the response, whose status decides what next.
func (x *directExecutor) dial(ctx context.Context, reg *directRegistration, attempt int) (*wsConn, *http.Response, error) {
	x.log.Info("connecting to the direct endpoint", "connection_attempt", attempt)
	u, err := url.Parse(reg.url)
	if err != nil {
		return nil, nil, errors.New("direct transport: the registered url does not parse")
	}
	// The registry names the endpoint, and the upgrade carries our SigV4 headers: the
	// rendezvous address rule applies (docs/remote.md §3).
	if err := rendezvousHostAllowed(u.Hostname(), x.reg.reached); err != nil {
		return nil, nil, err
	}
	req := &http.Request{Method: http.MethodGet, URL: u, Host: u.Host, Header: http.Header{}}
	if err := x.sign(req, nil); err != nil {
		return nil, nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, x.timings.dialTimeout)
	defer cancel()
	// 0.169 writes the signature's headers in this order.
	var extra []upgradeHeader
	for _, name := range []string{"X-Amz-Security-Token", "Authorization", "X-Amz-Date"} {
		if v := req.Header.Get(name); v != "" {
			extra = append(extra, upgradeHeader{name, v})
		}
	}
	return dialWebsocket(dctx, reg.url, extra, x.cfg.tlsConfig(), wsOptions{
		proxy:        x.cfg.proxy,
		control:      rendezvousControl(x.reg.reached, u.Scheme == "ws"),
		pingInterval: x.timings.pingInterval,
		pongTimeout:  x.timings.pongTimeout,
	})
}

// registerWithRetry registers until it succeeds, retrying transient failures for ever.
func (x *directExecutor) registerWithRetry(ctx context.Context, bo *backoff) (*directRegistration, error) {
	return retryRegistration(ctx, x.log, x.cfg.environmentID, bo, func() (*directRegistration, error) { return x.register(ctx) })
}

// register performs one direct registration.
func (x *directExecutor) register(ctx context.Context) (*directRegistration, error) {
	const op = "direct register"
	body := []byte(`{"transport":"` + directTransportName + `"}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, x.cfg.base+"/cloud/environment/"+x.cfg.environmentID+"/direct/register", bytes.NewReader(body))
	if err != nil {
		return nil, &registryError{op: op, permanent: true, err: redactURLError(err)}
	}
	req.Header.Set("Content-Type", "application/json")
	if err := x.sign(req, body); err != nil {
		return nil, &registryError{op: op, permanent: true, err: err}
	}
	req.Header.Set("Accept", "*/*")         // unsigned, as 0.169 sends it
	req.Header["User-Agent"] = []string{""} // unsigned; none is sent
	resp, data, err := x.reg.do(req, op)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, statusError(op, resp, data)
	}
	bad := func(format string, a ...any) error {
		return &registryError{op: op, status: resp.StatusCode, permanent: true, detail: "invalid registration response: " + fmt.Sprintf(format, a...)}
	}
	var v struct {
		EnvironmentID  *string `json:"environment_id"`
		Transport      *string `json:"transport"`
		RegistrationID *string `json:"registration_id"`
		URL            *string `json:"url"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, bad("not a JSON object with string fields")
	}
	switch {
	case v.EnvironmentID == nil || v.Transport == nil || v.RegistrationID == nil || v.URL == nil:
		return nil, bad("environment_id, transport, registration_id and url are required")
	case *v.EnvironmentID != x.cfg.environmentID:
		return nil, bad("the registry returned a different environment id %q", *v.EnvironmentID)
	case *v.Transport != directTransportName:
		return nil, bad("unsupported transport %q", *v.Transport)
	case *v.RegistrationID == "":
		return nil, bad("empty registration_id")
	}
	u, err := parseRemoteURL(*v.URL, "wss", "ws")
	if err != nil {
		return nil, bad("url %s", err)
	}
	// Checked here, once: a query that cannot be signed would fail every dial after.
	if _, err := sigv4CanonicalQuery(u.RawQuery); err != nil {
		return nil, bad("url: its query does not decode")
	}
	return &directRegistration{url: *v.URL, registrationID: *v.RegistrationID}, nil
}
