package main

// Requests from the server to the client (docs/protocol.md §3.2; network/policyRequest is the
// first to use them): integer ids from 1, a bounded table of the ones awaiting an answer, the
// request sent through the connection's one writer, the client's response routed back by the
// reader by its id, and every wait ended by its own deadline, by the caller giving up, or by
// the connection's end. A session asks the client attached to it (session.askClient).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// maxPendingClientRequests bounds the requests awaiting the client's answer on one
// connection (the reference's figure for network policy requests).
const maxPendingClientRequests = 256

// clientAnswer is the client's response to one of our requests: a result, or its error.
type clientAnswer struct {
	result json.RawMessage
	err    *clientError
}

// Error makes the client's error answer the error of the request it answers.
func (e *clientError) Error() string {
	return fmt.Sprintf("the client answered with error %d: %s", e.Code, e.Message)
}

// errClientGone ends the requests still waiting when their connection ends.
var errClientGone = errors.New("the client's connection ended before it answered")

// errTooManyClientRequests: the table is full; the caller decides as if unanswered.
var errTooManyClientRequests = fmt.Errorf("more than %d requests await the client's answer", maxPendingClientRequests)

// outgoingRequests is one connection's requests to the client. The zero value is ready.
type outgoingRequests struct {
	late *logThrottle // answers that came after their request gave up (made on the first)

	mu sync.Mutex
	// ids numbers the requests: the session's (shareIDs), so that the connections of one
	// session never give an id twice and an answer the client owed an earlier connection
	// cannot reach a request of this one; own until the connection is attached.
	ids     *requestIDs
	own     requestIDs
	pending map[int64]chan clientAnswer // by id; each channel takes one answer
	closed  error                       // the connection's end, once it came
}

// requestIDs numbers a session's requests to the client across its connections: given is
// the last id taken, sent the highest id queued for the client. Only a sent id may be
// answered: one taken by a request that gave up before it was queued was never seen.
type requestIDs struct{ given, sent atomic.Int64 }

// markSent records that request id went into an outgoing queue.
func (r *requestIDs) markSent(id int64) {
	for {
		s := r.sent.Load()
		if id <= s || r.sent.CompareAndSwap(s, id) {
			return
		}
	}
}

// shareIDs makes the table number its requests with ids, its session's.
func (o *outgoingRequests) shareIDs(ids *requestIDs) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ids = ids
}

// counter is the table's numbering; the caller holds mu.
func (o *outgoingRequests) counter() *requestIDs {
	if o.ids != nil {
		return o.ids
	}
	return &o.own
}

// begin takes an id for a request and returns the channel its answer will come on. The
// caller sends the request, then waits (await), and must end the wait either way.
func (o *outgoingRequests) begin() (int64, <-chan clientAnswer, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed != nil {
		return 0, nil, o.closed
	}
	if len(o.pending) >= maxPendingClientRequests {
		return 0, nil, errTooManyClientRequests
	}
	if o.pending == nil {
		o.pending = make(map[int64]chan clientAnswer)
	}
	id := o.counter().given.Add(1)
	ch := make(chan clientAnswer, 1)
	o.pending[id] = ch
	return id, ch, nil
}

// await waits for the answer to request id, at most until ctx ends or the connection does.
// The id is forgotten either way: an answer that comes later is not ours any more.
func (o *outgoingRequests) await(ctx context.Context, id int64, answer <-chan clientAnswer) (clientAnswer, error) {
	defer o.forget(id)
	select {
	case a, ok := <-answer:
		if !ok {
			o.mu.Lock()
			err := o.closed
			o.mu.Unlock()
			return clientAnswer{}, err
		}
		return a, nil
	case <-ctx.Done():
		return clientAnswer{}, ctx.Err()
	}
}

func (o *outgoingRequests) forget(id int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.pending, id)
}

// queued records that request id went into the outgoing queue: from now on the client may
// know it.
func (o *outgoingRequests) queued(id int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.counter().markSent(id)
}

// gave reports whether rawID is an id the client may have seen, on this connection or an
// earlier one of its session, pending or not: an integer from 1 to the highest one queued.
// An id taken by a request that was never queued (its caller gave up while the queue was
// full) is not one, unless a later request was queued: then its answer counts as late, not
// as a violation. A pending id counts too: its request may be on the wire, and answered,
// before its sender has marked it queued.
func (o *outgoingRequests) gave(rawID json.RawMessage) bool {
	id, err := strconv.ParseInt(string(rawID), 10, 64)
	o.mu.Lock()
	defer o.mu.Unlock()
	_, pending := o.pending[id]
	return err == nil && (pending || id >= 1 && id <= o.counter().sent.Load())
}

// deliver routes a response from the client to the request it answers, and reports whether
// one awaited it. A response to no pending request (an id we never gave, or gave up on) is
// the caller's to judge.
func (o *outgoingRequests) deliver(rawID json.RawMessage, a clientAnswer) bool {
	id, err := strconv.ParseInt(string(rawID), 10, 64)
	if err != nil {
		return false // we give integer ids only
	}
	o.mu.Lock()
	ch, ok := o.pending[id]
	delete(o.pending, id)
	o.mu.Unlock()
	if ok {
		ch <- a // buffered, and taken out of the table first: never blocks, never twice
	}
	return ok
}

