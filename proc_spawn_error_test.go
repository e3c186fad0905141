package main

// A failed spawn's error: the reference 0.171's code, message and data.kind for each way a
// spawn fails, in pipe and PTY mode, with and without a sandbox (docs/protocol.md §6.4).

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSpawnErrorKinds checks each failed spawn's -32603 error and its data.kind, as measured on
// the reference: spawnNotFound for ENOENT (program, interpreter or cwd), spawnPermissionDenied
// for EACCES (a file without x, a directory), spawnFailed for the rest. The id is free again
// after each failure.
func TestSpawnErrorKinds(t *testing.T) {
	dir := t.TempDir()
	mustWriteMode := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noexec := mustWriteMode("noexec", "x", 0o644)
	badInterp := mustWriteMode("badinterp", "#!/nonexistent/interp\n", 0o755)
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	const (
		notFound = "No such file or directory (os error 2)"
		denied   = "Permission denied (os error 13)"
	)
	type want struct{ kind, msg string }
	cases := []struct {
		name      string
		argv      []string
		cwd       string
		pipe, pty want
	}{
		{"missing program", []string{filepath.Join(dir, "nope")}, dir,
			want{spawnNotFound, notFound}, want{spawnNotFound, notFound}},
		{"missing on PATH", []string{"exec-server-no-such-program"}, dir,
			want{spawnNotFound, notFound}, want{spawnFailed, "Unable to spawn exec-server-no-such-program because:\nNo viable candidates found in PATH \"/usr/bin:/bin\""}},
		{"relative missing", []string{"./nope"}, dir,
			want{spawnNotFound, notFound}, want{spawnFailed, "Unable to spawn " + dir + "/./nope because it does not exist"}},
		{"missing cwd", []string{"true"}, filepath.Join(dir, "nowhere"),
			want{spawnNotFound, notFound}, want{spawnNotFound, notFound}},
		{"cwd is a file", []string{"true"}, noexec,
			want{spawnFailed, "Not a directory (os error 20)"}, want{spawnFailed, "Not a directory (os error 20)"}},
		{"empty program", []string{""}, dir,
			want{spawnFailed, "missing program for pipe spawn"}, want{spawnFailed, "missing program for PTY spawn"}},
		{"not executable", []string{noexec}, dir,
			want{spawnPermissionDenied, denied}, want{spawnPermissionDenied, denied}},
		{"a directory", []string{filepath.Join(dir, "adir")}, dir,
			want{spawnPermissionDenied, denied}, want{spawnPermissionDenied, denied}},
		{"missing interpreter", []string{badInterp}, dir,
			want{spawnNotFound, notFound}, want{spawnNotFound, notFound}},
		{"NUL in an argument", []string{"true", "a\x00b"}, dir,
			want{spawnFailed, "nul byte found in provided data"}, want{spawnFailed, "nul byte found in provided data"}},
	}
	ts := startTestServer(t)
	tc := ts.connect(t)
	for _, tty := range []bool{false, true} {
		for _, c := range cases {
			w := c.pipe
			if tty {
				w = c.pty
			}
			params := map[string]any{"processId": "p", "argv": c.argv, "cwd": fileURI(c.cwd), "env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": tty}
			e := tc.callErr("process/start", params)
			if e.Code != codeInternal || e.Message != w.msg || e.Data == nil || e.Data.Kind != w.kind {
				t.Errorf("tty=%v %s: error %d %q data %+v, want %d %q kind %s", tty, c.name, e.Code, e.Message, e.Data, codeInternal, w.msg, w.kind)
			}
		}
	}
	// The wire form: data before message, as the reference orders it.
	tc.send(`{"jsonrpc":"2.0","id":99,"method":"process/start","params":{"processId":"p","argv":[""],"cwd":` + jsonQuote(fileURI(dir)) + `,"env":{},"tty":false}}`)
	if raw, want := string(tc.waitOther(10*time.Second)), `{"error":{"code":-32603,"data":{"kind":"spawnFailed"},"message":"missing program for pipe spawn"},"id":99}`; raw != want {
		t.Errorf("wire form %s, want %s", raw, want)
	}
	// Errors other than a spawn's carry no data.
	if e := tc.callErr("process/start", map[string]any{"processId": "p", "argv": []string{}, "cwd": fileURI(dir), "env": map[string]string{}, "tty": false}); e.Data != nil {
		t.Errorf("argv [] has data %+v", e.Data)
	}
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestEnvPolicyInheritRefusals words a bad envPolicy.inherit as the reference 0.171 does: it is
// checked as it is decoded (before a missing field is reported), and the variants are named in
// the reference's order.
func TestEnvPolicyInheritRefusals(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	for _, c := range []struct {
		policy map[string]any
		msg    string
	}{
		{map[string]any{"inherit": "bogus"}, "unknown variant `bogus`, expected one of `core`, `all`, `none`"},
		{map[string]any{"inherit": "bogus", "ignoreDefaultExcludes": false, "exclude": []string{}, "set": map[string]string{}, "includeOnly": []string{}}, "unknown variant `bogus`, expected one of `core`, `all`, `none`"},
		{map[string]any{"inherit": 5}, "invalid type: number, expected string or map"},
		{map[string]any{"inherit": nil}, "invalid type: null, expected string or map"},
		{map[string]any{"inherit": "all"}, "missing field `ignoreDefaultExcludes`"},
	} {
		e := tc.callErr("process/start", with(procStart(t, "p", "true"), "envPolicy", c.policy))
		if e.Code != codeInvalidParams || e.Message != c.msg {
			t.Errorf("envPolicy %v: error %d %q, want %d %q", c.policy, e.Code, e.Message, codeInvalidParams, c.msg)
		}
	}
}
