package main

// Tests of the seccomp filters (seccomp_linux.go; docs/sandbox.md §2, "Seccomp"): the syscall
// table against x/sys/unix, the programs run in a BPF interpreter and listed, and the real
// kernel's answers in a child.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompTestArch is one architecture both programs are built for, whatever the host.
type seccompTestArch struct {
	name  string // GOARCH
	audit uint32 // AUDIT_ARCH_*
	other uint32 // the other one's AUDIT_ARCH_*
}

func seccompTestArches() []seccompTestArch {
	return []seccompTestArch{
		{"amd64", unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_AARCH64},
		{"arm64", unix.AUDIT_ARCH_AARCH64, unix.AUDIT_ARCH_X86_64},
	}
}

// seccompAllowedCalls are syscalls no filter names, with their numbers on amd64 and arm64:
// the interpreter test expects them allowed, and the table test checks the numbers.
func seccompAllowedCalls() []seccompSyscall {
	return []seccompSyscall{
		{name: "read", amd64: 0, arm64: 63},
		{name: "write", amd64: 1, arm64: 64},
		{name: "close", amd64: 3, arm64: 57},
		{name: "openat", amd64: 257, arm64: 56},
		{name: "execve", amd64: 59, arm64: 221},
		{name: "recvfrom", amd64: 45, arm64: 207}, // deliberately allowed
		{name: "recvmsg", amd64: 47, arm64: 212},
		{name: "sendmsg", amd64: 46, arm64: 211}, // allowed too, as in the reference
	}
}

// seccompNr is the number of the named syscall on arch, from the filter's table or the
// allowed calls above.
func seccompNr(t *testing.T, name string, arch uint32) uint32 {
	t.Helper()
	for _, s := range append(seccompSyscalls(), seccompAllowedCalls()...) {
		if s.name == name {
			return s.number(arch)
		}
	}
	t.Fatalf("no syscall %q in the tables", name)
	return 0
}

// TestSeccompSyscallTable checks the filter's syscall table: the native column against
// x/sys/unix's SYS_* constants, and both columns against x/sys/unix's generated sources for
// linux/amd64 and linux/arm64 (found through `go list -m`), so that an amd64 host also
// checks the arm64 numbers.
func TestSeccompSyscallTable(t *testing.T) {
	native := map[string]uint32{
		"connect": unix.SYS_CONNECT, "accept": unix.SYS_ACCEPT, "accept4": unix.SYS_ACCEPT4,
		"bind": unix.SYS_BIND, "listen": unix.SYS_LISTEN, "getpeername": unix.SYS_GETPEERNAME,
		"getsockname": unix.SYS_GETSOCKNAME, "shutdown": unix.SYS_SHUTDOWN, "sendto": unix.SYS_SENDTO,
		"sendmmsg": unix.SYS_SENDMMSG, "recvmmsg": unix.SYS_RECVMMSG, "getsockopt": unix.SYS_GETSOCKOPT,
		"setsockopt": unix.SYS_SETSOCKOPT, "ptrace": unix.SYS_PTRACE,
		"process_vm_readv": unix.SYS_PROCESS_VM_READV, "process_vm_writev": unix.SYS_PROCESS_VM_WRITEV,
		"io_uring_setup": unix.SYS_IO_URING_SETUP, "io_uring_enter": unix.SYS_IO_URING_ENTER,
		"io_uring_register": unix.SYS_IO_URING_REGISTER, "socket": unix.SYS_SOCKET,
		"socketpair": unix.SYS_SOCKETPAIR, "ioctl": unix.SYS_IOCTL, "prlimit64": unix.SYS_PRLIMIT64,
		"read": unix.SYS_READ, "write": unix.SYS_WRITE, "close": unix.SYS_CLOSE,
		"openat": unix.SYS_OPENAT, "execve": unix.SYS_EXECVE, "recvfrom": unix.SYS_RECVFROM,
		"recvmsg": unix.SYS_RECVMSG, "sendmsg": unix.SYS_SENDMSG,
		"keyctl": unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY,
		"fchmod": unix.SYS_FCHMOD, "fchmodat": unix.SYS_FCHMODAT, "fchmodat2": unix.SYS_FCHMODAT2,
		"fchown": unix.SYS_FCHOWN, "fchownat": unix.SYS_FCHOWNAT, "utimensat": unix.SYS_UTIMENSAT,
		"setxattr": unix.SYS_SETXATTR, "lsetxattr": unix.SYS_LSETXATTR, "fsetxattr": unix.SYS_FSETXATTR,
		"setxattrat": unix.SYS_SETXATTRAT, "removexattr": unix.SYS_REMOVEXATTR,
		"lremovexattr": unix.SYS_LREMOVEXATTR, "fremovexattr": unix.SYS_FREMOVEXATTR,
		"removexattrat": unix.SYS_REMOVEXATTRAT, "file_setattr": unix.SYS_FILE_SETATTR,
	}
	for name, nr := range seccompNativeOnlyCalls() {
		native[name] = nr
	}
	arch, err := seccompNativeArch()
	if err != nil {
		t.Skip(err)
	}
	rows := append(seccompSyscalls(), seccompAllowedCalls()...)
	present := 0
	for _, s := range rows {
		if s.number(arch) != seccompAbsent {
			present++
		}
	}
	if present != len(native) {
		t.Errorf("%d rows, %d x/sys constants: a row is missing from one side", present, len(native))
	}
	seen := map[string]bool{}
	for _, s := range rows {
		if seen[s.name] {
			t.Errorf("%s is listed twice", s.name)
		}
		seen[s.name] = true
		if s.number(arch) == seccompAbsent {
			if _, ok := native[s.name]; ok {
				t.Errorf("%s: marked absent on %s, where unix.SYS_%s exists", s.name, runtime.GOARCH, strings.ToUpper(s.name))
			}
			continue
		}
		if want, ok := native[s.name]; !ok || s.number(arch) != want {
			t.Errorf("%s: table says %d on %s, unix.SYS_%s is %d", s.name, s.number(arch), runtime.GOARCH,
				strings.ToUpper(s.name), want)
		}
	}
	for _, a := range seccompTestArches() {
		numbers := map[uint32]string{}
		for _, s := range rows {
			if s.number(a.audit) == seccompAbsent {
				continue
			}
			if prev, dup := numbers[s.number(a.audit)]; dup {
				t.Errorf("%s: %s and %s share number %d", a.name, prev, s.name, s.number(a.audit))
			}
			numbers[s.number(a.audit)] = s.name
		}
	}

	t.Run("x/sys sources", func(t *testing.T) {
		dir := xsysUnixDir(t)
		for _, a := range seccompTestArches() {
			src, err := os.ReadFile(filepath.Join(dir, "zsysnum_linux_"+a.name+".go"))
			if err != nil {
				t.Fatal(err)
			}
			defined := map[string]uint32{}
			for _, m := range regexp.MustCompile(`(?m)^\s*SYS_(\w+)\s*=\s*(\d+)\s*$`).FindAllSubmatch(src, -1) {
				n, _ := strconv.ParseUint(string(m[2]), 10, 32)
				defined[string(m[1])] = uint32(n)
			}
			for _, s := range rows {
				key := strings.ToUpper(s.name)
				if s.number(a.audit) == seccompAbsent {
					if _, ok := defined[key]; ok {
						t.Errorf("%s: %s marked absent, x/sys has SYS_%s", a.name, s.name, key)
					}
					continue
				}
				if got, ok := defined[key]; !ok || got != s.number(a.audit) {
					t.Errorf("%s: table says %s = %d, x/sys has SYS_%s = %d (defined %v)", a.name, s.name,
						s.number(a.audit), key, got, ok)
				}
			}
		}
	})
}

