package main

// Remote mode's command line (docs/remote.md §2.1, §2.4, §8, §10): the flags, their validation
// (which registry credential, which transport), the TLS configuration and the proxy rule
// (docs/remote.md §3) for the registry and the rendezvous, and the clocks of remote mode.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// registryMaxEnvironmentID is the longest --environment-id (docs/remote.md §2.1).
const registryMaxEnvironmentID = 256

// remoteConfig is the command line of remote mode.
type remoteConfig struct {
	remote            string // --remote: registry base URL
	environmentID     string
	executorID        string         // --executor-id: the SEED name of --environment-id (mergeExecutorID)
	name              string         // --name: logged only; 0.169 does not send it either
	bearerStdin       bool           // --registration-bearer-stdin
	executorCredStdin bool           // --executor-credential-stdin
	caFile            string         // --remote-ca
	identityFile      string         // --identity
	chatGPTTokenStdin bool           // --chatgpt-token-stdin
	chatGPTAccountID  string         // --chatgpt-account-id
	useAgentIdentity  bool           // --use-agent-identity-auth
	transport         string         // --remote-transport: noise or direct
	awsSigV4          bool           // --aws-sigv4
	awsProfile        string         // --aws-profile
	awsRegion         string         // --aws-region
	awsService        string         // --aws-service; "": execute-api
	forward           *forwardConfig // `exec-server forward`; nil: serve streams here

	// Set by validate.
	base      string   // --remote without the trailing "/"
	baseURL   *url.URL // base, parsed
	credMode  credentialMode
	apiKey    string // CODEX_API_KEY
	agentJWT  string // CODEX_ACCESS_TOKEN, for --use-agent-identity-auth
	aws       awsConfig
	rootCAs   *x509.CertPool
	codexHome string                                // $CODEX_HOME or ~/.codex, for the sign-in in auth.json
	proxy     func(*http.Request) (*url.URL, error) // remoteProxy: the proxy of every remote-mode request

	lookupEnv        func(string) (string, bool) // nil: os.LookupEnv
	timings          *relayTimings               // nil: defaultRelayTimings()
	streamInboxBytes int                         // 0: relayStreamInboxBytes
}

func (c *remoteConfig) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.remote, "remote", "", "registry base `URL`: serve through a rendezvous relay instead of listening")
	fs.StringVar(&c.environmentID, "environment-id", "", "`ID` of the environment to register (letters, digits, _ and -)")
	fs.StringVar(&c.executorID, "executor-id", "", "the exec-server README's name of --environment-id (0.169 itself does not take it): the `ID` to register")
	fs.StringVar(&c.name, "name", "", "display `NAME` of this executor (logged only)")
	fs.BoolVar(&c.bearerStdin, "registration-bearer-stdin", false, "read the registry bearer token, one line, from stdin")
	fs.BoolVar(&c.executorCredStdin, "executor-credential-stdin", false, "read rotating registry credentials, one JSON frame per line, from stdin")
	fs.StringVar(&c.caFile, "remote-ca", "", "PEM `FILE` of extra CA certificates for the registry and rendezvous")
	fs.StringVar(&c.identityFile, "identity", "", "`FILE` holding the executor's Noise identity (created 0600 if missing)")
	fs.BoolVar(&c.chatGPTTokenStdin, "chatgpt-token-stdin", false, "read a ChatGPT access token, one newline-terminated line, from stdin (a pipe; HTTPS registries only)")
	fs.StringVar(&c.chatGPTAccountID, "chatgpt-account-id", "", "ChatGPT account `ID` of --chatgpt-token-stdin; must match the token's own (default: the token's)")
	fs.BoolVar(&c.useAgentIdentity, "use-agent-identity-auth", false, "register with the Agent Identity JWT in CODEX_ACCESS_TOKEN")
	fs.StringVar(&c.transport, "remote-transport", remoteTransportNoise, "remote `TRANSPORT`: noise (rendezvous relay) or direct (JSON-RPC over a SigV4-signed websocket; needs --aws-sigv4)")
	fs.BoolVar(&c.awsSigV4, "aws-sigv4", false, "sign the direct registration and websocket upgrade with AWS SigV4 (needs --remote-transport direct)")
	fs.StringVar(&c.awsProfile, "aws-profile", "", "AWS `PROFILE` of the SigV4 credentials (default: AWS_PROFILE, else default)")
	fs.StringVar(&c.awsRegion, "aws-region", "", "AWS signing `REGION` (default: AWS_REGION, AWS_DEFAULT_REGION, else the profile's)")
	fs.StringVar(&c.awsService, "aws-service", "", "AWS signing `SERVICE` (default execute-api)")
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
		c.executorCredStdin || c.caFile != "" || c.identityFile != "" || c.chatGPTTokenStdin ||
		c.chatGPTAccountID != "" || c.useAgentIdentity || (c.transport != "" && c.transport != remoteTransportNoise) ||
		c.awsSigV4 || c.awsProfile != "" || c.awsRegion != "" || c.awsService != "" || c.forward != nil
}

