package main

// The managed-network scenario (0.171 only): the real `codex app-server` with managed network
// requirements (an allow list, a deny list, review domains) and the automatic approval
// reviewer, against an executor (ours or the reference) that launches the proxy
// for each command (process/start.networkProxy), locally over a websocket or through the
// loopback relay. The mock model's commands run curl through the proxy to test hosts on
// loopback addresses: an allowed host answers, a denied one gets the proxy's 403 JSON body and
// sees nothing, and the review domains are put to the harness (network/policyRequest), whose
// approval request this client answers: accept for one host, decline for the other. Each
// verdict is also read on the test host. README.md, "The network scenario", lists the steps,
// the configuration that triggers the proxy and what the harness sends.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The test hosts: loopback addresses (Linux answers on all of 127/8), each with its own
// listener, so the host that a request reached names the policy entry it went through. Each
// needs an exact allow (or deny) entry: the proxy refuses a local address otherwise
// (docs/network.md §3).
const (
	netAllowHost       = "127.0.0.1" // allow entry: fetched
	netReviewAllowHost = "127.0.0.2" // allow entry and review domain: the client accepts
	netReviewDenyHost  = "127.0.0.3" // allow entry and review domain: the client declines
	netDenyHost        = "127.0.0.4" // deny entry: 403, never reached
	netTurnTimeout     = 4 * time.Minute
	// netDecisionTimeoutMs is the harness's policy_decision_timeout: long enough for the
	// approval round trip through the app-server client.
)

var netHosts = []string{netAllowHost, netReviewAllowHost, netReviewDenyHost, netDenyHost}

// netTestHost serves HTTP on one listener per test address and records every request.
type netTestHost struct {
	lns  map[string]net.Listener // by address
	srv  *http.Server
	body string // what each answer starts with

	mu   sync.Mutex
	hits map[string][]string // address -> request paths
}

func startNetTestHost(marker string) (*netTestHost, error) {
	h := &netTestHost{lns: map[string]net.Listener{}, hits: map[string][]string{}, body: "realcodex-net-host " + marker}
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	for _, a := range netHosts {
		ln, err := net.Listen("tcp", a+":0")
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("listen on %s: %w", a, err)
		}
		h.lns[a] = ln
		go h.srv.Serve(ln)
	}
	return h, nil
}

func (h *netTestHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	addr := ""
	if local != nil {
		addr, _, _ = net.SplitHostPort(local.String())
	}
	h.mu.Lock()
	h.hits[addr] = append(h.hits[addr], r.URL.Path)
	h.mu.Unlock()
	fmt.Fprintf(w, "%s %s %s\n", h.body, addr, r.URL.Path)
}

// url is the address of path on host's listener.
func (h *netTestHost) url(host, path string) string {
	return "http://" + h.lns[host].Addr().String() + path
}

// reached reports how many requests for path arrived at host.
func (h *netTestHost) reached(host, path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, p := range h.hits[host] {
		if p == path {
			n++
		}
	}
	return n
}

func (h *netTestHost) Close() {
	h.srv.Close()
	for _, ln := range h.lns {
		ln.Close()
	}
}

// netTopConfig are the top-level keys config.toml gets before its tables: review requests
// go to the guardian reviewer, the only path on which the harness gives the executor a
// decision timeout and answers its network/policyRequest.
const netTopConfig = `approvals_reviewer = "auto_review"
`

// writeNetConfig adds netTopConfig before what codexHomeConfig wrote. That is all config.toml
// needs: the network itself (on, the domains, the review domains) comes from netRequirements,
// and features.network_proxy is not needed (measured: without it process/start is the same).
func writeNetConfig(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(netTopConfig+string(b)), 0o600)
}

// netRequirements is the managed requirements.toml: the network on (without enabled the
// harness launches no proxy), the test hosts' entries, and the review domains (requirements
// are the only place the harness reads them from).
func netRequirements() string {
	return fmt.Sprintf(`[experimental_network]
enabled = true
allowed_domains = [%q, %q, %q]
denied_domains = [%q]
review_domains = [%q, %q]
`, netAllowHost, netReviewAllowHost, netReviewDenyHost, netDenyHost, netReviewAllowHost, netReviewDenyHost)
}

