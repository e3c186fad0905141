package main

// Adversarial pass over warm stages (docs/sandbox.md §2, "Warm stages"): a command of the same
// user turns on the stage forked ahead of need for the next start, and the warm stage is held
// to what a cold one does. Every verdict is read on the host: the stage's /proc entries (its
// state, its tracer, its mounts, its sockets), the files the next command writes or not, the
// processes and descriptors left.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// warmAdvAttack is what a command of another server of the same user tries against the warm
// stage WARM: stop and signal it, trace it, write its memory, take its socket, and enter its
// namespaces to mount over its view and listen in the network namespace the next command
// will get.
const warmAdvAttack = `
echo "ns: $(readlink /proc/$WARM/ns/user 2>&1)"
echo "fd: $(readlink /proc/$WARM/fd/3 2>&1)"
kill -STOP $WARM; echo "stop: $?"
kill -USR1 $WARM; echo "usr1: $?"
` + sbProbeEnv + `=1 "$PROBE" ptrace $WARM
printf x | dd of=/proc/$WARM/mem bs=1 seek=4194304 conv=notrunc 2>&1 | tail -1
(exec 9</proc/$WARM/fd/3) 2>&1 && echo "socket: opened"
nsenter -t $WARM -U -m --preserve-credentials -- mount -t tmpfs warmadv /mnt 2>&1; echo "mount: $?"
nsenter -t $WARM -U -n --preserve-credentials -- perl -MIO::Socket::INET -e 'IO::Socket::INET->new(LocalAddr=>"127.0.0.1:4444",Listen=>1) or die "listen: $!"; print "listening\n"; sleep 30' 2>&1 &
nsenter -t $WARM -n -- true 2>&1; echo "netns: $?"
wait
`

// procStatusField is field (e.g. "State") of /proc/pid/status.
func procStatusField(pid int, field string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestWarmAdvReachIdleStage: commands of servers whose sandbox shares the host's pid namespace
// (Landlock; namespaces with --linux-sandbox-pid-namespace inherit) see the warm stage of
// another server of the same user and try to stop it, trace it, write its memory and enter its
// namespaces. On the host: the stage is neither stopped nor traced, its mounts and its network
// namespace's sockets are what they were, and the next start runs on it.
func TestWarmAdvReachIdleStage(t *testing.T) {
	for _, m := range advSupervisedModes {
		t.Run(m.name, func(t *testing.T) {
			cbRequire(t, m.mech)
			victim := startTestServer(t)
			f := newSBFixture(t)
			pid := warmPid(t, victim, f)
			mounts, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
			attacker := startTestServer(t, withSandboxer(t, m.pidNS, m.mech))
			af := newSBFixture(t)
			tc := attacker.connect(t)
			env := af.env()
			env["WARM"] = strconv.Itoa(pid)
			id := nextSBID()
			tc.mustCall("process/start", map[string]any{
				"processId": id, "argv": []string{"sh", "-c", warmAdvAttack}, "cwd": fileURI(af.ws), "env": env, "tty": false,
				"sandbox": af.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
			})
			r := waitClosed(tc, id)
			t.Logf("attacker (%s): exit %d\n%s%s", m.name, r.exitCode, r.stdout(), r.stderr())
			if !alive(pid) {
				t.Fatalf("the warm stage %d is gone after the attack", pid)
			}
			if st := procStatusField(pid, "State"); strings.HasPrefix(st, "T") || strings.HasPrefix(st, "t") {
				unix.Kill(pid, unix.SIGCONT)
				t.Errorf("the warm stage %d is %s after the attack", pid, st)
			}
			if tr := procStatusField(pid, "TracerPid"); tr != "0" {
				t.Errorf("the warm stage %d is traced by %s", pid, tr)
			}
			if now, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid)); string(now) != string(mounts) {
				t.Errorf("the warm stage's mounts changed:\n%s", now)
			}
			if tcp, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid)); strings.Contains(string(tcp), ":115C ") {
				t.Errorf("a socket on port 4444 in the warm stage's network namespace:\n%s", tcp)
			}
			run := f.runServer(t, victim, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false, `echo ran > ran; echo ok`)
			if run.exit != 0 || run.out != "ok\n" {
				t.Errorf("next start: exit %d, output %q", run.exit, run.out)
			}
			wantFile(t, filepath.Join(f.ws, "ran"), "ran\n")
			if alive(pid) {
				t.Errorf("the next start did not run on the warm stage %d", pid)
			}
		})
	}
}

