package main

// Forward mode (docs/remote.md §11): `exec-server forward` registers with the loopback registry
// and holds the rendezvous socket like a remote executor, but bridges each relay stream to a
// websocket of its own to an exec-server listening on loopback. The target sits behind the
// logging proxy, so these checks see in clear text what the harness asks through the relay,
// and the exact upgrade request each forward sends its target.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// forwardCheck is one forward check: whose forward runs, and whose exec-server it forwards to.
type forwardCheck struct {
	name    string // the -checks name
	forward string // "ours" or "ref": whose `exec-server forward`
	target  string // "ours" or "ref": whose `exec-server --listen`
	token   bool   // the target requires a capability token, given to forward with --connect-token-file
}

// forwardChecks are run in this order. forward-ref and forward-control share the target, so
// their upgrades compare the two forwards alone.
var forwardChecks = []forwardCheck{
	{name: "forward-ref", forward: "ours", target: "ref"},
	{name: "forward-ours", forward: "ours", target: "ours", token: true},
	{name: "forward-control", forward: "ref", target: "ref"},
}

// forwardRun is what one forward check leaves for the upgrade comparison.
type forwardRun struct {
	results  []stepResult
	skipped  string   // why the whole check was skipped, or ""
	heads    [][]byte // the forward's upgrade requests to the target, as the proxy received them
	msgTypes string   // the websocket message types used each way (msgTypes)
}

// forwardCommand returns the binary and leading arguments of `exec-server forward`.
func forwardCommand(cfg config, who string) (string, []string) {
	if who == "ref" {
		return cfg.codex, []string{"exec-server", "forward"}
	}
	return cfg.ours, []string{"forward"}
}

// startForward starts whose forward against registry url and target connect, with the
// registry bearer on stdin and extra arguments appended.
func startForward(cfg config, who, regURL, connect, home, workdir, logPath string, extra ...string) (*child, error) {
	bin, args := forwardCommand(cfg, who)
	args = append(args, "--remote", regURL, "--environment-id", remoteEnvID, "--connect", connect, "--registration-bearer-stdin")
	args = append(args, extra...)
	env := []string{"CODEX_HOME=" + home}
	if who == "ours" {
		args = append(args, "--log-level", "debug")
	} else {
		env = append(env, "RUST_LOG=codex_exec_server=debug,info")
	}
	c, _, err := startChild("forward/"+who, bin, args, env, workdir, executorBearer+"\n", logPath, false)
	return c, err
}

