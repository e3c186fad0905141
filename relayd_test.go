package main

// Tests of `exec-server relay` (docs/remote.md "Self-hosted relay") through real processes:
// the relay and the executor (`exec-server --remote`) are this test binary re-executed as
// exec-server (relaydTestMain), and the harness is the Go test client of
// remote_harness_test.go, which asks the relay's /connect for its bundle, dials the
// rendezvous and runs Noise and JSON-RPC over it.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// relaydTestMainEnv makes this test binary run as exec-server: main's work, with its
// arguments, instead of the tests.
const relaydTestMainEnv = "EXEC_SERVER_RELAYD_TEST_MAIN"

func init() {
	if os.Getenv(relaydTestMainEnv) != "1" {
		return
	}
	if isSandboxStage() {
		runSandboxStage()
	}
	if isFSWorker() {
		runFSWorker()
	}
	if isWatchdog() {
		runWatchdog()
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// relaydProc is an exec-server process under test.
type relaydProc struct {
	cmd    *exec.Cmd
	stderr *remoteLog
	exited chan struct{}
	err    error // after exited
}

// startExecServer runs this binary as `exec-server args…`; stdout, if set, gets its output.
func startExecServer(t *testing.T, stdin io.Reader, stdout io.Writer, args ...string) *relaydProc {
	t.Helper()
	p := &relaydProc{cmd: exec.Command(os.Args[0], args...), stderr: &remoteLog{written: make(chan struct{}, 1)}, exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), relaydTestMainEnv+"=1")
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = stdin, stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("%v stderr:\n%s", args, p.stderr.String())
		}
	})
	return p
}

// wait waits for the process to exit.
func (p *relaydProc) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(remoteTestTimeout):
		t.Fatalf("%v did not exit", p.cmd.Args[1:])
		return nil
	}
}

// relaydFixture is a configuration directory with two static tokens and a secret for
// per-environment tokens.
type relaydFixture struct {
	dir    string
	config string
	fleet  string // register box-*
	alice  string // connect box-*
}

func newRelaydFixture(t *testing.T, extra string) *relaydFixture {
	t.Helper()
	f := &relaydFixture{dir: t.TempDir(), fleet: "fleet-" + randomRelaydID("", 16), alice: "alice-" + randomRelaydID("", 16)}
	for name, v := range map[string]string{"fleet.token": f.fleet, "alice.token": f.alice, "env.secret": randomRelaydID("", 32)} {
		if err := os.WriteFile(filepath.Join(f.dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.config = filepath.Join(f.dir, "relay.json")
	cfg := `{"tokens":[{"name":"fleet","file":"fleet.token","register":["box-*"]},
		{"name":"alice","file":"alice.token","connect":["box-*"]}],
		"environment_token_secret_file":"env.secret"` + extra + `}`
	if err := os.WriteFile(f.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// startRelayProcess runs `exec-server relay` on listen and returns its base URL.
func startRelayProcess(t *testing.T, f *relaydFixture, listen string, extra ...string) (*relaydProc, string) {
	t.Helper()
	p, base := startPrinting(t, nil, append([]string{"relay", "--config", f.config, "--listen", listen}, extra...)...)
	if p == nil {
		t.Fatal("the relay exited without printing its URL")
	}
	return p, base
}

// startPrinting runs `exec-server args…` and returns the first line it prints, or nil if it
// exits before printing one.
func startPrinting(t *testing.T, stdin io.Reader, args ...string) (*relaydProc, string) {
	t.Helper()
	pr, pw := io.Pipe()
	p := startExecServer(t, stdin, pw, args...)
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(pr)
		if s.Scan() {
			line <- s.Text()
		}
		close(line)
		io.Copy(io.Discard, pr)
	}()
	go func() { <-p.exited; pw.Close() }()
	t.Cleanup(func() { pw.Close() })
	select {
	case l, ok := <-line:
		if !ok {
			return nil, ""
		}
		return p, l
	case <-time.After(remoteTestTimeout):
		t.Fatalf("%v printed nothing:\n%s", args, p.stderr.String())
	}
	return nil, ""
}

// startRelayExecutor runs `exec-server --remote base` with a static bearer.
func startRelayExecutor(t *testing.T, base, envID, bearer string, extra ...string) *relaydProc {
	t.Helper()
	args := append([]string{"--remote", base, "--environment-id", envID, "--registration-bearer-stdin"}, extra...)
	return startExecServer(t, strings.NewReader(bearer+"\n"), nil, args...)
}

// relaydPost sends a registry request and returns the status and decoded body.
func relaydPost(t *testing.T, client *http.Client, base, envID, op, bearer string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest("POST", base+"/cloud/environment/"+envID+"/"+op, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s %s: %d, body %q is not JSON", op, envID, resp.StatusCode, raw)
	}
	return resp.StatusCode, v
}

// relaydBundle is a connect answer.
type relaydBundle struct {
	EnvironmentID string          `json:"environment_id"`
	URL           string          `json:"url"`
	RegID         string          `json:"executor_registration_id"`
	ExecutorKey   *noisePublicKey `json:"executor_public_key"`
	Authorization string          `json:"harness_key_authorization"`
}

// relaydHarnessClient is a harness of the relay: its identity, and the TLS roots it trusts.
type relaydHarnessClient struct {
	t      *testing.T
	base   string
	bearer string
	id     *noiseIdentity
	http   *http.Client
	tls    *tls.Config
}

func newRelaydHarnessClient(t *testing.T, base, bearer string) *relaydHarnessClient {
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &relaydHarnessClient{t: t, base: base, bearer: bearer, id: id, http: http.DefaultClient}
}

// connect asks for a bundle; it waits up to remoteTestTimeout for the environment to be
// registered.
func (c *relaydHarnessClient) connect(envID string) relaydBundle {
	c.t.Helper()
	deadline := time.Now().Add(remoteTestTimeout)
	for {
		status, v := relaydPost(c.t, c.http, c.base, envID, "connect", c.bearer, map[string]any{"harness_public_key": c.id.publicKey()})
		if status == http.StatusOK {
			raw, _ := json.Marshal(v)
			var b relaydBundle
			if err := json.Unmarshal(raw, &b); err != nil {
				c.t.Fatal(err)
			}
			return b
		}
		if status != http.StatusNotFound || time.Now().After(deadline) {
			c.t.Fatalf("connect %s: %d %v", envID, status, v)
		}
		time.Sleep(20 * time.Millisecond) // polling a registry that has no event to wait on
	}
}

// dial opens a harness socket with the bundle's URL.
func (c *relaydHarnessClient) dial(b relaydBundle) (*testHarness, error) {
	ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
	defer cancel()
	ws, resp, err := dialWebsocket(ctx, b.URL, nil, c.tls, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("%w (status %d, reason %q)", err, resp.StatusCode, resp.Header.Get(rendezvousRejectionHeader))
		}
		return nil, err
	}
	h := newTestHarness(c.t, ws, b.ExecutorKey)
	h.id = c.id
	return h, nil
}

// open connects to envID and opens one stream on a new socket.
func (c *relaydHarnessClient) open(envID, streamID string) (*testHarness, *testStream) {
	c.t.Helper()
	b := c.connect(envID)
	h, err := c.dial(b)
	if err != nil {
		c.t.Fatalf("dial the rendezvous: %v", err)
	}
	s, err := relaydOpenStream(h, b, streamID, b.Authorization)
	if err != nil {
		c.t.Fatalf("open %s: %v", streamID, err)
	}
	return h, s
}

// relaydOpenStream is testHarness.open with the prologue of the bundle's registration.
func relaydOpenStream(h *testHarness, b relaydBundle, id, auth string) (*testStream, error) {
	h.t.Helper()
	i, err := newNoiseInitiator(h.id, h.execKey, noisePrologue(b.EnvironmentID, b.RegID, id))
	if err != nil {
		return nil, err
	}
	m, err := i.initiate([]byte(auth))
	if err != nil {
		return nil, err
	}
	h.send(relayFrame{streamID: id, body: relayBodyResume})
	h.send(relayFrame{streamID: id, body: relayBodyHandshake, payload: m})
	f := h.nextFrame(id)
	switch f.body {
	case relayBodyReset:
		return nil, fmt.Errorf("reset: %s", f.reason)
	case relayBodyHandshake:
	default:
		return nil, fmt.Errorf("%v frame instead of msg2", f.body)
	}
	tr, err := i.readResponse(f.payload)
	if err != nil {
		return nil, fmt.Errorf("msg2 (%d bytes): %w", len(f.payload), err)
	}
	return &testStream{h: h, id: id, t: tr}, nil
}

// TestRelaydProcessEndToEnd: a relay process, an executor process registered with it, and a
// harness that runs a process through both and reads its output, on two streams at once.
func TestRelaydProcessEndToEnd(t *testing.T) {
	f := newRelaydFixture(t, "")
	_, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-1", f.fleet)
	c := newRelaydHarnessClient(t, base, f.alice)
	_, s := c.open("box-1", "00000000-0000-4000-8000-00000000000a")
	s.initialize()
	if out := s.runScript("for i in 1 2 3; do echo line$i; done"); out != "line1\nline2\nline3\n" {
		t.Fatalf("output %q", out)
	}
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, s := c.open("box-1", fmt.Sprintf("s-%d", i))
			s.initialize()
			s.mustCall("environment/info", nil)
		}()
	}
	wg.Wait()
}

// recordingListener keeps every byte its connections read and write.
type recordingListener struct {
	net.Listener
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: c, l: l}, nil
}

