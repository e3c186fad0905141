package main

// Sessions (docs/protocol.md §5.1): a session owns processes and outlives its connection,
// which only borrows it; detached, it waits --session-ttl for a resume, then kills them.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
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

// session is a set of processes that outlives connections.
type session struct {
	id    string
	srv   *server
	procs *procTable

	mu     sync.Mutex
	conn   *conn       // attached connection, nil while detached
	expiry *time.Timer // runs while detached
	gone   bool        // expired or shut down
}

// sessionTable is the server's set of live sessions.
type sessionTable struct {
	mu   sync.Mutex
	byID map[string]*session
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// create makes a new session attached to c, unless --max-sessions exist.
func (t *sessionTable) create(srv *server, c *conn) (*session, error) {
	s := &session{id: newUUID(), srv: srv, conn: c}
	s.procs = newProcTable(s)
	t.mu.Lock()
	defer t.mu.Unlock()
	if max := srv.cfg.limits.sessions; len(t.byID) >= max {
		return nil, errTooMany("sessions", max, "max-sessions")
	}
	if t.byID == nil {
		t.byID = map[string]*session{}
	}
	t.byID[s.id] = s
	return s, nil
}

// resume reattaches the detached session id to c.
func (t *sessionTable) resume(id string, c *conn) (*session, error) {
	t.mu.Lock()
	s := t.byID[id]
	t.mu.Unlock()
	if s == nil {
		return nil, errInvalidRequest("unknown session id %s", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.gone:
		return nil, errInvalidRequest("unknown session id %s", id)
	case s.conn != nil:
		return nil, newRPCError(codeSessionAttached, "session %s is already attached to another connection", id)
	}
	if s.expiry != nil {
		s.expiry.Stop()
		s.expiry = nil
	}
	s.conn = c
	return s, nil
}

func (t *sessionTable) remove(s *session) {
	t.mu.Lock()
	if t.byID[s.id] == s {
		delete(t.byID, s.id)
	}
	t.mu.Unlock()
}

// all returns every live session.
func (t *sessionTable) all() []*session {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*session, 0, len(t.byID))
	for _, s := range t.byID {
		out = append(out, s)
	}
	return out
}

// detach is called when c ends; the session waits ttl for a resume, then expires.
func (s *session) detach(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c || s.gone {
		return
	}
	s.conn = nil
	s.expiry = time.AfterFunc(s.srv.cfg.sessionTTL, s.expire)
}

// expire ends a detached session: its processes are killed (procTable.killAll).
func (s *session) expire() {
	s.mu.Lock()
	if s.conn != nil || s.gone {
		s.mu.Unlock()
		return
	}
	s.gone = true
	s.mu.Unlock()
	s.srv.sessions.remove(s)
	s.procs.killAll()
}

// shutdown kills every process of the session, attached or not (server exit).
func (s *session) shutdown() {
	s.mu.Lock()
	s.gone = true
	if s.expiry != nil {
		s.expiry.Stop()
	}
	s.mu.Unlock()
	s.srv.sessions.remove(s)
	s.procs.killAll()
}

// notify sends a notification to the attached connection, waiting while the client is slow
// (conn.notify); while detached it is dropped, as in the reference (missed output is
// recovered with process/read{afterSeq}). Callers hold no lock that requests need: a
// process sends under its send lock, never its state lock.
func (s *session) notify(b []byte) {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		c.notify(b)
	}
}

// initializeParams are the params of initialize (docs/protocol.md §4.2).
type initializeParams struct {
	ClientName      string  `json:"clientName"`
	ResumeSessionID *string `json:"resumeSessionId"`
}

type initializeResult struct {
	SessionID       string           `json:"sessionId"`
	EnvironmentInfo *environmentInfo `json:"environmentInfo"`
}

func (c *conn) initialize(p *initializeParams) (any, error) {
	c.mu.Lock()
	st := c.state
	c.mu.Unlock()
	if st != stateNew {
		return nil, errInvalidRequest("initialize may only be sent once per connection")
	}
	var s *session
	if p.ResumeSessionID != nil {
		var err error
		if s, err = c.srv.sessions.resume(*p.ResumeSessionID, c); err != nil {
			return nil, err
		}
	} else {
		var err error
		if s, err = c.srv.sessions.create(c.srv, c); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	c.session = s
	c.state = stateInitialized
	c.mu.Unlock()
	return initializeResult{SessionID: s.id, EnvironmentInfo: c.srv.envInfo}, nil
}
