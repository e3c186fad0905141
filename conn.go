package main

// One client connection on any transport (websocket, stdio, relay stream): its reader and
// writer loops, its lifecycle state and its cleanups (docs/protocol.md §5.2).

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
)

// conn is one client connection on any transport. It owns the connection-scoped state of
// docs/protocol.md §5.2 (lifecycle flags, file handles, watches, HTTP streams) through cleanups,
// and is attached to at most one session.
type conn struct {
	srv         *server
	t           msgTransport
	parsePrefix string
	log         *slog.Logger
	ctx         context.Context // cancelled when the connection ends
	cancel      context.CancelFunc
	out         *outQueue
	work        sync.WaitGroup // deferred handler work
	slots       chan struct{}  // one token per running deferred handler
	polls       chan struct{}  // one token per waiting long poll
	readEnded   chan struct{}  // closed by the last goroutine to run readLoop
	quick       quickWatch     // the quick later running on the reader (quick.go)

	mu          sync.Mutex
	state       connState
	session     *session
	lanes       map[string]chan struct{}
	cleanups    []func()
	scoped      map[string]any // connection-scoped state of other concerns, by name
	closeReason error

	sandboxMu    sync.Mutex
	sandboxCache map[string]*sandboxRequest // parsed sandbox objects, by their bytes (fs.go)
}

// connState is where a connection stands in the lifecycle of docs/protocol.md §4.
type connState int

const (
	stateNew         connState = iota // initialize not yet answered
	stateInitialized                  // initialize answered, initialized not yet received
	stateReady                        // initialized received
)

// msgTransport carries whole JSON-RPC messages for one client connection.
type msgTransport interface {
	// readMessage returns the next message; the slice is valid until the next call. It
	// returns an error (io.EOF for a clean end) once the transport is closed.
	readMessage() ([]byte, error)
	// keepMessage gives the bytes of the message last returned by readMessage to the caller,
	// which may then hold on to them past the next call, until it calls release; then the
	// transport may reuse them. Only the reader calls it, between two reads: readMessage's
	// caller, or the goroutine taking reading over from it (checkQuick) before it reads.
	keepMessage() (release func())
	// writeMessage sends one message. Calls never overlap (the writer goroutine, or a reply
	// written directly while the connection is idle: see outQueue.claimWrite), and it must
	// not modify b: process notifications share their bytes with the retained output.
	writeMessage(b []byte) error
	// close ends the transport; reason says why (nil for a normal end). It unblocks
	// readMessage and is safe to call more than once and from any goroutine.
	close(reason error) error
}

// serveConn runs one client connection until its transport ends. Every transport (local
// websocket, stdio, relay stream) is served by this one function.
func (s *server) serveConn(t msgTransport, parsePrefix string) {
	ctx, cancel := context.WithCancel(s.ctx)
	c := &conn{
		srv:         s,
		t:           t,
		parsePrefix: parsePrefix,
		log:         s.log,
		ctx:         ctx,
		cancel:      cancel,
		lanes:       map[string]chan struct{}{},
		slots:       make(chan struct{}, maxDeferredPerConn),
		polls:       make(chan struct{}, maxLongPollsPerConn),
		readEnded:   make(chan struct{}),
	}
	c.out = newOutQueue(s.cfg.limits.queuedBytes)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	stop := context.AfterFunc(ctx, func() { t.close(c.endCause()) })
	c.startQuickWatch()
	c.readLoop()
	<-c.readEnded
	c.stopQuickWatch()
	// The reader is done: the transport needs no unblocking, and what is queued still
	// goes out before the transport closes (stdio's stdout outlives stdin's EOF).
	stop()
	cancel()
	c.work.Wait()
	c.out.close()
	<-writerDone
	t.close(c.reason())
	c.finish()
}

// readStep is what the reader does after a message.
type readStep int

const (
	readNext  readStep = iota // read the next message
	readEnd                   // the connection ends
	readMoved                 // reading has moved to another goroutine (runQuick)
)

// readLoop reads and handles messages until the transport or the connection ends, then
// closes readEnded. It returns early, leaving readEnded open, when a quick later outlasted
// inlineBudget and reading moved to a new goroutine running readLoop.
func (c *conn) readLoop() {
	for {
		if err := c.out.waitRoom(c.ctx, c.srv.cfg.stallTimeout); err != nil {
			if errors.Is(err, errSlowClient) {
				c.fail(err)
			}
			break
		}
		msg, err := c.t.readMessage()
		if err != nil {
			break
		}
		step := c.handleMessage(msg)
		if step == readMoved {
			return
		}
		if step == readEnd {
			break
		}
	}
	close(c.readEnded)
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

// errClientProtocol is a client that broke the JSON-RPC lifecycle; transports close with a
// policy code.
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
	cleanups := c.cleanups
	c.cleanups = nil
	c.mu.Unlock()
	if sess != nil {
		sess.detach(c)
	}
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
}

// onClose registers f to run when the connection ends (file handles, watches, HTTP streams).
func (c *conn) onClose(f func()) {
	c.mu.Lock()
	c.cleanups = append(c.cleanups, f)
	c.mu.Unlock()
}

// scopedState returns the connection-scoped state named name, creating it with mk (which may
// register cleanups with onClose) the first time.
func (c *conn) scopedState(name string, mk func() any) any {
	c.mu.Lock()
	if v, ok := c.scoped[name]; ok {
		c.mu.Unlock()
		return v
	}
	c.mu.Unlock()
	v := mk()
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.scoped[name]; ok {
		return old
	}
	if c.scoped == nil {
		c.scoped = map[string]any{}
	}
	c.scoped[name] = v
	return v
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

// writeLoop is the connection's only writer.
func (c *conn) writeLoop() {
	for {
		b, ok := c.out.pop()
		if !ok {
			return
		}
		err := c.t.writeMessage(b)
		c.out.writeDone()
		if err != nil {
			c.fail(err)
			c.out.close()
			return
		}
	}
}

// sendReply writes a reply at once when the connection is idle, saving the hop to the writer
// goroutine; otherwise it queues it behind what is waiting.
func (c *conn) sendReply(b []byte) {
	if !c.out.claimWrite() {
		c.out.push(b)
		return
	}
	err := c.t.writeMessage(b)
	c.out.writeDone()
	if err != nil {
		c.fail(err)
	}
}
