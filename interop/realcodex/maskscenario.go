package main

// The credential-masking scenario (`-checks mask`, 0.171 only): the real `codex app-server`
// with features.credential_masking on and the managed network on, against an executor (ours
// or the reference), locally over the logging websocket proxy and through `exec-server relay`.
// The executor's environment (where the command's environment comes from: process/start
// sends envPolicy inherit "all") holds a fake GitHub Enterprise token bound (GH_HOST) to a
// local TLS test host with a CA of its own. The mock model's commands print the token and send
// it to the test host through the proxy: the command must see a stand-in (read from its
// output, the recorded process/output and the rollout) while the test host must receive the
// real value (read on the host). README.md, "The masking scenario", says what triggers masking in the
// 0.171 harness and what it sends.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

const (
	// maskHost is the TLS test host's address: a loopback address of its own, so an allow
	// entry names it alone.
	maskHost = "127.0.0.5"
	// maskTokenVar holds the real token in the executor's environment. The reference's GitHub
	// Enterprise provider binds it to the host GH_HOST names: a built-in provider pointed at
	// a local host, with no custom provider (the 0.171 harness has no configuration for one).
	maskTokenVar = "GH_ENTERPRISE_TOKEN"
	maskHostVar  = "GH_HOST"
	// maskTokenPrefix and maskTokenLen give the fake token a real GitHub token's shape, the
	// shape the provider recognises.
	maskTokenPrefix = "ghp_"
	maskTokenLen    = 40
	maskTurnTimeout = 4 * time.Minute
)

// maskConfig is what config.toml gets on top of the base scenario's: the feature, under its
// 0.171 name (the older [features.network_proxy] credential_broker is accepted and does
// nothing). With it, and the managed network on under a sandbox that is not full access, every
// process/start carries networkProxy.proxy.credentialMasking true (README, "The masking
// scenario").
const maskConfig = `
[features]
credential_masking = true
`

// maskRequirements is the managed requirements.toml: the network on, the test host allowed.
func maskRequirements() string {
	return fmt.Sprintf(`[experimental_network]
enabled = true
allowed_domains = [%q]
`, maskHost)
}

// maskTestHost serves HTTPS on maskHost with a certificate from its own CA and records the
// Authorization header of every request by path.
type maskTestHost struct {
	ln     net.Listener
	srv    *http.Server
	caFile string // the CA's certificate, PEM

	mu   sync.Mutex
	auth map[string][]string // path -> Authorization values
}

func startMaskTestHost(dir string) (*maskTestHost, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "realcodex mask test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create the test CA: %w", err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: maskHost},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP(maskHost)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create the test host's certificate: %w", err)
	}
	h := &maskTestHost{caFile: filepath.Join(dir, "test-host-ca.pem"), auth: map[string][]string{}}
	if err := os.WriteFile(h.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", maskHost+":0")
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", maskHost, err)
	}
	h.ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}})
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go h.srv.Serve(h.ln)
	return h, nil
}

func (h *maskTestHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.auth[r.URL.Path] = append(h.auth[r.URL.Path], r.Header.Get("Authorization"))
	h.mu.Unlock()
	fmt.Fprintf(w, "realcodex-mask-host %s\n", r.URL.Path)
}

func (h *maskTestHost) url(path string) string { return "https://" + h.ln.Addr().String() + path }

// received returns the Authorization values the host got for path.
func (h *maskTestHost) received(path string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.auth[path]...)
}

func (h *maskTestHost) Close() { h.srv.Close() }

// fakeGitHubToken returns a token of a real one's shape that no GitHub ever issued.
func fakeGitHubToken() string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, maskTokenLen-len(maskTokenPrefix))
	rand.Read(b)
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	return maskTokenPrefix + string(b)
}

// maskCheckNames are the scenario's checks, mask-<transport>-<target>.
var maskCheckNames = []string{"mask-local-ref", "mask-local-ours", "mask-relayd-ref", "mask-relayd-ours"}

var maskEchoLine = regexp.MustCompile(`(?m)^token=(\S*)$`)

