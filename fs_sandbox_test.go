//go:build linux

package main

// The fs methods under a sandbox (fs.go, fsworker.go; docs/sandbox.md §3): a real server, real
// files, the real kernel. Every escape checks that its target is unchanged. The sandboxes are
// the reference's test sandboxes (tests/file_system_unix.rs), which read nothing but their
// directory, and the object Codex sends in workspace-write mode.

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sandboxedFSServer starts a server whose sandbox confines files with namespaces, or skips
// the test where the kernel has no user namespaces.
func sandboxedFSServer(t testing.TB, opts ...func(*server)) *testServer {
	t.Helper()
	ts := startTestServer(t, opts...)
	if m := ts.srv.sandbox.mechanism(); m != mechanismNamespaces {
		t.Skipf("no user namespaces on this kernel: the fs sandbox cannot be exercised (%s)", ts.srv.sandbox.describe())
	}
	return ts
}

// readOnlySandbox is the reference's read_only_sandbox(dir): dir readable, nothing else.
func readOnlySandbox(dir string) string {
	return `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"path","path":"` + fileURI(dir) + `"},"access":"read"}]},"network":"restricted"},` +
		`"windowsSandboxLevel":"disabled"}`
}

// workspaceWriteSandboxOf is the reference's workspace_write_sandbox(dir): dir writable,
// nothing else readable.
func workspaceWriteSandboxOf(dir string) string {
	return `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"path","path":"` + fileURI(dir) + `"},"access":"write"}]},"network":"restricted"},` +
		`"windowsSandboxLevel":"disabled"}`
}

// checkSandboxDenied accepts what the reference's assert_sandbox_denied accepts.
func checkSandboxDenied(t *testing.T, what string, err *rpcError) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: succeeded, want it denied", what)
	case err.Code == codeInvalidRequest && (strings.Contains(err.Message, "Permission denied") ||
		strings.Contains(err.Message, "Operation not permitted") || strings.Contains(err.Message, "is not permitted")):
	case err.Code == codeNotFound && strings.Contains(err.Message, "No such file or directory"):
	case err.Code == codeInternal && strings.Contains(err.Message, "Read-only file system"):
	default:
		t.Errorf("%s: error %d %q, want a denial", what, err.Code, err.Message)
	}
}

// escapeFixture is the tree of the reference's symlink tests:
//
//	base/secret.txt              "top secret" (what link/../secret.txt reaches physically)
//	base/outside/secret.txt      "secret"
//	base/outside/outside.txt     "outside"
//	base/allowed/file.txt        "file"
//	base/allowed/link         -> base/outside
//	base/allowed/file-link    -> base/outside/secret.txt
//	base/allowed/hard-link.txt    a hard link of base/outside/outside.txt
type escapeFixture struct{ base, allowed, outside string }

func makeEscapeFixture(t *testing.T) escapeFixture {
	t.Helper()
	base := t.TempDir()
	f := escapeFixture{base, filepath.Join(base, "allowed"), filepath.Join(base, "outside")}
	fsWrite(t, filepath.Join(base, "secret.txt"), "top secret")
	fsWrite(t, filepath.Join(f.outside, "secret.txt"), "secret")
	fsWrite(t, filepath.Join(f.outside, "outside.txt"), "outside")
	fsWrite(t, filepath.Join(f.allowed, "file.txt"), "file")
	fsMust(t, os.Symlink(f.outside, filepath.Join(f.allowed, "link")))
	fsMust(t, os.Symlink(filepath.Join(f.outside, "secret.txt"), filepath.Join(f.allowed, "file-link")))
	fsMust(t, os.Link(filepath.Join(f.outside, "outside.txt"), filepath.Join(f.allowed, "hard-link.txt")))
	return f
}

// snapshot is every path under base with its type and content, to show a denied call
// changed nothing.
func (f escapeFixture) snapshot(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	fsMust(t, filepath.WalkDir(f.base, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.Type()&os.ModeSymlink != 0:
			target, _ := os.Readlink(path)
			out[path] = "-> " + target
		case d.IsDir():
			out[path] = "dir"
		default:
			b, _ := os.ReadFile(path)
			out[path] = string(b)
		}
		return nil
	}))
	return out
}

