package main

// The protected names' mount points on the host (docs/sandbox.md §2): the empty directories
// the server makes for missing protected names before a namespace stage starts, the shared
// locks every stage holds on them, and their removal by the last one out. Separate from
// sandbox_linux.go because the fs worker uses it too, through syntheticDirs.acquire.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// syntheticDirs are the empty directories made on the host as mount points for protected
// names that did not exist (a missing `.git` must not be creatable inside the sandbox, and a
// mount needs something to cover).
//
// Several sandboxes may stand on one such directory, of this server or of another process
// (two exec-servers on one workspace), and removing a mount point on the host detaches its
// mounts in every namespace: the sandbox still running would lose its protection. So every
// stage holds a shared flock on each protected directory for as long as it runs, and a
// directory is removed only by one that can then take the lock exclusively, that is, once
// no sandbox stands on it. A directory made here is marked (an extended attribute), so that
// whichever stage leaves it last removes it, and one left behind by a server that was
// killed goes with the next sandbox that uses it.
//
// The lock is advisory, and anyone who can read a protected directory can take it
// exclusively: a sandboxed command of another workspace, under a full-read profile. So the
// shared lock is waited for a bounded time (wait), and a sandbox whose protected directory
// stays locked is refused rather than left to hang.
type syntheticDirs struct {
	wait time.Duration // how long to wait for a shared lock; 0: protectedLockWait
}

// protectedLockWait bounds the wait for the shared lock on a protected directory. The only
// exclusive holder it waits for otherwise is a stage's release, removing an empty directory.
const protectedLockWait = 5 * time.Second

// syntheticXattr marks a directory made as a mount point.
const syntheticXattr = "user.exec-server.synthetic-mount-point"

// heldDir is a protected directory a stage stands on: an open descriptor holding the
// shared lock, and whether this server made it. It is removed from the directory it is in
// then (its ".."), by no path: a directory on the way may have been renamed meanwhile.
type heldDir struct {
	path string
	f    *os.File
	made bool
}

// acquire makes the missing directories among paths, locks every protected directory, and
// returns the function that gives them back. The names of each directory (a writable root)
// are held on a goroutine of their own, and the directories side by side: making and
// locking a name is a file system's write (about 0.06 ms on ext4), and a workspace-write
// profile has two roots of four names.
func (d *syntheticDirs) acquire(paths []string) (func(), error) {
	wait := d.wait
	if wait == 0 {
		wait = protectedLockWait
	}
	host := newHostPaths()
	roots := host.writableRoots(protectedRoots(paths))
	type group struct {
		dfd   int
		paths []string
		held  []heldDir
		err   error
	}
	var groups []*group
	byDir := make(map[string]*group) // the directory of each path, resolved and opened once
	defer func() {
		for _, g := range groups {
			unix.Close(g.dfd)
		}
	}()
	for _, p := range paths {
		g := byDir[filepath.Dir(p)]
		if g == nil {
			dfd, err := openProtectedParent(host, p, roots)
			if err != nil {
				return nil, err
			}
			g = &group{dfd: dfd}
			byDir[filepath.Dir(p)] = g
			groups = append(groups, g)
		}
		g.paths = append(g.paths, p)
	}
	hold := func(g *group) {
		for _, p := range g.paths {
			h, err := holdProtected(p, g.dfd, wait)
			if err != nil {
				g.err = err
				return
			}
			if h.f != nil {
				g.held = append(g.held, h)
			}
		}
	}
	var wg sync.WaitGroup
	for _, g := range groups[min(1, len(groups)):] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hold(g)
		}()
	}
	if len(groups) > 0 {
		hold(groups[0])
	}
	wg.Wait()
	var held []heldDir
	var err error
	for _, g := range groups {
		held = append(held, g.held...)
		if err == nil {
			err = g.err
		}
	}
	release := func() {
		for _, h := range held {
			h.release()
		}
	}
	if err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// protectedRoots are the writable roots whose protected names paths lists: each name's
// directory.
func protectedRoots(paths []string) []string {
	var roots []string
	for _, p := range paths {
		if slices.Contains(protectedNames, filepath.Base(p)) && !slices.Contains(roots, filepath.Dir(p)) {
			roots = append(roots, filepath.Dir(p))
		}
	}
	return roots
}

