package main

// One child of a session and everything the protocol remembers about it (docs/protocol.md §5.3,
// §6.2–§6.11): its lifecycle as one state and one transition function, its output (numbered,
// retained and sent as notifications), its exit sequence, and what process/read,
// process/write and process/terminate ask of it. The OS work (opening the child's
// descriptors, starting, waiting, signalling, sweeping sessions, the PTY) is in proc_spawn.go,
// proc_linux.go, proc_darwin.go and pty_*.go; the stdin writer is in proc_stdin.go.
//
// Every event a process sees goes through stepLocked, the only place its state is written:
//
//	starting ─spawned─▶ running ─reaped─▶ reaped ─drain asked─▶ draining
//	draining ─every asked stream answered─▶ drainGrace ─every stream at EOF, or exitDrainGrace─▶ denialGrace
//	denialGrace ─one more chunk, every stream at EOF, or sandboxDenialGrace─▶ exitDue
//	exitDue ─verdict─▶ exited ─last EOF─▶ closed    (exited, then closed at once, if every stream is at EOF)
//
// drainGrace is entered only when a stream cannot be asked to drain (no read deadlines),
// denialGrace only by a sandboxed process with a stream still open; otherwise the phase is
// skipped. The graces are timers that post their end as an event.
//
// Two locks guard a process: mu, its state, which every request takes briefly; and sendMu,
// held from numbering an event until its notifications are queued for the client, so they
// leave in seq order while a slow client (the send waits for room in its queue) holds up the
// process's output, never its state. post is the only place that takes sendMu, and it takes
// mu inside it. Events that number something, or move the exit sequence, are posted; the
// others ("quiet": a long poll waiting, a sweep queued, a write accepted…) are stepped under
// mu alone by the request that causes them.

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"sort"
	"strconv"
	"sync"
	"syscall"
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

// procHooks are what a process asks of the table that owns it, handed in at creation so the
// process needs no pointer back to it.
type procHooks struct {
	notify   func([]byte)                // to the session's attached connection; dropped while detached
	finished func()                      // closed: it no longer counts against the session's limit
	forget   func(*process)              // its retention window ended
	record   func(op byte, pid int)      // the watchdog's ledger of children (watchdog.go)
	sweep    func(sid int) *sessionSweep // queue a session sweep; nil once the table shuts down
}

// process is one child of a session. The fields above mu are set at creation (sandboxType:
// by process/start, before spawn) and read-only afterwards; procState is written only by
// stepLocked.
type process struct {
	hooks     procHooks
	id        string
	idJSON    []byte // id as a JSON string, encoded once for every notification
	tty       bool
	retention time.Duration
	done      chan struct{} // closed with process/closed

	// sandboxType is process/start's answer: the sandbox the process runs in, or "none" (""
	// too, until set). Set by process/start before spawn, then read-only; the exit report
	// and the denial heuristic key on it (isSandboxed).
	sandboxType string
	// netProxy is the process's managed network proxy, or nil. Set by process/start before
	// spawn, then read-only; post closes it as the process closes (before closed is sent).
	netProxy *netProxy

	sendMu sync.Mutex // held from numbering an event to queueing it for the client: post only

	mu sync.Mutex
	procState
}

func newProcess(t *procTable, id string, tty bool, retention time.Duration) *process {
	return &process{
		hooks:     t.hooks,
		id:        id,
		idJSON:    appendJSONString(nil, id),
		tty:       tty,
		retention: retention,
		done:      make(chan struct{}),
		procState: procState{nextSeq: 1},
	}
}

// procPhase is where a process is in its lifecycle; it only moves forward.
type procPhase uint8

const (
	phaseStarting    procPhase = iota // reserved, spawn not finished: writes answer "starting"
	phaseRunning                      // spawned; the exit status is not collected yet
	phaseReaped                       // the exit status is collected: the pid may name another process now
	phaseDraining                     // every open stream is asked to drain what the child left
	phaseDrainGrace                   // a stream cannot drain on demand: EOF or exitDrainGrace
	phaseDenialGrace                  // sandboxed: one more chunk, EOF or sandboxDenialGrace (docs/sandbox.md §4)
	phaseExitDue                      // the waits are over: post decides the verdict and numbers exited
	phaseExited                       // exited is numbered; some stream is still open
	phaseClosed                       // closed is numbered: nothing follows
)

