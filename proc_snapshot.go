package main

// Shell snapshots (docs/protocol.md §6.4.1, capability shellSnapshotV2): a process/start whose
// argv is [shell.path, "-lc", script] and which carries shellSnapshot runs its script in a
// shell rebuilt from a snapshot of the login shell, instead of paying for the login profile
// on every command.
//
// The login shell is captured once per cache key (scope, shell, the resolved program, cwd,
// the child's whole environment, envPolicy, sandbox): it runs the profile exactly as the
// command would (same program, environment, cwd and sandbox, stdin /dev/null, stderr
// discarded), then prints its shell state (options, functions, aliases) and its exported
// environment. The command is then started as a non-login shell that skips every startup
// file, restores that state and runs the script.
//
// The snapshot never touches the disk: it lives in the server's memory and reaches each
// command through that command's own execve environment (__CODEX_SHELL_SNAPSHOT_STATE_N,
// unset by the shell before the script runs). There is no file a sandboxed command could
// rewrite to inject code into another command, another scope or a later session.
//
// A failed capture (spawn error, non-zero exit, timeout, oversized output) runs the command
// unchanged; a key is tried again after shellSnapshotRetryBackoff, at most
// shellSnapshotAttempts times, then falls back until it is evicted.

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limits of shell snapshots.
const (
	// shellSnapshotScopeMax bounds scopeId, as the reference does (docs/protocol.md §6.4.1).
	shellSnapshotScopeMax = 256
	// shellSnapshotCacheSize is how many snapshots a session keeps, least recently used
	// evicted first.
	shellSnapshotCacheSize = 16
	// shellSnapshotTimeout bounds one capture, from spawn to exit; past it the capture and
	// everything it started are killed.
	shellSnapshotTimeout = 10 * time.Second
	// shellSnapshotAttempts is how many captures a key gets before it falls back for good
	// (until evicted); shellSnapshotRetryBackoff separates them.
	shellSnapshotAttempts     = 3
	shellSnapshotRetryBackoff = time.Second
	// shellSnapshotCaptureMax bounds what a capture may print on stdout (the profile's own
	// output, the state and the environment); past it the capture is killed and fails.
	shellSnapshotCaptureMax = 4 << 20
	// shellSnapshotMax bounds a snapshot once parsed: state plus environment.
	shellSnapshotMax = 512 << 10
	// shellSnapshotChunk bounds one state variable: under Linux's 128 KiB limit on a single
	// environment string (MAX_ARG_STRLEN).
	shellSnapshotChunk = 60 << 10
	// shellSnapshotStateVar names the variables that carry the state to the command.
	shellSnapshotStateVar = "__CODEX_SHELL_SNAPSHOT_STATE_"
)

// shellSnapshotParams is process/start's shellSnapshot. Its fields are required, and it is
// decoded like top-level params so that a missing one is named as the reference names it.
type shellSnapshotParams struct {
	ScopeID string             `json:"scopeId"`
	Shell   shellSnapshotShell `json:"shell"`
}

type shellSnapshotShell struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

func (s *shellSnapshotParams) UnmarshalJSON(raw []byte) error {
	return decodeParams(raw, "ShellSnapshotRequest", s)
}

func (s *shellSnapshotShell) UnmarshalJSON(raw []byte) error {
	return decodeParams(raw, "ShellSnapshotShell", s)
}

// applies reports whether s asks for a snapshot of this argv: [shell.path, "-lc", script, …].
func (s *shellSnapshotParams) applies(argv []string) bool {
	return s != nil && len(argv) >= 3 && argv[0] == s.Shell.Path && argv[1] == "-lc"
}

// check refuses what the reference refuses (-32602): a scope that is empty or too long,
// whatever the argv, and a shell it cannot snapshot when the argv asks for one.
func (s *shellSnapshotParams) check(argv []string) error {
	if s == nil {
		return nil
	}
	if s.ScopeID == "" || len(s.ScopeID) > shellSnapshotScopeMax {
		return errInvalidParams("shell snapshot scope must be non-empty and at most %d bytes", shellSnapshotScopeMax)
	}
	if s.applies(argv) && shellSnapshotKinds[s.Shell.Name] == nil {
		return errInvalidParams("shell snapshots are unsupported for shell `%s`", s.Shell.Name)
	}
	return nil
}

// shellSnapshotKind is how one shell is captured and restored.
type shellSnapshotKind struct {
	// capture runs after the login profile, in the login shell: it prints marker between two
	// NULs, the state as shell code, a NUL, then the environment as `env -0` does.
	capture func(marker string) string
	// flag replaces -lc: a non-login shell that reads no startup file.
	flag string
	// prologue undoes what flag changed, before the state is restored.
	prologue string
}