// openProtectedParent opens the directory of the protected path p; roots are the writable
// roots (writableRoots). The directory is resolved as a string (a workspace may lie behind a
// symlink), then opened with no symlink allowed, and everything after is relative to that
// descriptor: a directory on the way swapped for a symlink (by a sandboxed command that can
// rename in the workspace's parent) fails the start instead of making the name where the
// link leads. So does a symlink on the way that lies in a writable root and leads out of it
// (redirectedLink): the resolution itself may have met the attacker's link.
func openProtectedParent(host *hostPaths, p string, roots []string) (int, error) {
	parent, err := host.resolve(filepath.Dir(p))
	if err != nil {
		return -1, fmt.Errorf("make the mount point %s: %w", p, err)
	}
	if host.redirectedLink(parent.links, roots, filepath.Dir(p)) {
		return -1, fmt.Errorf("make the mount point %s: its directory is reached through a symlink in a writable root that leads out of it (made since the request was checked)", p)
	}
	dfd, err := openNoSymlinks(unix.AT_FDCWD, parent.real, false, 0)
	if err != nil {
		return -1, fmt.Errorf("make the mount point %s: %w", p, err)
	}
	return dfd, nil
}

// holdProtected makes p, in the directory open as dfd (openProtectedParent), when it is
// missing, and locks it, shared, when it is a directory, waiting at most wait for the lock. A
// file or a symlink is bound or pinned as it is and never removed: nothing to hold.
func holdProtected(p string, dfd int, wait time.Duration) (heldDir, error) {
	h := heldDir{path: p}
	name := filepath.Base(p)
	nothing := func() (heldDir, error) { return heldDir{path: p}, nil }
	fail := func(err error) (heldDir, error) { return heldDir{path: p}, err }
	for range 8 {
		var st unix.Stat_t
		err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case errors.Is(err, unix.ENOENT):
			if err := unix.Mkdirat(dfd, name, 0o755); err == nil {
				h.made = true
			} else if errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
				// What this server cannot create there, the sandbox (the same user, with no
				// capabilities, on a view of the same mount) cannot either: nothing to cover.
				return nothing()
			} else if !errors.Is(err, unix.EEXIST) {
				return fail(fmt.Errorf("make the mount point %s: %w", p, err))
			}
			continue
		case err != nil:
			return fail(fmt.Errorf("mount point %s: %w", p, err))
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return nothing()
		}
		fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fail(fmt.Errorf("mount point %s: %w", p, err))
		}
		f := os.NewFile(uintptr(fd), p)
		if h.made {
			unix.Fsetxattr(fd, syntheticXattr, []byte("1"), 0) // where the file system can
		}
		if err := flockWithin(f, unix.LOCK_SH, wait); err != nil {
			f.Close()
			return fail(fmt.Errorf("lock the mount point %s: %w", p, err))
		}
		if sameDirAt(f, dfd, name) { // not removed by its last user while we waited for the lock
			h.f = f
			return h, nil
		}
		f.Close()
	}
	return fail(fmt.Errorf("make the mount point %s: it keeps being removed", p))
}

// release removes the directory if it is a mount point this or another server made, it is
// still empty, and no other sandbox stands on it; then lets it go. The last close of a
// removed directory frees its inode, which is most of the time of a release (about 0.1 ms a
// name on ext4, and a start has eight): once the name is gone, the close is left to a
// goroutine that ends with it, off the path to process/exited. A directory left in place is
// closed at once: its shared lock must not outlast the release, or the last sandbox out would
// find it still held and leave the directory behind.
func (h heldDir) release() {
	if h.remove() {
		go h.f.Close()
		return
	}
	h.f.Close()
}

// remove removes the directory under release's conditions, and reports whether it did.
func (h heldDir) remove() bool {
	if flock(h.f, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return false // another sandbox stands on it: the last one out removes it
	}
	if !h.made {
		if _, err := unix.Fgetxattr(int(h.f.Fd()), syntheticXattr, nil); err != nil {
			return false // the user's own directory
		}
	}
	dir, err := unix.Openat(int(h.f.Fd()), "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(dir)
	name := filepath.Base(h.path)
	return sameDirAt(h.f, dir, name) && unix.Unlinkat(dir, name, unix.AT_REMOVEDIR) == nil // only if still empty
}

// flock is flock(2) on f, retried when interrupted.
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// flockWithin is flock(2) on f for how (LOCK_SH or LOCK_EX), tried without blocking until it
// succeeds or wait has passed.
func flockWithin(f *os.File, how int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		err := flock(f, how|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("another process has held it locked for %v", wait)
		}
		time.Sleep(pause)
	}
}

// sameDirAt reports whether name in the directory dir still is the directory open as f.
func sameDirAt(f *os.File, dir int, name string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Fstatat(dir, name, &b, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}
