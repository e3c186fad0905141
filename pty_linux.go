package main

// PTYs on Linux, by hand (docs/protocol.md §6.1):
//
//	open("/dev/ptmx", O_RDWR|O_NOCTTY|O_CLOEXEC|O_NONBLOCK)   the master; a new slave appears
//	ioctl(master, TIOCSPTLCK, &0)                             unlock the slave (unlockpt)
//	ioctl(master, TIOCGPTN, &n)                               its number: /dev/pts/n (ptsname)
//	ioctl(master, TIOCSWINSZ, &{rows, cols})                  initial size, 24×80 by default
//	open("/dev/pts/n", O_RDWR|O_NOCTTY|O_CLOEXEC)             the slave, the child's 0, 1 and 2
//
// grantpt is a no-op on devpts. The master is non-blocking, so its reads wait in Go's poller
// and Close interrupts them; reads end with EIO once every slave descriptor is closed.

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// openPTY returns a new PTY pair with the given window size.
func openPTY(rows, cols uint16) (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*os.File, *os.File, error) {
		unix.Close(mfd)
		return nil, nil, err
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return fail(err)
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		return fail(err)
	}
	if err := unix.IoctlSetWinsize(mfd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		return fail(err)
	}
	name := "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	return os.NewFile(uintptr(mfd), "/dev/ptmx"), os.NewFile(uintptr(sfd), name), nil
}
