package main

// Physical limits: the same work as the server metrics, done by the bench itself with no
// server in between, on the same machine in the same round. A server cannot move output
// faster than `head -c` can push it through a PTY into one reader, nor start and reap
// /bin/true faster than a fork+exec+wait (50 × 20 of them at once: as fast as 50
// goroutines can), nor answer a request, run 50 × 20 processes for this client, stream pipe
// output to it or take an fs/writeFile from it faster than the null server, which does only
// the unavoidable part of each (nullserver.go).

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
)

// rawReadBuffer is the read size of the limit measurements: large, so that the reader is
// never what limits them.
const rawReadBuffer = 64 << 10

// measureLimits measures the limits of the selected metrics for one round.
func measureLimits(cfg *config, res *results, fx *fixtures, round int) error {
	add := func(key string, v ...float64) { res.add(key, sideLimit, round, v...) }
	if cfg.metrics["connect"] || cfg.metrics["getMetadata"] || cfg.metrics["conns"] || cfg.metrics["pipe"] || cfg.metrics["writeFile"] {
		if err := nullServerLimits(cfg, res, fx, round); err != nil {
			return fmt.Errorf("null server: %w", err)
		}
	}
	for range cfg.reps {
		if cfg.metrics["pipe"] {
			d, err := rawOutput(cfg.pipeBytes, false)
			if err != nil {
				return fmt.Errorf("raw pipe: %w", err)
			}
			add("raw-pipe", mbps(cfg.pipeBytes, d))
		}
		if cfg.metrics["pty"] {
			d, err := rawOutput(cfg.ptyBytes, true)
			if err != nil {
				return fmt.Errorf("raw PTY: %w", err)
			}
			add("pty", mbps(cfg.ptyBytes, d))
		}
	}
	if cfg.metrics["pipe"] || cfg.metrics["readFile"] || cfg.metrics["writeFile"] || cfg.metrics["readBlock"] {
		d, err := rawLoopbackTCP(cfg.pipeBytes)
		if err != nil {
			return fmt.Errorf("raw loopback TCP: %w", err)
		}
		add("tcp", mbps(cfg.pipeBytes, d))
		add("base64", mbps(cfg.pipeBytes, rawBase64(cfg.pipeBytes)))
	}
	if cfg.metrics["conns"] {
		wall, err := rawManySpawns(cfg.conns, cfg.perConn)
		if err != nil {
			return fmt.Errorf("raw %d × %d spawns: %w", cfg.conns, cfg.perConn, err)
		}
		add("raw-conns-wall", wall.Seconds())
	}
	if cfg.metrics["start"] {
		for _, tty := range []bool{false, true} {
			mode := "pipe"
			if tty {
				mode = "pty"
			}
			for i := 0; i < warmups+cfg.samples; i++ {
				started, closed, err := rawSpawn(tty)
				if err != nil {
					return fmt.Errorf("raw spawn %s: %w", mode, err)
				}
				if i >= warmups {
					add("start-"+mode, ms(started))
					add("closed-"+mode, ms(closed))
				}
			}
		}
	}
	return nil
}

