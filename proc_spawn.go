package main

// The OS side of starting, reaping and killing children (docs/protocol.md §6.1, §6.3); the
// process that owns a child, its readers and its reaper are in process.go.
//
// Every child leads a new session and process group (setsid: pid == pgid == sid); a PTY child
// has the PTY as its controlling terminal. Its streams are read from before process/start
// returns (docs/protocol.md §6.2). One goroutine per stream reads, one reaps; all end once the
// child and everything holding its streams are gone, or when killAll closes the streams; the
// process counts them, and killAll joins them (process.join).
//
// Process groups are signalled by number, and a number can be reused once the group is empty.
// The leader's pid holds the number until it is reaped, so signals go out freely until then;
// afterwards a group is signalled only while no process has the leader's pid (one that has it
// now is a stranger that reused the number, so our group is empty). Every kill is a SIGKILL to
// the whole group, never a SIGTERM grace (docs/protocol.md §6.3), and then to the rest of the
// child's session (killSessions): an interactive shell in a PTY puts each job in a process
// group of its own, and those jobs would otherwise outlive the shell, hold the terminal open
// (so the process never closes) and outlive the server. A pipe-mode child can do the same
// without a terminal (setpgid: `set -m` in sh, make's jobs), so both modes are swept.
//
// Finding a session's members means listing every process on the host (/proc), far slower
// than a group kill, so process/terminate does not wait for it: it kills the group, answers,
// and queues the session for the table's sweeper (sessionSweeper), which serves every
// terminate queued while it scans with one listing. The session's number must still be the
// child's when the sweep runs: the reaper leaves the leader unreaped until then, so its pid,
// hence the number, cannot be reused (where the reaper cannot wait without reaping, darwin,
// and for a leader already reaped, the sweep runs before the answer instead).

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// spawnedChild is a child that runs, as process.spawn hands it to its process (evSpawned).
type spawnedChild struct {
	proc   *os.Process
	stdin  *stdinWriter  // nil when the child's stdin is /dev/null
	master *os.File      // the PTY master (tty only)
	outs   []*outStream  // our read ends
	stage  *sandboxStage // the sandbox stage the child is, if confined
}

// startChild starts spec: the child's descriptors, the fork (or a warm stage's), and the
// sandbox stage's report that the command runs.
func startChild(spec *launchSpec) (*spawnedChild, *childExit, error) {
	cio, err := openChildIO(spec)
	if err != nil {
		return nil, nil, err
	}
	proc, exit, warm := spec.stage.startWarm(spec.env, cio.files) // one forked ahead (sandbox_pool_linux.go)
	if !warm {
		attr := &os.ProcAttr{Dir: spec.dir, Env: spec.env, Files: cio.files, Sys: childSysProcAttr(spec.tty)}
		if err := spec.stage.prepare(attr, spec); err != nil {
			cio.closeChildEnds()
			cio.closeOurEnds()
			spec.stage.closeOurEnds()
			return nil, nil, errSpawn(spawnFailed, "%s", err)
		}
		proc, exit, err = startProcess(spec.path, spec.argv, attr)
		if err == nil {
			spec.stage.started(proc.Pid) // before it is sent its configuration (peer_linux.go)
		}
	}
	cio.closeChildEnds()
	spec.stage.closeChildEnds()
	if err != nil {
		cio.closeOurEnds()
		spec.stage.closeOurEnds()
		return nil, nil, errSpawnOS(err)
	}
	if err := spec.stage.await(); err != nil { // the sandbox stage could not start the command
		exit.wait(proc.Pid) // it exits once it has said why (Wait on a non-blocking pidfd would not wait)
		proc.Wait()
		exit.close()
		cio.closeOurEnds()
		spec.stage.exited()
		return nil, nil, withSpawnKind(err)
	}
	return &spawnedChild{proc: proc, stdin: cio.stdin, master: cio.master, outs: cio.outs, stage: spec.stage}, exit, nil
}

// childIO is the descriptors of a child being started: its 0, 1 and 2, and our ends.
type childIO struct {
	files     []*os.File   // the child's 0, 1, 2
	childEnds []*os.File   // the child's descriptors as this process holds them
	outs      []*outStream // our read ends
	stdin     *stdinWriter // nil when the child's stdin is /dev/null
	master    *os.File     // the PTY master (tty only)
}

