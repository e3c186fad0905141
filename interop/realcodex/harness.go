package main

// The scenario every mode runs against the real `codex app-server`. 0.169 and 0.171 serve
// thread/shellCommand, command/exec, process/spawn and the app-server fs/* methods only from
// its *local* environment ("local environment is not configured" once CODEX_EXEC_SERVER_URL or
// the Noise variables are set), so the paths that reach the exec-server are environment/*,
// the thread start-up probes, and the agent's own tools. The scenario therefore starts a
// thread on the exec-server environment and runs one agent turn whose loopback mock model
// calls the shell tools.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// harnessEnvID is the environment id 0.169 and 0.171 assign to the exec-server it was pointed at, by
// CODEX_EXEC_SERVER_URL or by the CODEX_EXEC_SERVER_NOISE_* variables.
const harnessEnvID = "remote"

// codexHomeConfig writes a fresh CODEX_HOME whose only model provider is the loopback mock,
// so nothing a check does can reach the network or a real account. The thread's sandbox is
// mode; the mock's model metadata (modelCatalog) sits next to config.toml.
func codexHomeConfig(dir, modelBaseURL, mode string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	catalog := filepath.Join(dir, "realcodex-models.json")
	if err := os.WriteFile(catalog, modelCatalog(), 0o600); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`model = "realcodex-mock"
model_provider = "realcodex"
model_catalog_json = %q
approval_policy = "never"
sandbox_mode = %q
check_for_update_on_startup = false

[model_providers.realcodex]
name = "realcodex loopback mock"
base_url = %q
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false
`, catalog, mode, modelBaseURL)
	return os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600)
}

// stepResult is one PASS/FAIL/SKIP line.
type stepResult struct {
	Name   string
	OK     bool
	Skip   bool
	Detail string
}

// scenario holds what the steps need.
type scenario struct {
	app       *appServer
	log       *eventLog
	model     *mockModel // nil: no agent turn
	mode      string     // the thread's sandbox mode
	reference bool       // the exec-server is the reference (known differences become SKIP)
	workdir   string     // exists on the executor's host (the same host here)
	marker    string     // printed by the commands, searched for in their outputs
	extraURL  string     // if set, environment/add a second environment at this URL
	// wire, if set, returns the exec-server traffic so far (local runs: the proxy's log).
	wire func() []wireMessage
	// denialSteps names the steps whose command the exec-server must report with
	// sandboxDenied:true (denial); deniedCalls collects their call ids as they run.
	denialSteps map[string]bool
	deniedCalls []string
	// breaks each break a connection and say how; after each one another agent turn runs,
	// which only works if the harness reconnects and resumes its session.
	breaks []func() string
	// afterBreakTurn, if set, is called with the break's index once the turn after it ended.
	afterBreakTurn func(i int)
}

// agentStep is one tool call of the agent turn and what its output must show.
type agentStep struct {
	Name  string
	Call  toolCall
	Check func(out string) error
}

// refSkips maps a step name to why the reference itself fails that step: there the failure
// prints as SKIP with this reason. Ours stays strict. Empty while the reference (0.169 and 0.171
// on the reference host) passes every step.
var refSkips = map[string]string{}

var sessionIDPattern = regexp.MustCompile(`session ID (\d+)`)

// contains returns a check that out has every one of want.
func contains(want ...string) func(string) error {
	return func(out string) error {
		for _, w := range want {
			if !strings.Contains(out, w) {
				return fmt.Errorf("output lacks %q", w)
			}
		}
		return nil
	}
}

func execArgs(v map[string]any) func([]string) string {
	return func([]string) string { return jsonArgs(v) }
}

