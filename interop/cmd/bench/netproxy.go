package main

// `bench netproxy`: the managed network proxy of two servers, measured the way a client gets
// it (issue 22, docs/network.md §5 of the root). Each server is launched once; on each, one
// process is started with networkProxy (full mode, an allow entry for 127.0.0.1, no SOCKS5)
// whose child prints its HTTP_PROXY and sleeps. The root package's benchmarks
// BenchmarkNetProxy{HTTP,CONNECT,ConnectLatency} (netproxy_bench_test.go, built with
// `go test -c`) then run against that proxy, one test-binary run per server per round, the
// two servers in alternating order (A, B, then B, A), and each round also measures the same
// downloads without a proxy (the limit). The proxy's memory per idle process is read from
// the server's RSS: k plain sleeping processes, then k proxied ones.
//
//	bench netproxy -test exec-server.test -a 'OURS --listen ws://127.0.0.1:{PORT}' \
//	      -b 'env CODEX_HOME=DIR codex exec-server --listen ws://127.0.0.1:{PORT}' -rounds 7
//
// With -hold it only starts the servers and their proxied processes, prints "NAME ADDR" per
// server on stdout, and holds them until SIGINT or SIGTERM (for profiling a server while
// something else drives its proxy).

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// npSetupTimeout bounds the launch of a server and the start of its proxied process.
	npSetupTimeout = 30 * time.Second
	// npSleep is how long the proxied child sleeps: longer than any run; it is terminated.
	npSleep = "100000"
)

// npPolicy is the proxy both servers are asked for: the reference's field set, full mode, an
// allow entry for the bench hosts' 127.0.0.1 (a local literal needs an exact entry), HTTP only.
var npPolicy = map[string]any{
	"enabled": true, "enableSocks5": false, "enableSocks5Udp": false, "allowUpstreamProxy": false,
	"dangerouslyAllowAllUnixSockets": false, "mode": "full", "allowLocalBinding": false,
	"domains": map[string]string{"127.0.0.1": "allow"}, "unixSockets": nil,
}

// npStartParams is process/start with a networkProxy.
type npStartParams struct {
	startParams
	NetworkProxy map[string]any `json:"networkProxy,omitempty"`
}

// npScript prints the child's HTTP_PROXY on a line of its own, then sleeps in its place.
const npScript = `printf 'HTTP_PROXY=%s\n' "$HTTP_PROXY"; exec sleep ` + npSleep

var npProxyLine = regexp.MustCompile(`HTTP_PROXY=(?:http://)?([0-9.]+:[0-9]+)`)

// npConfig is the command line of `bench netproxy`.
type npConfig struct {
	specA, specB, nameA, nameB string
	testBin                    string
	rounds                     int
	downloads                  int           // 256 MiB downloads per benchmark run
	latencyTime                time.Duration // -benchtime of the latency benchmark
	idleProcs                  int           // k of the idle-memory row; 0 skips it
	quiet                      float64
	quietMax                   time.Duration
	hold                       bool
	floor                      bool // also measure a bare proxy (bareproxy.go) each round
}

// npServer is a launched server with its proxied process.
type npServer struct {
	name  string
	srv   *server
	c     *client
	proxy string // host:port of the child's HTTP proxy
	seq   int
}

