package main

// A connection's bounded queue of outgoing messages, and the back-pressure it puts on
// producers and on the reader (docs/protocol.md §5.4).

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// Back-pressure on a connection's outgoing queue. Past outQueueLimit queued bytes, a
// notification waits for room: a client that reads slowly slows the processes of its own
// session (as a pipe would), and nothing else. Replies count toward the same bytes: while
// they are over the limit the connection's reader reads no more requests (waitRoom), so a
// client that sends requests without reading their replies is slowed through its own socket.
// A client whose queue makes no progress for defaultStallTimeout is disconnected; its session
// detaches and the processes go on, their output kept in the retained buffer for
// process/read.
const (
	outQueueLimit       = 16 << 20
	defaultStallTimeout = 30 * time.Second
)

var errSlowClient = errors.New("client stopped reading: connection closed, session detached")

// outQueue is a connection's bounded queue of outgoing messages. Responses are always
// queued (they are bounded by the requests the client sent); notifications wait for room.
type outQueue struct {
	mu       sync.Mutex
	msgs     [][]byte
	head     int
	bytes    int
	limit    int
	closed   bool
	ready    chan struct{} // holds a token while msgs is non-empty or closed
	space    chan struct{} // closed and replaced when a message leaves while pushWait waits
	waiting  int           // pushWait and waitRoom callers waiting on space
	reader   bool          // the reader is waiting in waitRoom
	progress time.Time     // when a message last left, or the queue last became non-empty
	busy     bool          // a message is being written, by the writer or by claimWrite's caller
}

func newOutQueue(limit int) *outQueue {
	return &outQueue{limit: limit, ready: make(chan struct{}, 1), space: make(chan struct{})}
}

// push queues b whatever the queue holds.
func (q *outQueue) push(b []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if q.bytes == 0 {
		q.progress = time.Now()
	}
	q.msgs = append(q.msgs, b)
	q.bytes += len(b)
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pushWait queues a notification, waiting while the queue is over its limit. It fails with
// errSlowClient when nothing has left the queue for stall, and when ctx ends.
func (q *outQueue) pushWait(ctx context.Context, b []byte, stall time.Duration) error {
	err := q.waitFor(ctx, stall, false, func() bool { return q.bytes == 0 || q.bytes+len(b) <= q.limit })
	if err == nil {
		q.push(b)
	}
	return err
}

// waitRoom waits until the queue is within its limit: the reader calls it before it reads
// the next request. It fails as pushWait does.
func (q *outQueue) waitRoom(ctx context.Context, stall time.Duration) error {
	return q.waitFor(ctx, stall, true, func() bool { return q.bytes <= q.limit })
}

// waitFor waits until room (called with q.mu held) holds, while messages leave the queue; it
// fails with errSlowClient when none has left for stall, when ctx ends, and once the queue
// is closed. reader marks the wait as the reader's (readerParked in the tests).
func (q *outQueue) waitFor(ctx context.Context, stall time.Duration, reader bool, room func() bool) error {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return net.ErrClosed
		}
		if room() {
			q.mu.Unlock()
			return nil
		}
		wait := time.Until(q.progress.Add(stall))
		if wait <= 0 {
			q.mu.Unlock()
			return errSlowClient
		}
		space := q.space
		q.waiting++
		q.reader = q.reader || reader
		q.mu.Unlock()
		timer := time.NewTimer(wait)
		var err error
		select {
		case <-space:
		case <-timer.C:
		case <-ctx.Done():
			err = ctx.Err()
		}
		timer.Stop()
		q.mu.Lock()
		q.waiting--
		if reader {
			q.reader = false
		}
		q.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// signalSpace wakes pushWait callers; q.mu is held.
func (q *outQueue) signalSpace() {
	if q.waiting > 0 {
		close(q.space)
		q.space = make(chan struct{})
	}
}

// claimWrite reports whether the caller may write a message itself, now: nothing is queued
// and no write is under way, so order is kept. The caller must call writeDone after. A quick
// reply then reaches the socket without waking the writer goroutine.
func (q *outQueue) claimWrite() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.busy || q.head < len(q.msgs) {
		return false
	}
	q.busy = true
	return true
}

// writeDone ends a write begun by pop or claimWrite.
func (q *outQueue) writeDone() {
	q.mu.Lock()
	q.busy = false
	q.progress = time.Now()
	pending := q.head < len(q.msgs) || q.closed
	q.mu.Unlock()
	if pending {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
}

// pop waits for the next message and marks a write under way (end it with writeDone); false
// once the queue is closed and drained.
func (q *outQueue) pop() ([]byte, bool) {
	for {
		q.mu.Lock()
		if q.busy {
			q.mu.Unlock()
			<-q.ready
			continue
		}
		if q.head < len(q.msgs) {
			q.busy = true
			b := q.msgs[q.head]
			q.msgs[q.head] = nil
			q.head++
			if q.head == len(q.msgs) {
				q.msgs, q.head = q.msgs[:0], 0
			}
			q.bytes -= len(b)
			q.progress = time.Now()
			q.signalSpace()
			q.mu.Unlock()
			return b, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil, false
		}
		<-q.ready
	}
}

// close lets pop drain what is queued and then report the end.
func (q *outQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.signalSpace()
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}
