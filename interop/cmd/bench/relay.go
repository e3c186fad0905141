package main

// `bench relay`: exec-server and the reference executor behind the same `exec-server relay`
// (issue 24 point 5; docs/remote.md §12 of the root). One relay process, and per server two
// executors: one listening on its websocket (direct) and one registered with the relay in
// remote mode (`--remote`). The root package's BenchmarkRelaydRPC (relayd_bench_test.go, a
// harness of its own: the connect bundle, the harness socket, Noise hybridIK) measures
// process start → closed, the fs/getMetadata round trip and pipe output against each of the
// four, one test-binary run per metric, in an order that alternates round by round. The
// relay's own cost comes from the same test binary's BenchmarkRelaydForward, Echo and
// Streams, whose executors are raw sockets (nothing but the relay in the path), with the
// relay's CPU time and RSS read from /proc.
//
//	bench relay -test exec-server.test -exec ./exec-server -ref codex -home DIR -rounds 5
//
// DIR holds the reference's CODEX_HOMEs (the reference wants one not under /tmp).

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// rlConfig is the command line of `bench relay`.
type rlConfig struct {
	testBin, execBin, refBin, home string
	rounds                         int
	startN, metaN, pipeN           int // -test.benchtime of each BenchmarkRelaydRPC metric, in runs
	fwdN, echoN, streamsN          int
	quiet                          float64
	quietMax                       time.Duration
}

// rlTokens are the static tokens of the bench relay's configuration.
const (
	rlRegisterToken = "bench-register-token-0123456789"
	rlConnectToken  = "bench-connect-token-0123456789"
)

// rlProc is a launched process: the relay or an executor.
type rlProc struct {
	name string
	cmd  *exec.Cmd
	errs *tailBuffer
	exit chan struct{}
	line chan string // its first line of output
}

func startRLProc(name string, argv, env []string, stdin string) (*rlProc, error) {
	p := &rlProc{name: name, errs: &tailBuffer{max: stderrTail}, exit: make(chan struct{}), line: make(chan string, 1)}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdin = strings.NewReader(stdin)
	p.cmd.Stderr = p.errs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.cmd.Wait(); close(p.exit) }()
	go func() { // reads stdout until the process ends
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			p.line <- strings.TrimSpace(sc.Text())
		}
		io.Copy(io.Discard, out)
	}()
	return p, nil
}

func (p *rlProc) pid() int { return p.cmd.Process.Pid }

// stop ends the process (SIGTERM, then SIGKILL to its group after serverStopTimeout).
func (p *rlProc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(serverStopTimeout)
	defer t.Stop()
	select {
	case <-p.exit:
	case <-t.C:
		syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.exit
	}
}

// rlTarget is one executor as the test binary reaches it.
type rlTarget struct {
	key, server, path string // key: ours-direct…; server: ours or ref; path: direct or relay
	env               []string
}

// rlBenchLine is one result line of `go test -bench`: name, ns/op and the metrics after it.
var rlBenchLine = regexp.MustCompile(`^(BenchmarkRelayd\S+?)(?:-\d+)?\s+(\d+)\s+([0-9.]+) ns/op(.*)$`)

// rlRun runs the test binary for one benchmark and returns ns/op and its other metrics by unit.
func rlRun(cfg *rlConfig, pattern string, n int, env []string) (map[string]float64, error) {
	cmd := exec.Command(cfg.testBin, "-test.run", "^$", "-test.bench", pattern, "-test.benchtime", strconv.Itoa(n)+"x", "-test.timeout", "10m")
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = os.TempDir()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s%s", pattern, err, out, stderr.Bytes())
	}
	for line := range strings.Lines(string(out)) {
		m := rlBenchLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		v := map[string]float64{}
		v["ns/op"], _ = strconv.ParseFloat(m[3], 64)
		f := strings.Fields(m[4])
		for i := 0; i+1 < len(f); i += 2 {
			v[f[i+1]], _ = strconv.ParseFloat(f[i], 64)
		}
		return v, nil
	}
	return nil, fmt.Errorf("%s: no result line in\n%s", pattern, out)
}

