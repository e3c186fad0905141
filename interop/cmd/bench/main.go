// Command bench measures one exec-server, or compares two, over the websocket protocol of
// `codex exec-server` (issue 5). A server is a URL of a running server or a command line
// with a {PORT} placeholder, launched fresh for every round:
//
//	bench -a 'exec-server --listen ws://127.0.0.1:{PORT}' \
//	      -b 'codex exec-server --listen ws://127.0.0.1:{PORT}'
//
// Rounds alternate A, B, A, B, … and the physical limits (the same work without a server)
// are measured once per round. The report is a markdown table on stdout; progress goes to
// stderr. The exit status is 1 if any metric of A failed (and of B, with -strict-b).
//
// `bench netproxy …` measures the servers' managed network proxies instead (netproxy.go), and
// `bench relay …` a server and the reference behind `exec-server relay` (relay.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// config is the command line.
type config struct {
	specA, specB string
	nameA, nameB string
	rounds       int
	metrics      map[string]bool
	samples      int // latency samples per round for connect and process/start
	metaSamples  int // fs/getMetadata samples per round
	metaWarmup   time.Duration
	pipeBytes    int64
	ptyBytes     int64
	fileBytes    int64
	blockBytes   int64
	reps         int
	conns        int
	perConn      int
	sleeps       int
	limits       bool
	verify       bool
	strictB      bool
	verbose      bool
	timeout      time.Duration
	quiet        float64       // CPU idle share to wait for before each round; 0 = do not wait
	quietMax     time.Duration // longest wait for it
	busyRounds   int           // rounds that started on a busy machine (filled in by run)
}

