package main

// `exec-server relay`, the rendezvous (docs/remote.md "Self-hosted relay", §3): the
// websocket upgrade of executors and harnesses, and the forwarding of relay frames between
// them.
//
//	GET /relay/v1/environment/{id}?role=environment&reg=R&sig=S   the executor of registration R
//	GET /relay/v1/harness/{id}?role=harness&ticket=T               a harness, with a connect bundle's ticket
//
// A refused upgrade carries X-Codex-Rendezvous-Rejection-Reason: unknown_route for a
// registration this relay does not hold (after a restart: the executor registers again),
// invalid_signature for a wrong secret or ticket, invalid_role; 429 for the limits.
//
// Forwarding reads of each frame only what routing needs: its stream id and which body it
// carries (relayFrame, decoded by relay.go without copying the payload), and writes the
// frame's bytes on unchanged. A harness's first frame on a stream id claims it; the executor's
// frames go to the harness that claimed their stream; a Reset either way, the end of the
// harness socket, the end of the executor socket, or a stream left without the executor's
// handshake answer for the handshake timeout releases the claim, and the relay resets the
// stream on the side that did not end it (reasons harness_disconnected, executor_disconnected,
// handshake_timeout, stream_limit, stream_in_use, executor_unavailable).

import (
	"bytes"
	"crypto/subtle"
	"io"
	"net/http"
	"strings"
	"time"
)

// relaydRendezvousPath prefixes the rendezvous URLs.
const relaydRendezvousPath = "/relay/v1/"

// relaydSocket is one rendezvous websocket. streams is guarded by relayd.mu.
type relaydSocket struct {
	ws      *wsConn
	env     *relaydEnv
	harness bool
	token   string                   // the token the socket counts against
	auth    *relaydAuth              // a harness's connect bundle
	streams map[string]*relaydStream // a harness's claimed streams
	pending int                      // of those, the ones the executor has not answered yet
	// out is a harness socket's outbound queue, drained by its writer (writeLoop): the
	// executor socket's reader hands a frame over and goes on, so that a harness that does
	// not read stalls none of the environment's other streams. Nil for an executor socket,
	// written in the caller's goroutine.
	out chan []byte
}

// write sends one frame. An executor socket's write blocks up to relaydWriteTimeout (the
// websocket's write deadline); a peer that does not read for that long is dropped. A harness
// socket's frame is queued (a copy: b is the reader's buffer); a queue that stays full for
// relaydQueueWait closes the socket, and its streams are reset towards the executor.
func (s *relaydSocket) write(b []byte) {
	if s.out == nil {
		if err := s.ws.writeMessageOp(wsOpBinary, b); err != nil {
			s.ws.closeTCP()
		}
		return
	}
	select {
	case <-s.ws.done: // dropped: no copy of a frame nobody will read
		return
	default:
	}
	b = bytes.Clone(b)
	select {
	case s.out <- b:
		return
	case <-s.ws.done:
		return
	default:
	}
	t := time.NewTimer(relaydQueueWait)
	defer t.Stop()
	select {
	case s.out <- b:
	case <-s.ws.done:
	case <-t.C:
		s.ws.closeTCP()
	}
}

// writeLoop is a harness socket's writer: the one goroutine that writes its queued frames,
// until the socket ends.
func (s *relaydSocket) writeLoop() {
	for {
		select {
		case b := <-s.out:
			if err := s.ws.writeMessageOp(wsOpBinary, b); err != nil {
				s.ws.closeTCP()
				return
			}
		case <-s.ws.done:
			return
		}
	}
}

