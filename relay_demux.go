package main

// Remote mode, one physical socket: the stream demultiplexer and the streams it serves
// (docs/remote.md §3, §6, §7).
//
// This file is split from relay.go (the wire format) and relay_executor.go (register, dial,
// reconnect) because it holds the one concurrent part of remote mode, and its rules read best
// together:
//
//	one reader      the socket's reader decodes each frame and acts on it; it never waits on a
//	                stream, so one stuck stream cannot stall the others or the pongs behind them
//	stream table    stream_id -> stream; ≤ relayMaxActiveStreams, handshaking ones included
//	handshake       a goroutine per stream: Noise msg1, registry /validate (≤ 32 pending), msg2,
//	                then srv.serveConn over the stream, exactly as for a local websocket (or,
//	                with `exec-server forward`, a bridge to the target's websocket: remote_forward.go)
//	stream queue    decoded messages wait in the stream's own queue (relayInbox), bounded in
//	                bytes; a stream past the bound is reset, the others carry on
//	failures        relayMaxFailedHandshakes failed handshakes (a msg1 that is not sound Noise, or a
//	                harness the registry does not accept), one forgotten per relayFailureDecay,
//	                pause handshakes on the socket (~10 s)
//	validate rate   ≤ relayValidatePerSecond registry /validate calls per socket (burst
//	                relayValidateBurst); a handshake past it waits its turn
//	logs            what the relay makes happen is logged through a logThrottle (logthrottle.go)
//	teardown        once per stream, from any goroutine: out of the table, reader and dispatcher
//	                unblocked, a Reset to the harness unless the harness asked or the socket is gone
//	frame order     per stream, writeMu orders Data frames; nothing follows the stream's Reset

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Stream queue limits.
const (
	// relayStreamInboxBytes bounds the decoded messages one stream may leave waiting for its
	// dispatcher: one largest message's worth. A stream past it is reset.
	relayStreamInboxBytes = noiseMaxRPCMessage
	// relayInboxMessageCost is what a queued message costs beyond its bytes, so that a flood
	// of tiny messages is bounded too.
	relayInboxMessageCost = 64
)

var (
	errRelayNotJSON      = errors.New("relay record is not JSON")
	errRelayStreamBehind = errors.New("relay stream left more than its queue limit waiting for its dispatcher")
)

// relaySocket serves one physical rendezvous websocket: it demultiplexes frames by stream_id
// and starts a goroutine per stream, counted in relayExecutor.streams.
type relaySocket struct {
	x      *relayExecutor
	reg    *registration
	ws     *wsConn
	ctx    context.Context // ends with the socket
	cancel context.CancelFunc
	log    *logger
	// quiet writes the lines whose rate the relay decides (a malformed frame, a refused
	// handshake), at most a few per message and interval.
	quiet *logThrottle

	mu          sync.Mutex
	streams     map[string]*relayStream
	pending     int // handshakes between msg1 and the registry's answer
	failures    failureBudget
	validates   validateBucket
	pausedUntil time.Time
	instances   uint64
}

func newRelaySocket(ctx context.Context, x *relayExecutor, reg *registration, ws *wsConn) *relaySocket {
	ctx, cancel := context.WithCancel(ctx)
	return &relaySocket{x: x, reg: reg, ws: ws, ctx: ctx, cancel: cancel, log: x.log, quiet: newLogThrottle(x.log),
		streams: map[string]*relayStream{}, validates: validateBucket{tokens: relayValidateBurst, at: time.Now()}}
}

