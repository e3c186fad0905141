//go:build !linux

package main

import "syscall"

// childAttr puts a child in its own process group (so Stop can signal everything it spawned).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
