// Command realcodex checks our exec-server against the real Codex harness (0.171, or 0.169)
// (`codex app-server`), locally over a websocket and remotely through a loopback registry and
// rendezvous, and diffs our answers with the reference `codex exec-server`'s. Everything
// binds 127.0.0.1. It prints one PASS/FAIL/SKIP line per check and exits 1 if any failed.
// run.sh next to this file fetches the reference binary and builds both programs.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// config is the command line.
type config struct {
	codex   string // reference codex binary
	version string // its version (-codex-version): the 0.171 scenarios run only against 0.171
	ours    string // our exec-server binary
	workdir string // scratch directory for logs, CODEX_HOMEs and the command cwd
	checks  map[string]bool
	verbose bool
	agent   bool
	modes   []string // sandbox modes to run the checks under, in order (-s)
	base    bool     // run the base scenario in the local and remote checks (-scenarios)
	caps    bool     // run the capability scenario (capscenario.go) in them (-scenarios)
	net     bool     // run the network scenario (netscenario.go) in them (-scenarios)
}

const allChecks = "local-ref,local-ours,diff,remote-ref,remote-ours,credentials,forward,relayd"

// The sandbox modes of -s, as config.toml's sandbox_mode and thread/start's sandbox spell them.
const (
	modeFull  = "danger-full-access"
	modeWrite = "workspace-write"
	modeRead  = "read-only"
)

var allModes = []string{modeFull, modeWrite, modeRead}

func main() {
	var cfg config
	var checks, modes, scenarios string
	flag.StringVar(&cfg.codex, "codex", "", "reference codex binary, 0.171 or 0.169 (required)")
	flag.StringVar(&cfg.version, "codex-version", "0.171.0", "the reference binary's version (run.sh passes REALCODEX_VERSION)")
	flag.StringVar(&cfg.ours, "ours", "", "our exec-server binary (required)")
	flag.StringVar(&cfg.workdir, "workdir", "", "scratch directory, outside /tmp when a sandbox mode is run (default: a new directory under ~/.cache/realcodex)")
	flag.StringVar(&checks, "checks", allChecks, "comma-separated checks: local-ref, local-ours, diff (needs both local runs), remote-ref, remote-ours, credentials, "+
		"forward-ref, forward-ours, forward-control, forward-upgrade (needs forward-ref and forward-control), "+
		"relayd-ours, relayd-forward, relayd-ref, relayd-fleet-ours, relayd-fleet-forward, relayd-fleet-ref, relayd-acl, "+
		"mask-local-ref, mask-local-ours, mask-relayd-ref, mask-relayd-ours (credential masking, maskscenario.go; not in the default); "+
		"local and remote name both of their pair, forward all four, relayd all seven, mask all four")
	flag.BoolVar(&cfg.agent, "agent", true, "also run an agent turn against the loopback mock model")
	flag.BoolVar(&cfg.verbose, "v", false, "copy the event log to stderr")
	flag.StringVar(&modes, "s", modeFull, "sandbox mode(s) of the thread, comma-separated: danger-full-access, workspace-write, read-only, or all; every check runs under each")
	flag.StringVar(&scenarios, "scenarios", "base,caps,net", "comma-separated scenarios of the local and remote checks: base (the commands, PTY, image, breaks, sandbox steps), "+
		"caps (skills, remote MCP, shell snapshots; 0.171 only) and net (the managed network proxy: allow, deny and review domains; 0.171 only)")
	flag.Parse()
	if cfg.codex == "" || cfg.ours == "" {
		flag.Usage()
		os.Exit(2)
	}
	var err error
	if cfg.modes, err = parseModes(modes); err != nil {
		fatal(err)
	}
	for _, sc := range strings.Split(scenarios, ",") {
		switch sc = strings.TrimSpace(sc); sc {
		case "base":
			cfg.base = true
		case "caps":
			cfg.caps = true
		case "net":
			cfg.net = true
		default:
			fatal(fmt.Errorf("unknown scenario %q (want base, caps, net)", sc))
		}
	}
	cfg.checks = map[string]bool{}
	for _, c := range strings.Split(checks, ",") {
		switch c = strings.TrimSpace(c); c {
		case "local", "remote":
			cfg.checks[c+"-ref"], cfg.checks[c+"-ours"] = true, true
		case "diff":
			cfg.checks["diff"], cfg.checks["local-ref"], cfg.checks["local-ours"] = true, true, true
		case "forward":
			for _, fc := range forwardChecks {
				cfg.checks[fc.name] = true
			}
			cfg.checks["forward-upgrade"] = true
		case "relayd":
			for _, n := range relaydCheckNames() {
				cfg.checks[n] = true
			}
		case "forward-upgrade":
			cfg.checks[c], cfg.checks["forward-ref"], cfg.checks["forward-control"] = true, true, true
		case "mask":
			for _, n := range maskCheckNames {
				cfg.checks[n] = true
			}
		case "local-ref", "local-ours", "remote-ref", "remote-ours", "credentials", "forward-ref", "forward-ours", "forward-control":
			cfg.checks[c] = true
		default:
			if !slices.Contains(relaydCheckNames(), c) && !slices.Contains(maskCheckNames, c) {
				fatal(fmt.Errorf("unknown check %q", c))
			}
			cfg.checks[c] = true
		}
	}
	if cfg.workdir == "" {
		d, err := newWorkdir()
		if err != nil {
			fatal(err)
		}
		cfg.workdir = d
	}
	cfg.workdir, _ = filepath.Abs(cfg.workdir)
	if t := underTempDir(cfg.workdir); t != "" && sandboxed(cfg.modes) {
		fatal(fmt.Errorf("-workdir %s is under the temporary directory %s: the reference then refuses to create "+
			"its sandbox helper links (\"Refusing to create helper binaries under temporary dir\"), "+
			"so its sandboxed PTYs fail; choose a directory outside it, or leave -workdir out", cfg.workdir, t))
	}
	cfg.codex, _ = filepath.Abs(cfg.codex)
	cfg.ours, _ = filepath.Abs(cfg.ours)
	if err := os.MkdirAll(cfg.workdir, 0o700); err != nil {
		fatal(err)
	}
	os.Exit(run(cfg))
}

