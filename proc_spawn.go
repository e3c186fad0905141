package main

// Starting, reaping and killing children (docs/protocol.md §6.1, §6.3).
//
// Every child leads a new session and process group (setsid: pid == pgid == sid); a PTY child
// has the PTY as its controlling terminal. Its streams are read from before process/start
// returns (docs/protocol.md §6.2). One goroutine per stream reads, one reaps; all end once the
// child and everything holding its streams are gone, or when killAll closes the streams; the
// process counts them, and killAll joins them (join).
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

// spawn starts spec as p's child and starts reading its streams.
func (p *process) spawn(spec *launchSpec) error {
	cio, err := openChildIO(spec)
	if err != nil {
		return err
	}
	proc, exit, warm := spec.stage.startWarm(spec.env, cio.files) // one forked ahead (sandbox_pool_linux.go)
	if !warm {
		attr := &os.ProcAttr{Dir: spec.dir, Env: spec.env, Files: cio.files, Sys: childSysProcAttr(spec.tty)}
		if err := spec.stage.prepare(attr, spec); err != nil {
			cio.closeChildEnds()
			cio.closeOurEnds()
			spec.stage.closeOurEnds()
			return errSpawn(spawnFailed, "%s", err)
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
		return errSpawnOS(err)
	}
	if err := spec.stage.await(); err != nil { // the sandbox stage could not start the command
		exit.wait(proc.Pid) // it exits once it has said why (Wait on a non-blocking pidfd would not wait)
		proc.Wait()
		exit.close()
		cio.closeOurEnds()
		spec.stage.exited()
		return withSpawnKind(err)
	}
	p.mu.Lock()
	p.pid, p.osProc, p.stdin, p.master, p.outs = proc.Pid, proc, cio.stdin, cio.master, cio.outs
	p.stage = spec.stage
	p.stepLocked(lifeEvent{kind: evSpawned})
	p.table.wd.record('+', proc.Pid)
	p.live = len(cio.outs) + 1
	p.mu.Unlock()
	for _, s := range cio.outs {
		go p.readStream(s)
	}
	go p.reap(exit)
	return nil
}

// goroutineEnded is the last act of each of p's goroutines (its readers and its reaper); the
// last one lets join return.
func (p *process) goroutineEnded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live--; p.live == 0 && p.stopped != nil {
		close(p.stopped)
	}
}