func (l *recordingListener) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes())
}

type recordingConn struct {
	net.Conn
	l *recordingListener
}

func (c *recordingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.l.mu.Lock()
	c.l.buf.Write(b[:n])
	c.l.mu.Unlock()
	return n, err
}

func (c *recordingConn) Write(b []byte) (int, error) {
	c.l.mu.Lock()
	c.l.buf.Write(b)
	c.l.mu.Unlock()
	return c.Conn.Write(b)
}

// startRelaydInProcess serves a relay on ln until the test ends.
func startRelaydInProcess(t *testing.T, f *relaydFixture, ln net.Listener) *relayd {
	t.Helper()
	cfg, err := loadRelaydConfig(f.config)
	if err != nil {
		t.Fatal(err)
	}
	d := newRelayd(cfg, "http://"+ln.Addr().String(), newTextLogger(io.Discard, levelInfo))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay serve: %v", err)
		}
	})
	return d
}

// TestRelaydCarriesOnlyCiphertext: every byte the relay read or wrote on any of its
// connections (registry, executor and harness sockets) is recorded while a harness runs a
// command that prints a marker, and sends the marker in its request. The harness reads the
// marker back; the relay's bytes hold neither the marker nor its base64 (the output's form in
// JSON), so what it forwarded was ciphertext.
func TestRelaydCarriesOnlyCiphertext(t *testing.T) {
	f := newRelaydFixture(t, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingListener{Listener: ln}
	startRelaydInProcess(t, f, rec)
	base := "http://" + ln.Addr().String()
	startRelayExecutor(t, base, "box-c", f.fleet)
	c := newRelaydHarnessClient(t, base, f.alice)
	_, s := c.open("box-c", "s-cipher")
	s.initialize()
	marker := "PLAINTEXT-MARKER-" + randomRelaydID("", 8)
	if out := s.runScript("echo " + marker); out != marker+"\n" {
		t.Fatalf("output %q", out)
	}
	seen := rec.bytes()
	forms := []string{marker, base64.StdEncoding.EncodeToString([]byte(marker + "\n")), "process/start", "initialize"}
	for _, form := range forms {
		if bytes.Contains(seen, []byte(form)) {
			t.Errorf("the relay saw %q in the clear", form)
		}
	}
	if !bytes.Contains(seen, []byte("harness_key_authorization")) || len(seen) < 10000 {
		t.Fatalf("the recording missed the relay's traffic (%d bytes)", len(seen))
	}
	t.Logf("the relay read and wrote %d bytes; none holds the marker or a JSON-RPC method name", len(seen))
}

// TestRelaydAccessControl: the refusals of the registry and the rendezvous, with static and
// per-environment tokens.
func TestRelaydAccessControl(t *testing.T) {
	f := newRelaydFixture(t, "")
	relay, base := startRelayProcess(t, f, "127.0.0.1:0")
	id, _ := newNoiseIdentity(rand.Reader)
	reg := map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()}
	con := map[string]any{"harness_public_key": id.publicKey()}
	check := func(name string, gotStatus int, got map[string]any, status int, code string) {
		t.Helper()
		e, _ := got["error"].(map[string]any)
		if gotStatus != status || e == nil || e["code"] != code || e["message"] == "" {
			t.Errorf("%s: %d %v, want %d with error code %q", name, gotStatus, got, status, code)
		} else {
			t.Logf("%s: %d %v", name, gotStatus, got)
		}
	}
	st, v := relaydPost(t, nil, base, "box-9", "register", "", reg)
	check("register without a bearer", st, v, 401, "unauthorized")
	st, v = relaydPost(t, nil, base, "box-9", "register", "nope-"+f.fleet, reg)
	check("register with an unknown token", st, v, 401, "unauthorized")
	// The operator sees a refused unknown token too, without the token.
	relay.stderr.waitFor(t, "relay: unauthorized")
	if log := relay.stderr.String(); !strings.Contains(log, "environment_id=box-9") || strings.Contains(log, "nope-") {
		t.Errorf("the 401's log line: %s", log)
	}
	st, v = relaydPost(t, nil, base, "box-9", "register", f.alice, reg)
	check("register with a connect-only token", st, v, 403, "forbidden")
	st, v = relaydPost(t, nil, base, "other-9", "register", f.fleet, reg)
	check("register outside the token's patterns", st, v, 403, "forbidden")
	st, v = relaydPost(t, nil, base, "box-9", "connect", f.fleet, con)
	check("connect with a register-only token", st, v, 403, "forbidden")
	st, v = relaydPost(t, nil, base, "box-9", "connect", f.alice, con)
	check("connect to an environment nobody registered", st, v, 404, "not_registered")
	st, v = relaydPost(t, nil, base, "box-9", "validate", f.alice, map[string]any{})
	check("validate with a connect-only token", st, v, 403, "forbidden")
	st, v = relaydPost(t, nil, base, "bad.id", "register", f.fleet, reg)
	check("an environment id outside [A-Za-z0-9_-]", st, v, 400, "invalid_environment_id")
	st, v = relaydPost(t, nil, base, "box-9", "register", f.fleet, map[string]any{"security_profile": "other"})
	check("register without a key", st, v, 400, "invalid_request")

	// Per-environment tokens, minted by `exec-server relay token`: an executor token for
	// box-e registers box-e through --executor-credential-stdin, and nothing else.
	var frame bytes.Buffer
	if p := startExecServer(t, nil, &frame, "relay", "token", "--config", f.config, "--environment-id", "box-e", "--role", "executor", "--ttl", "1h"); p.wait(t) != nil {
		t.Fatalf("relay token: %s", p.stderr.String())
	}
	var cred struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(frame.Bytes(), &cred); err != nil || cred.Token == "" {
		t.Fatalf("relay token printed %q", frame.String())
	}
	st, v = relaydPost(t, nil, base, "box-f", "register", cred.Token, reg)
	check("a per-environment token on another environment", st, v, 403, "forbidden")
	st, v = relaydPost(t, nil, base, "box-e", "connect", cred.Token, con)
	check("an executor's per-environment token on connect", st, v, 403, "forbidden")
	// The credential stream must stay open: its end ends remote mode.
	credR, credW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { credW.Close() })
	credW.Write(frame.Bytes())
	startExecServer(t, credR, nil, "--remote", base, "--environment-id", "box-e", "--executor-credential-stdin")
	credR.Close()
	var htok bytes.Buffer
	if p := startExecServer(t, nil, &htok, "relay", "token", "--config", f.config, "--environment-id", "box-e", "--role", "harness", "--bare"); p.wait(t) != nil {
		t.Fatalf("relay token: %s", p.stderr.String())
	}
	hc := newRelaydHarnessClient(t, base, strings.TrimSpace(htok.String()))
	_, s := hc.open("box-e", "s-env-token")
	s.initialize()
	cfg, err := loadRelaydConfig(f.config)
	if err != nil {
		t.Fatal(err)
	}
	expired := relaydMintToken(cfg.secret, relaydRoleHarness, "box-e", time.Now().Add(-time.Second))
	st, v = relaydPost(t, nil, base, "box-e", "connect", expired, con)
	check("an expired per-environment token", st, v, 401, "unauthorized")
	forged := relaydMintToken([]byte("not-the-relay-secret-0123456789abcdef"), relaydRoleHarness, "box-e", time.Now().Add(time.Hour))
	st, v = relaydPost(t, nil, base, "box-e", "connect", forged, con)
	check("a per-environment token with a wrong MAC", st, v, 401, "unauthorized")

	// An executor whose token the relay refuses exits: registration 401 is permanent.
	p := startRelayExecutor(t, base, "box-x", "unknown-token-0123456789")
	if err := p.wait(t); err == nil || !strings.Contains(p.stderr.String(), "401") {
		t.Errorf("executor with a refused token: %v\n%s", err, p.stderr.String())
	}

	// The rendezvous: a ticket that is not the bundle's, an executor URL with a wrong
	// secret, and a harness whose Noise message 1 carries another bundle's authorization
	// (the relay's validate refuses it, and the executor resets the stream).
	b := hc.connect("box-e")
	bad := b
	bad.URL = strings.Replace(b.URL, "ticket=", "ticket=0", 1)
	if _, err := hc.dial(bad); err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "invalid_signature") {
		t.Errorf("dial with a wrong ticket: %v", err)
	}
	h, err := hc.dial(b)
	if err != nil {
		t.Fatal(err)
	}
	other := hc.connect("box-e")
	if _, err := relaydOpenStream(h, b, "s-wrong-auth", other.Authorization); err == nil {
		t.Errorf("a stream with another bundle's authorization was accepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
	defer cancel()
	u := strings.Replace(base, "http://", "ws://", 1) + relaydRendezvousPath + "environment/box-e?role=environment&reg=" + b.RegID + "&sig=00"
	if _, resp, err := dialWebsocket(ctx, u, nil, nil, wsOptions{}); err == nil || resp == nil || resp.StatusCode != 403 ||
		resp.Header.Get(rendezvousRejectionHeader) != "invalid_signature" {
		t.Errorf("executor upgrade with a wrong secret: %v %v", err, resp)
	}
}

// TestRelaydConfigRefusals: the configuration file is checked strictly.
func TestRelaydConfigRefusals(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok.token"), []byte("0123456789abcdef0123\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "short.token"), []byte("short\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "open.token"), []byte("0123456789abcdef9999\n"), 0o644)
	os.Chmod(filepath.Join(dir, "open.token"), 0o644)
	for _, tt := range []struct{ cfg, want string }{
		{`{"tokens":[{"name":"a","file":"ok.token","register":["*"]}],"extra":1}`, `unknown field "extra"`},
		{`{"tokens":[{"name":"a","file":"ok.token","register":["*"],"role":"x"}]}`, `unknown field "role"`},
		{`{"tokens":[{"name":"a","file":"short.token","register":["*"]}]}`, "want at least 16"},
		{`{"tokens":[{"name":"a","file":"open.token","register":["*"]}]}`, "readable or writable by group or others"},
		{`{"tokens":[{"name":"a","file":"ok.token","register":["a/b"]}]}`, `pattern "a/b"`},
		{`{"tokens":[{"name":"a","file":"ok.token"}]}`, "grants nothing"},
		{`{"tokens":[{"name":"a","file":"ok.token","register":["*"]},{"name":"a","file":"ok.token","connect":["*"]}]}`, "unique"},
		{`{"tokens":[{"name":"a","file":"ok.token","register":["*"]},{"name":"b","file":"ok.token","connect":["*"]}]}`, "the same token"},
		{`{"tokens":[]}`, "nobody could use the relay"},
		{`{"tokens":[{"name":"a","file":"ok.token","register":["*"]}],"max_streams_per_environment":100000}`, "max_streams_per_environment must be"},
		{`{"tokens":[{"name":"a","file":"ok.token","register":["*"]}],"idle_timeout":"1ms"}`, "idle_timeout must be"},
		{`{"tokens":[{"name":"a","file":"ok.token","register":["*"]}],"environment_token_secret_file":"ok.token"}`, "want at least 32"},
		{`{"tokens":[{"name":"a","file":"ok.token","register":["*"]}]} {}`, "data after"},
	} {
		p := filepath.Join(dir, "relay.json")
		os.WriteFile(p, []byte(tt.cfg), 0o600)
		if _, err := loadRelaydConfig(p); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("config %s: error %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

// TestRelaydListenRules: plain HTTP only on loopback unless --behind-proxy (which needs
// --public-url); HTTPS from --tls-cert/--tls-key, end to end with an executor that trusts
// the certificate through --remote-ca.
func TestRelaydListenRules(t *testing.T) {
	f := newRelaydFixture(t, "")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, "refusing plain HTTP on 0.0.0.0, which is not loopback"},
		{[]string{"--listen", "0.0.0.0:0", "--behind-proxy"}, "--behind-proxy needs --public-url"},
		{[]string{"--tls-cert", "x.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"--public-url", "http://relay.example"}, "want https, or http to a loopback address"},
		{nil, "--config is required"},
	} {
		args := append([]string{"relay"}, tt.args...)
		if len(tt.args) > 0 {
			args = append(args, "--config", f.config)
		}
		p := startExecServer(t, nil, nil, args...)
		if err := p.wait(t); err == nil || !strings.Contains(p.stderr.String(), tt.want) {
			t.Errorf("%v: %v, stderr %q, want %q", tt.args, err, p.stderr.String(), tt.want)
		}
	}
	_, base := startRelayProcess(t, f, "0.0.0.0:0", "--behind-proxy", "--public-url", "https://relay.example")
	if base != "https://relay.example" {
		t.Errorf("behind a proxy the relay said %q", base)
	}

	certFile, keyFile, pool, caPEM := relaydTestCert(t)
	_, tbase := startRelayProcess(t, f, "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(tbase, "https://127.0.0.1:") {
		t.Fatalf("the TLS relay said %q", tbase)
	}
	resp, err := http.Get(strings.Replace(tbase, "https://", "http://", 1) + "/readyz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("plain HTTP to the TLS port got %d", resp.StatusCode)
		}
	}
	startRelayExecutor(t, tbase, "box-tls", f.fleet, "--remote-ca", caPEM)
	c := newRelaydHarnessClient(t, tbase, f.alice)
	c.tls = &tls.Config{RootCAs: pool}
	c.http = &http.Client{Transport: &http.Transport{TLSClientConfig: c.tls}}
	b := c.connect("box-tls")
	if !strings.HasPrefix(b.URL, "wss://") {
		t.Errorf("rendezvous URL %q over TLS", b.URL)
	}
	h, err := c.dial(b)
	if err != nil {
		t.Fatal(err)
	}
	s, err := relaydOpenStream(h, b, "s-tls", b.Authorization)
	if err != nil {
		t.Fatal(err)
	}
	s.initialize()
}

// relaydTestCert writes a self-signed certificate for 127.0.0.1.
func relaydTestCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool, caFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "relay test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile, caFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem")
	os.WriteFile(certFile, pemCert(der), 0o600)
	os.WriteFile(caFile, pemCert(der), 0o600)
	os.WriteFile(keyFile, []byte("-----BEGIN EC PRIVATE KEY-----\n"+base64.StdEncoding.EncodeToString(kder)+"\n-----END EC PRIVATE KEY-----\n"), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool, caFile
}

// TestRelaydLimits: streams per environment, connections per token, the frame size, the
// handshake timeout and the idle timeout, each at a small configured value.
func TestRelaydLimits(t *testing.T) {
	f := newRelaydFixture(t, `,"max_streams_per_environment":2,"max_connections_per_token":3,"handshake_timeout":"1s","idle_timeout":"2s"`)
	_, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-l", f.fleet)
	c := newRelaydHarnessClient(t, base, f.alice)

	b := c.connect("box-l")
	h, err := c.dial(b)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := relaydOpenStream(h, b, "s-1", b.Authorization)
	if err != nil {
		t.Fatal(err)
	}
	s1.initialize()

	// Handshake timeout: a stream claimed by a Resume that never gets the executor's
	// handshake is reset by the relay after 1 s.
	start := time.Now()
	h.send(relayFrame{streamID: "s-silent", body: relayBodyResume})
	if fr := h.nextFrame("s-silent"); fr.body != relayBodyReset || fr.reason != "handshake_timeout" {
		t.Fatalf("s-silent: %v %q, want a handshake_timeout reset", fr.body, fr.reason)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 5*time.Second {
		t.Errorf("handshake timeout after %v, want about 1 s", d)
	}
	t.Logf("handshake_timeout reset after %v", time.Since(start).Round(time.Millisecond))

	// Streams: with s-1, a second opens, the third is refused by the relay.
	if _, err := relaydOpenStream(h, b, "s-2", b.Authorization); err != nil {
		t.Fatal(err)
	}
	if _, err := relaydOpenStream(h, b, "s-3", b.Authorization); err == nil || !strings.Contains(err.Error(), "stream_limit") {
		t.Errorf("a third stream: %v, want a stream_limit reset", err)
	}

	// Connections: alice holds one socket; two more are admitted, the fourth gets 429.
	var more []*testHarness
	for range 2 {
		h, err := c.dial(c.connect("box-l"))
		if err != nil {
			t.Fatal(err)
		}
		more = append(more, h)
	}
	if _, err := c.dial(c.connect("box-l")); err == nil || !strings.Contains(err.Error(), "429") {
		t.Errorf("a fourth socket of one token: %v, want 429", err)
	}

	// Frame size: a message over 256 KiB closes the socket that sent it (1009); the
	// executor and the other sockets are untouched.
	more[1].sendRaw(make([]byte, relaydMaxFrame+1))
	select {
	case <-more[1].ended:
	case <-time.After(remoteTestTimeout):
		t.Fatal("an oversized frame did not close the harness socket")
	}
	s1.mustCall("environment/info", nil)

	// Idle: a socket with no frame either way for 2 s is closed by the relay.
	start = time.Now()
	select {
	case <-more[0].ended:
		t.Logf("idle socket closed after %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(remoteTestTimeout):
		t.Fatal("an idle harness socket was kept")
	}
}

// TestRelaydRestartExecutorComesBack: the relay process is killed and started again on the
// same address; the executor, whose socket dropped, finds its registration gone
// (unknown_route), registers again and is served within one re-registration interval.
func TestRelaydRestartExecutorComesBack(t *testing.T) {
	f := newRelaydFixture(t, "")
	p, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-r", f.fleet)
	c := newRelaydHarnessClient(t, base, f.alice)
	_, s := c.open("box-r", "s-before")
	s.initialize()
	ap := netip.MustParseAddrPort(strings.TrimPrefix(base, "http://"))

	p.cmd.Process.Kill()
	p.wait(t)
	var p2 *relaydProc
	for deadline := time.Now().Add(remoteTestTimeout); ; {
		// The port is free once the killed process is reaped; a TIME_WAIT socket does not
		// hold a listening port.
		var base2 string
		p2, base2 = startPrinting(t, nil, "relay", "--config", f.config, "--listen", ap.String())
		if p2 != nil {
			if base2 != base {
				t.Fatalf("restarted at %s, want %s", base2, base)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the relay could not listen again on its address")
		}
		time.Sleep(50 * time.Millisecond) // no event says when a port is free again
	}
	restarted := time.Now()
	b := c.connect("box-r") // waits for the registration
	registered := time.Since(restarted)
	h, err := c.dial(b)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := relaydOpenStream(h, b, "s-after", b.Authorization)
	if err != nil {
		t.Fatal(err)
	}
	s2.initialize()
	served := time.Since(restarted)
	t.Logf("after the restart: registered again in %v, a stream served in %v", registered.Round(time.Millisecond), served.Round(time.Millisecond))
	// One re-registration interval: the executor's first retry (backoffInitial), its
	// registration, and the next retry (2 × backoffInitial), with slack for a loaded machine.
	if limit := 3*backoffInitial + 5*time.Second; served > limit {
		t.Errorf("served again after %v, want within %v", served, limit)
	}
}

// TestRelaydForwardEndToEnd: `exec-server forward` as the executor, bridging the relay's
// streams to an exec-server process on a loopback websocket.
func TestRelaydForwardEndToEnd(t *testing.T) {
	f := newRelaydFixture(t, "")
	_, base := startRelayProcess(t, f, "127.0.0.1:0")
	target, wsURL := startPrinting(t, nil, "--listen", "ws://127.0.0.1:0")
	if target == nil {
		t.Fatal("the target exec-server did not start")
	}
	startExecServer(t, strings.NewReader(f.fleet+"\n"), nil, "forward", "--remote", base, "--environment-id", "box-fw",
		"--connect", wsURL, "--registration-bearer-stdin")
	_, s := newRelaydHarnessClient(t, base, f.alice).open("box-fw", "s-forward")
	s.initialize()
	if out := s.runScript("echo forwarded"); out != "forwarded\n" {
		t.Fatalf("output %q", out)
	}
}

// TestRelaydSystemdUnit: contrib's relay unit runs `exec-server relay` with flags the relay
// knows, hardened, with no secret in its environment.
func TestRelaydSystemdUnit(t *testing.T) {
	unit := systemdUnit(t, "contrib/exec-server-relay.service")
	for key, want := range map[string]string{"NoNewPrivileges": "yes", "ProtectSystem": "strict", "Restart": "on-failure",
		"User": "exec-server-relay", "CapabilityBoundingSet": ""} {
		if got := unit["Service."+key]; len(got) != 1 || got[0] != want {
			t.Errorf("%s=%v, want %s", key, got, want)
		}
	}
	for _, key := range []string{"Environment", "EnvironmentFile", "StandardInput"} {
		if v, ok := unit["Service."+key]; ok {
			t.Errorf("%s=%v: the relay reads its secrets from its own files", key, v)
		}
	}
	exec := strings.Fields(unit["Service.ExecStart"][0])
	if len(exec) < 2 || exec[1] != "relay" {
		t.Fatalf("ExecStart %v", exec)
	}
	// --help after the unit's flags: exit 0 only if every flag before it is known.
	var stdout, stderr bytes.Buffer
	if code := run(append(exec[1:], "--help"), nil, &stdout, &stderr); code != 0 {
		t.Errorf("the unit's flags: exit %d: %s", code, stderr.String())
	}
}

// TestRelaydReloadRevokesAToken: SIGHUP rereads the configuration: a broken file is refused
// and the old one kept; a token taken out is refused from then on, while the sockets already
// up go on.
func TestRelaydReloadRevokesAToken(t *testing.T) {
	f := newRelaydFixture(t, "")
	p, base := startRelayProcess(t, f, "127.0.0.1:0")
	startRelayExecutor(t, base, "box-h", f.fleet)
	c := newRelaydHarnessClient(t, base, f.alice)
	_, s := c.open("box-h", "s-before")
	s.initialize()

	if err := os.WriteFile(f.config, []byte(`{"tokens":[],"bogus":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.stderr.waitFor(t, "configuration not reloaded")
	c.connect("box-h") // alice still admitted

	cfg := `{"tokens":[{"name":"fleet","file":"fleet.token","register":["box-*"]}]}`
	if err := os.WriteFile(f.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.stderr.waitFor(t, "configuration reloaded")
	id, _ := newNoiseIdentity(rand.Reader)
	if st, v := relaydPost(t, nil, base, "box-h", "connect", f.alice, map[string]any{"harness_public_key": id.publicKey()}); st != 401 {
		t.Errorf("alice after her token was taken out: %d %v, want 401", st, v)
	}
	s.mustCall("environment/info", nil) // her open stream goes on
}

// TestRelaydRefusalsDoNotFloodTheLog: anyone can make the relay refuse an upgrade, as often
// as it likes; the refusals' log lines are throttled (logthrottle.go).
func TestRelaydRefusalsDoNotFloodTheLog(t *testing.T) {
	f := newRelaydFixture(t, "")
	cfg, err := loadRelaydConfig(f.config)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	d := newRelayd(cfg, "http://127.0.0.1:1", newTextLogger(&logs, levelInfo))
	for range 200 {
		r, _ := http.NewRequest("GET", "/relay/v1/harness/box-1?role=harness&ticket=x", nil)
		r.Header.Set("Connection", "Upgrade")
		r.Header.Set("Upgrade", "websocket")
		r.Header.Set("Sec-WebSocket-Version", "13")
		r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		if w.Code != http.StatusNotFound || w.Header().Get(rendezvousRejectionHeader) != "unknown_route" {
			t.Fatalf("upgrade to an unregistered environment: %d %v", w.Code, w.Header())
		}
	}
	if n := strings.Count(logs.String(), "relay: upgrade refused"); n > logThrottleBurst {
		t.Errorf("200 refusals wrote %d log lines, want at most %d", n, logThrottleBurst)
	}
}

// TestRelaydValidateWithoutStreamID: Codex 0.171's executor asks /validate without the
// X-Codex-Noise-Stream-Id header (0.169 sends it). The relay then accepts the authorization
// of a harness that has a stream waiting for the executor's answer, and still refuses one
// whose harness has none, another bundle's, and a stream already answered.
func TestRelaydValidateWithoutStreamID(t *testing.T) {
	f := newRelaydFixture(t, "")
	_, base := startRelayProcess(t, f, "127.0.0.1:0")
	exec, _ := newNoiseIdentity(rand.Reader)
	st, reg := relaydPost(t, nil, base, "box-v", "register", f.fleet, map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": exec.publicKey()})
	if st != http.StatusOK {
		t.Fatalf("register: %d %v", st, reg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteTestTimeout)
	defer cancel()
	ews, _, err := dialWebsocket(ctx, reg["url"].(string), nil, nil, wsOptions{maxMessage: relayMaxMessage, maxFrame: relayMaxMessage})
	if err != nil {
		t.Fatal(err)
	}
	defer ews.closeTCP()
	c := newRelaydHarnessClient(t, base, f.alice)
	b := c.connect("box-v")
	other := c.connect("box-v") // a second bundle, whose harness opens nothing
	h, err := c.dial(b)
	if err != nil {
		t.Fatal(err)
	}
	validate := func(auth string) bool {
		t.Helper()
		st, v := relaydPost(t, nil, base, "box-v", "validate", f.fleet, map[string]any{
			"executor_registration_id": reg["executor_registration_id"], "harness_public_key": c.id.publicKey(), "harness_key_authorization": auth})
		if st != http.StatusOK {
			t.Fatalf("validate: %d %v", st, v)
		}
		return v["valid"] == true
	}
	if validate(b.Authorization) {
		t.Fatal("valid before the harness opened a stream")
	}
	h.send(relayFrame{streamID: "s-v", body: relayBodyResume})
	if _, data, err := ews.readFrameMessage(); err != nil { // the relay forwarded the claim: the stream is open
		t.Fatal(err)
	} else if f, _ := decodeRelayFrame(data); f.body != relayBodyResume || f.streamID != "s-v" {
		t.Fatalf("executor got %v on %q", f.body, f.streamID)
	}
	if !validate(b.Authorization) {
		t.Fatal("the authorization of the harness with a waiting stream was refused without a stream id")
	}
	if validate(other.Authorization) || validate("") {
		t.Fatal("another bundle's authorization, or none, was accepted")
	}
	ews.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: "s-v", body: relayBodyHandshake, payload: []byte{2}}))
	if f := h.nextFrame("s-v"); f.body != relayBodyHandshake {
		t.Fatalf("harness got %v", f.body)
	}
	if validate(b.Authorization) {
		t.Fatal("valid for a stream the executor has answered")
	}
}

// relaydInProcess is a relay answering through ServeHTTP, on a clock the test moves.
func relaydInProcess(t *testing.T, f *relaydFixture, self string) (*relayd, *time.Time) {
	t.Helper()
	cfg, err := loadRelaydConfig(f.config)
	if err != nil {
		t.Fatal(err)
	}
	d := newRelayd(cfg, "http://127.0.0.1:1", newTextLogger(io.Discard, levelInfo))
	clock := time.Now()
	d.now = func() time.Time { return clock }
	d.moving = time.Time{}
	if self != "" {
		d.fleet = newRelaydFleet(self, nil)
		t.Cleanup(d.fleet.client.CloseIdleConnections)
	}
	return d, &clock
}

// relaydServe sends one registry request to an in-process relay.
func relaydServe(d *relayd, envID, op, bearer string, header http.Header, body any) *httptest.ResponseRecorder {
	b, _ := json.Marshal(body)
	r := httptest.NewRequest(http.MethodPost, "/cloud/environment/"+envID+"/"+op, bytes.NewReader(b))
	r.Header.Set("Authorization", "Bearer "+bearer)
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	d.ServeHTTP(w, r)
	return w
}

// TestRelaydOrphanRegistrationsExpire: max_registrations_per_token bounds one token's
// registrations (429), and one whose executor socket never came is forgotten after
// relaydOrphanTimeout, making room (docs/remote.md §12.5).
func TestRelaydOrphanRegistrationsExpire(t *testing.T) {
	f := newRelaydFixture(t, `,"max_registrations_per_token":2`)
	d, clock := relaydInProcess(t, f, "")
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()}
	for _, env := range []string{"box-1", "box-2", "box-2"} { // box-2 again replaces its own
		if w := relaydServe(d, env, "register", f.fleet, nil, body); w.Code != http.StatusOK {
			t.Fatalf("register %s: %d %s", env, w.Code, w.Body)
		}
	}
	if w := relaydServe(d, "box-3", "register", f.fleet, nil, body); w.Code != http.StatusTooManyRequests {
		t.Fatalf("a third registration of a token capped at 2: %d %s, want 429", w.Code, w.Body)
	}
	*clock = clock.Add(relaydOrphanTimeout - time.Second)
	if w := relaydServe(d, "box-3", "register", f.fleet, nil, body); w.Code != http.StatusTooManyRequests {
		t.Fatalf("before the orphan timeout: %d %s, want 429", w.Code, w.Body)
	}
	*clock = clock.Add(2 * time.Second)
	if w := relaydServe(d, "box-3", "register", f.fleet, nil, body); w.Code != http.StatusOK {
		t.Fatalf("after the orphan timeout: %d %s, want 200", w.Code, w.Body)
	}
	d.mu.Lock()
	n, held := len(d.envs), d.regs["fleet"]
	d.mu.Unlock()
	if n != 1 || held != 1 {
		t.Errorf("%d registrations (%d counted for the token), want box-3 alone", n, held)
	}
}

// TestRelaydForwardHopsBounded: a request whose forwarded mark already lists
// relaydMaxForwardHops nodes, or this node, and that lands on a node not owning its
// environment is answered 503 peer_unavailable rather than served there or forwarded again
// (docs/remote.md §12.7).
func TestRelaydForwardHopsBounded(t *testing.T) {
	f := newRelaydFixture(t, `,"peers":[{"id":"a","url":"http://127.0.0.1:1"},{"id":"b","url":"http://127.0.0.1:3"}]`)
	d, _ := relaydInProcess(t, f, "a")
	cfg := d.cfg.Load()
	envID := ""
	for i := 0; envID == ""; i++ {
		if o, _ := relaydOwner(cfg.peers, fmt.Sprintf("box-%d", i), d.fleet.live); o.ID == "b" {
			envID = fmt.Sprintf("box-%d", i)
		}
	}
	for _, mark := range []string{"b,c", "a", "b, a"} {
		w := relaydServe(d, envID, "register", f.fleet, http.Header{http.CanonicalHeaderKey(relaydForwardedHeader): {mark}}, map[string]any{})
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "peer_unavailable") {
			t.Errorf("mark %q: %d %s, want 503 peer_unavailable", mark, w.Code, w.Body)
		}
	}
	d.mu.Lock()
	n := len(d.envs)
	d.mu.Unlock()
	if n != 0 {
		t.Errorf("a node that does not own %s holds %d registrations", envID, n)
	}
}

// relaydBusyOf counts the connections from src that the relay holds not upgraded, and how
// many of them are busy: a request being served (its body read, or its answer awaited).
func relaydBusyOf(d *relayd, src string) (n, busy int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.pending {
		if p.source == src {
			n++
			if p.phase == relaydPhaseBusy {
				busy++
			}
		}
	}
	return n, busy
}

// relaydLastChangeOf counts the connections from src that the relay holds not upgraded,
// and says when the last of them changed state.
func relaydLastChangeOf(d *relayd, src string) (n int, last time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.pending {
		if p.source == src {
			n++
			if p.since.After(last) {
				last = p.since
			}
		}
	}
	return n, last
}

// relaydSourceOf is the relaydSource of an address "ip:port".
func relaydSourceOf(a string) string {
	s, _ := relaydSource(net.TCPAddrFromAddrPort(netip.MustParseAddrPort(a)))
	return s
}

// relaydDialFrom dials addr from the local address src, with small socket buffers and
// segments so that a few answers left unread fill the connection.
func relaydDialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096)
			syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 1024)
		})
	}}
	return d.Dial("tcp", addr)
}

// relaydStuck opens a connection from src with dial that pipelines relaydStuckRequests GET
// /readyz and reads none of the answers, and returns once the relay's write of an answer on
// it is blocked: the client's write of its requests has not completed (the relay stopped
// reading them), and none of src's connections changed state for a second (one the relay
// could still write to has requests to read).
func relaydStuck(t *testing.T, d *relayd, src string, dial func() (net.Conn, error)) net.Conn {
	t.Helper()
	// Four times what the relay's socket buffers take of answers (4 MiB at most, about 150
	// bytes each).
	const relaydStuckRequests = 4 * (4 << 20) / 150
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	written := make(chan error, 1)
	go func() { // ends when the requests are written, or with c (cleanup)
		_, err := io.WriteString(c, strings.Repeat("GET /readyz HTTP/1.1\r\nHost: relay\r\n\r\n", relaydStuckRequests))
		written <- err
	}()
	deadline := time.Now().Add(remoteTestTimeout)
	for {
		select {
		case err := <-written:
			t.Fatalf("the relay read all %d requests (%v): their answers fit its buffers", relaydStuckRequests, err)
		default:
		}
		if n, last := relaydLastChangeOf(d, src); n > 0 && time.Since(last) >= time.Second {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay still reads the %d requests of %s", relaydStuckRequests, src)
		}
		time.Sleep(50 * time.Millisecond) // connState has no event the test can wait on
	}
}

// relaydGetReadyz sends GET /readyz on a new connection from src and returns the status.
func relaydGetReadyz(src, addr string) (int, error) {
	c, err := relaydDialFrom(src, addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(remoteTestTimeout))
	if _, err := io.WriteString(c, "GET /readyz HTTP/1.1\r\nHost: relay\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestRelaydUnreadAnswersDoNotLockOut: a client that pipelines requests and reads none of
// the answers holds its connection while the relay's write of an answer is blocked. Such a
// connection is not busy for the relay (it has answered): with its source at its cap (the
// 255 others busy with a token holder's registers whose bodies never come), the source's
// next connection takes its place. Before, net/http reported it active, and the source's
// next connection was refused for as long as it stayed (for ever: no write timeout).
func TestRelaydUnreadAnswersDoNotLockOut(t *testing.T) {
	f := newRelaydFixture(t, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := startRelaydInProcess(t, f, ln)
	addr := ln.Addr().String()
	const src = "127.0.0.2"
	start := time.Now()
	for range relaydMaxPendingPerSource - 1 {
		c, err := relaydDialFrom(src, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "POST /cloud/environment/box-1/register HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer "+f.fleet+"\r\nContent-Length: 100\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	stuck := relaydStuck(t, d, src, func() (net.Conn, error) { return relaydDialFrom(src, addr) })
	held, busy := relaydBusyOf(d, src)
	t.Logf("%s: %d connections held (%d busy) %v after the first; one pipelined requests and reads no answer", src, held, busy, time.Since(start).Round(time.Millisecond))
	if held != relaydMaxPendingPerSource {
		t.Fatalf("%s: %d connections held, want %d", src, held, relaydMaxPendingPerSource)
	}
	if status, err := relaydGetReadyz(src, addr); err != nil || status != http.StatusOK {
		t.Fatalf("the next connection from %s: %d %v: a connection whose answers nobody reads locked it out", src, status, err)
	}
	// Its end: EOF, or a reset (the relay closed it with requests unread).
	stuck.SetReadDeadline(time.Now().Add(remoteTestTimeout))
	if _, err := io.Copy(io.Discard, stuck); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the connection that reads no answer: %v, want it closed for the new one", err)
	}
}

// TestRelaydLongBusyConnectionMakesRoom: a connection busy with one request for longer than
// relaydRequestTime (here a token holder's register whose body never comes) is closed to
// admit a new connection of its source at its cap; before that long, the new one is refused
// (every other is busy). The relay's clock is moved instead of waiting.
func TestRelaydLongBusyConnectionMakesRoom(t *testing.T) {
	f := newRelaydFixture(t, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var skew atomic.Int64
	d := review24InProcess(t, f, ln, &skew)
	addr := ln.Addr().String()
	const src = "127.0.0.2"
	for range relaydMaxPendingPerSource {
		c, err := relaydDialFrom(src, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "POST /cloud/environment/box-1/register HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer "+f.fleet+"\r\nContent-Length: 100\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(remoteTestTimeout)
	for {
		n, busy := relaydBusyOf(d, src)
		if n == relaydMaxPendingPerSource && busy == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d connections held, %d busy; want %d busy", src, n, busy, relaydMaxPendingPerSource)
		}
		time.Sleep(5 * time.Millisecond) // connState has no event the test can wait on
	}
	if status, err := relaydGetReadyz(src, addr); err == nil {
		t.Errorf("a connection past %s's cap while its %d are busy for less than %v: %d, want it closed", src, relaydMaxPendingPerSource, relaydRequestTime, status)
	}
	skew.Store(int64(relaydRequestTime + time.Second))
	if status, err := relaydGetReadyz(src, addr); err != nil || status != http.StatusOK {
		t.Fatalf("a connection past %s's cap while its %d are busy for %v: %d %v: none made room", src, relaydMaxPendingPerSource, relaydRequestTime+time.Second, status, err)
	}
	if _, busy := relaydBusyOf(d, src); busy != relaydMaxPendingPerSource-1 {
		t.Errorf("%d of %s's busy connections left, want %d: one closed for the new one", busy, src, relaydMaxPendingPerSource-1)
	}
}

// TestRelaydUnreadAnswersClosed: a client that pipelines requests and reads no answer is
// closed relaydAnswerTimeout after the answer the relay could not write (the server's
// WriteTimeout); it was held for ever. Real time: about 29 s.
func TestRelaydUnreadAnswersClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("waits the relay's answer timeout (29 s)")
	}
	f := newRelaydFixture(t, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := startRelaydInProcess(t, f, ln)
	relaydStuck(t, d, "127.0.0.1", func() (net.Conn, error) { return relaydDialFrom("127.0.0.1", ln.Addr().String()) })
	start := time.Now()
	for {
		d.mu.Lock()
		n := len(d.pending)
		d.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Since(start) > relaydAnswerTimeout+10*time.Second {
			t.Fatalf("the connection that reads no answer is still held %v after the relay's write to it blocked", time.Since(start).Round(time.Second))
		}
		time.Sleep(50 * time.Millisecond) // connState has no event the test can wait on
	}
	t.Logf("the connection that reads no answer was closed %v after the relay's write to it blocked (relaydAnswerTimeout %v)", time.Since(start).Round(time.Millisecond), relaydAnswerTimeout)
}

// TestRelaydSourceGroupsIPv6: the scope of relaydMaxPendingPerSource is an IPv4 address or
// an IPv6 /64 (one host's share), so that one host cannot take 256 connections for each of
// its addresses; an IPv4-mapped address is its IPv4 address.
func TestRelaydSourceGroupsIPv6(t *testing.T) {
	for _, tt := range []struct{ a, b string }{
		{"[2001:db8:1:2::1]:4000", "[2001:db8:1:2:ffff:ffff:ffff:ffff]:5000"},
		{"[2001:db8:1:2::1%eth0]:4000", "[2001:db8:1:2::7]:4000"},
		{"[::ffff:192.0.2.7]:4000", "192.0.2.7:5000"},
	} {
		sa, sb := relaydSourceOf(tt.a), relaydSourceOf(tt.b)
		if sa != sb {
			t.Errorf("%s and %s: sources %q and %q, want one", tt.a, tt.b, sa, sb)
		}
	}
	for _, tt := range []struct{ a, b string }{
		{"[2001:db8:1:2::1]:4000", "[2001:db8:1:3::1]:4000"},
		{"192.0.2.7:4000", "192.0.2.8:4000"},
	} {
		sa, sb := relaydSourceOf(tt.a), relaydSourceOf(tt.b)
		if sa == sb {
			t.Errorf("%s and %s: both source %q, want two", tt.a, tt.b, sa)
		}
	}
}

// TestRelaydPeerProbesKeepTheirConnection: node n2's 1,024 connections not upgraded are all
// busy (a token holder's connects whose bodies never come, 256 from each of 4 addresses).
// n1's kept-alive probe connection comes from a peer's address (n2 reached n1 there), so it
// is not the one closed to admit them, and n1 keeps seeing n2 live: a connect through n1 is
// forwarded to n2. Before, n1's probe connection was the one idle connection closed, its
// next one was refused, and n1 took n2's environments for its own (404).
func TestRelaydPeerProbesKeepTheirConnection(t *testing.T) {
	addrs := relaydFreePorts(t, 2)
	f := newRelaydFixture(t, `,"peers":[{"id":"n1","url":"http://`+addrs[0]+`"},{"id":"n2","url":"http://`+addrs[1]+`"}]`)
	_, b1 := startRelayProcess(t, f, addrs[0], "--node-id", "n1")
	r2, b2 := startRelayProcess(t, f, addrs[1], "--node-id", "n2")
	relaydAwaitLive(t, b1, []string{"n1", "n2"})
	relaydAwaitLive(t, b2, []string{"n1", "n2"})
	envID := ""
	for i := 0; envID == ""; i++ {
		ps := []relaydPeer{{"n1", b1}, {"n2", b2}}
		if o, _ := relaydOwner(ps, fmt.Sprintf("box-%d", i), func(string) bool { return true }); o.ID == "n2" {
			envID = fmt.Sprintf("box-%d", i)
		}
	}
	startRelayExecutor(t, b2, envID, f.fleet)
	fds0, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", r2.cmd.Process.Pid))
	start := time.Now()
	for i := range relaydMaxPending / relaydMaxPendingPerSource {
		src := fmt.Sprintf("127.0.0.%d", 2+i)
		for range relaydMaxPendingPerSource {
			c, err := relaydDialFrom(src, addrs[1])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if _, err := io.WriteString(c, "POST /cloud/environment/"+envID+"/connect HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer "+f.alice+"\r\nContent-Length: 100\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// n2 holds 1,023 of them besides the connections it had (n1's probe connection was
	// closed for the last one, or the last one was refused).
	held := adv24bAwaitFDs(r2.cmd.Process.Pid, len(fds0)+relaydMaxPending-1, func() bool { return false })
	t.Logf("n2 holds %d fds (%d before) %v after the first of %d busy connections", held, len(fds0), time.Since(start).Round(time.Millisecond), relaydMaxPending)
	for time.Since(start) < 5*time.Second { // 5 probe rounds, under relaydRequestTime
		if live, _ := relaydReadyz(b1); len(live) != 2 {
			t.Fatalf("n1 sees %v live %v into n2's busy connections: a peer's probes were closed for them", live, time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond) // the probe has no event to wait on from outside
	}
	alice := newRelaydHarnessClient(t, b1, f.alice)
	if status, v := relaydPost(t, nil, b1, envID, "connect", f.alice, map[string]any{"harness_public_key": alice.id.publicKey()}); status != http.StatusOK {
		t.Errorf("alice's connect through n1 for %s, on n2: %d %v", envID, status, v)
	}
}

// relaydGatedConn holds a client's second write (a TLS client's second flight) until
// release is closed; second is closed when that write comes.
type relaydGatedConn struct {
	net.Conn
	writes          int
	second, release chan struct{}
}

func (c *relaydGatedConn) Write(b []byte) (int, error) {
	if c.writes++; c.writes == 2 {
		close(c.second)
		<-c.release
	}
	return c.Conn.Write(b)
}

// TestRelaydTLSHandshakeNotSilent: a client whose TLS handshake is under way (the relay has
// read its hello and answered it) has sent bytes: a new connection that comes
// relaydFirstByteTimeout later does not close it as silent, and its handshake and request
// complete. Before, a connection was silent until its whole request head was read.
func TestRelaydTLSHandshakeNotSilent(t *testing.T) {
	f := newRelaydFixture(t, "")
	certFile, keyFile, pool, _ := relaydTestCert(t)
	_, base := startRelayProcess(t, f, "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile)
	raw, err := net.Dial("tcp", strings.TrimPrefix(base, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(remoteTestTimeout))
	gate := &relaydGatedConn{Conn: raw, second: make(chan struct{}), release: make(chan struct{})}
	tc := tls.Client(gate, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	handshake := make(chan error, 1)
	go func() { handshake <- tc.Handshake() }() // ends with the handshake, or raw's deadline
	// The client's second flight: the relay read the hello and answered it.
	<-gate.second
	// The relay's rule is a time since the connection came: let it pass.
	time.Sleep(relaydFirstByteTimeout + 500*time.Millisecond)
	other := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	resp, err := other.Get(base + "/readyz") // its admission closes the silent connections
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	close(gate.release)
	if err := <-handshake; err != nil {
		t.Fatalf("the handshake under way %v when another connection came: %v", relaydFirstByteTimeout+500*time.Millisecond, err)
	}
	if _, err := io.WriteString(tc, "GET /readyz HTTP/1.1\r\nHost: relay\r\n\r\n"); err != nil {
		t.Fatalf("the request after a handshake under way %v when another connection came: %v: the relay closed it as silent", relaydFirstByteTimeout+500*time.Millisecond, err)
	}
	resp, err = http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatalf("the answer after a handshake under way %v when another connection came: %v: the relay closed it as silent", relaydFirstByteTimeout+500*time.Millisecond, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the request after that handshake: %s", resp.Status)
	}
}

// TestRelaydRefusalBeforeBodyCloses: a refusal written before the request's body was read
// (no token) comes at once with Connection: close, and the connection ends, though the body
// never comes; before, net/http waited for the body (the relay's ReadTimeout, 20 s) before
// it wrote the 401. A request whose body was read keeps its connection for the next.
func TestRelaydRefusalBeforeBodyCloses(t *testing.T) {
	f := newRelaydFixture(t, "")
	_, base := startRelayProcess(t, f, "127.0.0.1:0")
	addr := strings.TrimPrefix(base, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const within = 5 * time.Second
	c.SetDeadline(time.Now().Add(within))
	if _, err := io.WriteString(c, "POST /cloud/environment/box-1/register HTTP/1.1\r\nHost: relay\r\nContent-Length: 100\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer within %v to a request without a token whose body never comes: %v", within, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Errorf("the refusal: %s, Connection: %q; want 401 and close", resp.Status, resp.Header.Get("Connection"))
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
		t.Errorf("after the refusal the connection gave %q, %v; want its end", rest, err)
	}

	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()})
	k, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	k.SetDeadline(time.Now().Add(remoteTestTimeout))
	kr := bufio.NewReader(k)
	fmt.Fprintf(k, "POST /cloud/environment/box-1/register HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", f.fleet, len(body), body)
	if resp, err := http.ReadResponse(kr, nil); err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("a register with its body: %v %v", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	io.WriteString(k, "GET /readyz HTTP/1.1\r\nHost: relay\r\n\r\n")
	if resp, err := http.ReadResponse(kr, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("the next request on the same connection: %v %v", resp, err)
	}
}

// TestRelaydTLSEvictionDoesNotStall: over TLS, a connection whose answers nobody reads (its
// socket full, the relay's write under way) is closed to admit its source's next one, and
// that one is served at once. The relay closes the connection beneath its TLS: a
// tls.Conn.Close with no write under way would write close_notify, and on a full socket wait
// for its 5 s deadline on the accept loop (this test's connection, with its write under
// way, does not reach that case).
func TestRelaydTLSEvictionDoesNotStall(t *testing.T) {
	f := newRelaydFixture(t, "")
	certFile, keyFile, pool, _ := relaydTestCert(t)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadRelaydConfig(f.config)
	if err != nil {
		t.Fatal(err)
	}
	d := newRelayd(cfg, "https://"+ln.Addr().String(), newTextLogger(io.Discard, levelInfo))
	d.tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay serve: %v", err)
		}
	})
	addr := ln.Addr().String()
	const src = "127.0.0.2"
	dial := func() (net.Conn, error) {
		c, err := relaydDialFrom(src, addr)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		tc.SetDeadline(time.Now().Add(remoteTestTimeout))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		tc.SetDeadline(time.Time{})
		return tc, nil
	}
	for range relaydMaxPendingPerSource - 1 {
		c, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "POST /cloud/environment/box-1/register HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer "+f.fleet+"\r\nContent-Length: 100\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	relaydStuck(t, d, src, dial)
	start := time.Now()
	c, err := dial()
	if err != nil {
		t.Fatalf("the next connection from %s: %v", src, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(remoteTestTimeout))
	io.WriteString(c, "GET /readyz HTTP/1.1\r\nHost: relay\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the next connection from %s: %v %v", src, resp, err)
	}
	resp.Body.Close()
	took := time.Since(start)
	t.Logf("the next connection from %s, admitted in place of the TLS connection nobody reads: handshake and answer in %v", src, took.Round(time.Millisecond))
	if took >= 2*time.Second {
		t.Errorf("the next connection took %v: closing the one it replaced held the accept loop", took.Round(time.Millisecond))
	}
}
