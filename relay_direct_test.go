package main

// End-to-end tests of the direct transport (docs/remote.md §10) on loopback: a direct registry
// and a TLS websocket endpoint that both check the SigV4 signature with the independent
// verifier of remote_sigv4_test.go, then JSON-RPC over the socket, and the retry rules.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	directTestAKID   = "AKIDDIRECTTEST"
	directTestSecret = "direct/secret+KEY"
)

// testDirect is a direct registry (plain HTTP on loopback) and its websocket endpoint (TLS).
type testDirect struct {
	t   *testing.T
	reg *httptest.Server
	ws  *httptest.Server

	mu        sync.Mutex
	registers []http.Header
	upgrades  []http.Header
	sigErrs   []string
	answers   []func(w http.ResponseWriter) // scripted register answers, then registerOK
	refuse    []int                         // scripted upgrade refusals, then accept
	conns     chan *wsConn

	done chan error
	logs *remoteLog
}

func newTestDirect(t *testing.T) *testDirect {
	d := &testDirect{t: t, conns: make(chan *wsConn, 16), done: make(chan error, 1), logs: &remoteLog{written: make(chan struct{}, 1)}}
	d.reg = httptest.NewServer(http.HandlerFunc(d.serveRegister))
	d.ws = httptest.NewTLSServer(http.HandlerFunc(d.serveUpgrade))
	t.Cleanup(func() {
		d.reg.Close()
		d.ws.CloseClientConnections()
		d.ws.Close()
		for {
			select {
			case c := <-d.conns:
				c.closeTCP()
			default:
				return
			}
		}
	})
	return d
}

// url is the websocket URL handed out, with a credential-like query that must never be logged.
func (d *testDirect) url() string {
	return "wss://" + strings.TrimPrefix(d.ws.URL, "https://") + "/ws/env-test-1?sig=SECRETSIG"
}

func (d *testDirect) verify(what string, r *http.Request, body []byte, signed string) {
	err := sigv4Verify(r, body, directTestSecret)
	if err == nil && !strings.Contains(r.Header.Get("Authorization"), "Credential="+directTestAKID+"/") {
		err = errors.New("wrong access key id")
	}
	if err == nil && !strings.Contains(r.Header.Get("Authorization"), "/us-west-2/execute-api/aws4_request, SignedHeaders="+signed+", ") {
		err = fmt.Errorf("scope or signed headers: %q", r.Header.Get("Authorization"))
	}
	if err != nil {
		d.mu.Lock()
		d.sigErrs = append(d.sigErrs, what+": "+err.Error())
		d.mu.Unlock()
	}
}

func (d *testDirect) serveRegister(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || r.URL.Path != "/cloud/environment/env-test-1/direct/register" || string(body) != `{"transport":"direct_jsonrpc_v1"}` {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	d.verify("register", r, body, "content-type;host;x-amz-date")
	d.mu.Lock()
	d.registers = append(d.registers, r.Header.Clone())
	var next func(http.ResponseWriter)
	if len(d.answers) > 0 {
		next, d.answers = d.answers[0], d.answers[1:]
	}
	d.mu.Unlock()
	if next != nil {
		next(w)
		return
	}
	json.NewEncoder(w).Encode(map[string]string{"environment_id": "env-test-1", "transport": "direct_jsonrpc_v1",
		"registration_id": "dreg-1", "url": d.url(), "extra": "ignored"})
}

func (d *testDirect) serveUpgrade(w http.ResponseWriter, r *http.Request) {
	d.verify("upgrade", r, nil, "host;x-amz-date")
	d.mu.Lock()
	d.upgrades = append(d.upgrades, r.Header.Clone())
	refusal := 0
	if len(d.refuse) > 0 {
		refusal, d.refuse = d.refuse[0], d.refuse[1:]
	}
	d.mu.Unlock()
	if r.URL.Query().Get("sig") != "SECRETSIG" {
		http.Error(w, "unsigned url", http.StatusForbidden)
		return
	}
	if refusal != 0 {
		w.WriteHeader(refusal)
		return
	}
	nc, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: "+
		acceptKey(r.Header.Get("Sec-WebSocket-Key"))+"\r\n\r\n")
	d.conns <- newWSConn(nc, brw.Reader, false, wsOptions{})
}

func (d *testDirect) counts() (registers, upgrades int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.registers), len(d.upgrades)
}

