package main

// The capability scenario (0.171 only): the real `codex app-server` with executor capability
// discovery, an executor-owned HTTP MCP server and shell snapshots v2 switched on, against an
// executor (ours or the reference) holding the fixtures, locally over a websocket or through the
// loopback relay. It checks what reaches the model: the executor's skills (through
// capabilities/discoverV2), a selected capability root's skill (through
// capabilityRoots/discoverV1), the MCP server's tool (listed through http/request with a bearer
// token only the executor's environment holds), and a command run from a shell snapshot
// (process/start.shellSnapshot) that sees the login profile's export without being a login
// shell. README.md, "The capability scenario", lists the steps and what the harness sends.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The fixtures' names: each skill sits where only one discovery path can find it.
const (
	homeSkill       = "realcodex-home-skill"   // $CODEX_HOME/skills of the executor
	agentsSkill     = "realcodex-agents-skill" // ~/.agents/skills of the executor
	rootSkill       = "realcodex-root-skill"   // skills/ of the selected capability root
	capRootID       = "realcodex-capability-root"
	mcpServerName   = "realcodex_mcp"
	mcpTokenEnv     = "REALCODEX_MCP_TOKEN" // set in the executor's environment only
	profileVar      = "REALCODEX_PROFILE_VAR"
	capsTurnTimeout = 3 * time.Minute
)

// capsFixture is one executor's fixture tree.
type capsFixture struct {
	dir      string
	execHome string // the executor's CODEX_HOME
	userHome string // the executor's HOME
	capRoot  string // the capability root the thread selects
	workdir  string
	marker   string // makes every description unique to this run
	token    string // the MCP bearer token
}

// skillDescription is the description of skill name: what the model request must contain.
func (f *capsFixture) skillDescription(name string) string {
	return "Realcodex fixture " + name + " " + f.marker
}

func (f *capsFixture) profileValue() string { return "profile-" + f.marker }

