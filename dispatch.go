package main

// The dispatcher: the method table and the scheduling of handlers (docs/protocol.md §3.2).
//
// Every handler runs first on the connection's reader goroutine, in arrival order, so
// requests that touch the same process keep their order. A handler that may block (a
// long-poll read, file I/O, HTTP) returns a [later]: the dispatcher runs its remainder on a
// goroutine of its own, after earlier work with the same key, and the reader goes on at once.
// Responses therefore may come out of order; notifications interleave freely.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
)

// maxDeferredPerConn bounds the deferred handlers running at once for one connection. Past
// it the reader waits for one to finish, so a client that floods the server with slow
// requests is slowed down through its own socket instead of growing the server's memory.
const maxDeferredPerConn = 1024

// maxLongPollsPerConn bounds the process/read long polls waiting at once on one connection.
// They wait apart from the deferred handlers, so pending long polls never hold up other
// requests; past the bound a long poll answers at once with what there is, as a read
// without waitMs does.
const maxLongPollsPerConn = 4096

// later is what a handler returns when the rest of its work may block. run executes on its own
// goroutine, after any earlier later with the same non-empty key has finished; an empty key
// means no ordering at all. ctx is cancelled when the connection ends.
type later struct {
	key string
	// quick says that run, although it may block, almost always returns at once (a stat, a
	// small read). It then first runs on the reader itself, and gets a goroutine of its own
	// only if it outlasts inlineBudget (conn.runQuick). A quick later has no key.
	quick bool
	// poll says that run is a long poll holding a token of conn.polls, which it gives back:
	// it takes no deferred-handler slot.
	poll bool
	// holdsMessage says that run reads the request's bytes (fs/writeFile decodes its data
	// straight from them): the message is released after run instead of before.
	holdsMessage bool
	run          func(ctx context.Context) (any, error)
}

// afterReplier is a result whose follow-up must reach the client after the reply itself,
// such as the body deltas of a streamed http/request: afterReply runs once the reply is queued.
type afterReplier interface{ afterReply() }

// rawJSON is a result already encoded as JSON; it is sent as is, without a second pass over a
// large payload.
type rawJSON []byte

// framedJSON is a large result already encoded as JSON, with room left before it for the
// response's head ({"id":ID,"result":) and after it for the closing brace: reply writes the
// envelope around it instead of copying it (fs/readFile's 43 MiB of base64). An id too long for
// the room is copied the ordinary way.
type framedJSON struct {
	buf  []byte // framedRoom bytes of room, then the result; cap(buf) > len(buf)
	head int    // where the result starts in buf
}

// framedRoom is the room a framedJSON keeps for the response's head: ids of up to 48 bytes.
const framedRoom = 64

// frame writes the response's envelope around the result, in place.
func (f framedJSON) frame(id json.RawMessage) ([]byte, bool) {
	n := len(`{"id":`) + len(id) + len(`,"result":`)
	if n > f.head || cap(f.buf) == len(f.buf) {
		return nil, false
	}
	b := f.buf[f.head-n:]
	k := copy(b, `{"id":`)
	k += copy(b[k:], id)
	copy(b[k:], `,"result":`)
	return append(b, '}'), true
}

// method is one entry of a server's method table.
type method struct {
	family string // the gate text of docs/protocol.md §4.3; "" for methods without a gate
	call   func(c *conn, params json.RawMessage) (any, error)
}

// methodTable maps a method name to its handler. It is built once per server.
type methodTable map[string]method

// handle builds a method whose params decode into P before the lifecycle gate is checked
// (docs/protocol.md §3.3: malformed params get -32602 even before initialize). paramsName is
// the reference's name for the params type, which its errors show ("expected struct
// ReadParams").
func handle[P any](family, paramsName string, fn func(c *conn, p *P) (any, error)) method {
	return method{family: family, call: func(c *conn, raw json.RawMessage) (any, error) {
		var p P
		if err := decodeParamsAs(raw, paramsName, &p); err != nil {
			return nil, err
		}
		if sc, ok := any(&p).(sandboxCarrier); ok {
			if err := c.parseSandbox(sc.sandboxParam()); err != nil {
				return nil, err
			}
		}
		if err := c.gate(family); err != nil {
			return nil, err
		}
		return fn(c, &p)
	}}
}

// handleNoParams builds a method that takes no params: absent, null or {}
// (docs/protocol.md §3.3).
func handleNoParams(family string, fn func(c *conn) (any, error)) method {
	return method{family: family, call: func(c *conn, raw json.RawMessage) (any, error) {
		if len(raw) > 0 && !json.Valid(raw) { // parseIncoming only delimits params
			return nil, errInvalidParams("invalid JSON in params: %s", jsonSyntaxError(raw))
		}
		switch t := bytes.TrimSpace(raw); {
		case len(t) == 0, string(t) == "null":
		case t[0] == '[':
			return nil, errInvalidParams("invalid type: sequence, expected unit")
		case t[0] == '{':
			if !emptyObject(t) {
				return nil, errInvalidParams("invalid type: map, expected unit")
			}
		default:
			return nil, errInvalidParams("invalid type: %s, expected unit", jsonKind(t))
		}
		if err := c.gate(family); err != nil {
			return nil, err
		}
		return fn(c)
	}}
}

