package main

// Websocket (RFC 6455), written by hand in both roles: the server side for local clients
// (docs/protocol.md §2.1, §2.2) and the client side for the rendezvous relay and tests.
//
// Frame layout (RFC 6455 §5.2):
//
//	byte 0    FIN(1) RSV1 RSV2 RSV3(3) opcode(4)      RSV bits must be 0 (no extensions)
//	byte 1    MASK(1) len7(7)                         client→server frames are masked, server→client are not
//	          len7 ≤ 125: payload length
//	          len7 = 126: 2-byte big-endian length follows
//	          len7 = 127: 8-byte big-endian length follows, high bit 0
//	4 bytes   masking key, if MASK
//	payload   XOR-ed with the key, if MASK
//
//	opcode  0x0 continuation  0x1 text  0x2 binary  0x8 close  0x9 ping  0xA pong
//	control frames: FIN set, payload ≤ 125 bytes, may arrive between the fragments of a message
//	close payload: 2-byte big-endian code, then a UTF-8 reason
//
// Errors close the connection with a close frame, coded as docs/protocol.md §2.2 lists: 1002,
// 1007 for invalid UTF-8 in a text message (checked fragment by fragment, so it fails on the
// first bad one), 1009.
//
// Close handshake (RFC 6455 §7):
//
//	peer's close     → our close with its code (empty for empty), then TCP closed at once
//	our close        → TCP kept until the peer's close arrives, at most closeWait (1 s);
//	                   what comes meanwhile is read and dropped (a refused frame's payload is
//	                   stepped over), so that no unread byte turns our close into a TCP reset
//	after our close  → no pongs, no data messages handed up

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

// Opcodes.
const (
	wsOpContinuation = 0x0
	wsOpText         = 0x1
	wsOpBinary       = 0x2
	wsOpClose        = 0x8
	wsOpPing         = 0x9
	wsOpPong         = 0xA
)

// Close codes we send or check (RFC 6455 §7.4.1).
const (
	wsCloseNormal        = 1000
	wsCloseGoingAway     = 1001
	wsCloseProtocolError = 1002
	wsCloseNoStatus      = 1005 // never sent: it stands for an empty close payload
	wsCloseInvalidUTF8   = 1007
	wsClosePolicy        = 1008
	wsCloseTooBig        = 1009
	wsCloseInternal      = 1011
)

// Limits, as the reference's (docs/protocol.md §2.1, §2.2).
const (
	wsMaxFrame       = 16 << 20 // one frame's payload
	wsMaxMessage     = 64 << 20 // one reassembled message
	wsMaxControl     = 125      // a control frame's payload
	wsPingInterval   = 30 * time.Second
	wsCloseWait      = time.Second // how long we wait for the peer's close echo
	wsHandshakeLimit = 10 * time.Second
	wsMaxHeaderBytes = 16 << 10
	// wsIdleLimit is how long a kept-alive HTTP connection (one that asked for /readyz, say)
	// may sit idle between requests before the server closes it.
	wsIdleLimit = 5 * time.Second
	// wsMaxPending bounds the connections that have not upgraded to a websocket (yet): past
	// it, a new one is closed at once, so idle or slow sockets cannot hold every descriptor.
	wsMaxPending      = 256
	wsWriteBufferSize = 64 << 10
	wsReadStep        = 256 << 10       // the reassembly buffer grows by received bytes, at least this much at a time
	wsKeepBuffer      = 1 << 20         // a reassembly buffer larger than this is dropped after its message
	wsSpareLinger     = 2 * time.Second // how long a large released buffer waits for the next large message
)

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// wsOptions tune one connection. Zero values mean the server defaults.
type wsOptions struct {
	maxFrame     int
	maxMessage   int
	pingInterval time.Duration // 0: no pings
	pongTimeout  time.Duration // 0: a peer that never answers pings is kept
	writeTimeout time.Duration // bounds one write; 0: the pong timeout does, if set
	closeWait    time.Duration // how long our close waits for the echo; 0: wsCloseWait
	// proxy picks an HTTP proxy for a client dial, as http.Transport.Proxy does (remote mode
	// passes remoteProxy, whose proxyRuleError is shown as it is; other errors are not, since
	// they may quote a password); nil dials directly. The tunnel
	// is HTTP CONNECT.
	proxy func(*http.Request) (*url.URL, error)
	// control, if set, vets each address a client dial connects to (the rendezvous refuses
	// link-local and metadata addresses: relay_executor.go).
	control func(network, address string, c syscall.RawConn) error
}