func (ph procPhase) started() bool { return ph >= phaseRunning }
func (ph procPhase) reaped() bool  { return ph >= phaseReaped }
func (ph procPhase) exited() bool  { return ph >= phaseExited }
func (ph procPhase) closed() bool  { return ph == phaseClosed }

// lifeEventKind names what happened to a process.
type lifeEventKind uint8

const (
	// Posted (post): they may number notifications or move the exit sequence.
	evSpawned    lifeEventKind = iota // the child runs and its streams are ours (ev.child)
	evOutput                          // a chunk was read from a stream: numbered, retained, sent
	evDrained                         // a stream answered the drain request (ev.out)
	evEOF                             // a stream reached EOF (ev.out); the last one closes an exited process
	evDrainAsked                      // the reaper starts the exit sequence: every open stream is asked to drain
	evGraceOver                       // the grace timer of phase ev.phase fired
	evExit                            // the exit verdict is decided (ev.denied): exited, and closed if every stream is at EOF
	// Quiet (stepped under mu by their cause): they number nothing.
	evReaped         // the exit status was collected (ev.code)
	evPollWaits      // a long poll waits for the next event: wake is made
	evWriteAccepted  // process/write queued ev.writeID's bytes
	evKillPending    // process/terminate came before the spawn
	evSweepQueued    // the child's session is queued for sweep ev.queued: the reaper waits for it
	evSweepDone      // the sweep whose done channel is ev.ran ran
	evJoinWaits      // someone waits for the goroutines to end: stopped is made
	evGoroutineEnded // a reader, the reaper or a grace timer ended
)

// lifeEvent is one event and what it carries; only the fields of its kind are set. It is
// passed by value and the state keeps none of its own pointers, only what they point to (the
// escape analysis is not field-sensitive: a kept pointer field would send every reader's
// buffer, passed as data, to the heap).
type lifeEvent struct {
	kind    lifeEventKind
	stream  streamKind    // evOutput
	data    []byte        // evOutput
	out     *outStream    // evDrained, evEOF
	code    int           // evReaped
	denied  bool          // evExit
	phase   procPhase     // evGraceOver
	child   *spawnedChild // evSpawned
	queued  *sessionSweep // evSweepQueued
	ran     chan struct{} // evSweepDone: the done channel of the sweep that ran
	writeID string        // evWriteAccepted
}

// stepped is what one event did: the notifications it numbered, in seq order (exited and
// closed are the most one event numbers), and whether the exit sequence's waits are over.
type stepped struct {
	notes   [2][]byte
	exitDue bool
	closed  bool // the event closed the process: post releases what outlives its state
}

// procState is what a process remembers; guarded by process.mu, written only by stepLocked.
type procState struct {
	phase   procPhase
	nextSeq uint64 // the seq of the next event
	out     retainedOutput

	// The child, from evSpawned on.
	pid    int
	osProc *os.Process
	master *os.File      // PTY master (tty only)
	stdin  *stdinWriter  // nil when the child's stdin is /dev/null
	outs   []*outStream  // the read ends
	stage  *sandboxStage // the sandbox stage the child is, if confined: told when it exits

	open      int         // streams not yet at EOF
	draining  int         // streams asked to drain that have not answered yet
	undrained bool        // a stream could not be asked to drain (no read deadlines)
	grace     *time.Timer // the running exit-sequence grace (drainGrace, denialGrace)
	exitCode  int
	denied    bool          // sandboxDenied: decided with the exit (sandbox_denial.go)
	wake      chan struct{} // non-nil while a long poll waits; closed by the next event
	removal   *time.Timer   // forgets the process when the retention window ends

	writeIDs    writeIDSet
	killPending bool          // process/terminate came before the spawn: launch kills it once it runs
	sweep       chan struct{} // a queued sweep of the child's session; the reaper waits for it
	live        int           // the process's goroutines (readers, reaper, grace timer) still running
	stopped     chan struct{} // made by join, closed when live reaches 0
}