// join waits until p's goroutines have ended, or stop is closed. The channel it waits on is
// made only here: most processes end without anyone joining them.
func (p *process) join(stop <-chan struct{}) {
	p.mu.Lock()
	if p.live == 0 {
		p.mu.Unlock()
		return
	}
	if p.stopped == nil {
		p.stopped = make(chan struct{})
	}
	stopped := p.stopped
	p.mu.Unlock()
	select {
	case <-stopped:
	case <-stop:
	}
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

// reap collects the exit status and reports it. Where the exit can be awaited without
// reaping, the reap itself happens under the lock, so a group signal never races with the
// pid being freed; elsewhere (darwin) a microseconds-wide window remains.
func (p *process) reap(exit *childExit) {
	defer p.goroutineEnded()
	var (
		st  *os.ProcessState
		err error
	)
	if exit.wait(p.pid) {
		p.mu.Lock()
		for p.sweep != nil { // the leader's pid keeps its session's number ours until the sweep
			sweep := p.sweep
			p.mu.Unlock()
			<-sweep
			p.mu.Lock()
			if p.sweep == sweep {
				p.sweep = nil
			}
		}
		st, err = p.osProc.Wait() // at once: the child is a zombie
		p.stepLocked(lifeEvent{kind: evReaped})
		p.mu.Unlock()
	} else {
		st, err = p.osProc.Wait()
		p.mu.Lock()
		p.stepLocked(lifeEvent{kind: evReaped})
		p.mu.Unlock()
	}
	exit.close()
	p.table.wd.record('r', p.pid)
	p.stage.exited()
	p.reportExit(exitCodeOf(st, err))
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

// signalGroupLocked sends sig to p's process group, unless the number may have been reused,
// and reports whether it did.
func (p *process) signalGroupLocked(sig syscall.Signal) bool {
	if p.pid <= 0 {
		return false
	}
	if p.phase.reaped() && !errors.Is(syscall.Kill(p.pid, 0), syscall.ESRCH) {
		return false
	}
	syscall.Kill(-p.pid, sig)
	return true
}

// kill is process/terminate: SIGKILL to p's process group at once, and to the rest of its
// session soon after (the table's sweeper). It reports whether p was still running. A
// process that has exited is left alone, as 0.169 leaves it: "running":false means nothing
// was killed, and a background child still holding its output streams goes on writing
// until it ends (or the session does).
func (p *process) kill() bool {
	p.mu.Lock()
	if p.phase.exited() {
		p.mu.Unlock()
		return false
	}
	if !p.phase.started() {
		// Not spawned yet (its start waits for its shell snapshot): it is killed as soon as
		// it runs (launch), and is running until then.
		p.killPending = true
		p.mu.Unlock()
		return true
	}
	return p.killLocked(false)
}

// killedBeforeStart reports whether process/terminate came before the process was spawned.
func (p *process) killedBeforeStart() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killPending
}

// killForShutdown kills p's group and the rest of its session even when p has exited: the
// session is over, so nothing it started may outlive it (a process that finished spawning
// after killAll ran, which found it not yet started).
func (p *process) killForShutdown() {
	p.mu.Lock()
	p.killLocked(true)
}

// killLocked is kill's work (all as for killGroupLocked); it unlocks p.mu.
func (p *process) killLocked(all bool) bool {
	running, sid := p.killGroupLocked(all)
	if sid > 0 && !p.phase.reaped() && reaperHoldsPid {
		if sweep := p.table.sweeper.queue(sid); sweep != nil {
			p.sweep, sid = sweep, 0
		}
	}
	p.mu.Unlock()
	if sid > 0 { // the leader is reaped, or the table is shutting down: sweep now
		killSessions([]int{sid})
	}
	return running
}

// killGroupLocked sends SIGKILL to p's process group; it returns whether p was still running
// and, when the group was signalled, the child's session id for killSessions (the leader's
// pid). all (killAll) also kills the group of a closed process, whose background children
// may linger, and ends its retention window.
func (p *process) killGroupLocked(all bool) (running bool, sid int) {
	if !p.phase.started() {
		return false, 0
	}
	if all && p.removal != nil {
		p.removal.Stop()
	}
	if (!p.phase.closed() || all) && p.signalGroupLocked(syscall.SIGKILL) {
		sid = p.pid
	}
	return !p.phase.exited(), sid
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

// queue adds session sid to the next sweep and returns that sweep's done channel, or nil
// once the sweeper is closed.
func (w *sessionSweeper) queue(sid int) chan struct{} {
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
	return w.next.done
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

// interrupt is process/signal interrupt: SIGINT to the process group; for a PTY, to the
// terminal's foreground process group, which is what ^C reaches.
func (p *process) interrupt() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.phase.started() || p.phase.exited() {
		return nil
	}
	if p.tty {
		if pgrp, err := ptyForeground(p.master); err == nil && pgrp > 0 {
			if err := syscall.Kill(-pgrp, syscall.SIGINT); err == nil || errors.Is(err, syscall.ESRCH) {
				return nil
			}
		}
	}
	p.signalGroupLocked(syscall.SIGINT)
	return nil
}

// resize sets the PTY's window size; the kernel sends SIGWINCH to its foreground group. A
// terminal that already closed has nothing to resize.
func (p *process) resize(rows, cols uint16) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.phase.started() || p.phase.closed() {
		return nil
	}
	if err := setPTYSize(p.master, rows, cols); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}

// forceClose closes p's streams and stdin: after killAll, nothing may keep a reader alive.
func (p *process) forceClose() {
	p.mu.Lock()
	outs, stdin := p.outs, p.stdin
	p.mu.Unlock()
	for _, s := range outs {
		s.f.Close()
	}
	if stdin != nil {
		stdin.shutdown()
	}
}