func runRelay(args []string, stdout, stderr io.Writer) int {
	cfg := &rlConfig{}
	fs := flag.NewFlagSet("bench relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.testBin, "test", "", "the root package's test binary (go test -c), which holds BenchmarkRelayd* (required)")
	fs.StringVar(&cfg.execBin, "exec", "", "our exec-server binary: the relay, and executor A (required)")
	fs.StringVar(&cfg.refBin, "ref", "", "the reference codex binary: executor B (optional)")
	fs.StringVar(&cfg.home, "home", "", "a directory for the reference's CODEX_HOMEs, not under /tmp (required with -ref)")
	fs.IntVar(&cfg.rounds, "rounds", 5, "rounds")
	fs.IntVar(&cfg.startN, "start-n", 100, "process start → closed samples per run")
	fs.IntVar(&cfg.metaN, "meta-n", 2000, "fs/getMetadata round trips per run")
	fs.IntVar(&cfg.pipeN, "pipe-n", 3, "64 MiB pipe outputs per run")
	fs.IntVar(&cfg.fwdN, "fwd-n", 20000, "61,456-byte frames per relay forwarding run")
	fs.IntVar(&cfg.echoN, "echo-n", 5000, "echo round trips per run")
	fs.IntVar(&cfg.streamsN, "streams-n", 20, "16 KiB frames per stream in the 1,000-stream run")
	fs.Float64Var(&cfg.quiet, "quiet", 0.85, "before each round, wait until this share of CPU time is idle (0: do not wait)")
	fs.DurationVar(&cfg.quietMax, "quiet-max", 30*time.Second, "longest wait for a quiet machine before a round")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if cfg.testBin == "" || cfg.execBin == "" || (cfg.refBin != "" && cfg.home == "") {
		fmt.Fprintln(stderr, "bench relay: -test and -exec are required, and -home with -ref")
		return 2
	}
	if err := relayBench(cfg, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "bench relay: %v\n", err)
		return 1
	}
	return 0
}

// rlStartRelay writes a configuration and starts `exec-server relay` on a free loopback port.
func rlStartRelay(cfg *rlConfig, dir, name string) (*rlProc, string, error) {
	for file, v := range map[string]string{"register.token": rlRegisterToken, "connect.token": rlConnectToken} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v+"\n"), 0o600); err != nil {
			return nil, "", err
		}
	}
	conf := filepath.Join(dir, "relay.json")
	if err := os.WriteFile(conf, []byte(`{"tokens":[{"name":"executors","file":"register.token","register":["*"]},
  {"name":"harnesses","file":"connect.token","connect":["*"]}],
 "max_connections_per_token":4096,"max_streams_per_environment":1024}`), 0o600); err != nil {
		return nil, "", err
	}
	p, err := startRLProc(name, []string{cfg.execBin, "relay", "--config", conf, "--listen", "127.0.0.1:0", "--log-level", "warn"}, nil, "")
	if err != nil {
		return nil, "", err
	}
	select {
	case u := <-p.line:
		return p, u, nil
	case <-p.exit:
		return nil, "", fmt.Errorf("the relay exited: %s", p.errs)
	case <-time.After(serverStartTimeout):
		p.stop()
		return nil, "", fmt.Errorf("the relay printed no URL")
	}
}

