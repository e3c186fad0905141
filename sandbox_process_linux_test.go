package main

// The Linux sandbox around real processes (docs/sandbox.md §2, §4): network enabled, PTY,
// process trees, shared workspaces, carve-outs, and what process/start answers.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ---------------------------------------------------------------------------------------
// Network enabled, PTY, process trees

func TestSandboxNetworkEnabled(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	const script = `EXEC_SERVER_SBTEST_PROBE=1 "$PROBE" tcp "$TCPADDR"`
	for _, via := range []sbVia{viaPipe, viaPTY, viaCLI} {
		t.Run(map[sbVia]string{viaPipe: "pipe", viaPTY: "pty", viaCLI: "cli"}[via], func(t *testing.T) {
			f := newSBFixture(t)
			f.listenTCP(t)
			var r sbRun
			if via == viaCLI {
				r = f.runCLI(t, sbWorkspaceWrite, mechanismNamespaces, script, "--network")
			} else {
				r = f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, via, "enabled"), via == viaPTY, script)
			}
			if r.exit != 0 || !strings.Contains(r.out, "connected") {
				t.Fatalf("exit %d, output %q: want a connection", r.exit, r.out)
			}
			f.wantTCP(t, "hello\n")
		})
	}
}

// TestSandboxStageOutOfReach: with the network on, seccomp allows ptrace, and the command is
// the stage's child, of the same user: neither ptrace nor /proc/1/mem may reach the stage,
// pid 1, whose other threads hold capabilities over the view.
func TestSandboxStageOutOfReach(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	for _, network := range []string{"restricted", "enabled"} {
		t.Run(network, func(t *testing.T) {
			f := newSBFixture(t)
			r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, network), false,
				`EXEC_SERVER_SBTEST_PROBE=1 "$PROBE" ptrace 1; exec 3<>/proc/1/mem && echo mem opened`)
			if strings.Contains(r.out, "attached") || strings.Contains(r.out, "mem opened") || r.exit == 0 {
				t.Errorf("exit %d: the command reached the stage:\n%s", r.exit, r.out)
			}
		})
	}
}

func TestSandboxPTY(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	t.Run("stty size is 24 80", func(t *testing.T) {
		f := newSBFixture(t)
		r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPTY, "restricted"), true, `stty size`)
		if r.exit != 0 || r.out != "24 80\r\n" {
			t.Errorf("exit %d, output %q, want 24 80", r.exit, r.out)
		}
	})
	t.Run("denied write in a terminal", func(t *testing.T) {
		f := newSBFixture(t)
		r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPTY, "restricted"), true, `echo pwned > "$OUT/f"`)
		if r.exit == 0 || !strings.Contains(r.out, "Read-only file system") {
			t.Errorf("exit %d, output %q: want a Read-only file system denial", r.exit, r.out)
		}
		wantAbsent(t, filepath.Join(f.outside, "f"))
		if !r.sandboxDenied {
			t.Error("process/exited: sandboxDenied false for a denied write")
		}
	})
	t.Run("job control in an interactive shell", func(t *testing.T) {
		f := newSBFixture(t)
		tc := ts.connect(t)
		id := nextSBID()
		shell := []string{"bash", "--norc", "--noprofile", "-i"}
		if _, err := exec.LookPath("bash"); err != nil {
			shell = []string{"sh", "-i"}
		}
		env := f.env()
		env["PS1"] = "sbx$ "
		tc.mustCall("process/start", map[string]any{
			"processId": id, "argv": shell, "cwd": fileURI(f.ws), "env": env, "tty": true,
			"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPTY, "restricted"),
		})
		term := &ptySession{tc: tc, id: id}
		term.expect(t, "sbx$ ")
		term.send(t, "EXEC_SERVER_SBTEST_PROBE=1 \"$PROBE\" fgwait &\n")
		term.expect(t, "sbx$ ")
		term.send(t, "jobs\n")
		term.expect(t, "fgwait")
		term.send(t, "fg\n")
		// The shell names the job before it hands it the terminal: the job itself says
		// when it has it, and only then does ^C reach it.
		term.expect(t, "in the foreground")
		term.send(t, "\x03")
		term.expect(t, "sbx$ ")
		term.send(t, "echo fg=$?\n")
		term.expect(t, "fg=130")
		term.send(t, "sleep 101 &\n")
		term.expect(t, "sbx$ ")
		term.send(t, "kill %1; wait %1; echo killed=$?\n")
		term.expect(t, "killed=143")
		term.send(t, "exit\n")
		r := waitClosed(tc, id)
		if r.exitCode != 0 {
			t.Errorf("exit %d", r.exitCode)
		}
		if out := r.pty(); strings.Contains(out, "no job control") || strings.Contains(out, "cannot set terminal process group") {
			t.Errorf("the shell found no job control:\n%s", out)
		}
	})
}