// TestWarmAdvStoppedIdleStage: the idle warm stage is stopped (SIGSTOP, which no stage can
// catch: any process allowed to signal it, or a cgroup freezer). The next start must still
// run its command: on the host, the file it writes appears.
func TestWarmAdvStoppedIdleStage(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	pid := warmPid(t, ts, f)
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer unix.Kill(pid, unix.SIGKILL) // no start left hanging on it
	tc := ts.connect(t)
	id := nextSBID()
	tc.mustCall("process/start", map[string]any{
		"processId": id, "argv": []string{"sh", "-c", "echo ran > ran"}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false,
		"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
	})
	ran := filepath.Join(f.ws, "ran")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(ran); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the start given after the warm stage %d was stopped (state %q) never ran its command in 10 s",
				pid, procStatusField(pid, "State"))
		}
		time.Sleep(10 * time.Millisecond) // the file has no event to wait on
	}
}

// ourChildren lists the pids of this process's children (every thread's).
func ourChildren() map[int]bool {
	kids := map[int]bool{}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/children")
		for _, s := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(s); err == nil {
				kids[pid] = true
			}
		}
	}
	return kids
}

// warmAdvCloseWait bounds the sandboxer's close with a stage stopped under way: the
// pool's bounded wait for its ready byte, and some slack.
const warmAdvCloseWait = 15 * time.Second

// TestWarmAdvStoppedBeforeReady: a warm stage stopped before it says it waits (between its
// fork and its ready byte) must not hang the server: its shutdown (sandboxer close) must
// still return. The stage is caught by watching this process's children while the pool forks.
func TestWarmAdvStoppedBeforeReady(t *testing.T) {
	requireUserNamespaces(t)
	for attempt := 1; attempt <= 5; attempt++ {
		sbx, err := newSandboxer("isolate", "")
		if err != nil {
			t.Fatal(err)
		}
		before := ourChildren()
		sbx.warm.refill(forkWarmStage) // forks one in the background
		pid := 0
		for deadline := time.Now().Add(5 * time.Second); pid == 0 && time.Now().Before(deadline); {
			// Once it runs the stage (exec'd): stopped before its exec, it would hold
			// os.StartProcess itself, which waits for the exec, for cold stages as well.
			for k := range ourChildren() {
				argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", k))
				if !before[k] && strings.HasPrefix(string(argv), "exec-server-sandbox\x00") {
					pid = k
				}
			}
		}
		if pid == 0 {
			t.Fatal("no warm stage forked")
		}
		unix.Kill(pid, unix.SIGSTOP)
		settled := make(chan int, 1)
		go func() { settled <- sbx.warm.settled() }()
		select {
		case <-settled:
			// It said it waits before the stop: not the window this test is after.
			unix.Kill(pid, unix.SIGKILL)
			sbx.close()
			continue
		case <-time.After(2 * time.Second):
		}
		t.Logf("attempt %d: stage %d stopped before its ready byte (state %q)", attempt, pid, procStatusField(pid, "State"))
		closed := make(chan struct{})
		go func() { sbx.close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(warmAdvCloseWait):
			unix.Kill(pid, unix.SIGKILL)
			<-closed
			t.Fatalf("the server's sandbox close hung %v on a warm stage stopped before it was ready", warmAdvCloseWait)
		}
		return
	}
	t.Skip("never caught a warm stage before its ready byte in 5 attempts")
}

