package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestLogThrottle: within an interval a message is written logThrottleBurst times and then
// counted; the next interval's first line is preceded by the count, flush writes what is
// left, other messages and disabled levels are not affected.
func TestLogThrottle(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_800_000_000, 0)
	lt := newLogThrottle(newTextLogger(&buf, levelInfo))
	lt.now = func() time.Time { return now }
	for range 100 {
		lt.Warn("dropping a relay frame", "error", "bad")
		lt.Log(levelDebug, "debug line")
	}
	lt.Info("another message")
	lines := func() []string { return strings.Split(strings.TrimSpace(buf.String()), "\n") }
	if got := len(lines()); got != logThrottleBurst+1 {
		t.Fatalf("%d lines after 100 repeats in one interval, want %d:\n%s", got, logThrottleBurst+1, buf.String())
	}
	now = now.Add(logThrottleInterval)
	lt.Warn("dropping a relay frame", "error", "bad")
	l := lines()
	if s := l[len(l)-2]; !strings.Contains(s, "level=WARN") || !strings.Contains(s, "suppressed=95") {
		t.Fatalf("summary line %q, want a WARN line with suppressed=95", s)
	}
	for range 10 {
		lt.Warn("dropping a relay frame", "error", "bad")
	}
	lt.flush()
	l = lines()
	if s := l[len(l)-1]; !strings.Contains(s, "suppressed=6") {
		t.Fatalf("flush wrote %q, want suppressed=6", s)
	}
	if strings.Contains(buf.String(), "debug line") {
		t.Fatal("a disabled level was written")
	}
}
