package main

// Check "churn": N short processes (`true`), started by a few connections in parallel, each
// connection starting its next one when the last has closed. What the server keeps of a
// finished process for the retention window is small and bounded, its descriptors return
// (pipes, pidfd), and no child is left a zombie.

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Bounds of the churn check.
const (
	// churnRSSGrowth bounds the memory the server may gain across the churn: the records
	// of the processes still in their retention window (80 s, so all of them), and the heap
	// the runtime keeps.
	churnRSSGrowth    = 64 << 20
	churnWarmup       = 50 // processes per connection before the baseline, so the runtime has grown its pools
	churnFDSlack      = 8  // descriptors above the baseline once the churn is over
	churnThreadsBound = 64
	churnSettleWithin = 10 * time.Second
	churnDeadline     = 10 * time.Minute
)

func checkChurn(ctx context.Context, cfg *config) *result {
	n, k := cfg.churn, cfg.churnConns
	r := &result{name: fmt.Sprintf("%d-process churn", n)}
	ctx, cancel := context.WithTimeout(ctx, churnDeadline)
	defer cancel()
	srv, err := startServer(ctx, cfg.bin)
	if err != nil {
		r.err = err
		return r
	}
	defer srv.stop()
	mark := newMark("churn")
	w := newWatcher(false)
	clients := make([]*client, k)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.close()
			}
		}
	}()
	for i := range clients {
		if clients[i], _, err = connect(ctx, srv.url, w.handle, ""); err != nil {
			r.err = err
			return r
		}
	}
	// churn runs per processes on each connection, numbered from first.
	churn := func(first, per int) error {
		return parallel(ctx, k, k, func(ctx context.Context, ci int) error {
			c := clients[ci]
			for j := range per {
				id := "c" + strconv.Itoa(ci) + "-" + strconv.Itoa(first+j)
				w.watch(id)
				if _, err := c.call(ctx, "process/start", startParams(id, []string{"true"}, false, childEnv(mark))); err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				if err := w.waitClosed(ctx, id); err != nil {
					return err
				}
				w.forget(id)
			}
			return nil
		})
	}
	if err := churn(0, churnWarmup); err != nil {
		r.err = fmt.Errorf("warm-up: %w", err)
		return r
	}
	watchdog := findWatchdog(srv.pid)
	before, err := srv.usage()
	if err != nil {
		r.err = err
		return r
	}
	start := time.Now()
	if err := churn(churnWarmup, n/k); err != nil {
		r.err = err
		return r
	}
	took := time.Since(start)
	var after usage
	var fam family
	poll(churnSettleWithin, func() bool {
		u, uerr := srv.usage()
		f, ferr := children(srv.pid, watchdog)
		if uerr != nil || ferr != nil {
			return false
		}
		after, fam = u, f
		return f.live == 0 && f.zombies == 0 && u.fds <= before.fds+churnFDSlack
	})
	if !srv.alive() {
		r.err = errServerDied
	}
	r.add(
		info("rate", float64(n/k*k)/took.Seconds(), "proc/s"),
		info("rss before", float64(before.rss>>20), "MiB"),
		mib("rss after", after.rss, float64((before.rss+churnRSSGrowth)>>20)),
		count("fds", after.fds, before.fds+churnFDSlack),
		count("threads", after.threads, churnThreadsBound),
		count("children", fam.live, 0),
		count("zombies", fam.zombies, 0),
	)
	return r
}
