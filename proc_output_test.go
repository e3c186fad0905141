package main

// Process output: byte-exact streams, retention and process/read, the order of output, exited
// and closed, and back-pressure on a slow client (docs/protocol.md §6.2, §6.5, §6.11, §5.4).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// writeRandomFile writes n random bytes to a new file and returns its path and content.
func writeRandomFile(t testing.TB, n int) (string, []byte) {
	data := make([]byte, n)
	rand.Read(data)
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// checkRetained reads the whole retained buffer of a closed process and checks it is the
// tail of what was written, in whole chunks, within the limit, and evicting only what it had to.
func checkRetained(t *testing.T, tc *testClient, id string, r procResult, want []byte) {
	t.Helper()
	rr := tc.read(map[string]any{"processId": id})
	var retained []byte
	for _, c := range rr.Chunks {
		retained = append(retained, c.Chunk...)
	}
	if len(retained) > retainedOutputLimit || !bytes.HasSuffix(want, retained) {
		t.Fatalf("retained %d bytes, not a tail of the output within %d", len(retained), retainedOutputLimit)
	}
	var sizes []int // output chunk sizes by seq
	for _, e := range r.events {
		if e.Method == "process/output" {
			sizes = append(sizes, len(e.Chunk))
		}
	}
	if len(want) <= retainedOutputLimit && (len(retained) != len(want) || rr.Chunks[0].Seq != 1) {
		t.Errorf("output of %d bytes: %d retained from seq %d, want all", len(want), len(retained), rr.Chunks[0].Seq)
	}
	if first := int(rr.Chunks[0].Seq); first > 1 && len(retained)+sizes[first-2] <= retainedOutputLimit {
		t.Errorf("chunk %d was evicted though it fits", first-1)
	}
	if rr.NextSeq != r.closedSeq+1 || !rr.Exited || !rr.Closed {
		t.Errorf("read: nextSeq %d exited %v closed %v", rr.NextSeq, rr.Exited, rr.Closed)
	}
}

func TestProcessLargeOutputIsByteExactWithBoundedRetention(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	path, data := writeRandomFile(t, 3_000_006)
	r := tc.run(procStart(t, "big", "cat", path))
	if !bytes.Equal(r.out["stdout"], data) {
		t.Fatalf("got %d bytes, want the %d written", len(r.out["stdout"]), len(data))
	}
	for _, e := range r.events {
		if len(e.Chunk) > readChunkMax || e.Size > 1<<20/8 {
			t.Fatalf("seq %d: chunk of %d bytes, notification params of %d", e.Seq, len(e.Chunk), e.Size)
		}
	}
	checkRetained(t, tc, "big", r, data)
	// maxBytes pages through the retained buffer without gaps or repeats.
	first := tc.read(map[string]any{"processId": "big"}).Chunks[0].Seq
	var paged []byte
	for after := first - 1; ; {
		rr := tc.read(map[string]any{"processId": "big", "afterSeq": after, "maxBytes": 100_000})
		if len(rr.Chunks) == 0 {
			break
		}
		for _, c := range rr.Chunks {
			paged = append(paged, c.Chunk...)
		}
		after = rr.NextSeq - 1
	}
	if !bytes.HasSuffix(data, paged) || len(paged) < retainedOutputLimit-readChunkMax {
		t.Errorf("paging read %d bytes", len(paged))
	}
	t.Logf("3,000,006 bytes in %d chunks; retained from seq %d", r.exitedSeq-1, first)
}

func TestProcessOutputBoundaries(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	for _, n := range []int{8191, 8192, 8193, 1<<20 - 1, 1 << 20, 1<<20 + 1} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			path, data := writeRandomFile(t, n)
			id := "b" + strconv.Itoa(n)
			r := tc.run(procStart(t, id, "cat", path))
			if !bytes.Equal(r.out["stdout"], data) {
				t.Fatalf("got %d bytes, want %d", len(r.out["stdout"]), n)
			}
			checkRetained(t, tc, id, r, data)
			// The first chunk always comes back, however small maxBytes is.
			rr := tc.read(map[string]any{"processId": id, "maxBytes": 0})
			if len(rr.Chunks) != 1 || rr.NextSeq != rr.Chunks[0].Seq+1 {
				t.Errorf("maxBytes 0: %d chunks, nextSeq %d", len(rr.Chunks), rr.NextSeq)
			}
			rr = tc.read(map[string]any{"processId": id, "maxBytes": 8192})
			total := 0
			for _, c := range rr.Chunks {
				total += len(c.Chunk)
			}
			if len(rr.Chunks) > 1 && total > 8192 {
				t.Errorf("maxBytes 8192: %d bytes in %d chunks", total, len(rr.Chunks))
			}
		})
	}
}

