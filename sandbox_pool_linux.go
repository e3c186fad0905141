package main

// Warm stages (docs/sandbox.md §2, "Warm stages"): a namespace stage forked ahead of need, so
// that a sandboxed process/start does not wait for the clone of five namespaces, the exec of
// this binary and the Go runtime's start (most of a sandboxed start's time). Separate from
// sandbox_linux.go because it is its own concern: when a stage may be kept, how it is handed
// its descriptors, and when it is let go.
//
// A warm stage is forked exactly as a cold one, but with /dev/null for 0, 1, 2, an empty
// environment, and a unix stream socket on fd 3 instead of the configuration pipe. It catches
// the signals it will pass on, says so, and waits. The start that takes it sends its stdio
// descriptors and the configuration on that socket:
//
//	stage → server  one byte, warmStageReady: the stage waits, its signals caught
//	server → stage  uint32 length (big-endian), then that many bytes of configuration (JSON);
//	                the first message carries SCM_RIGHTS [stdin, stdout, stderr]
//	end of stream   before any byte: the stage exits 0 (it was let go)
//
// The configuration is delimited by its length, not by the end of the stream: our end of the
// socket may live on for a moment in a child the server is forking meanwhile (until its exec
// closes it), which would hold the end of stream back.
//
// The stage puts the three descriptors on 0, 1, 2 and goes on as a cold stage does. Only the
// commonest kind is kept warm: namespaces, a pid namespace of its own, no network (the
// workspace-write and read-only modes). A networked stage is never kept: while one runs,
// the server checks every local connection it accepts (peer_linux.go).
//
// A warm stage's mount namespace is a copy of the server's as it was at the fork. One that
// has changed since (a mount or an unmount: the server's /proc/self/mountinfo, opened before
// the fork, then polls POLLPRI) is let go rather than used, so that no sandbox is built
// from a stale table; so is one forked before a change of the server's limits, cgroup or
// OOM score adjustment (serverState). So is one idle for warmStageIdle, or dead.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// warmStageReady is the byte a warm stage sends once it waits for its start.
const warmStageReady = 'r'

// warmStageReadyWithin bounds the wait for a warm stage to say it is ready (a stage that does
// not is let go).
const warmStageReadyWithin = 10 * time.Second

// warmStageIdle is how long a warm stage may wait for a start before it is let go.
const warmStageIdle = 10 * time.Second

// warmStage is one stage forked ahead of need.
type warmStage struct {
	proc   *os.Process
	exit   *childExit
	conn   *os.File // our end of its fd 3: a unix stream socket
	status *os.File // our end of its fd 4
	// mounts is the server's mountinfo, opened before the fork, which polls POLLPRI once the
	// mount table has changed. A raw descriptor: in Go's netpoller, its epoll would consume
	// the event.
	mounts int
	stale  bool // the mount table changed: a poll reports it once only
	// state is what else it inherited from the server at the fork that may change while it
	// waits (serverState).
	state string
}

// stagePool holds at most one warm stage, and forks the next in the background once it is
// taken. The zero value is ready; close ends it.
type stagePool struct {
	mu      sync.Mutex
	idle    *warmStage
	timer   *time.Timer   // lets idle go after warmStageIdle
	filling chan struct{} // closed when the fork under way ends; nil when none is
	closed  bool
	fills   sync.WaitGroup // the background forks and let-gos, for close
}

// warmable reports whether a stage of cfg is the kind kept warm.
func (cfg *stageConfig) warmable() bool {
	return cfg.Namespaces && cfg.PidNS && !cfg.Landlock && cfg.Profile.restrictsNetwork() &&
		!cfg.Probe && !cfg.Foreground && cfg.Anchor == 0 && len(cfg.Bridge) == 0
}

// warmStageWait bounds a start's wait for the warm stage being forked.
const warmStageWait = 2 * time.Second

// take returns the warm stage, if one is ready and still fit to use; nil otherwise, and the
// caller forks a cold stage. A warm stage being forked is waited for (at most warmStageWait):
// it was started by an earlier start, so it is ready sooner than a cold one would be, and a
// cold fork beside it would only compete with it for the CPU.
func (sp *stagePool) take() *warmStage {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.closed {
		return nil
	}
	if done := sp.filling; sp.idle == nil && done != nil {
		sp.mu.Unlock()
		select {
		case <-done:
		case <-time.After(warmStageWait):
		}
		sp.mu.Lock()
		if sp.closed {
			return nil
		}
	}
	w := sp.idle
	sp.idle = nil
	if sp.timer != nil {
		sp.timer.Stop()
		sp.timer = nil
	}
	if w != nil && !w.fit() {
		sp.letGoLocked(w)
		w = nil
	}
	return w
}

