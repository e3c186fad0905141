package main

// The sandbox stage's file system view (docs/sandbox.md §2), built in its own mount namespace.
// Separate from sandbox_linux.go because it is the one part that reads like a mount table.
//
//	step                         full read (root entry)          restricted read
//	staging                      tmpfs on /tmp; pivot_root into it: the host tree is /oldroot
//	new root  /newroot           rbind of the host, read-only    empty tmpfs; each readable
//	                             (read-write under root:write    root bound read-only, with
//	                             with deny entries, but /sys)    the symlinks on its way
//	writable roots               bound read-write from the host, outermost first
//	read entries, protected      bound read-only over what is above them (a protected path
//	                             only inside a writable root: it takes writes away, never
//	                             grants a read)
//	protected name, a symlink    also an empty read-only file mounted on the link itself
//	deny                         an empty, mode 000 file or directory bound over them; the
//	                             writable directories above them bound onto themselves
//	                             (denyPins: a mount point cannot be renamed)
//	kernel file systems          every proc, sysfs... mount in the view (a chroot's /proc in
//	                             a workspace) read-only (kernelFSReadOnly), /proc aside
//	/dev                         tmpfs: null zero full random urandom tty bound from the
//	                             host, a new devpts (ptmx 0666), shm (a tmpfs of
//	                             --linux-sandbox-shm-size), fd, std{in,out,err}, console =
//	                             the terminal when stdin is one
//	/proc                        a new proc (pid namespace), else the host's; procReadOnly
//	                             bound read-only over themselves
//	finish                       pivot_root into /newroot; the host tree is detached
//
// Paths are resolved as strings against the host first (planMounts), so that the symlinks a
// path legitimately goes through (/var/run -> /run, a home reached through a link) still
// lead where they lead. The view is then built from descriptors alone (viewBuild): each
// resolved path is opened again one component at a time, with no symlink allowed, both
// under /oldroot (what is bound) and under /newroot (where), each checked to be the same
// directory or file on both sides, and bound with open_tree and move_mount onto the
// descriptor. A path nested in a bind already made is opened relative to that bind, so that
// renaming a directory of a writable root (as a sandboxed command may, while another
// sandbox is being built) makes the build fail rather than bind something else: a symlink
// that appears where a directory was is refused (ELOOP), a directory swapped between two
// opens is refused by its device and inode. A missing protected name was made (empty) by the
// server before the stage started (syntheticDirs), so there is always something to cover.
// /proc's kernel settings (procReadOnly) are read-only in every view.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
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
		{"binds", func() error { return applyMounts(ops, p.FullRead, p.FullWrite) }},
		{"kernel file systems read-only", kernelFSReadOnly},
		{"/dev", func() error { return makeDev(tty, cfg.ShmSize) }},
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
	host := newHostPaths()
	roots := host.writableRoots(p.Write)
	add := func(paths []string, access mountAccess, protect bool) error {
		for _, path := range paths {
			op, err := host.resolve(path)
			if errors.Is(err, os.ErrNotExist) || access == mountWrite && errors.Is(err, unix.ELOOP) {
				continue // a writable root behind a symlink loop grants nothing, as redirectedRoot says
			}
			if err != nil {
				return err
			}
			if access == mountWrite && host.redirectedLink(op.links, roots, path) {
				// Checked again here, on the very links this resolution followed: one may
				// have been made since the server looked.
				continue
			}
			if protect && !p.FullWrite && !slices.ContainsFunc(writable, func(root string) bool { return pathWithin(op.real, root) }) {
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
		dir, err := host.resolve(filepath.Dir(path))
		if err != nil {
			return nil, err
		}
		ops = append(ops, mountOp{real: filepath.Join(dir.real, filepath.Base(path)), access: mountPin})
	}
	ops = append(ops, denyPins(ops, p.FullWrite)...)
	// sort.SliceStable: a short list, and one copy of the sorting code for every element
	// type in the binary.
	sort.SliceStable(ops, func(i, j int) bool {
		a, b := &ops[i], &ops[j]
		if d := strings.Count(a.real, "/") - strings.Count(b.real, "/"); d != 0 {
			return d < 0
		}
		if a.real != b.real {
			return a.real < b.real
		}
		return a.access < b.access
	})
	return ops, nil
}

// denyPins are the directories to bind read-write onto themselves so that no deny entry of
// ops can be moved: every directory above a denied path that the view lets the command
// write (inside a writable bind, or anywhere under fullWrite), up to the bind that holds it.
// A deny is a mount on the denied path, and a mount point cannot be renamed, but its parent
// could be: a command that renamed ws/sub (holding the denied ws/sub/.env) to ws/sub2 kept
// the deny on it in its own view, and the next sandbox, denying ws/sub/.env (now missing),
// read ws/sub2/.env. A directory that is itself a mount point cannot be renamed either.
func denyPins(ops []mountOp, fullWrite bool) []mountOp {
	// innermost is the directory bind (write or read) that holds dir, nil if none.
	innermost := func(dir string) *mountOp {
		var in *mountOp
		for i := range ops {
			o := &ops[i]
			if (o.access == mountWrite || o.access == mountRead) && o.isDir && pathWithin(dir, o.real) && (in == nil || len(o.real) > len(in.real)) {
				in = o
			}
		}
		return in
	}
	var pins []mountOp
	seen := map[string]bool{}
	for _, op := range ops {
		if op.access != mountDeny {
			continue
		}
		for dir := filepath.Dir(op.real); dir != "/" && !seen[dir]; dir = filepath.Dir(dir) {
			seen[dir] = true
			in := innermost(dir)
			switch {
			case in != nil && in.real == dir:
				continue // a bind already: a mount point
			case in == nil && !fullWrite, in != nil && in.access != mountWrite:
				continue // read-only here: nothing in it can be renamed
			}
			pins = append(pins, mountOp{real: dir, isDir: true, access: mountWrite})
		}
	}
	return pins
}

// writableRoots are the writable roots write, each also as resolved on the host when it
// differs.
func (h *hostPaths) writableRoots(write []string) []string {
	roots := slices.Clone(write)
	for _, w := range write {
		if r, err := h.resolve(w); err == nil && r.real != w {
			roots = append(roots, r.real)
		}
	}
	return roots
}

// redirectedLink reports whether one of links, the symlinks met resolving path, lies inside
// one of roots (other than path's own) and points out of it: a sandboxed command could have
// made it to send the next sandbox's path elsewhere ($TMPDIR=/tmp/a/b, and in /tmp: rm -r
// a; mkdir a; ln -s / a/b), or swapped a directory on the way for one holding it while
// the path was resolved. It is the rule redirectedRoot applies when the profile is
// resolved, judged on the links one resolution actually followed; a link's target is
// judged as written (lexically), not by resolving it again.
func (h *hostPaths) redirectedLink(links []hostLink, roots []string, path string) bool {
	own := map[string]bool{path: true}
	if r, err := h.resolve(path); err == nil {
		own[r.real] = true
	}
	for _, l := range links {
		target := l.target
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(l.path), target)
		}
		target = filepath.Clean(target)
		for _, w := range roots {
			if !own[w] && l.path != w && pathWithin(l.path, w) && !pathWithin(target, w) {
				return true
			}
		}
	}
	return false
}

