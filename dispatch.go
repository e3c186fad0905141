package main

// The dispatcher: the method table and the scheduling of handlers (docs/protocol.md §3.2).
//
// Every request is decoded and gated on the connection's reader goroutine, in arrival order,
// so requests that touch the same process keep their order. Each method's table entry says
// how its handler runs ([runMode]: inline, quick, lane, poll, async, or decided per request);
// work that leaves the reader runs on a goroutine of its own, after earlier work with the
// same lane key, and the reader goes on at once. Handlers see a [call], never the connection,
// and answer a [result]. Responses therefore may come out of order; notifications
// interleave freely.

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

// runMode is how a method's handler runs; each entry of the method table declares one.
// Params are decoded and the lifecycle gate applied on the reader in every mode, so
// malformed params and the gate are answered in arrival order.
type runMode uint8

const (
	// inline runs the handler on the reader: it must not block.
	inline runMode = iota
	// decides runs the handler on the reader, where it picks how the rest of its work runs
	// and returns deferTo(mode, fn): fs path methods run quick when their sandbox leaves
	// them free and async in the sandbox worker otherwise (fsDo); process/read answers at
	// once when it can and long-polls otherwise; http/request reserves its requestId in
	// arrival order, then runs async. The choice depends on the request, so the table
	// cannot make it.
	decides
	// quick runs the handler on the reader too, but it may block (a stat, a small read): it
	// gets a goroutine of its own if it outlasts inlineBudget (quick.go).
	quick
	// lane runs the handler on a goroutine of its own, after earlier work with the same key:
	// the params' laneKey (fs handle methods: the handleId).
	lane
	// poll is a long poll: a goroutine of its own that takes no deferred-handler slot but
	// a token of conn.polls; past maxLongPollsPerConn it answers at once with deferTo's now.
	poll
	// async runs the handler on a goroutine of its own, unordered.
	async
)

// laneKeyed is the params of a lane method: the key that orders its requests.
type laneKeyed interface{ laneKey() string }

// deferred is work the dispatcher runs later, as mode says: made by handle for the modes that
// leave the reader, and by a deciding handler through deferTo. ctx is cancelled when the
// connection ends.
type deferred struct {
	mode runMode
	key  string // lane only
	// mustRun: the handler began what the work finishes (process/start reserved its process
	// and may own a shell snapshot's capture), so it runs even when the connection ends
	// before it is scheduled, unanswered; dropped, it would leave the process reserved and
	// the snapshot's key waiting for ever.
	mustRun bool
	now     result // poll only: the answer when no long poll may wait
	run     func(ctx context.Context) (result, error)
}

// deferTo is a deciding handler's answer: run fn as mode says (quick, poll, async).
func deferTo(mode runMode, fn func(ctx context.Context) (result, error)) *deferred {
	return &deferred{mode: mode, run: fn}
}

// deferToLane is a deciding handler's answer that runs fn after earlier work with the same
// lane key, and before later work with it (process/start waiting for its shell snapshot,
// and the requests about that process that follow it: docs/protocol.md §3.4).
func deferToLane(key string, fn func(ctx context.Context) (result, error)) *deferred {
	return &deferred{mode: lane, key: key, run: fn}
}

// mustFinish marks d as work that runs even if the connection ends first (deferred.mustRun).
func (d *deferred) mustFinish() *deferred {
	d.mustRun = true
	return d
}

// orNow sets a long poll's answer for when no more long polls may wait on the connection.
func (d *deferred) orNow(now result) *deferred {
	d.now = now
	return d
}

// deferred is a result only so that handlers return one type: the dispatcher never sends it.
func (*deferred) body() ([]byte, error) { return nil, errInternal("internal error") }

func (d *deferred) response(json.RawMessage) ([]byte, error) { return d.body() }

// method is one entry of a server's method table.
type method struct {
	family string  // the gate text of docs/protocol.md §4.3; "" for methods without a gate
	mode   runMode // how the handler runs
	// holdsMessage says that the handler's deferred work reads the request's bytes
	// (fs/writeFile decodes its data straight from them): the message is released after
	// the work instead of before.
	holdsMessage bool
	// call decodes the params and applies the gate on the reader, then runs the handler
	// (inline, decides) or returns the *deferred that runs it.
	call func(c *conn, params json.RawMessage) (result, error)
}

// methodTable maps a method name to its handler. It is built once per server.
type methodTable map[string]method

// handle builds a method whose params decode into P before the lifecycle gate is checked
// (docs/protocol.md §3.3: malformed params get -32602 even before initialize). paramsName is
// the reference's name for the params type, which its errors show ("expected struct
// ReadParams"). fn runs as mode says.
func handle[P any](family, paramsName string, mode runMode, fn func(c *call, p *P) (result, error)) method {
	if _, ok := any(new(P)).(laneKeyed); mode == lane && !ok {
		panic(fmt.Sprintf("method table: %T runs in a lane but has no laneKey", new(P)))
	}
	run := func(cx *call, p any) (result, error) { return fn(cx, p.(*P)) }
	return method{family: family, mode: mode, call: func(c *conn, raw json.RawMessage) (result, error) {
		return c.dispatchParams(raw, paramsName, family, mode, new(P), run)
	}}
}

