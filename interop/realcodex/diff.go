package main

// Diff of the local runs: the real harness did the same scenario against the reference
// exec-server and against ours, through the logging proxy. Both transcripts are normalised
// (run directories, UUIDs, process ids, the random marker, output chunking) and compared:
//
//   - requests: the multiset of (method, params) the harness sent. A difference means our
//     answers made the harness behave differently.
//   - responses: for each request present in both, result vs error, error code and message,
//     and the result's JSON (keys, types and values).
//   - process notifications: per command, the output bytes per stream, exit code and the
//     notification sequence.
//
// Differences listed in expectedDiffs are reported but do not fail the check. The normalised
// transcripts are written next to the logs so they can be diffed by hand.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// expectedDiffs are diff paths whose values legitimately differ between the two servers,
// with the reason. Every other difference fails the check (the request counts of
// initialize/initialized, sandboxType, process/write status, fs data and exit codes must match).
var expectedDiffs = map[string]string{
	"initialize.result.environmentInfo.providerId":      "opaque per-build identity",
	"environment/info.result.providerId":                "opaque per-build identity",
	"initialize.result.environmentInfo.prependPathDirs": "the reference bundles codex-path/rg next to its binary",
	"environment/info.result.prependPathDirs":           "the reference bundles codex-path/rg next to its binary",
	"initialize.result.environmentInfo.capabilities.*":  "capability flags follow what each server implements",
	"environment/info.result.capabilities.*":            "capability flags follow what each server implements",
	"environmentConfig/read.result.codexHomeDir":        "each server runs with its own CODEX_HOME",
	"process/terminate.result.running":                  "race: whether the process had already exited",
	"fs/getMetadata.result.modifiedAtMs":                "file times",
	"fs/getMetadata.result.createdAtMs":                 "file times",
	"request-count:fs/getMetadata":                      "the harness repeats its .git/AGENTS.md probes a timing-dependent number of times",
	"process-notes:process/output":                      "how output is cut into notifications, and its order against exited, depend on timing",
}

// normaliser rewrites run-specific strings.
type normaliser struct {
	repl []struct {
		re  *regexp.Regexp
		out string
	}
}