// wsCloseError is a failed connection: the close code we sent and why.
type wsCloseError struct {
	code   int
	reason string
}

func (e *wsCloseError) Error() string {
	return fmt.Sprintf("websocket closed %d: %s", e.code, e.reason)
}

// wsConn is one websocket connection. One goroutine reads; writes are serialised inside.
type wsConn struct {
	nc     net.Conn
	br     *bufio.Reader
	client bool // we are the client: we mask, and the peer must not
	opts   wsOptions

	// Reader state. rmu is held by whoever reads: the caller of readFrameMessage, or the
	// linger that follows our close frame when no reader is left.
	rmu  sync.Mutex
	msg  []byte // reassembly buffer, reused between messages
	hdr  [14]byte
	ctrl [wsMaxControl]byte // a control frame's payload
	skip int                // payload bytes of a refused frame, still unread
	// loan says whether msg is back from the message it was lent to (next).
	loan bufLoan
	// spare is a large reassembly buffer whose message has been released; the next large
	// message is read into it for wsSpareLinger.
	spare atomic.Pointer[[]byte]

	wmu  sync.Mutex // guards bw, whdr, wkey and frame writes
	bw   *bufio.Writer
	whdr [14]byte
	wkey [4]byte

	closeSent  atomic.Bool
	closeTimer atomic.Pointer[time.Timer] // ends TCP if the peer never echoes our close
	tcpOnce    sync.Once
	done       chan struct{} // closed with the TCP connection
	lastPong   atomic.Int64  // unix nanoseconds

	pongMu   sync.Mutex
	pongWait chan struct{} // closed at the next pong; nil while nobody waits (answersPing)
}

func newWSConn(nc net.Conn, br *bufio.Reader, client bool, opts wsOptions) *wsConn {
	if opts.maxFrame == 0 {
		opts.maxFrame = wsMaxFrame
	}
	if opts.maxMessage == 0 {
		opts.maxMessage = wsMaxMessage
	}
	if opts.closeWait == 0 {
		opts.closeWait = wsCloseWait
	}
	c := &wsConn{nc: nc, br: br, client: client, opts: opts, bw: bufio.NewWriterSize(nc, wsWriteBufferSize), done: make(chan struct{})}
	c.lastPong.Store(time.Now().UnixNano())
	if opts.pingInterval > 0 {
		go c.pingLoop()
	}
	return c
}

// pingLoop pings the peer until the connection ends, and drops a peer that stopped answering
// when a pong timeout is set.
func (c *wsConn) pingLoop() {
	t := time.NewTicker(c.opts.pingInterval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case now := <-t.C:
			if c.opts.pongTimeout > 0 && now.Sub(time.Unix(0, c.lastPong.Load())) > c.opts.pongTimeout {
				c.closeTCP()
				return
			}
			if err := c.writeFrame(wsOpPing, nil); err != nil {
				if !c.closeSent.Load() { // else the close handshake owns the end
					c.closeTCP()
				}
				return
			}
		}
	}
}

// answersPing pings the peer and reports whether a pong comes within d. The connection's
// reader must be reading: it is the one that sees the pong. Any pong counts, one that was on
// its way already too: it also says that the peer is there.
func (c *wsConn) answersPing(d time.Duration) bool {
	c.pongMu.Lock()
	if c.pongWait == nil {
		c.pongWait = make(chan struct{})
	}
	pong := c.pongWait
	c.pongMu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	// The ping waits for the frame another goroutine may be writing, up to the write
	// deadline: it is written apart so that d alone bounds the answer. The goroutine ends
	// with the write, at the latest at that deadline.
	wrote := make(chan error, 1)
	go func() { wrote <- c.writeFrame(wsOpPing, nil) }()
	for {
		select {
		case <-pong:
			return true
		case err := <-wrote:
			if err != nil {
				return false
			}
			wrote = nil
		case <-t.C:
			return false
		case <-c.done:
			return false
		}
	}
}