func runNetProxy(args []string, stdout, stderr io.Writer) int {
	cfg := &npConfig{}
	fs := flag.NewFlagSet("bench netproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.specA, "a", "", "server A: ws:// URL, or command line with {PORT} (required)")
	fs.StringVar(&cfg.specB, "b", "", "server B (optional)")
	fs.StringVar(&cfg.nameA, "name-a", "ours", "name of server A")
	fs.StringVar(&cfg.nameB, "name-b", "reference", "name of server B")
	fs.StringVar(&cfg.testBin, "test", "", "the root package's test binary (go test -c), which holds the benchmarks")
	fs.IntVar(&cfg.rounds, "rounds", 7, "rounds; servers alternate within each")
	fs.IntVar(&cfg.downloads, "downloads", 3, "256 MiB downloads per benchmark run (HTTP and CONNECT)")
	fs.DurationVar(&cfg.latencyTime, "latency-time", time.Second, "run time of the connect-latency benchmark per run")
	fs.IntVar(&cfg.idleProcs, "idle-procs", 64, "processes of the idle-memory row (0: skip it)")
	fs.Float64Var(&cfg.quiet, "quiet", 0.85, "before each run, wait until this share of CPU time is idle (0: do not wait)")
	fs.DurationVar(&cfg.quietMax, "quiet-max", 30*time.Second, "longest wait for a quiet machine")
	fs.BoolVar(&cfg.floor, "floor", true, "also measure a bare splice proxy each round: the floor of any proxy here, against server B")
	fs.BoolVar(&cfg.hold, "hold", false, "start the servers and proxied processes, print NAME ADDR, hold until SIGINT/SIGTERM")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if cfg.specA == "" || (!cfg.hold && cfg.testBin == "") || cfg.rounds < 1 || cfg.downloads < 1 {
		fmt.Fprintln(stderr, "bench netproxy: -a and -test are required; -rounds and -downloads at least 1")
		return 2
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }

	specs := []struct{ name, spec string }{{cfg.nameA, cfg.specA}}
	if cfg.specB != "" {
		specs = append(specs, struct{ name, spec string }{cfg.nameB, cfg.specB})
	}
	var servers []*npServer
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	for _, sp := range specs {
		s, err := startNPServer(sp.name, sp.spec)
		if err != nil {
			logf("bench netproxy: %s: %v", sp.name, err)
			return 1
		}
		servers = append(servers, s)
		logf("%s: proxy %s (server %s)", s.name, s.proxy, s.srv.url)
	}
	if cfg.hold {
		for _, s := range servers {
			fmt.Fprintf(stdout, "%s %s\n", s.name, s.proxy)
		}
		if f, ok := stdout.(*os.File); ok {
			f.Sync()
		}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		<-sig
		signal.Stop(sig)
		return 0
	}

	res := newResults(npRows(cfg))
	var bare *bareProxy
	if cfg.floor && len(servers) == 2 {
		var err error
		if bare, err = startBareProxy(); err != nil {
			logf("bench netproxy: bare proxy: %v", err)
			return 1
		}
		defer bare.close()
	}
	busy := 0
	started := time.Now()
	for round := range cfg.rounds {
		if err := npLimits(cfg, res, round); err != nil {
			logf("round %d: limits: %v", round+1, err)
		}
		order := []int{0, 1}[:len(servers)]
		if round%2 == 1 && len(servers) == 2 {
			order = []int{1, 0}
		}
		for _, i := range order {
			s := servers[i]
			logf("round %d/%d: %s", round+1, cfg.rounds, s.name)
			if cfg.quiet > 0 {
				if _, ok := waitQuiet(cfg.quiet, cfg.quietMax, logf); !ok {
					busy++
				}
			}
			sd := side(i)
			f, err := npBenchRun(cfg, res, sd, round, s.proxy, s.srv.pid)
			if err == nil && sd == sideB && bare != nil {
				// The floor rows: the bare proxy (as side A) against this same round's B.
				for _, k := range []string{"HTTP", "CONNECT", "ConnectLatency"} {
					res.add(npFloorKey[k], sideB, round, f[k].figure)
				}
			}
			if err != nil {
				logf("  %s: %v", s.name, err)
				for _, k := range []string{"np-http", "np-connect", "np-latency", "np-cpu-http", "np-cpu-connect", "np-cpu-latency"} {
					res.fail(k, sd, err)
				}
			}
			if cfg.idleProcs > 0 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				kib, err := s.idleMemory(ctx, cfg.idleProcs)
				cancel()
				if err != nil {
					logf("  %s: idle memory: %v", s.name, err)
					res.fail("np-idle", sd, err)
				} else {
					res.add("np-idle", sd, round, kib)
				}
			}
		}
		if bare != nil {
			logf("round %d/%d: bare proxy (floor)", round+1, cfg.rounds)
			if cfg.quiet > 0 {
				waitQuiet(cfg.quiet, cfg.quietMax, logf)
			}
			f, err := npRunTest(cfg, "ours", []string{"EXEC_SERVER_PROXY_UNDER_TEST=" + bare.addr()}, 0)
			if err != nil {
				logf("  bare proxy: %v", err)
			} else {
				for _, k := range []string{"HTTP", "CONNECT", "ConnectLatency"} {
					res.add(npFloorKey[k], sideA, round, f[k].figure)
				}
			}
		}
	}
	logf("done in %v", time.Since(started).Round(time.Second))
	for _, s := range servers {
		logf("%s: %d network/policyDecision notifications received", s.name, s.c.policyDecisions.Load())
	}

	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	fmt.Fprintf(stdout, "Measured %s, kernel %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), strings.TrimSpace(string(kernel)))
	for _, s := range servers {
		fmt.Fprintf(stdout, "- %s: `%s`\n", s.name, map[bool]string{true: cfg.specA, false: cfg.specB}[s == servers[0]])
	}
	fmt.Fprintf(stdout, "- %d rounds, servers alternating (A B, B A, …); each run: %d × 256 MiB per download benchmark, %v of connect latency; idle memory from %d + %d processes\n",
		cfg.rounds, cfg.downloads, cfg.latencyTime, cfg.idleProcs, cfg.idleProcs)
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(stdout, "- load average at the end: %s\n", strings.Join(strings.Fields(string(la))[:3], " "))
	}
	if cfg.quiet > 0 {
		fmt.Fprintf(stdout, "- each run started once the CPUs were ≥ %.0f%% idle; %d of %d runs started on a busy machine after waiting %v\n",
			100*cfg.quiet, busy, cfg.rounds*len(servers), cfg.quietMax)
	}
	fmt.Fprintln(stdout)
	res.report(stdout, cfg.nameA, cfg.nameB, len(servers) == 2)
	if res.failed(sideA) {
		return 1
	}
	return 0
}

