package main

// Shell snapshots (proc_snapshot.go, docs/protocol.md §6.4.1), with real shells reading real
// login profiles from a HOME made for each test. Whether a profile ran is read on the host,
// from the file it appends a line to each time it runs.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// snapshotProfile is a login profile that exports a variable, defines a function, prints to
// both streams, records each run in $HOME/runs (when it may write there) and then runs
// extra.
const snapshotProfile = `export SNAP_VAR='from profile'
snapfn() { echo "snapfn got $1"; }
echo profile-stdout
echo profile-stderr >&2
echo run >> "$HOME/runs" 2>/dev/null
`

// snapshotHome makes a HOME whose login profile for shell is snapshotProfile + extra.
func snapshotHome(t *testing.T, shell, extra string) string {
	t.Helper()
	home := t.TempDir()
	name := map[string]string{"bash": ".profile", "sh": ".profile", "zsh": ".zprofile"}[shell]
	if err := os.WriteFile(filepath.Join(home, name), []byte(snapshotProfile+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	return home
}

// profileRuns is how many times the profile in home ran, read on the host.
func profileRuns(t *testing.T, home string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, "runs"))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run\n")
}

// shellPath finds shell, or skips the test saying it is missing.
func shellPath(t *testing.T, shell string) string {
	t.Helper()
	p, err := exec.LookPath(shell)
	if err != nil {
		t.Skipf("%s is not installed on this host: its shell snapshot cannot be exercised", shell)
	}
	return p
}

// snapshotStart is process/start params running script in shell's login shell, from a
// snapshot of scope, in home.
func snapshotStart(t *testing.T, id, shell, path, home, scope, script string) map[string]any {
	return with(procStart(t, id, path, "-lc", script), "cwd", fileURI(home),
		"env", map[string]string{"PATH": os.Getenv("PATH"), "HOME": home},
		"shellSnapshot", map[string]any{"scopeId": scope, "shell": map[string]string{"name": shell, "path": path}})
}

// TestCapabilityShellSnapshotV2 is the capability end to end: advertised, and a bash login
// shell's profile runs once for many commands, which still see its export and function as
// a non-login shell, without the profile's output repeated.
func TestCapabilityShellSnapshotV2(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.dial(t)
	var init struct {
		EnvironmentInfo environmentInfo `json:"environmentInfo"`
	}
	json.Unmarshal(tc.mustCall("initialize", map[string]any{"clientName": "test"}), &init)
	tc.notify("initialized", map[string]any{})
	if !init.EnvironmentInfo.Capabilities["shellSnapshotV2"] {
		t.Fatalf("initialize advertises shellSnapshotV2 false")
	}
	bash := shellPath(t, "bash")
	home := snapshotHome(t, "bash", "")
	script := `echo "flags=$-"; echo "var=$SNAP_VAR"; snapfn x`
	for i := range 3 {
		r := tc.run(snapshotStart(t, fmt.Sprint("p", i), "bash", bash, home, "thread:env", script))
		if want := "flags=hBc\nvar=from profile\nsnapfn got x\n"; r.stdout() != want || r.stderr() != "" || r.exitCode != 0 {
			t.Errorf("command %d: exit %d, stdout %q (want %q), stderr %q", i, r.exitCode, r.stdout(), want, r.stderr())
		}
	}
	if n := profileRuns(t, home); n != 1 {
		t.Errorf("the profile ran %d times for 3 commands, want once (the capture)", n)
	}
}