// serve reads frames until the socket ends, then tears every stream down. It does not wait
// for the stream goroutines: they end on their own once torn down (see relayExecutor.streams).
func (s *relaySocket) serve() error {
	// The reader below blocks in the socket: ending the context closes the socket under it.
	watchDone, stopWatch := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case <-s.ctx.Done():
			s.ws.close(context.Canceled)
		case <-stopWatch:
		}
	}()
	defer func() {
		close(stopWatch)
		<-watchDone
		s.cancel()
		s.ws.close(nil)
		for _, st := range s.snapshot() {
			st.teardown(errors.New("rendezvous connection ended"), false)
		}
		s.quiet.flush()
	}()
	for {
		op, data, err := s.ws.readFrameMessage()
		if err != nil {
			return err
		}
		if op != wsOpBinary {
			s.quiet.Warn("dropping a non-binary rendezvous message", "bytes", len(data))
			continue
		}
		f, err := decodeRelayFrame(data)
		if err == nil {
			err = checkRelayFrame(&f)
		}
		if err != nil {
			s.quiet.Warn("dropping a relay frame", "error", err.Error())
			continue
		}
		s.handle(&f)
	}
}

// snapshot lists the streams in the table.
func (s *relaySocket) snapshot() []*relayStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.streams))
}

// handle acts on one valid frame. It runs on the reader goroutine and never waits on a
// stream's dispatcher; at most it waits for one frame of a stream's to finish writing.
func (s *relaySocket) handle(f *relayFrame) {
	switch f.body {
	case relayBodyAck, relayBodyResume, relayBodyHeartbeat:
		// Resume only claims the stream at the rendezvous; acks and heartbeats are unused
		// in 0.169 (docs/remote.md §4.2).
	case relayBodyReset:
		if st := s.lookup(f.streamID); st != nil {
			st.teardown(errors.New("reset by the harness"), false) // its reason is not trusted
		}
	case relayBodyHandshake:
		s.handshake(f.streamID, f.payload)
	case relayBodyData:
		s.data(f)
	}
}

// data delivers a Data frame to its stream; data for no stream, or before msg2, is answered
// with a reset (docs/remote.md §4.2).
func (s *relaySocket) data(f *relayFrame) {
	st := s.lookup(f.streamID)
	switch {
	case st == nil:
		s.log.Debug("relay data for an unknown stream", "stream_id", logStreamID(f.streamID))
		s.sendReset(f.streamID)
	case !st.active.Load():
		st.teardown(errors.New("data_before_handshake"), true)
	default:
		if err := st.receive(f.seq, f.payload); err != nil {
			s.quiet.Info("relay stream failed", "stream_id", logStreamID(st.id), "stream", st.instance, "error", err.Error())
			st.teardown(err, true)
		}
	}
}

func (s *relaySocket) lookup(id string) *relayStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[id]
}

// handshake admits a Handshake frame: a new stream gets a goroutine that completes the
// handshake and then serves JSON-RPC; a handshake on a live stream resets it.
func (s *relaySocket) handshake(id string, msg1 []byte) {
	s.mu.Lock()
	if st := s.streams[id]; st != nil {
		s.mu.Unlock()
		st.teardown(errors.New("second handshake on a stream"), true)
		return
	}
	if refuse := s.refusal(); refuse != "" {
		s.mu.Unlock()
		s.quiet.Info("refusing a relay handshake", "stream_id", logStreamID(id), "reason", refuse)
		s.sendReset(id)
		return
	}
	s.instances++
	st := &relayStream{sock: s, id: id, instance: s.instances, done: make(chan struct{}),
		inbox: relayInbox{limit: s.x.inboxLimit, ready: make(chan struct{}, 1)}}
	s.streams[id] = st
	s.pending++
	s.x.streams.Add(1)
	s.mu.Unlock()
	go st.run(bytes.Clone(msg1))
}

// refusal says why a new handshake cannot be admitted now, or "". s.mu is held.
func (s *relaySocket) refusal() string {
	switch {
	case time.Now().Before(s.pausedUntil):
		return "handshakes paused after repeated failures"
	case len(s.streams) >= relayMaxActiveStreams:
		return "too many streams"
	case s.pending >= relayMaxPendingValidations:
		return "too many pending validations"
	}
	return ""
}