// parseModes reads -s.
func parseModes(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		var add []string
		switch m {
		case "all":
			add = allModes
		case modeFull, modeWrite, modeRead:
			add = []string{m}
		default:
			return nil, fmt.Errorf("unknown sandbox mode %q (want %s, or all)", m, strings.Join(allModes, ", "))
		}
		for _, a := range add {
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// sandboxed reports whether any of modes restricts the commands.
func sandboxed(modes []string) bool {
	for _, m := range modes {
		if m != modeFull {
			return true
		}
	}
	return false
}

// tempDirs are the directories the children's std::env::temp_dir() can be: they get no
// TMPDIR (baseEnv), so /tmp, and this process's TMPDIR in case that ever changes.
func tempDirs() []string {
	dirs := []string{"/tmp"}
	if t := os.Getenv("TMPDIR"); t != "" {
		dirs = append(dirs, filepath.Clean(t))
	}
	return dirs
}

// underTempDir returns the temporary directory path lies in (compared component-wise, as
// Rust's Path::starts_with does, and also after resolving symlinks), or "".
func underTempDir(path string) string {
	paths := []string{filepath.Clean(path)}
	if r, err := filepath.EvalSymlinks(path); err == nil {
		paths = append(paths, r)
	}
	for _, t := range tempDirs() {
		ts := []string{t}
		if r, err := filepath.EvalSymlinks(t); err == nil && r != t {
			ts = append(ts, r)
		}
		for _, p := range paths {
			for _, tt := range ts {
				if p == tt || strings.HasPrefix(p, strings.TrimSuffix(tt, "/")+"/") {
					return t
				}
			}
		}
	}
	return ""
}

// newWorkdir makes the default scratch directory: $XDG_CACHE_HOME/realcodex/run-* (or
// ~/.cache/realcodex/run-*), else /var/tmp/realcodex-*. Never under /tmp: the CODEX_HOMEs
// and workspaces live in it, and the reference only creates its sandbox helper links (which
// sandboxed PTYs need) when its CODEX_HOME is outside the temporary directory.
func newWorkdir() (string, error) {
	var bases []string
	if c := os.Getenv("XDG_CACHE_HOME"); c != "" {
		bases = append(bases, filepath.Join(c, "realcodex"))
	}
	if h := os.Getenv("HOME"); h != "" {
		bases = append(bases, filepath.Join(h, ".cache", "realcodex"))
	}
	for _, b := range bases {
		if underTempDir(b) != "" || os.MkdirAll(b, 0o700) != nil {
			continue
		}
		if d, err := os.MkdirTemp(b, "run-"); err == nil {
			return d, nil
		}
	}
	return os.MkdirTemp("/var/tmp", "realcodex-")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "realcodex:", err)
	os.Exit(2)
}

// run executes the selected checks and returns the exit status.
func run(cfg config) int {
	logf, err := os.Create(filepath.Join(cfg.workdir, "events.log"))
	if err != nil {
		fatal(err)
	}
	defer logf.Close()
	log := newEventLog(logf, cfg.verbose)
	fmt.Printf("realcodex: logs in %s\n", cfg.workdir)

	var results []stepResult
	report := func(prefix string, rs []stepResult) {
		for _, r := range rs {
			r.Name = prefix + ": " + r.Name
			printResult(r)
			results = append(results, r)
		}
	}
	// An interrupt cancels every wait, so the deferred Stop/Close calls end the children.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, mode := range cfg.modes {
		if ctx.Err() != nil {
			break
		}
		m := newModeRun(cfg, mode)
		if err := os.MkdirAll(m.dir, 0o700); err != nil {
			fatal(err)
		}
		var local = map[string]*localRun{}
		for _, target := range []string{"ref", "ours"} {
			if cfg.checks["local-"+target] && cfg.base {
				lr := runLocal(ctx, cfg, log, m, target)
				local[target] = lr
				report(m.label("local/"+target), lr.results)
			}
			if cfg.checks["local-"+target] && cfg.caps && ctx.Err() == nil {
				report(m.label("local/"+target), runCaps(ctx, cfg, log, m, target, "local"))
			}
			if cfg.checks["local-"+target] && cfg.net && ctx.Err() == nil {
				report(m.label("local/"+target), runNet(ctx, cfg, log, m, target, "local"))
			}
		}
		if cfg.checks["diff"] && cfg.base {
			report(m.label("diff"), diffLocal(cfg, log, m, local["ref"], local["ours"]))
		}
		for _, target := range []string{"ref", "ours"} {
			if cfg.checks["remote-"+target] && cfg.base {
				report(m.label("remote/"+target), runRemote(ctx, cfg, log, m, target))
			}
			if cfg.checks["remote-"+target] && cfg.caps && ctx.Err() == nil {
				report(m.label("remote/"+target), runCaps(ctx, cfg, log, m, target, "remote"))
			}
			if cfg.checks["remote-"+target] && cfg.net && ctx.Err() == nil {
				report(m.label("remote/"+target), runNet(ctx, cfg, log, m, target, "remote"))
			}
		}
		forwards := map[string]*forwardRun{}
		for _, fc := range forwardChecks {
			if cfg.checks[fc.name] && ctx.Err() == nil {
				fr := runForward(ctx, cfg, log, m, fc)
				forwards[fc.name] = fr
				report(m.label(fc.name), fr.results)
			}
		}
		if cfg.checks["forward-upgrade"] {
			report(m.label("forward-upgrade"), compareUpgrades(forwards["forward-ref"], forwards["forward-control"]))
		}
		for _, rc := range relaydChecks {
			if cfg.checks[rc.name] && cfg.base && ctx.Err() == nil {
				report(m.label(rc.name), runRelayd(ctx, cfg, log, m, rc))
			}
		}
		for _, n := range maskCheckNames {
			if cfg.checks[n] && ctx.Err() == nil {
				f := strings.Split(n, "-") // mask-<transport>-<target>
				report(m.label(n), runMask(ctx, cfg, log, m, f[2], f[1]))
			}
		}
		if cfg.checks["relayd-acl"] && m.mode == cfg.modes[0] && ctx.Err() == nil {
			report("relayd-acl", runRelaydACL(ctx, cfg, log, m))
		}
		if cfg.checks["credentials"] && m.mode == cfg.modes[0] {
			report("credentials", runCredentials(ctx, cfg, log, m))
		}
	}
	failed := 0
	for _, r := range results {
		if !r.OK && !r.Skip {
			failed++
		}
	}
	fmt.Printf("realcodex: %d checks, %d failed\n", len(results), failed)
	if failed > 0 {
		return 1
	}
	return 0
}

