package main

// Remote mode (docs/remote.md §1): executor (ours, or the reference as a control) registers with
// the loopback registry and holds the rendezvous socket; the real app-server gets a connect
// bundle, dials the rendezvous as the Noise initiator and runs the scenario over the relay.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

const (
	remoteEnvID    = "env-test-1"
	executorBearer = "realcodex-executor-token"
	harnessBearer  = "realcodex-harness-token"
)

func runRemote(ctx context.Context, cfg config, log *eventLog, m modeRun, target string) []stepResult {
	var out []stepResult
	fail := func(name string, err error) []stepResult {
		return append(out, stepResult{Name: name, Detail: err.Error()})
	}
	dir := filepath.Join(m.dir, "remote-"+target)
	workdir := filepath.Join(dir, "work")
	home := filepath.Join(dir, "exec-home")
	for _, d := range []string{workdir, home} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fail("setup", err)
		}
	}
	log.Printf("==== remote/%s, sandbox mode %s", target, m.mode)
	reg, err := startTestRegistry(log, remoteEnvID, executorBearer, harnessBearer)
	if err != nil {
		return fail("start registry", err)
	}
	defer reg.Close()

	bin, args := execServerCommand(cfg, target)
	args = append(args, "--remote", reg.url, "--environment-id", remoteEnvID, "--registration-bearer-stdin")
	env := []string{"CODEX_HOME=" + home}
	if target == "ours" {
		args = append(args, "--log-level", "debug")
	} else {
		env = append(env, "RUST_LOG=codex_exec_server=debug,info")
	}
	logPath := filepath.Join(dir, "executor.log")
	exe, _, err := startChild("executor/"+target, bin, args, env, workdir, executorBearer+"\n", logPath, false)
	if err != nil {
		return fail("start executor", err)
	}
	defer exe.Stop()
	up := reg.WaitExecutor(30 * time.Second)
	st := reg.Stats()
	out = append(out, registerResult(st))
	if !up {
		return append(out, stepResult{Name: "executor connects to the rendezvous", Detail: "no executor socket within 30s; see " + logPath})
	}
	out = append(out, stepResult{Name: "executor connects to the rendezvous", OK: true})

	out = append(out, runHarness(ctx, cfg, log, m.mode, dir, workdir, m.label("remote/"+target), []string{
		"CODEX_EXEC_SERVER_NOISE_REGISTRY_URL=" + reg.url,
		"CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID=" + remoteEnvID,
		"CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN=" + harnessBearer,
	}, func(s *scenario) {
		s.reference = target == "ref"
		s.breaks = []func() string{
			func() string {
				reg.DropHarnessSockets()
				return "the rendezvous dropped the harness socket"
			},
			func() string {
				reg.DropExecutorSocket()
				return "the rendezvous dropped the executor socket"
			},
		}
	})...)
	out = append(out, relayResults(reg.Stats(), 0)...)
	out = append(out, headerResult(reg.Stats(), cfg.version))
	if exe.Exited() {
		out = append(out, stepResult{Name: "executor still running after the scenario", Detail: "exited; see " + logPath})
	}
	return out
}

