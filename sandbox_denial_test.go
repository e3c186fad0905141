package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// disabledSandbox is the cheapest sandbox object: it confines nothing, yet, as in 0.169, it
// makes the process sandboxed for sandboxType and the denial heuristic (docs/sandbox.md §2).
var disabledSandbox = map[string]any{"permissions": map[string]any{"type": "disabled"}, "windowsSandboxLevel": "disabled"}

// TestSandboxDeniedRules is docs/sandbox.md §4, rule by rule, on whole texts.
func TestSandboxDeniedRules(t *testing.T) {
	b := func(s string) []byte { return []byte(s) }
	tests := []struct {
		name    string
		typ     string
		code    int
		outputs [][]byte
		want    bool
	}{
		{"no sandbox", sandboxTypeNone, 1, [][]byte{b("permission denied")}, false},
		{"no sandbox decided", "", 1, [][]byte{b("permission denied")}, false},
		{"exit 0 with a keyword", sandboxTypeLinux, 0, [][]byte{b("Permission denied")}, false},
		{"keyword in stderr", sandboxTypeLinux, 1, [][]byte{nil, b("cp: x: Permission denied\n")}, true},
		{"keyword in stdout", sandboxTypeLinux, 1, [][]byte{b("touch: Read-Only File System"), nil}, true},
		{"each keyword, upper case", sandboxTypeLinux, 1, [][]byte{b("SECCOMP")}, true},
		{"sandbox", sandboxTypeMacOS, 1, [][]byte{b("no sandbox here")}, true},
		{"landlock", sandboxTypeLinux, 3, [][]byte{b("LandLock says no")}, true},
		{"operation not permitted", sandboxTypeLinux, 1, [][]byte{b("Operation not permitted")}, true},
		{"failed to write file", sandboxTypeLinux, 1, [][]byte{b("Failed To Write File")}, true},
		{"keyword before the quick reject: 126", sandboxTypeLinux, 126, [][]byte{b("sh: 1: ./x: Permission denied")}, true},
		{"keyword before the quick reject: 2", sandboxTypeLinux, 2, [][]byte{b("no sandbox here")}, true},
		{"keyword before the quick reject: 127", sandboxTypeLinux, 127, [][]byte{b("Failed To Write File")}, true},
		{"quick reject 2", sandboxTypeLinux, 2, [][]byte{b("usage")}, false},
		{"quick reject 126", sandboxTypeLinux, 126, nil, false},
		{"quick reject 127", sandboxTypeLinux, 127, [][]byte{b("not found")}, false},
		{"SIGSYS on Linux", sandboxTypeLinux, 159, nil, true},
		{"SIGSYS number elsewhere", sandboxTypeMacOS, 159, nil, false},
		{"other failure", sandboxTypeLinux, 1, [][]byte{b("error: no such file")}, false},
		{"a keyword with its words apart", sandboxTypeLinux, 1, [][]byte{b("permission  denied")}, false},
		{"texts are separate", sandboxTypeLinux, 1, [][]byte{b("permission "), b("denied")}, false},
		{"non-ASCII around a keyword", sandboxTypeLinux, 1, [][]byte{b("\xff\xfePERMISSION DENIED\xc3")}, true},
		{"a keyword cut short at the end", sandboxTypeLinux, 1, [][]byte{b("read-only file syste")}, false},
	}
	for _, tt := range tests {
		if got := sandboxDenied(tt.typ, tt.code, tt.outputs...); got != tt.want {
			t.Errorf("%s: sandboxDenied(%q, %d, %q) = %v, want %v", tt.name, tt.typ, tt.code, tt.outputs, got, tt.want)
		}
	}
}