// handshakeDone ends a handshake's pending validation and counts a failure against the
// budget: relayMaxFailedHandshakes failures, less those forgotten, pause handshakes on this
// socket.
func (s *relaySocket) handshakeDone(failed bool) {
	s.mu.Lock()
	s.pending--
	pause := failed && s.failures.add(time.Now())
	if pause {
		s.pausedUntil = time.Now().Add(s.x.timings.handshakePause)
	}
	s.mu.Unlock()
	if pause {
		s.quiet.Warn("pausing Noise relay handshakes after repeated failures", "pause", s.x.timings.handshakePause)
	}
}

// failureBudget counts a socket's failed handshakes, forgetting one per relayFailureDecay.
type failureBudget struct {
	n     int
	since time.Time // when the decay of n was last applied
}

// add counts one failure at now and reports whether the budget is spent, which starts it
// afresh.
func (b *failureBudget) add(now time.Time) bool {
	if b.n > 0 {
		forgot := int(now.Sub(b.since) / relayFailureDecay)
		b.n = max(0, b.n-forgot)
		b.since = b.since.Add(time.Duration(forgot) * relayFailureDecay)
	}
	if b.n == 0 {
		b.since = now
	}
	if b.n++; b.n >= relayMaxFailedHandshakes {
		b.n = 0
		return true
	}
	return false
}

// validateBucket is a token bucket of registry /validate calls: relayValidateBurst tokens,
// refilled at relayValidatePerSecond.
type validateBucket struct {
	tokens float64
	at     time.Time // when tokens was last refilled
}

// reserve takes a token at now and returns how long its holder must wait for it (0: at once).
// A reservation is never given back: a handshake that gives up waiting has still had its turn.
func (b *validateBucket) reserve(now time.Time) time.Duration {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(relayValidateBurst, b.tokens+d.Seconds()*relayValidatePerSecond)
		b.at = now
	}
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / relayValidatePerSecond * float64(time.Second))
}

// errRelayPaused ends a handshake that waited for its /validate turn into a pause.
var errRelayPaused = errors.New("handshakes paused after repeated failures")