func TestSandboxTerminateKillsTheWholeTree(t *testing.T) {
	requireUserNamespaces(t)
	for _, pidns := range []string{"isolate", "inherit"} {
		ts := startTestServer(t, withSandboxer(t, pidns, ""))
		for _, tty := range []bool{false, true} {
			t.Run(fmt.Sprintf("pidns=%s tty=%v", pidns, tty), func(t *testing.T) {
				f := newSBFixture(t)
				tc := ts.connect(t)
				id := nextSBID()
				arg := uniqueSleepArg()
				tc.mustCall("process/start", map[string]any{
					"processId": id, "argv": []string{"sh", "-c", "sleep " + arg + " & echo $! > grandchild.pid; echo started; wait"},
					"cwd": fileURI(f.ws), "env": f.env(), "tty": tty,
					"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
				})
				waitOutput(tc, id, map[bool]string{false: "stdout", true: "pty"}[tty], "started")
				host := waitHostPid(t, "sleep", arg)
				inner := readPidFile(t, filepath.Join(f.ws, "grandchild.pid"))
				if nspid := hostNSpid(t, host); nspid[len(nspid)-1] != inner {
					t.Errorf("the grandchild is %d inside, but its NSpid is %v", inner, nspid)
				} else if (len(nspid) > 1) != (pidns == "isolate") {
					t.Errorf("pidns=%s: NSpid %v", pidns, nspid)
				}
				if res := tc.mustCall("process/terminate", map[string]any{"processId": id}); string(res) != `{"running":true}` {
					t.Errorf("terminate: %s", res)
				}
				waitClosed(tc, id)
				waitPidGone(t, host)
				wantAbsent(t, filepath.Join(f.ws, ".git")) // the synthetic mount points went with it
			})
		}
	}
}

// TestSandboxServerKilledKillsTheTree kills a real server (the test binary as exec-server)
// with SIGKILL: every sandboxed process it started, grandchildren included, dies with it.
// The mount points it made for missing protected names outlive it, and go with the next
// sandbox on the same workspace.
func TestSandboxServerKilledKillsTheTree(t *testing.T) {
	requireUserNamespaces(t)
	cmd, killed := startServerProcess(t)
	tc := killed.connect(t)
	var pids []int
	var fixtures []*sbFixture
	for _, tty := range []bool{false, true} {
		f := newSBFixture(t)
		fixtures = append(fixtures, f)
		id := nextSBID()
		child, grandchild := uniqueSleepArg(), uniqueSleepArg()
		tc.mustCall("process/start", map[string]any{
			"processId": id, "argv": []string{"sh", "-c", "sleep " + grandchild + " & echo started; exec sleep " + child},
			"cwd": fileURI(f.ws), "env": f.env(), "tty": tty,
			"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
		})
		waitOutput(tc, id, map[bool]string{false: "stdout", true: "pty"}[tty], "started")
		pids = append(pids, waitHostPid(t, "sleep", child), waitHostPid(t, "sleep", grandchild))
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	for _, pid := range pids {
		waitPidGone(t, pid)
	}
	ts := startTestServer(t)
	for _, f := range fixtures {
		f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false, "true")
		for _, name := range protectedNames {
			// Only the fixtures' own: other processes on the host may use /tmp's.
			wantAbsent(t, filepath.Join(f.ws, name))
		}
	}
}