// hostPaths resolves host paths for one sandbox's setup (planMounts, syntheticDirs.acquire),
// each path once: a profile names the same roots several times, and the protected names
// of a root lie in it (a path whose directory was resolved already costs one more step).
// A memo of one setup only: the host may change between two.
type hostPaths struct {
	done map[string]resolvedPath
}

type resolvedPath struct {
	op  mountOp
	err error
}

func newHostPaths() *hostPaths { return &hostPaths{done: make(map[string]resolvedPath)} }

// resolve is resolveHostPath, remembered.
func (h *hostPaths) resolve(path string) (mountOp, error) {
	path = filepath.Clean(path)
	if r, ok := h.done[path]; ok {
		return r.op, r.err
	}
	var op mountOp
	var err error
	if dir := filepath.Dir(path); dir != path && filepath.IsAbs(path) {
		if r, ok := h.done[dir]; ok && r.err == nil && r.op.isDir {
			op, err = resolveFrom(r.op.real, slices.Clone(r.op.links), []string{filepath.Base(path)}, path)
			h.done[path] = resolvedPath{op, err}
			return op, err
		}
	}
	op, err = resolveHostPath(path)
	h.done[path] = resolvedPath{op, err}
	return op, err
}

// resolveHostPath follows path's symlinks on the host, noting each one.
func resolveHostPath(path string) (mountOp, error) {
	return resolveFrom("/", nil, strings.Split(strings.Trim(filepath.Clean(path), "/"), "/"), path)
}