// awaitValidate waits for this socket's next /validate turn, or for ctx to end. A handshake
// whose turn comes while handshakes are paused is not validated (errRelayPaused): the
// failures that started the pause came after it was admitted.
func (s *relaySocket) awaitValidate(ctx context.Context) error {
	s.mu.Lock()
	d := s.validates.reserve(time.Now())
	s.mu.Unlock()
	if d > 0 {
		if err := sleepCtx(ctx, d); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Now().Before(s.pausedUntil) {
		return errRelayPaused
	}
	return nil
}

// sendReset tells the harness that stream id is gone.
func (s *relaySocket) sendReset(id string) {
	s.writeFrame(&relayFrame{version: relayFrameVersion, streamID: id, body: relayBodyReset, reason: relayResetReason}, nil)
}

// writeFrame encodes f into buf (reused by the caller) and sends it as one binary message.
func (s *relaySocket) writeFrame(f *relayFrame, buf *[]byte) error {
	var b []byte
	if buf != nil {
		b = (*buf)[:0]
	}
	b = appendRelayFrame(b, f)
	if buf != nil {
		*buf = b
	}
	return s.ws.writeMessageOp(wsOpBinary, b)
}

// relayStream is one harness stream: a Noise responder until msg2, then a msgTransport that
// srv.serveConn runs exactly like a local websocket connection.
type relayStream struct {
	sock     *relaySocket
	id       string
	instance uint64 // internal id: stream ids may be reused after a reset
	t        *noiseTransport
	active   atomic.Bool // msg2 sent: Data is accepted
	closed   atomic.Bool
	inbox    relayInbox
	done     chan struct{} // closed by teardown

	writeMu  sync.Mutex // orders this stream's frames; nothing follows its reset
	frameBuf []byte     // guarded by writeMu
}

// run completes the handshake and then serves the stream until it ends.
func (st *relayStream) run(msg1 []byte) {
	defer st.sock.x.streams.Done()
	t := st.handshake(msg1)
	if t == nil {
		return
	}
	defer t.close()
	s := st.sock
	log := st.log()
	log.Info("relay stream open")
	s.x.serveStream(st, fmt.Sprintf("failed to parse JSON-RPC message from exec-server relay stream %d", st.instance))
	log.Info("relay stream closed")
}

// handshake reads msg1, asks the registry about the harness (docs/remote.md §2.3, §5.5) and answers
// with msg2. It returns the transport of an active stream, or nil when the stream ended here
// (torn down, and reset where the harness must hear of it). The handshake secrets are
// destroyed on every path.
func (st *relayStream) handshake(msg1 []byte) *noiseTransport {
	s := st.sock
	r, err := newNoiseResponder(s.x.id, noisePrologue(s.reg.environmentID, s.reg.registrationID, st.id))
	if err == nil {
		defer r.abandon() // after respond this only re-clears what Split already destroyed
		err = r.readInitiation(msg1)
	}
	if err != nil {
		s.quiet.Info("relay handshake failed", "stream_id", logStreamID(st.id), "stream", st.instance, "error", err.Error())
		return st.refuse(err, true)
	}
	if err := st.awaitValidate(); err != nil {
		// Not counted: this harness did nothing wrong yet, or the socket is ending.
		s.quiet.Info("refusing a relay handshake", "stream_id", logStreamID(st.id), "stream", st.instance, "reason", err.Error())
		return st.refuse(err, false)
	}
	payload, outcome, err := st.validate(r)
	if outcome != validateAccepted && outcome != validateCredentialsRejected {
		// A harness the registry refuses (or cannot vouch for) counts as a failed handshake,
		// as in the reference: a sound msg1 is no authorization, and anyone who has the
		// executor's public key can write one.
		return st.refuse(err, true)
	}
	msg2, t, err := r.respond(payload)
	if err != nil {
		return st.refuse(err, true)
	}
	if payload != nil { // the 401 answer opens no stream: later data draws a reset
		t.close()
		st.sendMsg2(msg2, nil)
		s.handshakeDone(true) // counted: a registry that refuses us every time pauses the storm
		st.teardown(errNoiseRegistryRejected, false)
		return nil
	}
	err = st.sendMsg2(msg2, t)
	s.handshakeDone(false)
	if !st.active.Load() || err != nil { // torn down while validating, or the socket failed
		st.teardown(err, false)
		t.close()
		return nil
	}
	return t
}

// awaitValidate waits for the stream's /validate turn, at most the validate timeout. The
// wait is short (at most relayMaxPendingValidations turns at relayValidatePerSecond), so a
// stream torn down meanwhile is noticed when msg2 would be sent.
func (st *relayStream) awaitValidate() error {
	s := st.sock
	ctx, cancel := context.WithTimeout(s.ctx, s.x.timings.validateTimeout)
	defer cancel()
	return s.awaitValidate(ctx)
}

// validate asks the registry whether the harness key and authorization of msg1 may open the
// stream. payload is what msg2 carries: nil when accepted, the rejection string after a 401
// (the executor's own credential was refused).
func (st *relayStream) validate(r *noiseResponder) (payload []byte, outcome validateOutcome, err error) {
	s := st.sock
	ctx, cancel := context.WithTimeout(s.ctx, s.x.timings.validateTimeout)
	defer cancel()
	outcome, err = s.x.registry.validate(ctx, s.reg.registrationID, st.id, r.peerStatic(), r.authorization())
	switch outcome {
	case validateAccepted:
	case validateCredentialsRejected:
		s.quiet.Warn("registry rejected the executor credential while validating a harness", "stream_id", logStreamID(st.id),
			"stream", st.instance, "error", errString(err))
		payload = []byte(noiseRegistryRejected)
	default:
		s.quiet.Info("registry did not validate the harness key", "stream_id", logStreamID(st.id), "stream", st.instance,
			"error", errString(err))
	}
	return payload, outcome, err
}

// refuse ends a handshake without msg2: the harness gets a reset, and a counted failure (a
// msg1 that is not a sound Noise message) goes against the socket's failed-handshake budget.
func (st *relayStream) refuse(err error, counted bool) *noiseTransport {
	st.sock.handshakeDone(counted)
	st.teardown(err, true)
	return nil
}

// logStreamID is a stream_id as log lines show it: at most relayLogStreamIDMax bytes of it,
// then its length. The relay picks the id, up to relayMaxStreamID bytes, and every line about
// a stream names it: quoted whole, each throttled line would be hundreds of kilobytes.
func logStreamID(id string) string {
	if len(id) <= relayLogStreamIDMax {
		return id
	}
	n := relayLogStreamIDMax
	for n > 0 && !utf8.RuneStart(id[n]) {
		n--
	}
	return fmt.Sprintf("%s…(%d bytes)", id[:n], len(id))
}

func (st *relayStream) log() *logger {
	return st.sock.log.With("stream_id", logStreamID(st.id), "stream", st.instance)
}

// sendMsg2 writes msg2 unless the stream is already torn down. With a transport t the
// stream becomes active first, because the harness may send Data as soon as it has msg2.
func (st *relayStream) sendMsg2(msg2 []byte, t *noiseTransport) error {
	st.writeMu.Lock()
	defer st.writeMu.Unlock()
	if st.closed.Load() {
		return nil
	}
	if t != nil {
		st.t = t
		st.active.Store(true)
	}
	return st.sock.writeFrame(&relayFrame{version: relayFrameVersion, streamID: st.id, body: relayBodyHandshake, payload: msg2}, &st.frameBuf)
}

// receive decrypts one record and queues the messages it completes. It runs on the socket
// reader; st.t is set before active, so it is safe to read here.
func (st *relayStream) receive(seq uint32, record []byte) error {
	return st.t.openRecord(seq, record, func(msg []byte) error {
		if !json.Valid(msg) {
			return errRelayNotJSON
		}
		if !st.inbox.push(msg) {
			return errRelayStreamBehind
		}
		return nil
	})
}

// next implements msgTransport. Every message is a buffer of its own: nothing to give
// back.
func (st *relayStream) next() (message, error) {
	if m, ok := st.inbox.pop(st.done); ok {
		return message{data: m}, nil
	}
	return message{}, io.EOF
}

// ended is closed when the stream is torn down (remote_forward.go watches it).
func (st *relayStream) ended() <-chan struct{} { return st.done }

// peer implements msgTransport: the stream's internal id, unique while the executor runs.
func (st *relayStream) peer() string { return strconv.FormatUint(st.instance, 10) }

// writeMessage implements msgTransport: one JSON-RPC message becomes as many Data frames as
// it has records. A record is encrypted once with nonce = seq; should acks ever ship
// (docs/remote.md §6 has none), this is where its ciphertext would be kept for resending.
func (st *relayStream) writeMessage(b []byte) error {
	if len(b) > noiseMaxRPCMessage {
		n := len(b)
		if b = relayTooLarge(b); b == nil {
			return fmt.Errorf("relay: a %d-byte notification or request exceeds the %d-byte message limit", n, noiseMaxRPCMessage)
		}
	}
	st.writeMu.Lock()
	defer st.writeMu.Unlock()
	return st.t.sealMessage(b, func(seq uint32, record []byte) error {
		if st.closed.Load() {
			return net.ErrClosed
		}
		return st.sock.writeFrame(&relayFrame{version: relayFrameVersion, streamID: st.id, body: relayBodyData,
			seq: seq, segmentCount: 1, payload: record}, &st.frameBuf)
	})
}

// relayTooLarge turns a response the relay cannot carry (over noiseMaxRPCMessage, which is the
// harness's receive limit too) into an error response to the same request, so that one huge
// reply (fs/readFile of a 50 MB file) fails that request rather than the whole stream. A
// message without an id has no request to answer, and one with a method is the server's own
// request or notification, whose id is the server's numbering, not the client's: nil.
func relayTooLarge(b []byte) []byte {
	id := topLevelValue(b, "id")
	if id == nil || string(id) == "null" || topLevelValue(b, "method") != nil {
		return nil
	}
	return appendError(nil, id, errInternal("response of %d bytes exceeds the relay's %d-byte message limit", len(b), noiseMaxRPCMessage))
}

// close implements msgTransport: the server ending the stream resets it at the harness,
// whatever the reason (a reset carries none); reason is kept for the logs.
func (st *relayStream) close(reason error) {
	st.teardown(reason, true)
}

// teardown ends the stream once: it leaves the socket's table, unblocks the dispatcher, drops
// what it had not read, and optionally resets the harness side. The keys are dropped by run,
// the stream's owner, so that teardown never waits for a send in progress.
func (st *relayStream) teardown(reason error, reset bool) {
	s := st.sock
	s.mu.Lock()
	if st.closed.Swap(true) {
		s.mu.Unlock()
		return
	}
	if s.streams[st.id] == st {
		delete(s.streams, st.id)
	}
	close(st.done)
	s.mu.Unlock()
	st.inbox.drop()
	if reset {
		st.writeMu.Lock()
		s.sendReset(st.id)
		st.writeMu.Unlock()
	}
	s.log.Debug("relay stream torn down", "stream_id", logStreamID(st.id), "stream", st.instance, "reason", errString(reason), "reset_sent", reset)
}

// relayInbox is one stream's queue of decoded JSON-RPC messages waiting for its dispatcher.
// The socket reader never waits on it: the relay has no per-stream flow control (no acks in
// 0.169), so waiting for one slow stream would stall every stream on the physical socket, and
// the pongs behind them, until the rendezvous dropped the socket. The queue is bounded in
// bytes instead, and a stream that lets more pile up is reset.
type relayInbox struct {
	mu    sync.Mutex
	msgs  [][]byte
	head  int
	bytes int // queued bytes plus relayInboxMessageCost per message
	limit int
	ready chan struct{} // holds a token after a push
}

// push queues msg; false means the queue is over its limit. One message is always accepted
// into an empty queue, whatever its size (the deframer already capped it).
func (q *relayInbox) push(msg []byte) bool {
	cost := len(msg) + relayInboxMessageCost
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.bytes > 0 && q.bytes+cost > q.limit {
		return false
	}
	q.msgs = append(q.msgs, msg)
	q.bytes += cost
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// pop waits for the next message; false once done is closed. done wins over queued
// messages: a torn-down stream starts no more work.
func (q *relayInbox) pop(done <-chan struct{}) ([]byte, bool) {
	for {
		select {
		case <-done:
			return nil, false
		default:
		}
		q.mu.Lock()
		if q.head < len(q.msgs) {
			msg := q.msgs[q.head]
			q.msgs[q.head] = nil
			if q.head++; q.head == len(q.msgs) {
				q.msgs, q.head = q.msgs[:0], 0
			}
			q.bytes -= len(msg) + relayInboxMessageCost
			q.mu.Unlock()
			return msg, true
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-done:
			return nil, false
		}
	}
}

// drop frees the queued messages of a stream that is gone.
func (q *relayInbox) drop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs, q.head, q.bytes = nil, 0, 0
}

// maxMessageBytes implements messageLimiter (fs.go): a Noise message carries at most
// noiseMaxRPCMessage bytes, so fs/readFile refuses what would not fit (docs/remote.md §6,
// docs/protocol.md §7.4).
func (st *relayStream) maxMessageBytes() int { return noiseMaxRPCMessage }