// warmAdvStateScript prints what a command inherits from its stage. The shell lists its own
// descriptors by a glob it expands itself, before any subshell: a subshell listing the
// shell's /proc/$$/fd races the shell's closing of the pipes it made for that subshell.
const warmAdvStateScript = `
echo "env: $(env | sort | tr '\n' ' ')"
echo "cwd: $(pwd) umask: $(umask)"
fds=; for f in /proc/$$/fd/*; do fds="$fds ${f##*/}=$(readlink $f | sed 's/:.*//')"; done; echo "fds:$fds"
echo "limits: $(tr -s ' ' < /proc/$$/limits | tr '\n' '|')"
grep -E '^(SigIgn|Cap|NoNewPrivs|Seccomp|Uid|Gid|Groups|NSpid|NSpgid|NSsid|Cpus_allowed_list)' /proc/$$/status
echo "stat: $(cut -d' ' -f 4-8 /proc/$$/stat)"
echo "cgroup: $(cat /proc/$$/cgroup)"
echo "mounts: $(cut -d' ' -f 5,6,9,10 /proc/$$/mountinfo | sort | tr '\n' '|')"
echo "ns: $(for n in ipc mnt net pid user uts; do readlink /proc/$$/ns/$n; done | sed 's/:.*//' | tr '\n' ' ')"
[ -t 0 ] && echo "tty: $(stty size) $(tty)"
echo "pid: $$ ppid: $PPID"
`

// TestWarmAdvColdWarmParity: a command started on a warm stage inherits what one started on
// a cold stage does (environment, directory, umask, descriptors, limits, signal mask and
// dispositions, capabilities, filter, ids, process group, session and terminal, cgroup,
// mounts), pipe and PTY. Read in the sandbox, but compared between the two, both on the host's
// kernel: nothing the command says is trusted as a verdict on the sandbox.
func TestWarmAdvColdWarmParity(t *testing.T) {
	requireUserNamespaces(t)
	// The shell's own mask changes while it forks, so the mask is read by what it execs.
	const maskScript = `exec grep -E '^Sig(Blk|Ign|Pnd|Q)' /proc/self/status`
	for _, tty := range []bool{false, true} {
		for _, script := range []string{warmAdvStateScript, maskScript} {
			t.Run(fmt.Sprintf("tty=%v/%.10s", tty, strings.TrimSpace(script)), func(t *testing.T) {
				ts := startTestServer(t)
				f := newSBFixture(t)
				via := viaPipe
				if tty {
					via = viaPTY
				}
				cold := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, via, "restricted"), tty, script)
				pid := ts.srv.sandbox.warm.settled()
				if pid == 0 {
					t.Fatal("no warm stage")
				}
				warm := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, via, "restricted"), tty, script)
				if alive(pid) {
					t.Fatal("the second start did not take the warm stage")
				}
				// The command's pid in its namespace counts the stage's threads before it: not
				// compared.
				norm := func(s string) string {
					s = strings.ReplaceAll(s, "\r\n", "\n")
					s = regexp.MustCompile(`pts/\d+`).ReplaceAllString(s, "pts/N")
					s = regexp.MustCompile(`(?m)^(NSpid|NSpgid|NSsid):\s*\d+$`).ReplaceAllString(s, "$1: N")
					s = regexp.MustCompile(`(?m)^stat: (\d+) \d+ (\d+) (\d+) (-?\d+)$`).ReplaceAllString(s, "stat: $1 N $3")
					return regexp.MustCompile(`(?m)^pid: \d+`).ReplaceAllString(s, "pid: N")
				}
				c, w := norm(cold.out), norm(warm.out)
				if cold.exit != warm.exit || c != w {
					cl, wl := strings.Split(c, "\n"), strings.Split(w, "\n")
					for i := 0; i < max(len(cl), len(wl)); i++ {
						var a, b string
						if i < len(cl) {
							a = cl[i]
						}
						if i < len(wl) {
							b = wl[i]
						}
						if a != b {
							t.Errorf("cold: %s\nwarm: %s", a, b)
						}
					}
				}
			})
		}
	}
}

