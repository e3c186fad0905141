package main

// One client connection on any transport (websocket, stdio, relay stream): the transport
// contract, the one writer loop, the lifecycle state and the cleanups (docs/protocol.md §5.2).
// Reading and the running of handlers are the scheduler's (rpc_schedule.go).

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// conn is one client connection on any transport. It owns the connection-scoped state of
// docs/protocol.md §5.2 (lifecycle, file handles, watches, HTTP streams, parsed sandboxes),
// each a typed field made on first use and closed with the connection, and is attached to at
// most one session. Handlers never see it: they get its call context (rpc_call.go).
type conn struct {
	// Set before the connection's goroutines start, read-only after.
	srv         *server
	t           msgTransport
	parsePrefix string // the reference's words before a parse error's text
	peer        string // who is at the other end, for logs
	log         *logger
	ctx         context.Context // cancelled when the connection ends
	cancel      context.CancelFunc
	call        *call // what handlers see of the connection (rpc_call.go)

	// Owned by the current reader (rpc_schedule.go hands reading from one goroutine to the
	// next; never two at once).
	scan textScan // buffers for checking a message's text (rpc_text.go)

	// Shared, each with its own lock or channels, as each type's comment says.
	out       *outQueue        // the bounded queue and the right to write; writeLoop pops (conn_queue.go)
	sched     scheduler        // reading, run modes, lanes, long polls (rpc_schedule.go)
	requests  outgoingRequests // requests to the client awaiting its answer; the reader routes them (rpc_outgoing.go)
	sandboxes sandboxCache     // parsed sandbox objects (sandbox_param.go)
	scope     connScope        // the typed connection-scoped state (rpc_call.go)

	// Guarded by mu: the lifecycle, written by the reader (initialize, initialized) and read
	// by handlers; the session, attached by initialize and detached by finish; the end.
	mu          sync.Mutex
	state       connState
	session     *session
	closeReason error
}

// connState is where a connection stands in the lifecycle of docs/protocol.md §4.
type connState int

const (
	stateNew         connState = iota // initialize not yet answered
	stateInitialized                  // initialize answered, initialized not yet received
	stateReady                        // initialized received
)

// msgTransport carries whole JSON-RPC messages for one client connection: all the core asks
// of a websocket, stdio or a relay stream. Anything else a transport offers is an optional
// interface the core probes for (msgLender, msgBuffer, peerProber, messageLimiter).
type msgTransport interface {
	// next returns the next message, whose bytes are the message's until its release. It
	// returns an error (io.EOF for a clean end) once the transport is closed. Only one
	// goroutine at a time calls it: the connection's current reader.
	next() (message, error)
	// writeMessage sends one message. Only the connection's writer goroutine calls it, and
	// it must not modify b.
	writeMessage(b []byte) error
	// close ends the transport for reason, why the connection ends (nil: a normal end);
	// each transport words it in its own terms (ws.go: a close code and text). It unblocks
	// next where the transport can (stdio's next ends at stdin's EOF), and is safe to call
	// more than once and from any goroutine; the first call wins.
	close(reason error)
	// peer names the other end, for logs.
	peer() string
}

// message is one incoming message. Its bytes stay the transport's when it lends them: release
// gives them back once nothing reads them any more, which may be after the following next (a
// deferred fs/writeFile decodes straight from them).
type message struct {
	data   []byte
	utf8   bool      // data is known to be valid UTF-8 (a websocket text message)
	lender msgLender // nil: the bytes are the message's own
	tag    uint64    // the lender's name for the buffer
}

// msgLender is the optional side of a transport that lends its read buffer to the messages
// it returns (ws.go, stdio.go); the core only ever calls it through message.release.
type msgLender interface{ releaseMessage(m message) }

// release gives the message's bytes back to its transport; data must not be read after.
func (m message) release() {
	if m.lender != nil {
		m.lender.releaseMessage(m)
	}
}

// serveConn runs one client connection until its transport ends. Every transport (local
// websocket, stdio, relay stream) is served by this one function.
func (s *server) serveConn(t msgTransport, parsePrefix string) {
	ctx, cancel := context.WithCancel(s.ctx)
	c := &conn{
		srv:         s,
		t:           t,
		parsePrefix: parsePrefix,
		peer:        t.peer(),
		log:         s.log,
		ctx:         ctx,
		cancel:      cancel,
	}
	c.out = newOutQueue(s.cfg.limits.queuedBytes)
	c.sched.start(ctx, c.log, c.reply)
	c.sched.room = func(ctx context.Context) error { // a woken long poll's turn (replyTurn)
		err := c.out.take(ctx, s.cfg.stallTimeout, 0, false)
		if errors.Is(err, errSlowClient) {
			c.fail(err)
		}
		return err
	}
	c.call = newCall(c)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	stop := context.AfterFunc(ctx, func() { t.close(c.endCause()) })
	context.AfterFunc(ctx, func() { c.requests.close(errClientGone) }) // runs once ctx ends, as it always does
	// Once reading is done the transport needs no unblocking, and what is queued still goes
	// out before the transport closes (stdio's stdout outlives stdin's EOF); the cancel
	// gives up what handlers still wait on.
	c.read(func() {
		stop()
		cancel()
	})
	c.sched.wait()
	c.out.close()
	<-writerDone
	t.close(c.reason())
	c.finish()
}