// TestFSSandboxSymlinksHardLinksAndDotDot is the reference's table of link and `..` cases
// (docs/sandbox.md §3), each on a fresh tree.
func TestFSSandboxSymlinksHardLinksAndDotDot(t *testing.T) {
	tc := sandboxedFSServer(t).connect(t)
	const (
		denied = "denied" // a denial, and the tree unchanged
		failed = "failed" // an error of another kind, and the tree unchanged
		ok     = "ok"
	)
	for _, c := range []struct {
		name, method string
		sandbox      func(dir string) string
		params       func(f escapeFixture) map[string]any
		want         string
		check        func(t *testing.T, f escapeFixture, res json.RawMessage)
	}{
		{"write inside", "fs/writeFile", workspaceWriteSandboxOf,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "new.txt")), "dataBase64": b64("new")}
			}, ok,
			func(t *testing.T, f escapeFixture, _ json.RawMessage) {
				if got := fsReadString(t, filepath.Join(f.allowed, "new.txt")); got != "new" {
					t.Errorf("new.txt holds %q", got)
				}
			}},
		{"write outside", "fs/writeFile", workspaceWriteSandboxOf,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.outside, "blocked.txt")), "dataBase64": b64("x")}
			}, denied, nil},
		{"read through a symlink out", "fs/readFile", readOnlySandbox,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "link", "secret.txt"))}
			}, denied, nil},
		{"link/../secret.txt is allowed/secret.txt", "fs/readFile", readOnlySandbox,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": "file://" + f.allowed + "/link/../secret.txt"}
			}, denied, nil},
		{"write through a symlink out", "fs/writeFile", workspaceWriteSandboxOf,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "link", "blocked.txt")), "dataBase64": b64("x")}
			}, denied, nil},
		{"write through a file symlink out", "fs/writeFile", workspaceWriteSandboxOf,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "file-link")), "dataBase64": b64("x")}
			}, denied, nil},
		{"write keeps a hard link", "fs/writeFile", workspaceWriteSandboxOf,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "hard-link.txt")), "dataBase64": b64("rewritten")}
			}, ok,
			func(t *testing.T, f escapeFixture, _ json.RawMessage) {
				in, out := filepath.Join(f.allowed, "hard-link.txt"), filepath.Join(f.outside, "outside.txt")
				if fsInode(t, in) != fsInode(t, out) {
					t.Errorf("the hard link was replaced by a new file")
				}
				if a, b := fsReadString(t, in), fsReadString(t, out); a != "rewritten" || b != "rewritten" {
					t.Errorf("hard-link.txt %q, outside.txt %q, want both rewritten", a, b)
				}
			}},
		{"createDirectory through a symlink out", "fs/createDirectory", workspaceWriteSandboxOf,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "link", "created")), "recursive": false}
			}, denied, nil},
		{"createDirectory -p through a symlink out", "fs/createDirectory", workspaceWriteSandboxOf,
			func(f escapeFixture) map[string]any {
				// mkdir -p meets the symlink, dangling in the sandbox: "File exists".
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "link", "created", "deeper"))}
			}, failed, nil},
		{"readDirectory through a symlink out", "fs/readDirectory", readOnlySandbox,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "link"))}
			}, denied, nil},
		{"getMetadata through a symlink out", "fs/getMetadata", readOnlySandbox,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "link", "secret.txt"))}
			}, denied, nil},
		{"canonicalize through a symlink out", "fs/canonicalize", readOnlySandbox,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "link", "secret.txt"))}
			}, denied, nil},
		{"walk through a symlink out", "fs/walk", readOnlySandbox,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "link")),
					"options": map[string]any{"maxDepth": 4, "maxDirectories": 10, "maxEntries": 100, "followDirectorySymlinks": true}}
			}, denied, nil},
		{"copy from a symlink out", "fs/copy", workspaceWriteSandboxOf,
			func(f escapeFixture) map[string]any {
				return map[string]any{"sourcePath": fileURI(filepath.Join(f.allowed, "link", "secret.txt")),
					"destinationPath": fileURI(filepath.Join(f.allowed, "copied.txt")), "recursive": false}
			}, denied, nil},
		{"copy to a symlink out", "fs/copy", workspaceWriteSandboxOf,
			func(f escapeFixture) map[string]any {
				return map[string]any{"sourcePath": fileURI(filepath.Join(f.allowed, "file.txt")),
					"destinationPath": fileURI(filepath.Join(f.allowed, "link", "copied.txt")), "recursive": false}
			}, denied, nil},
		{"remove takes the symlink, not its target", "fs/remove", workspaceWriteSandboxOf,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "file-link")), "recursive": false, "force": false}
			}, ok,
			func(t *testing.T, f escapeFixture, _ json.RawMessage) {
				if _, err := os.Lstat(filepath.Join(f.allowed, "file-link")); !os.IsNotExist(err) {
					t.Errorf("the symlink is still there: %v", err)
				}
				if got := fsReadString(t, filepath.Join(f.outside, "secret.txt")); got != "secret" {
					t.Errorf("the target holds %q", got)
				}
			}},
		{"remove through a symlink out", "fs/remove", workspaceWriteSandboxOf,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "link", "secret.txt")), "recursive": false, "force": false}
			}, denied, nil},
		{"remove with force through a symlink out", "fs/remove", workspaceWriteSandboxOf,
			func(f escapeFixture) map[string]any {
				// force forgives what does not exist, and in the sandbox it does not.
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "link", "secret.txt"))}
			}, ok,
			func(t *testing.T, f escapeFixture, _ json.RawMessage) {
				if got := fsReadString(t, filepath.Join(f.outside, "secret.txt")); got != "secret" {
					t.Errorf("the target holds %q", got)
				}
			}},
		{"copy keeps a symlink source a symlink", "fs/copy", workspaceWriteSandboxOf,
			func(f escapeFixture) map[string]any {
				return map[string]any{"sourcePath": fileURI(filepath.Join(f.allowed, "link")),
					"destinationPath": fileURI(filepath.Join(f.allowed, "copied-link")), "recursive": false}
			}, ok,
			func(t *testing.T, f escapeFixture, _ json.RawMessage) {
				if got, err := os.Readlink(filepath.Join(f.allowed, "copied-link")); err != nil || got != f.outside {
					t.Errorf("copied-link -> %q (%v), want -> %q", got, err, f.outside)
				}
			}},
		{"read inside", "fs/readFile", readOnlySandbox,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "file.txt"))}
			}, ok,
			func(t *testing.T, f escapeFixture, res json.RawMessage) {
				if want := `{"dataBase64":"` + b64("file") + `"}`; string(res) != want {
					t.Errorf("got %s, want %s", res, want)
				}
			}},
		{"write under a read-only sandbox", "fs/writeFile", readOnlySandbox,
			func(f escapeFixture) map[string]any {
				return map[string]any{"path": fileURI(filepath.Join(f.allowed, "file.txt")), "dataBase64": b64("x")}
			}, denied, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := makeEscapeFixture(t)
			params := c.params(f)
			params["sandbox"] = json.RawMessage(c.sandbox(f.allowed))
			before := f.snapshot(t)
			res, err := tc.call(c.method, params)
			if c.want != ok {
				if c.want == denied {
					checkSandboxDenied(t, c.method, err)
				} else if err == nil {
					t.Errorf("%s: succeeded, want an error", c.method)
				}
				if after := f.snapshot(t); !mapsEqualIgnoringProtected(before, after) {
					t.Errorf("the tree changed:\nbefore %v\nafter  %v", before, after)
				}
				if strings.Contains(string(res), b64("top secret")) || strings.Contains(string(res), b64("secret")) {
					t.Errorf("a secret leaked: %s", res)
				}
				return
			}
			if err != nil {
				t.Fatalf("error %d %s, want success", err.Code, err.Message)
			}
			if c.check != nil {
				c.check(t, f, res)
			}
		})
	}
}

