package main

// The rows of the seccomp filter's table that only amd64 has (seccomp_linux.go), with
// x/sys/unix's numbers for them: TestSeccompSyscallTable's native column on an amd64 host.

import "golang.org/x/sys/unix"

// seccompNativeOnlyCalls are the table's rows that arm64 lacks (seccompAbsent there).
func seccompNativeOnlyCalls() map[string]uint32 {
	return map[string]uint32{
		"chmod": unix.SYS_CHMOD, "chown": unix.SYS_CHOWN, "lchown": unix.SYS_LCHOWN,
		"utime": unix.SYS_UTIME, "utimes": unix.SYS_UTIMES, "futimesat": unix.SYS_FUTIMESAT,
	}
}
