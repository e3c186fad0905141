package main

// What to launch for a process/start (docs/protocol.md §6.1, §6.4): the child's environment,
// the program found on PATH, the argv it sees, and the sandbox seam.
//
//	env            envPolicy absent: exactly `env`. Present: the policy's environment, then
//	               `env` on top. A PTY child gets SHELL=<user shell> when it has none.
//	envPolicy      inherit all|core|none → drop *KEY* *SECRET* *TOKEN* (unless
//	               ignoreDefaultExcludes) → drop `exclude` → add `set` → keep only `includeOnly`
//	               (when non-empty). Patterns: case-insensitive, * and ? wildcards.
//	program        argv[0], or arg0 in PTY mode. With a slash: relative to cwd. Without: the
//	               child's PATH; in pipe mode the server's PATH when the child has none.
//	argv[0] seen   arg0 when given, else argv[0].

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// launchSpec is a fully resolved launch: what spawn executes. A sandbox policy rewrites it
// (applySandbox) before spawn sees it.
type launchSpec struct {
	path      string   // the program, resolved
	argv      []string // as the program sees it
	env       []string // KEY=value, exactly the child's environment
	dir       string
	tty       bool
	pipeStdin bool
	rows      uint16
	cols      uint16
	stage     *sandboxStage // the sandbox stage that runs path, when confined (applySandbox)
	// route: the command reaches its proxy through the bridge into its network namespace
	// (enforceManagedNetwork, docs/network.md §4); bridge the proxy endpoints planned for it
	// by applySandbox ("127.0.0.1:P" on this host), which the stage carries.
	route  *proxyRoute
	bridge []string
	// mask is the process's credential masking (proc_mask.go, docs/network.md §8), nil
	// without: its snapshot goes through it, and maskBundle (the CA bundle its variables
	// name) gets a read grant in its sandbox.
	mask       *maskBinding
	maskBundle string
}

// coreEnvVars are what envPolicy inherit:"core" keeps of the server's environment (Codex's
// core set, plus LANG which 0.169 was observed to pass).
var coreEnvVars = []string{"HOME", "LOGNAME", "PATH", "SHELL", "USER", "USERNAME", "TMPDIR", "TEMP", "TMP", "LANG"}

// defaultEnvExcludes are dropped unless ignoreDefaultExcludes: names that look like secrets
// (docs/protocol.md §6.1).
var defaultEnvExcludes = []string{"*KEY*", "*SECRET*", "*TOKEN*"}

// serverOnlyEnvVars never reach a child, whatever the policy: they configure this server.
var serverOnlyEnvVars = []string{"CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE"}

// envPolicyParams is process/start's envPolicy; every field is required when it is present.
type envPolicyParams struct {
	Inherit               envInherit        `json:"inherit"`
	IgnoreDefaultExcludes bool              `json:"ignoreDefaultExcludes"`
	Exclude               []string          `json:"exclude"`
	Set                   map[string]string `json:"set"`
	IncludeOnly           []string          `json:"includeOnly"`
}

