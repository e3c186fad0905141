package main

// A child's stdin (docs/protocol.md §6.6): process/write only queues bytes; one goroutine per
// process, alive only while bytes are queued, writes them in order. The queue is bounded, so a
// child that never reads cannot make the server buffer without limit.

import (
	"crypto/sha256"
	"errors"
	"os"
	"sync"
)

// errStdinGone marks a stdin whose process has closed or was killed.
var errStdinGone = errors.New("the process has ended")

// stdinWriter feeds a child's stdin: a pipe (pipeStdin) or the PTY master.
type stdinWriter struct {
	f    *os.File
	owns bool // close f on EOF and shutdown (a pipe); a PTY master belongs to its reader

	mu         sync.Mutex
	queue      [][]byte
	queued     int  // bytes in queue
	running    bool // the drain goroutine is alive
	eof        bool // the client closed stdin (process/closeStdin)
	fileClosed bool
	err        error // a write failed, or the process is gone
}

// enqueue queues b and returns the process/write status.
func (w *stdinWriter) enqueue(b []byte) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.eof:
		return "stdinClosed", nil
	case w.err != nil:
		return "", errInternal("failed to write to process stdin")
	case len(b) == 0:
		return "accepted", nil
	case w.queued > 0 && w.queued+len(b) > stdinQueueLimit:
		return "", errInternal("failed to write to process stdin: %d bytes already wait for the process to read them (limit %d)", w.queued, stdinQueueLimit)
	}
	w.queue = append(w.queue, b)
	w.queued += len(b)
	if !w.running {
		w.running = true
		go w.drain()
	}
	return "accepted", nil
}

// drain writes the queue, then ends; it closes the pipe when EOF was asked for.
func (w *stdinWriter) drain() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.queue) > 0 && w.err == nil {
		b := w.queue[0]
		w.queue[0] = nil
		w.queue = w.queue[1:]
		w.mu.Unlock()
		_, err := w.f.Write(b)
		w.mu.Lock()
		w.queued -= len(b)
		if err != nil && w.err == nil {
			w.err = err
		}
	}
	w.queue, w.queued = nil, 0
	w.running = false
	if w.eof {
		w.closeFileLocked()
	}
}

// closeInput is process/closeStdin: EOF after the queued bytes.
func (w *stdinWriter) closeInput() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.eof || w.fileClosed {
		return "stdinClosed"
	}
	w.eof = true
	if !w.running {
		w.closeFileLocked()
	}
	return "accepted"
}

// shutdown drops what is queued and closes the pipe: the process has ended. A write blocked
// on a child that never read returns at once.
func (w *stdinWriter) shutdown() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = errStdinGone
	}
	w.closeFileLocked()
}

func (w *stdinWriter) closeFileLocked() {
	if w.owns && !w.fileClosed {
		w.fileClosed = true
		w.f.Close()
	}
}

// writeIDSet remembers the last writeIDMemory accepted writeIds of a process, so a retried
// process/write is applied once (docs/protocol.md §6.6). It keeps a SHA-256 of each id, not the
// id: a writeId may be as long as a message, and 4096 of those would be gigabytes.
type writeIDSet struct {
	ids  map[writeIDKey]struct{}
	ring []writeIDKey
	next int
}

type writeIDKey [sha256.Size]byte

func (s *writeIDSet) has(id string) bool {
	_, ok := s.ids[sha256.Sum256([]byte(id))]
	return ok
}

func (s *writeIDSet) add(id string) {
	key := writeIDKey(sha256.Sum256([]byte(id)))
	if s.ids == nil {
		s.ids = make(map[writeIDKey]struct{})
	}
	if len(s.ring) < writeIDMemory {
		s.ring = append(s.ring, key)
	} else {
		delete(s.ids, s.ring[s.next])
		s.ring[s.next] = key
		s.next = (s.next + 1) % writeIDMemory
	}
	s.ids[key] = struct{}{}
}

// write is process/write on p: the status, or -32603 when stdin is gone.
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
		p.writeIDs.add(writeID)
	}
	return status, err
}

// closeStdin is process/closeStdin on p.
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