// nullServerLimits runs the connect, getMetadata, 50 × 20, pipe and writeFile metrics against
// the null server, with the same client code and checks as for the servers under test.
func nullServerLimits(cfg *config, res *results, fx *fixtures, round int) error {
	spec, err := nullServerSpec()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	srv, err := launch(ctx, spec)
	if err != nil {
		return err
	}
	defer srv.stop()
	rc := &runCtx{cfg: cfg, srv: srv, res: res, side: sideLimit, round: round, fx: fx,
		logf: func(string, ...any) {}}
	for _, m := range []struct {
		name string
		run  func(context.Context, *runCtx) error
	}{
		{"connect", connectLatency},
		{"getMetadata", getMetadata},
		{"conns", manyConns},
		{"pipe", pipeThroughput},
		{"writeFile", writeFile},
	} {
		if !cfg.metrics[m.name] {
			continue
		}
		if err := m.run(ctx, rc); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	return nil
}

// rawOutput runs `head -c n /dev/zero` into a pipe or a PTY it opened itself and reads it
// all; it returns the time from start to exit and EOF.
func rawOutput(n int64, tty bool) (time.Duration, error) {
	cmd := exec.Command("head", "-c", strconv.FormatInt(n, 10), "/dev/zero")
	t0 := time.Now()
	var r io.ReadCloser
	var err error
	if tty {
		r, err = pty.Start(cmd)
	} else {
		r, err = cmd.StdoutPipe()
		if err == nil {
			err = cmd.Start()
		}
	}
	if err != nil {
		return 0, err
	}
	got, rerr := drain(r)
	werr := cmd.Wait()
	d := time.Since(t0)
	r.Close()
	if rerr != nil {
		return 0, rerr
	}
	if werr != nil {
		return 0, werr
	}
	if got != n {
		return 0, fmt.Errorf("read %d bytes, want %d", got, n)
	}
	return d, nil
}

// drain reads r to its end and discards what it read.
func drain(r io.Reader) (int64, error) {
	return readEach(r, func([]byte) error { return nil })
}

// readEach reads r to its end with blocking read(2) calls of rawReadBuffer bytes on its
// descriptor, the cheapest reader there is (no poller round trip per chunk), and hands each
// read to fn; on a PTY master the end is EIO once the child side is closed.
func readEach(r io.Reader, fn func(chunk []byte) error) (int64, error) {
	buf := make([]byte, rawReadBuffer)
	var total int64
	f, ok := r.(interface{ Fd() uintptr })
	if !ok {
		return 0, fmt.Errorf("%T has no descriptor", r)
	}
	fd := int(f.Fd()) // Fd puts the descriptor in blocking mode
	for {
		n, err := syscall.Read(fd, buf)
		if n > 0 {
			total += int64(n)
			if err := fn(buf[:n]); err != nil {
				return total, err
			}
		}
		switch {
		case err == syscall.EINTR:
		case n == 0 && err == nil, errors.Is(err, syscall.EIO):
			return total, nil
		case err != nil:
			return total, err
		}
	}
}

// rawLoopbackTCP sends n bytes over one loopback TCP connection to a reader that discards
// them: the ceiling of any transfer a websocket on loopback carries.
func rawLoopbackTCP(n int64) (time.Duration, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	got := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		m, err := io.CopyBuffer(io.Discard, c, make([]byte, rawReadBuffer))
		if err == nil && m != n {
			err = fmt.Errorf("received %d bytes, want %d", m, n)
		}
		got <- err
	}()
	t0 := time.Now()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return 0, err
	}
	buf := make([]byte, rawReadBuffer)
	for left := n; left > 0; {
		k := min(left, int64(len(buf)))
		if _, err := c.Write(buf[:k]); err != nil {
			c.Close()
			return 0, err
		}
		left -= k
	}
	c.Close()
	if err := <-got; err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// rawBase64 is the time the standard library takes to base64-encode n bytes on one core, in
// 64 KiB blocks: the encoding every output byte and file byte goes through.
func rawBase64(n int64) time.Duration {
	src := make([]byte, rawReadBuffer)
	dst := make([]byte, base64.StdEncoding.EncodedLen(len(src)))
	t0 := time.Now()
	for left := n; left > 0; left -= int64(len(src)) {
		base64.StdEncoding.Encode(dst, src)
	}
	return time.Since(t0)
}

// rawSpawn starts /bin/true with its output on a pipe or a PTY and returns the time until
// the child was started, and until it was reaped and its output closed.
func rawSpawn(tty bool) (started, closed time.Duration, err error) {
	cmd := exec.Command("/bin/true")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	t0 := time.Now()
	var r io.ReadCloser
	if tty {
		r, err = pty.Start(cmd)
	} else {
		if r, err = cmd.StdoutPipe(); err == nil {
			err = cmd.Start()
		}
	}
	if err != nil {
		return 0, 0, err
	}
	started = time.Since(t0)
	_, rerr := drain(r)
	werr := cmd.Wait()
	closed = time.Since(t0)
	r.Close()
	return started, closed, errors.Join(rerr, werr)
}

// rawManySpawns runs perConn pipe-mode rawSpawns of /bin/true one after another in each of
// conns goroutines, all at once, as the many-connections metric asks a server to, and
// returns the wall time. Go's exec serialises the fork itself (syscall.ForkLock), as a
// server's single forking thread does. Per-process times are not kept: with 50 spawners on
// 2 CPUs they measure the Go scheduler's unfairness, not a cost a server could avoid.
func rawManySpawns(conns, perConn int) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make([]error, conns)
	t0 := time.Now()
	for i := range conns {
		wg.Go(func() {
			for range perConn {
				if _, _, err := rawSpawn(false); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(t0)
	return wall, errors.Join(errs...)
}
