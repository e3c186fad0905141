package main

// Seccomp filters for sandboxed processes (docs/sandbox.md §2, "Seccomp"): classic BPF built
// by hand, for amd64 and arm64, from the per-architecture syscall table below, so either host
// builds (and tests) both programs.
//
// The kernel runs the filter on every system call. Its packet is a struct seccomp_data,
// read by 32-bit loads in the CPU's byte order (little-endian on both architectures, so a
// 64-bit argument's low word comes first):
//
//	offset  size  field
//	0       4     nr                   system call number (int)
//	4       4     arch                 AUDIT_ARCH_* of the calling convention
//	8       8     instruction_pointer
//	16      4     args[0], low word    socket's and socketpair's domain (a C int)
//	20      4     args[0], high word
//	24      4     args[1], low word    ioctl's request (a C unsigned int)
//	28      4     args[1], high word
//	32..63  8*4   args[2..5]
//
// The seccompNetwork program for amd64 (arm64: arch 0xc00000b7, no x32 line, its own numbers;
// testdata/seccomp/ holds all four listings as the tests check them):
//
//	0     ld  [4]                             arch
//	1     jeq #0xc000003e     jt 2     jf KILL  another calling convention: i386 (int 0x80), arm32
//	2     ld  [0]                             nr
//	3     jge #0x40000000     jt DENY  jf 4     x32 numbers (__X32_SYSCALL_BIT) and negative ones
//	4     jeq #connect        jt DENY  jf 5     one line per denied syscall, in table order
//	...
//	      jeq #ioctl          jt REQ
//	      jeq #socket         jt SOCK
//	      jeq #socketpair     jt SOCK  jf ALLOW
//	SOCK  ld  [16]                            domain
//	      jeq #AF_UNIX        jt ALLOW jf DENY
//	REQ   ld  [24]                            request
//	      jeq #TIOCSTI        jt DENY
//	      jeq #TIOCLINUX      jt DENY  jf ALLOW
//	ALLOW ret #0x7fff0000                     SECCOMP_RET_ALLOW
//	DENY  ret #0x00050001                     SECCOMP_RET_ERRNO | EPERM
//	KILL  ret #0x80000000                     SECCOMP_RET_KILL_PROCESS
//
// seccompVsock has the same frame with only the io_uring lines denied, and SOCK asks
// `jeq #AF_VSOCK jt DENY jf ALLOW`.
//
// Both deny the ioctls that push input into a terminal (TIOCSTI; TIOCLINUX, whose selection
// paste does the same on a virtual console): `exec-server sandbox` leaves the command on the
// caller's terminal, where it could otherwise type a command into the caller's shell, to run
// unconfined once the sandbox is gone (bubblewrap's CVE-2017-5226). The request is an
// unsigned int to the kernel, so its low word is exactly what the kernel acts on.
//
// Two decisions. recvfrom stays allowed, as in the reference (sendmsg and recvmsg are not
// named either): the filter takes away making, binding and connecting sockets, not reading
// from a unix socket or socketpair the process holds. And the domain check reads only the low
// word of args[0]: the kernel declares socket's domain an int and truncates the register to
// it, so the low word is exactly the domain the kernel acts on. AF_UNIX with junk in the high
// word makes a unix socket and is allowed; AF_INET with junk in it is still denied.

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccompMode says which filter a sandboxed process gets.
type seccompMode int