// start runs runRemote with the direct transport until the test ends.
func (d *testDirect) start(extra ...string) {
	t := d.t
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pemCert(d.ws.Certificate().Raw), 0o600); err != nil {
		t.Fatal(err)
	}
	env := envOf("AWS_ACCESS_KEY_ID", directTestAKID, "AWS_SECRET_ACCESS_KEY", directTestSecret, "HOME", "/nonexistent")
	cfg := testConfigEnv(t, d.reg.URL, env, append([]string{"--remote-transport", "direct", "--aws-sigv4",
		"--aws-region", "us-west-2", "--remote-ca", ca}, extra...)...)
	log := newTextLogger(d.logs, levelDebug)
	ctx, cancel := context.WithCancel(context.Background())
	srv := newServer(ctx, serverConfig{sessionTTL: defaultSessionTTL, retention: defaultRetention}, log)
	go func() { d.done <- runRemote(ctx, cfg, srv, nil, log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-d.done:
		case <-time.After(remoteTestTimeout):
			t.Error("runRemote did not return after cancel")
		}
		srv.shutdown()
		logs := d.logs.String()
		if strings.Contains(logs, directTestSecret) || strings.Contains(logs, "SECRETSIG") {
			t.Errorf("the log leaks the AWS secret or the signed URL:\n%s", logs)
		}
		if t.Failed() {
			t.Logf("executor log:\n%s", logs)
		}
	})
}

func (d *testDirect) next() *directClient {
	d.t.Helper()
	select {
	case c := <-d.conns:
		return &directClient{t: d.t, ws: c}
	case <-time.After(remoteTestTimeout):
		d.t.Fatal("the executor did not connect to the direct endpoint")
		return nil
	}
}

func (d *testDirect) waitErr() error {
	d.t.Helper()
	select {
	case err := <-d.done:
		d.done <- err // for the cleanup
		return err
	case <-time.After(remoteTestTimeout):
		d.t.Fatal("runRemote kept running")
		return nil
	}
}

func (d *testDirect) checkSignatures() {
	d.t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.sigErrs) > 0 {
		d.t.Fatalf("signatures did not verify: %v", d.sigErrs)
	}
}

// directClient is the JSON-RPC client at the endpoint's end of the socket.
type directClient struct {
	t      *testing.T
	ws     *wsConn
	nextID int
}

func (c *directClient) call(method string, params any, onNote func(rpcReply)) rpcReply {
	c.t.Helper()
	c.nextID++
	b, _ := json.Marshal(map[string]any{"id": c.nextID, "method": method, "params": params})
	if err := c.ws.writeMessage(b); err != nil {
		c.t.Fatal(err)
	}
	for {
		r := c.recv()
		if r.Method != "" && r.ID == nil {
			if onNote != nil {
				onNote(r)
			}
			continue
		}
		if string(r.ID) != fmt.Sprint(c.nextID) {
			c.t.Fatalf("reply id %s, want %d", r.ID, c.nextID)
		}
		return r
	}
}

func (c *directClient) recv() rpcReply {
	c.t.Helper()
	c.ws.nc.SetReadDeadline(time.Now().Add(remoteTestTimeout))
	b, err := c.ws.readMessage()
	if err != nil {
		c.t.Fatal(err)
	}
	var r rpcReply
	if err := json.Unmarshal(b, &r); err != nil {
		c.t.Fatalf("not JSON-RPC: %q", b)
	}
	return r
}

