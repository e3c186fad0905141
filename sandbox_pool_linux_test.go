package main

// Warm stages (docs/sandbox.md §2, "Warm stages"): the stage forked ahead of need runs the next
// start as a cold one would, and is let go when it could be stale, dead, or unwanted.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// warmPid runs one sandboxed start on ts, so that a warm stage is forked, and returns that
// stage's pid once it is ready.
func warmPid(t *testing.T, ts *testServer, f *sbFixture) int {
	t.Helper()
	if r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false, "true"); r.exit != 0 {
		t.Fatalf("first start: exit %d, output %q", r.exit, r.out)
	}
	pid := ts.srv.sandbox.warm.settled()
	if pid == 0 {
		t.Fatal("no warm stage after a sandboxed start")
	}
	return pid
}

// alive reports whether pid is still a process of ours (not reaped).
func alive(pid int) bool {
	return !errors.Is(unix.Kill(pid, 0), unix.ESRCH)
}

// TestWarmStageRunsTheNextStart: the warm stage runs the next start, pipe and PTY, with the
// start's environment, working directory, streams and exit status, under the same sandbox
// (a write outside the workspace is refused), and a new one is forked for the start after.
func TestWarmStageRunsTheNextStart(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	for _, tty := range []bool{false, true} {
		pid := warmPid(t, ts, f)
		via := viaPipe
		if tty {
			via = viaPTY
		}
		r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, via, "restricted"), tty,
			`echo "env=$BASE cwd=$(pwd)"; [ -t 0 ] && stty size; echo err >&2; echo pwned > "$OUT/f"; exit 7`)
		if alive(pid) {
			t.Fatalf("tty %v: the warm stage %d is still waiting: the start forked a cold one", tty, pid)
		}
		if r.exit != 7 {
			t.Errorf("tty %v: exit %d, want 7 (output %q)", tty, r.exit, r.out)
		}
		if n := strings.Count(r.out, "env="); n != 1 {
			t.Errorf("tty %v: the command ran %d times (output %q)", tty, n, r.out)
		}
		for _, want := range []string{"env=" + f.base + " cwd=" + f.ws, "err", "Read-only file system"} {
			if !strings.Contains(r.out, want) {
				t.Errorf("tty %v: output %q lacks %q", tty, r.out, want)
			}
		}
		if tty && !strings.Contains(r.out, "24 80") {
			t.Errorf("PTY: output %q lacks the terminal's size 24 80", r.out)
		}
		wantAbsent(t, filepath.Join(f.outside, "f"))
		if next := ts.srv.sandbox.warm.settled(); next == 0 || next == pid {
			t.Errorf("tty %v: warm stage after the start: %d (was %d), want a new one", tty, next, pid)
		}
	}
}

// TestWarmStageNotUsedAfterAMount: a warm stage's mount namespace is a copy of the server's
// at its fork; once the server's has changed, it is let go and a cold stage builds the
// sandbox, which sees the new mount.
func TestWarmStageNotUsedAfterAMount(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	pid := warmPid(t, ts, f)
	dir := filepath.Join(f.ws, "mnt")
	mustMkdir(t, dir)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("mount a tmpfs: %v (needs root in the server's mount namespace)", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	mustWrite(t, filepath.Join(dir, "seen"), "on the new mount\n")
	r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false, `cat mnt/seen`)
	if r.exit != 0 || r.out != "on the new mount\n" {
		t.Errorf("exit %d, output %q: the sandbox does not show the mount made after the warm stage's fork", r.exit, r.out)
	}
	awaitExited(t, pid) // let go, not used
}

// TestWarmStageKilledWhileWaiting: a warm stage killed while it waits is not used; the start
// forks a cold stage and runs.
func TestWarmStageKilledWhileWaiting(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	pid := warmPid(t, ts, f)
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitExited(t, pid)
	r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false, `echo ran`)
	if r.exit != 0 || r.out != "ran\n" {
		t.Errorf("exit %d, output %q, want ran", r.exit, r.out)
	}
}

// TestWarmStageSignalsBeforeItsStart: a signal sent to the warm stage while it waits neither
// ends it nor reaches the command it later runs.
func TestWarmStageSignalsBeforeItsStart(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	pid := warmPid(t, ts, f)
	if err := unix.Kill(pid, unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false,
		`trap 'echo got TERM' TERM; sleep 0.2 & wait; echo done`)
	if r.exit != 0 || r.out != "done\n" {
		t.Errorf("exit %d, output %q, want done and no TERM", r.exit, r.out)
	}
}

// TestWarmStageEndsWithTheServer: the server's shutdown lets its warm stage go, and reaps it.
func TestWarmStageEndsWithTheServer(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	pid := warmPid(t, ts, f)
	ts.srv.sandbox.close()
	if alive(pid) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		t.Logf("debug %s %q", b, c)
		t.Errorf("the warm stage %d outlived the sandboxer's close", pid)
	}
	if r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false, `echo ran`); r.exit != 0 || r.out != "ran\n" {
		t.Errorf("after close: exit %d, output %q, want ran (cold)", r.exit, r.out)
	}
	if got := ts.srv.sandbox.warm.settled(); got != 0 {
		t.Errorf("a warm stage %d was forked after the close", got)
	}
}

// awaitExited waits for our child pid to have exited (without reaping it).
func awaitExited(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone already
	}
	defer unix.Close(fd)
	for {
		_, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// TestWarmStageLargeConfiguration: a configuration larger than the socket's buffer (an
// environment of 512 KiB) reaches the warm stage whole.
func TestWarmStageLargeConfiguration(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	pid := warmPid(t, ts, f)
	env := f.env()
	for i := range 8 {
		env[fmt.Sprintf("BIG%d", i)] = strings.Repeat("x", 64<<10)
	}
	tc := ts.connect(t)
	id := nextSBID()
	tc.mustCall("process/start", map[string]any{
		"processId": id, "argv": []string{"sh", "-c", `printf %s "$BIG0$BIG1$BIG2$BIG3$BIG4$BIG5$BIG6$BIG7" | wc -c`}, "cwd": fileURI(f.ws), "env": env, "tty": false,
		"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
	})
	r := waitClosed(tc, id)
	if alive(pid) {
		t.Fatalf("the warm stage %d is still waiting: the start forked a cold one", pid)
	}
	if got := strings.TrimSpace(r.stdout()); r.exitCode != 0 || got != fmt.Sprint(512<<10) {
		t.Errorf("exit %d, output %q, stderr %q: want %d bytes of BIG0-7", r.exitCode, got, r.stderr(), 512<<10)
	}
}
