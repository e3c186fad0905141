package main

// Escapes through the sandboxed fs methods and profile resolution (docs/sandbox.md §1, §3;
// SECURITY.md), each verdict read on the host: the fs worker leaves no protected name behind
// and refuses to make one, whatever races its paths; a profile is never widened from what
// the request did not send; fs/watchMissing says nothing of what the profile hides.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// erofsText is the worker's answer for a change to a protected name: the kernel's words for
// a read-only bind, as the reference gives them.
const erofsText = "Read-only file system (os error 30)"

// wantEROFS checks that err is the refusal of a protected name.
func wantEROFS(t *testing.T, what string, err *rpcError) {
	t.Helper()
	if err == nil || err.Code != codeInternal || err.Message != erofsText {
		t.Errorf("%s: %+v, want -32603 %q", what, err, erofsText)
	}
}

// codexWorkspaceWrite is the object Codex sends in workspace-write mode for ws.
func codexWorkspaceWrite(ws string) json.RawMessage {
	return json.RawMessage(strings.ReplaceAll(workspaceWriteSandbox, "{root}", fileURI(ws)))
}

// wantNoProtectedNames checks on the host that none of the protected names of ws exists,
// except those in keep.
func wantNoProtectedNames(t *testing.T, when, ws string, keep ...string) {
	t.Helper()
	for _, name := range protectedNames {
		if slices.Contains(keep, name) {
			continue
		}
		if _, err := os.Lstat(filepath.Join(ws, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %s/%s exists on the host (%v)", when, ws, name, err)
		}
	}
}

// TestFSSandboxWorkerLeavesNoProtectedNames (issue 20, row 8): a sandboxed fs/writeFile into
// a workspace without .git/.codex/.agents/.aws leaves none of them on the host: not right
// after the reply while the worker lives, not after the worker is gone.
func TestFSSandboxWorkerLeavesNoProtectedNames(t *testing.T) {
	const idle = 200 * time.Millisecond
	ts := sandboxedFSServer(t, func(s *server) { s.fsWorkers.idle = idle })
	tc := ts.connect(t)
	ws := t.TempDir()
	tc.mustCall("fs/writeFile", map[string]any{"path": fileURI(filepath.Join(ws, "a.txt")), "dataBase64": b64("a"), "sandbox": codexWorkspaceWrite(ws)})
	wantNoProtectedNames(t, "right after the reply", ws)
	pids := fsWorkerPids(t, ts.srv)
	if len(pids) != 2 {
		t.Fatalf("worker processes %v, want the stage and the worker alive", pids)
	}
	for _, pid := range pids {
		if pidGone(pid) {
			t.Fatalf("the worker (%d) is gone already: the check above proved nothing", pid)
		}
	}
	wantNoProtectedNames(t, "while the worker lives", ws)
	for _, pid := range pids {
		waitPidGone(t, pid)
	}
	wantNoProtectedNames(t, "after the worker is gone", ws)
	if got := fsReadString(t, filepath.Join(ws, "a.txt")); got != "a" {
		t.Errorf("a.txt holds %q", got)
	}
}

// TestFSSandboxServerKilledLeavesNoProtectedNames (row 8): a real server (the test binary as
// exec-server) killed with SIGKILL while its worker is in the middle of a write leaves no
// protected name in the workspace, then or after its worker has died with it.
func TestFSSandboxServerKilledLeavesNoProtectedNames(t *testing.T) {
	requireUserNamespaces(t)
	cmd, ts := startServerProcess(t)
	tc := ts.connect(t)
	ws := t.TempDir()
	fifo := filepath.Join(ws, "fifo")
	fsMust(t, syscall.Mkfifo(fifo, 0o644))
	reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	fsMust(t, err)
	defer reader.Close()
	tc.start("fs/writeFile", map[string]any{"path": fileURI(fifo), "dataBase64": b64(strings.Repeat("x", 1<<20)), "sandbox": codexWorkspaceWrite(ws)})
	pipeSize, err := unix.FcntlInt(reader.Fd(), unix.F_GETPIPE_SZ, 0)
	fsMust(t, err)
	waitFor(t, "the worker's write to fill the FIFO", func() bool {
		n, err := unix.IoctlGetInt(int(reader.Fd()), unix.TIOCINQ)
		return err == nil && n >= pipeSize
	})
	stage := childrenOf(t, []int{cmd.Process.Pid})
	workers := append(stage, childrenOf(t, stage)...)
	if len(workers) == 0 {
		t.Fatal("no worker process under the server")
	}
	wantNoProtectedNames(t, "while the worker writes", ws)
	fsMust(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()
	wantNoProtectedNames(t, "right after the server was killed", ws)
	for _, pid := range workers {
		waitPidGone(t, pid)
	}
	wantNoProtectedNames(t, "after its worker died", ws)
}

// TestFSSandboxWorkerRefusesProtectedNames (row 8): the worker refuses, with the reference's
// answer for a read-only name, every change that would make or touch a protected name:
// directly, through a dangling symlink, through a recursive copy that merges into the
// workspace, or by removing the workspace itself. The host is checked after each call.
func TestFSSandboxWorkerRefusesProtectedNames(t *testing.T) {
	tc := sandboxedFSServer(t).connect(t)
	ws, src := t.TempDir(), t.TempDir()
	fsWrite(t, filepath.Join(ws, ".git", "config"), "[core]\n")
	fsWrite(t, filepath.Join(ws, "keep"), "keep")
	fsWrite(t, filepath.Join(src, "file"), "evil")
	fsWrite(t, filepath.Join(src, "tree", ".codex", "config.toml"), "evil")
	fsWrite(t, filepath.Join(src, "tree", "ok"), "ok")
	fsMust(t, os.Symlink(".aws", filepath.Join(ws, "dangling")))
	fsMust(t, os.Symlink(".git", filepath.Join(ws, "to-git")))
	sb := codexWorkspaceWrite(ws)
	check := func(what string) {
		t.Helper()
		wantNoProtectedNames(t, what, ws, ".git")
		if got := fsReadString(t, filepath.Join(ws, ".git", "config")); got != "[core]\n" {
			t.Errorf("%s: .git/config holds %q", what, got)
		}
	}
	for _, c := range []struct {
		what, method string
		params       map[string]any
	}{
		{"write .git/x", "fs/writeFile", map[string]any{"path": fileURI(filepath.Join(ws, ".git", "x")), "dataBase64": b64("evil")}},
		{"write .git/config through a symlink", "fs/writeFile", map[string]any{"path": fileURI(filepath.Join(ws, "to-git", "config")), "dataBase64": b64("evil")}},
		{"createDirectory .codex", "fs/createDirectory", map[string]any{"path": fileURI(filepath.Join(ws, ".codex"))}},
		{"createDirectory .codex, not recursive", "fs/createDirectory", map[string]any{"path": fileURI(filepath.Join(ws, ".codex")), "recursive": false}},
		{"createDirectory .agents/x", "fs/createDirectory", map[string]any{"path": fileURI(filepath.Join(ws, ".agents", "x"))}},
		{"copy onto .agents", "fs/copy", map[string]any{"sourcePath": fileURI(filepath.Join(src, "file")), "destinationPath": fileURI(filepath.Join(ws, ".agents")), "recursive": false}},
		{"write through a dangling symlink to .aws", "fs/writeFile", map[string]any{"path": fileURI(filepath.Join(ws, "dangling")), "dataBase64": b64("evil")}},
		{"open to replace through a dangling symlink to .aws", "fs/open", map[string]any{"handleId": "h", "path": fileURI(filepath.Join(ws, "dangling")), "mode": "replace"}},
		{"copy a tree holding .codex into the workspace", "fs/copy", map[string]any{"sourcePath": fileURI(filepath.Join(src, "tree")), "destinationPath": fileURI(ws), "recursive": true}},
		{"remove .git/config", "fs/remove", map[string]any{"path": fileURI(filepath.Join(ws, ".git", "config"))}},
		{"remove .git", "fs/remove", map[string]any{"path": fileURI(filepath.Join(ws, ".git"))}},
		{"remove the workspace", "fs/remove", map[string]any{"path": fileURI(ws)}},
	} {
		c.params["sandbox"] = sb
		_, err := tc.call(c.method, c.params)
		wantEROFS(t, c.what, err)
		check(c.what)
	}
	// The rest of the copy and of the removal were made: only the protected names were kept.
	if got := fsReadString(t, filepath.Join(ws, ".git", "config")); got != "[core]\n" {
		t.Errorf(".git/config holds %q", got)
	}
	if _, err := os.Lstat(filepath.Join(ws, "keep")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the removal of the workspace kept keep (%v)", err)
	}
	// A nested .git is no protected name, and writes in the workspace still land.
	tc.mustCall("fs/createDirectory", map[string]any{"path": fileURI(filepath.Join(ws, "sub", ".git")), "sandbox": sb})
	tc.mustCall("fs/writeFile", map[string]any{"path": fileURI(filepath.Join(ws, "sub", ".codex")), "dataBase64": b64("nested"), "sandbox": sb})
	if got := fsReadString(t, filepath.Join(ws, "sub", ".codex")); got != "nested" {
		t.Errorf("sub/.codex holds %q", got)
	}
}

// guardRaceAttempts is how many rounds TestFSSandboxWorkerRefusesProtectedNamesUnderRace
// makes, each of five calls while the paths' parents are swapped. Before the guard, the
// first round already left every missing name on the host. EXEC_SERVER_ESCAPE_ROUNDS sets
// another count, for a longer run than CI's.
const guardRaceAttempts = 200

// escapeRounds is n, or the count EXEC_SERVER_ESCAPE_ROUNDS gives.
func escapeRounds(t *testing.T, n int) int {
	t.Helper()
	if v := os.Getenv("EXEC_SERVER_ESCAPE_ROUNDS"); v != "" {
		got, err := strconv.Atoi(v)
		if err != nil || got < 1 {
			t.Fatalf("EXEC_SERVER_ESCAPE_ROUNDS=%q: want a positive count", v)
		}
		return got
	}
	return n
}

// TestFSSandboxWorkerRefusesProtectedNamesUnderRace (row 8): while a goroutine swaps, with
// renameat2(RENAME_EXCHANGE), a real directory with a symlink to the workspace (d1 <-> l1)
// and another with a symlink to its .git (d2 <-> l2), writes, directory creations, copies
// and removals under d1 and d2 either land in the real directory or are refused as
// read-only: no protected name ever appears on the host and .git/config never changes.
func TestFSSandboxWorkerRefusesProtectedNamesUnderRace(t *testing.T) {
	tc := sandboxedFSServer(t).connect(t)
	ws, src := t.TempDir(), t.TempDir()
	fsWrite(t, filepath.Join(ws, ".git", "config"), "[core]\n")
	fsWrite(t, filepath.Join(src, "file"), "evil")
	for _, d := range []string{"d1", "d2"} {
		fsMust(t, os.Mkdir(filepath.Join(ws, d), 0o755))
	}
	fsMust(t, os.Symlink(".", filepath.Join(ws, "l1")))
	fsMust(t, os.Symlink(".git", filepath.Join(ws, "l2")))
	stop := make(chan struct{})
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, pair := range [][2]string{{"d1", "l1"}, {"d2", "l2"}} {
				if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(ws, pair[0]), unix.AT_FDCWD, filepath.Join(ws, pair[1]), unix.RENAME_EXCHANGE); err != nil {
					t.Errorf("swap %v: %v", pair, err)
					return
				}
			}
			swaps.Add(1)
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	sb := codexWorkspaceWrite(ws)
	calls := []struct {
		method string
		params map[string]any
	}{
		{"fs/writeFile", map[string]any{"path": fileURI(filepath.Join(ws, "d1", ".aws")), "dataBase64": b64("evil")}},
		{"fs/createDirectory", map[string]any{"path": fileURI(filepath.Join(ws, "d1", ".codex"))}},
		{"fs/copy", map[string]any{"sourcePath": fileURI(filepath.Join(src, "file")), "destinationPath": fileURI(filepath.Join(ws, "d1", ".agents")), "recursive": false}},
		{"fs/writeFile", map[string]any{"path": fileURI(filepath.Join(ws, "d2", "config")), "dataBase64": b64("evil")}},
		{"fs/remove", map[string]any{"path": fileURI(filepath.Join(ws, "d2", "config"))}},
	}
	refused, landed := 0, 0
	rounds := escapeRounds(t, guardRaceAttempts)
	for attempt := range rounds {
		for _, c := range calls {
			c.params["sandbox"] = sb
			_, err := tc.call(c.method, c.params)
			switch {
			case err == nil:
				landed++
			case err.Code == codeInternal && err.Message == erofsText:
				refused++
			case c.method == "fs/createDirectory" && err.Code == codeInternal && err.Message == "File exists (os error 17)":
				// mkdir -p met the real d1/.codex, then saw d1 swapped before it could
				// tell that it was a directory: nothing was made
			case c.method == "fs/remove" && err.Code == codeNotFound:
				// config was seen in one of d2's two places and was not in the other
			default:
				t.Fatalf("attempt %d: %s %v: %+v, want success or -32603 %q", attempt, c.method, c.params["path"], err, erofsText)
			}
			wantNoProtectedNames(t, fmt.Sprintf("attempt %d, %s", attempt, c.method), ws, ".git")
			if got := fsReadString(t, filepath.Join(ws, ".git", "config")); got != "[core]\n" {
				t.Fatalf("attempt %d, %s: .git/config holds %q", attempt, c.method, got)
			}
			if t.Failed() {
				t.FailNow()
			}
		}
	}
	t.Logf("%d rounds of %d calls, %d swaps: %d refused, %d landed in the real directory", rounds, len(calls), swaps.Load(), refused, landed)
	if refused == 0 || landed == 0 {
		t.Errorf("the race was not exercised: %d refused, %d landed", refused, landed)
	}
}

// TestSandboxProjectRootsWithoutRootsOrCwdGrantNothing (issue 20, row 9): process/start with a
// restricted profile whose write entry is project_roots, and neither workspaceRoots nor the
// sandbox's cwd: the process's cwd is not writable (the reference: "Read-only file system").
// An absolute glob deny entry in such a profile still denies.
func TestSandboxProjectRootsWithoutRootsOrCwdGrantNothing(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	fsWrite(t, filepath.Join(f.outside, "a.secret"), "s3cret")
	sandbox := json.RawMessage(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},` +
		`{"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"}]},"network":"restricted"},` +
		`"windowsSandboxLevel":"disabled"}`)
	f.runServer(t, ts, sandbox, false, `echo pwned > "$WS/landed"`)
	wantAbsent(t, filepath.Join(f.ws, "landed"))

	// The workspace written by a path entry, the secret denied by an absolute glob: no cwd
	// is needed to anchor either.
	sandbox = json.RawMessage(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},` +
		`{"path":{"type":"path","path":"` + fileURI(f.ws) + `"},"access":"write"},` +
		`{"path":{"type":"glob_pattern","pattern":"` + f.outside + `/*.secret"},"access":"deny"}]},"network":"restricted"},` +
		`"windowsSandboxLevel":"disabled"}`)
	f.runServer(t, ts, sandbox, false, `cat "$OUT/a.secret" > "$WS/copy"; echo done >> "$WS/copy"`)
	got := fsReadString(t, filepath.Join(f.ws, "copy"))
	if strings.Contains(got, "s3cret") || !strings.Contains(got, "done") {
		t.Errorf("the copy made in the sandbox holds %q: want the denied secret absent, the write present", got)
	}
}

