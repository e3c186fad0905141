package main

import "syscall"

// childAttr puts a child in its own process group (so Stop can signal everything it spawned)
// and has the kernel kill it if realcodex dies first, so an interrupted run leaves nothing.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
