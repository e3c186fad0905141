package main

// Process input: process/write by writeId, stdin after exit and its bounded queue, the pty
// and process/resize (docs/protocol.md §6.6, §6.7, §6.10).

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestProcessWriteIsIdempotentByWriteID(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	tc.mustCall("process/start", with(procStart(t, "cat", "cat"), "pipeStdin", true))
	write := func(id, s string) string {
		return string(tc.mustCall("process/write", map[string]any{"processId": "cat", "chunk": b64(s), "writeId": id}))
	}
	if got := write("w1", "hello\n"); got != `{"status":"accepted"}` {
		t.Fatalf("write: %s", got)
	}
	waitOutput(tc, "cat", "stdout", "hello\n")
	if got := write("w1", "hello\n"); got != `{"status":"accepted"}` {
		t.Errorf("replayed write: %s", got)
	}
	write("w2", "bye\n")
	write("w3", "")
	if got := string(tc.mustCall("process/closeStdin", map[string]any{"processId": "cat"})); got != `{"status":"accepted"}` {
		t.Errorf("closeStdin: %s", got)
	}
	if got := string(tc.mustCall("process/closeStdin", map[string]any{"processId": "cat"})); got != `{"status":"stdinClosed"}` {
		t.Errorf("second closeStdin: %s", got)
	}
	if got := write("w4", "late\n"); got != `{"status":"stdinClosed"}` {
		t.Errorf("write after closeStdin: %s", got)
	}
	r := waitClosed(tc, "cat")
	if r.stdout() != "hello\nbye\n" || r.exitCode != 0 {
		t.Errorf("stdout %q exit %d: the replayed write must not be applied twice", r.stdout(), r.exitCode)
	}
}

func TestProcessWriteAfterTheProcessEnded(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	for _, tty := range []bool{false, true} {
		id := fmt.Sprintf("gone-%v", tty)
		tc.mustCall("process/start", with(procStart(t, id, "sleep", "600"), "pipeStdin", true, "tty", tty))
		tc.mustCall("process/terminate", map[string]any{"processId": id})
		waitClosed(tc, id)
		e := tc.callErr("process/write", map[string]any{"processId": id, "chunk": b64("x"), "writeId": "w"})
		if e.Code != codeInternal || e.Message != "failed to write to process stdin" {
			t.Errorf("tty=%v: %+v", tty, e)
		}
	}
}

func TestProcessStdinQueueIsBounded(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	// sleep never reads its stdin: the queue fills and then refuses.
	tc.mustCall("process/start", with(procStart(t, "full", "sleep", "600"), "pipeStdin", true))
	chunk := b64(strings.Repeat("x", 2<<20))
	var refused *rpcError
	for i := 0; i < stdinQueueLimit>>21+64 && refused == nil; i++ {
		_, refused = tc.call("process/write", map[string]any{"processId": "full", "chunk": chunk, "writeId": strconv.Itoa(i)})
	}
	if refused == nil || refused.Code != codeInternal || !strings.Contains(refused.Message, "already wait for the process to read them") {
		t.Fatalf("never refused: %+v", refused)
	}
	tc.mustCall("process/terminate", map[string]any{"processId": "full"})
	waitClosed(tc, "full")
}

func TestPTYWriteAndTerminalSize(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	t.Run("default 24x80", func(t *testing.T) {
		if r := tc.run(with(procStart(t, "sz1", "stty", "size"), "tty", true)); r.pty() != "24 80\r\n" {
			t.Errorf("stty size %q", r.pty())
		}
	})
	t.Run("size on start", func(t *testing.T) {
		if r := tc.run(with(procStart(t, "sz2", "stty", "size"), "tty", true, "rows", 40, "cols", 100)); r.pty() != "40 100\r\n" {
			t.Errorf("stty size %q", r.pty())
		}
	})
	t.Run("resize is seen by stty size", func(t *testing.T) {
		tc.mustCall("process/start", with(procStart(t, "sz3", "sh", "-c", "stty size; read x; stty size"), "tty", true))
		waitOutput(tc, "sz3", "pty", "24 80\r\n")
		if res := tc.mustCall("process/resize", map[string]any{"processId": "sz3", "rows": 50, "cols": 132}); string(res) != `{}` {
			t.Errorf("resize: %s", res)
		}
		tc.mustCall("process/write", map[string]any{"processId": "sz3", "chunk": b64("go\n"), "writeId": "w1"})
		r := waitClosed(tc, "sz3")
		if !strings.HasSuffix(r.pty(), "go\r\n50 132\r\n") {
			t.Errorf("pty output %q", r.pty())
		}
		if res := tc.mustCall("process/resize", map[string]any{"processId": "sz3", "rows": 5, "cols": 5}); string(res) != `{}` {
			t.Errorf("resize after close: %s", res)
		}
	})
	t.Run("a child that closed its terminal is not hung up before it exits", func(t *testing.T) {
		r := tc.run(with(procStart(t, "sz5", "sh", "-c", "exec 0<&- 1>&- 2>&-; sleep 0.2; exit 7"), "tty", true))
		if r.exitCode != 7 {
			t.Errorf("exit code %d, want 7 (129 means the server hung the terminal up at EIO)", r.exitCode)
		}
	})
	t.Run("closeStdin is refused for a PTY", func(t *testing.T) {
		tc.mustCall("process/start", with(procStart(t, "sz4", "cat"), "tty", true))
		if e := tc.callErr("process/closeStdin", map[string]any{"processId": "sz4"}); e.Code != codeInvalidParams {
			t.Errorf("closeStdin: %+v", e)
		}
		tc.mustCall("process/write", map[string]any{"processId": "sz4", "chunk": b64("\x04"), "writeId": "eof"})
		if r := waitClosed(tc, "sz4"); r.exitCode != 0 {
			t.Errorf("cat after ^D: exit %d", r.exitCode)
		}
	})
}

