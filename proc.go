package main

// Processes (docs/protocol.md §6): the methods that run what the client asks and stream every
// byte back in order.
//
// Methods (family "exec"; params → result):
//
//	process/start      processId argv cwd env tty [pipeStdin arg0 envPolicy sandbox rows* cols*
//	                   shellSnapshot networkProxy managedNetwork enforceManagedNetwork]
//	                   → {processId, sandboxType:"none"|"linuxSeccomp"|"macosSeatbelt"}
//	process/read       processId [afterSeq maxBytes waitMs]
//	                   → {chunks:[{seq,stream,chunk}], nextSeq, exited, exitCode, closed, failure:null, sandboxDenied}
//	process/write      processId chunk(base64) writeId → {status: accepted|unknownProcess|stdinClosed|starting}
//	process/signal     processId signal:"interrupt" → {}
//	process/terminate  processId → {running}
//	process/resize*    processId rows cols → {}                         (TIOCSWINSZ; the kernel sends SIGWINCH)
//	process/closeStdin* processId → {status: accepted|unknownProcess|stdinClosed}   (EOF after queued writes)
//
//	* extensions no reference has (docs/protocol.md §11); old clients never send them.
//
// Notifications, sent to the connection attached to the owning session (dropped while detached):
//
//	process/output  {processId, seq, stream:"stdout"|"stderr"|"pty", chunk:base64}
//	process/exited  {processId, seq, exitCode, sandboxDenied}
//	process/closed  {processId, seq}
//
// Sequence numbers and events: docs/protocol.md §6.2. exited waits for what the child left
// buffered in its streams (process.go); closed follows exit and EOF on every stream (a
// PTY master is read until EIO). sandboxDenied is the denial heuristic's verdict
// (sandbox_denial.go, docs/sandbox.md §4), decided before exited is sent. What differs from
// 0.169 on purpose: docs/protocol.md §12.

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"
)

// Limits and timings of processes.
const (
	// retainedOutputLimit bounds the output kept per process for process/read (docs/protocol.md
	// §5.3). Whole chunks are evicted, oldest first, once the total passes it.
	retainedOutputLimit = 1 << 20
	// readChunkMin and readChunkMax bound one read from a pipe or PTY, hence one
	// process/output chunk. A reader starts small (an idle shell costs little) and doubles its
	// buffer each time a read fills it. 64 KiB chunks (docs/protocol.md §6.2) make ~87 KB
	// notifications, far under the 1 MiB a Codex client accepts; see BenchmarkPipeThroughput.
	readChunkMin = 8 << 10
	readChunkMax = 64 << 10
	// exitDrainGrace is how long the exit report waits for EOF on a stream that cannot be
	// drained on demand (no read deadlines: darwin's blocking PTY master), so that output the
	// child left in it usually precedes exited.
	exitDrainGrace = 25 * time.Millisecond
	// stdinQueueLimit bounds the bytes queued for a child's stdin that it has not read yet.
	stdinQueueLimit = 8 << 20
	// writeIDMemory is how many accepted writeIds a process remembers for idempotency.
	writeIDMemory = 4096
	// killReapTimeout bounds how long killAll waits for killed processes to close.
	killReapTimeout = 3 * time.Second
	// defaultPTYRows and defaultPTYCols are the reference's terminal size (docs/protocol.md §6.1).
	defaultPTYRows = 24
	defaultPTYCols = 80
)

