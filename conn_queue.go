package main

// A connection's bounded queue of outgoing messages, the one way to the transport, and the
// back-pressure its bound puts on producers and on the reader (docs/protocol.md §5.4).

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

// window is a budget of bytes that producers take and one consumer gives back, as
// x/crypto/ssh's window is a budget of bytes the peer may send: take waits for room, and
// gives up when nothing has been given back for the stall time. Its mu also guards what the
// bytes stand for in the type that embeds it (outQueue's messages).
type window struct {
	mu       sync.Mutex
	bytes    int // taken and not given back
	limit    int
	closed   bool
	space    chan struct{} // closed and replaced when bytes are given back while take waits
	waiting  int           // take callers waiting on space
	reader   bool          // the connection's reader waits in take (readerParked in the tests)
	progress time.Time     // when bytes were last given back, or the window last became non-empty
}

func (w *window) init(limit int) {
	w.limit = limit
	w.space = make(chan struct{})
}

// addLocked takes n bytes whatever the window holds; w.mu is held.
func (w *window) addLocked(n int) {
	if w.bytes == 0 {
		w.progress = time.Now()
	}
	w.bytes += n
}

// take waits until n more bytes fit and takes them. n bytes always fit an empty window, so a
// message larger than the limit is not refused; n = 0 waits until the window is within its
// limit. It fails with errSlowClient when nothing has been given back for stall (0:
// defaultStallTimeout), with ctx's error when ctx ends, and with net.ErrClosed once the window
// is closed. reader marks the wait as the connection reader's.
func (w *window) take(ctx context.Context, stall time.Duration, n int, reader bool) error {
	if stall <= 0 {
		stall = defaultStallTimeout
	}
	for {
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return net.ErrClosed
		}
		if w.bytes+n <= w.limit || (n > 0 && w.bytes == 0) {
			w.addLocked(n)
			w.mu.Unlock()
			return nil
		}
		wait := time.Until(w.progress.Add(stall))
		if wait <= 0 {
			w.mu.Unlock()
			return errSlowClient
		}
		space := w.space
		w.waiting++
		w.reader = w.reader || reader
		w.mu.Unlock()
		timer := time.NewTimer(wait)
		var err error
		select {
		case <-space:
		case <-timer.C:
		case <-ctx.Done():
			err = ctx.Err()
		}
		timer.Stop()
		w.mu.Lock()
		w.waiting--
		if reader {
			w.reader = false
		}
		w.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// giveBackLocked returns n bytes and wakes the waiters; w.mu is held.
func (w *window) giveBackLocked(n int) {
	w.bytes -= n
	w.progress = time.Now()
	w.wakeLocked()
}

// closeLocked fails every wait, now and later; w.mu is held.
func (w *window) closeLocked() {
	w.closed = true
	w.wakeLocked()
}

func (w *window) wakeLocked() {
	if w.waiting > 0 {
		close(w.space)
		w.space = make(chan struct{})
	}
}

// outQueue is a connection's queue of outgoing messages, bounded by its window, and the
// right to write to the transport: one message is written at a time, in the queue's order.
// Responses are always queued (they are bounded by the requests the client sent);
// notifications wait for room. The connection's writer goroutine pops; the one exception is
// claim: a reply made while nothing is queued or being written is written by the goroutine
// that made it, which saves a lone round trip the writer's wake-up (a thread wake-up on a
// 2-CPU machine, about 14 µs of an fs/getMetadata round trip: BENCHMARKS.md).
type outQueue struct {
	window          // the queued bytes; its mu guards msgs and head
	msgs   [][]byte // msgs[head:] wait for the writer
	head   int
	ready  chan struct{} // holds a token while msgs is non-empty or closed
	// writing: a message is being written, by the writer goroutine or by a reply's
	// producer that found the queue idle (claim); the other waits.
	writing bool
}

// claim reports whether the caller may write a reply itself, now: nothing is queued and
// nothing is being written, so order is kept. The caller calls written after, whatever the
// write gave; until then pop waits. The transport's write deadline bounds such a write as it
// bounds the writer's.
func (q *outQueue) claim() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.writing || q.head < len(q.msgs) {
		return false
	}
	q.writing = true
	return true
}

// written ends a write begun by claim or pop.
func (q *outQueue) written() {
	q.mu.Lock()
	q.writing = false
	pending := q.head < len(q.msgs) || q.closed
	q.mu.Unlock()
	if pending {
		q.wakeWriter()
	}
}

func newOutQueue(limit int) *outQueue {
	q := &outQueue{ready: make(chan struct{}, 1)}
	q.init(limit)
	return q
}

// push queues b whatever the queue holds (a reply).
func (q *outQueue) push(b []byte) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.addLocked(len(b))
	q.msgs = append(q.msgs, b)
	q.mu.Unlock()
	q.wakeWriter()
}

// pushWait queues a notification, waiting while the queue is over its limit. It fails as
// window.take does.
func (q *outQueue) pushWait(ctx context.Context, b []byte, stall time.Duration) error {
	return q.pushWaitThen(ctx, b, stall, nil)
}

// pushWaitThen is pushWait that also runs queued, when b went into the queue, before the
// writer can take b out: what the client can see of b happens after it. A request to the
// client marks its id as sent there, so that the client's answer, however quick, finds it.
func (q *outQueue) pushWaitThen(ctx context.Context, b []byte, stall time.Duration, queued func()) error {
	if err := q.take(ctx, stall, len(b), false); err != nil {
		return err
	}
	q.mu.Lock()
	if !q.closed {
		q.msgs = append(q.msgs, b)
		if queued != nil {
			queued()
		}
	}
	q.mu.Unlock()
	q.wakeWriter()
	return nil
}

// waitRoom waits until the queue is within its limit: the reader calls it before it reads
// the next request. It fails as window.take does.
func (q *outQueue) waitRoom(ctx context.Context, stall time.Duration) error {
	return q.take(ctx, stall, 0, true)
}

func (q *outQueue) wakeWriter() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pop waits for the next message, and says whether more wait behind it; ok is false once the
// queue is closed and drained. Taking a
// message out is the progress the stall time measures: while the writer is still writing it,
// the queue it left behind is what waits, and once the queue is empty nothing waits for room.
func (q *outQueue) pop() (b []byte, more, ok bool) {
	for {
		q.mu.Lock()
		if q.writing {
			q.mu.Unlock()
			<-q.ready
			continue
		}
		if q.head < len(q.msgs) {
			q.writing = true
			b = q.msgs[q.head]
			q.msgs[q.head] = nil
			q.head++
			if q.head == len(q.msgs) {
				q.msgs, q.head = q.msgs[:0], 0
			}
			more = q.head < len(q.msgs)
			q.giveBackLocked(len(b))
			q.mu.Unlock()
			return b, more, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil, false, false
		}
		<-q.ready
	}
}

// close lets pop drain what is queued and then report the end, and fails every wait for room.
func (q *outQueue) close() {
	q.mu.Lock()
	q.closeLocked()
	q.mu.Unlock()
	q.wakeWriter()
}