// TestWarmAdvEnvBytes: the command's environment reaches a warm stage's command byte for byte,
// as execve gives it to a cold stage's: a large one (more than the first message, and more
// than the socket's buffer in all) of JSON's escaped characters, and a variable the server
// inherits (envPolicy inherit all) whose value is not UTF-8.
func TestWarmAdvEnvBytes(t *testing.T) {
	requireUserNamespaces(t)
	raw := "a\xff\xfeb"
	t.Setenv("WARMADV_RAW", raw)
	big := strings.Repeat("<&>\u2028\x01", 15000)
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	want := fmt.Sprintf("%s %s\n", sum(big), sum(raw))
	ts := startTestServer(t)
	f := newSBFixture(t)
	env := f.env()
	for i := range 10 { // about 1 MiB in all: more than the socket's buffer
		env[fmt.Sprintf("BIG%d", i)] = big
	}
	script := `printf %s "$BIG9" | sha256sum | cut -d' ' -f1 | tr '\n' ' '; printf %s "$WARMADV_RAW" | sha256sum | cut -d' ' -f1`
	for _, kind := range []string{"cold", "warm"} {
		tc := ts.connect(t)
		id := nextSBID()
		tc.mustCall("process/start", map[string]any{
			"processId": id, "argv": []string{"sh", "-c", script}, "cwd": fileURI(f.ws), "env": env, "tty": false,
			"envPolicy": map[string]any{"inherit": "all", "ignoreDefaultExcludes": true, "exclude": []string{}, "set": map[string]string{}, "includeOnly": []string{}},
			"sandbox":   f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
		})
		r := waitClosed(tc, id)
		if got := r.stdout() + r.stderr(); r.exitCode != 0 || got != want {
			t.Errorf("%s: exit %d, output %q, want %q", kind, r.exitCode, got, want)
		}
		if kind == "cold" && ts.srv.sandbox.warm.settled() == 0 {
			t.Fatal("no warm stage")
		}
	}
}

// TestWarmAdvSignalsAfterStart: once a start has taken the warm stage, process/signal and
// process/terminate reach its command.
func TestWarmAdvSignalsAfterStart(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	tc := ts.connect(t)
	for _, how := range []string{"signal", "terminate"} {
		pid := warmPid(t, ts, f)
		id := nextSBID()
		tc.mustCall("process/start", map[string]any{
			"processId": id, "argv": []string{"sh", "-c", `trap 'echo got INT > got; exit 3' INT; echo ready; while :; do sleep 0.05; done`},
			"cwd": fileURI(f.ws), "env": f.env(), "tty": false, "sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
		})
		waitOutput(tc, id, "stdout", "ready")
		if how == "signal" {
			tc.mustCall("process/signal", map[string]any{"processId": id, "signal": "interrupt"})
		} else {
			tc.mustCall("process/terminate", map[string]any{"processId": id})
		}
		r := waitClosed(tc, id)
		if how == "signal" {
			wantFile(t, filepath.Join(f.ws, "got"), "got INT\n")
			os.Remove(filepath.Join(f.ws, "got"))
			if r.exitCode != 3 {
				t.Errorf("signal: exit %d, want 3", r.exitCode)
			}
		}
		awaitExited(t, pid)
	}
}

// stageChildren lists this process's children that run a stage (their command line's
// first word is the stage's name), with their state.
func stageChildren() map[int]string {
	out := map[int]string{}
	for pid := range ourChildren() {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.HasPrefix(string(b), "exec-server-sandbox\x00") {
			out[pid] = procStatusField(pid, "State")
		}
	}
	return out
}

