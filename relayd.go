package main

// `exec-server relay`: a self-hosted registry and rendezvous (docs/remote.md "Self-hosted
// relay"). This file holds the command line, the configuration file, the credentials and who
// may do what, and the HTTP server with its TLS and listen rules; relayd_conns.go admits its
// connections, relayd_registry.go answers register, validate and connect, and
// relayd_rendezvous.go forwards the frames of the rendezvous websockets.
//
// The relay never holds a Noise key: it stores the executor's public key as registered, hands
// it to harnesses, and vouches for (harness key, authorization) pairs when the executor asks;
// the frames it forwards are routed on their stream id and kind, and their payloads pass
// through unread, so everything it carries past the handshake is ciphertext.
//
// Its only state is in memory: the registrations and the streams of each environment. A
// restarted relay answers the executor's reconnect with unknown_route, and the executor
// registers again (docs/remote.md §2.4). The environment id → node mapping is one function
// (relayd.place): several nodes share a fleet by rendezvous hashing over a peer list
// (relayd_fleet.go).

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Limits of the relay (docs/remote.md "Self-hosted relay"). Those a deployment may want to
// size differently (relaydDefault…, and the two timeouts) are defaults of the configuration
// file; the others are fixed.
const (
	// relaydMaxFrame bounds one websocket message, one relay frame: the rendezvous cap of
	// docs/remote.md §3. A bigger message closes the socket that sent it (1009).
	relaydMaxFrame = relayMaxMessage
	// relaydDefaultStreamsPerEnvironment bounds the streams of one environment that the
	// executor has answered, all its harness sockets together: the executor's own limit per
	// socket.
	relaydDefaultStreamsPerEnvironment = relayMaxActiveStreams
	// relaydDefaultConnectionsPerToken bounds the harness sockets open at once under one
	// credential (the token that asked for their connect bundles). Executor sockets are not
	// counted: one per registration, which relaydDefaultRegistrationsPerToken bounds.
	relaydDefaultConnectionsPerToken = 256
	// relaydMaxLimit caps what the configuration file may raise any of its limits to.
	relaydMaxLimit = 1 << 16
	// relaydMaxSockets bounds the rendezvous sockets of the whole relay, and
	// relaydMaxEnvironments its registrations: the memory a relay can be made to hold.
	relaydMaxSockets      = 1 << 14
	relaydMaxEnvironments = 1 << 14
	// relaydDefaultRegistrationsPerToken bounds the registrations one credential holds (a
	// default of the configuration file), so that one token cannot take every one of
	// relaydMaxEnvironments: past it a new one is answered 429.
	relaydDefaultRegistrationsPerToken = 1024
	// relaydOrphanTimeout is how long a registration is kept without its executor socket
	// (never dialled, or gone: a few of the executor's re-registration intervals, whose
	// backoff tops out at a minute); then it is forgotten, and the executor's next dial is
	// answered unknown_route, so that it registers again.
	relaydOrphanTimeout = 5 * time.Minute
	// relaydMaxTokenAuthorizations bounds the connect bundles of one environment that one
	// token holds still good: past it that token's oldest is forgotten, never another's.
	// relaydMaxAuthorizations bounds them for the environment, all tokens together: past it a
	// connect is answered 429 until some expire.
	relaydMaxTokenAuthorizations = 64
	relaydMaxAuthorizations      = 1024
	// relaydAuthorizationTTL is how long a connect bundle (its harness_key_authorization and
	// its rendezvous URL) stays good: the harness dials and handshakes at once.
	relaydAuthorizationTTL = 5 * time.Minute
	// relaydMinTimeout and relaydMaxTimeout bound what the configuration may set the two
	// timeouts below to.
	relaydMinTimeout = time.Second
	relaydMaxTimeout = 24 * time.Hour
	// relaydHandshakeTimeout bounds a stream from the harness's first frame to the
	// executor's handshake answer; a stream still without one is reset on both sides.
	relaydHandshakeTimeout = 30 * time.Second
	// relaydIdleTimeout closes a harness socket on which no frame went either way for that
	// long. An executor socket has no idle limit (it waits for harnesses); its liveness is
	// the ping every relaydPingInterval, answered within relaydPongTimeout.
	relaydIdleTimeout  = 10 * time.Minute
	relaydPingInterval = 30 * time.Second
	relaydPongTimeout  = 90 * time.Second
	// relaydExecutorWait is how long a harness's frame waits for the executor socket of a
	// registered environment (between its registration and its dial, or during a reconnect)
	// before the stream is reset.
	relaydExecutorWait = 10 * time.Second
	// relaydConnectWait is how long a connect for an environment not registered here waits
	// for its registration, within relaydMoveWindow of this node's start or of a change in
	// the fleet's live set: executors are registering again then (a restart, a node gone or
	// back), and the real harness gives up a session's reconnect at the first 404.
	relaydConnectWait = 5 * time.Second
	relaydMoveWindow  = time.Minute
	// relaydWriteTimeout bounds one write to a socket; a peer that does not read for that
	// long is dropped rather than left to stall the sockets that forward to it.
	relaydWriteTimeout = 10 * time.Second
	// relaydMaxBody bounds a registry request body; relaydHeaderTimeout and
	// relaydMaxHeaderBytes the request head; relaydHTTPIdle a kept-alive connection between
	// requests.
	relaydMaxBody        = 64 << 10
	relaydHeaderTimeout  = 10 * time.Second
	relaydBodyTimeout    = 10 * time.Second
	relaydMaxHeaderBytes = 16 << 10
	relaydHTTPIdle       = 30 * time.Second
	// relaydMaxPending bounds the connections not (yet) upgraded to a rendezvous socket,
	// and relaydMaxPendingPerSource those of one source (relaydSource: an IPv4 address, an
	// IPv6 /64). A new connection that finds its scope full takes the place of one of that
	// scope (relayd.admitLocked), so that connections held open cannot lock out the clients
	// that come to talk (TestAdv24PendingConnectionsLockOut,
	// TestReview24BusyConnectionsLockOut).
	relaydMaxPending          = 1024
	relaydMaxPendingPerSource = 256
	// relaydFirstByteTimeout: a connection from which not one byte was read (of a TLS
	// handshake or of a request) that long after it was accepted is silent, and closed when
	// a new one comes. A head under way has relaydHeaderTimeout.
	relaydFirstByteTimeout = 3 * time.Second
	// relaydRequestTime is the longest an honest registry request keeps its connection busy,
	// from its whole head read to its answer written: a forward to the owning node
	// (relaydPeerForwardTimeout, which covers the owner's relaydConnectWait), and a second
	// for the body and the answer. A connection busy with one request for longer (a token
	// holder's body that trickles) may be closed to admit a new one.
	relaydRequestTime = relaydPeerForwardTimeout + time.Second
	// relaydAnswerTimeout bounds the time from a request's whole head to its answer written
	// (the server's WriteTimeout): the body's time at most, then relaydRequestTime. A client
	// that pipelines requests and reads no answer is closed then, not held for ever.
	// A rendezvous socket clears it when it takes the connection over.
	relaydAnswerTimeout = relaydHeaderTimeout + relaydBodyTimeout + relaydRequestTime
	// relaydMinTokenBytes is the shortest static token or secret the configuration accepts.
	relaydMinTokenBytes  = 16
	relaydMinSecretBytes = 32
	// relaydTokenPrefix starts every per-environment token (relaydMintToken).
	relaydTokenPrefix = "xrt1"
)

