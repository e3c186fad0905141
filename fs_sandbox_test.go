//go:build linux

package main

// The fs methods under a sandbox (fs.go, fs_worker.go; docs/sandbox.md §3): a real server, real
// files, the real kernel. Every escape checks that its target is unchanged. The sandboxes are
// the reference's test sandboxes (tests/file_system_unix.rs), which read nothing but their
// directory, and the object Codex sends in workspace-write mode.

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
				if after := f.snapshot(t); !maps.Equal(before, after) {
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
	// A missing .git is refused, read-only (the reference answers {} and makes nothing), and
	// never made; an existing one is a directory that exists, as mkdir -p sees it.
	_, err := tc.call("fs/createDirectory", map[string]any{"path": fileURI(filepath.Join(fresh, ".git")), "sandbox": sb(fresh)})
	checkSandboxDenied(t, "createDirectory of a missing .git", err)
	tc.mustCall("fs/createDirectory", map[string]any{"path": fileURI(filepath.Join(root, ".git")), "sandbox": sb(root)})
	_, err = tc.call("fs/createDirectory", map[string]any{"path": fileURI(filepath.Join(fresh, ".git", "hooks")), "sandbox": sb(fresh)})
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
	ts.srv.shutdown() // the workers go; they never made a missing name
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