// resolveFrom follows the components rest from real, a host directory with no symlink in it
// reached through links, as resolveHostPath does for path.
func resolveFrom(real string, links []hostLink, rest []string, path string) (mountOp, error) {
	op := mountOp{links: links}
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
// only denies), or an empty tmpfs. Under a full-write profile /sys stays read-only: its
// files are the kernel's settings, which a server run as root could otherwise change
// (they are checked against the file's owner, not a capability).
func makeNewRoot(p *sandboxProfile) error {
	if !p.FullRead {
		return unix.Mount("tmpfs", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755")
	}
	if err := unix.Mount(oldRoot, newRoot, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	if p.FullWrite {
		return bindOverReadOnly(newRoot, "sys")
	}
	return setReadOnly(newRoot, true)
}

// Kernels older than these lack a call the view is built with; the stage then fails closed.
const (
	openat2Since      = "5.6"
	mountAPISince     = "5.2" // open_tree, move_mount
	mountSetattrSince = "5.12"
)

// kernelCall words the error of a call the view needs, saying so when this kernel lacks it.
func kernelCall(call, since string, err error) error {
	if errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("%s: this kernel lacks it (Linux %s or later needed): %w", call, since, err)
	}
	return fmt.Errorf("%s: %w", call, err)
}

// maxOpenRetries bounds the retries of an openat2 that answered EAGAIN: a rename somewhere
// on the host while it resolved, which it could not rule out.
const maxOpenRetries = 64

// openStep opens name, one component, in the directory dirfd as an O_PATH descriptor,
// following no symlink: one there is ELOOP, unless link is set, when the symlink itself is
// opened.
func openStep(dirfd int, name string, link bool) (int, error) {
	return openNoSymlinks(dirfd, name, link, unix.RESOLVE_BENEATH)
}

// openRoot opens the absolute path dir (on the staging tmpfs, /oldroot and /newroot, or
// beneath them) with no symlink on the way.
func openRoot(dir string) (int, error) {
	return openNoSymlinks(unix.AT_FDCWD, dir, false, 0)
}

// openNoSymlinks is openat2 of path in dirfd, O_PATH, with no symlink on the way.
func openNoSymlinks(dirfd int, path string, link bool, resolve uint64) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | resolve,
	}
	if link {
		how.Flags |= unix.O_NOFOLLOW
	}
	for range maxOpenRetries {
		fd, err := unix.Openat2(dirfd, path, &how)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOSYS):
			return -1, kernelCall("openat2", openat2Since, err)
		case errors.Is(err, unix.ELOOP):
			return -1, fmt.Errorf("%s is a symlink now (the host changed while the sandbox was built): %w", path, err)
		case err != nil:
			return -1, fmt.Errorf("open %s: %w", path, err)
		}
		return fd, nil
	}
	return -1, fmt.Errorf("open %s: the host kept changing while the sandbox was built: %w", path, unix.EAGAIN)
}

// fileID is a file's identity: its device and inode.
type fileID struct{ dev, ino uint64 }

func fdID(fd int) (fileID, unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fileID{}, st, err
	}
	return fileIDOf(&st), st, nil
}

// sameFile checks that the descriptors host and view (the same path opened under /oldroot
// and /newroot) are one file.
func sameFile(host, view int, what string) error {
	a, _, err := fdID(host)
	if err != nil {
		return err
	}
	b, _, err := fdID(view)
	if err != nil {
		return err
	}
	if a != b {
		return fmt.Errorf("%s was replaced while the sandbox was built", what)
	}
	return nil
}