// TestSandboxSharedWorkspace runs two servers (two sandboxers, as two exec-server processes
// would be) on one workspace without .codex. The first to end must not take away the
// mount point the other's protection stands on: removing a mount point detaches its
// mounts in every namespace. The last one out removes it.
func TestSandboxSharedWorkspace(t *testing.T) {
	requireUserNamespaces(t)
	a := startTestServer(t, withSandboxer(t, "isolate", "")).connect(t)
	b := startTestServer(t, withSandboxer(t, "isolate", "")).connect(t)
	f := newSBFixture(t)
	start := func(tc *testClient, id, script string) {
		tc.mustCall("process/start", map[string]any{
			"processId": id, "argv": []string{"sh", "-c", script}, "cwd": fileURI(f.ws), "env": f.env(),
			"tty": false, "pipeStdin": true, "sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
		})
		waitOutput(tc, id, "stdout", "ready")
	}
	start(a, "a", `echo ready; read line; true`)
	start(b, "b", `echo ready; read line; mkdir -p .codex; echo pwned > .codex/config.toml`)
	a.mustCall("process/closeStdin", map[string]any{"processId": "a"})
	if r := waitClosed(a, "a"); r.exitCode != 0 {
		t.Fatalf("a: exit %d", r.exitCode)
	}
	b.mustCall("process/closeStdin", map[string]any{"processId": "b"})
	r := waitClosed(b, "b")
	if r.exitCode == 0 || !strings.Contains(r.stderr(), "Read-only file system") {
		t.Errorf("b: exit %d, stderr %q: want the write to .codex denied", r.exitCode, r.stderr())
	}
	wantAbsent(t, filepath.Join(f.ws, ".codex", "config.toml"))
	for _, name := range protectedNames {
		wantAbsent(t, filepath.Join(f.ws, name))
	}
}

// TestSandboxRestrictedReadProtectedGrantNothing: under a profile that reads only the minimal
// roots and its writable roots, a protected name that leads out of them (a `.git` file's
// gitdir, a `.aws` symlink: whoever could write the workspace, or /tmp, before) makes
// nothing readable; one that leads into a writable root still keeps its target read-only.
func TestSandboxRestrictedReadProtectedGrantNothing(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	ws2 := filepath.Join(f.base, "ws2")
	for _, d := range []string{"realgit", "awsdir"} {
		mustMkdir(t, filepath.Join(f.outside, d))
		mustWrite(t, filepath.Join(f.outside, d, "secret"), "SECRET\n")
	}
	mustWrite(t, filepath.Join(f.ws, ".git"), "gitdir: "+filepath.Join(f.outside, "realgit")+"\n")
	mustSymlink(t, filepath.Join(f.outside, "awsdir"), filepath.Join(f.ws, ".aws"))
	mustMkdir(t, filepath.Join(ws2, "inner"))
	mustWrite(t, filepath.Join(ws2, "inner", "config"), "orig\n")
	mustWrite(t, filepath.Join(ws2, ".git"), "gitdir: inner\n")
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	sandbox := json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"minimal"}},"access":"read"},
   {"path":{"type":"path","path":%s},"access":"write"},
   {"path":{"type":"path","path":%s},"access":"write"}]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%s}`, quote(fileURI(f.ws)), quote(fileURI(ws2)), quote(fileURI(f.ws))))
	r := f.runServer(t, ts, sandbox, false, `cat "$OUT/realgit/secret" .aws/secret "$OUT/awsdir/secret"
echo pwned > "$BASE/ws2/inner/config"
echo ok > ok.txt && echo ran`)
	if strings.Contains(r.out, "SECRET") || !strings.Contains(r.out, "ran") {
		t.Errorf("exit %d: a protected name made a path outside the readable roots readable, or the script did not run:\n%s", r.exit, r.out)
	}
	wantFile(t, filepath.Join(ws2, "inner", "config"), "orig\n")
	wantFile(t, filepath.Join(f.ws, "ok.txt"), "ok\n")
}

// TestSandboxFullWriteWithDeny: a profile that writes everywhere but denies a path confines
// files only for that path; the rest of the host stays writable.
func TestSandboxFullWriteWithDeny(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	mustWrite(t, filepath.Join(f.outside, "secret"), "SECRET\n")
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	sandbox := json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"write"},
   {"path":{"type":"path","path":%s},"access":"deny"}]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%s}`, quote(fileURI(filepath.Join(f.outside, "secret"))), quote(fileURI(f.ws))))
	r := f.runServer(t, ts, sandbox, false, `cat "$OUT/secret"; echo ok > "$OUT/new" && echo wrote`)
	if strings.Contains(r.out, "SECRET") || !strings.Contains(r.out, "wrote") {
		t.Errorf("exit %d: want the denied file unreadable and the rest writable:\n%s", r.exit, r.out)
	}
	wantFile(t, filepath.Join(f.outside, "new"), "ok\n")
	wantFile(t, filepath.Join(f.outside, "secret"), "SECRET\n")
}