// post steps ev and sends what it numbered: the only way a notification leaves a process, and
// the only place sendMu is taken (before mu). When ev ends the exit sequence's waits, the
// denial verdict is decided here under sendMu alone: no chunk can be retained or evicted
// meanwhile, so it is about exactly the output numbered before exited, and mu stays free
// while a megabyte is scanned.
func (p *process) post(ev lifeEvent) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	p.mu.Lock()
	s := p.stepLocked(ev)
	code := p.exitCode
	p.mu.Unlock()
	p.sendClosing(&s)
	if s.exitDue {
		denied := denialVerdict(p.sandboxType, code, p.retainedDenialKeyword)
		p.mu.Lock()
		s = p.stepLocked(lifeEvent{kind: evExit, denied: denied})
		p.mu.Unlock()
		p.sendClosing(&s)
	}
}

// sendClosing sends s, first ending the process's network proxy when s closed it, so that
// process/closed follows the end of every proxied connection and client question. The
// proxy's close waits for its goroutines, outside mu; its notifications do not take sendMu.
func (p *process) sendClosing(s *stepped) {
	if s.closed {
		p.netProxy.close()
	}
	p.send(s)
}

// send queues notes for the client, in order. It may wait while the client is slow: mu is free.
func (p *process) send(s *stepped) {
	for _, msg := range s.notes {
		if msg != nil {
			p.hooks.notify(msg)
		}
	}
}

// quietLocked steps an event that numbers nothing. p.mu is held.
func (p *process) quietLocked(ev lifeEvent) {
	if s := p.stepLocked(ev); s.notes[0] != nil || s.exitDue {
		panic("process: a quiet event numbered a notification")
	}
}

// stepLocked is the transition function: it applies ev to p's state and returns what ev
// numbered. p.mu is held, and p.sendMu too for every posted event.
func (p *process) stepLocked(ev lifeEvent) (s stepped) {
	switch ev.kind {
	case evSpawned:
		c := ev.child
		p.pid, p.osProc, p.stdin, p.master, p.outs, p.stage = c.proc.Pid, c.proc, c.stdin, c.master, c.outs, c.stage
		p.open = len(p.outs)
		p.live = len(p.outs) + 1 // the readers and the reaper
		p.phase = phaseRunning
	case evOutput:
		seq := p.numberLocked()
		s.notes[0], _ = appendOutputNotification(nil, p.idJSON, seq, ev.stream, ev.data)
		p.out.add(seq, ev.stream, ev.data)
		if p.phase == phaseDenialGrace {
			s.exitDue = p.exitWaitOverLocked()
		}
	case evDrained:
		s.exitDue = p.doneDrainingLocked(ev.out)
	case evEOF:
		ev.out.eof = true
		p.open--
		s.exitDue = p.doneDrainingLocked(ev.out)
		if p.open == 0 {
			switch p.phase {
			case phaseExited:
				s.notes[0], s.closed = p.closeLocked(), true
			case phaseDrainGrace, phaseDenialGrace:
				s.exitDue = p.exitWaitOverLocked()
			}
		}
	case evReaped:
		p.phase, p.exitCode = phaseReaped, ev.code
	case evDrainAsked:
		p.phase = phaseDraining
		p.askDrainLocked()
		if p.draining == 0 {
			s.exitDue = p.exitWaitOverLocked()
		}
	case evGraceOver:
		if p.phase == ev.phase { // else a timer that fired as another event ended its wait
			s.exitDue = p.exitWaitOverLocked()
		}
	case evExit:
		p.phase, p.denied = phaseExited, ev.denied
		s.notes[0] = appendExitedNotification(nil, p.idJSON, p.numberLocked(), p.exitCode, ev.denied)
		if p.open == 0 {
			s.notes[1], s.closed = p.closeLocked(), true
		}
	case evPollWaits:
		if p.wake == nil {
			p.wake = make(chan struct{})
		}
	case evWriteAccepted:
		p.writeIDs.add(ev.writeID)
	case evKillPending:
		p.killPending = true
	case evSweepQueued:
		p.sweep = ev.queued.done
	case evSweepDone:
		if p.sweep == ev.ran {
			p.sweep = nil
		}
	case evJoinWaits:
		if p.stopped == nil && p.live > 0 {
			p.stopped = make(chan struct{})
		}
	case evGoroutineEnded:
		p.liveEndedLocked()
	}
	return s
}