// reset sends a relay Reset for one stream.
func (s *relaydSocket) reset(streamID, reason string) {
	s.write(appendRelayReset(nil, streamID, reason))
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

// rejectUpgrade refuses a rendezvous upgrade with a reason the executor knows by name.
func rejectUpgrade(w http.ResponseWriter, status int, reason, msg string) {
	if reason != "" {
		w.Header().Set(rendezvousRejectionHeader, reason)
	}
	w.Header().Set("Connection", "close")
	relaydError(w, status, reason, msg)
}

// rendezvous checks an upgrade of rest ("environment/{id}" or "harness/{id}"), admits it
// under the limits, and serves the socket in this (the HTTP handler's) goroutine.
func (d *relayd) rendezvous(w http.ResponseWriter, r *http.Request, rest string) {
	role, envID, ok := strings.Cut(rest, "/")
	q := r.URL.Query()
	switch {
	case !ok || (role != "environment" && role != "harness"):
		rejectUpgrade(w, http.StatusNotFound, "", "no such endpoint")
		return
	case r.Method != http.MethodGet:
		w.Header().Set("Allow", "GET")
		rejectUpgrade(w, http.StatusMethodNotAllowed, "", "use GET")
		return
	case q.Get("role") != role:
		rejectUpgrade(w, http.StatusForbidden, "invalid_role", "the role does not match the URL")
		return
	case !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket") ||
		r.Header.Get("Sec-WebSocket-Version") != "13" || r.Header.Get("Sec-WebSocket-Key") == "":
		w.Header().Set("Sec-WebSocket-Version", "13")
		rejectUpgrade(w, http.StatusBadRequest, "", "a websocket upgrade (version 13) is expected")
		return
	}
	s := &relaydSocket{harness: role == "harness"}
	d.mu.Lock()
	env := d.envs[envID]
	status, reason, msg := 0, "", ""
	switch {
	case d.closed:
		status, reason, msg = http.StatusServiceUnavailable, "pod_draining", "the relay is shutting down"
	case env == nil:
		status, reason, msg = http.StatusNotFound, "unknown_route", "no registration for this environment: register again"
	case !s.harness && q.Get("reg") != env.regID:
		status, reason, msg = http.StatusNotFound, "unknown_route", "not the current registration: register again"
	case !s.harness && !constantTimeEqual(q.Get("sig"), env.secret):
		status, reason, msg = http.StatusForbidden, "invalid_signature", "wrong rendezvous secret"
	case !s.harness:
		s.token = env.owner
	default:
		t := q.Get("ticket")
		if s.auth = env.authLocked(d.now(), func(a *relaydAuth) bool { return t != "" && constantTimeEqual(a.ticket, t) }); s.auth == nil {
			status, reason, msg = http.StatusForbidden, "invalid_signature", "unknown or expired ticket: ask /connect again"
		} else {
			s.token = s.auth.token
		}
	}
	if status == 0 {
		switch {
		case d.sockets >= relaydMaxSockets:
			status, msg = http.StatusServiceUnavailable, "the relay holds its maximum of sockets"
		case d.conns[s.token] >= d.cfg.Load().maxConnections:
			status, msg = http.StatusTooManyRequests, "token "+s.token+" holds its maximum of connections"
		}
	}
	if status != 0 {
		d.mu.Unlock()
		d.peerLog.Info("relay: upgrade refused", "role", role, "environment_id", clipEnvID(envID), "status", status, "reason", reason, "why", msg)
		rejectUpgrade(w, status, reason, msg)
		return
	}
	s.env = env
	d.conns[s.token]++
	d.sockets++
	d.wg.Add(1)
	d.mu.Unlock()
	defer d.wg.Done()
	defer d.leave(s)

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
	if s.harness {
		s.out = make(chan []byte, relaydQueueFrames)
	}
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
	}
	s.ws.closeTCP()
	d.peerLog.Info("relay: socket down", "role", role, "environment_id", envID)
}

// join makes a socket live: shutdown closes it; an executor socket becomes its environment's
// (an older one, perhaps half-open, is closed). False if the relay or the registration
// ended meanwhile.
func (d *relayd) join(s *relaydSocket) bool {
	d.mu.Lock()
	if d.closed || d.envs[s.env.id] != s.env {
		d.mu.Unlock()
		return false
	}
	d.live[s] = struct{}{}
	var old *relaydSocket
	if !s.harness {
		old = s.env.executor
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
	return true
}

// leave uncounts a socket that has ended.
func (d *relayd) leave(s *relaydSocket) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.live, s)
	d.sockets--
	if d.conns[s.token]--; d.conns[s.token] == 0 {
		delete(d.conns, s.token)
	}
}

// releaseLocked drops a stream's claim, and the slot it counts in: the environment's
// established streams, or its harness socket's unanswered ones.
func (d *relayd) releaseLocked(env *relaydEnv, st *relaydStream) {
	if st.released {
		return
	}
	st.released = true
	if env.streams[st.id] == st {
		delete(env.streams, st.id)
	}
	delete(st.harness.streams, st.id)
	if st.established {
		env.established--
	} else {
		st.harness.pending--
	}
	st.timer.Stop()
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
		case body == relayBodyHandshake && !st.established && env.established >= d.cfg.Load().maxStreams:
			// Only an answered stream takes one of the environment's slots: the limit is
			// checked here, not at the Resume (TestAdv24StreamSlotsTakenByOneHarness).
			d.releaseLocked(env, st)
			full = true
		case body == relayBodyHandshake && !st.established:
			st.established = true
			st.harness.pending--
			env.established++
			st.timer.Stop()
		case body == relayBodyReset:
			d.releaseLocked(env, st)
		}
		d.mu.Unlock()
		if full {
			d.peerLog.Info("relay: stream refused", "environment_id", env.id, "stream_id", logStreamID(id), "reason", "stream_limit")
			h.reset(id, "stream_limit")
			s.reset(id, "stream_limit")
			continue
		}
		h.write(data)
		h.touch(d.cfg.Load().idleTimeout)
	}
	d.mu.Lock()
	var gone []*relaydStream
	if env.executor == s {
		env.executor = nil
		env.orphaned = d.now()
		for _, st := range env.streams {
			gone = append(gone, st)
			d.releaseLocked(env, st)
		}
	}
	d.mu.Unlock()
	for _, st := range gone {
		st.harness.reset(st.id, "executor_disconnected")
	}
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
		case st == nil && body == relayBodyReset:
			d.mu.Unlock()
			continue
		case st == nil && s.pending >= relaydMaxPendingStreams:
			refuse = "stream_limit"
		case st == nil:
			s.pending++
			st = &relaydStream{id: id, harness: s}
			st.timer = time.AfterFunc(d.cfg.Load().handshakeTimeout, func() { d.handshakeExpired(env, st) })
			env.streams[id] = st
			s.streams[id] = st
		}
		if refuse != "" {
			d.mu.Unlock()
			d.peerLog.Info("relay: stream refused", "environment_id", env.id, "stream_id", logStreamID(id), "reason", refuse)
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
