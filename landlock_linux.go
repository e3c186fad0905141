package main

// Landlock for the sandbox stage on hosts without user namespaces (docs/sandbox.md §2,
// "Landlock fallback, in detail", and §7): a sandboxProfile (sandbox.go) turned into one
// Landlock domain, applied to the calling OS thread. Namespaces stay the main mechanism; this
// is the fallback.
//
// Landlock restricts one thread, irreversibly, and this kernel generation has no way to
// synchronise the other threads of a Go process (no LANDLOCK_RESTRICT_SELF_TSYNC before
// ABI 8). So the caller locks its goroutine to its thread (runtime.LockOSThread), sets
// NO_NEW_PRIVS, calls restrictThreadLandlock, and forks or execs the command from that same
// thread: the child inherits that thread's domain, whatever the other threads may do.
//
// Landlock only grants, and a grant on a directory covers everything below it. What the
// profile expresses in other terms is mapped onto that (landlockRulesFor):
//
//   - Protected names (.git .codex .agents .aws at the top of a writable root, a `.git`
//     file's gitdir target) must stay read-only inside a writable tree. A writable root R is
//     therefore never granted as a whole: each existing direct child of R gets write access,
//     except the protected ones, and R itself is only readable (what a command then cannot
//     do at R's top level: docs/sandbox.md §2, "Landlock fallback, in detail"). A child
//     that contains a protected, read-only (a read entry inside a writable root, or any read
//     entry under full write) or denied path deeper down is split the same way. A writable
//     root that is a regular file gets file rights. Symbolic links among the children are
//     never granted: that would grant their target. A writable root inside a protected or
//     denied path gets nothing: the block wins. A full-write profile grants "/" and ignores
//     protected names (it needs no Landlock at all unless it denies something).
//   - Deny entries are honoured by leaving their paths out of every rule, splitting any
//     granted tree that contains one; a directory on the way to a denied path is then not
//     even listable. Under a full-read profile the grant is "/" and nothing can be carved
//     out of it, so landlockRulesFor refuses such a profile and the caller fails closed.
//   - Devices: restricted reads get /proc and the harmless character devices, never /dev as
//     a whole, since root could otherwise read the raw disks (/dev/vda) and with them every
//     file. Write grants never include MAKE_CHAR or MAKE_BLOCK, for the same reason: root
//     could mknod a disk node inside its workspace.
//
// A rule is bound to an inode, not to a path: the write rule on an existing top-level file
// also covers its other hard links (the same data, writable either way), and a bind mount of
// a granted directory elsewhere is writable there too. Denials are EACCES (EXDEV for a link
// or rename across rules), where the namespace sandbox gives EROFS or ENOENT.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ABI versions at which Landlock gained what this file uses.
const (
	landlockABIRefer    = 2 // LANDLOCK_ACCESS_FS_REFER
	landlockABITruncate = 3 // LANDLOCK_ACCESS_FS_TRUNCATE
	landlockABINet      = 4 // handled_access_net in the ruleset attr
	landlockABIIoctlDev = 5 // LANDLOCK_ACCESS_FS_IOCTL_DEV
	landlockABIScoped   = 6 // scoped in the ruleset attr
)

// Sizes of struct landlock_ruleset_attr the kernel accepts for each ABI: handled_access_fs
// alone, then with handled_access_net, then with scoped. x/sys/unix's LandlockRulesetAttr
// already has later fields; the size passed says how much of it the kernel reads.
const (
	landlockAttrSizeFS     = 8
	landlockAttrSizeNet    = 16
	landlockAttrSizeScoped = 24
)

// landlockRightsV1 are the 13 filesystem rights of ABI 1.
const landlockRightsV1 = unix.LANDLOCK_ACCESS_FS_EXECUTE |
	unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
	unix.LANDLOCK_ACCESS_FS_READ_FILE |
	unix.LANDLOCK_ACCESS_FS_READ_DIR |
	unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
	unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
	unix.LANDLOCK_ACCESS_FS_MAKE_CHAR |
	unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
	unix.LANDLOCK_ACCESS_FS_MAKE_REG |
	unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
	unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
	unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
	unix.LANDLOCK_ACCESS_FS_MAKE_SYM