// numberLocked takes the next seq for an event and wakes the long polls waiting for one.
func (p *process) numberLocked() uint64 {
	seq := p.nextSeq
	p.nextSeq++
	if p.wake != nil {
		close(p.wake)
		p.wake = nil
	}
	return seq
}

// closeLocked numbers closed, exactly once, releases what the process holds open, starts the
// retention window and returns the notification.
func (p *process) closeLocked() []byte {
	p.phase = phaseClosed
	seq := p.numberLocked()
	close(p.done)
	if p.stdin != nil {
		p.stdin.shutdown()
	}
	if p.master != nil {
		p.master.Close()
	}
	p.removal = time.AfterFunc(p.retention, func() { p.hooks.forget(p) })
	p.hooks.finished()
	return appendClosedNotification(nil, p.idJSON, seq)
}

// askDrainLocked asks every open stream to drain (readStream): a read deadline in the past
// makes its reader's pending Read return at once.
func (p *process) askDrainLocked() {
	for _, s := range p.outs {
		if s.eof {
			continue
		}
		if err := s.f.SetReadDeadline(time.Now()); err != nil {
			p.undrained = p.undrained || !errors.Is(err, os.ErrClosed)
			continue
		}
		s.drainAsked = true
		p.draining++
	}
}

// doneDrainingLocked records that s answered the drain request, if it was asked, and reports
// whether that ended the exit sequence's waits.
func (p *process) doneDrainingLocked(s *outStream) bool {
	if !s.drainAsked {
		return false
	}
	s.drainAsked = false
	if p.draining--; p.draining == 0 && p.phase == phaseDraining {
		return p.exitWaitOverLocked()
	}
	return false
}

// exitWaitOverLocked moves the exit sequence past the wait of the current phase, to the next
// one that must wait, and reports whether none must: exited is due. Output the child left in
// its streams is thus numbered before exited, while a grandchild that keeps a pipe open never
// holds exited back. A stream without read deadlines (darwin's blocking PTY master) gets
// exitDrainGrace to reach EOF; a sandboxed process gets sandboxDenialGrace for one more
// chunk, which the denial heuristic then sees (docs/sandbox.md §4); an unsandboxed one skips
// both the grace and the scan. Streams all at EOF end either wait: no chunk can follow.
func (p *process) exitWaitOverLocked() bool {
	if p.grace != nil {
		if p.grace.Stop() { // its goroutine will not run
			p.liveEndedLocked()
		}
		p.grace = nil
	}
	if p.phase == phaseDraining && p.undrained && p.open > 0 {
		p.startGraceLocked(phaseDrainGrace, exitDrainGrace)
		return false
	}
	if p.phase < phaseDenialGrace && isSandboxed(p.sandboxType) && p.open > 0 {
		p.startGraceLocked(phaseDenialGrace, sandboxDenialGrace)
		return false
	}
	p.phase = phaseExitDue
	return true
}

// startGraceLocked enters phase ph, whose wait ends after d at the latest.
func (p *process) startGraceLocked(ph procPhase, d time.Duration) {
	p.phase = ph
	p.live++
	p.grace = time.AfterFunc(d, func() {
		p.post(lifeEvent{kind: evGraceOver, phase: ph})
		p.goroutineEnded()
	})
}

// liveEndedLocked counts one of p's goroutines as ended; the last one lets join return.
func (p *process) liveEndedLocked() {
	if p.live--; p.live == 0 && p.stopped != nil {
		close(p.stopped)
	}
}

// goroutineEnded is the last act of each of p's goroutines.
func (p *process) goroutineEnded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.quietLocked(lifeEvent{kind: evGoroutineEnded})
}

