package main

// Remote mode: the executor side of the Codex rendezvous relay (relay.md §3, §4, §6, §7).
//
// A host that nobody can dial registers with a registry (registry.go), keeps ONE websocket to
// the rendezvous the registry names, and serves every harness that the rendezvous routes to it.
// The rendezvous multiplexes many harness "streams" over that one physical socket; it sees only
// routing metadata and ciphertext, because each stream is an end-to-end Noise channel
// (noise.go) whose plaintext is the same JSON-RPC the local websocket carries (rpc.go).
//
// Protocol flow on the physical socket (binary websocket messages, one frame each; the
// executor never speaks first):
//
//	harness -> Resume{S}                 claims S at the rendezvous; ignored here
//	harness -> Handshake{S, msg1}        Noise msg1; its payload is the harness key authorization
//	           (registry /validate of the harness static key + authorization, X-Codex-Noise-Stream-Id: S)
//	executor-> Handshake{S, msg2}        empty payload, or the 401 rejection payload (no stream)
//	both    <> Data{S, seq, record}      seq n = Noise nonce n, per direction, from 0
//	either  -> Reset{S, reason}          tears down S only; ours always says noise_relay_protocol_error
//
// Wire format: protobuf message codex.exec_server.relay.v1.RelayMessageFrame (proto3),
// hand-encoded below. Tags are (field<<3)|wiretype; uint32 is a varint (wire type 0);
// strings, bytes and sub-messages are length-delimited (wire type 2).
//
//	RelayMessageFrame
//	  1  version    uint32          must be 1; other versions are dropped, socket kept
//	  2  stream_id  string          non-blank routing key; also in the Noise prologue
//	  3  ack        uint32          always 0 in 0.169; ignored
//	  4  ack_bits   uint32          always 0 in 0.169; ignored
//	  oneof body (exactly one; the chosen one is written even when empty: 3a 00 = empty resume)
//	  5  data       RelayData       1 seq uint32, 2 segment_index uint32 (must be 0),
//	                                3 segment_count uint32 (must be 1), 4 payload bytes (non-empty)
//	  6  ack_frame  RelayAck        (no fields); ignored, never sent
//	  7  resume     RelayResume     1 next_seq uint32; ignored, never sent
//	  8  reset      RelayReset      1 reason string (non-empty; unauthenticated, never trusted)
//	  9  heartbeat  RelayHeartbeat  (no fields); ignored, never sent
//	  10 handshake  RelayHandshake  1 payload bytes (non-empty Noise message)
//
// Encoders write fields in ascending order and omit zero scalars and empty strings/bytes, as
// prost does, so frames are byte-identical to 0.169's (testdata/relay/*.txt). Decoders accept
// any order, skip unknown fields of wire types 0, 1, 2 and 5 (0.169 accepts unknown 11, 12 and
// 15), merge a repeated body field and let a later oneof member replace an earlier one.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Field numbers of RelayMessageFrame and its bodies (relay.md §4).
const (
	relayFieldVersion   = 1
	relayFieldStreamID  = 2
	relayFieldAck       = 3
	relayFieldAckBits   = 4
	relayFieldData      = 5
	relayFieldAckFrame  = 6
	relayFieldResume    = 7
	relayFieldReset     = 8
	relayFieldHeartbeat = 9
	relayFieldHandshake = 10

	relayDataFieldSeq          = 1 // RelayData
	relayDataFieldSegmentIndex = 2
	relayDataFieldSegmentCount = 3
	relayDataFieldPayload      = 4
	relayResumeFieldNextSeq    = 1 // RelayResume
	relayResetFieldReason      = 1 // RelayReset
	relayHandshakeFieldPayload = 1 // RelayHandshake
)

// Protobuf wire types used by the relay schema.
const (
	wireVarint     = 0
	wireFixed64    = 1
	wireBytes      = 2
	wireStartGroup = 3 // proto2 only; skipped when unknown
	wireEndGroup   = 4
	wireFixed32    = 5

	relayMaxGroupDepth = 100 // prost's recursion limit
)