// landlockFileRights are the only rights a rule on a non-directory may carry; any other
// right there makes landlock_add_rule fail with EINVAL.
const landlockFileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE |
	unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
	unix.LANDLOCK_ACCESS_FS_READ_FILE |
	unix.LANDLOCK_ACCESS_FS_TRUNCATE |
	unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

// landlockReadRights is what a readable path grants: run, read and list.
const landlockReadRights = unix.LANDLOCK_ACCESS_FS_EXECUTE |
	unix.LANDLOCK_ACCESS_FS_READ_FILE |
	unix.LANDLOCK_ACCESS_FS_READ_DIR

// landlockWriteRights is what a writable path grants: every right but creating device nodes
// (see the file comment).
const landlockWriteRights = (landlockRightsV1 |
	unix.LANDLOCK_ACCESS_FS_REFER |
	unix.LANDLOCK_ACCESS_FS_TRUNCATE |
	unix.LANDLOCK_ACCESS_FS_IOCTL_DEV) &^
	(unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK)

// landlockWriteFileRights is what a writable single file (a device such as /dev/null)
// grants: read, write, truncate and device ioctls (a terminal needs them), never execute.
const landlockWriteFileRights = unix.LANDLOCK_ACCESS_FS_READ_FILE |
	unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
	unix.LANDLOCK_ACCESS_FS_TRUNCATE |
	unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

// landlockScopes (ABI ≥ 6) keep the command from signalling, or connecting to the abstract
// unix sockets of, processes outside its domain, such as the exec-server itself.
const landlockScopes = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL

// landlockSystemReads are readable under every restricted-read profile besides
// minimalReadRoots: /proc (other processes' memory and magic links stay guarded by Landlock's
// ptrace scoping and by path checks on the link's target) and the read-only devices programs
// expect. The writable devices are landlockDevWriteFiles.
var landlockSystemReads = []string{"/proc", "/dev/random", "/dev/urandom"}

// landlockDevWriteFiles are the device files every confined command may read and write.
var landlockDevWriteFiles = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx"}

// landlockDevWriteDirs: a pseudo-terminal opened inside needs its /dev/pts/N.
var landlockDevWriteDirs = []string{"/dev/pts"}