// procMethods registers the process methods.
func procMethods(t methodTable) {
	t["process/start"] = handle("exec", "WireExecParams", decides, (*call).processStart)
	t["process/read"] = handle("exec", "ReadParams", decides, (*call).processRead)
	t["process/write"] = handle("exec", "WriteParams", decides, func(c *call, p *writeParams) (statusResult, error) {
		return afterStart(c, p.ProcessID, func() (statusResult, error) { return c.processWrite(p) })
	})
	t["process/signal"] = handle("exec", "SignalParams", decides, func(c *call, p *signalParams) (emptyResult, error) {
		return afterStart(c, p.ProcessID, func() (emptyResult, error) { return c.processSignal(p) })
	})
	t["process/terminate"] = handle("exec", "TerminateParams", decides, func(c *call, p *idParams) (terminateResult, error) {
		return afterStart(c, p.ProcessID, func() (terminateResult, error) { return c.processTerminate(p) })
	})
	t["process/resize"] = handle("exec", "ResizeParams", decides, func(c *call, p *resizeParams) (emptyResult, error) {
		return afterStart(c, p.ProcessID, func() (emptyResult, error) { return c.processResize(p) })
	})
	t["process/closeStdin"] = handle("exec", "CloseStdinParams", decides, func(c *call, p *idParams) (statusResult, error) {
		return afterStart(c, p.ProcessID, func() (statusResult, error) { return c.processCloseStdin(p) })
	})
}

// processLane is the lane of a process whose start waits (for its shell snapshot): the
// requests about it that arrive meanwhile run after the start, in the order they came.
func processLane(id string) string { return "process\x00" + id }

// afterStart runs a request about process id on the reader, as usual, unless the process's
// start is still waiting, or requests queued behind it still are: then after them (docs/protocol.md
// §3.4). A process/terminate sent while the login shell is captured for its snapshot thus
// kills the command once it runs (137), as the reference, which serves one request at a
// time, does; it does not answer {"running":false} and let the command run.
//
// At most maxQueuedBehindStart requests wait so, each holding a deferred slot: past them a
// request runs at once, as it would about a process not started (a write answers starting,
// and a terminate still ends the command, once it runs: process.kill), so that a client
// cannot hold the connection's reader up with writes to a starting process.
func afterStart[R any](c *call, id string, run func() (R, error)) (R, error) {
	if key := processLane(id); c.laneDepth(key) > 0 && c.laneDepth(key) <= maxQueuedBehindStart {
		laterInLane(c, key, func(context.Context) (R, error) { return run() })
		var none R
		return none, nil
	}
	return run()
}

// maxQueuedBehindStart bounds the requests about one process that wait for its start.
const maxQueuedBehindStart = 64

// procTable is a session's processes, by client-chosen id.
type procTable struct {
	notify   func([]byte) // the session's notify: to its attached connection, dropped while detached
	maxProcs int          // --max-processes-per-session
	wd       *watchdog    // the server's watchdog, nil when it has none
	hooks    procHooks    // what its processes ask of it: they hold no pointer to it

	mu      sync.Mutex
	procs   map[string]*process
	running int  // processes reserved and not yet closed, for --max-processes-per-session
	gone    bool // killAll ran: the session is over

	sweeper sessionSweeper // what process/terminate leaves of its children's sessions

	snapshots shellSnapshotCache // process/start's shell snapshots (proc_snapshot.go)
}

// newProcTableFor makes a table whose processes send their notifications through notify.
// Their hooks are made once here, so a process costs no closures of its own.
func newProcTableFor(notify func([]byte), maxProcs int, wd *watchdog) *procTable {
	t := &procTable{notify: notify, maxProcs: maxProcs, wd: wd, procs: map[string]*process{}}
	t.hooks = procHooks{
		notify:   notify,
		finished: t.finished,
		forget:   t.remove,
		record:   wd.record,
		sweep:    t.sweeper.queue,
	}
	return t
}

// newProcTable makes session s's table, with the server's limit and watchdog.
func newProcTable(s *session) *procTable {
	if s.srv == nil {
		return newProcTableFor(s.notify, defaultLimits.processesPerSession, nil)
	}
	return newProcTableFor(s.notify, s.srv.cfg.limits.processesPerSession, s.srv.watchdog)
}

// get returns the process id, or nil.
func (t *procTable) get(id string) *process {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.procs[id]
}