// close ends every wait with err (the connection's end), and refuses new requests.
func (o *outgoingRequests) close(err error) {
	if err == nil {
		err = errors.New("connection closed")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed != nil {
		return
	}
	o.closed = err
	for id, ch := range o.pending {
		close(ch)
		delete(o.pending, id)
	}
}

// maxClientRequestWait is the longest a request to the client waits for its answer, whatever
// its caller asked: a client that never answers must not hold a caller for ever.
const maxClientRequestWait = 10 * time.Minute

// request sends the client a request for method with params (a JSON value; nil for none)
// through the connection's writer and waits for its answer: the result, or the client's
// error answer as a *clientError. The wait ends after timeout (at most maxClientRequestWait;
// 0 is that), when ctx ends (the end of what asks, such as the process), and when the
// connection ends; and it fails at once when maxPendingClientRequests already wait. Sending
// waits for room in the outgoing queue as a notification does.
//
// Only the connection's reader routes the answer (routeResponse), so a handler that runs on
// the reader (inline, quick, decides) must not call it: it would wait out its timeout. The
// callers are a process's helpers and work on goroutines of their own.
func (c *conn) request(ctx context.Context, method string, params json.RawMessage, timeout time.Duration) (json.RawMessage, error) {
	if timeout <= 0 || timeout > maxClientRequestWait {
		timeout = maxClientRequestWait
	}
	ctx, cancelWait := context.WithTimeout(ctx, timeout)
	defer cancelWait()
	id, answer, err := c.requests.begin()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	msg := appendClientRequest(nil, id, method, params)
	if limit := messageLimitOf(c.t); limit > 0 && len(msg) > limit {
		c.requests.forget(id)
		return nil, fmt.Errorf("%s: a request of %d bytes exceeds the transport's %d-byte message limit", method, len(msg), limit)
	}
	send, cancel := context.WithCancel(c.ctx)
	stop := context.AfterFunc(ctx, cancel)
	err = c.out.pushWait(send, msg, c.srv.cfg.stallTimeout)
	stop()
	cancel()
	if err != nil {
		c.requests.forget(id)
		switch {
		case errors.Is(err, errSlowClient):
			c.fail(err)
		case ctx.Err() != nil:
			err = ctx.Err()
		default:
			err = errClientGone
		}
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	c.requests.queued(id)
	a, err := c.requests.await(ctx, id, answer)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", method, err)
	case a.err != nil:
		return nil, fmt.Errorf("%s: %w", method, a.err)
	}
	return a.result, nil
}

// appendClientRequest appends the request {"id":id,"method":method,"params":params}.
func appendClientRequest(dst []byte, id int64, method string, params json.RawMessage) []byte {
	dst = strconv.AppendInt(append(dst, `{"id":`...), id, 10)
	dst = appendJSONString(append(dst, `,"method":`...), method)
	if params != nil {
		dst = append(append(dst, `,"params":`...), params...)
	}
	return append(dst, '}')
}

// routeResponse hands a response from the client (a message without a method, whose shape
// parseMessage checked as the reference does) to the request it answers, and says what the
// reader does next. An answer to an id we gave but no longer wait on (its request timed out
// or was cancelled) is logged, throttled, and dropped: the client answered in good faith. A
// response to an id we never gave ends the connection as a protocol violation, as the
// reference does with any response it did not ask for (docs/protocol.md §3.1).
func (c *conn) routeResponse(in incoming) readStep {
	if !c.requests.gave(in.ID) {
		c.fail(fmt.Errorf("%w: a JSON-RPC response from the client to id %s, which the server never asked for", errClientProtocol, in.ID))
		return readEnd
	}
	var a clientAnswer
	if in.Result != nil { // a result wins over an error beside it, as the reference reads it
		a.result = bytes.Clone(in.Result) // the message's bytes go back to the transport
	} else {
		a.err = decodeClientError(in.Error)
	}
	if !c.requests.deliver(in.ID, a) {
		c.requests.lateLog(c).Info("dropped an answer from the client to a request that gave up waiting", "id", string(in.ID), "conn", c.peer)
	}
	return readNext
}

// lateLog is the throttled log of answers that came too late, made on the first.
func (o *outgoingRequests) lateLog(c *conn) *logThrottle {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.late == nil {
		o.late = newLogThrottle(c.log)
	}
	return o.late
}

// decodeClientError decodes an error answer's error member, which parseMessage has checked:
// an object, or serde's positional form [code, message, data].
func decodeClientError(raw json.RawMessage) *clientError {
	var e clientError
	if json.Unmarshal(raw, &e) == nil {
		return &e
	}
	var elems []json.RawMessage
	if json.Unmarshal(raw, &elems) == nil && len(elems) == 3 {
		json.Unmarshal(elems[0], &e.Code)
		json.Unmarshal(elems[1], &e.Message)
		e.Data = elems[2]
		return &e
	}
	return &clientError{Code: codeInternal, Message: string(raw)}
}

// askClient sends a request to the client attached to the session and waits for its answer,
// at most timeout (conn.request): a process's helper asks this way (network/policyRequest).
// With no client attached it fails at once; when the client's connection ends, so does the
// wait.
func (s *session) askClient(ctx context.Context, method string, params json.RawMessage, timeout time.Duration) (json.RawMessage, error) {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("%s: no client is attached to session %s", method, s.id)
	}
	return c.request(ctx, method, params, timeout)
}