// relaydRole is what a per-environment token lets its holder do.
const (
	relaydRoleExecutor = "executor" // register and validate
	relaydRoleHarness  = "harness"  // connect
)

// relaydConfigFile is the configuration file as written (docs/remote.md "Self-hosted relay");
// unknown keys are refused.
type relaydConfigFile struct {
	Tokens                     []relaydTokenFile `json:"tokens"`
	EnvironmentTokenSecretFile string            `json:"environment_token_secret_file"`
	MaxStreamsPerEnvironment   int               `json:"max_streams_per_environment"`
	MaxConnectionsPerToken     int               `json:"max_connections_per_token"`
	MaxRegistrationsPerToken   int               `json:"max_registrations_per_token"`
	HandshakeTimeout           string            `json:"handshake_timeout"`
	IdleTimeout                string            `json:"idle_timeout"`
	Peers                      []relaydPeer      `json:"peers"`
	PeerCAFile                 string            `json:"peer_ca_file"`
}

type relaydTokenFile struct {
	Name     string   `json:"name"`
	File     string   `json:"file"`
	Register []string `json:"register"`
	Connect  []string `json:"connect"`
}

// relaydConfig is the configuration, checked and with its files read.
type relaydConfig struct {
	tokens           map[[32]byte]*relaydToken // sha256 of the token → its grants
	secret           []byte                    // HMAC key of the per-environment tokens; nil: none accepted
	maxStreams       int
	maxConnections   int
	maxRegistrations int
	handshakeTimeout time.Duration
	idleTimeout      time.Duration
	peers            []relaydPeer   // the fleet (relayd_fleet.go); empty: one node
	peerCA           *x509.CertPool // roots for the peers' TLS certificates; nil: the system's
}