func printResult(r stepResult) {
	status := "PASS"
	switch {
	case r.Skip:
		status = "SKIP"
	case !r.OK:
		status = "FAIL"
	}
	line := status + " " + r.Name
	if r.Detail != "" && (!r.OK || r.Skip) {
		line += "\n     " + strings.ReplaceAll(r.Detail, "\n", "\n     ")
	}
	fmt.Println(line)
}

// execServerCommand returns the binary and leading arguments for target ("ours" or "ref").
func execServerCommand(cfg config, target string) (string, []string) {
	if target == "ref" {
		return cfg.codex, []string{"exec-server"}
	}
	return cfg.ours, nil
}

// modeRun is one sandbox mode's pass over the checks.
type modeRun struct {
	mode   string
	dir    string // this mode's directory: the work directory itself for a lone default mode
	suffix string // appended to each check's name: "" for a lone default mode, else [mode]
}

func newModeRun(cfg config, mode string) modeRun {
	if len(cfg.modes) == 1 && mode == modeFull {
		return modeRun{mode: mode, dir: cfg.workdir}
	}
	return modeRun{mode: mode, dir: filepath.Join(cfg.workdir, mode), suffix: "[" + mode + "]"}
}

func (m modeRun) label(check string) string { return check + m.suffix }

// localRun is what one local run leaves for the diff.
type localRun struct {
	results []stepResult
	proxy   *wsProxy
	dir     string // the run's directory (logs, CODEX_HOMEs, the workspace and its siblings)
	workdir string
	home    string
}