func TestProcessInstantExitDeliversAllOutput(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	path, data := writeRandomFile(t, 200_000)
	for i := 0; i < 20; i++ {
		r := tc.run(procStart(t, fmt.Sprintf("pipe%d", i), "sh", "-c", "cat "+path+"; printf tail >&2"))
		if !bytes.Equal(r.out["stdout"], data) || r.stderr() != "tail" {
			t.Fatalf("run %d: %d stdout bytes, stderr %q", i, len(r.out["stdout"]), r.stderr())
		}
		r = tc.run(with(procStart(t, fmt.Sprintf("pty%d", i), "printf", "a%.0sb\\n", "1", "2", "3"), "tty", true))
		if r.pty() != "a\r\nb\r\nb\r\n" && r.pty() != "ab\r\nab\r\nab\r\n" {
			t.Fatalf("run %d: pty output %q", i, r.pty())
		}
	}
}

// TestProcessExitedBeforeClosedWithLateOutput has a grandchild write after its parent
// exited: exited comes first, the late output after it, closed last.
func TestProcessExitedBeforeClosedWithLateOutput(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tc.mustCall("process/start", procStart(t, "late", "sh", "-c", `echo early; (cat "$0" >/dev/null; echo late) & exit 5`, fifo))
	exited := waitEvent(tc, "late", "process/exited")
	if exited.Seq != 2 || *exited.ExitCode != 5 {
		t.Fatalf("exited %+v", exited)
	}
	rr := tc.read(map[string]any{"processId": "late", "afterSeq": 1, "waitMs": 60_000})
	if !rr.Exited || rr.Closed || rr.NextSeq != 3 || len(rr.Chunks) != 0 {
		t.Errorf("read after exit: %+v", rr)
	}
	poll := tc.start("process/read", map[string]any{"processId": "late", "afterSeq": 2, "waitMs": 60_000})
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	r := waitClosed(tc, "late")
	if r.stdout() != "early\nlate\n" || r.exitedSeq != 2 || r.closedSeq != 4 {
		t.Errorf("stdout %q exited seq %d closed seq %d", r.stdout(), r.exitedSeq, r.closedSeq)
	}
	reply := <-poll
	if reply.Err != nil || !strings.Contains(string(reply.Result), `"seq":3`) {
		t.Errorf("long poll: %s %+v", reply.Result, reply.Err)
	}
}