// TestWarmAdvConcurrentStartsAndClose: starts race each other for the warm stage and the
// server's shutdown races them: every start runs its command exactly once or fails cleanly,
// and once the server is gone no stage is left (alive or unreaped), nor any descriptor or
// goroutine.
func TestWarmAdvConcurrentStartsAndClose(t *testing.T) {
	requireUserNamespaces(t)
	const starts = 6
	baseG, baseFD := runtime.NumGoroutine(), openFDs()
	t.Run("server", func(t *testing.T) {
		ts := startTestServer(t)
		f := newSBFixture(t)
		warmPid(t, ts, f)
		var wg sync.WaitGroup
		results := make([]sbRun, starts)
		for i := range starts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false,
					fmt.Sprintf(`echo x >> ran%d; echo ok`, i))
			}()
		}
		wg.Wait()
		for i, r := range results {
			if r.exit != 0 || r.out != "ok\n" {
				t.Errorf("start %d: exit %d, output %q", i, r.exit, r.out)
			}
			wantFile(t, filepath.Join(f.ws, fmt.Sprintf("ran%d", i)), "x\n")
		}
		// Now the shutdown, while starts are under way.
		done := make(chan struct{})
		for range starts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-done
				tc := ts.connect(t)
				tc.call("process/start", map[string]any{
					"processId": nextSBID(), "argv": []string{"true"}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false,
					"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
				})
			}()
		}
		close(done)
		ts.srv.sandbox.close()
		wg.Wait()
		if pid := ts.srv.sandbox.warm.settled(); pid != 0 {
			t.Errorf("a warm stage %d after the close", pid)
		}
	})
	if left := stageChildren(); len(left) != 0 {
		t.Errorf("stages left after the server's shutdown: %v", left)
	}
	if g, fds := settle(baseG, baseFD); g > baseG || fds > baseFD {
		t.Errorf("after the server: %d goroutines (was %d), %d descriptors (was %d)", g, baseG, fds, baseFD)
	}
}

// TestWarmAdvRemountReadOnly: a mount of the server's made read-only after the warm stage's
// fork (a bind remount, no new mount): the next start must not write through it. On the host:
// the file is not there.
func TestWarmAdvRemountReadOnly(t *testing.T) {
	requireUserNamespaces(t)
	f := newSBFixture(t)
	dir := filepath.Join(f.ws, "ro")
	mustMkdir(t, dir)
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	ts := startTestServer(t)
	pid := warmPid(t, ts, f)
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	sp := &ts.srv.sandbox.warm
	sp.mu.Lock()
	fit := sp.idle != nil && sp.idle.fit()
	sp.mu.Unlock()
	t.Logf("the warm stage is fit after the remount: %v", fit)
	r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false, `echo pwned > ro/f; echo exit=$?`)
	t.Logf("exit %d, output %q", r.exit, r.out)
	wantAbsent(t, filepath.Join(dir, "f"))
	awaitExited(t, pid)
}

// TestWarmAdvIdleLetGo: a warm stage no start takes is let go after warmStageIdle, and reaped:
// no zombie is left.
func TestWarmAdvIdleLetGo(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	pid := warmPid(t, ts, f)
	start := time.Now()
	awaitExited(t, pid)
	if d := time.Since(start); d > warmStageIdle+5*time.Second {
		t.Errorf("let go after %v", d)
	}
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the let-go stage %d is not reaped (state %q)", pid, procStatusField(pid, "State"))
		}
		time.Sleep(10 * time.Millisecond) // reaping has no event we can wait on here
	}
}

// TestWarmAdvIdleStageDescriptors: the idle warm stage holds only its own descriptors (its
// /dev/null streams, its socket, its status pipe, and what its runtime opens), never one of
// the server's or of another start's, read on the host from /proc/PID/fd while starts of
// other commands run next to its fork.
func TestWarmAdvIdleStageDescriptors(t *testing.T) {
	requireUserNamespaces(t)
	// What the server inherited without close-on-exec from whatever started it, every stage
	// inherits as well, cold or warm (and marks close-on-exec): not a warm stage's leak.
	inherited := map[string]string{}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		for _, e := range ents {
			inherited[e.Name()], _ = os.Readlink("/proc/self/fd/" + e.Name())
		}
	}
	ts := startTestServer(t)
	f := newSBFixture(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false, "true")
		}()
	}
	wg.Wait()
	pid := ts.srv.sandbox.warm.settled()
	if pid == 0 {
		t.Fatal("no warm stage")
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		t.Logf("fd %s -> %s", e.Name(), link)
		switch {
		case inherited[e.Name()] == link:
		case link == os.DevNull, strings.HasPrefix(link, "socket:"), strings.HasPrefix(link, "anon_inode:"):
		case strings.HasPrefix(link, "/sys/fs/cgroup/"): // the Go runtime's CPU limit
		case e.Name() == "4" && strings.HasPrefix(link, "pipe:"): // its status pipe
		default:
			t.Errorf("the idle warm stage holds fd %s -> %s", e.Name(), link)
		}
	}
}