// netAppServerArgv wraps the app-server so that it, and only it, reads requirements from
// reqDir: the harness reads them from /etc/codex/requirements.toml, so the wrapper runs it
// in a mount namespace of its own where an overlay on /etc adds codex/requirements.toml.
// Nothing changes on the host.
func netAppServerArgv(codex, reqDir string) []string {
	upper, work := filepath.Join(reqDir, "upper"), filepath.Join(reqDir, "work")
	script := `mount -t overlay realcodex -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 && exec "$@"`
	return []string{"unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", upper, work, codex, "app-server"}
}

func writeNetRequirements(reqDir string) error {
	d := filepath.Join(reqDir, "upper", "codex")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(reqDir, "work"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(d, "requirements.toml"), []byte(netRequirements()), 0o644)
}

// netReviewHost returns the host of the network access an approval reviewer request asks
// about (the harness's "Network access JSON" input), or "".
func netReviewHost(body []byte) string {
	var req struct {
		Input []struct {
			Content json.RawMessage `json:"content"`
		} `json:"input"`
	}
	json.Unmarshal(body, &req)
	host := ""
	for _, in := range req.Input {
		var parts []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(in.Content, &parts) != nil {
			continue
		}
		for _, p := range parts {
			var access struct {
				Tool string `json:"tool"`
				Host string `json:"host"`
			}
			if json.Unmarshal([]byte(strings.TrimSpace(p.Text)), &access) == nil && access.Tool == "network_access" {
				host = access.Host
			}
		}
	}
	return host
}

// netReview is the approval reviewer's answer: allow netReviewAllowHost, deny anything else.
func netReview(body []byte) string {
	if netReviewHost(body) == netReviewAllowHost {
		return `{"outcome":"allow"}`
	}
	return `{"risk_level":"high","user_authorization":"unknown","outcome":"deny","rationale":"realcodex declines this review domain"}`
}

