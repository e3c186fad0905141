package main

// Following processes through their notifications (protocol: process/output, process/exited,
// process/closed), so that a check awaits the event it needs instead of polling for it.
// Notifications may arrive before the process/start response, so a process is watched before
// it is started.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// watcher follows the processes of one or more connections.
type watcher struct {
	keepOutput bool // keep each watched process's output (decoded): for waitOutput

	mu    sync.Mutex
	procs map[string]*watched
}

// watched is one process as its notifications tell it.
type watched struct {
	out     []byte
	closed  chan struct{} // closed by process/closed
	changed chan struct{} // closed and replaced at every event
}

func newWatcher(keepOutput bool) *watcher {
	return &watcher{keepOutput: keepOutput, procs: map[string]*watched{}}
}

// watch starts following process id; call it before process/start.
func (w *watcher) watch(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.procs[id] = &watched{closed: make(chan struct{}), changed: make(chan struct{})}
}

// forget stops following id, so a long churn does not grow the table.
func (w *watcher) forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.procs, id)
}

// handle is the connection's noteHandler.
func (w *watcher) handle(method string, params []byte) {
	id := noteProcessID(params)
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.procs[id]
	if p == nil {
		return // not watched: skipped without decoding (the flood's /dev/zero)
	}
	switch method {
	case "process/output":
		if w.keepOutput {
			var n struct {
				Chunk []byte `json:"chunk"`
			}
			if json.Unmarshal(params, &n) == nil {
				p.out = append(p.out, n.Chunk...)
			}
		}
	case "process/closed":
		select {
		case <-p.closed:
		default:
			close(p.closed)
		}
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// waitClosed waits for process/closed of id.
func (w *watcher) waitClosed(ctx context.Context, id string) error {
	w.mu.Lock()
	p := w.procs[id]
	w.mu.Unlock()
	if p == nil {
		return fmt.Errorf("process %s is not watched", id)
	}
	select {
	case <-p.closed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("process %s did not close: %w", id, ctx.Err())
	}
}

// waitOutput waits until the output of id holds want (keepOutput must be set).
func (w *watcher) waitOutput(ctx context.Context, id string, want []byte) error {
	for {
		w.mu.Lock()
		p := w.procs[id]
		if p == nil {
			w.mu.Unlock()
			return fmt.Errorf("process %s is not watched", id)
		}
		found, changed, closed := bytes.Contains(p.out, want), p.changed, p.closed
		out := string(p.out)
		w.mu.Unlock()
		if found {
			return nil
		}
		select {
		case <-changed:
		case <-closed:
			return fmt.Errorf("process %s closed without printing %q; output %.300q", id, want, out)
		case <-ctx.Done():
			return fmt.Errorf("process %s did not print %q: %w; output %.300q", id, want, ctx.Err(), out)
		}
	}
}

// noteProcessID is the processId of a process notification: its params begin with it. Other
// layouts are decoded.
func noteProcessID(params []byte) string {
	const head = `{"processId":"`
	if rest, ok := bytes.CutPrefix(params, []byte(head)); ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return string(rest[:i])
		}
	}
	var n struct {
		ProcessID string `json:"processId"`
	}
	json.Unmarshal(params, &n)
	return n.ProcessID
}

// startParams are process/start's params for argv, with exactly env as the environment.
func startParams(id string, argv []string, tty bool, env map[string]string) map[string]any {
	return map[string]any{"processId": id, "argv": argv, "cwd": "/tmp", "env": env, "tty": tty}
}

// childEnv is the environment a check's processes get: enough to run a shell, and the
// check's marker.
func childEnv(mark string) map[string]string {
	return map[string]string{
		"PATH":    "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
		"HOME":    "/tmp",
		"TERM":    "dumb",
		markerVar: mark,
	}
}
