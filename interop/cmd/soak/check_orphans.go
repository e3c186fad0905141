package main

// Check "orphans": the server is killed with SIGKILL while its children have left
// grandchildren of every kind behind: a plain child, a `(sleep &)` reparented to init, a
// `set -m` job in a process group of its own, a `nohup`ed command, an interactive bash's jobs
// on a PTY, and a sandboxed command's background job (pid namespace). Nothing of them may
// outlive the server: PDEATHSIG ends the children, the watchdog what they left, the pid
// namespace the sandboxed tree. Every process carries the check's marker in its environment,
// so it is found wherever it was re-parented.
//
// The sandboxed command is started on a connection of its own and its start is not awaited:
// the server answers a sandboxed process/start once the stage's status pipe reaches EOF, and
// as long as the stage passes that pipe on to the command, the answer (and every request
// behind it on that connection) waits for the command to end. Its grandchildren are found in
// /proc instead, and the line says whether the answer came.
//
// With -probe-gaps an informational line shows a known gap (check_gaps.go shows another): a
// grandchild that calls setsid(2) leaves the child's session and process group, and neither
// PDEATHSIG nor the watchdog reaches it.

import (
	"context"
	"encoding/base64"
	"fmt"
	"syscall"
	"time"
)

// Bounds of the orphans check.
const (
	orphansKilledWithin = 10 * time.Second
	orphansMinBefore    = 11 // marked processes before the kill: 1+2+2+2+4, the sandboxed ones not counted
	orphansDeadline     = 2 * time.Minute
	orphansReady        = "ready"
	// orphansStartWait bounds the start of one maker, until its grandchildren are made.
	orphansStartWait = 15 * time.Second
)

// orphanMaker is one way of leaving a grandchild behind.
type orphanMaker struct {
	id   string
	argv []string
	tty  bool
	// input is typed into the PTY once the shell runs.
	input string
}

var orphanMakers = []orphanMaker{
	{id: "plain", argv: []string{"sh", "-c", "echo " + orphansReady + "; exec sleep 300"}},
	{id: "subshell", argv: []string{"sh", "-c", "(sleep 300 &); echo " + orphansReady + "; exec sleep 300"}},
	{id: "set-m", argv: []string{"bash", "-c", "set -m; sleep 300 & echo " + orphansReady + "; wait"}},
	{id: "nohup", argv: []string{"sh", "-c", "nohup sleep 300 >/dev/null 2>&1 & echo " + orphansReady + "; exec sleep 300"}},
	// The typed line is echoed by the terminal; only the command's output says "ready".
	{id: "pty-jobs", argv: []string{"bash", "--norc", "--noprofile", "-i"}, tty: true,
		input: "sleep 300 &\nsleep 301 &\n(sleep 302 &)\necho rea''dy\n"},
}

// sandboxedMaker leaves a background job inside a sandbox's pid namespace.
var sandboxedMaker = orphanMaker{id: "sandboxed", argv: []string{"sh", "-c", "(sleep 300 &); exec sleep 300"}}

// sandboxedSleeps is how many sleeps sandboxedMaker makes.
const sandboxedSleeps = 2

// setsidMaker is the known gap's probe.
var setsidMaker = orphanMaker{id: "setsid", argv: []string{"sh", "-c", "setsid sleep 300 & echo " + orphansReady + "; exec sleep 300"}}

