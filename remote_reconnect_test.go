package main

// End-to-end tests of remote mode's registration and rendezvous lifecycle (docs/remote.md §2.4,
// §3, §8): validate refusals, reconnects, re-registration, permanent failures, credential
// rotation and stalled or silent rendezvous sockets.

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRemoteValidateRefusals(t *testing.T) {
	tests := []struct {
		name   string
		answer func(w http.ResponseWriter, m map[string]json.RawMessage)
	}{
		{"valid false", func(w http.ResponseWriter, _ map[string]json.RawMessage) { io.WriteString(w, `{"valid":false}`) }},
		{"403", func(w http.ResponseWriter, _ map[string]json.RawMessage) { w.WriteHeader(403) }},
		{"500", func(w http.ResponseWriter, _ map[string]json.RawMessage) { w.WriteHeader(500) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startRemote(t, nil, nil, func(e *remoteEnv, _ *remoteConfig) { e.reg.validate = tt.answer })
			h := e.harness()
			if _, err := h.open("s-1"); err == nil || err.Error() != "reset" {
				t.Fatalf("open = %v, want a reset", err)
			}
			if e.count("/validate") != 1 {
				t.Fatal("no validate call")
			}
		})
	}
}

func TestRemoteValidate401SendsRejectionPayload(t *testing.T) {
	e := startRemote(t, nil, nil, func(e *remoteEnv, _ *remoteConfig) {
		e.reg.validate = func(w http.ResponseWriter, _ map[string]json.RawMessage) { w.WriteHeader(401) }
	})
	h := e.harness()
	i, m := h.msg1("s-1", "harness-auth-token")
	h.send(relayFrame{streamID: "s-1", body: relayBodyHandshake, payload: m})
	f := h.nextFrame("s-1")
	if f.body != relayBodyHandshake || len(f.payload) != noiseMsg2Overhead+len(noiseRegistryRejected) {
		t.Fatalf("got %v frame of %d bytes, want msg2 of 3465", f.body, len(f.payload))
	}
	if _, err := i.readResponse(f.payload); !errors.Is(err, errNoiseRegistryRejected) {
		t.Fatalf("readResponse = %v", err)
	}
	h.send(relayFrame{streamID: "s-1", body: relayBodyData, segmentCount: 1, payload: []byte{1, 2}})
	h.expectReset("s-1") // no stream was activated
}

func TestRemoteRendezvousDropReconnectsWithoutRegistering(t *testing.T) {
	e := startRemote(t, nil, nil)
	first := e.rv.next(t)
	first.closeTCP()
	h := e.harness()
	h.mustOpen("s-1").initialize()
	ups := e.rv.upgradeHeaders()
	if len(ups) != 2 || ups[0].Get("X-Request-Id") == ups[1].Get("X-Request-Id") {
		t.Fatalf("upgrades %v", ups)
	}
	if n := e.count("/register"); n != 1 {
		t.Fatalf("%d registrations, want 1", n)
	}
}

func TestRemoteUpgradeRefusedReregisters(t *testing.T) {
	e := startRemote(t, nil, nil, func(e *remoteEnv, _ *remoteConfig) {
		e.rv.refuse = []upgradeRefusal{{status: 403, reason: "invalid_signature"}, {status: 404, reason: "unknown_route"}, {status: 409},
			{status: 400, reason: "route_unavailable"}, {status: 503}}
	})
	h := e.harness()
	h.mustOpen("s-1").initialize()
	// Four refusals call for a new URL; the 503 retries the same one.
	if n := e.count("/register"); n != 5 {
		t.Fatalf("%d registrations, want 5", n)
	}
	if n := len(e.rv.upgradeHeaders()); n != 6 {
		t.Fatalf("%d upgrades, want 6", n)
	}
	if logs := e.logs.String(); strings.Contains(logs, "SECRETSIG") || !strings.Contains(logs, "rendezvous connection failed") {
		t.Fatalf("the log leaks the signed URL or misses the failure:\n%s", logs)
	}
}

func TestRemoteRegistrationRetriedThenServes(t *testing.T) {
	e := startRemote(t, nil, nil, func(e *remoteEnv, _ *remoteConfig) {
		e.reg.register = []func(http.ResponseWriter){status(503), status(503, "Retry-After", "0")}
	})
	e.harness().mustOpen("s-1").initialize()
	if n := e.count("/register"); n != 3 {
		t.Fatalf("%d registrations, want 3", n)
	}
}