const (
	seccompOff seccompMode = iota
	// seccompNetwork: the network is taken away (the reference's "Restricted" mode).
	seccompNetwork
	// seccompVsock: network allowed, but AF_VSOCK sockets and io_uring denied (file system
	// restricted, network enabled).
	seccompVsock
	// seccompProxyRouted: the command runs in a network namespace of its own, whose only
	// listeners are the bridges to the proxy (docs/network.md §4). IP sockets, connect, bind
	// and listen are allowed, for they reach only that namespace's lo; unix sockets (which
	// reach paths outside it), every other family, io_uring, ptrace and the terminal ioctls
	// stay denied; a unix stream or seqpacket socketpair is allowed.
	seccompProxyRouted

	// seccompNoMetadata, added to either mode, also denies every call that changes a file's
	// mode, owner, times, extended attributes or inode flags (seccompRuleMetadata, and the
	// ioctls of seccompMetadataRequests). It is for the Landlock fallback under a profile
	// with no writable root: Landlock does not cover those calls, so without it a read-only
	// command could chmod, touch or setfacl any file of its user (docs/sandbox.md §2).
	seccompNoMetadata seccompMode = 1 << 4
)

// base is m without seccompNoMetadata.
func (m seccompMode) base() seccompMode { return m &^ seccompNoMetadata }

// Offsets into struct seccomp_data (the table above).
const (
	seccompDataNr      = 0
	seccompDataArch    = 4
	seccompDataArg0Low = 16
	seccompDataArg1Low = 24
)

// seccompSockTypeMask is SOCK_TYPE_MASK: the socket type in socket's and socketpair's second
// argument, below the SOCK_NONBLOCK and SOCK_CLOEXEC flags.
const seccompSockTypeMask = 0xf

// seccompX32SyscallNr is __X32_SYSCALL_BIT: the x32 ABI's system calls enter through the
// amd64 entry with this bit set in their numbers, and report AUDIT_ARCH_X86_64.
const seccompX32SyscallNr = 0x40000000

// The filters' three answers.
const (
	seccompAllow = unix.SECCOMP_RET_ALLOW
	seccompDeny  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	seccompKill  = unix.SECCOMP_RET_KILL_PROCESS
)

// seccompRule is what a filter does with a syscall of the table.
type seccompRule uint8

const (
	seccompRuleNetwork  seccompRule = iota + 1 // EPERM under seccompNetwork
	seccompRuleProcess                         // EPERM under seccompNetwork and seccompProxyRouted
	seccompRuleAlways                          // EPERM under seccompNetwork and seccompVsock
	seccompRuleDomain                          // socket, socketpair: decided by the domain (and type)
	seccompRuleRequest                         // ioctl: decided by the request (seccompDeniedRequests)
	seccompRuleMetadata                        // EPERM with seccompNoMetadata: changes a file's metadata
	seccompRuleSelf                            // prlimit64: EPERM unless its pid (first argument) is 0, the caller
)

// seccompAbsent marks a syscall an architecture does not have (arm64 has no chmod, only
// fchmodat): the filter has no line for it there.
const seccompAbsent = ^uint32(0)

// seccompDeniedRequests are the ioctl requests every filter denies: those that insert input
// into a terminal (the file comment).
func seccompDeniedRequests() []uint32 {
	return []uint32{unix.TIOCSTI, unix.TIOCLINUX}
}

// seccompMetadataRequests are the ioctl requests seccompNoMetadata adds: setting a file's
// inode flags (chattr), its fsxattr (flags, project id), its generation number (ext4, which
// also moves its ctime), turning on fs-verity (the file's data frozen for good) and an
// encryption policy on an empty directory: each allowed to the owner on a descriptor opened
// read-only, which Landlock lets through.
func seccompMetadataRequests() []uint32 {
	return []uint32{unix.FS_IOC_SETFLAGS, seccompFSIocFSSetXattr, seccompFSIocSetVersion,
		unix.FS_IOC_ENABLE_VERITY, unix.FS_IOC_SET_ENCRYPTION_POLICY}
}

// seccompFSIocSetVersion is FS_IOC_SETVERSION, _IOW('v', 2, long), the same on amd64 and
// arm64; x/sys/unix does not name it. (Its 32-bit twin, FS_IOC32_SETVERSION, is only
// understood from a 32-bit process, which the filter kills.)
const seccompFSIocSetVersion = 0x40087602

