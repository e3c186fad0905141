package main

// The sandbox stage's file system view (docs/sandbox.md §2), built in its own mount namespace.
// Separate from sandbox_linux.go because it is the one part that reads like a mount table.
//
//	step                         full read (root entry)          restricted read
//	staging                      tmpfs on /tmp; pivot_root into it: the host tree is /oldroot
//	new root  /newroot           rbind of the host, read-only    empty tmpfs; each readable
//	                             (read-write under root:write    root bound read-only, with
//	                             with deny entries)              the symlinks on its way
//	writable roots               bound read-write from the host, outermost first
//	read entries, protected      bound read-only over what is above them (a protected path
//	                             only inside a writable root: it takes writes away, never
//	                             grants a read)
//	protected name, a symlink    also an empty read-only file mounted on the link itself
//	deny                         an empty, mode 000 file or directory bound over them
//	/dev                         tmpfs: null zero full random urandom tty bound from the
//	                             host, a new devpts (ptmx 0666), shm, fd, std{in,out,err},
//	                             console = the terminal when stdin is one
//	/proc                        a new proc (pid namespace), else the host's
//	finish                       pivot_root into /newroot; the host tree is detached
//
// Paths are resolved against the host before the first pivot, so no symlink is followed
// once the tree has moved. A missing protected name was made (empty) by the server before
// the stage started (syntheticDirs), so there is always something to cover.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	stagingDir = "/tmp"
	oldRoot    = "/oldroot"
	newRoot    = "/newroot"
	// maxSymlinkHops bounds the symlinks followed resolving one path, as the kernel does.
	maxSymlinkHops = 40
)

// devNodes are the host devices the sandbox's /dev offers.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// mountAccess is what one bind grants.
type mountAccess int

const (
	mountWrite mountAccess = iota
	mountRead
	mountDeny
	// mountPin: a protected name that is a symlink. Binding it read-only follows the link
	// and leaves the link itself, in a writable directory, free to be renamed away and
	// replaced by a real directory; an empty read-only file is mounted on the link itself
	// instead, which can then be neither followed nor moved (its target, when there is
	// one, is still bound read-only as well).
	mountPin
)

// mountOp is one bind of the view: a host path, resolved, and the access it gets.
type mountOp struct {
	real   string // the path with no symlink in it
	links  []hostLink
	isDir  bool
	access mountAccess
}

// hostLink is a symlink met on the way to a path, recreated in a restricted-read root.
type hostLink struct{ path, target string }

