package main

// A process's event stream: sequence numbers, the retained output buffer, the notifications and
// process/read (docs/protocol.md §5.3, §6.2, §6.5, §6.11).
//
// Events are numbered and sent by the transition function (proc_state.go). An output
// notification is built once, straight into one buffer; process/read encodes the retained
// bytes (proc_retained.go) afresh.

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"
)

// streamKind names an output stream on the wire.
type streamKind uint8

const (
	streamStdout streamKind = iota
	streamStderr
	streamPTY
)

var streamNames = [...]string{streamStdout: "stdout", streamStderr: "stderr", streamPTY: "pty"}

// process is one child of a session and everything the protocol remembers about it. Its
// lifecycle is procState, changed by one transition function (proc_state.go).
type process struct {
	table     *procTable
	notify    func([]byte) // the session's: to its attached connection (procTable.notify)
	id        string
	idJSON    []byte // id as a JSON string, encoded once for every notification
	tty       bool
	retention time.Duration
	done      chan struct{} // closed with process/closed

	// sandboxType is process/start's answer: the sandbox the process runs in, or "none" (""
	// too, until set). Set by processStart before spawn, then read-only; the exit report and
	// the denial heuristic key on it (isSandboxed).
	sandboxType string

	// Set by spawn with evSpawned, under mu, before the process is visible as started; then
	// read-only.
	pid    int
	osProc *os.Process
	master *os.File      // PTY master (tty only)
	stdin  *stdinWriter  // nil when the child's stdin is /dev/null
	outs   []*outStream  // the read ends
	stage  *sandboxStage // the sandbox stage the child is, if confined: told when it exits

	sendMu sync.Mutex // held from numbering an event to queueing it for the client: emit only

	mu sync.Mutex
	procState
	sweep    chan struct{} // a queued sweep of the child's session; the reaper waits for it
	writeIDs writeIDSet
	live     int           // the process's goroutines (readers, reaper) still running
	stopped  chan struct{} // made by join, closed when live reaches 0
	// killPending: process/terminate came before the spawn (a start waiting for its shell
	// snapshot); launch kills the process as soon as it runs.
	killPending bool
}

func newProcess(t *procTable, id string, tty bool, retention time.Duration) *process {
	return &process{
		table:     t,
		notify:    t.notify,
		id:        id,
		idJSON:    appendJSONString(nil, id),
		tty:       tty,
		retention: retention,
		done:      make(chan struct{}),
		procState: procState{nextSeq: 1, streamsEOF: make(chan struct{})},
	}
}

// output numbers, retains and sends one chunk read from a stream.
func (p *process) output(stream streamKind, data []byte) {
	p.emit(lifeEvent{kind: evOutput, stream: stream, data: data})
}

// read evaluates process/read (docs/protocol.md §6.5) now. A nil wake means the answer is
// final; otherwise it is the answer should the deadline pass, and wake is closed by the next
// event.
func (p *process) read(after uint64, maxBytes *uint64) (json.RawMessage, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	chunks := p.out.chunks
	first := sort.Search(len(chunks), func(i int) bool { return chunks[i].seq > after })
	end, total := first, uint64(0)
	for end < len(chunks) {
		n := uint64(chunks[end].n)
		if maxBytes != nil && end > first && total+n > *maxBytes {
			break
		}
		total += n
		end++
		if maxBytes != nil && total >= *maxBytes {
			break
		}
	}
	picked := chunks[first:end]
	next := p.nextSeq
	if maxBytes != nil && len(picked) > 0 {
		next = picked[len(picked)-1].seq + 1
	}
	res := p.readResultLocked(picked, next)
	if len(picked) > 0 || p.phase.closed() || (p.phase.exited() && after < next-1) {
		return res, nil
	}
	if p.wake == nil {
		p.wake = make(chan struct{})
	}
	return res, p.wake
}

// readResultLocked encodes a process/read result by hand, each chunk's bytes encoded
// straight into it.
func (p *process) readResultLocked(chunks []retainedChunk, next uint64) json.RawMessage {
	size := 160
	for i := range chunks {
		size += base64.StdEncoding.EncodedLen(int(chunks[i].n)) + 48
	}
	dst := make([]byte, 0, size)
	dst = append(dst, `{"chunks":[`...)
	for i := range chunks {
		c := &chunks[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"seq":`...)
		dst = strconv.AppendUint(dst, c.seq, 10)
		dst = append(dst, `,"stream":"`...)
		dst = append(dst, streamNames[c.stream]...)
		dst = append(dst, `","chunk":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, p.out.bytesOf(c))
		dst = append(dst, `"}`...)
	}
	dst = append(dst, `],"nextSeq":`...)
	dst = strconv.AppendUint(dst, next, 10)
	dst = append(dst, `,"exited":`...)
	dst = strconv.AppendBool(dst, p.phase.exited())
	dst = append(dst, `,"exitCode":`...)
	if p.phase.exited() {
		dst = strconv.AppendInt(dst, int64(p.exitCode), 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"closed":`...)
	dst = strconv.AppendBool(dst, p.phase.closed())
	dst = append(dst, `,"failure":null,"sandboxDenied":`...)
	dst = strconv.AppendBool(dst, p.denied)
	return append(dst, '}')
}

// Notification layouts (docs/protocol.md §6.11), in the reference's field order.
const (
	outputHead  = `{"method":"process/output","params":{"processId":`
	exitedHead  = `{"method":"process/exited","params":{"processId":`
	closedHead  = `{"method":"process/closed","params":{"processId":`
	seqField    = `,"seq":`
	streamField = `,"stream":"`
	chunkField  = `","chunk":"`
	outputTail  = `"}}`
)

// appendOutputNotification appends a process/output notification to dst, base64-encoding
// data straight into place; with a dst of too little room it allocates exactly once. It
// returns the message and the offset of the base64 text.
func appendOutputNotification(dst, idJSON []byte, seq uint64, stream streamKind, data []byte) ([]byte, int) {
	name := streamNames[stream]
	enc := base64.StdEncoding.EncodedLen(len(data))
	size := len(outputHead) + len(idJSON) + len(seqField) + 20 + len(streamField) + len(name) + len(chunkField) + enc + len(outputTail)
	if cap(dst)-len(dst) < size {
		dst = append(make([]byte, 0, len(dst)+size), dst...)
	}
	dst = append(dst, outputHead...)
	dst = append(dst, idJSON...)
	dst = append(dst, seqField...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, streamField...)
	dst = append(dst, name...)
	dst = append(dst, chunkField...)
	off := len(dst)
	dst = dst[:off+enc]
	base64.StdEncoding.Encode(dst[off:], data)
	return append(dst, outputTail...), off
}

// appendExitedNotification appends a process/exited notification to dst.
func appendExitedNotification(dst, idJSON []byte, seq uint64, code int, denied bool) []byte {
	dst = append(dst, exitedHead...)
	dst = append(dst, idJSON...)
	dst = append(dst, seqField...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"exitCode":`...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, `,"sandboxDenied":`...)
	dst = strconv.AppendBool(dst, denied)
	return append(dst, `}}`...)
}

// appendClosedNotification appends a process/closed notification to dst.
func appendClosedNotification(dst, idJSON []byte, seq uint64) []byte {
	dst = append(dst, closedHead...)
	dst = append(dst, idJSON...)
	dst = append(dst, seqField...)
	dst = strconv.AppendUint(dst, seq, 10)
	return append(dst, `}}`...)
}