// xsysUnixDir is golang.org/x/sys/unix's directory in the module cache, or a skip when the go
// command is not at hand.
func xsysUnixDir(t *testing.T) string {
	t.Helper()
	gocmd, err := exec.LookPath("go")
	if err != nil {
		gocmd = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(gocmd, "list", "-m", "-f", "{{.Dir}}", "golang.org/x/sys").Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Skipf("cannot locate golang.org/x/sys with the go command: %v", err)
	}
	return filepath.Join(dir, "unix")
}

// seccompCall is one system call as the filter sees it.
type seccompCall struct {
	nr, arch   uint32
	arg0, arg1 uint64
}

// packet is the call's struct seccomp_data for x/net/bpf's interpreter. The kernel lays the
// struct out little-endian and loads words in that order; the interpreter loads every word
// big-endian (network order). Since seccomp only allows aligned 32-bit loads (newSeccompVM
// checks that), storing each 32-bit field big-endian in its place makes the interpreter see
// exactly the values the kernel would. A 64-bit argument keeps the little-endian word order:
// the low word at the lower offset.
//
// The offsets are written out here, from include/uapi/linux/seccomp.h, rather than taken from
// seccomp_linux.go, so that a wrong offset there shows.
func (c seccompCall) packet() []byte {
	b := make([]byte, 64)                                  // sizeof(struct seccomp_data)
	binary.BigEndian.PutUint32(b[0:], c.nr)                // nr
	binary.BigEndian.PutUint32(b[4:], c.arch)              // arch
	binary.BigEndian.PutUint32(b[16:], uint32(c.arg0))     // args[0], low word
	binary.BigEndian.PutUint32(b[20:], uint32(c.arg0>>32)) // args[0], high word
	binary.BigEndian.PutUint32(b[24:], uint32(c.arg1))     // args[1], low word
	binary.BigEndian.PutUint32(b[28:], uint32(c.arg1>>32)) // args[1], high word
	return b
}

