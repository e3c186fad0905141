package main

// Launching and stopping the servers under test, and reading their memory use.
//
// A server is given either as a websocket URL (already running; no RSS or binary size), or as
// a shell command line with a {PORT} placeholder. A command is run as `sh -c 'exec CMD'`, so
// the shell is replaced and the pid is the server's own; it gets a fresh CODEX_HOME (the
// reference wants one, ours ignores it). Both servers print their bound `ws://IP:PORT` as the
// first line of stdout (docs/protocol.md §2.1); that line is the readiness signal.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	serverStartTimeout = 30 * time.Second
	serverStopTimeout  = 10 * time.Second
	stderrTail         = 4 << 10
)

// server is one running exec-server under test.
type server struct {
	url  string
	pid  int // 0 when given by URL
	cmd  *exec.Cmd
	home string
	errs *tailBuffer
	exit chan struct{}
}

// launch starts spec (a URL or a command line) and waits until it listens.
func launch(ctx context.Context, spec string) (*server, error) {
	if strings.HasPrefix(spec, "ws://") {
		return &server{url: spec}, nil
	}
	line := spec
	if strings.Contains(line, "{PORT}") {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		line = strings.ReplaceAll(line, "{PORT}", strconv.Itoa(port))
	}
	home, err := os.MkdirTemp("", "exec-bench-home-")
	if err != nil {
		return nil, err
	}
	s := &server{home: home, errs: &tailBuffer{max: stderrTail}, exit: make(chan struct{})}
	s.cmd = exec.Command("sh", "-c", "exec "+line)
	s.cmd.Env = append(os.Environ(), "CODEX_HOME="+home)
	s.cmd.Stderr = s.errs
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(home)
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(home)
		return nil, fmt.Errorf("start %q: %w", line, err)
	}
	s.pid = s.cmd.Process.Pid
	go func() { s.cmd.Wait(); close(s.exit) }()

	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u := strings.TrimSpace(sc.Text()); strings.HasPrefix(u, "ws://") {
				select {
				case urls <- u:
				default:
				}
			}
		}
		io.Copy(io.Discard, out)
	}()
	t := time.NewTimer(serverStartTimeout)
	defer t.Stop()
	select {
	case s.url = <-urls:
		return s, nil
	case <-s.exit:
		err = fmt.Errorf("%q exited before listening: %s", line, s.errs)
	case <-t.C:
		err = fmt.Errorf("%q printed no ws:// URL within %v", line, serverStartTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.stop()
	return nil, err
}

// stop sends SIGTERM, which both servers answer by killing their processes and exiting, and
// SIGKILLs the process group if the server takes too long.
func (s *server) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(serverStopTimeout)
	select {
	case <-s.exit:
	case <-t.C:
		syscall.Kill(-s.pid, syscall.SIGKILL)
		<-s.exit
	}
	t.Stop()
	os.RemoveAll(s.home)
}

// exited reports whether a launched server has exited.
func (s *server) exited() bool {
	if s.exit == nil {
		return false
	}
	select {
	case <-s.exit:
		return true
	default:
		return false
	}
}

// rssBytes is the server's own resident set (VmRSS), without its children.
func (s *server) rssBytes() (int64, error) {
	if s.pid == 0 {
		return 0, errors.New("server given by URL: no pid to read RSS from")
	}
	return vmRSS(s.pid)
}

// vmRSS reads VmRSS of pid from /proc/PID/status.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("unexpected VmRSS line %q", line)
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		return kb << 10, err
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// binarySize is the size of the executable a command line starts: its first word that is
// not `env` or a VAR=value assignment, looked up in PATH.
func binarySize(spec string) (int64, string, error) {
	if strings.HasPrefix(spec, "ws://") {
		return 0, "", errors.New("server given by URL: no binary")
	}
	for _, w := range strings.Fields(spec) {
		if w == "env" || strings.Contains(w, "=") {
			continue
		}
		path, err := exec.LookPath(strings.Trim(w, `'"`))
		if err != nil {
			return 0, "", err
		}
		fi, err := os.Stat(path)
		if err != nil {
			return 0, "", err
		}
		return fi.Size(), path, nil
	}
	return 0, "", errors.New("empty command")
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tailBuffer keeps the last max bytes written to it, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