// TestFSWatchMissingHidesWhatTheProfileCannotRead (issue 20, row 10): under a profile that
// reads only its directory, fs/watchMissing answers for a path outside it exactly as for a
// path that does not exist, whether it exists or not, and a hidden path that appears never
// fires; a visible one does.
func TestFSWatchMissingHidesWhatTheProfileCannotRead(t *testing.T) {
	tc := startTestServer(t).connect(t)
	base := t.TempDir()
	dir, outside := filepath.Join(base, "allowed"), filepath.Join(base, "outside")
	fsMust(t, os.MkdirAll(dir, 0o755))
	fsWrite(t, filepath.Join(outside, "exists"), "x")
	fsMust(t, os.Symlink(outside, filepath.Join(dir, "link")))
	sb := json.RawMessage(readOnlySandbox(dir))
	watch := func(id int, paths ...string) string {
		var uris []string
		for _, p := range paths {
			uris = append(uris, fileURI(p))
		}
		return string(tc.mustCall("fs/watchMissing", map[string]any{"watchId": id, "missing": uris, "sandbox": sb}))
	}
	const missing = `{"watching":true}`
	if got := watch(1, filepath.Join(dir, "nothing-here")); got != missing {
		t.Fatalf("a missing visible path: %s", got)
	}
	for i, p := range []string{
		filepath.Join(outside, "exists"),
		filepath.Join(dir, "link", "exists"),
		filepath.Join(outside, "later"),
		filepath.Join(dir, "link", "later2"),
	} {
		if got := watch(10+i, p); got != missing {
			t.Errorf("%s (hidden): %s, want %s as for a missing path", p, got, missing)
		}
	}
	fsWrite(t, filepath.Join(outside, "later"), "x")
	fsWrite(t, filepath.Join(outside, "later2"), "x")
	// The visible watch fires after the hidden paths appeared; none of those may fire first.
	fsWrite(t, filepath.Join(dir, "nothing-here"), "x")
	_, at := tc.waitNote(0, procWait, func(n testNote) bool { return n.Method == "fs/missingChanged" && string(n.Params) == `{"watchId":1}` })
	for _, n := range tc.notesSnapshot()[:at] {
		if n.Method == "fs/missingChanged" {
			t.Errorf("a hidden path fired: %s", n.Params)
		}
	}
	// A hidden watch stays armed: its id is in use.
	if got := watch(12, filepath.Join(dir, "another")); got != `{"watching":false}` {
		t.Errorf("watch id 12 again: %s, want false (in use)", got)
	}
}