func checkOrphans(ctx context.Context, cfg *config) []*result {
	r := &result{name: "kill -9 with grandchildren"}
	probe := &result{name: "kill -9, a grandchild that calls setsid (known gap, not checked)", infoOnly: true}
	out := []*result{r}
	if cfg.probeGaps {
		out = append(out, probe)
	}
	ctx, cancel := context.WithTimeout(ctx, orphansDeadline)
	defer cancel()
	mark, sbMark, probeMark := newMark("orphans"), newMark("sandboxed"), newMark("setsid")
	defer killMarked(mark)
	defer killMarked(sbMark)
	defer killMarked(probeMark)
	srv, err := startServer(ctx, cfg.bin)
	if err != nil {
		r.err = err
		return out
	}
	defer func() {
		if srv.alive() {
			srv.stop()
		}
	}()
	w := newWatcher(true)
	c, _, err := connect(ctx, srv.url, w.handle, "")
	if err != nil {
		r.err = err
		return out
	}
	defer c.ws.Close()

	makers := orphanMakers
	if cfg.probeGaps {
		makers = append(makers[:len(makers):len(makers)], setsidMaker)
	}
	for _, m := range makers {
		env := childEnv(mark)
		if m.id == setsidMaker.id {
			env = childEnv(probeMark)
		}
		if err := m.start(ctx, c, w, env); err != nil {
			r.err = fmt.Errorf("%s: %w", m.id, err)
			return out
		}
	}
	sc, startAnswer, err := startSandboxed(ctx, srv, sbMark)
	if sc != nil {
		defer sc.ws.Close()
	}
	if err != nil {
		r.notes = append(r.notes, "sandboxed: skipped ("+err.Error()+")")
	}
	before, err := marked(mark)
	if err != nil {
		r.err = err
		return out
	}
	sbBefore, _ := marked(sbMark)
	probeBefore, _ := marked(probeMark)
	watchdog := findWatchdog(srv.pid)

	srv.kill()
	var left, probeLeft []procStat
	ok, took := poll(orphansKilledWithin, func() bool {
		left, _ = marked(mark)
		sbLeft, _ := marked(sbMark)
		left = append(left, sbLeft...)
		return len(left) == 0 && !alive(watchdog)
	})
	probeLeft, _ = marked(probeMark)
	watchdogLeft := 0
	if watchdog == 0 || alive(watchdog) {
		watchdogLeft = 1 // none was found, or it outstayed its job
	}
	r.add(
		atLeast("processes before", len(before), orphansMinBefore),
		info("sandboxed before", float64(len(sbBefore)), ""),
		count("survivors", len(left), 0),
		count("watchdog left", watchdogLeft, 0),
		info("gone in", took.Round(10*time.Millisecond).Seconds(), "s"),
	)
	if !ok {
		r.notes = append(r.notes, fmt.Sprintf("still alive after %v: %s", orphansKilledWithin, describe(left)))
	}
	if startAnswer != nil {
		select {
		case <-startAnswer:
		default:
			r.notes = append(r.notes, "the sandboxed process/start was still unanswered at the kill")
		}
	}
	probe.add(info("processes before", float64(len(probeBefore)), ""), info("survivors", float64(len(probeLeft)), ""))
	if len(probeLeft) > 0 {
		probe.notes = append(probe.notes, describe(probeLeft))
	}
	return out
}

// start starts the maker's process and waits until it has made its grandchildren.
func (m orphanMaker) start(ctx context.Context, c *client, w *watcher, env map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, orphansStartWait)
	defer cancel()
	params := startParams(m.id, m.argv, m.tty, env)
	w.watch(m.id)
	if _, err := c.call(ctx, "process/start", params); err != nil {
		return err
	}
	if m.input != "" {
		_, err := c.call(ctx, "process/write", map[string]any{
			"processId": m.id, "writeId": "w1", "chunk": base64.StdEncoding.EncodeToString([]byte(m.input)),
		})
		if err != nil {
			return err
		}
	}
	return w.waitOutput(ctx, m.id, []byte(orphansReady))
}

// startSandboxed starts sandboxedMaker on a connection of its own, without waiting for the
// answer (see the top of this file), and waits until /proc shows its sleeps. It returns the
// connection and the channel the answer will come on.
func startSandboxed(ctx context.Context, srv *server, mark string) (*client, <-chan reply, error) {
	c, _, err := connect(ctx, srv.url, nil, "")
	if err != nil {
		return nil, nil, err
	}
	params := startParams(sandboxedMaker.id, sandboxedMaker.argv, false, childEnv(mark))
	params["sandbox"] = workspaceWriteSandbox()
	answer, err := c.send("process/start", params)
	if err != nil {
		return c, nil, err
	}
	sleeps := 0
	ready, _ := poll(orphansStartWait, func() bool {
		procs, _ := marked(mark)
		sleeps = 0
		for _, p := range procs {
			if p.comm == "sleep" {
				sleeps++
			}
		}
		return sleeps >= sandboxedSleeps
	})
	select {
	case r := <-answer:
		if r.err != nil { // refused: no sandbox mechanism on this host
			return c, nil, r.err
		}
		ch := make(chan reply, 1)
		ch <- r
		answer = ch
	default:
	}
	if !ready {
		return c, answer, fmt.Errorf("%d of its %d sleeps started within %v", sleeps, sandboxedSleeps, orphansStartWait)
	}
	return c, answer, nil
}

// workspaceWriteSandbox is the sandbox Codex's workspace-write mode sends, for /tmp.
func workspaceWriteSandbox() map[string]any {
	special := func(kind, access string) map[string]any {
		return map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": kind}}, "access": access}
	}
	return map[string]any{
		"permissions": map[string]any{
			"type":        "managed",
			"network":     "restricted",
			"file_system": map[string]any{"type": "restricted", "entries": []any{special("root", "read"), special("current_working_directory", "write")}},
		},
		"windowsSandboxLevel": "disabled",
		"cwd":                 "file:///tmp",
	}
}

// killMarked kills whatever still carries mark: the check cleans up after itself, pass or
// fail.
func killMarked(mark string) {
	procs, _ := marked(mark)
	for _, p := range procs {
		syscall.Kill(p.pid, syscall.SIGKILL)
	}
}

// describe lists processes as pid(comm) ppid N.
func describe(ps []procStat) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += "; "
		}
		s += fmt.Sprintf("%d(%s) ppid %d", p.pid, p.comm, p.ppid)
	}
	return s
}