func (c *wsConn) closeTCP() {
	c.tcpOnce.Do(func() {
		if t := c.closeTimer.Load(); t != nil {
			t.Stop()
		}
		close(c.done)
		c.nc.Close()
	})
}

// next implements msgTransport: the next text or binary message, lent the reassembly
// buffer. A buffer still lent when the next message comes stays with its holder, and the
// next message is read into a new one.
func (c *wsConn) next() (message, error) {
	tag, reuse := c.loan.lend()
	if !reuse {
		c.msg = nil
	}
	op, b, err := c.readFrameMessage()
	if err != nil {
		return message{}, err
	}
	return message{data: b, utf8: op == wsOpText, lender: c, tag: tag}, nil
}

// releaseMessage implements msgLender. A released buffer of over wsKeepBuffer becomes the
// spare for wsSpareLinger: back-to-back large messages (fs/writeFile of 32 MiB) are then read
// into one buffer instead of growing a new one each time, and an idle connection does not
// hold one for long.
func (c *wsConn) releaseMessage(m message) {
	if cap(m.data) > wsKeepBuffer {
		b := m.data // declared here, so that only a large buffer's pointer goes to the heap
		p := &b
		c.spare.Store(p)
		time.AfterFunc(wsSpareLinger, func() { c.spare.CompareAndSwap(p, nil) })
	}
	c.loan.giveBack(m.tag)
}

// bufLoan is a transport's record of the read buffer it lent to its last message (wsConn,
// stdioTransport): the buffer may be read into again once that message is released, and must
// be left to its holder before.
type bufLoan struct {
	lent     uint64        // the last message's tag; the reader's alone
	returned atomic.Uint64 // the tag of the last message released
}

// lend tags the next message and reports whether the last one's buffer is back.
func (l *bufLoan) lend() (tag uint64, reuse bool) {
	reuse = l.returned.Load() == l.lent
	l.lent++
	return l.lent, reuse
}

// giveBack records that message tag is released.
func (l *bufLoan) giveBack(tag uint64) { l.returned.Store(tag) }

// readMessage returns the next text or binary message, valid until the next call: the
// client side's read (the relay, tests).
func (c *wsConn) readMessage() ([]byte, error) {
	m, err := c.next()
	m.release()
	return m.data, err
}

// peer implements msgTransport.
func (c *wsConn) peer() string { return c.nc.RemoteAddr().String() }

// readFrameMessage returns the next whole data message and its opcode, answering pings and
// the close handshake on the way. data is valid until the next call. Once our close frame is
// out, data messages are dropped until the peer's close arrives.
func (c *wsConn) readFrameMessage() (op byte, data []byte, err error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		op, data, err = c.nextMessage()
		if err != nil || !c.closeSent.Load() {
			break
		}
	}
	if err != nil {
		var ce *wsCloseError
		if errors.As(err, &ce) {
			c.failWith(ce)
		} else {
			c.closeTCP()
		}
	}
	return op, data, err
}

// failWith sends our close frame for a protocol failure, then lingers.
func (c *wsConn) failWith(ce *wsCloseError) {
	c.sendClose(ce.code, ce.reason)
	c.linger()
}

// linger reads and discards what the peer still sends after our close frame, until its close
// frame (the echo) or its end of TCP, for at most closeWait, and then closes TCP. Closing at
// once with unread bytes would make the kernel reset the connection, and the reset can destroy
// our close frame before the peer reads it. The caller holds rmu.
func (c *wsConn) linger() {
	defer c.closeTCP()
	c.nc.SetReadDeadline(time.Now().Add(c.opts.closeWait))
	for {
		if _, err := c.br.Discard(c.skip); err != nil {
			return
		}
		c.skip = 0
		h, err := c.readHeader(math.MaxInt)
		var ce *wsCloseError
		switch {
		case errors.As(err, &ce):
			continue // refused, and its payload is in skip
		case err != nil, h.op == wsOpClose:
			return
		}
		c.skip = h.n
	}
}