// runForward starts the target exec-server, the proxy in front of it, the registry, and the
// forward, then runs the remote scenario through them.
func runForward(ctx context.Context, cfg config, log *eventLog, m modeRun, fc forwardCheck) *forwardRun {
	fr := &forwardRun{}
	fail := func(name string, err error) *forwardRun {
		fr.results = append(fr.results, stepResult{Name: name, Detail: err.Error()})
		return fr
	}
	dir := filepath.Join(m.dir, fc.name)
	workdir := filepath.Join(dir, "work")
	targetHome := filepath.Join(dir, "exec-home")
	forwardHome := filepath.Join(dir, "forward-home")
	for _, d := range []string{workdir, targetHome, forwardHome} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fail("setup", err)
		}
	}
	log.Printf("==== %s (forward %s -> exec-server %s), sandbox mode %s", fc.name, fc.forward, fc.target, m.mode)

	bin, args := execServerCommand(cfg, fc.target)
	args = append(args, "--listen", "ws://127.0.0.1:0")
	if fc.target == "ours" {
		args = append(args, "--log-level", "debug")
	}
	var tokenFile string
	if fc.token {
		tokenFile = filepath.Join(dir, "connect-token")
		if err := os.WriteFile(tokenFile, []byte("realcodex-connect-"+randomHex(16)+"\n"), 0o600); err != nil {
			return fail("setup", err)
		}
		args = append(args, "--ws-auth", "capability-token", "--ws-token-file", tokenFile)
	}
	targetLog := filepath.Join(dir, "exec-server.log")
	srv, targetURL, err := startChild("exec-server/"+fc.target, bin, args,
		[]string{"CODEX_HOME=" + targetHome}, workdir, "", targetLog, true)
	if err != nil {
		return fail("start the target exec-server", err)
	}
	defer srv.Stop()
	proxy, err := startWSProxy(log, fc.name, targetURL, "Authorization")
	if err != nil {
		return fail("start proxy", err)
	}
	defer proxy.Close()
	defer func() {
		fr.heads = proxy.Heads()
		fr.msgTypes = msgTypes(proxy.Messages())
		writeWire(filepath.Join(dir, "wire.jsonl"), proxy.Messages())
	}()
	log.Printf("%s: exec-server at %s, proxy at %s", fc.name, targetURL, proxy.URL())

	reg, err := startTestRegistry(log, remoteEnvID, executorBearer, harnessBearer)
	if err != nil {
		return fail("start registry", err)
	}
	defer reg.Close()
	var extra []string
	if fc.token {
		extra = append(extra, "--connect-token-file", tokenFile)
	}
	forwardLog := filepath.Join(dir, "forward.log")
	fwd, err := startForward(cfg, fc.forward, reg.url, proxy.URL(), forwardHome, workdir, forwardLog, extra...)
	if err != nil {
		return fail("start forward", err)
	}
	defer fwd.Stop()
	up := reg.WaitExecutor(30 * time.Second)
	if !up && fc.forward == "ref" {
		// The control only shows what the reference does; if its forward cannot even come up
		// here, that is a limit of this setup, not a finding.
		b, _ := os.ReadFile(forwardLog)
		fr.skipped = "the reference's forward never reached the rendezvous: " + logTail(string(b))
		fr.results = append(fr.results, stepResult{Name: "forward connects to the rendezvous", Skip: true, Detail: fr.skipped})
		return fr
	}
	fr.results = append(fr.results, registerResult(reg.Stats()))
	if !up {
		return fail("forward connects to the rendezvous", fmt.Errorf("no executor socket within 30s; see %s", forwardLog))
	}
	fr.results = append(fr.results, stepResult{Name: "forward connects to the rendezvous", OK: true})

	targetDrops := 0 // target websockets the last break dropped: each stream must be reset
	fr.results = append(fr.results, runHarness(ctx, cfg, log, m.mode, dir, workdir, m.label(fc.name), []string{
		"CODEX_EXEC_SERVER_NOISE_REGISTRY_URL=" + reg.url,
		"CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID=" + remoteEnvID,
		"CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN=" + harnessBearer,
	}, func(s *scenario) {
		s.reference = fc.target == "ref"
		s.wire = proxy.Messages // the proxy sees the forward's side of the relay in clear text
		s.breaks = []func() string{
			func() string {
				reg.DropHarnessSockets()
				return "the rendezvous dropped the harness socket"
			},
			func() string {
				reg.DropExecutorSocket()
				return "the rendezvous dropped the executor socket"
			},
			func() string {
				targetDrops += proxy.DropAll()
				return "the target websocket dropped"
			},
		}
	})...)
	st := reg.Stats()
	fr.results = append(fr.results, relayResults(st, targetDrops)...)
	fr.results = append(fr.results, headerResult(st, cfg.version))
	fr.results = append(fr.results, upgradeCountResult(proxy.Heads(), st))
	if fc.token {
		fr.results = append(fr.results, tokenResult(proxy.Heads(), tokenFile))
	}
	if fwd.Exited() {
		fr.results = append(fr.results, stepResult{Name: "forward still running after the scenario", Detail: "exited; see " + forwardLog})
	}
	if srv.Exited() {
		fr.results = append(fr.results, stepResult{Name: "target exec-server still running after the scenario", Detail: "exited; see " + targetLog})
	}
	if fc.token {
		fr.results = append(fr.results, wrongTokenResults(ctx, cfg, log, dir, fc.forward, targetURL, workdir)...)
	}
	return fr
}