// relaydToken is one credential: a static token from the configuration, or a per-environment
// one (its grants are its environment alone).
type relaydToken struct {
	name     string
	register []string // environment id patterns: an id, a prefix ending in *, or *
	connect  []string
}

func (t *relaydToken) may(patterns []string, envID string) bool {
	for _, p := range patterns {
		if p == envID || strings.HasSuffix(p, "*") && strings.HasPrefix(envID, p[:len(p)-1]) {
			return true
		}
	}
	return false
}

// loadRelaydConfig reads and checks the configuration file. Relative file names in it are
// relative to its directory. A token or secret file must not be readable by group or others.
func loadRelaydConfig(path string) (*relaydConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("relay config: %w", err)
	}
	var f relaydConfigFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("relay config %s: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("relay config %s: data after the JSON object", path)
	}
	dir := filepath.Dir(path)
	cfg := &relaydConfig{tokens: map[[32]byte]*relaydToken{},
		maxStreams: relaydDefaultStreamsPerEnvironment, maxConnections: relaydDefaultConnectionsPerToken,
		maxRegistrations: relaydDefaultRegistrationsPerToken,
		handshakeTimeout: relaydHandshakeTimeout, idleTimeout: relaydIdleTimeout}
	for _, l := range []struct {
		name string
		v    int
		dst  *int
	}{{"max_streams_per_environment", f.MaxStreamsPerEnvironment, &cfg.maxStreams},
		{"max_connections_per_token", f.MaxConnectionsPerToken, &cfg.maxConnections},
		{"max_registrations_per_token", f.MaxRegistrationsPerToken, &cfg.maxRegistrations}} {
		switch {
		case l.v < 0 || l.v > relaydMaxLimit:
			return nil, fmt.Errorf("relay config %s: %s must be 1 to %d", path, l.name, relaydMaxLimit)
		case l.v > 0:
			*l.dst = l.v
		}
	}
	for _, l := range []struct {
		name string
		v    string
		dst  *time.Duration
	}{{"handshake_timeout", f.HandshakeTimeout, &cfg.handshakeTimeout}, {"idle_timeout", f.IdleTimeout, &cfg.idleTimeout}} {
		if l.v == "" {
			continue
		}
		v, err := time.ParseDuration(l.v)
		if err != nil || v < relaydMinTimeout || v > relaydMaxTimeout {
			return nil, fmt.Errorf("relay config %s: %s must be a duration from %v to %v, like \"30s\"", path, l.name, relaydMinTimeout, relaydMaxTimeout)
		}
		*l.dst = v
	}
	if err := checkRelaydPeers(f.Peers); err != nil {
		return nil, fmt.Errorf("relay config %s: %w", path, err)
	}
	cfg.peers = f.Peers
	if f.PeerCAFile != "" {
		if cfg.peerCA, err = loadRelaydPeerCA(filepath.Join(dir, f.PeerCAFile)); err != nil {
			return nil, fmt.Errorf("relay config %s: peer_ca_file: %w", path, err)
		}
	}
	names := map[string]bool{}
	for i, t := range f.Tokens {
		where := fmt.Sprintf("relay config %s: tokens[%d]", path, i)
		if t.Name == "" || names[t.Name] {
			return nil, fmt.Errorf("%s: name must be set and unique", where)
		}
		names[t.Name] = true
		if t.File == "" {
			return nil, fmt.Errorf("%s (%s): file must be set", where, t.Name)
		}
		if len(t.Register)+len(t.Connect) == 0 {
			return nil, fmt.Errorf("%s (%s): grants nothing: give register or connect patterns", where, t.Name)
		}
		for _, p := range append(append([]string(nil), t.Register...), t.Connect...) {
			if err := checkEnvironmentPattern(p); err != nil {
				return nil, fmt.Errorf("%s (%s): %w", where, t.Name, err)
			}
		}
		tok, err := readRelaydSecret(filepath.Join(dir, t.File), relaydMinTokenBytes)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", where, t.Name, err)
		}
		if strings.HasPrefix(string(tok), relaydTokenPrefix+".") {
			return nil, fmt.Errorf("%s (%s): a static token must not start with %q", where, t.Name, relaydTokenPrefix+".")
		}
		sum := sha256.Sum256(tok)
		if _, dup := cfg.tokens[sum]; dup {
			return nil, fmt.Errorf("%s (%s): the same token as another entry", where, t.Name)
		}
		cfg.tokens[sum] = &relaydToken{name: t.Name, register: t.Register, connect: t.Connect}
	}
	if f.EnvironmentTokenSecretFile != "" {
		if cfg.secret, err = readRelaydSecret(filepath.Join(dir, f.EnvironmentTokenSecretFile), relaydMinSecretBytes); err != nil {
			return nil, fmt.Errorf("relay config %s: environment_token_secret_file: %w", path, err)
		}
	}
	if len(cfg.tokens) == 0 && cfg.secret == nil {
		return nil, fmt.Errorf("relay config %s: no tokens and no environment_token_secret_file: nobody could use the relay", path)
	}
	return cfg, nil
}