// runMask runs the masking scenario against target ("ref" or "ours") over transport ("local"
// or "relayd").
func runMask(ctx context.Context, cfg config, log *eventLog, m modeRun, target, transport string) []stepResult {
	const prefix = "mask: "
	fail := func(name string, err error) []stepResult {
		return []stepResult{{Name: prefix + name, Detail: err.Error()}}
	}
	if cfg.version != "0.171.0" {
		return []stepResult{{Name: prefix + "the masking scenario", Skip: true,
			Detail: "needs the 0.171 harness (features.credential_masking); the reference is " + cfg.version}}
	}
	if os.Geteuid() != 0 {
		return []stepResult{{Name: prefix + "the masking scenario", Skip: true,
			Detail: "needs root: the managed network comes from /etc/codex/requirements.toml, which the scenario overlays in a mount namespace of the app-server's own"}}
	}
	if m.mode == modeFull {
		// Measured on the reference: under danger-full-access the harness launches no proxy
		// (no process/start carries networkProxy), so there is nothing to mask with.
		return []stepResult{{Name: prefix + "the masking scenario", Skip: true,
			Detail: "danger-full-access: the 0.171 harness launches no proxy and asks for no masking; run with -s workspace-write or read-only"}}
	}
	dir := filepath.Join(m.dir, "mask-"+transport+"-"+target)
	workdir := filepath.Join(dir, "work")
	execHome := filepath.Join(dir, "exec-home")
	for _, d := range []string{workdir, execHome} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fail("setup", err)
		}
	}
	log.Printf("==== mask %s/%s, sandbox mode %s", transport, target, m.mode)
	host, err := startMaskTestHost(dir)
	if err != nil {
		return fail("start the test host", err)
	}
	defer host.Close()
	real := fakeGitHubToken()
	// The token lives in the executor's environment: process/start sends envPolicy
	// {inherit: "all"} and only the harness's own few variables, so the command's environment
	// is built from the executor's. SSL_CERT_FILE makes the executor trust the test host's CA
	// on the upstream side of what it intercepts, and the command's curl trust it when
	// nothing intercepts (a plain tunnel); an executor that masks hands the command its own
	// bundle instead.
	// GH_HOST names the test host's port: the reference drops a port and sends the token to
	// every port of the host, ours to the port GH_HOST names (443 without one).
	execEnv := []string{"CODEX_HOME=" + execHome, "SSL_CERT_FILE=" + host.caFile,
		maskTokenVar + "=" + real, maskHostVar + "=" + host.ln.Addr().String()}

	bin, args := execServerCommand(cfg, target)
	var harnessEnv []string
	var wire func() []wireMessage
	switch transport {
	case "local":
		args = append(args, "--listen", "ws://127.0.0.1:0")
		if target == "ours" {
			args = append(args, "--log-level", "debug")
		} else {
			execEnv = append(execEnv, "RUST_LOG=debug")
		}
		srv, url, err := startChild("mask exec-server/"+target, bin, args, execEnv, workdir, "", filepath.Join(dir, "exec-server.log"), true)
		if err != nil {
			return fail("start exec-server", err)
		}
		defer srv.Stop()
		proxy, err := startWSProxy(log, "mask local/"+target, url)
		if err != nil {
			return fail("start proxy", err)
		}
		defer proxy.Close()
		defer func() { writeWire(filepath.Join(dir, "wire.jsonl"), proxy.Messages()) }()
		wire = proxy.Messages
		harnessEnv = []string{"CODEX_EXEC_SERVER_URL=" + proxy.URL()}
	case "relayd":
		setup, err := writeRelaydSetup(filepath.Join(dir, "relay"), nil, false)
		if err != nil {
			return fail("write the relay's configuration", err)
		}
		node := &relaydNode{addr: "127.0.0.1:0", bin: cfg.ours, setup: setup, dir: dir}
		if err := node.start(); err != nil {
			return fail("start `exec-server relay`", err)
		}
		defer node.c.Stop()
		args = append(args, "--remote", node.url, "--environment-id", relaydEnvID, "--registration-bearer-stdin")
		if target == "ours" {
			args = append(args, "--log-level", "debug")
		} else {
			execEnv = append(execEnv, "RUST_LOG=debug")
		}
		logPath := filepath.Join(dir, "executor.log")
		exe, _, err := startChild("mask executor/"+target, bin, args, execEnv, workdir, setup.tokens["executors"]+"\n", logPath, false)
		if err != nil {
			return fail("start executor", err)
		}
		defer exe.Stop()
		if _, _, err := relaydAwaitServed(ctx, setup.client, node.url, relaydEnvID, setup.tokens["codex"], relaydStartWait, func(string) bool { return true }); err != nil {
			return fail("executor registers with `exec-server relay`", fmt.Errorf("%v; see %s", err, logPath))
		}
		harnessEnv = []string{
			"CODEX_EXEC_SERVER_NOISE_REGISTRY_URL=" + node.url,
			"CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID=" + relaydEnvID,
			"CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN=" + setup.tokens["codex"],
		}
	default:
		return fail("transport", fmt.Errorf("unknown transport %q", transport))
	}

	model, err := startMockModel(log)
	if err != nil {
		return fail("start mock model", err)
	}
	defer model.Close()
	defer model.saveRequests(filepath.Join(dir, "model-requests.jsonl"))
	home := filepath.Join(dir, "codex-home")
	if err := codexHomeConfig(home, model.BaseURL(), m.mode); err != nil {
		return fail("write CODEX_HOME", err)
	}
	if err := appendFile(filepath.Join(home, "config.toml"), maskConfig); err != nil {
		return fail("write CODEX_HOME", err)
	}
	reqDir := filepath.Join(dir, "requirements")
	if err := writeRequirements(reqDir, maskRequirements()); err != nil {
		return fail("write requirements.toml", err)
	}
	env := append([]string{"CODEX_HOME=" + home, "CODEX_API_KEY=sk-unused", "RUST_LOG=info"}, harnessEnv...)
	app, err := startAppServerArgv(log, m.label("mask "+transport+"/"+target)+" app", netAppServerArgv(cfg.codex, reqDir), env,
		filepath.Join(dir, "app-server.log"))
	if err != nil {
		return fail("start app-server", err)
	}
	defer app.Close()
	c, cancel := context.WithTimeout(ctx, maskTurnTimeout+time.Minute)
	defer cancel()
	if err := app.initialize(c); err != nil {
		return fail("app-server initialize", err)
	}
	res, err := app.Call(c, "thread/start", map[string]any{
		"cwd":            workdir,
		"environments":   []map[string]string{{"environmentId": harnessEnvID, "cwd": workdir}},
		"approvalPolicy": "never",
		"sandbox":        m.mode,
	})
	var thread struct {
		Thread struct {
			ID   string `json:"id"`
			Path string `json:"path"`
		} `json:"thread"`
	}
	if err == nil {
		json.Unmarshal(res, &thread)
		if thread.Thread.ID == "" {
			err = fmt.Errorf("no thread id: %s", clip(string(res), 300))
		}
	}
	if err != nil {
		return fail("thread/start", err)
	}
	path := "/mask-" + randomHex(4)
	var stand string // the value the command printed
	steps := []agentStep{
		{"the command that echoes the token prints a stand-in of its shape, never the real value",
			maskCall(fmt.Sprintf(`printf 'token=%%s\n' "$%s"; env | grep -E '^(SSL_CERT_FILE|CURL_CA_BUNDLE|CODEX_NETWORK_PROXY_ACTIVE|HTTPS_PROXY)=' | sort`, maskTokenVar)),
			func(out string) error {
				g := maskEchoLine.FindStringSubmatch(out)
				if g == nil {
					return fmt.Errorf("no token= line")
				}
				stand = g[1]
				switch {
				case strings.Contains(out, real):
					return fmt.Errorf("the command saw the real token")
				case stand == "":
					return fmt.Errorf("the command saw no token at all")
				case len(stand) != len(real) || !strings.HasPrefix(stand, maskTokenPrefix):
					return fmt.Errorf("the stand-in %q lacks the real token's shape (%d characters, prefix %s)", stand, len(real), maskTokenPrefix)
				}
				return nil
			}},
		{"the command's request to the test host, sent with what it holds, arrives carrying the real token (read on the host)",
			maskCall(fmt.Sprintf(`curl -sS --max-time 60 -H "Authorization: Bearer $%s" -w '\nhttp_code=%%{http_code}\n' %s`, maskTokenVar, host.url(path))),
			func(out string) error {
				got := host.received(path)
				if len(got) != 1 {
					return fmt.Errorf("the test host saw %d request(s) for %s, want 1", len(got), path)
				}
				if got[0] != "Bearer "+real {
					what := "something else"
					if stand != "" && got[0] == "Bearer "+stand {
						what = "the stand-in"
					}
					return fmt.Errorf("the test host received %s (%q), not the real token", what, clip(got[0], 80))
				}
				if strings.Contains(out, real) {
					return fmt.Errorf("the command's output holds the real token")
				}
				return contains("realcodex-mask-host "+path, "http_code=200")(out)
			}},
	}
	s := &scenario{app: app, log: log, model: model, mode: m.mode, workdir: workdir, reference: target == "ref"}
	out := s.agentTurn(c, thread.Thread.ID, "masked turn", steps, turnSandboxPolicy(m.mode))
	if wire != nil {
		out = append(out, maskWireResults(wire(), real)...)
	} else {
		const why = "the relay is encrypted; the local run checks the wire"
		out = append(out, stepResult{Name: "process/start asks for credential masking", Skip: true, Detail: why},
			stepResult{Name: "no process/output carries the real token", Skip: true, Detail: why})
	}
	out = append(out, maskRolloutResult(home, thread.Thread.ID, real))
	out = append(out, maskWarningResult(app.Notes(), filepath.Join(dir, "app-server.log"), filepath.Join(dir, "exec-server.log"), filepath.Join(dir, "executor.log")))
	for i, r := range out {
		if !strings.HasPrefix(r.Name, prefix) {
			out[i].Name = prefix + r.Name
		}
	}
	return out
}

