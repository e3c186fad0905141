package main

// A process's lifecycle as one state and one transition function (docs/protocol.md §6.2): every
// event a process sees (spawned, an output chunk, a stream's drain or EOF, the reap, the exit
// report) goes through applyLocked, which updates the state and returns the notifications the
// event numbered, in seq order: output chunks, then exited, then closed.
//
//	starting ─spawned─▶ running ─reaped─▶ exiting ─exit─▶ exited ─last EOF─▶ closed
//	                                                  └─exit, every stream at EOF─▶ closed
//
// Two locks guard a process: mu, its state, which every request takes briefly; and sendMu,
// held from numbering an event until its notifications are queued for the client, so they
// leave in seq order while a slow client (the send waits for room in its queue) holds up the
// process's output, never its state. emit is the only place that takes sendMu, and it takes
// mu inside it: the order "sendMu before mu" is the code's shape, not a rule to remember.

import (
	"errors"
	"os"
	"time"
)

// procPhase is where a process is in its lifecycle; it only moves forward.
type procPhase uint8

const (
	phaseStarting procPhase = iota // reserved, spawn not finished: writes answer "starting"
	phaseRunning                   // spawned; the exit status is not collected yet
	phaseExiting                   // reaped: the pid may name another process now; streams drain before exited
	phaseExited                    // exited is numbered; some stream is still open
	phaseClosed                    // closed is numbered: nothing follows
)

func (ph procPhase) started() bool { return ph >= phaseRunning }
func (ph procPhase) reaped() bool  { return ph >= phaseExiting }
func (ph procPhase) exited() bool  { return ph >= phaseExited }
func (ph procPhase) closed() bool  { return ph == phaseClosed }

// lifeEventKind names what happened to a process.
type lifeEventKind uint8

const (
	evSpawned    lifeEventKind = iota // quiet: the child runs and its streams are ours (spawn)
	evOutput                          // a chunk was read from a stream: numbered and retained
	evDrainAsked                      // quiet: the reaper asks every open stream to drain
	evDrained                         // quiet: a stream answered the drain request
	evEOF                             // a stream reached EOF; the last one closes an exited process
	evReaped                          // quiet: the exit status was collected
	evExit                            // the exit report: exited, and closed if every stream is at EOF
)

// lifeEvent is one event and what it carries; only the fields of its kind are set. It carries
// nothing the state keeps, so a reader's buffer passed as data stays on its stack (the
// spawned child's fields are set by spawn itself, under the same lock as evSpawned).
type lifeEvent struct {
	kind   lifeEventKind
	stream streamKind // evOutput
	data   []byte     // evOutput
	out    *outStream // evDrained, evEOF
	code   int        // evExit
}

// procNotes are the notifications one event numbered, in seq order (exited and closed are the
// most one event numbers).
type procNotes [2][]byte

// procState is what a process's lifecycle remembers; guarded by process.mu, changed only by
// applyLocked (and read by requests).
type procState struct {
	phase      procPhase
	nextSeq    uint64 // the seq of the next event
	out        retainedOutput
	open       int           // streams not yet at EOF
	streamsEOF chan struct{} // closed when open reaches 0
	drained    chan struct{} // closed when every stream asked to drain at exit has drained
	draining   int           // streams asked to drain that have not yet
	undrained  bool          // a stream could not be asked to drain (no read deadlines)
	exitCode   int
	denied     bool          // sandboxDenied: decided with the exit (sandbox_denial.go)
	nextOutput chan struct{} // non-nil while the exit report awaits one more chunk; closed by it
	wake       chan struct{} // non-nil while a long poll waits; closed by the next event
	removal    *time.Timer   // forgets the process when the retention window ends
}

// emit applies an event that numbers something and sends its notifications: the only way a
// notification leaves a process, and the only place sendMu is taken (before mu). The exit
// report's denial verdict is decided here under sendMu alone: no chunk can be retained or
// evicted meanwhile, so it is about exactly the output numbered before exited, and mu stays
// free while a megabyte is scanned.
func (p *process) emit(ev lifeEvent) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	denied := false
	if ev.kind == evExit {
		denied = denialVerdict(p.sandboxType, ev.code, p.retainedDenialKeyword)
	}
	p.mu.Lock()
	notes := p.applyLocked(ev, denied)
	p.mu.Unlock()
	for _, msg := range notes {
		if msg != nil {
			p.notify(msg) // may wait while the client is slow: mu is free
		}
	}
}

// stepLocked applies a quiet event, one that numbers nothing. p.mu is held.
func (p *process) stepLocked(ev lifeEvent) {
	if notes := p.applyLocked(ev, false); notes[0] != nil {
		panic("process: a quiet event numbered a notification")
	}
}

// applyLocked is the transition function: it applies ev to p's state and returns the
// notifications ev numbered. p.mu is held, and p.sendMu too for every event that numbers
// (emit).
func (p *process) applyLocked(ev lifeEvent, denied bool) (notes procNotes) {
	switch ev.kind {
	case evSpawned: // spawn has set the child's fields
		p.open = len(p.outs)
		p.phase = phaseRunning
	case evOutput:
		seq := p.numberLocked()
		notes[0], _ = appendOutputNotification(nil, p.idJSON, seq, ev.stream, ev.data)
		p.out.add(seq, ev.stream, ev.data)
		if p.nextOutput != nil {
			close(p.nextOutput)
			p.nextOutput = nil
		}
	case evDrainAsked:
		p.askDrainLocked()
	case evDrained:
		p.doneDrainingLocked(ev.out)
	case evEOF:
		ev.out.eof = true
		p.doneDrainingLocked(ev.out)
		if p.open--; p.open == 0 {
			close(p.streamsEOF)
			if p.phase == phaseExited {
				notes[0] = p.closeLocked()
			}
		}
	case evReaped:
		p.phase = phaseExiting
	case evExit:
		p.phase, p.exitCode, p.denied = phaseExited, ev.code, denied
		notes[0] = appendExitedNotification(nil, p.idJSON, p.numberLocked(), ev.code, denied)
		if p.open == 0 {
			notes[1] = p.closeLocked()
		}
	}
	return notes
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
	p.removal = time.AfterFunc(p.retention, func() { p.table.remove(p) })
	p.table.finished()
	return appendClosedNotification(nil, p.idJSON, seq)
}

// askDrainLocked asks every open stream to drain (proc_stream.go): a read deadline in the
// past makes its reader's pending Read return at once.
func (p *process) askDrainLocked() {
	p.drained = make(chan struct{})
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
	if p.draining == 0 {
		close(p.drained)
	}
}

// doneDrainingLocked records that s answered the drain request, if it was asked.
func (p *process) doneDrainingLocked(s *outStream) {
	if !s.drainAsked {
		return
	}
	s.drainAsked = false
	if p.draining--; p.draining == 0 {
		close(p.drained)
	}
}