// buildMountView makes the stage's mount namespace the sandbox's view of the file system,
// and leaves the stage in it.
func buildMountView(cfg *stageConfig) error {
	p := cfg.Profile
	ops, err := planMounts(p)
	if err != nil {
		return err
	}
	tty := ""
	if isTerminal(0) {
		// Its name now, while /dev is the host's: the terminal is bound from there. One
		// outside /dev (none seen) goes without /dev/console.
		if name, err := os.Readlink("/proc/self/fd/0"); err == nil && strings.HasPrefix(name, "/dev/") {
			tty = name
		}
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"make mounts private", func() error { return unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "") }},
		{"stage", stage},
		{"new root", func() error { return makeNewRoot(p) }},
		{"binds", func() error { return applyMounts(ops, p.FullRead) }},
		{"/dev", func() error { return makeDev(tty) }},
		{"/proc", func() error { return makeProc(cfg.PidNS, p.FullRead) }},
		{"enter", func() error { return enterNewRoot(p.FullRead) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	return nil
}

// planMounts resolves every path the profile names against the host, in the order the
// binds must be made: outermost first, and for one path write, then read, then deny.
func planMounts(p *sandboxProfile) ([]mountOp, error) {
	var ops []mountOp
	var writable []string // the writable roots, resolved
	add := func(paths []string, access mountAccess, protect bool) error {
		for _, path := range paths {
			if access == mountWrite && redirectedRoot(path, p.Write) {
				continue // checked again here: the link may have been made since the server looked
			}
			op, err := resolveHostPath(path)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			if protect && !slices.ContainsFunc(writable, func(root string) bool { return pathWithin(op.real, root) }) {
				// A protected path only takes writes away. Outside every writable root it is
				// read-only or absent already, and a bind would make it readable under a
				// restricted-read profile: a `.git` file's gitdir or a protected symlink can
				// lead anywhere (written by whoever could write the workspace, or /tmp).
				continue
			}
			op.access = access
			ops = append(ops, op)
			if access == mountWrite {
				writable = append(writable, op.real)
			}
		}
		return nil
	}
	for _, a := range []struct {
		paths   []string
		access  mountAccess
		protect bool
	}{{p.Write, mountWrite, false}, {p.Read, mountRead, false}, {p.Protected, mountRead, true}, {p.Deny, mountDeny, false}} {
		if err := add(a.paths, a.access, a.protect); err != nil {
			return nil, err
		}
	}
	for _, path := range p.Protected {
		if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			continue
		}
		dir, err := resolveHostPath(filepath.Dir(path))
		if err != nil {
			return nil, err
		}
		ops = append(ops, mountOp{real: filepath.Join(dir.real, filepath.Base(path)), access: mountPin})
	}
	slices.SortStableFunc(ops, func(a, b mountOp) int {
		if d := strings.Count(a.real, "/") - strings.Count(b.real, "/"); d != 0 {
			return d
		}
		if a.real != b.real {
			return strings.Compare(a.real, b.real)
		}
		return int(a.access) - int(b.access)
	})
	return ops, nil
}

// resolveHostPath follows path's symlinks on the host, noting each one.
func resolveHostPath(path string) (mountOp, error) {
	var op mountOp
	real := "/"
	rest := strings.Split(strings.Trim(filepath.Clean(path), "/"), "/")
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			real = filepath.Dir(real)
			continue
		}
		next := filepath.Join(real, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return op, err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			real = next
			continue
		}
		if hops++; hops > maxSymlinkHops {
			return op, fmt.Errorf("resolve %s: %w", path, unix.ELOOP)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return op, err
		}
		op.links = append(op.links, hostLink{next, target})
		if filepath.IsAbs(target) {
			real = "/"
		}
		rest = append(strings.Split(strings.Trim(target, "/"), "/"), rest...)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return op, err
	}
	op.real, op.isDir = real, fi.IsDir()
	return op, nil
}