// lingerAfterClose runs linger once no reader is left: a reader that is still running sees
// the echo itself, and this then finds TCP closed.
func (c *wsConn) lingerAfterClose() {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	select {
	case <-c.done:
	default:
		c.linger()
	}
}

// wsHeader is one frame's header, as read.
type wsHeader struct {
	fin    bool
	op     byte
	masked bool
	key    [4]byte
	n      int
}

// readHeader reads one whole frame header and checks it. A data frame longer than limit is
// refused before any of its payload is read. A refused frame's payload length is left in
// skip, so linger can step over it and find the peer's close frame after it.
func (c *wsConn) readHeader(limit int) (h wsHeader, err error) {
	b := c.hdr[:2]
	if _, err := io.ReadFull(c.br, b); err != nil {
		return h, err
	}
	h.fin = b[0]&0x80 != 0
	h.op = b[0] & 0x0f
	h.masked = b[1]&0x80 != 0
	n := uint64(b[1] & 0x7f)
	switch n {
	case 126:
		if _, err := io.ReadFull(c.br, c.hdr[2:4]); err != nil {
			return h, err
		}
		n = uint64(binary.BigEndian.Uint16(c.hdr[2:4]))
	case 127:
		if _, err := io.ReadFull(c.br, c.hdr[2:10]); err != nil {
			return h, err
		}
		n = binary.BigEndian.Uint64(c.hdr[2:10])
	}
	if h.masked {
		if _, err := io.ReadFull(c.br, c.hdr[10:14]); err != nil {
			return h, err
		}
		h.key = [4]byte(c.hdr[10:14])
	}
	h.n = int(min(n, math.MaxInt))
	var code int
	var reason string
	switch {
	case b[0]&0x70 != 0:
		code, reason = wsCloseProtocolError, "reserved bits set"
	case h.op > wsOpBinary && h.op < wsOpClose, h.op > wsOpPong:
		code, reason = wsCloseProtocolError, fmt.Sprintf("unknown opcode %d", h.op)
	case h.op >= wsOpClose && (!h.fin || n > wsMaxControl):
		code, reason = wsCloseProtocolError, "fragmented or oversized control frame"
	case h.masked == c.client:
		code, reason = wsCloseProtocolError, "wrong masking for this side"
	case n>>63 != 0:
		code, reason = wsCloseProtocolError, "frame length has its high bit set"
	case h.op < wsOpClose && n > uint64(limit):
		code, reason = wsCloseTooBig, "frame or message too big"
	default:
		return h, nil
	}
	c.skip = h.n
	return h, &wsCloseError{code, reason}
}

// nextMessage reads frames until a data message is complete.
func (c *wsConn) nextMessage() (byte, []byte, error) {
	if cap(c.msg) > wsKeepBuffer {
		c.msg = nil
	}
	c.msg = c.msg[:0]
	var msgOp byte
	validated := 0 // bytes of c.msg known to be valid UTF-8
	for {
		h, err := c.readHeader(min(c.opts.maxFrame, c.opts.maxMessage-len(c.msg)))
		if err != nil {
			return 0, nil, err
		}
		if h.op >= wsOpClose {
			payload := c.ctrl[:h.n]
			if _, err := io.ReadFull(c.br, payload); err != nil {
				return 0, nil, err
			}
			if h.masked {
				maskBytes(h.key, payload)
			}
			switch h.op {
			case wsOpPing:
				if c.closeSent.Load() {
					continue // no pongs after our close (RFC 6455 §5.5.1)
				}
				if err := c.writeFrame(wsOpPong, payload); err != nil {
					return 0, nil, err
				}
			case wsOpPong:
				c.lastPong.Store(time.Now().UnixNano())
				c.pongMu.Lock()
				if c.pongWait != nil {
					close(c.pongWait)
					c.pongWait = nil
				}
				c.pongMu.Unlock()
			case wsOpClose:
				return 0, nil, c.peerClosed(payload)
			}
			continue
		}
		if err := c.readPayload(h); err != nil {
			return 0, nil, err
		}
		// The frame is read whole, so a failure below leaves the stream in sync.
		switch {
		case h.op == wsOpContinuation && msgOp == 0:
			return 0, nil, &wsCloseError{wsCloseProtocolError, "continuation frame without a message"}
		case h.op != wsOpContinuation && msgOp != 0:
			return 0, nil, &wsCloseError{wsCloseProtocolError, "new message inside a fragmented message"}
		case h.op != wsOpContinuation:
			msgOp = h.op
		}
		if msgOp == wsOpText {
			// Incremental validation: each fragment is checked as it arrives (fail fast), and
			// a code point split across fragments is completed by the next one.
			n, ok := validUTF8Prefix(c.msg[validated:])
			validated += n
			if !ok || (h.fin && validated != len(c.msg)) {
				return 0, nil, &wsCloseError{wsCloseInvalidUTF8, "invalid UTF-8 in a text message"}
			}
		}
		if h.fin {
			return msgOp, c.msg, nil
		}
	}
}