// TestShellSnapshotShells runs each supported shell from its snapshot: the export always
// reaches the command, functions wherever the shell can list them (not POSIX sh), the
// profile runs once, and extra arguments still become $0 and $1. The PTY mode takes the same
// path.
func TestShellSnapshotShells(t *testing.T) {
	for _, c := range []struct {
		shell     string
		functions bool
	}{{"bash", true}, {"zsh", true}, {"sh", false}} {
		t.Run(c.shell, func(t *testing.T) {
			ts := startTestServer(t)
			tc := ts.connect(t)
			path := shellPath(t, c.shell)
			// set -a: the capture's own variables must not reach the command as exports.
			home := snapshotHome(t, c.shell, "set -a\n")
			script := `env | grep -c -e '^__es_' -e '^IFS=' -e '^` + shellSnapshotStateVar + `'; echo "var=$SNAP_VAR" "args=$0,$1"; if command -v snapfn >/dev/null; then snapfn y; fi`
			want := "0\nvar=from profile args=zero,one\n"
			if c.functions {
				want += "snapfn got y\n"
			}
			for i := range 2 {
				p := snapshotStart(t, fmt.Sprint("p", i), c.shell, path, home, "t:"+c.shell, script)
				p["argv"] = []string{path, "-lc", script, "zero", "one"}
				r := tc.run(p)
				if r.stdout() != want || r.stderr() != "" || r.exitCode != 0 {
					t.Errorf("command %d: exit %d, stdout %q (want %q), stderr %q", i, r.exitCode, r.stdout(), want, r.stderr())
				}
			}
			p := with(snapshotStart(t, "tty", c.shell, path, home, "t:"+c.shell, `echo "var=$SNAP_VAR"`), "tty", true)
			if r := tc.run(p); !strings.Contains(r.pty(), "var=from profile") || strings.Contains(r.pty(), "profile-std") {
				t.Errorf("PTY command printed %q", r.pty())
			}
			if n := profileRuns(t, home); n != 2 { // the PTY child's environment (SHELL) is its own key
				t.Errorf("the profile ran %d times, want twice (one capture per key)", n)
			}
		})
	}
}

// TestShellSnapshotErrors checks the reference's refusals, word for word, and that a
// request whose argv is not [shell.path, "-lc", script] runs as it is.
func TestShellSnapshotErrors(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	bash := shellPath(t, "bash")
	home := snapshotHome(t, "bash", "")
	snap := func(scope any, shell map[string]any) map[string]any {
		s := map[string]any{"shell": shell}
		if scope != nil {
			s["scopeId"] = scope
		}
		return s
	}
	bashShell := map[string]any{"name": "bash", "path": bash}
	const scopeErr = "shell snapshot scope must be non-empty and at most 256 bytes"
	for _, c := range []struct {
		name string
		snap map[string]any
		argv []string
		want string
	}{
		{"empty scope", snap("", bashShell), []string{bash, "-lc", "true"}, scopeErr},
		{"empty scope, argv not a login shell", snap("", bashShell), []string{"true"}, scopeErr},
		{"257-byte scope", snap(strings.Repeat("x", 257), bashShell), []string{bash, "-lc", "true"}, scopeErr},
		{"no path", snap("s", map[string]any{"name": "bash"}), []string{bash, "-lc", "true"}, "missing field `path`"},
		{"no name", snap("s", map[string]any{"path": bash}), []string{bash, "-lc", "true"}, "missing field `name`"},
		{"no scope", snap(nil, bashShell), []string{bash, "-lc", "true"}, "missing field `scopeId`"},
		{"scope a number", snap(5, bashShell), []string{bash, "-lc", "true"}, "invalid type: number, expected a string"},
		{"fish", snap("s", map[string]any{"name": "fish", "path": bash}), []string{bash, "-lc", "true"}, "shell snapshots are unsupported for shell `fish`"},
	} {
		p := with(procStart(t, "e", c.argv...), "shellSnapshot", c.snap)
		err := tc.callErr("process/start", p)
		if err == nil || err.Code != codeInvalidParams || err.Message != c.want {
			t.Errorf("%s: got %v, want -32602 %q", c.name, err, c.want)
		}
	}
	// Not [shell.path, "-lc", script]: ignored, even for a shell it cannot snapshot.
	env := map[string]string{"PATH": os.Getenv("PATH"), "HOME": home}
	for i, c := range []struct {
		argv  []string
		shell map[string]any
	}{
		{[]string{bash, "-lc", "true"}, map[string]any{"name": "fish", "path": "/usr/bin/fish"}},
		{[]string{bash, "-c", "true"}, bashShell},
		{[]string{bash, "-l", "-c", "true"}, bashShell},
	} {
		p := with(procStart(t, fmt.Sprint("i", i), c.argv...), "env", env, "shellSnapshot", snap("s", c.shell))
		tc.run(p)
	}
	if n := profileRuns(t, home); n != 2 { // the two that run a login shell, each its own
		t.Errorf("the profile ran %d times, want 2", n)
	}
}