func TestDenialKeywordsFitTheScanner(t *testing.T) {
	var first uint64
	for _, kw := range denialKeywords {
		if len(kw) > denialKeywordMaxLen || kw != strings.ToLower(kw) || kw[0] < 'a' || kw[0] > 'z' {
			t.Errorf("keyword %q: longer than denialKeywordMaxLen, not lower case, or not starting with a letter", kw)
		}
		first |= 1<<(kw[0]-64) | 1<<(kw[0]-'a'+'A'-64)
	}
	if first != denialFirstBytes {
		t.Errorf("denialFirstBytes is %#x, the keywords' first letters make %#x", denialFirstBytes, first)
	}
}

// TestKeywordScannerStraddles splits every keyword, in mixed case and inside other text, at
// every point into two pieces, and into three with a short middle piece: the scanner finds it
// whatever the pieces. Near misses split the same way are never found.
func TestKeywordScannerStraddles(t *testing.T) {
	scan := func(pieces ...string) bool {
		var s keywordScanner
		for _, p := range pieces {
			s.write([]byte(p))
		}
		return s.found
	}
	texts := map[string]bool{"x: sandbox!": true, "open: PERMISSION denied (os error 13)": true, "no sand box": false, "permission denie": false}
	for _, kw := range denialKeywords {
		texts["prefix "+strings.ToUpper(kw[:1])+kw[1:]+" suffix"] = true
	}
	for text, want := range texts {
		for i := 0; i <= len(text); i++ {
			if got := scan(text[:i], text[i:]); got != want {
				t.Errorf("%q split at %d: found %v, want %v", text, i, got, want)
			}
			for j := i; j <= min(i+3, len(text)); j++ {
				if got := scan(text[:i], text[i:j], "", text[j:]); got != want {
					t.Errorf("%q split at %d and %d: found %v, want %v", text, i, j, got, want)
				}
			}
		}
		one := make([]string, len(text)) // a byte-at-a-time writer
		for i := range text {
			one[i] = text[i : i+1]
		}
		if got := scan(one...); got != want {
			t.Errorf("%q a byte at a time: found %v, want %v", text, got, want)
		}
	}
}

// newDetachedProcess is a process of a session no connection is attached to, for feeding
// output straight to p.output.
func newDetachedProcess(id string, tty bool) *process {
	srv := newServer(context.Background(), serverConfig{sessionTTL: time.Minute, retention: time.Minute}, nil)
	sess := &session{id: id, srv: srv}
	sess.procs = newProcTable(sess)
	return newProcess(sess.procs, id, tty, time.Minute)
}

