package main

// Check "conns": N connections at once, each with a live process (sleep), then every
// connection closed. While they are open the server's memory, descriptors and threads stay
// within bounds that grow linearly with N; once they are closed and the detached sessions
// have expired (the server runs with a short --session-ttl, so this also drives N session
// expiries at once), its descriptors are back near where they started, it has no child left
// but its watchdog, and no zombie.

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Bounds of the conns check.
const (
	connsRSSBase       = 64 << 20  // the server's memory with no connection, with room
	connsRSSPerConn    = 160 << 10 // one connection, its session and its sleep (about 70 KiB measured)
	connsFDsPerConn    = 5         // socket, stdout and stderr pipes, two pidfds (the server's, and the dup os.Process keeps)
	connsFDSlack       = 64        // listener, watchdog pipe, epoll, runtime
	connsThreadsBound  = 64        // a thread per blocked system call, never per connection
	connsSettledFDs    = 16        // above the baseline once every connection is gone
	connsSessionTTL    = 2 * time.Second
	connsSettleWithin  = connsSessionTTL + 30*time.Second
	connsDialWorkers   = 16
	connsSleepSeconds  = "600"
	connsCheckDeadline = 5 * time.Minute
)

func checkConns(ctx context.Context, cfg *config) *result {
	n := cfg.conns
	r := &result{name: fmt.Sprintf("%d conns", n)}
	ctx, cancel := context.WithTimeout(ctx, connsCheckDeadline)
	defer cancel()
	srv, err := startServer(ctx, cfg.bin, "--session-ttl", connsSessionTTL.String())
	if err != nil {
		r.err = err
		return r
	}
	defer srv.stop()
	base, err := srv.usage()
	if err != nil {
		r.err = err
		return r
	}
	mark := newMark("conns")
	clients := make([]*client, n)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.ws.Close()
			}
		}
	}()
	err = parallel(ctx, n, connsDialWorkers, func(ctx context.Context, i int) error {
		c, _, err := connect(ctx, srv.url, nil, "")
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		clients[i] = c
		_, err = c.call(ctx, "process/start", startParams("s", []string{"sleep", connsSleepSeconds}, false, childEnv(mark)))
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		return nil
	})
	if err != nil {
		r.err = err
		return r
	}
	watchdog := findWatchdog(srv.pid)
	open, err := srv.usage()
	if err != nil {
		r.err = err
		return r
	}
	fam, err := children(srv.pid, watchdog)
	if err != nil {
		r.err = err
		return r
	}
	r.add(
		mib("rss", open.rss, float64((connsRSSBase+int64(n)*connsRSSPerConn)>>20)),
		count("fds", open.fds, base.fds+n*connsFDsPerConn+connsFDSlack),
		count("threads", open.threads, connsThreadsBound),
		atLeast("children", fam.live, n),
	)

	// Close every connection cleanly; the sessions detach and expire after the TTL.
	for i, c := range clients {
		c.close()
		clients[i] = nil
	}
	var settled usage
	var last family
	ok, took := poll(connsSettleWithin, func() bool {
		u, uerr := srv.usage()
		f, ferr := children(srv.pid, watchdog)
		if uerr != nil || ferr != nil {
			return false
		}
		settled, last = u, f
		return f.live == 0 && f.zombies == 0 && u.fds <= base.fds+connsSettledFDs
	})
	if !srv.alive() {
		r.err = errServerDied
	}
	r.add(
		count("fds after close", settled.fds, base.fds+connsSettledFDs),
		count("children after", last.live, 0),
		count("zombies", last.zombies, 0),
		figure{name: "settled in", value: took.Round(100 * time.Millisecond).Seconds(), unit: "s", bound: connsSettleWithin.Seconds()},
	)
	if !ok && r.err == nil {
		r.err = fmt.Errorf("not settled within %v (session TTL %v)", connsSettleWithin, connsSessionTTL)
	}
	return r
}

// newMark returns a marker value unique to this run of a check.
func newMark(check string) string {
	return check + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}
