package main

// Sessions (docs/protocol.md §5.1): a session owns processes and outlives its connection,
// which only borrows it; detached, it waits --session-ttl for a resume, then kills them.

import (
	"crypto/rand"
	"fmt"
	"sync"
	"time"
)

// session is a set of processes that outlives connections.
type session struct {
	id    string
	srv   *server
	procs *procTable

	mu       sync.Mutex
	conn     *conn         // attached connection, nil while detached
	detached chan struct{} // closed when conn detaches
	expiry   *time.Timer   // runs while detached
	gone     bool          // expired or shut down

	// clientRequestIDs numbers the requests to the client, across the session's
	// connections (outgoingRequests.shareIDs).
	clientRequestIDs requestIDs
}

// resumeGrace is how long a resume waits for the attached connection to detach when that
// connection's peer has already gone: the harness reconnects within milliseconds of a drop,
// often before the old connection's reader has read its EOF.
const resumeGrace = 2 * time.Second

// resumeProbe is how long a resume keeps asking whether the attached connection's peer has
// hung up before it answers -32010 (conn.peerGoneWithin).
const resumeProbe = 20 * time.Millisecond

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
	s := &session{id: newUUID(), srv: srv, conn: c, detached: make(chan struct{})}
	s.procs = newProcTable(s)
	c.requests.shareIDs(&s.clientRequestIDs)
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
	deadline := time.NewTimer(resumeGrace)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		old, detached := s.conn, s.detached
		switch {
		case s.gone:
			s.mu.Unlock()
			return nil, errInvalidRequest("unknown session id %s", id)
		case old == nil:
			if s.expiry != nil {
				s.expiry.Stop()
				s.expiry = nil
			}
			c.requests.shareIDs(&s.clientRequestIDs)
			s.conn, s.detached = c, make(chan struct{})
			s.mu.Unlock()
			return s, nil
		}
		s.mu.Unlock()
		if !old.peerGoneWithin(resumeProbe) {
			return nil, newRPCError(codeSessionAttached, "session %s is already attached to another connection", id)
		}
		select { // the old connection is ending: its reader reads what is left, then detaches
		case <-detached:
		case <-deadline.C:
			return nil, newRPCError(codeSessionAttached, "session %s is already attached to another connection", id)
		case <-c.ctx.Done():
			return nil, c.ctx.Err()
		}
	}
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
	close(s.detached)
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