// npRows are the report's rows. The targets are issue 22's.
func npRows(cfg *npConfig) []*row {
	return []*row{
		{key: "np-http", title: "HTTP proxy, GET of 256 MiB (absolute form)", unit: "MB/s", kind: throughput, target: target{op: "≥", ratio: 1.5}},
		{key: "np-connect", title: "HTTP proxy, 256 MiB through CONNECT", unit: "MB/s", kind: throughput, target: target{op: "≥", ratio: 1.5}},
		{key: "np-latency", title: "CONNECT + 200 + 1-byte echo", unit: "µs", kind: level, target: target{op: "≤", ratio: 0.5}},
		{key: "np-cpu-http", title: "server CPU time per 256 MiB GET", unit: "ms", kind: level},
		{key: "np-cpu-connect", title: "server CPU time per 256 MiB through CONNECT", unit: "ms", kind: level},
		{key: "np-cpu-latency", title: "server CPU time per CONNECT + 1-byte echo", unit: "µs", kind: level},
		{key: "np-floor-http", title: "floor: a bare splice proxy (no policy, no notification), GET of 256 MiB, against B", unit: "MB/s", kind: throughput, target: target{op: "≥", ratio: 1.5}},
		{key: "np-floor-connect", title: "floor: a bare splice proxy, 256 MiB through CONNECT, against B", unit: "MB/s", kind: throughput, target: target{op: "≥", ratio: 1.5}},
		{key: "np-floor-latency", title: "floor: a bare splice proxy, CONNECT + 200 + 1-byte echo, against B", unit: "µs", kind: level, target: target{op: "≤", ratio: 0.5}},
		{key: "np-idle", title: fmt.Sprintf("server RSS per idle proxied process, beyond an unproxied one (%d each)", cfg.idleProcs), unit: "KiB", kind: level, target: target{abs: 64}},
	}
}

// npFloorKey is the floor row of each benchmark.
var npFloorKey = map[string]string{"HTTP": "np-floor-http", "CONNECT": "np-floor-connect", "ConnectLatency": "np-floor-latency"}

// npBenchLine is one result line of `go test -bench`.
var npBenchLine = regexp.MustCompile(`^BenchmarkNetProxy(HTTP|CONNECT|ConnectLatency)/(\w+)(?:-\d+)?\s+(\d+)\s+([0-9.]+) ns/op(?:\s+([0-9.]+) MB/s)?`)