// TestRetainedDenialKeyword checks the scan of the retained chunks: keywords straddling two
// chunks, and the three texts the reference checks (stdout, stderr, both in arrival order)
// kept apart.
func TestRetainedDenialKeyword(t *testing.T) {
	type chunk struct {
		stream streamKind
		data   string
	}
	out := func(s string) chunk { return chunk{streamStdout, s} }
	errs := func(s string) chunk { return chunk{streamStderr, s} }
	pty := func(s string) chunk { return chunk{streamPTY, s} }
	// big is a large chunk with a keyword well inside it.
	big := strings.Repeat("x", 3068) + "Sandbox" + strings.Repeat("y", 3072)
	tests := []struct {
		name   string
		chunks []chunk
		want   bool
	}{
		{"nothing", nil, false},
		{"one chunk", []chunk{errs("rm: cannot remove 'x': Read-only file system\n")}, true},
		{"straddles two stdout chunks", []chunk{out("touch: Permission d"), out("enied\n")}, true},
		{"straddles two stderr chunks", []chunk{errs("landl"), errs("ock")}, true},
		{"straddles two PTY chunks", []chunk{pty("oper"), pty("ation not permitted")}, true},
		{"straddles many one-byte chunks", []chunk{pty("s"), pty("E"), pty("c"), pty("c"), pty("o"), pty("m"), pty("p")}, true},
		{"stdout's text, stderr between", []chunk{out("permission "), errs("x"), out("denied")}, true},
		{"stderr's text, stdout between", []chunk{errs("failed to "), out("x"), errs("write file")}, true},
		{"arrival order's text, across streams", []chunk{out("sand"), errs("box")}, true},
		{"in no one text", []chunk{out("sand"), errs("x"), out("x"), errs("box")}, false},
		{"inside a large chunk", []chunk{out(big)}, true},
		{"large and clean", []chunk{out(strings.Repeat("permission granted ", 1000)), errs(strings.Repeat("sand", 1000))}, false},
	}
	for _, tt := range tests {
		p := newDetachedProcess("d", false)
		for _, c := range tt.chunks {
			p.output(c.stream, []byte(c.data))
		}
		p.sendMu.Lock()
		got := p.retainedDenialKeyword()
		p.sendMu.Unlock()
		if got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestRetainedDenialKeywordAllocations: scanning a full megabyte of retained output copies
// nothing the size of the output.
func TestRetainedDenialKeywordAllocations(t *testing.T) {
	p := newDetachedProcess("a", false)
	chunk := bytes.Repeat([]byte("no keyword in this line at all\n"), readChunkMax/31)
	for range retainedOutputLimit / len(chunk) {
		p.output(streamStdout, chunk)
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if allocs := testing.AllocsPerRun(5, func() {
		if p.retainedDenialKeyword() {
			t.Fatal("found a keyword")
		}
	}); allocs != 0 {
		t.Errorf("%v allocations per scan", allocs)
	}
}

func BenchmarkRetainedDenialKeyword(b *testing.B) {
	p := newDetachedProcess("b", false)
	chunk := bytes.Repeat([]byte("Some Ordinary Output, Line By Line\n"), readChunkMax/35)
	for range retainedOutputLimit / len(chunk) {
		p.output(streamStdout, chunk)
		p.output(streamStderr, chunk[:100])
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	b.SetBytes(int64(p.out.bytes))
	b.ReportAllocs()
	for b.Loop() {
		if p.retainedDenialKeyword() {
			b.Fatal("found a keyword")
		}
	}
}

// TestProcessSandboxDenied runs the heuristic's cases (docs/sandbox.md §4) as real processes
// under a sandbox object: exited carries the verdict, and process/read says the same after.
func TestProcessSandboxDenied(t *testing.T) {
	tc := startTestServer(t).connect(t)
	linux := runtime.GOOS == "linux"
	sigsys := 128 + int(syscall.SIGSYS)
	tests := []struct {
		name    string
		script  string
		tty     bool
		sandbox bool
		code    int
		want    bool
	}{
		{"keyword on stderr, exit 1", "echo permission denied >&2; exit 1", false, true, 1, true},
		{"keyword on stdout, exit 1", "echo 'touch: /x: Read-only file system'; exit 1", false, true, 1, true},
		{"exit 0 with a keyword", "echo permission denied >&2; exit 0", false, true, 0, false},
		{"exit 2, no keyword", "echo usage >&2; exit 2", false, true, 2, false},
		{"exit 126 with Permission denied", "echo Permission denied >&2; exit 126", false, true, 126, true},
		{"exit 2 with no sandbox here", "echo no sandbox here; exit 2", false, true, 2, true},
		{"exit 127 with Failed To Write File", "echo Failed To Write File >&2; exit 127", false, true, 127, true},
		{"kill -SYS $$", "kill -SYS $$", false, true, sigsys, linux},
		{"exit 159", "exit 159", false, true, 159, linux},
		{"exit 1, no keyword", "echo nope; exit 1", false, true, 1, false},
		{"no sandbox object", "echo permission denied >&2; exit 1", false, false, 1, false},
		{"PTY keyword", "echo permission denied; exit 1", true, true, 1, true},
		{"PTY, no sandbox object", "echo permission denied; exit 1", true, false, 1, false},
	}
	for i, tt := range tests {
		id := fmt.Sprintf("d%d", i)
		params := with(procStart(t, id, "sh", "-c", tt.script), "tty", tt.tty)
		wantType := sandboxTypeNone
		if tt.sandbox {
			params["sandbox"] = disabledSandbox
			wantType = platformSandboxType()
		}
		if res := tc.mustCall("process/start", params); string(res) != `{"processId":"`+id+`","sandboxType":"`+wantType+`"}` {
			t.Errorf("%s: start result %s", tt.name, res)
		}
		r := waitClosed(tc, id)
		if r.exitCode != tt.code || r.denied != tt.want {
			t.Errorf("%s: exited with %d, sandboxDenied %v; want %d, %v (output %q)", tt.name, r.exitCode, r.denied, tt.code, tt.want, r.stdout()+r.stderr()+r.pty())
		}
		if rr := tc.read(map[string]any{"processId": id}); rr.SandboxDenied != tt.want || !rr.Closed {
			t.Errorf("%s: process/read after close says sandboxDenied %v, closed %v", tt.name, rr.SandboxDenied, rr.Closed)
		}
	}
}

// TestProcessSandboxDeniedLateOutputIgnored is the reference's `(sleep 0.3; echo permission
// denied >&2) & exit 1` (docs/sandbox.md §4, "Timing"), without the sleep: the background
// job writes only once the test saw exited, so its keyword comes after the verdict, which
// stays false; the process closes once the job ends.
func TestProcessSandboxDeniedLateOutputIgnored(t *testing.T) {
	tc := startTestServer(t).connect(t)
	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	params := with(procStart(t, "late", "sh", "-c", `(cat "$1" >/dev/null; echo permission denied >&2) & exit 1`, "sh", fifo), "sandbox", disabledSandbox)
	tc.mustCall("process/start", params)
	exited := waitEvent(tc, "late", "process/exited")
	if exited.Denied == nil || *exited.Denied || *exited.ExitCode != 1 {
		t.Fatalf("exited %+v, want exit 1 and sandboxDenied false", exited)
	}
	if rr := tc.read(map[string]any{"processId": "late"}); !rr.Exited || rr.SandboxDenied {
		t.Errorf("process/read after exit: exited %v, sandboxDenied %v", rr.Exited, rr.SandboxDenied)
	}
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0) // lets the job go on
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	r := waitClosed(tc, "late")
	if r.stderr() != "permission denied\n" || r.denied {
		t.Errorf("stderr %q, sandboxDenied %v", r.stderr(), r.denied)
	}
	if rr := tc.read(map[string]any{"processId": "late"}); !rr.Closed || rr.SandboxDenied || len(rr.Chunks) != 1 {
		t.Errorf("process/read after close: %+v", rr)
	}
}

// TestProcessSandboxDeniedFalseUntilExit: process/read reports sandboxDenied false while the
// process runs, whatever it printed, and the verdict once it exited.
func TestProcessSandboxDeniedFalseUntilExit(t *testing.T) {
	tc := startTestServer(t).connect(t)
	params := with(procStart(t, "run", "sh", "-c", "echo permission denied >&2; read x; exit 1"), "pipeStdin", true, "sandbox", disabledSandbox)
	tc.mustCall("process/start", params)
	waitOutput(tc, "run", "stderr", "permission denied")
	if rr := tc.read(map[string]any{"processId": "run"}); rr.Exited || rr.SandboxDenied {
		t.Errorf("running: exited %v, sandboxDenied %v", rr.Exited, rr.SandboxDenied)
	}
	tc.mustCall("process/write", map[string]any{"processId": "run", "chunk": b64("\n"), "writeId": "w"})
	if r := waitClosed(tc, "run"); r.exitCode != 1 || !r.denied {
		t.Errorf("exit %d, sandboxDenied %v", r.exitCode, r.denied)
	}
	if rr := tc.read(map[string]any{"processId": "run"}); !rr.Exited || !rr.SandboxDenied {
		t.Errorf("exited: exited %v, sandboxDenied %v", rr.Exited, rr.SandboxDenied)
	}
}
