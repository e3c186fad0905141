package main

// End-to-end tests of remote mode's streams (docs/remote.md §6, §7): JSON-RPC over Noise records,
// concurrent streams, resets, and a stalled handler that must not stall the socket.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRemoteInitializeAndEnvironmentInfo(t *testing.T) {
	e := startRemote(t, nil, nil)
	h := e.harness()
	s := h.mustOpen("00000000-0000-4000-8000-000000000001")
	s.initialize()
	var info map[string]any
	if err := json.Unmarshal(s.mustCall("environment/info", nil), &info); err != nil || info["platformOs"] == nil {
		t.Fatalf("environment/info = %v, %v", info, err)
	}

	ups := e.rv.upgradeHeaders()
	if len(ups) != 1 || !regexp.MustCompile(`^req_[0-9a-f]{32}$`).MatchString(ups[0].Get("X-Request-Id")) ||
		ups[0].Get("Authorization") != "" {
		t.Fatalf("upgrade headers %v", ups)
	}
	var v registryRequest
	for _, r := range e.reg.snapshot() {
		if strings.HasSuffix(r.path, "/validate") {
			v = r
		}
	}
	var body struct {
		RegID string          `json:"executor_registration_id"`
		Key   *noisePublicKey `json:"harness_public_key"`
		Auth  string          `json:"harness_key_authorization"`
	}
	if err := json.Unmarshal(v.body, &body); err != nil || body.RegID != "reg-1" || body.Auth != "harness-auth-token" ||
		!body.Key.equal(h.id.publicKey()) || v.header.Get("X-Codex-Noise-Stream-Id") != s.id {
		t.Fatalf("validate request %s %v: %v", v.body, v.header, err)
	}
	if strings.Contains(e.logs.String(), "TOKEN") || strings.Contains(e.logs.String(), "harness-auth-token") {
		t.Fatalf("secrets in the log:\n%s", e.logs.String())
	}
}

func TestRemoteProcessStartStreamsOutput(t *testing.T) {
	e := startRemote(t, nil, nil)
	s := e.harness().mustOpen("s-proc")
	s.initialize()
	if out := s.runScript("for i in 1 2 3; do echo line$i; done"); out != "line1\nline2\nline3\n" {
		t.Fatalf("output %q", out)
	}
}

func TestRemoteReadFileSpansManyRecords(t *testing.T) {
	e := startRemote(t, nil, nil)
	s := e.harness().mustOpen("s-big")
	s.initialize()
	data := make([]byte, 5<<20)
	rand.Read(data)
	path := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r := s.call("fs/readFile", map[string]any{"path": "file://" + path}, nil)
	skipIfMissing(t, r, "fs/readFile")
	if r.Error != nil {
		t.Fatalf("fs/readFile: %s", r.Error.Message)
	}
	var v struct {
		Data string `json:"dataBase64"`
	}
	json.Unmarshal(r.Result, &v)
	got, _ := base64.StdEncoding.DecodeString(v.Data)
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, want the %d written", len(got), len(data))
	}
	if want := (5<<20)*4/3/noiseRecordPlaintextMax - 1; s.frames < want {
		t.Fatalf("the reply came in %d records, want at least %d", s.frames, want)
	}
}

// TestRemoteLargeRequestSpansRecords sends a request bigger than one record and gets the
// same answer, whatever methods the build has.
func TestRemoteLargeRequestSpansRecords(t *testing.T) {
	e := startRemote(t, nil, nil)
	s := e.harness().mustOpen("s-large")
	name := strings.Repeat("n", 3*noiseRecordPlaintextMax)
	s.mustCall("initialize", map[string]any{"clientName": name})
}

func TestRemoteThreeConcurrentStreams(t *testing.T) {
	e := startRemote(t, nil, nil)
	h := e.harness()
	var wg sync.WaitGroup
	results := make(chan string, 3)
	for i := range 3 {
		s := h.mustOpen(fmt.Sprintf("stream-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.initialize()
			for range 5 {
				s.mustCall("environment/info", nil)
			}
			results <- s.id
		}()
	}
	wg.Wait()
	if len(results) != 3 {
		t.Fatalf("%d streams finished", len(results))
	}
}

func TestRemoteHarnessResetTearsDownOneStream(t *testing.T) {
	e := startRemote(t, nil, nil)
	h := e.harness()
	a, b := h.mustOpen("a"), h.mustOpen("b")
	a.initialize()
	b.initialize()
	h.send(relayFrame{streamID: "a", body: relayBodyReset, reason: "harness_disconnected"})
	b.mustCall("environment/info", nil) // b lives on; its reply orders after any echo on a
	h.expectQuiet("a")                  // a harness reset is not echoed
	h.send(relayFrame{streamID: "a", body: relayBodyData, segmentCount: 1, payload: []byte{1}})
	h.expectReset("a") // a is gone
	a2 := h.mustOpen("a")
	a2.initialize() // and its id is free again
}

// testMethodOption adds a method to the executor's server, without a lifecycle gate.
func testMethodOption(name string, call func(c *conn, params json.RawMessage) (result, error)) remoteOption {
	return func(e *remoteEnv, _ *remoteConfig) { e.srv.methods[name] = method{call: call} }
}

// blocker is a handler that blocks, ignoring cancellation as a read from a hung NFS mount
// would, until the test ends. Its release must be registered with t.Cleanup after
// startRemote, so that it runs before the executor is asked to stop.
type blocker struct {
	started chan struct{}
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}, 64), release: make(chan struct{})}
}

