package main

// Probe of a known gap (SECURITY.md, "Known gaps"), printed as an INFO line that never fails
// the run: a background job that a process left behind when it closed is the server's to kill
// only while the closed process is remembered (--exited-process-retention). Once the window
// has ended, the job outlives kill -9 of the server (and its SIGTERM too).

import (
	"context"
	"errors"
	"time"
)

// Timings of the retention probe.
const (
	gapRetention   = "1s"
	gapForgetWait  = 10 * time.Second // until process/read no longer knows the process
	gapKilledWait  = 3 * time.Second  // for the job to die, if anything kills it
	gapProbeBudget = time.Minute
)

func probeRetentionGap(ctx context.Context, cfg *config) *result {
	r := &result{name: "kill -9, a job left by a process past its retention window (known gap, not checked)", infoOnly: true}
	ctx, cancel := context.WithTimeout(ctx, gapProbeBudget)
	defer cancel()
	mark := newMark("retention")
	defer killMarked(mark)
	srv, err := startServer(ctx, cfg.bin, "--exited-process-retention", gapRetention)
	if err != nil {
		r.err = err
		return r
	}
	defer func() {
		if srv.alive() {
			srv.stop()
		}
	}()
	w := newWatcher(false)
	c, _, err := connect(ctx, srv.url, w.handle, "")
	if err != nil {
		r.err = err
		return r
	}
	defer c.ws.Close()
	w.watch("bg")
	argv := []string{"sh", "-c", "nohup sleep 300 >/dev/null 2>&1 &"}
	if _, err := c.call(ctx, "process/start", startParams("bg", argv, false, childEnv(mark))); err != nil {
		r.err = err
		return r
	}
	if err := w.waitClosed(ctx, "bg"); err != nil {
		r.err = err
		return r
	}
	// The server announces nothing when it forgets a process: ask until it no longer knows it.
	forgotten, _ := poll(gapForgetWait, func() bool {
		_, err := c.call(ctx, "process/read", map[string]any{"processId": "bg"})
		var re *rpcError
		return errors.As(err, &re)
	})
	if !forgotten {
		r.notes = append(r.notes, "the process was still remembered after "+gapForgetWait.String())
	}
	before, _ := marked(mark)
	srv.kill()
	var left []procStat
	poll(gapKilledWait, func() bool {
		left, _ = marked(mark)
		return len(left) == 0
	})
	r.add(info("jobs before", float64(len(before)), ""), info("survivors", float64(len(left)), ""))
	if len(left) > 0 {
		r.notes = append(r.notes, describe(left))
	}
	return r
}