// npRun is one benchmark of one test-binary run: its figure (MB/s for the downloads, µs for
// the latency) and the CPU time the server used meanwhile, per operation.
type npRun struct {
	bench, benchtime string
	figure, cpuPerOp float64
}

// npRunTest runs the benchmarks of sub-benchmark sub (ours, reference or direct) with env,
// one test-binary run each, reading the CPU time of process pid around each (0: none).
func npRunTest(cfg *npConfig, sub string, env []string, pid int) (map[string]npRun, error) {
	out := map[string]npRun{}
	for _, r := range []npRun{
		{bench: "HTTP", benchtime: strconv.Itoa(cfg.downloads) + "x"},
		{bench: "CONNECT", benchtime: strconv.Itoa(cfg.downloads) + "x"},
		{bench: "ConnectLatency", benchtime: cfg.latencyTime.String()},
	} {
		pattern := "^BenchmarkNetProxy" + r.bench + "$/^" + sub + "$"
		cmd := exec.Command(cfg.testBin, "-test.run", "^$", "-test.bench", pattern, "-test.benchtime", r.benchtime)
		cmd.Env = append(os.Environ(), env...)
		cmd.Dir = os.TempDir()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cpu0, _ := cpuTime(pid)
		b, err := cmd.Output()
		cpu1, _ := cpuTime(pid)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w\n%s%s", cfg.testBin, pattern, err, b, stderr.Bytes())
		}
		found := false
		for line := range strings.Lines(string(b)) {
			m := npBenchLine.FindStringSubmatch(line)
			if m == nil || m[1] != r.bench || m[2] != sub {
				continue
			}
			ops, _ := strconv.ParseFloat(m[3], 64)
			if r.bench == "ConnectLatency" {
				ns, _ := strconv.ParseFloat(m[4], 64)
				r.figure = ns / 1e3
			} else {
				r.figure, _ = strconv.ParseFloat(m[5], 64)
			}
			if ops > 0 {
				r.cpuPerOp = (cpu1 - cpu0).Seconds() / ops
			}
			found = true
		}
		if !found {
			return nil, fmt.Errorf("no BenchmarkNetProxy%s/%s line in the test binary's output:\n%s", r.bench, sub, b)
		}
		out[r.bench] = r
	}
	return out, nil
}

// cpuTime is the user and system CPU time process pid has used (its own threads, not its
// children), from /proc/PID/stat; 0 for pid 0.
func cpuTime(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count fields after its closing paren.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every Linux ABI Go runs on.
const clockTicks = 100

// npBenchRun measures the proxy at addr of server pid for side sd. Side A's proxy is the
// benchmarks' "ours" (EXEC_SERVER_PROXY_UNDER_TEST), side B's their "reference".
func npBenchRun(cfg *npConfig, res *results, sd side, round int, addr string, pid int) (map[string]npRun, error) {
	sub, env := "ours", "EXEC_SERVER_PROXY_UNDER_TEST="+addr
	if sd == sideB {
		sub, env = "reference", "EXEC_SERVER_REFERENCE_PROXY="+addr
	}
	// EXEC_SERVER_PROXY_UNDER_TEST is set in both cases, so the test binary never starts a
	// proxy of its own.
	f, err := npRunTest(cfg, sub, []string{"EXEC_SERVER_PROXY_UNDER_TEST=" + addr, env}, pid)
	if err != nil {
		return nil, err
	}
	res.add("np-http", sd, round, f["HTTP"].figure)
	res.add("np-connect", sd, round, f["CONNECT"].figure)
	res.add("np-latency", sd, round, f["ConnectLatency"].figure)
	if pid != 0 {
		res.add("np-cpu-http", sd, round, 1e3*f["HTTP"].cpuPerOp)
		res.add("np-cpu-connect", sd, round, 1e3*f["CONNECT"].cpuPerOp)
		res.add("np-cpu-latency", sd, round, 1e6*f["ConnectLatency"].cpuPerOp)
	}
	return f, nil
}

// npLimits measures the same work without a proxy: the "direct" sub-benchmarks.
func npLimits(cfg *npConfig, res *results, round int) error {
	f, err := npRunTest(cfg, "direct", []string{"EXEC_SERVER_PROXY_UNDER_TEST=127.0.0.1:1"}, 0)
	if err != nil {
		return err
	}
	res.add("np-http", sideLimit, round, f["HTTP"].figure)
	res.add("np-connect", sideLimit, round, f["CONNECT"].figure)
	res.add("np-latency", sideLimit, round, f["ConnectLatency"].figure)
	return nil
}

// startNPServer launches spec and starts the proxied sleeping process on it.
func startNPServer(name, spec string) (*npServer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), npSetupTimeout)
	defer cancel()
	srv, err := launch(ctx, spec)
	if err != nil {
		return nil, err
	}
	s := &npServer{name: name, srv: srv}
	if s.c, err = connect(ctx, srv.url); err != nil {
		srv.stop()
		return nil, err
	}
	_, w, err := s.startProxied(ctx, true)
	if err != nil {
		s.stop()
		return nil, err
	}
	if s.proxy, err = readProxy(ctx, s.c, w); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// startProxied starts the printing, sleeping child, with the bench's networkProxy or without.
