package main

// A client for the real `codex app-server` over stdio: one JSON object per line, JSON-RPC
// without the "jsonrpc" member. Responses are matched to requests by id; notifications are
// kept in order so checks can wait for one; server->client requests (approvals) are answered.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// rpcMessage is any app-server message.
type rpcMessage struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("rpc error %d: %s", e.Code, e.Message) }

// appServer owns one `codex app-server` child process.
type appServer struct {
	log    *eventLog
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	done   chan struct{} // closed when stdout reaches EOF
	nextID int

	mu       sync.Mutex
	pending  map[string]chan rpcMessage
	notes    []rpcMessage
	noteCond chan struct{} // closed and replaced on each notification
	requests []string      // methods of server->client requests seen
}

// startAppServer runs `codex app-server` with env added to a minimal environment.
func startAppServer(log *eventLog, name, codex string, env []string, stderrPath string) (*appServer, error) {
	return startAppServerArgv(log, name, []string{codex, "app-server"}, env, stderrPath)
}

// startAppServerArgv runs argv, the app-server or a wrapper that ends by exec'ing it, with
// env added to a minimal environment.
func startAppServerArgv(log *eventLog, name string, argv, env []string, stderrPath string) (*appServer, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(baseEnv(), env...)
	cmd.SysProcAttr = childAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	errf, err := os.Create(stderrPath)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = errf
	if err := cmd.Start(); err != nil {
		errf.Close()
		return nil, fmt.Errorf("start app-server: %w", err)
	}
	errf.Close()
	a := &appServer{
		log: log, name: name, cmd: cmd, stdin: stdin, done: make(chan struct{}),
		pending: map[string]chan rpcMessage{}, noteCond: make(chan struct{}),
	}
	go a.readLoop(stdout)
	return a, nil
}

// baseEnv is the environment every child gets: PATH and HOME only, so the host's Codex
// configuration and credentials never leak into a check.
func baseEnv() []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}
	if h := os.Getenv("HOME"); h != "" {
		env = append(env, "HOME="+h)
	}
	return env
}

func (a *appServer) readLoop(r io.Reader) {
	defer close(a.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var m rpcMessage
		if err := json.Unmarshal(line, &m); err != nil {
			a.log.Printf("%s <<? %s", a.name, clip(string(line), 300))
			continue
		}
		switch {
		case m.Method != "" && len(m.ID) > 0:
			a.log.Printf("%s << request %s", a.name, clip(string(line), 600))
			a.answer(m)
		case m.Method != "":
			a.log.Printf("%s << %s", a.name, clip(string(line), 600))
			a.mu.Lock()
			a.notes = append(a.notes, m)
			close(a.noteCond)
			a.noteCond = make(chan struct{})
			a.mu.Unlock()
		default:
			a.log.Printf("%s << %s", a.name, clip(string(line), 1500))
			a.mu.Lock()
			ch := a.pending[string(m.ID)]
			delete(a.pending, string(m.ID))
			a.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
	}
}

// answer replies to a server->client request: approvals are accepted, anything else is
// refused with method-not-found.
func (a *appServer) answer(m rpcMessage) {
	a.mu.Lock()
	a.requests = append(a.requests, m.Method)
	a.mu.Unlock()
	reply := map[string]any{"id": m.ID}
	if strings.Contains(strings.ToLower(m.Method), "approval") {
		reply["result"] = map[string]any{"decision": "accept"}
	} else {
		reply["error"] = map[string]any{"code": -32601, "message": "not supported by realcodex"}
	}
	a.write(reply)
}

func (a *appServer) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	a.log.Printf("%s >> %s", a.name, clip(string(b), 600))
	_, err = a.stdin.Write(append(b, '\n'))
	return err
}

// Call sends a request and waits for its response.
func (a *appServer) Call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	a.mu.Lock()
	a.nextID++
	id := fmt.Sprint(a.nextID)
	ch := make(chan rpcMessage, 1)
	a.pending[id] = ch
	a.mu.Unlock()
	if err := a.write(map[string]any{"id": a.nextID, "method": method, "params": params}); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return nil, fmt.Errorf("%s: %w", method, m.Error)
		}
		return m.Result, nil
	case <-a.done:
		return nil, fmt.Errorf("%s: app-server exited", method)
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// Notify sends a notification.
func (a *appServer) Notify(method string) error {
	return a.write(map[string]any{"method": method})
}

// WaitNote waits for a notification, seen before or after the call, for which match is true.
func (a *appServer) WaitNote(ctx context.Context, match func(rpcMessage) bool) (rpcMessage, error) {
	seen := 0
	for {
		a.mu.Lock()
		notes := a.notes[seen:]
		cond := a.noteCond
		a.mu.Unlock()
		for _, n := range notes {
			seen++
			if match(n) {
				return n, nil
			}
		}
		select {
		case <-cond:
		case <-a.done:
			return rpcMessage{}, fmt.Errorf("app-server exited")
		case <-ctx.Done():
			return rpcMessage{}, ctx.Err()
		}
	}
}

// Notes returns the notifications received so far.
func (a *appServer) Notes() []rpcMessage {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]rpcMessage(nil), a.notes...)
}

// Close ends the app-server: stdin EOF first, then a kill if it lingers.
func (a *appServer) Close() {
	a.stdin.Close()
	select {
	case <-a.done:
	case <-time.After(5 * time.Second):
		a.cmd.Process.Kill()
	}
	exited := make(chan struct{})
	go func() { a.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		a.cmd.Process.Kill()
		<-exited
	}
}

// initialize performs the app-server handshake with the experimental API enabled.
func (a *appServer) initialize(ctx context.Context) error {
	_, err := a.Call(ctx, "initialize", map[string]any{
		"clientInfo":   map[string]string{"name": "realcodex", "version": "0.0.1"},
		"capabilities": map[string]any{"experimentalApi": true},
	})
	if err != nil {
		return err
	}
	return a.Notify("initialized")
}