// TestSandboxReadOnlyCarveOut: a read entry inside a writable root, or anywhere under
// root:write (the reference's write-narrowing entries), stays read-only under either
// mechanism, and root:write so narrowed is no full write.
func TestSandboxReadOnlyCarveOut(t *testing.T) {
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	entry := func(path, access string) string {
		return fmt.Sprintf(`{"path":{"type":"path","path":%s},"access":%q}`, quote(fileURI(path)), access)
	}
	root := func(access string) string {
		return fmt.Sprintf(`{"path":{"type":"special","value":{"kind":"root"}},"access":%q}`, access)
	}
	for _, mech := range []string{"namespaces", "landlock"} {
		for _, tt := range []struct {
			name    string
			entries func(f *sbFixture) []string
			carved  func(f *sbFixture) string // must stay read-only
		}{
			{"root write, outside read", func(f *sbFixture) []string { return []string{root("write"), entry(f.outside, "read")} },
				func(f *sbFixture) string { return f.outside }},
			{"workspace write, ws/ro read", func(f *sbFixture) []string {
				return []string{root("read"), entry(f.ws, "write"), entry(filepath.Join(f.ws, "ro"), "read")}
			}, func(f *sbFixture) string { return filepath.Join(f.ws, "ro") }},
		} {
			t.Run(mech+"/"+tt.name, func(t *testing.T) {
				if mech == "namespaces" {
					requireUserNamespaces(t)
				} else if landlockABI() == 0 {
					t.Skip("Landlock unavailable in this kernel/build")
				}
				ts := startTestServer(t, withSandboxer(t, "isolate", mech))
				f := newSBFixture(t)
				mustMkdir(t, filepath.Join(f.ws, "sub"))
				mustMkdir(t, filepath.Join(f.ws, "ro"))
				carved := tt.carved(f)
				sandbox := json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[%s]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%s}`, strings.Join(tt.entries(f), ","), quote(fileURI(f.ws))))
				r := f.runServer(t, ts, sandbox, false, fmt.Sprintf(`echo pwned > %s/f; echo ok > "$WS/sub/new" && echo wrote`, shellQuote(carved)))
				if !strings.Contains(r.out, "wrote") {
					t.Errorf("exit %d: want the rest writable:\n%s", r.exit, r.out)
				}
				wantAbsent(t, filepath.Join(carved, "f"))
				wantFile(t, filepath.Join(f.ws, "sub", "new"), "ok\n")
			})
		}
	}
}

// TestSandboxProtectedDirLockedByAnother: anyone who can read a workspace's .git (a
// sandboxed command of another workspace, under a full-read profile) can flock it
// exclusively. A sandbox on that workspace is then refused after a bounded wait, instead of
// process/start hanging for as long as the lock is held; once it is let go, it starts.
func TestSandboxProtectedDirLockedByAnother(t *testing.T) {
	requireUserNamespaces(t)
	sbx, err := newSandboxer("isolate", "")
	if err != nil {
		t.Fatal(err)
	}
	sbx.synthetic.wait = 200 * time.Millisecond
	ts := startTestServer(t, func(s *server) { s.sandbox = sbx })
	tc := ts.connect(t)
	f := newSBFixture(t)
	mustMkdir(t, filepath.Join(f.ws, ".git"))
	lock, err := os.Open(filepath.Join(f.ws, ".git"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	params := func() map[string]any {
		return map[string]any{
			"processId": nextSBID(), "argv": []string{"true"}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false,
			"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
		}
	}
	select {
	case r := <-tc.start("process/start", params()):
		if r.Err == nil || r.Err.Code != codeInternal || !strings.Contains(r.Err.Message, ".git") {
			t.Errorf("process/start with .git locked by another: %s %+v, want -32603 naming it", r.Result, r.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("process/start hangs while another process holds .git locked")
	}
	unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	if _, e := tc.call("process/start", params()); e != nil {
		t.Errorf("process/start once the lock is gone: %+v", e)
	}
}

// TestSandboxGlobOverTheCapIsRefused: a glob_pattern deny entry that matches more paths than
// one entry may deny (maxGlobMatches) cannot be enforced whole: the sandbox is refused, and
// no match beyond the cap is left readable.
func TestSandboxGlobOverTheCapIsRefused(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	tc := ts.connect(t)
	f := newSBFixture(t)
	dir := filepath.Join(f.ws, "secrets")
	mustMkdir(t, dir)
	for i := range maxGlobMatches + 1 {
		mustWrite(t, filepath.Join(dir, fmt.Sprintf("s%05d.env", i)), "SECRET\n")
	}
	last := filepath.Join(dir, fmt.Sprintf("s%05d.env", maxGlobMatches))
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	sandbox := json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"read"},
   {"path":{"type":"glob_pattern","pattern":"**/*.env"},"access":"deny"}]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%s}`, quote(fileURI(f.ws))))
	id := nextSBID()
	res, e := tc.call("process/start", map[string]any{
		"processId": id, "argv": []string{"cat", last}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false, "sandbox": sandbox,
	})
	if e == nil {
		r := waitClosed(tc, id)
		t.Fatalf("process/start %s: the sandbox ran, and read the last match: exit %d, %q", res, r.exitCode, r.stdout())
	}
	if e.Code != codeInvalidParams || !strings.Contains(e.Message, "sandbox intent cannot be enforced") {
		t.Errorf("error %d %q, want -32602 sandbox intent cannot be enforced", e.Code, e.Message)
	}
	_, e = tc.call("fs/readFile", map[string]any{"path": fileURI(last), "sandbox": sandbox})
	if e == nil {
		t.Error("fs/readFile read the last match")
	}
}

// ---------------------------------------------------------------------------------------
// What process/start answers

func TestSandboxType(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	tc := ts.connect(t)
	f := newSBFixture(t)
	for _, tt := range []struct {
		name    string
		sandbox any
		want    string
	}{
		{"no sandbox", nil, "none"},
		{"workspace-write", f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), "linuxSeccomp"},
		{"read-only", f.sandboxObject(sbReadOnly, viaPipe, "restricted"), "linuxSeccomp"},
		{"seed workspace-write", f.sandboxObject(sbWorkspaceWrite, viaSeed, "restricted"), "linuxSeccomp"},
		{"disabled", json.RawMessage(`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`), "linuxSeccomp"},
		{"external", json.RawMessage(`{"permissions":{"type":"external","network":"enabled"},"windowsSandboxLevel":"disabled"}`), "linuxSeccomp"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id := nextSBID()
			params := map[string]any{"processId": id, "argv": []string{"true"}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false}
			if tt.sandbox != nil {
				params["sandbox"] = tt.sandbox
			}
			res := tc.mustCall("process/start", params)
			if want := fmt.Sprintf(`{"processId":%q,"sandboxType":%q}`, id, tt.want); string(res) != want {
				t.Errorf("result %s, want %s", res, want)
			}
			if r := waitClosed(tc, id); r.exitCode != 0 {
				t.Errorf("exit %d", r.exitCode)
			}
		})
	}
}