// TestWarmAdvServerKilled: a real server (the test binary) killed with SIGKILL while its warm
// stage waits: the stage dies with it (read on the host through a pidfd).
func TestWarmAdvServerKilled(t *testing.T) {
	requireUserNamespaces(t)
	cmd, ts := startServerProcess(t)
	f := newSBFixture(t)
	if r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false, "true"); r.exit != 0 {
		t.Fatalf("first start: exit %d, output %q", r.exit, r.out)
	}
	// The warm stage: the server's child running the stage, with an empty environment.
	pid := 0
	for deadline := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no warm stage below the server")
		}
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", cmd.Process.Pid))
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", cmd.Process.Pid, task.Name()))
			for _, c := range strings.Fields(string(b)) {
				k, _ := strconv.Atoi(c)
				argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", k))
				env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", k))
				if strings.HasPrefix(string(argv), "exec-server-sandbox\x00") && err == nil && len(env) == 0 {
					pid = k
				}
			}
		}
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	cmd.Process.Signal(unix.SIGKILL)
	cmd.Wait()
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 10000)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
			t.Fatalf("the warm stage %d outlived its killed server by 10 s: %v", pid, err)
		}
		return
	}
}

// TestWarmAdvStartErrors: a start a cold stage refuses is refused as well, and with the same
// words, by a warm one: a working directory that does not exist, one that is a file.
func TestWarmAdvStartErrors(t *testing.T) {
	requireUserNamespaces(t)
	for _, c := range []struct{ name, cwd string }{{"missing", "nope"}, {"file", "afile"}} {
		t.Run(c.name, func(t *testing.T) {
			ts := startTestServer(t)
			f := newSBFixture(t)
			mustWrite(t, filepath.Join(f.ws, "afile"), "x")
			var got [2]string
			for i := range got {
				if i == 1 && ts.srv.sandbox.warm.settled() == 0 {
					t.Fatal("no warm stage")
				}
				tc := ts.connect(t)
				res, rerr := tc.call("process/start", map[string]any{
					"processId": nextSBID(), "argv": []string{"true"}, "cwd": fileURI(filepath.Join(f.ws, c.cwd)), "env": f.env(), "tty": false,
					"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
				})
				got[i] = fmt.Sprintf("%s %v", res, rerr)
				if i == 0 {
					// The refused start forks no warm stage: one that runs does.
					f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false, "true")
				}
			}
			t.Logf("cold: %s\nwarm: %s", got[0], got[1])
			if got[0] != got[1] {
				t.Errorf("cold and warm answer differently:\ncold: %s\nwarm: %s", got[0], got[1])
			}
		})
	}
}

// TestWarmAdvColdReadOnlySubmount: a read-only bind mount under the workspace, made before
// any start: a cold stage's command must not write through it either.
func TestWarmAdvColdReadOnlySubmount(t *testing.T) {
	requireUserNamespaces(t)
	f := newSBFixture(t)
	dir := filepath.Join(f.ws, "ro")
	mustMkdir(t, dir)
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "host"), nil, 0o644); err == nil {
		t.Fatal("the host itself writes through the read-only mount")
	}
	ts := startTestServer(t)
	r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false, `echo pwned > ro/f; echo exit=$?; grep ' /ro\| ro ' /proc/self/mountinfo | head -5`)
	t.Logf("exit %d, output %q", r.exit, r.out)
	wantAbsent(t, filepath.Join(dir, "f"))
}

// TestWarmAdvFitTwice: once the server's mount table has changed, a warm stage stays unfit:
// the kernel reports the change (POLLPRI on mountinfo) to one poll only, so a second look must
// not take it for unchanged.
func TestWarmAdvFitTwice(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	warmPid(t, ts, f)
	dir := filepath.Join(f.ws, "mnt")
	mustMkdir(t, dir)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	sp := &ts.srv.sandbox.warm
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for i := range 2 {
		if sp.idle.fit() {
			t.Errorf("look %d: the warm stage is fit after a mount", i+1)
		}
	}
}