// mapsEqualIgnoringProtected compares two snapshots, leaving out the empty protected
// directories (.git, .codex, .agents, .aws) a live worker keeps as mount points
// (sandbox_linux.go's syntheticDirs).
func mapsEqualIgnoringProtected(a, b map[string]string) bool {
	strip := func(m map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			if v == "dir" && slices.Contains(protectedNames, filepath.Base(k)) {
				continue
			}
			out[k] = v
		}
		return out
	}
	x, y := strip(a), strip(b)
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if y[k] != v {
			return false
		}
	}
	return true
}

// TestFSSandboxRestrictedReadHidesTheRest: under a sandbox that reads only its directory, the
// rest does not exist (-32004); the worker's binary and the minimal roots are readable, as
// with the reference's helper.
func TestFSSandboxRestrictedReadHidesTheRest(t *testing.T) {
	tc := sandboxedFSServer(t).connect(t)
	f := makeEscapeFixture(t)
	sb := json.RawMessage(readOnlySandbox(f.allowed))
	for _, path := range []string{filepath.Join(f.outside, "secret.txt"), filepath.Join(f.base, "secret.txt"), "/root", "/var"} {
		_, err := tc.call("fs/getMetadata", map[string]any{"path": fileURI(path), "sandbox": sb})
		if err == nil || err.Code != codeNotFound || err.Message != "No such file or directory (os error 2)" {
			t.Errorf("getMetadata %s: %+v, want -32004 No such file or directory (os error 2)", path, err)
		}
	}
	res := tc.mustCall("fs/readDirectory", map[string]any{"path": fileURI(f.allowed), "sandbox": sb})
	if !strings.Contains(string(res), `"file.txt"`) {
		t.Errorf("readDirectory of the readable directory: %s", res)
	}
	exe, err := os.Executable()
	fsMust(t, err)
	for _, path := range []string{exe, "/usr/bin"} {
		tc.mustCall("fs/getMetadata", map[string]any{"path": fileURI(path), "sandbox": sb})
	}
}

// TestFSSandboxProtectedNames: with Codex's workspace-write object, the top-level .git and
// .codex of the writable root stay read-only, a missing one cannot be made, a sibling is
// written, and the denied file is neither read nor written.
func TestFSSandboxProtectedNames(t *testing.T) {
	ts := sandboxedFSServer(t)
	tc := ts.connect(t)
	root := t.TempDir()
	fsWrite(t, filepath.Join(root, ".git", "config"), "[core]\n")
	fsWrite(t, filepath.Join(root, "secret"), "s3cret")
	fresh := t.TempDir() // a writable root without a .git
	sb := func(dir string) json.RawMessage {
		return json.RawMessage(strings.ReplaceAll(workspaceWriteSandbox, "{root}", fileURI(dir)))
	}
	for _, c := range []struct {
		what, method string
		params       map[string]any
	}{
		{"write .git/config", "fs/writeFile", map[string]any{"path": fileURI(filepath.Join(root, ".git", "config")), "dataBase64": b64("evil")}},
		{"write .codex/config.toml", "fs/writeFile", map[string]any{"path": fileURI(filepath.Join(root, ".codex", "config.toml")), "dataBase64": b64("evil")}},
		{"remove .git", "fs/remove", map[string]any{"path": fileURI(filepath.Join(root, ".git"))}},
		{"copy into .agents", "fs/copy", map[string]any{"sourcePath": fileURI(filepath.Join(root, ".git", "config")),
			"destinationPath": fileURI(filepath.Join(root, ".agents", "x")), "recursive": false}},
		{"read the denied file", "fs/readFile", map[string]any{"path": fileURI(filepath.Join(root, "secret"))}},
		{"write the denied file", "fs/writeFile", map[string]any{"path": fileURI(filepath.Join(root, "secret")), "dataBase64": b64("x")}},
	} {
		c.params["sandbox"] = sb(root)
		_, err := tc.call(c.method, c.params)
		checkSandboxDenied(t, c.what, err)
	}
	tc.mustCall("fs/writeFile", map[string]any{"path": fileURI(filepath.Join(root, "notes.txt")), "dataBase64": b64("notes"), "sandbox": sb(root)})
	fsMust(t, os.Mkdir(filepath.Join(root, "sub"), 0o755))
	tc.mustCall("fs/writeFile", map[string]any{"path": fileURI(filepath.Join(root, "sub", ".git")), "dataBase64": b64("nested"), "sandbox": sb(root)})
	// A missing .git answers {} (it exists, read-only, in the sandbox) and is never made.
	tc.mustCall("fs/createDirectory", map[string]any{"path": fileURI(filepath.Join(fresh, ".git")), "sandbox": sb(fresh)})
	_, err := tc.call("fs/createDirectory", map[string]any{"path": fileURI(filepath.Join(fresh, ".git", "hooks")), "sandbox": sb(fresh)})
	checkSandboxDenied(t, "createDirectory .git/hooks", err)

	if got := fsReadString(t, filepath.Join(root, ".git", "config")); got != "[core]\n" {
		t.Errorf(".git/config holds %q", got)
	}
	if got := fsReadString(t, filepath.Join(root, "secret")); got != "s3cret" {
		t.Errorf("secret holds %q", got)
	}
	if got := fsReadString(t, filepath.Join(root, "notes.txt")); got != "notes" {
		t.Errorf("notes.txt holds %q", got)
	}
	if got := fsReadString(t, filepath.Join(root, "sub", ".git")); got != "nested" {
		t.Errorf("a nested .git is writable: sub/.git holds %q", got)
	}
	ts.srv.shutdown() // the workers go, and with them the mount points of missing names
	for _, dir := range []string{root, fresh} {
		for _, name := range protectedNames {
			if dir == root && name == ".git" {
				continue
			}
			if _, err := os.Lstat(filepath.Join(dir, name)); !os.IsNotExist(err) {
				t.Errorf("%s/%s exists on the host after the workers ended (%v)", dir, name, err)
			}
		}
	}
}

