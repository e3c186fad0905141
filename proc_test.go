package main

// Process tests: the helpers the proc_*_test.go files share, and process/start itself: output,
// exit and close, method errors (testdata/proc/errors.txt), the environment, program lookup
// and a managed sandbox (docs/protocol.md §6.1, §6.4). The rest is split by behaviour:
// proc_output_test.go, proc_stdin_test.go, proc_kill_test.go, proc_leak_test.go, proc_bench_test.go.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procWait bounds every wait for a process event in these tests; generous for -race on a
// loaded 2-core machine. Nothing waits this long when things work.
const procWait = 60 * time.Second

// procEvent is one process notification as a client decodes it.
type procEvent struct {
	Method    string
	ProcessID string `json:"processId"`
	Seq       uint64 `json:"seq"`
	Stream    string `json:"stream"`
	Chunk     []byte `json:"chunk"`
	ExitCode  *int   `json:"exitCode"`
	Denied    *bool  `json:"sandboxDenied"` // exited only
	Size      int    // the notification's params size in bytes
}

// procEvents returns, in arrival order, the notifications the client got for process id.
func procEvents(tc *testClient, id string) []procEvent {
	var out []procEvent
	key := []byte(`"processId":` + strconv.Quote(id) + `,`)
	for _, n := range tc.notesSnapshot() {
		if !strings.HasPrefix(n.Method, "process/") || !bytes.Contains(n.Params, key) {
			continue
		}
		var e procEvent
		if err := json.Unmarshal(n.Params, &e); err != nil {
			tc.t.Fatalf("%s: %v: %s", n.Method, err, n.Params)
		}
		if e.ProcessID == id {
			e.Method, e.Size = n.Method, len(n.Params)
			out = append(out, e)
		}
	}
	return out
}

// procOutput is all the output notified so far for process id, streams merged.
func procOutput(tc *testClient, id string) string {
	var out []byte
	for _, e := range procEvents(tc, id) {
		out = append(out, e.Chunk...)
	}
	return string(out)
}

// procResult is everything a client saw of one process that closed.
type procResult struct {
	events    []procEvent
	out       map[string][]byte // stream → bytes in seq order
	exitCode  int
	denied    bool // exited's sandboxDenied
	exitedSeq uint64
	closedSeq uint64
}

func (r procResult) stdout() string { return string(r.out["stdout"]) }
func (r procResult) stderr() string { return string(r.out["stderr"]) }
func (r procResult) pty() string    { return string(r.out["pty"]) }

// waitEvent waits for a notification of process id with the given method.
func waitEvent(tc *testClient, id, method string) procEvent {
	tc.t.Helper()
	n, _ := tc.waitNote(0, procWait, func(n testNote) bool {
		return n.Method == method && bytes.Contains(n.Params, []byte(`"processId":`+strconv.Quote(id)+`,`))
	})
	var e procEvent
	json.Unmarshal(n.Params, &e)
	e.Method = method
	return e
}

// waitOutput waits until process id's output on stream contains want.
func waitOutput(tc *testClient, id, stream, want string) {
	tc.t.Helper()
	deadline := time.Now().Add(procWait)
	for from := 0; ; {
		_, i := tc.waitNote(from, time.Until(deadline), func(n testNote) bool { return n.Method == "process/output" })
		from = i + 1
		var got []byte
		for _, e := range procEvents(tc, id) {
			if e.Method == "process/output" && e.Stream == stream {
				got = append(got, e.Chunk...)
			}
		}
		if strings.Contains(string(got), want) {
			return
		}
	}
}

// waitClosed waits for process id's closed notification and checks the event stream's
// invariants: seqs 1, 2, … in arrival order, exactly one exited and one closed, closed last.
func waitClosed(tc *testClient, id string) procResult {
	tc.t.Helper()
	waitEvent(tc, id, "process/closed")
	r := procResult{out: map[string][]byte{}}
	r.events = procEvents(tc, id)
	for i, e := range r.events {
		if e.Seq != uint64(i+1) {
			tc.t.Fatalf("process %s: event %d (%s) has seq %d, want %d", id, i, e.Method, e.Seq, i+1)
		}
		switch e.Method {
		case "process/output":
			if r.closedSeq != 0 {
				tc.t.Fatalf("process %s: output seq %d after closed", id, e.Seq)
			}
			r.out[e.Stream] = append(r.out[e.Stream], e.Chunk...)
		case "process/exited":
			if r.exitedSeq != 0 {
				tc.t.Fatalf("process %s: a second exited", id)
			}
			if e.ExitCode == nil || e.Denied == nil {
				tc.t.Fatalf("process %s: exited lacks exitCode or sandboxDenied", id)
			}
			r.exitedSeq, r.exitCode, r.denied = e.Seq, *e.ExitCode, *e.Denied
		case "process/closed":
			if r.closedSeq != 0 || r.exitedSeq == 0 {
				tc.t.Fatalf("process %s: closed twice, or before exited", id)
			}
			r.closedSeq = e.Seq
		}
	}
	return r
}