// bindAt clones the tree at src (recursively unless single) and attaches it on dst, both
// descriptors: nothing is looked up by path. The clone is made read-only before it is
// attached where ro. It returns the descriptor of the new mount, for the binds nested in it.
func bindAt(src, dst int, single, ro bool) (int, error) {
	flags := unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_EMPTY_PATH
	if !single {
		flags |= unix.AT_RECURSIVE
	}
	tree, err := unix.OpenTree(src, "", uint(flags))
	if err != nil {
		return -1, kernelCall("open_tree", mountAPISince, err)
	}
	if ro {
		at := unix.AT_EMPTY_PATH
		if !single {
			at |= unix.AT_RECURSIVE
		}
		if err := unix.MountSetattr(tree, "", uint(at), &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			unix.Close(tree)
			return -1, kernelCall("mount_setattr", mountSetattrSince, err)
		}
	}
	if err := unix.MoveMount(tree, "", dst, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		unix.Close(tree)
		return -1, kernelCall("move_mount", mountAPISince, err)
	}
	return tree, nil
}

// bindOverReadOnly binds dir/name, when it exists, read-only over itself, with every mount
// beneath it.
func bindOverReadOnly(dir, name string) error {
	dfd, err := openRoot(dir)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	fd, err := openStep(dfd, name, false)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	mnt, err := bindAt(fd, fd, false, true)
	if err != nil {
		return fmt.Errorf("%s/%s read-only: %w", dir, name, err)
	}
	return unix.Close(mnt)
}

// viewBuild is the state of applyMounts: the descriptors the binds are made from and onto.
type viewBuild struct {
	oldRoot, newRoot  int    // /oldroot, /newroot
	tmpfs             uint64 // the device of a restricted-read new root; 0 under full read
	fullWrite         bool   // the new root is the host's, writable: its protected links need pins
	denyFile, denyDir int    // what a deny entry is bound from
	placed            []placedBind
	fds               []int // to close at the end
}

// placedBind is a directory bound already, which later binds may lie in.
type placedBind struct {
	real string
	host int // the host directory, under /oldroot
	mnt  int // its mount in /newroot
}

func (b *viewBuild) keep(fd int) int {
	b.fds = append(b.fds, fd)
	return fd
}

func (b *viewBuild) close() {
	for _, fd := range b.fds {
		unix.Close(fd)
	}
}

// applyMounts makes the binds of ops in /newroot.
func applyMounts(ops []mountOp, fullRead, fullWrite bool) error {
	denyFile, denyDir := "/deny-file", "/deny-dir" // on the staging tmpfs: gone with it
	if err := os.WriteFile(denyFile, nil, 0); err != nil {
		return err
	}
	if err := os.Mkdir(denyDir, 0); err != nil {
		return err
	}
	b := &viewBuild{fullWrite: fullWrite}
	defer b.close()
	for _, r := range []struct {
		path string
		fd   *int
	}{{oldRoot, &b.oldRoot}, {newRoot, &b.newRoot}, {denyFile, &b.denyFile}, {denyDir, &b.denyDir}} {
		fd, err := openRoot(r.path)
		if err != nil {
			return err
		}
		*r.fd = b.keep(fd)
	}
	if !fullRead {
		id, _, err := fdID(b.newRoot)
		if err != nil {
			return err
		}
		b.tmpfs = id.dev
	}
	for _, op := range ops {
		if err := b.apply(op); err != nil {
			return fmt.Errorf("%s: %w", op.real, err)
		}
	}
	return nil
}

// enclosing is the innermost directory bound already that holds path, nil if none.
func (b *viewBuild) enclosing(path string) *placedBind {
	var in *placedBind
	for i := range b.placed {
		if pathWithin(path, b.placed[i].real) && (in == nil || len(b.placed[i].real) >= len(in.real)) {
			in = &b.placed[i]
		}
	}
	return in
}

// apply makes one bind.
func (b *viewBuild) apply(op mountOp) error {
	in := b.enclosing(op.real)
	if op.access == mountPin && in == nil && !b.fullWrite {
		return nil // a pin guards a link in a writable root, and there is none here
	}
	host, view, err := b.open(op, in)
	if err != nil {
		return err
	}
	defer unix.Close(host)
	defer unix.Close(view)
	src := host
	switch {
	case op.access == mountPin:
		var st unix.Stat_t
		if err := unix.Fstat(view, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			return errors.New("the protected link was replaced while the sandbox was built")
		}
		src = b.denyFile
	case op.access == mountDeny && op.isDir:
		src = b.denyDir
	case op.access == mountDeny:
		src = b.denyFile
	}
	mnt, err := bindAt(src, view, op.access == mountPin, op.access != mountWrite)
	if err != nil {
		return err
	}
	if src == host {
		// The mount's root is the host file checked above, and nothing else.
		if err := sameFile(host, mnt, "it"); err != nil {
			unix.Close(mnt)
			return err
		}
	}
	if !op.isDir || op.access == mountPin {
		return unix.Close(mnt) // nothing lies in a file
	}
	hostDir, err := unix.Dup(host)
	if err != nil {
		unix.Close(mnt)
		return err
	}
	b.placed = append(b.placed, placedBind{real: op.real, host: b.keep(hostDir), mnt: b.keep(mnt)})
	return nil
}