func TestSandboxMissingProgramOrCwd(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	tc := ts.connect(t)
	for _, tt := range []struct {
		name string
		argv []string
		cwd  func(f *sbFixture) string
	}{
		{"program not on PATH", []string{"exec-server-no-such-program"}, nil},
		{"absolute path that does not exist", []string{"/nonexistent-exec-server-dir/prog"}, nil},
		{"cwd that does not exist", []string{"true"}, func(f *sbFixture) string { return filepath.Join(f.ws, "missing") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, tty := range []bool{false, true} {
				f := newSBFixture(t)
				cwd := f.ws
				if tt.cwd != nil {
					cwd = tt.cwd(f)
				}
				id := nextSBID()
				e := tc.callErr("process/start", map[string]any{
					"processId": id, "argv": tt.argv, "cwd": fileURI(cwd), "env": f.env(), "tty": tty,
					"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
				})
				want := "No such file or directory (os error 2)"
				if tty && tt.cwd == nil && !strings.HasPrefix(tt.argv[0], "/") {
					want = "Unable to spawn exec-server-no-such-program because:\nNo viable candidates found in PATH"
				}
				if e.Code != codeInternal || !strings.HasPrefix(e.Message, want) {
					t.Errorf("tty=%v: error %d %q, want -32603 %q", tty, e.Code, e.Message, want)
				}
				for _, name := range protectedNames {
					wantAbsent(t, filepath.Join(f.ws, name)) // a failed start gives back its mount points
				}
				if tc.callErr("process/read", map[string]any{"processId": id}) == nil {
					t.Error("the failed start kept its process id")
				}
			}
		})
	}
}