// newSeccompVM loads prog into x/net/bpf's interpreter, an implementation independent of the
// builder, after checking that it only uses what the kernel's seccomp checker accepts and
// what the packet trick above relies on: aligned word loads inside seccomp_data, constant
// jumps, constant returns, and a return at the end.
func newSeccompVM(t *testing.T, prog []unix.SockFilter) *bpf.VM {
	t.Helper()
	insns := make([]bpf.Instruction, len(prog))
	for i, f := range prog {
		switch f.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if f.K%4 != 0 || f.K >= 64 {
				t.Fatalf("instruction %d loads [%d], outside seccomp_data's words", i, f.K)
			}
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K,
			unix.BPF_RET | unix.BPF_K, unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
		default:
			t.Fatalf("instruction %d has code %#x, outside the filter's instruction set", i, f.Code)
		}
		insns[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}.Disassemble()
		if _, raw := insns[i].(bpf.RawInstruction); raw {
			t.Fatalf("x/net/bpf cannot decode instruction %d: %+v", i, f)
		}
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// seccompRun is the filter's answer to c.
func seccompRun(t *testing.T, vm *bpf.VM, c seccompCall) uint32 {
	t.Helper()
	n, err := vm.Run(c.packet())
	if err != nil {
		t.Fatal(err)
	}
	return uint32(n)
}

// seccompAction names a filter answer, for messages.
func seccompAction(v uint32) string {
	switch v {
	case seccompAllow:
		return "ALLOW"
	case seccompDeny:
		return "ERRNO|EPERM"
	case seccompKill:
		return "KILL_PROCESS"
	}
	return fmt.Sprintf("%#x", v)
}

// TestSeccompProgramInterpreter runs both programs for both architectures in x/net/bpf's
// interpreter against synthetic calls, each with the answer written out by hand.
func TestSeccompProgramInterpreter(t *testing.T) {
	networkDenied := []string{"connect", "accept", "accept4", "bind", "listen", "getpeername",
		"getsockname", "shutdown", "sendto", "sendmmsg", "recvmmsg", "getsockopt", "setsockopt",
		"ptrace", "process_vm_readv", "process_vm_writev"}
	ioUring := []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}
	keyCalls := []string{"keyctl", "add_key", "request_key"}
	metadataCalls := []string{"chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown",
		"fchownat", "utime", "utimes", "futimesat", "utimensat", "setxattr", "lsetxattr", "fsetxattr",
		"setxattrat", "removexattr", "lremovexattr", "fremovexattr", "removexattrat", "file_setattr"}
	const junk = uint64(0xdeadbeef) << 32
	for _, a := range seccompTestArches() {
		type tc struct {
			name           string
			call           seccompCall
			network, vsock uint32
			metadata       bool // denied as well with seccompNoMetadata
		}
		call := func(name string, arg0 uint64) seccompCall {
			c := seccompCall{nr: seccompNr(t, name, a.audit), arch: a.audit, arg0: arg0}
			if name == "socket" || name == "socketpair" {
				c.arg1 = unix.SOCK_STREAM | unix.SOCK_CLOEXEC
			}
			return c
		}
		typed := func(name string, domain, typ uint64) seccompCall {
			return seccompCall{nr: seccompNr(t, name, a.audit), arch: a.audit, arg0: domain, arg1: typ}
		}
		cases := []tc{
			{"read from the other arch", seccompCall{nr: seccompNr(t, "read", a.other), arch: a.other}, seccompKill, seccompKill, false},
			{"read with our number, other arch", seccompCall{nr: seccompNr(t, "read", a.audit), arch: a.other}, seccompKill, seccompKill, false},
			{"i386 (int 0x80)", seccompCall{nr: 3, arch: unix.AUDIT_ARCH_I386}, seccompKill, seccompKill, false},
			{"arm32", seccompCall{nr: 3, arch: unix.AUDIT_ARCH_ARM}, seccompKill, seccompKill, false},
			{"arch 0", seccompCall{nr: 0}, seccompKill, seccompKill, false},
		}
		for _, name := range networkDenied {
			cases = append(cases, tc{name, call(name, unix.AF_UNIX), seccompDeny, seccompAllow, false})
		}
		for _, name := range ioUring {
			cases = append(cases, tc{name, call(name, 0), seccompDeny, seccompDeny, false})
		}
		for _, name := range keyCalls {
			cases = append(cases, tc{name, call(name, 0), seccompDeny, seccompDeny, false})
		}
		for _, name := range metadataCalls {
			if seccompNr(t, name, a.audit) != seccompAbsent {
				cases = append(cases, tc{name, call(name, 0), seccompAllow, seccompAllow, true})
			}
		}
		for _, s := range seccompAllowedCalls() {
			cases = append(cases, tc{s.name, call(s.name, unix.AF_INET), seccompAllow, seccompAllow, false})
		}
		for _, sys := range []string{"socket", "socketpair"} {
			cases = append(cases,
				tc{sys + " AF_UNIX", call(sys, unix.AF_UNIX), seccompAllow, seccompAllow, false},
				tc{sys + " AF_INET", call(sys, unix.AF_INET), seccompDeny, seccompAllow, false},
				tc{sys + " AF_INET6", call(sys, unix.AF_INET6), seccompDeny, seccompAllow, false},
				tc{sys + " AF_NETLINK", call(sys, unix.AF_NETLINK), seccompDeny, seccompAllow, false},
				tc{sys + " AF_PACKET", call(sys, unix.AF_PACKET), seccompDeny, seccompAllow, false},
				tc{sys + " AF_VSOCK", call(sys, unix.AF_VSOCK), seccompDeny, seccompDeny, false},
				tc{sys + " AF_UNSPEC", call(sys, unix.AF_UNSPEC), seccompDeny, seccompAllow, false},
				// The kernel takes the domain as an int: only the low word counts, for it and
				// for the filter (seccomp_linux.go's top comment).
				tc{sys + " AF_UNIX, junk high word", call(sys, junk|unix.AF_UNIX), seccompAllow, seccompAllow, false},
				tc{sys + " AF_INET, junk high word", call(sys, junk|unix.AF_INET), seccompDeny, seccompAllow, false},
				tc{sys + " AF_VSOCK, junk high word", call(sys, junk|unix.AF_VSOCK), seccompDeny, seccompDeny, false},
				tc{sys + " AF_INET, AF_UNIX in the high word", call(sys, unix.AF_UNIX<<32|unix.AF_INET), seccompDeny, seccompAllow, false},
				// A datagram unix socket sends to any bound socket by path (sendmsg): only
				// connection-oriented ones are made without the network (SOCK_RAW is a
				// datagram socket for AF_UNIX).
				tc{sys + " AF_UNIX SOCK_DGRAM", typed(sys, unix.AF_UNIX, unix.SOCK_DGRAM), seccompDeny, seccompAllow, false},
				tc{sys + " AF_UNIX SOCK_DGRAM|SOCK_CLOEXEC|SOCK_NONBLOCK", typed(sys, unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK), seccompDeny, seccompAllow, false},
				tc{sys + " AF_UNIX SOCK_RAW", typed(sys, unix.AF_UNIX, unix.SOCK_RAW), seccompDeny, seccompAllow, false},
				tc{sys + " AF_UNIX SOCK_SEQPACKET", typed(sys, unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK), seccompAllow, seccompAllow, false},
				tc{sys + " AF_UNIX SOCK_STREAM, junk high word", typed(sys, unix.AF_UNIX, junk|unix.SOCK_STREAM), seccompAllow, seccompAllow, false},
				tc{sys + " AF_UNIX SOCK_DGRAM, SOCK_STREAM in the high word", typed(sys, unix.AF_UNIX, unix.SOCK_STREAM<<32|unix.SOCK_DGRAM), seccompDeny, seccompAllow, false},
				tc{sys + " AF_VSOCK SOCK_STREAM", typed(sys, unix.AF_VSOCK, unix.SOCK_STREAM), seccompDeny, seccompDeny, false},
			)
		}
		ioctl := func(fd, req uint64) seccompCall {
			return seccompCall{nr: seccompNr(t, "ioctl", a.audit), arch: a.audit, arg0: fd, arg1: req}
		}
		prlimit := func(pid uint64) seccompCall {
			return seccompCall{nr: seccompNr(t, "prlimit64", a.audit), arch: a.audit, arg0: pid}
		}
		cases = append(cases,
			tc{"prlimit64 self", prlimit(0), seccompAllow, seccompAllow, false},
			tc{"prlimit64 another pid", prlimit(1234), seccompDeny, seccompDeny, false},
			tc{"prlimit64 pid 0 in the low word", prlimit(1 << 32), seccompAllow, seccompAllow, false},
			tc{"ioctl TIOCSTI", ioctl(0, unix.TIOCSTI), seccompDeny, seccompDeny, false},
			tc{"ioctl TIOCLINUX", ioctl(0, unix.TIOCLINUX), seccompDeny, seccompDeny, false},
			// The kernel takes the request as an unsigned int: only the low word counts.
			tc{"ioctl TIOCSTI, junk high word", ioctl(0, junk|unix.TIOCSTI), seccompDeny, seccompDeny, false},
			tc{"ioctl TCGETS", ioctl(0, unix.TCGETS), seccompAllow, seccompAllow, false},
			tc{"ioctl TIOCSWINSZ", ioctl(0, unix.TIOCSWINSZ), seccompAllow, seccompAllow, false},
			tc{"ioctl fd TIOCSTI, request TCGETS", ioctl(unix.TIOCSTI, unix.TCGETS), seccompAllow, seccompAllow, false},
			tc{"ioctl TIOCSTI in the high word", ioctl(0, uint64(unix.TIOCSTI)<<32|unix.TCGETS), seccompAllow, seccompAllow, false},
			tc{"ioctl FS_IOC_SETFLAGS", ioctl(3, unix.FS_IOC_SETFLAGS), seccompAllow, seccompAllow, true},
			tc{"ioctl FS_IOC_FSSETXATTR", ioctl(3, seccompFSIocFSSetXattr), seccompAllow, seccompAllow, true},
			tc{"ioctl FS_IOC_SETVERSION", ioctl(3, seccompFSIocSetVersion), seccompAllow, seccompAllow, true},
			tc{"ioctl FS_IOC_ENABLE_VERITY", ioctl(3, unix.FS_IOC_ENABLE_VERITY), seccompAllow, seccompAllow, true},
			tc{"ioctl FS_IOC_SET_ENCRYPTION_POLICY", ioctl(3, unix.FS_IOC_SET_ENCRYPTION_POLICY), seccompAllow, seccompAllow, true},
			tc{"ioctl FS_IOC_GETVERSION", ioctl(3, seccompFSIocGetVersion), seccompAllow, seccompAllow, false},
			tc{"ioctl FS_IOC_GETFLAGS", ioctl(3, unix.FS_IOC_GETFLAGS), seccompAllow, seccompAllow, false},
		)
		if a.audit == unix.AUDIT_ARCH_X86_64 {
			cases = append(cases,
				tc{"x32 read", seccompCall{nr: seccompX32SyscallNr | 0, arch: a.audit}, seccompDeny, seccompDeny, false},
				tc{"x32 socket AF_UNIX", seccompCall{nr: seccompX32SyscallNr | 41, arch: a.audit, arg0: unix.AF_UNIX}, seccompDeny, seccompDeny, false},
				tc{"nr -1", seccompCall{nr: 0xffffffff, arch: a.audit}, seccompDeny, seccompDeny, false},
			)
		} else {
			// No x32 on arm64: such numbers name no syscall there, and the kernel answers ENOSYS.
			cases = append(cases,
				tc{"x32-style number", seccompCall{nr: seccompX32SyscallNr | 198, arch: a.audit}, seccompAllow, seccompAllow, false},
				tc{"nr -1", seccompCall{nr: 0xffffffff, arch: a.audit}, seccompAllow, seccompAllow, false},
			)
		}

		for _, mode := range []seccompMode{seccompNetwork, seccompVsock,
			seccompNetwork | seccompNoMetadata, seccompVsock | seccompNoMetadata} {
			prog, err := seccompProgram(mode, a.audit)
			if err != nil {
				t.Fatal(err)
			}
			vm := newSeccompVM(t, prog)
			for _, c := range cases {
				want := c.network
				if mode.base() == seccompVsock {
					want = c.vsock
				}
				if c.metadata && mode&seccompNoMetadata != 0 {
					want = seccompDeny
				}
				if got := seccompRun(t, vm, c.call); got != want {
					t.Errorf("%s mode %d: %s (nr %#x, arg0 %#x): %s, want %s", a.name, mode, c.name,
						c.call.nr, c.call.arg0, seccompAction(got), seccompAction(want))
				}
			}
			// Every number the table does not deny is allowed, whatever its first argument.
			denied := map[uint32]bool{}
			for _, name := range ioUring {
				denied[seccompNr(t, name, a.audit)] = true
			}
			for _, name := range keyCalls {
				denied[seccompNr(t, name, a.audit)] = true
			}
			if mode.base() == seccompNetwork {
				for _, name := range networkDenied {
					denied[seccompNr(t, name, a.audit)] = true
				}
			}
			if mode&seccompNoMetadata != 0 {
				for _, name := range metadataCalls {
					denied[seccompNr(t, name, a.audit)] = true
				}
				denied[seccompNr(t, "ioctl", a.audit)] = true // by request, above
			}
			denied[seccompNr(t, "socket", a.audit)] = true
			denied[seccompNr(t, "socketpair", a.audit)] = true
			denied[seccompNr(t, "prlimit64", a.audit)] = true // by pid, above
			for nr := uint32(0); nr < 1024; nr++ {
				if denied[nr] {
					continue
				}
				for _, arg0 := range []uint64{unix.AF_INET, unix.AF_VSOCK, junk} {
					if got := seccompRun(t, vm, seccompCall{nr: nr, arch: a.audit, arg0: arg0}); got != seccompAllow {
						t.Errorf("%s mode %d: nr %d arg0 %#x: %s, want ALLOW", a.name, mode, nr, arg0, seccompAction(got))
					}
				}
			}
		}
	}
}

