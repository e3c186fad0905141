package main

// Remote mode, the executor's outer loop: register, dial the rendezvous, serve the physical
// socket, and start again when it ends (docs/remote.md §2.4, §3).
//
// This file is split from relay.go, which keeps the wire format (the frame codec and its
// table), and from relay_demux.go, which serves the streams of one socket. The three change
// for different reasons: the codec when the schema does, this loop when the retry rules do,
// the demux when the stream rules do; each reads alone.
//
// The rules of the loop:
//
//	register            retried for ever on transient failures, fatal on permanent ones (remote_registry.go)
//	dial the URL        X-Request-Id: req_<32 hex>, no Authorization: the URL carries its credential;
//	                    TCP, TLS and the upgrade bounded by one dial timeout
//	upgrade refused     a 4xx but 408, 425 and 429, or a named rejection reason: register again at
//	                    once (a new URL); 408, 425, 429 and 5xx: the same URL again; no answer
//	                    (nobody listens, a timeout): register again, then dial the URL it gives
//	socket dropped      the same URL again, no registration
//	between attempts    exponential backoff with jitter, a Retry-After floor; reset by a socket that
//	                    stayed up for stableConnection
//	the address         public, or of the kind the registry was reached at (loopback, private,
//	                    link-local, metadata): rendezvousAddrAllowed, docs/remote.md §3
//
// The rendezvous URL's query carries its credential, so it is never logged (scrubURL).

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// rendezvousDialTimeout bounds one dial of the rendezvous: TCP connect, TLS handshake and the
// websocket upgrade. Without it a rendezvous that accepts TCP and never answers would hold the
// executor for ever.
const rendezvousDialTimeout = 10 * time.Second