func (b *blocker) block() {
	b.started <- struct{}{}
	<-b.release
}

func (b *blocker) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-b.started:
	case <-time.After(remoteTestTimeout):
		t.Fatal("the blocking handler never ran")
	}
}

// TestRemoteStalledStreamDoesNotStallTheSocket: one stream whose dispatcher is stuck must not
// stop the socket reader, or every other stream on the physical socket (and the pongs behind
// them) would stall with it. Its messages wait in its own queue, which is bounded: past the
// bound that stream alone is reset.
func TestRemoteStalledStreamDoesNotStallTheSocket(t *testing.T) {
	tests := []struct {
		name      string
		limit     int  // cfg.streamInboxBytes; 0: the default
		wantReset bool // 200 small requests pass the limit
	}{
		{"queued below the limit", 0, false},
		{"reset past the limit", 4 << 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBlocker()
			e := startRemote(t, nil, nil, testMethodOption("test/block", func(*conn, json.RawMessage) (result, error) {
				b.block() // synchronous: the stream's dispatcher itself is stuck
				return answer("released"), nil
			}), func(_ *remoteEnv, cfg *remoteConfig) { cfg.streamInboxBytes = tt.limit })
			t.Cleanup(func() { close(b.release) })
			h := e.harness()
			a := h.mustOpen("a")
			a.sendJSON(map[string]any{"id": 1, "method": "test/block"})
			b.waitStarted(t)
			for i := range 200 {
				a.sendJSON(map[string]any{"id": i + 2, "method": "environment/info"})
			}
			other := h.mustOpen("b")
			other.initialize()
			other.mustCall("environment/info", nil)
			if tt.wantReset {
				h.expectReset("a")
			} else {
				h.expectQuiet("a")
			}
		})
	}
}

// TestRemoteReconnectIsNotHeldByAStuckHandler: when the physical socket drops, the executor
// reconnects at once, even while a handler of an old stream ignores its cancellation.
func TestRemoteReconnectIsNotHeldByAStuckHandler(t *testing.T) {
	b := newBlocker()
	e := startRemote(t, nil, nil, testMethodOption("test/stuck", func(c *conn, _ json.RawMessage) (result, error) {
		c.call.laterEncoded(async, func(context.Context) (result, error) {
			b.block()
			return nil, nil
		})
		return nil, nil
	}))
	t.Cleanup(func() { close(b.release) })
	h := e.harness()
	s := h.mustOpen("s-1")
	s.sendJSON(map[string]any{"id": 1, "method": "test/stuck"})
	b.waitStarted(t)
	h.ws.closeTCP()
	e.harness().mustOpen("s-2").initialize()
}

// TestRemoteHarnessResetDuringALongReply resets a stream while the executor is writing a
// reply of many records: the other stream is unaffected and nothing leaks (startRemote's
// cleanup checks the goroutines).
func TestRemoteHarnessResetDuringALongReply(t *testing.T) {
	e := startRemote(t, nil, nil)
	h := e.harness()
	a, other := h.mustOpen("a"), h.mustOpen("b")
	a.initialize()
	other.initialize()
	path := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(path, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	a.sendJSON(map[string]any{"id": 9, "method": "fs/readFile", "params": map[string]any{"path": "file://" + path}})
	if f := h.nextFrame("a"); f.body != relayBodyData {
		t.Fatalf("got %v, want the first record of the reply", f.body)
	}
	h.send(relayFrame{streamID: "a", body: relayBodyReset, reason: "harness_disconnected"})
	other.mustCall("environment/info", nil)
	h.send(relayFrame{streamID: "a", body: relayBodyData, segmentCount: 1, payload: []byte{1}})
	for {
		f := h.nextFrame("a") // records already on their way, then the reset for the data
		if f.body == relayBodyReset {
			break
		}
	}
}

// TestRemoteOversizedReplyBecomesAnError: a reply over the 64 MiB message limit cannot
// cross the relay; the request gets an error and the stream lives on. fs/readFile knows the
// limit up front (docs/remote.md §6: a 49 MiB file is 65 MiB of base64) and refuses as the
// reference refuses a file over its limit; any other reply that turns out too large becomes
// an internal error.
func TestRemoteOversizedReplyBecomesAnError(t *testing.T) {
	big := strings.Repeat("z", noiseMaxRPCMessage)
	e := startRemote(t, nil, nil, testMethodOption("test/huge", func(*conn, json.RawMessage) (result, error) {
		return answer(big), nil
	}))
	s := e.harness().mustOpen("s-1")
	s.initialize()
	path := filepath.Join(t.TempDir(), "sparse.bin")
	f, err := os.Create(path)
	if err == nil {
		err = f.Truncate(49 << 20)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	r := s.call("fs/readFile", map[string]any{"path": "file://" + path}, nil)
	skipIfMissing(t, r, "fs/readFile")
	if r.Error == nil || r.Error.Code != codeInvalidRequest || !strings.Contains(r.Error.Message, "file is too large to read") {
		t.Fatalf("fs/readFile of 49 MiB: error %+v, want -32600 file is too large to read", r.Error)
	}
	r = s.call("test/huge", nil, nil)
	if r.Error == nil || r.Error.Code != codeInternal || !strings.Contains(r.Error.Message, "message limit") {
		t.Fatalf("a 64 MiB reply: error %+v, want an internal error about the message limit", r.Error)
	}
	s.mustCall("environment/info", nil)
}
