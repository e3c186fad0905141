package main

// `exec-server relay`, the rendezvous (docs/remote.md "Self-hosted relay", §3, §12.4, §12.5):
// the websocket upgrade of executors and harnesses, and the forwarding of relay frames between
// them.
//
//	GET /relay/v1/environment/{id}?role=environment&reg=R&sig=S   the executor of registration R
//	GET /relay/v1/harness/{id}?role=harness&ticket=T               a harness, with a connect bundle's ticket
//
// A refused upgrade carries X-Codex-Rendezvous-Rejection-Reason: unknown_route for a
// registration this relay does not hold (after a restart: the executor registers again),
// invalid_signature for a wrong secret or ticket, invalid_role; 429 or 503 "capacity" for
// the limits.
//
// Forwarding reads of each frame only what routing needs: its stream id and which body it
// carries (relayFrame, decoded by relay.go without copying the payload), and writes the
// frame's bytes on unchanged. A harness's first frame on a stream id claims it; the executor's
// frames go to the harness that claimed their stream; a Reset either way, the end of the
// harness socket, the end of the executor socket, or a stream left without the executor's
// handshake answer for the handshake timeout releases the claim, and the relay resets the
// stream on the side that did not end it (reasons harness_disconnected, executor_disconnected,
// handshake_timeout, stream_limit, stream_in_use, executor_unavailable, handshake_failures).
//
// Every harness of an environment shares the executor's one socket, and with it the
// executor's own limits: its streams, its /validate rate, its pause after failed handshakes.
// So the relay gives each token (its name: a static token, or one minted token) a share of
// them on each environment (relaydTokenStreams): at most relaydMaxUnansweredPerToken streams
// waiting for the executor's answer, at most all but a quarter of the environment's streams,
// and no new stream for a while after relaydMaxTokenFailedHandshakes the executor reset
// before answering.
//
// The executor socket's frames are written by its reader into each harness socket's queue,
// which that socket's own writer drains (relaydQueues): a harness that does not read holds
// the executor's reader at most relaydQueueWait, then is closed, and the bytes all queues
// hold are bounded per socket, per token and for the relay.