func procParamAbsent(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// parseEnvPolicy decodes an envPolicy param; nil when absent or null.
func parseEnvPolicy(raw json.RawMessage) (*envPolicyParams, error) {
	if procParamAbsent(raw) {
		return nil, nil
	}
	var p envPolicyParams
	if err := decodeParams(raw, "EnvPolicyParams", &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// envInherit is envPolicy.inherit: "core", "all" or "none". It is checked as it is decoded,
// in the document's order, so a bad value is reported before a missing field, and the
// variants are named in the reference's order.
type envInherit string

func (e *envInherit) UnmarshalJSON(raw []byte) error {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '"' {
		// serde's words for an enum that could also be written as a map
		return errInvalidParams("invalid type: %s, expected string or map", jsonKind(t))
	}
	s, err := decodeVariant(raw, "core", "all", "none")
	*e = envInherit(s)
	return err
}

func (*envInherit) decodesNull() {}

// build returns the environment the policy makes of the server's environment host.
func (p *envPolicyParams) build(host []string, prependPath []string) map[string]string {
	env := map[string]string{}
	for _, kv := range host {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		switch p.Inherit {
		case "all":
			env[k] = v
		case "core":
			for _, c := range coreEnvVars {
				if k == c {
					env[k] = v
				}
			}
		}
	}
	if path, ok := env["PATH"]; ok && len(prependPath) > 0 {
		env["PATH"] = strings.Join(append(append([]string(nil), prependPath...), path), string(os.PathListSeparator))
	}
	for _, k := range serverOnlyEnvVars {
		delete(env, k)
	}
	drop := func(patterns []string) {
		for k := range env {
			if matchAnyEnvPattern(patterns, k) {
				delete(env, k)
			}
		}
	}
	if !p.IgnoreDefaultExcludes {
		drop(defaultEnvExcludes)
	}
	drop(p.Exclude)
	for k, v := range p.Set {
		env[k] = v
	}
	if len(p.IncludeOnly) > 0 {
		for k := range env {
			if !matchAnyEnvPattern(p.IncludeOnly, k) {
				delete(env, k)
			}
		}
	}
	return env
}

func matchAnyEnvPattern(patterns []string, name string) bool {
	for _, pat := range patterns {
		if envPatternMatch(strings.ToUpper(pat), strings.ToUpper(name)) {
			return true
		}
	}
	return false
}

// envPatternMatch matches s against a pattern of literal bytes, '*' (any run) and '?' (any one
// byte), by the usual backtracking over the last star.
func envPatternMatch(pat, s string) bool {
	p, i, star, mark := 0, 0, -1, 0
	for i < len(s) {
		switch {
		case p < len(pat) && (pat[p] == '?' || pat[p] == s[i]):
			p++
			i++
		case p < len(pat) && pat[p] == '*':
			star, mark = p, i
			p++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pat) && pat[p] == '*' {
		p++
	}
	return p == len(pat)
}

// newLaunchSpec resolves a process/start into what to execute (docs/protocol.md §6.1).
// proxyEnv, the managed network proxy's variables, is applied last: it wins over env, as the
// reference's does.
func newLaunchSpec(p *startParams, cwd string, policy *envPolicyParams, info *environmentInfo, rows, cols uint16, proxyEnv map[string]string) (*launchSpec, error) {
	env := map[string]string{}
	if policy != nil {
		var prepend []string
		for _, u := range info.PrependPathDirs {
			if dir, err := parsePath(u); err == nil {
				prepend = append(prepend, dir)
			}
		}
		env = policy.build(os.Environ(), prepend)
	}
	for k, v := range p.Env {
		env[k] = v
	}
	for k, v := range proxyEnv {
		env[k] = v
	}
	if _, ok := env["SHELL"]; p.TTY && !ok {
		env["SHELL"] = info.Shell.Path
	}
	argv := append([]string(nil), p.Argv...)
	program := argv[0]
	if p.Arg0 != nil {
		argv[0] = *p.Arg0
		if p.TTY {
			program = *p.Arg0
		}
	}
	path, err := lookProgram(program, cwd, env, p.TTY)
	if err != nil {
		return nil, err
	}
	envList := make([]string, 0, len(env))
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	sort.Strings(envList)
	return &launchSpec{path: path, argv: argv, env: envList, dir: cwd, tty: p.TTY, pipeStdin: p.PipeStdin && !p.TTY, rows: rows, cols: cols}, nil
}

// lookProgram finds the program to execute (docs/protocol.md §6.1). PTY mode searches only the
// child's PATH and words its errors as the reference's PTY launcher does.
func lookProgram(program, cwd string, env map[string]string, tty bool) (string, error) {
	if program == "" {
		mode := "pipe"
		if tty {
			mode = "PTY"
		}
		return "", errSpawn(spawnFailed, "missing program for %s spawn", mode)
	}
	if strings.Contains(program, "/") {
		if filepath.IsAbs(program) {
			return program, nil
		}
		joined := cwd + "/" + program // unclean, as the reference names it
		if strings.HasSuffix(cwd, "/") {
			joined = cwd + program
		}
		if _, err := os.Stat(joined); tty && errors.Is(err, fs.ErrNotExist) {
			return "", errSpawn(spawnFailed, "Unable to spawn %s because it does not exist", joined)
		}
		return filepath.Join(cwd, program), nil
	}
	pathList, ok := env["PATH"]
	if !ok && !tty {
		pathList = os.Getenv("PATH")
	}
	if !ok && tty {
		return "", errSpawn(spawnFailed, "Unable to spawn %s because:\nUnable to resolve the PATH", program)
	}
	denied := false
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
		candidate := filepath.Join(dir, program)
		fi, err := os.Stat(candidate)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if fi.Mode()&0o111 == 0 {
			denied = true
			continue
		}
		return candidate, nil
	}
	if tty {
		return "", errSpawn(spawnFailed, "Unable to spawn %s because:\nNo viable candidates found in PATH %q", program, pathList)
	}
	if denied {
		return "", errSpawnOS(syscall.EACCES)
	}
	return "", errSpawnOS(syscall.ENOENT)
}

// The kinds of a failed spawn, its error's data.kind (docs/protocol.md §6.4): a client tells
// "command not found" from "not allowed to run" without parsing the message.
const (
	spawnNotFound         = "spawnNotFound"         // no such program or cwd (ENOENT)
	spawnPermissionDenied = "spawnPermissionDenied" // not executable, a directory (EACCES, EPERM)
	spawnFailed           = "spawnFailed"           // anything else
)

// errSpawn is a failed spawn's -32603 error, of the given kind.
func errSpawn(kind, format string, a ...any) *rpcError {
	e := errInternal(format, a...)
	e.Data = &errorData{Kind: kind}
	return e
}

// errSpawnOS is the error of a spawn the system refused, worded and classed by its errno.
func errSpawnOS(err error) *rpcError {
	return errSpawn(spawnKindOf(err), "%s", spawnErrorText(err))
}

// spawnKindOf classes a system error as the reference's I/O error kinds do.
func spawnKindOf(err error) string {
	var errno syscall.Errno
	switch {
	case !errors.As(err, &errno):
		return spawnFailed
	case errno == syscall.ENOENT:
		return spawnNotFound
	case errno == syscall.EACCES || errno == syscall.EPERM:
		return spawnPermissionDenied
	}
	return spawnFailed
}

// withSpawnKind gives a failed spawn's error its kind where it has none yet: the sandbox
// stage reports its chdir or exec failure as text ending "(os error N)", whose errno classes
// it; any other failure of the stage is spawnFailed.
func withSpawnKind(err error) error {
	var re *rpcError
	if !errors.As(err, &re) || re.Data != nil {
		return err
	}
	kind := spawnFailed
	if i := strings.LastIndex(re.Message, "(os error "); i >= 0 && strings.HasSuffix(re.Message, ")") {
		if n, perr := strconv.Atoi(re.Message[i+len("(os error ") : len(re.Message)-1]); perr == nil {
			kind = spawnKindOf(syscall.Errno(n))
		}
	}
	e := *re
	e.Data = &errorData{Kind: kind}
	return &e
}

// spawnErrorText words an OS error as the reference does: "No such file or directory (os error 2)".
func spawnErrorText(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err.Error()
	}
	s := errno.Error()
	if s != "" {
		s = strings.ToUpper(s[:1]) + s[1:]
	}
	return fmt.Sprintf("%s (os error %d)", s, int(errno))
}

// processSandbox is what a process/start sandbox object asks for.
type processSandbox struct {
	req *sandboxRequest
	// unenforced: a managed sandbox that the operator chose to run without one
	// (--managed-sandbox run-unsandboxed), for hosts that are themselves the sandbox.
	unenforced bool
}

// parseProcessSandbox decodes process/start's sandbox; nil when absent or null.
func (c *call) parseProcessSandbox(raw json.RawMessage, runManagedUnsandboxed bool) (*processSandbox, error) {
	if procParamAbsent(raw) {
		return nil, nil
	}
	req, err := c.cachedSandbox(raw)
	if req == nil || err != nil {
		return nil, err
	}
	return &processSandbox{req: req, unenforced: runManagedUnsandboxed && req.kind == profileManaged}, nil
}

// applySandbox is the one seam where a sandbox policy wraps a launch, and says which sandbox
// the process runs in (process/start's sandboxType). The profile is resolved against the
// process: its cwd when the sandbox names none, and its TMPDIR for tmpdir. A routed launch
// (spec.route) has its bridge planned here, against its final environment. A managed
// sandbox the operator chose to run unsandboxed launches as is, answered "none": nothing
// confines the process.
func applySandbox(sbx *sandboxer, spec *launchSpec, sb *processSandbox) (sandboxType string, err error) {
	switch {
	case sb == nil, sb.unenforced:
		return sandboxTypeNone, nil
	}
	if spec.route != nil {
		targets, env, err := planProxyRoutes(spec.env, spec.route, netBridgeMaxListeners)
		if err != nil {
			return "", errInvalidParams("enforceManagedNetwork: failed to prepare host proxy routing bridge: %v; refusing to start the process (docs/network.md §4)", err)
		}
		spec.env, spec.bridge = env, targets
	}
	profile := sb.req.resolve(sandboxAnchors{cwd: spec.dir, tmpdir: envValue(spec.env, "TMPDIR")})
	if spec.maskBundle != "" && profile.confinesFiles() && !profile.FullRead {
		// A masked command trusts the bundle its CA variables name: it must read it under
		// every profile (docs/network.md §8). Read-only, the bundle alone.
		q := *profile
		q.Read = append(slices.Clone(q.Read), spec.maskBundle)
		profile = &q
	}
	return sbx.confine(spec, profile)
}

// checkNoNUL refuses a NUL byte in argv or env with the reference's words: such a string
// cannot reach execve whole.
func checkNoNUL(p *startParams) error {
	for _, a := range p.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return errSpawn(spawnFailed, "nul byte found in provided data")
		}
	}
	if p.Arg0 != nil && strings.IndexByte(*p.Arg0, 0) >= 0 {
		return errSpawn(spawnFailed, "nul byte found in provided data")
	}
	for k, v := range p.Env {
		if strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0 {
			return errSpawn(spawnFailed, "data provided contains a nul byte")
		}
	}
	return nil
}

// envValue is the value of key in env (KEY=value entries), "" when absent.
func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}
