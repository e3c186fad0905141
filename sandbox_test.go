package main

// Tests of the sandbox object: decoding as the reference decodes it (testdata/sandbox), the
// profile it resolves to, and a fuzz target for the decoder (docs/sandbox.md §1).

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSandboxObjectVectors: every malformed object is the same -32602 on process/start and on
// an fs method, and nothing runs.
func TestSandboxObjectVectors(t *testing.T) {
	ts := &testServer{url: os.Getenv("EXEC_SERVER_REFERENCE_URL")}
	if ts.url == "" {
		ts = startTestServer(t)
	}
	tc := ts.connect(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	for i, v := range readVectors(t, "testdata/sandbox/objects.txt") {
		v.only(t, "name", "sandbox", "error")
		object := json.RawMessage(v.field(t, "sandbox"))
		for _, method := range []string{"process/start", "fs/getMetadata"} {
			params := map[string]any{"path": fileURI(dir), "sandbox": object}
			if method == "process/start" {
				params = map[string]any{"processId": "sb" + string(rune('a'+i)), "argv": []string{"/bin/sh", "-c", "touch " + marker},
					"cwd": fileURI(dir), "env": map[string]string{}, "tty": false, "arg0": nil, "sandbox": object}
			}
			res, err := tc.call(method, params)
			v.checkCall(t, v.name()+", "+method, res, err)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("a process ran under a malformed sandbox object")
	}
}

// TestSandboxResolve: what Codex's objects resolve to.
func TestSandboxResolve(t *testing.T) {
	ws := t.TempDir()
	os.Mkdir(filepath.Join(ws, ".git"), 0o755)
	os.WriteFile(filepath.Join(ws, "secret"), nil, 0o644)
	uri := fileURI(ws)
	special := func(kind, access string) string {
		return `{"path":{"type":"special","value":{"kind":"` + kind + `"}},"access":"` + access + `"}`
	}
	managed := func(network string, entries ...string) string {
		return `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` + strings.Join(entries, ",") +
			`]},"network":"` + network + `"},"windowsSandboxLevel":"disabled","cwd":"` + uri + `","workspaceRoots":["` + uri + `"]}`
	}
	for _, tt := range []struct {
		name, object                    string
		files, freeReads, network       bool
		write, read, deny, protectedHas []string
	}{
		{name: "disabled", object: `{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`, freeReads: true, network: true},
		{name: "external, network restricted", object: `{"permissions":{"type":"external","network":"restricted"},"windowsSandboxLevel":"disabled"}`, freeReads: true},
		{name: "read-only", object: managed("restricted", special("root", "read")), files: true, freeReads: true},
		{name: "workspace-write", object: managed("restricted", special("root", "read"), special("project_roots", "write"), special("slash_tmp", "write")),
			files: true, freeReads: true, write: []string{"/tmp", ws}, protectedHas: []string{filepath.Join(ws, ".git"), filepath.Join(ws, ".codex")}},
		{name: "deny a file", object: managed("enabled", special("root", "read"), special("current_working_directory", "write"),
			`{"path":{"type":"path","path":"`+uri+`/secret"},"access":"none"}`),
			files: true, network: true, write: []string{ws}, deny: []string{filepath.Join(ws, "secret")}},
		{name: "restricted read", object: managed("restricted", `{"path":{"type":"path","path":"`+uri+`"},"access":"read"}`),
			files: true, read: []string{ws}},
		{name: "legacy workspace-write", object: `{"sandboxPolicy":{"type":"workspace-write","writable_roots":[],"network_access":false,"exclude_slash_tmp":true,"exclude_tmpdir_env_var":true},"sandboxPolicyCwd":"` + uri + `","windowsSandboxLevel":"disabled"}`,
			files: true, freeReads: true, write: []string{ws}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := parseSandbox(json.RawMessage(tt.object))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			p := req.resolve(sandboxAnchors{})
			if p.confinesFiles() != tt.files || p.readsFreely() != tt.freeReads || p.Network != tt.network {
				t.Errorf("confines files %v, reads freely %v, network %v; want %v %v %v", p.confinesFiles(), p.readsFreely(), p.Network, tt.files, tt.freeReads, tt.network)
			}
			if tt.files {
				if !slices.Equal(p.Write, tt.write) || !slices.Equal(p.Read, tt.read) || !slices.Equal(p.Deny, tt.deny) {
					t.Errorf("write %q read %q deny %q; want %q %q %q", p.Write, p.Read, p.Deny, tt.write, tt.read, tt.deny)
				}
			}
			for _, want := range tt.protectedHas {
				if !slices.Contains(p.Protected, want) {
					t.Errorf("protected %q lacks %s", p.Protected, want)
				}
			}
		})
	}
}

// TestSandboxGitdirFileProtectsItsTarget: a `.git` file's gitdir is protected too.
func TestSandboxGitdirFileProtectsItsTarget(t *testing.T) {
	dir := t.TempDir()
	ws, real := filepath.Join(dir, "ws"), filepath.Join(dir, "realgit")
	os.Mkdir(ws, 0o755)
	os.Mkdir(real, 0o755)
	os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: ../realgit\n"), 0o644)
	got := protectedPaths([]string{ws})
	if !slices.Contains(got, real) {
		t.Errorf("protected %q lacks the gitdir target %s", got, real)
	}
}

// TestGlobMatch: ** spans directories, other segments match as filepath.Match.
func TestGlobMatch(t *testing.T) {
	for _, tt := range []struct {
		pattern, path string
		want          bool
	}{
		{"/w/**/*.env", "/w/.env", true},
		{"/w/**/*.env", "/w/a/b/prod.env", true},
		{"/w/**/*.env", "/w/a/b/prod.envx", false},
		{"/w/*.env", "/w/a/x.env", false},
		{"/w/secrets/**", "/w/secrets/a/b", true},
		{"/w/[", "/w/[", false},
	} {
		if got := globMatch(tt.pattern, tt.path); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.path, got, tt.want)
		}
	}
}