// direct reports whether --remote-transport direct was chosen.
func (c *remoteConfig) direct() bool { return c.transport == remoteTransportDirect }

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
	c.baseURL = u
	c.proxy = c.remoteProxy()
	if err := c.chooseTransport(); err != nil {
		return err
	}
	if err := c.forward.validate(); err != nil {
		return err
	}
	if err := c.chooseCredential(u); err != nil {
		return err
	}
	if c.caFile != "" {
		return c.loadCA()
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
// scheme, or the plain one on loopback only; no userinfo, no fragment, and no space or control
// character, which would break the request line. The fragment test reads the raw string
// because url.Parse drops an empty one ("https://r/#"), and the registry base is joined to its
// endpoint paths as a string, where a '#' would cut them all off.
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
	case !requestLineSafe(u):
		return nil, errors.New("must not hold a space or a control character")
	case u.Scheme == tlsScheme:
		return u, nil
	case u.Scheme == plainScheme && isLoopbackHost(u.Hostname()):
		return u, nil
	}
	return nil, fmt.Errorf("must use %s (or %s on loopback), got %s://%s", tlsScheme, plainScheme, u.Scheme, u.Host)
}

// isLoopbackHost is the one loopback decision of remote mode: a host is loopback when, lower
// cased, it is "localhost", or when it is a loopback address. It decides both where a plain
// scheme is allowed (parseRemoteURL) and that no proxy is used (remoteProxy), so that the two
// can never disagree, as they did when net/http's proxy bypass, which only knows "localhost"
// in lower case, sent a credential for http://LOCALHOST to HTTP_PROXY in clear.
func isLoopbackHost(host string) bool {
	if strings.ToLower(host) == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// remoteProxy is the proxy function of every remote-mode connection: the registry, the token
// and Agent Identity endpoints, and the rendezvous or direct websocket (docs/remote.md §3). It
// reads the variables through c.env when validate runs, so that what the process (or a test)
// sets is what is used; net/http's own function reads them once per process. A loopback host
// (isLoopbackHost) never goes through a proxy. HTTPS_PROXY serves https (and wss) requests,
// unless NO_PROXY names the host. A plain http or ws request is never handed to a proxy: its
// credential (a bearer, or the rendezvous URL's query) would cross it in clear, so with
// HTTP_PROXY set such a request is refused rather than sent.
func (c *remoteConfig) remoteProxy() func(*http.Request) (*url.URL, error) {
	get := func(names ...string) string {
		for _, n := range names {
			if v, ok := c.env(n); ok && v != "" {
				return v
			}
		}
		return ""
	}
	httpsProxy, httpProxy := get("HTTPS_PROXY", "https_proxy"), get("HTTP_PROXY", "http_proxy")
	noProxy := get("NO_PROXY", "no_proxy")
	return func(req *http.Request) (*url.URL, error) {
		host := strings.ToLower(req.URL.Hostname())
		if isLoopbackHost(host) || noProxyMatch(noProxy, host, req.URL.Port()) {
			return nil, nil
		}
		switch {
		case req.URL.Scheme == "https" && httpsProxy != "":
			return parseProxyURL(httpsProxy)
		case req.URL.Scheme != "https" && httpProxy != "":
			return nil, proxyRuleError(fmt.Sprintf("refusing to send an unencrypted request (http or ws) to %s through HTTP_PROXY: its credential would cross the proxy in clear", host))
		}
		return nil, nil
	}
}

// proxyRuleError is an error of remoteProxy: it never quotes a variable's value (which may
// hold a password), so a dial may show it as it is.
type proxyRuleError string

func (e proxyRuleError) Error() string { return string(e) }

// parseProxyURL reads a proxy variable as net/http does: a value without a scheme is an
// http:// proxy. The error never quotes the value, which may hold a password.
func parseProxyURL(v string) (*url.URL, error) {
	if !strings.Contains(v, "://") {
		v = "http://" + v
	}
	u, err := url.Parse(v)
	if err != nil || u.Host == "" {
		return nil, proxyRuleError("the proxy variable is not a valid URL")
	}
	return u, nil
}

// noProxyMatch reports whether NO_PROXY (a comma-separated list) names host (lower case) and
// port, with net/http's rules: "*" matches every host; an address or a CIDR block matches
// the addresses in it; a name matches itself and its subdomains, with or without a leading
// dot; an entry with a port matches that port only.
func noProxyMatch(noProxy, host, port string) bool {
	ip := net.ParseIP(host)
	for _, e := range strings.Split(strings.ToLower(noProxy), ",") {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
			continue
		case e == "*":
			return true
		}
		if _, n, err := net.ParseCIDR(e); err == nil {
			if ip != nil && n.Contains(ip) {
				return true
			}
			continue
		}
		if h, p, err := net.SplitHostPort(e); err == nil {
			if p != port {
				continue
			}
			e = h
		}
		if eip := net.ParseIP(e); eip != nil {
			if ip != nil && eip.Equal(ip) {
				return true
			}
			continue
		}
		e = strings.TrimPrefix(e, ".")
		if host == e || strings.HasSuffix(host, "."+e) {
			return true
		}
	}
	return false
}

// tlsConfig is the client TLS configuration for the registry and the rendezvous.
func (c *remoteConfig) tlsConfig() *tls.Config {
	return &tls.Config{RootCAs: c.rootCAs, MinVersion: tls.VersionTLS12}
}
