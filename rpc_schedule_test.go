package main

// Benchmarks and tests of the scheduler (rpc_schedule.go, docs/protocol.md §3.2–§3.4).

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
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