// reserve claims id for a process being started.
func (t *procTable) reserve(p *process) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gone {
		return errInvalidRequest("session is shutting down")
	}
	if _, ok := t.procs[p.id]; ok {
		return errInvalidRequest("process %s already exists", p.id)
	}
	if t.running >= t.maxProcs {
		return errTooMany("running processes in this session", t.maxProcs, "max-processes-per-session")
	}
	t.procs[p.id] = p
	t.running++
	return nil
}

// finished counts a reserved process as no longer running: it closed, or failed to start.
func (t *procTable) finished() {
	t.mu.Lock()
	t.running--
	t.mu.Unlock()
}

// isGone reports whether killAll ran.
func (t *procTable) isGone() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gone
}

// remove forgets p, if id still names it: a failed start, or the retention window ended.
func (t *procTable) remove(p *process) {
	t.mu.Lock()
	if t.procs[p.id] == p {
		delete(t.procs, p.id)
	}
	t.mu.Unlock()
	t.wd.record('-', p.childPid())
}

// killAll ends the session's processes: SIGKILL to every process group and the rest of
// every child's session (one listing, with the sweeps terminate queued), then a bounded wait
// for each to close; streams still open after that (a child that left its session holds
// them) are closed by force, and each process's goroutines are joined, so none outlives the
// session.
func (t *procTable) killAll() {
	t.mu.Lock()
	t.gone = true
	procs := make([]*process, 0, len(t.procs))
	for _, p := range t.procs {
		procs = append(procs, p)
	}
	t.procs = map[string]*process{}
	t.mu.Unlock()
	t.sweepAll(procs)
	stop := make(chan struct{})
	deadline := time.AfterFunc(killReapTimeout, func() { close(stop) })
	defer deadline.Stop()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-stop:
		}
		p.forceClose()
		p.join(stop)
		t.wd.record('-', p.childPid())
	}
}

// sweepAll kills procs' process groups and the rest of their sessions, with what the
// sweeper had queued, in one listing; the reapers wait for it.
func (t *procTable) sweepAll(procs []*process) {
	queued := t.sweeper.close()
	sweep := newSessionSweep()
	if queued != nil {
		sweep.sids = append(sweep.sids, queued.sids...)
	}
	for _, p := range procs {
		if sid := p.killForSweep(sweep); sid > 0 {
			sweep.sids = append(sweep.sids, sid)
		}
	}
	sweep.run()
	if queued != nil {
		close(queued.done)
	}
	t.sweeper.wait()
}

// startParams are the params of process/start (docs/protocol.md §6.4). Fields without omitempty
// are required.
type startParams struct {
	ProcessID string            `json:"processId"`
	Argv      []string          `json:"argv"`
	Cwd       string            `json:"cwd" uri:"path"`
	Env       map[string]string `json:"env"`
	TTY       bool              `json:"tty"`
	PipeStdin bool              `json:"pipeStdin,omitempty"`
	Arg0      *string           `json:"arg0"`
	EnvPolicy json.RawMessage   `json:"envPolicy,omitempty"`
	Sandbox   json.RawMessage   `json:"sandbox,omitempty"`
	Rows      *uint16           `json:"rows"` // extension: initial PTY size
	Cols      *uint16           `json:"cols"`
	// ShellSnapshot runs a login shell's script from a snapshot (proc_snapshot.go).
	ShellSnapshot *shellSnapshotParams `json:"shellSnapshot,omitempty"`
	// NetworkProxy starts the process's managed network proxy (proc_netproxy.go,
	// docs/network.md); ManagedNetwork is the sandbox side of it, and EnforceManagedNetwork
	// refuses a start that would leave the child without proxy variables.
	NetworkProxy          *networkProxyParams   `json:"networkProxy,omitempty"`
	ManagedNetwork        *managedNetworkParams `json:"managedNetwork,omitempty"`
	EnforceManagedNetwork defaultBool           `json:"enforceManagedNetwork,omitempty"`
}