// maskCall is an exec_command call without a login shell: the reference executor masks only
// a command whose shell start-up reads no profile (a login shell's `bash -lc` makes it warn
// "unavailable for this shell startup" and run with the real values).
func maskCall(cmd string) toolCall {
	return toolCall{"exec_command", execArgs(map[string]any{"cmd": cmd, "login": false, "yield_time_ms": 10000})}
}

// maskWireResults reads the local wire: what process/start asked for, what the executor
// advertised, and whether any process/output chunk carried the real token.
func maskWireResults(msgs []wireMessage, real string) []stepResult {
	start := stepResult{Name: "process/start asks for credential masking (networkProxy.proxy.credentialMasking true)"}
	starts := wireCalls(msgs, "process/start")
	for _, p := range starts {
		var params struct {
			NetworkProxy *struct {
				Proxy map[string]json.RawMessage `json:"proxy"`
			} `json:"networkProxy"`
		}
		json.Unmarshal(p, &params)
		if params.NetworkProxy == nil {
			continue
		}
		px := params.NetworkProxy.Proxy
		start.Detail = fmt.Sprintf("proxy.credentialMasking=%s credentialProviders=%s", px["credentialMasking"], clip(string(px["credentialProviders"]), 400))
		start.OK = string(px["credentialMasking"]) == "true"
		break
	}
	if start.Detail == "" {
		start.Detail = fmt.Sprintf("none of %d process/start requests carried networkProxy", len(starts))
	}
	start.Detail += "; " + advertised(msgs, "credentialMasking")
	leak := stepResult{Name: "no process/output carries the real token (the recorded wire, chunks decoded)"}
	n, chunks := 0, 0
	for _, m := range msgs {
		if m.Binary || m.Dir != "s2c" {
			continue
		}
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Chunk string `json:"chunk"`
			} `json:"params"`
		}
		if json.Unmarshal(m.Data, &msg) != nil {
			continue
		}
		if strings.Contains(string(m.Data), real) {
			n++
		}
		if msg.Method == "process/output" {
			chunks++
			if b, err := base64.StdEncoding.DecodeString(msg.Params.Chunk); err == nil && strings.Contains(string(b), real) {
				n++
			}
		}
	}
	leak.OK = chunks > 0 && n == 0
	leak.Detail = fmt.Sprintf("%d of %d process/output chunks (or other server messages) carried it", n, chunks)
	return []stepResult{start, leak}
}

