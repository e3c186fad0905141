package main

// A rate limit on repeated log lines (docs/remote.md §3). A new file because the limit is
// one small type that any part of the server which logs what a peer makes happen can use; in
// remote mode that is the rendezvous socket, where a hostile relay decides how often a line
// is written: each malformed frame, each refused handshake, each harness the registry turns
// down. Unthrottled, a relay sending two-byte frames made us write fifty times as many bytes
// of log as it sent us.
//
// Lines are throttled by their message: within one interval the first logThrottleBurst
// lines of a message are written and the rest are counted; the first line of that message in
// a later interval (or flush, when the socket ends) writes one line more that says how many
// were left out. Only levels the logger has enabled are counted, so the debug lines of
// --log-level debug are all written, as asked.

import (
	"context"
	"sync"
	"time"
)

// Log throttle limits.
const (
	// logThrottleInterval is the period over which a message's lines are counted.
	logThrottleInterval = 10 * time.Second
	// logThrottleBurst is how many lines of one message are written per interval: enough to
	// show what happened and to whom, few enough that a flood costs a few hundred bytes a
	// second, whatever its rate.
	logThrottleBurst = 5
)

// logThrottle writes log lines through log, at most logThrottleBurst per message and
// interval. It is safe for concurrent use; its zero value is not usable (newLogThrottle).
type logThrottle struct {
	log      *logger
	interval time.Duration
	burst    int
	now      func() time.Time

	mu    sync.Mutex
	kinds map[string]*logThrottleKind // by message; messages are constants, so this is bounded
}

// logThrottleKind counts the lines of one message in the current interval.
type logThrottleKind struct {
	start      time.Time
	level      logLevel
	written    int
	suppressed int
}

func newLogThrottle(log *logger) *logThrottle {
	return &logThrottle{log: log, interval: logThrottleInterval, burst: logThrottleBurst, now: time.Now,
		kinds: map[string]*logThrottleKind{}}
}

func (t *logThrottle) Info(msg string, args ...any) { t.Log(levelInfo, msg, args...) }

func (t *logThrottle) Warn(msg string, args ...any) { t.Log(levelWarn, msg, args...) }

// Log writes one line of msg, unless msg has had its burst of lines in this interval.
func (t *logThrottle) Log(level logLevel, msg string, args ...any) {
	ctx := context.Background()
	if !t.log.Enabled(ctx, level) {
		return
	}
	now := t.now()
	t.mu.Lock()
	k := t.kinds[msg]
	if k == nil {
		k = &logThrottleKind{start: now, level: level}
		t.kinds[msg] = k
	}
	var summary int
	var span time.Duration
	var summaryLevel logLevel
	if now.Sub(k.start) >= t.interval {
		summary, span, summaryLevel = k.suppressed, now.Sub(k.start), k.level
		*k = logThrottleKind{start: now, level: level}
	}
	k.level = max(k.level, level)
	write := k.written < t.burst
	if write {
		k.written++
	} else {
		k.suppressed++
	}
	t.mu.Unlock()
	if summary > 0 {
		t.summarize(summaryLevel, msg, summary, span)
	}
	if write {
		t.log.Log(ctx, level, msg, args...)
	}
}

// flush writes the count of every message that has lines left out, and starts afresh.
func (t *logThrottle) flush() {
	now := t.now()
	type pending struct {
		msg   string
		level logLevel
		n     int
		span  time.Duration
	}
	var out []pending
	t.mu.Lock()
	for msg, k := range t.kinds {
		if k.suppressed > 0 {
			out = append(out, pending{msg, k.level, k.suppressed, now.Sub(k.start)})
		}
		delete(t.kinds, msg)
	}
	t.mu.Unlock()
	for _, p := range out {
		t.summarize(p.level, p.msg, p.n, p.span)
	}
}

func (t *logThrottle) summarize(level logLevel, msg string, n int, span time.Duration) {
	t.log.Log(context.Background(), level, msg, "suppressed", n, "over", span.Round(time.Millisecond),
		"note", "repeated lines of this message were left out")
}