// runRemote serves srv (with cfg.forward: the target exec-server) through the rendezvous relay
// until ctx ends (nil) or a permanent failure (an error for main to print): a registry that
// refuses the credential or answers nonsense, or a credential stream that ends.
func runRemote(ctx context.Context, cfg *remoteConfig, srv *server, stdin io.Reader, log *logger) error {
	if cfg.direct() {
		return runDirect(ctx, cfg, srv, log)
	}
	id, err := remoteIdentity(cfg)
	if err != nil {
		return err
	}
	creds, err := cfg.startCredentials(ctx, stdin, log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { // a dead credential stream ends remote mode, as in 0.169
		defer close(watchDone)
		select {
		case <-creds.dead:
			cancel()
		case <-ctx.Done():
		}
	}()
	defer func() { cancel(); <-watchDone }()
	reg := newRegistryClient(cfg, creds, log)
	defer reg.close()
	x := &relayExecutor{timings: cfg.relayTimings(), inboxLimit: cfg.streamInboxLimit(), id: id, registry: reg,
		serveStream: cfg.forward.streamServer(ctx, srv, cfg, log), log: log, tls: cfg.tlsConfig(), proxy: cfg.proxy}
	log.Info("remote mode", "registry", cfg.base, "environment_id", cfg.environmentID, "name", cfg.name)
	err = x.run(ctx)
	if f, ok := creds.auth.(interface{ finish(time.Duration) bool }); ok && !f.finish(codexRefreshTimeout) {
		log.Warn("a Codex sign-in refresh was still under way at exit; auth.json may hold a used refresh token")
	}
	if _, cerr := creds.bearer(); cerr != nil {
		return cerr
	}
	return err
}

// remoteIdentity is the executor's static Noise identity: loaded from (or created in)
// --identity FILE, else fresh for this process.
func remoteIdentity(cfg *remoteConfig) (*noiseIdentity, error) {
	if cfg.identityFile != "" {
		return loadOrCreateNoiseIdentity(cfg.identityFile, rand.Reader)
	}
	return newNoiseIdentity(rand.Reader)
}

// relayExecutor keeps the executor registered and connected, reconnecting for ever.
type relayExecutor struct {
	timings    relayTimings
	inboxLimit int // bytes a stream may leave waiting for its dispatcher
	id         *noiseIdentity
	registry   *registryClient
	// serveStream serves one stream once its handshake is done: srv.serveStream, or the
	// bridge of `exec-server forward` (remote_forward.go).
	serveStream func(t msgTransport, parsePrefix string)
	log         *logger
	tls         *tls.Config
	proxy       func(*http.Request) (*url.URL, error) // remoteProxy

	// streams counts the goroutines of every stream of every socket. A socket does not wait
	// for its streams when it ends, so that a handler stuck in a system call (a hung NFS
	// read) cannot hold up the reconnect; run waits for them all before it returns.
	streams sync.WaitGroup
}

// run registers, then connects and serves sockets until ctx ends or registration fails
// permanently.
func (x *relayExecutor) run(ctx context.Context) error {
	defer x.streams.Wait()
	bo := &backoff{p: x.timings.backoff}
	reg, err := x.registry.registerWithRetry(ctx, x.id.publicKey(), bo)
	if err != nil {
		return quietCancel(ctx, err)
	}
	// dialNow: the last dial got no answer and the registration after it gave a URL to dial at
	// once, without a backoff step; dialedNow: the last dial was such, so the next waits.
	dialNow, dialedNow := false, false
	for attempt := 1; ; attempt++ {
		ws, resp, requestID, err := x.dial(ctx, reg, attempt)
		var floor time.Duration // a Retry-After on a refused upgrade
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			start := time.Now()
			x.log.Info("connected to the rendezvous", "connection_attempt", attempt, "request_id", requestID)
			err = newRelaySocket(ctx, x, reg, ws).serve()
			x.log.Info("rendezvous connection ended", "connection_attempt", attempt, "error", errString(err))
			if time.Since(start) >= x.timings.stableConnection {
				bo.reset()
			}
		case resp != nil && rendezvousWantsRegistration(resp):
			x.log.Info("rendezvous refused the connection; registering again", "status", resp.StatusCode,
				"reason", rendezvousRejection(resp))
			floor = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
			if reg, err = x.registry.registerWithRetry(ctx, x.id.publicKey(), bo); err != nil {
				return quietCancel(ctx, err)
			}
		default:
			x.log.Info("rendezvous connection failed", "connection_attempt", attempt, "error", scrubURL(err, reg.url))
			if resp != nil {
				floor = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
				break
			}
			// No answer at all: the node behind the URL may be gone, and a relay fleet
			// places the environment on a live one at the next registration
			// (docs/remote.md 12.7).
			x.log.Info("rendezvous did not answer; registering again")
			if reg, err = x.registry.registerWithRetry(ctx, x.id.publicKey(), bo); err != nil {
				return quietCancel(ctx, err)
			}
			dialNow = !dialedNow
		}
		if dialNow {
			dialNow, dialedNow = false, true
			continue
		}
		dialedNow = false
		d := bo.next(floor)
		x.log.Info("reconnecting to the rendezvous", "retry_in", d.Round(time.Millisecond))
		if sleepCtx(ctx, d) != nil {
			return nil
		}
	}
}

// dial opens the physical socket to the registration's rendezvous URL within the dial
// timeout. On a refused upgrade it returns the response, whose status decides what next.
func (x *relayExecutor) dial(ctx context.Context, reg *registration, attempt int) (*wsConn, *http.Response, string, error) {
	requestID := newRendezvousRequestID()
	x.log.Info("connecting to the rendezvous", "connection_attempt", attempt, "request_id", requestID)
	// An address in the URL is vetted here too: through a proxy, the control below is not
	// applied (the proxy, not this host, connects to the rendezvous).
	if u, err := url.Parse(reg.url); err == nil {
		if err := rendezvousHostAllowed(u.Hostname(), x.registry.reached); err != nil {
			return nil, nil, requestID, err
		}
	}
	dctx, cancel := context.WithTimeout(ctx, x.timings.dialTimeout)
	defer cancel()
	ws, resp, err := dialWebsocket(dctx, reg.url, []upgradeHeader{{"x-request-id", requestID}}, x.tls, wsOptions{
		proxy:        x.proxy,
		control:      rendezvousControl(x.registry.reached, strings.HasPrefix(reg.url, "ws:")),
		maxMessage:   relayMaxMessage,
		maxFrame:     relayMaxMessage,
		pingInterval: x.timings.pingInterval,
		pongTimeout:  x.timings.pongTimeout,
	})
	return ws, resp, requestID, err
}

