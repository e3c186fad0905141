package main

// Tests of the rendezvous's own rules (relayd_rendezvous.go, docs/remote.md §12.4, §12.5):
// what a connect bundle's ticket opens, which bundles a token's connects may forget, the
// codes of a refused upgrade, the scope a minted token counts in. Real relay and executor
// processes (relayd_test.go's startRelayProcess, startRelayExecutor) and real sockets.
//
// A new file: the rendezvous had no test file of its own; relayd_test.go holds the relay's
// end-to-end tests, adv24*_test.go and review24_test.go the adversaries' and the reviewer's.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRelaydTicketSocketsBounded: one connect bundle's ticket opens relaydMaxTicketSockets
// live harness sockets; the next upgrade with it is answered 429, code "capacity" (the code
// every limit answer of the rendezvous carries), while a fresh bundle of the same token
// still opens one.
func TestRelaydTicketSocketsBounded(t *testing.T) {
	f := newRelaydFixture(t, "")
	_, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-t", f.fleet)
	c := newRelaydHarnessClient(t, base, f.alice)
	b := c.connect("box-t")
	for i := range relaydMaxTicketSockets {
		if _, err := c.dial(b); err != nil {
			t.Fatalf("socket %d of one bundle: %v", i+1, err)
		}
	}
	req, err := http.NewRequest("GET", b.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Scheme = strings.Replace(req.URL.Scheme, "ws", "http", 1)
	for k, v := range map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	t.Logf("socket %d of one bundle: %d %+v", relaydMaxTicketSockets+1, resp.StatusCode, body.Error)
	if resp.StatusCode != http.StatusTooManyRequests || body.Error.Code != "capacity" {
		t.Errorf("socket %d of one bundle: %d, code %q; want 429, code \"capacity\"", relaydMaxTicketSockets+1, resp.StatusCode, body.Error.Code)
	}
	if _, err := c.dial(c.connect("box-t")); err != nil {
		t.Errorf("a fresh bundle of the same token: %v", err)
	}
}

// TestRelaydBundleOfALiveSocketKept: a token's connects past relaydMaxTokenAuthorizations
// forget its oldest bundle, but not one a live harness socket came in with: a stream that
// socket opens afterwards is validated with that bundle (the single shared token of
// docs/remote.md §12.1 makes 64 connects to one environment within 5 minutes plausible).
func TestRelaydBundleOfALiveSocketKept(t *testing.T) {
	f := newRelaydFixture(t, "")
	_, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-k", f.fleet)
	c := newRelaydHarnessClient(t, base, f.alice)
	b := c.connect("box-k")
	h, err := c.dial(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relaydOpenStream(h, b, "s-1", b.Authorization); err != nil {
		t.Fatalf("the first stream: %v", err)
	}
	for i := range relaydMaxTokenAuthorizations {
		if status, v := relaydPost(t, nil, base, "box-k", "connect", f.alice, map[string]any{"harness_public_key": c.id.publicKey()}); status != http.StatusOK {
			t.Fatalf("connect %d: %d %v", i+1, status, v)
		}
	}
	if _, err := relaydOpenStream(h, b, "s-2", b.Authorization); err != nil {
		t.Errorf("a second stream on the live socket, after %d more connects of its token: %v (its bundle was forgotten)", relaydMaxTokenAuthorizations, err)
	}
}

// TestRelaydMintedTokenScope: every minted token is a scope of its own for the per-token
// limits, and its name, which the logs show, holds no part of the token's MAC.
func TestRelaydMintedTokenScope(t *testing.T) {
	secret := make([]byte, relaydMinSecretBytes)
	rand.Read(secret)
	cfg := &relaydConfig{secret: secret}
	now := time.Now()
	names := map[string]bool{}
	for i := range 3 {
		tok := relaydMintToken(secret, relaydRoleHarness, "box-s", now.Add(time.Duration(i+1)*time.Hour))
		got, err := cfg.authenticate(http.Header{"Authorization": {"Bearer " + tok}}, now)
		if err != nil {
			t.Fatal(err)
		}
		mac := tok[strings.LastIndexByte(tok, '.')+1:]
		for j := 0; j+6 <= len(mac); j++ {
			if strings.Contains(got.name, mac[j:j+6]) {
				t.Errorf("token name %q holds part of the token's MAC", got.name)
				break
			}
		}
		if !strings.HasPrefix(got.name, "env:harness:box-s:") {
			t.Errorf("token name %q: want env:harness:box-s:…", got.name)
		}
		names[got.name] = true
	}
	if len(names) != 3 {
		t.Errorf("three minted tokens of one environment have %d names: %v", len(names), names)
	}
}

// TestRelaydExecutorURLReplacesADeadSocket: an executor dials its URL again once its socket is
// gone to it; when the relay's side of the old socket answers no ping (a half-open
// connection), the new socket replaces it after relaydExecutorProbe. One that answers keeps
// its place (TestAdv24bLeakedExecutorURLTakesTheEnvironment).
func TestRelaydExecutorURLReplacesADeadSocket(t *testing.T) {
	f := newRelaydFixture(t, "")
	_, base := startRelayProcess(t, f, "127.0.0.1:0")
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	status, v := relaydPost(t, nil, base, "box-dead", "register", f.fleet, map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()})
	if status != http.StatusOK {
		t.Fatalf("register: %d %v", status, v)
	}
	url := v["url"].(string)
	dial := func() (*wsConn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
		defer cancel()
		ws, _, err := dialWebsocket(ctx, url, nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage})
		if err == nil {
			t.Cleanup(ws.closeTCP)
		}
		return ws, err
	}
	if _, err := dial(); err != nil { // never read again: it answers no ping
		t.Fatal(err)
	}
	began := time.Now()
	next, err := dial()
	if err != nil {
		t.Fatalf("the executor's second socket, its first answering no ping: %v", err)
	}
	t.Logf("the second socket replaced the silent first after %v", time.Since(began).Round(time.Millisecond))
	// The new socket is the environment's: a harness's resume reaches it.
	c := newRelaydHarnessClient(t, base, f.alice)
	h, err := c.dial(c.connect("box-dead"))
	if err != nil {
		t.Fatal(err)
	}
	h.send(relayFrame{streamID: "s-1", body: relayBodyResume})
	next.nc.SetReadDeadline(time.Now().Add(remoteTestTimeout))
	for {
		op, data, err := next.readFrameMessage()
		if err != nil {
			t.Fatalf("the second socket: %v before the harness's resume", err)
		}
		if fr, err := decodeRelayFrame(data); err == nil && op == wsOpBinary {
			t.Logf("the second socket got %v on %s", fr.body, fr.streamID)
			return
		}
	}
}