// checkEnvironmentPattern accepts what loadRelaydConfig matches ids against: an environment
// id, such an id's prefix followed by *, or * alone.
func checkEnvironmentPattern(p string) error {
	if p == "*" {
		return nil
	}
	if err := checkEnvironmentID(strings.TrimSuffix(p, "*")); err != nil {
		return fmt.Errorf("pattern %q: an environment id, a prefix of one followed by *, or *", p)
	}
	return nil
}

// readRelaydSecret reads a token or secret file: its content without surrounding white
// space, at least min bytes, of printable ASCII, in a file only its owner may read.
func readRelaydSecret(path string, min int) ([]byte, error) {
	if err := checkRelaydPrivateFile(path); err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	tok := bytes.TrimSpace(raw)
	if len(tok) < min {
		return nil, fmt.Errorf("%s holds %d bytes, want at least %d", path, len(tok), min)
	}
	for _, b := range tok {
		if b <= ' ' || b > '~' {
			return nil, fmt.Errorf("%s: a token is printable ASCII without spaces", path)
		}
	}
	return tok, nil
}

// checkRelaydPrivateFile refuses a secret file (a token, the HMAC secret, the TLS private
// key) that group or others may read or write.
func checkRelaydPrivateFile(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is readable or writable by group or others (mode %04o): chmod 600 it", path, st.Mode().Perm())
	}
	return nil
}

// relaydMintToken makes a per-environment token: it grants role on envID alone until
// expires. It is relaydTokenPrefix.role.envID.expires.mac, the MAC an HMAC-SHA256 of the
// rest under the relay's secret, so that any relay holding the secret can check it and none
// has to store it.
func relaydMintToken(secret []byte, role, envID string, expires time.Time) string {
	body := strings.Join([]string{relaydTokenPrefix, role, envID, strconv.FormatInt(expires.Unix(), 10)}, ".")
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(body))
	return body + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// errRelaydUnauthorized is a missing, unknown or expired credential: 401.
var errRelaydUnauthorized = errors.New("missing, unknown or expired bearer token")

// authenticate returns the grants of the request's bearer token.
func (c *relaydConfig) authenticate(h http.Header, now time.Time) (*relaydToken, error) {
	auth := h.Get("Authorization")
	scheme, tok, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return nil, errRelaydUnauthorized
	}
	if strings.HasPrefix(tok, relaydTokenPrefix+".") {
		return c.perEnvironment(tok, now)
	}
	if t := c.tokens[sha256.Sum256([]byte(tok))]; t != nil {
		return t, nil
	}
	return nil, errRelaydUnauthorized
}