func (s *npServer) startProxied(ctx context.Context, proxied bool) (string, *procWatch, error) {
	s.seq++
	id := fmt.Sprintf("np-%d", s.seq)
	w := s.c.watch(id, false)
	w.output = make(chan []byte, 16)
	p := npStartParams{startParams: startParams{ProcessID: id, Argv: []string{"sh", "-c", npScript}, Cwd: fileURI(os.TempDir()), Env: childEnv}}
	if proxied {
		p.NetworkProxy = map[string]any{"proxy": npPolicy}
	}
	if _, _, err := s.c.call(ctx, "process/start", p); err != nil {
		s.c.unwatch(id)
		return "", nil, fmt.Errorf("process/start with networkProxy=%v: %w", proxied, err)
	}
	return id, w, nil
}

// readProxy waits for the child's HTTP_PROXY line; an empty HTTP_PROXY is an error.
func readProxy(ctx context.Context, c *client, w *procWatch) (string, error) {
	var got []byte
	for {
		select {
		case b := <-w.output:
			got = append(got, b...)
			if i := bytes.IndexByte(got, '\n'); i >= 0 {
				if m := npProxyLine.FindSubmatch(got[:i]); m != nil {
					return string(m[1]), nil
				}
				return "", fmt.Errorf("child printed %q: no proxy address", got[:i])
			}
		case <-w.closed:
			return "", fmt.Errorf("child ended before printing its HTTP_PROXY (printed %q)", got)
		case <-c.dead:
			return "", fmt.Errorf("connection lost: %w", c.deathErr)
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for the child's HTTP_PROXY: %w", ctx.Err())
		}
	}
}

// idleMemory is the server's RSS growth per idle proxied process beyond an unproxied one, in
// KiB: k unproxied children, then k proxied ones (each has printed its line, so each proxy
// is listening), then all are terminated.
func (s *npServer) idleMemory(ctx context.Context, k int) (float64, error) {
	var ids []string
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		for _, id := range ids {
			s.c.call(ctx, "process/terminate", map[string]any{"processId": id})
		}
		for _, id := range ids {
			s.c.unwatch(id)
		}
	}()
	var rss [3]int64
	var err error
	if rss[0], err = s.srv.rssBytes(); err != nil {
		return 0, err
	}
	for step, proxied := range []bool{false, true} {
		for range k {
			id, w, err := s.startProxied(ctx, proxied)
			if err != nil {
				return 0, err
			}
			ids = append(ids, id)
			if _, err := readProxy(ctx, s.c, w); err != nil && proxied {
				return 0, err
			}
		}
		if rss[step+1], err = s.srv.rssBytes(); err != nil {
			return 0, err
		}
	}
	plain, proxied := rss[1]-rss[0], rss[2]-rss[1]
	return float64(proxied-plain) / float64(k) / 1024, nil
}

// stop closes the connection and stops the server, which kills its processes.
func (s *npServer) stop() {
	if s.c != nil {
		s.c.close()
	}
	s.srv.stop()
}
