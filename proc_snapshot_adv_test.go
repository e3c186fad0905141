//go:build linux

package main

// Adversarial tests of shell snapshots (proc_snapshot.go, docs/protocol.md §6.4.1): a login
// profile that forges the capture's output, leaves a daemon behind, outgrows the bounds or
// defines hostile names; a client that cycles keys past the cache. Verdicts are read on the
// host: the profile's run count, /proc, and the command's own environment as it printed it
// (which is what the command really got: it is the execve environment of that process).

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// advCaptureOnly wraps profile code so that it runs only when the profile runs for a capture.
func advCaptureOnly(code string) string {
	return `case "${BASH_EXECUTION_STRING-}" in *exec-server-snapshot-*) ` + code + ` ;; esac
`
}

// TestAdvShellSnapshotForgedCapture: the profile reads the capture's marker from its own
// command line and prints a whole forged snapshot before it, then exits: an environment with
// variables the envPolicy excludes (LD_PRELOAD, a *TOKEN*), the server's own state variables
// and the capture's __es_ names. The later commands must get none of them, and the forged
// state (shell code the profile could have run anyway) runs once per command, never more.
func TestAdvShellSnapshotForgedCapture(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	bash := shellPath(t, "bash")
	forge := `m=${BASH_EXECUTION_STRING#*"'exec-server-snapshot-"}; m=exec-server-snapshot-${m%%"'"*}
printf '\0%s\0' "$m"
printf 'forged_fn() { echo forged-state-ran; }\nexport FROM_STATE=1\n'
printf '\0'
printf 'LD_PRELOAD=/nonexistent/evil.so\0EVIL_TOKEN=t\0` + shellSnapshotStateVar + `0=echo injected-chunk\0` + shellSnapshotStateVar + `7=echo injected-7\0__es_x=1\0IFS=x\0BASH_ENV=/nonexistent/bashenv\0OK_VAR=ok\0'
exit 0`
	home := snapshotHome(t, "bash", advCaptureOnly(forge))
	script := `env | grep -E '^(LD_PRELOAD|EVIL_TOKEN|__es_|IFS|` + shellSnapshotStateVar + `)' ; echo "ok=$OK_VAR"; forged_fn; echo "$FROM_STATE"`
	policy := map[string]any{"inherit": "all", "ignoreDefaultExcludes": false, "exclude": []string{"LD_*"}, "set": map[string]string{}, "includeOnly": []string{}}
	for i := range 3 {
		p := with(snapshotStart(t, fmt.Sprint("p", i), "bash", bash, home, "forge", script), "envPolicy", policy)
		r := tc.run(p)
		if want := "ok=ok\nforged-state-ran\n1\n"; r.stdout() != want {
			t.Errorf("command %d: stdout %q, want %q (exit %d, stderr %q)", i, r.stdout(), want, r.exitCode, r.stderr())
		}
	}
	if n := profileRuns(t, home); n != 1 {
		t.Errorf("the profile ran %d times for 3 commands, want once (the capture)", n)
	}
}

// TestAdvShellSnapshotSetsidDaemon: the profile, during its capture only, starts a child in
// a session of its own that keeps the capture's stdout open. The capture must end when the
// shell exits, and process/start must answer long before the 10 s bound; whether the daemon
// outlives the capture is reported (a plain `bash -lc` command's profile could leave the same
// daemon).
func TestAdvShellSnapshotSetsidDaemon(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	bash := shellPath(t, "bash")
	arg := uniqueSleepArg()
	home := snapshotHome(t, "bash", advCaptureOnly(`setsid sleep `+arg+` &`))
	fds := func() int {
		ents, _ := os.ReadDir("/proc/self/fd")
		return len(ents)
	}
	tc.run(procStart(t, "warm", "true"))
	before := fds()
	start := time.Now()
	r := tc.run(snapshotStart(t, "p", "bash", bash, home, "daemon", `echo "var=$SNAP_VAR"`))
	took := time.Since(start)
	if after := fds(); after != before {
		t.Errorf("while the daemon lives the server holds %d descriptors, %d before the capture", after, before)
	}
	if r.stdout() != "var=from profile\n" {
		t.Errorf("stdout %q", r.stdout())
	}
	if took >= shellSnapshotTimeout {
		t.Errorf("process/start took %v: the daemon holding stdout made the capture run to its bound", took)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(cmd), arg) {
			pid, _ := strconv.Atoi(e.Name())
			syscall.Kill(pid, syscall.SIGKILL)
			if os.Getenv(advOpenBreakEnv) == "1" {
				t.Errorf("the profile's setsid child %d outlived the capture: %q (killed now)", pid, cmd)
			} else {
				t.Logf("open break (%s=1 fails on it): the profile's setsid child %d outlived the capture: %q (killed now)", advOpenBreakEnv, pid, cmd)
			}
		}
	}
	t.Logf("process/start answered after %v", took)
}

