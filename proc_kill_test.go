package main

// Ending processes: process/terminate and process/signal reach the whole group and session,
// signal deaths report 128+n, and children die with the server (docs/protocol.md §6.3, §6.8, §6.9).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProcessTerminateAfterExitKillsNothing: the shell exited, a background child still holds
// the pipe. terminate answers running:false and leaves it alone, so its late output still
// arrives (seq 3), a long poll after exit waits for it, and closed follows (0.169).
func TestProcessTerminateAfterExitKillsNothing(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tc.mustCall("process/start", procStart(t, "bg", "sh", "-c", `(read x < "$0"; echo late) & echo early; exit 5`, fifo))
	exited := waitEvent(tc, "bg", "process/exited")
	if exited.Seq != 2 || *exited.ExitCode != 5 {
		t.Fatalf("exited: %+v", exited)
	}
	if res := tc.mustCall("process/terminate", map[string]any{"processId": "bg"}); string(res) != `{"running":false}` {
		t.Fatalf("terminate: %s", res)
	}
	poll := tc.start("process/read", map[string]any{"processId": "bg", "afterSeq": 2, "waitMs": 30000})
	opened := make(chan error, 1)
	go func() { // the open completes once the child reads the fifo: it was not killed
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString("go\n")
			f.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(procWait):
		os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0) // lets the goroutine end
		t.Fatal("the background child no longer reads its fifo: terminate killed it")
	}
	rep := <-poll
	if rep.Err != nil {
		t.Fatal(rep.Err)
	}
	var rr readResultJSON
	json.Unmarshal(rep.Result, &rr)
	if len(rr.Chunks) != 1 || rr.Chunks[0].Seq != 3 || string(rr.Chunks[0].Chunk) != "late\n" {
		t.Fatalf("the long poll after exit answered %+v, want late as seq 3", rr)
	}
	if r := waitClosed(tc, "bg"); r.stdout() != "early\nlate\n" || r.closedSeq != 4 {
		t.Fatalf("stdout %q, closed seq %d", r.stdout(), r.closedSeq)
	}
}

func TestProcessTerminateKillsTheGroup(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	for _, tty := range []bool{false, true} {
		t.Run(fmt.Sprintf("tty=%v", tty), func(t *testing.T) {
			id := fmt.Sprintf("term-%v", tty)
			tc.mustCall("process/start", with(procStart(t, id, "sh", "-c", `trap "echo trapped" TERM; sleep 600 & echo $!; wait`), "tty", tty))
			waitEvent(tc, id, "process/output")
			pid := firstLineInt(t, procOutput(tc, id))
			if res := tc.mustCall("process/terminate", map[string]any{"processId": id}); string(res) != `{"running":true}` {
				t.Errorf("terminate: %s", res)
			}
			r := waitClosed(tc, id)
			if r.exitCode != 137 || strings.Contains(r.stdout()+r.pty(), "trapped") {
				t.Errorf("exit code %d, output %q", r.exitCode, r.stdout()+r.pty())
			}
			waitPidGone(t, pid)
			if res := tc.mustCall("process/terminate", map[string]any{"processId": id}); string(res) != `{"running":false}` {
				t.Errorf("second terminate: %s", res)
			}
		})
	}
}

func TestProcessSignalDeathReports128PlusN(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	for _, tty := range []bool{false, true} {
		r := tc.run(with(procStart(t, fmt.Sprintf("sig-%v", tty), "sh", "-c", "kill -TERM $$"), "tty", tty))
		if r.exitCode != 128+int(syscall.SIGTERM) {
			t.Errorf("tty=%v: exit code %d, want 143", tty, r.exitCode)
		}
	}
}

func TestProcessSignalInterrupt(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	t.Run("pipe group gets SIGINT", func(t *testing.T) {
		tc.mustCall("process/start", procStart(t, "int1", "sh", "-c", `trap "echo got INT; exit 6" INT; echo ready; while :; do sleep 0.1; done`))
		waitOutput(tc, "int1", "stdout", "ready")
		if res := tc.mustCall("process/signal", map[string]any{"processId": "int1", "signal": "interrupt"}); string(res) != `{}` {
			t.Errorf("signal: %s", res)
		}
		if r := waitClosed(tc, "int1"); r.exitCode != 6 || r.stdout() != "ready\ngot INT\n" {
			t.Errorf("exit %d stdout %q", r.exitCode, r.stdout())
		}
	})
	for _, tty := range []bool{false, true} {
		t.Run(fmt.Sprintf("sleep tty=%v", tty), func(t *testing.T) {
			id := fmt.Sprintf("int-%v", tty)
			tc.mustCall("process/start", with(procStart(t, id, "sleep", "600"), "tty", tty))
			tc.mustCall("process/signal", map[string]any{"processId": id, "signal": "interrupt"})
			if r := waitClosed(tc, id); r.exitCode != 130 {
				t.Errorf("exit code %d, want 130", r.exitCode)
			}
			if res := tc.mustCall("process/signal", map[string]any{"processId": id, "signal": "interrupt"}); string(res) != `{}` {
				t.Errorf("signal after exit: %s", res)
			}
		})
	}
}