// TestWarmAdvStaleRlimit: a limit of the server's (RLIMIT_MSGQUEUE: the stage sets none of its own) lowered after the warm stage's fork (as
// prlimit(1) does to a running server) binds the next command as it binds a cold stage's.
// Read on the host: the limits of the command's process.
func TestWarmAdvStaleRlimit(t *testing.T) {
	requireUserNamespaces(t)
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MSGQUEUE, &old); err != nil {
		t.Fatal(err)
	}
	ts := startTestServer(t)
	f := newSBFixture(t)
	pid := warmPid(t, ts, f)
	lowered := unix.Rlimit{Cur: 4096, Max: old.Max}
	if err := unix.Setrlimit(unix.RLIMIT_MSGQUEUE, &lowered); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_MSGQUEUE, &old) })
	tc := ts.connect(t)
	id := nextSBID()
	arg := uniqueSleepArg()
	tc.mustCall("process/start", map[string]any{
		"processId": id, "argv": []string{"sh", "-c", "echo ready; exec sleep " + arg}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false,
		"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
	})
	waitOutput(tc, id, "stdout", "ready")
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", waitHostPid(t, "sleep", arg)))
	used := strings.Contains(string(stat), fmt.Sprintf(") S %d ", pid))
	cmdPid := waitHostPid(t, "sleep", arg)
	var got unix.Rlimit
	if err := unix.Prlimit(cmdPid, unix.RLIMIT_MSGQUEUE, nil, &got); err != nil {
		t.Fatal(err)
	}
	tc.call("process/terminate", map[string]any{"processId": id})
	if got.Cur != lowered.Cur {
		t.Errorf("the command (warm stage used: %v) has RLIMIT_MSGQUEUE %d, the server's is %d since before the start", used, got.Cur, lowered.Cur)
	}
}

// warmAdvMemEnv makes the test binary the /proc/PID/mem attacker of TestWarmAdvDumpableWindow:
// its value is the server's pid.
const warmAdvMemEnv = "EXEC_SERVER_WARMADV_MEM"

func init() {
	if isSandboxStage() {
		return
	}
	if v := os.Getenv(warmAdvMemEnv); v != "" {
		server, _ := strconv.Atoi(v)
		os.Exit(warmAdvMemAttacker(server))
	}
}

// warmAdvMemAttacker watches server's children for a stage that has exec'd, opens its
// /proc/PID/mem for writing as soon as it can, and once the stage has made itself not
// dumpable, reads and writes back (unchanged) 8 bytes of it through that descriptor.
func warmAdvMemAttacker(server int) int {
	seen := map[int]bool{}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", server))
		for _, task := range tasks {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", server, task.Name()))
			for _, c := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(c)
				if seen[pid] {
					continue
				}
				argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				if !strings.HasPrefix(string(argv), "exec-server-sandbox\x00") {
					continue
				}
				seen[pid] = true
				fd, err := unix.Open(fmt.Sprintf("/proc/%d/mem", pid), unix.O_RDWR|unix.O_CLOEXEC, 0)
				if err != nil {
					fmt.Printf("open %d: %v\n", pid, err)
					if len(seen) == 2 {
						return 0 // the cold stage and the warm one
					}
					continue
				}
				maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
				var addr uint64
				for _, line := range strings.Split(string(maps), "\n") {
					if f := strings.Fields(line); len(f) >= 2 && strings.HasPrefix(f[1], "rw") {
						fmt.Sscanf(f[0], "%x-", &addr)
						break
					}
				}
				// Until it is not dumpable: a second open fails then.
				for {
					again, err := unix.Open(fmt.Sprintf("/proc/%d/mem", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
					if err != nil {
						break
					}
					unix.Close(again)
					time.Sleep(time.Millisecond)
				}
				buf := make([]byte, 8)
				n, rerr := unix.Pread(fd, buf, int64(addr))
				w, werr := unix.Pwrite(fd, buf[:max(n, 0)], int64(addr))
				fmt.Printf("stage %d: opened while dumpable; once not dumpable: read %d %v, wrote back %d %v\n", pid, n, rerr, w, werr)
				return 0
			}
		}
	}
	fmt.Println("no stage opened")
	return 1
}

