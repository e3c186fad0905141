package main

// End-to-end tests of `exec-server forward` (remote_forward.go): the loopback registry and
// rendezvous of remote_harness_test.go drive the executor, whose streams are bridged to a
// target exec-server on a real loopback websocket.

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// forwardTo makes the executor forward its streams to url, with the token of tokenFile.
func forwardTo(t *testing.T, url, tokenFile string) remoteOption {
	return func(_ *remoteEnv, cfg *remoteConfig) {
		cfg.forward = &forwardConfig{connect: url, tokenFile: tokenFile}
		if err := cfg.forward.validate(); err != nil {
			t.Fatal(err)
		}
	}
}

// initializeSession runs initialize and returns the session id the target gave.
func initializeSession(s *testStream) string {
	s.h.t.Helper()
	var v struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(s.mustCall("initialize", map[string]any{"clientName": "forward-test"}), &v)
	s.sendJSON(map[string]any{"method": "initialized", "params": map[string]any{}})
	return v.SessionID
}

func TestForwardProcessOutputAndClose(t *testing.T) {
	target := startTestServer(t)
	e := startRemote(t, nil, nil, forwardTo(t, target.url, ""))
	h := e.harness()
	s := h.mustOpen("s-forward")
	sid := initializeSession(s)
	if serverSession(target, sid) == nil {
		t.Fatalf("session %q is not the target's", sid)
	}
	if out := s.runScript("echo hi"); out != "hi\n" {
		t.Fatalf("output %q", out)
	}

	// The harness resets the stream: the bridge closes its websocket, and the target
	// detaches the session.
	h.send(relayFrame{streamID: s.id, body: relayBodyReset, reason: relayResetReason})
	waitDetached(t, target, sid)
	e.logs.waitFor(t, "forward: stream ended")
}

// TestForwardTargetCloseEndsStream: a target that closes its websocket resets the stream, and
// the messages before it are text frames both ways.
func TestForwardTargetCloseEndsStream(t *testing.T) {
	conns := make(chan *wsConn, 1)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		nc, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: "+
			acceptKey(req.Header.Get("Sec-WebSocket-Key"))+"\r\n\r\n")
		conns <- newWSConn(nc, brw.Reader, false, wsOptions{})
	}))
	t.Cleanup(func() { target.CloseClientConnections(); target.Close() })
	e := startRemote(t, nil, nil, forwardTo(t, "ws"+strings.TrimPrefix(target.URL, "http"), ""))
	h := e.harness()
	s := h.mustOpen("s-target-close")
	s.sendJSON(map[string]any{"id": 1, "method": "ping"})
	var ws *wsConn
	select {
	case ws = <-conns:
	case <-time.After(remoteTestTimeout):
		t.Fatal("the bridge did not connect to the target")
	}
	op, msg, err := ws.readFrameMessage() // one binary message per JSON-RPC message, as 0.169's forward
	if err != nil || op != wsOpBinary || string(msg) != `{"id":1,"method":"ping"}` {
		t.Fatalf("target got op %d %q, %v", op, msg, err)
	}
	ws.writeMessage([]byte(`{"id":1,"result":{}}`))
	if got := string(s.recv()); got != `{"id":1,"result":{}}` {
		t.Fatalf("stream got %s", got)
	}
	ws.close(nil)
	h.expectReset(s.id)
	e.logs.waitFor(t, "forward: stream ended")
}

