package main

// Profile resolution and what a profile hides, on any platform (docs/sandbox.md §1, §3):
// the parts of the fs escape tests that need no kernel sandbox. The rest is in
// sandbox_escape_fs_linux_test.go.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestSandboxResolveNeverWidensFromWhatWasNotSent (issue 20, row 9): project_roots with
// neither workspaceRoots nor cwd grants nothing, whatever the process's cwd; with
// workspaceRoots or cwd it grants them. An absolute glob deny denies without a cwd.
func TestSandboxResolveNeverWidensFromWhatWasNotSent(t *testing.T) {
	dir := t.TempDir()
	fsWrite(t, filepath.Join(dir, "a.secret"), "s")
	entries := `[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},` +
		`{"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"},` +
		`{"path":{"type":"special","value":{"kind":"current_working_directory"}},"access":"write"},` +
		`{"path":{"type":"glob_pattern","pattern":"` + dir + `/*.secret"},"access":"deny"}]`
	object := func(extra string) *sandboxRequest {
		t.Helper()
		req, err := parseSandbox(json.RawMessage(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":` +
			entries + `},"network":"restricted"},"windowsSandboxLevel":"disabled"` + extra + `}`))
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	anchors := sandboxAnchors{cwd: dir, tmpdir: dir}
	p := object("").resolve(anchors)
	if len(p.Write) != 0 || p.FullWrite {
		t.Errorf("without workspaceRoots or cwd: writable %v (full %v), want nothing", p.Write, p.FullWrite)
	}
	if len(p.Deny) != 1 || p.Deny[0] != filepath.Join(dir, "a.secret") {
		t.Errorf("without cwd: denied %v, want the absolute glob's match", p.Deny)
	}
	if p := object(`,"workspaceRoots":["` + fileURI(dir) + `"]`).resolve(anchors); len(p.Write) != 1 || p.Write[0] != dir {
		t.Errorf("with workspaceRoots: writable %v, want [%s]", p.Write, dir)
	}
	if p := object(`,"cwd":"` + fileURI(dir) + `"`).resolve(anchors); len(p.Write) != 1 || p.Write[0] != dir {
		t.Errorf("with cwd: writable %v, want [%s]", p.Write, dir)
	}
}

// TestSandboxProfileHides (issue 20, row 10): what fs/watchMissing treats as missing under a
// profile: outside the readable roots (through a symlink too) or denied; never a path on the
// way to a root, nor a missing one below a visible directory.
func TestSandboxProfileHides(t *testing.T) {
	base := t.TempDir()
	dir, outside := filepath.Join(base, "allowed"), filepath.Join(base, "outside")
	fsWrite(t, filepath.Join(dir, "secret", "x"), "s")
	fsWrite(t, filepath.Join(outside, "x"), "o")
	fsMust(t, os.Symlink(outside, filepath.Join(dir, "link")))
	fsMust(t, os.Symlink("secret", filepath.Join(dir, "to-secret")))
	restricted := &sandboxProfile{Kind: profileManaged, Read: []string{dir}, Deny: []string{filepath.Join(dir, "secret")}}
	fullRead := &sandboxProfile{Kind: profileManaged, FullRead: true, Write: []string{dir}, Deny: []string{filepath.Join(dir, "secret")}}
	for _, c := range []struct {
		p    *sandboxProfile
		path string
		want bool
	}{
		{restricted, filepath.Join(dir, "missing", "deeper"), false},
		{restricted, dir, false},
		{restricted, base, false}, // on the way to a root
		{restricted, filepath.Join(outside, "x"), true},
		{restricted, filepath.Join(outside, "missing"), true},
		{restricted, filepath.Join(dir, "link", "x"), true},
		{restricted, filepath.Join(dir, "link", "missing"), true},
		{restricted, filepath.Join(dir, "secret", "x"), true},
		{restricted, filepath.Join(dir, "to-secret", "x"), true},
		{fullRead, filepath.Join(outside, "x"), false},
		{fullRead, filepath.Join(dir, "secret"), true},
		{fullRead, filepath.Join(dir, "to-secret", "missing"), true},
		{&sandboxProfile{Kind: profileManaged, FullRead: true}, filepath.Join(outside, "x"), false},
	} {
		if got := c.p.hides(c.path); got != c.want {
			t.Errorf("full read %v, hides(%s) = %v, want %v", c.p.FullRead, c.path, got, c.want)
		}
	}
}
