package main

// A JSON-RPC client of exec-server over gorilla/websocket: independent of the server's own
// websocket code, able to pipeline requests, to stop reading (the reply flood), and to drop
// its TCP connection without a close frame (the resume cycles).
//
// One reader goroutine per connection hands each response to the request waiting for it and
// each notification to the check's handler, and ends with the connection.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// Client timings and sizes.
const (
	dialTimeout = 10 * time.Second
	// closeEchoWait bounds the wait for the server's answer to our close frame.
	closeEchoWait = 2 * time.Second
	wsBufferSize  = 64 << 10
)

// noteHandler receives the notifications of a connection, on its reader goroutine; params is
// the handler's to keep.
type noteHandler func(method string, params []byte)

// reply is one response.
type reply struct {
	result []byte
	err    *rpcError
}

// client is one websocket connection to the server.
type client struct {
	ws     *websocket.Conn
	onNote noteHandler
	nextID atomic.Int64
	wmu    sync.Mutex // one writer at a time

	mu    sync.Mutex
	calls map[int64]chan reply
	held  chan struct{} // non-nil while reading is held; closed to let it go on

	strays   atomic.Int64  // responses to no request of ours (id -1: the server could not parse one)
	dead     chan struct{} // closed when the reader ends
	deathErr error         // why; read after dead is closed
}

// dial connects to url; onNote (nil: ignore them) gets the notifications. It does not
// initialize.
func dial(ctx context.Context, url string, onNote noteHandler) (*client, error) {
	d := websocket.Dialer{ReadBufferSize: wsBufferSize, WriteBufferSize: wsBufferSize, HandshakeTimeout: dialTimeout}
	ws, _, err := d.DialContext(ctx, url, nil)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	if onNote == nil {
		onNote = func(string, []byte) {}
	}
	c := &client{ws: ws, onNote: onNote, calls: map[int64]chan reply{}, dead: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

// connect dials url and initializes a new session (resume == "") or resumes one; it returns
// the session id. A resume the server answers with "already attached" is retried until ctx
// ends: the server has not yet noticed that the previous connection is gone, and there is no
// event to await from here but its answer.
func connect(ctx context.Context, url string, onNote noteHandler, resume string) (*client, string, error) {
	params := map[string]any{"clientName": "exec-server-soak"}
	if resume != "" {
		params["resumeSessionId"] = resume
	}
	for retry := time.Millisecond; ; retry = min(2*retry, 50*time.Millisecond) {
		c, err := dial(ctx, url, onNote)
		if err != nil {
			return nil, "", err
		}
		res, err := c.call(ctx, "initialize", params)
		var re *rpcError
		if errors.As(err, &re) && re.Code == codeSessionAttached {
			c.close()
			t := time.NewTimer(retry)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return nil, "", fmt.Errorf("resume %s: %w", resume, ctx.Err())
			}
		}
		if err != nil {
			c.close()
			return nil, "", fmt.Errorf("initialize: %w", err)
		}
		var ir struct {
			SessionID string `json:"sessionId"`
		}
		if err := json.Unmarshal(res, &ir); err != nil || ir.SessionID == "" {
			c.close()
			return nil, "", fmt.Errorf("initialize answered %.200s", res)
		}
		if err := c.notify("initialized", map[string]any{}); err != nil {
			c.close()
			return nil, "", err
		}
		return c, ir.SessionID, nil
	}
}

// readLoop reads until the connection ends.
func (c *client) readLoop() {
	defer close(c.dead)
	for {
		c.mu.Lock()
		held := c.held
		c.mu.Unlock()
		if held != nil {
			<-held
		}
		_, msg, err := c.ws.ReadMessage()
		if err != nil {
			c.deathErr = err
			return
		}
		env, err := parseEnvelope(msg)
		if err != nil {
			c.deathErr = fmt.Errorf("unparsable message from the server: %w", err)
			c.ws.Close()
			return
		}
		if !env.reply {
			c.onNote(env.method, env.params)
			continue
		}
		c.mu.Lock()
		ch := c.calls[env.id]
		delete(c.calls, env.id)
		c.mu.Unlock()
		if ch == nil {
			c.strays.Add(1)
			continue
		}
		ch <- reply{result: env.result, err: env.err}
	}
}

// holdReads stops reading after the message being read, until release is called: the
// client's socket then backs up, as a stalled harness's would.
func (c *client) holdReads() (release func()) {
	ch := make(chan struct{})
	c.mu.Lock()
	c.held = ch
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.held = nil
			c.mu.Unlock()
			close(ch)
		})
	}
}

// send writes a request and returns the channel its response will come on, without waiting.
func (c *client) send(method string, params any) (<-chan reply, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	id := c.nextID.Add(1)
	ch := make(chan reply, 1)
	c.mu.Lock()
	c.calls[id] = ch
	c.mu.Unlock()
	msg := make([]byte, 0, 48+len(method)+len(p))
	msg = append(msg, `{"id":`...)
	msg = strconv.AppendInt(msg, id, 10)
	msg = append(msg, `,"method":"`...)
	msg = append(msg, method...)
	msg = append(msg, `","params":`...)
	msg = append(msg, p...)
	msg = append(msg, '}')
	if err := c.write(msg); err != nil {
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
		return nil, err
	}
	return ch, nil
}

// wait waits for a response sent for by send.
func (c *client) wait(ctx context.Context, ch <-chan reply) ([]byte, error) {
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		return r.result, nil
	case <-c.dead:
		return nil, fmt.Errorf("connection lost: %v", c.deathErr)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// call sends a request and waits for its result.
func (c *client) call(ctx context.Context, method string, params any) ([]byte, error) {
	ch, err := c.send(method, params)
	if err != nil {
		return nil, err
	}
	res, err := c.wait(ctx, ch)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	return res, nil
}

// notify sends a notification.
func (c *client) notify(method string, params any) error {
	b, err := json.Marshal(map[string]any{"method": method, "params": params})
	if err != nil {
		return err
	}
	return c.write(b)
}

func (c *client) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

// close ends the connection cleanly: our close frame, the server's answer (for at most
// closeEchoWait), then TCP.
func (c *client) close() {
	c.wmu.Lock()
	err := c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(closeEchoWait))
	c.wmu.Unlock()
	if err == nil {
		t := time.NewTimer(closeEchoWait)
		select {
		case <-c.dead:
		case <-t.C:
		}
		t.Stop()
	}
	c.ws.Close()
	<-c.dead
}

// drop ends the connection abruptly, without a close frame: a FIN, or with rst a TCP reset
// (SO_LINGER 0), as a harness that crashed or lost its network would.
func (c *client) drop(rst bool) {
	if tc, ok := c.ws.UnderlyingConn().(*net.TCPConn); ok && rst {
		tc.SetLinger(0)
	}
	c.ws.UnderlyingConn().Close()
	<-c.dead
}