// readPayload appends a data frame's payload to the reassembly buffer, unmasked. The buffer
// grows with the bytes that actually arrive, never by the declared length alone, so a header
// that promises 16 MiB costs nothing until the bytes come.
func (c *wsConn) readPayload(h wsHeader) error {
	start := len(c.msg)
	for remaining := h.n; remaining > 0; {
		step := min(remaining, max(cap(c.msg)-len(c.msg), wsReadStep))
		if cap(c.msg)-len(c.msg) < step && len(c.msg)+step > wsKeepBuffer {
			// A large message: read it into the spare, if one is there and larger.
			if sp := c.spare.Swap(nil); sp != nil && cap(*sp) > cap(c.msg) {
				c.msg = append((*sp)[:0], c.msg...)
			} else if sp != nil {
				c.spare.CompareAndSwap(nil, sp)
			}
		}
		c.msg = growBytes(c.msg, step, c.opts.maxMessage)
		end := len(c.msg) + step
		if _, err := io.ReadFull(c.br, c.msg[len(c.msg):end]); err != nil {
			return err
		}
		c.msg = c.msg[:end]
		remaining -= step
	}
	if h.masked && h.key != [4]byte{} { // a zero key masks nothing
		maskBytes(h.key, c.msg[start:])
	}
	return nil
}

// peerClosed answers the peer's close frame with our own (the same code, or an empty payload
// for an empty one) and ends TCP. When we sent ours first, this was its echo.
func (c *wsConn) peerClosed(payload []byte) error {
	code := wsCloseNoStatus
	switch {
	case len(payload) == 1:
		return &wsCloseError{wsCloseProtocolError, "close payload of one byte"}
	case len(payload) >= 2:
		code = int(binary.BigEndian.Uint16(payload))
		if !validCloseCode(code) {
			return &wsCloseError{wsCloseProtocolError, fmt.Sprintf("invalid close code %d", code)}
		}
		if !utf8.Valid(payload[2:]) {
			return &wsCloseError{wsCloseInvalidUTF8, "invalid UTF-8 in a close reason"}
		}
	}
	if code == wsCloseNoStatus {
		c.sendClose(0, "")
	} else {
		c.sendClose(code, "")
	}
	c.closeTCP()
	return io.EOF
}

// validCloseCode reports whether a peer may send code (RFC 6455 §7.4).
func validCloseCode(code int) bool {
	switch {
	case code >= 1000 && code <= 1003, code >= 1007 && code <= 1014:
		return true
	case code >= 3000 && code <= 4999:
		return true
	}
	return false
}

// growBytes makes room for n more bytes after len(b), at least doubling the capacity but
// not past limit unless n itself needs more.
func growBytes(b []byte, n, limit int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), max(min(2*cap(b), limit), len(b)+n))
	copy(nb, b)
	return nb
}

