package main

// The fs sandbox worker's guard of protected names on Linux (fs_worker_guard.go,
// docs/sandbox.md §3). Every change the worker makes (fsWrites in fs_write.go) comes here as
// a path, and is made relative to a directory descriptor, never by path again:
//
//	1. the directory that holds the last component is opened (O_PATH), the kernel following
//	   symlinks on the way as it would for the change itself;
//	2. that descriptor is checked: it must not be a writable root when the component is a
//	   protected name, and neither it nor any directory above it (walked up through "..",
//	   by descriptor) may be a protected path that exists now;
//	3. the change is made with the *at call on that descriptor; a last component that is a
//	   symlink (an open that would follow it) is followed here, one hop at a time, each hop
//	   checked as in 2, so that O_CREAT never makes the target of a dangling link unchecked.
//
// What a racing rename or symlink swap changes between two of these steps is only which
// directory the descriptor of step 1 is; the checks and the change are made on the
// descriptor itself. Identities are (device, inode): the writable roots as the worker opened
// them at its start, the protected paths as they are at each change (one that appears while
// the worker lives is protected from then on).
//
// A refusal is EROFS, "Read-only file system (os error 30)", what the kernel answers for a
// name bound read-only; creating a name that exists is EEXIST first, as the kernel checks.

import (
	"errors"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Limits of the guard.
const (
	// guardSymlinkHops bounds the symlinks an open follows at its last component, as the
	// kernel bounds a whole lookup.
	guardSymlinkHops = 40
	// guardMaxDepth bounds the walk up from a directory to the root: a path of PATH_MAX bytes
	// has at most half as many components.
	guardMaxDepth = unix.PathMax / 2
)

// fileIDOf is the identity (sandbox_mount_linux.go's fileID) of the file st describes.
func fileIDOf(st *unix.Stat_t) fileID { return fileID{uint64(st.Dev), st.Ino} }

// protectGuard is a worker's guard. Safe for concurrent use: it is read-only after
// newProtectGuard, and every operation checks afresh.
type protectGuard struct {
	roots []guardRoot
	// extra are the protected paths that are not a root's own protected name: the gitdir
	// targets of `.git` files, checked by path at each change.
	extra []string
}

// guardRoot is a writable root, held open for the worker's life: its view binds it, so it
// stays the same directory whatever happens to its name on the host.
type guardRoot struct {
	fd int
	id fileID
}

// newProtectGuard opens the writable roots of spec. A root that cannot be opened is not in
// the worker's view either (the stage skips what does not exist): nothing to guard there.
func newProtectGuard(spec fsGuardSpec) (*protectGuard, error) {
	g := &protectGuard{}
	for _, w := range spec.Write {
		fd, err := unix.Open(w, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			g.close()
			return nil, &os.PathError{Op: "stat", Path: w, Err: err}
		}
		g.roots = append(g.roots, guardRoot{fd, fileIDOf(&st)})
	}
	for _, p := range spec.Protected {
		if !slices.ContainsFunc(spec.Write, func(w string) bool { return isRootProtectedName(p, w) }) {
			g.extra = append(g.extra, p)
		}
	}
	return g, nil
}

// isRootProtectedName reports whether p is one of the protected names of root.
func isRootProtectedName(p, root string) bool {
	rest, ok := strings.CutPrefix(p, strings.TrimSuffix(root, "/")+"/")
	return ok && slices.Contains(protectedNames, rest)
}

// close lets go of the roots (tests; a worker holds them until it exits).
func (g *protectGuard) close() {
	for _, r := range g.roots {
		unix.Close(r.fd)
	}
	g.roots = nil
}

// protectedIDs are the identities of the protected paths that exist now, followed through a
// symlink as a write would follow it.
func (g *protectGuard) protectedIDs() []fileID {
	var ids []fileID
	var st unix.Stat_t
	for _, r := range g.roots {
		for _, name := range protectedNames {
			if unix.Fstatat(r.fd, name, &st, 0) == nil {
				ids = append(ids, fileIDOf(&st))
			}
		}
	}
	for _, p := range g.extra {
		if unix.Stat(p, &st) == nil {
			ids = append(ids, fileIDOf(&st))
		}
	}
	return ids
}

func (g *protectGuard) isRoot(id fileID) bool {
	return slices.ContainsFunc(g.roots, func(r guardRoot) bool { return r.id == id })
}

// check says whether name may be changed in the directory dfd: not a protected name of a
// writable root, and not inside a protected path. EROFS when not. It returns the protected
// paths' identities it checked against, for what the caller checks after (the file it opens).
//
// They are looked up here, once dfd is open, and not when the operation began: a protected
// name that appears in between (an empty .git a process sandbox's stage makes on the host
// for its mount point, a `git init`) must not be written into through a directory opened
// after it appeared. Once dfd is open, a name that appears later cannot hold it.
func (g *protectGuard) check(dfd int, name string) ([]fileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return nil, err
	}
	id := fileIDOf(&st)
	if slices.Contains(protectedNames, name) && g.isRoot(id) {
		return nil, unix.EROFS
	}
	prot := g.protectedIDs()
	return prot, g.within(dfd, id, prot)
}

