package main

// Negative conformance of remote mode (docs/remote.md §3–§6): bad handshakes, frames and
// records, an oversized message and missing pongs on one socket.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// holdValidations makes the registry sit on every /validate until unblock (or the end of
// the test), then answer valid:true.
func holdValidations(t *testing.T) (remoteOption, func()) {
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // before the registry's own cleanup, which waits for its handlers
	return func(e *remoteEnv, _ *remoteConfig) {
		e.reg.validate = func(w http.ResponseWriter, _ map[string]json.RawMessage) {
			<-release
			io.WriteString(w, `{"valid":true}`)
		}
	}, unblock
}

// TestRemoteNegativeConformance walks the failure cases of docs/remote.md §3–§6 that concern
// one socket: bad handshakes, frames and records, an oversized message, missing pongs.
func TestRemoteNegativeConformance(t *testing.T) {
	badMsg1 := []struct {
		name string
		msg1 func(h *testHarness) []byte
	}{
		{"wrong prologue width", func(h *testHarness) []byte {
			var p []byte
			for _, f := range []string{noisePrologueTag, "env-test-1", "reg-1", "s-1"} {
				p = append(p, byte(len(f)>>24), byte(len(f)>>16), byte(len(f)>>8), byte(len(f)))
				p = append(p, f...)
			}
			i, _ := newNoiseInitiator(h.id, h.execKey, p)
			m, _ := i.initiate([]byte("a"))
			return m
		}},
		{"wrong registration id in the prologue", func(h *testHarness) []byte {
			i, _ := newNoiseInitiator(h.id, h.execKey, noisePrologue("env-test-1", "reg-2", "s-1"))
			m, _ := i.initiate([]byte("a"))
			return m
		}},
		{"suite label used as the protocol name", func(h *testHarness) []byte {
			wrong := noiseProtocol{name: noiseSuiteLabel, pattern: &noisePatternHybridIK, hash: noiseSHA256}
			hs, _ := newNoiseHandshake(&wrong, true, h.id, h.execKey, noisePrologue("env-test-1", "reg-1", "s-1"))
			m, _ := hs.writeMessage(nil, []byte("a"))
			return m
		}},
		{"authorization over 4096 bytes", func(h *testHarness) []byte {
			_, m := h.msg1("s-1", strings.Repeat("a", noiseMaxAuthorization+1))
			return m
		}},
		{"authorization not UTF-8", func(h *testHarness) []byte {
			_, m := h.msg1("s-1", "\xff\xfe")
			return m
		}},
		{"truncated message 1", func(h *testHarness) []byte {
			_, m := h.msg1("s-1", "a")
			return m[:len(m)-1]
		}},
	}
	for _, tt := range badMsg1 {
		t.Run(tt.name+": reset, no validate", func(t *testing.T) {
			e := startRemote(t, nil, nil)
			h := e.harness()
			h.send(relayFrame{streamID: "s-1", body: relayBodyHandshake, payload: tt.msg1(h)})
			h.expectReset("s-1")
			if e.count("/validate") != 0 {
				t.Fatal("validate was called")
			}
		})
	}
	t.Run("data before msg2: reset, and msg2 never follows", func(t *testing.T) {
		hold, unblock := holdValidations(t)
		e := startRemote(t, nil, nil, hold)
		h := e.harness()
		_, m := h.msg1("s-1", "a")
		h.send(relayFrame{streamID: "s-1", body: relayBodyHandshake, payload: m})
		h.send(relayFrame{streamID: "s-1", body: relayBodyData, segmentCount: 1, payload: []byte{1}})
		h.expectReset("s-1")
		unblock()
		h.mustOpen("s-2").initialize() // ordered after any late msg2 on s-1
		h.expectQuiet("s-1")
	})
	t.Run("data for an unknown stream: reset", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		h.send(relayFrame{streamID: "nobody", body: relayBodyData, segmentCount: 1, payload: []byte{1}})
		h.expectReset("nobody")
	})
	t.Run("ignored frames keep the stream and the socket", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		s := h.mustOpen("s-1")
		s.initialize()
		h.send(relayFrame{streamID: "s-1", body: relayBodyHeartbeat})
		h.send(relayFrame{streamID: "s-1", body: relayBodyAck, ack: 3, ackBits: 0xffffffff})
		h.send(relayFrame{streamID: "s-1", body: relayBodyResume, nextSeq: 9})
		h.sendRaw(appendRelayFrame(nil, &relayFrame{version: 2, streamID: "s-1", body: relayBodyData, segmentCount: 1, payload: []byte{1}}))
		h.send(relayFrame{streamID: "s-1", body: relayBodyData, segmentCount: 2, payload: []byte{1}}) // invalid segmentation: dropped
		h.sendRaw([]byte{0xff, 0xff})                                                                 // not protobuf: dropped
		h.ws.writeMessageOp(wsOpText, []byte(`{"id":1}`))                                             // text: dropped
		s.mustCall("environment/info", nil)
		h.expectQuiet("s-1")
	})
	t.Run("unknown protobuf fields are ignored", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		s := h.mustOpen("s-1")
		b, _ := json.Marshal(map[string]any{"id": 1, "method": "initialize", "params": map[string]any{"clientName": "x"}})
		for _, f := range s.records(b) {
			f.version = relayFrameVersion
			raw := appendRelayFrame(nil, &f)
			raw = append(raw, 0x5a, 0x03, 'a', 'b', 'c', 0x62, 0x00, 0x78, 0x63) // fields 11, 12 (strings), 15 (varint)
			h.sendRaw(raw)
		}
		if r := s.recv(); !bytes.Contains(r, []byte(`"sessionId"`)) {
			t.Fatalf("reply %s", r)
		}
	})
	t.Run("duplicate and out-of-order records are reassembled", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		s := h.mustOpen("s-1")
		b, _ := json.Marshal(map[string]any{"id": 1, "method": "initialize", "params": map[string]any{"clientName": strings.Repeat("x", 2*noiseRecordPlaintextMax)}})
		recs := s.records(b)
		if len(recs) != 3 {
			t.Fatalf("%d records", len(recs))
		}
		for _, i := range []int{2, 0, 0, 2, 1, 1} {
			h.send(recs[i])
		}
		if r := s.recv(); !bytes.Contains(r, []byte(`"sessionId"`)) {
			t.Fatalf("reply %s", r)
		}
		s.nextID = 1
		s.sendJSON(map[string]any{"method": "initialized"})
		s.mustCall("environment/info", nil)
	})
	t.Run("re-handshake on an active stream: reset", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		h.mustOpen("s-1").initialize()
		_, m := h.msg1("s-1", "a")
		h.send(relayFrame{streamID: "s-1", body: relayBodyHandshake, payload: m})
		h.expectReset("s-1")
	})
	t.Run("non-JSON record: reset", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		s := h.mustOpen("s-1")
		for _, f := range s.records([]byte("{not json")) {
			h.send(f)
		}
		h.expectReset("s-1")
	})
	t.Run("record that fails to decrypt: reset", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		s := h.mustOpen("s-1")
		recs := s.records([]byte(`{"id":1,"method":"environment/info"}`))
		recs[0].payload[0] ^= 1
		h.send(recs[0])
		h.expectReset("s-1")
	})
	t.Run("frame over 256 KiB: socket dropped, same URL again", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		// The executor may drop the socket before all of it is written: ignore write errors.
		h.ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: 1, streamID: "s-1", body: relayBodyData, segmentCount: 1, payload: make([]byte, relayMaxMessage)}))
		h2 := e.harness()
		h2.mustOpen("s-1").initialize()
		if n := e.count("/register"); n != 1 {
			t.Fatalf("%d registrations, want 1", n)
		}
	})
	t.Run("no pongs: socket dropped after the pong timeout", func(t *testing.T) {
		e := startRemote(t, nil, nil, func(_ *remoteEnv, cfg *remoteConfig) {
			cfg.timings.pingInterval = 10 * time.Millisecond
			cfg.timings.pongTimeout = 50 * time.Millisecond
		})
		silent := e.rv.next(t) // never read: pings go unanswered
		defer silent.closeTCP()
		h := e.harness() // the reconnect; this harness reads, so it answers pings
		h.mustOpen("s-1").initialize()
		if n := e.count("/register"); n != 1 {
			t.Fatalf("%d registrations, want 1", n)
		}
	})
	t.Run("8 failed handshakes pause handshakes; the socket stays", func(t *testing.T) {
		e := startRemote(t, nil, nil)
		h := e.harness()
		for i := range relayMaxFailedHandshakes {
			id := fmt.Sprintf("bad-%d", i)
			h.send(relayFrame{streamID: id, body: relayBodyHandshake, payload: []byte("not a noise message")})
			h.expectReset(id)
		}
		if _, err := h.open("good"); err == nil {
			t.Fatal("a handshake was accepted during the pause")
		}
		if e.count("/validate") != 0 {
			t.Fatal("validate was called during the pause")
		}
		if !strings.Contains(e.logs.String(), "pausing Noise relay handshakes after repeated failures") {
			t.Fatal("the pause was not logged")
		}
	})
	t.Run("handshakes resume after the pause", func(t *testing.T) {
		e := startRemote(t, nil, nil, func(_ *remoteEnv, cfg *remoteConfig) { cfg.timings.handshakePause = time.Millisecond })
		h := e.harness()
		for i := range relayMaxFailedHandshakes {
			id := fmt.Sprintf("bad-%d", i)
			h.send(relayFrame{streamID: id, body: relayBodyHandshake, payload: []byte("x")})
			h.expectReset(id)
		}
		for i := 0; ; i++ {
			if _, err := h.open(fmt.Sprintf("good-%d", i)); err == nil {
				break
			}
			if i == 50 {
				t.Fatal("handshakes never resumed")
			}
		}
	})
	t.Run("stream and validation limits", func(t *testing.T) {
		hold, unblock := holdValidations(t)
		e := startRemote(t, nil, nil, hold)
		h := e.harness()
		var msg1s [][]byte
		for i := range relayMaxPendingValidations + 1 {
			_, m := h.msg1(fmt.Sprintf("p-%d", i), "a")
			msg1s = append(msg1s, m)
		}
		for i, m := range msg1s {
			h.send(relayFrame{streamID: fmt.Sprintf("p-%d", i), body: relayBodyHandshake, payload: m})
		}
		h.expectReset(fmt.Sprintf("p-%d", relayMaxPendingValidations)) // the 33rd
		unblock()
		for i := range relayMaxPendingValidations {
			if f := h.nextFrame(fmt.Sprintf("p-%d", i)); f.body != relayBodyHandshake {
				t.Fatalf("p-%d: %v", i, f.body)
			}
		}
		// 32 streams are open: 96 more fill the table, the next one is refused.
		for i := relayMaxPendingValidations; i < relayMaxActiveStreams; i++ {
			h.mustOpen(fmt.Sprintf("q-%d", i))
		}
		if _, err := h.open("one-too-many"); err == nil {
			t.Fatalf("stream %d was accepted", relayMaxActiveStreams+1)
		}
	})
}