// landlockABI is the kernel's Landlock ABI version; 0 when Landlock is unavailable or disabled.
func landlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// landlockHandledFS is every filesystem right the given ABI knows: the domain handles (and so
// denies unless granted) all of them.
func landlockHandledFS(abi int) uint64 {
	if abi < 1 {
		return 0
	}
	var rights uint64 = landlockRightsV1
	if abi >= landlockABIRefer {
		rights |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= landlockABITruncate {
		rights |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= landlockABIIoctlDev {
		rights |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	return rights
}

// landlockAttrSize is how many bytes of the ruleset attr the given ABI reads; an older kernel
// refuses a larger one with E2BIG.
func landlockAttrSize(abi int) uintptr {
	switch {
	case abi >= landlockABIScoped:
		return landlockAttrSizeScoped
	case abi >= landlockABINet:
		return landlockAttrSizeNet
	default:
		return landlockAttrSizeFS
	}
}

// landlockRules is what one Landlock domain allows: paths with read access, paths with full
// write access, and single files that may be written but not created/removed (e.g. /dev/null).
// Paths are absolute and symlink-free, outermost first, none inside another of the same list.
type landlockRules struct {
	Read       []string `json:"read,omitempty"`
	Write      []string `json:"write,omitempty"`
	WriteFiles []string `json:"writeFiles,omitempty"`
}

// landlockRulesFor is what profile p allows, expressed for Landlock (the file comment says
// how protected and denied paths are kept out). It reads the file system: only paths that
// exist now are listed, resolved. It fails when p denies paths under full read, which
// Landlock cannot express.
func landlockRulesFor(p *sandboxProfile) (landlockRules, error) {
	var r landlockRules
	if p.FullRead && len(p.Deny) > 0 {
		return r, fmt.Errorf("landlock cannot deny %s under a full-read profile", p.Deny[0])
	}
	deny := landlockBlocked(p.Deny)

	readRoots := []string{"/"}
	if !p.FullRead {
		readRoots = slices.Concat(p.Read, p.Write, minimalReadRoots, landlockSystemReads)
	}
	read, err := landlockGrantsAround(readRoots, deny)
	if err != nil {
		return r, err
	}

	kernel, err := landlockKernelMounts()
	if err != nil {
		return r, err
	}
	writeRoots := p.Write
	blocked := slices.Concat(deny, landlockBlocked(p.Protected), landlockCarveOuts(p), kernel)
	if p.FullWrite {
		writeRoots = []string{"/"}
	} else {
		// Under the root as resolved too: the grants are made on resolved paths, and a
		// missing name cannot be resolved itself. A root named through a symlink, with no
		// protected name yet, would otherwise be granted whole, and `.git` made in it.
		for _, root := range slices.Concat(p.Write, landlockResolved(p.Write)) {
			for _, name := range protectedNames {
				blocked = append(blocked, filepath.Join(root, name))
			}
		}
	}
	write, err := landlockGrantsAround(slices.Concat(writeRoots, landlockDevWriteDirs), blocked)
	if err != nil {
		return r, err
	}

	var files []string
	for _, f := range landlockResolved(landlockDevWriteFiles) {
		if !landlockCovered(f, deny) && !landlockCovered(f, write) {
			files = append(files, f)
		}
	}
	r.Read = landlockOutermost(read)
	r.Write = landlockOutermost(write)
	r.WriteFiles = landlockOutermost(files)
	return r, nil
}

// landlockCarveOuts are the read entries of p that narrow a write grant, as landlockBlocked
// lists them: those inside a writable root, or all of them under full write. They stay
// read-only; a read root that holds a writable root does not take its writes away.
func landlockCarveOuts(p *sandboxProfile) []string {
	roots := landlockResolved(p.Write)
	var out []string
	for _, path := range p.Read {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			continue
		}
		if p.FullWrite || slices.ContainsFunc(roots, func(w string) bool { return real != w && pathWithin(real, w) }) {
			out = append(out, path)
		}
	}
	return landlockBlocked(out)
}

// landlockBlocked is paths as given plus their resolved forms, so that a blocked path is
// recognised whichever way a grant reaches it.
func landlockBlocked(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		p = filepath.Clean(p)
		out = append(out, p)
		if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
			out = append(out, real)
		}
	}
	return out
}

// landlockResolved resolves symlinks in paths, dropping the missing ones: /lib64 may be
// usr/lib64, and a grant must be compared with blocked paths where it really lands.
func landlockResolved(paths []string) []string {
	var out []string
	for _, p := range paths {
		if real, err := filepath.EvalSymlinks(filepath.Clean(p)); err == nil {
			out = append(out, real)
		}
	}
	return out
}

// landlockCovered reports whether path is one of roots or beneath one.
func landlockCovered(path string, roots []string) bool {
	for _, root := range roots {
		if pathWithin(path, root) {
			return true
		}
	}
	return false
}

