package main

// Remote mode's registry credentials (docs/remote.md §8): where the bearer comes from
// (CODEX_API_KEY, --registration-bearer-stdin, or the rotating frames of
// --executor-credential-stdin) and the registryCredentials that register and validate read.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
