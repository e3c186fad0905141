package main

// Helpers of the Linux sandbox tests (docs/sandbox.md §9): the fixture outside /tmp, the server
// and CLI runners, the network probe run inside the sandbox, PTY sessions and host pid lookups.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sbFixture is one row's world: a workspace and its surroundings, outside /tmp.
type sbFixture struct {
	base      string   // holds the rest
	ws        string   // the workspace: cwd, project root, --writable
	outside   string   // a sibling of ws
	tmp       string   // the command's TMPDIR
	roots     []string // the writable project roots: ws, and what a row adds
	homeProbe string   // a file in $HOME that must never appear
	slashTmp  string   // a file in /tmp the workspace-write profile may write
	tcp       net.Listener
	udp       net.PacketConn
	unix      *net.UnixListener
	leakFD    int // a descriptor of outside open in this process without close-on-exec
}

func newSBFixture(t *testing.T) *sbFixture {
	t.Helper()
	base := sbBaseDir(t)
	f := &sbFixture{base: base, ws: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside"), tmp: filepath.Join(base, "tmp")}
	for _, d := range []string{f.ws, f.outside, f.tmp} {
		mustMkdir(t, d)
	}
	f.roots = []string{f.ws}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		home = "/root"
	}
	name := "exec-server-sbtest-" + filepath.Base(base)
	f.homeProbe = filepath.Join(home, name)
	f.slashTmp = filepath.Join("/tmp", name)
	t.Cleanup(func() { os.Remove(f.homeProbe) }) // only there if the sandbox failed
	return f
}

// sbBaseDir makes a directory for one fixture outside /tmp and outside os.TempDir: in
// workspace-write, both are writable.
func sbBaseDir(t *testing.T) string {
	t.Helper()
	home, _ := os.UserHomeDir()
	for _, parent := range []string{"/var/tmp", home} {
		if parent == "" {
			continue
		}
		real, err := filepath.EvalSymlinks(parent)
		if err != nil || pathWithin(real, "/tmp") || pathWithin(real, os.TempDir()) {
			continue
		}
		dir, err := os.MkdirTemp(real, "exec-server-sbtest-")
		if err != nil {
			continue
		}
		t.Cleanup(func() {
			if err := os.RemoveAll(dir); err != nil {
				t.Errorf("clean up %s: %v", dir, err)
			}
		})
		return dir
	}
	t.Skip("no writable directory outside /tmp for the fixtures")
	return ""
}

// env is the command's environment: PATH, HOME, TMPDIR, GORACE, and the fixture's paths.
func (f *sbFixture) env() map[string]string {
	home, _ := os.UserHomeDir()
	env := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": home, "TMPDIR": f.tmp, "LANG": "C", "GORACE": sbGORACE,
		"WS": f.ws, "OUT": f.outside, "BASE": f.base, "HOMEPROBE": f.homeProbe, "SLASHTMP": f.slashTmp,
		"PROBE": testBinaryPath, "SERVERPID": strconv.Itoa(os.Getpid()),
	}
	if f.tcp != nil {
		env["TCPADDR"] = f.tcp.Addr().String()
	}
	if f.udp != nil {
		env["UDPADDR"] = f.udp.LocalAddr().String()
	}
	if f.unix != nil {
		env["UNIXADDR"] = f.unix.Addr().String()
	}
	if f.leakFD > 0 {
		env["LEAKFD"] = strconv.Itoa(f.leakFD)
	}
	return env
}

// sandboxObject is the sandbox a driver sends: Codex's objects, or the older SEED
// sandboxPolicy shape (both in docs/sandbox.md §1).
func (f *sbFixture) sandboxObject(mode sbMode, via sbVia, network string) json.RawMessage {
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	if via == viaSeed {
		// network_access for read-only too: this server's decoder requires it, though the
		// oldest read-only policy had no fields at all.
		policy := `{"type":"read-only","network_access":false}`
		if mode == sbWorkspaceWrite {
			policy = fmt.Sprintf(`{"type":"workspace-write","writable_roots":%s,"network_access":%v}`, quote(f.roots), network == "enabled")
		}
		return json.RawMessage(fmt.Sprintf(`{"sandboxPolicy":%s,"sandboxPolicyCwd":%s,"windowsSandboxLevel":"disabled"}`, policy, quote(fileURI(f.ws))))
	}
	if mode == sbReadOnly {
		return json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]},"network":%s},
  "windowsSandboxLevel":"disabled","cwd":%s}`, quote(network), quote(fileURI(f.ws))))
	}
	var roots []string
	for _, r := range f.roots {
		roots = append(roots, fileURI(r))
	}
	return json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"read"},
   {"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"},
   {"path":{"type":"special","value":{"kind":"slash_tmp"}},"access":"write"},
   {"path":{"type":"special","value":{"kind":"tmpdir"}},"access":"write"}]},"network":%s},
  "windowsSandboxLevel":"disabled","cwd":%s,"workspaceRoots":%s}`, quote(network), quote(fileURI(f.ws)), quote(roots)))
}