// landlockGrantsAround lists the largest subtrees of roots (resolved first) that contain no
// blocked path. A root inside a blocked path grants nothing; a directory with a blocked path
// below it grants nothing itself and is split into its children, recursively. Symbolic links
// among the children are dropped, since a rule on one would grant its target.
func landlockGrantsAround(roots, blocked []string) ([]string, error) {
	var out []string
	for _, root := range landlockResolved(roots) {
		if err := landlockSplit(root, blocked, &out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func landlockSplit(path string, blocked []string, out *[]string) error {
	if landlockCovered(path, blocked) {
		return nil
	}
	below := false
	for _, b := range blocked {
		if pathWithin(b, path) {
			below = true
			break
		}
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("landlock: inspect %s: %w", path, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil
	case !below || !fi.IsDir():
		*out = append(*out, path)
		return nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return fmt.Errorf("landlock: list %s: %w", path, err)
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink != 0 {
			continue
		}
		if err := landlockSplit(filepath.Join(path, e.Name()), blocked, out); err != nil {
			return err
		}
	}
	return nil
}

// landlockOutermost sorts paths outermost first and drops any inside another: a rule there
// would add nothing.
func landlockOutermost(paths []string) []string {
	paths = uniquePaths(paths)
	var out []string
	for _, p := range paths {
		if !landlockCovered(p, out) {
			out = append(out, p)
		}
	}
	return out
}

// restrictThreadLandlock applies r to the calling OS thread, which must be locked to its
// goroutine and have NO_NEW_PRIVS set; the thread's later children inherit the domain. The
// domain handles every filesystem right the running ABI knows, and (ABI ≥ 6) scopes signals
// and abstract unix sockets to itself; network rights are left to seccomp. Paths that do not
// exist are skipped; a rule on a non-directory keeps only file rights. Write paths are
// opened without following a final symlink, and one found there is skipped, so a write grant
// is never redirected.
func restrictThreadLandlock(r landlockRules) error {
	abi := landlockABI()
	if abi == 0 {
		return errors.New("landlock: not available on this kernel")
	}
	handled := landlockHandledFS(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	if abi >= landlockABIScoped {
		attr.Scoped = landlockScopes
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET,
		uintptr(unsafe.Pointer(&attr)), landlockAttrSize(abi), 0)
	runtime.KeepAlive(&attr)
	if errno != 0 {
		return fmt.Errorf("landlock: create ruleset (ABI %d): %w", abi, errno)
	}
	ruleset := int(fd)
	defer unix.Close(ruleset)

	sets := []struct {
		paths  []string
		access uint64
		follow bool
	}{
		{r.Read, landlockReadRights, true},
		{r.Write, landlockWriteRights, false},
		{r.WriteFiles, landlockWriteFileRights, false},
	}
	for _, s := range sets {
		for _, path := range s.paths {
			if err := landlockAllow(ruleset, path, s.access&handled, s.follow); err != nil {
				return err
			}
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0); errno != 0 {
		return fmt.Errorf("landlock: restrict thread: %w", errno)
	}
	return nil
}

// restrictThreadSignalScope keeps the calling thread, and what it runs, from signalling any
// process outside its new Landlock domain (ABI ≥ 6); it handles no filesystem right. It is
// for a sandbox that shares the server's pid namespace (--linux-sandbox-pid-namespace
// inherit), whose command would otherwise signal every process of its user, the server
// included: kill(2) compares user ids, not user namespaces. Without the scope (ABI < 6) it
// does nothing. Like restrictThreadLandlock, it needs NO_NEW_PRIVS and a locked thread.
func restrictThreadSignalScope() error {
	abi := landlockABI()
	if abi < landlockABIScoped {
		return nil
	}
	attr := unix.LandlockRulesetAttr{Scoped: unix.LANDLOCK_SCOPE_SIGNAL}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET,
		uintptr(unsafe.Pointer(&attr)), landlockAttrSize(abi), 0)
	runtime.KeepAlive(&attr)
	if errno != 0 {
		return fmt.Errorf("landlock: create the signal scope (ABI %d): %w", abi, errno)
	}
	defer unix.Close(int(fd))
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock: scope signals: %w", errno)
	}
	return nil
}

// landlockAllow adds to ruleset a rule granting access beneath path.
func landlockAllow(ruleset int, path string, access uint64, follow bool) error {
	flags := unix.O_PATH | unix.O_CLOEXEC
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Open(path, flags, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("landlock: open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("landlock: stat %s: %w", path, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return nil
	case unix.S_IFDIR:
	default:
		access &= landlockFileRights
	}
	if access == 0 {
		return nil
	}
	rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset),
		unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
	runtime.KeepAlive(&rule)
	if errno != 0 {
		return fmt.Errorf("landlock: add rule for %s: %w", path, errno)
	}
	return nil
}

// landlockKernelMounts are the host's mount points of kernelFSTypes (sandbox_mount_linux.go).
// Landlock checks a file in one of them against the grant of the directory the mount stands
// in, so a proc or sysfs mounted inside a writable root (a chroot's /proc in the workspace)
// would let a command run as root write the kernel's settings through it; write grants are
// split around them (docs/sandbox.md §2, Kernel settings).
func landlockKernelMounts() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read the mount table: %w", err)
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		// id parent major:minor root point options [optional...] - type source super-options
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if sep >= 6 && sep+1 < len(fields) && slices.Contains(kernelFSTypes, fields[sep+1]) {
			points = append(points, unescapeMountPath(fields[4]))
		}
	}
	return points, nil
}
