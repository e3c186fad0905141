package main

// Remote mode's registry credentials (docs/remote.md §8): which source the command line chose
// (CODEX_API_KEY, the Codex sign-in in $CODEX_HOME/auth.json, --registration-bearer-stdin, the
// rotating frames of --executor-credential-stdin, --chatgpt-token-stdin,
// --use-agent-identity-auth, or AWS SigV4 for the direct transport), and the
// registryCredentials whose headers register and validate send.

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
	"strings"
	"sync"
	"time"
)

// Credential limits (docs/remote.md §8).
const (
	credentialMaxLine        = 16 << 10 // a bearer line or a credential frame
	credentialVersion        = 1
	credentialInitialTimeout = 30 * time.Second // wait for the first --executor-credential-stdin frame
)

// Remote transports (--remote-transport).
const (
	remoteTransportNoise  = "noise"  // the rendezvous relay, Noise inside (relay*.go)
	remoteTransportDirect = "direct" // JSON-RPC over a SigV4-signed websocket (relay_direct.go)
)

// credentialMode is the registry credential the command line chose (docs/remote.md §8).
type credentialMode int

const (
	credAPIKeyEnv      credentialMode = iota // CODEX_API_KEY
	credCodexLogin                           // $CODEX_HOME/auth.json: API key or ChatGPT tokens
	credBearerStdin                          // --registration-bearer-stdin
	credExecutorFrames                       // --executor-credential-stdin
	credChatGPTStdin                         // --chatgpt-token-stdin [--chatgpt-account-id]
	credAgentIdentity                        // --use-agent-identity-auth + CODEX_ACCESS_TOKEN
	credSigV4                                // --aws-sigv4 (direct transport)
)

func (c *remoteConfig) env(name string) (string, bool) {
	if c.lookupEnv == nil {
		return os.LookupEnv(name)
	}
	return c.lookupEnv(name)
}

// chooseTransport checks --remote-transport and the flags that go with one transport only.
func (c *remoteConfig) chooseTransport() error {
	switch c.transport {
	case "", remoteTransportNoise:
		c.transport = remoteTransportNoise
	case remoteTransportDirect:
	default:
		return fmt.Errorf("--remote-transport %q: want noise or direct", c.transport)
	}
	if !c.awsSigV4 && (c.awsProfile != "" || c.awsRegion != "" || c.awsService != "") {
		return errors.New("--aws-profile, --aws-region and --aws-service need --aws-sigv4")
	}
	switch {
	case c.direct() && c.executorCredStdin:
		return errors.New("direct transport does not support scoped executor credentials (--executor-credential-stdin)")
	case c.direct() && !c.awsSigV4:
		return errors.New("--remote-transport direct requires --aws-sigv4")
	case !c.direct() && c.awsSigV4:
		return errors.New("--aws-sigv4 requires --remote-transport direct")
	case c.direct() && c.identityFile != "":
		return errors.New("--identity is the Noise identity of the relay; --remote-transport direct has none")
	case c.direct() && c.forward != nil:
		return errors.New("direct exec-server transport does not support forwarding")
	}
	return nil
}

// chooseCredential picks the one registry credential the flags name, else CODEX_API_KEY, else
// the Codex sign-in, and checks what can be checked before anything is read or sent.
func (c *remoteConfig) chooseCredential(u *url.URL) error {
	sources := []struct {
		on   bool
		name string
		mode credentialMode
	}{
		{c.bearerStdin, "--registration-bearer-stdin", credBearerStdin},
		{c.executorCredStdin, "--executor-credential-stdin", credExecutorFrames},
		{c.chatGPTTokenStdin, "--chatgpt-token-stdin", credChatGPTStdin},
		{c.useAgentIdentity, "--use-agent-identity-auth", credAgentIdentity},
		{c.awsSigV4, "--aws-sigv4", credSigV4},
	}
	var chosen []string
	c.credMode = credCodexLogin
	for _, s := range sources {
		if s.on {
			chosen = append(chosen, s.name)
			c.credMode = s.mode
		}
	}
	if len(chosen) > 1 {
		return fmt.Errorf("%s and %s cannot be combined: give one registry credential", chosen[0], chosen[1])
	}
	if c.chatGPTAccountID != "" && !c.chatGPTTokenStdin {
		return errors.New("--chatgpt-account-id needs --chatgpt-token-stdin")
	}
	switch c.credMode {
	case credChatGPTStdin:
		if err := checkChatGPTTokenRegistryURL(u); err != nil {
			return err
		}
		if c.chatGPTAccountID != "" && !validChatGPTAccountID(c.chatGPTAccountID) {
			return errors.New("--chatgpt-account-id: invalid ChatGPT account ID")
		}
	case credAgentIdentity:
		jwt, err := readCodexAccessToken(c.env)
		if err != nil {
			return err
		}
		c.agentJWT = jwt
	case credSigV4:
		cfg, err := loadAWSConfig(c.awsProfile, c.awsRegion, c.env)
		if err != nil {
			return fmt.Errorf("--aws-sigv4: %w", err)
		}
		c.aws = cfg
	case credCodexLogin:
		if ok, err := c.useAPIKey(u); ok || err != nil {
			return err
		}
		home, err := codexHomeDir(c.env)
		if err != nil {
			return err
		}
		c.codexHome = home
	}
	return nil
}