// refill starts forking a warm stage, unless one is ready or under way. A start calls it as it
// takes the ready one, which leaves the fork the whole time to the next start. (Forked once
// a start's command ran instead, it was ready for the next start only one time in four when
// starts followed each other at once: the fork, the exec and the runtime's start take
// about as long as a sandboxed start.)
func (sp *stagePool) refill(fork func() (*warmStage, error)) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.closed || sp.filling != nil || sp.idle != nil {
		return
	}
	sp.filling = make(chan struct{})
	sp.fills.Add(1)
	go sp.fill(fork)
}

// fill forks a warm stage and keeps it, unless the pool was closed meanwhile.
func (sp *stagePool) fill(fork func() (*warmStage, error)) {
	defer sp.fills.Done()
	w, err := fork()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	close(sp.filling)
	sp.filling = nil
	if err != nil {
		return // the next start forks its own, and tries again
	}
	if sp.closed || sp.idle != nil {
		sp.letGoLocked(w)
		return
	}
	sp.idle = w
	sp.timer = time.AfterFunc(warmStageIdle, func() {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		if sp.idle == w {
			sp.idle, sp.timer = nil, nil
			sp.letGoLocked(w)
		}
	})
}

// settled waits for a fork under way, and returns the warm stage's pid, 0 when there is none.
func (sp *stagePool) settled() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for sp.filling != nil {
		done := sp.filling
		sp.mu.Unlock()
		<-done
		sp.mu.Lock()
	}
	if sp.idle == nil {
		return 0
	}
	return sp.idle.proc.Pid
}

// close lets the warm stage go, and waits for the background forks and let-gos to end.
func (sp *stagePool) close() {
	sp.mu.Lock()
	sp.closed = true
	if sp.idle != nil {
		sp.letGoLocked(sp.idle)
		sp.idle = nil
	}
	if sp.timer != nil {
		sp.timer.Stop()
		sp.timer = nil
	}
	sp.mu.Unlock()
	sp.fills.Wait()
}

// letGo is letGoLocked for a stage taken out of the pool: close waits for it too.
func (sp *stagePool) letGo(w *warmStage) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.letGoLocked(w)
}

// letGoLocked ends w in the background: end of stream on its socket, which it exits on, and
// a SIGKILL in case it is stopped; then it is reaped.
func (sp *stagePool) letGoLocked(w *warmStage) {
	if sp.closed {
		// close may be waiting on fills already: no new count once it is closed.
		w.discard()
		return
	}
	sp.fills.Add(1)
	go func() {
		defer sp.fills.Done()
		w.discard()
	}()
}

// fit reports whether w may still be used: alive, and the mount table and the rest of what it
// inherited (serverState) unchanged since its fork. Once unfit, it stays so.
func (w *warmStage) fit() bool {
	fds := []unix.PollFd{{Fd: int32(w.mounts), Events: unix.POLLPRI}}
	for !w.stale {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n != 0 {
			w.stale = true
			return false
		}
		break
	}
	if w.stale || serverState() != w.state {
		w.stale = true
		return false
	}
	return !w.exit.exited(w.proc.Pid)
}

// serverState is what a stage inherits from the server at its fork, besides the mount
// table, that others can change while a warm one waits: the resource limits (prlimit(1)), the
// cgroup (a server moved into a tighter one) and the OOM score adjustment (choom(1)). A cold
// stage always has today's. (The umask is the server's own to change, and it never does;
// nice and CPU affinity belong to the forking thread, which a cold fork does not track
// either.) Read on every take, so kept cheap: one prlimit per resource and two small files.
func serverState() string {
	var b []byte
	for res := range rlimitCount {
		var lim unix.Rlimit
		if err := unix.Prlimit(0, res, nil, &lim); err != nil {
			continue // a resource this kernel lacks: the same at the fork and now
		}
		b = fmt.Appendf(b, "%d:%d:%d ", res, lim.Cur, lim.Max)
	}
	for _, name := range []string{"/proc/self/cgroup", "/proc/self/oom_score_adj"} {
		data, err := os.ReadFile(name)
		if err != nil {
			return "unreadable" // never equal to a readable state
		}
		b = append(b, data...)
	}
	return string(b)
}

