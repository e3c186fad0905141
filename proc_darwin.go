package main

// darwin specifics of starting children. There is no PR_SET_PDEATHSIG: children of a server
// killed with SIGKILL are not taken down with it (SIGTERM and stdin EOF still kill them). The
// reaper's Wait blocks a thread per running child. The members of a child's session are
// found through the kern.proc.all sysctl and getsid.

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// childSysProcAttr makes the child a session and group leader, with the PTY (its fd 0) as
// controlling terminal in tty mode.
// selfExecutable is this binary's path.
func selfExecutable() (string, error) { return os.Executable() }

func childSysProcAttr(tty bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Setctty: tty, Ctty: 0}
}

// reaperHoldsPid: the reaper learns of an exit only by reaping, so a session is swept before
// process/terminate answers, while the leader's pid is surely still held.
const reaperHoldsPid = false

// childExit would watch a child's exit without reaping it; darwin has no waitid binding in
// x/sys, so the reaper learns of the exit from Wait itself.
type childExit struct{}

func startProcess(path string, argv []string, attr *os.ProcAttr) (*os.Process, *childExit, error) {
	p, err := os.StartProcess(path, argv, attr)
	return p, nil, err
}

func (*childExit) wait(pid int) bool { return false }
func (*childExit) close()            {}

// sessionMembers calls member with the pid of every process whose session is in want.
func sessionMembers(want map[int]bool, member func(pid int)) {
	procs, err := unix.SysctlKinfoProcSlice("kern.proc.all")
	if err != nil {
		return
	}
	for i := range procs {
		pid := int(procs[i].Proc.P_pid)
		if sid, err := unix.Getsid(pid); err == nil && want[sid] {
			member(pid)
		}
	}
}