// perEnvironment checks a token of relaydMintToken.
func (c *relaydConfig) perEnvironment(tok string, now time.Time) (*relaydToken, error) {
	parts := strings.Split(tok, ".")
	if c.secret == nil || len(parts) != 5 {
		return nil, errRelaydUnauthorized
	}
	role, envID := parts[1], parts[2]
	exp, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil || (role != relaydRoleExecutor && role != relaydRoleHarness) || checkEnvironmentID(envID) != nil {
		return nil, errRelaydUnauthorized
	}
	want := relaydMintToken(c.secret, role, envID, time.Unix(exp, 0))
	if subtle.ConstantTimeCompare([]byte(want), []byte(tok)) != 1 || now.Unix() >= exp {
		return nil, errRelaydUnauthorized
	}
	// Each minted token is a scope of its own for the per-token limits (two holders of two
	// tokens of one environment are two tokens): its name ends with a short hash of the
	// token, which log lines may show, never the token.
	sum := sha256.Sum256([]byte(tok))
	t := &relaydToken{name: "env:" + role + ":" + envID + ":" + hex.EncodeToString(sum[:6])}
	if role == relaydRoleExecutor {
		t.register = []string{envID}
	} else {
		t.connect = []string{envID}
	}
	return t, nil
}

// relaydOptions is the command line of `exec-server relay`.
type relaydOptions struct {
	config      string
	listen      string
	tlsCert     string
	tlsKey      string
	publicURL   string
	behindProxy bool
	logLevel    string
	nodeID      string
}

// runRelayCommand is `exec-server relay …` and `exec-server relay token …`.
func runRelayCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "token" {
		return exitStatus(stderr, runRelayToken(args[1:], stdout))
	}
	var o relaydOptions
	fs := flag.NewFlagSet("exec-server relay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.config, "config", "", "the relay's configuration `FILE` (docs/remote.md: Self-hosted relay)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8720", "`IP:PORT` to serve on; port 0 picks one, and the address is printed on stdout")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate chain `FILE`: serve HTTPS")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key `FILE` of --tls-cert")
	fs.StringVar(&o.publicURL, "public-url", "", "the `URL` executors and harnesses reach this relay at (default: from --listen)")
	fs.BoolVar(&o.behindProxy, "behind-proxy", false, "serve plain HTTP on a non-loopback address: a TLS reverse proxy fronts the relay")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&o.nodeID, "node-id", "", "this node's `ID` in the configuration's peers (a fleet; its URL there is its public URL)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: exec-server relay --config FILE [--listen IP:PORT] [--tls-cert FILE --tls-key FILE] [--public-url URL] [--behind-proxy] [--node-id ID]")
			fmt.Fprintln(stdout, "       exec-server relay token --config FILE --environment-id ID --role executor|harness [--ttl DURATION] [--bare]")
			fmt.Fprintln(stdout, "SIGHUP reloads --config; a broken file is logged and the previous configuration kept.")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		return exitStatus(stderr, &usageError{err.Error()})
	}
	if fs.NArg() > 0 {
		return exitStatus(stderr, &usageError{fmt.Sprintf("relay: unexpected argument %q", fs.Arg(0))})
	}
	log, err := newLogger(stderr, o.logLevel, "text")
	if err != nil {
		return exitStatus(stderr, &usageError{err.Error()})
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return exitStatus(stderr, serveRelay(ctx, &o, stdout, log))
}

