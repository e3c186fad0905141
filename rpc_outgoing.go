package main

// Requests from the server to the client (issue 22's network/policyRequest; docs/protocol.md
// will describe them with their first method): integer ids from 1, a bounded table of the
// ones awaiting an answer, the client's response routed back by its id, and every wait
// ended by its own deadline, by the caller giving up, or by the connection's end.
//
// Work in progress for the core's second pass (issue 21): this table is the part that does
// not depend on how the connection's reader and writer are shaped; nothing sends through it
// yet.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
)

// maxPendingClientRequests bounds the requests awaiting the client's answer on one
// connection (the reference's figure for network policy requests).
const maxPendingClientRequests = 256

// clientAnswer is the client's response to one of our requests: a result, or its error.
type clientAnswer struct {
	result json.RawMessage
	err    *rpcError
}

// errTooManyClientRequests: the table is full; the caller decides as if unanswered.
var errTooManyClientRequests = fmt.Errorf("more than %d requests await the client's answer", maxPendingClientRequests)

// outgoingRequests is one connection's requests to the client. The zero value is ready.
type outgoingRequests struct {
	mu      sync.Mutex
	next    int64                       // the last id given
	pending map[int64]chan clientAnswer // by id; each channel takes one answer
	closed  error                       // the connection's end, once it came
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
	o.next++
	ch := make(chan clientAnswer, 1)
	o.pending[o.next] = ch
	return o.next, ch, nil
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
