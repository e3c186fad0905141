// Command exec-server runs processes and file operations for an agent harness such as Codex,
// speaking the JSON-RPC protocol of `codex exec-server` over a websocket or stdio, or through a
// rendezvous relay over an end-to-end encrypted Noise channel.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// This build's version, commit and date, printed by --version. scripts/release.sh stamps them
// with -ldflags -X main.version=… -X main.commit=… -X main.date=…; a plain go build keeps these.
var (
	version = "0.1.0"
	commit  = "unknown"
	date    = "unknown"
)

// Defaults that match the reference (docs/protocol.md §5.1, §5.3).
const (
	defaultSessionTTL      = 80 * time.Second
	defaultRetention       = 80 * time.Second
	shutdownGrace          = 2 * time.Second
	defaultWSMaxClockSkew  = 30 * time.Second
	defaultListen          = "ws://127.0.0.1:0"
	defaultMaxConnections  = 2048
	readyzPath             = "/readyz"
	stdioParsePrefix       = "failed to parse JSON-RPC message from exec-server stdio"
	websocketParsePrefixFm = "failed to parse websocket JSON-RPC message from exec-server websocket %s"
)

func main() {
	if isSandboxStage() { // before anything else: this process is a sandbox stage (sandbox_linux.go)
		runSandboxStage()
	}
	if isFSWorker() { // … or an fs sandbox worker (fs_worker.go)
		runFSWorker()
	}
	if isWatchdog() { // … or the watchdog (watchdog.go)
		runWatchdog()
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// usageError is a bad command line: one line on stderr, exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// run is main without the process exit, so tests can drive it.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "sandbox" {
		return runSandboxCommand(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "relay" { // the self-hosted relay (relayd.go)
		return runRelayCommand(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "mitm-ca" { // the credential-masking CA (cli_mitm.go)
		return runMITMCACommand(args[1:], stdout, stderr)
	}
	var o cliOptions
	fs, err := parseFlags(args, &o)
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeUsage(stdout, fs, o.remote.forward != nil)
		return 0
	case err != nil:
		return exitStatus(stderr, err)
	case o.showVersion:
		fmt.Fprintf(stdout, "exec-server %s (commit %s, date %s, protocol of codex %s)\n", version, commit, date, executorVersion)
		return 0
	}
	return exitStatus(stderr, serve(&o, stdin, stdout, stderr))
}

// exitStatus reports err on stderr and returns the exit status for it: 0 for none, 2 for a
// usage error (with the hint), 1 for any other.
func exitStatus(stderr io.Writer, err error) int {
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "exec-server: %v%s\n", err, usageHint)
		return 2
	}
	fmt.Fprintf(stderr, "exec-server: %v\n", err)
	return 1
}

// serve checks the options, builds the server and serves on what --listen or the remote
// options choose, until a signal or the transport's end.
func serve(o *cliOptions, stdin io.Reader, stdout, stderr io.Writer) error {
	log, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	auth, sbx, err := checkOptions(o)
	if err != nil {
		return err
	}
	o.compat.logIgnored(log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv := newServer(ctx, serverConfig{
		sessionTTL:            o.sessionTTL,
		retention:             o.retention,
		stallTimeout:          defaultStallTimeout,
		runManagedUnsandboxed: o.managedSandbox == "run-unsandboxed",
		maxConnections:        o.maxConnections,
		watchdog:              true,
		limits:                o.limits,
		netproxy:              o.netproxy,
		stateDir:              stateDirOf(o),
	}, log)
	srv.auth = auth
	srv.sandbox = sbx
	// After newServer, which made the masking CA's directory: a secret file is named (and
	// resolved) only where it exists (secrets.go, docs/network.md §8 "The CA").
	sbx.setSecrets(secretFiles(o))
	// What a harness's managed-network starts get here, with these flags (docs/network.md §7).
	support := hostNetworkSupport(sbx, o.managedSandbox == "run-unsandboxed")
	support.mask = support.mask && srv.mask.usable()
	srv.envInfo.Capabilities = capabilitiesFor(support)
	defer srv.shutdown()

	switch {
	case o.remote.enabled():
		if o.remote.forward == nil { // forward serves nothing here
			logSandbox(o, sbx, log)
		}
		if o.exitOnStdinClose {
			return &usageError{"--exit-on-stdin-close cannot be combined with remote credentials read from stdin"}
		}
		if err := runRemote(ctx, &o.remote, srv, stdin, log); err != nil && ctx.Err() == nil {
			return err
		}
		return nil
	case o.listen == "stdio" || o.listen == "stdio://":
		logSandbox(o, sbx, log)
		serveStdio(ctx, srv, stdin, stdout)
		return nil
	}
	return serveWebsocket(ctx, stop, o, srv, stdin, stdout, log)
}

// checkOptions checks what the flags alone cannot, and builds the authenticator and the
// sandboxer they name; every failure is a usage error.
func checkOptions(o *cliOptions) (*wsAuthConfig, *sandboxer, error) {
	auth, err := newWSAuth(o.wsAuth, o.wsTokenFile, o.wsTokenSHA256, o.wsSecretFile, o.wsIssuer, o.wsAudience, time.Duration(o.wsSkewSeconds)*time.Second)
	if err != nil {
		return nil, nil, &usageError{err.Error()}
	}
	if o.remote.enabled() {
		if err := o.remote.validate(); err != nil {
			return nil, nil, &usageError{err.Error()}
		}
	}
	if o.managedSandbox != "enforce" && o.managedSandbox != "run-unsandboxed" {
		return nil, nil, &usageError{fmt.Sprintf("invalid --managed-sandbox %q: want enforce or run-unsandboxed", o.managedSandbox)}
	}
	sbx, err := newSandboxer(o.pidNamespace, "")
	if err != nil {
		return nil, nil, &usageError{err.Error()}
	}
	sbx.limitShm(int64(o.shmSize))
	if err := sbx.setMaxProcesses(o.maxSandboxProcs); err != nil {
		return nil, nil, &usageError{err.Error()}
	}
	return auth, sbx, nil
}

// logSandbox says how sandboxed requests run, once the server is about to serve.
func logSandbox(o *cliOptions, sbx *sandboxer, log *logger) {
	if o.managedSandbox == "run-unsandboxed" {
		log.Warn("--managed-sandbox run-unsandboxed: requests that ask for a sandbox run WITHOUT one; use this only on a host that is itself the sandbox")
	} else {
		log.Info("sandbox", "mechanism", sbx.describe())
	}
}

// serveStdio serves the one stdio connection (docs/protocol.md §2.4) until stdin's end or a
// signal.
func serveStdio(ctx context.Context, srv *server, stdin io.Reader, stdout io.Writer) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.serveConn(newStdioTransport(stdin, stdout), stdioParsePrefix)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// serveWebsocket listens on --listen, prints the bound URL and serves websocket clients
// until a signal (or stdin's end, with --exit-on-stdin-close), then gives connections
// shutdownGrace to end.
func serveWebsocket(ctx context.Context, stop func(), o *cliOptions, srv *server, stdin io.Reader, stdout io.Writer, log *logger) error {
	addr, err := parseListen(o.listen)
	if err != nil {
		return &usageError{err.Error()}
	}
	ln, err := net.Listen(listenNetwork(addr), addr.String())
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.listen, err)
	}
	logSandbox(o, srv.sandbox, log)
	if !addr.Addr().IsLoopback() && !srv.auth.enabled() {
		log.Warn("listening on a non-loopback address without --ws-auth: anyone who can reach it can run commands as this user", "addr", ln.Addr().String())
	}
	fmt.Fprintf(stdout, "ws://%s\n", listenedAddr(addr, ln.Addr()))
	if f, ok := stdout.(*os.File); ok {
		f.Sync()
	}
	if o.exitOnStdinClose {
		go func() {
			io.Copy(io.Discard, stdin)
			log.Info("stdin closed; shutting down")
			stop()
		}()
	}
	serveErr := make(chan error, 1)
	ws := newWSServer(srv)
	go func() { serveErr <- ws.serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if err != nil {
			return err
		}
	}
	log.Info("shutting down")
	ws.close()
	srv.shutdown()
	done := make(chan struct{})
	go func() { srv.conns.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(shutdownGrace):
	}
	return nil
}