import (
	"bytes"
	"crypto/subtle"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Limits of the rendezvous (docs/remote.md §12.5). None is a setting: each follows from the
// executor's own limits or from the relay's memory.
const (
	// relaydMaxTicketSockets bounds the live harness sockets one connect bundle's ticket
	// holds. The real harness asks for a fresh bundle on every connection (docs/remote.md
	// §12.7), so it needs one; the others leave room for a reconnect that races its old,
	// half-open socket. A leaked ticket (a rendezvous URL in a proxy's access log) opens no
	// more, whoever holds it (TestAdv24bLeakedTicketLocksOutItsToken).
	relaydMaxTicketSockets = 4
	// relaydMaxUnansweredPerToken bounds the streams of one token on one environment that
	// the executor has not answered yet, over all that token's sockets. The executor
	// validates about relayValidatePerSecond handshakes a second, in turn, for every harness
	// of its socket: another token's handshake waits behind at most this many, about a
	// second (TestAdv24bSoundHandshakesStarveValidation).
	relaydMaxUnansweredPerToken = 4
	// relaydStreamReserve: one token holds at most maxStreams - maxStreams/relaydStreamReserve
	// of an environment's streams (96 of the default 128), so that a quarter always stays for
	// the others (TestReview24OneTokenTakesEveryStreamSlot, TestAdv24bOneTokenHoldsEveryStream).
	relaydStreamReserve = 4
	// relaydMaxTokenFailedHandshakes: at this many of a token's streams the executor reset
	// before answering (a msg1 that is not Noise, an authorization it does not accept), that
	// token's new streams on the environment are refused (handshake_failures) until one is
	// forgotten, one per relayFailureDecay. With relaydMaxUnansweredPerToken in flight, one
	// token's failures reach the executor at most 1 + 4 at a time, fewer than its
	// relayMaxFailedHandshakes that pause every harness of the socket
	// (TestAdv24bFailedHandshakesPauseEveryHarness).
	relaydMaxTokenFailedHandshakes = 2
	// relaydQueueBytes bounds one harness socket's outbound queue (16 frames of 256 KiB),
	// relaydTokenQueueBytes the queues of one token's sockets together, and
	// relaydQueueBudget every queue of the relay: the memory harnesses that do not read can
	// make the relay hold (TestReview24HarnessQueuesHoldTheRelaysMemory).
	relaydQueueFrames     = 16
	relaydQueueBytes      = relaydQueueFrames * relaydMaxFrame
	relaydTokenQueueBytes = 16 << 20
	relaydQueueBudget     = 128 << 20
	// relaydResetQueueBytes bounds a harness socket's queue for the Resets the relay makes,
	// which do not wait for room: at it, the socket is closed
	// (TestReview24cResetsBypassTheQueueBound).
	relaydResetQueueBytes = 2 * relaydQueueBytes
	// relaydQueueWait is how long a frame waits for room before the harness socket it is for
	// is closed: long enough for a harness that reads to get over a hiccup of its link
	// (TestAdv24bReadingHarnessStallClosed). Meanwhile the executor's reader waits, so a token
	// one of whose sockets was closed so gets no wait for relaydQueueCooldown: its next
	// socket that does not make room is closed at once, and one token's unread sockets hold
	// the environment's other streams relaydQueueWait per relaydQueueCooldown at most.
	relaydQueueWait     = 2 * time.Second
	relaydQueueCooldown = 30 * time.Second
	// relaydExecutorProbe is how long the environment's executor socket has to answer a ping
	// before a new socket on its registration's URL replaces it.
	relaydExecutorProbe = 2 * time.Second
)

// relaydRendezvousPath prefixes the rendezvous URLs.
const relaydRendezvousPath = "/relay/v1/"

// relaydSocket is one rendezvous websocket. streams is guarded by relayd.mu; out, outBytes
// and outEnded by queues.mu.
type relaydSocket struct {
	ws      *wsConn
	env     *relaydEnv
	harness bool
	token   string                   // the token the socket counts against
	auth    *relaydAuth              // a harness's connect bundle
	streams map[string]*relaydStream // a harness's claimed streams
	// A harness socket's outbound queue, drained by its writer (writeLoop): the executor
	// socket's reader hands a frame over and goes on, so that a harness that does not read
	// stalls none of the environment's other streams. An executor socket is written in the
	// caller's goroutine.
	queues   *relaydQueues
	out      [][]byte
	outBytes int           // out, and the frame the writer is writing
	outReady chan struct{} // a frame was queued; capacity 1
	outEnded bool          // the writer is gone: frames are dropped
	// An executor socket's reader counts the frames it reads, and says when it is held
	// handing one to a harness queue that has no room (answersProbe).
	framesRead atomic.Uint64
	handing    atomic.Bool
}

// answersProbe says whether an executor socket is alive, for a new socket on its URL: it
// answers a ping within relaydExecutorProbe, or frames arrive meanwhile, or its reader is
// held by the relay itself, handing a frame to a harness that does not read. The pong of a
// busy socket waits behind its frames, which a slow harness paces: a pong alone would let
// whoever holds a leaked URL take a live executor's socket
// (TestAdv24cSlowHarnessHidesTheExecutorsPong). A dead socket delivers nothing, so none of
// these holds for it past the one frame it may be handing, for at most relaydQueueWait.
func (s *relaydSocket) answersProbe() bool {
	n := s.framesRead.Load()
	return s.ws.answersPing(relaydExecutorProbe) || s.framesRead.Load() != n || s.handing.Load()
}

// relaydQueues accounts for the bytes every harness socket's queue holds (relaydQueueBytes,
// relaydTokenQueueBytes, relaydQueueBudget).
type relaydQueues struct {
	mu     sync.Mutex
	total  int
	tokens map[string]*relaydTokenQueue
	// room is closed, and cleared, when bytes are freed while a frame waits for room.
	room chan struct{}
	// frames recycles the frame copies, one pool per relaydFrameClasses entry.
	frames [len(relaydFrameClasses)]sync.Pool
}

// relaydFrameClasses are the capacities of the frame copies the queues recycle
// (relaydQueues.clone): every frame the executor socket's reader routes to a harness is
// copied, and with a thousand busy streams the garbage of those copies, not what is queued,
// set the relay's resident size (BENCHMARKS.md, "Self-hosted relay"). A queued frame costs
// its class's capacity (relaydFrameCost), not its length: a queue of small frames holds as
// much memory as its bound says, not up to 36 times more.
var relaydFrameClasses = [...]int{512, 4 << 10, 32 << 10, relaydMaxFrame}

// relaydFrameCost is what a frame of n bytes counts against the queue bounds once copied:
// the capacity of its class.
func relaydFrameCost(n int) int {
	for _, c := range relaydFrameClasses {
		if n <= c {
			return c
		}
	}
	return n
}

// clone copies a frame into a recycled buffer of its class.
func (q *relaydQueues) clone(b []byte) []byte {
	for i, c := range relaydFrameClasses {
		if len(b) <= c {
			if p, _ := q.frames[i].Get().(*[]byte); p != nil {
				return append((*p)[:0], b...)
			}
			return append(make([]byte, 0, c), b...)
		}
	}
	return bytes.Clone(b)
}

// recycle gives back a copy made by clone once it is written or dropped.
func (q *relaydQueues) recycle(b []byte) {
	for i, c := range relaydFrameClasses {
		if cap(b) == c {
			b = b[:0]
			q.frames[i].Put(&b)
			return
		}
	}
}

// relaydTokenQueue is what one token's harness sockets queue.
type relaydTokenQueue struct {
	bytes  int
	closed time.Time // when a socket of the token was last closed for a queue that stayed full
}

// tokenLocked returns name's account, made on first use.
func (q *relaydQueues) tokenLocked(name string) *relaydTokenQueue {
	if q.tokens == nil {
		q.tokens = map[string]*relaydTokenQueue{}
	}
	tq := q.tokens[name]
	if tq == nil {
		// Forget a stale account or two (nothing queued, past its cooldown) for each one
		// made, so that tokens long gone do not pile up.
		now, seen := time.Now(), 0
		for other, o := range q.tokens {
			if o.bytes == 0 && now.Sub(o.closed) >= relaydQueueCooldown {
				delete(q.tokens, other)
			}
			if seen++; seen == 2 {
				break
			}
		}
		tq = &relaydTokenQueue{}
		q.tokens[name] = tq
	}
	return tq
}

// releaseLocked frees n bytes of s's queue, and wakes the frames waiting for room.
func (q *relaydQueues) releaseLocked(s *relaydSocket, n int, now time.Time) {
	s.outBytes -= n
	q.total -= n
	tq := q.tokenLocked(s.token)
	if tq.bytes -= n; tq.bytes == 0 && now.Sub(tq.closed) >= relaydQueueCooldown {
		delete(q.tokens, s.token)
	}
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
}

// write sends one frame. An executor socket's write blocks up to relaydWriteTimeout (the
// websocket's write deadline); a peer that does not read for that long is dropped. A harness
// socket's frame is queued (enqueue).
func (s *relaydSocket) write(b []byte) {
	if s.queues == nil {
		if err := s.ws.writeMessageOp(wsOpBinary, b); err != nil {
			s.ws.closeTCP()
		}
		return
	}
	s.enqueue(b, frameData)
}

// reset sends a relay Reset for one stream. A harness socket's Reset is queued past the
// bounds a data frame waits for, so that no one waits to end a stream; but not past
// relaydResetQueueBytes, since a harness that sends Resumes the relay refuses, and reads
// nothing, would otherwise queue a Reset for each without end.
func (s *relaydSocket) reset(streamID, reason string) {
	b := appendRelayReset(nil, streamID, reason)
	if s.queues == nil {
		s.write(b)
		return
	}
	s.enqueue(b, frameReset)
}

// frameKind says how enqueue bounds a frame.
type frameKind bool

const (
	frameData  frameKind = false // waits for room under every bound
	frameReset frameKind = true  // queued at once, up to relaydResetQueueBytes
)

// enqueue queues a copy of b (the reader's buffer) for the socket's writer. A data frame that
// does not fit the socket's, its token's or the relay's bound waits up to relaydQueueWait for
// room (none while its token is in its relaydQueueCooldown), then the socket is closed and its
// streams are reset towards the executor. A Reset is queued at once, unless the socket's
// queue holds relaydResetQueueBytes: then the socket is closed.
func (s *relaydSocket) enqueue(b []byte, kind frameKind) {
	q := s.queues
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for copied := false; ; {
		q.mu.Lock()
		if s.outEnded {
			q.mu.Unlock()
			return
		}
		tq := q.tokenLocked(s.token)
		n := relaydFrameCost(len(b))
		if kind == frameReset && s.outBytes+n > relaydResetQueueBytes {
			q.mu.Unlock()
			s.ws.closeTCP()
			return
		}
		if kind == frameReset || s.outBytes+n <= relaydQueueBytes && tq.bytes+n <= relaydTokenQueueBytes && q.total+n <= relaydQueueBudget {
			if !copied {
				b = q.clone(b)
			}
			s.out = append(s.out, b)
			s.outBytes += n
			tq.bytes += n
			q.total += n
			q.mu.Unlock()
			select {
			case s.outReady <- struct{}{}:
			default:
			}
			return
		}
		if timer == nil {
			now := time.Now()
			if now.Sub(tq.closed) < relaydQueueCooldown {
				q.mu.Unlock()
				s.ws.closeTCP()
				return
			}
			timer = time.NewTimer(relaydQueueWait)
			// A copy now: b is the caller's buffer, and the wait may end in the frame queued.
			b, copied = q.clone(b), true
		}
		if q.room == nil {
			q.room = make(chan struct{})
		}
		room := q.room
		q.mu.Unlock()
		select {
		case <-room:
		case <-s.ws.done:
			return
		case <-timer.C:
			q.mu.Lock()
			q.tokenLocked(s.token).closed = time.Now()
			q.mu.Unlock()
			s.ws.closeTCP()
			return
		}
	}
}

// writeLoop is a harness socket's writer: the one goroutine that writes its queued frames,
// until the socket ends; then it frees what the queue holds.
func (s *relaydSocket) writeLoop() {
	q := s.queues
	defer func() {
		q.mu.Lock()
		s.outEnded = true
		dropped := s.out
		s.out = nil
		q.releaseLocked(s, s.outBytes, time.Now())
		q.mu.Unlock()
		for _, b := range dropped {
			q.recycle(b)
		}
	}()
	for {
		q.mu.Lock()
		if len(s.out) == 0 {
			q.mu.Unlock()
			select {
			case <-s.outReady:
				continue
			case <-s.ws.done:
				return
			}
		}
		b := s.out[0]
		s.out[0] = nil
		s.out = s.out[1:]
		q.mu.Unlock()
		err := s.ws.writeMessageOp(wsOpBinary, b)
		q.mu.Lock()
		q.releaseLocked(s, relaydFrameCost(len(b)), time.Now())
		q.mu.Unlock()
		q.recycle(b)
		if err != nil {
			s.ws.closeTCP()
			return
		}
	}
}

// touch pushes a harness socket's idle deadline back.
func (s *relaydSocket) touch(idle time.Duration) {
	if s.harness {
		s.ws.nc.SetReadDeadline(time.Now().Add(idle))
	}
}

// relaydStream is one claimed stream id of an environment.
type relaydStream struct {
	id          string
	harness     *relaydSocket
	established bool // the executor answered the handshake
	released    bool // the claim has ended (releaseLocked)
	timer       *time.Timer
}

// relaydTokenStreams is what one token holds on one environment. Guarded by relayd.mu.
type relaydTokenStreams struct {
	unanswered int       // streams the executor has not answered yet
	answered   int       // streams it answered: at most relaydTokenStreamShare
	failed     int       // streams it reset before answering, less those forgotten
	failedAt   time.Time // when the decay of failed was last applied
}

// failuresLocked is the count of failed handshakes at now, one forgotten per
// relayFailureDecay (as the executor forgets its own).
func (t *relaydTokenStreams) failuresLocked(now time.Time) int {
	if t.failed > 0 {
		forgot := int(now.Sub(t.failedAt) / relayFailureDecay)
		t.failed = max(0, t.failed-forgot)
		t.failedAt = t.failedAt.Add(time.Duration(forgot) * relayFailureDecay)
	}
	return t.failed
}

// failLocked counts one failed handshake at now.
func (t *relaydTokenStreams) failLocked(now time.Time) {
	if t.failuresLocked(now) == 0 {
		t.failedAt = now
	}
	t.failed++
}

// relaydTokenStreamShare is how many of an environment's maxStreams one token may hold.
func relaydTokenStreamShare(maxStreams int) int {
	return maxStreams - maxStreams/relaydStreamReserve
}

// tokenLocked returns what token holds on the environment, made on first use.
func (e *relaydEnv) tokenLocked(token string) *relaydTokenStreams {
	t := e.tokens[token]
	if t == nil {
		t = &relaydTokenStreams{}
		e.tokens[token] = t
	}
	return t
}

// tidyTokenLocked forgets a token that holds nothing on the environment any more.
func (e *relaydEnv) tidyTokenLocked(token string, now time.Time) {
	if t := e.tokens[token]; t != nil && t.unanswered == 0 && t.answered == 0 && t.failuresLocked(now) == 0 {
		delete(e.tokens, token)
	}
}

// claimLocked admits a new stream of token on env, or says why not (a Reset reason): the
// token's failed handshakes, its unanswered streams, or its share of the environment's.
// An admitted stream counts as unanswered until answerLocked or releaseLocked.
func (e *relaydEnv) claimLocked(token string, maxStreams int, now time.Time) string {
	t := e.tokenLocked(token)
	why := ""
	switch {
	case t.failuresLocked(now) >= relaydMaxTokenFailedHandshakes:
		why = "handshake_failures"
	case t.unanswered >= relaydMaxUnansweredPerToken, t.unanswered+t.answered >= relaydTokenStreamShare(maxStreams):
		why = "stream_limit"
	default:
		t.unanswered++
		return ""
	}
	e.tidyTokenLocked(token, now)
	return why
}

// answerLocked moves a stream the executor has just answered into the environment's
// established streams; false, with the claim released, when they are at maxStreams: only an
// answered stream takes one of the environment's slots, so the limit is checked here, not at
// the Resume (TestAdv24StreamSlotsTakenByOneHarness).
func (d *relayd) answerLocked(env *relaydEnv, st *relaydStream, maxStreams int) bool {
	if env.established >= maxStreams {
		d.releaseLocked(env, st)
		return false
	}
	t := env.tokenLocked(st.harness.token)
	t.unanswered--
	t.answered++
	st.established = true
	env.established++
	st.timer.Stop()
	return true
}

// releaseLocked drops a stream's claim, and the slot it counts in: the environment's and its
// token's answered streams, or its token's unanswered ones.
func (d *relayd) releaseLocked(env *relaydEnv, st *relaydStream) {
	if st.released {
		return
	}
	st.released = true
	if env.streams[st.id] == st {
		delete(env.streams, st.id)
	}
	delete(st.harness.streams, st.id)
	t := env.tokenLocked(st.harness.token)
	if st.established {
		env.established--
		t.answered--
	} else {
		t.unanswered--
	}
	env.tidyTokenLocked(st.harness.token, d.now())
	st.timer.Stop()
}

// appendRelayReset encodes a Reset frame.
func appendRelayReset(b []byte, streamID, reason string) []byte {
	return appendRelayFrame(b, &relayFrame{version: relayFrameVersion, streamID: streamID, body: relayBodyReset, reason: reason})
}

// relaydRoute reads what the rendezvous routes a frame on: its stream id and body. A frame
// that is not valid for docs/remote.md §4.2 is dropped.
func relaydRoute(b []byte) (streamID string, body relayBody, err error) {
	f, err := decodeRelayFrame(b)
	if err == nil {
		err = checkRelayFrame(&f)
	}
	if err != nil {
		return "", relayBodyNone, err
	}
	return f.streamID, f.body, nil
}

// rejectUpgrade refuses a rendezvous upgrade: code is the JSON error's, reason (when not
// empty) the rejection reason the executor knows by name.
func rejectUpgrade(w http.ResponseWriter, status int, reason, code, msg string) {
	if reason != "" {
		w.Header().Set(rendezvousRejectionHeader, reason)
	}
	w.Header().Set("Connection", "close")
	relaydError(w, status, code, msg)
}

// rendezvous checks an upgrade of rest ("environment/{id}" or "harness/{id}"), admits it
// under the limits, and serves the socket in this (the HTTP handler's) goroutine.
func (d *relayd) rendezvous(w http.ResponseWriter, r *http.Request, rest string) {
	role, envID, ok := strings.Cut(rest, "/")
	q := r.URL.Query()
	switch {
	case !ok || (role != "environment" && role != "harness"):
		rejectUpgrade(w, http.StatusNotFound, "", "not_found", "no such endpoint")
		return
	case r.Method != http.MethodGet:
		w.Header().Set("Allow", "GET")
		rejectUpgrade(w, http.StatusMethodNotAllowed, "", "method_not_allowed", "use GET")
		return
	case q.Get("role") != role:
		rejectUpgrade(w, http.StatusForbidden, "invalid_role", "invalid_role", "the role does not match the URL")
		return
	case !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket") ||
		r.Header.Get("Sec-WebSocket-Version") != "13" || r.Header.Get("Sec-WebSocket-Key") == "":
		w.Header().Set("Sec-WebSocket-Version", "13")
		rejectUpgrade(w, http.StatusBadRequest, "", "invalid_request", "a websocket upgrade (version 13) is expected")
		return
	}
	s := &relaydSocket{harness: role == "harness"}
	if s.harness {
		s.queues, s.outReady = &d.queues, make(chan struct{}, 1)
	}
	d.mu.Lock()
	status, reason, msg := d.admitSocketLocked(s, envID, q)
	if status != 0 {
		d.mu.Unlock()
		code := reason
		if code == "" {
			code = "capacity"
		}
		d.peerLog.Info("relay: upgrade refused", "role", role, "environment_id", clipEnvID(envID), "status", status, "reason", code, "why", msg)
		rejectUpgrade(w, status, reason, code, msg)
		return
	}
	var live *relaydSocket // the environment's executor socket a new one would replace
	if !s.harness {
		live = s.env.executor
	}
	d.wg.Add(1)
	d.mu.Unlock()
	defer d.wg.Done()
	defer d.leave(s)
	// The URL is the executor's credential until it registers again, and a URL can leak (a
	// proxy's access log): a socket that still answers a ping is not replaced by whoever
	// dials the URL (TestAdv24bLeakedExecutorURLTakesTheEnvironment). An executor dials its
	// URL again only once its socket is gone to it; the relay's side of a dead one answers no
	// ping, and is replaced after relaydExecutorProbe.
	if live != nil && live.answersProbe() {
		d.peerLog.Info("relay: upgrade refused", "role", role, "environment_id", clipEnvID(envID), "status", http.StatusConflict, "reason", "executor_connected", "why", "the registration's executor socket is up")
		rejectUpgrade(w, http.StatusConflict, "executor_connected", "executor_connected", "this registration's executor socket is up and answering: register again for a new one")
		return
	}

	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	nc.SetDeadline(time.Time{})
	if _, err := io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+
		acceptKey(r.Header.Get("Sec-WebSocket-Key"))+"\r\n\r\n"); err != nil {
		nc.Close()
		return
	}
	s.ws = newWSConn(nc, brw.Reader, false, wsOptions{maxFrame: relaydMaxFrame, maxMessage: relaydMaxFrame,
		pingInterval: relaydPingInterval, pongTimeout: relaydPongTimeout, writeTimeout: relaydWriteTimeout})
	if !d.join(s) {
		s.ws.closeTCP()
		return
	}
	d.peerLog.Info("relay: socket up", "role", role, "environment_id", envID, "token", s.token)
	if s.harness {
		writerDone := make(chan struct{})
		go func() { // the harness socket's writer: ends with the socket (closeTCP below)
			defer close(writerDone)
			s.writeLoop()
		}()
		d.serveHarness(s)
		s.ws.closeTCP()
		<-writerDone
	} else {
		d.serveExecutor(s)
		s.ws.closeTCP()
	}
	d.peerLog.Info("relay: socket down", "role", role, "environment_id", envID)
}