// rlimitCount is the number of resource limits Linux has (RLIM_NLIMITS).
const rlimitCount = 16

// discard ends w and reaps it.
func (w *warmStage) discard() {
	w.conn.Close()
	w.status.Close()
	unix.Close(w.mounts)
	w.proc.Signal(syscall.SIGKILL)
	w.exit.wait(w.proc.Pid) // Wait on a non-blocking pidfd does not wait
	w.proc.Wait()
	w.exit.close()
}

// forkWarmStage forks a warm stage of the kind warmable describes, for this server's user.
func forkWarmStage() (*warmStage, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("warm stage: %w", err)
	}
	defer devnull.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("warm stage: %w", err)
	}
	// Our end non-blocking, so that Go's poller serves it and the wait for ready has a deadline.
	if err := unix.SetNonblock(pair[0], true); err != nil {
		unix.Close(pair[0])
		unix.Close(pair[1])
		return nil, fmt.Errorf("warm stage: %w", err)
	}
	conn, child := os.NewFile(uintptr(pair[0]), "warm stage"), os.NewFile(uintptr(pair[1]), "warm stage")
	sr, sw, err := os.Pipe()
	if err != nil {
		conn.Close()
		child.Close()
		return nil, fmt.Errorf("warm stage: %w", err)
	}
	defer sw.Close()
	// Opened before the fork: a mount or unmount from here on marks it (fit).
	mounts, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		conn.Close()
		child.Close()
		sr.Close()
		return nil, fmt.Errorf("warm stage: %w", err)
	}
	state := serverState()
	sys := childSysProcAttr(false)
	stageNamespaces(sys, true, true)
	attr := &os.ProcAttr{Dir: "/", Env: []string{}, Files: []*os.File{devnull, devnull, devnull, child, sw}, Sys: sys}
	proc, exit, err := startProcess(stageExe, stageArgv(false), attr)
	child.Close()
	if err != nil {
		conn.Close()
		sr.Close()
		unix.Close(mounts)
		return nil, fmt.Errorf("warm stage: %w", err)
	}
	w := &warmStage{proc: proc, exit: exit, conn: conn, status: sr, mounts: mounts, state: state}
	// Its runtime's start and its signal handlers are not the start's to wait for: it is
	// kept only once it says it waits. One that dies first closes the socket.
	var b [1]byte
	conn.SetReadDeadline(time.Now().Add(warmStageReadyWithin))
	n, err := io.ReadFull(conn, b[:])
	conn.SetReadDeadline(time.Time{})
	if n != 1 || b[0] != warmStageReady {
		w.discard()
		return nil, fmt.Errorf("warm stage: not ready: %v", err)
	}
	return w, nil
}

// startWarm starts st on a warm stage when one fits: it sends the stage files (its 0, 1, 2)
// and the configuration, and returns the stage's process. ok is false when no warm stage
// was used: the caller forks a cold one.
func (st *sandboxStage) startWarm(env []string, files []*os.File) (proc *os.Process, exit *childExit, ok bool) {
	if st == nil || st.pool == nil || !st.cfg.warmable() || len(files) != 3 {
		return nil, nil, false
	}
	w := st.pool.take()
	st.pool.refill(forkWarmStage) // for the next start
	if w == nil {
		return nil, nil, false
	}
	if env == nil {
		env = os.Environ() // as a cold stage, forked with a nil environment, has the server's
	}
	if err := w.send(st.cfg, env, files); err != nil {
		st.pool.letGo(w)
		return nil, nil, false
	}
	unix.Close(w.mounts)
	// A stopped stage (SIGSTOP, which no stage can catch) would leave this start unanswered:
	// it was stopped while it waited for no command, so it goes on now.
	w.proc.Signal(syscall.SIGCONT)
	st.status = w.status
	return w.proc, w.exit, true
}

