package main

// Starting, reaping and killing children (protocol.md §4.1, §4.5; sandbox.md §5).
//
// Every child leads a new session and process group (setsid: pid == pgid == sid); a PTY
// child has the PTY as its controlling terminal. Its streams are read from before
// process/start returns (lessons R1). One goroutine per stream reads, one reaps; all end once
// the child and everything holding its streams are gone, or when killAll closes the streams.
//
// Process groups are signalled by number, and a number can be reused once the group is
// empty. The leader's pid holds the number until it is reaped, so signals go out freely
// until then; afterwards a group is signalled only while no process has the leader's pid
// (one that has it now is a stranger that reused the number, so our group is empty). Every
// kill is a SIGKILL to the whole group, never a SIGTERM grace (protocol.md §4.5).

import (
	"errors"
	"os"
	"syscall"
)

// spawn starts spec as p's child and starts reading its streams.
func (p *process) spawn(spec *launchSpec) error {
	var (
		files     []*os.File // the child's 0, 1, 2
		childEnds []*os.File // ours to close once the child has them
		readEnds  []*os.File
		kinds     []streamKind
		stdin     *stdinWriter
	)
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	if spec.tty {
		master, slave, err := openPTY(spec.rows, spec.cols)
		if err != nil {
			return errInternal("open a PTY: %s", spawnErrorText(err))
		}
		files = []*os.File{slave, slave, slave}
		childEnds = []*os.File{slave}
		readEnds, kinds = []*os.File{master}, []streamKind{streamPTY}
		stdin = &stdinWriter{f: master}
	} else {
		var in *os.File
		if spec.pipeStdin {
			r, w, err := os.Pipe()
			if err != nil {
				return errInternal("%s", spawnErrorText(err))
			}
			in, stdin = r, &stdinWriter{f: w, owns: true}
		} else {
			f, err := os.Open(os.DevNull)
			if err != nil {
				return errInternal("%s", spawnErrorText(err))
			}
			in = f
		}
		childEnds = append(childEnds, in)
		outR, outW, err := os.Pipe()
		if err != nil {
			closeAll(childEnds)
			return errInternal("%s", spawnErrorText(err))
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			closeAll(append(childEnds, outR, outW))
			return errInternal("%s", spawnErrorText(err))
		}
		files = []*os.File{in, outW, errW}
		childEnds = append(childEnds, outW, errW)
		readEnds, kinds = []*os.File{outR, errR}, []streamKind{streamStdout, streamStderr}
	}
	attr := &os.ProcAttr{Dir: spec.dir, Env: spec.env, Files: files, Sys: childSysProcAttr(spec.tty)}
	proc, exit, err := startProcess(spec.path, spec.argv, attr)
	closeAll(childEnds)
	if err != nil {
		closeAll(readEnds)
		if stdin != nil && stdin.owns {
			stdin.f.Close()
		}
		return errInternal("%s", spawnErrorText(err))
	}
	p.mu.Lock()
	p.pid, p.osProc, p.stdin = proc.Pid, proc, stdin
	for i, f := range readEnds {
		p.outs = append(p.outs, &outStream{f: f, kind: kinds[i]})
	}
	outs := p.outs
	if spec.tty {
		p.master = readEnds[0]
	}
	p.open = len(readEnds)
	p.started = true
	p.mu.Unlock()
	for _, s := range outs {
		go p.readStream(s)
	}
	go p.reap(exit)
	return nil
}

// reap collects the exit status and reports it. Where the exit can be awaited without
// reaping, the reap itself happens under the lock, so a group signal never races with the
// pid being freed; elsewhere (darwin) a microseconds-wide window remains.
func (p *process) reap(exit *childExit) {
	var (
		st  *os.ProcessState
		err error
	)
	if exit.wait(p.pid) {
		p.mu.Lock()
		st, err = p.osProc.Wait() // at once: the child is a zombie
		p.reaped = true
		p.mu.Unlock()
	} else {
		st, err = p.osProc.Wait()
		p.mu.Lock()
		p.reaped = true
		p.mu.Unlock()
	}
	exit.close()
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

// signalGroupLocked sends sig to p's process group, unless the number may have been reused.
func (p *process) signalGroupLocked(sig syscall.Signal) {
	if p.pid <= 0 {
		return
	}
	if p.reaped && !errors.Is(syscall.Kill(p.pid, 0), syscall.ESRCH) {
		return
	}
	syscall.Kill(-p.pid, sig)
}

// kill sends SIGKILL to p's process group and reports whether p was still running. A process
// that exited but has not closed is killed too: what holds its streams is in its group. all
// (killAll) also kills the group of a closed process, whose background children may linger.
func (p *process) kill(all bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started {
		return false
	}
	if all && p.removal != nil {
		p.removal.Stop()
	}
	if !p.closed || all {
		p.signalGroupLocked(syscall.SIGKILL)
	}
	return !p.exited
}

// interrupt is process/signal interrupt: SIGINT to the process group; for a PTY, to the
// terminal's foreground process group, which is what ^C reaches.
func (p *process) interrupt() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started || p.exited {
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
	if !p.started || p.closed {
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