// TestSeccompProgramErrors: only the two filtered modes and the two architectures have a
// program, and seccompOff installs nothing.
func TestSeccompProgramErrors(t *testing.T) {
	for _, c := range []struct {
		mode seccompMode
		arch uint32
	}{{seccompOff, unix.AUDIT_ARCH_X86_64}, {seccompMode(9), unix.AUDIT_ARCH_AARCH64},
		{seccompNetwork, unix.AUDIT_ARCH_I386}, {seccompVsock, 0}} {
		if prog, err := seccompProgram(c.mode, c.arch); err == nil {
			t.Errorf("mode %d arch %#x: a program of %d instructions, want an error", c.mode, c.arch, len(prog))
		}
	}
	if err := installSeccomp(seccompOff); err != nil {
		t.Errorf("installSeccomp(seccompOff): %v", err)
	}
}

// seccompListing disassembles prog one instruction per line, jump targets as absolute
// indices, with what each constant means.
func seccompListing(prog []unix.SockFilter, mode seccompMode, a seccompTestArch) string {
	names := map[uint32]string{}
	for _, s := range seccompSyscalls() {
		names[s.number(a.audit)] = s.name
	}
	fields := map[uint32]string{seccompDataNr: "nr", seccompDataArch: "arch", seccompDataArg0Low: "args[0] low word: domain",
		seccompDataArg1Low: "args[1] low word: request, or type"}
	var b strings.Builder
	modeName := map[seccompMode]string{seccompNetwork: "seccompNetwork", seccompVsock: "seccompVsock",
		seccompNetwork | seccompNoMetadata: "seccompNetwork|seccompNoMetadata",
		seccompVsock | seccompNoMetadata:   "seccompVsock|seccompNoMetadata"}[mode]
	fmt.Fprintf(&b, "# %s for %s (AUDIT_ARCH %#x), %d instructions. Regenerate: %s=1 go test -run SeccompProgramListing\n",
		modeName, a.name, a.audit, len(prog), seccompGoldenEnv)
	var loaded uint32
	for i, f := range prog {
		var text, note string
		switch f.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			loaded = f.K
			text, note = fmt.Sprintf("ld   [%d]", f.K), fields[f.K]
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			op := "jeq"
			if f.Code&0xf0 == unix.BPF_JGE {
				op = "jge"
			}
			k := fmt.Sprintf("%#x", f.K)
			if op == "jeq" && (loaded == seccompDataNr || loaded == seccompDataArg0Low) {
				k = strconv.FormatUint(uint64(f.K), 10) // as the kernel's syscall tables and socket.h write them
			}
			text = fmt.Sprintf("%s  #%-10s  jt %-3d jf %d", op, k, i+1+int(f.Jt), i+1+int(f.Jf))
			switch {
			case loaded == seccompDataArch:
				note = map[uint32]string{unix.AUDIT_ARCH_X86_64: "AUDIT_ARCH_X86_64", unix.AUDIT_ARCH_AARCH64: "AUDIT_ARCH_AARCH64"}[f.K]
			case loaded == seccompDataNr && op == "jge":
				note = "x32 numbers and above"
			case loaded == seccompDataNr:
				note = names[f.K]
			case loaded == seccompDataArg0Low:
				note = map[uint32]string{unix.AF_UNIX: "AF_UNIX", unix.AF_VSOCK: "AF_VSOCK"}[f.K]
			case loaded == seccompDataArg1Low:
				note = map[uint32]string{unix.TIOCSTI: "TIOCSTI", unix.TIOCLINUX: "TIOCLINUX",
					unix.FS_IOC_SETFLAGS: "FS_IOC_SETFLAGS", seccompFSIocFSSetXattr: "FS_IOC_FSSETXATTR",
					seccompFSIocSetVersion: "FS_IOC_SETVERSION", unix.FS_IOC_ENABLE_VERITY: "FS_IOC_ENABLE_VERITY",
					unix.FS_IOC_SET_ENCRYPTION_POLICY: "FS_IOC_SET_ENCRYPTION_POLICY"}[f.K]
			case loaded == ^uint32(0):
				note = map[uint32]string{unix.SOCK_STREAM: "SOCK_STREAM", unix.SOCK_SEQPACKET: "SOCK_SEQPACKET"}[f.K]
			}
		case unix.BPF_RET | unix.BPF_K:
			text, note = fmt.Sprintf("ret  #%#x", f.K), seccompAction(f.K)
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			text, note = fmt.Sprintf("and  #%#x", f.K), "SOCK_TYPE_MASK: the socket type"
			loaded = ^uint32(0) // A is no longer a field of seccomp_data
		default:
			text = fmt.Sprintf("code %#x jt %d jf %d k %#x", f.Code, f.Jt, f.Jf, f.K)
		}
		fmt.Fprintf(&b, "%3d  %-36s; %s\n", i, text, note)
	}
	return b.String()
}