// registerResult checks the register body: exactly security_profile and executor_public_key,
// and a public key with the suite label and correctly sized keys (docs/remote.md §2.2, §5.2).
func registerResult(st registryStats) stepResult {
	r := stepResult{Name: "register body matches docs/remote.md §2.2"}
	if st.Registers == 0 {
		r.Detail = "no register call"
		return r
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(st.RegisterBody, &body); err != nil {
		r.Detail = err.Error()
		return r
	}
	var keys []string
	for k := range body {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var key struct {
		Suite  string `json:"suite"`
		X25519 []byte `json:"x25519_public_key"`
		MLKEM  []byte `json:"mlkem768_public_key"`
	}
	err := json.Unmarshal(body["executor_public_key"], &key)
	switch {
	case strings.Join(keys, ",") != "executor_public_key,security_profile":
		r.Detail = fmt.Sprintf("body keys %v", keys)
	case err != nil:
		r.Detail = "executor_public_key: " + err.Error()
	case key.Suite != noiseSuiteLabel || len(key.X25519) != 32 || len(key.MLKEM) != 1184:
		r.Detail = fmt.Sprintf("suite %q, x25519 %d bytes, mlkem768 %d bytes", key.Suite, len(key.X25519), len(key.MLKEM))
	default:
		r.OK = true
	}
	return r
}

// relayResults asserts on what the rendezvous saw. The executor must reset exactly
// wantResets streams: none for an executor serving them itself, and for a forward one for each
// target websocket that was dropped under it (docs/remote.md §11).
func relayResults(st registryStats, wantResets int) []stepResult {
	counts := fmt.Sprintf("harness->executor %v, executor->harness %v, resets %v, validates %d ok %d, problems %v",
		st.FramesToExecutor, st.FramesToHarness, st.Resets, st.Validates, st.ValidatesOK, st.ValidateProblems)
	var executorResets []string
	for _, r := range st.Resets {
		if strings.HasPrefix(r, "executor->") {
			executorResets = append(executorResets, r)
		}
	}
	return []stepResult{
		{Name: "harness fetched a connect bundle", OK: st.Connects > 0, Detail: fmt.Sprintf("connects %d", st.Connects)},
		{Name: "executor validated the harness key with the registry", OK: st.Validates > 0 && st.ValidatesOK == st.Validates, Detail: counts},
		{Name: "Noise handshake completed (msg2 and data in both directions)",
			OK: st.FramesToHarness["handshake"] > 0 && st.FramesToHarness["data"] > 0 && st.FramesToExecutor["data"] > 0, Detail: counts},
		resetResult(executorResets, wantResets, counts),
		{Name: "executor frames follow the reference (version 1, no acks, seq 0,1,2… per stream, one segment, ≤ 60 KiB records, 3424-byte msg2)",
			OK: len(st.FrameProblems) == 0, Detail: strings.Join(append(st.FrameProblems, fmt.Sprintf("largest data record %d bytes", st.MaxDataPayload)), "\n")},
	}
}

// resetResult checks the executor's resets (each "executor->harness STREAM REASON"): they
// must end exactly want streams, each with the reason 0.169 gives every reset it sends
// (noise_relay_protocol_error). Streams, not frames, are counted: harness frames already in
// flight on a stream the executor reset are each answered with another reset (data for an
// unknown stream, docs/remote.md §4), and how many there are is a matter of timing.
func resetResult(resets []string, want int, counts string) stepResult {
	r := stepResult{Name: "executor sent no reset", Detail: counts}
	if want > 0 {
		r.Name = fmt.Sprintf("forward reset the %d stream(s) whose target websocket dropped, and no other (noise_relay_protocol_error)", want)
	}
	streams := map[string]bool{}
	r.OK = true
	for _, x := range resets {
		f := strings.Fields(x)
		if len(f) != 3 || f[2] != "noise_relay_protocol_error" {
			r.OK = false
			continue
		}
		streams[f[1]] = true
	}
	r.OK = r.OK && len(streams) == want
	return r
}

// executorHeaders are the header names the reference executor sends (docs/remote.md §2.1, §3),
// per reference version, as Go's server canonicalises them. 0.171 added Accept-Encoding to
// register and validate (its HTTP client now asks for compressed answers).
var executorHeaders = map[string]map[string]string{
	"0.169.0": {
		"register":            "Accept,Authorization,Content-Length,Content-Type",
		"validate":            "Accept,Authorization,Content-Length,Content-Type,X-Codex-Noise-Stream-Id",
		"upgrade-environment": "Connection,Sec-Websocket-Key,Sec-Websocket-Version,Upgrade,X-Request-Id",
	},
	"0.171.0": {
		"register":            "Accept,Accept-Encoding,Authorization,Content-Length,Content-Type",
		"validate":            "Accept,Accept-Encoding,Authorization,Content-Length,Content-Type,X-Codex-Noise-Stream-Id",
		"upgrade-environment": "Connection,Sec-Websocket-Key,Sec-Websocket-Version,Upgrade,X-Request-Id",
	},
}

var requestIDPattern = regexp.MustCompile(`^req_[0-9a-f]{32}$`)

// headerResult compares the executor's request headers with those of the reference version,
// name by name. Extra headers are harmless to a registry but are a visible difference on the
// wire.
func headerResult(st registryStats, version string) stepResult {
	r := stepResult{Name: "executor's registry and rendezvous request headers are exactly " + version + "'s"}
	want, ok := executorHeaders[version]
	if !ok {
		r.Detail = "no header list for reference version " + version
		return r
	}
	var bad []string
	for _, kind := range []string{"register", "validate", "upgrade-environment"} {
		got := strings.Join(st.Headers[kind], ",")
		if got != want[kind] {
			bad = append(bad, fmt.Sprintf("%s: got [%s], %s sends [%s]", kind, got, version, want[kind]))
		}
	}
	if !requestIDPattern.MatchString(st.RequestID) {
		bad = append(bad, fmt.Sprintf("X-Request-Id %q is not req_<32 hex>", st.RequestID))
	}
	r.OK = len(bad) == 0
	r.Detail = strings.Join(bad, "\n")
	return r
}
