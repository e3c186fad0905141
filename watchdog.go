package main

// The watchdog: a small process of our own binary that outlives a crash of the server only
// long enough to kill what the server would have killed on a clean exit (SECURITY.md §7).
// PR_SET_PDEATHSIG reaches only the server's direct children; what they started (a
// `(sleep &)`, a `set -m` job, a `nohup`, an interactive shell's jobs) would otherwise be
// re-parented to init and live on.
//
//	server ── pipe ──▶ /proc/self/exe __exec-server-watchdog   (its own session)
//	line      meaning
//	+PID      a child was started: it leads session PID and process group PID
//	rPID      the child PID was reaped: its number may be reused once its session is empty
//	-PID      the server forgot the child: nothing of it is the server's to kill any more
//	EOF       the server is gone: SIGKILL every recorded group not reaped, and every member of
//	          every recorded session, then exit
//
// A reaped leader's session is swept only while no process has its number: a session's
// number stays allocated while it has members, so a process with that pid is a stranger
// whose session it would be.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
)

// watchdogArg is argv[1] of the watchdog.
const watchdogArg = "__exec-server-watchdog"

// watchdog is the server's end: the pipe to the watchdog process, started on first use.
type watchdog struct {
	mu      sync.Mutex
	w       *os.File
	proc    *os.Process
	started bool // a start was tried; a failed one is not retried (log once)
	onError func(error)
}

// record tells the watchdog op ('+', 'r' or '-') about pid, starting it first if need be.
// Failing to is logged once and otherwise ignored: the watchdog is a second line after
// PR_SET_PDEATHSIG and a clean shutdown.
func (w *watchdog) record(op byte, pid int) {
	if w == nil || pid <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		w.started = true
		if err := w.start(); err != nil && w.onError != nil {
			w.onError(err)
		}
	}
	if w.w == nil {
		return
	}
	if _, err := fmt.Fprintf(w.w, "%c%d\n", op, pid); err != nil {
		w.w.Close()
		w.w = nil
	}
}

// start runs the watchdog process in a session of its own, so that neither a signal to the
// server's process group nor the end of its terminal reaches it.
func (w *watchdog) start() error {
	exe, err := selfExecutable()
	if err != nil {
		return fmt.Errorf("watchdog: %w", err)
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("watchdog: %w", err)
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		r.Close()
		pw.Close()
		return fmt.Errorf("watchdog: %w", err)
	}
	proc, err := os.StartProcess(exe, []string{"exec-server-watchdog", watchdogArg}, &os.ProcAttr{
		Dir: "/", Files: []*os.File{r, devnull, devnull}, Sys: &syscall.SysProcAttr{Setsid: true},
	})
	r.Close()
	devnull.Close()
	if err != nil {
		pw.Close()
		return fmt.Errorf("watchdog: start: %w", err)
	}
	w.w, w.proc = pw, proc
	go proc.Wait() // reaped when it exits, whenever that is
	return nil
}

// close ends the watchdog after a clean shutdown: it sees EOF, finds nothing left to kill
// and exits.
func (w *watchdog) close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.w != nil {
		w.w.Close()
		w.w = nil
	}
}

// isWatchdog reports whether this process was started as the watchdog.
func isWatchdog() bool {
	return len(os.Args) > 1 && os.Args[1] == watchdogArg
}

// runWatchdog is the watchdog's main: read records until EOF, then kill. It ignores the
// signals that would end it before it has done its job.
func runWatchdog() {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	reaped := map[int]bool{} // recorded leaders, and whether the server reaped them
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 2 {
			continue
		}
		pid, err := strconv.Atoi(line[1:])
		if err != nil || pid <= 0 {
			continue
		}
		switch line[0] {
		case '+':
			reaped[pid] = false
		case 'r':
			if _, ok := reaped[pid]; ok {
				reaped[pid] = true
			}
		case '-':
			delete(reaped, pid)
		}
	}
	var sids []int
	for pid, gone := range reaped {
		if !gone {
			syscall.Kill(-pid, syscall.SIGKILL)
			sids = append(sids, pid)
		} else if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			sids = append(sids, pid)
		}
	}
	killSessions(sids)
	syscall.Exit(0)
}