const seccompGoldenEnv = "EXEC_SERVER_SECCOMP_GOLDEN"

// seccompFSIocGetVersion is FS_IOC_GETVERSION, _IOR('v', 1, long), which no filter denies:
// the tests read a file's generation number on the host with it.
const seccompFSIocGetVersion = 0x80087601

// TestSeccompProgramListing compares a disassembly of each program with the listing under
// testdata/seccomp/, which is there for a reviewer to audit the filters as text.
func TestSeccompProgramListing(t *testing.T) {
	for _, a := range seccompTestArches() {
		for mode, name := range map[seccompMode]string{seccompNetwork: "network", seccompVsock: "vsock",
			seccompNetwork | seccompNoMetadata: "network_nometadata", seccompVsock | seccompNoMetadata: "vsock_nometadata"} {
			prog, err := seccompProgram(mode, a.audit)
			if err != nil {
				t.Fatal(err)
			}
			got := seccompListing(prog, mode, a)
			path := filepath.Join("testdata", "seccomp", name+"_"+a.name+".txt")
			if os.Getenv(seccompGoldenEnv) == "1" {
				header := "mode: " + name + "\narch: " + a.name + "\n"
				writeVectorSections(t, path, header, vectorSection{"listing", got})
				continue
			}
			c := readVectorCase(t, path)
			c.only(t, "mode", "arch")
			if c.field(t, "mode") != name || c.field(t, "arch") != a.name {
				t.Errorf("%s: mode %s arch %s, want %s %s", path, c.fields["mode"], c.fields["arch"], name, a.name)
			}
			if want := c.section(t, "listing"); got != want {
				t.Errorf("%s differs from the program; the program lists as:\n%s", path, got)
			}
		}
	}
}