// TestShellSnapshotCaptureIsSandboxed captures under the command's sandbox: the profile's
// write outside the writable roots fails during the capture too (read on the host), and a
// TMPDIR the profile exports does not become the sandbox's writable tmpdir.
func TestShellSnapshotCaptureIsSandboxed(t *testing.T) {
	ts := startTestServer(t)
	if !ts.srv.sandbox.enforces() {
		t.Skipf("no sandbox on this kernel: %s", ts.srv.sandbox.describe())
	}
	tc := ts.connect(t)
	bash := shellPath(t, "bash")
	outside := t.TempDir()
	home := snapshotHome(t, "bash", `echo escaped > '`+outside+`/from-profile'
export TMPDIR='`+outside+`'
`)
	cwd := t.TempDir()
	sb := json.RawMessage(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},` +
		`{"path":{"type":"special","value":{"kind":"current_working_directory"}},"access":"write"},` +
		`{"path":{"type":"special","value":{"kind":"tmpdir"}},"access":"write"}]},"network":"restricted"},` +
		`"windowsSandboxLevel":"disabled","cwd":"` + fileURI(cwd) + `"}`)
	script := `echo "var=$SNAP_VAR tmpdir=$TMPDIR"; { echo x > "$TMPDIR/from-command"; } 2>/dev/null; echo ok > here`
	for i := range 2 {
		p := with(snapshotStart(t, fmt.Sprint("p", i), "bash", bash, home, "sbx", script), "cwd", fileURI(cwd), "sandbox", sb)
		r := tc.run(p)
		if want := "var=from profile tmpdir=" + outside + "\n"; r.stdout() != want || r.stderr() != "" {
			t.Errorf("command %d: stdout %q (want %q), stderr %q", i, r.stdout(), want, r.stderr())
		}
	}
	for _, name := range []string{"from-profile", "from-command"} {
		if _, err := os.Stat(filepath.Join(outside, name)); !os.IsNotExist(err) {
			t.Errorf("%s was written outside the sandbox's writable roots (%v)", name, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(cwd, "here")); err != nil || string(b) != "ok\n" {
		t.Errorf("the command could not write its cwd: %q %v", b, err)
	}
}

// TestShellSnapshotFailedCaptureRunsUnchanged makes the profile fail when it runs for a
// capture: each command then runs as asked, a key is retried after its backoff at most
// shellSnapshotAttempts times, and never again after that.
func TestShellSnapshotFailedCaptureRunsUnchanged(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	bash := shellPath(t, "bash")
	home := snapshotHome(t, "bash", `case "$BASH_EXECUTION_STRING" in *exec-server-snapshot*) echo c >> "$HOME/captures"; exit 7 ;; esac