// parseListen parses ws://IP:PORT. The host must be an IP literal, as in the reference, or
// localhost, which the reference refuses: it means 127.0.0.1 here, without asking the
// resolver, so that it is loopback whatever /etc/hosts says, and the URL printed once bound
// is still ws://IP:PORT.
func parseListen(s string) (netip.AddrPort, error) {
	rest, ok := strings.CutPrefix(s, "ws://")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("unsupported --listen URL `%s`; expected `ws://IP:PORT` or `stdio`", s)
	}
	if port, ok := strings.CutPrefix(rest, "localhost:"); ok {
		rest = "127.0.0.1:" + port
	}
	ap, err := netip.ParseAddrPort(rest)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("invalid websocket --listen URL `%s`; expected `ws://IP:PORT`", s)
	}
	return ap, nil
}

// listenNetwork keeps a listener to the address family it was given: an IPv4 literal
// (0.0.0.0 included) listens on IPv4 only, an IPv6 literal on IPv6 only, so a host firewalled
// for one family is not exposed on the other.
func listenNetwork(addr netip.AddrPort) string {
	if addr.Addr().Is4() || addr.Addr().Is4In6() {
		return "tcp4"
	}
	return "tcp6"
}

// listenedAddr is the address to print: the one given, with the port the kernel chose.
func listenedAddr(given netip.AddrPort, got net.Addr) string {
	port := given.Port()
	if ta, ok := got.(*net.TCPAddr); ok {
		port = uint16(ta.Port)
	}
	return netip.AddrPortFrom(given.Addr(), port).String()
}

