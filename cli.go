package main

// The command line: the flags, the groups --help shows them in, and the flags accepted only
// so that wrappers written for `codex exec-server` keep working.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// cliOptions is what the flags say, before run checks it.
type cliOptions struct {
	listen           string
	logLevel         string
	logFormat        string
	showVersion      bool
	exitOnStdinClose bool
	sessionTTL       time.Duration
	retention        time.Duration
	managedSandbox   string
	maxConnections   int
	pidNamespace     string
	shmSize          byteSize
	maxSandboxProcs  int
	wsAuth           string
	wsTokenFile      string
	wsTokenSHA256    string
	wsSecretFile     string
	wsIssuer         string
	wsAudience       string
	wsSkewSeconds    int
	remote           remoteConfig
	limits           serverLimits
	compat           compatOptions
	netproxy         netProxyServerOptions
	// stateDir is --state-dir: where the server keeps its credential-masking CA
	// (docs/network.md §8); empty means defaultStateDir.
	stateDir string
}

// compatOptions are the flags `codex exec-server` takes for the Codex configuration
// (config.toml, -c overrides and feature toggles). The reference reads that configuration only
// for its outbound proxy policy (features.respect_system_proxy) and, on macOS, for where
// CODEX_HOME may point; neither maps onto this server (http/request always honours
// HTTP(S)_PROXY and NO_PROXY, and there is no CODEX_HOME). So no key or feature has an effect
// here: each one given is logged at start-up, and --strict-config makes it a usage error.
type compatOptions struct {
	config       configOverrides
	enable       stringList
	disable      stringList
	strictConfig bool
	// proxyPrivateIPs is --proxy-private-ips-via-upstream: accepted for wrappers, and ignored.
	// The reference's flag lets permitted private destinations go through the upstream proxy;
	// here a local or private destination is always dialled by the managed proxy itself,
	// through the guard against this server's own listeners (docs/network.md §1).
	proxyPrivateIPs bool
}

// defaultShmSize is the size of a Linux sandbox's /dev/shm, as Docker's: it is a tmpfs,
// memory of the host's, which would otherwise be half of it.
const defaultShmSize = 64 << 20