func newCapsFixture(dir string) (*capsFixture, error) {
	f := &capsFixture{
		dir:      dir,
		execHome: filepath.Join(dir, "exec-home"),
		userHome: filepath.Join(dir, "exec-user"),
		capRoot:  filepath.Join(dir, "caproot"),
		workdir:  filepath.Join(dir, "work"),
		marker:   randomHex(4),
		token:    "realcodex-mcp-" + randomHex(8),
	}
	skill := func(base, name string) error {
		d := filepath.Join(base, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		body := fmt.Sprintf("---\nname: %s\ndescription: %s\n---\n\nA realcodex fixture skill; nothing to do.\n", name, f.skillDescription(name))
		return os.WriteFile(filepath.Join(d, "SKILL.md"), []byte(body), 0o600)
	}
	for _, d := range []string{f.workdir, f.execHome, f.userHome} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := skill(filepath.Join(f.execHome, "skills"), homeSkill); err != nil {
		return nil, err
	}
	if err := skill(filepath.Join(f.userHome, ".agents", "skills"), agentsSkill); err != nil {
		return nil, err
	}
	if err := skill(filepath.Join(f.capRoot, "skills"), rootSkill); err != nil {
		return nil, err
	}
	// bash -l reads the first of ~/.bash_profile, ~/.bash_login, ~/.profile.
	profile := fmt.Sprintf("export %s=%s\n", profileVar, f.profileValue())
	if err := os.WriteFile(filepath.Join(f.userHome, ".bash_profile"), []byte(profile), 0o600); err != nil {
		return nil, err
	}
	return f, nil
}

// executorEnv is the executor's environment on top of baseEnv (a later HOME wins).
func (f *capsFixture) executorEnv() []string {
	return []string{"CODEX_HOME=" + f.execHome, "HOME=" + f.userHome, mcpTokenEnv + "=" + f.token}
}

// capsConfig is what config.toml gets on top of codexHomeConfig: the features and the MCP
// server owned by the exec-server environment.
func capsConfig(mcpURL string, v2 bool) string {
	return fmt.Sprintf(`
[features]
executor_capability_discovery = true
executor_capability_discovery_v2 = %t
shell_snapshot = true
shell_snapshot_v2 = true

[mcp_servers.%s]
url = %q
bearer_token_env_var = %q
environment_id = %q
startup_timeout_sec = 20
`, v2, mcpServerName, mcpURL, mcpTokenEnv, harnessEnvID)
}

// runCaps runs the capability scenario against target ("ref" or "ours") over transport
// ("local" or "remote").
func runCaps(ctx context.Context, cfg config, log *eventLog, m modeRun, target, transport string) []stepResult {
	const prefix = "capabilities: "
	var out []stepResult
	fail := func(name string, err error) []stepResult {
		return append(out, stepResult{Name: prefix + name, Detail: err.Error()})
	}
	if cfg.version != "0.171.0" {
		return []stepResult{{Name: prefix + "the capability scenario", Skip: true,
			Detail: "needs the 0.171 harness (features.executor_capability_discovery_v2, shell_snapshot_v2, executor-owned MCP servers); the reference is " + cfg.version}}
	}
	dir := filepath.Join(m.dir, "caps-"+transport+"-"+target)
	fx, err := newCapsFixture(dir)
	if err != nil {
		return fail("write the fixtures", err)
	}
	log.Printf("==== caps %s/%s, sandbox mode %s", transport, target, m.mode)
	mcp, err := startMCPServer(log, fx.token)
	if err != nil {
		return fail("start the MCP server", err)
	}
	defer mcp.Close()

	bin, args := execServerCommand(cfg, target)
	var harnessEnv []string
	var wire func() []wireMessage
	switch transport {
	case "local":
		args = append(args, "--listen", "ws://127.0.0.1:0")
		if target == "ours" {
			args = append(args, "--log-level", "debug")
		}
		srv, url, err := startChild("caps exec-server/"+target, bin, args, fx.executorEnv(), fx.workdir, "", filepath.Join(dir, "exec-server.log"), true)
		if err != nil {
			return fail("start exec-server", err)
		}
		defer srv.Stop()
		proxy, err := startWSProxy(log, "caps local/"+target, url)
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
		env := fx.executorEnv()
		if target == "ours" {
			args = append(args, "--log-level", "debug")
		} else {
			env = append(env, "RUST_LOG=codex_exec_server=debug,info")
		}
		logPath := filepath.Join(dir, "executor.log")
		exe, _, err := startChild("caps executor/"+target, bin, args, env, fx.workdir, executorBearer+"\n", logPath, false)
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
	var msgs func() []wireMessage = func() []wireMessage { return nil }
	if wire != nil {
		msgs = wire
	}
	for _, rd := range capsRounds {
		if ctx.Err() != nil {
			break
		}
		before := len(model.Bodies())
		wireBefore := len(msgs())
		rs, err := fx.round(ctx, cfg, log, m, rd, model, mcp, harnessEnv, transport+"/"+target)
		if err != nil {
			out = append(out, stepResult{Name: rd.name + ": " + err.Error(), Detail: "see " + filepath.Join(dir, rd.name)})
			continue
		}
		out = append(out, rs...)
		bodies := strings.Join(model.Bodies()[before:], "\n")
		var roundWire []wireMessage
		if wire != nil {
			roundWire = msgs()[wireBefore:]
		}
		out = append(out, fx.skillResults(rd, bodies, roundWire)...)
		if rd.mcpAndSnapshot {
			startErr := mcpStartupError(filepath.Join(dir, rd.name, "app-server.log"))
			out = append(out, fx.mcpResults(bodies, mcp.Stats(), roundWire, startErr)...)
			out = append(out, snapshotWireResult(roundWire, wire != nil))
		}
	}
	for i, r := range out {
		if !strings.HasPrefix(r.Name, prefix) {
			out[i].Name = prefix + r.Name
		}
	}
	return out
}

// capsRound is one app-server and thread of the capability scenario. Discovery v2 and the
// discovery of selected capability roots (v1) are different feature sets of the harness: with
// executor_capability_discovery_v2 on, the harness asks capabilities/discoverV2 and never
// capabilityRoots/discoverV1, so each gets its own round.
type capsRound struct {
	name           string
	v2             bool     // features.executor_capability_discovery_v2
	selectRoot     bool     // thread/start selects the fixture's capability root
	skills         []string // the skills this round must show the model
	mcpAndSnapshot bool     // this round also checks the MCP server and runs the snapshot turn
}

var capsRounds = []capsRound{
	{name: "discoverV2", v2: true, skills: []string{homeSkill, agentsSkill}, mcpAndSnapshot: true},
	{name: "discoverV1", selectRoot: true, skills: []string{rootSkill}},
}

// round starts the app-server of one round with its own CODEX_HOME and runs its thread and turn.
func (f *capsFixture) round(ctx context.Context, cfg config, log *eventLog, m modeRun, rd capsRound, model *mockModel,
	mcp *mcpServer, harnessEnv []string, label string) ([]stepResult, error) {
	home := filepath.Join(f.dir, rd.name, "codex-home")
	if err := codexHomeConfig(home, model.BaseURL(), m.mode); err != nil {
		return nil, fmt.Errorf("write CODEX_HOME: %w", err)
	}
	if err := appendFile(filepath.Join(home, "config.toml"), capsConfig(mcp.URL(), rd.v2)); err != nil {
		return nil, fmt.Errorf("write CODEX_HOME: %w", err)
	}
	env := append([]string{"CODEX_HOME=" + home, "CODEX_API_KEY=sk-unused", "RUST_LOG=info"}, harnessEnv...)
	app, err := startAppServer(log, m.label("caps "+label+" "+rd.name)+" app", cfg.codex, env, filepath.Join(f.dir, rd.name, "app-server.log"))
	if err != nil {
		return nil, fmt.Errorf("start app-server: %w", err)
	}
	defer app.Close()
	c, cancel := context.WithTimeout(ctx, capsTurnTimeout+time.Minute)
	defer cancel()
	if err := app.initialize(c); err != nil {
		return nil, fmt.Errorf("app-server initialize: %w", err)
	}
	params := map[string]any{
		"cwd":            f.workdir,
		"environments":   []map[string]string{{"environmentId": harnessEnvID, "cwd": f.workdir}},
		"approvalPolicy": "never",
		"sandbox":        m.mode,
		"ephemeral":      true,
	}
	if rd.selectRoot {
		params["selectedCapabilityRoots"] = []any{map[string]any{
			"id":       capRootID,
			"location": map[string]any{"type": "environment", "environmentId": harnessEnvID, "path": f.capRoot},
		}}
	}
	res, err := app.Call(c, "thread/start", params)
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
	var steps []agentStep
	if rd.mcpAndSnapshot {
		steps = f.snapshotSteps()
	}
	s := &scenario{app: app, log: log, model: model, mode: m.mode, workdir: f.workdir, reference: strings.HasSuffix(label, "/ref")}
	return s.agentTurn(c, thread.Thread.ID, rd.name+" turn", steps, turnSandboxPolicy(m.mode)), nil
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// snapshotSteps is the turn's script: one command that prints the login profile's export and
// whether bash runs it as a login shell. From a snapshot it sees the export but is not a login
// shell (the snapshot replaces `bash -l`'s start-up); without one it is a login shell.
func (f *capsFixture) snapshotSteps() []agentStep {
	cmd := fmt.Sprintf(`echo "profile=$%s"; if shopt -q login_shell; then echo login-shell=yes; else echo login-shell=no; fi`, profileVar)
	return []agentStep{{
		Name: "shell snapshot: the command sees the profile's export and runs from the snapshot (not a login shell)",
		Call: toolCall{"exec_command", execArgs(map[string]any{"cmd": cmd, "yield_time_ms": 10000})},
		Check: func(out string) error {
			if !strings.Contains(out, "profile="+f.profileValue()) {
				return fmt.Errorf("the command did not see %s=%s from ~/.bash_profile", profileVar, f.profileValue())
			}
			if strings.Contains(out, "login-shell=yes") {
				return fmt.Errorf("the command ran as a login shell, not from a shell snapshot (the harness sends process/start.shellSnapshot only to an executor advertising shellSnapshotV2, which must then run the command from the captured snapshot)")
			}
			return contains("login-shell=no", "exited with code 0")(out)
		},
	}}
}

// wireCalls returns the params of every harness request with this method, in order.
func wireCalls(msgs []wireMessage, method string) []json.RawMessage {
	var out []json.RawMessage
	for _, m := range msgs {
		if m.Dir != "c2s" || m.Binary {
			continue
		}
		var msg struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(m.Data, &msg) == nil && msg.Method == method {
			out = append(out, msg.Params)
		}
	}
	return out
}

// wireAnswers returns the answers (result or error, raw) to the harness requests with this
// method, in order.
func wireAnswers(msgs []wireMessage, method string) []string {
	ids := map[string]bool{}
	var out []string
	for _, m := range msgs {
		if m.Binary {
			continue
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal(m.Data, &msg) != nil || len(msg.ID) == 0 {
			continue
		}
		switch {
		case m.Dir == "c2s" && msg.Method == method:
			ids[fmt.Sprint(m.Conn, "/", string(msg.ID))] = true
		case m.Dir == "s2c" && msg.Method == "" && ids[fmt.Sprint(m.Conn, "/", string(msg.ID))]:
			if msg.Error != nil {
				out = append(out, "error "+string(msg.Error))
			} else {
				out = append(out, string(msg.Result))
			}
		}
	}
	return out
}

// advertised returns what the executor's initialize answer says of capability key:
// "key=true", "key=false", or "" when the wire holds no such answer.
func advertised(msgs []wireMessage, key string) string {
	for _, m := range msgs {
		if m.Dir != "s2c" || m.Binary {
			continue
		}
		var msg struct {
			Result struct {
				EnvironmentInfo struct {
					Capabilities map[string]bool `json:"capabilities"`
				} `json:"environmentInfo"`
			} `json:"result"`
		}
		if json.Unmarshal(m.Data, &msg) != nil || msg.Result.EnvironmentInfo.Capabilities == nil {
			continue
		}
		return fmt.Sprintf("the executor advertises %s=%t", key, msg.Result.EnvironmentInfo.Capabilities[key])
	}
	return ""
}

// mcpStartupError returns the harness's "MCP server startup failed" log line, if any.
func mcpStartupError(appLog string) string {
	b, err := os.ReadFile(appLog)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.Index(line, "MCP server startup failed"); i >= 0 {
			return stripANSI(line[i:])
		}
	}
	return ""
}

// stripANSI drops the colour escapes of the harness's log.
func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b {
			for i < len(s) && s[i] != 'm' {
				i++
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// skillResults checks that each skill's name and description reached the model, and, where
// the wire is visible, that the harness asked the discovery method that finds it.
func (f *capsFixture) skillResults(rd capsRound, bodies string, msgs []wireMessage) []stepResult {
	where := map[string]string{
		homeSkill:   "the executor's $CODEX_HOME/skills",
		agentsSkill: "the executor's ~/.agents/skills",
		rootSkill:   "the selected capability root",
	}
	method := "capabilities/discoverV2"
	if !rd.v2 {
		method = "capabilityRoots/discoverV1"
	}
	var out []stepResult
	for _, skill := range rd.skills {
		w := struct{ skill, where, method string }{skill, where[skill], method}
		r := stepResult{Name: fmt.Sprintf("%s: skill in %s reaches the model", rd.name, w.where)}
		desc := f.skillDescription(w.skill)
		hasName, hasDesc := strings.Contains(bodies, w.skill), strings.Contains(bodies, desc)
		r.OK = hasName && hasDesc
		if !r.OK {
			r.Detail = fmt.Sprintf("the model requests lack the skill's %s", map[bool]string{true: "description", false: "name"}[hasName])
			if msgs != nil {
				calls, answers := wireCalls(msgs, w.method), wireAnswers(msgs, w.method)
				r.Detail += fmt.Sprintf("; the harness sent %s %d time(s), the executor answered %s", w.method, len(calls), clip(strings.Join(answers, " | "), 600))
				if a := advertised(msgs, "capabilityDiscoveryV2"); rd.v2 && a != "" {
					r.Detail += "; " + a
				}
			} else {
				r.Detail += " (the relay is encrypted: see the local run for what the executor answered)"
			}
		}
		out = append(out, r)
	}
	return out
}

// mcpResults checks the executor-owned MCP server: it was reached with the executor's bearer
// token, its tool reached the model, and (locally) the harness reached it through http/request.
func (f *capsFixture) mcpResults(bodies string, st mcpStats, msgs []wireMessage, startErr string) []stepResult {
	seen := fmt.Sprintf("the MCP server saw %d request(s) with the right bearer, %d without: %s",
		st.AuthOK, st.AuthBad, clip(strings.Join(st.Requests, "; "), 600))
	if startErr != "" {
		seen += "; harness: " + clip(startErr, 300)
	}
	if a := advertised(msgs, "httpHeaderEnvVars"); a != "" {
		seen += "; " + a
	}
	if msgs != nil {
		answers := wireAnswers(msgs, "http/request")
		seen += fmt.Sprintf("; http/request sent %d time(s), answered %s", len(wireCalls(msgs, "http/request")), clip(strings.Join(answers, " | "), 600))
	}
	auth := stepResult{Name: "HTTP MCP server with bearer_token_env_var: every request carries the executor's token",
		OK: st.AuthOK > 0 && st.AuthBad == 0, Detail: seen}
	listed := stepResult{Name: "HTTP MCP server with bearer_token_env_var: its tool list reaches the model",
		OK: st.Listed && strings.Contains(bodies, mcpToolName), Detail: seen}
	if !listed.OK && st.Listed {
		listed.Detail = "tools/list was answered but the model requests lack " + mcpToolName + "; " + seen
	}
	out := []stepResult{auth, listed}
	if msgs != nil {
		r := stepResult{Name: "HTTP MCP server: the harness reached it through http/request"}
		n := 0
		for _, p := range wireCalls(msgs, "http/request") {
			if strings.Contains(string(p), mcpTokenEnv) {
				n++
			}
		}
		r.OK = n > 0
		r.Detail = fmt.Sprintf("%d http/request(s) name %s as a header's valueEnvVar; %s", n, mcpTokenEnv, advertised(msgs, "httpHeaderEnvVars"))
		out = append(out, r)
	}
	return out
}

// snapshotWireResult checks, where the wire is visible, that the command's process/start
// carried shellSnapshot.
func snapshotWireResult(msgs []wireMessage, visible bool) stepResult {
	r := stepResult{Name: "shell snapshot: process/start carries shellSnapshot"}
	if !visible {
		r.Skip, r.Detail = true, "the relay is encrypted; the local run checks the wire"
		return r
	}
	starts := wireCalls(msgs, "process/start")
	for _, p := range starts {
		var params struct {
			ShellSnapshot json.RawMessage `json:"shellSnapshot"`
		}
		json.Unmarshal(p, &params)
		if len(params.ShellSnapshot) > 0 && string(params.ShellSnapshot) != "null" {
			r.OK, r.Detail = true, string(params.ShellSnapshot)
			return r
		}
	}
	r.Detail = fmt.Sprintf("none of %d process/start requests carried shellSnapshot (the harness sends it only to an executor that advertises shellSnapshotV2; %s)",
		len(starts), advertised(msgs, "shellSnapshotV2"))
	return r
}