// join waits until p's goroutines have ended, or stop is closed. The channel it waits on is
// made only here: most processes end without anyone joining them.
func (p *process) join(stop <-chan struct{}) {
	p.mu.Lock()
	p.quietLocked(lifeEvent{kind: evJoinWaits})
	stopped := p.stopped
	p.mu.Unlock()
	if stopped == nil {
		return
	}
	select {
	case <-stopped:
	case <-stop:
	}
}

// spawn starts spec as p's child and starts reading its streams.
func (p *process) spawn(spec *launchSpec) error {
	child, exit, err := startChild(spec)
	if err != nil {
		return err
	}
	p.post(lifeEvent{kind: evSpawned, child: child})
	p.hooks.record('+', child.proc.Pid)
	for _, s := range child.outs {
		go p.readStream(s)
	}
	go p.reap(exit)
	return nil
}

// reap collects the exit status and starts the exit sequence. Where the exit can be awaited
// without reaping, the reap itself happens under the lock, so a group signal never races with
// the pid being freed; elsewhere (darwin) a microseconds-wide window remains.
func (p *process) reap(exit *childExit) {
	defer p.goroutineEnded()
	var (
		st  *os.ProcessState
		err error
	)
	if exit.wait(p.pid) {
		p.mu.Lock()
		for p.sweep != nil { // the leader's pid keeps its session's number ours until the sweep
			sweep := p.sweep
			p.mu.Unlock()
			<-sweep
			p.mu.Lock()
			p.quietLocked(lifeEvent{kind: evSweepDone, ran: sweep})
		}
		st, err = p.osProc.Wait() // at once: the child is a zombie
		p.quietLocked(lifeEvent{kind: evReaped, code: exitCodeOf(st, err)})
		p.mu.Unlock()
	} else {
		st, err = p.osProc.Wait()
		p.mu.Lock()
		p.quietLocked(lifeEvent{kind: evReaped, code: exitCodeOf(st, err)})
		p.mu.Unlock()
	}
	exit.close()
	p.hooks.record('r', p.pid)
	p.stage.exited()
	p.post(lifeEvent{kind: evDrainAsked})
}

// outStream is one output stream of a child: a pipe's read end or the PTY master.
type outStream struct {
	f    *os.File
	kind streamKind

	// Guarded by the process's mu; written by stepLocked.
	eof        bool
	drainAsked bool
}

// exitDrainMax bounds what one exit drain reads from a stream, so that a grandchild writing
// without pause cannot hold exited back.
const exitDrainMax = retainedOutputLimit

// readStream turns one stream into output events until EOF (a PTY master: EIO once every
// slave descriptor is closed). The buffer doubles while reads fill it, so bulk output travels
// in large chunks and an idle stream keeps a small buffer. When the exit sequence asks it to
// drain (a read deadline in the past), it reads what is buffered without waiting (until
// EAGAIN), then answers. A pipe is closed at EOF; a PTY master only once the child has exited
// (closeLocked): closing it hangs the terminal up, and a child that closed its descriptors
// but has not exited yet would die of SIGHUP.
func (p *process) readStream(s *outStream) {
	defer p.goroutineEnded()
	buf := make([]byte, readChunkMin)
	for {
		n, err := s.f.Read(buf)
		if n > 0 {
			p.output(s.kind, buf[:n])
			if n == len(buf) && len(buf) < readChunkMax {
				buf = make([]byte, 2*len(buf))
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.f.SetReadDeadline(time.Time{})
			p.drainNow(s, buf)
			p.post(lifeEvent{kind: evDrained, out: s})
			continue
		}
		if err != nil {
			break
		}
	}
	if s.kind != streamPTY {
		s.f.Close()
	}
	p.post(lifeEvent{kind: evEOF, out: s})
}

// drainNow reads what s holds right now, without waiting for more.
func (p *process) drainNow(s *outStream, buf []byte) {
	rc, err := s.f.SyscallConn()
	if err != nil {
		return
	}
	for total := 0; total < exitDrainMax; {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.Read(int(fd), buf)
			return true
		}); err != nil || rerr != nil || n <= 0 {
			return // EAGAIN: nothing more now; EOF or EIO: the next Read reports it
		}
		p.output(s.kind, buf[:n])
		total += n
	}
}