// seccompFSIocFSSetXattr is FS_IOC_FSSETXATTR, _IOW('X', 32, struct fsxattr) (28 bytes), the
// same on amd64 and arm64; x/sys/unix does not name it.
const seccompFSIocFSSetXattr = 0x401c5820

// seccompSyscall is one row of the syscall table.
type seccompSyscall struct {
	name         string // the kernel's name (x/sys/unix spells it SYS_ + upper case)
	amd64, arm64 uint32 // its number on each architecture
	rule         seccompRule
}

// seccompSyscalls is the table every filter is built from: the syscalls the filters name,
// with their numbers from the kernel's arch/x86/entry/syscalls/syscall_64.tbl (amd64) and
// include/uapi/asm-generic/unistd.h (arm64); seccompAbsent where arm64 has only the *at form.
// It is a function, not a variable, so that nothing can change it; TestSeccompSyscallTable
// checks both columns against x/sys/unix.
func seccompSyscalls() []seccompSyscall {
	return []seccompSyscall{
		// name                amd64 arm64
		{"connect", 42, 203, seccompRuleNetwork},
		{"accept", 43, 202, seccompRuleNetwork},
		{"accept4", 288, 242, seccompRuleNetwork},
		{"bind", 49, 200, seccompRuleNetwork},
		{"listen", 50, 201, seccompRuleNetwork},
		{"getpeername", 52, 205, seccompRuleNetwork},
		{"getsockname", 51, 204, seccompRuleNetwork},
		{"shutdown", 48, 210, seccompRuleNetwork},
		{"sendto", 44, 206, seccompRuleNetwork},
		{"sendmmsg", 307, 269, seccompRuleNetwork},
		{"recvmmsg", 299, 243, seccompRuleNetwork},
		{"getsockopt", 55, 209, seccompRuleNetwork},
		{"setsockopt", 54, 208, seccompRuleNetwork},
		{"ptrace", 101, 117, seccompRuleProcess},
		{"process_vm_readv", 310, 270, seccompRuleProcess},
		{"process_vm_writev", 311, 271, seccompRuleProcess},
		{"io_uring_setup", 425, 425, seccompRuleAlways},
		{"io_uring_enter", 426, 426, seccompRuleAlways},
		{"io_uring_register", 427, 427, seccompRuleAlways},
		// The kernel keyrings are not namespaced: the stage joins a session keyring of its
		// own, and these keep the command from reaching the user's keyrings (and every key it
		// may read) by id, as container runtimes do.
		{"keyctl", 250, 219, seccompRuleAlways},
		{"add_key", 248, 217, seccompRuleAlways},
		{"request_key", 249, 218, seccompRuleAlways},
		// Metadata, which Landlock does not cover (seccompNoMetadata).
		{"chmod", 90, seccompAbsent, seccompRuleMetadata},
		{"fchmod", 91, 52, seccompRuleMetadata},
		{"fchmodat", 268, 53, seccompRuleMetadata},
		{"fchmodat2", 452, 452, seccompRuleMetadata},
		{"chown", 92, seccompAbsent, seccompRuleMetadata},
		{"fchown", 93, 55, seccompRuleMetadata},
		{"lchown", 94, seccompAbsent, seccompRuleMetadata},
		{"fchownat", 260, 54, seccompRuleMetadata},
		{"utime", 132, seccompAbsent, seccompRuleMetadata},
		{"utimes", 235, seccompAbsent, seccompRuleMetadata},
		{"futimesat", 261, seccompAbsent, seccompRuleMetadata},
		{"utimensat", 280, 88, seccompRuleMetadata},
		{"setxattr", 188, 5, seccompRuleMetadata},
		{"lsetxattr", 189, 6, seccompRuleMetadata},
		{"fsetxattr", 190, 7, seccompRuleMetadata},
		{"setxattrat", 463, 463, seccompRuleMetadata},
		{"removexattr", 197, 14, seccompRuleMetadata},
		{"lremovexattr", 198, 15, seccompRuleMetadata},
		{"fremovexattr", 199, 16, seccompRuleMetadata},
		{"removexattrat", 466, 466, seccompRuleMetadata},
		{"file_setattr", 469, 469, seccompRuleMetadata},
		// Another process's limits: the command's anchor and supervisor are of its user, and
		// one whose open-file limit it had lowered to 0 could not read /proc to find the
		// command's daemons, which would outlive it (docs/sandbox.md §2, "Processes"). The
		// kernel takes the pid as an int: the low word decides.
		{"prlimit64", 302, 261, seccompRuleSelf},
		{"ioctl", 16, 29, seccompRuleRequest},
		{"socket", 41, 198, seccompRuleDomain},
		{"socketpair", 53, 199, seccompRuleDomain},
	}
}

