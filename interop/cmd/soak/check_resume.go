package main

// Check "resume": a process writes numbered lines at a steady rate while its client, N times
// over, drops its TCP connection without a close frame (a FIN, or a reset every other time),
// stays away a moment, reconnects with initialize{resumeSessionId} and asks process/read for
// everything after the last seq it had. In the end the output the client put together is
// exactly what the producer wrote: no byte lost, none twice.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Shape and bounds of the resume check.
const (
	resumeLinesPerCycle = 5 // lines the client sees between two drops
	// resumeLinePause is the producer's pause between lines (sh's sleep): a steady ~100
	// lines/s, so that lines are written while the client is away.
	resumeLinePause = "0.005"
	// resumeGap is how long the client stays away each cycle: a deliberate absence (the
	// scenario), not a wait for anything.
	resumeGap = 20 * time.Millisecond
	// resumeProgressWait bounds the wait for the next lines of one cycle.
	resumeProgressWait = 10 * time.Second
	// resumeFinalPoll is the long poll the client ends with, until the process has closed.
	resumeFinalPoll = 1000
	resumeMinLine   = len("line 0\n")
	resumeDeadline  = 5 * time.Minute
)

func checkResume(ctx context.Context, cfg *config) *result {
	cycles := cfg.cycles
	r := &result{name: fmt.Sprintf("%d disconnect/resume cycles", cycles)}
	ctx, cancel := context.WithTimeout(ctx, resumeDeadline)
	defer cancel()
	srv, err := startServer(ctx, cfg.bin)
	if err != nil {
		r.err = err
		return r
	}
	defer srv.stop()

	const id = "producer"
	log := newSeqLog()
	handle := func(method string, params []byte) {
		if noteProcessID(params) != id {
			return
		}
		var n struct {
			Seq   uint64 `json:"seq"`
			Chunk []byte `json:"chunk"`
		}
		if json.Unmarshal(params, &n) != nil {
			return
		}
		log.note(n.Seq, n.Chunk, method == "process/output", method == "process/closed")
	}
	c, session, err := connect(ctx, srv.url, handle, "")
	if err != nil {
		r.err = err
		return r
	}
	defer func() { c.close() }()

	lines := cycles * resumeLinesPerCycle
	script := `i=0; while [ $i -lt ` + strconv.Itoa(lines) + ` ]; do echo "line $i"; i=$((i+1)); sleep ` + resumeLinePause + `; done`
	if _, err := c.call(ctx, "process/start", startParams(id, []string{"sh", "-c", script}, false, childEnv(newMark("resume")))); err != nil {
		r.err = err
		return r
	}
	done := 0
	for ; done < cycles; done++ {
		if err := awaitProgress(ctx, log, resumeLinesPerCycle*resumeMinLine); err != nil {
			r.err = fmt.Errorf("cycle %d: %w", done, err)
			break
		}
		c.drop(done%2 == 1)
		gap := time.NewTimer(resumeGap)
		<-gap.C
		nc, again, err := connect(ctx, srv.url, handle, session)
		if err != nil {
			r.err = fmt.Errorf("cycle %d: %w", done, err)
			break
		}
		c = nc
		if again != session {
			r.err = fmt.Errorf("cycle %d: resumed session %s, want %s", done, again, session)
			break
		}
		if err := readAfter(ctx, c, log, id, 0); err != nil {
			r.err = fmt.Errorf("cycle %d: %w", done, err)
			break
		}
	}
	for r.err == nil && !log.state().done {
		if err := readAfter(ctx, c, log, id, resumeFinalPoll); err != nil {
			r.err = err
		}
	}
	want := producerOutput(lines)
	got, err := log.output()
	if r.err == nil {
		r.err = err
	}
	if r.err == nil && !bytes.Equal(got, want) {
		r.err = fmt.Errorf("output differs from what the producer wrote at byte %d (got %d bytes, want %d)", firstDiff(got, want), len(got), len(want))
	}
	if !srv.alive() {
		r.err = errServerDied
	}
	r.add(
		atLeast("cycles", done, cycles),
		atLeast("bytes recovered", len(got), len(want)),
		info("chunks only process/read gave", float64(log.state().fromRead), ""),
		count("strays", int(c.strays.Load()), 0),
	)
	return r
}

// awaitProgress waits until the log has grown by n output bytes, or the process is done.
func awaitProgress(ctx context.Context, log *seqLog, n int) error {
	start := log.state().bytes
	t := time.NewTimer(resumeProgressWait)
	defer t.Stop()
	for {
		st := log.state()
		if st.done || st.bytes >= start+n {
			return nil
		}
		select {
		case <-st.changed:
		case <-t.C:
			return fmt.Errorf("no output for %v (%d bytes so far)", resumeProgressWait, st.bytes)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// readAfter asks process/read for everything after the log's frontier (waiting up to
// waitMs for something new) and records the answer.
func readAfter(ctx context.Context, c *client, log *seqLog, id string, waitMs int) error {
	after := log.state().known
	params := map[string]any{"processId": id, "afterSeq": after}
	if waitMs > 0 {
		params["waitMs"] = waitMs
	}
	res, err := c.call(ctx, "process/read", params)
	if err != nil {
		return err
	}
	var rr struct {
		Chunks  []readChunk `json:"chunks"`
		NextSeq uint64      `json:"nextSeq"`
		Closed  bool        `json:"closed"`
	}
	if err := json.Unmarshal(res, &rr); err != nil {
		return fmt.Errorf("process/read answer: %w", err)
	}
	log.read(after, rr.Chunks, rr.NextSeq, rr.Closed)
	return nil
}

// producerOutput is what the producer writes: "line 0\n" … "line n-1\n".
func producerOutput(n int) []byte {
	var b []byte
	for i := range n {
		b = append(b, "line "...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, '\n')
	}
	return b
}

// firstDiff is the offset of the first byte where a and b differ.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