`)
	captures := func() int {
		b, _ := os.ReadFile(filepath.Join(home, "captures"))
		return strings.Count(string(b), "c\n")
	}
	run := func(i int) {
		r := tc.run(snapshotStart(t, fmt.Sprint("p", i), "bash", bash, home, "fail", `echo "var=$SNAP_VAR"`))
		if want := "profile-stdout\nvar=from profile\n"; r.stdout() != want || r.stderr() != "profile-stderr\n" || r.exitCode != 0 {
			t.Fatalf("command %d: exit %d, stdout %q (want %q), stderr %q", i, r.exitCode, r.stdout(), want, r.stderr())
		}
	}
	run(0)
	run(1) // within the backoff: no capture
	if n := captures(); n != 1 {
		t.Fatalf("%d captures after two commands within the backoff, want 1", n)
	}
	i := 2
	for deadline := time.Now().Add(procWait); captures() < shellSnapshotAttempts && time.Now().Before(deadline); i++ {
		time.Sleep(shellSnapshotRetryBackoff / 4) // the backoff is time itself
		run(i)
	}
	time.Sleep(shellSnapshotRetryBackoff + 100*time.Millisecond)
	run(i)
	if n := captures(); n != shellSnapshotAttempts {
		t.Errorf("%d captures, want %d", n, shellSnapshotAttempts)
	}
}

// TestShellSnapshotCacheKeys captures again for another HOME, cwd or scope, reuses a
// snapshot for the same key, and evicts the least recently used past shellSnapshotCacheSize.
func TestShellSnapshotCacheKeys(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	bash := shellPath(t, "bash")
	home := snapshotHome(t, "bash", "")
	n := 0
	run := func(p map[string]any) {
		n++
		p["processId"] = fmt.Sprint("p", n)
		tc.run(p)
	}
	base := snapshotStart(t, "", "bash", bash, home, "s0", "true")
	run(base)
	run(with(base)) // same key
	if got := profileRuns(t, home); got != 1 {
		t.Fatalf("profile ran %d times for one key, want 1", got)
	}
	run(with(base, "cwd", fileURI(t.TempDir())))
	run(with(base, "env", map[string]string{"PATH": os.Getenv("PATH"), "HOME": home, "X": "1"}))
	if got := profileRuns(t, home); got != 3 {
		t.Fatalf("profile ran %d times for three keys, want 3", got)
	}
	// s0 is the least recently used of the 1+2 keys so far; fill the cache past its size.
	for i := 1; i <= shellSnapshotCacheSize-2; i++ {
		run(snapshotStart(t, "", "bash", bash, home, fmt.Sprint("s", i), "true"))
	}
	run(with(base)) // evicted: captured again
	if got, want := profileRuns(t, home), 3+shellSnapshotCacheSize-2+1; got != want {
		t.Errorf("profile ran %d times, want %d", got, want)
	}
}

// TestShellSnapshotCaptureLeavesNothing gives the profile a background child that holds
// the capture's stdout: the capture ends when the shell exits (not at its timeout), the
// child is killed, and the server holds no more descriptors than before.
func TestShellSnapshotCaptureLeavesNothing(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	bash := shellPath(t, "bash")
	sleepArg := fmt.Sprintf("%d.%d", 1000+os.Getpid()%1000, time.Now().UnixNano()%1000)
	home := snapshotHome(t, "bash", "sleep "+sleepArg+" &\n")
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd: %v", err)
		}
		return len(ents)
	}
	tc.run(procStart(t, "warm", "true"))
	before := fds()
	start := time.Now()
	r := tc.run(snapshotStart(t, "p", "bash", bash, home, "bg", `echo "var=$SNAP_VAR"`))
	if took := time.Since(start); took >= shellSnapshotTimeout || r.stdout() != "var=from profile\n" {
		t.Fatalf("took %v, stdout %q", took, r.stdout())
	}
	if after := fds(); after != before {
		t.Errorf("the server holds %d descriptors, %d before the capture", after, before)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(cmd), sleepArg) {
			t.Errorf("the profile's background child %s outlived the capture: %q", e.Name(), cmd)
		}
	}
}

// TestShellSnapshotParseLimits: a capture without the marker, or larger than
// shellSnapshotMax, is a failure; the policy filters the profile's exports.
func TestShellSnapshotParseLimits(t *testing.T) {
	const m = "exec-server-snapshot-x"
	if _, err := parseShellSnapshot([]byte("noise"), m, nil); err == nil {
		t.Error("no marker: accepted")
	}
	big := "noise\x00" + m + "\x00" + strings.Repeat("f", shellSnapshotMax) + "\x00A=1\x00"
	if _, err := parseShellSnapshot([]byte(big), m, nil); err == nil {
		t.Error("oversized state: accepted")
	}
	s, err := parseShellSnapshot([]byte("out\x00"+m+"\x00set -o hashall\n\x00A=1\x00MY_TOKEN=s\x00PWD=/x\x00bad\x00"), m,
		&envPolicyParams{Inherit: "none"})
	if err != nil || s.state != "set -o hashall\n" || len(s.env) != 1 || s.env["A"] != "1" {
		t.Errorf("got %+v, %v", s, err)
	}
}

// TestShellSnapshotCaptureLeavesTheReaderFree holds a capture inside the profile (on a FIFO
// only the test writes) while three commands of the key wait for it: the connection answers
// other requests meanwhile, no command starts before the capture ends, and the profile runs
// once for all three.
func TestShellSnapshotCaptureLeavesTheReaderFree(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	bash := shellPath(t, "bash")
	home := snapshotHome(t, "bash", `if [ -p "$HOME/gate" ]; then read _ < "$HOME/gate"; fi