func newLogger(w io.Writer, level, format string) (*logger, error) {
	lv, err := parseLogLevel(level)
	if err != nil {
		return nil, &usageError{fmt.Sprintf("invalid --log-level %q: want debug, info, warn or error", level)}
	}
	switch format {
	case "text":
		return newTextLogger(w, lv), nil
	case "json":
		return newJSONLogger(w, lv), nil
	}
	return nil, &usageError{fmt.Sprintf("invalid --log-format %q: want text or json", format)}
}

// netProxyServerOptions are the server's settings of the managed network proxy
// (docs/network.md §7): --linux-sandbox-transparent-tcp and --tcp-upstream-proxy.
type netProxyServerOptions struct {
	// transparentTCP routes every TCP connection of a sandbox with enforceManagedNetwork
	// through its proxy's SOCKS policy, as if each process asked for transparentTcp.
	transparentTCP bool
	// tcpUpstream is the HTTP CONNECT proxy through which every raw TCP connection of the
	// SOCKS side goes ("host:port"); "": none.
	tcpUpstream tcpUpstreamFlag
}

// tcpUpstreamFlag is --tcp-upstream-proxy HOST:PORT, checked as the reference checks it: a
// host name, an IPv4 literal or a bracketed IPv6 one, and a port from 1 to 65535, given once.
type tcpUpstreamFlag string

func (f *tcpUpstreamFlag) String() string { return string(*f) }

func (f *tcpUpstreamFlag) Set(v string) error {
	if *f != "" {
		return errors.New("cannot be used multiple times")
	}
	i := strings.LastIndexByte(v, ':')
	if i < 0 {
		return errors.New("missing port")
	}
	host, port := v[:i], v[i+1:]
	switch {
	case strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]"):
		if a, err := netip.ParseAddr(host[1 : len(host)-1]); err != nil || !a.Is6() {
			return errors.New("parse host: not an IPv6 address")
		}
	case isIPv6Literal(host):
		return errors.New("missing brackets for IPv6 address with port")
	case !validProxyHostName(host):
		return errors.New("parse host: not a host name or address")
	}
	n, err := strconv.ParseUint(port, 10, 16)
	switch {
	case port == "":
		return errors.New("parse port as u16: cannot parse integer from empty string")
	case errors.Is(err, strconv.ErrRange):
		return errors.New("parse port as u16: number too large to fit in target type")
	case err != nil:
		return errors.New("parse port as u16: invalid digit found in string")
	case n == 0:
		return errors.New("TCP upstream proxy port must be nonzero")
	}
	*f = tcpUpstreamFlag(v)
	return nil
}

func isIPv6Literal(h string) bool {
	a, err := netip.ParseAddr(h)
	return err == nil && a.Is6()
}

// validProxyHostName reports whether h is a host name (letters, digits, '-', '_' and dots
// between non-empty labels) or an IPv4 literal.
func validProxyHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