// sbRun is what one sandboxed run showed.
type sbRun struct {
	exit          int
	out           string // every stream, in order within each
	sandboxType   string
	sandboxDenied bool
}

var sbIDs atomic.Int64

func nextSBID() string { return fmt.Sprintf("sb%d", sbIDs.Add(1)) }

// runServer runs script through process/start on ts, in the workspace, and waits for it to close.
func (f *sbFixture) runServer(t *testing.T, ts *testServer, sandbox json.RawMessage, tty bool, script string) sbRun {
	t.Helper()
	tc := ts.connect(t)
	id := nextSBID()
	res := tc.mustCall("process/start", map[string]any{
		"processId": id, "argv": []string{"sh", "-c", script}, "cwd": fileURI(f.ws), "env": f.env(), "tty": tty, "sandbox": sandbox,
	})
	var sr startResult
	if err := json.Unmarshal(res, &sr); err != nil {
		t.Fatal(err)
	}
	r := waitClosed(tc, id)
	return sbRun{exit: r.exitCode, out: r.stdout() + r.stderr() + r.pty(), sandboxType: sr.SandboxType, sandboxDenied: exitedSandboxDenied(tc, id)}
}

// runCLI runs script through `exec-server sandbox`, the test binary re-exec'd, in the workspace.
func (f *sbFixture) runCLI(t *testing.T, mode sbMode, mech sandboxMechanism, script string, flags ...string) sbRun {
	t.Helper()
	args := []string{"sandbox", "--mechanism", mech.String()}
	if mode == sbReadOnly {
		args = append(args, "--read-only")
	} else {
		for _, r := range f.roots {
			args = append(args, "--writable", r)
		}
	}
	args = append(append(args, flags...), "--", "sh", "-c", script)
	argv, _ := json.Marshal(args)
	cmd := exec.Command(testBinary(t))
	cmd.Dir = f.ws
	cmd.Env = append(os.Environ(), sbRunEnv+"="+string(argv))
	for k, v := range f.env() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exitErr *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("exec-server sandbox: %v", err)
	}
	return sbRun{exit: code, out: out.String()}
}

// exitedSandboxDenied is process/exited's sandboxDenied for process id.
func exitedSandboxDenied(tc *testClient, id string) bool {
	for _, n := range tc.notesSnapshot() {
		var p struct {
			ProcessID     string `json:"processId"`
			SandboxDenied bool   `json:"sandboxDenied"`
		}
		if n.Method == "process/exited" && json.Unmarshal(n.Params, &p) == nil && p.ProcessID == id {
			return p.SandboxDenied
		}
	}
	return false
}

// withSandboxer gives a test server a sandboxer of its own.
func withSandboxer(t *testing.T, pidNamespace, mechanism string) func(*server) {
	sbx, err := newSandboxer(pidNamespace, mechanism)
	if err != nil {
		t.Fatal(err)
	}
	return func(s *server) { s.sandbox = sbx }
}

// requireUserNamespaces skips when this kernel cannot give a process user and mount
// namespaces, the one thing these tests cannot do without.
func requireUserNamespaces(t *testing.T) {
	t.Helper()
	if err := namespacesProbe(); err != nil {
		t.Skipf("user namespaces unavailable on this kernel (%v): the namespace sandbox cannot run here", err)
	}
}

var namespacesProbe = sync.OnceValue(probeNamespaces)

// sbGORACE spares every run of this test binary built with -race (the stage, the probe,
// the command line) the race runtime's one-second sleep at exit.
var sbGORACE = strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")

// testBinaryPath is this test binary, which the sandbox runs as its network probe.
var testBinaryPath, _ = os.Executable()

func testBinary(t *testing.T) string {
	t.Helper()
	if testBinaryPath == "" {
		t.Fatal("cannot find the test binary")
	}
	return testBinaryPath
}