// number is s's number on the architecture arch, which must be one of the table's.
func (s seccompSyscall) number(arch uint32) uint32 {
	if arch == unix.AUDIT_ARCH_AARCH64 {
		return s.arm64
	}
	return s.amd64
}

// seccompNativeArch is the AUDIT_ARCH_* value of the architecture this binary runs as: the
// one the kernel reports in seccomp_data.arch for its system calls.
func seccompNativeArch() (uint32, error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, nil
	}
	return 0, fmt.Errorf("seccomp: no filter for GOARCH %s", runtime.GOARCH)
}

// seccompProgram is the filter for mode on the architecture whose AUDIT_ARCH_* value is arch.
// It is built for any supported arch on any host, so that both programs can be checked
// anywhere. Only seccompNetwork, seccompVsock and seccompProxyRouted have a program.
func seccompProgram(mode seccompMode, arch uint32) ([]unix.SockFilter, error) {
	if arch != unix.AUDIT_ARCH_X86_64 && arch != unix.AUDIT_ARCH_AARCH64 {
		return nil, fmt.Errorf("seccomp: no syscall table for audit arch %#x", arch)
	}
	metadata := mode&seccompNoMetadata != 0
	mode = mode.base()
	if mode != seccompNetwork && mode != seccompVsock && mode != seccompProxyRouted {
		return nil, fmt.Errorf("seccomp: mode %d has no filter", mode)
	}
	var a bpfAssembler
	a.load(seccompDataArch)
	a.jump(unix.BPF_JEQ, arch, toNext, toKill)
	a.load(seccompDataNr)
	if arch == unix.AUDIT_ARCH_X86_64 {
		// The x32 ABI shares AUDIT_ARCH_X86_64 and marks its numbers with this bit; fence it
		// off whole rather than list every x32 twin of a denied call.
		a.jump(unix.BPF_JGE, seccompX32SyscallNr, toDeny, toNext)
	}
	var domain []uint32 // socket, socketpair
	var pair uint32     // socketpair, which seccompProxyRouted judges apart from socket
	for _, s := range seccompSyscalls() {
		switch {
		case s.number(arch) == seccompAbsent:
		case s.rule == seccompRuleDomain:
			domain = append(domain, s.number(arch))
			if s.name == "socketpair" {
				pair = s.number(arch)
			}
		case s.rule == seccompRuleRequest:
			a.jump(unix.BPF_JEQ, s.number(arch), toRequest, toNext)
		case s.rule == seccompRuleSelf:
			a.jump(unix.BPF_JEQ, s.number(arch), toSelf, toNext)
		case s.rule == seccompRuleAlways, s.rule == seccompRuleNetwork && mode == seccompNetwork,
			s.rule == seccompRuleProcess && mode != seccompVsock,
			s.rule == seccompRuleMetadata && metadata:
			a.jump(unix.BPF_JEQ, s.number(arch), toDeny, toNext)
		}
	}
	for i, nr := range domain {
		orElse := toNext
		if i == len(domain)-1 {
			orElse = toAllow
		}
		to := toDomain
		if mode == seccompProxyRouted && nr == pair {
			to = toPair
		}
		a.jump(unix.BPF_JEQ, nr, to, orElse)
	}
	a.mark(toDomain)
	a.load(seccompDataArg0Low)
	switch mode {
	case seccompProxyRouted:
		// IP sockets reach only the namespace's lo (docs/network.md §4). A unix socket would
		// reach the host's sockets by path, outside the namespace, as the server's user (root
		// for a server run as root: docker.sock, the system bus): refused, as the reference
		// refuses them in this mode. A socketpair reaches nothing but itself.
		a.jump(unix.BPF_JEQ, unix.AF_INET, toAllow, toNext)
		a.jump(unix.BPF_JEQ, unix.AF_INET6, toAllow, toDeny)
		a.mark(toPair)
		a.load(seccompDataArg0Low)
		fallthrough
	case seccompNetwork:
		a.jump(unix.BPF_JEQ, unix.AF_UNIX, toType, toDeny)
		// Only connection-oriented unix sockets: a datagram one (SOCK_RAW is one too, for
		// AF_UNIX) sends to any socket by path with sendmsg, connected or not.
		a.mark(toType)
		a.load(seccompDataArg1Low)
		a.and(seccompSockTypeMask)
		a.jump(unix.BPF_JEQ, unix.SOCK_STREAM, toAllow, toNext)
		a.jump(unix.BPF_JEQ, unix.SOCK_SEQPACKET, toAllow, toDeny)
	default:
		a.jump(unix.BPF_JEQ, unix.AF_VSOCK, toDeny, toAllow)
	}
	a.mark(toRequest)
	a.load(seccompDataArg1Low)
	requests := seccompDeniedRequests()
	if metadata {
		requests = append(requests, seccompMetadataRequests()...)
	}
	for i, req := range requests {
		orElse := toNext
		if i == len(requests)-1 {
			orElse = toAllow
		}
		a.jump(unix.BPF_JEQ, req, toDeny, orElse)
	}
	a.mark(toSelf)
	a.load(seccompDataArg0Low)
	a.jump(unix.BPF_JEQ, 0, toAllow, toDeny)
	a.mark(toAllow)
	a.ret(seccompAllow)
	a.mark(toDeny)
	a.ret(seccompDeny)
	a.mark(toKill)
	a.ret(seccompKill)
	return a.assemble()
}

