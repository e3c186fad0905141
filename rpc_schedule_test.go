package main

// Benchmarks and tests of the scheduler (rpc_schedule.go, docs/protocol.md §3.2–§3.4).

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// benchProcess starts a child that never reads its stdin nor writes, for the process methods'
// round trips, and returns its id.
func benchProcess(b *testing.B, ms *memSession) string {
	req := `{"id":1,"method":"process/start","params":{"processId":"p","argv":["sleep","1000"],"cwd":"` +
		fileURI(b.TempDir()) + `","env":{"PATH":"/usr/bin:/bin"},"tty":false,"pipeStdin":true}}`
	ms.send([]byte(req))
	if got, ok := ms.recv(); !ok || !bytes.Contains(got, []byte(`"processId":"p"`)) {
		b.Fatalf("process/start: %s", got)
	}
	b.Cleanup(func() {
		ms.send([]byte(`{"id":2,"method":"process/terminate","params":{"processId":"p"}}`))
	})
	return "p"
}

// BenchmarkDispatchProcessRead is one process/read through the dispatcher (inline, on the
// reader): nothing new to read, answered at once.
func BenchmarkDispatchProcessRead(b *testing.B) {
	ms := benchSession(b)
	benchProcess(b, ms)
	req := []byte(`{"id":7,"method":"process/read","params":{"processId":"p","afterSeq":0}}`)
	b.ReportAllocs()
	for b.Loop() {
		ms.send(req)
		if got, ok := ms.recv(); !ok || !bytes.Contains(got, []byte(`"chunks":[]`)) {
			b.Fatalf("got %s", got)
		}
	}
}

// BenchmarkDispatchProcessWrite is one process/write through the dispatcher (inline): an
// empty chunk, queued for the child's stdin.
func BenchmarkDispatchProcessWrite(b *testing.B) {
	ms := benchSession(b)
	benchProcess(b, ms)
	reqs := make([][]byte, 4096) // writeIds are remembered: each request is a new one
	for i := range reqs {
		reqs[i] = []byte(`{"id":7,"method":"process/write","params":{"processId":"p","chunk":"","writeId":"w` + strconv.Itoa(i) + `"}}`)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ms.send(reqs[i%len(reqs)])
		i++
		if got, ok := ms.recv(); !ok || !bytes.Contains(got, []byte(`"status":"accepted"`)) {
			b.Fatalf("got %s", got)
		}
	}
}

// BenchmarkDispatchReadBlock is one fs/readBlock through the dispatcher: lane work on a
// goroutine of its own, after the earlier work on its handle.
func BenchmarkDispatchReadBlock(b *testing.B) {
	ms := benchSession(b)
	path := filepath.Join(b.TempDir(), "f")
	if err := os.WriteFile(path, []byte("hello"), 0o644); err != nil {
		b.Fatal(err)
	}
	ms.send([]byte(`{"id":1,"method":"fs/open","params":{"handleId":"h","path":"` + fileURI(path) + `"}}`))
	if got, ok := ms.recv(); !ok || !bytes.Contains(got, []byte(`"handleId":"h"`)) {
		b.Fatalf("fs/open: %s", got)
	}
	req := []byte(`{"id":7,"method":"fs/readBlock","params":{"handleId":"h","offset":0,"len":5}}`)
	b.ReportAllocs()
	for b.Loop() {
		ms.send(req)
		if got, ok := ms.recv(); !ok || !bytes.Contains(got, []byte(`"eof":false`)) {
			b.Fatalf("got %s", got)
		}
	}
}

// lendingTransport is a memTransport that lends its messages, as ws.go and stdio.go do, and
// reports each release by the message's tag.
type lendingTransport struct {
	*memTransport
	tag      uint64
	released chan uint64
}

func (l *lendingTransport) next() (message, error) {
	m, err := l.memTransport.next()
	if err == nil {
		l.tag++
		m.lender, m.tag = l, l.tag
	}
	return m, err
}

func (l *lendingTransport) releaseMessage(m message) { l.released <- m.tag }

// borrowingParams are params that keep pointing into their message (as fs/writeFile's do).
type borrowingParams struct {
	X string `json:"x"`
}

func (*borrowingParams) borrowsMessage() {}

// TestSchedulerReleasesAfterTheLastReader pins the one rule of a message's bytes (work.msg):
// given back once the handler on the reader is done when the work it registered does not
// read them (a long poll still waiting), and only after that work answered when its params
// borrow them; every message is given back exactly once.
func TestSchedulerReleasesAfterTheLastReader(t *testing.T) {
	srv := newServer(t.Context(), serverConfig{sessionTTL: time.Minute, retention: time.Minute}, newTextLogger(io.Discard, levelInfo))
	defer srv.shutdown()
	unblockPoll, unblockBorrow := make(chan struct{}), make(chan struct{})
	srv.methods["test/poll"] = handle("", "PollParams", decides, func(c *call, _ *struct{}) (emptyResult, error) {
		later(c, poll, func(ctx context.Context) (emptyResult, error) {
			<-unblockPoll
			return emptyResult{}, nil
		}).orNow(emptyResult{})
		return emptyResult{}, nil
	})
	srv.methods["test/borrow"] = handle("", "BorrowParams", async, func(c *call, _ *borrowingParams) (emptyResult, error) {
		<-unblockBorrow
		return emptyResult{}, nil
	})
	lt := &lendingTransport{memTransport: newMemTransport(), released: make(chan uint64, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.serveConn(lt, "test")
	}()
	released := func(want uint64) {
		t.Helper()
		select {
		case got := <-lt.released:
			if got != want {
				t.Fatalf("message %d released, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d never released", want)
		}
	}
	quiet := func() {
		t.Helper()
		select {
		case got := <-lt.released:
			t.Fatalf("message %d released while its work still reads it", got)
		case b := <-lt.out:
			t.Fatalf("answered early: %s", b)
		default:
		}
	}
	lt.in <- []byte(`{"id":1,"method":"test/poll","params":{}}`)
	released(1) // the long poll waits, but reads only its decoded params
	lt.in <- []byte(`{"id":2,"method":"test/borrow","params":{"x":"y"}}`)
	lt.in <- []byte(`{"id":3,"method":"test/poll","params":{}}`) // the reader went on: 2 runs on its own goroutine
	released(3)
	quiet()
	close(unblockBorrow)
	if b := <-lt.out; string(b) != `{"id":2,"result":{}}` {
		t.Fatalf("test/borrow: %s", b)
	}
	released(2) // after its answer
	close(unblockPoll)
	for range 2 {
		<-lt.out
	}
	lt.close(nil)
	<-done
	quiet()
}
