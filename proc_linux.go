package main

// Linux specifics of starting children: they die with the server (PR_SET_PDEATHSIG), and
// their exit is awaited through a pidfd in Go's poller, without a thread per child and
// without reaping, so the pid stays reserved until the reaper is ready for it to go. The
// members of a child's session are found through /proc.

import (
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// selfExecutable is this binary, as a path the kernel resolves without PATH.
func selfExecutable() (string, error) { return "/proc/self/exe", nil }

// childSysProcAttr makes the child a session and group leader, with the PTY (its fd 0) as
// controlling terminal in tty mode, and has the kernel SIGKILL it when its parent dies.
func childSysProcAttr(tty bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Setctty: tty, Ctty: 0, Pdeathsig: syscall.SIGKILL}
}

// reaperHoldsPid: the reaper learns of an exit without reaping (childExit.wait), so it can
// keep a killed leader's pid, and with it its session's number, until the session is swept.
const reaperHoldsPid = true

// childExit is a child's pidfd, polled by Go's netpoller; nil where the kernel has none.
type childExit struct{ f *os.File }

// startProcess is os.StartProcess that also returns a watch on the child's exit. It forks on
// whatever thread runs its caller. The kernel ties PR_SET_PDEATHSIG to the forking *thread*,
// not the process: a child forked on a thread that later exits is killed then. But Go ends a
// thread only when a goroutine exits while locked to it (runtime.LockOSThread without the
// unlock), and nothing in this binary locks a thread (TestNoGoroutineLocksItsThread keeps it
// so): every thread lives as long as the server. Forking on one dedicated locked thread
// instead cost two thread wake-ups per process, and 50 connections starting 20 processes each
// took 13% longer.
func startProcess(path string, argv []string, attr *os.ProcAttr) (*os.Process, *childExit, error) {
	pidfd := -1
	if attr.Sys != nil {
		attr.Sys.PidFD = &pidfd
	}
	proc, err := os.StartProcess(path, argv, attr)
	if err != nil || pidfd < 0 {
		return proc, nil, err
	}
	if unix.SetNonblock(pidfd, true) != nil {
		unix.Close(pidfd)
		return proc, nil, nil
	}
	return proc, &childExit{f: os.NewFile(uintptr(pidfd), "pidfd")}, nil
}

// wait blocks until the child pid has exited, leaving it unreaped so that its pid, and with
// it its process group's number, stays reserved. It reports whether it could.
func (w *childExit) wait(pid int) bool {
	if w == nil {
		return waitid(unix.P_PID, pid, unix.WEXITED|unix.WNOWAIT) == nil
	}
	rc, err := w.f.SyscallConn()
	if err != nil {
		return false
	}
	var werr error
	exited := false
	err = rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		werr = waitidInfo(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG)
		exited = werr == nil && info.Signo == int32(unix.SIGCHLD)
		return werr != nil || exited // otherwise wait until the pidfd is readable: it has exited
	})
	return err == nil && exited
}

// exited reports whether the child pid has exited already, leaving it unreaped.
func (w *childExit) exited(pid int) bool {
	if w == nil {
		var info unix.Siginfo
		err := waitidInfo(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG)
		return err != nil || info.Signo == int32(unix.SIGCHLD)
	}
	rc, err := w.f.SyscallConn()
	if err != nil {
		return true
	}
	exited := true
	rc.Control(func(fd uintptr) {
		var info unix.Siginfo
		err := waitidInfo(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG)
		exited = err != nil || info.Signo == int32(unix.SIGCHLD)
	})
	return exited
}

// close releases the pidfd.
func (w *childExit) close() {
	if w != nil {
		w.f.Close()
	}
}

func waitid(idType, id, options int) error {
	var info unix.Siginfo
	return waitidInfo(idType, id, &info, options)
}

func waitidInfo(idType, id int, info *unix.Siginfo, options int) error {
	for {
		if err := unix.Waitid(idType, id, info, options, nil); err != unix.EINTR {
			return err
		}
	}
}

// sessionMembers calls member with the pid of every process, listed in /proc, whose session
// is in want. getsid(2) answers for any process on Linux (it has no same-session check), one
// system call per process against an open, read and parse of /proc/<pid>/stat.
func sessionMembers(want map[int]bool, member func(pid int)) {
	dir, err := os.Open("/proc")
	if err != nil {
		return
	}
	defer dir.Close()
	for {
		names, err := dir.Readdirnames(256)
		for _, name := range names {
			pid, perr := strconv.Atoi(name)
			if perr != nil {
				continue
			}
			if sid, err := unix.Getsid(pid); err == nil && want[sid] {
				member(pid)
			}
		}
		if err != nil {
			return
		}
	}
}