func main() {
	if os.Getenv(nullServerEnv) != "" {
		os.Exit(serveNull())
	}
	if len(os.Args) > 1 && os.Args[1] == "netproxy" {
		os.Exit(runNetProxy(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "relay" {
		os.Exit(runRelay(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// servers is the number of servers under test.
func (cfg *config) servers() int {
	if cfg.specB != "" {
		return 2
	}
	return 1
}

// metricNames lists the selectable metrics.
func metricNames() []string {
	names := []string{"size"}
	for _, m := range metrics {
		names = append(names, m.name)
	}
	return names
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	cfg := &config{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.specA, "a", "", "server A: ws:// URL, or command line with {PORT} (required)")
	fs.StringVar(&cfg.specB, "b", "", "server B: ws:// URL, or command line with {PORT} (optional)")
	fs.StringVar(&cfg.nameA, "name-a", "A", "name of server A in the report")
	fs.StringVar(&cfg.nameB, "name-b", "B", "name of server B in the report")
	fs.IntVar(&cfg.rounds, "rounds", 5, "rounds per server")
	list := fs.String("metrics", "all", "comma-separated metrics: "+strings.Join(metricNames(), ","))
	small := fs.Bool("small", false, "tiny sizes and sample counts, for a smoke run")
	fs.IntVar(&cfg.samples, "samples", 30, "latency samples per round for connect and process/start")
	fs.IntVar(&cfg.metaSamples, "meta-samples", 300, "fs/getMetadata samples per round")
	fs.DurationVar(&cfg.metaWarmup, "meta-warmup", 300*time.Millisecond, "untimed fs/getMetadata calls before the samples, for this long (see getMetadata)")
	pipe := fs.String("pipe-bytes", "256M", "bytes of pipe output")
	ptyb := fs.String("pty-bytes", "64M", "bytes of PTY output")
	file := fs.String("file-bytes", "32M", "bytes of fs/readFile and fs/writeFile")
	block := fs.String("block-bytes", "1G", "bytes read by fs/readBlock")
	fs.IntVar(&cfg.reps, "reps", 3, "repetitions per round of each throughput measurement (pipe, PTY, readFile, writeFile, and their limits)")
	fs.IntVar(&cfg.conns, "conns", 50, "connections of the many-connections metric")
	fs.IntVar(&cfg.perConn, "per-conn", 20, "sequential processes per connection")
	fs.IntVar(&cfg.sleeps, "sleeps", 200, "concurrent sleep processes")
	fs.BoolVar(&cfg.limits, "limits", true, "measure physical limits (no server) each round")
	fs.BoolVar(&cfg.verify, "verify", false, "decode every output chunk and check it is zeros (else count from base64 length)")
	fs.BoolVar(&cfg.verbose, "v", false, "log each throughput repetition with its chunk sizes")
	fs.BoolVar(&cfg.strictB, "strict-b", false, "exit 1 also when a metric of B fails")
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "time limit of one metric on one server")
	fs.Float64Var(&cfg.quiet, "quiet", 0.85, "before each round, wait until this share of CPU time is idle (0: do not wait)")
	fs.DurationVar(&cfg.quietMax, "quiet-max", 30*time.Second, "longest wait for a quiet machine before a round")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if cfg.specA == "" {
		return nil, fmt.Errorf("-a is required")
	}
	if *small {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		shrink := func(name string, p *string, v string) {
			if !set[name] {
				*p = v
			}
		}
		shrinkInt := func(name string, p *int, v int) {
			if !set[name] {
				*p = v
			}
		}
		shrink("pipe-bytes", pipe, "8M")
		shrink("pty-bytes", ptyb, "1M")
		shrink("file-bytes", file, "1M")
		shrink("block-bytes", block, "8M")
		shrinkInt("samples", &cfg.samples, 5)
		shrinkInt("meta-samples", &cfg.metaSamples, 20)
		if !set["meta-warmup"] {
			cfg.metaWarmup = 10 * time.Millisecond
		}
		shrinkInt("reps", &cfg.reps, 1)
		shrinkInt("conns", &cfg.conns, 4)
		shrinkInt("per-conn", &cfg.perConn, 3)
		shrinkInt("sleeps", &cfg.sleeps, 10)
	}
	for _, s := range []struct {
		text string
		dst  *int64
	}{{*pipe, &cfg.pipeBytes}, {*ptyb, &cfg.ptyBytes}, {*file, &cfg.fileBytes}, {*block, &cfg.blockBytes}} {
		n, err := parseSize(s.text)
		if err != nil {
			return nil, err
		}
		*s.dst = n
	}
	cfg.metrics = map[string]bool{}
	known := metricNames()
	for _, m := range strings.Split(*list, ",") {
		m = strings.TrimSpace(m)
		switch {
		case m == "all":
			for _, k := range known {
				cfg.metrics[k] = true
			}
		case slices.Contains(known, m):
			cfg.metrics[m] = true
		case m != "":
			return nil, fmt.Errorf("unknown metric %q (have %s)", m, strings.Join(known, ","))
		}
	}
	if cfg.rounds < 1 || cfg.samples < 1 || cfg.metaSamples < 1 || cfg.reps < 1 || cfg.conns < 1 || cfg.perConn < 1 || cfg.sleeps < 1 {
		return nil, fmt.Errorf("rounds, samples and counts must be at least 1")
	}
	return cfg, nil
}

// parseSize reads a byte count with an optional K, M or G (binary) suffix.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult = 1 << 10
	case strings.HasSuffix(s, "M"):
		mult = 1 << 20
	case strings.HasSuffix(s, "G"):
		mult = 1 << 30
	}
	n, err := strconv.ParseInt(strings.TrimRight(s, "KMG"), 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q: want a positive count with optional K, M or G", s)
	}
	return n * mult, nil
}

// sizeName prints a byte count the way the flags take it.
func sizeName(n int64) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if err != flag.ErrHelp {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 2
		}
		return 0
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	res := newResults(rowDefs(cfg))
	fx, err := makeFixtures(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "bench: fixtures: %v\n", err)
		return 1
	}
	defer os.RemoveAll(fx.dir)

	// contender is a server under test and the process ids it has used.
	type contender struct {
		spec string
		side side
		seq  int
	}
	sides := []*contender{{spec: cfg.specA, side: sideA}}
	if cfg.specB != "" {
		sides = append(sides, &contender{spec: cfg.specB, side: sideB})
	}
	if cfg.metrics["size"] {
		for _, t := range sides {
			if n, _, err := binarySize(t.spec); err == nil {
				res.add("size", t.side, 0, float64(n)/1e6)
			} else {
				res.fail("size", t.side, err)
			}
		}
	}
	started := time.Now()
	for round := range cfg.rounds {
		if cfg.limits {
			if err := measureLimits(cfg, res, fx, round); err != nil {
				logf("round %d: limits: %v", round+1, err)
			}
		}
		for _, t := range sides {
			name := cfg.nameA
			if t.side == sideB {
				name = cfg.nameB
			}
			logf("round %d/%d: %s", round+1, cfg.rounds, name)
			if cfg.quiet > 0 {
				if _, ok := waitQuiet(cfg.quiet, cfg.quietMax, logf); !ok {
					cfg.busyRounds++
				}
			}
			rc := &runCtx{cfg: cfg, res: res, side: t.side, round: round, fx: fx, seq: t.seq, logf: logf}
			runRound(rc, t.spec, logf)
			t.seq = rc.seq
		}
	}
	logf("done in %v", time.Since(started).Round(time.Second))

	writePreamble(stdout, cfg)
	res.report(stdout, cfg.nameA, cfg.nameB, cfg.specB != "")
	if res.failed(sideA) || (cfg.strictB && res.failed(sideB)) {
		return 1
	}
	return 0
}

// runRound launches the server of rc and runs the selected metrics on it; a server that
// dies is relaunched for the metrics that remain.
func runRound(rc *runCtx, spec string, logf func(string, ...any)) {
	var srv *server
	defer func() {
		if srv != nil {
			srv.stop()
		}
	}()
	for _, m := range metrics {
		if !rc.cfg.metrics[m.name] {
			continue
		}
		if srv != nil && srv.exited() {
			logf("  server exited (%s); relaunching", srv.errs)
			srv.stop()
			srv = nil
		}
		if srv == nil {
			var err error
			ctx, cancel := context.WithTimeout(context.Background(), rc.cfg.timeout)
			srv, err = launch(ctx, spec)
			cancel()
			if err != nil {
				for _, key := range m.rows {
					rc.res.fail(key, rc.side, err)
				}
				logf("  %s: %v", m.name, err)
				continue
			}
			rc.srv = srv
		}
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), rc.cfg.timeout)
		err := m.run(ctx, rc)
		cancel()
		if err != nil {
			for _, key := range m.rows {
				rc.res.fail(key, rc.side, err)
			}
			logf("  %s: FAILED after %v: %v", m.name, time.Since(t0).Round(time.Millisecond), err)
			continue
		}
		logf("  %s: %v", m.name, time.Since(t0).Round(time.Millisecond))
	}
}