// procStart is process/start params with the test defaults: cwd a fresh directory, env the
// server's PATH, pipes.
func procStart(t testing.TB, id string, argv ...string) map[string]any {
	return map[string]any{
		"processId": id,
		"argv":      argv,
		"cwd":       fileURI(t.TempDir()),
		"env":       map[string]string{"PATH": os.Getenv("PATH")},
		"tty":       false,
	}
}

// with returns params with extra fields set.
func with(params map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range params {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// run starts a process and waits for it to close.
func (tc *testClient) run(params map[string]any) procResult {
	tc.t.Helper()
	tc.mustCall("process/start", params)
	return waitClosed(tc, params["processId"].(string))
}

// readResultJSON is a decoded process/read result.
type readResultJSON struct {
	Chunks []struct {
		Seq    uint64 `json:"seq"`
		Stream string `json:"stream"`
		Chunk  []byte `json:"chunk"`
	} `json:"chunks"`
	NextSeq       uint64  `json:"nextSeq"`
	Exited        bool    `json:"exited"`
	ExitCode      *int    `json:"exitCode"`
	Closed        bool    `json:"closed"`
	Failure       *string `json:"failure"`
	SandboxDenied bool    `json:"sandboxDenied"`
}

func (tc *testClient) read(params map[string]any) readResultJSON {
	tc.t.Helper()
	var r readResultJSON
	if err := json.Unmarshal(tc.mustCall("process/read", params), &r); err != nil {
		tc.t.Fatal(err)
	}
	return r
}

func b64(s string) string { return encodeBase64([]byte(s)) }

func encodeBase64(b []byte) string {
	out, _ := json.Marshal(b)
	return string(out[1 : len(out)-1])
}

// pidGone reports whether pid no longer runs (gone, or a zombie awaiting its reaper).
func pidGone(pid int) bool {
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return runtime.GOOS == "linux"
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// waitPidGone waits until pid no longer runs. There is no event to await for a process
// that is not our child, so this polls.
func waitPidGone(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(procWait)
	for !pidGone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func firstLineInt(t testing.TB, s string) int {
	t.Helper()
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	n, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("want a number on the first line of %q", s)
	}
	return n
}

func TestProcessStartStreamsOutputExitAndClose(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	res := tc.mustCall("process/start", procStart(t, "p1", "sh", "-c", "echo hi; echo err >&2; exit 3"))
	if string(res) != `{"processId":"p1","sandboxType":"none"}` {
		t.Errorf("start result %s", res)
	}
	r := waitClosed(tc, "p1")
	if r.stdout() != "hi\n" || r.stderr() != "err\n" || r.exitCode != 3 || r.closedSeq != 4 {
		t.Errorf("stdout %q stderr %q exit %d closed seq %d", r.stdout(), r.stderr(), r.exitCode, r.closedSeq)
	}
	got := string(tc.mustCall("process/read", map[string]any{"processId": "p1"}))
	for _, want := range []string{`"stream":"stdout","chunk":"aGkK"`, `"stream":"stderr","chunk":"ZXJyCg=="`,
		`],"nextSeq":5,"exited":true,"exitCode":3,"closed":true,"failure":null,"sandboxDenied":false}`} {
		if !strings.Contains(got, want) {
			t.Errorf("read result %s lacks %s", got, want)
		}
	}
	if n := tc.notesSnapshot(); !strings.HasSuffix(string(n[len(n)-1].Params), `{"processId":"p1","seq":4}`) {
		t.Errorf("closed params %s", n[len(n)-1].Params)
	}
}

// TestProcessErrorVectors replays testdata/proc/errors.txt.
func TestProcessErrorVectors(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "noexec"), []byte("#!/bin/sh\n"), 0o644)
	subst := strings.NewReplacer("$CWD", fileURI(dir), "$DIR", dir, "$FILE", fileURI(filepath.Join(dir, "file")),
		"$NOEXEC", filepath.Join(dir, "noexec"), "$GOOS", runtime.GOOS, "$SANDBOX_TYPE", platformSandboxType())
	cases := readVectors(t, "testdata/proc/errors.txt")
	for _, c := range cases {
		c.only(t, "name", "method", "params", "result", "error")
		for k, v := range c.fields {
			c.fields[k] = subst.Replace(v)
		}
		res, rerr := tc.call(c.field(t, "method"), json.RawMessage(c.field(t, "params")))
		c.checkCall(t, c.name(), res, rerr)
	}
	if len(cases) < 30 {
		t.Fatalf("only %d cases parsed", len(cases))
	}
}

func TestProcessEnvironment(t *testing.T) {
	t.Setenv("EXEC_TEST_PLAIN", "plain")
	t.Setenv("EXEC_TEST_API_KEY", "secret")
	t.Setenv("CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE", "1")
	ts := startTestServer(t)
	tc := ts.connect(t)
	policy := func(inherit string, ignoreDefault bool, exclude []string, set map[string]string, includeOnly []string) map[string]any {
		return map[string]any{"inherit": inherit, "ignoreDefaultExcludes": ignoreDefault, "exclude": exclude, "set": set, "includeOnly": includeOnly}
	}
	none := []string{}
	tests := []struct {
		name    string
		env     map[string]string
		policy  map[string]any
		tty     bool
		want    []string // lines that must appear
		wantNot []string // variable names that must not
		exact   string   // the whole output, when set
	}{
		{name: "env is the exact environment", env: map[string]string{"A": "1"}, exact: "A=1\n"},
		{name: "empty env is empty", env: map[string]string{}, exact: ""},
		{name: "pty adds SHELL", env: map[string]string{"PATH": os.Getenv("PATH")}, tty: true, want: []string{"SHELL=" + hostEnvironment().Shell.Path}},
		{name: "pty keeps a given SHELL", env: map[string]string{"PATH": os.Getenv("PATH"), "SHELL": "/bin/zz"}, tty: true, want: []string{"SHELL=/bin/zz"}},
		{name: "policy none, set, env on top", env: map[string]string{"Y": "env"}, policy: policy("none", false, none, map[string]string{"X": "set", "Y": "set"}, none),
			exact: "X=set\nY=env\n"},
		{name: "policy all drops secrets and server variables", env: map[string]string{}, policy: policy("all", false, none, map[string]string{}, none),
			want: []string{"EXEC_TEST_PLAIN=plain"}, wantNot: []string{"EXEC_TEST_API_KEY", "CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE"}},
		{name: "policy all with ignoreDefaultExcludes keeps secrets", env: map[string]string{}, policy: policy("all", true, none, map[string]string{}, none),
			want: []string{"EXEC_TEST_PLAIN=plain", "EXEC_TEST_API_KEY=secret"}},
		{name: "policy exclude matches case-insensitively", env: map[string]string{}, policy: policy("all", true, []string{"exec_test_pl*"}, map[string]string{}, none),
			want: []string{"EXEC_TEST_API_KEY=secret"}, wantNot: []string{"EXEC_TEST_PLAIN"}},
		{name: "policy includeOnly keeps only matches", env: map[string]string{"OTHER": "o"}, policy: policy("all", true, none, map[string]string{"EXEC_TEST_SET": "s"}, []string{"EXEC_TEST_?LAIN", "*_SET"}),
			exact: "EXEC_TEST_PLAIN=plain\nEXEC_TEST_SET=s\nOTHER=o\n"},
		{name: "policy core keeps the core set", env: map[string]string{}, policy: policy("core", false, none, map[string]string{}, none),
			want: []string{"PATH=" + os.Getenv("PATH")}, wantNot: []string{"EXEC_TEST_PLAIN", "EXEC_TEST_API_KEY"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("env%d", i)
			params := with(procStart(t, id, "env"), "env", tt.env, "tty", tt.tty)
			if tt.policy != nil {
				params["envPolicy"] = tt.policy
			}
			r := tc.run(params)
			out := strings.ReplaceAll(r.stdout()+r.pty(), "\r\n", "\n")
			if tt.exact != "" || (tt.want == nil && tt.wantNot == nil) {
				lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
				sort.Strings(lines)
				if got := strings.Join(lines, "\n") + "\n"; got != tt.exact && !(tt.exact == "" && out == "") {
					t.Errorf("environment %q, want %q", out, tt.exact)
				}
			}
			for _, w := range tt.want {
				if !strings.Contains("\n"+out, "\n"+w+"\n") {
					t.Errorf("environment lacks %s:\n%s", w, out)
				}
			}
			for _, k := range tt.wantNot {
				if strings.Contains("\n"+out, "\n"+k+"=") {
					t.Errorf("environment has %s:\n%s", k, out)
				}
			}
		})
	}
}

func TestProcessProgramLookupAndArg0(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "hello-prog"), []byte("#!/bin/sh\necho from-path $0\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "local.sh"), []byte("#!/bin/sh\necho local\n"), 0o755)
	hostPath := os.Getenv("PATH")
	tests := []struct {
		name   string
		params map[string]any
		want   string
	}{
		{"pipe arg0 sets only argv[0]", with(procStart(t, "a1", "sh", "-c", "echo $0"), "arg0", "zzz"), "zzz\n"},
		{"pty arg0 is the program run", with(procStart(t, "a2", "no-such-program-a2", "-c", "echo $0"), "arg0", "sh", "tty", true), "sh\r\n"},
		{"relative path resolves against cwd", with(procStart(t, "a3", "./local.sh"), "cwd", fileURI(dir)), "local\n"},
		{"child PATH is searched", with(procStart(t, "a4", "hello-prog"), "env", map[string]string{"PATH": dir + ":" + hostPath}), "from-path " + filepath.Join(dir, "hello-prog") + "\n"},
		{"server PATH when the child has none", with(procStart(t, "a5", "sh", "-c", "echo ok"), "env", map[string]string{}), "ok\n"},
		{"native absolute cwd is accepted", with(procStart(t, "a6", "pwd"), "cwd", dir), dir + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tc.run(tt.params)
			if got := r.stdout() + r.pty(); got != tt.want || r.exitCode != 0 {
				t.Errorf("output %q exit %d, want %q", got, r.exitCode, tt.want)
			}
		})
	}
}