// useAPIKey takes CODEX_API_KEY when it is set, which 0.169 sends only to OpenAI hosts or
// loopback.
func (c *remoteConfig) useAPIKey(u *url.URL) (bool, error) {
	c.apiKey, _ = c.env("CODEX_API_KEY")
	if c.apiKey == "" {
		return false, nil
	}
	c.credMode = credAPIKeyEnv
	if !apiKeyHostAllowed(u) {
		return true, fmt.Errorf("CODEX_API_KEY is only sent to HTTPS openai.com or openai.org registries or to loopback, not %s; use --registration-bearer-stdin", u.Host)
	}
	if err := checkBearer(c.apiKey); err != nil {
		return true, fmt.Errorf("CODEX_API_KEY: %v", err)
	}
	return true, nil
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

// registryCredentials is the registry credential of register and validate: a bearer token
// (CODEX_API_KEY and the stdin flags) or a registryAuth (the Codex sign-in, a ChatGPT token,
// Agent Identity). With --executor-credential-stdin the token rotates as frames arrive, and
// dead is closed (err set) when the stream ends or a frame is invalid: 0.169 exits then, and
// so do we.
type registryCredentials struct {
	source string       // the flag or variable it came from, for errors
	auth   registryAuth // nil: Authorization: Bearer token

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

// headers implements registryAuth: the credential headers of one request.
func (rc *registryCredentials) headers(ctx context.Context) (http.Header, error) {
	tok, err := rc.bearer()
	if err != nil {
		return nil, err
	}
	if rc.auth != nil {
		return rc.auth.headers(ctx)
	}
	return http.Header{"Authorization": {"Bearer " + tok}}, nil
}

// onUnauthorized implements registryAuth. A bearer handed over on stdin cannot be renewed
// here; a rotating one is renewed by its writer, and the next request sends the new one.
func (rc *registryCredentials) onUnauthorized(ctx context.Context, rejected http.Header) error {
	if rc.auth != nil {
		return rc.auth.onUnauthorized(ctx, rejected)
	}
	return fmt.Errorf("the registry rejected the %s credential", rc.source)
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

// startCredentials reads the credential source chosen by validate: a line or frames from
// stdin, the Codex sign-in from auth.json, or the Agent Identity task (a network round trip).
func (c *remoteConfig) startCredentials(ctx context.Context, stdin io.Reader, log *logger) (*registryCredentials, error) {
	rc := &registryCredentials{dead: make(chan struct{})}
	switch c.credMode {
	case credBearerStdin:
		rc.source = "--registration-bearer-stdin"
		line, err := readCredentialLine(bufio.NewReaderSize(stdin, 4096))
		if err != nil {
			return nil, fmt.Errorf("--registration-bearer-stdin: reading the token: %w", err)
		}
		if err := checkBearer(string(line)); err != nil {
			return nil, fmt.Errorf("--registration-bearer-stdin: %w", err)
		}
		rc.token = string(line)
	case credExecutorFrames:
		rc.source = "--executor-credential-stdin"
		if err := c.startCredentialFrames(ctx, stdin, rc, log); err != nil {
			return nil, err
		}
	case credChatGPTStdin:
		rc.source = "--chatgpt-token-stdin"
		if f, ok := stdin.(*os.File); ok {
			fi, err := f.Stat()
			if err != nil {
				return nil, fmt.Errorf("--chatgpt-token-stdin: %w", err)
			}
			if err := checkChatGPTTokenStdin(fi); err != nil {
				return nil, err
			}
		}
		tok, err := readChatGPTToken(stdin)
		if err != nil {
			return nil, err
		}
		if rc.auth, err = newChatGPTTokenAuth(tok, c.chatGPTAccountID); err != nil {
			return nil, err
		}
	case credAgentIdentity:
		rc.source = "--use-agent-identity-auth"
		auth, err := newAgentIdentityAuth(ctx, c.agentJWT, agentIdentityOptions{client: c.authHTTPClient(), lookupEnv: c.env})
		if err != nil {
			return nil, fmt.Errorf("--use-agent-identity-auth: %w", err)
		}
		rc.auth = auth
	case credCodexLogin:
		rc.source = "Codex sign-in"
		client := c.authHTTPClient()
		client.Timeout = codexRefreshTimeout
		login, err := loadCodexLogin(c.codexHome, client, nil)
		if err != nil {
			return nil, err
		}
		if login.apiKeyMode() && !apiKeyHostAllowed(c.baseURL) {
			return nil, fmt.Errorf("the API key of the Codex sign-in is only sent to HTTPS openai.com or openai.org registries or to loopback, not %s", c.baseURL.Host)
		}
		rc.auth = login
	case credSigV4:
		return nil, errors.New("--aws-sigv4 signs the direct transport's requests; it is no registry bearer")
	default:
		rc.source = "CODEX_API_KEY"
		rc.token = c.apiKey
	}
	return rc, nil
}

// authHTTPClient is the client of the Agent Identity start-up calls: the proxy and CAs of the
// registry client, no redirects followed.
func (c *remoteConfig) authHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               c.proxy,
			TLSClientConfig:     c.tlsConfig(),
			TLSHandshakeTimeout: registryRequestTimeout,
			// Accept-Encoding: gzip, as the registry client (registryClient).
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// startCredentialFrames starts the reader of --executor-credential-stdin and waits for its
// first frame, as 0.169 does (docs/remote.md §8). The reader cannot be interrupted while blocked
// in Read, so it lives as long as stdin.
func (c *remoteConfig) startCredentialFrames(ctx context.Context, stdin io.Reader, rc *registryCredentials, log *logger) error {
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
func (c *remoteConfig) readCredentialFrames(stdin io.Reader, rc *registryCredentials, first chan<- struct{}, log *logger) {
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