// Limits and constants of the relay (relay.md §3, §6; the numbers 0.169 and its source use).
const (
	relayFrameVersion = 1 // the only RelayMessageFrame version

	// relayMaxMessage caps one websocket message (= one frame). A bigger message drops the
	// whole physical connection, as in 0.169 ("Space limit exceeded").
	relayMaxMessage = 256 << 10

	relayMaxActiveStreams      = 128 // streams per physical socket, handshaking or active
	relayMaxPendingValidations = 32  // registry /validate calls in flight per physical socket
	relayMaxFailedHandshakes   = 8   // failures per physical socket before a pause

	// relayResetReason is the only reason this executor ever sends.
	relayResetReason = "noise_relay_protocol_error"
)

// relayBody says which member of the oneof body a frame carries.
type relayBody uint8

const (
	relayBodyNone relayBody = iota
	relayBodyData
	relayBodyAck
	relayBodyResume
	relayBodyReset
	relayBodyHeartbeat
	relayBodyHandshake
)

var relayBodyNames = [...]string{"none", "data", "ack_frame", "resume", "reset", "heartbeat", "handshake"}

func (b relayBody) String() string {
	if int(b) < len(relayBodyNames) {
		return relayBodyNames[b]
	}
	return fmt.Sprintf("body(%d)", uint8(b))
}

// relayFrame is a decoded RelayMessageFrame, flattened: only the fields of the body named by
// body are meaningful. After decodeRelayFrame, payload aliases the input buffer.
type relayFrame struct {
	version  uint32
	streamID string
	ack      uint32
	ackBits  uint32
	body     relayBody

	seq          uint32 // data
	segmentIndex uint32 // data
	segmentCount uint32 // data
	nextSeq      uint32 // resume
	reason       string // reset
	payload      []byte // data or handshake
}

// errRelayFrame marks a frame that is not valid protobuf for the schema; such frames are
// dropped, never answered (relay.md §4.2).
var errRelayFrame = errors.New("malformed relay frame")

// appendVarint and friends are the whole protobuf encoder the relay needs.
func appendVarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendTag(b []byte, field, wire int) []byte {
	return appendVarint(b, uint64(field)<<3|uint64(wire))
}

func appendUint32Field(b []byte, field int, v uint32) []byte {
	if v == 0 {
		return b
	}
	return appendVarint(appendTag(b, field, wireVarint), uint64(v))
}

func appendBytesField(b []byte, field int, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = appendVarint(appendTag(b, field, wireBytes), uint64(len(v)))
	return append(b, v...)
}

func appendStringField(b []byte, field int, v string) []byte {
	if v == "" {
		return b
	}
	b = appendVarint(appendTag(b, field, wireBytes), uint64(len(v)))
	return append(b, v...)
}

func varintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func uint32FieldLen(field int, v uint32) int {
	if v == 0 {
		return 0
	}
	return varintLen(uint64(field)<<3) + varintLen(uint64(v))
}

func bytesFieldLen(field, n int) int {
	if n == 0 {
		return 0
	}
	return varintLen(uint64(field)<<3) + varintLen(uint64(n)) + n
}

// bodyLen is the encoded size of the frame's body message (without its own tag and length).
func (f *relayFrame) bodyLen() int {
	switch f.body {
	case relayBodyData:
		return uint32FieldLen(relayDataFieldSeq, f.seq) +
			uint32FieldLen(relayDataFieldSegmentIndex, f.segmentIndex) +
			uint32FieldLen(relayDataFieldSegmentCount, f.segmentCount) +
			bytesFieldLen(relayDataFieldPayload, len(f.payload))
	case relayBodyResume:
		return uint32FieldLen(relayResumeFieldNextSeq, f.nextSeq)
	case relayBodyReset:
		return bytesFieldLen(relayResetFieldReason, len(f.reason))
	case relayBodyHandshake:
		return bytesFieldLen(relayHandshakeFieldPayload, len(f.payload))
	}
	return 0
}