// reason is why the connection ended, for the transport's close.
func (c *conn) reason() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeReason
}

// endCause is why the connection ends: the recorded reason, or the server's shutdown.
func (c *conn) endCause() error {
	if r := c.reason(); r != nil {
		return r
	}
	return c.srv.ctx.Err()
}

// errClientProtocol is a client that broke the JSON-RPC lifecycle: the connection closes, as
// a protocol violation where the transport can say so (ws.go's close code).
var errClientProtocol = errors.New("client broke the JSON-RPC lifecycle")

// fail ends the connection for reason.
func (c *conn) fail(reason error) {
	c.mu.Lock()
	if c.closeReason == nil {
		c.closeReason = reason
	}
	c.mu.Unlock()
	c.cancel()
}

// finish detaches the session, then runs the connection-scoped cleanups. Detaching first
// matters: a harness reconnects within a millisecond, and a resume must not find the session
// still attached while a watch or a file handle closes.
func (c *conn) finish() {
	c.mu.Lock()
	sess := c.session
	c.mu.Unlock()
	if sess != nil {
		sess.detach(c)
	}
	c.scope.close()
}

// currentSession returns the session this connection is attached to, or nil.
func (c *conn) currentSession() *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

func (c *conn) sendError(id json.RawMessage, e *rpcError) {
	c.sendReply(appendError(nil, id, e))
}

// notify sends a notification built by appendNotification or by a hot path of its own. It
// waits while the outgoing queue is full (back-pressure on the producer); a client that
// stopped reading loses its connection, never its output: the session detaches and every
// byte stays readable with process/read (see outQueue).
func (c *conn) notify(b []byte) {
	if err := c.out.pushWait(c.ctx, b, c.srv.cfg.stallTimeout); errors.Is(err, errSlowClient) {
		c.fail(err)
	}
}

// msgBuffer is the optional side of a transport that can leave a message in its write buffer
// for the next writeMessage to flush with it (ws.go): a burst of queued messages then costs
// one flush, and the last message of a burst, or a lone reply, is flushed at once.
type msgBuffer interface{ bufferMessage(b []byte) error }

// writeLoop is the connection's writer: notifications, requests to the client and every
// reply that found the queue busy reach the transport through it, in the queue's order. It
// flushes when the queue is empty, not after each message.
func (c *conn) writeLoop() {
	buf, buffers := c.t.(msgBuffer)
	for {
		b, more, ok := c.out.pop()
		if !ok {
			return
		}
		var err error
		if more && buffers {
			err = buf.bufferMessage(b)
		} else {
			err = c.t.writeMessage(b)
		}
		c.out.written()
		if err != nil {
			c.fail(err)
			c.out.close()
			return
		}
	}
}

// sendReply writes a reply at once when the queue is idle (outQueue.claim), else queues it.
// It never waits for room: replies are bounded by the requests the client sent, and the
// reader stops reading requests while the queue is over its limit (waitRoom).
func (c *conn) sendReply(b []byte) {
	if !c.out.claim() {
		c.out.push(b)
		return
	}
	err := c.t.writeMessage(b)
	c.out.written()
	if err != nil {
		c.fail(err)
	}
}

// peerProber is a transport that can tell, without reading, that its peer has hung up.
type peerProber interface{ peerHungUp() bool }

// peerGone reports whether the connection is ending or its peer has already hung up (the
// kernel has its EOF or reset, which the reader has not read yet).
func (c *conn) peerGone() bool {
	select {
	case <-c.sched.readingEnded():
		return true
	default:
	}
	if c.ctx.Err() != nil {
		return true
	}
	p, ok := c.t.(peerProber)
	return ok && p.peerHungUp()
}

// peerGoneWithin asks peerGone again, every millisecond, for up to d: a client's close can
// reach this side a moment after its next connection's first message does (the client's own
// reader may still hold the socket when it closes it).
func (c *conn) peerGoneWithin(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !c.peerGone() {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-c.sched.readingEnded():
		case <-time.After(time.Millisecond):
		}
	}
	return true
}

// messageLimiter is the optional side of a transport that cannot carry a message over some
// size (the relay's Noise channel: 64 MiB). A larger answer would cost the whole connection,
// so fs/readFile lowers its limit to what the transport carries and says so with the
// reference's "too large" error (fs.go, docs/protocol.md §7.4), and a request to the client
// that would not fit fails alone (rpc_outgoing.go).
type messageLimiter interface{ maxMessageBytes() int }

// messageLimitOf is the largest message t carries, 0 when it has no limit of its own.
func messageLimitOf(t msgTransport) int {
	if ml, ok := t.(messageLimiter); ok {
		return ml.maxMessageBytes()
	}
	return 0
}
