package main

// Connect-back (docs/sandbox.md §2, "Connect-back"): a sandboxed command with the network on
// dials the server's own listener and asks it for a process without a sandbox. Every verdict
// is read on the host: the file that process would write, and the server's own log line.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cbProbeEnv makes the test binary a connect-back client: its value is the way it connects
// (cbProbe), argv[1] the server's URL and argv[2] the host file the unsandboxed process writes.
const cbProbeEnv = "EXEC_SERVER_SBTEST_CONNECTBACK"

func init() {
	if isSandboxStage() {
		return
	}
	if mode := os.Getenv(cbProbeEnv); mode != "" && len(os.Args) == 3 {
		os.Exit(cbProbe(mode, os.Args[1], os.Args[2]))
	}
}

// cbRequests are what the client sends: initialize, initialized, and process/start of an
// unsandboxed command writing target.
func cbRequests(target string) [][]byte {
	start, _ := json.Marshal(map[string]any{"id": 2, "method": "process/start", "params": map[string]any{
		"processId": "pwn", "argv": []string{"sh", "-c", "echo PWNED > " + target}, "cwd": fileURI("/"),
		"env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": false}})
	return [][]byte{
		[]byte(`{"id":1,"method":"initialize","params":{"clientName":"connect-back"}}`),
		[]byte(`{"method":"initialized","params":{}}`),
		start,
	}
}

// cbProbe is the client, run inside the sandbox. client: a websocket client that waits for
// each answer; the others write the upgrade and every request at once, without waiting, and
// then hide the socket before the server can look at it: close (FIN), rst (SO_LINGER 0: the
// socket is gone at once), inflight (the only reference sent into a unix socket's queue).
func cbProbe(mode, url, target string) int {
	if mode == "hold" { // connect, say so, and hold the connection (BenchmarkConnectBackCheck)
		c, err := net.Dial("tcp", url)
		if err != nil {
			fmt.Println("dial:", err)
			return 1
		}
		defer c.Close()
		fmt.Println("held")
		io.Copy(io.Discard, c)
		return 0
	}
	if mode == "client" {
		var header []upgradeHeader
		if tok, err := os.ReadFile(os.Getenv("CB_TOKEN_FILE")); err == nil && len(bytes.TrimSpace(tok)) > 0 {
			header = []upgradeHeader{{"Authorization", "Bearer " + string(bytes.TrimSpace(tok))}}
		}
		ws, _, err := dialWebsocket(context.Background(), url, header, nil, wsOptions{})
		if err != nil {
			fmt.Println("refused:", err)
			return 3
		}
		defer ws.closeTCP()
		for _, m := range cbRequests(target) {
			if err := ws.writeMessage(m); err != nil {
				fmt.Println("refused:", err)
				return 3
			}
		}
		for {
			msg, err := ws.readMessage()
			if err != nil {
				fmt.Println("refused:", err)
				return 3
			}
			if bytes.Contains(msg, []byte(`"process/exited"`)) {
				fmt.Println("served")
				return 0
			}
		}
	}
	addr := strings.TrimPrefix(url, "ws://")
	if mode == "loop" {
		return cbProbeLoop(addr, target)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	burst := cbBurst(addr, target)
	if _, err := c.Write(burst); err != nil {
		fmt.Println("write:", err)
		return 1
	}
	return cbHide(c.(*net.TCPConn), mode)
}

// cbProbeLoopTries and cbProbeLoopHeld bound the loop probe: the connections it makes, and
// those it keeps open at once.
const (
	cbProbeLoopTries = 20000
	cbProbeLoopHeld  = 256
)

// cbProbeLoop dials addr again and again, each time writing the whole burst at once and
// keeping the connection open (a socket gone is refused), until target exists or
// cbProbeLoopTries connections were made: it races whatever window the server's check may
// leave (the stage's end, for one).
func cbProbeLoop(addr, target string) int {
	burst := cbBurst(addr, target)
	var held []net.Conn
	for i := 0; i < cbProbeLoopTries; i++ {
		if _, err := os.Stat(target); err == nil {
			return 0
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			time.Sleep(time.Millisecond)
			continue
		}
		c.Write(burst)
		if held = append(held, c); len(held) > cbProbeLoopHeld {
			held[0].Close()
			held = held[1:]
		}
	}
	return 1
}

// cbBurst is the upgrade and every request, written without waiting for an answer.
func cbBurst(addr, target string) []byte {
	var burst bytes.Buffer
	fmt.Fprintf(&burst, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", addr)
	for _, m := range cbRequests(target) {
		burst.WriteByte(0x81) // FIN, text
		if len(m) < 126 {
			burst.WriteByte(0x80 | byte(len(m)))
		} else {
			burst.Write([]byte{0x80 | 126, byte(len(m) >> 8), byte(len(m))})
		}
		burst.Write([]byte{0, 0, 0, 0}) // a zero mask: the payload goes as is
		burst.Write(m)
	}
	return burst.Bytes()
}

// cbHide hides the connection, written to, from the server as mode says (cbProbe).
func cbHide(tc *net.TCPConn, mode string) int {
	switch mode {
	case "close":
		tc.Close()
	case "rst":
		tc.SetLinger(0)
		tc.Close()
	case "inflight":
		f, err := tc.File()
		if err != nil {
			fmt.Println("file:", err)
			return 1
		}
		tc.Close()
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			fmt.Println("socketpair:", err)
			return 1
		}
		if err := unix.Sendmsg(fds[0], []byte{0}, unix.UnixRights(int(f.Fd())), nil, 0); err != nil {
			fmt.Println("sendmsg:", err)
			return 1
		}
		f.Close() // now only the message in flight holds the connection
		time.Sleep(20 * time.Second)
	}
	fmt.Println("sent")
	return 0
}

// cbLog is a server log that tells when a connection was refused.
type cbLog struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	refused chan struct{} // closed on the first refusal
}

