// Command soak runs the real exec-server binary through long, wide and hostile workloads and
// measures it from outside (/proc, and what its clients get back), on loopback only. It
// prints one line per check, each figure with its bound, and exits 1 if any figure is out of
// bounds or a check could not finish:
//
//	soak: 1000 conns: rss 142 MiB (≤ 400), fds 2013 (≤ 2100), … PASS
//
// Checks (-checks picks some; -small scales each down for CI):
//
//	conns    N connections each with a live process, then all closed (check_conns.go)
//	churn    N short processes on a few connections in parallel (check_churn.go)
//	resume   N abrupt disconnect/resume cycles of a line producer, recovered byte-exactly (check_resume.go)
//	flood    N pipelined 1 MiB process/reads on a socket backed up by /dev/zero (check_flood.go)
//	orphans  kill -9 of the server with grandchildren of every kind (check_orphans.go), and
//	         INFO probes of the known gaps (check_orphans.go, check_gaps.go)
//
// scripts/soak.sh builds the binary and this driver and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// scale is the size of every check, full or small.
type scale struct {
	conns      int
	churn      int
	churnConns int
	cycles     int
	flood      int
	floodHold  time.Duration
}

// Sizes of the full soak and of the CI one (-small, well under a minute on 2 cores).
var (
	fullScale  = scale{conns: 1000, churn: 10_000, churnConns: 8, cycles: 100, flood: 500, floodHold: 5 * time.Second}
	smallScale = scale{conns: 100, churn: 1000, churnConns: 4, cycles: 20, flood: 200, floodHold: 2 * time.Second}
)

// checkOrder is every check, in the order they run.
var checkOrder = []string{"conns", "churn", "resume", "flood", "orphans"}

// config is the command line.
type config struct {
	bin    string
	checks map[string]bool
	scale
	// probeGaps adds INFO lines (never failing) that show known gaps: a grandchild that
	// calls setsid(2), a job left past its parent's retention window.
	probeGaps bool
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the exit: 0 when every check passed, 1 when one did not, 2 for a bad
// command line.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "soak: %v\n", err)
		return 2
	}
	checks := map[string]func(context.Context, *config) []*result{
		"conns":  func(ctx context.Context, c *config) []*result { return []*result{checkConns(ctx, c)} },
		"churn":  func(ctx context.Context, c *config) []*result { return []*result{checkChurn(ctx, c)} },
		"resume": func(ctx context.Context, c *config) []*result { return []*result{checkResume(ctx, c)} },
		"flood":  func(ctx context.Context, c *config) []*result { return []*result{checkFlood(ctx, c)} },
		"orphans": func(ctx context.Context, c *config) []*result {
			rs := checkOrphans(ctx, c)
			if c.probeGaps {
				rs = append(rs, probeRetentionGap(ctx, c))
			}
			return rs
		},
	}
	status := 0
	for _, name := range checkOrder {
		if !cfg.checks[name] {
			continue
		}
		start := time.Now()
		for _, r := range checks[name](context.Background(), cfg) {
			fmt.Fprintf(stdout, "%s (%.1fs)\n", r, time.Since(start).Seconds())
			if !r.pass() {
				status = 1
			}
		}
	}
	return status
}

// parseFlags reads the command line; a size left at 0 takes the full or -small default.
func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		bin    = fs.String("bin", "", "the exec-server binary to soak (required)")
		small  = fs.Bool("small", false, "a small version of every check (CI)")
		checks = fs.String("checks", strings.Join(checkOrder, ","), "checks to run, comma-separated: "+strings.Join(checkOrder, ","))
		s      scale
	)
	fs.IntVar(&s.conns, "conns", 0, "conns: connections open at once (default 1000, -small 100)")
	fs.IntVar(&s.churn, "churn", 0, "churn: processes started (default 10000, -small 1000)")
	fs.IntVar(&s.churnConns, "churn-conns", 0, "churn: connections starting them in parallel (default 8, -small 4)")
	fs.IntVar(&s.cycles, "cycles", 0, "resume: disconnect/resume cycles (default 100, -small 20)")
	fs.IntVar(&s.flood, "flood", 0, "flood: pipelined process/read requests (default 500, -small 200)")
	fs.DurationVar(&s.floodHold, "flood-hold", 0, "flood: how long the client stops reading (default 5s, -small 2s; under the server's 30 s stall timeout)")
	probe := fs.Bool("probe-gaps", true, "orphans: also show (INFO lines, never failing) the known gaps: a grandchild that calls setsid(2), a job left past its parent's retention window")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *bin == "" {
		return nil, fmt.Errorf("-bin is required")
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	def := fullScale
	if *small {
		def = smallScale
	}
	for _, f := range []struct {
		v *int
		d int
	}{{&s.conns, def.conns}, {&s.churn, def.churn}, {&s.churnConns, def.churnConns}, {&s.cycles, def.cycles}, {&s.flood, def.flood}} {
		if *f.v <= 0 {
			*f.v = f.d
		}
	}
	if s.floodHold <= 0 {
		s.floodHold = def.floodHold
	}
	cfg := &config{bin: *bin, checks: map[string]bool{}, scale: s, probeGaps: *probe}
	for _, name := range strings.Split(*checks, ",") {
		name = strings.TrimSpace(name)
		known := false
		for _, k := range checkOrder {
			known = known || k == name
		}
		if !known {
			return nil, fmt.Errorf("unknown check %q (want %s)", name, strings.Join(checkOrder, ","))
		}
		cfg.checks[name] = true
	}
	return cfg, nil
}
