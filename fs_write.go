package main

// fs/writeFile and the writes fs/copy shares with it (docs/protocol.md §7.5): a lone regular
// file is replaced atomically, anything else is written in place.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

type writeFileParams struct {
	Path       string       `json:"path" uri:"path"`
	DataBase64 lazyBase64   `json:"dataBase64"`
	Sandbox    sandboxParam `json:"sandbox,omitempty"`
}

// writeFileOp is fs/writeFile's core. Data is decoded late, as the reference does (a bad one
// is -32600, not -32602), and in place over the bytes that carried it.
type writeFileOp struct {
	Path string     `json:"path"`
	Data lazyBase64 `json:"dataBase64"`
}

func (o writeFileOp) runEncoded(ctx context.Context, how fsWrites) (result, error) {
	return encoded(o.run(ctx, how))
}

func (o writeFileOp) run(ctx context.Context, how fsWrites) (emptyResult, error) {
	data, err := o.Data.decodeInPlace()
	if err != nil {
		return emptyResult{}, errInvalidRequest("fs/writeFile requires valid base64 dataBase64: %s", err)
	}
	err = writeFileContents(ctx, o.Path, nil, how, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
	return emptyResult{}, err
}

// borrowsMessage: the data stays in the message that carried it until the file is written
// (messageBorrower): it is decoded over it (writeFileOp.run), or sent on from it (to the
// worker).
func (*writeFileParams) borrowsMessage() {}

// fsWriteFile writes the whole file (writeFileOp), here or in the sandbox worker (fsDo).
func (c *call) fsWriteFile(p *writeFileParams) (emptyResult, error) {
	path, err := paramPath(p.Path)
	if err != nil {
		return emptyResult{}, err
	}
	return emptyResult{}, c.fsDo("fs/writeFile", p.Sandbox, true, writeFileOp{Path: path, Data: p.DataBase64})
}

// writeFileContents creates or replaces the file at path with what fill writes; see the file
// comment for when it replaces atomically and when it writes in place (always, with
// the worker's fsWrites). fill may run twice (a rename that fails is retried in place), each time
// on a fresh file. perm, when set, is the mode the file gets (fs/copy gives the source's);
// otherwise an existing file keeps its mode and a new one gets 0666 less the umask.
func writeFileContents(ctx context.Context, path string, perm *os.FileMode, how fsWrites, fill func(*os.File) error) error {
	if how.inPlace {
		return writeInPlace(ctx, path, perm, how, fill)
	}
	fi, err := os.Lstat(path)
	switch {
	case err != nil && !errors.Is(err, syscall.ENOENT):
		return err
	case err != nil: // a new file
		if err := replaceAtomically(path, nil, perm, fill); !errors.Is(err, errNoAtomicReplace) {
			return err
		}
	case fi.IsDir():
		return &os.PathError{Op: "open", Path: path, Err: syscall.EISDIR}
	case fi.Mode().IsRegular() && linkCount(fi) == 1:
		if err := checkWritable(path); err != nil {
			return err
		}
		if err := replaceAtomically(path, fi, perm, fill); !errors.Is(err, errNoAtomicReplace) {
			return err
		}
	}
	return writeInPlace(ctx, path, perm, how, fill)
}

// checkWritable fails, as opening path for writing would (EACCES), when the file a rename is
// about to replace is not writable by us: the rename needs only the directory's permission, and
// must not overwrite a file the client could not write. A running executable (ETXTBSY) may be
// replaced: that is what a rename is for.
func checkWritable(path string) error {
	err := unix.Faccessat(unix.AT_FDCWD, path, unix.W_OK, unix.AT_EACCESS)
	if err == nil || errors.Is(err, unix.ETXTBSY) {
		return nil
	}
	return &os.PathError{Op: "access", Path: path, Err: err}
}

// errNoAtomicReplace says a temporary file could not stand in for the original (no write access
// to the directory, or an owner we cannot give it): the caller writes in place instead.
var errNoAtomicReplace = errors.New("cannot replace the file atomically")

// testHookTempCreated, when set, sees replaceAtomically's temporary file as soon as it exists,
// before its owner and mode are set: a test checks what others could have opened it for.
var testHookTempCreated func(*os.File)

// replaceAtomically writes a temporary file beside path and renames it over path. old is the
// file being replaced (nil for a new one) whose mode and owner the new file keeps.
//
// The temporary file is created with no more permission bits than it ends up with (perm, or
// old's mode), never 0666 first, and with the owner's bits only while it still has our owner
// and group rather than old's: between its creation and the chmod, anyone allowed by the
// wider mode could open it and read what is written later, such as the tokens of auth.json.
func replaceAtomically(path string, old os.FileInfo, perm *os.FileMode, fill func(*os.File) error) error {
	dir, base := filepath.Split(path)
	if len(base) > 100 {
		base = base[:100]
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := dir + "." + base + ".exec-server-" + hex.EncodeToString(rnd[:])
	createMode := os.FileMode(0o666)
	switch {
	case perm != nil:
		createMode = perm.Perm()
	case old != nil:
		createMode = old.Mode().Perm()
	}
	var owner *syscall.Stat_t // old's owner and group, when they are not ours
	if old != nil {
		if st, isStat := old.Sys().(*syscall.Stat_t); isStat && (int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid()) {
			// Until the chown below, the file is ours and our group's, not old's: its group
			// bits would admit our group, which is not the one old was shared with.
			owner, createMode = st, createMode&^0o077
		}
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, createMode)
	if err != nil {
		return errNoAtomicReplace
	}
	if testHookTempCreated != nil {
		testHookTempCreated(f)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if owner != nil && f.Chown(int(owner.Uid), int(owner.Gid)) != nil {
		return errNoAtomicReplace
	}
	switch {
	case perm != nil:
		err = f.Chmod(*perm)
	case old != nil:
		err = f.Chmod(permBits(old.Mode()))
	}
	if err != nil {
		return err
	}
	if err := fill(f); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return errNoAtomicReplace // a sticky directory, a bind-mounted file: write in place
	}
	ok = true
	return nil
}

// writeInPlace opens path with create and truncate, following a symlink, as the reference
// does. A FIFO without a reader fails (ENXIO) instead of blocking; one whose reader stalls is
// given up when the connection ends.
func writeInPlace(ctx context.Context, path string, perm *os.FileMode, how fsWrites, fill func(*os.File) error) error {
	mode := os.FileMode(0o666)
	if perm != nil {
		mode = *perm
	}
	f, err := how.openFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NONBLOCK|syscall.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	defer f.Close()
	stop := context.AfterFunc(ctx, func() { f.SetWriteDeadline(time.Now()) })
	defer stop()
	if perm != nil {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			if err := f.Chmod(*perm); err != nil {
				return err
			}
		}
	}
	if err := fill(f); err != nil {
		return err
	}
	return f.Close()
}

// permBits is what chmod sets of a mode: permissions, setuid, setgid, sticky.
func permBits(m os.FileMode) os.FileMode {
	return m & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)
}

func linkCount(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// The changes an operation makes, through how's guard when it has one (the sandbox worker's,
// fs_worker_guard_linux.go), else as plain system calls.

// openFile is os.OpenFile; a guarded open that may write or create refuses a protected name.
func (how fsWrites) openFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	if how.guard == nil || flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC) == 0 {
		return os.OpenFile(path, flag, perm)
	}
	return how.guard.openWrite(path, flag, perm)
}

func (how fsWrites) mkdir(path string) error {
	if how.guard == nil {
		return os.Mkdir(path, 0o777)
	}
	return how.guard.mkdir(path, 0o777)
}

func (how fsWrites) unlink(path string) error {
	if how.guard == nil {
		return syscall.Unlink(path)
	}
	return how.guard.remove(path, false)
}

func (how fsWrites) rmdir(path string) error {
	if how.guard == nil {
		return syscall.Rmdir(path)
	}
	return how.guard.remove(path, true)
}

func (how fsWrites) removeAll(path string) error {
	if how.guard == nil {
		return os.RemoveAll(path)
	}
	return how.guard.removeAll(path)
}

func (how fsWrites) symlink(target, path string) error {
	if how.guard == nil {
		return os.Symlink(target, path)
	}
	return how.guard.symlink(target, path)
}
