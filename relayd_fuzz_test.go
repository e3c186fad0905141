package main

// Fuzz targets of `exec-server relay` (docs/remote.md "Self-hosted relay"): the frame
// routing of the rendezvous, and the HTTP handling of the registry and the upgrade.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzRelaydRoute: what the rendezvous routes on. A frame it accepts has a non-blank stream id
// within the limit and a body, and its re-encoding routes the same way; anything else is an
// error, never a panic.
func FuzzRelaydRoute(f *testing.F) {
	for _, fr := range []relayFrame{
		{version: 1, streamID: "s-1", body: relayBodyResume},
		{version: 1, streamID: "s-1", body: relayBodyHandshake, payload: []byte{1, 2, 3}},
		{version: 1, streamID: "00000000-0000-4000-8000-000000000001", body: relayBodyData, seq: 5, segmentCount: 1, payload: []byte("x")},
		{version: 1, streamID: "s", body: relayBodyReset, reason: "harness_disconnected"},
		{version: 2, streamID: "s", body: relayBodyHeartbeat},
	} {
		f.Add(appendRelayFrame(nil, &fr))
	}
	f.Add([]byte{0x08, 0x01, 0x12, 0x03, 's', '-', '1', 0x3a, 0x00, 0x5a, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, body, err := relaydRoute(b)
		if err != nil {
			if id != "" || body != relayBodyNone {
				t.Fatalf("an error with a route: %q %v", id, body)
			}
			return
		}
		if strings.TrimSpace(id) == "" || len(id) > relayMaxStreamID || body == relayBodyNone {
			t.Fatalf("accepted stream %q body %v", id, body)
		}
		fr, _ := decodeRelayFrame(b)
		id2, body2, err := relaydRoute(appendRelayFrame(nil, &fr))
		if err != nil || id2 != id || body2 != body {
			t.Fatalf("re-encoded: %q %v %v, want %q %v", id2, body2, err, id, body)
		}
	})
}

// relaydFuzzTokens are the static tokens of FuzzRelaydHTTP's configuration.
const (
	relaydFuzzFleet = "fleet-token-0123456789"
	relaydFuzzAlice = "alice-token-0123456789"
)

// FuzzRelaydHTTP: up to four HTTP requests of the fuzzer's making, read as a server reads
// them, served in turn by one fresh relay. Every answer is JSON with a status of the
// documented set; a 200 from the registry goes only to a bearer that holds the grant; and
// once the requests are served, no socket or connection is left counted.
func FuzzRelaydHTTP(f *testing.F) {
	dir := f.TempDir()
	for name, v := range map[string]string{"fleet.token": relaydFuzzFleet, "alice.token": relaydFuzzAlice, "env.secret": strings.Repeat("s", 40)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			f.Fatal(err)
		}
	}
	config := filepath.Join(dir, "relay.json")
	os.WriteFile(config, []byte(`{"tokens":[{"name":"fleet","file":"fleet.token","register":["box-*"]},
		{"name":"alice","file":"alice.token","connect":["box-*"]}],"environment_token_secret_file":"env.secret"}`), 0o600)
	cfg, err := loadRelaydConfig(config)
	if err != nil {
		f.Fatal(err)
	}
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	key, _ := json.Marshal(id.publicKey())
	req := func(path, bearer, body string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, bearer, len(body), body)
	}
	register := req("/cloud/environment/box-1/register", relaydFuzzFleet, `{"security_profile":"noise_hybrid_ik_v1","executor_public_key":`+string(key)+`}`)
	connect := req("/cloud/environment/box-1/connect", relaydFuzzAlice, `{"harness_public_key":`+string(key)+`}`)
	validate := req("/cloud/environment/box-1/validate", relaydFuzzFleet, `{"executor_registration_id":"reg-1","harness_public_key":`+string(key)+`,"harness_key_authorization":"hka-1"}`)
	upgrade := "GET /relay/v1/harness/box-1?role=harness&ticket=t HTTP/1.1\r\nHost: r\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	perEnv := req("/cloud/environment/box-2/register", relaydMintToken(cfg.secret, relaydRoleExecutor, "box-2", time.Unix(1<<40, 0)), `{}`)
	for _, s := range []string{register, register + connect, register + connect + validate, register + upgrade, perEnv,
		"GET /readyz HTTP/1.1\r\nHost: r\r\n\r\n", "GET /cloud/environment/box-1/register HTTP/1.1\r\nHost: r\r\n\r\n"} {
		f.Add([]byte(s))
	}
	allowed := map[int]bool{200: true, 400: true, 401: true, 403: true, 404: true, 405: true, 429: true, 503: true}
	f.Fuzz(func(t *testing.T, b []byte) {
		d := newRelayd(cfg, "http://127.0.0.1:1", slog.New(slog.NewTextHandler(io.Discard, nil)))
		d.moving = time.Time{} // a connect's wait for a moving registration is timing, not parsing
		br := bufio.NewReader(bytes.NewReader(b))
		for range 4 {
			r, err := http.ReadRequest(br)
			if err != nil {
				break
			}
			r.RemoteAddr = "127.0.0.1:2"
			w := httptest.NewRecorder()
			d.ServeHTTP(w, r)
			r.Body.Close()
			if w.Code == http.StatusInternalServerError && strings.HasPrefix(r.URL.Path, relaydRendezvousPath) {
				continue // an admitted upgrade: the recorder cannot be hijacked
			}
			if !allowed[w.Code] || !json.Valid(w.Body.Bytes()) {
				t.Fatalf("%s %s: %d %q", r.Method, r.URL, w.Code, w.Body.Bytes())
			}
			if w.Code == http.StatusOK && strings.HasPrefix(r.URL.Path, "/cloud/environment/") {
				tok, err := cfg.authenticate(r.Header, time.Now())
				if err != nil {
					t.Fatalf("%s answered 200 to a bearer it does not know", r.URL.Path)
				}
				envID, op, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/cloud/environment/"), "/")
				grants := tok.register
				if op == "connect" {
					grants = tok.connect
				}
				if !tok.may(grants, envID) {
					t.Fatalf("%s answered 200 to token %s without the grant", r.URL.Path, tok.name)
				}
			}
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.sockets != 0 || len(d.conns) != 0 || len(d.live) != 0 {
			t.Fatalf("left counted: %d sockets, conns %v", d.sockets, d.conns)
		}
	})
}
