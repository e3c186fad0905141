package main

// What processes cost: no OS thread per wait, no zombie, fd or goroutine left after churn, no
// goroutine locked to its thread (docs/protocol.md §6.1, §5.5).

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// osThreads counts this process's OS threads.
func osThreads() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if n, ok := strings.CutPrefix(line, "Threads:"); ok {
			v, _ := strconv.Atoi(strings.TrimSpace(n))
			return v
		}
	}
	return -1
}

// TestProcessWaitsCostNoThreadEach runs 200 children at once, half of them on a PTY: their
// exits are awaited in the poller (pidfd) and their streams read through it, not by a blocked
// thread each, which would approach Go's thread limit with a few thousand.
func TestProcessWaitsCostNoThreadEach(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("pidfd is Linux-only")
	}
	ts := startTestServer(t)
	tc := ts.connect(t)
	before := osThreads()
	const n = 200
	for i := 0; i < n; i++ {
		tc.mustCall("process/start", with(procStart(t, fmt.Sprintf("w%d", i), "sleep", "600"), "tty", i%2 == 1))
	}
	during := osThreads()
	t.Logf("Threads (/proc/self/status): %d before, %d with %d children running (%d on a PTY)", before, during, n, n/2)
	if during-before > n/10 {
		t.Errorf("%d more threads for %d running children", during-before, n)
	}
	for i := 0; i < n; i++ {
		tc.mustCall("process/terminate", map[string]any{"processId": fmt.Sprintf("w%d", i)})
	}
	for i := 0; i < n; i++ {
		if r := waitClosed(tc, fmt.Sprintf("w%d", i)); r.exitCode != 137 {
			t.Fatalf("w%d: exit code %d", i, r.exitCode)
		}
	}
}

// zombieChildren lists this process's children that exited and were never reaped.
func zombieChildren() []int {
	var z []int
	me := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(me) {
			z = append(z, pid)
		}
	}
	return z
}

// TestProcessChurn runs 10,000 short processes over 50 concurrent connections, one start in
// 25 failing to spawn, and checks that nothing is left behind: no zombie, no descriptor, no
// goroutine.
func TestProcessChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("churn: 10,000 processes")
	}
	if runtime.GOOS != "linux" {
		t.Skip("counts fds and zombies through /proc")
	}
	const conns, perConn = 50, 200
	ts := startTestServer(t, func(s *server) { s.cfg.retention = time.Second })
	// The spawn thread's goroutine lives for ever: have it before the baseline.
	if p, exit, err := startProcess("/bin/sh", []string{"sh", "-c", "exit 0"}, &os.ProcAttr{}); err != nil {
		t.Fatal(err)
	} else {
		exit.close()
		p.Wait()
	}
	baseG, baseFD := runtime.NumGoroutine(), openFDs()
	start := time.Now()
	cwd := fileURI(t.TempDir())
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			tc := ts.connect(t)
			defer tc.close()
			for i := 0; i < perConn; i++ {
				id := fmt.Sprintf("c%d-%d", c, i)
				argv := []string{"echo", id}
				if i%2 == 1 {
					argv = []string{"sh", "-c", "echo $0 >&2; exit 3", id}
				}
				params := map[string]any{"processId": id, "argv": argv, "cwd": cwd, "env": map[string]string{"PATH": os.Getenv("PATH")}, "tty": i%10 == 9}
				if i%25 == 24 { // after its descriptors are made, in pipe and PTY mode
					params["argv"], params["tty"], params["pipeStdin"] = []string{"./no-such-program"}, i%50 == 49, true
					if res, err := tc.call("process/start", params); err == nil {
						errs <- fmt.Errorf("%s: started %s", id, res)
						return
					}
					continue
				}
				if _, err := tc.call("process/start", params); err != nil {
					errs <- fmt.Errorf("%s: %+v", id, err)
					return
				}
				ev := waitEvent(tc, id, "process/closed")
				if ev.Seq < 3 {
					errs <- fmt.Errorf("%s: closed at seq %d", id, ev.Seq)
					return
				}
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	g, fds := settle(baseG, baseFD)
	zombies := zombieChildren()
	t.Logf("%d starts (%d failing) over %d connections in %v (%.0f/s); goroutines %d → %d, fds %d → %d, zombies %d",
		conns*perConn, conns*perConn/25, conns, elapsed.Round(time.Millisecond), float64(conns*perConn)/elapsed.Seconds(), baseG, g, baseFD, fds, len(zombies))
	if g > baseG || fds > baseFD || len(zombies) > 0 {
		buf := make([]byte, 1<<20)
		t.Errorf("left behind: goroutines %d (baseline %d), fds %d (baseline %d), zombies %v\n%s", g, baseG, fds, baseFD, zombies, buf[:runtime.Stack(buf, true)])
	}
}

// TestNoGoroutineLocksItsThread keeps the invariant startProcess relies on: Go ends a thread
// when a goroutine exits locked to it, and the kernel then kills every child forked on that
// thread (PR_SET_PDEATHSIG belongs to the thread). No source file of the server may lock one.
func TestNoGoroutineLocksItsThread(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "sandbox_linux.go" {
			continue // the sandbox stage is a process of its own, not the server: it locks its one thread on purpose
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(src, []byte("LockOSThread(")) {
			t.Errorf("%s locks an OS thread: a child forked on it dies when its goroutine exits (see startProcess)", name)
		}
	}
}