func emptyObject(b []byte) bool {
	return len(bytes.TrimSpace(b[1:len(b)-1])) == 0
}

// newMethodTable gathers the methods of every concern.
func newMethodTable() methodTable {
	t := methodTable{
		"initialize": handle("", "InitializeParams", (*conn).initialize),
	}
	envMethods(t)
	procMethods(t)
	fsMethods(t)
	httpMethods(t)
	return t
}

// handleMessage handles one incoming message, releases it once nothing reads its bytes, and
// says what the reader does next.
func (c *conn) handleMessage(msg message) readStep {
	held := false
	defer func() {
		if !held {
			msg.release()
		}
	}()
	in, name, perr := parseMessage(msg.data, msg.utf8, &c.scan)
	if perr != nil {
		c.sendError(nil, errInvalidRequest("%s: %s", c.parsePrefix, perr))
		return readNext
	}
	if in.Method == nil { // a response or error from the client: we never asked; 0.169 hangs up
		c.fail(fmt.Errorf("%w: a JSON-RPC response from the client, which the server never asked for", errClientProtocol))
		return readEnd
	}
	if in.ID == nil {
		if !c.handleNotification(name) {
			return readEnd
		}
		return readNext
	}
	if c.log.Enabled(c.ctx, slog.LevelDebug) {
		c.log.Debug("request", "method", name, "conn", c.peer)
	}
	m, ok := c.srv.methods[name]
	if !ok {
		c.sendError(in.ID, newRPCError(codeMethodNotFound, "exec-server stub does not implement `%s` yet", name))
		return readNext
	}
	id := append(json.RawMessage(nil), in.ID...)
	res, err := c.callSafely(m, in.Params)
	if l, ok := res.(later); ok && err == nil {
		held = l.quick || l.holdsMessage
		return c.schedule(id, l, msg)
	}
	c.reply(id, res, err)
	return readNext
}

// callSafely runs a handler, turning a panic into an internal error so that no input can
// bring the server down.
func (c *conn) callSafely(m method, params json.RawMessage) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("handler panic", "panic", r)
			res, err = nil, errInternal("internal error")
		}
	}()
	return m.call(c, params)
}

// schedule runs deferred work after earlier work with the same key, then replies; a quick
// later runs on the reader (runQuick). msg is released once the work is done when it is
// quick or holds the message (the caller releases it otherwise).
func (c *conn) schedule(id json.RawMessage, l later, msg message) readStep {
	release := func() {}
	if !l.poll {
		select {
		case c.slots <- struct{}{}:
		case <-c.ctx.Done():
			if l.quick || l.holdsMessage {
				msg.release()
			}
			return readNext
		}
		release = func() { <-c.slots }
	}
	if l.quick && l.key == "" {
		defer release()
		defer msg.release()
		return c.runQuick(id, l)
	}
	if l.holdsMessage {
		release = func() { msg.release(); <-c.slots }
	}
	var prev, done chan struct{}
	if l.key != "" {
		done = make(chan struct{})
		c.mu.Lock()
		prev = c.lanes[l.key]
		c.lanes[l.key] = done
		c.mu.Unlock()
	}
	c.work.Add(1)
	go func() {
		defer release()
		defer c.work.Done()
		if prev != nil {
			<-prev
		}
		res, err := c.runLater(l)
		c.reply(id, res, err) // before the lane opens: replies on one lane keep their order
		if done != nil {
			c.mu.Lock()
			if c.lanes[l.key] == done {
				delete(c.lanes, l.key)
			}
			c.mu.Unlock()
			close(done)
		}
	}()
	return readNext
}

func (c *conn) runLater(l later) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("handler panic", "panic", r)
			res, err = nil, errInternal("internal error")
		}
	}()
	return l.run(c.ctx)
}

// reply sends the response to a request.
func (c *conn) reply(id json.RawMessage, res any, err error) {
	if a, ok := res.(afterReplier); ok {
		defer a.afterReply()
	}
	if err != nil {
		c.sendError(id, toRPCError(err))
		return
	}
	if f, ok := res.(framedJSON); ok {
		if b, ok := f.frame(id); ok {
			c.sendReply(b)
			return
		}
		res = rawJSON(f.buf[f.head:])
	}
	size := 64
	switch r := res.(type) { // one exact allocation for large pre-encoded results
	case rawJSON:
		size += len(r) + len(id)
	case json.RawMessage:
		size += len(r) + len(id)
	}
	b, merr := appendResponse(make([]byte, 0, size), id, res)
	if merr != nil {
		c.sendError(id, errInternal("encode result: %v", merr))
		return
	}
	c.sendReply(b)
}