// upgradeCountResult checks that the forward dialled the target once for each stream the
// harness opened (a handshake through the rendezvous): each stream gets a websocket of its
// own (docs/remote.md §11), and after each break the harness opens a new one.
func upgradeCountResult(heads [][]byte, st registryStats) stepResult {
	r := stepResult{Name: "forward dialled the target once for each harness stream, including those after each break"}
	streams := st.FramesToExecutor["handshake"]
	r.Detail = fmt.Sprintf("%d upgrades to the target, %d streams opened by the harness", len(heads), streams)
	r.OK = streams > 1 && len(heads) == streams
	return r
}

// tokenResult checks that every upgrade the forward sent carried the token file's content as a
// bearer, trimmed.
func tokenResult(heads [][]byte, tokenFile string) stepResult {
	r := stepResult{Name: "--connect-token-file: every upgrade carries Authorization: Bearer <the file's token>"}
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		r.Detail = err.Error()
		return r
	}
	want := "Bearer " + strings.TrimSpace(string(b))
	var bad []string
	for i, h := range heads {
		if got := headValue(h, "Authorization"); got != want {
			bad = append(bad, fmt.Sprintf("upgrade %d: Authorization %q", i+1, got))
		}
	}
	r.OK = len(heads) > 0 && len(bad) == 0
	r.Detail = fmt.Sprintf("%d upgrades", len(heads))
	if len(bad) > 0 {
		r.Detail += "; " + strings.Join(bad, "; ")
	}
	return r
}

