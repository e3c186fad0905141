package main

// The validate step of the credentials check. The executor only sends validate
// (docs/remote.md §2.3) in the middle of a Noise handshake: after it has authenticated message
// 1 from a harness and before it writes message 2. So, once an executor holds its rendezvous
// socket, the real `codex app-server` is started as its harness and asked for the status of
// its remote environment. That makes the harness fetch a connect bundle from the credentials
// registry, dial the rendezvous and send message 1; the executor then validates the harness
// key with the registry, using the credential of the mode under test, and, answered valid,
// completes the handshake, which environment/status reports as ready.

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// credHandshake is the outcome of one harness handshake through an executor.
type credHandshake struct {
	ready  bool
	detail string // environment/status's answer, or why there is none
}

// handshakeThrough runs the real app-server as the Noise harness of environment credEnvID at
// reg until environment/status answers, and reports whether the environment became ready.
// With caPath set (the TLS mode) the app-server trusts the test CA as the reference executor
// does. Its files go to dir.
func handshakeThrough(ctx context.Context, cfg config, log *eventLog, dir, name string, reg *credRegistry, caPath string) credHandshake {
	fail := func(format string, args ...any) credHandshake {
		return credHandshake{detail: fmt.Sprintf(format, args...)}
	}
	// The loopback mock model keeps the app-server's model provider off the network.
	model, err := startMockModel(log)
	if err != nil {
		return fail("start mock model: %v", err)
	}
	defer model.Close()
	home := filepath.Join(dir, "harness-home")
	if err := codexHomeConfig(home, model.BaseURL(), modeFull); err != nil {
		return fail("write the harness CODEX_HOME: %v", err)
	}
	env := []string{
		"CODEX_HOME=" + home, "CODEX_API_KEY=sk-unused", "RUST_LOG=info",
		"CODEX_EXEC_SERVER_NOISE_REGISTRY_URL=" + reg.url,
		"CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID=" + credEnvID,
		"CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN=" + credHarnessToken,
	}
	if caPath != "" {
		env = append(env, "SSL_CERT_FILE="+caPath, "CODEX_CA_CERTIFICATE="+caPath)
	}
	logPath := filepath.Join(dir, "app-server.log")
	app, err := startAppServer(log, name+" app", cfg.codex, env, logPath)
	if err != nil {
		return fail("start app-server: %v", err)
	}
	defer app.Close()

	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = app.initialize(c)
	cancel()
	if err != nil {
		return fail("app-server initialize: %v (see %s)", err, logPath)
	}
	c, cancel = context.WithTimeout(ctx, 60*time.Second)
	res, err := app.Call(c, "environment/status", map[string]string{"environmentId": harnessEnvID})
	cancel()
	if err != nil {
		return fail("environment/status: %v (see %s)", err, logPath)
	}
	if !jsonHas(res, "status", "ready") {
		return fail("environment/status is not ready: %s (see %s)", clip(string(res), 300), logPath)
	}
	return credHandshake{ready: true, detail: string(res)}
}

// splitValidates separates the executor's validate requests from its others.
func splitValidates(reqs []recordedRequest) (validates, others []recordedRequest) {
	for _, r := range reqs {
		if r.Method == "POST" && strings.HasSuffix(strings.SplitN(r.Path, "?", 2)[0], "/validate") {
			validates = append(validates, r)
		} else {
			others = append(others, r)
		}
	}
	return validates, others
}

// validateResults are the two validate steps of a Noise mode: the harness handshake
// completed through each executor (which needs the registry to have answered the executor's
// validate valid), and the executor's validate request is the reference's. Where the
// reference itself did not get that far the step is SKIP with the reason, never PASS.
func validateResults(name string, ref, ours *credRun) []stepResult {
	hs := stepResult{Name: name + ": validate: a harness handshake through the executor completes (environment/status ready)"}
	cmp := stepResult{Name: name + ": validate: the request (headers and body, masked) is the reference's"}
	refV, _ := splitValidates(ref.reqs)
	oursV, _ := splitValidates(ours.reqs)
	describe := func(who string, r *credRun, validates []recordedRequest) string {
		s := fmt.Sprintf("%s: %s; validates sent %d", who, r.handshake.detail, len(validates))
		if len(r.validateProblems) > 0 {
			s += "; registry found: " + strings.Join(r.validateProblems, "; ")
		}
		if len(r.harness) > 0 {
			s += "; harness requests: " + strings.Join(r.harness, ", ")
		} else {
			s += "; the harness sent no request"
		}
		return s
	}
	switch {
	case !ref.upgraded || !ours.upgraded:
		// The first step of the mode already says which executor did not get there.
		hs.Skip, cmp.Skip = !ref.upgraded, !ref.upgraded
		hs.Detail = "not driven: an executor did not reach its rendezvous upgrade"
		cmp.Detail = hs.Detail
		return []stepResult{hs, cmp}
	case !ref.handshake.ready:
		hs.Skip = true
		hs.Detail = "the reference itself did not complete the handshake; " + describe("reference", ref, refV) + "\n" + describe("ours", ours, oursV)
	case !ours.handshake.ready:
		hs.Detail = describe("ours", ours, oursV) + "\n" + describe("reference", ref, refV)
	default:
		hs.OK = true
	}
	switch {
	case len(refV) == 0:
		cmp.Skip = true
		cmp.Detail = "the reference sent no validate; " + describe("reference", ref, refV)
		if len(oursV) > 0 {
			cmp.Detail += "\nours sent " + fmt.Sprint(len(oursV))
		}
	default:
		d := compareRecorded(refV, oursV)
		cmp.OK, cmp.Detail = d == "", d
	}
	return []stepResult{hs, cmp}
}

// streamIDPattern is the form of the stream ids 0.169's harness chooses (a UUID); only their
// randomness is masked, so that another form stays visible.
var streamIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// maskStreamID masks an X-Codex-Noise-Stream-Id of the harness's form.
func maskStreamID(v string) string {
	if streamIDPattern.MatchString(v) {
		return "<uuid>"
	}
	return v
}