// quietCancel turns an error caused by ctx ending into nil.
func quietCancel(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// rendezvousRejectionHeader carries why the rendezvous refused an upgrade (docs/remote.md §3).
const rendezvousRejectionHeader = "X-Codex-Rendezvous-Rejection-Reason"

// rendezvousRejections are the reasons 0.169 knows by name; each means the URL from the
// registration is no longer good, so the executor registers again.
var rendezvousRejections = map[string]bool{
	"missing_role": true, "invalid_role": true, "pod_draining": true, "missing_expiry": true,
	"invalid_expiry": true, "invalid_secret": true, "missing_signature": true,
	"invalid_signature": true, "extra_query_param": true, "route_unavailable": true,
	"missing_version": true, "malformed_query": true,
	"unexpected_executor_registration_id": true, "unknown_route": true,
	"wrong_rendezvous_cluster": true,
}

// rendezvousRejection is the named reason of a refused upgrade, or "" for none or an unknown
// one (the header is the rendezvous's to fill, so only known words are logged).
func rendezvousRejection(resp *http.Response) string {
	r := resp.Header.Get(rendezvousRejectionHeader)
	if rendezvousRejections[r] {
		return r
	}
	return ""
}

// rendezvousWantsRegistration reports whether a refused upgrade calls for a fresh URL: any 4xx
// but 408, 425 and 429 (the URL's credential is what the rendezvous refuses: 401, 403, 404,
// 409, an unknown 400), or a named rejection reason. 408, 425, 429 and 5xx retry the same URL.
func rendezvousWantsRegistration(resp *http.Response) bool {
	if rendezvousRejection(resp) != "" {
		return true
	}
	switch s := resp.StatusCode; {
	case s == http.StatusRequestTimeout, s == http.StatusTooEarly, s == http.StatusTooManyRequests:
		return false
	default:
		return s >= 400 && s < 500
	}
}

// scrubURL renders err without the rendezvous URL's query, which carries its credential.
func scrubURL(err error, rawURL string) string {
	msg := err.Error()
	u, perr := url.Parse(rawURL)
	if perr != nil || u.RawQuery == "" {
		return msg
	}
	full := u.Redacted()
	u.RawQuery = "REDACTED"
	return strings.ReplaceAll(msg, full, u.Redacted())
}

// newRendezvousRequestID is the X-Request-Id of one upgrade: req_ and 32 hex digits, as 0.169.
func newRendezvousRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	return rendezvousRequestIDPrefix + hex.EncodeToString(b[:])
}

// rendezvousControl is the dial control of the rendezvous (or direct) socket: it sees each
// address the dial connects to, after name resolution, so a name that resolves to a refused
// address is refused as well. A plain ws:// URL is allowed only for a loopback host
// (isLoopbackHost), and "localhost" is a name: should it resolve elsewhere (no entry in
// /etc/hosts, and a DNS answer), the plain dial is refused rather than sent off the host.
func rendezvousControl(reached *addrClassSet, plain bool) func(network, address string, c syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("rendezvous dial: unexpected address %q", address)
		}
		if plain && !ap.Addr().Unmap().IsLoopback() {
			return fmt.Errorf("%w: a plain ws URL resolved to %s, not a loopback address", errRendezvousAddr, ap.Addr())
		}
		return rendezvousAddrAllowed(ap.Addr(), reached)
	}
}

// rendezvousHostAllowed applies rendezvousAddrAllowed to the host of a rendezvous URL when it
// is an address. Through a proxy this is the only check, since the proxy resolves the host,
// so a host that a resolver would read as an IPv4 address although netip does not is
// refused too: inet_aton, which getaddrinfo and so many proxies use, takes 2852039166,
// 0xa9fea9fe, 0251.0376.0251.0376 or 169.254.43518 for 169.254.169.254, and an address with
// a trailing dot is still that address.
func rendezvousHostAllowed(host string, reached *addrClassSet) error {
	h := strings.TrimSuffix(host, ".")
	if a, err := netip.ParseAddr(h); err == nil {
		return rendezvousAddrAllowed(a.WithZone(""), reached)
	}
	if numericHost(h) {
		return fmt.Errorf("%w: %q is an IPv4 address in a spelling that resolvers read differently", errRendezvousAddr, host)
	}
	return nil
}