func TestRemotePermanentFailuresEndRunRemote(t *testing.T) {
	expired, _ := json.Marshal(map[string]any{"version": 1, "environment_id": "env-test-1", "token": "t", "expires_at": 1})
	tests := []struct {
		name    string
		stdin   string
		flags   []string
		opt     remoteOption
		wantErr string
	}{
		{"registration 401", "", nil, func(e *remoteEnv, _ *remoteConfig) { e.reg.register = []func(http.ResponseWriter){status(401)} }, "HTTP 401"},
		{"registration 404", "", nil, func(e *remoteEnv, _ *remoteConfig) { e.reg.register = []func(http.ResponseWriter){status(404)} }, "HTTP 404"},
		{"bad registration", "", nil, func(e *remoteEnv, _ *remoteConfig) { e.reg.register = []func(http.ResponseWriter){body(`{}`)} }, "invalid registration response"},
		{"expired credential", string(expired) + "\n", []string{"--executor-credential-stdin"}, func(*remoteEnv, *remoteConfig) {}, "expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdin io.Reader
			if tt.flags != nil {
				stdin = strings.NewReader(tt.stdin)
			}
			e := startRemote(t, stdin, tt.flags, tt.opt)
			select {
			case err := <-e.done:
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("runRemote = %v, want %q", err, tt.wantErr)
				}
				e.done <- nil // for the cleanup
			case <-time.After(remoteTestTimeout):
				t.Fatal("runRemote kept running")
			}
		})
	}
}

func TestRemoteCredentialRotationReachesValidate(t *testing.T) {
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	exp := time.Now().Add(time.Hour).Unix()
	frame := func(tok string) string {
		b, _ := json.Marshal(map[string]any{"version": 1, "environment_id": "env-test-1", "token": tok, "expires_at": exp})
		return string(b) + "\n"
	}
	go io.WriteString(pw, frame("tok-1"))
	e := startRemote(t, pr, []string{"--executor-credential-stdin"})
	h := e.harness()
	io.WriteString(pw, frame("tok-2"))
	e.logs.waitFor(t, "registry credential rotated")
	h.mustOpen("s-1")
	var auth []string
	for _, r := range e.reg.snapshot() {
		auth = append(auth, r.path+" "+r.header.Get("Authorization"))
	}
	want := []string{"/cloud/environment/env-test-1/register Bearer tok-1", "/cloud/environment/env-test-1/validate Bearer tok-2"}
	if strings.Join(auth, ",") != strings.Join(want, ",") {
		t.Fatalf("requests %q, want %q", auth, want)
	}
	pw.Close() // the credential stream ends: so does the executor
	select {
	case err := <-e.done:
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("runRemote = %v", err)
		}
		e.done <- nil
	case <-time.After(remoteTestTimeout):
		t.Fatal("runRemote kept running after the credential stream closed")
	}
}

// TestRemoteRendezvousThatNeverAnswersIsRetried: a rendezvous that accepts TCP and then says
// nothing (no TLS handshake) costs one dial timeout, not the executor.
func TestRemoteRendezvousThatNeverAnswersIsRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case accepted <- c:
			default:
				c.Close()
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	})
	e := startRemote(t, nil, nil, func(e *remoteEnv, cfg *remoteConfig) {
		e.reg.url = "wss://" + ln.Addr().String() + "/relay?role=environment&sig=SECRETSIG"
		cfg.timings.dialTimeout = 50 * time.Millisecond
	})
	var held []net.Conn
	for range 2 {
		select {
		case c := <-accepted:
			held = append(held, c) // keep it open and silent
		case <-time.After(remoteTestTimeout):
			t.Fatalf("the executor stopped dialing after %d silent rendezvous connections", len(held))
		}
	}
	for _, c := range held {
		c.Close()
	}
	e.logs.waitFor(t, "rendezvous connection failed")
	if strings.Contains(e.logs.String(), "SECRETSIG") {
		t.Fatalf("the log leaks the signed URL:\n%s", e.logs.String())
	}
}

// TestRemoteUpgradeRetryAfterIsAFloor: a refused upgrade's Retry-After delays the next dial
// like a registry's does (docs/remote.md §2.4, §3); the test policy caps it at 20 ms.
func TestRemoteUpgradeRetryAfterIsAFloor(t *testing.T) {
	e := startRemote(t, nil, nil, func(e *remoteEnv, _ *remoteConfig) {
		e.rv.refuse = []upgradeRefusal{{status: 503, retryAfter: "1"}}
	})
	e.harness().mustOpen("s-1").initialize()
	if logs := e.logs.String(); !strings.Contains(logs, "retry_in=20ms") {
		t.Fatalf("the reconnect did not wait for Retry-After:\n%s", logs)
	}
}

