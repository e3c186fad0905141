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

// testRegistry is the registry and rendezvous. All state is guarded by mu.
type testRegistry struct {
	log           *eventLog
	envID         string
	executorToken string // bearer expected on register and validate
	harnessToken  string // bearer expected on connect
	url           string // http://127.0.0.1:PORT

	ln  net.Listener
	srv *http.Server

	mu          sync.Mutex
	stats       registryStats
	executorKey json.RawMessage            // as registered
	issued      map[string]json.RawMessage // harness_key_authorization -> harness_public_key
	executor    *relaySocket
	executorUp  chan struct{}           // closed when the first executor socket is up
	executorNew chan struct{}           // closed and replaced whenever an executor socket comes up
	streams     map[string]*relaySocket // stream id -> harness socket
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

func startTestRegistry(log *eventLog, envID, executorToken, harnessToken string) (*testRegistry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("registry listen: %w", err)
	}
	r := &testRegistry{
		log: log, envID: envID, executorToken: executorToken, harnessToken: harnessToken,
		url: "http://" + ln.Addr().String(), ln: ln,
		issued:      map[string]json.RawMessage{},
		streams:     map[string]*relaySocket{},
		executorUp:  make(chan struct{}),
		executorNew: make(chan struct{}),
		stats: registryStats{
			FramesToExecutor: map[string]int{},
			FramesToHarness:  map[string]int{},
			Headers:          map[string][]string{},
			nextSeq:          map[string]uint64{},
		},
	}
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
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.executor != nil {
		r.executor.c.Close()
	}
	for _, h := range r.streams {
		h.c.Close()
	}
}

// DropHarnessSockets closes every harness socket without a close frame; the rendezvous then
// resets their streams towards the executor, as it does for any harness that goes away.
func (r *testRegistry) DropHarnessSockets() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.streams {
		h.c.NetConn().Close()
	}
	r.log.Printf("rendezvous: dropped all harness sockets")
}

// DropExecutorSocket closes the executor's socket without a close frame, and every harness
// socket with it (their streams lived on the executor's socket). The executor is expected to
// reconnect to the same URL; harness frames wait for it.
func (r *testRegistry) DropExecutorSocket() {
	r.mu.Lock()
	if r.executor != nil {
		r.executor.c.NetConn().Close()
		r.executor = nil
	}
	for _, h := range r.streams {
		h.c.NetConn().Close()
	}
	r.mu.Unlock()
	r.log.Printf("rendezvous: dropped the executor socket and all harness sockets")
}

