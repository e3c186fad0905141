package main

// The connection's one writer under a burst (docs/protocol.md §5.4): many notifications
// queued at once, as a process writing small chunks fast produces them, then a reply.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// writerBurst is how many notifications one test/burst request queues before its reply.
const writerBurst = 64

// BenchmarkWSNotificationBurst is one request whose handler queues writerBurst
// process/output-sized notifications of 256 bytes and then replies, over a real websocket:
// the writer's cost per message, syscalls included.
func BenchmarkWSNotificationBurst(b *testing.B) {
	note, _ := appendOutputNotification(nil, appendJSONString(nil, "call_8f2a9c"), 1, streamStdout, []byte(strings.Repeat("x", 256)))
	ts := startTestServer(b, testMethod("test/burst", func(c *conn, _ json.RawMessage) (result, error) {
		for range writerBurst {
			c.notify(note)
		}
		return jsonOf(struct{}{}), nil
	}))
	ws, _, err := dialWebsocket(context.Background(), ts.url, nil, nil, wsOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ws.close(nil) })
	req := []byte(`{"id":2,"method":"test/burst"}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := ws.writeMessageOp(wsOpText, req); err != nil {
			b.Fatal(err)
		}
		for i := 0; i <= writerBurst; i++ {
			m, err := ws.readMessage()
			if err != nil {
				b.Fatal(err)
			}
			if i == writerBurst && string(m) != `{"id":2,"result":{}}` {
				b.Fatal(fmt.Sprintf("reply %s", m))
			}
		}
	}
}