// TestRemoteStalledRendezvousIsDropped: a rendezvous that stops reading while the executor
// writes a large reply is dropped after the pong timeout and redialled, even though the
// stuck write holds the socket's write lock.
func TestRemoteStalledRendezvousIsDropped(t *testing.T) {
	e := startRemote(t, nil, nil, func(_ *remoteEnv, cfg *remoteConfig) {
		cfg.timings.pingInterval = 20 * time.Millisecond
		cfg.timings.pongTimeout = 1000 * time.Millisecond
	})
	ws := e.rv.next(t)
	defer ws.closeTCP()
	hid, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	i, err := newNoiseInitiator(hid, e.executorKey(), noisePrologue("env-test-1", "reg-1", "s"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := i.initiate([]byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: 1, streamID: "s", body: relayBodyHandshake, payload: m}))
	_, data, err := ws.readFrameMessage()
	if err != nil {
		t.Fatal(err)
	}
	f, _ := decodeRelayFrame(data)
	tr, err := i.readResponse(f.payload)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(path, make([]byte, 20<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	send := func(v any) {
		b, _ := json.Marshal(v)
		tr.sealMessage(b, func(seq uint32, rec []byte) error {
			return ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: 1, streamID: "s", body: relayBodyData, seq: seq, segmentCount: 1, payload: rec}))
		})
	}
	send(map[string]any{"id": 1, "method": "initialize", "params": map[string]any{"clientName": "x"}})
	send(map[string]any{"method": "initialized"})
	for k := 2; k < 6; k++ {
		send(map[string]any{"id": k, "method": "fs/readFile", "params": map[string]any{"path": "file://" + path}})
	}
	ws.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for n := 0; n < 3; n++ { // read (answering pings) until the reply is flowing
		if _, _, err := ws.readFrameMessage(); err != nil {
			// On a loaded machine the pong timeout can pass during these reads: the
			// executor has dropped the socket already, which is what is awaited below.
			t.Logf("the socket ended while the reply started: %v", err)
			break
		}
	}
	// never read again: the executor's writes stall; it should drop the socket and redial
	select {
	case c := <-e.rv.conns:
		c.closeTCP()
		t.Log("redialled")
	case <-time.After(10 * time.Second):
		t.Fatal("the executor never dropped the stalled socket")
	}
}

// A 401 or a 400 without a known reason says the URL's credential is refused: the executor
// registers again for a new URL instead of retrying the same one for ever. 429 retries it.
func TestRemoteUpgrade401And400Reregister(t *testing.T) {
	e := startRemote(t, nil, nil, func(e *remoteEnv, _ *remoteConfig) {
		e.rv.refuse = []upgradeRefusal{{status: 401}, {status: 400}, {status: 429}}
	})
	e.harness().mustOpen("s-1").initialize()
	if n := e.count("/register"); n != 3 {
		t.Fatalf("%d registrations, want 3", n)
	}
	if n := len(e.rv.upgradeHeaders()); n != 4 {
		t.Fatalf("%d upgrades, want 4", n)
	}
}

// The registry refusing harnesses (valid:false, 403, 500, 401) counts against the socket's
// failed-handshake budget as unsound Noise messages do (docs/remote.md §3): after
// relayMaxFailedHandshakes of them, handshakes are reset without asking the registry.
func TestRemoteRegistryRejectionsPauseHandshakes(t *testing.T) {
	var n atomic.Int32
	e := startRemote(t, nil, nil, func(e *remoteEnv, _ *remoteConfig) {
		e.reg.validate = func(w http.ResponseWriter, _ map[string]json.RawMessage) {
			switch n.Add(1) % 4 {
			case 0:
				w.WriteHeader(403)
			case 1:
				w.WriteHeader(500)
			case 2:
				w.WriteHeader(401)
			default:
				io.WriteString(w, `{"valid":false}`)
			}
		}
	})
	h := e.harness()
	for i := range relayMaxFailedHandshakes {
		_, err := h.open(fmt.Sprintf("refused-%d", i))
		if err == nil || (err.Error() != "reset" && !errors.Is(err, errNoiseRegistryRejected)) {
			t.Fatalf("open = %v, want a reset or the registry rejection", err)
		}
	}
	e.logs.waitFor(t, "pausing Noise relay handshakes")
	if _, err := h.open("paused"); err == nil || err.Error() != "reset" {
		t.Fatalf("open while paused = %v, want a reset", err)
	}
	if v := e.count("/validate"); v != relayMaxFailedHandshakes {
		t.Fatalf("%d validate calls, want %d: none while paused", v, relayMaxFailedHandshakes)
	}
}