// seccompAvailable skips the test when the kernel has no seccomp at all.
func seccompAvailable(t *testing.T) {
	t.Helper()
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		t.Skipf("seccomp is unavailable on this kernel: PR_GET_SECCOMP: %v", err)
	}
}

const (
	seccompChildEnv = "EXEC_SERVER_SECCOMP_CHILD" // the mode a re-exec'd test binary filters itself with
	seccompPortEnv  = "EXEC_SERVER_SECCOMP_PORT"  // a TCP port on 127.0.0.1 that accepts connections
)

// seccompChildCommand re-runs this test binary for the single test named, with env added. A
// race-enabled child would otherwise sleep a second before exiting (the race runtime's
// atexit_sleep_ms), so that is set to 0, after any GORACE options of the caller.
func seccompChildCommand(test string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	return cmd
}

// seccompProbe is a system call the kernel test makes, and the modes it must fail with EPERM
// under. Under every other mode it must give what it gives without a filter.
type seccompProbe struct {
	name     string
	deniedIn []seccompMode
}

func seccompProbes() []seccompProbe {
	netOnly, both := []seccompMode{seccompNetwork}, []seccompMode{seccompNetwork, seccompVsock}
	return []seccompProbe{
		{"socket AF_INET", netOnly},
		{"socket AF_INET6", netOnly},
		{"socket AF_NETLINK", netOnly},
		{"socket AF_VSOCK", both},
		{"socket AF_UNIX", nil},
		{"socket AF_UNIX, junk high word", nil},
		{"socket AF_INET, junk high word", netOnly},
		{"socketpair AF_UNIX", nil},
		{"socket AF_UNIX SOCK_DGRAM", netOnly},
		{"socket AF_UNIX SOCK_SEQPACKET", nil},
		{"socketpair AF_UNIX SOCK_DGRAM", netOnly},
		{"keyctl", both},
		{"add_key", both},
		{"socketpair AF_INET", netOnly},
		{"socketpair AF_VSOCK", both},
		{"connect AF_UNIX", netOnly},
		{"bind abstract AF_UNIX", netOnly},
		{"sendto socketpair", netOnly},
		{"recvfrom socketpair", nil},
		{"ptrace", netOnly},
		{"io_uring_setup", both},
		{"ioctl TIOCSTI", both},
		{"ioctl TIOCLINUX", both},
		{"ioctl TCGETS", nil},
		{"second thread: socket AF_INET", netOnly},
		{"bash /dev/tcp", netOnly},
	}
}