// runRelayToken prints a per-environment credential frame (docs/remote.md §8): the line
// --executor-credential-stdin reads, whose token is also a harness's bearer.
func runRelayToken(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("exec-server relay token", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	config := fs.String("config", "", "the relay's configuration `FILE`")
	envID := fs.String("environment-id", "", "the environment `ID` the token is for")
	role := fs.String("role", relaydRoleExecutor, "executor (register, validate) or harness (connect)")
	ttl := fs.Duration("ttl", 24*time.Hour, "how long the token is good")
	bare := fs.Bool("bare", false, "print the token alone, not the credential frame (for CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return &usageError{err.Error()}
	}
	switch {
	case *config == "":
		return &usageError{"relay token: --config is required"}
	case *role != relaydRoleExecutor && *role != relaydRoleHarness:
		return &usageError{fmt.Sprintf("relay token: --role %q: want executor or harness", *role)}
	case *ttl <= 0:
		return &usageError{"relay token: --ttl must be positive"}
	}
	if err := checkEnvironmentID(*envID); err != nil {
		return &usageError{"relay token: " + err.Error()}
	}
	cfg, err := loadRelaydConfig(*config)
	if err != nil {
		return err
	}
	if cfg.secret == nil {
		return errors.New("relay token: the configuration has no environment_token_secret_file")
	}
	exp := time.Now().Add(*ttl)
	tok := relaydMintToken(cfg.secret, *role, *envID, exp)
	if *bare {
		_, err := fmt.Fprintf(stdout, "%s\n", tok)
		return err
	}
	line, err := json.Marshal(map[string]any{"version": 1, "environment_id": *envID,
		"token": tok, "expires_at": exp.Unix()})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", line)
	return err
}

// serveRelay checks the options, listens and serves until ctx ends.
func serveRelay(ctx context.Context, o *relaydOptions, stdout io.Writer, log *logger) error {
	if o.config == "" {
		return &usageError{"relay: --config is required"}
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return &usageError{"relay: --tls-cert and --tls-key go together"}
	}
	ap, err := netip.ParseAddrPort(o.listen)
	if err != nil {
		return &usageError{fmt.Sprintf("relay: --listen %q: want IP:PORT", o.listen)}
	}
	plain := o.tlsCert == ""
	if plain && !ap.Addr().Unmap().IsLoopback() && !o.behindProxy {
		return &usageError{fmt.Sprintf("relay: refusing plain HTTP on %s, which is not loopback: give --tls-cert and --tls-key, or --behind-proxy if a TLS reverse proxy fronts the relay", ap.Addr())}
	}
	if o.behindProxy && o.publicURL == "" {
		return &usageError{"relay: --behind-proxy needs --public-url, the https URL the proxy serves"}
	}
	if o.publicURL != "" {
		if err := checkRelaydPublicURL(o.publicURL); err != nil {
			return &usageError{"relay: --public-url: " + err.Error()}
		}
	}
	cfg, err := loadRelaydConfig(o.config)
	if err != nil {
		return err
	}
	var self *relaydPeer
	switch {
	case o.nodeID == "" && len(cfg.peers) > 0:
		return &usageError{"relay: the configuration lists peers: give --node-id, this node's id among them"}
	case o.nodeID != "" && len(cfg.peers) == 0:
		return &usageError{"relay: --node-id needs the configuration's peers"}
	case o.nodeID != "":
		if self = cfg.peer(o.nodeID); self == nil {
			return &usageError{fmt.Sprintf("relay: --node-id %q is not among the configuration's peers", o.nodeID)}
		}
		if o.publicURL != "" && strings.TrimSuffix(o.publicURL, "/") != self.URL {
			return &usageError{fmt.Sprintf("relay: --public-url %s is not node %s's url in the peers (%s)", o.publicURL, self.ID, self.URL)}
		}
		o.publicURL = self.URL
	}
	var tlsConf *tls.Config
	if !plain {
		// The key every client's TLS trusts: the mode rule of the token files.
		if err := checkRelaydPrivateFile(o.tlsKey); err != nil {
			return fmt.Errorf("relay: --tls-key: %w", err)
		}
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return fmt.Errorf("relay: --tls-cert/--tls-key: %w", err)
		}
		// HTTP/1.1 only: the rendezvous upgrade hijacks the connection.
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	}
	ln, err := net.Listen("tcp", ap.String())
	if err != nil {
		return fmt.Errorf("relay: listen: %w", err)
	}
	scheme := "https"
	if plain {
		scheme = "http"
	}
	public := o.publicURL
	if public == "" {
		public = scheme + "://" + ln.Addr().String()
	}
	if err := checkRelaydPublicURL(public); err != nil {
		ln.Close()
		return &usageError{"relay: --public-url: " + err.Error()}
	}
	d := newRelayd(cfg, strings.TrimSuffix(public, "/"), log)
	d.tlsConf, d.behindProxy = tlsConf, o.behindProxy
	if self != nil {
		d.fleet = newRelaydFleet(self.ID, cfg.peerCA)
	}
	ctx, cancel := context.WithCancel(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	reloaderDone := make(chan struct{})
	defer func() { cancel(); signal.Stop(hup); <-reloaderDone }()
	proberDone := make(chan struct{})
	defer func() { cancel(); <-proberDone }()
	go func() { // the fleet's prober: ends with ctx
		defer close(proberDone)
		if d.fleet != nil {
			d.probePeers(ctx)
		}
	}()
	go func() { // the reloader: ends with ctx
		defer close(reloaderDone)
		for {
			select {
			case <-hup:
				d.reload(o.config)
			case <-ctx.Done():
				return
			}
		}
	}()
	fmt.Fprintf(stdout, "%s\n", public)
	log.Info("relay serving", "listen", ln.Addr().String(), "public_url", public, "tls", !plain,
		"static_tokens", len(cfg.tokens), "environment_tokens", cfg.secret != nil, "node_id", o.nodeID, "peers", len(cfg.peers))
	return d.serve(ctx, ln)
}

// checkRelaydPublicURL applies the executor's own rule (docs/remote.md §2.1): https, or http
// to a loopback host; no path, query, fragment or user info.
func checkRelaydPublicURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a URL")
	}
	switch {
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Trim(u.Path, "/") != "":
		return errors.New("want scheme://host[:port] only")
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && isLoopbackHost(u.Hostname()):
		return nil
	}
	return errors.New("want https, or http to a loopback address")
}