// agentSteps is the script of the first agent turn: pipes, stderr and exit status, a PTY
// session driven through write_stdin (process/write), view_image of a PNG larger than one
// relay record (fs/readFile), and a large output (several relay records).
func (s *scenario) agentSteps() []agentStep {
	m := s.marker
	sessionArgs := func(chars string, yield int) func([]string) string {
		return func(prev []string) string {
			id := "-1"
			for _, p := range prev {
				if g := sessionIDPattern.FindStringSubmatch(p); g != nil {
					id = g[1]
				}
			}
			n, _ := strconv.Atoi(id)
			return jsonArgs(map[string]any{"session_id": n, "chars": chars, "yield_time_ms": yield})
		}
	}
	return []agentStep{
		{"exec_command: stdout and cwd", toolCall{"exec_command", execArgs(map[string]any{"cmd": "echo " + m + "-1; pwd", "yield_time_ms": 10000})},
			contains(m+"-1", s.workdir, "exited with code 0")},
		{"exec_command: stderr and exit code 3", toolCall{"exec_command", execArgs(map[string]any{"cmd": "echo " + m + "-2 >&2; exit 3", "yield_time_ms": 10000})},
			contains(m+"-2", "exited with code 3")},
		{"exec_command: PTY session starts", toolCall{"exec_command", execArgs(map[string]any{"cmd": "cat", "tty": true, "yield_time_ms": 500})},
			contains("session ID")},
		{"write_stdin: PTY echoes input", toolCall{"write_stdin", sessionArgs(m+"-5\n", 1000)},
			contains(m + "-5")},
		{"write_stdin: Ctrl-D ends the PTY session", toolCall{"write_stdin", sessionArgs("\x04", 3000)},
			contains("exited with code 0")},
		{"view_image: 300 KB PNG read through the environment", toolCall{"view_image", execArgs(map[string]any{"path": filepath.Join(s.workdir, "probe.png")})},
			func(out string) error {
				if strings.Contains(out, "data:image/") {
					return nil
				}
				return fmt.Errorf("no image data in output")
			}},
		// Last: a server that cannot start a command with this much output before it is
		// read (the output fills the pipe) stalls the turn here, after the other steps ran.
		{"exec_command: 230 KB of output", toolCall{"exec_command", execArgs(map[string]any{"cmd": "seq 1 40000", "yield_time_ms": 10000})},
			contains("exited with code 0", "\n40000")},
	}
}

// resumeSteps is the script of a turn run after the harness's connection to the exec-server
// was broken: the harness must reconnect (resuming its session) to run the command.
func (s *scenario) resumeSteps(i int) []agentStep {
	m := fmt.Sprintf("%s-r%d", s.marker, i)
	return []agentStep{
		{"exec_command runs", toolCall{"exec_command", execArgs(map[string]any{"cmd": "echo " + m, "yield_time_ms": 10000})},
			contains(m, "exited with code 0")},
	}
}

// sandboxSteps is the script of a turn under workspace-write with /tmp and $TMPDIR excluded:
// the harness sends the sandbox with process/start and the exec-server must enforce it. A
// write inside the workspace works; a write to its parent directory must fail and leave
// nothing behind.
func (s *scenario) sandboxSteps() []agentStep {
	inside := s.marker + "-inside"
	outside := filepath.Join(filepath.Dir(s.workdir), s.marker+"-outside.txt")
	return []agentStep{
		{"write inside the workspace succeeds", toolCall{"exec_command", execArgs(map[string]any{"cmd": "echo " + inside + " > inside.txt && cat inside.txt", "yield_time_ms": 10000})},
			contains(inside, "exited with code 0")},
		{"write outside the workspace is denied", toolCall{"exec_command", execArgs(map[string]any{"cmd": "echo escaped > " + outside, "yield_time_ms": 10000})},
			func(out string) error {
				if _, err := os.Stat(outside); err == nil {
					os.Remove(outside)
					return fmt.Errorf("%s was written: the sandbox was not enforced", outside)
				}
				if strings.Contains(out, "exited with code 0") {
					return fmt.Errorf("the command succeeded")
				}
				return nil
			}},
	}
}