var relayBodyFields = [...]int{
	relayBodyData:      relayFieldData,
	relayBodyAck:       relayFieldAckFrame,
	relayBodyResume:    relayFieldResume,
	relayBodyReset:     relayFieldReset,
	relayBodyHeartbeat: relayFieldHeartbeat,
	relayBodyHandshake: relayFieldHandshake,
}

// appendRelayFrame appends f in prost's encoding: ascending field order, zero scalars and
// empty strings omitted, the chosen body always present. It sizes the body first so a Data
// frame costs one append of its payload and no intermediate buffer.
func appendRelayFrame(b []byte, f *relayFrame) []byte {
	b = appendUint32Field(b, relayFieldVersion, f.version)
	b = appendStringField(b, relayFieldStreamID, f.streamID)
	b = appendUint32Field(b, relayFieldAck, f.ack)
	b = appendUint32Field(b, relayFieldAckBits, f.ackBits)
	if f.body == relayBodyNone || int(f.body) >= len(relayBodyFields) {
		return b
	}
	b = appendTag(b, relayBodyFields[f.body], wireBytes)
	b = appendVarint(b, uint64(f.bodyLen()))
	switch f.body {
	case relayBodyData:
		b = appendUint32Field(b, relayDataFieldSeq, f.seq)
		b = appendUint32Field(b, relayDataFieldSegmentIndex, f.segmentIndex)
		b = appendUint32Field(b, relayDataFieldSegmentCount, f.segmentCount)
		b = appendBytesField(b, relayDataFieldPayload, f.payload)
	case relayBodyResume:
		b = appendUint32Field(b, relayResumeFieldNextSeq, f.nextSeq)
	case relayBodyReset:
		b = appendStringField(b, relayResetFieldReason, f.reason)
	case relayBodyHandshake:
		b = appendBytesField(b, relayHandshakeFieldPayload, f.payload)
	}
	return b
}

// protoReader walks one protobuf message. Every read checks bounds before slicing, so a
// hostile length can never make it allocate or panic.
type protoReader struct{ b []byte }

func (r *protoReader) varint() (uint64, error) {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		return 0, fmt.Errorf("%w: bad varint", errRelayFrame)
	}
	r.b = r.b[n:]
	return v, nil
}

// next returns the next field number and wire type.
func (r *protoReader) next() (field int, wire int, err error) {
	t, err := r.varint()
	if err != nil {
		return 0, 0, err
	}
	field, wire = int(t>>3), int(t&7)
	if t>>3 == 0 || t>>3 > 1<<29-1 {
		return 0, 0, fmt.Errorf("%w: field number %d", errRelayFrame, t>>3)
	}
	return field, wire, nil
}

func (r *protoReader) bytes() ([]byte, error) {
	n, err := r.varint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)) {
		return nil, fmt.Errorf("%w: length %d exceeds the %d bytes left", errRelayFrame, n, len(r.b))
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v, nil
}

// skip consumes the value of an unknown field. Like prost, it also skips proto2 groups
// (wire types 3 and 4), nested at most relayMaxGroupDepth deep.
func (r *protoReader) skip(field, wire int) error {
	var open [relayMaxGroupDepth]int // field numbers of the groups being skipped
	depth := 0
	for {
		switch wire {
		case wireVarint:
			if _, err := r.varint(); err != nil {
				return err
			}
		case wireFixed64, wireFixed32:
			n := 8
			if wire == wireFixed32 {
				n = 4
			}
			if len(r.b) < n {
				return fmt.Errorf("%w: truncated fixed field", errRelayFrame)
			}
			r.b = r.b[n:]
		case wireBytes:
			if _, err := r.bytes(); err != nil {
				return err
			}
		case wireStartGroup:
			if depth == relayMaxGroupDepth {
				return fmt.Errorf("%w: groups nested too deep", errRelayFrame)
			}
			open[depth] = field
			depth++
		case wireEndGroup:
			if depth == 0 || open[depth-1] != field {
				return fmt.Errorf("%w: unmatched end of group %d", errRelayFrame, field)
			}
			depth--
		default:
			return fmt.Errorf("%w: wire type %d", errRelayFrame, wire)
		}
		if depth == 0 {
			return nil
		}
		var err error
		if field, wire, err = r.next(); err != nil {
			return err
		}
	}
}

