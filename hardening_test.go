package main

// Tests that no client can exhaust the server through one connection: replies count toward
// the outgoing queue's bound, and long polls do not hold up other requests (docs/protocol.md
// §3.4, §5.4).

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// initRaw initializes a raw client and returns its session id.
func initRaw(rc *rawClient) string {
	rc.send(`{"id":0,"method":"initialize","params":{"clientName":"hardening"}}`)
	var init struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(rc.next().Result, &init)
	rc.send(`{"method":"initialized"}`)
	return init.SessionID
}

// readerParked reports whether the connection of session sid has its reader waiting for
// room in the outgoing queue.
func readerParked(ts *testServer, sid string) bool {
	s := serverSession(ts, sid)
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c == nil {
		return false
	}
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	return c.out.reader
}

// TestRepliesCountTowardTheQueueBound: a client that pipelines requests whose replies are
// large and reads none of them makes the server stop reading its requests once the queue is
// over its bound, instead of queueing every reply; every reply still arrives once the client
// reads.
func TestRepliesCountTowardTheQueueBound(t *testing.T) {
	ts := startTestServer(t, func(s *server) { s.cfg.stallTimeout = time.Hour })
	rc := dialRaw(t, ts)
	sid := initRaw(rc)
	rc.send(`{"id":1,"method":"process/start","params":{"processId":"big","argv":["head","-c","1000000","/dev/zero"],"cwd":%q,"env":{"PATH":%q},"tty":false}}`,
		fileURI(t.TempDir()), os.Getenv("PATH"))
	for m := rc.next(); m.Method != "process/closed"; m = rc.next() {
	}
	// A second process streams without pause, so the queue is never empty and every reply
	// is queued behind its output rather than written by the reader itself.
	rc.send(`{"id":2,"method":"process/start","params":{"processId":"flood","argv":["cat","/dev/zero"],"cwd":%q,"env":{"PATH":%q},"tty":false}}`,
		fileURI(t.TempDir()), os.Getenv("PATH"))
	waitFor(t, "the outgoing queue is full", func() bool { return outQueueBytes(ts, sid) > outQueueLimit/2 })
	reply := base64.StdEncoding.EncodedLen(1000000) + 64<<10 // one process/read answer, with room for its envelope
	const reads = 120                                        // 120 × 1.3 MB of answers: far past the 16 MiB bound
	var sent sync.WaitGroup
	sent.Add(1)
	go func() { // the requests are small: they fit in the socket's buffers whether or not the server reads them
		defer sent.Done()
		for i := range reads {
			rc.send(`{"id":%d,"method":"process/read","params":{"processId":"big"}}`, 100+i)
		}
	}()
	waitFor(t, "the server's reader waits for room", func() bool { return readerParked(ts, sid) })
	if q := outQueueBytes(ts, sid); q > outQueueLimit+reply {
		t.Errorf("%d bytes queued, more than the bound %d plus one reply", q, outQueueLimit)
	}
	sent.Wait()
	rc.send(`{"id":3,"method":"process/terminate","params":{"processId":"flood"}}`)
	got := map[int]bool{}
	for len(got) < reads {
		m := rc.next()
		if m.ID != nil && *m.ID >= 100 {
			if m.Error != nil {
				t.Fatalf("read %d: %s", *m.ID, m.Error.Message)
			}
			got[*m.ID] = true
		}
	}
}

// TestLongPollsDoNotHoldUpOtherRequests: more pending process/read long polls than the
// connection's deferred-handler bound, then a process/terminate: it is answered at once,
// and a long poll past the long-poll bound answers at once with what there is.
func TestLongPollsDoNotHoldUpOtherRequests(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	tc.mustCall("process/start", procStart(t, "quiet", "sleep", "300"))
	var polls []<-chan testReply
	for range maxDeferredPerConn + 100 {
		polls = append(polls, tc.start("process/read", map[string]any{"processId": "quiet", "afterSeq": 0, "waitMs": 60000}))
	}
	done := make(chan json.RawMessage, 1)
	go func() { done <- tc.mustCall("process/terminate", map[string]any{"processId": "quiet"}) }()
	select {
	case res := <-done:
		if string(res) != `{"running":true}` {
			t.Errorf("terminate: %s", res)
		}
	case <-time.After(procWait):
		t.Fatalf("process/terminate waited behind %d long polls", len(polls))
	}
	for i, ch := range polls {
		select {
		case r := <-ch:
			if r.Err != nil {
				t.Fatalf("poll %d: %s", i, r.Err.Message)
			}
		case <-time.After(procWait):
			t.Fatalf("poll %d never answered after the process ended", i)
		}
	}
}