// bpfTarget names where a conditional jump goes: the next instruction or one of the
// program's labelled blocks. Labels keep the builder free of hand-counted offsets.
type bpfTarget uint8

const (
	toNext    bpfTarget = iota // the following instruction
	toDomain                   // the domain check of socket and socketpair
	toPair                     // seccompProxyRouted's domain check of socketpair
	toType                     // the type check of an AF_UNIX socket or socketpair
	toRequest                  // the request check of ioctl
	toSelf                     // the pid check of prlimit64
	toAllow                    // ret ALLOW
	toDeny                     // ret ERRNO|EPERM
	toKill                     // ret KILL_PROCESS
	bpfTargets
)

// bpfInsn is an instruction whose jump targets are still labels.
type bpfInsn struct {
	code   uint16
	k      uint32
	jt, jf bpfTarget
}

// bpfAssembler collects a forward-only cBPF program and resolves its labels.
type bpfAssembler struct {
	insns  []bpfInsn
	labels [bpfTargets]int // instruction index of each label, +1 (0: never marked)
}

// load appends `ld [off]`: a 32-bit word of seccomp_data into A, the only load seccomp allows.
func (a *bpfAssembler) load(off uint32) {
	a.insns = append(a.insns, bpfInsn{code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, k: off})
}

// and appends `and #k`: A &= k.
func (a *bpfAssembler) and(k uint32) {
	a.insns = append(a.insns, bpfInsn{code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, k: k})
}