// appearingRaceAttempts bounds TestFSSandboxWorkerGuardsANameThatAppearsMidWrite: the writes
// it makes while the protected name comes and goes, appearingRaceWriters at a time. Before
// the guard looked at the protected names once the file's directory was open (it looked
// first), a write landed in the appearing .git after 239, 365 and 1,142 writes made one at a
// time. EXEC_SERVER_ESCAPE_ROUNDS sets another count.
const (
	appearingRaceAttempts = 2000
	appearingRaceWriters  = 4
	appearingRaceTimeout  = 60 * time.Second
)

// TestFSSandboxWorkerGuardsANameThatAppearsMidWrite (row 8): a protected name that appears
// while a write is on its way (an empty .git made on the host, as a process sandbox's stage
// makes one for its mount point, as `git init` makes one) is protected from that write: the
// guard must know the protected paths as they are once the directory it writes in is open,
// not as they were when the call began. A goroutine makes and removes ws/.git on the host
// while fs/writeFile writes ws/.git/config; the verdict, read on the host after each write:
// .git never holds config.
func TestFSSandboxWorkerGuardsANameThatAppearsMidWrite(t *testing.T) {
	ts := sandboxedFSServer(t)
	ws := t.TempDir()
	git, config := filepath.Join(ws, ".git"), filepath.Join(ws, ".git", "config")
	stop := make(chan struct{})
	var toggles atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := os.Mkdir(git, 0o755); err != nil {
				t.Errorf("make .git: %v", err)
				return
			}
			if err := os.Remove(git); err != nil {
				return // not empty: a write landed (the writers see it on the host)
			}
			toggles.Add(1)
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	sb := codexWorkspaceWrite(ws)
	rounds := escapeRounds(t, appearingRaceAttempts)
	deadline := time.Now().Add(appearingRaceTimeout)
	var made, refused, missing atomic.Int64
	var escaped atomic.Bool
	var writers sync.WaitGroup
	for range appearingRaceWriters {
		tc := ts.connect(t)
		writers.Add(1)
		go func() {
			defer writers.Done()
			for !escaped.Load() && time.Now().Before(deadline) {
				attempt := made.Add(1)
				if attempt > int64(rounds) {
					return
				}
				_, err := tc.call("fs/writeFile", map[string]any{"path": fileURI(config), "dataBase64": b64("[core]\n\tfsmonitor = evil\n"), "sandbox": sb})
				if _, serr := os.Lstat(config); serr == nil {
					if escaped.CompareAndSwap(false, true) { // the first writer to see it says so
						t.Errorf("write %d (%+v): %s was written on the host", attempt, err, config)
					}
					return
				}
				switch {
				case err == nil:
					t.Errorf("write %d succeeded, yet %s is not on the host", attempt, config)
					return
				case err.Code == codeInternal && err.Message == erofsText:
					refused.Add(1)
				case err.Code == codeNotFound:
					missing.Add(1)
				default:
					t.Errorf("write %d: %+v, want -32603 %q or not found", attempt, err, erofsText)
					return
				}
			}
		}()
	}
	writers.Wait()
	t.Logf("%d toggles of .git, %d writes: %d refused, %d found no .git", toggles.Load(), refused.Load()+missing.Load(), refused.Load(), missing.Load())
	if !t.Failed() && (refused.Load() == 0 || missing.Load() == 0) {
		t.Errorf("the race was not exercised: %d refused, %d missing", refused.Load(), missing.Load())
	}
}