// open opens op's path twice, one component at a time with no symlink: on the host, under
// /oldroot, and in the view, under /newroot, each relative to the bind in that holds it when
// there is one. Where the view's side is the host's tree (a full-read root, or a bind), each
// component must be the same directory on both sides; in a restricted-read root the view's
// side is the empty tmpfs, where the missing directories, and the symlinks met on the host,
// are made.
func (b *viewBuild) open(op mountOp, in *placedBind) (host, view int, err error) {
	hostDir, viewDir, rel := b.oldRoot, b.newRoot, strings.TrimPrefix(op.real, "/")
	if b.tmpfs != 0 {
		if err := b.mirrorLinks(op); err != nil {
			return -1, -1, err
		}
	}
	if in != nil {
		hostDir, viewDir, rel = in.host, in.mnt, strings.TrimPrefix(strings.TrimPrefix(op.real, in.real), "/")
	}
	if host, err = unix.Dup(hostDir); err != nil {
		return -1, -1, err
	}
	if view, err = unix.Dup(viewDir); err != nil {
		unix.Close(host)
		return -1, -1, err
	}
	fail := func(e error) (int, int, error) {
		unix.Close(host)
		unix.Close(view)
		return -1, -1, e
	}
	var names []string
	if rel != "" {
		names = strings.Split(rel, "/")
	}
	for i, name := range names {
		last := i == len(names)-1
		link := last && op.access == mountPin
		h, err := openStep(host, name, link)
		if err != nil {
			return fail(err)
		}
		unix.Close(host)
		host = h
		v, err := b.viewStep(view, name, link, last && !op.isDir && !link)
		if err != nil {
			return fail(err)
		}
		unix.Close(view)
		view = v
		if b.onTmpfs(view) {
			continue
		}
		if err := sameFile(host, view, "/"+strings.Join(names[:i+1], "/")); err != nil {
			return fail(err)
		}
	}
	return host, view, nil
}

// onTmpfs reports whether fd lies on a restricted-read new root's own tmpfs.
func (b *viewBuild) onTmpfs(fd int) bool {
	if b.tmpfs == 0 {
		return false
	}
	id, _, err := fdID(fd)
	return err == nil && id.dev == b.tmpfs
}

// viewStep opens name in the view's directory dir; on a restricted-read root's own tmpfs a
// missing one is made first: a directory, or an empty file where file is set.
func (b *viewBuild) viewStep(dir int, name string, link, file bool) (int, error) {
	fd, err := openStep(dir, name, link)
	if !errors.Is(err, unix.ENOENT) || !b.onTmpfs(dir) {
		return fd, err
	}
	if file {
		f, err := unix.Openat(dir, name, unix.O_CREAT|unix.O_EXCL|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return -1, fmt.Errorf("make the mount point %s: %w", name, err)
		}
		unix.Close(f)
	} else if err := unix.Mkdirat(dir, name, 0o755); err != nil {
		return -1, fmt.Errorf("make the mount point %s: %w", name, err)
	}
	return openStep(dir, name, link)
}

// mirrorLinks makes, in a restricted-read root, the symlinks met on the way to op's path on
// the host, so that the path works there as it does on the host. A link whose directory is
// the host's (a readable root bound already) is there already.
func (b *viewBuild) mirrorLinks(op mountOp) error {
	for _, l := range op.links {
		dir, err := unix.Dup(b.newRoot)
		if err != nil {
			return err
		}
		rel := strings.Trim(filepath.Dir(l.path), "/")
		ok := true
		if rel != "" {
			for _, name := range strings.Split(rel, "/") {
				if !b.onTmpfs(dir) {
					ok = false
					break
				}
				next, err := b.viewStep(dir, name, false, false)
				unix.Close(dir)
				if err != nil {
					return err
				}
				dir = next
			}
		}
		if ok && b.onTmpfs(dir) {
			err = unix.Symlinkat(l.target, dir, filepath.Base(l.path))
		}
		unix.Close(dir)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("mirror the link %s: %w", l.path, err)
		}
	}
	return nil
}