// jump appends a conditional jump comparing A with k (op: BPF_JEQ or BPF_JGE, unsigned).
func (a *bpfAssembler) jump(op uint16, k uint32, jt, jf bpfTarget) {
	a.insns = append(a.insns, bpfInsn{code: unix.BPF_JMP | op | unix.BPF_K, k: k, jt: jt, jf: jf})
}

// ret appends `ret #k`: the filter's answer.
func (a *bpfAssembler) ret(k uint32) {
	a.insns = append(a.insns, bpfInsn{code: unix.BPF_RET | unix.BPF_K, k: k})
}

// mark places label t at the next instruction.
func (a *bpfAssembler) mark(t bpfTarget) {
	a.labels[t] = len(a.insns) + 1
}

// assemble resolves the labels into the 8-bit forward offsets cBPF jumps take. A label that
// is missing, behind the jump, or more than 255 instructions ahead is an error, as is a
// program the kernel would refuse for its length.
func (a *bpfAssembler) assemble() ([]unix.SockFilter, error) {
	if len(a.insns) == 0 || len(a.insns) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: program of %d instructions", len(a.insns))
	}
	prog := make([]unix.SockFilter, len(a.insns))
	for i, in := range a.insns {
		jt, err := a.offset(i, in.jt)
		if err != nil {
			return nil, err
		}
		jf, err := a.offset(i, in.jf)
		if err != nil {
			return nil, err
		}
		prog[i] = unix.SockFilter{Code: in.code, Jt: jt, Jf: jf, K: in.k}
	}
	return prog, nil
}

// offset is the jump offset from instruction i to label t.
func (a *bpfAssembler) offset(i int, t bpfTarget) (uint8, error) {
	if t == toNext {
		return 0, nil
	}
	if a.labels[t] == 0 {
		return 0, fmt.Errorf("seccomp: label %d is never placed", t)
	}
	off := a.labels[t] - 1 - (i + 1)
	if off < 0 || off > 0xff {
		return 0, fmt.Errorf("seccomp: instruction %d cannot jump %d to label %d", i, off, t)
	}
	return uint8(off), nil
}

// installSeccomp sets PR_SET_NO_NEW_PRIVS on the calling thread and installs mode's filter
// for the native architecture with SECCOMP_FILTER_FLAG_TSYNC (all threads). seccompOff is a
// no-op.
//
// No-new-privs is what lets an unprivileged process install a filter, and it keeps a setuid
// program exec'd under the filter from gaining privileges. It is a per-thread flag: TSYNC
// copies the filter and the caller's flag to every other thread, so the caller must stay on
// one OS thread between the two steps (the sandbox stage runs locked to its thread,
// runSandboxStage). Once installed, a filter can never be removed from the process or its descendants.
func installSeccomp(mode seccompMode) error {
	if mode == seccompOff {
		return nil
	}
	arch, err := seccompNativeArch()
	if err != nil {
		return err
	}
	prog, err := seccompProgram(mode, arch)
	if err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: PR_SET_NO_NEW_PRIVS: %w", err)
	}
	return loadSeccompFilter(prog)
}

// loadSeccompFilter hands prog to seccomp(SECCOMP_SET_MODE_FILTER, TSYNC). With TSYNC the
// kernel either filters every thread of the process or none: when one thread cannot take the
// filter (it has an unrelated one), the call returns that thread's id instead of an error.
func loadSeccompFilter(prog []unix.SockFilter) error {
	if len(prog) == 0 || len(prog) > unix.BPF_MAXINSNS {
		return fmt.Errorf("seccomp: program of %d instructions", len(prog))
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	tid, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("seccomp: SECCOMP_SET_MODE_FILTER: %w", errno)
	}
	if tid != 0 {
		return fmt.Errorf("seccomp: thread %d cannot take the filter (TSYNC)", tid)
	}
	return nil
}