// admitSocketLocked checks an upgrade's credential (the registration's secret, or a bundle's
// ticket) and the socket limits, and counts the socket; else it returns the refusal: its
// status, its rejection reason (empty for a limit) and why.
//
// Executor sockets do not count against max_connections_per_token: there is one per
// registration (join closes an older one), and max_registrations_per_token bounds those
// (TestReview24TokenRegistrationsOutnumberItsSockets). A harness socket counts for the token
// that asked for its bundle, and a bundle holds relaydMaxTicketSockets at most.
func (d *relayd) admitSocketLocked(s *relaydSocket, envID string, q url.Values) (status int, reason, msg string) {
	env := d.envs[envID]
	switch {
	case d.closed:
		return http.StatusServiceUnavailable, "pod_draining", "the relay is shutting down"
	case env == nil:
		return http.StatusNotFound, "unknown_route", "no registration for this environment: register again"
	case !s.harness && q.Get("reg") != env.regID:
		return http.StatusNotFound, "unknown_route", "not the current registration: register again"
	case !s.harness && !constantTimeEqual(q.Get("sig"), env.secret):
		return http.StatusForbidden, "invalid_signature", "wrong rendezvous secret"
	case !s.harness:
		s.token = env.owner
	default:
		t := q.Get("ticket")
		if s.auth = env.authLocked(d.now(), func(a *relaydAuth) bool { return t != "" && constantTimeEqual(a.ticket, t) }); s.auth == nil {
			return http.StatusForbidden, "invalid_signature", "unknown or expired ticket: ask /connect again"
		}
		s.token = s.auth.token
	}
	switch {
	case d.sockets >= relaydMaxSockets:
		return http.StatusServiceUnavailable, "", "the relay holds its maximum of sockets"
	case s.harness && d.conns[s.token] >= d.cfg.Load().maxConnections:
		return http.StatusTooManyRequests, "", "token " + s.token + " holds its maximum of connections"
	case s.harness && s.auth.sockets >= relaydMaxTicketSockets:
		return http.StatusTooManyRequests, "", "this connect bundle holds its maximum of sockets: ask /connect again"
	}
	s.env = env
	d.sockets++
	if s.harness {
		d.conns[s.token]++
		s.auth.sockets++
	}
	return 0, "", ""
}