// TestSandboxFailsClosed: with no mechanism to confine files, a profile that confines them
// is refused and nothing runs; one that does not still runs.
func TestSandboxFailsClosed(t *testing.T) {
	ts := startTestServer(t, withSandboxer(t, "isolate", "none"))
	tc := ts.connect(t)
	f := newSBFixture(t)
	for _, mode := range []sbMode{sbWorkspaceWrite, sbReadOnly} {
		for _, tty := range []bool{false, true} {
			id := nextSBID()
			e := tc.callErr("process/start", map[string]any{
				"processId": id, "argv": []string{"sh", "-c", "echo ran > ran.txt"}, "cwd": fileURI(f.ws), "env": f.env(), "tty": tty,
				"sandbox": f.sandboxObject(mode, viaPipe, "restricted"),
			})
			if e.Code != codeInvalidParams || !strings.Contains(e.Message, "sandbox intent cannot be enforced on this executor") {
				t.Errorf("mode %d tty=%v: error %d %q", mode, tty, e.Code, e.Message)
			}
			if tc.callErr("process/read", map[string]any{"processId": id}) == nil {
				t.Error("the refused start kept its process id")
			}
		}
	}
	wantAbsent(t, filepath.Join(f.ws, "ran.txt"))
	for _, name := range protectedNames {
		wantAbsent(t, filepath.Join(f.ws, name))
	}
	id := nextSBID()
	res := tc.mustCall("process/start", map[string]any{
		"processId": id, "argv": []string{"sh", "-c", "echo ran"}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false,
		"sandbox": json.RawMessage(`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`),
	})
	if r := waitClosed(tc, id); r.stdout() != "ran\n" || !strings.Contains(string(res), "linuxSeccomp") {
		t.Errorf("a disabled profile under no mechanism: %s, output %q", res, r.stdout())
	}
}

func TestSandboxMalformedObjects(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	f := newSBFixture(t)
	root := `{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}`
	managed := func(entries, network string) string {
		return `{"type":"managed","file_system":{"type":"restricted","entries":[` + entries + `]},"network":"` + network + `"}`
	}
	for _, tt := range []struct {
		name, sandbox, want string
	}{
		{"windowsSandboxLevel bogus", `{"permissions":` + managed(root, "restricted") + `,"windowsSandboxLevel":"bogus"}`,
			"unknown variant `bogus`"},
		{"network bogus", `{"permissions":` + managed(root, "bogus") + `,"windowsSandboxLevel":"disabled"}`,
			"unknown variant `bogus`, expected `restricted` or `enabled`"},
		{"cwd not a file: URI", `{"permissions":` + managed(root, "restricted") + `,"windowsSandboxLevel":"disabled","cwd":` + strconv.Quote(f.ws) + `}`,
			"invalid URI: relative URL without a base"},
		{"bare path in an entry", `{"permissions":` + managed(`{"path":{"type":"path","path":`+strconv.Quote(f.ws)+`},"access":"write"}`, "restricted") + `,"windowsSandboxLevel":"disabled"}`,
			"invalid URI: relative URL without a base"},
		{"legacy bare read-only", `{"type":"read-only"}`, "missing field `permissions`"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id := nextSBID()
			e := tc.callErr("process/start", map[string]any{
				"processId": id, "argv": []string{"sh", "-c", "echo ran > ran.txt"}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false,
				"sandbox": json.RawMessage(tt.sandbox),
			})
			if e.Code != codeInvalidParams || !strings.Contains(e.Message, tt.want) {
				t.Errorf("error %d %q, want -32602 containing %q", e.Code, e.Message, tt.want)
			}
		})
	}
	wantAbsent(t, filepath.Join(f.ws, "ran.txt"))
}