func (l *cbLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if bytes.Contains(l.buf.Bytes(), []byte("refused a connection from a sandboxed process")) {
		select {
		case <-l.refused:
		default:
			close(l.refused)
		}
	}
	return len(p), nil
}

func (l *cbLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// withLog sends the server's log to l.
func withLog(l *cbLog) func(*server) {
	return func(s *server) { s.log = newTextLogger(l, levelInfo) }
}

// cbStart starts script as a process of tc in f's workspace, under sandbox (nil: none),
// with extra in its environment.
func cbStart(t *testing.T, tc *testClient, f *sbFixture, sandbox json.RawMessage, script string, extra map[string]string) string {
	t.Helper()
	env := f.env()
	for k, v := range extra {
		env[k] = v
	}
	id := nextSBID()
	params := map[string]any{"processId": id, "argv": []string{"sh", "-c", script}, "cwd": fileURI(f.ws), "env": env, "tty": false}
	if sandbox != nil {
		params["sandbox"] = sandbox
	}
	tc.mustCall("process/start", params)
	return id
}

// cbMechanisms are the sandboxes a network-enabled command can run in.
var cbMechanisms = []struct{ name, mech, pidNS string }{
	{"namespaces", "namespaces", "isolate"},
	{"namespaces-inherit", "namespaces", "inherit"},
	{"landlock", "landlock", "isolate"},
	{"landlock-inherit", "landlock", "inherit"},
}

// cbDaemonMechanisms are the modes whose stage keeps the command's orphans: every one (pid 1
// of a pid namespace of its own, or the supervisor, a subreaper; docs/sandbox.md §2,
// Processes).
var cbDaemonMechanisms = cbMechanisms

func cbRequire(t *testing.T, mech string) {
	t.Helper()
	if mech == "namespaces" {
		requireUserNamespaces(t)
	} else if landlockABI() == 0 {
		t.Skip("Landlock unavailable on this kernel")
	}
}

// TestSandboxConnectBackRefused: a workspace-write command with the network on connects to
// the server that started it, in each mechanism and in each way of hiding its socket. The
// server must refuse it before serving a byte, and the unsandboxed process it asks for must
// never write its file on the host.
func TestSandboxConnectBackRefused(t *testing.T) {
	for _, m := range cbMechanisms {
		for _, mode := range []string{"client", "close", "rst", "inflight"} {
			t.Run(m.name+"/"+mode, func(t *testing.T) {
				cbRequire(t, m.mech)
				log := &cbLog{refused: make(chan struct{})}
				ts := startTestServer(t, withSandboxer(t, m.pidNS, m.mech), withLog(log))
				f := newSBFixture(t)
				target := filepath.Join(f.outside, "pwned")
				tc := ts.connect(t)
				id := cbStart(t, tc, f, f.sandboxObject(sbWorkspaceWrite, viaPipe, "enabled"),
					`"$PROBE" "$URL" "$TARGET"`, map[string]string{cbProbeEnv: mode, "URL": ts.url, "TARGET": target})
				deadline := time.After(30 * time.Second)
				tick := time.NewTicker(10 * time.Millisecond) // the host file has no event to await
				defer tick.Stop()
				for refused := false; !refused; {
					select {
					case <-log.refused:
						refused = true
					case <-tick.C:
						if _, err := os.Stat(target); err == nil {
							t.Fatalf("the sandboxed command drove the server: %s was written on the host\nserver log:\n%s", target, log)
						}
					case <-deadline:
						t.Fatalf("the connection was neither refused nor served in 30 s\nserver log:\n%s", log)
					}
				}
				if mode == "client" {
					r := waitClosed(tc, id)
					if out := r.stdout() + r.stderr(); !strings.Contains(out, "refused:") {
						t.Errorf("the client says %q, want a refused connection", out)
					}
				} else {
					tc.call("process/terminate", map[string]any{"processId": id})
					waitClosed(tc, id)
				}
				wantAbsent(t, target)
				t.Logf("server log:\n%s", log)
			})
		}
	}
}

// TestSandboxConnectBackDaemon: the connecting process has left the command's process group
// and session (setsid, after a double fork) while the command still runs: it is still the
// stage's descendant, and still refused, in every mode (cbDaemonMechanisms).
func TestSandboxConnectBackDaemon(t *testing.T) {
	for _, m := range cbDaemonMechanisms {
		t.Run(m.name, func(t *testing.T) {
			cbRequire(t, m.mech)
			log := &cbLog{refused: make(chan struct{})}
			ts := startTestServer(t, withSandboxer(t, m.pidNS, m.mech), withLog(log))
			f := newSBFixture(t)
			target := filepath.Join(f.outside, "pwned")
			tc := ts.connect(t)
			id := cbStart(t, tc, f, f.sandboxObject(sbWorkspaceWrite, viaPipe, "enabled"),
				`(setsid "$PROBE" "$URL" "$TARGET" > /dev/null 2>&1 &); exec sleep 600`,
				map[string]string{cbProbeEnv: "client", "URL": ts.url, "TARGET": target})
			select {
			case <-log.refused:
			case <-time.After(30 * time.Second):
				t.Errorf("the daemon's connection was not refused in 30 s\nserver log:\n%s", log)
			}
			tc.call("process/terminate", map[string]any{"processId": id})
			waitClosed(tc, id)
			wantAbsent(t, target)
			t.Logf("server log:\n%s", log)
		})
	}
}

// TestSandboxConnectBackUnsandboxedClientsServed: while a network-enabled sandbox runs, the
// server still serves its in-process client and an unsandboxed child of its own that connects
// the same way.
func TestSandboxConnectBackUnsandboxedClientsServed(t *testing.T) {
	for _, m := range cbMechanisms[:3] {
		t.Run(m.name, func(t *testing.T) {
			cbRequire(t, m.mech)
			log := &cbLog{refused: make(chan struct{})}
			ts := startTestServer(t, withSandboxer(t, m.pidNS, m.mech), withLog(log))
			f := newSBFixture(t)
			tc := ts.connect(t)
			sleeper := cbStart(t, tc, f, f.sandboxObject(sbWorkspaceWrite, viaPipe, "enabled"), `exec sleep 600`, nil)
			if ts.srv.sandbox.live.snapshot() == nil {
				t.Fatal("no live network-enabled stage registered: the check would not run")
			}
			ts.connect(t).close() // in process: this process holds the socket

			target := filepath.Join(f.outside, "served")
			id := cbStart(t, tc, f, nil, `"$PROBE" "$URL" "$TARGET"`, map[string]string{cbProbeEnv: "client", "URL": ts.url, "TARGET": target})
			r := waitClosed(tc, id)
			if r.exitCode != 0 {
				t.Fatalf("unsandboxed client: exit %d, output %q\nserver log:\n%s", r.exitCode, r.stdout()+r.stderr(), log)
			}
			wantFile(t, target, "PWNED\n")
			tc.call("process/terminate", map[string]any{"processId": sleeper})
			waitClosed(tc, sleeper)
			select {
			case <-log.refused:
				t.Fatalf("an unsandboxed client was refused\nserver log:\n%s", log)
			default:
			}
		})
	}
}

// TestSandboxConnectBackWithWSAuth is the case through the command line: a server
// with --ws-auth capability-token and --ws-token-file; a full-read, network-enabled sandboxed
// command reads the token file and connects back with it. It reads nothing, is refused, and
// the process it asks for writes nothing on the host. The server's log says it refused.
func TestSandboxConnectBackWithWSAuth(t *testing.T) {
	requireUserNamespaces(t)
	f := newSBFixture(t)
	const token = "connect-back-ws-auth-token-9876543210"
	tokenFile := filepath.Join(f.outside, "ws-token")
	mustWrite(t, tokenFile, token+"\n")
	argv, _ := json.Marshal([]string{"--listen", "ws://127.0.0.1:0", "--ws-auth", "capability-token", "--ws-token-file", tokenFile})
	cmd := exec.Command(testBinary(t))
	cmd.Env = append(os.Environ(), sbRunEnv+"="+string(argv), "GORACE="+sbGORACE)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(unix.SIGTERM); cmd.Wait() }()
	line := make([]byte, 0, 64)
	for b := make([]byte, 1); len(line) == 0 || line[len(line)-1] != '\n'; {
		if _, err := stdout.Read(b); err != nil {
			t.Fatalf("the server printed no URL: %v\n%s", err, &stderr)
		}
		line = append(line, b[0])
	}
	url := strings.TrimSpace(string(line))
	ws, _, err := dialWebsocket(context.Background(), url, []upgradeHeader{{"Authorization", "Bearer " + token}}, nil, wsOptions{})
	if err != nil {
		t.Fatalf("the token's holder was not served: %v", err)
	}
	tc := &testClient{t: t, ws: ws, pending: map[string]chan testReply{}, changed: make(chan struct{}), done: make(chan struct{})}
	go tc.readLoop()
	defer tc.close()
	tc.initialize(nil)

	target := filepath.Join(f.outside, "pwned")
	copyPath := filepath.Join(f.ws, "token-copy")
	id := cbStart(t, tc, f, f.sandboxObject(sbWorkspaceWrite, viaPipe, "enabled"),
		`cat "$CB_TOKEN_FILE" > "$WS/token-copy" 2>&1; "$PROBE" "$URL" "$TARGET"`,
		map[string]string{cbProbeEnv: "client", "URL": url, "TARGET": target, "CB_TOKEN_FILE": tokenFile})
	r := waitClosed(tc, id)
	wantAbsent(t, target)
	if got, _ := os.ReadFile(copyPath); bytes.Contains(got, []byte(token)) {
		t.Errorf("the sandbox read the token file: %q", got)
	}
	if out := r.stdout() + r.stderr(); !strings.Contains(out, "refused:") {
		t.Errorf("the client says %q, want a refused connection", out)
	}
	cmd.Process.Signal(unix.SIGTERM)
	cmd.Wait()
	if !strings.Contains(stderr.String(), "level=WARN msg=\"refused a connection from a sandboxed process\"") {
		t.Errorf("no WARN line for the refusal in the server's log:\n%s", &stderr)
	}
}