// TestFSSandboxProtectedNamesReplacedOnTheHost: a .git removed and made again on the host,
// and a denied file recreated, while a worker lives, stay protected: the worker's binds held
// the old files, so the pool starts a new worker on the new ones.
func TestFSSandboxProtectedNamesReplacedOnTheHost(t *testing.T) {
	tc := sandboxedFSServer(t).connect(t)
	root := t.TempDir()
	fsWrite(t, filepath.Join(root, ".git", "config"), "[core]\n")
	fsWrite(t, filepath.Join(root, "secret"), "s3cret")
	sb := json.RawMessage(strings.ReplaceAll(workspaceWriteSandbox, "{root}", fileURI(root)))
	attempt := func(round string) {
		_, err := tc.call("fs/writeFile", map[string]any{"path": fileURI(filepath.Join(root, ".git", "config")), "dataBase64": b64("evil"), "sandbox": sb})
		checkSandboxDenied(t, round+": write .git/config", err)
		res, err := tc.call("fs/readFile", map[string]any{"path": fileURI(filepath.Join(root, "secret")), "sandbox": sb})
		checkSandboxDenied(t, round+": read the denied file", err)
		if strings.Contains(string(res), b64("s3cret")) || strings.Contains(string(res), b64("again")) {
			t.Errorf("%s: the denied file was read: %s", round, res)
		}
	}
	attempt("first")
	fsMust(t, os.RemoveAll(filepath.Join(root, ".git")))
	fsWrite(t, filepath.Join(root, ".git", "config"), "[core]\n")
	fsMust(t, os.Remove(filepath.Join(root, "secret")))
	fsWrite(t, filepath.Join(root, "secret"), "again")
	attempt("after the host replaced them")
	if got := fsReadString(t, filepath.Join(root, ".git", "config")); got != "[core]\n" {
		t.Errorf(".git/config holds %q", got)
	}
}

// TestFSManagedSandboxIsEnforcedUnlessRunUnsandboxed: by default Codex's workspace-write
// object is enforced (writes in the working directory, the denied file denied); with
// --managed-sandbox run-unsandboxed every operation is direct access.
func TestFSManagedSandboxIsEnforcedUnlessRunUnsandboxed(t *testing.T) {
	cases := []struct {
		method, params string
		denied         bool // by default
	}{
		{"fs/writeFile", `{"path":"{root}/new","dataBase64":"aGkK","sandbox":` + workspaceWriteSandbox + `}`, false},
		{"fs/readFile", `{"path":"{root}/secret","sandbox":` + workspaceWriteSandbox + `}`, true},
		{"fs/createDirectory", `{"path":"{root}/d","sandbox":` + workspaceWriteSandbox + `}`, false},
		{"fs/copy", `{"sourcePath":"{root}/secret","destinationPath":"{root}/copy","recursive":false,"sandbox":` + workspaceWriteSandbox + `}`, true},
		{"fs/remove", `{"path":"{root}/gone","sandbox":` + workspaceWriteSandbox + `}`, false},
		{"fs/writeFile", `{"path":"{outside}/new","dataBase64":"aGkK","sandbox":` + workspaceWriteSandbox + `}`, true},
	}
	for _, unsandboxed := range []bool{false, true} {
		t.Run(fmt.Sprintf("run-unsandboxed=%v", unsandboxed), func(t *testing.T) {
			tc := sandboxedFSServer(t, func(s *server) { s.cfg.runManagedUnsandboxed = unsandboxed }).connect(t)
			root, outside := t.TempDir(), t.TempDir()
			fsWrite(t, filepath.Join(root, "secret"), "s3cret")
			fsWrite(t, filepath.Join(root, "gone"), "x")
			for _, c := range cases {
				res, err := fsCall(tc, root, c.method, strings.ReplaceAll(c.params, "{outside}", fileURI(outside)))
				switch {
				case unsandboxed && err != nil:
					t.Errorf("%s: error %d %s, want direct access", c.method, err.Code, err.Message)
				case !unsandboxed && c.denied:
					checkSandboxDenied(t, c.method+" "+c.params[:40], err)
				case !unsandboxed && err != nil:
					t.Errorf("%s: %s %+v, want success inside the sandbox", c.method, res, err)
				}
			}
			_, copyErr := os.Stat(filepath.Join(root, "copy"))
			if unsandboxed == os.IsNotExist(copyErr) {
				t.Errorf("copy of the denied file exists: %v, want %v", copyErr == nil, unsandboxed)
			}
			if got := fsReadString(t, filepath.Join(root, "new")); got != "hi\n" {
				t.Errorf("new holds %q", got)
			}
			if _, err := os.Stat(filepath.Join(root, "gone")); !os.IsNotExist(err) {
				t.Errorf("gone is still there: %v", err)
			}
			if _, err := os.Stat(filepath.Join(outside, "new")); unsandboxed == os.IsNotExist(err) {
				t.Errorf("the write outside the writable roots happened: %v, want %v", err == nil, unsandboxed)
			}
		})
	}
}

