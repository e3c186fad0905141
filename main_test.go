package main

import (
	"bufio"
	"bytes"
	"flag"
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
		{"unknown flag", []string{"--bogus"}, "exec-server: flag provided but not defined: -bogus; run exec-server --help"},
		{"bad value", []string{"--session-ttl", "soon"}, `invalid value "soon" for flag -session-ttl`},
		{"hostname listen", []string{"--listen", "ws://example.com:1"}, "invalid websocket --listen URL `ws://example.com:1`; expected `ws://IP:PORT`"},
		{"localhost without port", []string{"--listen", "ws://localhost"}, "invalid websocket --listen URL `ws://localhost`"},
		{"executor-id differs", []string{"--executor-id", "a", "--environment-id", "b"}, `--executor-id "a" and --environment-id "b" differ`},
		{"strict config key", []string{"--strict-config", "-c", "sandbox_mode=read-only"}, `--strict-config: config key "sandbox_mode" has no effect on this server`},
		{"strict enable", []string{"--enable", "respect_system_proxy", "--strict-config"}, `--strict-config: feature "respect_system_proxy" has no effect`},
		{"strict disable", []string{"--strict-config", "--disable", "x"}, `--strict-config: feature "x" has no effect`},
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
			if !strings.HasPrefix(stderr.String(), "exec-server: ") || !strings.HasSuffix(stderr.String(), "; run exec-server --help\n") {
				t.Errorf("stderr %q: want exec-server: …; run exec-server --help", stderr.String())
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

func TestHelpPrintsUsageOnStdout(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "-help"} {
		t.Run(arg, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run([]string{arg}, strings.NewReader(""), &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d, want 0 (stderr %q)", code, stderr.String())
			}
			if stderr.Len() != 0 {
				t.Errorf("stderr %q, want nothing", stderr.String())
			}
			out := stdout.String()
			for _, want := range []string{
				"exec-server [--listen ws://IP:PORT] [flags]",
				"exec-server --listen stdio [flags]",
				"exec-server --remote URL --environment-id ID [flags]",
				"exec-server sandbox [flags] -- CMD ARGS...",
				"\nlistening:\n", "\nwebsocket auth:\n", "\nsessions and limits:\n", "\nremote mode:\n",
				"\nsandbox:\n", "\nlogging:\n", "\ncompatibility with codex exec-server:\n",
				"  --listen URL\n", "(default ws://127.0.0.1:0)", "(default 1m20s)", "(default info)",
				"  -c key=value\n", "--executor-id, the exec-server README's name, is --environment-id", "  --config key=value\n", "  --proxy-private-ips-via-upstream\n",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("--help lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestHelpNamesEveryFlag: a flag registered but missing from flagGroups would be missing from
// --help; a name in flagGroups that is no flag is a typo.
func TestHelpNamesEveryFlag(t *testing.T) {
	fs := newFlagSet(&cliOptions{})
	new(forwardConfig).registerFlags(fs) // `exec-server forward` adds its own
	grouped := map[string]int{}
	for _, g := range flagGroups {
		for _, name := range g.names {
			grouped[name]++
			if fs.Lookup(name) == nil {
				t.Errorf("group %q names %q, which is not a flag", g.title, name)
			}
		}
	}
	var help bytes.Buffer
	writeUsage(&help, fs, false)
	writeUsage(&help, fs, true)
	fs.VisitAll(func(f *flag.Flag) {
		switch grouped[f.Name] {
		case 0:
			t.Errorf("flag --%s is in no group of --help (flagGroups in cli.go)", f.Name)
		case 1:
		default:
			t.Errorf("flag --%s is in %d groups", f.Name, grouped[f.Name])
		}
		dashes := "--"
		if len(f.Name) == 1 {
			dashes = "-"
		}
		if !strings.Contains(help.String(), "\n  "+dashes+f.Name+" ") && !strings.Contains(help.String(), "\n  "+dashes+f.Name+"\n") {
			t.Errorf("--help does not show %s%s", dashes, f.Name)
		}
	})
}

func TestSandboxHelpAndBadFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"sandbox", "--help"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("sandbox --help: exit %d (stderr %q)", code, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "usage: exec-server sandbox ") || !strings.Contains(stdout.String(), "  --writable DIR\n") || stderr.Len() != 0 {
		t.Errorf("sandbox --help: stdout %q stderr %q", stdout.String(), stderr.String())
	}
	for _, args := range [][]string{{"sandbox", "--bogus"}, {"sandbox"}, {"sandbox", "--read-only", "--writable", ".", "--", "true"}} {
		stdout.Reset()
		stderr.Reset()
		code := run(args, nil, &stdout, &stderr)
		if code != 2 || strings.Count(stderr.String(), "\n") != 1 || stdout.Len() != 0 ||
			!strings.HasPrefix(stderr.String(), "exec-server sandbox: ") || !strings.HasSuffix(stderr.String(), "; run exec-server sandbox --help\n") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q: want 2 and one line", args, code, stdout.String(), stderr.String())
		}
	}
}

// runListening runs run in this process with --exit-on-stdin-close and the given args, and
// returns the line it prints on stdout; closing the returned stdin stops it, and the test's
// end waits for that.
func runListening(t *testing.T, args ...string) (line string, stderr *syncBuffer) {
	t.Helper()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	stderr = &syncBuffer{}
	exited := make(chan int, 1)
	go func() {
		exited <- run(append(args, "--exit-on-stdin-close"), stdinR, stdoutW, stderr)
		stdoutW.Close()
	}()
	t.Cleanup(func() {
		stdinW.Close()
		select {
		case code := <-exited:
			if code != 0 {
				t.Errorf("exit %d: %s", code, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Errorf("still running 10 s after stdin closed")
		}
	})
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the listen line: %v (stderr %s)", err, stderr.String())
	}
	go io.Copy(io.Discard, stdoutR)
	return strings.TrimSuffix(line, "\n"), stderr
}

func TestListenForms(t *testing.T) {
	for _, tt := range []struct{ listen, wantHost string }{
		{"ws://localhost:0", "127.0.0.1"}, // the reference refuses a hostname; here it means 127.0.0.1
		{"ws://0.0.0.0:0", "0.0.0.0"},     // echoed as given, not as [::]
		{"ws://127.0.0.1:0", "127.0.0.1"},
	} {
		t.Run(tt.listen, func(t *testing.T) {
			line, _ := runListening(t, "--listen", tt.listen)
			addr, err := parseListen(line)
			if err != nil || addr.Addr().String() != tt.wantHost || addr.Port() == 0 {
				t.Fatalf("printed %q: want ws://%s:PORT with the port bound", line, tt.wantHost)
			}
			tc := (&testServer{url: line}).connect(t)
			tc.mustCall("environment/status", nil)
			tc.close()
		})
	}
}

func TestListenStdioURLForm(t *testing.T) {
	var stdout, stderr syncBuffer
	in := `{"id":1,"method":"initialize","params":{"clientName":"x"}}` + "\n"
	if code := run([]string{"--listen", "stdio://"}, strings.NewReader(in), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), `{"id":1,"result":{"sessionId":`) {
		t.Errorf("stdout %q: want the initialize reply", stdout.String())
	}
}

// TestCompatFlagsAccepted: the flags codex exec-server takes for its configuration are
// accepted; what they ask for is logged once at start-up, as a warning.
func TestCompatFlagsAccepted(t *testing.T) {
	var stdout, stderr syncBuffer
	in := `{"id":1,"method":"initialize","params":{"clientName":"x"}}` + "\n"
	args := []string{"--listen", "stdio", "-c", "sandbox_mode=workspace-write", "-c", `model="o3"`,
		"--enable", "respect_system_proxy", "--disable", "shell_snapshot", "--concurrent-requests", "4"}
	if code := run(args, strings.NewReader(in), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), `{"id":1,"result":{"sessionId":`) {
		t.Errorf("stdout %q: want the initialize reply", stdout.String())
	}
	var warnings []string
	for line := range strings.Lines(stderr.String()) {
		if strings.Contains(line, "no effect on this server") {
			warnings = append(warnings, line)
		}
	}
	want := []string{"level=WARN", "config=sandbox_mode,model", "enable=respect_system_proxy", "disable=shell_snapshot"}
	if len(warnings) != 1 {
		t.Fatalf("want one warning, got %q", warnings)
	}
	for _, w := range want {
		if !strings.Contains(warnings[0], w) {
			t.Errorf("warning %q lacks %q", warnings[0], w)
		}
	}
}

func TestExecutorIDIsEnvironmentID(t *testing.T) {
	for _, args := range [][]string{
		{"--executor-id", "box-1"},
		{"--environment-id", "box-1"},
		{"--executor-id", "box-1", "--environment-id", "box-1"},
	} {
		var o cliOptions
		if _, err := parseFlags(args, &o); err != nil {
			t.Errorf("%q: %v", args, err)
		} else if o.remote.environmentID != "box-1" || !o.remote.enabled() {
			t.Errorf("%q: environment id %q, remote mode %v", args, o.remote.environmentID, o.remote.enabled())
		}
	}
}
