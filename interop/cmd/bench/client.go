package main

// A JSON-RPC client for exec-server over gorilla/websocket, independent of the server's own
// hand-written websocket code. One reader goroutine per connection stamps every message with
// its arrival time before parsing it, so latencies do not include the client's JSON work.
//
// Messages (docs/protocol.md §3.1, §3.2, §6.11):
//
//	request       {"id":N,"method":M,"params":P}            client → server
//	response      {"id":N,"result":R} | {"error":E,"id":N}  server → client, any field order
//	notification  {"method":"process/output","params":{"processId","seq","stream","chunk"}}
//	              {"method":"process/exited","params":{"processId","seq","exitCode",...}}
//	              {"method":"process/closed","params":{"processId","seq"}}
//
// Notifications for a process may arrive before its process/start response (docs/protocol.md
// §3.4), so a process is watched before its start request is sent.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// Buffer sizes of the client websocket: reads in 64 KiB, writes large messages as 1 MiB
// frames (the reference's frame limit is 16 MiB, docs/protocol.md §2.2).
const (
	wsReadBuffer  = 64 << 10
	wsWriteBuffer = 1 << 20
)

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("%d %s", e.Code, e.Message) }

// reply is one response, stamped with the time its last byte arrived.
type reply struct {
	result []byte // raw result, owned by the receiver
	err    *rpcError
	at     time.Time
}

// call is a request in flight.
type call struct {
	sent time.Time
	done chan reply
}

// wait returns the reply or fails when ctx ends or the connection dies.
func (c *call) wait(ctx context.Context, cl *client) (reply, error) {
	select {
	case r := <-c.done:
		if r.err != nil {
			return r, r.err
		}
		return r, nil
	case <-cl.dead:
		return reply{}, fmt.Errorf("connection lost: %w", cl.deathErr)
	case <-ctx.Done():
		return reply{}, ctx.Err()
	}
}

// latency is the time from sending the request to the arrival of r.
func (c *call) latency(r reply) time.Duration { return r.at.Sub(c.sent) }

// procWatch gathers the notifications of one process.
type procWatch struct {
	verifyZero bool // check that every output byte is 0 (for /dev/zero)
	// output, when set, receives a copy of every output chunk, decoded; the reader drops
	// what does not fit (bench netproxy reads one short line from it).
	output chan []byte

	// Set by the reader goroutine; read only after closed is closed.
	bytes    int64
	chunks   int
	seen     []uint64 // bitset of the seq numbers received
	events   uint64   // events received
	maxSeq   uint64
	reorders int // events that arrived after one with a higher seq
	nonZero  bool
	exitCode int
	exited   bool
	gotClose bool // process/closed arrived (other events may still be on their way)
	closedAt time.Time
	closed   chan struct{} // closed once process/closed and every event before it arrived
	badNote  error
	scratch  []byte
	finished bool
}

// complete reports whether closed and every event numbered before it have arrived. The
// reference may deliver process/closed before process/exited (both are sent by different
// tasks), so closed alone does not end a process for the client.
func (w *procWatch) complete() bool {
	return w.gotClose && w.exited && (w.events == w.maxSeq || w.badNote != nil)
}

// see records the arrival of event seq. The reference numbers output, exited and closed from
// one counter but may deliver exited after later output (docs/protocol.md §6.2), so arrival order
// is not checked; every seq from 1 to the highest must arrive exactly once.
func (w *procWatch) see(seq uint64) {
	if seq == 0 {
		w.badNote = errors.New("event with seq 0")
		return
	}
	i, bit := seq/64, uint64(1)<<(seq%64)
	for uint64(len(w.seen)) <= i {
		w.seen = append(w.seen, 0)
	}
	if w.seen[i]&bit != 0 {
		w.badNote = fmt.Errorf("seq %d received twice", seq)
		return
	}
	w.seen[i] |= bit
	w.events++
	if seq < w.maxSeq {
		w.reorders++
	}
	w.maxSeq = max(w.maxSeq, seq)
}

