package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the sandbox stage too: the server under test
// re-executes /proc/self/exe, which is this binary.
func TestMain(m *testing.M) {
	if isSandboxStage() {
		runSandboxStage()
	}
	if isFSWorker() {
		runFSWorker()
	}
	if isWatchdog() {
		runWatchdog()
	}
	os.Exit(m.Run())
}

func TestCommandLineErrorsExit2WithOneLine(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--bogus"}, "flag provided but not defined"},
		{"hostname listen", []string{"--listen", "ws://localhost:1"}, "invalid websocket --listen URL `ws://localhost:1`; expected `ws://IP:PORT`"},
		{"other scheme", []string{"--listen", "http://127.0.0.1:1"}, "unsupported --listen URL `http://127.0.0.1:1`; expected `ws://IP:PORT` or `stdio`"},
		{"path in listen", []string{"--listen", "ws://127.0.0.1:1/x"}, "invalid websocket --listen URL"},
		{"bad log level", []string{"--log-level", "loud"}, "invalid --log-level"},
		{"bad ws-auth", []string{"--ws-auth", "magic"}, "ws-auth"},
		{"stray argument", []string{"serve"}, "unexpected argument"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, strings.NewReader(""), &stdout, &stderr)
			if code != 2 {
				t.Errorf("exit %d, want 2 (stderr %q)", code, stderr.String())
			}
			if lines := strings.Count(stderr.String(), "\n"); lines != 1 || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q: want one line containing %q", stderr.String(), tt.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}

func TestVersionFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--version"}, nil, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "exec-server ") {
		t.Errorf("exit %d stdout %q", code, stdout.String())
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestStdioModeLinesAndEOF(t *testing.T) {
	in := strings.Join([]string{
		`{"id":1,"method":"initialize","params":{"clientName":"x"}}`,
		``,
		`   `,
		`{"method":"initialized","params":{}}` + "\r",
		`{nope`,
		`{"id":2,"method":"environment/status","params":null}`,
	}, "\n") // the last line has no newline: it is handled at EOF
	var stdout syncBuffer
	var stderr bytes.Buffer
	code := run([]string{"--listen", "stdio"}, strings.NewReader(in), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 reply lines, got %d: %q", len(lines), stdout.String())
	}
	if !strings.HasPrefix(lines[0], `{"id":1,"result":{"sessionId":`) {
		t.Errorf("initialize reply %s", lines[0])
	}
	if !strings.HasPrefix(lines[1], `{"error":{"code":-32600,"message":"failed to parse JSON-RPC message from exec-server stdio: `) || !strings.HasSuffix(lines[1], `"id":-1}`) {
		t.Errorf("parse error reply %s", lines[1])
	}
	if lines[2] != `{"id":2,"result":{"status":"ready"}}` {
		t.Errorf("status reply %s", lines[2])
	}
}

// buildServer builds the exec-server binary once per test binary run.
var buildServer = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "exec-server-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "exec-server")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &exec.ExitError{Stderr: out}
	}
	return bin, nil
})

// startBinary runs the built server with args and returns it and the first stdout line.
func startBinary(t *testing.T, args ...string) (*exec.Cmd, string, io.WriteCloser) {
	t.Helper()
	bin, err := buildServer()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	cmd := exec.Command(bin, args...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the listen line: %v", err)
	}
	return cmd, strings.TrimSpace(line), stdin
}

func TestBinaryPrintsListenURLAndStopsOnSIGTERM(t *testing.T) {
	cmd, line, _ := startBinary(t, "--listen", "ws://127.0.0.1:0")
	if _, err := parseListen(line); err != nil || strings.HasSuffix(line, ":0") {
		t.Fatalf("first stdout line %q is not the resolved ws://IP:PORT", line)
	}
	ts := &testServer{url: line}
	tc := ts.connect(t)
	tc.mustCall("environment/status", nil)
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second+500*time.Millisecond {
		t.Errorf("took %v to exit after SIGTERM, want about 2 s at most", d)
	}
}

func TestExitOnStdinClose(t *testing.T) {
	cmd, _, stdin := startBinary(t, "--listen", "ws://127.0.0.1:0", "--exit-on-stdin-close")
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server still running 10 s after stdin closed")
	}
}