// ptySize is the terminal size asked for, 24×80 where not given (or 0).
func (p *startParams) ptySize() (rows, cols uint16) {
	rows, cols = defaultPTYRows, defaultPTYCols
	if p.Rows != nil && *p.Rows > 0 {
		rows = *p.Rows
	}
	if p.Cols != nil && *p.Cols > 0 {
		cols = *p.Cols
	}
	return rows, cols
}

type startResult struct {
	ProcessID   string `json:"processId"`
	SandboxType string `json:"sandboxType"`
}

// processStart checks its params in the reference's order: what 0.169 rejects while
// decoding (the cwd URI's syntax, envPolicy, sandbox), then an empty argv, then the shell
// snapshot, then a cwd this host cannot use. It answers on the reader, unless a shell
// snapshot must be captured first: then the launch waits for it off the reader.
func (c *call) processStart(p *startParams) (startResult, error) {
	cwd, cwdErr := parsePath(p.Cwd)
	if pe, ok := cwdErr.(*pathError); cwdErr != nil && (!ok || !pe.atUse) {
		return startResult{}, errInvalidParams("%s", cwdErr)
	}
	sandbox, err := c.parseProcessSandbox(p.Sandbox, c.srv.cfg.runManagedUnsandboxed)
	if err != nil {
		return startResult{}, err
	}
	policy, err := parseEnvPolicy(p.EnvPolicy)
	if err != nil {
		return startResult{}, err
	}
	if err := checkNetworkProxyRequest(p, sandbox, c.srv.cfg.netproxy.transparentTCP); err != nil {
		return startResult{}, err
	}
	if len(p.Argv) == 0 {
		return startResult{}, errInvalidParams("argv must not be empty")
	}
	if err := p.ShellSnapshot.check(p.Argv); err != nil {
		return startResult{}, err
	}
	if cwdErr != nil {
		return startResult{}, errInvalidParams("cwd URI `%s` is not valid on this exec-server host: %s", p.Cwd, cwdErr)
	}
	table := c.procs()
	proc := newProcess(table, p.ProcessID, p.TTY, c.srv.cfg.retention)
	if err := table.reserve(proc); err != nil {
		return startResult{}, err
	}
	rows, cols := p.ptySize()
	var route *proxyRoute
	err = checkNoNUL(p)
	if err == nil {
		// Before the spec: its variables go into the child's environment. Set before spawn
		// and read-only afterwards; launch closes it on a failure, post when it closes.
		proc.netProxy, route, err = c.startProcessNetProxy(p, sandbox)
	}
	var spec *launchSpec
	if err == nil {
		var proxyEnv map[string]string
		if proc.netProxy != nil {
			proxyEnv = proc.netProxy.env()
		}
		spec, err = newLaunchSpec(p, cwd, policy, c.srv.envInfo, rows, cols, proxyEnv)
	}
	if err == nil {
		// The route is planned against the final environment, with the sandbox
		// (applySandbox); masking reads it first: a routed start is a boundary (maskExposure).
		spec.route = route
		err = c.maskLaunch(p, spec, proc.netProxy, sandbox) // its final environment (proc_mask.go)
	}
	if err == nil && p.ShellSnapshot.applies(p.Argv) {
		host := shellSnapshotEnv{sandbox: c.srv.sandbox, watchdog: table.wd}
		if wait := table.snapshots.prepare(spec, p, sandbox, policy, host); wait != nil {
			laterInLane(c, processLane(p.ProcessID), func(context.Context) (startResult, error) {
				wait()
				res, err := c.launch(table, proc, spec, sandbox, nil)
				return res, maskStartError(p, err)
			}).mustFinish()
			return startResult{}, nil
		}
	}
	res, err := c.launch(table, proc, spec, sandbox, err)
	return res, maskStartError(p, err) // no real value in a masked start's error (proc_mask.go)
}