// shellSnapshotKinds are the shells that can be snapshotted, by shellSnapshot.shell.name.
var shellSnapshotKinds = map[string]*shellSnapshotKind{
	// bash -p reads neither BASH_ENV nor functions from the environment; set +o privileged
	// then makes it an ordinary shell ($- is hBc, as under -lc).
	"bash": {capture: bashSnapshotCapture, flag: "-pc", prologue: "set +o privileged; "},
	// zsh -f reads no startup file (not even .zshenv); RCS is set again afterwards.
	"zsh": {capture: zshSnapshotCapture, flag: "-fc", prologue: "setopt RCS; "},
	// sh -c reads no startup file.
	"sh": {capture: shSnapshotCapture, flag: "-c"},
}

// snapshotEnvTail prints the exported environment, NUL-separated, with the PATH's env or
// the system's.
const snapshotEnvTail = `printf '\0'
if command -v env >/dev/null 2>&1; then env -0; else command -p env -0; fi
`

// snapshotOptionLines prints the `set -o NAME` lines of the options that are on, from the
// output of `set +o` held in the named variable (IFS is a newline and globbing is off).
func snapshotOptionLines(v string) string {
	return `for __es_l in $` + v + `; do case $__es_l in 'set -o '*) printf '%s\n' "$__es_l" ;; esac; done
`
}

// bashSnapshotCapture also reads ~/.bashrc, as an interactive shell would (and as the
// reference's capture does), unless BASH_ENV names another file. Aliases are restored too,
// though bash expands them only where the profile turned expand_aliases on.
func bashSnapshotCapture(marker string) string {
	return `if [ -z "${BASH_ENV-}" ] && [ -n "${HOME-}" ] && [ -r "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi
__es_set=$(set +o)
__es_shopt=$(shopt -p)
set -f
IFS='
'
printf '\0%s\0' '` + marker + `'
` + snapshotOptionLines("__es_set") + `for __es_l in $__es_shopt; do case $__es_l in *' login_shell'|*' restricted_shell') ;; *) printf '%s\n' "$__es_l" ;; esac; done
declare -f
alias -p
` + snapshotEnvTail
}

// zshSnapshotCapture also reads $ZDOTDIR/.zshrc (or ~/.zshrc), as an interactive shell would.
func zshSnapshotCapture(marker string) string {
	return `__es_rc=${ZDOTDIR:-${HOME-}}
if [[ -n $__es_rc && -r $__es_rc/.zshrc ]]; then . "$__es_rc/.zshrc"; fi
printf '\0%s\0' '` + marker + `'
for __es_l in ${(f)"$(setopt)"}; do case $__es_l in (interactive|shinstdin) ;; (*) print -r -- "setopt $__es_l" ;; esac; done
functions
alias -L
` + snapshotEnvTail
}

// shSnapshotCapture keeps options and, where the shell can list them (a bash or ksh
// installed as sh), functions: POSIX sh has no way to list functions.
func shSnapshotCapture(marker string) string {
	return `__es_set=$(set +o)
set -f
IFS='
'
printf '\0%s\0' '` + marker + `'
` + snapshotOptionLines("__es_set") + `if command -v typeset >/dev/null 2>&1; then typeset -f 2>/dev/null; fi
` + snapshotEnvTail
}

// shellSnapshot is one captured login shell.
type shellSnapshot struct {
	state string            // shell code: options, functions, aliases
	env   map[string]string // exported by the profile, already filtered by the envPolicy
}

// shellSnapshotEntry is one key of the cache and its latest capture attempt.
type shellSnapshotEntry struct {
	key      [sha256.Size]byte
	cur      *shellSnapshotAttempt
	attempts int
	retryAt  time.Time // after a failure: when the next attempt may start
}

// shellSnapshotAttempt is one capture: snap is set (nil when it failed) before done is
// closed, and never changes after.
type shellSnapshotAttempt struct {
	done chan struct{}
	snap *shellSnapshot
}

// shellSnapshotCache is a session's snapshots (procTable.snapshots), most recently used last.
// Its zero value is ready to use.
type shellSnapshotCache struct {
	mu      sync.Mutex
	entries []*shellSnapshotEntry
}

// shellSnapshotEnv is what a capture needs of the server.
type shellSnapshotEnv struct {
	sandbox  *sandboxer
	watchdog *watchdog
}

