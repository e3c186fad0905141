package main

// seqLog rebuilds one process's output from what reaches a client that keeps losing its
// connection: process/output notifications while attached, process/read{afterSeq} answers
// after each resume. Both number events from one counter per process (output, exited and
// closed alike), so the log keeps events by seq: a seq given twice must carry the same bytes
// (the read and the notification overlap by design), and the output is every chunk in seq
// order. known is the frontier: every seq up to it is accounted for, so it is the afterSeq of
// the next read.

import (
	"bytes"
	"fmt"
	"sort"
	"sync"
)

type seqLog struct {
	mu       sync.Mutex
	chunks   map[uint64][]byte // output events
	others   map[uint64]bool   // exited and closed, or seqs a read said were not output
	known    uint64
	closed   bool
	lastSeq  uint64 // closed's seq, once known
	fromRead int    // chunks that only a process/read gave: the recovery the check is about
	bytes    int    // output bytes up to known
	conflict error  // a seq given twice with different bytes
	dupNotes int    // a seq notified twice (the server's bug, not the protocol's)
	notified map[uint64]bool
	changed  chan struct{} // closed and replaced when known moves
}

func newSeqLog() *seqLog {
	return &seqLog{chunks: map[uint64][]byte{}, others: map[uint64]bool{}, notified: map[uint64]bool{}, changed: make(chan struct{})}
}

// note records a notification: output with its bytes, or exited/closed (chunk nil).
func (l *seqLog) note(seq uint64, chunk []byte, isOutput, isClosed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.notified[seq] {
		l.dupNotes++
	}
	l.notified[seq] = true
	if isClosed {
		l.closed, l.lastSeq = true, seq
	}
	if isOutput {
		l.addChunkLocked(seq, chunk)
	} else {
		l.others[seq] = true
	}
	l.advanceLocked()
}

// readChunk is one chunk of a process/read answer.
type readChunk struct {
	Seq   uint64 `json:"seq"`
	Chunk []byte `json:"chunk"`
}

// read records a process/read answer to afterSeq after: its chunks, and every other seq
// below nextSeq as accounted for (exited, closed; or output the retained buffer no longer
// held, which the byte comparison then catches).
func (l *seqLog) read(after uint64, chunks []readChunk, nextSeq uint64, closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	given := map[uint64]bool{}
	for _, c := range chunks {
		if _, ok := l.chunks[c.Seq]; !ok {
			l.fromRead++
		}
		l.addChunkLocked(c.Seq, c.Chunk)
		given[c.Seq] = true
	}
	for s := after + 1; s < nextSeq; s++ {
		if !given[s] && l.chunks[s] == nil {
			l.others[s] = true
		}
	}
	if closed && !l.closed {
		l.closed, l.lastSeq = true, nextSeq-1
	}
	l.advanceLocked()
}

func (l *seqLog) addChunkLocked(seq uint64, b []byte) {
	if old, ok := l.chunks[seq]; ok {
		if !bytes.Equal(old, b) && l.conflict == nil {
			l.conflict = fmt.Errorf("seq %d came twice with different bytes: %q and %q", seq, old, b)
		}
		return
	}
	l.chunks[seq] = bytes.Clone(b)
}

func (l *seqLog) advanceLocked() {
	moved := false
	for {
		next := l.known + 1
		if c, ok := l.chunks[next]; ok {
			l.bytes += len(c)
		} else if !l.others[next] {
			break
		}
		l.known, moved = next, true
	}
	if moved {
		close(l.changed)
		l.changed = make(chan struct{})
	}
}

// logState is where a seqLog stands.
type logState struct {
	known    uint64          // every seq up to it is accounted for
	bytes    int             // output bytes up to known
	done     bool            // closed, and every seq up to closed's accounted for
	fromRead int             // chunks only a process/read gave
	changed  <-chan struct{} // closed when known next moves
}

func (l *seqLog) state() logState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return logState{known: l.known, bytes: l.bytes, done: l.closed && l.known >= l.lastSeq, fromRead: l.fromRead, changed: l.changed}
}

// output is every chunk up to the frontier, in seq order, and what went wrong on the way.
func (l *seqLog) output() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seqs := make([]uint64, 0, len(l.chunks))
	for s := range l.chunks {
		seqs = append(seqs, s)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	var out []byte
	for _, s := range seqs {
		if s > l.known {
			return out, fmt.Errorf("chunk seq %d beyond the frontier %d: a seq before it never came", s, l.known)
		}
		out = append(out, l.chunks[s]...)
	}
	if l.conflict != nil {
		return out, l.conflict
	}
	if l.dupNotes > 0 {
		return out, fmt.Errorf("%d seqs notified twice", l.dupNotes)
	}
	return out, nil
}
