package main

// A loopback test registry (docs/remote.md §2) and a forwarding rendezvous (docs/remote.md §3)
// on one HTTP listener:
//
//	POST /cloud/environment/{id}/register   executor  -> registration (url = ws://…/relay?role=environment)
//	POST /cloud/environment/{id}/validate   executor  -> {"valid":true} iff the pair was issued by /connect
//	POST /cloud/environment/{id}/connect    harness   -> connect bundle with the registered executor key
//	GET  /relay?role=environment|harness    websocket; binary RelayMessageFrames routed by stream_id
//
// The rendezvous never looks inside payloads: it only reads stream_id (and logs the frame
// kind), which is all a rendezvous sees (docs/remote.md §1).
//
// The Noise parts (the key registered, the connect bundles, the validate check and the
// forwarding) live in noiseRelay, which the credentials check's registry (credentials.go)
// shares; testRegistry adds the bearers and the statistics the remote checks assert on.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

const (
	securityProfile  = "noise_hybrid_ik_v1"
	noiseSuiteLabel  = "Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256"
	registrationID   = "reg-1"
	maxRelayMessage  = 256 << 10 // docs/remote.md §3
	maxRegistryBody  = 64 << 10
	resetHarnessGone = "harness_disconnected"
)

// noiseRelay is what a loopback Noise registry needs beyond its bearers: the executor key as
// registered, the connect bundles it hands to harnesses, the check of what the executor
// forwards to /validate, and the forwarding rendezvous. Its owner serves HTTP, checks
// credentials and keeps its own records, and calls in here for the Noise parts.
type noiseRelay struct {
	log   *eventLog
	envID string
	ws    string // ws(s)://127.0.0.1:P, the base of the relay URLs
	// authorization returns the n-th (from 1) harness_key_authorization since the last forget.
	authorization func(n int) string
	// onExecutorFrame and onHarnessFrame, if set, see every decoded frame before it is
	// forwarded; size is the websocket message's. They are called without mu held.
	onExecutorFrame func(f relayFrame, size int)
	onHarnessFrame  func(f relayFrame)

	mu              sync.Mutex
	executorKey     json.RawMessage            // as registered
	issued          map[string]json.RawMessage // harness_key_authorization -> harness_public_key
	nIssued         int
	handshakes      map[string]bool // stream ids a harness opened with a handshake frame
	executor        *relaySocket
	executorSockets int
	harnessSockets  int
	executorUp      chan struct{}           // closed when the first executor socket is up
	executorNew     chan struct{}           // closed and replaced whenever an executor socket comes up
	streams         map[string]*relaySocket // stream id -> harness socket
}

func newNoiseRelay(log *eventLog, envID, ws string, authorization func(int) string) *noiseRelay {
	return &noiseRelay{
		log: log, envID: envID, ws: ws, authorization: authorization,
		issued:      map[string]json.RawMessage{},
		handshakes:  map[string]bool{},
		streams:     map[string]*relaySocket{},
		executorUp:  make(chan struct{}),
		executorNew: make(chan struct{}),
	}
}

// relaySocket serialises writes to one websocket.
type relaySocket struct {
	name string
	mu   sync.Mutex
	c    *websocket.Conn
}

func (s *relaySocket) write(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return s.c.WriteMessage(websocket.BinaryMessage, b)
}

// setExecutorKey keeps the key of an accepted register; /connect hands it to harnesses.
func (n *noiseRelay) setExecutorKey(key json.RawMessage) {
	n.mu.Lock()
	n.executorKey = key
	n.mu.Unlock()
}

// forget drops the registered key and the authorizations issued, and numbers them from 1
// again, so that one registry serves several executors in turn from the same state.
func (n *noiseRelay) forget() {
	n.mu.Lock()
	n.executorKey = nil
	n.issued = map[string]json.RawMessage{}
	n.nIssued = 0
	n.mu.Unlock()
}

