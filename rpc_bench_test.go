package main

// Benchmarks of the per-message hot paths: frame reading and writing (both roles), a
// request's round trip through dispatch, and response encoding. Run with
//
//	go test -run '^$' -bench 'WS|Dispatch|AppendResponse' -benchmem .

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// loopReader returns the same bytes over and over: a stream of identical frames.
type loopReader struct {
	data []byte
	off  int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := copy(p, r.data[r.off:])
	r.off = (r.off + n) % len(r.data)
	return n, nil
}

var benchSizes = []int{8 << 10, 64 << 10}

// BenchmarkWSReadFrame reads masked client text frames on the server side: header checks,
// unmasking, UTF-8 validation and reassembly.
func BenchmarkWSReadFrame(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			payload := make([]byte, size)
			for i := range payload {
				payload[i] = 'a' + byte(i%26)
			}
			frame := maskedFrame(0x81, [4]byte{0x12, 0x34, 0x56, 0x78}, payload)
			mc := &memConn{r: &loopReader{data: frame}, discard: true}
			c := newWSConn(mc, bufio.NewReaderSize(mc, 4096), false, wsOptions{})
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				msg, err := c.readMessage()
				if err != nil || len(msg) != size {
					b.Fatalf("read %d bytes, %v", len(msg), err)
				}
			}
		})
	}
}

// BenchmarkWSWriteFrame writes text frames as the server (plain) and as a client (masked
// through the write buffer, the caller's bytes untouched).
func BenchmarkWSWriteFrame(b *testing.B) {
	for _, role := range []struct {
		name   string
		client bool
	}{{"server", false}, {"client", true}} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/%dKiB", role.name, size>>10), func(b *testing.B) {
				payload := make([]byte, size)
				c := newWSConn(&memConn{discard: true}, nil, role.client, wsOptions{})
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if err := c.writeMessage(payload); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// benchSession is an initialized connection to a fresh server, both ended with b.
func benchSession(b *testing.B) *memSession {
	srv := newServer(b.Context(), serverConfig{sessionTTL: time.Minute, retention: time.Minute}, newTextLogger(io.Discard, levelInfo))
	b.Cleanup(srv.shutdown)
	ms := startMemSession(b, srv)
	b.Cleanup(ms.end)
	ms.initialize()
	return ms
}

// BenchmarkDispatch is one environment/status request's round trip through serveConn:
// parse, dispatch, encode, the outgoing queue and the writer goroutine.
func BenchmarkDispatch(b *testing.B) {
	ms := benchSession(b)
	req := []byte(`{"id":7,"method":"environment/status"}`)
	want := `{"id":7,"result":{"status":"ready"}}`
	b.ReportAllocs()
	for b.Loop() {
		ms.send(req)
		if got, ok := ms.recv(); !ok || string(got) != want {
			b.Fatalf("got %s, want %s", got, want)
		}
	}
}

// BenchmarkAppendResponse encodes the two results every client asks for.
func BenchmarkAppendResponse(b *testing.B) {
	id := json.RawMessage(`12345`)
	for _, tt := range []struct {
		name   string
		result any
	}{
		{"status", map[string]string{"status": "ready"}},
		{"environmentInfo", hostEnvironment()},
	} {
		b.Run(tt.name, func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if buf, err = appendResponse(buf[:0], id, tt.result); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(buf)))
		})
	}
}

// BenchmarkDispatchGetMetadata is one fs/getMetadata through the dispatcher, stat included:
// the server's own part of the round trip that the bench's getMetadata row measures.
func BenchmarkDispatchGetMetadata(b *testing.B) {
	ms := benchSession(b)
	path := filepath.Join(b.TempDir(), "f")
	if err := os.WriteFile(path, []byte("hello"), 0o644); err != nil {
		b.Fatal(err)
	}
	req := []byte(`{"id":7,"method":"fs/getMetadata","params":{"path":"` + fileURI(path) + `"}}`)
	b.ReportAllocs()
	for b.Loop() {
		ms.send(req)
		if got, ok := ms.recv(); !ok || !bytes.Contains(got, []byte(`"isFile":true`)) {
			b.Fatalf("got %s", got)
		}
	}
}

// BenchmarkDispatchGetMetadataSandboxed is BenchmarkDispatchGetMetadata with the sandbox
// object Codex sends in workspace-write mode: a read that stays in the server, where the
// object costs only its recognition (sandboxCache.check).
func BenchmarkDispatchGetMetadataSandboxed(b *testing.B) {
	ms := benchSession(b)
	dir := b.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("hello"), 0o644); err != nil {
		b.Fatal(err)
	}
	sb := `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},` +
		`{"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"},` +
		`{"path":{"type":"special","value":{"kind":"slash_tmp"}},"access":"write"},` +
		`{"path":{"type":"special","value":{"kind":"tmpdir"}},"access":"write"}]},"network":"restricted"},` +
		`"windowsSandboxLevel":"disabled","cwd":"` + fileURI(dir) + `","workspaceRoots":["` + fileURI(dir) + `"]}`
	req := []byte(`{"id":7,"method":"fs/getMetadata","params":{"path":"` + fileURI(path) + `","sandbox":` + sb + `}}`)
	b.ReportAllocs()
	for b.Loop() {
		ms.send(req)
		if got, ok := ms.recv(); !ok || !bytes.Contains(got, []byte(`"isFile":true`)) {
			b.Fatalf("got %s", got)
		}
	}
}
