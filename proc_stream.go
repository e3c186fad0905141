package main

// Reading a child's output streams, and draining them when it exits (docs/protocol.md §6.2).
//
// Each stream has one reader goroutine. When the child's exit status is collected, the reaper
// asks every open stream to drain: it sets a read deadline in the past, the reader's pending
// Read returns at once, and the reader reads what is buffered without waiting (until EAGAIN),
// then acknowledges. Everything the child wrote before it died is therefore numbered before
// exited, deterministically, while a grandchild that keeps the pipe open never holds exited
// back. A stream without deadlines (darwin's blocking PTY master) falls back to a short grace.

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// exitDrainMax bounds what one exit drain reads from a stream, so that a grandchild writing
// without pause cannot hold exited back.
const exitDrainMax = retainedOutputLimit

// outStream is one output stream of a child: a pipe's read end or the PTY master.
type outStream struct {
	f    *os.File
	kind streamKind

	// Guarded by the process's mu; changed by its transitions (proc_state.go).
	eof        bool
	drainAsked bool
}

// readStream turns one stream into output chunks until EOF (a PTY master: EIO once every
// slave descriptor is closed). The buffer doubles while reads fill it, so bulk output travels
// in large chunks and an idle stream keeps a small buffer. A pipe is closed at EOF; a PTY
// master only once the child has exited (closeLocked): closing it hangs the terminal up, and
// a child that closed its descriptors but has not exited yet would die of SIGHUP.
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
			p.streamDrained(s)
			continue
		}
		if err != nil {
			break
		}
	}
	if s.kind != streamPTY {
		s.f.Close()
	}
	p.streamEOF(s)
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

// askDrain asks every open stream to drain and returns a channel closed once all have, and
// whether some stream cannot be asked (it has no read deadlines).
func (p *process) askDrain() (<-chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stepLocked(lifeEvent{kind: evDrainAsked})
	return p.drained, p.undrained
}

// streamDrained records that s answered the drain request.
func (p *process) streamDrained(s *outStream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stepLocked(lifeEvent{kind: evDrained, out: s})
}

// streamEOF records that a stream reached EOF; the last one closes an exited process.
func (p *process) streamEOF(s *outStream) {
	p.emit(lifeEvent{kind: evEOF, out: s})
}

// reportExit sends exited once the exit status is known, after draining what the child left
// in its streams; it never waits for EOF. A sandboxed process's exit is classified first (the
// denial heuristic, sandbox_denial.go) and exited carries the verdict; an unsandboxed one
// skips both the grace and the scan.
func (p *process) reportExit(code int) {
	drained, unaskable := p.askDrain()
	<-drained
	if unaskable {
		grace := time.NewTimer(exitDrainGrace)
		select {
		case <-p.streamsEOF:
		case <-grace.C:
		}
		grace.Stop()
	}
	if isSandboxed(p.sandboxType) {
		p.awaitDenialGrace()
	}
	p.emit(lifeEvent{kind: evExit, code: code})
}

// awaitDenialGrace waits, once a sandboxed process's exit status is known and its streams are
// drained, for one more output chunk or sandboxDenialGrace, whichever comes first
// (docs/sandbox.md §4), so that the denial heuristic sees it; output after that is not
// considered. Streams that all reach EOF end the wait early, since no chunk can follow. The
// reaper waits here before exited is numbered, so nothing else changes: closed cannot be sent
// before exited (streamEOF closes only an exited process), and every chunk that arrives
// meanwhile is numbered before exited.
func (p *process) awaitDenialGrace() {
	p.mu.Lock()
	if p.open == 0 {
		p.mu.Unlock()
		return
	}
	next := make(chan struct{})
	p.nextOutput = next
	p.mu.Unlock()
	grace := time.NewTimer(sandboxDenialGrace)
	defer grace.Stop()
	select {
	case <-next:
	case <-p.streamsEOF:
	case <-grace.C:
	}
	p.mu.Lock()
	if p.nextOutput == next {
		p.nextOutput = nil
	}
	p.mu.Unlock()
}