// TestSeccompKernel installs each mode's filter in a re-exec of the test binary (filters cannot
// be removed, so never in this process) and compares what real system calls give there with a
// run without a filter: the denied ones fail with EPERM, the others answer as if unfiltered.
// The filter must cover a thread that existed before it was installed (TSYNC), and a program
// the filtered process execs.
func TestSeccompKernel(t *testing.T) {
	if mode := os.Getenv(seccompChildEnv); mode != "" {
		seccompChild(mode)
	}
	seccompAvailable(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	modes := map[seccompMode]string{seccompOff: "off", seccompNetwork: "network", seccompVsock: "vsock"}
	results := map[seccompMode]map[string]string{}
	for mode, name := range modes {
		cmd := seccompChildCommand("TestSeccompKernel", seccompChildEnv+"="+name, seccompPortEnv+"="+port)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child %s: %v\n%s%s", name, err, out, stderr.Bytes())
		}
		results[mode] = map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			k, v, _ := strings.Cut(line, "\t")
			results[mode][k] = v
		}
		t.Logf("%s:\n%s", name, out)
	}

	off := results[seccompOff]
	for _, p := range seccompProbes() {
		if off[p.name] == "no bash" {
			t.Log("no bash here: the probe of an exec'd program is skipped")
			continue
		}
		if off[p.name] == "" {
			t.Errorf("%s: no result", p.name)
			continue
		}
		if off[p.name] == "EPERM" {
			t.Logf("%s gives EPERM without a filter too: on this host it proves nothing", p.name)
		}
		for _, mode := range []seccompMode{seccompNetwork, seccompVsock} {
			want := off[p.name]
			for _, m := range p.deniedIn {
				if m == mode {
					want = "EPERM"
				}
			}
			if got := results[mode][p.name]; got != want {
				t.Errorf("%s under %s: %s, want %s", p.name, modes[mode], got, want)
			}
		}
	}
	for _, mode := range []seccompMode{seccompNetwork, seccompVsock} {
		for _, k := range []string{"status", "second thread: status"} {
			if got := results[mode][k]; got != "NoNewPrivs=1 Seccomp=2" {
				t.Errorf("%s under %s: %q, want NoNewPrivs=1 Seccomp=2", k, modes[mode], got)
			}
		}
	}
	for mode := range modes {
		if got := results[mode]["second thread is another thread"]; got != "ok" {
			t.Errorf("second thread under %s: %s", modes[mode], got)
		}
	}
}

// seccompChild is the filtered side of TestSeccompKernel: it starts a second thread, installs
// the filter of the mode named, runs every probe on both threads, prints one `probe<TAB>result`
// line each, and exits.
func seccompChild(modeName string) {
	mode, ok := map[string]seccompMode{"off": seccompOff, "network": seccompNetwork, "vsock": seccompVsock}[modeName]
	if !ok {
		fmt.Printf("mode\tunknown: %q\n", modeName)
		os.Exit(2)
	}
	runtime.LockOSThread() // NO_NEW_PRIVS belongs to the thread that installs the filter

	// A second thread, alive and parked before the filter exists: TSYNC must reach it.
	tids := make(chan int)
	start := make(chan struct{})
	report := make(chan [2]string)
	go func() {
		runtime.LockOSThread() // its own OS thread, never shared with the main goroutine's
		tids <- unix.Gettid()
		<-start
		report <- [2]string{seccompErr(socketProbe(unix.AF_INET, 0)), procStatus("/proc/thread-self/status")}
	}()
	otherTid := <-tids

	if err := installSeccomp(mode); err != nil {
		fmt.Printf("install\t%v\n", err)
		os.Exit(2)
	}
	var out strings.Builder
	emit := func(name, result string) { fmt.Fprintf(&out, "%s\t%s\n", name, result) }
	for _, p := range seccompChildProbes() {
		emit(p.name, seccompErr(p.run()))
	}
	emit("status", procStatus("/proc/thread-self/status"))
	close(start)
	r := <-report
	emit("second thread: socket AF_INET", r[0])
	emit("second thread: status", r[1])
	if otherTid != unix.Gettid() {
		emit("second thread is another thread", "ok")
	} else {
		emit("second thread is another thread", "no: same tid")
	}
	os.Stdout.WriteString(out.String())
	os.Exit(0)
}

// seccompChildProbes are the probes of seccompProbes that run on the main thread.
func seccompChildProbes() []struct {
	name string
	run  func() error
} {
	pid := strconv.Itoa(os.Getpid())
	junk := uint64(0xdeadbeef) << 32
	return []struct {
		name string
		run  func() error
	}{
		{"socket AF_INET", func() error { return socketProbe(unix.AF_INET, 0) }},
		{"socket AF_INET6", func() error { return socketProbe(unix.AF_INET6, 0) }},
		{"socket AF_NETLINK", func() error { return socketProbe(unix.AF_NETLINK, 0) }},
		{"socket AF_VSOCK", func() error { return socketProbe(unix.AF_VSOCK, 0) }},
		{"socket AF_UNIX", func() error { return socketProbe(unix.AF_UNIX, 0) }},
		{"socket AF_UNIX, junk high word", func() error { return socketProbe(unix.AF_UNIX, junk) }},
		{"socket AF_INET, junk high word", func() error { return socketProbe(unix.AF_INET, junk) }},
		{"socketpair AF_UNIX", func() error { return socketpairProbe(unix.AF_UNIX) }},
		{"socket AF_UNIX SOCK_DGRAM", func() error { return socketTypeProbe(unix.AF_UNIX, unix.SOCK_DGRAM) }},
		{"socket AF_UNIX SOCK_SEQPACKET", func() error { return socketTypeProbe(unix.AF_UNIX, unix.SOCK_SEQPACKET) }},
		{"socketpair AF_UNIX SOCK_DGRAM", func() error {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			unix.Close(fds[0])
			return unix.Close(fds[1])
		}},
		{"keyctl", func() error {
			_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
			return err
		}},
		{"add_key", func() error {
			// No payload for a keyring type that needs one: EINVAL unfiltered, nothing added.
			_, err := unix.AddKey("user", "exec-server-seccomp-probe", nil, 0)
			return err
		}},
		{"socketpair AF_INET", func() error { return socketpairProbe(unix.AF_INET) }},
		{"socketpair AF_VSOCK", func() error { return socketpairProbe(unix.AF_VSOCK) }},
		{"connect AF_UNIX", func() error {
			return withUnixSocket(func(fd int) error {
				return unix.Connect(fd, &unix.SockaddrUnix{Name: "@exec-server-seccomp-absent-" + pid})
			})
		}},
		{"bind abstract AF_UNIX", func() error {
			return withUnixSocket(func(fd int) error {
				return unix.Bind(fd, &unix.SockaddrUnix{Name: "@exec-server-seccomp-" + pid})
			})
		}},
		{"sendto socketpair", func() error {
			return withSocketpair(func(a, b int) error { return unix.Sendto(a, []byte("x"), 0, nil) })
		}},
		{"recvfrom socketpair", func() error {
			return withSocketpair(func(a, b int) error {
				if _, err := unix.Write(a, []byte("x")); err != nil {
					return err
				}
				_, _, err := unix.Recvfrom(b, make([]byte, 1), 0)
				return err
			})
		}},
		{"ptrace", func() error {
			// PEEKDATA on a process we do not trace: ESRCH unfiltered.
			_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, uintptr(os.Getpid()), 0, 0, 0, 0)
			return errnoErr(e)
		}},
		{"io_uring_setup", func() error {
			// A nil params pointer: EFAULT unfiltered, where io_uring is enabled.
			_, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, 0, 0)
			return errnoErr(e)
		}},
		// On /dev/null, which is no terminal: ENOTTY unfiltered.
		{"ioctl TIOCSTI", func() error { return devNullIoctl(unix.TIOCSTI) }},
		{"ioctl TIOCLINUX", func() error { return devNullIoctl(unix.TIOCLINUX) }},
		{"ioctl TCGETS", func() error { return devNullIoctl(unix.TCGETS) }},
		{"bash /dev/tcp", func() error { return bashConnect(os.Getenv(seccompPortEnv)) }},
	}
}

