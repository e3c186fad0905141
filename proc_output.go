package main

// A process's event stream: sequence numbers, the retained output buffer, the notifications and
// process/read (docs/protocol.md §5.3, §6.2, §6.5, §6.11).
//
// Every event is numbered under the process's lock and sent under its send lock, which the
// numbering goroutine holds from before it numbers the event until the event is queued for the
// client: notifications leave in seq order, and a client that reads slowly (the send waits
// for room in its queue, see conn.notify) holds up the process's output, never its lock, so
// process/read, terminate and the rest answer at once. An output notification is built once,
// straight into one buffer, and that same buffer is what the retained buffer keeps:
// process/read copies its base64 text out of it.

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

// process is one child of a session and everything the protocol remembers about it.
type process struct {
	table     *procTable
	id        string
	idJSON    []byte // id as a JSON string, encoded once for every notification
	tty       bool
	retention time.Duration
	done      chan struct{} // closed with process/closed

	// sandboxType is process/start's answer: the sandbox the process runs in, or "none" (""
	// too, until set). Set by processStart before spawn, then read-only; the exit report and
	// the denial heuristic key on it (isSandboxed).
	sandboxType string

	// Set by spawn before the process is visible as started, then read-only.
	pid    int
	osProc *os.Process
	master *os.File      // PTY master (tty only)
	stdin  *stdinWriter  // nil when the child's stdin is /dev/null
	outs   []*outStream  // the read ends
	stage  *sandboxStage // the sandbox stage the child is, if confined: told when it exits

	sendMu sync.Mutex // held from numbering an event to queueing it for the client; before mu

	mu         sync.Mutex
	started    bool   // spawn finished; until then writes answer "starting"
	nextSeq    uint64 // the seq of the next event
	out        retainedOutput
	open       int           // streams not yet at EOF
	streamsEOF chan struct{} // closed when open reaches 0
	drained    chan struct{} // closed when every stream asked to drain at exit has drained
	draining   int           // streams asked to drain that have not yet
	exited     bool
	exitCode   int
	denied     bool          // sandboxDenied: decided when exited is set (sandbox_denial.go)
	nextOutput chan struct{} // non-nil while the exit report awaits one more chunk; closed by it
	reaped     bool          // the exit status was collected: the pid may name another process now
	sweep      chan struct{} // a queued sweep of the child's session; the reaper waits for it
	closed     bool
	wake       chan struct{} // non-nil while a long poll waits; closed by the next event
	removal    *time.Timer   // forgets the process when the retention window ends
	writeIDs   writeIDSet
}

func newProcess(t *procTable, id string, tty bool, retention time.Duration) *process {
	return &process{
		table:      t,
		id:         id,
		idJSON:     appendJSONString(nil, id),
		tty:        tty,
		retention:  retention,
		done:       make(chan struct{}),
		nextSeq:    1,
		streamsEOF: make(chan struct{}),
	}
}

// output numbers, retains and sends one chunk read from a stream.
func (p *process) output(stream streamKind, data []byte) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	p.mu.Lock()
	msg := p.retainLocked(stream, data)
	p.wakeLocked()
	if p.nextOutput != nil {
		close(p.nextOutput)
		p.nextOutput = nil
	}
	p.mu.Unlock()
	p.send(msg)
}

// retainLocked numbers a chunk and keeps it for process/read (proc_retained.go); it returns
// the chunk's notification. p.sendMu is held.
func (p *process) retainLocked(stream streamKind, data []byte) []byte {
	seq := p.nextSeq
	p.nextSeq++
	msg, _ := appendOutputNotification(nil, p.idJSON, seq, stream, data)
	p.out.add(seq, stream, data)
	return msg
}

// send queues events for the connection attached to p's session, if any, waiting while the
// client is slow. p.sendMu is held and p.mu is not.
func (p *process) send(msgs ...[]byte) {
	for _, msg := range msgs {
		if msg != nil {
			p.table.s.notify(msg)
		}
	}
}

// closeLocked numbers closed, exactly once, starts the retention window and returns the
// notification for the caller to send. p.sendMu is held.
func (p *process) closeLocked() []byte {
	p.closed = true
	seq := p.nextSeq
	p.nextSeq++
	p.wakeLocked()
	close(p.done)
	if p.stdin != nil {
		p.stdin.shutdown()
	}
	if p.master != nil {
		p.master.Close()
	}
	p.removal = time.AfterFunc(p.retention, func() { p.table.remove(p) })
	p.table.finished()
	return appendClosedNotification(nil, p.idJSON, seq)
}

// wakeLocked wakes the long polls waiting on this process.
func (p *process) wakeLocked() {
	if p.wake != nil {
		close(p.wake)
		p.wake = nil
	}
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
	if len(picked) > 0 || p.closed || (p.exited && after < next-1) {
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
	dst = strconv.AppendBool(dst, p.exited)
	dst = append(dst, `,"exitCode":`...)
	if p.exited {
		dst = strconv.AppendInt(dst, int64(p.exitCode), 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"closed":`...)
	dst = strconv.AppendBool(dst, p.closed)
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