// maskBytes XORs b with the masking key, eight bytes at a time where it can.
func maskBytes(key [4]byte, b []byte) {
	k32 := binary.LittleEndian.Uint32(key[:])
	k64 := uint64(k32) | uint64(k32)<<32
	i := 0
	for ; i+32 <= len(b); i += 32 {
		p := b[i : i+32 : i+32]
		binary.LittleEndian.PutUint64(p[0:], binary.LittleEndian.Uint64(p[0:])^k64)
		binary.LittleEndian.PutUint64(p[8:], binary.LittleEndian.Uint64(p[8:])^k64)
		binary.LittleEndian.PutUint64(p[16:], binary.LittleEndian.Uint64(p[16:])^k64)
		binary.LittleEndian.PutUint64(p[24:], binary.LittleEndian.Uint64(p[24:])^k64)
	}
	for ; i+8 <= len(b); i += 8 {
		v := binary.LittleEndian.Uint64(b[i:])
		binary.LittleEndian.PutUint64(b[i:], v^k64)
	}
	for ; i < len(b); i++ {
		b[i] ^= key[i&3]
	}
}

// validUTF8Prefix checks a text message received so far. It returns n and true when b[:n]
// is valid UTF-8 and b[n:] is the start of a code point that more bytes may complete (a
// fragment may end inside one), and false as soon as b can never become valid (fail fast,
// Autobahn 6.4).
func validUTF8Prefix(b []byte) (n int, ok bool) {
	if utf8.Valid(b) {
		return len(b), true
	}
	// Find the start of the last code point: at most utf8.UTFMax-1 continuation bytes back.
	for k := len(b) - 1; k >= 0 && k >= len(b)-utf8.UTFMax; k-- {
		if b[k]&0xc0 != 0x80 {
			// FullRune checks the lead byte and every continuation byte present.
			if !utf8.FullRune(b[k:]) && utf8.Valid(b[:k]) {
				return k, true
			}
			break
		}
	}
	return 0, false
}

// writeMessage sends a text message (msgTransport). The server always sends text.
func (c *wsConn) writeMessage(b []byte) error { return c.writeFrame(wsOpText, b) }

// bufferMessage implements msgBuffer: a text message written into the write buffer and left
// there for the next flush (the next writeMessage, a ping, or our close). A full buffer still
// goes out as it fills.
func (c *wsConn) bufferMessage(b []byte) error { return c.writeFrameFlush(wsOpText, b, false) }

// writeMessageOp sends one whole message with the given opcode.
func (c *wsConn) writeMessageOp(op byte, b []byte) error { return c.writeFrame(op, b) }

// writeFrame writes one final frame. A client masks through the write buffer and never
// touches the caller's bytes.
func (c *wsConn) writeFrame(op byte, payload []byte) error {
	return c.writeFrameFlush(op, payload, true)
}

// writeFrameFlush is writeFrame, with the flush left to a later write when flush is false.
func (c *wsConn) writeFrameFlush(op byte, payload []byte, flush bool) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if op != wsOpClose && c.closeSent.Load() {
		return net.ErrClosed
	}
	if wt := cmp.Or(c.opts.writeTimeout, c.opts.pongTimeout); wt > 0 && op != wsOpClose {
		// A peer that takes no bytes for a pong timeout is as dead as one that answers no
		// pings; without a deadline a stuck write would hold wmu, and pingLoop behind it.
		c.nc.SetWriteDeadline(time.Now().Add(wt))
	}
	// A message larger than a frame may be goes out in fragments: peers such as tungstenite
	// (the Codex client) refuse any single frame over 16 MiB.
	for len(payload) > wsMaxFrame {
		if err := c.writeOneFrame(op, false, payload[:wsMaxFrame]); err != nil {
			return err
		}
		op, payload = wsOpContinuation, payload[wsMaxFrame:]
	}
	if err := c.writeOneFrame(op, true, payload); err != nil {
		return err
	}
	if !flush {
		return nil
	}
	return c.bw.Flush()
}