// headValue returns the first value of header name in a raw request head, or "".
func headValue(head []byte, name string) string {
	for _, l := range headLines(head)[1:] {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.EqualFold(k, name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// headLines splits a request head into its lines, without the final blank one.
func headLines(head []byte) []string {
	lines := strings.Split(string(bytes.TrimRight(head, "\r\n")), "\r\n")
	if len(lines) == 0 {
		return []string{""}
	}
	return lines
}

// wrongTokenResults runs a second forward of whose with a token the target does not accept,
// against a registry of its own, and has a harness connect through it. The forward must refuse
// the stream promptly (reset it, and log the target's 401), not leave the harness waiting, and
// stay up for later streams.
func wrongTokenResults(ctx context.Context, cfg config, log *eventLog, parent, who, targetURL, workdir string) []stepResult {
	name := "wrong --connect-token-file"
	var out []stepResult
	fail := func(step string, err error) []stepResult {
		return append(out, stepResult{Name: name + ": " + step, Detail: err.Error()})
	}
	dir := filepath.Join(parent, "wrong-token")
	home := filepath.Join(dir, "forward-home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fail("setup", err)
	}
	log.Printf("==== %s: forward/%s with a token the target refuses", name, who)
	wrong := filepath.Join(dir, "wrong-token")
	if err := os.WriteFile(wrong, []byte("realcodex-wrong-"+randomHex(16)+"\n"), 0o600); err != nil {
		return fail("setup", err)
	}
	reg, err := startTestRegistry(log, remoteEnvID, executorBearer, harnessBearer)
	if err != nil {
		return fail("start registry", err)
	}
	defer reg.Close()
	logPath := filepath.Join(dir, "forward.log")
	fwd, err := startForward(cfg, who, reg.url, targetURL, home, workdir, logPath, "--connect-token-file", wrong)
	if err != nil {
		return fail("start forward", err)
	}
	defer fwd.Stop()
	if !reg.WaitExecutor(30 * time.Second) {
		return fail("forward connects to the rendezvous", fmt.Errorf("no executor socket within 30s; see %s", logPath))
	}
	appHome := filepath.Join(dir, "codex-home")
	// No turn runs, so the model provider is never called: a closed port will do.
	if err := codexHomeConfig(appHome, "http://127.0.0.1:9/v1", modeFull); err != nil {
		return fail("write CODEX_HOME", err)
	}
	app, err := startAppServer(log, name+" app", cfg.codex, []string{
		"CODEX_HOME=" + appHome, "CODEX_API_KEY=sk-unused", "RUST_LOG=info",
		"CODEX_EXEC_SERVER_NOISE_REGISTRY_URL=" + reg.url,
		"CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID=" + remoteEnvID,
		"CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN=" + harnessBearer,
	}, filepath.Join(dir, "app-server.log"))
	if err != nil {
		return fail("start app-server", err)
	}
	defer app.Close()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := app.initialize(c); err != nil {
		return fail("app-server initialize", err)
	}
	start := time.Now()
	c2, cancel2 := context.WithTimeout(ctx, 60*time.Second)
	defer cancel2()
	res, err := app.Call(c2, "environment/status", map[string]string{"environmentId": harnessEnvID})
	took := time.Since(start).Round(100 * time.Millisecond)
	answer := clip(string(res), 300)
	if err != nil {
		answer = err.Error()
	}
	// An error answer is as clear as a status that is not ready; only no answer is a hang.
	answered := err == nil || c2.Err() == nil
	out = append(out, stepResult{Name: name + ": the harness gets an answer, and the environment is not ready",
		OK:     answered && !jsonHas(res, "status", "ready"),
		Detail: fmt.Sprintf("environment/status after %v: %s", took, answer)})

	st := reg.Stats()
	var resets []string
	for _, x := range st.Resets {
		if strings.HasPrefix(x, "executor->") {
			resets = append(resets, x)
		}
	}
	out = append(out, stepResult{Name: name + ": forward resets the stream",
		OK: len(resets) > 0, Detail: fmt.Sprintf("executor resets %v; handshakes to the executor %d", resets, st.FramesToExecutor["handshake"])})
	b, _ := os.ReadFile(logPath)
	refused := regexp.MustCompile(`upgrade refused: 401`).Find(b)
	out = append(out, stepResult{Name: name + ": forward logs the target's refusal (401)",
		OK: refused != nil, Detail: "see " + logPath + ": " + logTail(grepLines(string(b), "forward"))})
	if fwd.Exited() {
		out = append(out, stepResult{Name: name + ": forward still running (later streams dial again)", Detail: "exited; see " + logPath})
	} else {
		out = append(out, stepResult{Name: name + ": forward still running (later streams dial again)", OK: true})
	}
	return out
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// hostPortPattern matches a loopback host:port, whose port is the run's.
var hostPortPattern = regexp.MustCompile(`(127\.0\.0\.1|localhost|\[::1\]):\d+`)

// maskHead renders an upgrade request head as lines, in the client's order and spelling, with
// the parts that differ by run replaced: the Sec-WebSocket-Key value and every loopback port.
func maskHead(head []byte) []string {
	lines := headLines(head)
	out := make([]string, 0, len(lines))
	for i, l := range lines {
		l = hostPortPattern.ReplaceAllString(l, "$1:<port>")
		if k, _, ok := strings.Cut(l, ":"); ok && i > 0 && strings.EqualFold(k, "Sec-WebSocket-Key") {
			l = k + ": <random>"
		}
		out = append(out, l)
	}
	return out
}

// compareUpgrades compares our forward's side of the target connection with the reference
// forward's: both reach the reference exec-server through the proxy, so every difference is
// the forward's. The first upgrade of each is compared (every later one must be the same as
// its first after masking), and so are the websocket message types each sends.
//
// HTTP field names are case-insensitive and the order of different fields carries no meaning
// (RFC 9110 §5.1, §5.3), and every exec-server accepts text and binary messages alike
// (docs/protocol.md §1); still, ours writes the upgrade and the messages exactly as 0.169's
// forward does (docs/remote.md §3, §11), so any difference fails, and the field check says
// whether it is more than spelling and order.
func compareUpgrades(ours, ref *forwardRun) []stepResult {
	const name = "connect upgrade: the reference forward's request line, header fields and values (names case-insensitive; key and ports masked)"
	switch {
	case ours == nil || ref == nil:
		return []stepResult{{Name: name, Skip: true, Detail: "needs forward-ref and forward-control"}}
	case ref.skipped != "":
		return []stepResult{{Name: name, Skip: true, Detail: "forward-control was skipped: " + ref.skipped}}
	case len(ours.heads) == 0 || len(ref.heads) == 0:
		return []stepResult{{Name: name, Detail: fmt.Sprintf("upgrades recorded: ours %d, reference %d", len(ours.heads), len(ref.heads))}}
	}
	var out []stepResult
	for _, side := range []struct {
		who   string
		heads [][]byte
	}{{"our", ours.heads}, {"the reference", ref.heads}} {
		r := stepResult{Name: fmt.Sprintf("connect upgrade: all %d of %s forward's are the same after masking", len(side.heads), side.who), OK: true}
		first := maskHead(side.heads[0])
		for i, h := range side.heads[1:] {
			if next := maskHead(h); strings.Join(next, "\n") != strings.Join(first, "\n") {
				r.OK = false
				r.Detail = fmt.Sprintf("upgrade %d differs from the first (- first, + it):\n%s", i+2, lineDiff(first, next))
				break
			}
		}
		out = append(out, r)
	}

	a, b := maskHead(ref.heads[0]), maskHead(ours.heads[0])
	both := "reference:\n  " + strings.Join(a, "\n  ") + "\nours:\n  " + strings.Join(b, "\n  ")
	fields := stepResult{Name: name, OK: true, Detail: both}
	if d := lineDiff(foldNames(a), foldNames(b)); d != "" {
		fields.OK = false
		fields.Detail = "(- reference, + ours; names lower-cased)\n" + d + "\n" + both
	}
	out = append(out, fields)

	exact := stepResult{Name: "connect upgrade: byte for byte the reference forward's (names' spelling, field order)", OK: true}
	if strings.Join(a, "\n") != strings.Join(b, "\n") && fields.OK {
		exact.OK = false
		exact.Detail = "the same fields, spelt or ordered differently (HTTP field names are case-insensitive; " +
			"the order of different fields carries no meaning):\n(- reference, + ours)\n" + lineDiff(a, b) + "\n" + both
		if lineDiff(a, b) == "" {
			exact.Detail = "the same lines in another order:\n" + both
		}
	} else if !fields.OK {
		exact.OK, exact.Detail = false, "the fields differ (above)"
	}
	out = append(out, exact)

	types := stepResult{Name: "messages to the target: the reference forward's websocket message types", OK: true,
		Detail: "reference " + ref.msgTypes + "; ours " + ours.msgTypes}
	if ref.msgTypes != ours.msgTypes {
		types.OK = false
	}
	return append(out, types)
}

// foldNames lower-cases the header names of masked head lines (not the request line), so
// that only field names and values are compared.
func foldNames(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		if k, v, ok := strings.Cut(l, ":"); ok && i > 0 {
			l = strings.ToLower(k) + ":" + v
		}
		out[i] = l
	}
	return out
}

// msgTypes summarises recorded traffic as the message types each direction used, e.g.
// "forward->target text, target->forward text" (the counts follow the output's timing).
func msgTypes(msgs []wireMessage) string {
	count := map[string]int{}
	for _, m := range msgs {
		dir := "forward->target"
		if m.Dir == "s2c" {
			dir = "target->forward"
		}
		kind := "text"
		if m.Binary {
			kind = "binary"
		}
		count[dir+" "+kind]++
	}
	var parts []string
	for _, k := range []string{"forward->target text", "forward->target binary", "target->forward text", "target->forward binary"} {
		if count[k] > 0 {
			parts = append(parts, k)
		}
	}
	return strings.Join(parts, ", ")
}