`)
	gate := filepath.Join(home, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	var replies []<-chan testReply
	for i := range 3 {
		replies = append(replies, tc.start("process/start", snapshotStart(t, fmt.Sprint("p", i), "bash", bash, home, "gate", `echo "var=$SNAP_VAR"`)))
	}
	if res := tc.mustCall("environment/status", map[string]any{}); string(res) != `{"status":"ready"}` {
		t.Fatalf("environment/status during a capture: %s", res)
	}
	for i, r := range replies {
		select {
		case got := <-r:
			t.Fatalf("process/start %d answered before the capture ended: %s %v", i, got.Result, got.Err)
		default:
		}
	}
	f, err := os.OpenFile(gate, os.O_WRONLY, 0) // waits for the capture's profile to open it
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("go\n")
	f.Close()
	for i, r := range replies {
		if got := <-r; got.Err != nil {
			t.Fatalf("process/start %d: %v", i, got.Err)
		}
		if res := waitClosed(tc, fmt.Sprint("p", i)); res.stdout() != "var=from profile\n" || res.stderr() != "" {
			t.Errorf("command %d: stdout %q, stderr %q", i, res.stdout(), res.stderr())
		}
	}
	if n := profileRuns(t, home); n != 1 {
		t.Errorf("the profile ran %d times for three commands started together, want once", n)
	}
}

// TestShellSnapshotCaptureBounds makes the profile, only when it runs for a capture, print
// more than shellSnapshotCaptureMax bytes, or hang past shellSnapshotTimeout: the capture
// is killed with all it started (read on the host) and the command runs unchanged.
func TestShellSnapshotCaptureBounds(t *testing.T) {
	bash := shellPath(t, "bash")
	for _, c := range []struct {
		name, capture string
		min           time.Duration
	}{
		{"output", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x", shellSnapshotCaptureMax+1), 0},
		{"time", "sleep {arg}", shellSnapshotTimeout},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := startTestServer(t)
			tc := ts.connect(t)
			arg := fmt.Sprintf("%d.%d", 2000+os.Getpid()%1000, time.Now().UnixNano()%1000)
			home := snapshotHome(t, "bash", `case "$BASH_EXECUTION_STRING" in *exec-server-snapshot*) echo c > "$HOME/captured"; `+
				strings.ReplaceAll(c.capture, "{arg}", arg)+` ;; esac
`)
			start := time.Now()
			r := tc.run(snapshotStart(t, "p", "bash", bash, home, "bounds", `echo "var=$SNAP_VAR"`))
			if took := time.Since(start); took < c.min {
				t.Errorf("the command started after %v, before the capture's bound", took)
			}
			if want := "profile-stdout\nvar=from profile\n"; r.stdout() != want || r.exitCode != 0 {
				t.Errorf("exit %d, stdout %q, want %q (the command unchanged)", r.exitCode, r.stdout(), want)
			}
			if _, err := os.Stat(filepath.Join(home, "captured")); err != nil {
				t.Errorf("no capture ran: %v", err)
			}
			ents, _ := os.ReadDir("/proc")
			for _, e := range ents {
				if cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(cmd), arg) {
					t.Errorf("the capture's child %s outlived it: %q", e.Name(), cmd)
				}
			}
		})
	}
}

// TestShellSnapshotRequestsWaitForTheStart: requests about a process whose start waits for its
// shell snapshot run after the start, in arrival order (docs/protocol.md §3.4): a
// process/write sent during the capture reaches the command, and a process/terminate kills
// it once it runs (running:true, 137) rather than answering running:false and letting it run.
func TestShellSnapshotRequestsWaitForTheStart(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	bash := shellPath(t, "bash")
	home := snapshotHome(t, "bash", `if [ -p "$HOME/gate" ]; then read _ < "$HOME/gate"; fi