// writeProbePNG writes a noisy 300x300 RGBA PNG (about 350 KB: more than one 60 KiB relay
// record and more than the 256 KiB relay message cap, so it must be split into records).
func writeProbePNG(path string) error {
	img := image.NewRGBA(image.Rect(0, 0, 300, 300))
	x := uint32(2463534242)
	for i := 0; i < len(img.Pix); i += 4 {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = byte(x), byte(x>>8), byte(x>>16), 255
	}
	img.Set(0, 0, color.RGBA{255, 0, 0, 255})
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// run executes the steps in order. Steps that need an earlier step's result stop there.
func (s *scenario) run(ctx context.Context) []stepResult {
	var out []stepResult
	add := func(name string, err error, detail string) bool {
		r := stepResult{Name: name, OK: err == nil, Detail: detail}
		if err != nil {
			r.Detail = err.Error()
			if detail != "" {
				r.Detail += "; " + detail
			}
		}
		out = append(out, r)
		return err == nil
	}
	step := func(d time.Duration) (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, d) }

	var fx *sandboxFixture
	if s.mode != modeFull {
		var err error
		if fx, err = s.prepareSandbox(); err != nil {
			return append(out, stepResult{Name: "prepare the " + s.mode + " fixture", Detail: err.Error()})
		}
		defer fx.Close()
	}

	c, cancel := step(30 * time.Second)
	err := s.app.initialize(c)
	cancel()
	if !add("app-server initialize", err, "") {
		return out
	}

	c, cancel = step(60 * time.Second)
	res, err := s.app.Call(c, "environment/status", map[string]string{"environmentId": harnessEnvID})
	cancel()
	if err == nil && !jsonHas(res, "status", "ready") {
		err = fmt.Errorf("not ready")
	}
	add("environment/status is ready", err, string(res))

	c, cancel = step(30 * time.Second)
	res, err = s.app.Call(c, "environment/info", map[string]string{"environmentId": harnessEnvID})
	cancel()
	if err == nil {
		var info struct {
			Shell struct{ Name, Path string }
			Cwd   string
		}
		json.Unmarshal(res, &info)
		if info.Shell.Path == "" || info.Cwd != "file://"+s.workdir {
			err = fmt.Errorf("want a shell and cwd file://%s", s.workdir)
		}
	}
	add("environment/info has the executor's shell and cwd", err, string(res))

	if s.extraURL != "" {
		out = append(out, s.extraEnvironment(ctx)...)
	}

	c, cancel = step(60 * time.Second)
	res, err = s.app.Call(c, "thread/start", map[string]any{
		"cwd":            s.workdir,
		"environments":   []map[string]string{{"environmentId": harnessEnvID, "cwd": s.workdir}},
		"approvalPolicy": "never",
		"sandbox":        s.mode,
		"ephemeral":      true,
	})
	cancel()
	var thread struct {
		Thread struct{ ID string } `json:"thread"`
	}
	if err == nil {
		json.Unmarshal(res, &thread)
		if thread.Thread.ID == "" {
			err = fmt.Errorf("no thread id")
		}
	}
	if !add("thread/start on the exec-server environment", err, clip(string(res), 300)) || s.model == nil {
		return out
	}

	if err := writeProbePNG(filepath.Join(s.workdir, "probe.png")); err != nil {
		return append(out, stepResult{Name: "write probe.png", Detail: err.Error()})
	}
	policy := turnSandboxPolicy(s.mode)
	out = append(out, s.agentTurn(ctx, thread.Thread.ID, "agent turn", s.agentSteps(), policy)...)
	for i, brk := range s.breaks {
		note := brk()
		out = append(out, s.agentTurn(ctx, thread.Thread.ID, "agent turn after "+note, s.resumeSteps(i), policy)...)
		if s.afterBreakTurn != nil {
			s.afterBreakTurn(i)
		}
	}
	switch s.mode {
	case modeFull:
		// Last, because a turn's sandbox policy sticks to later turns.
		out = append(out, s.agentTurn(ctx, thread.Thread.ID, "workspace-write turn", s.sandboxSteps(), map[string]any{
			"type": "workspaceWrite", "excludeSlashTmp": true, "excludeTmpdirEnvVar": true, "networkAccess": false,
		})...)
	case modeWrite:
		out = append(out, s.agentTurn(ctx, thread.Thread.ID, "workspace-write checks", s.workspaceWriteSteps(fx), policy)...)
		out = append(out, s.sandboxDeniedResult("workspace-write checks"))
		out = append(out, s.leftoverResult("workspace-write checks", fx))
	case modeRead:
		out = append(out, s.agentTurn(ctx, thread.Thread.ID, "read-only checks", s.readOnlySteps(fx), policy)...)
		out = append(out, s.sandboxDeniedResult("read-only checks"))
		out = append(out, s.leftoverResult("read-only checks", fx))
	}
	return out
}