// stage moves the stage onto a fresh tmpfs, with the host tree beneath it at /oldroot, so
// that the new root can be built from host paths that nothing covers.
func stage() error {
	if err := unix.Mount("tmpfs", stagingDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil {
		return err
	}
	for _, d := range []string{oldRoot, newRoot} {
		if err := os.Mkdir(stagingDir+d, 0o700); err != nil {
			return err
		}
	}
	if err := unix.PivotRoot(stagingDir, stagingDir+oldRoot); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	return os.Chdir("/")
}

// makeNewRoot makes /newroot: the whole host, read-only unless p writes everywhere (and
// only denies), or an empty tmpfs.
func makeNewRoot(p *sandboxProfile) error {
	if !p.FullRead {
		return unix.Mount("tmpfs", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755")
	}
	if err := unix.Mount(oldRoot, newRoot, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	if p.FullWrite {
		return nil
	}
	return setReadOnly(newRoot, true)
}

// applyMounts makes the binds of ops in /newroot.
func applyMounts(ops []mountOp, fullRead bool) error {
	denyFile, denyDir := "/deny-file", "/deny-dir" // on the staging tmpfs: gone with it
	if err := os.WriteFile(denyFile, nil, 0); err != nil {
		return err
	}
	if err := os.Mkdir(denyDir, 0); err != nil {
		return err
	}
	for _, op := range ops {
		dst := newRoot + op.real
		if op.access == mountPin {
			// The link lies in a writable root, bound already.
			if err := mountOnLink(denyFile, dst); err != nil {
				return fmt.Errorf("pin the link %s: %w", op.real, err)
			}
			continue
		}
		if !fullRead {
			if err := mirrorPath(op); err != nil {
				return fmt.Errorf("%s: %w", op.real, err)
			}
		}
		src := oldRoot + op.real
		if op.access == mountDeny {
			src = denyFile
			if op.isDir {
				src = denyDir
			}
		}
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", op.real, err)
		}
		if op.access != mountWrite {
			if err := setReadOnly(dst, true); err != nil {
				return fmt.Errorf("%s read-only: %w", op.real, err)
			}
		}
	}
	return nil
}

// mountOnLink mounts the file src, read-only, on the symlink dst itself: move_mount does
// not follow a last component that is a symlink, where mount(2) would.
func mountOnLink(src, dst string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return err
	}
	return unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// mirrorPath makes op's mount point in a restricted-read root, and the symlinks that lead
// to it, so that the path works there as it does on the host.
func mirrorPath(op mountOp) error {
	for _, l := range op.links {
		if err := os.MkdirAll(newRoot+filepath.Dir(l.path), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(l.target, newRoot+l.path); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	dst := newRoot + op.real
	if op.isDir {
		return os.MkdirAll(dst, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// makeDev gives the new root a minimal /dev; tty is the host path of the terminal on
// stdin, "" when there is none.
func makeDev(tty string) error {
	dev := newRoot + "/dev"
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755"); err != nil {
		return err
	}
	for _, n := range devNodes {
		if err := bindFile(oldRoot+"/dev/"+n, dev+"/"+n); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	if tty != "" {
		// The terminal keeps its host name (/dev/pts/N of another devpts), which means nothing
		// here; as bubblewrap does, it is /dev/console inside. It is bound by its path under
		// /oldroot: /proc/self/fd/0 would lead to the host namespace's mount of it, which
		// bind(2) refuses (EINVAL).
		if err := bindFile(oldRoot+tty, dev+"/console"); err != nil {
			return fmt.Errorf("console: %w", err)
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(dev+"/"+d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", dev+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("devpts: %w", err)
	}
	if err := unix.Mount("tmpfs", dev+"/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("shm: %w", err)
	}
	for name, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, dev+"/"+name); err != nil {
			return err
		}
	}
	return setReadOnly(dev, false)
}

// bindFile binds the file src over a new empty file dst.
func bindFile(src, dst string) error {
	if _, err := os.Stat(src); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return err
	}
	f.Close()
	return unix.Mount(src, dst, "", unix.MS_BIND, "")
}

// makeProc gives the new root a /proc: a new one for the new pid namespace, else the host's.
func makeProc(pidNS, fullRead bool) error {
	dst := newRoot + "/proc"
	if err := os.MkdirAll(dst, 0o555); err != nil {
		return err
	}
	if pidNS {
		return unix.Mount("proc", dst, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	}
	if fullRead {
		return nil // the rbind has the host's
	}
	return unix.Mount(oldRoot+"/proc", dst, "", unix.MS_BIND|unix.MS_REC, "")
}

// enterNewRoot makes /newroot the root and detaches everything else.
func enterNewRoot(fullRead bool) error {
	if !fullRead {
		if err := setReadOnly(newRoot, false); err != nil {
			return err
		}
	}
	if err := os.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host tree: %w", err)
	}
	return os.Chdir("/")
}

// setReadOnly makes the mount at path read-only, and every mount beneath it with recursive.
func setReadOnly(path string, recursive bool) error {
	flags := 0
	if recursive {
		flags = unix.AT_RECURSIVE
	}
	return unix.MountSetattr(unix.AT_FDCWD, path, uint(flags), &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
}

// isTerminal reports whether fd is a terminal.
func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}