// launch confines and spawns a reserved process, or releases it when err (or either step)
// failed.
func (c *call) launch(table *procTable, proc *process, spec *launchSpec, sandbox *processSandbox, err error) (startResult, error) {
	sandboxType := ""
	if err == nil {
		sandboxType, err = applySandbox(c.srv.sandbox, spec, sandbox)
	}
	if err == nil {
		proc.sandboxType = sandboxType // before spawn starts the reaper, which reads it
		err = proc.spawn(spec)
	}
	if err != nil {
		proc.netProxy.close()
		table.remove(proc)
		table.finished()
		return startResult{}, err
	}
	if table.isGone() { // killAll ran while this process was spawning
		proc.killForShutdown()
		return startResult{}, errInvalidRequest("session is shutting down")
	}
	if proc.killedBeforeStart() {
		proc.kill() // process/terminate came while it was starting: it ends now (137)
	}
	return startResult{ProcessID: proc.id, SandboxType: sandboxType}, nil
}

// readParams are the params of process/read (docs/protocol.md §6.5).
type readParams struct {
	ProcessID string  `json:"processId"`
	AfterSeq  *uint64 `json:"afterSeq"`
	MaxBytes  *uint64 `json:"maxBytes"`
	WaitMs    *uint64 `json:"waitMs"`
}

// processRead answers at once when it can; a long poll waits on its own goroutine, so it never
// delays the connection's other requests.
func (c *call) processRead(p *readParams) (rawJSON, error) {
	proc := c.procs().get(p.ProcessID)
	if proc == nil {
		return nil, errInvalidRequest("unknown process id %s", p.ProcessID)
	}
	var after uint64
	if p.AfterSeq != nil {
		after = *p.AfterSeq
	}
	res, wake := proc.read(after, p.MaxBytes)
	if wake == nil || p.WaitMs == nil || *p.WaitMs == 0 {
		return rawJSON(res), nil
	}
	deadline := time.Now().Add(time.Duration(min(*p.WaitMs, uint64(365*24*time.Hour/time.Millisecond))) * time.Millisecond)
	var w *work
	w = later(c, poll, func(ctx context.Context) (rawJSON, error) {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		for {
			final := false
			select {
			case <-wake:
			case <-timer.C:
				final = true
			case <-ctx.Done():
				return nil, errInternal("connection closed")
			}
			// The answer is built and queued in its turn (scheduler.replyTurn).
			release, err := c.sched.replyTurn(ctx)
			if err != nil {
				return nil, errInternal("connection closed")
			}
			res, next := proc.read(after, p.MaxBytes)
			if final || next == nil {
				w.afterReply = release
				return rawJSON(res), nil
			}
			release()
			wake = next
		}
	}).orNow(rawJSON(res))
	return nil, nil
}

// writeParams are the params of process/write (docs/protocol.md §6.6).
type writeParams struct {
	ProcessID string      `json:"processId"`
	Chunk     base64Bytes `json:"chunk"`
	WriteID   string      `json:"writeId"`
}

type statusResult struct {
	Status string `json:"status"`
}

// processWrite queues bytes for the child's stdin; it never waits for the child to read them.
func (c *call) processWrite(p *writeParams) (statusResult, error) {
	if p.WriteID == "" {
		return statusResult{}, errInvalidParams("writeId must not be empty")
	}
	proc := c.procs().get(p.ProcessID)
	if proc == nil {
		return statusResult{"unknownProcess"}, nil
	}
	status, err := proc.write(p.WriteID, p.Chunk)
	if err != nil {
		return statusResult{}, err
	}
	return statusResult{status}, nil
}

// signalParams are the params of process/signal (docs/protocol.md §6.8).
type signalParams struct {
	ProcessID string     `json:"processId"`
	Signal    signalName `json:"signal"`
}

