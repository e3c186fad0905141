package main

// Tests of the relay frame codec (relay.go; docs/remote.md §4): the spec's examples, the
// vectors under testdata/relay, a fuzz target, and the rendezvous helpers' small rules.

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// relayVector is one record of testdata/relay/*.txt (format described in frames.txt).
type relayVector struct {
	name   string
	fields map[string]string
	raw    []byte
	frame  relayFrame
}

// relayVectorKeys are the keys of a relay vector (described in frames.txt).
var relayVectorKeys = []string{
	"name", "desc", "hex", "version", "stream_id", "ack", "ack_bits", "body", "seq", "segment_index",
	"segment_count", "next_seq", "reason", "payload", "frame", "canonical", "check", "go_protobuf",
}

func loadRelayVectors(t testing.TB, file string) []relayVector {
	t.Helper()
	var out []relayVector
	for _, c := range readVectors(t, filepath.Join("testdata", "relay", file)) {
		c.only(t, relayVectorKeys...)
		out = append(out, parseRelayVector(t, c.fields))
	}
	return out
}

func parseRelayVector(t testing.TB, kv map[string]string) relayVector {
	t.Helper()
	v := relayVector{name: kv["name"], fields: kv}
	var err error
	if v.raw, err = hex.DecodeString(kv["hex"]); err != nil {
		t.Fatalf("%s: hex: %v", v.name, err)
	}
	num := func(k string) uint32 {
		s, ok := kv[k]
		if !ok {
			return 0
		}
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			t.Fatalf("%s: %s: %v", v.name, k, err)
		}
		return uint32(n)
	}
	str := func(k string) string {
		s, ok := kv[k]
		if !ok {
			return ""
		}
		u, err := strconv.Unquote(s)
		if err != nil {
			t.Fatalf("%s: %s: %v", v.name, k, err)
		}
		return u
	}
	f := &v.frame
	f.version, f.ack, f.ackBits = num("version"), num("ack"), num("ack_bits")
	f.seq, f.segmentIndex, f.segmentCount, f.nextSeq = num("seq"), num("segment_index"), num("segment_count"), num("next_seq")
	f.streamID, f.reason = str("stream_id"), str("reason")
	if p, ok := kv["payload"]; ok {
		if f.payload, err = hex.DecodeString(p); err != nil {
			t.Fatalf("%s: payload: %v", v.name, err)
		}
	}
	if b, ok := kv["body"]; ok {
		for i, name := range relayBodyNames {
			if name == b {
				f.body = relayBody(i)
			}
		}
		if f.body == relayBodyNone {
			t.Fatalf("%s: unknown body %q", v.name, b)
		}
	}
	return v
}

func relayFramesEqual(a, b *relayFrame) bool {
	return a.version == b.version && a.streamID == b.streamID && a.ack == b.ack &&
		a.ackBits == b.ackBits && a.body == b.body && a.seq == b.seq &&
		a.segmentIndex == b.segmentIndex && a.segmentCount == b.segmentCount &&
		a.nextSeq == b.nextSeq && a.reason == b.reason && bytes.Equal(a.payload, b.payload)
}

