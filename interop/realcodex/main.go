// Command realcodex checks our exec-server against the real Codex 0.169 harness
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
	"strings"
	"syscall"
	"time"
)

// config is the command line.
type config struct {
	codex   string // reference codex binary
	ours    string // our exec-server binary
	workdir string // scratch directory for logs, CODEX_HOMEs and the command cwd
	checks  map[string]bool
	verbose bool
	agent   bool
}

const allChecks = "local-ref,local-ours,diff,remote-ref,remote-ours"

func main() {
	var cfg config
	var checks string
	flag.StringVar(&cfg.codex, "codex", "", "reference codex 0.169 binary (required)")
	flag.StringVar(&cfg.ours, "ours", "", "our exec-server binary (required)")
	flag.StringVar(&cfg.workdir, "workdir", "", "scratch directory (default: a new temp dir)")
	flag.StringVar(&checks, "checks", allChecks, "comma-separated checks: local-ref, local-ours, diff (needs both local runs), remote-ref, remote-ours; local and remote name both of their pair")
	flag.BoolVar(&cfg.agent, "agent", true, "also run an agent turn against the loopback mock model")
	flag.BoolVar(&cfg.verbose, "v", false, "copy the event log to stderr")
	flag.Parse()
	if cfg.codex == "" || cfg.ours == "" {
		flag.Usage()
		os.Exit(2)
	}
	cfg.checks = map[string]bool{}
	for _, c := range strings.Split(checks, ",") {
		switch c = strings.TrimSpace(c); c {
		case "local", "remote":
			cfg.checks[c+"-ref"], cfg.checks[c+"-ours"] = true, true
		case "diff":
			cfg.checks["diff"], cfg.checks["local-ref"], cfg.checks["local-ours"] = true, true, true
		case "local-ref", "local-ours", "remote-ref", "remote-ours":
			cfg.checks[c] = true
		default:
			fatal(fmt.Errorf("unknown check %q", c))
		}
	}
	if cfg.workdir == "" {
		d, err := os.MkdirTemp("", "realcodex-")
		if err != nil {
			fatal(err)
		}
		cfg.workdir = d
	}
	cfg.workdir, _ = filepath.Abs(cfg.workdir)
	cfg.codex, _ = filepath.Abs(cfg.codex)
	cfg.ours, _ = filepath.Abs(cfg.ours)
	if err := os.MkdirAll(cfg.workdir, 0o700); err != nil {
		fatal(err)
	}
	os.Exit(run(cfg))
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
	var local = map[string]*localRun{}
	for _, target := range []string{"ref", "ours"} {
		if cfg.checks["local-"+target] {
			lr := runLocal(ctx, cfg, log, target)
			local[target] = lr
			report("local/"+target, lr.results)
		}
	}
	if cfg.checks["diff"] {
		report("diff", diffLocal(cfg, log, local["ref"], local["ours"]))
	}
	if cfg.checks["remote-ref"] {
		report("remote/ref", runRemote(ctx, cfg, log, "ref"))
	}
	if cfg.checks["remote-ours"] {
		report("remote/ours", runRemote(ctx, cfg, log, "ours"))
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

// localRun is what one local run leaves for the diff.
type localRun struct {
	results []stepResult
	proxy   *wsProxy
	workdir string
	home    string
}

// runLocal starts an exec-server (ours or the reference) on loopback, a logging proxy in
// front of it, and the real app-server pointed at the proxy through CODEX_EXEC_SERVER_URL.
func runLocal(ctx context.Context, cfg config, log *eventLog, target string) *localRun {
	lr := &localRun{}
	fail := func(name string, err error) *localRun {
		lr.results = append(lr.results, stepResult{Name: name, Detail: err.Error()})
		return lr
	}
	dir := filepath.Join(cfg.workdir, "local-"+target)
	lr.workdir = filepath.Join(dir, "work")
	lr.home = filepath.Join(dir, "exec-home")
	for _, d := range []string{lr.workdir, lr.home} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fail("setup", err)
		}
	}
	log.Printf("==== local/%s", target)
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

	lr.results = append(lr.results, runHarness(ctx, cfg, log, dir, lr.workdir, "local/"+target,
		[]string{"CODEX_EXEC_SERVER_URL=" + proxy.URL()}, func(s *scenario) {
			s.extraURL = proxy.URL()
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
func runHarness(ctx context.Context, cfg config, log *eventLog, dir, workdir, name string, extraEnv []string, setup func(*scenario)) []stepResult {
	model, err := startMockModel(log)
	if err != nil {
		return []stepResult{{Name: "start mock model", Detail: err.Error()}}
	}
	defer model.Close()
	home := filepath.Join(dir, "codex-home")
	if err := codexHomeConfig(home, model.BaseURL()); err != nil {
		return []stepResult{{Name: "write CODEX_HOME", Detail: err.Error()}}
	}
	env := append([]string{"CODEX_HOME=" + home, "CODEX_API_KEY=sk-unused", "RUST_LOG=info"}, extraEnv...)
	app, err := startAppServer(log, name+" app", cfg.codex, env, filepath.Join(dir, "app-server.log"))
	if err != nil {
		return []stepResult{{Name: "start app-server", Detail: err.Error()}}
	}
	defer app.Close()
	s := &scenario{app: app, workdir: workdir, marker: "realcodex-" + randomHex(4)}
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
