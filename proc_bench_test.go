package main

// Benchmarks of the process paths: an output notification, start to closed, pipe throughput
// and terminating many processes (docs/protocol.md §6).

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkOutputNotification encodes one process/output notification per op.
func BenchmarkOutputNotification(b *testing.B) {
	id := appendJSONString(nil, "call_8f2a9c")
	for _, n := range []int{64, 8 << 10, readChunkMax} {
		data := make([]byte, n)
		rand.Read(data)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				appendOutputNotification(nil, id, uint64(i), streamStdout, data)
			}
		})
	}
}

// BenchmarkProcessStartToClosed measures BENCHMARKS.md's "start → closed" latency: one `true`
// per op, started over a real websocket, until its closed notification arrives.
func BenchmarkProcessStartToClosed(b *testing.B) {
	for _, tty := range []bool{false, true} {
		b.Run(fmt.Sprintf("tty=%v", tty), func(b *testing.B) {
			ts := startTestServer(b)
			tc := ts.connect(b)
			params := with(procStart(b, "", "true"), "tty", tty)
			from := 0
			for i := 0; b.Loop(); i++ {
				id := strconv.Itoa(i)
				params["processId"] = id
				tc.mustCall("process/start", params)
				_, from = tc.waitNote(from, procWait, func(n testNote) bool {
					return n.Method == "process/closed" && strings.Contains(string(n.Params), `"processId":"`+id+`"`)
				})
				from++
			}
		})
	}
}

// BenchmarkPipeThroughput measures the server's output path alone (read, encode, retain,
// hand to the session) for a child writing 64 MiB as fast as it can. No client is attached,
// so notifications are built and dropped, as for a detached session.
func BenchmarkPipeThroughput(b *testing.B) {
	for _, tty := range []bool{false, true} {
		b.Run(fmt.Sprintf("tty=%v", tty), func(b *testing.B) {
			const size = 64 << 20
			srv := newServer(context.Background(), serverConfig{sessionTTL: time.Minute, retention: time.Minute}, nil)
			sess := &session{id: "bench", srv: srv}
			sess.procs = newProcTable(sess)
			defer sess.procs.killAll()
			b.SetBytes(size)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				p := newProcess(sess.procs, strconv.Itoa(i), tty, time.Minute)
				if err := sess.procs.reserve(p); err != nil {
					b.Fatal(err)
				}
				path, _ := lookProgram("head", "/", map[string]string{}, false)
				spec := &launchSpec{path: path, argv: []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}, env: []string{}, dir: "/", tty: tty, rows: 24, cols: 80}
				if err := p.spawn(spec); err != nil {
					b.Fatal(err)
				}
				<-p.done
			}
		})
	}
}

// BenchmarkTerminate200 is the bench's "200 concurrent sleeps: terminate all" (issue 5): per
// op, 200 `sleep 600` run in one session (untimed), then 200 process/terminate are sent back
// to back and the time runs until the last process/closed. reply-ms is the time to the last
// terminate reply alone. Each op also spends ~0.3 s untimed starting the sleeps: run it with
// a count, `go test -run '^$' -bench Terminate200 -benchtime 10x`.
func BenchmarkTerminate200(b *testing.B) {
	const n = 200
	ts := startTestServer(b)
	tc := ts.connect(b)
	params := procStart(b, "", "sleep", "600")
	var replyMs float64
	for round := 0; b.Loop(); round++ {
		b.StopTimer()
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("r%d-%d", round, i)
			params["processId"] = ids[i]
			tc.mustCall("process/start", params)
		}
		from := len(tc.notesSnapshot())
		b.StartTimer()
		t0 := time.Now()
		replies := make([]<-chan testReply, n)
		for i, id := range ids {
			replies[i] = tc.start("process/terminate", map[string]any{"processId": id})
		}
		for _, r := range replies {
			if rep := <-r; rep.Err != nil {
				b.Fatalf("terminate: %d %s", rep.Err.Code, rep.Err.Message)
			}
		}
		replyMs += float64(time.Since(t0).Microseconds()) / 1000
		for closed := 0; closed < n; closed++ {
			_, from = tc.waitNote(from, procWait, func(n testNote) bool { return n.Method == "process/closed" })
			from++
		}
	}
	b.ReportMetric(replyMs/float64(b.N), "reply-ms/op")
}