// connectBundle issues an authorization for harnessKey and returns the /connect answer: the
// executor's key and registration, and the harness's relay URL. ok is false while no
// executor has registered.
func (n *noiseRelay) connectBundle(harnessKey json.RawMessage) (bundle map[string]any, ok bool) {
	n.mu.Lock()
	n.nIssued++
	auth := n.authorization(n.nIssued)
	n.issued[auth] = harnessKey
	key := n.executorKey
	n.mu.Unlock()
	if key == nil {
		return nil, false
	}
	return map[string]any{
		"environment_id":            n.envID,
		"url":                       n.ws + "/relay?role=harness",
		"security_profile":          securityProfile,
		"executor_registration_id":  registrationID,
		"executor_public_key":       key,
		"harness_key_authorization": auth,
	}, true
}

// validateProblems checks what an executor forwards to /validate (docs/remote.md §2.3)
// against what the rendezvous and /connect saw: the stream id header names a stream a harness
// opened with message 1, the registration is register's, and the authorization was issued for
// exactly that harness key. The credential headers are the caller's business.
func (n *noiseRelay) validateProblems(h http.Header, body []byte) []string {
	var v struct {
		ExecutorRegistrationID  string          `json:"executor_registration_id"`
		HarnessPublicKey        json.RawMessage `json:"harness_public_key"`
		HarnessKeyAuthorization string          `json:"harness_key_authorization"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return []string{"body: " + err.Error()}
	}
	var problems []string
	n.mu.Lock()
	defer n.mu.Unlock()
	switch id := h.Get("X-Codex-Noise-Stream-Id"); {
	case id == "":
		problems = append(problems, "missing X-Codex-Noise-Stream-Id")
	case !n.handshakes[id]:
		problems = append(problems, fmt.Sprintf("X-Codex-Noise-Stream-Id %q names no stream a harness opened", clip(id, 60)))
	}
	if v.ExecutorRegistrationID != registrationID {
		problems = append(problems, "executor_registration_id "+v.ExecutorRegistrationID)
	}
	if want, ok := n.issued[v.HarnessKeyAuthorization]; !ok {
		problems = append(problems, "unknown harness_key_authorization "+clip(v.HarnessKeyAuthorization, 40))
	} else if !jsonEqual(want, v.HarnessPublicKey) {
		problems = append(problems, "harness_public_key differs from the one sent to /connect")
	}
	return problems
}

// Close closes every rendezvous socket: http.Server.Close leaves hijacked connections open.
func (n *noiseRelay) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.executor != nil {
		n.executor.c.Close()
	}
	for _, h := range n.streams {
		h.c.Close()
	}
}

// DropHarnessSockets closes every harness socket without a close frame; the rendezvous then
// resets their streams towards the executor, as it does for any harness that goes away.
func (n *noiseRelay) DropHarnessSockets() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, h := range n.streams {
		h.c.NetConn().Close()
	}
	n.log.Printf("rendezvous: dropped all harness sockets")
}

// DropExecutorSocket closes the executor's socket without a close frame, and every harness
// socket with it (their streams lived on the executor's socket). The executor is expected to
// reconnect to the same URL; harness frames wait for it.
func (n *noiseRelay) DropExecutorSocket() {
	n.mu.Lock()
	if n.executor != nil {
		n.executor.c.NetConn().Close()
		n.executor = nil
	}
	for _, h := range n.streams {
		h.c.NetConn().Close()
	}
	n.mu.Unlock()
	n.log.Printf("rendezvous: dropped the executor socket and all harness sockets")
}

// WaitExecutor waits until the first executor rendezvous socket is connected.
func (n *noiseRelay) WaitExecutor(d time.Duration) bool {
	select {
	case <-n.executorUp:
		return true
	case <-time.After(d):
		return false
	}
}

// waitExecutorSocket returns the current executor socket, waiting up to d for one.
func (n *noiseRelay) waitExecutorSocket(d time.Duration) *relaySocket {
	deadline := time.After(d)
	for {
		n.mu.Lock()
		exec, next := n.executor, n.executorNew
		n.mu.Unlock()
		if exec != nil {
			return exec
		}
		select {
		case <-next:
		case <-deadline:
			return nil
		}
	}
}

// sockets returns how many executor and harness sockets have connected.
func (n *noiseRelay) sockets() (executor, harness int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.executorSockets, n.harnessSockets
}

var upgrader = websocket.Upgrader{
	ReadBufferSize:  64 << 10,
	WriteBufferSize: 64 << 10,
	CheckOrigin:     func(*http.Request) bool { return true },
}

// acceptRelay upgrades GET /relay?role=environment|harness and serves the socket until it
// closes, in the caller's goroutine (the HTTP handler's). upgraded, if set, is called with the
// role once the upgrade has been answered, err being the upgrade's error. Another role is
// refused as a rendezvous refuses it.
func (n *noiseRelay) acceptRelay(w http.ResponseWriter, req *http.Request, upgraded func(role string, err error)) {
	role := req.URL.Query().Get("role")
	if role != "environment" && role != "harness" {
		w.Header().Set("X-Codex-Rendezvous-Rejection-Reason", "invalid_role")
		w.WriteHeader(http.StatusForbidden)
		return
	}
	var hdr []string
	for k, v := range req.Header {
		if k != "Sec-Websocket-Key" {
			hdr = append(hdr, k+"="+strings.Join(v, ","))
		}
	}
	sort.Strings(hdr)
	c, err := upgrader.Upgrade(w, req, nil)
	if upgraded != nil {
		upgraded(role, err)
	}
	if err != nil {
		n.log.Printf("rendezvous: %s upgrade failed: %v", role, err)
		return
	}
	c.SetReadLimit(maxRelayMessage)
	n.log.Printf("rendezvous: %s socket from %s headers %v", role, req.RemoteAddr, hdr)
	if role == "environment" {
		n.serveExecutor(c)
	} else {
		n.serveHarness(c)
	}
}

// serveExecutor makes c the executor socket and forwards its frames to the harness socket of
// each frame's stream, until c closes.
func (n *noiseRelay) serveExecutor(c *websocket.Conn) {
	sock := &relaySocket{name: "executor", c: c}
	n.mu.Lock()
	n.executorSockets++
	if n.executorSockets == 1 {
		close(n.executorUp)
	}
	n.executor = sock
	close(n.executorNew)
	n.executorNew = make(chan struct{})
	n.mu.Unlock()
	c.SetPingHandler(func(p string) error {
		n.log.Printf("rendezvous: executor ping %q", p)
		sock.mu.Lock()
		defer sock.mu.Unlock()
		return c.WriteControl(websocket.PongMessage, []byte(p), time.Now().Add(5*time.Second))
	})
	defer func() {
		c.Close()
		n.mu.Lock()
		if n.executor == sock {
			n.executor = nil
		}
		n.mu.Unlock()
	}()
	for {
		typ, msg, err := c.ReadMessage()
		if err != nil {
			n.log.Printf("rendezvous: executor socket closed: %v", err)
			return
		}
		if typ != websocket.BinaryMessage {
			n.log.Printf("rendezvous: executor sent non-binary message %q", clip(string(msg), 80))
			continue
		}
		f, err := parseRelayFrame(msg)
		if err != nil {
			n.log.Printf("rendezvous: executor frame undecodable: %v", err)
			continue
		}
		n.log.Printf("relay executor->harness %d bytes: %s", len(msg), f)
		if n.onExecutorFrame != nil {
			n.onExecutorFrame(f, len(msg))
		}
		n.mu.Lock()
		h := n.streams[f.StreamID]
		n.mu.Unlock()
		if h == nil {
			n.log.Printf("rendezvous: no harness for stream %q; dropped", f.StreamID)
			continue
		}
		if err := h.write(msg); err != nil {
			n.log.Printf("rendezvous: write to harness: %v", err)
		}
	}
}

// serveHarness routes the streams c opens to it and forwards its frames to the executor
// socket, waiting for one if there is none. When c closes, its streams are reset towards the
// executor.
func (n *noiseRelay) serveHarness(c *websocket.Conn) {
	sock := &relaySocket{name: "harness", c: c}
	n.mu.Lock()
	n.harnessSockets++
	n.mu.Unlock()
	owned := map[string]bool{}
	defer func() {
		c.Close()
		n.mu.Lock()
		exec := n.executor
		for id := range owned {
			if n.streams[id] == sock {
				delete(n.streams, id)
			}
		}
		n.mu.Unlock()
		for id := range owned {
			if exec != nil {
				n.log.Printf("relay rendezvous->executor: reset stream=%q reason=%q", id, resetHarnessGone)
				exec.write(appendRelayReset(nil, id, resetHarnessGone))
			}
		}
	}()
	for {
		typ, msg, err := c.ReadMessage()
		if err != nil {
			n.log.Printf("rendezvous: harness socket closed: %v", err)
			return
		}
		if typ != websocket.BinaryMessage {
			n.log.Printf("rendezvous: harness sent non-binary message %q", clip(string(msg), 80))
			continue
		}
		f, err := parseRelayFrame(msg)
		if err != nil {
			n.log.Printf("rendezvous: harness frame undecodable: %v", err)
			continue
		}
		n.log.Printf("relay harness->executor %d bytes: %s", len(msg), f)
		if n.onHarnessFrame != nil {
			n.onHarnessFrame(f)
		}
		n.mu.Lock()
		n.streams[f.StreamID] = sock
		owned[f.StreamID] = true
		if f.Kind == "handshake" {
			n.handshakes[f.StreamID] = true
		}
		n.mu.Unlock()
		exec := n.waitExecutorSocket(15 * time.Second)
		if exec == nil {
			n.log.Printf("rendezvous: no executor socket; dropped")
			continue
		}
		if err := exec.write(msg); err != nil {
			n.log.Printf("rendezvous: write to executor: %v", err)
		}
	}
}

// registryStats are the facts the remote check asserts on.
type registryStats struct {
	Registers        int
	Connects         int
	Validates        int
	ValidatesOK      int
	ValidateProblems []string
	ExecutorSockets  int
	HarnessSockets   int
	FramesToExecutor map[string]int // kind -> count
	FramesToHarness  map[string]int
	Resets           []string // "dir stream reason"
	RegisterBody     json.RawMessage
	FrameProblems    []string            // executor frames that break docs/remote.md §4, §6
	MaxDataPayload   int                 // largest executor data record
	nextSeq          map[string]uint64   // stream -> next executor data seq
	Headers          map[string][]string // "register", "validate", "connect", "upgrade-environment", "upgrade-harness" -> sorted header names of the last one
	RequestID        string              // X-Request-Id of the executor's last upgrade
}

// testRegistry is the remote checks' registry and rendezvous: a noiseRelay behind fixed
// bearers, with statistics. The statistics are guarded by mu.
type testRegistry struct {
	log           *eventLog
	envID         string
	executorToken string // bearer expected on register and validate
	harnessToken  string // bearer expected on connect
	url           string // http://127.0.0.1:PORT

	ln    net.Listener
	srv   *http.Server
	noise *noiseRelay

	mu    sync.Mutex
	stats registryStats
}

func startTestRegistry(log *eventLog, envID, executorToken, harnessToken string) (*testRegistry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("registry listen: %w", err)
	}
	r := &testRegistry{
		log: log, envID: envID, executorToken: executorToken, harnessToken: harnessToken,
		url: "http://" + ln.Addr().String(), ln: ln,
		// A random authorization: the executor can only echo the one it was given.
		noise: newNoiseRelay(log, envID, "ws://"+ln.Addr().String(), func(int) string { return "hka-" + randomHex(16) }),
		stats: registryStats{
			FramesToExecutor: map[string]int{},
			FramesToHarness:  map[string]int{},
			Headers:          map[string][]string{},
			nextSeq:          map[string]uint64{},
		},
	}
	r.noise.onExecutorFrame = r.executorFrame
	r.noise.onHarnessFrame = r.harnessFrame
	mux := http.NewServeMux()
	base := "/cloud/environment/" + envID
	mux.HandleFunc("POST "+base+"/register", r.register)
	mux.HandleFunc("POST "+base+"/validate", r.validate)
	mux.HandleFunc("POST "+base+"/connect", r.connect)
	mux.HandleFunc("GET /relay", r.relay)
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		log.Printf("registry: unexpected %s %s", req.Method, req.URL)
		w.WriteHeader(http.StatusNotFound)
	})
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

func (r *testRegistry) Close() {
	r.srv.Close()
	r.noise.Close()
}

// DropHarnessSockets: see noiseRelay.DropHarnessSockets.
func (r *testRegistry) DropHarnessSockets() { r.noise.DropHarnessSockets() }

// DropExecutorSocket: see noiseRelay.DropExecutorSocket.
func (r *testRegistry) DropExecutorSocket() { r.noise.DropExecutorSocket() }

// WaitExecutor waits until the executor's rendezvous socket is connected.
func (r *testRegistry) WaitExecutor(d time.Duration) bool { return r.noise.WaitExecutor(d) }

// Stats returns a copy of the counters.
func (r *testRegistry) Stats() registryStats {
	executorSockets, harnessSockets := r.noise.sockets()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.ExecutorSockets, s.HarnessSockets = executorSockets, harnessSockets
	s.FramesToExecutor = copyCounts(s.FramesToExecutor)
	s.FramesToHarness = copyCounts(s.FramesToHarness)
	s.ValidateProblems = append([]string(nil), s.ValidateProblems...)
	s.Resets = append([]string(nil), s.Resets...)
	s.FrameProblems = append([]string(nil), s.FrameProblems...)
	s.nextSeq = nil
	s.Headers = make(map[string][]string, len(r.stats.Headers))
	for k, v := range r.stats.Headers {
		s.Headers[k] = v
	}
	return s
}

func copyCounts(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// executorFrame counts an executor frame and checks it against 0.169.
func (r *testRegistry) executorFrame(f relayFrame, size int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.FramesToHarness[f.Kind]++
	r.checkExecutorFrame(f, size)
	if f.Kind == "reset" {
		r.stats.Resets = append(r.stats.Resets, "executor->harness "+f.StreamID+" "+f.Reason)
	}
}

// harnessFrame counts a harness frame.
func (r *testRegistry) harnessFrame(f relayFrame) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.FramesToExecutor[f.Kind]++
	if f.Kind == "reset" {
		r.stats.Resets = append(r.stats.Resets, "harness->executor "+f.StreamID+" "+f.Reason)
	}
}

// readJSON reads a bounded request body, logs it with its auth header and decodes it.
func (r *testRegistry) readJSON(req *http.Request, v any) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxRegistryBody))
	if err != nil {
		return nil, err
	}
	var hdr []string
	for k, v := range req.Header {
		hdr = append(hdr, k+"="+strings.Join(v, ","))
	}
	sort.Strings(hdr)
	r.recordHeaders(path.Base(req.URL.Path), req.Header)
	r.log.Printf("registry: %s %s [%s] body=%s", req.Method, req.URL.Path, strings.Join(hdr, " "), clip(string(body), 300))
	return body, json.Unmarshal(body, v)
}

// Limits of docs/remote.md §5.5 and §6 as 0.169 emits them.
const (
	maxRecordCiphertext = 61440 + 16 // 60 KiB plaintext + AES-GCM tag
	emptyMsg2Len        = 3424       // handshake message 2 with an empty payload
)

// checkExecutorFrame checks one executor->harness frame against what 0.169 emits: version 1,
// no ack fields, data seq from 0 with +1 steps per stream, one segment per record, records of
// at most 60 KiB plaintext, msg2 of 3424 bytes. Called with r.mu held.
func (r *testRegistry) checkExecutorFrame(f relayFrame, size int) {
	bad := func(format string, args ...any) {
		if len(r.stats.FrameProblems) < 20 {
			r.stats.FrameProblems = append(r.stats.FrameProblems, fmt.Sprintf(format, args...)+": "+f.String())
		}
	}
	if f.Version != 1 || f.Ack != 0 || f.AckBits != 0 || len(f.Unknown) > 0 {
		bad("header fields differ from 0.169")
	}
	if size > maxRelayMessage {
		bad("message of %d bytes over the 256 KiB relay cap", size)
	}
	switch f.Kind {
	case "handshake":
		r.stats.nextSeq[f.StreamID] = 0
		if f.PayloadLen != emptyMsg2Len {
			bad("msg2 is %d bytes, 0.169 sends %d", f.PayloadLen, emptyMsg2Len)
		}
	case "data":
		if want := r.stats.nextSeq[f.StreamID]; f.Seq != want {
			bad("seq %d, want %d", f.Seq, want)
		}
		r.stats.nextSeq[f.StreamID] = f.Seq + 1
		if f.SegIndex != 0 || f.SegCount != 1 {
			bad("segmented record")
		}
		if f.PayloadLen == 0 || f.PayloadLen > maxRecordCiphertext {
			bad("record of %d bytes", f.PayloadLen)
		}
		r.stats.MaxDataPayload = max(r.stats.MaxDataPayload, f.PayloadLen)
	case "reset":
		if f.Reason != "noise_relay_protocol_error" {
			bad("reset reason %q", f.Reason)
		}
	default:
		bad("0.169's executor never sends %s", f.Kind)
	}
}

// recordHeaders keeps the sorted header names of the latest request of one kind.
func (r *testRegistry) recordHeaders(kind string, h http.Header) {
	var names []string
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	r.mu.Lock()
	r.stats.Headers[kind] = names
	r.mu.Unlock()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func bearerIs(req *http.Request, token string) bool {
	return req.Header.Get("Authorization") == "Bearer "+token
}

func (r *testRegistry) register(w http.ResponseWriter, req *http.Request) {
	var body struct {
		SecurityProfile   string          `json:"security_profile"`
		ExecutorPublicKey json.RawMessage `json:"executor_public_key"`
	}
	raw, err := r.readJSON(req, &body)
	if err != nil || !bearerIs(req, r.executorToken) || body.SecurityProfile != securityProfile || len(body.ExecutorPublicKey) == 0 {
		r.log.Printf("registry: register rejected (err=%v)", err)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"code": "bad_request", "message": "bad register"}})
		return
	}
	r.mu.Lock()
	r.stats.Registers++
	r.stats.RegisterBody = raw
	r.mu.Unlock()
	r.noise.setExecutorKey(body.ExecutorPublicKey)
	writeJSON(w, http.StatusOK, map[string]string{
		"environment_id":           r.envID,
		"url":                      r.noise.ws + "/relay?role=environment",
		"security_profile":         securityProfile,
		"executor_registration_id": registrationID,
	})
}

func (r *testRegistry) connect(w http.ResponseWriter, req *http.Request) {
	var body struct {
		HarnessPublicKey json.RawMessage `json:"harness_public_key"`
	}
	if _, err := r.readJSON(req, &body); err != nil || !bearerIs(req, r.harnessToken) || len(body.HarnessPublicKey) == 0 {
		r.log.Printf("registry: connect rejected (err=%v)", err)
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]string{"code": "unauthorized", "message": "bad connect"}})
		return
	}
	r.mu.Lock()
	r.stats.Connects++
	r.mu.Unlock()
	bundle, ok := r.noise.connectBundle(body.HarnessPublicKey)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]string{"code": "not_registered", "message": "no executor"}})
		return
	}
	writeJSON(w, http.StatusOK, bundle)
}

func (r *testRegistry) validate(w http.ResponseWriter, req *http.Request) {
	var v any
	raw, err := r.readJSON(req, &v)
	var problems []string
	if err != nil {
		problems = append(problems, "body: "+err.Error())
	} else {
		if !bearerIs(req, r.executorToken) {
			problems = append(problems, "bearer "+req.Header.Get("Authorization"))
		}
		problems = append(problems, r.noise.validateProblems(req.Header, raw)...)
	}
	r.mu.Lock()
	r.stats.Validates++
	if len(problems) == 0 {
		r.stats.ValidatesOK++
	}
	r.stats.ValidateProblems = append(r.stats.ValidateProblems, problems...)
	r.mu.Unlock()
	if len(problems) > 0 {
		r.log.Printf("registry: validate problems: %v", problems)
	}
	writeJSON(w, http.StatusOK, map[string]bool{"valid": len(problems) == 0})
}

func (r *testRegistry) relay(w http.ResponseWriter, req *http.Request) {
	r.noise.acceptRelay(w, req, func(role string, _ error) {
		r.recordHeaders("upgrade-"+role, req.Header)
		if role == "environment" {
			r.mu.Lock()
			r.stats.RequestID = req.Header.Get("X-Request-Id")
			r.mu.Unlock()
		}
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// jsonEqual compares two JSON documents after re-encoding (key order and spacing ignored).
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