// prepare rewrites spec to run from a snapshot when one is ready, and returns nil. When the
// snapshot must be captured first (or another request is capturing it), it returns a wait
// function that does or awaits the capture and then rewrites spec; the caller runs it off
// the connection's reader. A key whose captures failed leaves spec unchanged.
func (c *shellSnapshotCache) prepare(spec *launchSpec, p *startParams, sb *processSandbox, policy *envPolicyParams, host shellSnapshotEnv) (wait func()) {
	kind := shellSnapshotKinds[p.ShellSnapshot.Shell.Name]
	key := shellSnapshotKey(spec, p)
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.touchLocked(key)
	switch {
	case e == nil:
		e = &shellSnapshotEntry{key: key}
		c.entries = append(c.entries, e)
		if len(c.entries) > shellSnapshotCacheSize {
			c.entries = c.entries[1:]
		}
	case !isClosed(e.cur.done):
		a := e.cur
		return func() {
			<-a.done
			a.apply(spec, kind)
		}
	case e.cur.snap != nil:
		e.cur.apply(spec, kind)
		return nil
	case e.attempts >= shellSnapshotAttempts || time.Now().Before(e.retryAt):
		return nil // failed: the command runs unchanged
	}
	e.attempts++
	a := &shellSnapshotAttempt{done: make(chan struct{})}
	e.cur = a
	return func() {
		snap, err := captureShellSnapshot(spec, kind, sb, policy, host)
		if err != nil {
			c.mu.Lock()
			e.retryAt = time.Now().Add(shellSnapshotRetryBackoff)
			c.mu.Unlock()
		}
		a.snap = snap
		close(a.done)
		a.apply(spec, kind)
	}
}