// relayd is one relay node: its configuration, its registrations and its sockets.
type relayd struct {
	cfg    atomic.Pointer[relaydConfig] // replaced whole on SIGHUP (reload)
	public string                       // scheme://host[:port] of this node
	log    *logger
	// tlsConf is what serve speaks TLS with; nil: plain HTTP.
	tlsConf *tls.Config
	// behindProxy: every connection comes from the reverse proxy, so none is taken for a
	// fleet peer's (relayd.newPending).
	behindProxy bool
	// peerLog throttles the lines that peers decide the rate of: refusals, resets, sockets
	// coming and going (logthrottle.go).
	peerLog *logThrottle
	now     func() time.Time

	// fleet is this node's view of its peers (relayd_fleet.go); nil: one node.
	fleet *relaydFleet

	mu      sync.Mutex
	envs    map[string]*relaydEnv
	regUp   chan struct{}  // closed, and replaced, whenever an environment registers
	moving  time.Time      // until then, connects wait for registrations (relaydMoveWindow)
	conns   map[string]int // token name → rendezvous sockets open
	regs    map[string]int // token name → registrations held
	swept   time.Time      // the last expireOrphansLocked: at most one a second
	sockets int            // rendezvous sockets open in all
	closed  bool
	live    map[*relaydSocket]struct{}
	pending map[net.Conn]*relaydPending // HTTP connections not hijacked
	sources map[string]int              // relaydSource → its connections in pending
	wg      sync.WaitGroup              // one per rendezvous socket being served
	queues  relaydQueues                // the harness sockets' queues (relayd_rendezvous.go)
}

func newRelayd(cfg *relaydConfig, public string, log *logger) *relayd {
	d := &relayd{public: public, log: log, peerLog: newLogThrottle(log), now: time.Now,
		envs: map[string]*relaydEnv{}, regUp: make(chan struct{}), moving: time.Now().Add(relaydMoveWindow),
		conns: map[string]int{}, regs: map[string]int{}, live: map[*relaydSocket]struct{}{},
		pending: map[net.Conn]*relaydPending{}, sources: map[string]int{}}
	d.cfg.Store(cfg)
	return d
}

// reload reads the configuration file again and, if it is sound, uses it for every request
// from now on: a token removed is refused at its next register, validate, connect or
// upgrade. Sockets already up are kept. A broken file is logged and the old configuration
// kept.
func (d *relayd) reload(path string) {
	cfg, err := loadRelaydConfig(path)
	if err != nil {
		d.log.Error("relay: configuration not reloaded; the previous one stays", "error", err)
		return
	}
	if err := d.checkFleetConfig(cfg); err != nil {
		d.log.Error("relay: configuration not reloaded; the previous one stays", "error", err)
		return
	}
	d.cfg.Store(cfg)
	d.log.Info("relay: configuration reloaded", "static_tokens", len(cfg.tokens), "environment_tokens", cfg.secret != nil)
}

// serve answers HTTP on ln until ctx ends, then closes every socket and waits for them.
// It serves TLS over ln with d.tlsConf when set, above relaydListener, so that a handshake's
// bytes count as bytes read.
func (d *relayd) serve(ctx context.Context, ln net.Listener) error {
	ln = relaydListener{ln}
	if d.tlsConf != nil {
		ln = tls.NewListener(ln, d.tlsConf)
	}
	srv := &http.Server{
		Handler:           d,
		ReadHeaderTimeout: relaydHeaderTimeout,
		ReadTimeout:       relaydHeaderTimeout + relaydBodyTimeout,
		WriteTimeout:      relaydAnswerTimeout,
		IdleTimeout:       relaydHTTPIdle,
		MaxHeaderBytes:    relaydMaxHeaderBytes,
		ErrorLog:          d.log.stdLogger(levelDebug),
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){}, // no HTTP/2
		ConnState:         d.connState,
		ConnContext: func(ctx context.Context, nc net.Conn) context.Context {
			return context.WithValue(ctx, relaydConnKey{}, nc)
		},
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		srv.Close()
	}()
	err := srv.Serve(ln)
	<-done
	d.shutdown()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// shutdown closes every rendezvous socket and waits for their goroutines.