// runLocal starts an exec-server (ours or the reference) on loopback, a logging proxy in
// front of it, and the real app-server pointed at the proxy through CODEX_EXEC_SERVER_URL.
func runLocal(ctx context.Context, cfg config, log *eventLog, m modeRun, target string) *localRun {
	lr := &localRun{}
	fail := func(name string, err error) *localRun {
		lr.results = append(lr.results, stepResult{Name: name, Detail: err.Error()})
		return lr
	}
	dir := filepath.Join(m.dir, "local-"+target)
	lr.dir = dir
	lr.workdir = filepath.Join(dir, "work")
	lr.home = filepath.Join(dir, "exec-home")
	for _, d := range []string{lr.workdir, lr.home} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fail("setup", err)
		}
	}
	log.Printf("==== local/%s, sandbox mode %s", target, m.mode)
	bin, args := execServerCommand(cfg, target)
	args = append(args, "--listen", "ws://127.0.0.1:0")
	if target == "ours" {
		args = append(args, "--log-level", "debug")
	}
	srv, url, err := startChild("exec-server/"+target, bin, args,
		[]string{"CODEX_HOME=" + lr.home}, lr.workdir, "", filepath.Join(dir, "exec-server.log"), true)
	if err != nil {
		return fail("start exec-server", err)
	}
	defer srv.Stop()
	log.Printf("local/%s: exec-server at %s", target, url)
	lr.results = append(lr.results, resumeResult(url, lr.workdir, log, target))
	proxy, err := startWSProxy(log, "local/"+target, url)
	if err != nil {
		return fail("start proxy", err)
	}
	lr.proxy = proxy
	defer proxy.Close()
	defer func() { writeWire(filepath.Join(dir, "wire.jsonl"), proxy.Messages()) }()

	lr.results = append(lr.results, runHarness(ctx, cfg, log, m.mode, dir, lr.workdir, m.label("local/"+target),
		[]string{"CODEX_EXEC_SERVER_URL=" + proxy.URL()}, func(s *scenario) {
			s.reference = target == "ref"
			s.extraURL = proxy.URL()
			s.wire = proxy.Messages
			s.breaks = []func() string{func() string {
				proxy.DropAll()
				return "the exec-server websocket dropped"
			}}
		})...)
	if srv.Exited() {
		lr.results = append(lr.results, stepResult{Name: "exec-server still running after the scenario", Detail: "exited; see " + filepath.Join(dir, "exec-server.log")})
	}
	return lr
}

// runHarness starts the mock model and the app-server with extraEnv and runs the scenario.
// The thread runs under sandbox mode mode.
func runHarness(ctx context.Context, cfg config, log *eventLog, mode, dir, workdir, name string, extraEnv []string, setup func(*scenario)) []stepResult {
	model, err := startMockModel(log)
	if err != nil {
		return []stepResult{{Name: "start mock model", Detail: err.Error()}}
	}
	defer model.Close()
	home := filepath.Join(dir, "codex-home")
	if err := codexHomeConfig(home, model.BaseURL(), mode); err != nil {
		return []stepResult{{Name: "write CODEX_HOME", Detail: err.Error()}}
	}
	env := append([]string{"CODEX_HOME=" + home, "CODEX_API_KEY=sk-unused", "RUST_LOG=info"}, extraEnv...)
	app, err := startAppServer(log, name+" app", cfg.codex, env, filepath.Join(dir, "app-server.log"))
	if err != nil {
		return []stepResult{{Name: "start app-server", Detail: err.Error()}}
	}
	defer app.Close()
	s := &scenario{app: app, log: log, mode: mode, workdir: workdir, marker: "realcodex-" + randomHex(4)}
	if cfg.agent {
		s.model = model
	}
	if setup != nil {
		setup(s)
	}
	c, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	return s.run(c)
}