// TestSandboxSecretFilesDenied: the server's capability-token and shared-secret files are
// unreadable from a sandbox whose profile could read them, in and out of the workspace, while
// a file beside them stays readable: a full-read (workspace-write) profile in the namespace
// mechanism, and a restricted-read one in both mechanisms. The copy is read on the host.
func TestSandboxSecretFilesDenied(t *testing.T) {
	for _, tt := range []struct {
		name, mech string
		fullRead   bool
	}{
		{"namespaces/full-read", "namespaces", true},
		{"namespaces/restricted-read", "namespaces", false},
		{"landlock/restricted-read", "landlock", false},
	} {
		for _, network := range []string{"enabled", "restricted"} {
			t.Run(tt.name+"/"+network, func(t *testing.T) {
				cbRequire(t, tt.mech)
				f := newSBFixture(t)
				const token = "connect-back-capability-token-0123456789"
				outsideToken := filepath.Join(f.outside, "token")
				wsToken := filepath.Join(f.ws, "token")
				mustWrite(t, outsideToken, token+"\n")
				mustWrite(t, wsToken, token+"\n")
				mustWrite(t, filepath.Join(f.outside, "plain"), "plain\n")
				ts := startTestServer(t, withSandboxer(t, "isolate", tt.mech), func(s *server) {
					s.sandbox.setSecrets(secretFiles(&cliOptions{wsTokenFile: outsideToken, wsSecretFile: wsToken}))
				})
				sandbox := f.sandboxObject(sbWorkspaceWrite, viaPipe, network)
				if !tt.fullRead {
					q := func(v any) string { b, _ := json.Marshal(v); return string(b) }
					sandbox = json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"minimal"}},"access":"read"},
   {"path":{"type":"path","path":%s},"access":"read"},
   {"path":{"type":"path","path":%s},"access":"read"},
   {"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"}]},"network":%s},
  "windowsSandboxLevel":"disabled","cwd":%s,"workspaceRoots":[%s]}`,
						q(fileURI(f.outside)), q(fileURI(testBinaryPath)), q(network), q(fileURI(f.ws)), q(fileURI(f.ws))))
				}
				copyPath := filepath.Join(f.ws, "copy")
				mustWrite(t, copyPath, "") // Landlock lets the command write an existing file only, at the top
				r := f.runServer(t, ts, sandbox, false, `cat "$OUT/token" "$WS/token" "$OUT/plain" > "$WS/copy" 2>&1; true`)
				got, err := os.ReadFile(copyPath)
				if err != nil {
					t.Fatalf("exit %d, output %q: %v", r.exit, r.out, err)
				}
				if bytes.Contains(got, []byte(token)) {
					t.Errorf("the sandbox read the token file: %q", got)
				}
				if !bytes.Contains(got, []byte("plain")) {
					t.Errorf("a file beside the token was not readable: %q", got)
				}
				wantFile(t, outsideToken, token+"\n")
			})
		}
	}
}

// TestPeerSocketFindsInode: the sock_diag lookup finds the peer's socket by its 4-tuple, in
// both families, as the very inode the peer holds, and finds nothing for a tuple no socket has.
func TestPeerSocketFindsInode(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			addr := map[string]string{"tcp4": "127.0.0.1:0", "tcp6": "[::1]:0"}[network]
			ln, err := net.Listen(network, addr)
			if err != nil {
				t.Skipf("no %s loopback: %v", network, err)
			}
			defer ln.Close()
			client, err := net.Dial(network, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			server, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()
			f, err := client.(*net.TCPConn).File()
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var st unix.Stat_t
			if err := unix.Fstat(int(f.Fd()), &st); err != nil {
				t.Fatal(err)
			}
			inode, uid, found, err := peerSocket(server.RemoteAddr().(*net.TCPAddr), server.LocalAddr().(*net.TCPAddr))
			if err != nil || !found || uint64(inode) != st.Ino || uid != uint32(os.Geteuid()) {
				t.Fatalf("peerSocket: inode %d uid %d found %v err %v; want inode %d uid %d", inode, uid, found, err, st.Ino, os.Geteuid())
			}
			if holder := socketHolder(inode, 0); holder != os.Getpid() {
				t.Errorf("socketHolder = %d, want this process, %d", holder, os.Getpid())
			}
			gone := *server.RemoteAddr().(*net.TCPAddr)
			gone.Port = server.LocalAddr().(*net.TCPAddr).Port // the listener's own port: no such connection
			if _, _, found, err := peerSocket(&gone, server.LocalAddr().(*net.TCPAddr)); err != nil || found {
				t.Errorf("a tuple no socket has: found %v, err %v", found, err)
			}
		})
	}
}

// TestConnectBackFailsClosed: while a network-enabled stage is live, a loopback peer whose
// holder cannot be found is refused, each way a client can hide its socket once its bytes are
// queued: closed (FIN, no holder), reset (SO_LINGER 0: the socket is gone), and in flight (the
// only reference in a unix socket's queue). Done here, in order, rather than raced from a
// sandbox; a client that holds its socket is served.
func TestConnectBackFailsClosed(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sbx, _ := newSandboxer("isolate", "")
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	sbx.live.add(sleeper.Process.Pid) // a live stage, which holds nothing
	for _, tt := range []struct {
		name string
		hide func(t *testing.T, c *net.TCPConn)
		want string // "" for served
	}{
		{"held", func(t *testing.T, c *net.TCPConn) {}, ""},
		{"closed", func(t *testing.T, c *net.TCPConn) { c.Close() }, "no longer held"},
		{"reset", func(t *testing.T, c *net.TCPConn) { c.SetLinger(0); c.Close() }, "gone"},
		{"in flight", func(t *testing.T, c *net.TCPConn) {
			f, err := c.File()
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
			if err := unix.Sendmsg(fds[0], []byte{0}, unix.UnixRights(int(f.Fd())), nil, 0); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}, "no process holds"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client, err := net.Dial("tcp4", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			server, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()
			client.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
			tt.hide(t, client.(*net.TCPConn))
			why := sbx.refusePeer(server, false)
			if tt.want == "" && why != "" || !strings.Contains(why, tt.want) {
				t.Errorf("refusePeer = %q, want %q", why, tt.want)
			}
		})
	}
}

// BenchmarkConnectBackCheck is the accept-time check of one loopback connection while a
// network-enabled stage is live, with cbBenchProcs more processes on the host: the first
// connection of a client that is neither the newest process nor a parent (a full scan of
// /proc), a client that connects again (found first), and no stage live (returns at once).
func BenchmarkConnectBackCheck(b *testing.B) {
	const cbBenchProcs = 500
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	// The client first: older than every other process of the benchmark, it is scanned last.
	holder := exec.Command(testBinaryPath, ln.Addr().String(), "-")
	holder.Env = append(os.Environ(), cbProbeEnv+"=hold", "GORACE="+sbGORACE)
	out, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		b.Fatal(err)
	}
	defer holder.Wait()
	defer holder.Process.Kill()
	conn, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	io.ReadFull(out, make([]byte, 5)) // "held\n"

	var procs []*exec.Cmd
	defer func() {
		for _, c := range procs {
			c.Process.Kill()
			c.Wait()
		}
	}()
	for range cbBenchProcs {
		c := exec.Command("sleep", "600")
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		procs = append(procs, c)
	}
	sbx, _ := newSandboxer("isolate", "")
	sbx.live.add(procs[0].Process.Pid) // a live stage, which holds nothing

	b.Run("first-connection", func(b *testing.B) {
		for b.Loop() {
			sbx.live.setHint(0)
			if why := sbx.refusePeer(conn, false); why != "" {
				b.Fatal(why)
			}
		}
	})
	b.Run("same-client-again", func(b *testing.B) {
		for b.Loop() {
			if why := sbx.refusePeer(conn, false); why != "" {
				b.Fatal(why)
			}
		}
	})
	b.Run("no-stage-live", func(b *testing.B) {
		idle, _ := newSandboxer("isolate", "")
		for b.Loop() {
			idle.refusePeer(conn, false)
		}
	})
	b.Run("sock-diag-lookup", func(b *testing.B) {
		for b.Loop() {
			peerSocket(conn.RemoteAddr().(*net.TCPAddr), conn.LocalAddr().(*net.TCPAddr))
		}
	})
}