func relayBench(cfg *rlConfig, stdout, stderr io.Writer) error {
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	dir, err := os.MkdirTemp("", "exec-bench-relay-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	relay, base, err := rlStartRelay(cfg, dir, "relay")
	if err != nil {
		return err
	}
	defer relay.stop()
	logf("relay at %s, pid %d", base, relay.pid())
	common := []string{"EXEC_SERVER_BENCH_RELAY=" + base, "EXEC_SERVER_BENCH_CONNECT_TOKEN=" + rlConnectToken,
		"EXEC_SERVER_BENCH_REGISTER_TOKEN=" + rlRegisterToken, "EXEC_SERVER_BENCH_RELAY_PID=" + strconv.Itoa(relay.pid())}

	var targets []rlTarget
	servers := []struct{ name, bin string }{{"ours", cfg.execBin}}
	if cfg.refBin != "" {
		servers = append(servers, struct{ name, bin string }{"ref", cfg.refBin})
	}
	ctx := context.Background()
	for _, s := range servers {
		var pre []string
		var env []string
		if s.name == "ref" {
			pre = []string{"exec-server"}
			homes := [2]string{filepath.Join(cfg.home, "direct"), filepath.Join(cfg.home, "remote")}
			for _, h := range homes {
				if err := os.MkdirAll(h, 0o700); err != nil {
					return err
				}
			}
			env = []string{"CODEX_HOME=" + homes[1]}
			defer os.RemoveAll(homes[0])
			defer os.RemoveAll(homes[1])
		}
		spec := s.bin + " " + strings.Join(pre, " ") + " --listen ws://127.0.0.1:{PORT}"
		if s.name == "ref" {
			spec = "env CODEX_HOME=" + filepath.Join(cfg.home, "direct") + " " + spec
		}
		direct, err := launch(ctx, spec)
		if err != nil {
			return err
		}
		defer direct.stop()
		envID := "bench-" + s.name
		argv := append(append([]string{s.bin}, pre...), "--remote", base, "--environment-id", envID, "--registration-bearer-stdin")
		remote, err := startRLProc(s.name+" remote", argv, env, rlRegisterToken+"\n")
		if err != nil {
			return err
		}
		defer remote.stop()
		targets = append(targets,
			rlTarget{key: s.name + "-direct", server: s.name, path: "direct", env: []string{"EXEC_SERVER_BENCH_WS=" + direct.url}},
			rlTarget{key: s.name + "-relay", server: s.name, path: "relay", env: append(slices.Clone(common), "EXEC_SERVER_BENCH_ENV="+envID)})
		// Wait for the registration: a harness's first call succeeds once the executor is there.
		deadline := time.Now().Add(serverStartTimeout)
		for {
			_, err := rlRun(cfg, "^BenchmarkRelaydRPC$/^Metadata$", 1, targets[len(targets)-1].env)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s through the relay: %v\n%s", s.name, err, remote.errs)
			}
			time.Sleep(200 * time.Millisecond) // polling a registration that has no event to wait on
		}
	}

	type key struct{ target, metric string }
	res := map[key][]float64{}
	add := func(t, m string, v float64) { res[key{t, m}] = append(res[key{t, m}], v) }
	busy := 0
	load0 := loadAvg()
	for round := range cfg.rounds {
		if cfg.quiet > 0 {
			if idle, ok := waitQuiet(cfg.quiet, cfg.quietMax, logf); !ok {
				busy++
				logf("round %d starts on a busy machine (%.0f%% idle)", round+1, 100*idle)
			}
		}
		order := slices.Clone(targets)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, t := range order {
			for _, m := range []struct {
				name string
				n    int
			}{{"Start", cfg.startN}, {"Metadata", cfg.metaN}, {"Pipe", cfg.pipeN}} {
				cpu0, _ := cpuTime(relay.pid())
				v, err := rlRun(cfg, "^BenchmarkRelaydRPC$/^"+m.name+"$", m.n, t.env)
				if err != nil {
					return fmt.Errorf("%s: %w", t.key, err)
				}
				cpu1, _ := cpuTime(relay.pid())
				switch m.name {
				case "Start", "Metadata":
					add(t.key, m.name, v["ns/op"]/1e6)
				case "Pipe":
					add(t.key, m.name, v["MB/s"])
					if t.path == "relay" {
						add(t.key, "relay-cpu-pipe", (cpu1-cpu0).Seconds()/(float64(m.n+1)*64*(1<<20)/1e9))
					}
				}
				logf("round %d %s %s: %v", round+1, t.key, m.name, v)
			}
		}
		v, err := rlRun(cfg, "^BenchmarkRelaydForward$", cfg.fwdN, common)
		if err != nil {
			return err
		}
		add("relay", "fwd", v["MB/s"])
		add("relay", "fwd-cpu", v["cpu-s/GB"])
		if v, err = rlRun(cfg, "^BenchmarkRelaydEcho$", cfg.echoN, common); err != nil {
			return err
		}
		add("relay", "echo", v["ns/op"]/1e3)
		logf("round %d relay: forward %.0f MB/s, echo %.1f µs", round+1, res[key{"relay", "fwd"}][round], res[key{"relay", "echo"}][round])
	}
	// The 1,000 streams, on a relay of their own so that its RSS starts from nothing.
	sdir := filepath.Join(dir, "streams")
	if err := os.Mkdir(sdir, 0o700); err != nil {
		return err
	}
	srelay, sbase, err := rlStartRelay(cfg, sdir, "streams relay")
	if err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond) // let the fresh relay settle before its base RSS; a measurement delay
	sv, err := rlRun(cfg, "^BenchmarkRelaydStreams$", cfg.streamsN, []string{"EXEC_SERVER_BENCH_RELAY=" + sbase,
		"EXEC_SERVER_BENCH_CONNECT_TOKEN=" + rlConnectToken, "EXEC_SERVER_BENCH_REGISTER_TOKEN=" + rlRegisterToken,
		"EXEC_SERVER_BENCH_RELAY_PID=" + strconv.Itoa(srelay.pid())})
	srelay.stop()
	if err != nil {
		return err
	}

	// The report.
	med := func(t, m string) float64 { return median(res[key{t, m}]) }
	mx := func(t, m string) float64 { return slices.Max(res[key{t, m}]) }
	fmt.Fprintf(stdout, "Machine: %d CPUs (%s), %s/%s, %s; load average at the start %s, at the end %s; %d of %d rounds started on a busy machine (idle < %.0f%%)\n\n",
		runtime.NumCPU(), cpuModel(), runtime.GOOS, runtime.GOARCH, runtime.Version(), load0, loadAvg(), busy, cfg.rounds, 100*cfg.quiet)
	fmt.Fprintf(stdout, "Medians of %d rounds, the four executors in alternating order; \"added\" is through the relay minus direct.\n\n", cfg.rounds)
	has := func(t string) bool { return len(res[key{t, "Metadata"}]) > 0 }
	fmt.Fprintln(stdout, "| metric | ours direct | ours through relay | relay adds (ours) | ref direct | ref through relay | relay adds (ref) | ours / ref, through relay |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|---|")
	for _, m := range []struct{ name, title, unit string }{
		{"Start", "process start → closed (/bin/true)", "ms"},
		{"Metadata", "fs/getMetadata round trip", "ms"},
		{"Pipe", "pipe output, head -c 64 MiB", "MB/s"},
	} {
		cell := func(t string) string {
			if !has(t) {
				return "—"
			}
			return fmt.Sprintf("%.3f %s", med(t, m.name), m.unit)
		}
		added := func(s string) string {
			if !has(s + "-relay") {
				return "—"
			}
			d, r := med(s+"-direct", m.name), med(s+"-relay", m.name)
			if m.unit == "MB/s" {
				return fmt.Sprintf("× %.2f", r/d)
			}
			return fmt.Sprintf("%+.3f ms", r-d)
		}
		ratio := "—"
		if has("ref-relay") {
			ratio = fmt.Sprintf("%.2f", med("ours-relay", m.name)/med("ref-relay", m.name))
		}
		fmt.Fprintf(stdout, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", m.title, cell("ours-direct"), cell("ours-relay"), added("ours"),
			cell("ref-direct"), cell("ref-relay"), added("ref"), ratio)
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "| the relay's own cost | figure | target |")
	fmt.Fprintln(stdout, "|---|---|---|")
	fmt.Fprintf(stdout, "| round trip added, fs/getMetadata through the relay minus direct (ours; ref) | %+.3f ms; %s | ≤ 0.2 ms |\n",
		med("ours-relay", "Metadata")-med("ours-direct", "Metadata"), func() string {
			if !has("ref-relay") {
				return "—"
			}
			return fmt.Sprintf("%+.3f ms", med("ref-relay", "Metadata")-med("ref-direct", "Metadata"))
		}())
	fmt.Fprintf(stdout, "| raw echo round trip through the relay (harness → relay → executor → relay → harness, 200 B) | %.1f µs | |\n", med("relay", "echo"))
	fmt.Fprintf(stdout, "| forwarding, one stream of 61,456-byte frames (median; best round) | %.0f MB/s; %.0f MB/s | ≥ 500 MB/s |\n", med("relay", "fwd"), mx("relay", "fwd"))
	fmt.Fprintf(stdout, "| relay CPU per GB forwarded (raw frames; ours' pipe through the relay) | %.2f s; %.2f s | |\n", med("relay", "fwd-cpu"), med("ours-relay", "relay-cpu-pipe"))
	fmt.Fprintf(stdout, "| relay RSS: fresh; 1,000 streams open, idle; at its highest with all 1,000 active (%d × 16 KiB each, %.0f MB/s in all) | %.1f MiB; %.1f MiB; %.1f MiB | ≤ 200 MiB |\n",
		cfg.streamsN, sv["MB/s"], sv["base-MiB"], sv["idle-MiB"], sv["active-MiB"])
	fmt.Fprintf(stdout, "| relay memory per idle stream (its harness socket included) | %.1f KiB | |\n", sv["KiB/stream"])
	return nil
}

// loadAvg is /proc/loadavg's three load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// cpuModel is the first model name of /proc/cpuinfo.
func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "?"
}
