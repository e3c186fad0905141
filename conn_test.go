package main

// Connection-level behaviour on real sockets: many short connections leak nothing, a request
// that waits never delays another, and a client that stops reading loses its connection (not
// its session) without slowing anyone else.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openFDs counts this process's open descriptors, or -1 where /proc/self/fd does not exist.
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// settle waits until goroutines and descriptors are back to at most the baseline; counts have
// no event to wait on, so it polls, for at most 10 s.
func settle(goroutines, fds int) (int, int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, f := runtime.NumGoroutine(), openFDs()
		if g <= goroutines && f <= fds || time.Now().After(deadline) {
			return g, f
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConnCycles1000 runs 1000 connect/initialize/disconnect cycles; afterwards goroutines and
// descriptors are back to their baseline (sessions stay, detached, as the protocol wants, and
// hold neither).
func TestConnCycles1000(t *testing.T) {
	ts := startTestServer(t)
	ts.connect(t).close() // warm up whatever is created once
	baseG, baseF := settle(runtime.NumGoroutine(), openFDs())
	for range 1000 {
		tc := ts.connect(t)
		tc.mustCall("environment/status", nil)
		tc.close()
	}
	g, f := settle(baseG, baseF)
	t.Logf("after 1000 cycles: goroutines %d (baseline %d), fds %d (baseline %d)", g, baseG, f, baseF)
	if g > baseG {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines leaked:\n%s", g-baseG, buf[:runtime.Stack(buf, true)])
	}
	if f > baseF {
		t.Errorf("%d descriptors leaked", f-baseF)
	}
}

// testMethod registers a test-only method with no lifecycle gate.
func testMethod(name string, call func(c *conn, params json.RawMessage) (result, error)) func(*server) {
	return func(s *server) { s.methods[name] = method{call: call} }
}

// TestConnLongPollDoesNotDelayOthers: a request that waits (returns a later) leaves the
// connection free, so environment/status is answered meanwhile; two laters with the same key
// still run in order.
func TestConnLongPollDoesNotDelayOthers(t *testing.T) {
	release, releaseLane := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var order []string
	record := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	ts := startTestServer(t,
		testMethod("test/wait", func(c *conn, _ json.RawMessage) (result, error) {
			c.call.laterEncoded(async, func(ctx context.Context) (result, error) {
				select {
				case <-release:
					return answer("released"), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			})
			return nil, nil
		}),
		testMethod("test/lane", func(c *conn, params json.RawMessage) (result, error) {
			var name string
			json.Unmarshal(params, &name)
			laterInLane(c.call, "same process", func(ctx context.Context) (string, error) {
				if name == "first" {
					<-releaseLane
				}
				record(name)
				return name, nil
			})
			return nil, nil
		}))
	tc := ts.connect(t)
	wait := tc.start("test/wait", nil)
	first := tc.start("test/lane", "first")
	second := tc.start("test/lane", "second")
	for range 3 {
		if got := string(tc.mustCall("environment/status", nil)); got != `{"status":"ready"}` {
			t.Fatalf("environment/status: %s", got)
		}
	}
	select {
	case r := <-wait:
		t.Fatalf("test/wait answered before its release: %+v", r)
	case r := <-second:
		t.Fatalf("the second laned request ran before the first: %+v", r)
	default:
	}
	close(releaseLane)
	for _, ch := range []<-chan testReply{first, second} {
		if r := <-ch; r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	close(release)
	if r := <-wait; string(r.Result) != `"released"` {
		t.Fatalf("test/wait: %s %v", r.Result, r.Err)
	}
	if strings.Join(order, ",") != "first,second" {
		t.Errorf("laned requests ran as %v", order)
	}
}

// TestConnStuckQuickRequestMovesTheReader pins runQuick's hand-over. fs methods first run
// on the reader; one that blocks (a write into a FIFO whose reader does not read) must not
// keep the connection from answering the requests after it, and it answers once unblocked.
func TestConnStuckQuickRequestMovesTheReader(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	root := t.TempDir()
	fifo := filepath.Join(root, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(fifo, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0) // a reader, not reading yet
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	awaitBytes := func() {
		t.Helper()
		if n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 30_000); n != 1 {
			t.Fatalf("the FIFO got no bytes within 30 s (poll: %d, %v)", n, err)
		}
	}
	data := bytes.Repeat([]byte("stuck "), 200<<10) // far more than a pipe holds
	stuck := tc.start("fs/writeFile", map[string]string{"path": fileURI(fifo), "dataBase64": base64.StdEncoding.EncodeToString(data)})
	awaitBytes() // the write has begun, and blocks once the pipe is full
	for range 3 {
		tc.mustCall("fs/getMetadata", map[string]string{"path": fileURI(root)})
	}
	select {
	case rep := <-stuck:
		t.Fatalf("the write into the FIFO answered before anyone read it: %+v", rep)
	default:
	}
	var got []byte
	buf := make([]byte, 64<<10)
	for len(got) < len(data) {
		awaitBytes()
		n, err := unix.Read(fd, buf)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("the FIFO ended after %d of %d bytes: %v", len(got), len(data), err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the FIFO gave other bytes than those written")
	}
	select {
	case rep := <-stuck:
		if rep.Err != nil {
			t.Fatalf("the write into the FIFO: error %d %s", rep.Err.Code, rep.Err.Message)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the write into the FIFO did not answer once drained")
	}
}

// TestConnQuickLatersEndingAtTheBudget runs quick laters that end right around inlineBudget,
// where the reader finishing one and the watch moving reading away from it meet. Whichever
// wins, every request is answered once and the connection's count of deferred work never
// goes below zero (it once did: the old reader gave back a count the watch had not taken
// yet, and the server panicked).
func TestConnQuickLatersEndingAtTheBudget(t *testing.T) {
	srv := newServer(t.Context(), serverConfig{sessionTTL: time.Minute, retention: time.Minute}, newTextLogger(io.Discard, levelInfo))
	defer srv.shutdown()
	srv.methods["test/spin"] = method{call: func(c *conn, params json.RawMessage) (result, error) {
		var d time.Duration
		if err := json.Unmarshal(params, &d); err != nil {
			return nil, err
		}
		c.call.laterEncoded(quick, func(context.Context) (result, error) {
			for end := time.Now().Add(d); time.Now().Before(end); {
			}
			return emptyResult{}, nil
		})
		return nil, nil
	}}
	mt := newMemTransport()
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.serveConn(mt, "test")
	}()
	const n = 3000
	for i := range n {
		// 0.9 to 1.1 times the budget, spread over the requests.
		d := inlineBudget*9/10 + time.Duration(i%41)*inlineBudget/200
		mt.in <- []byte(fmt.Sprintf(`{"id":%d,"method":"test/spin","params":%d}`, i, d))
		select {
		case rep := <-mt.out:
			if !strings.Contains(string(rep), `"result":{}`) {
				t.Fatalf("request %d: %s", i, rep)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("request %d: no answer", i)
		}
	}
	close(mt.in)
	<-done
}

// TestConnSlowClientIsClosed: a client that never reads while notifications pour in fills its
// outgoing queue; the producer then waits, and once the queue has made no progress for the
// stall timeout the connection is closed for errSlowClient (close code 1008 when it can
// still be written), the session detaches and can be resumed, and another connection is
// answered all along.
func TestConnSlowClientIsClosed(t *testing.T) {
	flooding := make(chan struct{})
	ended := make(chan error, 1)
	ts := startTestServer(t, func(s *server) { s.cfg.stallTimeout = 300 * time.Millisecond }, testMethod("test/flood", func(c *conn, _ json.RawMessage) (result, error) {
		c.call.laterEncoded(async, func(ctx context.Context) (result, error) {
			note, err := appendNotification(nil, "test/flood", map[string]string{"data": strings.Repeat("x", 64<<10)})
			if err != nil {
				return nil, err
			}
			for sent := 0; ctx.Err() == nil; sent += len(note) {
				if sent == 64*len(note) {
					close(flooding)
				}
				if sent > 1<<30 {
					ended <- errors.New("1 GiB queued for a client that reads nothing")
					return nil, nil
				}
				c.notify(note)
			}
			ended <- c.reason()
			return nil, nil
		})
		return nil, nil
	}))
	other := ts.connect(t)

	slow := rawUpgrade(t, ts)
	slow.send(cText(`{"id":1,"method":"initialize","params":{"clientName":"slow"}}`), cText(`{"method":"initialized"}`))
	var init struct {
		Result struct {
			SessionID string `json:"sessionId"`
		} `json:"result"`
	}
	json.Unmarshal([]byte(slow.expectReply("1")), &init)
	slow.send(cText(`{"id":2,"method":"test/flood"}`)) // and never read again

	<-flooding
	other.mustCall("environment/status", nil) // while the slow connection's queue fills
	if err := <-ended; !errors.Is(err, errSlowClient) {
		t.Fatalf("flood ended with %v, want errSlowClient", err)
	}
	other.mustCall("environment/status", nil)

	// The slow client finally reads: whatever was in flight, then the end of TCP.
	slow.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, slow.br)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("slow connection still open after %d bytes", n)
	}
	t.Logf("the slow client had %d bytes in flight when its connection ended (%v)", n, err)

	// Its session outlived the connection. The client sees TCP end a moment before the server
	// has detached the session, so wait for that.
	waitDetached(t, ts, init.Result.SessionID)
	resumed := ts.dial(t)
	resumed.initialize(&init.Result.SessionID)
	if resumed.sessionID != init.Result.SessionID {
		t.Fatalf("resumed session %q, want %q", resumed.sessionID, init.Result.SessionID)
	}
}

// TestConnBackPressureKeepsAReadingClient: notifications produced far faster than the
// client reads (48 MiB against a 16 MiB queue) make the producer wait; a client that keeps
// reading is never disconnected and receives every one of them, in order.
func TestConnBackPressureKeepsAReadingClient(t *testing.T) {
	const count = 768 // 768 × 64 KiB = 48 MiB
	ts := startTestServer(t, testMethod("test/burst", func(c *conn, _ json.RawMessage) (result, error) {
		c.call.laterEncoded(async, func(ctx context.Context) (result, error) {
			for i := range count {
				note, err := appendNotification(nil, "test/burst", map[string]any{"i": i, "data": strings.Repeat("x", 64<<10)})
				if err != nil {
					return nil, err
				}
				c.notify(note)
			}
			return answer("done"), nil
		})
		return nil, nil
	}))
	tc := ts.connect(t)
	tc.mustCall("test/burst", nil)
	lastIndex := fmt.Sprintf(`"i":%d}`, count-1)
	tc.waitNote(0, time.Minute, func(n testNote) bool {
		return n.Method == "test/burst" && strings.Contains(string(n.Params), lastIndex)
	})
	notes := tc.notesSnapshot()
	got := 0
	for _, n := range notes {
		if n.Method == "test/burst" {
			if !strings.Contains(string(n.Params), fmt.Sprintf(`"i":%d}`, got)) {
				t.Fatalf("notification %d out of order: %.40s…", got, n.Params)
			}
			got++
		}
	}
	if got != count {
		t.Fatalf("received %d notifications, want %d", got, count)
	}
	tc.mustCall("environment/status", nil) // still connected
}

// TestConnEndsWhileTheFirstReaderIsStalled: a quick fs/writeFile stalls on the connection's
// first reader (a FIFO whose reader never reads), reading is handed over, then the client
// hangs up. The connection must end at once — the cancel gives up the stalled write — and its
// session detach, rather than wait for a write that only the connection's end can stop.
func TestConnEndsWhileTheFirstReaderIsStalled(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	root := t.TempDir()
	fifo, fd := stalledFIFO(t, root)
	s := serverSession(ts, tc.sessionID)
	s.mu.Lock()
	detached := s.detached
	s.mu.Unlock()
	data := bytes.Repeat([]byte("stuck "), 200<<10) // more than the FIFO holds
	tc.start("fs/writeFile", map[string]string{"path": fileURI(fifo), "dataBase64": base64.StdEncoding.EncodeToString(data)})
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 30_000)  // the write has begun
	tc.mustCall("fs/getMetadata", map[string]string{"path": fileURI(root)}) // answered: reading moved on
	tc.close()
	select {
	case <-detached:
	case <-time.After(10 * time.Second):
		t.Fatal("the session is still attached after the client hung up: the stalled write held the connection's end back")
	}
}

// stalledFIFO makes a FIFO in dir with a reader that does not read (closed with the test): a
// write of more than the pipe holds blocks until the writer gives up.
func stalledFIFO(t *testing.T, dir string) (string, int) {
	t.Helper()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(fifo, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fifo, fd
}