// join makes a socket live: shutdown closes it; an executor socket becomes its environment's
// (an older one, perhaps half-open, is closed, and the streams it carried are reset: the new
// socket never opened them). False if the relay or the registration ended meanwhile.
func (d *relayd) join(s *relaydSocket) bool {
	d.mu.Lock()
	if d.closed || d.envs[s.env.id] != s.env {
		d.mu.Unlock()
		return false
	}
	d.live[s] = struct{}{}
	var old *relaydSocket
	var gone []*relaydStream
	if !s.harness {
		old = s.env.executor
		if old != nil {
			gone = d.dropStreamsLocked(s.env)
		}
		s.env.executor = s
		s.env.orphaned = time.Time{}
		close(s.env.executorUp)
		s.env.executorUp = make(chan struct{})
	} else {
		s.streams = map[string]*relaydStream{}
	}
	d.mu.Unlock()
	if old != nil {
		old.ws.closeTCP()
	}
	resetExecutorGone(gone)
	return true
}

// dropStreamsLocked releases every stream of env, whose executor socket has ended or been
// replaced, and returns them for resetExecutorGone, called once d.mu is unlocked.
func (d *relayd) dropStreamsLocked(env *relaydEnv) []*relaydStream {
	gone := make([]*relaydStream, 0, len(env.streams))
	for _, st := range env.streams {
		gone = append(gone, st)
		d.releaseLocked(env, st)
	}
	return gone
}

