package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// eventLog is the run's single timeline: registry calls, relay frames, websocket messages and
// app-server traffic, one line each, written to a file (and to stderr with -v) so a failed
// check can be read back in order.
type eventLog struct {
	mu      sync.Mutex
	start   time.Time
	w       io.Writer
	verbose bool
}

func newEventLog(w io.Writer, verbose bool) *eventLog {
	return &eventLog{start: time.Now(), w: w, verbose: verbose}
}

// Printf writes one timestamped line.
func (l *eventLog) Printf(format string, args ...any) {
	line := fmt.Sprintf("%8.3fs %s\n", time.Since(l.start).Seconds(), fmt.Sprintf(format, args...))
	l.mu.Lock()
	defer l.mu.Unlock()
	io.WriteString(l.w, line)
	if l.verbose {
		io.WriteString(os.Stderr, line)
	}
}

// clip shortens s for a log line.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s…(+%d bytes)", s[:n], len(s)-n)
}