`)
	gate := filepath.Join(home, "gate")
	open := func() {
		f, err := os.OpenFile(gate, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("go\n")
		f.Close()
	}
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("write", func(t *testing.T) {
		p := with(snapshotStart(t, "w", "bash", bash, home, "s-write", `head -c 5`), "pipeStdin", true)
		reply := tc.start("process/start", p)
		wrote := tc.start("process/write", map[string]any{"processId": "w", "writeId": "w1", "chunk": base64.StdEncoding.EncodeToString([]byte("hello"))})
		open()
		if got := <-reply; got.Err != nil {
			t.Fatalf("process/start: %v", got.Err)
		}
		if got := <-wrote; got.Err != nil || string(got.Result) != `{"status":"accepted"}` {
			t.Fatalf("process/write during the capture: %s %v, want accepted", got.Result, got.Err)
		}
		if r := waitClosed(tc, "w"); r.exitCode != 0 || r.stdout() != "hello" {
			t.Errorf("exit %d, stdout %q: want the write's hello", r.exitCode, r.stdout())
		}
	})

	t.Run("terminate", func(t *testing.T) {
		marker := filepath.Join(home, "ran")
		reply := tc.start("process/start", snapshotStart(t, "k", "bash", bash, home, "s-terminate", `sleep 1; touch "$HOME/ran"`))
		term := tc.start("process/terminate", map[string]any{"processId": "k"})
		open()
		if got := <-reply; got.Err != nil {
			t.Fatalf("process/start: %v", got.Err)
		}
		if got := <-term; got.Err != nil || string(got.Result) != `{"running":true}` {
			t.Fatalf("process/terminate during the capture: %s %v, want running:true", got.Result, got.Err)
		}
		if r := waitClosed(tc, "k"); r.exitCode != 137 {
			t.Errorf("exit %d, want 137", r.exitCode)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Error("the command ran to its end after process/terminate")
		}
	})
}

// TestShellSnapshotQueueBehindTheStartIsBounded: past maxQueuedBehindStart requests about a
// process whose start waits for its snapshot, the rest run at once, so that the connection's
// reader is never held up by them (other requests are answered during the capture); a
// terminate among them still ends the command as soon as it runs (137).
func TestShellSnapshotQueueBehindTheStartIsBounded(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	bash := shellPath(t, "bash")
	home := snapshotHome(t, "bash", `if [ -p "$HOME/gate" ]; then read _ < "$HOME/gate"; fi
`)
	gate := filepath.Join(home, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	reply := tc.start("process/start", with(snapshotStart(t, "w", "bash", bash, home, "s", `sleep 5; touch "$HOME/ran"`), "pipeStdin", true))
	const writes = maxDeferredPerConn + 8
	for i := range writes {
		tc.start("process/write", map[string]any{"processId": "w", "writeId": fmt.Sprint("x", i), "chunk": base64.StdEncoding.EncodeToString([]byte("x"))})
	}
	term := tc.start("process/terminate", map[string]any{"processId": "w"})
	status := tc.start("environment/status", nil)
	select {
	case <-status:
	case <-time.After(time.Minute):
		t.Fatalf("environment/status behind %d writes to a starting process: no answer while the capture waits", writes)
	}
	if got := <-term; got.Err != nil || string(got.Result) != `{"running":true}` {
		t.Errorf("process/terminate past the queue's bound: %s %v, want running:true", got.Result, got.Err)
	}
	f, err := os.OpenFile(gate, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("go\n")
	f.Close()
	if got := <-reply; got.Err != nil {
		t.Fatalf("process/start: %v", got.Err)
	}
	if r := waitClosed(tc, "w"); r.exitCode != 137 {
		t.Errorf("exit %d, want 137: the terminate sent while it started", r.exitCode)
	}
	if _, err := os.Stat(filepath.Join(home, "ran")); err == nil {
		t.Error("the command ran to its end after process/terminate")
	}
}
