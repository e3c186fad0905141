//go:build linux || darwin

package main

// PTY operations common to Linux and darwin: both take TIOCSWINSZ and TIOCGPGRP on the master.

import (
	"os"

	"golang.org/x/sys/unix"
)

// setPTYSize sets the window size through the master; the kernel signals SIGWINCH to the
// terminal's foreground process group.
func setPTYSize(master *os.File, rows, cols uint16) error {
	return ptyControl(master, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
}

// ptyForeground returns the terminal's foreground process group.
func ptyForeground(master *os.File) (int, error) {
	var pgrp int
	err := ptyControl(master, func(fd int) error {
		var err error
		pgrp, err = unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		return err
	})
	return pgrp, err
}

// ptyControl runs an ioctl on the master while it cannot be closed under it.
func ptyControl(master *os.File, f func(fd int) error) error {
	if master == nil {
		return os.ErrClosed
	}
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