// touchLocked finds key's entry and makes it the most recently used.
func (c *shellSnapshotCache) touchLocked(key [sha256.Size]byte) *shellSnapshotEntry {
	for i, e := range c.entries {
		if e.key == key {
			c.entries = append(append(c.entries[:i:i], c.entries[i+1:]...), e)
			return e
		}
	}
	return nil
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// shellSnapshotKey is a digest of everything that decides what a capture sees: the request,
// the resolved program and argv[0], cwd, the child's whole environment, envPolicy and the
// sandbox. A snapshot captured with one HOME (or one sandbox) never serves another.
func shellSnapshotKey(spec *launchSpec, p *startParams) [sha256.Size]byte {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(p.ShellSnapshot.ScopeID)
	field(p.ShellSnapshot.Shell.Name)
	field(p.ShellSnapshot.Shell.Path)
	field(spec.path)
	field(spec.argv[0])
	field(spec.dir)
	field(strconv.Itoa(len(spec.env)))
	for _, kv := range spec.env {
		field(kv)
	}
	field(string(p.EnvPolicy))
	field(string(p.Sandbox))
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return key
}

// apply rewrites spec to start from a's snapshot, when it has one. The environment the
// sandbox is resolved from (TMPDIR) is left as the request made it.
func (a *shellSnapshotAttempt) apply(spec *launchSpec, kind *shellSnapshotKind) {
	if a.snap == nil {
		return
	}
	env := map[string]string{}
	for _, kv := range spec.env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	state := a.snap.state
	if spec.mask != nil { // credential masking (proc_mask.go): no real value through a profile
		state = spec.mask.maskText(state)
	}
	for k, v := range a.snap.env {
		if _, ok := env[k]; ok { // the request's environment wins, as in the reference
			continue
		}
		if spec.mask != nil {
			var keep bool
			if v, keep = spec.mask.maskSnapshotVar(k, v); !keep {
				continue
			}
		}
		if k == "TMPDIR" { // read by the sandbox: given to the shell, not to the launch
			state += "export TMPDIR=" + snapshotQuote(v) + "\n"
			continue
		}
		env[k] = v
	}
	var names, refs []string
	for i := 0; i == 0 || len(state) > 0; i++ { // one at least: the script's line numbers stay put
		n := min(len(state), shellSnapshotChunk)
		name := shellSnapshotStateVar + strconv.Itoa(i)
		env[name] = state[:n]
		state = state[n:]
		names = append(names, name)
		refs = append(refs, "${"+name+"}")
	}
	restore := "if ! eval \"unset " + strings.Join(names, " ") + "\n" + strings.Join(refs, "") +
		"\" >/dev/null 2>&1; then printf 'failed to restore shell snapshot\\n' >&2; fi\n"
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	argv := append([]string{spec.argv[0], kind.flag, kind.prologue + restore + spec.argv[2]}, spec.argv[3:]...)
	spec.argv, spec.env = argv, list
}

// snapshotQuote quotes s for any POSIX shell.
func snapshotQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// captureShellSnapshot runs the login shell of spec under the same sandbox, environment and
// cwd as the command, in a process table of its own, and parses what it prints. Whatever
// happens, the capture's process group and session are killed and its goroutines joined
// before it returns.
func captureShellSnapshot(spec *launchSpec, kind *shellSnapshotKind, sb *processSandbox, policy *envPolicyParams, host shellSnapshotEnv) (*shellSnapshot, error) {
	var nonce [16]byte
	rand.Read(nonce[:])
	marker := "exec-server-snapshot-" + hex.EncodeToString(nonce[:])
	// Routed as the command is (docs/network.md §4): a login profile reaches no more network.
	capSpec := &launchSpec{path: spec.path, argv: []string{spec.argv[0], "-lc", kind.capture(marker)},
		env: spec.env, dir: spec.dir, route: spec.route}
	col := &snapshotCollector{exited: make(chan struct{}), full: make(chan struct{})}
	table := newProcTableFor(col.notify, 1, host.watchdog)
	proc := newProcess(table, "shell-snapshot", false, 0) // nobody reads it after killAll
	if err := table.reserve(proc); err != nil {
		return nil, fmt.Errorf("shell snapshot: %w", err)
	}
	sandboxType, err := applySandbox(host.sandbox, capSpec, sb)
	if err != nil {
		return nil, fmt.Errorf("shell snapshot: sandbox: %w", err)
	}
	proc.sandboxType = sandboxType
	if err := proc.spawn(capSpec); err != nil {
		return nil, fmt.Errorf("shell snapshot: spawn: %w", err)
	}
	timer := time.NewTimer(shellSnapshotTimeout)
	defer timer.Stop()
	select {
	case <-col.exited:
	case <-col.full:
	case <-timer.C:
	}
	table.killAll() // the capture and whatever the profile left running
	out, code, full := col.result()
	switch {
	case full:
		return nil, fmt.Errorf("shell snapshot: capture prints more than %d bytes", shellSnapshotCaptureMax)
	case code == nil:
		return nil, fmt.Errorf("shell snapshot: capture did not finish within %v", shellSnapshotTimeout)
	case *code != 0:
		return nil, fmt.Errorf("shell snapshot: capture exited with %d", *code)
	}
	return parseShellSnapshot(out, marker, policy)
}

// parseShellSnapshot reads a capture's stdout: whatever the profile printed, NUL marker NUL,
// the state, NUL, the environment as NUL-terminated KEY=value entries.
func parseShellSnapshot(out []byte, marker string, policy *envPolicyParams) (*shellSnapshot, error) {
	at := bytes.Index(out, []byte("\x00"+marker+"\x00"))
	if at < 0 {
		return nil, errors.New("shell snapshot: capture printed no snapshot")
	}
	out = out[at+len(marker)+2:]
	state, envPart, ok := bytes.Cut(out, []byte{0})
	if !ok {
		return nil, errors.New("shell snapshot: capture printed no environment")
	}
	if len(state)+len(envPart) > shellSnapshotMax {
		return nil, fmt.Errorf("shell snapshot: more than %d bytes", shellSnapshotMax)
	}
	var host []string
	for _, kv := range bytes.Split(envPart, []byte{0}) {
		if k, _, ok := bytes.Cut(kv, []byte("=")); ok && len(k) > 0 {
			host = append(host, string(kv))
		}
	}
	env := map[string]string{}
	if policy != nil {
		// The profile's exports pass through the request's policy, as everything inherited
		// does: a profile's *TOKEN* stays out unless the policy lets it in.
		all := *policy
		all.Inherit = "all"
		env = all.build(host, nil)
	} else {
		for _, kv := range host {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	// The shell sets these itself.
	for _, k := range []string{"PWD", "OLDPWD", "SHLVL", "_"} {
		delete(env, k)
	}
	// Nor are the capture's own variables, which a profile's `set -a` would export.
	for k := range env {
		if strings.HasPrefix(k, shellSnapshotStateVar) || strings.HasPrefix(k, "__es_") || k == "IFS" {
			delete(env, k)
		}
	}
	return &shellSnapshot{state: string(state), env: env}, nil
}

// snapshotCollector gathers a capture's stdout and exit code from its process's
// notifications.
type snapshotCollector struct {
	mu     sync.Mutex
	out    []byte
	code   *int
	full   chan struct{} // closed once stdout passes shellSnapshotCaptureMax
	exited chan struct{} // closed with process/exited
	isFull bool
}

// notify is the capture table's notify: it keeps stdout and the exit code, drops the rest.
func (c *snapshotCollector) notify(msg []byte) {
	var n struct {
		Method string `json:"method"`
		Params struct {
			Stream   string `json:"stream"`
			Chunk    []byte `json:"chunk"`
			ExitCode *int   `json:"exitCode"`
		} `json:"params"`
	}
	if json.Unmarshal(msg, &n) != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case n.Method == "process/output" && n.Params.Stream == "stdout" && !c.isFull:
		if len(c.out)+len(n.Params.Chunk) > shellSnapshotCaptureMax {
			c.isFull = true
			close(c.full)
			return
		}
		c.out = append(c.out, n.Params.Chunk...)
	case n.Method == "process/exited" && c.code == nil && n.Params.ExitCode != nil:
		c.code = n.Params.ExitCode
		close(c.exited)
	}
}

func (c *snapshotCollector) result() ([]byte, *int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out, c.code, c.isFull
}