// byteSize is a flag's size in bytes: a number, or one with a K, M or G suffix (powers of
// 1024). Zero and negative sizes are refused.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	num, mult := strings.TrimSpace(s), int64(1)
	if n := len(num); n > 0 {
		switch num[n-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		}
		if mult > 1 {
			num = num[:n-1]
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	switch {
	case err != nil:
		return fmt.Errorf("want bytes, or a number with a K, M or G suffix")
	case v <= 0:
		return fmt.Errorf("want a size above 0")
	case v > math.MaxInt64/mult:
		return fmt.Errorf("too large")
	}
	*b = byteSize(v * mult)
	return nil
}

// configOverrides is the repeatable -c (--config) key=value. Like the reference, any value is
// taken, "=" or not: none is applied here.
type configOverrides []string

func (c *configOverrides) String() string { return strings.Join(*c, ",") }

func (c *configOverrides) Set(s string) error {
	*c = append(*c, s)
	return nil
}

// newFlagSet declares every flag of the server (not of the sandbox subcommand) into o. Each
// flag must also be named in flagGroups, or --help would not show it (TestHelpNamesEveryFlag).
func newFlagSet(o *cliOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("exec-server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.listen, "listen", defaultListen, "where to serve: ws://IP:PORT, or ws://localhost:PORT (127.0.0.1), for a websocket; stdio (or stdio://) for one connection on stdin and stdout. Port 0 picks a free port; once bound, the `URL` is printed on stdout")
	fs.BoolVar(&o.exitOnStdinClose, "exit-on-stdin-close", false, "exit when standard input reaches EOF")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error (logs go to stderr)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log `FORMAT`: text or json")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	fs.DurationVar(&o.sessionTTL, "session-ttl", defaultSessionTTL, "how long a detached session waits to be resumed")
	fs.DurationVar(&o.retention, "exited-process-retention", defaultRetention, "how long a closed process stays readable")
	fs.Int("concurrent-requests", 1, "requests at once per connection (`N`): accepted and ignored, requests never wait for each other here")
	fs.StringVar(&o.managedSandbox, "managed-sandbox", "enforce", "what to do with a request's managed sandbox (`MODE`): enforce it, or run-unsandboxed (only on a host that is itself the sandbox)")
	fs.IntVar(&o.maxConnections, "max-connections", defaultMaxConnections, "websocket connections served at once; past it an upgrade is answered 503")
	fs.StringVar(&o.pidNamespace, "linux-sandbox-pid-namespace", "isolate", "pid namespace `MODE` of a sandboxed process: isolate (one of its own) or inherit (the server's)")
	o.shmSize = defaultShmSize
	fs.Var(&o.shmSize, "linux-sandbox-shm-size", "`SIZE` of a sandbox's /dev/shm, in bytes or with a K, M or G suffix (memory of the host's; default 64M)")
	fs.BoolVar(&o.netproxy.transparentTCP, "linux-sandbox-transparent-tcp", false, "route every TCP connection of a managed Linux sandbox through its proxy's SOCKS policy")
	fs.StringVar(&o.stateDir, "state-dir", "", "`DIR` of the server's state: the credential-masking CA under DIR/mitm (default $XDG_STATE_HOME/exec-server, else ~/.local/state/exec-server; on macOS ~/Library/Application Support/exec-server)")
	fs.Var(&o.netproxy.tcpUpstream, "tcp-upstream-proxy", "send the raw TCP of the managed SOCKS listener through this HTTP CONNECT proxy (`HOST:PORT`)")
	fs.IntVar(&o.maxSandboxProcs, "linux-sandbox-max-processes", defaultSandboxMaxProcesses, "processes and threads (`N`) one sandbox may run at once, in its own user namespace")
	fs.StringVar(&o.wsAuth, "ws-auth", "", "websocket auth `MODE`: capability-token or signed-bearer-token")
	fs.StringVar(&o.wsTokenFile, "ws-token-file", "", "`FILE` holding the capability token")
	fs.StringVar(&o.wsTokenSHA256, "ws-token-sha256", "", "SHA-256 of the capability token, in `HEX`")
	fs.StringVar(&o.wsSecretFile, "ws-shared-secret-file", "", "`FILE` holding the HS256 secret of signed bearer tokens")
	fs.StringVar(&o.wsIssuer, "ws-issuer", "", "required JWT `ISSUER`")
	fs.StringVar(&o.wsAudience, "ws-audience", "", "required JWT `AUDIENCE`")
	fs.IntVar(&o.wsSkewSeconds, "ws-max-clock-skew-seconds", int(defaultWSMaxClockSkew/time.Second), "allowed JWT clock skew in `SECONDS`")
	o.remote.registerFlags(fs)
	o.limits.registerFlags(fs)
	fs.Var(&o.compat.config, "c", "a Codex config override, `key=value` (repeatable); no key has an effect here")
	fs.Var(&o.compat.config, "config", "the long form of -c: a `key=value` override")
	fs.BoolVar(&o.compat.proxyPrivateIPs, "proxy-private-ips-via-upstream", os.Getenv("CODEX_EXEC_SERVER_PROXY_PRIVATE_IPS_VIA_UPSTREAM") != "", "not supported, accepted and ignored: the managed network proxy never sends a private or local destination through the upstream proxy")
	fs.Var(&o.compat.enable, "enable", "`FEATURE` to enable (repeatable); no feature has an effect here")
	fs.Var(&o.compat.disable, "disable", "`FEATURE` to disable (repeatable); no feature has an effect here")
	fs.BoolVar(&o.compat.strictConfig, "strict-config", false, "make a -c key, --enable or --disable this server does not apply a usage error")
	return fs
}

// flagGroups is the layout of --help: every flag of newFlagSet, by concern.
var flagGroups = []struct {
	title string
	names []string
}{
	{"listening", []string{"listen", "exit-on-stdin-close"}},
	{"websocket auth", []string{"ws-auth", "ws-token-file", "ws-token-sha256", "ws-shared-secret-file",
		"ws-issuer", "ws-audience", "ws-max-clock-skew-seconds"}},
	{"sessions and limits", []string{"session-ttl", "exited-process-retention", "max-connections",
		"max-sessions", "max-processes-per-session", "max-open-handles", "max-watched-paths",
		"max-http-requests", "max-queued-bytes"}},
	{"forward", []string{"connect", "connect-token-file"}},
	{"remote mode", []string{"remote", "environment-id", "executor-id", "name", "remote-transport", "remote-ca", "identity"}},
	{"remote credentials (default: CODEX_API_KEY, else the Codex sign-in in $CODEX_HOME/auth.json)", []string{
		"registration-bearer-stdin", "executor-credential-stdin", "chatgpt-token-stdin", "chatgpt-account-id",
		"use-agent-identity-auth", "aws-sigv4", "aws-profile", "aws-region", "aws-service"}},
	{"sandbox", []string{"managed-sandbox", "linux-sandbox-pid-namespace",
		"linux-sandbox-shm-size", "linux-sandbox-max-processes"}},
	{"managed network proxy", []string{"linux-sandbox-transparent-tcp", "tcp-upstream-proxy", "state-dir"}},
	{"logging", []string{"log-level", "log-format"}},
	{"compatibility with codex exec-server", []string{"concurrent-requests", "c", "config", "enable", "disable", "strict-config", "proxy-private-ips-via-upstream"}},
	{"information", []string{"version"}},
}

const usageSynopsis = `usage:
  exec-server [--listen ws://IP:PORT] [flags]            serve a websocket (default ws://127.0.0.1:0)
  exec-server --listen stdio [flags]                     serve one connection on stdin and stdout
  exec-server --remote URL --environment-id ID [flags]   serve through a rendezvous relay
  exec-server forward --remote URL --environment-id ID --connect ws://HOST:PORT [flags]
                                                         register an existing websocket exec-server
                                                         as a remote environment
                                                         (exec-server forward --help)
  exec-server relay --config FILE [flags]                serve a self-hosted registry and rendezvous
                                                         (exec-server relay --help)
  exec-server sandbox [flags] -- CMD ARGS...             run one command under a sandbox
                                                         (exec-server sandbox --help)
  exec-server mitm-ca rotate [--state-dir DIR]           replace the credential-masking CA
  exec-server --version | --help
`

const usageCompatNote = `Every flag codex exec-server 0.169 takes is accepted. --concurrent-requests and
--proxy-private-ips-via-upstream are ignored (requests never wait for each other here; the
managed network proxy always dials a private or local destination itself, never through the
upstream proxy). -c/--config, --enable and --disable change nothing: the reference
reads the Codex configuration only for its outbound proxy policy and its CODEX_HOME, which this
server has no counterpart of; each one given is logged at start-up, and with --strict-config it
is a usage error instead. --executor-id, the exec-server README's name, is --environment-id
(giving both, with different values, is an error); 0.169 itself does not take it.
`

// forwardUsage is the synopsis of `exec-server forward --help`.
const forwardUsage = `usage: exec-server forward --remote URL --environment-id ID --connect ws://HOST:PORT [flags]

Register an existing websocket exec-server as a remote environment: each relay stream, once its
Noise handshake is done, is bridged to a websocket of its own to --connect (docs/remote.md §11).
The direct transport does not support forwarding.
`

// forwardGroup reports whether a flag group matters to `exec-server forward`.
func forwardGroup(title string) bool {
	return title == "forward" || title == "logging" || strings.HasPrefix(title, "remote ")
}

// writeUsage is --help: the synopsis, then the flags of fs by group, each with its default
// (for `exec-server forward --help`, only the groups that matter to it).
func writeUsage(w io.Writer, fs *flag.FlagSet, forward bool) {
	if forward {
		fmt.Fprint(w, forwardUsage)
	} else {
		fmt.Fprint(w, usageSynopsis)
	}
	for _, g := range flagGroups {
		if forward && !forwardGroup(g.title) || !forward && g.title == "forward" {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, name := range g.names {
			if f := fs.Lookup(name); f != nil {
				writeFlagUsage(w, f)
			}
		}
	}
	if !forward {
		fmt.Fprintf(w, "\n%s", usageCompatNote)
	}
}

// writeFlagUsage writes one flag as flag.PrintDefaults does, but with -- before long names,
// and with its default whenever it has one.
func writeFlagUsage(w io.Writer, f *flag.Flag) {
	dashes := "--"
	if len(f.Name) == 1 {
		dashes = "-"
	}
	valueName, usage := flag.UnquoteUsage(f)
	line := "  " + dashes + f.Name
	if valueName != "" {
		line += " " + valueName
	}
	_, isBool := f.Value.(interface{ IsBoolFlag() bool })
	_, isList := f.Value.(*stringList)
	_, isOverrides := f.Value.(*configOverrides)
	switch {
	case isBool || isList || isOverrides || strings.Contains(usage, "default"):
	case f.DefValue == "":
		usage += " (default: none)"
	default:
		usage += fmt.Sprintf(" (default %s)", f.DefValue)
	}
	fmt.Fprintf(w, "%s\n%s", line, wrapText(usage, "        ", 96))
}

// wrapText breaks s between words into lines of at most width bytes (a longer word gets a
// line of its own), each starting with indent and ending with a newline.
func wrapText(s, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, word := range strings.Fields(s) {
		if line != indent && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += word
	}
	b.WriteString(line + "\n")
	return b.String()
}

// usageHint ends every usage error, so that the one line says where to look.
const usageHint = "; run exec-server --help"

// parseFlags parses args into o. It returns flag.ErrHelp for -h and --help, and otherwise a
// *usageError of one line.
func parseFlags(args []string, o *cliOptions) (*flag.FlagSet, error) {
	fs := newFlagSet(o)
	err := fs.Parse(args)
	if err == nil && fs.Arg(0) == "forward" { // the subcommand takes every flag, and its own
		o.remote.forward = &forwardConfig{}
		o.remote.forward.registerFlags(fs)
		err = fs.Parse(fs.Args()[1:])
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return fs, err
		}
		return fs, &usageError{strings.ReplaceAll(err.Error(), "\n", " ")}
	}
	if fs.NArg() > 0 {
		return fs, &usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if err := o.remote.mergeExecutorID(); err != nil {
		return fs, &usageError{err.Error()}
	}
	if err := o.compat.check(); err != nil {
		return fs, &usageError{err.Error()}
	}
	return fs, nil
}

// check refuses, under --strict-config, every -c key and feature toggle (none is applied).
func (c *compatOptions) check() error {
	if !c.strictConfig {
		return nil
	}
	if len(c.config) > 0 {
		key, _, _ := strings.Cut(c.config[0], "=")
		return fmt.Errorf("--strict-config: config key %q has no effect on this server", key)
	}
	if features := append(append([]string(nil), c.enable...), c.disable...); len(features) > 0 {
		return fmt.Errorf("--strict-config: feature %q has no effect on this server", features[0])
	}
	return nil
}

// logIgnored says once, at start-up, which -c keys and features were given and not applied,
// so that a wrapper's setting is not silently dropped.
func (c *compatOptions) logIgnored(log *logger) {
	if len(c.config)+len(c.enable)+len(c.disable) == 0 {
		return
	}
	keys := make([]string, len(c.config))
	for i, kv := range c.config {
		keys[i], _, _ = strings.Cut(kv, "=")
	}
	log.Warn("config overrides and features have no effect on this server; ignored (--strict-config refuses them)",
		"config", strings.Join(keys, ","), "enable", c.enable.String(), "disable", c.disable.String())
}
