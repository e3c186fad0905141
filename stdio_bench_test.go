package main

// The stdio transport's write path (docs/protocol.md §2.4): one line per message, through
// the connection's one writer.

import (
	"io"
	"testing"
)

// BenchmarkStdioWriteMessage writes a process/output-sized notification as one line.
func BenchmarkStdioWriteMessage(b *testing.B) {
	t := newStdioTransport(nil, io.Discard)
	msg, _ := appendOutputNotification(nil, appendJSONString(nil, "call_8f2a9c"), 1, streamStdout, make([]byte, 8<<10))
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if err := t.writeMessage(msg); err != nil {
			b.Fatal(err)
		}
	}
}