// waitExecutorSocket returns the current executor socket, waiting up to d for one.
func (r *testRegistry) waitExecutorSocket(d time.Duration) *relaySocket {
	deadline := time.After(d)
	for {
		r.mu.Lock()
		exec, next := r.executor, r.executorNew
		r.mu.Unlock()
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

// Stats returns a copy of the counters.
func (r *testRegistry) Stats() registryStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
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

// WaitExecutor waits until the executor's rendezvous socket is connected.
func (r *testRegistry) WaitExecutor(d time.Duration) bool {
	select {
	case <-r.executorUp:
		return true
	case <-time.After(d):
		return false
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
	r.executorKey = body.ExecutorPublicKey
	r.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{
		"environment_id":           r.envID,
		"url":                      "ws://" + r.ln.Addr().String() + "/relay?role=environment",
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
	auth := "hka-" + randomHex(16)
	r.mu.Lock()
	r.stats.Connects++
	r.issued[auth] = body.HarnessPublicKey
	key := r.executorKey
	r.mu.Unlock()
	if key == nil {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]string{"code": "not_registered", "message": "no executor"}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"environment_id":            r.envID,
		"url":                       "ws://" + r.ln.Addr().String() + "/relay?role=harness",
		"security_profile":          securityProfile,
		"executor_registration_id":  registrationID,
		"executor_public_key":       key,
		"harness_key_authorization": auth,
	})
}

func (r *testRegistry) validate(w http.ResponseWriter, req *http.Request) {
	var body struct {
		ExecutorRegistrationID  string          `json:"executor_registration_id"`
		HarnessPublicKey        json.RawMessage `json:"harness_public_key"`
		HarnessKeyAuthorization string          `json:"harness_key_authorization"`
	}
	_, err := r.readJSON(req, &body)
	var problems []string
	switch {
	case err != nil:
		problems = append(problems, "body: "+err.Error())
	default:
		if !bearerIs(req, r.executorToken) {
			problems = append(problems, "bearer "+req.Header.Get("Authorization"))
		}
		if req.Header.Get("X-Codex-Noise-Stream-Id") == "" {
			problems = append(problems, "missing X-Codex-Noise-Stream-Id")
		}
		if body.ExecutorRegistrationID != registrationID {
			problems = append(problems, "executor_registration_id "+body.ExecutorRegistrationID)
		}
		r.mu.Lock()
		want, ok := r.issued[body.HarnessKeyAuthorization]
		r.mu.Unlock()
		if !ok {
			problems = append(problems, "unknown harness_key_authorization "+clip(body.HarnessKeyAuthorization, 40))
		} else if !jsonEqual(want, body.HarnessPublicKey) {
			problems = append(problems, "harness_public_key differs from the one sent to /connect")
		}
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

var upgrader = websocket.Upgrader{
	ReadBufferSize:  64 << 10,
	WriteBufferSize: 64 << 10,
	CheckOrigin:     func(*http.Request) bool { return true },
}

func (r *testRegistry) relay(w http.ResponseWriter, req *http.Request) {
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
	r.recordHeaders("upgrade-"+role, req.Header)
	if role == "environment" {
		r.mu.Lock()
		r.stats.RequestID = req.Header.Get("X-Request-Id")
		r.mu.Unlock()
	}
	c, err := upgrader.Upgrade(w, req, nil)
	if err != nil {
		r.log.Printf("rendezvous: %s upgrade failed: %v", role, err)
		return
	}
	c.SetReadLimit(maxRelayMessage)
	r.log.Printf("rendezvous: %s socket from %s headers %v", role, req.RemoteAddr, hdr)
	if role == "environment" {
		r.serveExecutor(c)
	} else {
		r.serveHarness(c)
	}
}

func (r *testRegistry) serveExecutor(c *websocket.Conn) {
	sock := &relaySocket{name: "executor", c: c}
	r.mu.Lock()
	r.stats.ExecutorSockets++
	if r.stats.ExecutorSockets == 1 {
		close(r.executorUp)
	}
	r.executor = sock
	close(r.executorNew)
	r.executorNew = make(chan struct{})
	r.mu.Unlock()
	c.SetPingHandler(func(p string) error {
		r.log.Printf("rendezvous: executor ping %q", p)
		sock.mu.Lock()
		defer sock.mu.Unlock()
		return c.WriteControl(websocket.PongMessage, []byte(p), time.Now().Add(5*time.Second))
	})
	defer func() {
		c.Close()
		r.mu.Lock()
		if r.executor == sock {
			r.executor = nil
		}
		r.mu.Unlock()
	}()
	for {
		typ, msg, err := c.ReadMessage()
		if err != nil {
			r.log.Printf("rendezvous: executor socket closed: %v", err)
			return
		}
		if typ != websocket.BinaryMessage {
			r.log.Printf("rendezvous: executor sent non-binary message %q", clip(string(msg), 80))
			continue
		}
		f, err := parseRelayFrame(msg)
		if err != nil {
			r.log.Printf("rendezvous: executor frame undecodable: %v", err)
			continue
		}
		r.log.Printf("relay executor->harness %d bytes: %s", len(msg), f)
		r.mu.Lock()
		r.stats.FramesToHarness[f.Kind]++
		r.checkExecutorFrame(f, len(msg))
		if f.Kind == "reset" {
			r.stats.Resets = append(r.stats.Resets, "executor->harness "+f.StreamID+" "+f.Reason)
		}
		h := r.streams[f.StreamID]
		r.mu.Unlock()
		if h == nil {
			r.log.Printf("rendezvous: no harness for stream %q; dropped", f.StreamID)
			continue
		}
		if err := h.write(msg); err != nil {
			r.log.Printf("rendezvous: write to harness: %v", err)
		}
	}
}

func (r *testRegistry) serveHarness(c *websocket.Conn) {
	sock := &relaySocket{name: "harness", c: c}
	r.mu.Lock()
	r.stats.HarnessSockets++
	r.mu.Unlock()
	owned := map[string]bool{}
	defer func() {
		c.Close()
		r.mu.Lock()
		exec := r.executor
		for id := range owned {
			if r.streams[id] == sock {
				delete(r.streams, id)
			}
		}
		r.mu.Unlock()
		for id := range owned {
			if exec != nil {
				r.log.Printf("relay rendezvous->executor: reset stream=%q reason=%q", id, resetHarnessGone)
				exec.write(appendRelayReset(nil, id, resetHarnessGone))
			}
		}
	}()
	for {
		typ, msg, err := c.ReadMessage()
		if err != nil {
			r.log.Printf("rendezvous: harness socket closed: %v", err)
			return
		}
		if typ != websocket.BinaryMessage {
			r.log.Printf("rendezvous: harness sent non-binary message %q", clip(string(msg), 80))
			continue
		}
		f, err := parseRelayFrame(msg)
		if err != nil {
			r.log.Printf("rendezvous: harness frame undecodable: %v", err)
			continue
		}
		r.log.Printf("relay harness->executor %d bytes: %s", len(msg), f)
		r.mu.Lock()
		r.stats.FramesToExecutor[f.Kind]++
		if f.Kind == "reset" {
			r.stats.Resets = append(r.stats.Resets, "harness->executor "+f.StreamID+" "+f.Reason)
		}
		r.streams[f.StreamID] = sock
		owned[f.StreamID] = true
		r.mu.Unlock()
		exec := r.waitExecutorSocket(15 * time.Second)
		if exec == nil {
			r.log.Printf("rendezvous: no executor socket; dropped")
			continue
		}
		if err := exec.write(msg); err != nil {
			r.log.Printf("rendezvous: write to executor: %v", err)
		}
	}
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