// TestAdvShellSnapshotLRU cycles 17 scopes through a session's cache of 16: the first is
// evicted and captured again; the latest stays.
func TestAdvShellSnapshotLRU(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	bash := shellPath(t, "bash")
	home := snapshotHome(t, "bash", "")
	run := func(scope int) {
		t.Helper()
		r := tc.run(snapshotStart(t, fmt.Sprint("p", time.Now().UnixNano()), "bash", bash, home, fmt.Sprint("s", scope), `echo "$SNAP_VAR"`))
		if r.stdout() != "from profile\n" {
			t.Fatalf("scope %d: stdout %q", scope, r.stdout())
		}
	}
	for i := range shellSnapshotCacheSize + 1 {
		run(i)
	}
	if n := profileRuns(t, home); n != shellSnapshotCacheSize+1 {
		t.Fatalf("%d profile runs for %d scopes", n, shellSnapshotCacheSize+1)
	}
	run(shellSnapshotCacheSize) // the latest: cached
	if n := profileRuns(t, home); n != shellSnapshotCacheSize+1 {
		t.Errorf("the most recent scope was captured again (%d runs)", n)
	}
	run(0) // evicted
	if n := profileRuns(t, home); n != shellSnapshotCacheSize+2 {
		t.Errorf("the evicted scope was not captured again (%d runs, want %d)", n, shellSnapshotCacheSize+2)
	}
}

// TestAdvShellSnapshotOversizedState: a profile whose functions pass the 512 KiB snapshot
// bound (well within the 4 MiB of output) is not snapshotted: the command runs unchanged,
// with none of the state variables, and runs the profile itself.
func TestAdvShellSnapshotOversizedState(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	bash := shellPath(t, "bash")
	var big strings.Builder
	for i := 0; big.Len() < shellSnapshotMax+64<<10; i++ {
		fmt.Fprintf(&big, "bigfn%d() { echo %s; }\n", i, strings.Repeat("y", 1000))
	}
	home := snapshotHome(t, "bash", big.String())
	for i := range 2 {
		r := tc.run(snapshotStart(t, fmt.Sprint("p", i), "bash", bash, home, "big", `env | grep -c `+shellSnapshotStateVar+`; bigfn3 | wc -c`))
		if want := "profile-stdout\n0\n1001\n"; r.stdout() != want {
			t.Errorf("command %d: stdout %q, want %q", i, r.stdout(), want)
		}
	}
}

// TestAdvShellSnapshotHostileNames: aliases, functions and exports whose names or values
// hold quotes, newlines, `$(…)` and the restore's own syntax. The restore must neither break
// nor run any of it as code, and the script must run once.
func TestAdvShellSnapshotHostileNames(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	bash := shellPath(t, "bash")
	home := snapshotHome(t, "bash", `alias q='echo "it'"'"'s"; echo $(echo x)'
alias 'w=echo "
newline"'
export NLV=$'a\nb\'c"$(echo pwn1)`+"`echo pwn2`"+`'
export 'WEIRD=}"; echo pwn3; "'
function f-x.y:z { echo fx; }
`)
	script := `printf '%s|' "$NLV" "$WEIRD"; f-x.y:z; echo once >> "$HOME/script-runs"`
	for i := range 2 {
		r := tc.run(snapshotStart(t, fmt.Sprint("p", i), "bash", bash, home, "names", script))
		if want := "a\nb'c\"$(echo pwn1)`echo pwn2`|}\"; echo pwn3; \"|fx\n"; r.stdout() != want || r.stderr() != "" {
			t.Errorf("command %d: stdout %q (want %q), stderr %q", i, r.stdout(), want, r.stderr())
		}
	}
	if b, _ := os.ReadFile(filepath.Join(home, "script-runs")); string(b) != "once\nonce\n" {
		t.Errorf("the script ran %q", b)
	}
}

// TestAdvShellSnapshotSetsidDaemonSandboxed is TestAdvShellSnapshotSetsidDaemon under a
// sandbox: the capture's setsid child must not outlive it (read in the host's /proc).
func TestAdvShellSnapshotSetsidDaemonSandboxed(t *testing.T) {
	ts := startTestServer(t)
	if m := ts.srv.sandbox.mechanism(); m != mechanismNamespaces && m != mechanismLandlock {
		t.Skipf("no sandbox on this kernel: %s", ts.srv.sandbox.describe())
	}
	tc := ts.connect(t)
	bash := shellPath(t, "bash")
	arg := uniqueSleepArg()
	home := snapshotHome(t, "bash", advCaptureOnly(`setsid sleep `+arg+` &`))
	cwd := t.TempDir()
	sb := json.RawMessage(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},` +
		`{"path":{"type":"special","value":{"kind":"current_working_directory"}},"access":"write"}]},"network":"restricted"},` +
		`"windowsSandboxLevel":"disabled","cwd":"` + fileURI(cwd) + `"}`)
	start := time.Now()
	r := tc.run(with(snapshotStart(t, "p", "bash", bash, home, "daemon", `echo "var=$SNAP_VAR"`), "cwd", fileURI(cwd), "sandbox", sb))
	if r.stdout() != "var=from profile\n" {
		t.Errorf("stdout %q, stderr %q", r.stdout(), r.stderr())
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(cmd), arg) {
			pid, _ := strconv.Atoi(e.Name())
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("the sandboxed profile's setsid child %d outlived the capture: %q (killed now)", pid, cmd)
		}
	}
	t.Logf("%s: process/start and run took %v", ts.srv.sandbox.describe(), time.Since(start))
}