// sbProbe is the test binary inside the sandbox: tcp ADDR (connect, send hello), unix PATH
// (connect), udp ADDR (send one datagram), socketpair (AF_UNIX), fgwait (say when this job
// has the terminal, then wait for a signal), ptrace PID (attach, detach), tiocsti (push a
// newline into the terminal on stdin). It prints what happened, and exits 1 on an error.
func sbProbe(args []string) int {
	fail := func(what string, err error) int {
		fmt.Printf("%s: %v\n", what, err)
		return 1
	}
	if len(args) == 0 {
		return fail("probe", errors.New("no operation"))
	}
	switch args[0] {
	case "tcp":
		c, err := net.DialTimeout("tcp", args[1], 10*time.Second)
		if err != nil {
			return fail("tcp", err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("hello\n")); err != nil {
			return fail("tcp write", err)
		}
		fmt.Println("connected")
	case "unix":
		c, err := net.DialTimeout("unix", args[1], 10*time.Second)
		if err != nil {
			return fail("unix", err)
		}
		defer c.Close()
		c.Write([]byte("pwned\n"))
		fmt.Println("connected")
	case "udp":
		ap, err := netip4(args[1])
		if err != nil {
			return fail("udp", err)
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fail("udp: socket", err)
		}
		defer unix.Close(fd)
		if err := unix.Sendto(fd, []byte("pwned"), 0, ap); err != nil {
			return fail("udp: sendto", err)
		}
		fmt.Println("sent")
	case "fgwait":
		for {
			fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
			if err != nil {
				return fail("fgwait", err)
			}
			if fg == unix.Getpgrp() {
				break
			}
			time.Sleep(time.Millisecond) // inside the sandbox: nothing tells a job it got the terminal
		}
		fmt.Println("in the foreground")
		time.Sleep(time.Hour) // until ^C
	case "ptrace":
		pid, err := strconv.Atoi(args[1])
		if err != nil {
			return fail("ptrace", err)
		}
		if err := unix.PtraceAttach(pid); err != nil {
			return fail("ptrace", err)
		}
		fmt.Println("attached")
		unix.PtraceDetach(pid)
	case "tiocsti":
		c := byte('\n')
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c))); e != 0 {
			return fail("tiocsti", e)
		}
		fmt.Println("pushed")
	case "socketpair":
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fail("socketpair", err)
		}
		unix.Write(fds[0], []byte("ping"))
		buf := make([]byte, 4)
		if n, err := unix.Read(fds[1], buf); err != nil || string(buf[:n]) != "ping" {
			return fail("socketpair read", err)
		}
		fmt.Println("socketpair ok")
	default:
		return fail("probe", fmt.Errorf("unknown operation %q", args[0]))
	}
	return 0
}

func netip4(addr string) (*unix.SockaddrInet4, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(host).To4()
	p, err := strconv.Atoi(port)
	if ip == nil || err != nil {
		return nil, fmt.Errorf("bad address %q", addr)
	}
	sa := &unix.SockaddrInet4{Port: p}
	copy(sa.Addr[:], ip)
	return sa, nil
}

// listenTCP opens a host listener on 127.0.0.1 for the sandbox to try.
func (f *sbFixture) listenTCP(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f.tcp = ln
}

func (f *sbFixture) listenUDP(t *testing.T) {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	f.udp = pc
}

// listenUnix opens a host unix socket in the fixture, outside the workspace.
func (f *sbFixture) listenUnix(t *testing.T) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(f.outside, "sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f.unix = ln
}

// wantNoUnix checks that no connection reached the unix listener (see wantNoTCP).
func (f *sbFixture) wantNoUnix(t *testing.T) {
	t.Helper()
	f.unix.SetDeadline(time.Now().Add(50 * time.Millisecond))
	if c, err := f.unix.Accept(); err == nil {
		c.Close()
		t.Errorf("a connection from the sandbox reached the host unix socket %s", f.unix.Addr())
	}
}

// wantNoTCP checks, once the sandboxed process is gone, that no connection reached the
// listener: a connect that had succeeded would wait in its accept queue by now.
func (f *sbFixture) wantNoTCP(t *testing.T) {
	t.Helper()
	f.tcp.(*net.TCPListener).SetDeadline(time.Now().Add(50 * time.Millisecond))
	if c, err := f.tcp.Accept(); err == nil {
		c.Close()
		t.Errorf("a connection from the sandbox reached the host listener %s", f.tcp.Addr())
	}
}