// numericHost reports whether the last label of host is a number, decimal or 0x hex: what
// the WHATWG URL standard takes for an IPv4 address in any spelling. No top-level domain is
// numeric, so no name of a real relay is refused.
func numericHost(host string) bool {
	label := strings.ToLower(host[strings.LastIndexByte(host, '.')+1:])
	if hex, ok := strings.CutPrefix(label, "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return label != "" && strings.Trim(label, "0123456789") == ""
}

// addrClass sorts the addresses a registry may hand out for the rendezvous (docs/remote.md §3).
type addrClass uint8

const (
	addrPublic    addrClass = iota
	addrLoopback            // 127.0.0.0/8, ::1
	addrPrivate             // 10/8, 172.16/12, 192.168/16, fc00::/7, and the shared 100.64/10 (carrier NAT, tailnets)
	addrLinkLocal           // 169.254.0.0/16, fe80::/10
	addrMetadata            // a cloud instance-metadata service (isMetadataAddr)
	addrUnusable            // unspecified, multicast, broadcast: never a rendezvous
)

func (c addrClass) String() string {
	return [...]string{"public", "loopback", "private", "link-local", "an instance-metadata address", "unusable"}[c]
}

// isMetadataAddr reports the instance-metadata and host-agent addresses of the clouds, which
// answer anyone on the host without a credential: AWS (169.254.169.254, fd00:ec2::254, the
// ECS agent at 169.254.170.2 and 169.254.170.23, fd00:ec2::23), GCP, Azure, OpenStack and
// Oracle (169.254.169.254, GCP's fd20:ce::254), Azure's WireServer (168.63.129.16) and
// Alibaba (100.100.100.200). Most are link-local too; the others would pass for public or
// private without this list.
func isMetadataAddr(a netip.Addr) bool {
	switch a.String() {
	case "169.254.169.254", "169.254.170.2", "169.254.170.23", "fd00:ec2::254", "fd00:ec2::23",
		"fd20:ce::254", "168.63.129.16", "100.100.100.200":
		return true
	}
	return false
}

// nat64Prefix is the well-known NAT64 prefix (RFC 6052): 64:ff9b::a9fe:a9fe reaches
// 169.254.169.254 through a translator, so an address in it is judged by the IPv4 address
// it embeds.
var nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")

func classifyAddr(a netip.Addr) addrClass {
	a = a.Unmap().WithZone("")
	if nat64Prefix.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte(b[12:]))
	}
	switch {
	case isMetadataAddr(a):
		return addrMetadata
	case a.IsLoopback():
		return addrLoopback
	case a.IsUnspecified(), a.IsMulticast(), a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return addrUnusable
	case a.IsLinkLocalUnicast():
		return addrLinkLocal
	case a.IsPrivate(), netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 64}), 10).Contains(a): // RFC 6598
		return addrPrivate
	}
	return addrPublic
}

// addrClassSet is the set of address classes the registry has been reached at (nothing for a
// registry behind a proxy, unless --remote names an address); safe for concurrent use.
type addrClassSet struct{ bits atomic.Uint32 }

func (s *addrClassSet) add(c addrClass) { s.bits.Or(1 << c) }

func (s *addrClassSet) has(c addrClass) bool { return s != nil && s.bits.Load()&(1<<c) != 0 }

// errRendezvousAddr marks a rendezvous address refused by rendezvousAddrAllowed.
var errRendezvousAddr = errors.New("rendezvous address refused")

// rendezvousAddrAllowed is the rule of docs/remote.md §3 for the address a rendezvous dial
// connects to: a public address always; a loopback, private, link-local or metadata address
// only when --remote itself was reached at an address of the same class, so that a registry
// cannot aim the executor at its host's metadata service or the networks beside it, while a
// registry on 10.x handing out 10.x rendezvous URLs (or one on loopback, loopback ones) keeps
// working; an unspecified, multicast or broadcast address never.
func rendezvousAddrAllowed(a netip.Addr, reached *addrClassSet) error {
	switch c := classifyAddr(a); {
	case c == addrPublic:
		return nil
	case c == addrUnusable:
		return fmt.Errorf("%w: %s is not a unicast address", errRendezvousAddr, a)
	case reached.has(c):
		return nil
	default:
		return fmt.Errorf("%w: %s is %s, and --remote is not on such a network", errRendezvousAddr, a, c)
	}
}