// uint32Value reads a known uint32 field; like prost and protowire, it keeps the low 32 bits.
func (r *protoReader) uint32Value(wire int) (uint32, error) {
	if wire != wireVarint {
		return 0, fmt.Errorf("%w: wire type %d for a uint32", errRelayFrame, wire)
	}
	v, err := r.varint()
	return uint32(v), err
}

func (r *protoReader) bytesValue(wire int) ([]byte, error) {
	if wire != wireBytes {
		return nil, fmt.Errorf("%w: wire type %d for a length-delimited field", errRelayFrame, wire)
	}
	return r.bytes()
}

// stringValue reads a proto3 string, which must be UTF-8.
func (r *protoReader) stringValue(wire int) (string, error) {
	v, err := r.bytesValue(wire)
	if err != nil {
		return "", err
	}
	if !utf8.Valid(v) {
		return "", fmt.Errorf("%w: string is not UTF-8", errRelayFrame)
	}
	return string(v), nil
}

// decodeRelayFrame parses one RelayMessageFrame. It checks the encoding only; the relay's
// rules (relay.md §4.2) are checkRelayFrame's job. The returned payload aliases b.
func decodeRelayFrame(b []byte) (relayFrame, error) {
	var f relayFrame
	r := protoReader{b}
	for len(r.b) > 0 {
		field, wire, err := r.next()
		if err != nil {
			return relayFrame{}, err
		}
		switch field {
		case relayFieldVersion:
			f.version, err = r.uint32Value(wire)
		case relayFieldStreamID:
			f.streamID, err = r.stringValue(wire)
		case relayFieldAck:
			f.ack, err = r.uint32Value(wire)
		case relayFieldAckBits:
			f.ackBits, err = r.uint32Value(wire)
		case relayFieldData, relayFieldAckFrame, relayFieldResume, relayFieldReset,
			relayFieldHeartbeat, relayFieldHandshake:
			var body []byte
			if body, err = r.bytesValue(wire); err == nil {
				err = f.mergeBody(relayBody(field-relayFieldData+1), body)
			}
		default:
			err = r.skip(field, wire)
		}
		if err != nil {
			return relayFrame{}, err
		}
	}
	return f, nil
}

