package main

// A failed sandboxed spawn's error kind: the sandbox stage reports its chdir or exec failure as
// text, and the error still carries data.kind (docs/protocol.md §6.4).

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSpawnErrorKindsSandboxed runs the failures that happen inside the sandbox stage (its
// chdir and its execve), pipe and PTY. The reference starts these and lets its helper fail;
// this server refuses the start, with the kind an unsandboxed spawn would have.
func TestSpawnErrorKindsSandboxed(t *testing.T) {
	requireUserNamespaces(t)
	f := newSBFixture(t)
	noexec := filepath.Join(f.ws, "noexec")
	if err := os.WriteFile(noexec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := startTestServer(t, withSandboxer(t, "isolate", ""))
	tc := ts.connect(t)
	sb := f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted")
	for _, tty := range []bool{false, true} {
		for _, c := range []struct {
			name, prog, cwd, kind, msg string
		}{
			{"missing program", filepath.Join(f.ws, "nope"), f.ws, spawnNotFound, "No such file or directory (os error 2)"},
			{"missing cwd", "true", filepath.Join(f.ws, "nowhere"), spawnNotFound, "No such file or directory (os error 2)"},
			{"not executable", noexec, f.ws, spawnPermissionDenied, "Permission denied (os error 13)"},
		} {
			e := tc.callErr("process/start", map[string]any{"processId": "p", "argv": []string{c.prog}, "cwd": fileURI(c.cwd), "env": f.env(), "tty": tty, "sandbox": sb})
			if e.Code != codeInternal || e.Message != c.msg || e.Data == nil || e.Data.Kind != c.kind {
				t.Errorf("tty=%v %s: error %d %q data %+v, want %q kind %s", tty, c.name, e.Code, e.Message, e.Data, c.msg, c.kind)
			}
		}
	}
}