// TestWarmAdvDumpableWindow: a process of the server's user in a user namespace of its own
// and without Landlock (what a namespace sandbox with --linux-sandbox-pid-namespace inherit
// is where Landlock has no signal scope, before Linux 6.12) opens the /proc/PID/mem of a
// stage between its exec and its PR_SET_DUMPABLE(0), and keeps the descriptor: the kernel
// checks access at open only. A warm stage then waits up to 10 s with CAP_SYS_ADMIN over its
// namespaces before it runs another start. Held here: the stage's capabilities in its own
// user namespace, which the attacker lacks, refuse the open (commoncap's ptrace check) before
// dumpability is looked at.
func TestWarmAdvDumpableWindow(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	cmd := exec.Command(testBinary(t))
	cmd.Env = append(os.Environ(), warmAdvMemEnv+"="+strconv.Itoa(os.Getpid()))
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}},
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// The first start forks a cold stage and then the warm one: the attacker watches both.
	f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false, "true")
	b, _ := io.ReadAll(out)
	line := string(b)
	cmd.Wait()
	t.Logf("attacker: %s", strings.TrimSpace(line))
	if strings.Contains(line, "read 8 <nil>") {
		t.Errorf("a stage's memory stays open to a process of the same user outside its namespaces: %s", strings.TrimSpace(line))
	}
}

// TestWarmAdvSignalsMarkForged: the idle warm stage is sent the signal it marks its start
// with (SIGWINCH) ahead of time, then every signal it passes on: none may reach the command
// it later runs. On the host: the command's trap files are not there.
func TestWarmAdvSignalsMarkForged(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	pid := warmPid(t, ts, f)
	for _, sig := range append([]unix.Signal{warmStageMarkSignal}, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2) {
		if err := unix.Kill(pid, sig); err != nil {
			t.Fatal(err)
		}
	}
	r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false,
		`for s in INT TERM HUP QUIT USR1 USR2; do trap "echo > got$s" $s; done; sleep 0.3 & wait; echo done`)
	if r.exit != 0 || r.out != "done\n" {
		t.Errorf("exit %d, output %q, want done", r.exit, r.out)
	}
	for _, s := range []string{"INT", "TERM", "HUP", "QUIT", "USR1", "USR2"} {
		wantAbsent(t, filepath.Join(f.ws, "got"+s))
	}
}

// TestWarmAdvStaleOOMScore: a change of the server's oom_score_adj after the warm fork (an
// operator's `choom -p`) reaches the command, as it would through a cold stage.
func TestWarmAdvStaleOOMScore(t *testing.T) {
	requireUserNamespaces(t)
	old, _ := os.ReadFile("/proc/self/oom_score_adj")
	ts := startTestServer(t)
	f := newSBFixture(t)
	pid := warmPid(t, ts, f)
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("321"), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile("/proc/self/oom_score_adj", old, 0) })
	tc := ts.connect(t)
	id := nextSBID()
	arg := uniqueSleepArg()
	tc.mustCall("process/start", map[string]any{
		"processId": id, "argv": []string{"sh", "-c", "echo ready; exec sleep " + arg}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false,
		"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
	})
	waitOutput(tc, id, "stdout", "ready")
	cmdPid := waitHostPid(t, "sleep", arg)
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmdPid))
	used := strings.Contains(string(stat), fmt.Sprintf(") S %d ", pid))
	got, _ := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", cmdPid))
	tc.call("process/terminate", map[string]any{"processId": id})
	if strings.TrimSpace(string(got)) != "321" {
		t.Errorf("the command (warm stage used: %v) has oom_score_adj %s, the server's is 321 since before the start", used, strings.TrimSpace(string(got)))
	}
}
