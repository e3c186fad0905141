package main

// The server under test: the real binary, started fresh for each check on a loopback port,
// stopped with SIGTERM (or killed with SIGKILL, by the check that is about that).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Timings of the server's life.
const (
	// serverStartTimeout bounds the wait for the server's one line on stdout.
	serverStartTimeout = 15 * time.Second
	// serverStopTimeout bounds a SIGTERM stop (the server promises 2 s) before SIGKILL.
	serverStopTimeout = 5 * time.Second
	// stderrKeep is how much of the server's stderr a failure report quotes.
	stderrKeep = 2 << 10
)

// server is one running exec-server.
type server struct {
	url    string
	pid    int
	cmd    *exec.Cmd
	stderr *tail
	exited chan struct{} // closed once the process is reaped
}

// startServer runs bin on 127.0.0.1:0 with extra flags and waits for the URL it prints.
func startServer(ctx context.Context, bin string, flags ...string) (*server, error) {
	args := append([]string{"--listen", "ws://127.0.0.1:0", "--log-level", "warn"}, flags...)
	cmd := exec.Command(bin, args...)
	s := &server{cmd: cmd, stderr: &tail{max: stderrKeep}, exited: make(chan struct{})}
	cmd.Stderr = s.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s.pid = cmd.Process.Pid
	urls := make(chan string, 1)
	go func() { // ends at the server's EOF on stdout: it prints one line, then nothing
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			urls <- strings.TrimSpace(sc.Text())
		}
		close(urls)
		io.Copy(io.Discard, out)
	}()
	go func() { // ends when the server is reaped
		cmd.Wait()
		close(s.exited)
	}()
	ctx, cancel := context.WithTimeout(ctx, serverStartTimeout)
	defer cancel()
	select {
	case u, ok := <-urls:
		if ok && strings.HasPrefix(u, "ws://") {
			s.url = u
			return s, nil
		}
		s.kill()
		return nil, fmt.Errorf("server printed %q instead of its URL; stderr: %s", u, s.stderr)
	case <-ctx.Done():
		s.kill()
		return nil, fmt.Errorf("server did not print its URL within %v; stderr: %s", serverStartTimeout, s.stderr)
	}
}

// stop ends the server with SIGTERM, as an operator would, and waits for it; SIGKILL if it
// overstays serverStopTimeout (an error: the server promises to exit within 2 s).
func (s *server) stop() error {
	s.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(serverStopTimeout)
	defer t.Stop()
	select {
	case <-s.exited:
		return nil
	case <-t.C:
		s.kill()
		return fmt.Errorf("server ignored SIGTERM for %v", serverStopTimeout)
	}
}

// kill sends SIGKILL and waits until the server is reaped.
func (s *server) kill() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// usage reads the server's resources now.
func (s *server) usage() (usage, error) { return readUsage(s.pid) }

// alive reports whether the server is still running.
func (s *server) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// errServerDied is returned by checks whose server ended under them.
var errServerDied = errors.New("the server exited during the check")

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.b) == 0 {
		return "(empty)"
	}
	return strings.TrimSpace(string(t.b))
}