// FuzzParseSandbox: no object makes the decoder or the resolver panic, and an object that
// decodes resolves to a profile whose paths are all absolute.
func FuzzParseSandbox(f *testing.F) {
	f.Add(`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`)
	f.Add(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},{"path":{"type":"glob_pattern","pattern":"**/*.env"},"access":"deny"}]},"network":"restricted"},"windowsSandboxLevel":"disabled","cwd":"file:///tmp"}`)
	f.Add(`{"sandboxPolicy":{"type":"workspace-write","writable_roots":["/tmp"]},"windowsSandboxLevel":"disabled"}`)
	f.Fuzz(func(t *testing.T, object string) {
		req, err := parseSandbox(json.RawMessage(object))
		if err != nil || req == nil {
			return
		}
		req.globDepth = 1 // keep a fuzzed glob from walking the disk
		p := req.resolve(sandboxAnchors{cwd: "/nonexistent-fuzz", tmpdir: "/nonexistent-fuzz"})
		for _, list := range [][]string{p.Read, p.Write, p.Deny, p.Protected} {
			for _, path := range list {
				if !filepath.IsAbs(path) {
					t.Fatalf("relative path %q in %+v", path, p)
				}
			}
		}
	})
}

// TestSandboxRedirectedWritableRootGrantsNothing: a writable root reached through a symlink
// inside another writable root, leading out of it, is one a sandboxed command could have
// made ($TMPDIR=/tmp/a/b, then ln -s / /tmp/a/b): it grants nothing; one whose link stays
// inside, or that no writable root contains, is kept.
func TestSandboxRedirectedWritableRootGrantsNothing(t *testing.T) {
	top, outside := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(top, "a"), 0o755)
	os.Symlink(outside, filepath.Join(top, "a", "b")) // out of top: redirected
	os.Symlink("/", filepath.Join(top, "a", "root"))  // to / itself
	os.MkdirAll(filepath.Join(top, "in", "real"), 0o755)
	os.Symlink(filepath.Join(top, "in", "real"), filepath.Join(top, "in", "link")) // stays inside
	entry := func(p string) string {
		return `{"path":{"type":"path","path":"` + fileURI(p) + `"},"access":"write"}`
	}
	object := `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},` +
		entry(top) + `,` + entry(filepath.Join(top, "a", "b")) + `,` + entry(filepath.Join(top, "a", "root")) + `,` +
		entry(filepath.Join(top, "in", "link")) + `,` + entry(outside) +
		`]},"network":"restricted"},"windowsSandboxLevel":"disabled"}`
	req, err := parseSandbox(json.RawMessage(object))
	if err != nil {
		t.Fatal(err)
	}
	p := req.resolve(sandboxAnchors{})
	if p.FullWrite {
		t.Fatalf("a root reached through a symlink to / granted the whole disk: %+v", p)
	}
	want := []string{outside, top, filepath.Join(top, "in", "link")}
	slices.Sort(want)
	got := slices.Clone(p.Write)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("writable roots %q, want %q", got, want)
	}
}

// TestSandboxEmptyGlobIsRefused: an empty glob_pattern names no path (or, joined to cwd, the
// whole workspace). It is refused as invalid params rather than guessed at; the fuzzer found
// it resolving to the relative path ".". 0.169 refuses it too, later: its fs helper fails and
// a command exits 1 ("unreadable glob … cannot be safely expanded").
func TestSandboxEmptyGlobIsRefused(t *testing.T) {
	_, err := parseSandbox(json.RawMessage(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},{"path":{"type":"glob_pattern","pattern":""},"access":"deny"}]},` +
		`"network":"restricted"},"windowsSandboxLevel":"disabled","cwd":"file:///tmp"}`))
	var re *rpcError
	if !errors.As(err, &re) || re.Code != codeInvalidParams || !strings.Contains(re.Message, "non-empty `pattern`") {
		t.Fatalf("empty glob_pattern: %v", err)
	}
}