func (d *relayd) shutdown() {
	d.mu.Lock()
	d.closed = true
	for s := range d.live {
		s.ws.closeTCP()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// relaydError is a JSON error answer, in the shape the registry client reads
// (docs/remote.md §2.1).
func relaydError(w http.ResponseWriter, status int, code, msg string) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="exec-server relay"`)
	}
	relaydJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func relaydJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"encoding the answer failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// ServeHTTP routes the registry (POST /cloud/environment/{id}/register|validate|connect),
// the rendezvous (GET /relay/v1/{environment|harness}/{id}) and GET /readyz.
func (d *relayd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer d.answered(r)
	if r.ContentLength != 0 {
		body := &relaydBody{ReadCloser: r.Body, header: w.Header()}
		r.Body = body
		w.Header().Set("Connection", "close")
		defer body.closeUnread(w)
	}
	p := r.URL.Path
	switch {
	case p == "/readyz":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			relaydError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use GET")
			return
		}
		d.readyz(w)
	case strings.HasPrefix(p, "/cloud/environment/"):
		rest := strings.TrimPrefix(p, "/cloud/environment/")
		envID, op, ok := strings.Cut(rest, "/")
		if !ok || strings.Contains(op, "/") {
			relaydError(w, http.StatusNotFound, "not_found", "no such endpoint")
			return
		}
		if err := checkEnvironmentID(envID); err != nil {
			relaydError(w, http.StatusBadRequest, "invalid_environment_id", "environment ids are 1 to 256 letters, digits, _ or -")
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			relaydError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST")
			return
		}
		if (op == "register" || op == "validate" || op == "connect") && d.forwardToOwner(w, r, envID, op) {
			return
		}
		switch op {
		case "register":
			d.register(w, r, envID)
		case "validate":
			d.validate(w, r, envID)
		case "connect":
			d.connect(w, r, envID)
		default:
			relaydError(w, http.StatusNotFound, "not_found", "no such endpoint")
		}
	case strings.HasPrefix(p, relaydRendezvousPath):
		d.rendezvous(w, r, strings.TrimPrefix(p, relaydRendezvousPath))
	default:
		relaydError(w, http.StatusNotFound, "not_found", "no such endpoint")
	}
}

// relaydBody is a request body that keeps its connection alive once read whole. An answer
// written before (a refusal: no token, a wrong path or method, a body over its limit)
// carries "Connection: close", and the connection reads nothing more: else net/http would
// read the rest of the body, before the answer or after it, and a client that announced a
// body it never sends would hold its connection for ReadTimeout with no token
// (TestReview24BusyConnectionsLockOut).
type relaydBody struct {
	io.ReadCloser
	header http.Header // the answer's, whose "Connection: close" the body's end takes out
	ended  bool
}

func (b *relaydBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.ended {
		b.ended = true
		b.header.Del("Connection")
	}
	return n, err
}

// closeUnread, when the handler returns, stops the reads of a connection whose body it did
// not read whole: a read deadline in the past.
func (b *relaydBody) closeUnread(w http.ResponseWriter) {
	if !b.ended {
		http.NewResponseController(w).SetReadDeadline(time.Now())
	}
}

// readRelaydBody reads a bounded JSON body into v; the caller answers the error.
func readRelaydBody(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, relaydMaxBody+1))
	if err != nil {
		return fmt.Errorf("reading the body: %w", err)
	}
	if len(body) > relaydMaxBody {
		return fmt.Errorf("body over %d bytes", relaydMaxBody)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("body is not the expected JSON: %w", err)
	}
	return nil
}

// randomRelaydID is a random identifier of n bytes in hex with a prefix: registration ids,
// URL secrets, authorizations.
func randomRelaydID(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return prefix + hex.EncodeToString(b)
}