// TestProcessManagedSandbox: by default a managed sandbox is enforced (a write outside the
// working directory fails, and process/start answers the platform's sandboxType); with
// --managed-sandbox run-unsandboxed the command runs without one and the answer is "none",
// in both modes (docs/sandbox.md §8).
func TestProcessManagedSandbox(t *testing.T) {
	requireSandbox(t)
	for _, unsandboxed := range []bool{false, true} {
		for _, tty := range []bool{false, true} {
			t.Run(fmt.Sprintf("run-unsandboxed=%v tty=%v", unsandboxed, tty), func(t *testing.T) {
				tc := startTestServer(t, func(s *server) { s.cfg.runManagedUnsandboxed = unsandboxed }).connect(t)
				ws, outside := t.TempDir(), t.TempDir()
				managed := map[string]any{
					"permissions": map[string]any{
						"type":    "managed",
						"network": "restricted",
						"file_system": map[string]any{"type": "restricted", "entries": []any{
							map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "root"}}, "access": "read"},
							map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "current_working_directory"}}, "access": "write"},
						}},
					},
					"windowsSandboxLevel": "disabled",
					"cwd":                 fileURI(ws),
				}
				params := with(procStart(t, "m", "sh", "-c", "echo ran; echo in > in; echo out > "+outside+"/out"), "cwd", fileURI(ws), "tty", tty, "sandbox", managed)
				res, err := tc.call("process/start", params)
				if err != nil {
					t.Fatalf("error %d %s", err.Code, err.Message)
				}
				want := platformSandboxType()
				if unsandboxed {
					want = sandboxTypeNone
				}
				if string(res) != `{"processId":"m","sandboxType":"`+want+`"}` {
					t.Errorf("result %s, want sandboxType %s", res, want)
				}
				r := waitClosed(tc, "m")
				if out := r.stdout() + r.pty(); !strings.Contains(out, "ran") {
					t.Errorf("output %q, exit code %d", out, r.exitCode)
				}
				if _, err := os.Stat(filepath.Join(ws, "in")); err != nil {
					t.Errorf("the write inside the working directory failed: %v", err)
				}
				_, statErr := os.Stat(filepath.Join(outside, "out"))
				if wrote := statErr == nil; wrote != unsandboxed {
					t.Errorf("write outside happened: %v, want %v", wrote, unsandboxed)
				}
			})
		}
	}
}

// requireSandbox skips a test that needs this host's sandbox when the kernel offers no
// mechanism (no user namespaces and no Landlock), saying which.
func requireSandbox(t *testing.T) {
	t.Helper()
	sbx, _ := newSandboxer("isolate", "")
	if !sbx.enforces() {
		t.Skipf("no sandbox mechanism on this host: %s", sbx.describe())
	}
}