// openChildIO makes a child's descriptors: a PTY for all three, or a stdin (/dev/null, or a
// pipe with pipeStdin) and a pipe each for stdout and stderr.
func openChildIO(spec *launchSpec) (*childIO, error) {
	if spec.tty {
		master, slave, err := openPTY(spec.rows, spec.cols)
		if err != nil {
			return nil, errSpawn(spawnKindOf(err), "open a PTY: %s", spawnErrorText(err))
		}
		return &childIO{
			files:     []*os.File{slave, slave, slave},
			childEnds: []*os.File{slave},
			outs:      []*outStream{{f: master, kind: streamPTY}},
			stdin:     &stdinWriter{f: master},
			master:    master,
		}, nil
	}
	cio := &childIO{}
	fail := func(err error) (*childIO, error) {
		cio.closeChildEnds()
		cio.closeOurEnds()
		return nil, errSpawnOS(err)
	}
	var (
		in, w *os.File
		err   error
	)
	if spec.pipeStdin {
		in, w, err = os.Pipe()
		if err == nil {
			cio.stdin = &stdinWriter{f: w, owns: true}
		}
	} else {
		in, err = os.Open(os.DevNull)
	}
	if err != nil {
		return fail(err)
	}
	cio.childEnds = append(cio.childEnds, in)
	for _, kind := range []streamKind{streamStdout, streamStderr} {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		cio.childEnds = append(cio.childEnds, w)
		cio.outs = append(cio.outs, &outStream{f: r, kind: kind})
	}
	cio.files = cio.childEnds // stdin, stdout's write end, stderr's write end
	return cio, nil
}

// closeChildEnds closes this process's copies of the child's descriptors, once the child has
// its own (or failed to start).
func (c *childIO) closeChildEnds() {
	for _, f := range c.childEnds {
		f.Close()
	}
}

// closeOurEnds closes our ends of a child that did not start.
func (c *childIO) closeOurEnds() {
	for _, s := range c.outs {
		s.f.Close()
	}
	if c.stdin != nil && c.stdin.owns {
		c.stdin.f.Close()
	}
}

// exitCodeOf is the wire exit code: the status, or 128+N for a death by signal N (both modes;
// 0.169 reports 1 for a PTY child, a documented deviation).
func exitCodeOf(st *os.ProcessState, err error) int {
	if err != nil || st == nil {
		return -1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// signalGroup sends sig to process group pid, unless the number may have been reused, and
// reports whether it did: once the leader is reaped, the group is signalled only while no
// process has the leader's pid (one that has it now is a stranger that reused the number, so
// the group is empty).
func signalGroup(pid int, reaped bool, sig syscall.Signal) bool {
	if pid <= 0 {
		return false
	}
	if reaped && !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return false
	}
	syscall.Kill(-pid, sig)
	return true
}

// sessionSweeper kills, off the request path, what remains of the sessions of the children
// that process/terminate killed. One goroutine runs while sweeps are queued and ends when
// none are; each of its /proc listings serves every session queued before it began. killAll
// closes it: it takes over what is queued and waits for the goroutine to end.
type sessionSweeper struct {
	mu      sync.Mutex
	next    *sessionSweep // collecting sessions for the next listing; nil when none is queued
	running bool          // the goroutine is alive
	closed  bool          // killAll ran: sweeps run synchronously from now on
	wg      sync.WaitGroup
}

// sessionSweep is the sessions one listing kills; done is closed once it has.
type sessionSweep struct {
	sids []int
	done chan struct{}
}

func newSessionSweep() *sessionSweep { return &sessionSweep{done: make(chan struct{})} }

// run kills what is left of the sessions, then lets the reapers waiting on it go on.
func (s *sessionSweep) run() {
	killSessions(s.sids)
	close(s.done)
}

// queue adds session sid to the next sweep and returns that sweep, or nil once the sweeper
// is closed.
func (w *sessionSweeper) queue(sid int) *sessionSweep {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	if w.next == nil {
		w.next = newSessionSweep()
	}
	w.next.sids = append(w.next.sids, sid)
	if !w.running {
		w.running = true
		w.wg.Add(1)
		go w.loop()
	}
	return w.next
}

// loop runs the queued sweeps one after another and ends when none is queued.
func (w *sessionSweeper) loop() {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		sweep := w.next
		w.next = nil
		if sweep == nil {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		sweep.run()
	}
}

// close stops queueing and returns what was queued and not yet begun (nil when nothing),
// for the caller to sweep; wait then waits for a sweep in progress.
func (w *sessionSweeper) close() *sessionSweep {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	next := w.next
	w.next = nil
	return next
}

func (w *sessionSweeper) wait() { w.wg.Wait() }

// killSessionPasses bounds the scans of one killSessions. A member may fork while a scan
// runs; the next scan finds and kills the child. A SIGKILLed process forks no more, so the
// scans end once one finds nobody new.
const killSessionPasses = 8

// killSessions sends SIGKILL to every process in the sessions sids, whatever its process
// group. A session's number stays allocated while the session has members, so every member
// found belongs to the child that led it, as long as the caller made sure the leader's pid
// was not reused (signalGroupLocked, and the reaper waiting for queued sweeps).
func killSessions(sids []int) {
	if len(sids) == 0 {
		return
	}
	want := make(map[int]bool, len(sids))
	for _, sid := range sids {
		want[sid] = true
	}
	killed := map[int]bool{}
	for range killSessionPasses {
		found := false
		sessionMembers(want, func(pid int) {
			if !killed[pid] {
				killed[pid], found = true, true
				syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		if !found {
			return
		}
	}
}