// wantTCP accepts the connection the sandbox made and checks what it sent.
func (f *sbFixture) wantTCP(t *testing.T, want string) {
	t.Helper()
	f.tcp.(*net.TCPListener).SetDeadline(time.Now().Add(procWait))
	c, err := f.tcp.Accept()
	if err != nil {
		t.Fatalf("no connection reached the host listener: %v", err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(procWait))
	got, _ := bufio.NewReader(c).ReadString('\n')
	if got != want {
		t.Errorf("the connection sent %q, want %q", got, want)
	}
}

// wantNoUDP checks that no datagram reached the host socket: local delivery is
// synchronous, so one that was sent is queued by now.
func (f *sbFixture) wantNoUDP(t *testing.T) {
	t.Helper()
	f.udp.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	buf := make([]byte, 64)
	if n, from, err := f.udp.ReadFrom(buf); err == nil {
		t.Errorf("a datagram from the sandbox reached the host socket: %q from %v", buf[:n], from)
	}
}

// ptySession drives an interactive program in a PTY: each expect looks only at what came
// after the previous one.
type ptySession struct {
	tc     *testClient
	id     string
	seen   int // bytes of output consumed by expect
	writes int
}

func (p *ptySession) send(t *testing.T, s string) {
	t.Helper()
	p.writes++
	if res := p.tc.mustCall("process/write", map[string]any{"processId": p.id, "chunk": b64(s), "writeId": strconv.Itoa(p.writes)}); string(res) != `{"status":"accepted"}` {
		t.Fatalf("write %q: %s", s, res)
	}
}

func (p *ptySession) expect(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(procWait)
	for {
		p.tc.mu.Lock()
		changed := p.tc.changed
		p.tc.mu.Unlock()
		out := procOutput(p.tc, p.id)
		if i := strings.Index(out[p.seen:], want); i >= 0 {
			p.seen += i + len(want)
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no %q in the terminal after:\n%s", want, out[p.seen:])
		}
	}
}

// sleepArgs makes each uniqueSleepArg unique within and across test binaries.
var sleepArgs atomic.Int64

// uniqueSleepArg is a duration argument for sleep that no other process on the host has,
// to find that sleep from the host by its command line.
func uniqueSleepArg() string {
	return fmt.Sprintf("%d.%07d", 300+sleepArgs.Add(1), os.Getpid()%10000000)
}

// waitHostPid finds, by its exact argv, a process a sandbox started: its pid as the host
// sees it. It polls /proc: a process that is not our child sends no event.
func waitHostPid(t *testing.T, argv ...string) int {
	t.Helper()
	want := strings.Join(argv, "\x00") + "\x00"
	deadline := time.Now().Add(procWait)
	for {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && string(b) == want {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process %q on the host", argv)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hostNSpid is the NSpid line of a host process: its pid in each pid namespace, outermost first.
func hostNSpid(t *testing.T, pid int) []int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			var out []int
			for _, s := range strings.Fields(rest) {
				n, _ := strconv.Atoi(s)
				out = append(out, n)
			}
			return out
		}
	}
	t.Fatalf("no NSpid for %d", pid)
	return nil
}

func readPidFile(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return firstLineInt(t, string(b))
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, strings.ToLower(sub)) {
			return true
		}
	}
	return false
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// wantFile checks a host file's content.
func wantFile(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
	} else if string(b) != want {
		t.Errorf("%s holds %q, want %q", path, b, want)
	}
}

// wantAbsent checks that nothing is at path on the host.
func wantAbsent(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists on the host (%v)", path, err)
	}
}

// startServerProcess runs the test binary as a real exec-server on ws://127.0.0.1:0 with
// flags, for the tests that kill the server itself, and returns it once it listens. It is
// killed when the test ends, if it has not been.
func startServerProcess(t *testing.T, flags ...string) (*exec.Cmd, *testServer) {
	t.Helper()
	args, _ := json.Marshal(append([]string{"--listen", "ws://127.0.0.1:0"}, flags...))
	cmd := exec.Command(testBinary(t))
	cmd.Env = append(os.Environ(), sbRunEnv+"="+string(args), "GORACE="+sbGORACE)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ws://") {
		t.Fatalf("server printed %q, %v", line, err)
	}
	return cmd, &testServer{url: strings.TrimSpace(line)}
}