// check reports a lost or malformed event, a bad exit, or missing output.
func (w *procWatch) check(wantBytes int64, wantExit int) error {
	switch {
	case w.badNote != nil:
		return w.badNote
	case w.events != w.maxSeq:
		return fmt.Errorf("received %d events with seq up to %d: %d lost (%d of %d output bytes received)", w.events, w.maxSeq, w.maxSeq-w.events, w.bytes, wantBytes)
	case w.exitCode != wantExit:
		return fmt.Errorf("exit code %d, want %d", w.exitCode, wantExit)
	case wantBytes >= 0 && w.bytes != wantBytes:
		return fmt.Errorf("received %d output bytes, want %d", w.bytes, wantBytes)
	case w.nonZero:
		return errors.New("output holds non-zero bytes")
	}
	return nil
}

// client is one websocket connection to an exec-server.
type client struct {
	ws     *websocket.Conn
	wmu    sync.Mutex
	nextID atomic.Int64

	mu    sync.Mutex
	calls map[int64]*call
	procs map[string]*procWatch

	dead     chan struct{}
	deathErr error

	policyDecisions atomic.Int64 // network/policyDecision notifications received
}

// dial connects to url and starts the reader. It does not initialize.
func dial(ctx context.Context, url string) (*client, error) {
	d := websocket.Dialer{ReadBufferSize: wsReadBuffer, WriteBufferSize: wsWriteBuffer}
	ws, _, err := d.DialContext(ctx, url, nil)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	c := &client{ws: ws, calls: map[int64]*call{}, procs: map[string]*procWatch{}, dead: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

// connect dials url, initializes, and sends initialized.
func connect(ctx context.Context, url string) (*client, error) {
	c, err := dial(ctx, url)
	if err != nil {
		return nil, err
	}
	if _, _, err := c.call(ctx, "initialize", map[string]any{"clientName": "exec-server-bench"}); err != nil {
		c.close()
		return nil, fmt.Errorf("initialize: %w", err)
	}
	if err := c.notify("initialized", map[string]any{}); err != nil {
		c.close()
		return nil, fmt.Errorf("initialized: %w", err)
	}
	return c, nil
}

// close sends a close frame and drops the connection.
func (c *client) close() {
	c.wmu.Lock()
	c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.wmu.Unlock()
	c.ws.Close()
	<-c.dead
}

// request is the wire form of a request.
type request struct {
	ID     int64  `json:"id"`
	Method string `json:"method"`
	Params any    `json:"params"`
}

// start sends a request and returns it in flight.
func (c *client) start(method string, params any) (*call, error) {
	id := c.nextID.Add(1)
	b, err := json.Marshal(request{ID: id, Method: method, Params: params})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	cl := &call{done: make(chan reply, 1)}
	c.mu.Lock()
	c.calls[id] = cl
	c.mu.Unlock()
	c.wmu.Lock()
	cl.sent = time.Now()
	err = c.ws.WriteMessage(websocket.TextMessage, b)
	c.wmu.Unlock()
	if err != nil {
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	return cl, nil
}

// call sends a request and waits for its reply; it returns the round-trip time.
func (c *client) call(ctx context.Context, method string, params any) (reply, time.Duration, error) {
	cl, err := c.start(method, params)
	if err != nil {
		return reply{}, 0, err
	}
	r, err := cl.wait(ctx, c)
	if err != nil {
		return r, 0, fmt.Errorf("%s: %w", method, err)
	}
	return r, cl.latency(r), nil
}

// notify sends a notification.
func (c *client) notify(method string, params any) error {
	b, err := json.Marshal(struct {
		Method string `json:"method"`
		Params any    `json:"params"`
	}{method, params})
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

// watch registers a process id before its start request is sent.
func (c *client) watch(id string, verifyZero bool) *procWatch {
	w := &procWatch{verifyZero: verifyZero, closed: make(chan struct{})}
	c.mu.Lock()
	c.procs[id] = w
	c.mu.Unlock()
	return w
}

// unwatch forgets a process.
func (c *client) unwatch(id string) {
	c.mu.Lock()
	delete(c.procs, id)
	c.mu.Unlock()
}

// waitClosed waits for the process/closed notification of w.
func (c *client) waitClosed(ctx context.Context, w *procWatch) error {
	select {
	case <-w.closed:
		return nil
	case <-c.dead:
		return fmt.Errorf("connection lost before process/closed: %w", c.deathErr)
	case <-ctx.Done():
		return fmt.Errorf("waiting for process/closed: %w", ctx.Err())
	}
}

// readLoop reads messages until the connection ends; it owns buf and every procWatch field.
func (c *client) readLoop() {
	var buf bytes.Buffer
	var err error
	defer func() {
		c.deathErr = err
		close(c.dead)
	}()
	for {
		var r io.Reader
		_, r, err = c.ws.NextReader()
		if err != nil {
			return
		}
		buf.Reset()
		if _, err = buf.ReadFrom(r); err != nil {
			return
		}
		at := time.Now()
		if err = c.dispatch(buf.Bytes(), at); err != nil {
			c.ws.Close()
			return
		}
	}
}

// dispatch routes one message to its call or process watch.
func (c *client) dispatch(msg []byte, at time.Time) error {
	e, err := splitEnvelope(msg)
	id, method, params, result, errv := e.id, e.method, e.params, e.result, e.err
	if err != nil {
		return fmt.Errorf("bad message from server: %w: %.200q", err, msg)
	}
	if method != nil {
		if id == nil {
			return c.notification(method, params, at)
		}
		return nil // a server→client request; none are expected locally
	}
	n, err := strconv.ParseInt(string(id), 10, 64)
	if err != nil {
		return fmt.Errorf("response with unexpected id %.40q: %.200q", id, msg)
	}
	rep := reply{at: at}
	if errv != nil {
		rep.err = &rpcError{}
		if err := json.Unmarshal(errv, rep.err); err != nil {
			return fmt.Errorf("bad error object %.200q", errv)
		}
	} else {
		rep.result = bytes.Clone(result)
	}
	c.mu.Lock()
	cl := c.calls[n]
	delete(c.calls, n)
	c.mu.Unlock()
	if cl == nil {
		if n == -1 && rep.err != nil {
			return fmt.Errorf("server could not parse a request: %v", rep.err)
		}
		return fmt.Errorf("response to unknown id %d", n)
	}
	cl.done <- rep
	return nil
}

// notification updates the watch of the process it names.
func (c *client) notification(method, params []byte, at time.Time) error {
	name, err := stringValue(method)
	if err != nil {
		return err
	}
	var pid, seq, chunk, code []byte
	switch string(name) {
	case "process/output", "process/exited", "process/closed":
	case "network/policyDecision":
		c.policyDecisions.Add(1)
		return nil
	default:
		return nil
	}
	if err := members(params, func(k, v []byte) bool {
		switch string(k) {
		case "processId":
			pid = v
		case "seq":
			seq = v
		case "chunk":
			chunk = v
		case "exitCode":
			code = v
		}
		return true
	}); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	id, err := stringValue(pid)
	if err != nil {
		return fmt.Errorf("%s processId: %w", name, err)
	}
	c.mu.Lock()
	w := c.procs[string(id)]
	c.mu.Unlock()
	if w == nil || w.finished {
		return nil
	}
	if s, err := uintValue(seq); err == nil {
		w.see(s)
	} else if string(name) != "process/closed" { // SEED servers omit seq on closed
		w.badNote = fmt.Errorf("%s without a valid seq", name)
	}
	switch string(name) {
	case "process/output":
		b64, err := stringValue(chunk)
		if err != nil {
			w.badNote = fmt.Errorf("process/output chunk: %w", err)
			return nil
		}
		if w.output != nil {
			b, err := base64.StdEncoding.AppendDecode(nil, b64)
			if err != nil {
				w.badNote = fmt.Errorf("process/output chunk: %w", err)
				return nil
			}
			select {
			case w.output <- b:
			default:
			}
		}
		if w.verifyZero {
			w.scratch = w.scratch[:0]
			w.scratch, err = base64.StdEncoding.AppendDecode(w.scratch, b64)
			if err != nil {
				w.badNote = fmt.Errorf("process/output chunk: %w", err)
				return nil
			}
			for _, b := range w.scratch {
				if b != 0 {
					w.nonZero = true
					break
				}
			}
			w.bytes += int64(len(w.scratch))
		} else {
			n, err := base64Len(b64)
			if err != nil {
				w.badNote = fmt.Errorf("process/output chunk: %w", err)
				return nil
			}
			w.bytes += int64(n)
		}
		w.chunks++
	case "process/exited":
		w.exited = true
		n, err := strconv.Atoi(string(code))
		if err != nil {
			w.badNote = fmt.Errorf("process/exited exitCode %.20q", code)
		}
		w.exitCode = n
	case "process/closed":
		w.gotClose = true
	}
	if w.complete() {
		w.closedAt = at
		w.finished = true
		close(w.closed)
	}
	return nil
}