// resetExecutorGone resets streams towards their harnesses: their executor socket is gone.
func resetExecutorGone(gone []*relaydStream) {
	for _, st := range gone {
		st.harness.reset(st.id, "executor_disconnected")
	}
}

// leave uncounts a socket that has ended.
func (d *relayd) leave(s *relaydSocket) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.live, s)
	d.sockets--
	if !s.harness {
		return
	}
	s.auth.sockets--
	if d.conns[s.token]--; d.conns[s.token] == 0 {
		delete(d.conns, s.token)
	}
}

// handshakeExpired resets a stream that the executor has not answered in time.
func (d *relayd) handshakeExpired(env *relaydEnv, st *relaydStream) {
	d.mu.Lock()
	if env.streams[st.id] != st || st.established {
		d.mu.Unlock()
		return
	}
	d.releaseLocked(env, st)
	exec := env.executor
	d.mu.Unlock()
	d.peerLog.Info("relay: stream reset", "environment_id", env.id, "stream_id", logStreamID(st.id), "reason", "handshake_timeout")
	st.harness.reset(st.id, "handshake_timeout")
	if exec != nil {
		exec.reset(st.id, "handshake_timeout")
	}
}

// serveExecutor forwards the executor's frames to the harnesses that claimed their streams,
// until the socket ends; then it resets every stream of the environment towards its harness.
func (d *relayd) serveExecutor(s *relaydSocket) {
	env := s.env
	for {
		op, data, err := s.ws.readFrameMessage()
		if err != nil {
			break
		}
		s.framesRead.Add(1)
		if op != wsOpBinary {
			continue
		}
		id, body, err := relaydRoute(data)
		if err != nil {
			d.log.Debug("relay: executor frame dropped", "environment_id", env.id, "error", err)
			continue
		}
		d.mu.Lock()
		st := env.streams[id]
		if st == nil || env.executor != s {
			d.mu.Unlock()
			continue
		}
		h := st.harness
		full := false
		switch {
		case body == relayBodyHandshake && !st.established:
			full = !d.answerLocked(env, st, d.cfg.Load().maxStreams)
		case body == relayBodyReset:
			if !st.established { // a handshake the executor refused
				env.tokenLocked(h.token).failLocked(d.now())
			}
			d.releaseLocked(env, st)
		}
		d.mu.Unlock()
		if full {
			d.peerLog.Info("relay: stream refused", "environment_id", env.id, "stream_id", logStreamID(id), "reason", "stream_limit")
			h.reset(id, "stream_limit")
			s.reset(id, "stream_limit")
			continue
		}
		s.handing.Store(true)
		h.write(data)
		s.handing.Store(false)
		h.touch(d.cfg.Load().idleTimeout)
	}
	d.mu.Lock()
	var gone []*relaydStream
	if env.executor == s {
		env.executor = nil
		env.orphaned = d.now()
		gone = d.dropStreamsLocked(env)
	}
	d.mu.Unlock()
	resetExecutorGone(gone)
}

