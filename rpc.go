package main

// The dispatcher: the method table, and each request's way from its bytes to its handler
// (docs/protocol.md §3.2).
//
// Every request is decoded and gated on the connection's reader goroutine, in arrival order,
// so requests that touch the same process keep their order. Each method's table entry says
// how its handler runs ([runMode]: inline, quick, lane, poll, async, or decided per request);
// the scheduler (rpc_schedule.go) runs what leaves the reader, after earlier work with the
// same lane key, and the reader goes on at once. Handlers see a [call], never the connection,
// and answer a [result] or register work. Responses therefore may come out of order;
// notifications interleave freely.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
)

// method is one entry of a server's method table.
type method struct {
	family string  // the gate text of docs/protocol.md §4.3; "" for methods without a gate
	mode   runMode // how the handler runs
	// result is the type of the handler's answer, encoded by answer (TestDocsMethods checks
	// its members against docs/protocol.md); nil for the test methods built by hand.
	result reflect.Type
	// readsMessage says that the work registered for a request reads the message's bytes
	// (its params are a messageBorrower): the scheduler gives them back after that work.
	readsMessage bool
	// call decodes the params and applies the gate on the reader, then runs the handler
	// (inline, decides) and encodes its answer, or registers the work that does (later).
	call func(c *conn, params json.RawMessage) (result, error)
}

// methodTable maps a method name to its handler. It is built once per server.
type methodTable map[string]method

// handle builds a method whose params decode into *PP before the lifecycle gate is checked
// (docs/protocol.md §3.3: malformed params get -32602 even before initialize), and whose
// handler answers an R. paramsName is the reference's name for the params type, which its
// errors show ("expected struct ReadParams"). fn runs as mode says.
//
// The generic part is kept to what depends on R (the handler's call and the encoding of its
// answer), one small closure; the rest is newMethod's, one copy for every method. PP, the
// pointer to the params, is a type parameter rather than P itself so that every method
// shares the GC shape of a pointer there: the function is stenciled once per shape of its
// answer, not once per pair of params and answer (some eighty).
func handle[PP, R any](family, paramsName string, mode runMode, fn func(c *call, p PP) (R, error)) method {
	return newMethod(family, paramsName, mode, reflect.TypeFor[PP](), reflect.TypeFor[R](),
		func(cx *call, p any, onReader bool) (result, error) {
			r, err := fn(cx, p.(PP))
			if err != nil || onReader && cx.sched.registered() { // failed, or registered work that answers
				return nil, err
			}
			return answer(r), nil
		})
}

// paramsHandler runs a method's handler on its decoded params and encodes its answer. On the
// reader (onReader), a handler that registered work answers nothing: the work does.
type paramsHandler func(cx *call, p any, onReader bool) (result, error)

// newMethod is handle's part that does not depend on the type of the answer: params is the
// pointer type the params decode through (each request's params are a new one of what it
// points to), run runs the handler.
func newMethod(family, paramsName string, mode runMode, params, res reflect.Type, run paramsHandler) method {
	if params.Kind() != reflect.Pointer {
		panic(fmt.Sprintf("method table: params %v are not a pointer", params))
	}
	elem := params.Elem()
	newParams := func() any { return reflect.New(elem).Interface() }
	probe := newParams()
	if _, ok := probe.(laneKeyed); mode == lane && !ok {
		panic(fmt.Sprintf("method table: %T runs in a lane but has no laneKey", probe))
	}
	_, reads := probe.(messageBorrower)
	m := method{family: family, mode: mode, result: res, readsMessage: reads}
	m.call = func(c *conn, raw json.RawMessage) (result, error) {
		p := newParams()
		if err := decodeParams(raw, paramsName, p); err != nil {
			return nil, err
		}
		var sb *sandboxParam
		if sc, ok := p.(sandboxCarrier); ok {
			sb = sc.sandboxParam()
		}
		if err := c.admit(family, sb); err != nil {
			return nil, err
		}
		cx := c.call
		if mode == inline || mode == decides {
			return run(cx, p, true)
		}
		w := cx.laterEncoded(mode, func(context.Context) (result, error) { return run(cx, p, false) })
		if mode == lane {
			w.key = p.(laneKeyed).laneKey()
		}
		return nil, nil
	}
	return m
}

// admit is the part of every method built by handle that does not depend on its params'
// type: parse the params' sandbox, if they have one, then apply the gate.
func (c *conn) admit(family string, sb *sandboxParam) error {
	if sb != nil {
		if err := c.sandboxes.check(sb); err != nil {
			return err
		}
	}
	return c.gate(family)
}

// handleNoParams builds an inline method that takes no params: absent, null or {}
// (docs/protocol.md §3.3).
func handleNoParams[R any](family string, fn func(c *call) (R, error)) method {
	return method{family: family, result: reflect.TypeFor[R](), call: func(c *conn, raw json.RawMessage) (result, error) {
		if err := checkNoParams(raw); err != nil {
			return nil, err
		}
		if err := c.gate(family); err != nil {
			return nil, err
		}
		return encoded(fn(c.call))
	}}
}

// checkNoParams accepts params that are absent, null or {}.
func checkNoParams(raw json.RawMessage) error {
	if len(raw) > 0 && !json.Valid(raw) { // parseIncoming only delimits params
		return errInvalidParams("invalid JSON in params: %s", jsonSyntaxError(raw))
	}
	switch t := bytes.TrimSpace(raw); {
	case len(t) == 0, string(t) == "null":
	case t[0] == '[':
		return errInvalidParams("invalid type: sequence, expected unit")
	case t[0] == '{':
		if !emptyObject(t) {
			return errInvalidParams("invalid type: map, expected unit")
		}
	default:
		return errInvalidParams("invalid type: %s, expected unit", jsonKind(t))
	}
	return nil
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

// handleMessage handles one incoming message on the reader and says what the reader does
// next. The message's bytes stay readable until the scheduler gives them back
// (scheduler.afterMessage); a handler that registered work has it run there.
func (c *conn) handleMessage(msg message) readStep {
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
	if c.log.Enabled(c.ctx, levelDebug) {
		c.log.Debug("request", "method", name, "conn", c.peer)
	}
	m, ok := c.srv.methods[name]
	if !ok {
		c.sendError(in.ID, newRPCError(codeMethodNotFound, "exec-server stub does not implement `%s` yet", name))
		return readNext
	}
	res, err := c.callSafely(m, in.Params)
	if c.sched.adopt(in.ID, m.readsMessage, err) {
		return readNext // the work the handler registered answers
	}
	c.reply(in.ID, res, err)
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

// reply sends the response to a request.
func (c *conn) reply(id json.RawMessage, res result, err error) {
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