// writeOneFrame buffers one frame; c.wmu is held.
func (c *wsConn) writeOneFrame(op byte, fin bool, payload []byte) error {
	h := c.appendHeader(c.whdr[:0], op, fin, len(payload))
	if !c.client {
		if _, err := c.bw.Write(h); err != nil {
			return err
		}
		_, err := c.bw.Write(payload)
		return err
	}
	rand.Read(c.wkey[:])
	key := c.wkey
	h = append(h, key[:]...)
	if _, err := c.bw.Write(h); err != nil {
		return err
	}
	for len(payload) > 0 {
		if c.bw.Available() == 0 {
			if err := c.bw.Flush(); err != nil {
				return err
			}
		}
		buf := c.bw.AvailableBuffer()[:min(c.bw.Available(), len(payload))]
		copy(buf, payload)
		maskBytes(key, buf)
		c.bw.Write(buf)
		payload = payload[len(buf):]
		key = bits32Rotate(key, len(buf))
	}
	return nil
}

// bits32Rotate advances a masking key by n bytes, so masking can continue mid-payload.
func bits32Rotate(key [4]byte, n int) [4]byte {
	k := bits.RotateLeft32(binary.BigEndian.Uint32(key[:]), (n&3)*8)
	var out [4]byte
	binary.BigEndian.PutUint32(out[:], k)
	return out
}

func (c *wsConn) appendHeader(h []byte, op byte, fin bool, n int) []byte {
	maskBit := byte(0)
	if c.client {
		maskBit = 0x80
	}
	if fin {
		op |= 0x80
	}
	h = append(h, op)
	switch {
	case n <= 125:
		h = append(h, maskBit|byte(n))
	case n <= 0xffff:
		h = append(h, maskBit|126)
		h = binary.BigEndian.AppendUint16(h, uint16(n))
	default:
		h = append(h, maskBit|127)
		h = binary.BigEndian.AppendUint64(h, uint64(n))
	}
	return h
}

// sendClose sends our close frame once (code 0: an empty payload) and makes sure TCP is
// closed within closeWait even if the peer never echoes it or stops reading. It reports
// whether this call sent it.
func (c *wsConn) sendClose(code int, reason string) bool {
	if c.closeSent.Swap(true) {
		return false
	}
	c.closeTimer.Store(time.AfterFunc(c.opts.closeWait, c.closeTCP))
	select {
	case <-c.done: // closeTCP ran first and could not see the timer
		c.closeTimer.Load().Stop()
		return false
	default:
	}
	c.nc.SetWriteDeadline(time.Now().Add(c.opts.closeWait))
	var p []byte
	if code != 0 {
		p = binary.BigEndian.AppendUint16(make([]byte, 0, wsMaxControl), uint16(code))
		reason = reason[:min(len(reason), wsMaxControl-2)]
		for !utf8.ValidString(reason) { // cut at a code point
			reason = reason[:len(reason)-1]
		}
		p = append(p, reason...)
	}
	c.writeFrame(wsOpClose, p)
	return true
}

// closeWith starts the closing handshake with code and text: our close frame, then the
// peer's echo is awaited by the reader if one is running, else by a linger of our own; TCP is
// closed on the echo, or after closeWait in any case.
func (c *wsConn) closeWith(code int, text string) {
	select {
	case <-c.done:
		return
	default:
	}
	if c.sendClose(code, text) {
		go c.lingerAfterClose()
	}
}

// close implements msgTransport, for both sides: it closes with the code and text that word
// reason (wsCloseOf).
func (c *wsConn) close(reason error) {
	c.closeWith(wsCloseOf(reason))
}

// wsCloseOf words reason, why a connection ends, as a close frame does (RFC 6455 §7.4.1, the
// codes of docs/protocol.md §2.2): nil is a normal end, a broken lifecycle or a slow client a
// policy violation, the server's shutdown going away, a wsCloseError its own code and text,
// anything else an internal error without text.
func wsCloseOf(reason error) (code int, text string) {
	var ce *wsCloseError
	switch {
	case reason == nil:
		return wsCloseNormal, ""
	case errors.Is(reason, errClientProtocol):
		return wsClosePolicy, "protocol violation"
	case errors.Is(reason, errSlowClient):
		return wsClosePolicy, "client too slow"
	case errors.As(reason, &ce):
		return ce.code, ce.reason
	case errors.Is(reason, context.Canceled):
		return wsCloseGoingAway, "server shutting down"
	}
	return wsCloseInternal, ""
}