// TestRelayFrameSpecExamples pins byte examples literally: those of docs/remote.md §4.1
// (the Data frame, the empty resume) and a few more.
func TestRelayFrameSpecExamples(t *testing.T) {
	tests := []struct {
		name  string
		frame relayFrame
		hex   string
	}{
		{"resume s-1 next_seq 0", relayFrame{version: 1, streamID: "s-1", body: relayBodyResume},
			"08 01 12 03 73 2d 31 3a 00"},
		{"data s-1 seq 5 seg 0/1 aabbcc", relayFrame{version: 1, streamID: "s-1", body: relayBodyData,
			seq: 5, segmentCount: 1, payload: []byte{0xaa, 0xbb, 0xcc}},
			"08 01 12 03 73 2d 31 2a 09 08 05 18 01 22 03 aa bb cc"},
		{"empty heartbeat", relayFrame{version: 1, streamID: "s-1", body: relayBodyHeartbeat},
			"08 01 12 03 73 2d 31 4a 00"},
		{"empty ack frame", relayFrame{version: 1, streamID: "s-1", body: relayBodyAck},
			"08 01 12 03 73 2d 31 32 00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, _ := hex.DecodeString(strings.ReplaceAll(tt.hex, " ", ""))
			got := appendRelayFrame(nil, &tt.frame)
			if !bytes.Equal(got, want) {
				t.Fatalf("encode = % x, want % x", got, want)
			}
			back, err := decodeRelayFrame(want)
			if err != nil || !relayFramesEqual(&back, &tt.frame) {
				t.Fatalf("decode = %+v, %v; want %+v", back, err, tt.frame)
			}
		})
	}

	t.Run("handshake of 3586 bytes starts 52 85 1c 0a 82 1c", func(t *testing.T) {
		f := relayFrame{version: 1, streamID: "s", body: relayBodyHandshake, payload: make([]byte, 3586)}
		b := appendRelayFrame(nil, &f)
		want := []byte{0x08, 0x01, 0x12, 0x01, 's', 0x52, 0x85, 0x1c, 0x0a, 0x82, 0x1c}
		if !bytes.HasPrefix(b, want) || len(b) != len(want)+3586 {
			t.Fatalf("handshake frame starts % x (len %d)", b[:min(len(b), 16)], len(b))
		}
	})
	t.Run("executor reset ends 42 1c 0a 1a reason", func(t *testing.T) {
		f := relayFrame{version: 1, streamID: "s", body: relayBodyReset, reason: relayResetReason}
		want := append([]byte{0x42, 0x1c, 0x0a, 0x1a}, relayResetReason...)
		if b := appendRelayFrame(nil, &f); !bytes.HasSuffix(b, want) {
			t.Fatalf("reset frame = % x", b)
		}
	})
}

// TestRelayFrameVectors runs testdata/relay/frames.txt (hand-made cases, each cross-checked
// by interop/relay_test.go against google.golang.org/protobuf) and protobuf_go.txt (frames
// generated by google.golang.org/protobuf in interop/).
func TestRelayFrameVectors(t *testing.T) {
	for _, file := range []string{"frames.txt", "protobuf_go.txt"} {
		for _, v := range loadRelayVectors(t, file) {
			t.Run(file+"/"+v.name, func(t *testing.T) {
				got, err := decodeRelayFrame(v.raw)
				if v.fields["frame"] == "malformed" {
					if !errors.Is(err, errRelayFrame) {
						t.Fatalf("decode accepted malformed bytes: %+v, %v", got, err)
					}
					return
				}
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if !relayFramesEqual(&got, &v.frame) {
					t.Fatalf("decode = %+v\nwant     %+v", got, v.frame)
				}
				enc := appendRelayFrame(nil, &got)
				if v.fields["canonical"] == "yes" && !bytes.Equal(enc, v.raw) {
					t.Fatalf("encode = %x\nwant     %x", enc, v.raw)
				}
				if len(enc) > len(v.raw) {
					t.Fatalf("canonical encoding (%d bytes) is longer than the input (%d)", len(enc), len(v.raw))
				}
				checkErr := checkRelayFrame(&got)
				switch want := v.fields["check"]; {
				case want == "ok" && checkErr != nil:
					t.Fatalf("check rejected a good frame: %v", checkErr)
				case want == "drop" && checkErr == nil:
					t.Fatal("check accepted a frame docs/remote.md §4.2 drops")
				case want != "ok" && want != "drop" && v.fields["check"] != "":
					t.Fatalf("unknown check %q", want)
				}
			})
		}
	}
}

// TestRelayFrameDecodeDoesNotCopyPayload pins the aliasing contract the demux relies on: the
// payload points into the websocket buffer, so it must be used or copied before the next read.
func TestRelayFrameDecodeDoesNotCopyPayload(t *testing.T) {
	b := appendRelayFrame(nil, &relayFrame{version: 1, streamID: "s", body: relayBodyData, segmentCount: 1, payload: []byte("xyz")})
	f, err := decodeRelayFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] = 'Z'
	if string(f.payload) != "xyZ" {
		t.Fatalf("payload = %q, want it to alias the input", f.payload)
	}
	if cap(f.payload) != len(f.payload) {
		t.Fatal("payload capacity reaches past its end: an append could clobber the buffer")
	}
}