// signalName is process/signal's enum, whose one variant is "interrupt". It is decoded with
// the other params, so a bad one is refused before the lifecycle gate, in the words of the
// reference's enum decoder: "interrupt" or {"interrupt":null}.
type signalName struct{}

func (signalName) decodesNull() {}

func (s *signalName) UnmarshalJSON(raw []byte) error { return s.decodeRawJSON(raw) }
func (signalName) MarshalJSON() ([]byte, error)      { return []byte(`"interrupt"`), nil }

func (signalName) decodeRawJSON(raw []byte) error {
	const want = "`interrupt`"
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return errInvalidParams("invalid JSON for field `signal`")
		}
		if s != "interrupt" {
			return errInvalidParams("unknown variant `%s`, expected %s", s, want)
		}
		return nil
	case '{':
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return errInvalidParams("invalid JSON for field `signal`")
		}
		if len(m) != 1 {
			return errInvalidParams("invalid value: map, expected map with a single key")
		}
		for k, v := range m {
			if k != "interrupt" {
				return errInvalidParams("unknown variant `%s`, expected %s", k, want)
			}
			if string(v) != "null" {
				return errInvalidParams("invalid type: %s, expected unit", enumKind(v))
			}
		}
		return nil
	}
	return errInvalidParams("invalid type: %s, expected string or map", enumKind(raw))
}

// enumKind names a JSON value's type as the reference's enum decoder does: numbers without
// their value.
func enumKind(raw []byte) string {
	if k := jsonKind(raw); !strings.HasPrefix(k, "integer") {
		return k
	}
	return "number"
}

func (c *call) processSignal(p *signalParams) (emptyResult, error) {
	if proc := c.procs().get(p.ProcessID); proc != nil {
		if err := proc.interrupt(); err != nil {
			return emptyResult{}, errInternal("failed to signal process: %v", err)
		}
	}
	return emptyResult{}, nil
}

// idParams are the params of the methods that take only a process id.
type idParams struct {
	ProcessID string `json:"processId"`
}

type terminateResult struct {
	Running bool `json:"running"`
}

// processTerminate kills the process group at once (docs/protocol.md §6.9): no SIGTERM, no
// grace period. The rest of the child's session is killed in the background, right after
// (sessionSweeper).
func (c *call) processTerminate(p *idParams) (terminateResult, error) {
	proc := c.procs().get(p.ProcessID)
	if proc == nil {
		return terminateResult{false}, nil
	}
	return terminateResult{proc.kill()}, nil
}

// resizeParams are the params of the process/resize extension.
type resizeParams struct {
	ProcessID string `json:"processId"`
	Rows      uint16 `json:"rows"`
	Cols      uint16 `json:"cols"`
}

func (c *call) processResize(p *resizeParams) (emptyResult, error) {
	if p.Rows == 0 || p.Cols == 0 {
		return emptyResult{}, errInvalidParams("rows and cols must be at least 1")
	}
	proc := c.procs().get(p.ProcessID)
	if proc == nil {
		return emptyResult{}, errInvalidRequest("unknown process id %s", p.ProcessID)
	}
	if !proc.tty {
		return emptyResult{}, errInvalidParams("process %s has no PTY to resize", p.ProcessID)
	}
	if err := proc.resize(p.Rows, p.Cols); err != nil {
		return emptyResult{}, errInternal("process/resize %s: %v", p.ProcessID, err)
	}
	return emptyResult{}, nil
}

// processCloseStdin closes a pipeStdin child's stdin once the queued writes are written, so
// the child reads EOF (docs/protocol.md §6.7).
func (c *call) processCloseStdin(p *idParams) (statusResult, error) {
	proc := c.procs().get(p.ProcessID)
	if proc == nil {
		return statusResult{"unknownProcess"}, nil
	}
	if proc.tty {
		return statusResult{}, errInvalidParams("process %s has a PTY: write the terminal's EOF character (\"\\u0004\") instead", p.ProcessID)
	}
	return statusResult{proc.closeStdin()}, nil
}