func TestForwardConnectTokenFile(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	os.WriteFile(good, []byte("s3cret-capability\n"), 0o600)
	os.WriteFile(bad, []byte("wrong\n"), 0o600)
	target := startTestServer(t, func(srv *server) {
		auth, err := newWSAuth(wsAuthModeCapabilityToken, good, "", "", "", "", defaultWSMaxClockSkew)
		if err != nil {
			t.Fatal(err)
		}
		srv.auth = auth
	})
	t.Run("good", func(t *testing.T) {
		e := startRemote(t, nil, nil, forwardTo(t, target.url, good))
		s := e.harness().mustOpen("s-token")
		if sid := initializeSession(s); serverSession(target, sid) == nil {
			t.Fatalf("session %q is not the target's", sid)
		}
	})
	t.Run("bad", func(t *testing.T) {
		e := startRemote(t, nil, nil, forwardTo(t, target.url, bad))
		h := e.harness()
		h.mustOpen("s-bad-token")
		h.expectReset("s-bad-token") // the target refused the upgrade: the stream ends
		e.logs.waitFor(t, "401 Unauthorized")
	})
}

func TestForwardRefusesDirectTransport(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"forward", "--remote", "https://registry.example", "--environment-id", "env",
		"--connect", "ws://127.0.0.1:1", "--remote-transport", "direct", "--aws-sigv4"}, nil, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "direct exec-server transport does not support forwarding") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

func TestForwardHelpAndUsageErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"forward", "--help"}, nil, &stdout, &stderr); code != 0 ||
		!strings.HasPrefix(stdout.String(), "usage: exec-server forward ") || !strings.Contains(stdout.String(), "\n  --connect URL\n") ||
		!strings.Contains(stdout.String(), "\n  --connect-token-file FILE\n") || strings.Contains(stdout.String(), "--listen") {
		t.Fatalf("forward --help: exit %d, stdout %q", code, stdout.String())
	}
	stdout.Reset()
	run([]string{"--help"}, nil, &stdout, &stderr)
	if !strings.Contains(stdout.String(), "\n  exec-server forward ") || strings.Contains(stdout.String(), "--connect URL") {
		t.Fatalf("--help does not list forward: %q", stdout.String())
	}
	for args, want := range map[string]string{
		"forward --connect ws://127.0.0.1:1":                                                   "need --remote",
		"forward --remote https://r.example --environment-id e":                                "forward needs --connect",
		"forward --remote https://r.example --environment-id e --connect x":                    "ws:// or wss://",
		"--connect ws://127.0.0.1:1":                                                           "not defined: -connect",
		"forward --remote https://r.example --environment-id e --connect ws://u:p@127.0.0.1:1": "must not carry userinfo",
		"forward --remote https://r.example --environment-id e --connect ws://127.0.0.1:1/#x":  "must not have a fragment",
	} {
		stderr.Reset()
		if code := run(strings.Fields(args), nil, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), want) {
			t.Errorf("%s: exit %d, stderr %q, want %q", args, code, stderr.String(), want)
		}
	}
}

// TestForwardTokenFileChecks: a token that would break the upgrade's head, or cross the network
// in clear, and a URL that would break its request line, are refused at start-up rather than
// on each stream.
func TestForwardTokenFileChecks(t *testing.T) {
	dir := t.TempDir()
	good, broken := filepath.Join(dir, "good"), filepath.Join(dir, "broken")
	if err := os.WriteFile(good, []byte("tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, []byte("tok-1\nX-Injected: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ connect, file, want string }{
		{"ws://127.0.0.1:1", broken, "line break or another control character"},
		{"ws://10.0.0.1:1", good, "needs a wss:// --connect URL"},
		{"ws://[::1]:1", good, ""},
		{"ws://localhost:1", good, ""},
		{"wss://target.example", good, ""},
		{"ws://10.0.0.1:1", "", ""}, // no token: ws:// anywhere, as 0.169
		{"ws://127.0.0.1:1/?a b", "", "space or a control character"},
	} {
		f := &forwardConfig{connect: c.connect, tokenFile: c.file}
		err := f.validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s with %q: %v", c.connect, c.file, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s with %q: %v, want %q", c.connect, c.file, err, c.want)
		case err != nil && strings.Contains(err.Error(), "tok-1"):
			t.Errorf("the error shows the token: %v", err)
		}
	}
}
