package main

// Waiting for a quiet machine. On a shared 2-core machine another job's compile or test run
// halves what a server can do, and no statistics can undo that; so before each server's
// round the bench waits (for a bounded time) until the CPUs are mostly idle.

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// quietWindow is how long one idle sample lasts.
const quietWindow = 500 * time.Millisecond

// cpuTimes reads the busy and total jiffies of all CPUs from /proc/stat.
func cpuTimes() (busy, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[0]) != "cpu" {
		return 0, 0, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	for i, x := range f[1:] {
		n, err := strconv.ParseUint(string(x), 10, 64)
		if err != nil {
			return 0, 0, err
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, nil
}

// idleFraction samples the share of idle CPU time over d.
func idleFraction(d time.Duration) (float64, error) {
	b0, t0, err := cpuTimes()
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	b1, t1, err := cpuTimes()
	if err != nil {
		return 0, err
	}
	if t1 == t0 {
		return 1, nil
	}
	return 1 - float64(b1-b0)/float64(t1-t0), nil
}

// waitQuiet waits until the CPUs are at least minIdle idle, for at most max. It returns the
// last idle fraction seen and whether the machine was quiet.
func waitQuiet(minIdle float64, max time.Duration, logf func(string, ...any)) (float64, bool) {
	deadline := time.Now().Add(max)
	logged := false
	for {
		idle, err := idleFraction(quietWindow)
		if err != nil {
			return 1, true // no /proc/stat: nothing to wait for
		}
		if idle >= minIdle {
			return idle, true
		}
		if time.Now().After(deadline) {
			logf("  machine still busy (%.0f%% idle) after %v; measuring anyway", 100*idle, max)
			return idle, false
		}
		if !logged {
			logf("  machine busy (%.0f%% idle); waiting up to %v for %.0f%%", 100*idle, max, 100*minIdle)
			logged = true
		}
	}
}