// within reports, as EROFS, whether the directory dfd (whose identity is id) is one of prot or
// lies in one, walking up through "..".
func (g *protectGuard) within(dfd int, id fileID, prot []fileID) error {
	var st unix.Stat_t
	if len(prot) == 0 {
		return nil
	}
	cur := -1 // the directory reached walking up; dfd itself at first
	defer func() {
		if cur >= 0 {
			unix.Close(cur)
		}
	}()
	for range guardMaxDepth {
		if slices.Contains(prot, id) {
			return unix.EROFS
		}
		from := dfd
		if cur >= 0 {
			from = cur
		}
		up, err := unix.Openat(from, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if cur >= 0 {
			unix.Close(cur)
		}
		cur = up
		if err := unix.Fstat(cur, &st); err != nil {
			return err
		}
		parent := fileIDOf(&st)
		if parent == id {
			return nil // the root of the view: its ".." is itself
		}
		id = parent
	}
	return unix.ENAMETOOLONG // deeper than any path: refused rather than half checked
}

// openParent opens the directory that holds the last component of path, relative to base
// (unix.AT_FDCWD, or a directory for a relative symlink target), following symlinks on the
// way as the kernel does. name is that component; "" when path ends in "/" or is "/".
func openParent(base int, path string) (dfd int, name string, err error) {
	dir, name := ".", path
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		dir, name = path[:i], path[i+1:]
		if dir == "" {
			dir = "/"
		}
	}
	dfd, err = unix.Openat(base, dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	return dfd, name, err
}

// namesADirectory reports whether a last component names the directory itself, not an entry.
func namesADirectory(name string) bool { return name == "" || name == "." || name == ".." }

// openWrite opens path as os.OpenFile(path, flag, perm) would for writing, following a
// symlink at the last component, after checking each directory the file is opened in.
// O_TRUNC is applied once the file is open and found not to be a protected file itself (a
// hard link to a `.git` file, say).
func (g *protectGuard) openWrite(path string, flag int, perm os.FileMode) (*os.File, error) {
	fail := func(err error) (*os.File, error) { return nil, &os.PathError{Op: "open", Path: path, Err: err} }
	base, rest := unix.AT_FDCWD, path
	closeBase := func() {
		if base != unix.AT_FDCWD {
			unix.Close(base)
		}
	}
	defer func() { closeBase() }()
	for hops := 0; ; {
		dfd, name, err := openParent(base, rest)
		if err != nil {
			return fail(err)
		}
		closeBase()
		base = dfd // closed by the next hop or on return
		if namesADirectory(name) {
			return fail(unix.EISDIR)
		}
		prot, err := g.check(dfd, name)
		if err != nil {
			return fail(err)
		}
		fd, err := unix.Openat(dfd, name, (flag&^unix.O_TRUNC)|unix.O_NOFOLLOW|unix.O_CLOEXEC, syscallMode(perm))
		if errors.Is(err, unix.ELOOP) {
			// The last component is a symlink: follow it here, checked like the first.
			if hops++; hops > guardSymlinkHops {
				return fail(unix.ELOOP)
			}
			target, err := readlinkat(dfd, name)
			if errors.Is(err, unix.EINVAL) {
				continue // no longer a symlink: open it again
			}
			if err != nil {
				return fail(err)
			}
			if strings.HasPrefix(target, "/") {
				closeBase()
				base = unix.AT_FDCWD
			}
			rest = target
			continue
		}
		if err != nil {
			return fail(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return fail(err)
		}
		if slices.Contains(prot, fileIDOf(&st)) {
			unix.Close(fd)
			return fail(unix.EROFS)
		}
		if flag&unix.O_TRUNC != 0 && st.Mode&unix.S_IFMT == unix.S_IFREG {
			if err := unix.Ftruncate(fd, 0); err != nil {
				unix.Close(fd)
				return fail(err)
			}
		}
		return os.NewFile(uintptr(fd), path), nil
	}
}

// readlinkat reads the symlink name in dfd.
func readlinkat(dfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// create makes the entry name of path with do, in its checked directory: mkdir, symlink.
// A refused name that exists is EEXIST, as the kernel answers before it looks at the mount.
func (g *protectGuard) create(op, path string, do func(dfd int, name string) error) error {
	fail := func(err error) error { return &os.PathError{Op: op, Path: path, Err: err} }
	dfd, name, err := openParent(unix.AT_FDCWD, path)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(dfd)
	if namesADirectory(name) {
		return fail(unix.EEXIST)
	}
	if _, err := g.check(dfd, name); err != nil {
		var st unix.Stat_t
		if errors.Is(err, unix.EROFS) && unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			err = unix.EEXIST
		}
		return fail(err)
	}
	if err := do(dfd, name); err != nil {
		return fail(err)
	}
	return nil
}

func (g *protectGuard) mkdir(path string, perm os.FileMode) error {
	return g.create("mkdir", path, func(dfd int, name string) error {
		return unix.Mkdirat(dfd, name, syscallMode(perm))
	})
}

func (g *protectGuard) symlink(target, path string) error {
	return g.create("symlink", path, func(dfd int, name string) error {
		return unix.Symlinkat(target, dfd, name)
	})
}

// remove unlinks path, a directory with dir (rmdir), after checking its directory.
func (g *protectGuard) remove(path string, dir bool) error {
	op, flags := "unlink", 0
	if dir {
		op, flags = "rmdir", unix.AT_REMOVEDIR
	}
	fail := func(err error) error { return &os.PathError{Op: op, Path: path, Err: err} }
	dfd, name, err := openParent(unix.AT_FDCWD, path)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(dfd)
	if namesADirectory(name) {
		return fail(unix.EBUSY)
	}
	if _, err := g.check(dfd, name); err != nil {
		return fail(err)
	}
	if err := unix.Unlinkat(dfd, name, flags); err != nil {
		return fail(err)
	}
	return nil
}

// removeAll is os.RemoveAll under the guard: the tree is walked by descriptor, and the
// protected names of a writable root met on the way (the tree holds the root) and protected
// paths are left, the rest removed; the first error is returned.
func (g *protectGuard) removeAll(path string) error {
	fail := func(err error) error { return &os.PathError{Op: "unlinkat", Path: path, Err: err} }
	dfd, name, err := openParent(unix.AT_FDCWD, path)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fail(err)
	}
	defer unix.Close(dfd)
	if namesADirectory(name) {
		return fail(unix.EBUSY)
	}
	prot, err := g.check(dfd, name)
	if err != nil {
		return fail(err)
	}
	if err := g.removeTree(dfd, name, prot); err != nil {
		return fail(err)
	}
	return nil
}

// removeTree removes the entry name of the checked directory dfd, and all it holds.
func (g *protectGuard) removeTree(dfd int, name string, prot []fileID) error {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		if err := unix.Unlinkat(dfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		return nil
	case err != nil:
		// An unreadable directory can still be removed when it is empty.
		if err := unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return err
	}
	id := fileIDOf(&st)
	if slices.Contains(prot, id) {
		unix.Close(fd)
		return unix.EROFS
	}
	root := g.isRoot(id)
	dir := os.NewFile(uintptr(fd), name)
	names, err := dir.Readdirnames(-1)
	first := err
	for _, n := range names {
		if root && slices.Contains(protectedNames, n) {
			if first == nil {
				first = unix.EROFS
			}
			continue
		}
		if err := g.removeTree(int(dir.Fd()), n, prot); err != nil && first == nil {
			first = err
		}
	}
	dir.Close()
	if err := unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) && first == nil {
		first = err
	}
	return first
}

// syscallMode is perm as open(2) and mkdir(2) take it: the permission bits, setuid, setgid
// and sticky.
func syscallMode(perm os.FileMode) uint32 {
	m := uint32(perm.Perm())
	if perm&os.ModeSetuid != 0 {
		m |= unix.S_ISUID
	}
	if perm&os.ModeSetgid != 0 {
		m |= unix.S_ISGID
	}
	if perm&os.ModeSticky != 0 {
		m |= unix.S_ISVTX
	}
	return m
}