// output numbers, retains and sends one chunk read from a stream.
func (p *process) output(stream streamKind, data []byte) {
	p.post(lifeEvent{kind: evOutput, stream: stream, data: data})
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
	p.quietLocked(lifeEvent{kind: evPollWaits})
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

// write is process/write on p (docs/protocol.md §6.6): the status, or -32603 when stdin is gone.
func (p *process) write(writeID string, data []byte) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.phase.started():
		return "starting", nil
	case p.stdin == nil:
		return "stdinClosed", nil
	case p.writeIDs.has(writeID):
		return "accepted", nil
	}
	status, err := p.stdin.enqueue(data)
	if err == nil && status == "accepted" {
		p.quietLocked(lifeEvent{kind: evWriteAccepted, writeID: writeID})
	}
	return status, err
}

// closeStdin is process/closeStdin on p (docs/protocol.md §6.7).
func (p *process) closeStdin() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.phase.started():
		return "starting"
	case p.stdin == nil:
		return "stdinClosed"
	}
	return p.stdin.closeInput()
}

// kill is process/terminate (docs/protocol.md §6.9): SIGKILL to p's process group at once, and
// to the rest of its session soon after (the table's sweeper). It reports whether p was still
// running. A process that has exited is left alone, as 0.169 leaves it: "running":false means
// nothing was killed, and a background child still holding its output streams goes on
// writing until it ends (or the session does).
func (p *process) kill() bool {
	p.mu.Lock()
	if p.phase.exited() {
		p.mu.Unlock()
		return false
	}
	if !p.phase.started() {
		// Not spawned yet (its start waits for its shell snapshot): it is killed as soon as
		// it runs (launch), and is running until then.
		p.quietLocked(lifeEvent{kind: evKillPending})
		p.mu.Unlock()
		return true
	}
	return p.killLocked(false)
}

// killedBeforeStart reports whether process/terminate came before the process was spawned.
func (p *process) killedBeforeStart() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killPending
}

// killForShutdown kills p's group and the rest of its session even when p has exited: the
// session is over, so nothing it started may outlive it (a process that finished spawning
// after killAll ran, which found it not yet started).
func (p *process) killForShutdown() {
	p.mu.Lock()
	p.killLocked(true)
}

// killLocked is kill's work (all as for killGroupLocked); it unlocks p.mu.
func (p *process) killLocked(all bool) bool {
	running, sid := p.killGroupLocked(all)
	if sid > 0 && !p.phase.reaped() && reaperHoldsPid {
		if sweep := p.hooks.sweep(sid); sweep != nil {
			p.quietLocked(lifeEvent{kind: evSweepQueued, queued: sweep})
			sid = 0
		}
	}
	p.mu.Unlock()
	if sid > 0 { // the leader is reaped, or the table is shutting down: sweep now
		killSessions([]int{sid})
	}
	return running
}

// killForSweep is killAll's kill of p: its group now, the rest of its session with sweep,
// which the reaper then waits for. It returns the session id to sweep, or 0.
func (p *process) killForSweep(sweep *sessionSweep) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, sid := p.killGroupLocked(true)
	if sid > 0 && !p.phase.reaped() {
		p.quietLocked(lifeEvent{kind: evSweepQueued, queued: sweep})
	}
	return sid
}

// killGroupLocked sends SIGKILL to p's process group; it returns whether p was still running
// and, when the group was signalled, the child's session id for killSessions (the leader's
// pid). all (killAll) also kills the group of a closed process, whose background children
// may linger, and ends its retention window.
func (p *process) killGroupLocked(all bool) (running bool, sid int) {
	if !p.phase.started() {
		return false, 0
	}
	if all && p.removal != nil {
		p.removal.Stop()
	}
	if (!p.phase.closed() || all) && p.signalGroupLocked(syscall.SIGKILL) {
		sid = p.pid
	}
	return !p.phase.exited(), sid
}

// signalGroupLocked sends sig to p's process group, unless the number may have been reused
// (signalGroup), and reports whether it did.
func (p *process) signalGroupLocked(sig syscall.Signal) bool {
	return signalGroup(p.pid, p.phase.reaped(), sig)
}

