package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// child is an exec-server process started by a check.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// startChild runs bin with args in dir. stdin is written and then kept open (the executor's
// --registration-bearer-stdin reads one line; closing the pipe is not part of any check).
// Output goes to logPath. If wantLine, the first stdout line (the listen URL) is returned.
func startChild(name, bin string, args, env []string, dir, stdin, logPath string, wantLine bool) (*child, string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(baseEnv(), env...)
	cmd.Dir = dir
	cmd.SysProcAttr = childAttr()
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	defer logf.Close()
	cmd.Stderr = logf
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	var out io.ReadCloser
	if wantLine {
		if out, err = cmd.StdoutPipe(); err != nil {
			return nil, "", err
		}
	} else {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(c.done) }()
	if stdin != "" {
		io.WriteString(in, stdin)
	}
	// in stays open for the life of the child.
	if !wantLine {
		return c, "", nil
	}
	line := make(chan string, 1)
	go func() {
		br := bufio.NewReader(out)
		s, _ := br.ReadString('\n')
		line <- strings.TrimSpace(s)
		io.Copy(io.Discard, br)
	}()
	select {
	case s := <-line:
		if s == "" {
			c.Stop()
			return nil, "", fmt.Errorf("%s printed no listen URL (see %s)", name, logPath)
		}
		return c, s, nil
	case <-time.After(30 * time.Second):
		c.Stop()
		return nil, "", fmt.Errorf("%s printed no listen URL within 30s (see %s)", name, logPath)
	}
}

// Stop sends SIGTERM to the child's process group, then SIGKILL if it has not exited.
func (c *child) Stop() {
	if c == nil {
		return
	}
	pgid := c.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-c.done
	}
}

// Exited reports whether the child has ended.
func (c *child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}