// TestProcessGrandchildHoldingPipeDelaysClosed: closed waits for the orphan holding stdout;
// meanwhile the exited process is kept (no retention window runs before closed) and its id
// stays taken.
func TestProcessGrandchildHoldingPipeDelaysClosed(t *testing.T) {
	ts := startTestServer(t, func(s *server) { s.cfg.retention = time.Millisecond })
	tc := ts.connect(t)
	tc.mustCall("process/start", procStart(t, "gc", "sh", "-c", "sleep 600 & echo $!"))
	exited := waitEvent(tc, "gc", "process/exited")
	// The read waits for closed until its deadline: the sleep still holds stdout.
	rr := tc.read(map[string]any{"processId": "gc", "afterSeq": exited.Seq, "waitMs": 200})
	if !rr.Exited || rr.Closed {
		t.Fatalf("closed before the grandchild let go of the pipe: %+v", rr)
	}
	if e := tc.callErr("process/start", procStart(t, "gc", "true")); e.Message != "process gc already exists" {
		t.Errorf("start with the id of an exited process: %+v", e)
	}
	pid := firstLineInt(t, procOutput(tc, "gc"))
	// terminate answers running:false for an exited process, and kills nothing (0.169).
	if res := tc.mustCall("process/terminate", map[string]any{"processId": "gc"}); string(res) != `{"running":false}` {
		t.Errorf("terminate: %s", res)
	}
	if pidGone(pid) {
		t.Fatalf("terminate of an exited process killed its background child %d", pid)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	waitClosed(tc, "gc")
	waitPidGone(t, pid)
}

// TestProcessReadSemantics pins process/read's chunk selection, nextSeq and wake-up rules
// (docs/protocol.md §6.5) on three chunks made one at a time through cat.
func TestProcessReadSemantics(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	tc.mustCall("process/start", with(procStart(t, "r", "cat"), "pipeStdin", true))
	written := ""
	for i, s := range []string{"a\n", "bb\n", "ccc\n"} {
		tc.mustCall("process/write", map[string]any{"processId": "r", "chunk": b64(s), "writeId": strconv.Itoa(i)})
		written += s
		waitOutput(tc, "r", "stdout", written) // one chunk per write: the next waits for it
	}
	seqs := func(rr readResultJSON) string {
		var s []string
		for _, c := range rr.Chunks {
			s = append(s, strconv.FormatUint(c.Seq, 10))
		}
		return strings.Join(s, ",") + " next " + strconv.FormatUint(rr.NextSeq, 10)
	}
	tests := []struct {
		name   string
		params map[string]any
		want   string
	}{
		{"everything", map[string]any{}, "1,2,3 next 4"},
		{"maxBytes 0 returns the first chunk", map[string]any{"maxBytes": 0}, "1 next 2"},
		{"maxBytes smaller than the first chunk", map[string]any{"maxBytes": 1}, "1 next 2"},
		{"maxBytes reached exactly", map[string]any{"maxBytes": 5}, "1,2 next 3"},
		{"maxBytes not crossed", map[string]any{"maxBytes": 4}, "1 next 2"},
		{"maxBytes larger than everything", map[string]any{"maxBytes": 65536}, "1,2,3 next 4"},
		{"afterSeq", map[string]any{"afterSeq": 2}, "3 next 4"},
		{"afterSeq past the end", map[string]any{"afterSeq": 99}, " next 4"},
		{"waitMs deadline with nothing new", map[string]any{"afterSeq": 3, "waitMs": 50}, " next 4"},
	}
	for _, tt := range tests {
		params := with(tt.params, "processId", "r")
		if got := seqs(tc.read(params)); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
	// A long poll wakes on new output and never holds back the connection's other requests.
	poll := tc.start("process/read", map[string]any{"processId": "r", "afterSeq": 3, "waitMs": 60_000})
	tc.mustCall("environment/status", nil)
	if rr := tc.read(map[string]any{"processId": "r", "afterSeq": 2}); rr.Exited || rr.ExitCode != nil {
		t.Errorf("running process: %+v", rr)
	}
	select {
	case r := <-poll:
		t.Fatalf("long poll answered before any output: %s", r.Result)
	default:
	}
	tc.mustCall("process/write", map[string]any{"processId": "r", "chunk": b64("dddd\n"), "writeId": "d"})
	reply := <-poll
	var rr readResultJSON
	json.Unmarshal(reply.Result, &rr)
	if seqs(rr) != "4 next 5" || string(rr.Chunks[0].Chunk) != "dddd\n" {
		t.Errorf("long poll: %s", reply.Result)
	}
	// A long poll also wakes on exit; then nextSeq counts the exit and close events.
	poll = tc.start("process/read", map[string]any{"processId": "r", "afterSeq": 4, "waitMs": 60_000})
	tc.mustCall("process/closeStdin", map[string]any{"processId": "r"})
	reply = <-poll
	json.Unmarshal(reply.Result, &rr)
	if !rr.Exited || *rr.ExitCode != 0 || len(rr.Chunks) != 0 {
		t.Errorf("long poll on exit: %s", reply.Result)
	}
	waitClosed(tc, "r")
	rr = tc.read(map[string]any{"processId": "r", "afterSeq": 4, "maxBytes": 65536})
	if rr.NextSeq != 7 || !rr.Closed || rr.Failure != nil || rr.SandboxDenied {
		t.Errorf("after close: %+v", rr)
	}
}

func TestProcessRetentionWindow(t *testing.T) {
	ts := startTestServer(t, func(s *server) { s.cfg.retention = 300 * time.Millisecond })
	tc := ts.connect(t)
	r := tc.run(procStart(t, "ret", "echo", "one"))
	if r.stdout() != "one\n" {
		t.Fatalf("stdout %q", r.stdout())
	}
	// Until the window ends the id is taken and the output readable (both are racy at the
	// window's edge, so only the eventual removal is asserted strictly).
	deadline := time.Now().Add(procWait)
	for {
		_, err := tc.call("process/read", map[string]any{"processId": "ret"})
		if err != nil {
			if err.Message != "unknown process id ret" {
				t.Fatalf("read: %+v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("closed process never removed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	tc.mustCall("process/start", procStart(t, "ret", "echo", "two"))
	rr := tc.read(map[string]any{"processId": "ret", "waitMs": 60_000})
	if len(rr.Chunks) != 1 || string(rr.Chunks[0].Chunk) != "two\n" || rr.Chunks[0].Seq != 1 {
		t.Errorf("reused id: %+v", rr)
	}
}

// TestProcessNotificationsMayPrecedeTheStartResponse records the raw message order of quick
// processes: output, exited and closed may come before the process/start response, and each
// process's events still come complete and in seq order.
func TestProcessNotificationsMayPrecedeTheStartResponse(t *testing.T) {
	ts := startTestServer(t)
	ws, _, err := dialWebsocket(context.Background(), ts.url, nil, nil, wsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.close(nil)
	send := func(s string) {
		if err := ws.writeMessageOp(wsOpText, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"id":0,"method":"initialize","params":{"clientName":"order"}}`)
	send(`{"method":"initialized"}`)
	const n = 60
	cwd := fileURI(t.TempDir())
	for i := 1; i <= n; i++ {
		send(fmt.Sprintf(`{"id":%d,"method":"process/start","params":{"processId":"q%d","argv":["echo","x"],"cwd":%q,"env":{},"tty":false}}`, i, i, cwd))
	}
	responded := map[string]bool{}
	early, closed := 0, 0
	next := map[string]uint64{}
	ws.nc.SetReadDeadline(time.Now().Add(procWait))
	for closed < n {
		msg, err := ws.readMessage()
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			ID     *int `json:"id"`
			Method string
			Params struct {
				ProcessID string `json:"processId"`
				Seq       uint64
			}
			Error *rpcError
		}
		json.Unmarshal(msg, &m)
		switch {
		case m.Error != nil:
			t.Fatalf("error: %s", msg)
		case m.ID != nil && *m.ID > 0:
			responded[fmt.Sprintf("q%d", *m.ID)] = true
		case strings.HasPrefix(m.Method, "process/"):
			id := m.Params.ProcessID
			if !responded[id] && next[id] == 0 {
				early++
			}
			if m.Params.Seq != next[id]+1 {
				t.Fatalf("%s: seq %d after %d", id, m.Params.Seq, next[id])
			}
			next[id] = m.Params.Seq
			if m.Method == "process/closed" {
				closed++
			}
		}
	}
	t.Logf("%d of %d processes sent notifications before their start response", early, n)
}

// rawClient is a websocket client that reads only when the test says so, to play a client
// slower than the process it runs.
type rawClient struct {
	t  *testing.T
	ws *wsConn
}

func dialRaw(t *testing.T, ts *testServer) *rawClient {
	t.Helper()
	ws, _, err := dialWebsocket(context.Background(), ts.url, nil, nil, wsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.close(nil) })
	return &rawClient{t: t, ws: ws}
}

func (rc *rawClient) send(format string, a ...any) {
	rc.t.Helper()
	if err := rc.ws.writeMessageOp(wsOpText, fmt.Appendf(nil, format, a...)); err != nil {
		rc.t.Fatal(err)
	}
}

// rawMessage is one message a rawClient read: a response or a process notification.
type rawMessage struct {
	ID     *int            `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *rpcError       `json:"error"`
	Params procEvent       `json:"params"`
}

func (rc *rawClient) next() rawMessage {
	rc.t.Helper()
	rc.ws.nc.SetReadDeadline(time.Now().Add(procWait))
	b, err := rc.ws.readMessage()
	if err != nil {
		rc.t.Fatalf("read: %v", err)
	}
	var m rawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		rc.t.Fatalf("%v: %.200s", err, b)
	}
	m.Params.Method = m.Method
	return m
}

// outQueueBytes is how many bytes wait in the outgoing queue of session sid's connection.
func outQueueBytes(ts *testServer, sid string) int {
	s := serverSession(ts, sid)
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c == nil {
		return 0
	}
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	return c.out.bytes
}

// TestProcessOutputWaitsForASlowClient has a client stop reading while its process writes
// without pause. The output waits for the client (nothing is dropped, the connection stays),
// and a wait for the client holds up nothing else: process/terminate still kills at once.
func TestProcessOutputWaitsForASlowClient(t *testing.T) {
	ts := startTestServer(t, func(s *server) { s.cfg.stallTimeout = time.Hour })
	rc := dialRaw(t, ts)
	rc.send(`{"id":0,"method":"initialize","params":{"clientName":"slow"}}`)
	var init struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(rc.next().Result, &init)
	rc.send(`{"method":"initialized"}`)
	rc.send(`{"id":1,"method":"process/start","params":{"processId":"flood","argv":["sh","-c","echo $$; exec head -c 400000000 /dev/zero"],"cwd":%q,"env":{"PATH":%q},"tty":false}}`,
		fileURI(t.TempDir()), os.Getenv("PATH"))
	var events []procEvent
	var out []byte
	for !bytes.Contains(out, []byte("\n")) {
		if m := rc.next(); m.Method == "process/output" {
			events = append(events, m.Params)
			out = append(out, m.Params.Chunk...)
		}
	}
	pid := firstLineInt(t, string(out))
	// The client reads nothing more until the server's queue to it is full.
	chunkNote := base64.StdEncoding.EncodedLen(readChunkMax) + 200
	waitFor(t, "the outgoing queue is full", func() bool { return outQueueBytes(ts, init.SessionID)+2*chunkNote > outQueueLimit })
	rc.send(`{"id":2,"method":"process/terminate","params":{"processId":"flood"}}`)
	waitPidGone(t, pid)
	var terminated json.RawMessage
	for len(events) == 0 || events[len(events)-1].Method != "process/closed" {
		m := rc.next()
		switch {
		case m.ID != nil && *m.ID == 2:
			terminated = m.Result
		case strings.HasPrefix(m.Method, "process/"):
			events = append(events, m.Params)
		}
	}
	if string(terminated) != `{"running":true}` {
		t.Errorf("terminate: %s", terminated)
	}
	total := 0
	for i, e := range events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d (%s) has seq %d", i, e.Method, e.Seq)
		}
		if i > 0 && e.Method == "process/output" && bytes.ContainsFunc(e.Chunk, func(r rune) bool { return r != 0 }) {
			t.Fatalf("seq %d: output that head never wrote", e.Seq)
		}
		total += len(e.Chunk)
	}
	if ex := events[len(events)-2]; ex.Method != "process/exited" || *ex.ExitCode != 137 {
		t.Errorf("before closed: %+v", ex)
	}
	t.Logf("%d bytes in %d events, none dropped, reached a client that stopped reading", total, len(events))
}

// TestProcessRetainedOutputMemoryIsBounded feeds a process 200,000 one-byte chunks (an
// echoing terminal, a byte-at-a-time writer): the newest retainedChunkLimit are retained, in
// a few bytes of memory each.
func TestProcessRetainedOutputMemoryIsBounded(t *testing.T) {
	srv := newServer(context.Background(), serverConfig{sessionTTL: time.Minute, retention: time.Minute}, nil)
	sess := &session{id: "tiny", srv: srv}
	sess.procs = newProcTable(sess)
	p := newProcess(sess.procs, "tiny", true, time.Minute)
	const n = 200_000
	for range n {
		p.output(streamPTY, []byte{'x'})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	chunks := p.out.chunks
	if len(chunks) != retainedChunkLimit {
		t.Errorf("%d chunks retained, want %d", len(chunks), retainedChunkLimit)
	}
	for i, c := range chunks {
		if c.seq != uint64(n-len(chunks)+i+1) || string(p.out.bytesOf(&c)) != "x" {
			t.Fatalf("retained chunk %d has seq %d: not the newest", i, c.seq)
		}
	}
	mem := cap(p.out.data) + cap(chunks)*int(unsafe.Sizeof(chunks[0]))
	if limit := 4 * retainedChunkLimit * int(unsafe.Sizeof(chunks[0])); mem > limit {
		t.Errorf("%d one-byte chunks retained in %d bytes of memory, more than %d", len(chunks), mem, limit)
	}
}
