package main

// A child's stdin (docs/protocol.md §6.6): process/write only queues bytes; one goroutine per
// process, alive only while bytes are queued, writes them in order. The queue is bounded, so a
// child that never reads cannot make the server buffer without limit.

import (
	"crypto/sha256"
	"os"
	"sync"
)

// stdinState is where a child's stdin is. The file is open in every state but the last two.
//
//	idle ─write─▶ writing ─queue written─▶ idle
//	writing ─closeStdin─▶ closing ─queue written─▶ closed
//	writing ─write fails─▶ failed          closing ─write fails─▶ closed
//	idle, failed ─closeStdin─▶ closed      any but closed ─process ended─▶ gone
type stdinState uint8

const (
	stdinIdle    stdinState = iota // open, nothing queued
	stdinWriting                   // the drain goroutine writes the queue
	stdinClosing                   // the drain goroutine writes the queue, then closes (process/closeStdin)
	stdinFailed                    // a write failed: writes are refused, closeStdin still closes
	stdinClosed                    // EOF given: writes answer stdinClosed
	stdinGone                      // the process ended: writes are refused
)

// draining reports whether the drain goroutine runs in st.
func (st stdinState) draining() bool { return st == stdinWriting || st == stdinClosing }

// stdinWriter feeds a child's stdin: a pipe (pipeStdin) or the PTY master.
type stdinWriter struct {
	f    *os.File
	owns bool // close f on EOF and shutdown (a pipe); a PTY master belongs to its reader

	mu     sync.Mutex
	state  stdinState
	queue  [][]byte
	queued int // bytes in queue
}

// enqueue queues b and returns the process/write status.
func (w *stdinWriter) enqueue(b []byte) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.state == stdinClosing || w.state == stdinClosed:
		return "stdinClosed", nil
	case w.state == stdinFailed || w.state == stdinGone:
		return "", errInternal("failed to write to process stdin")
	case len(b) == 0:
		return "accepted", nil
	case w.queued > 0 && w.queued+len(b) > stdinQueueLimit:
		return "", errInternal("failed to write to process stdin: %d bytes already wait for the process to read them (limit %d)", w.queued, stdinQueueLimit)
	}
	w.queue = append(w.queue, b)
	w.queued += len(b)
	if w.state == stdinIdle {
		w.state = stdinWriting
		go w.drain()
	}
	return "accepted", nil
}

// drain writes the queue, then ends; it closes the pipe when EOF was asked for meanwhile.
func (w *stdinWriter) drain() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.queue) > 0 && w.state.draining() {
		b := w.queue[0]
		w.queue[0] = nil
		w.queue = w.queue[1:]
		w.mu.Unlock()
		_, err := w.f.Write(b)
		w.mu.Lock()
		w.queued -= len(b)
		if err != nil && w.state == stdinWriting {
			w.state = stdinFailed
		} else if err != nil && w.state == stdinClosing {
			w.toLocked(stdinClosed)
		}
	}
	w.queue, w.queued = nil, 0
	switch w.state {
	case stdinWriting:
		w.state = stdinIdle
	case stdinClosing:
		w.toLocked(stdinClosed)
	}
}

// closeInput is process/closeStdin: EOF after the queued bytes.
func (w *stdinWriter) closeInput() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.state {
	case stdinWriting:
		w.state = stdinClosing
	case stdinIdle, stdinFailed:
		w.toLocked(stdinClosed)
	default:
		return "stdinClosed"
	}
	return "accepted"
}

// shutdown drops what is queued and closes the pipe: the process has ended. A write blocked
// on a child that never read returns at once. A stdin closed by the client stays closed.
func (w *stdinWriter) shutdown() {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.state {
	case stdinClosing:
		w.toLocked(stdinClosed)
	case stdinClosed, stdinGone:
	default:
		w.toLocked(stdinGone)
	}
}

// toLocked enters closed or gone, closing the file (which every earlier state has open).
func (w *stdinWriter) toLocked(st stdinState) {
	w.state = st
	if w.owns {
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
