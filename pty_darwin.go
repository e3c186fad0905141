package main

// PTYs on darwin, by hand (no Mac here: reviewed against xnu's bsd/sys/ttycom.h and Libc's
// grantpt.c; the constants below are x/sys/unix's, which match those headers):
//
//	open("/dev/ptmx", O_RDWR|O_NOCTTY|O_CLOEXEC)      the master (posix_openpt)
//	ioctl(master, TIOCPTYGRANT)   _IO('t', 84)  = 0x20007454   grantpt
//	ioctl(master, TIOCPTYUNLK)    _IO('t', 82)  = 0x20007452   unlockpt
//	ioctl(master, TIOCPTYGNAME, buf[128])
//	              _IOC(IOC_OUT, 't', 83, 128) = 0x40807453   ptsname: "/dev/ttysNNN"
//	ioctl(master, TIOCSWINSZ, &{rows, cols})          initial size
//	open(name, O_RDWR|O_NOCTTY|O_CLOEXEC)             the slave, the child's 0, 1 and 2
//
// The master stays blocking: kqueue does not report a PTY master's hangup reliably on macOS,
// so a pollable master could wait for ever after the child exits. Reads block a thread and
// end with EIO or EOF once every slave descriptor is closed.

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ptyNameLen is TIOCPTYGNAME's buffer size, read from the request's parameter length bits,
// so the buffer always matches what the kernel writes.
const ptyNameLen = unix.TIOCPTYGNAME >> 16 & 0x1fff

// openPTY returns a new PTY pair with the given window size.
func openPTY(rows, cols uint16) (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*os.File, *os.File, error) {
		unix.Close(mfd)
		return nil, nil, err
	}
	if err := unix.IoctlSetInt(mfd, unix.TIOCPTYGRANT, 0); err != nil {
		return fail(err)
	}
	if err := unix.IoctlSetInt(mfd, unix.TIOCPTYUNLK, 0); err != nil {
		return fail(err)
	}
	var buf [ptyNameLen]byte
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), uintptr(unix.TIOCPTYGNAME), uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		return fail(errno)
	}
	n := 0
	for n < len(buf) && buf[n] != 0 {
		n++
	}
	name := string(buf[:n])
	if err := unix.IoctlSetWinsize(mfd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		return fail(err)
	}
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	return os.NewFile(uintptr(mfd), "/dev/ptmx"), os.NewFile(uintptr(sfd), name), nil
}