// devNullIoctl makes the ioctl req on /dev/null, with a pointer to one byte.
func devNullIoctl(req uint) error {
	fd, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var b [64]byte
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(&b[0])))
	return errnoErr(e)
}

// socketProbe makes a stream socket (a datagram one for netlink) with the domain in the low
// word of the first argument and hi in the high word, and closes it.
func socketProbe(domain int, hi uint64) error {
	typ := unix.SOCK_STREAM
	if domain == unix.AF_NETLINK {
		typ = unix.SOCK_DGRAM
	}
	fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(hi|uint64(domain)), uintptr(typ|unix.SOCK_CLOEXEC), 0)
	if e != 0 {
		return e
	}
	return unix.Close(int(fd))
}

// socketTypeProbe makes a socket of the domain and type, and closes it.
func socketTypeProbe(domain, typ int) error {
	fd, err := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

func socketpairProbe(domain int) error {
	fds, err := unix.Socketpair(domain, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	unix.Close(fds[0])
	return unix.Close(fds[1])
}

func withUnixSocket(f func(fd int) error) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	return f(fd)
}

func withSocketpair(f func(a, b int) error) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socketpair: %w", err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	return f(fds[0], fds[1])
}

// bashConnect execs bash to open a TCP connection to 127.0.0.1:port, so that the filter is
// seen to hold in a program exec'd by the filtered process. (dash, /bin/sh on Debian, has no
// /dev/tcp.)
func bashConnect(port string) error {
	bash, err := exec.LookPath("bash")
	if err != nil {
		return errors.New("no bash")
	}
	cmd := exec.Command(bash, "--norc", "--noprofile", "-c", "exec 3<>/dev/tcp/127.0.0.1/"+port)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	out, err := cmd.CombinedOutput()
	switch {
	case err == nil:
		return nil
	case bytes.Contains(out, []byte("Operation not permitted")):
		return unix.EPERM
	}
	return fmt.Errorf("%v: %q", err, out)
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// seccompErr is a probe's result as the child prints it: ok, an errno's name, or the error.
func seccompErr(err error) string {
	var e syscall.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &e) && unix.ErrnoName(e) != "":
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// procStatus is the NoNewPrivs and Seccomp lines of a /proc status file.
func procStatus(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var fields []string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "NoNewPrivs" || k == "Seccomp" {
			fields = append(fields, k+"="+strings.TrimSpace(v))
		}
	}
	return strings.Join(fields, " ")
}

// TestSeccompForeignArchKills loads the other architecture's programs into a re-exec of the
// test binary: the kernel's checker must accept them, and since every system call the child
// makes afterwards comes from the wrong architecture, the child must die of SIGSYS at once.
func TestSeccompForeignArchKills(t *testing.T) {
	if mode := os.Getenv(seccompChildEnv); mode != "" {
		foreignArchChild(mode)
	}
	seccompAvailable(t)
	for _, mode := range []string{"network", "vsock"} {
		cmd := seccompChildCommand("TestSeccompForeignArchKills", seccompChildEnv+"="+mode)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("%s: child: %v\n%s", mode, err, out)
		}
		ws := ee.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
			t.Errorf("%s: child ended with %v, want SIGSYS\n%s", mode, ee, out)
		}
	}
}

func foreignArchChild(modeName string) {
	mode := map[string]seccompMode{"network": seccompNetwork, "vsock": seccompVsock}[modeName]
	native, err := seccompNativeArch()
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	foreign := uint32(unix.AUDIT_ARCH_AARCH64)
	if native == unix.AUDIT_ARCH_AARCH64 {
		foreign = unix.AUDIT_ARCH_X86_64
	}
	prog, err := seccompProgram(mode, foreign)
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	// SIGSYS would dump core (core_pattern may be "core", in the package directory).
	unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	if err := loadSeccompFilter(prog); err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	os.Exit(0) // exit_group is a system call too: the kernel kills the process here
}