// interrupt is process/signal interrupt (docs/protocol.md §6.8): SIGINT to the process group;
// for a PTY, to the terminal's foreground process group, which is what ^C reaches.
func (p *process) interrupt() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.phase.started() || p.phase.exited() {
		return nil
	}
	if p.tty {
		if pgrp, err := ptyForeground(p.master); err == nil && pgrp > 0 {
			if err := syscall.Kill(-pgrp, syscall.SIGINT); err == nil || errors.Is(err, syscall.ESRCH) {
				return nil
			}
		}
	}
	p.signalGroupLocked(syscall.SIGINT)
	return nil
}

// resize sets the PTY's window size; the kernel sends SIGWINCH to its foreground group. A
// terminal that already closed has nothing to resize.
func (p *process) resize(rows, cols uint16) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.phase.started() || p.phase.closed() {
		return nil
	}
	if err := setPTYSize(p.master, rows, cols); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}

// forceClose closes p's streams and stdin: after killAll, nothing may keep a reader alive.
func (p *process) forceClose() {
	p.mu.Lock()
	outs, stdin := p.outs, p.stdin
	p.mu.Unlock()
	for _, s := range outs {
		s.f.Close()
	}
	if stdin != nil {
		stdin.shutdown()
	}
}

// Notification layouts (docs/protocol.md §6.11), in the reference's field order. Each
// notification is built once, straight into a buffer of its own, which the connection then
// owns; process/read encodes the retained bytes afresh.
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

// A process's retained output (docs/protocol.md §5.3): the newest chunks, up to
// retainedOutputLimit bytes of output and retainedChunkLimit chunks, whatever their sizes, for
// process/read. The bytes of every chunk sit back to back in one buffer and each chunk costs a
// small fixed record beside them, so a megabyte of one-byte chunks takes about as much memory
// as a megabyte in large ones.
//
//	chunks  [seq off n stream] [seq off n stream] …      oldest first, 24 bytes each
//	data    |dead|chunk bytes…                     |     chunk i at data[off-base:][:n]
//
// Eviction drops whole chunks from the front; the dead prefix of data is reclaimed by one
// copy once it outgrows what is live.

// retainedChunkLimit bounds the chunks retained per process, as the reference does.
const retainedChunkLimit = 50_000

// retainedCompactMin is the dead prefix of the buffer below which it is never compacted.
const retainedCompactMin = 64 << 10

// retainedChunk is one retained output chunk.
type retainedChunk struct {
	seq    uint64
	off    int // absolute offset of its bytes (see retainedOutput.base)
	n      int32
	stream streamKind
}

// retainedOutput is the retained chunks and their bytes. Its owner serialises access.
type retainedOutput struct {
	chunks []retainedChunk
	data   []byte
	base   int // the absolute offset of data[0]
	bytes  int // output bytes retained
}

// add retains a chunk, then evicts the oldest ones past the limits (never the newest).
func (r *retainedOutput) add(seq uint64, stream streamKind, b []byte) {
	r.chunks = append(r.chunks, retainedChunk{seq: seq, off: r.base + len(r.data), n: int32(len(b)), stream: stream})
	r.data = append(r.data, b...)
	r.bytes += len(b)
	drop := 0
	for r.bytes > retainedOutputLimit || len(r.chunks)-drop > retainedChunkLimit {
		if len(r.chunks)-drop == 1 {
			break
		}
		r.bytes -= int(r.chunks[drop].n)
		drop++
	}
	if drop == 0 {
		return
	}
	r.chunks = r.chunks[drop:]
	if dead := r.chunks[0].off - r.base; dead >= retainedCompactMin && dead > len(r.data)-dead {
		r.data = r.data[:copy(r.data, r.data[dead:])]
		r.base += dead
	}
}

// bytesOf is the output of chunk c.
func (r *retainedOutput) bytesOf(c *retainedChunk) []byte {
	start := c.off - r.base
	return r.data[start : start+int(c.n)]
}

// childPid is the child's pid, 0 before the spawn: for a reader outside the process's own
// goroutines (the table's shutdown, which may give up on a spawn still under way).
func (p *process) childPid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}