// TestProcessWriteIDMemoryIsBounded: the remembered writeIds cost a bounded amount of memory
// however long the ids a client sends, and the oldest are forgotten first.
func TestProcessWriteIDMemoryIsBounded(t *testing.T) {
	var ids writeIDSet
	long := strings.Repeat("w", 8<<10)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i <= writeIDMemory; i++ {
		ids.add(long + strconv.Itoa(i))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4<<20 {
		t.Errorf("%d writeIds of 8 KiB hold %d bytes", writeIDMemory, grew)
	}
	if ids.has(long+"0") || !ids.has(long+"1") || !ids.has(long+strconv.Itoa(writeIDMemory)) {
		t.Errorf("not the newest %d ids", writeIDMemory)
	}
	runtime.KeepAlive(&ids)
}

// TestStdinWriterStates walks the stdin writer's states on a real pipe: EOF given while idle
// and while the queue is being written (the queued bytes are written first), and the process
// ending; each answers later writes and closeStdin as process/write and process/closeStdin
// must (docs/protocol.md §6.6, §6.7).
func TestStdinWriterStates(t *testing.T) {
	newPipe := func(t *testing.T) (*os.File, *stdinWriter) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r, &stdinWriter{f: w, owns: true}
	}
	expect := func(t *testing.T, w *stdinWriter, write, closeStdin string) {
		t.Helper()
		status, err := w.enqueue([]byte("late"))
		if err != nil {
			status = err.Error()
		}
		if status != write {
			t.Errorf("write: %q, want %q", status, write)
		}
		if got := w.closeInput(); got != closeStdin {
			t.Errorf("closeStdin: %q, want %q", got, closeStdin)
		}
	}
	t.Run("closeStdin while idle", func(t *testing.T) {
		r, w := newPipe(t)
		if status, err := w.enqueue([]byte("hello")); status != "accepted" || err != nil {
			t.Fatalf("write: %q %v", status, err)
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "hello" {
			t.Fatalf("read %q %v", buf, err)
		}
		if got := w.closeInput(); got != "accepted" { // idle, or still writing (closing): both accept
			t.Fatalf("closeStdin: %q", got)
		}
		if rest, err := io.ReadAll(r); len(rest) != 0 || err != nil {
			t.Errorf("after EOF: %q %v", rest, err)
		}
		expect(t, w, "stdinClosed", "stdinClosed")
		w.shutdown()
		expect(t, w, "stdinClosed", "stdinClosed")
	})
	t.Run("closeStdin while writing", func(t *testing.T) {
		r, w := newPipe(t)
		big := bytes.Repeat([]byte("x"), 1<<20) // far more than a pipe holds: the drain blocks
		if status, err := w.enqueue(big); status != "accepted" || err != nil {
			t.Fatalf("write: %q %v", status, err)
		}
		if got := w.closeInput(); got != "accepted" {
			t.Fatalf("closeStdin: %q", got)
		}
		expect(t, w, "stdinClosed", "stdinClosed")
		got, err := io.ReadAll(r) // EOF only once the queue is written
		if err != nil || !bytes.Equal(got, big) {
			t.Errorf("read %d bytes, %v; want the %d queued before EOF", len(got), err, len(big))
		}
	})
	t.Run("the process ended", func(t *testing.T) {
		r, w := newPipe(t)
		w.shutdown()
		if rest, err := io.ReadAll(r); len(rest) != 0 || err != nil {
			t.Errorf("after shutdown: %q %v", rest, err)
		}
		expect(t, w, "failed to write to process stdin", "stdinClosed")
	})
}