// extraEnvironment adds a second environment through environment/add (a second websocket
// from the harness) and reads its status and info.
func (s *scenario) extraEnvironment(ctx context.Context) []stepResult {
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := s.app.Call(c, "environment/add", map[string]any{"environmentId": "extra", "execServerUrl": s.extraURL})
	if err != nil {
		return []stepResult{{Name: "environment/add of a second exec-server connection", Detail: err.Error()}}
	}
	res, err := s.app.Call(c, "environment/info", map[string]string{"environmentId": "extra"})
	if err == nil && !strings.Contains(string(res), `"shell"`) {
		err = fmt.Errorf("no shell")
	}
	r := stepResult{Name: "environment/add then environment/info on the added environment", OK: err == nil, Detail: string(res)}
	if err != nil {
		r.Detail = err.Error()
	}
	return []stepResult{r}
}

// agentTurn runs one turn with the given script (and sandbox policy override, if not nil) and
// checks each tool output.
func (s *scenario) agentTurn(ctx context.Context, threadID, name string, steps []agentStep, sandboxPolicy any) []stepResult {
	var script []toolCall
	for _, st := range steps {
		script = append(script, st.Call)
	}
	s.model.SetScript(script)
	c, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	before := len(s.app.Notes())
	params := map[string]any{
		"threadId": threadID,
		"input":    []any{map[string]any{"type": "text", "text": "run the scripted commands"}},
	}
	if sandboxPolicy != nil {
		params["sandboxPolicy"] = sandboxPolicy
	}
	if _, err := s.app.Call(c, "turn/start", params); err != nil {
		return []stepResult{{Name: name + ": turn/start", Detail: err.Error()}}
	}
	seen := 0
	done, err := s.app.WaitNote(c, func(m rpcMessage) bool {
		seen++
		return seen > before && m.Method == "turn/completed"
	})
	requests, tools, outputs := s.model.Result()
	var out []stepResult
	if err != nil {
		out = append(out, stepResult{Name: name + ": turn completes", Detail: fmt.Sprintf("%v; model requests %d, tools offered %v", err, requests, tools)})
	} else {
		r := stepResult{Name: name + ": turn completes", OK: jsonHas(done.Params, "status", "completed")}
		r.Detail = clip(string(done.Params), 500)
		out = append(out, r)
	}
	for i, st := range steps {
		if s.denialSteps[st.Name] {
			s.deniedCalls = append(s.deniedCalls, s.model.CallID(i))
		}
		r := stepResult{Name: name + ": " + st.Name}
		if i >= len(outputs) {
			r.Detail = "the tool call never produced an output"
		} else if err := st.Check(outputs[i]); err != nil {
			r.Detail = err.Error() + ": " + clip(outputs[i], 700)
			var skip skipStep
			if errors.As(err, &skip) {
				r.Skip, r.Detail = true, skip.Error()
			}
		} else {
			r.OK = true
		}
		if why := refSkips[st.Name]; !r.OK && s.reference && why != "" {
			r.Skip = true
			r.Detail = "the reference differs here (" + why + "): " + r.Detail
		}
		out = append(out, r)
	}
	return out
}

// jsonHas reports whether a JSON object (or its "turn" member) has key == want.
func jsonHas(raw []byte, key, want string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	var v string
	if json.Unmarshal(m[key], &v) == nil && v == want {
		return true
	}
	if t, ok := m["turn"]; ok {
		return jsonHas(t, key, want)
	}
	return false
}