// send gives w its stdio and st's configuration (the table above). It fails only while the
// stage cannot have the whole configuration, so that it can never have run the command.
func (w *warmStage) send(cfg stageConfig, env []string, files []*os.File) error {
	cfg.Env = make([]byte, 0, 64)
	for _, kv := range env {
		cfg.Env = append(append(cfg.Env, kv...), 0)
	}
	body, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	payload := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	payload = append(payload, body...)
	rights := unix.UnixRights(int(files[0].Fd()), int(files[1].Fd()), int(files[2].Fd()))
	rc, err := w.conn.SyscallConn()
	if err != nil {
		return err
	}
	first := min(len(payload), 4096)
	var serr error
	sent := 0
	if err := rc.Write(func(fd uintptr) bool {
		sent, serr = unix.SendmsgN(int(fd), payload[:first], rights, nil, unix.MSG_NOSIGNAL)
		return !errors.Is(serr, unix.EAGAIN) // on EAGAIN, wait until it is writable
	}); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	first = sent // a stream socket may take less than it was given
	if first < len(payload) {
		// Never a write of nothing: to a stage that has read its configuration and closed
		// its end, it fails (EPIPE), and a start that took that for a failure would run its
		// command a second time, on a cold stage.
		if _, err := w.conn.Write(payload[first:]); err != nil {
			return err // not all of it: the stage is still waiting, and is let go
		}
	}
	w.conn.Close() // every byte is the stage's now: what closing says no longer matters
	return nil
}

// errStageLetGo is a warm stage's end of stream before any configuration: the server let
// it go.
var errStageLetGo = errors.New("sandbox: the warm stage was let go")

// warmStageWaits tells the server that this warm stage waits for its start, its signals caught.
func warmStageWaits() error {
	for {
		_, err := unix.Write(stageConfigFD, []byte{warmStageReady})
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// warmStageMarkSignal marks, in a warm stage's stream of caught signals, where its start
// came: it is none of forwardedSignals, and its number is above theirs, which the runtime
// hands on first of those pending together.
const warmStageMarkSignal = unix.SIGWINCH

// dropWaitingSignals drops the signals a warm stage caught while it waited: they were sent to
// no command. The mark it sends itself comes through the runtime's signal loop after every
// signal that arrived before it, so once the mark is in, sigs holds all of those. mark stays
// caught (a later SIGWINCH fills its buffer, or is dropped): stopping it costs a round trip
// to the runtime's signal thread on the start's path.
func dropWaitingSignals(sigs, mark chan os.Signal) {
	if unix.Kill(os.Getpid(), warmStageMarkSignal) == nil {
		<-mark
	}
	for len(sigs) > 0 {
		<-sigs
	}
}

// warmUpDecoder decodes a configuration once while the stage waits: encoding/json builds
// its decoder for a type on first use, most of the time of the first decode (0.2 ms).
func warmUpDecoder() {
	var cfg stageConfig
	json.Unmarshal([]byte(`{"profile":{"read":["/"],"write":["/"],"deny":["/"],"protected":["/"]},"argv":["x"],"env":["x=y"]}`), &cfg)
}

// stageIsWarm reports whether this stage is a warm one: its fd 3 is a socket.
func stageIsWarm() bool {
	var st unix.Stat_t
	return unix.Fstat(stageConfigFD, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK
}

// receiveStdio is a warm stage's wait for its start: it reads the first message on fd 3,
// puts the three descriptors it carries on 0, 1, 2, and returns the bytes of the
// configuration that came with them.
func receiveStdio() ([]byte, error) {
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(3*4))
	var n, oobn int
	var err error
	for {
		n, oobn, _, _, err = unix.Recvmsg(stageConfigFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("sandbox: receive the descriptors: %w", err)
	case n == 0 && oobn == 0:
		return nil, errStageLetGo
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, errors.New("sandbox: receive the descriptors: not one control message")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 3 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, errors.New("sandbox: receive the descriptors: not three")
	}
	for i, fd := range fds {
		if err := unix.Dup3(fd, i, 0); err != nil {
			return nil, fmt.Errorf("sandbox: receive the descriptors: %w", err)
		}
		unix.Close(fd)
	}
	return buf[:n], nil
}

// readWarmConfig reads the rest of a warm stage's configuration after first, the bytes that
// came with its descriptors, and returns the configuration.
func readWarmConfig(first []byte) ([]byte, error) {
	f := os.NewFile(stageConfigFD, "config")
	defer f.Close()
	if len(first) < 4 {
		head := make([]byte, 4-len(first))
		if _, err := io.ReadFull(f, head); err != nil {
			return nil, fmt.Errorf("sandbox: read the configuration's length: %w", err)
		}
		first = append(first, head...)
	}
	n := int64(binary.BigEndian.Uint32(first))
	if n > maxStageConfig || int64(len(first)-4) > n {
		return nil, fmt.Errorf("sandbox: a configuration of %d bytes", n)
	}
	b := make([]byte, n)
	copy(b, first[4:])
	if _, err := io.ReadFull(f, b[len(first)-4:]); err != nil {
		return nil, fmt.Errorf("sandbox: read the configuration: %w", err)
	}
	return b, nil
}