// TestProcessChildrenDieWhenTheServerIsKilled kills a real server process with SIGKILL and checks that its
// children die with it (PR_SET_PDEATHSIG, on whichever thread forked them: see startProcess).
func TestProcessChildrenDieWhenTheServerIsKilled(t *testing.T) {
	if os.Getenv("EXEC_SERVER_CRASH_HELPER") == "1" {
		os.Exit(run([]string{"--listen", "ws://127.0.0.1:0"}, os.Stdin, os.Stdout, os.Stderr))
	}
	if runtime.GOOS != "linux" {
		t.Skip("PR_SET_PDEATHSIG is Linux-only")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestProcessChildrenDieWhenTheServerIsKilled$")
	cmd.Env = append(os.Environ(), "EXEC_SERVER_CRASH_HELPER=1")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ws://") {
		t.Fatalf("server printed %q, %v", line, err)
	}
	tc := (&testServer{url: strings.TrimSpace(line)}).connect(t)
	var pids []int
	for i := 0; i < 8; i++ {
		id := fmt.Sprintf("crash%d", i)
		tc.mustCall("process/start", procStart(t, id, "sh", "-c", "echo $$; exec sleep 600"))
		waitEvent(tc, id, "process/output")
		pids = append(pids, firstLineInt(t, procOutput(tc, id)))
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	for _, pid := range pids {
		waitPidGone(t, pid)
	}
}

// pgrpHelperEnv makes this test binary a helper that starts `sleep 600` in a process group
// of its own (still in the helper's session, holding its stdout), prints the sleep's pid,
// and waits: a job of an interactive shell, without the shell.
const pgrpHelperEnv = "EXEC_SERVER_PGRP_HELPER"

func startPgrpHelper(t *testing.T, tc *testClient, id string, tty bool) int {
	t.Helper()
	params := with(procStart(t, id, os.Args[0], "-test.run=^TestProcessKillReachesEveryGroupOfTheChildSession$"),
		"env", map[string]string{"PATH": os.Getenv("PATH"), pgrpHelperEnv: "1"}, "tty", tty)
	tc.mustCall("process/start", params)
	waitOutput(tc, id, map[bool]string{false: "stdout", true: "pty"}[tty], "\n")
	return firstLineInt(t, procOutput(tc, id))
}

// TestProcessKillReachesEveryGroupOfTheChildSession: process/terminate, and the end of a
// session, kill what the child moved to another process group of its session (the
// background jobs of an interactive shell in a PTY), not only the child's own group.
func TestProcessKillReachesEveryGroupOfTheChildSession(t *testing.T) {
	if os.Getenv(pgrpHelperEnv) == "1" {
		cmd := exec.Command("sleep", "600")
		cmd.Stdout = os.Stdout
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			os.Exit(2)
		}
		fmt.Println(cmd.Process.Pid)
		cmd.Wait()
		os.Exit(0)
	}
	if runtime.GOOS != "linux" {
		t.Skip("finds a session's members through /proc")
	}
	for _, tty := range []bool{false, true} {
		t.Run(fmt.Sprintf("terminate tty=%v", tty), func(t *testing.T) {
			ts := startTestServer(t)
			tc := ts.connect(t)
			pid := startPgrpHelper(t, tc, "job", tty)
			tc.mustCall("process/terminate", map[string]any{"processId": "job"})
			waitPidGone(t, pid)
			if r := waitClosed(tc, "job"); r.exitCode != 137 {
				t.Errorf("exit code %d", r.exitCode)
			}
		})
	}
	// Terminates sent back to back answer before the sessions are swept; the sweeps queued
	// meanwhile share listings, and the sweeper's goroutine ends once nothing is queued.
	t.Run("terminate many at once", func(t *testing.T) {
		ts := startTestServer(t)
		tc := ts.connect(t)
		const n = 8
		pids := make([]int, n)
		for i := range pids {
			pids[i] = startPgrpHelper(t, tc, fmt.Sprintf("job%d", i), i%2 == 1)
		}
		replies := make([]<-chan testReply, n)
		for i := range replies {
			replies[i] = tc.start("process/terminate", map[string]any{"processId": fmt.Sprintf("job%d", i)})
		}
		for i, r := range replies {
			if rep := <-r; rep.Err != nil || string(rep.Result) != `{"running":true}` {
				t.Fatalf("terminate job%d: %s %+v", i, rep.Result, rep.Err)
			}
		}
		for i, pid := range pids {
			waitPidGone(t, pid)
			if r := waitClosed(tc, fmt.Sprintf("job%d", i)); r.exitCode != 137 {
				t.Errorf("job%d: exit code %d", i, r.exitCode)
			}
		}
		sw := &serverSession(ts, tc.sessionID).procs.sweeper
		waitFor(t, "the sweeper is idle", func() bool {
			sw.mu.Lock()
			defer sw.mu.Unlock()
			return !sw.running && sw.next == nil
		})
	})
	t.Run("session expiry", func(t *testing.T) {
		ts := startTestServer(t, func(s *server) { s.cfg.sessionTTL = time.Millisecond })
		tc := ts.connect(t)
		pid := startPgrpHelper(t, tc, "job", true)
		tc.close()
		waitPidGone(t, pid)
	})
}