// shmInodeBytes is the size per inode /dev/shm is given inodes for: a tmpfs's inodes are
// kernel memory its size does not count, so they are bounded with it.
const shmInodeBytes = 4 << 10

// minShmInodes is the fewest inodes /dev/shm gets, whatever its size.
const minShmInodes = 1024

// makeDev gives the new root a minimal /dev; tty is the host path of the terminal on
// stdin, "" when there is none, and shmSize the size of /dev/shm in bytes.
func makeDev(tty string, shmSize int64) error {
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
	if shmSize <= 0 {
		shmSize = defaultShmSize
	}
	shmOpts := fmt.Sprintf("mode=1777,size=%d,nr_inodes=%d", shmSize, max(shmSize/shmInodeBytes, minShmInodes))
	if err := unix.Mount("tmpfs", dev+"/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, shmOpts); err != nil {
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

// bindFile binds the host file src (a path under /oldroot, opened with no symlink on its
// way) over a new empty file dst.
func bindFile(src, dst string) error {
	sfd, err := openRoot(src)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	mnt, err := bindAt(sfd, int(f.Fd()), true, false)
	if err != nil {
		return err
	}
	return unix.Close(mnt)
}

// procReadOnly are the entries of the sandbox's /proc bound read-only over themselves: the
// kernel's settings and triggers. Their files are checked against the file's owner, not a
// capability, so a command run as root (the server's user) would otherwise change the host's
// kernel (core_pattern runs a program as real root), including the settings a pid namespace
// does not separate. The list is the one container runtimes make read-only (bubblewrap's sys,
// sysrq-trigger, irq and bus, and fs); the rest of /proc is either per process or gated on
// a capability the command does not have.
var procReadOnly = []string{"sys", "sysrq-trigger", "irq", "bus", "fs"}

// kernelFSTypes are the file systems whose files are the kernel's settings, or lead to them
// (a procfs holds sys, a sysfs the devices' and the kernel's knobs, tracefs kprobes...). Their
// files are checked against the file's owner, not a capability, so a command run as root
// (the server's user) could change the host's kernel through any of them that its view has
// writable: not only /proc and /sys, but one the host has mounted elsewhere (a chroot's
// /proc inside a workspace, a container host's /host/proc), which a full-write view or a
// writable root brings along.
var kernelFSTypes = []string{
	"proc", "sysfs", "debugfs", "tracefs", "securityfs", "binfmt_misc", "configfs", "efivarfs",
	"bpf", "pstore", "cgroup", "cgroup2", "fusectl", "selinuxfs", "smackfs", "nfsd", "rpc_pipefs",
}

// hostMountInfo is the stage's mount table, read through the host's /proc under /oldroot.
const hostMountInfo = oldRoot + "/proc/self/mountinfo"

// kernelMount is a mount of one of kernelFSTypes in the new root.
type kernelMount struct {
	point, fsType string
	readOnly      bool
}

// kernelFSReadOnly makes every mount of kernelFSTypes in /newroot read-only, with what lies
// beneath it, wherever the host had it; then reads the mount table again and fails closed
// when one the view can reach is still writable. /newroot/proc itself is left to makeProc,
// which covers it or makes its settings read-only (procReadOnly) and leaves the per-process
// files as they are. Each mount is opened with no symlink on the way: a path swapped
// meanwhile fails the check rather than making another mount read-only.
func kernelFSReadOnly() error {
	mounts, err := kernelMounts()
	if err != nil {
		return err
	}
	remounted := false
	for _, m := range mounts {
		if m.readOnly {
			continue
		}
		remounted = true
		fd, err := openRoot(m.point)
		if err != nil {
			continue // the check below says which
		}
		err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
		unix.Close(fd)
		if errors.Is(err, unix.ENOSYS) {
			return kernelCall("mount_setattr", mountSetattrSince, err)
		}
	}
	if !remounted {
		return nil // every one was read-only already (a read-only view's, typically)
	}
	if mounts, err = kernelMounts(); err != nil {
		return err
	}
	for _, m := range mounts {
		if !m.readOnly {
			return fmt.Errorf("the %s mount at %s could not be made read-only", m.fsType, strings.TrimPrefix(m.point, newRoot))
		}
	}
	return nil
}

// kernelMounts are the mounts of kernelFSTypes in /newroot that the view can reach (not
// covered by another mount on its point or on a directory above it, nor under one that is),
// but /newroot/proc itself.
func kernelMounts() ([]kernelMount, error) {
	b, err := os.ReadFile(hostMountInfo)
	if err != nil {
		return nil, fmt.Errorf("read the mount table: %w", err)
	}
	if !anyWritableKernelMount(b) {
		return nil, nil // the common case, decided without building the tree below
	}
	type entry struct {
		kernelMount
		id, parent string
	}
	var all []entry
	for _, line := range strings.Split(string(b), "\n") {
		// id parent major:minor root point options [optional...] - type source super-options
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if sep < 6 || sep+1 >= len(fields) {
			continue
		}
		all = append(all, entry{
			kernelMount: kernelMount{point: unescapeMountPath(fields[4]), fsType: fields[sep+1], readOnly: slices.Contains(strings.Split(fields[5], ","), "ro")},
			id:          fields[0], parent: fields[1],
		})
	}
	byID := make(map[string]entry, len(all))
	children := make(map[string][]entry)
	for _, e := range all {
		byID[e.id] = e
		children[e.parent] = append(children[e.parent], e)
	}
	// covered: another mount of the same parent stands on a directory above e's point, or one
	// is stacked on e's point itself (its child there); a lookup of e's path then ends in it.
	covered := func(e entry) bool {
		for _, c := range children[e.parent] {
			if c.id != e.id && c.point != e.point && pathWithin(e.point, c.point) {
				return true
			}
		}
		return slices.ContainsFunc(children[e.id], func(c entry) bool { return c.point == e.point })
	}
	hidden := func(e entry) bool {
		for range len(all) + 1 { // the parent chain, bounded by the table
			if covered(e) {
				return true
			}
			p, ok := byID[e.parent]
			if !ok || p.id == e.id {
				return false
			}
			e = p
		}
		return false
	}
	var out []kernelMount
	for _, e := range all {
		if slices.Contains(kernelFSTypes, e.fsType) && pathWithin(e.point, newRoot) && e.point != newRoot+"/proc" && !hidden(e) {
			out = append(out, e.kernelMount)
		}
	}
	return out, nil
}

// anyWritableKernelMount reports whether the mount table mountinfo has a mount of
// kernelFSTypes in /newroot that is not read-only, but /newroot/proc itself: only then must
// kernelMounts work out which of them the view can reach. It reads each line's type first,
// and the rest of a line only for those types.
func anyWritableKernelMount(mountinfo []byte) bool {
	for line := range bytes.Lines(mountinfo) {
		// id parent major:minor root point options [optional...] - type source super-options
		i := bytes.Index(line, []byte(" - "))
		if i < 0 {
			continue
		}
		fsType, _, _ := bytes.Cut(line[i+3:], []byte(" "))
		if !slices.Contains(kernelFSTypes, string(fsType)) {
			continue
		}
		fields := strings.Fields(string(line[:i]))
		if len(fields) < 6 {
			return true // not understood: the full pass decides
		}
		point := unescapeMountPath(fields[4])
		if pathWithin(point, newRoot) && point != newRoot+"/proc" && !slices.Contains(strings.Split(fields[5], ","), "ro") {
			return true
		}
	}
	return false
}

// unescapeMountPath undoes the octal escapes (\040 for a space) of a path in mountinfo.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// makeProc gives the new root a /proc: a new one for the new pid namespace, else the host's;
// either with procReadOnly read-only.
func makeProc(pidNS, fullRead bool) error {
	dst := newRoot + "/proc"
	if err := os.MkdirAll(dst, 0o555); err != nil {
		return err
	}
	switch {
	case pidNS:
		if err := unix.Mount("proc", dst, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return err
		}
	case !fullRead: // with full read, the rbind has the host's
		if err := unix.Mount(oldRoot+"/proc", dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
	}
	for _, name := range procReadOnly {
		if err := bindOverReadOnly(dst, name); err != nil {
			return err
		}
	}
	return nil
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