// TestFSSandboxReadsUnderFullReadStayInProcess: with the whole disk readable and nothing
// denied, reads never start a worker (the reference's fast path); a write does.
func TestFSSandboxReadsUnderFullReadStayInProcess(t *testing.T) {
	ts := sandboxedFSServer(t)
	tc := ts.connect(t)
	root := t.TempDir()
	fsWrite(t, filepath.Join(root, "f"), "data")
	sb := json.RawMessage(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},` +
		`{"path":{"type":"special","value":{"kind":"current_working_directory"}},"access":"write"}]},"network":"restricted"},` +
		`"windowsSandboxLevel":"disabled","cwd":"` + fileURI(root) + `"}`)
	for _, m := range []string{"fs/readFile", "fs/getMetadata", "fs/canonicalize"} {
		tc.mustCall(m, map[string]any{"path": fileURI(filepath.Join(root, "f")), "sandbox": sb})
	}
	tc.mustCall("fs/readDirectory", map[string]any{"path": fileURI(root), "sandbox": sb})
	if n := len(fsWorkerPids(t, ts.srv)); n != 0 {
		t.Errorf("%d worker processes after reads alone, want none", n)
	}
	tc.mustCall("fs/writeFile", map[string]any{"path": fileURI(filepath.Join(root, "g")), "dataBase64": b64("x"), "sandbox": sb})
	if n := len(fsWorkerPids(t, ts.srv)); n == 0 {
		t.Errorf("no worker after a sandboxed write")
	}
}

// TestFSSandboxMalformedObjects: a malformed sandbox is -32602 on every fs method, as on
// process/start, and nothing is done.
func TestFSSandboxMalformedObjects(t *testing.T) {
	tc := startTestServer(t).connect(t)
	root := t.TempDir()
	objects := []struct{ name, sandbox, want string }{
		{"windowsSandboxLevel bogus", `{"permissions":{"type":"disabled"},"windowsSandboxLevel":"bogus"}`,
			"unknown variant `bogus`, expected one of `disabled`, `restricted-token`, `elevated`, `mxc`"},
		{"network bogus", `{"permissions":{"type":"external","network":"bogus"},"windowsSandboxLevel":"disabled"}`,
			"unknown variant `bogus`, expected `restricted` or `enabled`"},
		{"cwd not a URI", `{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","cwd":"/tmp"}`,
			"invalid URI: relative URL without a base"},
		{"a bare path in an entry", `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
			`{"path":{"type":"path","path":"/tmp"},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}`,
			"invalid URI: relative URL without a base"},
		{"the legacy shape", `{"type":"read-only"}`, "missing field `permissions`"},
		{"dynamic entries without cwd", `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
			`{"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}`,
			"file system sandbox context with dynamic permissions requires cwd"},
		{"a glob without cwd", `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
			`{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},` +
			`{"path":{"type":"glob_pattern","pattern":"**/*.env"},"access":"deny"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}`,
			"file system sandbox context with dynamic permissions requires cwd"},
	}
	methods := []struct{ method, params string }{
		{"fs/readFile", `{"path":"{root}/f"`},
		{"fs/writeFile", `{"path":"{root}/f","dataBase64":"aGkK"`},
		{"fs/createDirectory", `{"path":"{root}/d"`},
		{"fs/getMetadata", `{"path":"{root}/f"`},
		{"fs/canonicalize", `{"path":"{root}"`},
		{"fs/readDirectory", `{"path":"{root}"`},
		{"fs/remove", `{"path":"{root}/f"`},
		{"fs/copy", `{"sourcePath":"{root}/f","destinationPath":"{root}/g","recursive":false`},
		{"fs/open", `{"handleId":"h","path":"{root}/f","mode":"replace"`},
		{"fs/walk", `{"path":"{root}","options":{"maxDepth":1,"maxDirectories":1,"maxEntries":1,"followDirectorySymlinks":false}`},
		{"fs/watchMissing", `{"watchId":1,"missing":["{root}/m"]`},
	}
	for _, o := range objects {
		for _, m := range methods {
			_, err := fsCall(tc, root, m.method, m.params+`,"sandbox":`+o.sandbox+`}`)
			if err == nil || err.Code != codeInvalidParams || err.Message != o.want {
				t.Errorf("%s, %s: %+v, want -32602 %q", o.name, m.method, err, o.want)
			}
		}
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("malformed requests changed the directory: %v", ents)
	}
}

// TestFSSandboxFailsClosedWithoutAMechanism: a host that cannot confine files refuses what
// needs confining, and still serves what does not.
func TestFSSandboxFailsClosedWithoutAMechanism(t *testing.T) {
	tc := startTestServer(t, func(s *server) {
		sbx, err := newSandboxer("isolate", "none")
		fsMust(t, err)
		s.sandbox = sbx
	}).connect(t)
	root := t.TempDir()
	fsWrite(t, filepath.Join(root, "f"), "data")
	ws := json.RawMessage(workspaceWriteSandboxOf(root))
	for _, c := range []struct {
		method string
		params map[string]any
	}{
		{"fs/writeFile", map[string]any{"path": fileURI(filepath.Join(root, "g")), "dataBase64": b64("x"), "sandbox": ws}},
		{"fs/readFile", map[string]any{"path": fileURI(filepath.Join(root, "f")), "sandbox": ws}},
		{"fs/open", map[string]any{"handleId": "h", "path": fileURI(filepath.Join(root, "f")), "sandbox": ws}},
	} {
		_, err := tc.call(c.method, c.params)
		if err == nil || err.Code != codeInvalidRequest || err.Message != "filesystem sandbox cannot be enforced on this executor" {
			t.Errorf("%s: %+v, want -32600 filesystem sandbox cannot be enforced on this executor", c.method, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "g")); !os.IsNotExist(err) {
		t.Errorf("a refused write happened: %v", err)
	}
	full := json.RawMessage(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}`)
	tc.mustCall("fs/readFile", map[string]any{"path": fileURI(filepath.Join(root, "f")), "sandbox": full})
}

// TestFSSandboxLandlockFallback: on a host without user namespaces the worker runs under
// Landlock (sandbox_linux.go), one worker per call, since its grants are a snapshot of the
// tree; denials are EACCES. Landlock's limit applies: nothing new at the top of a writable
// root (docs/sandbox.md §2).
func TestFSSandboxLandlockFallback(t *testing.T) {
	if landlockABI() == 0 {
		t.Skip("no Landlock on this kernel")
	}
	ts := startTestServer(t, func(s *server) {
		sbx, err := newSandboxer("isolate", "landlock")
		fsMust(t, err)
		s.sandbox = sbx
	})
	tc := ts.connect(t)
	f := makeEscapeFixture(t)
	ws := json.RawMessage(workspaceWriteSandboxOf(f.allowed))
	tc.mustCall("fs/writeFile", map[string]any{"path": fileURI(filepath.Join(f.allowed, "file.txt")), "dataBase64": b64("landlocked"), "sandbox": ws})
	if got := fsReadString(t, filepath.Join(f.allowed, "file.txt")); got != "landlocked" {
		t.Errorf("file.txt holds %q", got)
	}
	for _, path := range []string{filepath.Join(f.outside, "new.txt"), filepath.Join(f.allowed, "link", "new.txt")} {
		_, err := tc.call("fs/writeFile", map[string]any{"path": fileURI(path), "dataBase64": b64("x"), "sandbox": ws})
		checkSandboxDenied(t, "write "+path, err)
	}
	if _, err := os.Stat(filepath.Join(f.outside, "new.txt")); !os.IsNotExist(err) {
		t.Errorf("a denied write happened: %v", err)
	}
	tc.mustCall("fs/open", map[string]any{"handleId": "h", "path": fileURI(filepath.Join(f.allowed, "file.txt")), "sandbox": json.RawMessage(readOnlySandbox(f.allowed))})
	ts.srv.fsWorkers.mu.Lock()
	kept := len(ts.srv.fsWorkers.workers)
	ts.srv.fsWorkers.mu.Unlock()
	if kept != 0 {
		t.Errorf("%d Landlock workers kept for later calls, want none", kept)
	}
}

// TestFSSandboxOpenHandsTheDescriptorOver: fs/open under a confining sandbox is opened by the
// worker, which the kernel may refuse; the handle then works here.
func TestFSSandboxOpenHandsTheDescriptorOver(t *testing.T) {
	tc := sandboxedFSServer(t).connect(t)
	f := makeEscapeFixture(t)
	ws, ro := json.RawMessage(workspaceWriteSandboxOf(f.allowed)), json.RawMessage(readOnlySandbox(f.allowed))
	before := fsOpenFDs(t)
	tc.mustCall("fs/open", map[string]any{"handleId": "w", "path": fileURI(filepath.Join(f.allowed, "blocks.txt")), "mode": "replace", "sandbox": ws})
	tc.mustCall("fs/writeBlock", map[string]any{"handleId": "w", "offset": 0, "chunk": b64("written in blocks")})
	tc.mustCall("fs/close", map[string]any{"handleId": "w"})
	if got := fsReadString(t, filepath.Join(f.allowed, "blocks.txt")); got != "written in blocks" {
		t.Errorf("blocks.txt holds %q", got)
	}
	tc.mustCall("fs/open", map[string]any{"handleId": "r", "path": fileURI(filepath.Join(f.allowed, "file.txt")), "sandbox": ro})
	res := tc.mustCall("fs/readBlock", map[string]any{"handleId": "r", "offset": 0, "len": 100})
	if want := `{"chunk":"` + b64("file") + `","eof":true}`; string(res) != want {
		t.Errorf("readBlock: %s, want %s", res, want)
	}
	tc.mustCall("fs/close", map[string]any{"handleId": "r"})
	// Several at once: descriptors may come back out of order.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "p" + strconv.Itoa(i)
			tc.mustCall("fs/open", map[string]any{"handleId": id, "path": fileURI(filepath.Join(f.allowed, "file.txt")), "sandbox": ro})
			tc.mustCall("fs/close", map[string]any{"handleId": id})
		}()
	}
	wg.Wait()
	snap := f.snapshot(t)
	for _, c := range []struct {
		what   string
		params map[string]any
	}{
		{"open to write outside", map[string]any{"handleId": "x1", "path": fileURI(filepath.Join(f.outside, "new.txt")), "mode": "replace", "sandbox": ws}},
		{"open to write through a symlink out", map[string]any{"handleId": "x2", "path": fileURI(filepath.Join(f.allowed, "link", "outside.txt")), "mode": "replace", "sandbox": ws}},
		{"open to read through a symlink out", map[string]any{"handleId": "x3", "path": fileURI(filepath.Join(f.allowed, "link", "secret.txt")), "sandbox": ro}},
		{"open to write under read-only", map[string]any{"handleId": "x4", "path": fileURI(filepath.Join(f.allowed, "file.txt")), "mode": "replace", "sandbox": ro}},
	} {
		_, err := tc.call("fs/open", c.params)
		checkSandboxDenied(t, c.what, err)
	}
	if after := f.snapshot(t); !mapsEqualIgnoringProtected(snap, after) {
		t.Errorf("denied opens changed the tree:\nbefore %v\nafter  %v", snap, after)
	}
	// The two workers' descriptors beyond the start, and the locks the writable one holds on
	// its root's protected directories (syntheticDirs); none left per handle.
	if n, want := fsOpenFDs(t), before+2*fsWorkerFDs+len(protectedNames); n > want {
		t.Errorf("%d descriptors open, want at most %d", n, want)
	}
}

// fsWorkerFDs is what one live worker holds open in the server: its socket, its two pipes,
// and the pidfd of the stage.
const fsWorkerFDs = 4

// fsWorkerPids lists the processes of the server's live workers: each stage, and what runs
// under it.
func fsWorkerPids(t testing.TB, srv *server) []int {
	t.Helper()
	var pids []int
	srv.fsWorkers.mu.Lock()
	for w := range srv.fsWorkers.live {
		w.mu.Lock()
		if w.proc != nil {
			pids = append(pids, w.proc.proc.Pid)
		}
		w.mu.Unlock()
	}
	srv.fsWorkers.mu.Unlock()
	return append(pids, childrenOf(t, pids)...)
}

// childrenOf lists the processes whose parent is one of pids.
func childrenOf(t testing.TB, pids []int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		_, rest, ok := bytes.Cut(b, []byte(") "))
		fields := strings.Fields(string(rest))
		if !ok || len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); slices.Contains(pids, ppid) {
			out = append(out, pid)
		}
	}
	return out
}

// TestFSSandboxWorkerLifecycle: a worker is reused, stops when idle, is restarted after it
// dies (failing what it held), and is gone with every descriptor after shutdown.
func TestFSSandboxWorkerLifecycle(t *testing.T) {
	const idle = 300 * time.Millisecond
	ts := sandboxedFSServer(t, func(s *server) { s.fsWorkers.idle = idle })
	fdsBefore := fsOpenFDs(t)
	tc := ts.connect(t)
	dir := t.TempDir()
	sb := json.RawMessage(workspaceWriteSandboxOf(dir))
	write := func(name string) *rpcError {
		_, err := tc.call("fs/writeFile", map[string]any{"path": fileURI(filepath.Join(dir, name)), "dataBase64": b64(name), "sandbox": sb})
		return err
	}
	if err := write("a"); err != nil {
		t.Fatal(err)
	}
	first := fsWorkerPids(t, ts.srv)
	if len(first) != 2 {
		t.Fatalf("worker processes %v, want the stage and the worker", first)
	}
	if err := write("b"); err != nil {
		t.Fatal(err)
	}
	if again := fsWorkerPids(t, ts.srv); !slices.Equal(again, first) {
		t.Errorf("a second call started another worker: %v, then %v", first, again)
	}

	// Idle: the worker goes by itself.
	time.Sleep(idle)
	for _, pid := range first {
		waitPidGone(t, pid)
	}
	if err := write("c"); err != nil {
		t.Fatalf("after the idle stop: %v", err)
	}

	// Death: a request in flight fails, the next one gets a new worker.
	fifo := filepath.Join(dir, "fifo")
	fsMust(t, syscall.Mkfifo(fifo, 0o644))
	reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	fsMust(t, err)
	stuck := tc.start("fs/writeFile", map[string]any{"path": fileURI(fifo), "dataBase64": base64.StdEncoding.EncodeToString(make([]byte, 1<<20)), "sandbox": sb})
	time.Sleep(100 * time.Millisecond) // the write fills the FIFO and waits
	pids := fsWorkerPids(t, ts.srv)
	if len(pids) != 2 {
		t.Fatalf("worker processes %v", pids)
	}
	fsMust(t, syscall.Kill(pids[0], syscall.SIGKILL))
	select {
	case r := <-stuck:
		if r.Err == nil || r.Err.Code != codeInternal || !strings.HasPrefix(r.Err.Message, "fs sandbox helper failed") {
			t.Errorf("the request in flight: %s %+v, want -32603 fs sandbox helper failed …", r.Result, r.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request in flight was not failed")
	}
	reader.Close()
	if err := write("d"); err != nil {
		t.Fatalf("after the worker died: %v", err)
	}
	last := fsWorkerPids(t, ts.srv)
	if len(last) != 2 || last[0] == pids[0] {
		t.Errorf("worker processes %v after a restart (the dead stage was %d)", last, pids[0])
	}

	tc.close()
	ts.srv.conns.Wait()
	ts.srv.shutdown()
	for _, pid := range append(pids, last...) {
		waitPidGone(t, pid)
	}
	if n := fsOpenFDs(t); n > fdsBefore {
		t.Errorf("%d descriptors open after shutdown, %d before", n, fdsBefore)
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		if got := fsReadString(t, filepath.Join(dir, name)); got != name {
			t.Errorf("%s holds %q", name, got)
		}
	}
}

// TestFSSandboxManyAtOnce: concurrent sandboxed calls on several connections and profiles.
func TestFSSandboxManyAtOnce(t *testing.T) {
	ts := sandboxedFSServer(t)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var wg sync.WaitGroup
	for c := range 3 {
		tc := ts.connect(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var replies []<-chan testReply
			for i := range 40 {
				dir := dirs[(c+i)%len(dirs)]
				replies = append(replies, tc.start("fs/writeFile", map[string]any{
					"path": fileURI(filepath.Join(dir, fmt.Sprintf("%d-%d", c, i))), "dataBase64": b64(fmt.Sprint(c, i)),
					"sandbox": json.RawMessage(workspaceWriteSandboxOf(dir))}))
			}
			for i, ch := range replies {
				if r := <-ch; r.Err != nil {
					t.Errorf("write %d-%d: %+v", c, i, r.Err)
				}
			}
		}()
	}
	wg.Wait()
	n := 0
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if !slices.Contains(protectedNames, e.Name()) {
				n++
			}
		}
	}
	if n != 120 {
		t.Errorf("%d files written, want 120", n)
	}
}

// TestFSWorkerProtocol drives serveFSWorker in this process, without a sandbox: frames,
// answers out of order, a descriptor ahead of its answer, a cancel, and the end of input.
func TestFSWorkerProtocol(t *testing.T) {
	dir := t.TempDir()
	fsWrite(t, filepath.Join(dir, "f"), "hello")
	fifo := filepath.Join(dir, "fifo")
	fsMust(t, syscall.Mkfifo(fifo, 0o644))
	reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	fsMust(t, err)
	defer reader.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	fsMust(t, err)
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	status := make(chan int, 1)
	go func() {
		status <- serveFSWorker(inR, outW, fds[1])
		outW.Close()
	}()
	send := func(id uint64, method string, op fsOp) {
		var frame []byte
		var err error
		if op == nil {
			frame, err = appendWorkerCancel(id)
		} else {
			frame, err = appendWorkerRequest(id, method, op)
		}
		fsMust(t, err)
		_, err = inW.Write(frame)
		fsMust(t, err)
	}
	send(1, "fs/writeFile", &writeFileOp{Path: fifo, Data: lazyBase64{raw: []byte(`"` + base64.StdEncoding.EncodeToString(make([]byte, 1<<20)) + `"`)}})
	send(2, "fs/readFile", &readFileOp{Path: filepath.Join(dir, "f"), Limit: 100})
	send(3, "fs/getMetadata", &metadataOp{Path: filepath.Join(dir, "missing")})
	send(4, "fs/open", &openOp{Path: filepath.Join(dir, "f")})
	send(5, "fs/bogus", &metadataOp{})
	got := map[uint64]string{}
	for len(got) < 4 {
		frame, err := readWorkerFrame(outR, framedRoom)
		fsMust(t, err)
		id, r, err := parseWorkerReply(frame)
		fsMust(t, err)
		switch {
		case r.err != nil:
			got[id] = fmt.Sprintf("error %d %s", r.err.(*rpcError).Code, r.err.(*rpcError).Message)
		case r.result != nil:
			got[id] = string(r.result.(framedJSON).buf[r.result.(framedJSON).head:])
		default:
			got[id] = "descriptor"
		}
	}
	want := map[uint64]string{
		2: `{"dataBase64":"aGVsbG8="}`,
		3: "error -32004 No such file or directory (os error 2)",
		4: "descriptor",
		5: "error -32603 fs sandbox worker: unknown method `fs/bogus`",
	}
	if !maps.Equal(got, want) {
		t.Errorf("answers %v, want %v", got, want)
	}
	var b [8]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(fds[0], b[:], oob, 0)
	fsMust(t, err)
	rights, err := descriptorsIn(oob[:oobn])
	if err != nil || n != 8 || binary.BigEndian.Uint64(b[:]) != 4 || len(rights) != 1 {
		t.Fatalf("descriptor message: %d bytes %x, %v %v", n, b, rights, err)
	}
	f := os.NewFile(uintptr(rights[0]), "received")
	if data, _ := io.ReadAll(f); string(data) != "hello" {
		t.Errorf("the descriptor reads %q", data)
	}
	f.Close()
	// Request 1 waits on the FIFO; a cancel ends it with an error.
	send(1, "", nil)
	frame, err := readWorkerFrame(outR, framedRoom)
	fsMust(t, err)
	if id, r, err := parseWorkerReply(frame); err != nil || id != 1 || r.err == nil {
		t.Errorf("the cancelled request: %d %+v %v, want an error for 1", id, r, err)
	}
	inW.Close()
	select {
	case s := <-status:
		if s != 0 {
			t.Errorf("exit status %d at the end of input", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the worker did not end with its input")
	}
}

// TestWorkerProfile: the network is always off, and a restricted-read profile gains the
// minimal roots, unresolved, and the worker's binary.
func TestWorkerProfile(t *testing.T) {
	p := &sandboxProfile{Kind: profileManaged, Network: true, Write: []string{"/w"}}
	wp := workerProfile(p, "/opt/exec-server")
	if !slices.Contains(wp.Read, "/opt/exec-server") {
		t.Errorf("read roots %v lack the worker's binary", wp.Read)
	}
	if wp.Network || !p.Network {
		t.Errorf("network %v (original %v), want off in the worker's copy only", wp.Network, p.Network)
	}
	for _, root := range minimalReadRoots {
		if !slices.Contains(wp.Read, root) {
			t.Errorf("read roots %v lack %s", wp.Read, root)
		}
	}
	full := workerProfile(&sandboxProfile{Kind: profileManaged, FullRead: true, Write: []string{"/w"}}, "/opt/exec-server")
	if len(full.Read) != 0 {
		t.Errorf("a full-read profile gained read roots %v", full.Read)
	}
}

// sandboxedBench runs op through a real server and websocket under a workspace-write
// sandbox of one directory, and reports the median as p50-ms.
func sandboxedBench(b *testing.B, op func(tc *testClient, dir string, sb json.RawMessage, i int)) {
	ts := sandboxedFSServer(b)
	tc := ts.connect(b)
	dir := b.TempDir()
	sb := json.RawMessage(workspaceWriteSandboxOf(dir))
	op(tc, dir, sb, -1) // starts the worker
	var times []time.Duration
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		op(tc, dir, sb, i)
		times = append(times, time.Since(start))
		i++
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2])/float64(time.Millisecond), "p50-ms")
}

func BenchmarkSandboxedWriteFile4K(b *testing.B) {
	data := base64.StdEncoding.EncodeToString(make([]byte, 4<<10))
	b.SetBytes(4 << 10)
	sandboxedBench(b, func(tc *testClient, dir string, sb json.RawMessage, _ int) {
		if _, err := tc.call("fs/writeFile", map[string]any{"path": fileURI(filepath.Join(dir, "f")), "dataBase64": data, "sandbox": sb}); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkSandboxedCreateDirectory(b *testing.B) {
	sandboxedBench(b, func(tc *testClient, dir string, sb json.RawMessage, i int) {
		path := filepath.Join(dir, "d"+strconv.Itoa(i))
		if _, err := tc.call("fs/createDirectory", map[string]any{"path": fileURI(path), "sandbox": sb}); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkSandboxedRemove(b *testing.B) {
	sandboxedBench(b, func(tc *testClient, dir string, sb json.RawMessage, i int) {
		path := filepath.Join(dir, "r")
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			b.Fatal(err)
		}
		if _, err := tc.call("fs/remove", map[string]any{"path": fileURI(path), "sandbox": sb}); err != nil {
			b.Fatal(err)
		}
	})
}