// TestLongPollsPastTheirBoundAnswerAtOnce fills the long-poll bound, then one more long poll
// answers at once.
func TestLongPollsPastTheirBoundAnswerAtOnce(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	tc.mustCall("process/start", procStart(t, "quiet", "sleep", "300"))
	t.Cleanup(func() { tc.call("process/terminate", map[string]any{"processId": "quiet"}) })
	for range maxLongPollsPerConn {
		tc.start("process/read", map[string]any{"processId": "quiet", "afterSeq": 0, "waitMs": 600000})
	}
	s := serverSession(ts, tc.sessionID)
	waitFor(t, fmt.Sprintf("%d long polls wait", maxLongPollsPerConn), func() bool {
		s.mu.Lock()
		c := s.conn
		s.mu.Unlock()
		return c != nil && len(c.sched.polls) == maxLongPollsPerConn
	})
	res := tc.mustCall("process/read", map[string]any{"processId": "quiet", "afterSeq": 0, "waitMs": 600000})
	if string(res) == "" {
		t.Fatal("no answer")
	}
}

// TestListenKeepsTheAddressFamily: ws://0.0.0.0:P listens on IPv4 only (no answer on [::1])
// and is echoed as given, not as [::].
func TestListenKeepsTheAddressFamily(t *testing.T) {
	addr, err := parseListen("ws://0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen(listenNetwork(addr), addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := listenedAddr(addr, ln.Addr())
	port := ln.Addr().(*net.TCPAddr).Port
	if want := fmt.Sprintf("0.0.0.0:%d", port); got != want {
		t.Errorf("echoed %s, want %s", got, want)
	}
	if c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		t.Errorf("no answer on IPv4: %v", err)
	} else {
		c.Close()
	}
	if c, err := net.Dial("tcp6", fmt.Sprintf("[::1]:%d", port)); err == nil {
		c.Close()
		t.Errorf("an IPv4 listener answered on [::1]")
	}
	if addr, _ := parseListen("ws://[::1]:0"); listenNetwork(addr) != "tcp6" {
		t.Errorf("[::1] listens on %s", listenNetwork(addr))
	}
}

// upgradeRequest is a websocket upgrade with no credentials.
const upgradeRequest = "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
	"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"

// closedByServer reports whether the server closes nc (EOF) before the deadline.
func closedByServer(nc net.Conn, br *bufio.Reader) bool {
	nc.SetReadDeadline(time.Now().Add(procWait))
	_, err := br.ReadByte()
	return errors.Is(err, io.EOF)
}

// TestRefusedConnectionsAreClosed: a refused upgrade (401 without the token) and a /readyz
// answer followed by silence do not hold their sockets: the server closes them.
func TestRefusedConnectionsAreClosed(t *testing.T) {
	auth, err := newWSAuth("capability-token", testTokenFile, "", "", "", "", defaultWSMaxClockSkew)
	if err != nil {
		t.Fatal(err)
	}
	ts := startTestServer(t, func(s *server) { s.auth = auth })
	nc, br, resp := rawHTTP(t, ts, upgradeRequest)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %s, want 401", resp.Status)
	}
	io.Copy(io.Discard, resp.Body)
	if !closedByServer(nc, br) {
		t.Error("the socket refused with 401 stayed open")
	}
	nc, br, resp = rawHTTP(t, ts, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %s", resp.Status)
	}
	if !closedByServer(nc, br) {
		t.Error("an idle kept-alive socket stayed open")
	}
	_, _, resp = rawHTTP(t, ts, "GET /readyz HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("/readyz with an Origin: %s, want 403", resp.Status)
	}
}

// TestMaxConnections: past --max-connections an upgrade is answered 503; once a connection
// ends there is room again.
func TestMaxConnections(t *testing.T) {
	ts := startTestServer(t, func(s *server) { s.cfg.maxConnections = 2 })
	a := ts.connect(t)
	ts.connect(t)
	_, _, resp := rawHTTP(t, ts, upgradeRequest)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third connection: %s, want 503", resp.Status)
	}
	a.close()
	waitFor(t, "a connection slot is free", func() bool {
		_, _, resp := rawHTTP(t, ts, upgradeRequest)
		return resp.StatusCode == http.StatusSwitchingProtocols
	})
}

