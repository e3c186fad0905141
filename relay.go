package main

// Remote mode: the wire format of the Codex rendezvous relay, the frames the executor reads
// and writes on its one rendezvous socket (docs/remote.md §3, §4; overview in §1).
//
// Files: remote_config.go (command line), remote_credentials.go (registry credentials),
// remote_registry.go (registry client), relay.go (this file: the wire format), relay_executor.go
// (register, dial, reconnect), relay_demux.go (one physical socket's streams), noise*.go (the
// channel).
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
//	  2  stream_id  string          non-blank routing key, ≤ relayMaxStreamID bytes; in the prologue
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
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Field numbers of RelayMessageFrame and its bodies (docs/remote.md §4.1).
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

// Limits and constants of the relay (docs/remote.md §3, §6): the numbers 0.169 and its source
// use.
const (
	relayFrameVersion = 1 // the only RelayMessageFrame version

	// relayMaxMessage caps one websocket message (= one frame). A bigger message drops the
	// whole physical connection, as in 0.169 ("Space limit exceeded").
	relayMaxMessage = 256 << 10

	// relayMaxStreamID is the longest stream_id accepted. Every frame the executor sends
	// repeats the id, and a Data frame carries a full record (noiseRecordCiphertextMax)
	// besides: with a longer id that frame would pass relayMaxMessage and get the executor's
	// whole socket dropped by the rendezvous. Longer ids are dropped like blank ones.
	relayMaxStreamID = relayMaxMessage - noiseRecordCiphertextMax - relayDataFrameOverhead
	// relayLogStreamIDMax is how much of a stream_id a log line shows (logStreamID).
	relayLogStreamIDMax = 64
	// relayDataFrameOverhead is a full Data frame's bytes besides its stream_id and record:
	// version 2, stream_id tag and length 4, data tag and length 4, seq 6, segment_count 2,
	// payload tag and length 4.
	relayDataFrameOverhead = 22

	relayMaxActiveStreams      = 128 // streams per physical socket, handshaking or active
	relayMaxPendingValidations = 32  // registry /validate calls in flight per physical socket
	relayMaxFailedHandshakes   = 8   // failures per physical socket before a pause
	// relayFailureDecay forgets one failed handshake per period, so that failures spread
	// over hours (a harness with a stale authorization now and then) never add up to a pause,
	// while a burst of 8 within seconds does, as in the reference.
	relayFailureDecay = 5 * time.Second
	// relayValidatePerSecond and relayValidateBurst bound the registry /validate calls one
	// physical socket makes, whatever the relay sends: each carries our credential, so a
	// relay must not be able to make us call it at will. The burst lets 8 harnesses open
	// streams at once, the rate 4 more each second after; a handshake past the rate waits
	// for its turn within its validate timeout, so a legitimate one is slowed, not refused.
	// Together with the pause after 8 failures, a relay that sends nothing but handshakes
	// the registry refuses draws about 8 calls per pause.
	relayValidatePerSecond = 4
	relayValidateBurst     = 8

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
// dropped, never answered (docs/remote.md §4.2).
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
// rules (docs/remote.md §4.2) are checkRelayFrame's job. The returned payload aliases b.
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

// checkRelayFrame applies the receive rules of docs/remote.md §4.2. A non-nil error means
// "drop the frame and keep the socket"; it never names payload bytes.
func checkRelayFrame(f *relayFrame) error {
	switch {
	case f.version != relayFrameVersion:
		return fmt.Errorf("relay frame version %d is not %d", f.version, relayFrameVersion)
	case strings.TrimSpace(f.streamID) == "":
		return errors.New("relay frame has a blank stream_id")
	case len(f.streamID) > relayMaxStreamID:
		return fmt.Errorf("relay frame stream_id of %d bytes is over %d", len(f.streamID), relayMaxStreamID)
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
