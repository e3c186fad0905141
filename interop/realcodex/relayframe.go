package main

// Minimal reader and writer for codex.exec_server.relay.v1.RelayMessageFrame (docs/remote.md §4),
// just enough for a forwarding rendezvous: the rendezvous routes by stream_id, logs the body
// kind and sizes, and writes one frame itself (Reset, when a harness socket dies).
//
//	RelayMessageFrame
//	  1 version    uint32
//	  2 stream_id  string
//	  3 ack        uint32
//	  4 ack_bits   uint32
//	  5 data       RelayData      { 1 seq, 2 segment_index, 3 segment_count, 4 payload bytes }
//	  6 ack_frame  RelayAck       {}
//	  7 resume     RelayResume    { 1 next_seq }
//	  8 reset      RelayReset     { 1 reason string }
//	  9 heartbeat  RelayHeartbeat {}
//	 10 handshake  RelayHandshake { 1 payload bytes }

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// relayFrame is the routing view of one frame: everything but the payload bytes.
type relayFrame struct {
	Version    uint64
	StreamID   string
	Ack        uint64
	AckBits    uint64
	Kind       string // data, ack_frame, resume, reset, heartbeat, handshake, or "" (no body)
	Seq        uint64 // data only
	SegIndex   uint64 // data only
	SegCount   uint64 // data only
	NextSeq    uint64 // resume only
	Reason     string // reset only
	PayloadLen int    // data and handshake
	Unknown    []protowire.Number
}

var relayKinds = map[protowire.Number]string{
	5: "data", 6: "ack_frame", 7: "resume", 8: "reset", 9: "heartbeat", 10: "handshake",
}

// String renders the frame as one log line.
func (f relayFrame) String() string {
	s := fmt.Sprintf("v%d stream=%q %s", f.Version, f.StreamID, f.Kind)
	switch f.Kind {
	case "data":
		s += fmt.Sprintf(" seq=%d seg=%d/%d payload=%d", f.Seq, f.SegIndex, f.SegCount, f.PayloadLen)
	case "handshake":
		s += fmt.Sprintf(" payload=%d", f.PayloadLen)
	case "resume":
		s += fmt.Sprintf(" next_seq=%d", f.NextSeq)
	case "reset":
		s += fmt.Sprintf(" reason=%q", f.Reason)
	}
	if f.Ack != 0 || f.AckBits != 0 {
		s += fmt.Sprintf(" ack=%d ack_bits=%#x", f.Ack, f.AckBits)
	}
	if len(f.Unknown) > 0 {
		s += fmt.Sprintf(" unknown_fields=%v", f.Unknown)
	}
	return s
}

// parseRelayFrame decodes the routing fields of one frame, skipping unknown fields.
func parseRelayFrame(b []byte) (relayFrame, error) {
	var f relayFrame
	err := walkFields(b, func(num protowire.Number, typ protowire.Type, v uint64, body []byte) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			f.Version = v
		case num == 2 && typ == protowire.BytesType:
			f.StreamID = string(body)
		case num == 3 && typ == protowire.VarintType:
			f.Ack = v
		case num == 4 && typ == protowire.VarintType:
			f.AckBits = v
		case relayKinds[num] != "" && typ == protowire.BytesType:
			f.Kind = relayKinds[num]
			return parseRelayBody(&f, num, body)
		default:
			f.Unknown = append(f.Unknown, num)
		}
		return nil
	})
	return f, err
}

func parseRelayBody(f *relayFrame, num protowire.Number, b []byte) error {
	return walkFields(b, func(n protowire.Number, typ protowire.Type, v uint64, body []byte) error {
		switch {
		case num == 5 && n == 1 && typ == protowire.VarintType:
			f.Seq = v
		case num == 5 && n == 2 && typ == protowire.VarintType:
			f.SegIndex = v
		case num == 5 && n == 3 && typ == protowire.VarintType:
			f.SegCount = v
		case (num == 5 && n == 4 || num == 10 && n == 1) && typ == protowire.BytesType:
			f.PayloadLen = len(body)
		case num == 7 && n == 1 && typ == protowire.VarintType:
			f.NextSeq = v
		case num == 8 && n == 1 && typ == protowire.BytesType:
			f.Reason = string(body)
		}
		return nil
	})
}

// walkFields calls fn for each field of a protobuf message: v for varints, body for
// length-delimited fields. Fixed32/fixed64 fields are skipped.
func walkFields(b []byte, fn func(protowire.Number, protowire.Type, uint64, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("relay frame: bad tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var v uint64
		var body []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			body, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("relay frame: field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, typ, v, body); err != nil {
			return err
		}
	}
	return nil
}

// appendRelayReset encodes Reset{stream_id, reason} as prost would.
func appendRelayReset(dst []byte, streamID, reason string) []byte {
	var body []byte
	body = protowire.AppendTag(body, 1, protowire.BytesType)
	body = protowire.AppendString(body, reason)
	dst = protowire.AppendTag(dst, 1, protowire.VarintType)
	dst = protowire.AppendVarint(dst, 1)
	dst = protowire.AppendTag(dst, 2, protowire.BytesType)
	dst = protowire.AppendString(dst, streamID)
	dst = protowire.AppendTag(dst, 8, protowire.BytesType)
	return protowire.AppendBytes(dst, body)
}