// mergeBody decodes one occurrence of a oneof member. As in protobuf, a repeated occurrence of
// the same member merges into it and a different member replaces it.
func (f *relayFrame) mergeBody(kind relayBody, b []byte) error {
	if f.body != kind {
		f.seq, f.segmentIndex, f.segmentCount, f.nextSeq, f.reason, f.payload = 0, 0, 0, 0, "", nil
		f.body = kind
	}
	r := protoReader{b}
	for len(r.b) > 0 {
		field, wire, err := r.next()
		if err != nil {
			return err
		}
		switch {
		case kind == relayBodyData && field == relayDataFieldSeq:
			f.seq, err = r.uint32Value(wire)
		case kind == relayBodyData && field == relayDataFieldSegmentIndex:
			f.segmentIndex, err = r.uint32Value(wire)
		case kind == relayBodyData && field == relayDataFieldSegmentCount:
			f.segmentCount, err = r.uint32Value(wire)
		case kind == relayBodyData && field == relayDataFieldPayload,
			kind == relayBodyHandshake && field == relayHandshakeFieldPayload:
			f.payload, err = r.bytesValue(wire)
		case kind == relayBodyResume && field == relayResumeFieldNextSeq:
			f.nextSeq, err = r.uint32Value(wire)
		case kind == relayBodyReset && field == relayResetFieldReason:
			f.reason, err = r.stringValue(wire)
		default:
			err = r.skip(field, wire)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkRelayFrame applies the receive rules of relay.md §4.2. A non-nil error means "drop the
// frame and keep the socket"; it never names payload bytes.
func checkRelayFrame(f *relayFrame) error {
	switch {
	case f.version != relayFrameVersion:
		return fmt.Errorf("relay frame version %d is not %d", f.version, relayFrameVersion)
	case strings.TrimSpace(f.streamID) == "":
		return errors.New("relay frame has a blank stream_id")
	case f.body == relayBodyNone:
		return errors.New("relay frame has no body")
	}
	switch f.body {
	case relayBodyData:
		if f.segmentIndex != 0 || f.segmentCount != 1 {
			return fmt.Errorf("relay data segment %d/%d is not 0/1", f.segmentIndex, f.segmentCount)
		}
		if len(f.payload) == 0 {
			return errors.New("relay data has an empty payload")
		}
	case relayBodyHandshake:
		if len(f.payload) == 0 {
			return errors.New("relay handshake has an empty payload")
		}
	case relayBodyReset:
		if f.reason == "" {
			return errors.New("relay reset has an empty reason")
		}
	}
	return nil
}

// runRemote serves srv through the rendezvous relay until ctx ends (nil) or a permanent
// failure (an error for main to print): a registry that refuses the credential or answers
// nonsense, or a credential stream that ends.
func runRemote(ctx context.Context, cfg *remoteConfig, srv *server, stdin io.Reader, log *slog.Logger) error {
	var (
		id  *noiseIdentity
		err error
	)
	if cfg.identityFile != "" {
		id, err = loadOrCreateNoiseIdentity(cfg.identityFile, rand.Reader)
	} else {
		id, err = newNoiseIdentity(rand.Reader)
	}
	if err != nil {
		return err
	}
	creds, err := cfg.startCredentials(ctx, stdin, log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { // a dead credential stream ends remote mode, as in 0.169
		defer close(watchDone)
		select {
		case <-creds.dead:
			cancel()
		case <-ctx.Done():
		}
	}()
	defer func() { cancel(); <-watchDone }()
	reg := newRegistryClient(cfg, creds, log)
	defer reg.close()
	x := &relayExecutor{timings: cfg.relayTimings(), id: id, registry: reg, srv: srv, log: log, tls: cfg.tlsConfig()}
	log.Info("remote mode", "registry", cfg.base, "environment_id", cfg.environmentID, "name", cfg.name)
	err = x.run(ctx)
	if _, cerr := creds.bearer(); cerr != nil {
		return cerr
	}
	return err
}

// relayExecutor keeps the executor registered and connected, reconnecting for ever.
type relayExecutor struct {
	timings  relayTimings
	id       *noiseIdentity
	registry *registryClient
	srv      *server
	log      *slog.Logger
	tls      *tls.Config
}

func (x *relayExecutor) run(ctx context.Context) error {
	bo := &backoff{p: x.timings.backoff}
	reg, err := x.registry.registerWithRetry(ctx, x.id.publicKey(), bo)
	if err != nil {
		return quietCancel(ctx, err)
	}
	for attempt := 1; ; attempt++ {
		requestID := newRendezvousRequestID()
		x.log.Info("connecting to the rendezvous", "connection_attempt", attempt, "request_id", requestID)
		ws, resp, err := dialWebsocket(ctx, reg.url, http.Header{"X-Request-Id": {requestID}}, x.tls,
			wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage, pingInterval: x.timings.pingInterval, pongTimeout: x.timings.pongTimeout})
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			start := time.Now()
			x.log.Info("connected to the rendezvous", "connection_attempt", attempt, "request_id", requestID)
			err = newRelaySocket(ctx, x, reg, ws).serve()
			x.log.Info("rendezvous connection ended", "connection_attempt", attempt, "error", errString(err))
			if time.Since(start) >= x.timings.stableConnection {
				bo.reset()
			}
		case resp != nil && rendezvousWantsRegistration(resp):
			x.log.Info("rendezvous refused the connection; registering again", "status", resp.StatusCode,
				"reason", rendezvousRejection(resp))
			if reg, err = x.registry.registerWithRetry(ctx, x.id.publicKey(), bo); err != nil {
				return quietCancel(ctx, err)
			}
		default:
			x.log.Info("rendezvous connection failed", "connection_attempt", attempt, "error", scrubURL(err, reg.url))
		}
		d := bo.next(0)
		x.log.Info("reconnecting to the rendezvous", "retry_in", d.Round(time.Millisecond))
		if sleepCtx(ctx, d) != nil {
			return nil
		}
	}
}

// quietCancel turns an error caused by ctx ending into nil.
func quietCancel(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// rendezvousRejectionHeader carries why the rendezvous refused an upgrade (relay.md §2.7).
const rendezvousRejectionHeader = "X-Codex-Rendezvous-Rejection-Reason"

// rendezvousRejections are the reasons 0.169 knows by name; each means the URL from the
// registration is no longer good, so the executor registers again.
var rendezvousRejections = map[string]bool{
	"missing_role": true, "invalid_role": true, "pod_draining": true, "missing_expiry": true,
	"invalid_expiry": true, "invalid_secret": true, "missing_signature": true,
	"invalid_signature": true, "extra_query_param": true, "route_unavailable": true,
	"missing_version": true, "malformed_query": true,
	"unexpected_executor_registration_id": true, "unknown_route": true,
	"wrong_rendezvous_cluster": true,
}

func rendezvousRejection(resp *http.Response) string {
	r := resp.Header.Get(rendezvousRejectionHeader)
	if rendezvousRejections[r] {
		return r
	}
	return ""
}

// rendezvousWantsRegistration reports whether a refused upgrade calls for a fresh URL: 403,
// 404, 409 or a named rejection reason. Other refusals retry the same URL.
func rendezvousWantsRegistration(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusForbidden, http.StatusNotFound, http.StatusConflict:
		return true
	}
	return rendezvousRejection(resp) != ""
}

// scrubURL renders err without the rendezvous URL's query, which carries its credential.
func scrubURL(err error, rawURL string) string {
	msg := err.Error()
	u, perr := url.Parse(rawURL)
	if perr != nil || u.RawQuery == "" {
		return msg
	}
	full := u.Redacted()
	u.RawQuery = "REDACTED"
	return strings.ReplaceAll(msg, full, u.Redacted())
}

func newRendezvousRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	return rendezvousRequestIDPrefix + hex.EncodeToString(b[:])
}

// relaySocket serves one physical rendezvous websocket: it demultiplexes frames by stream_id
// and owns every stream goroutine it starts, which all end before serve returns.
type relaySocket struct {
	x      *relayExecutor
	reg    *registration
	ws     *wsConn
	ctx    context.Context // ends with the socket
	cancel context.CancelFunc
	log    *slog.Logger
	wg     sync.WaitGroup

	mu          sync.Mutex
	streams     map[string]*relayStream
	pending     int // handshakes between msg1 and the registry's answer
	failures    int // failed handshakes since the last pause
	pausedUntil time.Time
	instances   uint64
}

func newRelaySocket(ctx context.Context, x *relayExecutor, reg *registration, ws *wsConn) *relaySocket {
	ctx, cancel := context.WithCancel(ctx)
	return &relaySocket{x: x, reg: reg, ws: ws, ctx: ctx, cancel: cancel, log: x.log, streams: map[string]*relayStream{}}
}

// serve reads frames until the socket ends, then tears every stream down.
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
		s.mu.Lock()
		streams := make([]*relayStream, 0, len(s.streams))
		for _, st := range s.streams {
			streams = append(streams, st)
		}
		s.mu.Unlock()
		for _, st := range streams {
			st.teardown(errors.New("rendezvous connection ended"), false)
		}
		s.wg.Wait()
	}()
	for {
		op, data, err := s.ws.readFrameMessage()
		if err != nil {
			return err
		}
		if op != wsOpBinary {
			s.log.Warn("dropping a non-binary rendezvous message", "bytes", len(data))
			continue
		}
		f, err := decodeRelayFrame(data)
		if err == nil {
			err = checkRelayFrame(&f)
		}
		if err != nil {
			s.log.Warn("dropping a relay frame", "error", err.Error())
			continue
		}
		s.handle(&f)
	}
}