// TestPendingConnectionsAreBounded: sockets that never send a request cannot take every
// descriptor: past wsMaxPending the server closes new ones at once, and frees room as they go.
func TestPendingConnectionsAreBounded(t *testing.T) {
	ts := startTestServer(t)
	addr := strings.TrimPrefix(ts.url, "ws://")
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range wsMaxPending {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	waitFor(t, "the server closes the connection past its bound", func() bool {
		return closedByServer(extra, bufio.NewReader(extra))
	})
	for _, c := range idle {
		c.Close()
	}
	idle = nil
	waitFor(t, "a client connects once the idle sockets are gone", func() bool {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer nc.Close()
		io.WriteString(nc, upgradeRequest)
		nc.SetReadDeadline(time.Now().Add(procWait))
		resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
		return err == nil && resp.StatusCode == http.StatusSwitchingProtocols
	})
}

// TestGrandchildrenDieWhenTheServerIsKilled kills a real server process with SIGKILL while
// its children have started grandchildren that PR_SET_PDEATHSIG does not reach: a subshell's
// background job, a `set -m` job in a group of its own, a nohup'd one, and an interactive
// shell's job in a PTY. The watchdog kills them all.
func TestGrandchildrenDieWhenTheServerIsKilled(t *testing.T) {
	if os.Getenv("EXEC_SERVER_CRASH_HELPER") == "2" {
		os.Exit(run([]string{"--listen", "ws://127.0.0.1:0"}, os.Stdin, os.Stdout, os.Stderr))
	}
	if runtime.GOOS != "linux" {
		t.Skip("the session sweep lists /proc: Linux only")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGrandchildrenDieWhenTheServerIsKilled$")
	cmd.Env = append(os.Environ(), "EXEC_SERVER_CRASH_HELPER=2")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ws://") {
		t.Fatalf("server printed %q, %v", line, err)
	}
	tc := (&testServer{url: strings.TrimSpace(line)}).connect(t)
	scripts := []struct {
		name   string
		tty    bool
		script string
	}{
		{"subshell background", false, "(sleep 301 & echo $!); exec sleep 600"},
		{"set -m job", false, "set -m; sleep 302 & echo $!; exec sleep 600"},
		{"nohup", false, "nohup sleep 303 >/dev/null 2>&1 & echo $!; exec sleep 600"},
		{"interactive job in a PTY", true, "set -m; sleep 304 & echo $!; wait"},
		{"leader already exited", false, "sleep 305 >/dev/null 2>&1 & echo $!"},
	}
	var pids []int
	for i, s := range scripts {
		id := fmt.Sprintf("gc%d", i)
		tc.mustCall("process/start", with(procStart(t, id, "bash", "-c", s.script), "tty", s.tty))
		waitEvent(tc, id, "process/output")
		pid := firstLineInt(t, strings.TrimSpace(procOutput(tc, id)))
		if syscall.Kill(pid, 0) != nil {
			t.Fatalf("%s: grandchild %d not running", s.name, pid)
		}
		pids = append(pids, pid)
	}
	waitEvent(tc, "gc4", "process/closed")
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	for i, pid := range pids {
		t.Logf("%s: waiting for %d", scripts[i].name, pid)
		waitPidGone(t, pid)
	}
}

// TestSmallChunksRetainAMegabyte: an 80,000-line echo loop writes about 570 KB in many
// small writes; every byte is still readable after the process ends, from seq 1.
func TestSmallChunksRetainAMegabyte(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	tc.mustCall("process/start", procStart(t, "echo", "bash", "-c", `for i in $(seq 1 80000); do echo "l$i"; done`))
	r := waitClosed(tc, "echo")
	var want strings.Builder
	for i := 1; i <= 80000; i++ {
		fmt.Fprintf(&want, "l%d\n", i)
	}
	res := tc.mustCall("process/read", map[string]any{"processId": "echo", "afterSeq": 0})
	var rr struct {
		Chunks []struct {
			Seq   uint64 `json:"seq"`
			Chunk []byte `json:"chunk"`
		} `json:"chunks"`
	}
	if err := json.Unmarshal(res, &rr); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for _, c := range rr.Chunks {
		got = append(got, c.Chunk...)
	}
	if len(rr.Chunks) == 0 || rr.Chunks[0].Seq != 1 || string(got) != want.String() {
		t.Errorf("read back %d bytes in %d chunks from seq %d; want all %d from seq 1", len(got), len(rr.Chunks), rr.Chunks[0].Seq, want.Len())
	}
	t.Logf("%d bytes in %d chunks (%d events)", len(got), len(rr.Chunks), r.exitedSeq)
}

// TestBinaryFrameNotUTF8IsAParseError: JSON in a binary frame whose text is not UTF-8 is
// refused as the reference refuses it, instead of being read with replacement characters.
func TestBinaryFrameNotUTF8IsAParseError(t *testing.T) {
	ts := startTestServer(t)
	ws, _, err := dialWebsocket(t.Context(), ts.url, nil, nil, wsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.close(nil)
	ws.writeMessageOp(wsOpBinary, []byte("{\"id\":1,\"method\":\"initialize\",\"params\":{\"clientName\":\"a\xff\"}}"))
	ws.nc.SetReadDeadline(time.Now().Add(procWait))
	b, err := ws.readMessage()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"code":-32600`) || !strings.Contains(string(b), "invalid unicode code point at line 1 column 57") {
		t.Errorf("answer %s", b)
	}
	ws.writeMessageOp(wsOpBinary, []byte(`{"id":2,"method":"initialize","params":{"clientName":"é"}}`))
	if b, err := ws.readMessage(); err != nil || !strings.Contains(string(b), `"id":2,"result"`) {
		t.Errorf("valid binary message: %s %v", b, err)
	}
}

// TestLimitsRefuseClearly: past each per-session and per-server limit the refusal is a
// JSON-RPC error that names the flag, and room comes back when the use ends.
func TestLimitsRefuseClearly(t *testing.T) {
	ts := startTestServer(t, func(s *server) {
		s.cfg.limits.sessions, s.cfg.limits.processesPerSession, s.cfg.limits.httpRequests = 2, 2, 1
	})
	a := ts.connect(t)
	ts.connect(t)
	third := ts.dial(t)
	if _, err := third.call("initialize", map[string]any{"clientName": "third"}); err == nil || !strings.Contains(err.Message, "--max-sessions") {
		t.Errorf("third session: %+v, want the --max-sessions refusal", err)
	}
	a.mustCall("process/start", procStart(t, "s1", "sleep", "300"))
	a.mustCall("process/start", procStart(t, "s2", "sleep", "300"))
	if _, err := a.call("process/start", procStart(t, "s3", "true")); err == nil || err.Code != codeInvalidRequest || !strings.Contains(err.Message, "--max-processes-per-session") {
		t.Errorf("third process: %+v, want the --max-processes-per-session refusal", err)
	}
	a.mustCall("process/terminate", map[string]any{"processId": "s1"})
	waitEvent(a, "s1", "process/closed")
	a.mustCall("process/start", procStart(t, "s3", "true")) // room again
	a.mustCall("process/terminate", map[string]any{"processId": "s2"})

	// One http/request hangs on a server that never answers; a second is refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hang := a.start("http/request", map[string]any{"method": "GET", "url": "http://" + ln.Addr().String() + "/", "requestId": "h1", "timeoutMs": 600000})
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.call("http/request", map[string]any{"method": "GET", "url": "http://" + ln.Addr().String() + "/", "requestId": "h2"}); err == nil || !strings.Contains(err.Message, "--max-http-requests") {
		t.Errorf("second http/request: %+v, want the --max-http-requests refusal", err)
	}
	accepted.Close()
	<-hang
}

// inotifyInstances counts this process's inotify descriptors.
func inotifyInstances(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// TestWatchMissingSharesOneInotifyInstance: many connections watching missing paths take one
// of the user's inotify instances between them, and each is still told of its own path.
func TestWatchMissingSharesOneInotifyInstance(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("inotify is Linux-only")
	}
	before := inotifyInstances(t)
	ts := startTestServer(t)
	root := t.TempDir()
	var clients []*testClient
	for i := range 20 {
		tc := ts.connect(t)
		res := tc.mustCall("fs/watchMissing", map[string]any{"watchId": 1, "missing": []string{fileURI(filepath.Join(root, fmt.Sprint(i), "x"))}})
		if string(res) != `{"watching":true}` {
			t.Fatalf("watch %d: %s", i, res)
		}
		clients = append(clients, tc)
	}
	if n := inotifyInstances(t) - before; n != 1 {
		t.Errorf("20 connections hold %d inotify instances, want 1", n)
	}
	os.Mkdir(filepath.Join(root, "7"), 0o755)
	os.WriteFile(filepath.Join(root, "7", "x"), nil, 0o644)
	clients[7].waitNote(0, procWait, func(n testNote) bool { return n.Method == "fs/missingChanged" })
	for i, tc := range clients {
		if i != 7 && len(tc.notesSnapshot()) > 0 {
			t.Errorf("connection %d was told of another's path: %v", i, tc.notesSnapshot())
		}
	}
}