// serveHarness claims the streams a harness opens and forwards its frames to the executor,
// until the socket ends or stays idle; then it resets its streams towards the executor.
func (d *relayd) serveHarness(s *relaydSocket) {
	env := s.env
	for {
		s.touch(d.cfg.Load().idleTimeout)
		op, data, err := s.ws.readFrameMessage()
		if err != nil {
			break
		}
		if op != wsOpBinary {
			continue
		}
		id, body, err := relaydRoute(data)
		if err != nil {
			d.log.Debug("relay: harness frame dropped", "environment_id", env.id, "error", err)
			continue
		}
		d.mu.Lock()
		if d.envs[env.id] != env {
			d.mu.Unlock()
			break
		}
		st := env.streams[id]
		refuse := ""
		switch {
		case st != nil && st.harness != s:
			refuse = "stream_in_use"
		case st == nil && body != relayBodyResume:
			// Only a Resume claims a stream id (the harness sends one before its handshake,
			// docs/remote.md §4): a Handshake that follows a refused Resume, or a frame
			// after the claim ended, is dropped, not sent to the executor as a stream of
			// its own that would fail there.
			d.mu.Unlock()
			continue
		case st == nil:
			if refuse = env.claimLocked(s.token, d.cfg.Load().maxStreams, d.now()); refuse == "" {
				st = &relaydStream{id: id, harness: s}
				st.timer = time.AfterFunc(d.cfg.Load().handshakeTimeout, func() { d.handshakeExpired(env, st) })
				env.streams[id] = st
				s.streams[id] = st
			}
		}
		if refuse != "" {
			d.mu.Unlock()
			d.peerLog.Info("relay: stream refused", "environment_id", env.id, "stream_id", logStreamID(id), "token", s.token, "reason", refuse)
			s.reset(id, refuse)
			continue
		}
		if body == relayBodyReset {
			d.releaseLocked(env, st)
		}
		exec, up := env.executor, env.executorUp
		d.mu.Unlock()
		if exec == nil {
			exec = d.awaitExecutor(s, up)
		}
		if exec == nil {
			d.mu.Lock()
			d.releaseLocked(env, st)
			d.mu.Unlock()
			s.reset(id, "executor_unavailable")
			continue
		}
		exec.write(data)
	}
	d.mu.Lock()
	var gone []string
	for id, st := range s.streams {
		gone = append(gone, id)
		d.releaseLocked(env, st)
	}
	exec := env.executor
	d.mu.Unlock()
	if exec != nil {
		for _, id := range gone {
			exec.reset(id, "harness_disconnected")
		}
	}
}

// awaitExecutor waits up to relaydExecutorWait for the environment's executor socket, while
// the harness socket lives.
func (d *relayd) awaitExecutor(s *relaydSocket, up chan struct{}) *relaydSocket {
	t := time.NewTimer(relaydExecutorWait)
	defer t.Stop()
	for {
		select {
		case <-up:
		case <-t.C:
			return nil
		case <-s.ws.done:
			return nil
		}
		d.mu.Lock()
		exec := s.env.executor
		up = s.env.executorUp
		gone := d.envs[s.env.id] != s.env
		d.mu.Unlock()
		if exec != nil || gone {
			return exec
		}
	}
}

// constantTimeEqual compares secrets without leaking where they differ.
func constantTimeEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// clipEnvID shortens an unchecked id for a log line.
func clipEnvID(id string) string {
	if len(id) > 64 {
		return id[:64] + "…"
	}
	return id
}