// handle acts on one valid frame. It runs on the reader goroutine; only Data delivery can
// block it, when a stream's inbox is full (backpressure to the rendezvous, as TCP would).
func (s *relaySocket) handle(f *relayFrame) {
	switch f.body {
	case relayBodyAck, relayBodyResume, relayBodyHeartbeat:
		// Resume only claims the stream at the rendezvous; acks and heartbeats are unused
		// in 0.169 (relay.md §7).
	case relayBodyReset:
		if st := s.lookup(f.streamID); st != nil {
			st.teardown(errors.New("reset by the harness"), false) // its reason is not trusted
		}
	case relayBodyHandshake:
		s.handshake(f.streamID, f.payload)
	case relayBodyData:
		st := s.lookup(f.streamID)
		switch {
		case st == nil:
			s.log.Debug("relay data for an unknown stream", "stream_id", f.streamID)
			s.sendReset(f.streamID)
		case !st.active.Load():
			st.teardown(errors.New("data_before_handshake"), true)
		default:
			if err := st.receive(f.seq, f.payload); err != nil {
				st.teardown(err, true)
			}
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
	var refuse string
	switch {
	case time.Now().Before(s.pausedUntil):
		refuse = "handshakes paused after repeated failures"
	case len(s.streams) >= relayMaxActiveStreams:
		refuse = "too many streams"
	case s.pending >= relayMaxPendingValidations:
		refuse = "too many pending validations"
	}
	if refuse != "" {
		s.mu.Unlock()
		s.log.Info("refusing a relay handshake", "stream_id", id, "reason", refuse)
		s.sendReset(id)
		return
	}
	s.instances++
	st := &relayStream{sock: s, id: id, instance: s.instances, inbox: make(chan []byte, relayStreamInbox), done: make(chan struct{})}
	s.streams[id] = st
	s.pending++
	s.wg.Add(1)
	s.mu.Unlock()
	go st.run(bytes.Clone(msg1))
}

// handshakeDone ends a handshake's pending validation and counts a failure against the
// budget: relayMaxFailedHandshakes failures pause handshakes on this socket.
func (s *relaySocket) handshakeDone(failed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
	if !failed {
		return
	}
	if s.failures++; s.failures >= relayMaxFailedHandshakes {
		s.failures = 0
		s.pausedUntil = time.Now().Add(s.x.timings.handshakePause)
		s.log.Warn("pausing Noise relay handshakes after repeated failures", "pause", s.x.timings.handshakePause)
	}
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

// relayStreamInbox is how many decoded JSON-RPC messages wait for the dispatcher before the
// socket reader blocks.
const relayStreamInbox = 64

// relayStream is one harness stream: a Noise responder until msg2, then a msgTransport that
// srv.serveConn runs exactly like a local websocket connection.
type relayStream struct {
	sock     *relaySocket
	id       string
	instance uint64 // internal id: stream ids may be reused after a reset
	t        *noiseTransport
	active   atomic.Bool // msg2 sent: Data is accepted
	closed   atomic.Bool
	inbox    chan []byte
	done     chan struct{} // closed by teardown

	writeMu  sync.Mutex // orders this stream's frames; nothing follows its reset
	frameBuf []byte     // guarded by writeMu
}

var errRelayNotJSON = errors.New("relay record is not JSON")

// run completes the handshake (relay.md §5.7, §2.3) and then serves the stream.
func (st *relayStream) run(msg1 []byte) {
	s := st.sock
	defer s.wg.Done()
	log := s.log.With("stream_id", st.id, "stream", st.instance)
	r, err := newNoiseResponder(s.x.id, noisePrologue(s.reg.environmentID, s.reg.registrationID, st.id))
	if err == nil {
		err = r.readInitiation(msg1)
	}
	if err != nil {
		log.Info("relay handshake failed", "error", err.Error())
		s.handshakeDone(true)
		st.teardown(err, true)
		return
	}
	vctx, cancel := context.WithTimeout(s.ctx, s.x.timings.validateTimeout)
	outcome, verr := s.x.registry.validate(vctx, s.reg.registrationID, st.id, r.peerStatic(), r.authorization())
	cancel()
	var payload []byte
	switch outcome {
	case validateAccepted:
	case validateCredentialsRejected:
		payload = []byte(noiseRegistryRejected)
	default:
		log.Info("registry did not validate the harness key", "error", errString(verr))
		s.handshakeDone(outcome == validateRejected)
		st.teardown(verr, true)
		return
	}
	msg2, t, err := r.respond(payload)
	if err != nil {
		s.handshakeDone(true)
		st.teardown(err, true)
		return
	}
	if payload != nil {
		log.Warn("registry rejected the executor credential while validating a harness", "error", errString(verr))
		t.close()
		st.writeMu.Lock()
		if !st.closed.Load() {
			s.writeFrame(&relayFrame{version: relayFrameVersion, streamID: st.id, body: relayBodyHandshake, payload: msg2}, &st.frameBuf)
		}
		st.writeMu.Unlock()
		s.handshakeDone(false)
		st.teardown(errNoiseRegistryRejected, false) // no stream: later data draws a reset
		return
	}
	// Activate before msg2 leaves: the harness may send Data as soon as it has msg2.
	st.writeMu.Lock()
	if !st.closed.Load() {
		st.t = t
		st.active.Store(true)
		err = s.writeFrame(&relayFrame{version: relayFrameVersion, streamID: st.id, body: relayBodyHandshake, payload: msg2}, &st.frameBuf)
	}
	st.writeMu.Unlock()
	s.handshakeDone(false)
	if !st.active.Load() || err != nil { // torn down while validating, or the socket failed
		st.teardown(err, false)
		t.close()
		return
	}
	log.Info("relay stream open")
	s.x.srv.conns.Add(1)
	defer s.x.srv.conns.Done()
	s.x.srv.serveConn(st, fmt.Sprintf("failed to parse JSON-RPC message from exec-server relay stream %d", st.instance))
	t.close()
	log.Info("relay stream closed")
}

// receive decrypts one record and queues the messages it completes. It runs on the socket
// reader; st.t is set before active, so it is safe to read here.
func (st *relayStream) receive(seq uint32, record []byte) error {
	return st.t.openRecord(seq, record, func(msg []byte) error {
		if !json.Valid(msg) {
			return errRelayNotJSON
		}
		select {
		case st.inbox <- msg:
			return nil
		case <-st.done:
			return net.ErrClosed
		}
	})
}

// readMessage implements msgTransport.
func (st *relayStream) readMessage() ([]byte, error) {
	select {
	case m := <-st.inbox:
		return m, nil
	case <-st.done:
		return nil, io.EOF
	}
}

// writeMessage implements msgTransport: one JSON-RPC message becomes as many Data frames as
// it has records. A record is encrypted once with nonce = seq; should acks ever ship
// (lessons.md R17), this is where its ciphertext would be kept for resending.
func (st *relayStream) writeMessage(b []byte) error {
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

// close implements msgTransport: the server ending the stream resets it at the harness.
func (st *relayStream) close(reason error) error {
	st.teardown(reason, true)
	return nil
}

// teardown ends the stream once: it leaves the socket's table, unblocks the reader and the
// dispatcher, and optionally resets the harness side. The keys are dropped by run, the
// stream's owner, so that teardown never waits for a send in progress.
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
	if reset {
		st.writeMu.Lock()
		s.sendReset(st.id)
		st.writeMu.Unlock()
	}
	s.log.Debug("relay stream torn down", "stream_id", st.id, "stream", st.instance, "reason", errString(reason), "reset_sent", reset)
}