func FuzzRelayFrameDecode(f *testing.F) {
	for _, v := range loadRelayVectors(f, "frames.txt") {
		f.Add(v.raw)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := decodeRelayFrame(b)
		if err != nil {
			if !errors.Is(err, errRelayFrame) {
				t.Fatalf("error %v does not wrap errRelayFrame", err)
			}
			return
		}
		_ = checkRelayFrame(&fr)
		enc := appendRelayFrame(nil, &fr)
		if len(enc) > len(b) {
			t.Fatalf("canonical encoding (%d bytes) longer than input (%d)", len(enc), len(b))
		}
		again, err := decodeRelayFrame(enc)
		if err != nil {
			t.Fatalf("re-decode of %x: %v", enc, err)
		}
		if !relayFramesEqual(&fr, &again) {
			t.Fatalf("round trip changed the frame: %+v -> %+v", fr, again)
		}
		if enc2 := appendRelayFrame(nil, &again); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable: %x vs %x", enc, enc2)
		}
	})
}

func BenchmarkRelayFrameDataRoundTrip(b *testing.B) {
	payload := make([]byte, 61456)
	f := relayFrame{version: 1, streamID: "00000000-0000-4000-8000-000000000001", body: relayBodyData, seq: 77, segmentCount: 1, payload: payload}
	buf := make([]byte, 0, relayMaxMessage)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		buf = appendRelayFrame(buf[:0], &f)
		if _, err := decodeRelayFrame(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRendezvousRefusalsThatCallForRegistration(t *testing.T) {
	tests := []struct {
		status int
		reason string
		want   bool
	}{
		{403, "invalid_signature", true},
		{404, "unknown_route", true},
		{409, "", true},
		{403, "", true},
		{400, "pod_draining", true},
		{503, "route_unavailable", true},
		{503, "", false},
		{502, "something_else", false},
		{401, "", true}, // the URL's credential is refused: a new one, not the same URL for ever
		{400, "", true},
		{400, "something_else", true},
		{408, "", false},
		{425, "", false},
		{429, "", false},
	}
	for _, tt := range tests {
		resp := &http.Response{StatusCode: tt.status, Header: http.Header{}}
		if tt.reason != "" {
			resp.Header.Set("x-codex-rendezvous-rejection-reason", tt.reason)
		}
		if got := rendezvousWantsRegistration(resp); got != tt.want {
			t.Errorf("%d %q: re-register = %v, want %v", tt.status, tt.reason, got, tt.want)
		}
	}
}

func TestScrubURLHidesTheRendezvousCredential(t *testing.T) {
	raw := "wss://rv.example/route/ws/environment/e?role=environment&sig=abc123"
	err := fmt.Errorf("websocket dial %s: upgrade refused", "wss://rv.example/route/ws/environment/e?role=environment&sig=abc123")
	got := scrubURL(err, raw)
	if strings.Contains(got, "abc123") || !strings.Contains(got, "rv.example/route/ws/environment/e") {
		t.Fatalf("scrubURL = %q", got)
	}
}

// TestRelayStreamIDLengthKeepsOurFramesUnderTheCap: the stream id is echoed in every frame the
// executor sends, so an id long enough to push a full Data frame past the 256 KiB message cap
// would get the executor's whole socket dropped by the rendezvous. Such frames are dropped
// on receipt instead.
func TestRelayStreamIDLengthKeepsOurFramesUnderTheCap(t *testing.T) {
	fullData := func(id string) []byte {
		return appendRelayFrame(nil, &relayFrame{version: 1, streamID: id, body: relayBodyData,
			seq: math.MaxUint32, segmentCount: 1, payload: make([]byte, noiseRecordCiphertextMax)})
	}
	for _, n := range []int{1, 36, relayMaxStreamID, relayMaxStreamID + 1, relayMaxMessage - noiseRecordCiphertextMax} {
		id := strings.Repeat("i", n)
		f := relayFrame{version: 1, streamID: id, body: relayBodyHandshake, payload: []byte{1}}
		err := checkRelayFrame(&f)
		fits := len(fullData(id)) <= relayMaxMessage
		if (err == nil) != fits {
			t.Errorf("stream id of %d bytes: check = %v, but a full Data frame would be %d bytes (cap %d)", n, err, len(fullData(id)), relayMaxMessage)
		}
	}
}