// dispatchParams is the part of every method built by handle that does not depend on its
// params' type, kept out of the generic function so that each instantiation stays a few
// bytes: decode p, parse its sandbox, apply the gate, then run now or defer by mode.
func (c *conn) dispatchParams(raw json.RawMessage, paramsName, family string, mode runMode, p any, run func(*call, any) (result, error)) (result, error) {
	if err := decodeParams(raw, paramsName, p); err != nil {
		return nil, err
	}
	if sc, ok := p.(sandboxCarrier); ok {
		if err := c.parseSandbox(sc.sandboxParam()); err != nil {
			return nil, err
		}
	}
	if err := c.gate(family); err != nil {
		return nil, err
	}
	cx := c.call
	switch mode {
	case inline, decides:
		return run(cx, p)
	case lane:
		return &deferred{mode: lane, key: p.(laneKeyed).laneKey(), run: func(context.Context) (result, error) { return run(cx, p) }}, nil
	}
	return deferTo(mode, func(context.Context) (result, error) { return run(cx, p) }), nil
}

// holding marks a method whose deferred work reads the request's bytes (method.holdsMessage).
func (m method) holding() method {
	m.holdsMessage = true
	return m
}

// handleNoParams builds an inline method that takes no params: absent, null or {}
// (docs/protocol.md §3.3).
func handleNoParams(family string, fn func(c *call) (result, error)) method {
	return method{family: family, call: func(c *conn, raw json.RawMessage) (result, error) {
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
		return fn(c.call)
	}}
}

func emptyObject(b []byte) bool {
	return len(bytes.TrimSpace(b[1:len(b)-1])) == 0
}

// newMethodTable gathers the methods of every concern.
func newMethodTable() methodTable {
	t := methodTable{
		"initialize": handle("", "InitializeParams", inline, (*call).initialize),
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
	if in.Method == nil { // a response from the client to a request of ours (rpc_outgoing.go)
		return c.routeResponse(in)
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
	if d, ok := res.(*deferred); ok && err == nil {
		held = d.mode == quick || m.holdsMessage
		return c.schedule(id, d, m.holdsMessage, msg)
	}
	c.reply(id, res, err)
	return readNext
}

// callSafely runs a handler, turning a panic into an internal error so that no input can
// bring the server down.
func (c *conn) callSafely(m method, params json.RawMessage) (res result, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("handler panic", "panic", r)
			res, err = nil, errInternal("internal error")
		}
	}()
	return m.call(c, params)
}

// schedule runs deferred work after earlier work with the same key, then replies; quick
// work runs on the reader (runQuick). msg is released once the work is done when it is
// quick or holds the message (the caller releases it otherwise).
func (c *conn) schedule(id json.RawMessage, d *deferred, holds bool, msg message) readStep {
	release := func() {}
	switch d.mode {
	case poll:
		select {
		case c.polls <- struct{}{}:
		default:
			c.reply(id, d.now, nil) // past maxLongPollsPerConn: what there is, now
			return readNext
		}
		release = func() { <-c.polls }
	default:
		select {
		case c.slots <- struct{}{}:
		case <-c.ctx.Done():
			if d.mode == quick || holds {
				msg.release()
			}
			if d.mustRun {
				c.work.Add(1)
				go func() {
					defer c.work.Done()
					c.runDeferred(d)
				}()
			}
			return readNext
		}
		release = func() { <-c.slots }
	}
	if d.mode == quick {
		defer release()
		defer msg.release()
		return c.runQuick(id, d)
	}
	if holds {
		free := release
		release = func() { msg.release(); free() }
	}
	var prev, done chan struct{}
	if d.mode == lane {
		done = make(chan struct{})
		c.mu.Lock()
		prev = c.lanes[d.key]
		c.lanes[d.key] = done
		if c.laneDepths == nil {
			c.laneDepths = make(map[string]int)
		}
		c.laneDepths[d.key]++
		c.mu.Unlock()
	}
	c.work.Add(1)
	go func() {
		defer release()
		defer c.work.Done()
		if prev != nil {
			<-prev
		}
		res, err := c.runDeferred(d)
		c.reply(id, res, err) // before the lane opens: replies on one lane keep their order
		if done != nil {
			c.mu.Lock()
			if c.lanes[d.key] == done {
				delete(c.lanes, d.key)
			}
			if c.laneDepths[d.key]--; c.laneDepths[d.key] <= 0 {
				delete(c.laneDepths, d.key)
			}
			c.mu.Unlock()
			close(done)
		}
	}()
	return readNext
}

// runDeferred runs deferred work, turning a panic into an internal error.
func (c *conn) runDeferred(d *deferred) (res result, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("handler panic", "panic", r)
			res, err = nil, errInternal("internal error")
		}
	}()
	return d.run(c.ctx)
}

// reply sends the response to a request.
func (c *conn) reply(id json.RawMessage, res result, err error) {
	if a, ok := res.(afterReplier); ok {
		defer a.afterReply()
	}
	if err != nil {
		c.sendError(id, toRPCError(err))
		return
	}
	if res == nil {
		res = rawJSON("null")
	}
	b, merr := res.response(id)
	if merr != nil {
		c.sendError(id, errInternal("encode result: %v", merr))
		return
	}
	c.sendReply(b)
}