func newNormaliser(runDir, codexPackage string) *normaliser {
	n := &normaliser{}
	add := func(pattern, out string) {
		n.repl = append(n.repl, struct {
			re  *regexp.Regexp
			out string
		}{regexp.MustCompile(pattern), out})
	}
	add(regexp.QuoteMeta(runDir), "<RUN>")
	if codexPackage != "" {
		add(regexp.QuoteMeta(codexPackage), "<CODEX-PACKAGE>")
	}
	add(`\d+-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`, "<process-id>")
	add(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`, "<uuid>")
	add(`realcodex-[0-9a-f]{8}`, "<marker>")
	add(`call-realcodex-\d+-\d+`, "<call-id>")
	add(`/dev/tcp/127\.0\.0\.1/\d+`, "/dev/tcp/127.0.0.1/<port>") // the sandbox fixture's listener
	return n
}

func (n *normaliser) str(s string) string {
	for _, r := range n.repl {
		s = r.re.ReplaceAllString(s, r.out)
	}
	return s
}

// value normalises every string in a decoded JSON value.
func (n *normaliser) value(v any) any {
	switch x := v.(type) {
	case string:
		return n.str(x)
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = n.value(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = n.value(e)
			// Written bytes carry the marker: compare them decoded.
			if b64, ok := e.(string); ok && (k == "chunk" || k == "dataBase64") && len(b64) < 4096 {
				if b, err := base64.StdEncoding.DecodeString(b64); err == nil {
					out[k] = "base64:" + n.str(string(b))
				}
			}
		}
		return out
	}
	return v
}

// exchange is one request with its response, or one notification.
type exchange struct {
	Conn     int
	Method   string
	Params   any
	Result   any
	Err      map[string]any
	Answered bool
}

// transcript is a normalised local run.
type transcript struct {
	requests []*exchange
	notes    []*exchange // server->client notifications
	procs    map[string]*procRecord
}

// procRecord is what one process produced, keyed by its normalised argv.
type procRecord struct {
	Output map[string]string // stream -> bytes
	Exit   any
	Notes  []string // notification methods in order (output runs collapsed)
}

func buildTranscript(msgs []wireMessage, n *normaliser) *transcript {
	t := &transcript{procs: map[string]*procRecord{}}
	pending := map[string]*exchange{} // conn/id -> request
	procKey := map[string]string{}    // raw process id -> argv key
	for _, m := range msgs {
		var raw map[string]any
		if json.Unmarshal(m.Data, &raw) != nil {
			continue
		}
		method, _ := raw["method"].(string)
		idRaw, hasID := raw["id"]
		id := fmt.Sprintf("%d/%v", m.Conn, idRaw)
		switch {
		case m.Dir == "c2s" && method != "":
			e := &exchange{Conn: m.Conn, Method: method, Params: n.value(raw["params"])}
			if method == "process/start" {
				if p, ok := raw["params"].(map[string]any); ok {
					procKey[fmt.Sprint(p["processId"])] = jsonText(n.value(p["argv"]))
				}
			}
			t.requests = append(t.requests, e)
			if hasID {
				pending[id] = e
			}
		case m.Dir == "s2c" && method == "" && hasID:
			if e := pending[id]; e != nil {
				delete(pending, id)
				e.Answered = true
				e.Result = n.value(raw["result"])
				if em, ok := raw["error"].(map[string]any); ok {
					e.Err = n.value(em).(map[string]any)
				}
			}
		case m.Dir == "s2c" && method != "":
			params, _ := raw["params"].(map[string]any)
			t.notes = append(t.notes, &exchange{Conn: m.Conn, Method: method, Params: n.value(params)})
			if strings.HasPrefix(method, "process/") && params != nil {
				key := procKey[fmt.Sprint(params["processId"])]
				p := t.procs[key]
				if p == nil {
					p = &procRecord{Output: map[string]string{}}
					t.procs[key] = p
				}
				switch method {
				case "process/output":
					b, _ := base64.StdEncoding.DecodeString(fmt.Sprint(params["chunk"]))
					p.Output[fmt.Sprint(params["stream"])] += n.str(string(b))
				case "process/exited":
					p.Exit = n.value(params["exitCode"])
				}
				if len(p.Notes) == 0 || p.Notes[len(p.Notes)-1] != method || method != "process/output" {
					p.Notes = append(p.Notes, method)
				}
			}
		}
	}
	return t
}

// requestKey identifies a request across runs.
func requestKey(e *exchange) string {
	return e.Method + " " + jsonText(e.Params)
}

// jsonText encodes v without HTML escaping, so <RUN> stays readable.
func jsonText(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// diffLocal compares the two local runs.
func diffLocal(cfg config, log *eventLog, m modeRun, ref, ours *localRun) []stepResult {
	if ref == nil || ours == nil || ref.proxy == nil || ours.proxy == nil {
		return []stepResult{{Name: "local runs available for the diff", Detail: "a local run did not start"}}
	}
	pkg := filepath.Dir(filepath.Dir(filepath.Dir(cfg.codex))) // …/package/vendor/<triple>/bin/codex -> …/package
	pkg = filepath.Dir(pkg)
	tr := buildTranscript(ref.proxy.Messages(), newNormaliser(ref.dir, pkg))
	to := buildTranscript(ours.proxy.Messages(), newNormaliser(ours.dir, pkg))
	refPath, oursPath := filepath.Join(m.dir, "local-ref.normalised.jsonl"), filepath.Join(m.dir, "local-ours.normalised.jsonl")
	writeTranscript(refPath, tr)
	writeTranscript(oursPath, to)

	var unexpected, expected []string // expected: matched expectedDiffs keys, in order
	expectedBy := map[string][]string{}
	seen := map[string]int{}
	note := func(path, msg string) {
		line := path + ": " + msg
		if seen[line]++; seen[line] > 1 {
			return
		}
		if pattern, ok := expectedPath(path); ok {
			if expectedBy[pattern] == nil {
				expected = append(expected, pattern)
			}
			leaf := strings.TrimPrefix(path, strings.TrimSuffix(pattern, "*"))
			if leaf != "" {
				msg = leaf + " " + msg
			}
			expectedBy[pattern] = append(expectedBy[pattern], msg)
		} else {
			unexpected = append(unexpected, line)
		}
	}

	// Requests the harness sent.
	rk, ok := groupByKey(tr.requests), groupByKey(to.requests)
	for _, k := range unionKeys(rk, ok) {
		a, b := rk[k], ok[k]
		if len(a) != len(b) {
			method := strings.SplitN(k, " ", 2)[0]
			note("request-count:"+method, fmt.Sprintf("harness sent %s %d× to the reference, %d× to ours", clip(k, 200), len(a), len(b)))
		}
		for i := 0; i < len(a) && i < len(b); i++ {
			compareResponse(a[i], b[i], note)
		}
	}

	// Process notifications, per command.
	for _, k := range unionKeys(tr.procs, to.procs) {
		a, b := tr.procs[k], to.procs[k]
		switch {
		case a == nil || b == nil:
			note("process:"+k, fmt.Sprintf("notifications only from one server (ref %v, ours %v)", a != nil, b != nil))
			continue
		}
		if !jsonEqualValues(a.Exit, b.Exit) {
			note("process-exit:"+k, fmt.Sprintf("exitCode ref %v, ours %v", a.Exit, b.Exit))
		}
		for _, s := range unionKeys(a.Output, b.Output) {
			if a.Output[s] != b.Output[s] {
				note("process-output:"+k+":"+s, fmt.Sprintf("ref %q, ours %q", clip(a.Output[s], 120), clip(b.Output[s], 120)))
			}
		}
		if strings.Join(a.Notes, ",") != strings.Join(b.Notes, ",") {
			note("process-notes:process/output", fmt.Sprintf("%s: ref %v, ours %v", k, a.Notes, b.Notes))
		}
	}
	for i, pattern := range expected {
		expected[i] = fmt.Sprintf("%s (%s): %s", pattern, expectedDiffs[pattern], strings.Join(expectedBy[pattern], "; "))
		log.Printf("diff: expected %s", expected[i])
	}
	for _, l := range unexpected {
		log.Printf("diff: UNEXPECTED %s", l)
	}
	detail := fmt.Sprintf("%d requests vs %d; normalised transcripts: %s, %s",
		len(tr.requests), len(to.requests), refPath, oursPath)
	res := []stepResult{{
		Name:   "harness traffic and our answers match the reference (after normalisation)",
		OK:     len(unexpected) == 0,
		Detail: strings.Join(append(unexpected, detail), "\n"),
	}}
	if len(expected) > 0 {
		res = append(res, stepResult{Name: "known, accepted differences", Skip: true, Detail: strings.Join(expected, "\n")})
	}
	return res
}

// compareResponse compares the answers to the same request.
func compareResponse(a, b *exchange, note func(path, msg string)) {
	base := a.Method
	switch {
	case !a.Answered && !b.Answered:
	case a.Answered != b.Answered:
		note(base+".answered", fmt.Sprintf("reference answered %v, ours %v: %s", a.Answered, b.Answered, clip(requestKey(a), 160)))
	case (a.Err == nil) != (b.Err == nil):
		note(base+".outcome", fmt.Sprintf("reference %s, ours %s for %s", outcome(a), outcome(b), clip(requestKey(a), 160)))
	case a.Err != nil:
		if !jsonEqualValues(a.Err["code"], b.Err["code"]) || a.Err["message"] != b.Err["message"] {
			note(base+".error", fmt.Sprintf("reference %s, ours %s", jsonText(a.Err), jsonText(b.Err)))
		}
	default:
		compareValues(base+".result", a.Result, b.Result, note)
	}
}

func outcome(e *exchange) string {
	if e.Err != nil {
		return "error " + jsonText(e.Err)
	}
	return "result " + clip(jsonText(e.Result), 200)
}

// compareValues walks two JSON values and notes each differing path.
func compareValues(path string, a, b any, note func(path, msg string)) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		for _, k := range unionKeys(am, bm) {
			av, ain := am[k]
			bv, bin := bm[k]
			switch {
			case !ain:
				note(path+"."+k, fmt.Sprintf("only ours has it (%s)", short(bv)))
			case !bin:
				note(path+"."+k, fmt.Sprintf("missing in ours (reference %s)", short(av)))
			default:
				compareValues(path+"."+k, av, bv, note)
			}
		}
		return
	}
	if !jsonEqualValues(a, b) {
		note(path, fmt.Sprintf("reference %s, ours %s", short(a), short(b)))
	}
}

func short(v any) string { return clip(jsonText(v), 200) }

func jsonEqualValues(a, b any) bool { return jsonText(a) == jsonText(b) }

// expectedPath returns the expectedDiffs key that covers a diff path: the path itself or its
// parent.* wildcard.
func expectedPath(path string) (string, bool) {
	if _, ok := expectedDiffs[path]; ok {
		return path, true
	}
	if i := strings.LastIndex(path, "."); i > 0 {
		if _, ok := expectedDiffs[path[:i]+".*"]; ok {
			return path[:i] + ".*", true
		}
	}
	return "", false
}

func groupByKey(es []*exchange) map[string][]*exchange {
	m := map[string][]*exchange{}
	for _, e := range es {
		k := requestKey(e)
		m[k] = append(m[k], e)
	}
	return m
}

func unionKeys[V any](a, b map[string]V) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range []map[string]V{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}

// writeTranscript writes one normalised exchange per line, in the order the harness sent them.
func writeTranscript(path string, t *transcript) {
	writeJSONLines(path, func(enc *json.Encoder) {
		for _, e := range t.requests {
			rec := map[string]any{"conn": e.Conn, "method": e.Method, "params": e.Params}
			if e.Err != nil {
				rec["error"] = e.Err
			} else if e.Answered {
				rec["result"] = e.Result
			}
			enc.Encode(rec)
		}
		for _, e := range t.notes {
			enc.Encode(map[string]any{"conn": e.Conn, "notification": e.Method, "params": e.Params})
		}
	})
}