// writePreamble prints what the figures were measured on and with.
func writePreamble(w io.Writer, cfg *config) {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	fmt.Fprintf(w, "Measured %s on %d CPUs, %s %s, kernel %s; bench built with %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH,
		strings.TrimSpace(string(kernel)), runtime.Version())
	fmt.Fprintf(w, "- %s: `%s`\n", cfg.nameA, cfg.specA)
	if cfg.specB != "" {
		fmt.Fprintf(w, "- %s: `%s`\n", cfg.nameB, cfg.specB)
	}
	var sel []string
	for _, n := range metricNames() {
		if cfg.metrics[n] {
			sel = append(sel, n)
		}
	}
	fmt.Fprintf(w, "- %d rounds (alternating), metrics %s; %d latency samples per round (%d for getMetadata) after %d warm-ups (getMetadata: %v of calls); %d repetitions of each throughput figure per round\n",
		cfg.rounds, strings.Join(sel, ","), cfg.samples, cfg.metaSamples, warmups, cfg.metaWarmup, cfg.reps)
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(w, "- load average at the end: %s\n", strings.Join(strings.Fields(string(la))[:3], " "))
	}
	if cfg.quiet > 0 {
		fmt.Fprintf(w, "- each server's round started once the CPUs were ≥ %.0f%% idle; %d of %d rounds started on a busy machine after waiting %v\n",
			100*cfg.quiet, cfg.busyRounds, cfg.rounds*cfg.servers(), cfg.quietMax)
	}
	fmt.Fprintln(w)
}