// maskRolloutResult greps the thread's rollout (CODEX_HOME/sessions) for the real token.
func maskRolloutResult(home, threadID, real string) stepResult {
	r := stepResult{Name: "the rollout never holds the real token"}
	var files []string
	found := 0
	filepath.WalkDir(filepath.Join(home, "sessions"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(filepath.Base(p), threadID) {
			return nil
		}
		files = append(files, p)
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), real) {
			found++
		}
		return nil
	})
	r.OK = len(files) > 0 && found == 0
	r.Detail = fmt.Sprintf("%d rollout file(s) for thread %s, %d holding the real token", len(files), threadID, found)
	return r
}

// maskWarningResult reports whether the harness (a notification to its client, or its log)
// or the executor (its log) said that it could not mask.
func maskWarningResult(notes []rpcMessage, logPaths ...string) stepResult {
	r := stepResult{Name: "neither the harness nor the executor warned that masking is unavailable"}
	var hits []string
	for _, n := range notes {
		if i := strings.Index(string(n.Params), "Credential masking is unavailable"); i >= 0 {
			hits = append(hits, n.Method+": "+clip(string(n.Params[i:]), 300))
		}
	}
	for _, p := range logPaths {
		b, _ := os.ReadFile(p)
		for _, line := range strings.Split(string(b), "\n") {
			if i := strings.Index(line, "Credential masking is unavailable"); i >= 0 {
				hits = append(hits, filepath.Base(p)+": "+clip(line[i:], 300))
			}
		}
	}
	r.OK = len(hits) == 0
	r.Detail = strings.Join(hits, " | ")
	return r
}

// writeRequirements writes requirements.toml into reqDir's overlay upper directory, as
// writeNetRequirements does for the network scenario.
func writeRequirements(reqDir, text string) error {
	d := filepath.Join(reqDir, "upper", "codex")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(reqDir, "work"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(d, "requirements.toml"), []byte(text), 0o644)
}