func (c *directClient) initialize() {
	c.t.Helper()
	r := c.call("initialize", map[string]any{"clientName": "direct-test"}, nil)
	var v struct {
		SessionID string `json:"sessionId"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &v) != nil || v.SessionID == "" {
		c.t.Fatalf("initialize: %+v", r)
	}
	b, _ := json.Marshal(map[string]any{"method": "initialized", "params": map[string]any{}})
	c.ws.writeMessage(b)
}

func TestDirectEndToEnd(t *testing.T) {
	d := newTestDirect(t)
	d.start()
	c := d.next()
	c.initialize()

	var out bytes.Buffer
	closed := false
	note := processNotes(&out, &closed)
	r := c.call("process/start", map[string]any{"processId": "p1", "argv": []string{"echo", "hi"},
		"cwd": "file://" + t.TempDir(), "env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": false}, note)
	skipIfMissing(t, r, "process/start")
	if r.Error != nil {
		t.Fatalf("process/start: %s", r.Error.Message)
	}
	for !closed {
		note(c.recv())
	}
	if out.String() != "hi\n" {
		t.Fatalf("output %q, want hi", out.String())
	}

	d.checkSignatures()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.registers) != 1 || len(d.upgrades) != 1 {
		t.Fatalf("%d registrations and %d upgrades, want 1 and 1", len(d.registers), len(d.upgrades))
	}
	registryHeaders(t, "direct register", d.registers[0], map[string]string{"Content-Type": "application/json", "Accept": "*/*", "Accept-Encoding": "gzip", "X-Amz-Date": "*", "Authorization": "*"})
	up := d.upgrades[0]
	for _, h := range []string{"Authorization", "X-Amz-Date", "Upgrade", "Connection", "Sec-Websocket-Key", "Sec-Websocket-Version"} {
		if up.Get(h) == "" {
			t.Errorf("upgrade without %s", h)
		}
	}
	if len(up) != 6 {
		t.Errorf("upgrade headers %v, want only the websocket ones, X-Amz-Date and Authorization", up)
	}
}

func TestDirectReconnects(t *testing.T) {
	t.Run("409 registers again", func(t *testing.T) {
		d := newTestDirect(t)
		d.refuse = []int{409}
		d.start()
		d.next().initialize()
		if r, u := d.counts(); r != 2 || u != 2 {
			t.Fatalf("%d registrations and %d upgrades, want 2 and 2", r, u)
		}
		d.checkSignatures()
	})
	t.Run("503 retries the same URL", func(t *testing.T) {
		d := newTestDirect(t)
		d.refuse = []int{503, 429}
		d.start()
		d.next().initialize()
		if r, u := d.counts(); r != 1 || u != 3 {
			t.Fatalf("%d registrations and %d upgrades, want 1 and 3", r, u)
		}
	})
	t.Run("a dropped socket reconnects without registering", func(t *testing.T) {
		d := newTestDirect(t)
		d.start()
		d.next().ws.closeTCP()
		d.next().initialize()
		if r, u := d.counts(); r != 1 || u != 2 {
			t.Fatalf("%d registrations and %d upgrades, want 1 and 2", r, u)
		}
		d.checkSignatures() // each upgrade signed afresh
	})
	for _, status := range []int{400, 401, 403, 404} {
		t.Run(fmt.Sprintf("%d is fatal", status), func(t *testing.T) {
			d := newTestDirect(t)
			d.refuse = []int{status}
			d.start()
			err := d.waitErr()
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("HTTP %d", status)) {
				t.Fatalf("runRemote = %v, want a fatal HTTP %d", err, status)
			}
			if r, u := d.counts(); r != 1 || u != 1 {
				t.Fatalf("%d registrations and %d upgrades, want 1 and 1", r, u)
			}
		})
	}
}

func TestDirectRegistration(t *testing.T) {
	answer := func(m map[string]any) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) { json.NewEncoder(w).Encode(m) }
	}
	good := func(d *testDirect) map[string]any {
		return map[string]any{"environment_id": "env-test-1", "transport": "direct_jsonrpc_v1", "registration_id": "dreg-1", "url": d.url()}
	}
	with := func(d *testDirect, k string, v any) map[string]any {
		m := good(d)
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name    string
		answers func(d *testDirect) []func(http.ResponseWriter)
		wantErr string // "": serves
	}{
		{"transient failures are retried", func(*testDirect) []func(http.ResponseWriter) {
			return []func(http.ResponseWriter){status(503), status(429, "Retry-After", "0")}
		}, ""},
		{"401 is fatal", func(*testDirect) []func(http.ResponseWriter) { return []func(http.ResponseWriter){status(401)} }, "HTTP 401"},
		{"another environment", func(d *testDirect) []func(http.ResponseWriter) {
			return []func(http.ResponseWriter){answer(with(d, "environment_id", "env-other"))}
		}, "different environment id"},
		{"another transport", func(d *testDirect) []func(http.ResponseWriter) {
			return []func(http.ResponseWriter){answer(with(d, "transport", "noise_hybrid_ik_v1"))}
		}, "unsupported transport"},
		{"empty registration id", func(d *testDirect) []func(http.ResponseWriter) {
			return []func(http.ResponseWriter){answer(with(d, "registration_id", ""))}
		}, "empty registration_id"},
		{"no url", func(d *testDirect) []func(http.ResponseWriter) {
			return []func(http.ResponseWriter){answer(with(d, "url", nil))}
		}, "are required"},
		{"plain ws off loopback", func(d *testDirect) []func(http.ResponseWriter) {
			return []func(http.ResponseWriter){answer(with(d, "url", "ws://exec.example/ws"))}
		}, "must use wss"},
		{"a query that cannot be signed", func(d *testDirect) []func(http.ResponseWriter) {
			return []func(http.ResponseWriter){answer(with(d, "url", d.url()+"?sig=%zz"))}
		}, "its query does not decode"},
		{"a space in the query", func(d *testDirect) []func(http.ResponseWriter) {
			return []func(http.ResponseWriter){answer(with(d, "url", d.url()+"?q=1 HTTP/1.0"))}
		}, "space or a control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTestDirect(t)
			d.answers = tt.answers(d)
			d.start()
			if tt.wantErr == "" {
				d.next().initialize()
				d.checkSignatures()
				return
			}
			if err := d.waitErr(); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("runRemote = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