// runNet runs the network scenario against target ("ref" or "ours") over transport
// ("local" or "remote").
func runNet(ctx context.Context, cfg config, log *eventLog, m modeRun, target, transport string) []stepResult {
	const prefix = "network: "
	fail := func(name string, err error) []stepResult {
		return []stepResult{{Name: prefix + name, Detail: err.Error()}}
	}
	if cfg.version != "0.171.0" {
		return []stepResult{{Name: prefix + "the network scenario", Skip: true,
			Detail: "needs the 0.171 harness (features.network_proxy, review domains); the reference is " + cfg.version}}
	}
	if os.Geteuid() != 0 {
		return []stepResult{{Name: prefix + "the network scenario", Skip: true,
			Detail: "needs root: the harness reads review domains only from /etc/codex/requirements.toml, which the scenario overlays in a mount namespace of the app-server's own"}}
	}
	dir := filepath.Join(m.dir, "net-"+transport+"-"+target)
	workdir := filepath.Join(dir, "work")
	execHome := filepath.Join(dir, "exec-home")
	for _, d := range []string{workdir, execHome} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fail("setup", err)
		}
	}
	marker := randomHex(4)
	log.Printf("==== net %s/%s, sandbox mode %s", transport, target, m.mode)
	host, err := startNetTestHost(marker)
	if err != nil {
		return fail("start the test host", err)
	}
	defer host.Close()

	bin, args := execServerCommand(cfg, target)
	var harnessEnv []string
	var wire func() []wireMessage
	switch transport {
	case "local":
		args = append(args, "--listen", "ws://127.0.0.1:0")
		if target == "ours" {
			args = append(args, "--log-level", "debug")
		}
		srv, url, err := startChild("net exec-server/"+target, bin, args, []string{"CODEX_HOME=" + execHome}, workdir, "", filepath.Join(dir, "exec-server.log"), true)
		if err != nil {
			return fail("start exec-server", err)
		}
		defer srv.Stop()
		proxy, err := startWSProxy(log, "net local/"+target, url)
		if err != nil {
			return fail("start proxy", err)
		}
		defer proxy.Close()
		defer func() { writeWire(filepath.Join(dir, "wire.jsonl"), proxy.Messages()) }()
		wire = proxy.Messages
		harnessEnv = []string{"CODEX_EXEC_SERVER_URL=" + proxy.URL()}
	case "remote":
		reg, err := startTestRegistry(log, remoteEnvID, executorBearer, harnessBearer)
		if err != nil {
			return fail("start registry", err)
		}
		defer reg.Close()
		args = append(args, "--remote", reg.url, "--environment-id", remoteEnvID, "--registration-bearer-stdin")
		env := []string{"CODEX_HOME=" + execHome}
		if target == "ours" {
			args = append(args, "--log-level", "debug")
		} else {
			env = append(env, "RUST_LOG=codex_exec_server=debug,info")
		}
		logPath := filepath.Join(dir, "executor.log")
		exe, _, err := startChild("net executor/"+target, bin, args, env, workdir, executorBearer+"\n", logPath, false)
		if err != nil {
			return fail("start executor", err)
		}
		defer exe.Stop()
		if !reg.WaitExecutor(30 * time.Second) {
			return fail("executor connects to the rendezvous", fmt.Errorf("no executor socket within 30s; see %s", logPath))
		}
		harnessEnv = []string{
			"CODEX_EXEC_SERVER_NOISE_REGISTRY_URL=" + reg.url,
			"CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID=" + remoteEnvID,
			"CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN=" + harnessBearer,
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
	if err := writeNetConfig(filepath.Join(home, "config.toml")); err != nil {
		return fail("write CODEX_HOME", err)
	}
	reqDir := filepath.Join(dir, "requirements")
	if err := writeNetRequirements(reqDir); err != nil {
		return fail("write requirements.toml", err)
	}
	env := append([]string{"CODEX_HOME=" + home, "CODEX_API_KEY=sk-unused", "RUST_LOG=info"}, harnessEnv...)
	model.SetReviewer(netReview)
	app, err := startAppServerArgv(log, m.label("net "+transport+"/"+target)+" app", netAppServerArgv(cfg.codex, reqDir), env,
		filepath.Join(dir, "app-server.log"))
	if err != nil {
		return fail("start app-server", err)
	}
	defer app.Close()
	c, cancel := context.WithTimeout(ctx, netTurnTimeout+time.Minute)
	defer cancel()
	if err := app.initialize(c); err != nil {
		return fail("app-server initialize", err)
	}
	var out []stepResult
	for i, rd := range netRounds(m.mode) {
		if c.Err() != nil {
			break
		}
		paths := map[string]string{}
		for _, h := range netHosts {
			paths[h] = fmt.Sprintf("/%s-r%d-%s", strings.ReplaceAll(h, ".", "-"), i, marker)
		}
		wireBefore, reviewsBefore := 0, len(model.Reviews())
		if wire != nil {
			wireBefore = len(wire())
		}
		rs, err := netRound(c, app, log, model, m.mode, workdir, target == "ref", rd, host, paths)
		if err != nil {
			out = append(out, stepResult{Name: rd.name + ": " + err.Error()})
			continue
		}
		var msgs []wireMessage
		if wire != nil {
			msgs = wire()[wireBefore:]
		}
		reviews := model.Reviews()[reviewsBefore:]
		if rd.full {
			rs = append(rs, netFullAccessWireResult(msgs, wire != nil), netNoReviewResult(reviews))
		} else {
			rs = append(rs, netWireResults(msgs, wire != nil)...)
			rs = append(rs, netReviewResult(reviews))
		}
		for j := range rs {
			if !strings.HasPrefix(rs[j].Name, rd.name+": ") {
				rs[j].Name = rd.name + ": " + rs[j].Name
			}
		}
		out = append(out, rs...)
	}
	for i, r := range out {
		if !strings.HasPrefix(r.Name, prefix) {
			out[i].Name = prefix + r.Name
		}
	}
	return out
}

// netRoundSpec is one thread and turn of the network scenario.
type netRoundSpec struct {
	name   string
	policy map[string]any // the turn's sandboxPolicy
	full   bool           // danger-full-access: the harness launches no proxy
}

// netRounds are the rounds of a sandbox mode. Under workspace-write the turn runs twice:
// with the network restricted (the proxy is reached through the sandbox's network
// namespace) and with networkAccess on (the profile's network enabled).
func netRounds(mode string) []netRoundSpec {
	switch mode {
	case modeFull:
		return []netRoundSpec{{name: "network turn", policy: turnSandboxPolicy(mode), full: true}}
	case modeWrite:
		enabled := turnSandboxPolicy(mode)
		enabled["networkAccess"] = true
		return []netRoundSpec{
			{name: "restricted-network turn", policy: turnSandboxPolicy(mode)},
			{name: "network-enabled turn", policy: enabled},
		}
	}
	return []netRoundSpec{{name: "network turn", policy: turnSandboxPolicy(mode)}}
}

// netRound starts a thread on the executor's environment and runs rd's turn.
func netRound(ctx context.Context, app *appServer, log *eventLog, model *mockModel, mode, workdir string, reference bool,
	rd netRoundSpec, host *netTestHost, paths map[string]string) ([]stepResult, error) {
	res, err := app.Call(ctx, "thread/start", map[string]any{
		"cwd":            workdir,
		"environments":   []map[string]string{{"environmentId": harnessEnvID, "cwd": workdir}},
		"approvalPolicy": "on-request",
		"sandbox":        mode,
		"ephemeral":      true,
	})
	var thread struct {
		Thread struct{ ID string } `json:"thread"`
	}
	if err == nil {
		json.Unmarshal(res, &thread)
		if thread.Thread.ID == "" {
			err = fmt.Errorf("no thread id: %s", clip(string(res), 300))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("thread/start: %w", err)
	}
	s := &scenario{app: app, log: log, model: model, mode: mode, workdir: workdir, reference: reference}
	steps := netSteps(host, paths)
	if rd.full {
		steps = netFullAccessSteps(host, paths)
	}
	return s.agentTurn(ctx, thread.Thread.ID, rd.name, steps, rd.policy), nil
}

// curlCmd fetches url through the proxy the command's environment names, printing the body
// and then the status code on a line of its own.
func curlCmd(url string) string {
	return fmt.Sprintf(`curl -sS --max-time 60 -w '\nhttp_code=%%{http_code}\n' %s`, url)
}

// netSteps is the turn's script: one curl per test host, each checked in its output and on
// the test host.
func netSteps(h *netTestHost, paths map[string]string) []agentStep {
	fetched := func(host string) func(string) error {
		return func(out string) error {
			if err := contains(h.body+" "+host+" "+paths[host], "http_code=200")(out); err != nil {
				return err
			}
			if n := h.reached(host, paths[host]); n != 1 {
				return fmt.Errorf("the test host on %s saw %d request(s) for %s, want 1", host, n, paths[host])
			}
			return nil
		}
	}
	blocked := func(host string, want ...string) func(string) error {
		return func(out string) error {
			if n := h.reached(host, paths[host]); n != 0 {
				return fmt.Errorf("the test host on %s saw %d request(s) for %s: the proxy let it through", host, n, paths[host])
			}
			return contains(append([]string{"http_code=403", `"status":"blocked"`}, want...)...)(out)
		}
	}
	return []agentStep{
		{"an allowed host is fetched through the proxy (the test host saw the request)",
			cmdCall(curlCmd(h.url(netAllowHost, paths[netAllowHost]))), fetched(netAllowHost)},
		{"a denied host gets the proxy's 403 JSON body (the test host saw nothing)",
			cmdCall(curlCmd(h.url(netDenyHost, paths[netDenyHost]))), blocked(netDenyHost, `"reason":"denied"`, `"host":"`+netDenyHost+`"`)},
		{"a review domain the reviewer allows is fetched (the test host saw the request)",
			cmdCall(curlCmd(h.url(netReviewAllowHost, paths[netReviewAllowHost]))), fetched(netReviewAllowHost)},
		{"a review domain the reviewer denies is refused: 403, or the harness's rejection (the test host saw nothing)",
			cmdCall(curlCmd(h.url(netReviewDenyHost, paths[netReviewDenyHost]))), func(out string) error {
				if n := h.reached(netReviewDenyHost, paths[netReviewDenyHost]); n != 0 {
					return fmt.Errorf("the test host on %s saw %d request(s): the proxy let it through", netReviewDenyHost, n)
				}
				// The harness reports its reviewer's denial in place of the command's output.
				if strings.Contains(out, "rejected due to unacceptable risk") {
					return nil
				}
				return contains("http_code=403", `"status":"blocked"`, `"host":"`+netReviewDenyHost+`"`)(out)
			}},
	}
}

// netFullAccessSteps is the script under danger-full-access, where the harness launches no
// proxy (measured on the reference: process/start carries no networkProxy, and the command
// reaches every host directly). The same four fetches must therefore all arrive.
func netFullAccessSteps(h *netTestHost, paths map[string]string) []agentStep {
	var steps []agentStep
	for _, host := range []string{netAllowHost, netDenyHost, netReviewAllowHost, netReviewDenyHost} {
		host := host
		steps = append(steps, agentStep{
			Name: "full access: " + host + " is fetched directly (the harness launches no proxy, as with the reference)",
			Call: cmdCall(curlCmd(h.url(host, paths[host]))),
			Check: func(out string) error {
				if err := contains(h.body+" "+host+" "+paths[host], "http_code=200")(out); err != nil {
					return err
				}
				if n := h.reached(host, paths[host]); n != 1 {
					return fmt.Errorf("the test host on %s saw %d request(s) for %s, want 1", host, n, paths[host])
				}
				return nil
			},
		})
	}
	return steps
}

// netFullAccessWireResult checks, where the wire is visible, that under danger-full-access
// no process/start carried networkProxy (the reference's harness sends none).
func netFullAccessWireResult(msgs []wireMessage, visible bool) stepResult {
	r := stepResult{Name: "full access: no process/start carries networkProxy (as with the reference)"}
	if !visible {
		r.Skip, r.Detail = true, "the relay is encrypted; the local run checks the wire"
		return r
	}
	starts := wireCalls(msgs, "process/start")
	n := 0
	for _, p := range starts {
		var params struct {
			NetworkProxy json.RawMessage `json:"networkProxy"`
		}
		json.Unmarshal(p, &params)
		if len(params.NetworkProxy) > 0 && string(params.NetworkProxy) != "null" {
			n++
		}
	}
	r.OK = len(starts) > 0 && n == 0
	r.Detail = fmt.Sprintf("%d of %d process/start requests carried networkProxy", n, len(starts))
	return r
}

// netNoReviewResult checks that under danger-full-access nothing was put to the reviewer.
func netNoReviewResult(reviews []string) stepResult {
	return stepResult{Name: "full access: nothing is put to the approval reviewer (as with the reference)",
		OK: len(reviews) == 0, Detail: fmt.Sprintf("%d reviewer request(s)", len(reviews))}
}

// netWireResults checks, where the wire is visible, what the harness sent in process/start
// and the policy requests the executor put to it.
func netWireResults(msgs []wireMessage, visible bool) []stepResult {
	const startName = "process/start carries networkProxy with the allow and deny entries and the review domains"
	const askName = "the executor put each review domain to the harness (network/policyRequest): allow for " + netReviewAllowHost + ", deny for " + netReviewDenyHost
	const judgedName = "the proxy judged the allowed fetch (network/policyDecision allow for " + netAllowHost + ", not a direct connection)"
	if !visible {
		const why = "the relay is encrypted; the local run checks the wire"
		return []stepResult{{Name: startName, Skip: true, Detail: why}, {Name: askName, Skip: true, Detail: why}, {Name: judgedName, Skip: true, Detail: why}}
	}
	judged := stepResult{Name: judgedName}
	var decisions []string
	for _, m := range msgs {
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Decision, Source, Host string
			} `json:"params"`
		}
		if m.Binary || m.Dir != "s2c" || json.Unmarshal(m.Data, &msg) != nil || msg.Method != "network/policyDecision" {
			continue
		}
		decisions = append(decisions, msg.Params.Host+"="+msg.Params.Decision+"/"+msg.Params.Source)
		if msg.Params.Host == netAllowHost && msg.Params.Decision == "allow" {
			judged.OK = true
		}
	}
	judged.Detail = "decisions: " + strings.Join(decisions, ", ")
	start := stepResult{Name: startName}
	starts := wireCalls(msgs, "process/start")
	for _, p := range starts {
		var params struct {
			NetworkProxy *struct {
				Proxy struct {
					Domains       map[string]string `json:"domains"`
					ReviewDomains []string          `json:"reviewDomains"`
				} `json:"proxy"`
				PolicyDecisionTimeoutMs *uint64 `json:"policyDecisionTimeoutMs"`
			} `json:"networkProxy"`
		}
		json.Unmarshal(p, &params)
		np := params.NetworkProxy
		if np == nil {
			continue
		}
		start.Detail = clip(string(p), 1500)
		d := np.Proxy.Domains
		start.OK = d[netAllowHost] == "allow" && d[netDenyHost] == "deny" &&
			strings.Contains(strings.Join(np.Proxy.ReviewDomains, ","), netReviewAllowHost) && np.PolicyDecisionTimeoutMs != nil
		break
	}
	if start.Detail == "" {
		start.Detail = fmt.Sprintf("none of %d process/start requests carried networkProxy; %s", len(starts), advertised(msgs, "networkProxyLaunch"))
	}
	ask := stepResult{Name: askName}
	hosts := map[string]string{} // request key -> host
	answered := map[string]string{}
	var seen []string
	for _, m := range msgs {
		if m.Binary {
			continue
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Request struct{ Host string } `json:"request"`
			} `json:"params"`
			Result struct {
				Decision struct{ Type string } `json:"decision"`
			} `json:"result"`
		}
		if json.Unmarshal(m.Data, &msg) != nil || len(msg.ID) == 0 {
			continue
		}
		key := fmt.Sprint(m.Conn, "/", string(msg.ID))
		switch {
		case m.Dir == "s2c" && msg.Method == "network/policyRequest":
			hosts[key] = msg.Params.Request.Host
			seen = append(seen, clip(string(m.Data), 300))
		case m.Dir == "c2s" && msg.Method == "" && hosts[key] != "":
			answered[hosts[key]] = msg.Result.Decision.Type
			seen = append(seen, clip(string(m.Data), 300))
		}
	}
	ask.OK = answered[netReviewAllowHost] == "allow" && answered[netReviewDenyHost] == "deny"
	ask.Detail = fmt.Sprintf("answers by host: %v; %s", answered, strings.Join(seen, " | "))
	return []stepResult{start, ask, judged}
}

// netReviewResult checks that the harness put each review domain to its approval reviewer.
func netReviewResult(reviews []string) stepResult {
	r := stepResult{Name: "the harness put each review domain to its approval reviewer (the mock model: allow " +
		netReviewAllowHost + ", deny " + netReviewDenyHost + ")"}
	hosts := map[string]int{}
	for _, b := range reviews {
		hosts[netReviewHost([]byte(b))]++
	}
	r.OK = hosts[netReviewAllowHost] > 0 && hosts[netReviewDenyHost] > 0
	r.Detail = fmt.Sprintf("%d reviewer request(s), by host: %v", len(reviews), hosts)
	return r
}
