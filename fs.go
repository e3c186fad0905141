package main

// Filesystem methods (docs/protocol.md §7; gate family "filesystem"). Every path is normalised
// lexically (uri.go, docs/protocol.md §7.1) before the filesystem sees it.
//
//	method              params (optional in [])                           result
//	fs/readFile         path [sandbox]                                    {dataBase64}
//	fs/writeFile        path dataBase64 [sandbox]                         {}
//	fs/createDirectory  path [recursive=true sandbox]                     {}
//	fs/getMetadata      path [sandbox]                                    {isDirectory,isFile,isSymlink,size,createdAtMs,modifiedAtMs}
//	fs/canonicalize     path [sandbox]                                    {path}
//	fs/readDirectory    path [sandbox]                                    {entries:[{fileName,isDirectory,isFile}]}
//	fs/remove           path [recursive=true force=true sandbox]          {}
//	fs/copy             sourcePath destinationPath recursive [sandbox]    {}
//	fs/open, fs/readBlock, fs/writeBlock, fs/close   see fs_handle.go
//	fs/walk             see fs_walk.go
//	fs/watchMissing     see fs_watch.go
//
// Errors from the OS: docs/protocol.md §7.2 (fsError).
//
// Every method is split in two: the handler checks the params and normalises the paths into
// an fsOp, and the fsOp's run does the I/O. That core is the same code whether it runs here
// or in the sandbox worker (fs_worker.go, docs/sandbox.md §3):
//
//	the request's sandbox                                     where the fsOp runs
//	none, disabled, external, managed with an unrestricted    here, as the server's user
//	file system, or any managed one under --managed-sandbox
//	run-unsandboxed
//	managed, restricted, and the operation only reads while   here (the reference does the
//	the whole disk is readable and nothing is denied          same: reads need no sandbox)
//	managed, restricted, anything else                        the worker for the resolved
//	                                                          profile; the kernel decides
//
// Scheduling (rpc_schedule.go): a direct path method runs in quick mode, on the
// connection's reader, and gets a goroutine of its own only if it outlasts inlineBudget;
// a sandboxed one waits for the worker on a goroutine of its own. Handle methods
// run in their handle's lane, so a pipelined open, writeBlock…, close keeps its order.
// Nothing here blocks on a FIFO or opens a device to read it: a file is checked with stat
// before it is opened (O_NONBLOCK) and with fstat after.
//
// Writes (fs/writeFile, and each file fs/copy creates) replace a lone regular file atomically
// and write in place wherever a rename would change what other names see (docs/protocol.md
// §7.5). A file we may not write is refused (EACCES) as the reference's open refuses it,
// though a rename could replace it; the sandbox worker always writes in place
// (fsWrites.inPlace). fs/readFile's limit is lower on a transport whose messages are bounded
// (messageLimiter). What differs from 0.169 on purpose: docs/protocol.md §12.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// maxReadFileBytes is the largest file fs/readFile returns whole (the reference's limit).
// Larger files are read with fs/open and fs/readBlock.
const maxReadFileBytes = 512 << 20

// fsMethods registers the filesystem methods.
func fsMethods(t methodTable) {
	t["fs/readFile"] = handle("filesystem", "WireFsReadFileParams", decides, (*call).fsReadFile)
	t["fs/writeFile"] = handle("filesystem", "WireFsWriteFileParams", decides, (*call).fsWriteFile)
	t["fs/createDirectory"] = handle("filesystem", "WireFsCreateDirectoryParams", decides, (*call).fsCreateDirectory)
	t["fs/getMetadata"] = handle("filesystem", "WireFsGetMetadataParams", decides, (*call).fsGetMetadata)
	t["fs/canonicalize"] = handle("filesystem", "WireFsCanonicalizeParams", decides, (*call).fsCanonicalize)
	t["fs/readDirectory"] = handle("filesystem", "WireFsReadDirectoryParams", decides, (*call).fsReadDirectory)
	t["fs/remove"] = handle("filesystem", "WireFsRemoveParams", decides, (*call).fsRemove)
	t["fs/copy"] = handle("filesystem", "WireFsCopyParams", decides, (*call).fsCopy)
	t["fs/open"] = handle("filesystem", "WireFsOpenParams", lane, (*call).fsOpen)
	t["fs/readBlock"] = handle("filesystem", "FsReadBlockParams", lane, (*call).fsReadBlock)
	t["fs/writeBlock"] = handle("filesystem", "FsWriteBlockParams", lane, (*call).fsWriteBlock)
	t["fs/close"] = handle("filesystem", "FsCloseParams", lane, (*call).fsClose)
	t["fs/walk"] = handle("filesystem", "WireFsWalkParams", decides, (*call).fsWalk)
	t["fs/watchMissing"] = handle("filesystem", "FsWatchMissingParams", async, (*call).fsWatchMissing)
}

// fsOp is one filesystem operation, its params checked and its paths normalised: the core
// that runs here for direct access and in the sandbox worker under a sandbox (fs_worker.go).
// Each op has a typed run(ctx, how) (its method's result, or fs/open's open file); runEncoded
// is that answer encoded (encoded), so that fsDo and the worker's serve are not generic: one
// copy of them serves every op. Its exported fields are what crosses to the worker
// (fsRequest).
type fsOp interface {
	runEncoded(ctx context.Context, how fsWrites) (result, error)
}

// fsRequest is an fsOp as it crosses to the sandbox worker: its exported fields, encoded
// with encoding/json (appendWorkerRequest).
type fsRequest = any

// serveFSOp runs op, a pointer to the op the worker decoded (newFSOp), and answers the
// result's JSON, or fs/open's file, or the operation's error (an encoding failure is an
// internal *rpcError).
func serveFSOp(ctx context.Context, op any, how fsWrites) (body []byte, f *os.File, err error) {
	if o, ok := op.(*openOp); ok {
		f, err := o.run(ctx, how)
		return nil, f, err
	}
	res, err := op.(fsOp).runEncoded(ctx, how)
	if err != nil {
		return nil, nil, err
	}
	b, err := res.body()
	if err != nil {
		return nil, nil, errInternal("fs sandbox worker: encode the result: %v", err)
	}
	return b, nil, nil
}

// fsWrites is how an operation changes the file system. In the server (the zero value) a
// lone regular file is replaced atomically where it can be (the file comment), and every
// change is a plain system call. The sandbox worker always writes in place, as the
// reference's helper does: the file itself is what the sandbox must let it write, and
// nothing is left behind in the directory if the worker dies mid-write. It also has a
// guard: every change it makes goes through protectGuard (fs_worker_guard_linux.go), which
// refuses to create, write, remove or replace a protected name of a writable root or
// anything in one (docs/sandbox.md §3), so that its view needs no mount points for the
// names that do not exist.
type fsWrites struct {
	inPlace bool
	guard   *protectGuard // nil: nothing to refuse beyond what the kernel refuses
}

// fsWritesDirect is how the server changes files: atomically where it can, unguarded.
func fsWritesDirect() fsWrites { return fsWrites{} }

// fsDo answers a path method with op: run here, as quick work, when the request's sandbox
// leaves it free (fsConfinement), else in the sandbox worker of its profile, whose answer
// comes back encoded (framedJSON). It registers the work and answers nothing itself. The op
// is boxed once, as the interface, and run here by fsHere, the work and its runner in one:
// direct access costs two allocations, as the generic fsDo's closure holding the op by value
// and its work did (a large answer one fewer: no closure to take the turn).
func (c *call) fsDo(method string, sb sandboxParam, write bool, op fsOp) error {
	_, large := op.(largeAnswer)
	if profile := c.fsConfinement(sb, write); profile != nil {
		c.fsInWorker(method, profile, large, op)
		return nil
	}
	h := &fsHere{w: work{mode: quick}, op: op}
	if large {
		h.turn = c
	}
	h.w.run = h
	c.sched.later(&h.w)
	return nil
}

// fsHere is quick work that runs its op here, allocated with the work it is the runner of, so
// that registering it costs no closure. An op with a large answer (largeAnswer) takes the
// connection's turn first (call.takeTurn, as laterInTurn does).
type fsHere struct {
	w    work
	op   fsOp
	turn *call // the call whose turn a large answer takes; nil: the op's answer is small
}

func (h *fsHere) run(ctx context.Context) (result, error) {
	if h.turn != nil {
		if err := h.turn.takeTurn(ctx, &h.w); err != nil {
			return nil, err
		}
	}
	return fsHereRun(ctx, h.op)
}

// fsHereRun runs op here, the server's way (fsWritesDirect).
func fsHereRun(ctx context.Context, op fsOp) (result, error) {
	res, err := op.runEncoded(ctx, fsWritesDirect())
	if err != nil {
		return nil, fsError(err)
	}
	return res, nil
}

// fsInWorker registers the work that runs op in the sandbox worker of profile, as async work
// (laterInTurn).
func (c *call) fsInWorker(method string, profile *sandboxProfile, large bool, op fsRequest) {
	c.laterInTurn(async, large, func(ctx context.Context) (result, error) {
		res, _, err := c.srv.fsWorkers.call(ctx, c.srv.sandbox, profile, method, op)
		return res, err
	})
}

// laterInTurn registers run as work of mode. An op with a large answer (largeAnswer) waits
// for the connection's turn (scheduler.replyTurn) before it builds the answer, and gives the
// turn back once the answer is queued. It is not inlined: one copy serves every operation.
//
//go:noinline
func (c *call) laterInTurn(mode runMode, large bool, run func(ctx context.Context) (result, error)) {
	if !large {
		c.laterEncoded(mode, run)
		return
	}
	var w *work
	w = c.laterEncoded(mode, func(ctx context.Context) (result, error) {
		if err := c.takeTurn(ctx, w); err != nil {
			return nil, err
		}
		return run(ctx)
	})
}

// takeTurn waits for the connection's turn for w's large answer and has w give it back once
// the answer is queued (work.afterReply).
func (c *call) takeTurn(ctx context.Context, w *work) error {
	release, err := c.sched.replyTurn(ctx)
	if err != nil {
		return err
	}
	w.afterReply = release
	return nil
}

// pathParams are the params of the methods that take only a path.
type pathParams struct {
	Path    string       `json:"path" uri:"path"`
	Sandbox sandboxParam `json:"sandbox,omitempty"`
}

// readFileOp is fs/readFile's core: the whole of a regular file of at most Limit bytes.
type readFileOp struct {
	Path  string `json:"path"`
	Limit int64  `json:"limit"`
}

func (o readFileOp) runEncoded(ctx context.Context, how fsWrites) (result, error) {
	return encoded(o.run(ctx, how))
}

func (o readFileOp) run(context.Context, fsWrites) (framedJSON, error) {
	return readFileAnswer(o.Path, o.Limit)
}

// largeAnswer is an fsOp whose answer may be as large as a file (up to maxReadFileBytes):
// its work builds the answer in the connection's turn, once the outgoing queue is within its
// bound (scheduler.replyTurn). Quick work handed over from the reader, or async work in the
// sandbox worker, would otherwise build every pipelined answer at once: 64 fs/readFile of a
// 32 MiB file held 1.1 GiB for a client that read none of them.
type largeAnswer interface{ answersLarge() }

func (readFileOp) answersLarge() {}

func (c *call) fsReadFile(p *pathParams) (framedJSON, error) {
	path, err := paramPath(p.Path)
	if err != nil {
		return framedJSON{}, err
	}
	return framedJSON{}, c.fsDo("fs/readFile", p.Sandbox, false, readFileOp{Path: path, Limit: c.fileLimit})
}

// readFileAnswer reads a regular file of at most limit bytes into its answer,
// {"dataBase64":"…"}: the bytes go straight into the answer's buffer and are encoded there
// (base64Answer). A file whose size the kernel does not know in advance (/proc), or that grows
// while it is read, is read on until EOF under the same limit, into a buffer that grows.
func readFileAnswer(path string, limit int64) (framedJSON, error) {
	f, err := openRegular(path, os.O_RDONLY, 0)
	if err != nil {
		return framedJSON{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return framedJSON{}, err
	}
	if fi.Size() > limit {
		return framedJSON{}, errTooLarge(limit)
	}
	a := newBase64Answer(`{"dataBase64":`, int(fi.Size()), len(`}`))
	m, err := io.ReadFull(f, a.data)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return framedJSON{}, err
	}
	var probe [512]byte
	k, err := f.Read(probe[:])
	if k == 0 && (err == nil || err == io.EOF) {
		return a.finish(m, `}`), nil
	}
	buf := append(append(make([]byte, 0, m+k+4096), a.data[:m]...), probe[:k]...)
	for err == nil {
		if int64(len(buf)) > limit {
			return framedJSON{}, errTooLarge(limit)
		}
		buf = slices.Grow(buf, 4096)
		k, err = f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
	}
	if err != io.EOF {
		return framedJSON{}, err
	}
	if int64(len(buf)) > limit {
		return framedJSON{}, errTooLarge(limit)
	}
	a = newBase64Answer(`{"dataBase64":`, len(buf), len(`}`))
	return a.finish(copy(a.data, buf), `}`), nil
}

// readFileAnswerOverhead bounds the JSON around the base64 of an fs/readFile answer, a
// reasonable request id included.
const readFileAnswerOverhead = 256

// readFileLimit is the largest file fs/readFile returns on a connection over t.
func readFileLimit(t msgTransport) int64 {
	limit := int64(maxReadFileBytes)
	if m := messageLimitOf(t); m > 0 {
		limit = min(limit, int64(m-readFileAnswerOverhead)/4*3)
	}
	return limit
}

func errTooLarge(limit int64) error {
	return errInvalidRequest("file is too large to read: limit is %d bytes", limit)
}

// openRegular opens path and fails unless it is a regular file. The type is checked before the
// open, so that a FIFO or a device is never opened (an open alone can release a FIFO's
// blocked writer, or start a watchdog), and again on the open file in case the path changed
// in between; O_NONBLOCK keeps a FIFO swapped in meanwhile from blocking the open.
func openRegular(path string, flag int, perm os.FileMode) (*os.File, error) {
	return fsWritesDirect().openRegular(path, flag, perm)
}

// openRegular is openRegular, opening as how opens.
func (how fsWrites) openRegular(path string, flag int, perm os.FileMode) (*os.File, error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, errNotAFile(path)
	}
	f, err := how.openFile(path, flag|syscall.O_NONBLOCK|syscall.O_CLOEXEC, perm)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = errNotAFile(path)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func errNotAFile(path string) error {
	return errInvalidRequest("path `%s` is not a file", path)
}

type createDirectoryParams struct {
	Path      string       `json:"path" uri:"path"`
	Recursive *bool        `json:"recursive"`
	Sandbox   sandboxParam `json:"sandbox,omitempty"`
}

// createDirectoryOp is fs/createDirectory's core.
type createDirectoryOp struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
}

func (o createDirectoryOp) runEncoded(ctx context.Context, how fsWrites) (result, error) {
	return encoded(o.run(ctx, how))
}

func (o createDirectoryOp) run(_ context.Context, how fsWrites) (emptyResult, error) {
	if o.Recursive {
		return emptyResult{}, how.mkdirAll(o.Path)
	}
	return emptyResult{}, how.mkdir(o.Path)
}

func (c *call) fsCreateDirectory(p *createDirectoryParams) (emptyResult, error) {
	path, err := paramPath(p.Path)
	if err != nil {
		return emptyResult{}, err
	}
	op := createDirectoryOp{Path: path, Recursive: p.Recursive == nil || *p.Recursive}
	return emptyResult{}, c.fsDo("fs/createDirectory", p.Sandbox, true, op)
}

// mkdirAll is mkdir -p with the reference's answers: an existing directory is fine, an existing
// file is EEXIST (os.MkdirAll would say ENOTDIR).
func (how fsWrites) mkdirAll(path string) error {
	err := how.mkdir(path)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOENT):
		if parent := filepath.Dir(path); parent != path {
			if err := how.mkdirAll(parent); err != nil {
				return err
			}
			err = how.mkdir(path)
		}
	}
	if err != nil && isDir(path) {
		return nil
	}
	return err
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

type metadataResult struct {
	IsDirectory  bool  `json:"isDirectory"`
	IsFile       bool  `json:"isFile"`
	IsSymlink    bool  `json:"isSymlink"`
	Size         int64 `json:"size"`
	CreatedAtMs  int64 `json:"createdAtMs"`
	ModifiedAtMs int64 `json:"modifiedAtMs"`
}

// appendJSON appends m as encoding/json encodes it, without reflection: fs/getMetadata is
// the most frequent small answer.
func (m metadataResult) appendJSON(b []byte) []byte {
	b = strconv.AppendBool(append(b, `{"isDirectory":`...), m.IsDirectory)
	b = strconv.AppendBool(append(b, `,"isFile":`...), m.IsFile)
	b = strconv.AppendBool(append(b, `,"isSymlink":`...), m.IsSymlink)
	b = strconv.AppendInt(append(b, `,"size":`...), m.Size, 10)
	b = strconv.AppendInt(append(b, `,"createdAtMs":`...), m.CreatedAtMs, 10)
	b = strconv.AppendInt(append(b, `,"modifiedAtMs":`...), m.ModifiedAtMs, 10)
	return append(b, '}')
}

// metadataOp is fs/getMetadata's core: it follows symlinks for everything but isSymlink; a
// dangling symlink is -32004.
type metadataOp struct {
	Path string `json:"path"`
}

func (o metadataOp) runEncoded(ctx context.Context, how fsWrites) (result, error) {
	return encoded(o.run(ctx, how))
}

func (o metadataOp) run(context.Context, fsWrites) (rawJSON, error) {
	fi, isLink, err := statFollowing(o.Path)
	if err != nil {
		return nil, err
	}
	m := metadataResult{
		IsDirectory:  fi.IsDir(),
		IsFile:       fi.Mode().IsRegular(),
		IsSymlink:    isLink,
		Size:         fi.Size(),
		ModifiedAtMs: max(fi.ModTime().UnixMilli(), 0),
	}
	return m.appendJSON(make([]byte, 0, 128)), nil
}

func (c *call) fsGetMetadata(p *pathParams) (rawJSON, error) {
	path, err := paramPath(p.Path)
	if err != nil {
		return nil, err
	}
	return nil, c.fsDo("fs/getMetadata", p.Sandbox, false, metadataOp{Path: path})
}

// statFollowing stats path following symlinks, and says whether path itself is a symlink.
func statFollowing(path string) (os.FileInfo, bool, error) {
	li, err := os.Lstat(path)
	if err != nil {
		return nil, false, err
	}
	if li.Mode()&os.ModeSymlink == 0 {
		return li, false, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, false, err
	}
	return fi, true, nil
}

type canonicalizeResult struct {
	Path string `json:"path"`
}

// canonicalizeOp is fs/canonicalize's core.
type canonicalizeOp struct {
	Path string `json:"path"`
}

func (o canonicalizeOp) runEncoded(ctx context.Context, how fsWrites) (result, error) {
	return encoded(o.run(ctx, how))
}

func (o canonicalizeOp) run(context.Context, fsWrites) (canonicalizeResult, error) {
	real, err := realPath(o.Path)
	if err != nil {
		return canonicalizeResult{}, err
	}
	return canonicalizeResult{fileURI(real)}, nil
}

func (c *call) fsCanonicalize(p *pathParams) (canonicalizeResult, error) {
	path, err := paramPath(p.Path)
	if err != nil {
		return canonicalizeResult{}, err
	}
	return canonicalizeResult{}, c.fsDo("fs/canonicalize", p.Sandbox, false, canonicalizeOp{Path: path})
}

// realPath resolves every symlink in path, which must exist, as realpath(3) does.
func realPath(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path) // lstats every component: the result exists
	var errno syscall.Errno
	if err != nil && !errors.As(err, &errno) && strings.Contains(err.Error(), "too many links") {
		err = &os.PathError{Op: "realpath", Path: path, Err: syscall.ELOOP}
	}
	return real, err
}

type dirEntry struct {
	FileName    string `json:"fileName"`
	IsDirectory bool   `json:"isDirectory"`
	IsFile      bool   `json:"isFile"`
}

type readDirectoryResult struct {
	Entries []dirEntry `json:"entries"`
}

// readDirectoryOp is fs/readDirectory's core: a directory in the kernel's order. Types follow
// symlinks, and an entry whose type cannot be read (a dangling symlink) is left out, as the
// reference does.
type readDirectoryOp struct {
	Path string `json:"path"`
}

func (o readDirectoryOp) runEncoded(ctx context.Context, how fsWrites) (result, error) {
	return encoded(o.run(ctx, how))
}

func (o readDirectoryOp) run(context.Context, fsWrites) (readDirectoryResult, error) {
	ents, err := readDirUnsorted(o.Path)
	if err != nil {
		return readDirectoryResult{}, err
	}
	out := make([]dirEntry, 0, len(ents))
	for _, e := range ents {
		mode, ok := followedType(o.Path, e)
		if !ok {
			continue
		}
		out = append(out, dirEntry{FileName: e.Name(), IsDirectory: mode.IsDir(), IsFile: mode.IsRegular()})
	}
	return readDirectoryResult{out}, nil
}

func (c *call) fsReadDirectory(p *pathParams) (readDirectoryResult, error) {
	path, err := paramPath(p.Path)
	if err != nil {
		return readDirectoryResult{}, err
	}
	return readDirectoryResult{}, c.fsDo("fs/readDirectory", p.Sandbox, false, readDirectoryOp{Path: path})
}

// readDirUnsorted reads a directory in the kernel's order. O_DIRECTORY fails at once on
// anything else (a FIFO would otherwise block the open).
func readDirUnsorted(path string) ([]os.DirEntry, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// followedType is the type of a directory entry after following a symlink; false when it
// cannot be read.
func followedType(dir string, e os.DirEntry) (os.FileMode, bool) {
	if e.Type()&os.ModeSymlink == 0 {
		return e.Type(), true
	}
	fi, err := os.Stat(filepath.Join(dir, e.Name()))
	if err != nil {
		return 0, false
	}
	return fi.Mode().Type(), true
}

type removeParams struct {
	Path      string       `json:"path" uri:"path"`
	Recursive *bool        `json:"recursive"`
	Force     *bool        `json:"force"`
	Sandbox   sandboxParam `json:"sandbox,omitempty"`
}

// removeOp is fs/remove's core: a file, a symlink (never its target) or a directory.
type removeOp struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
	Force     bool   `json:"force"`
}

func (o removeOp) runEncoded(ctx context.Context, how fsWrites) (result, error) {
	return encoded(o.run(ctx, how))
}

func (o removeOp) run(_ context.Context, how fsWrites) (emptyResult, error) {
	fi, err := os.Lstat(o.Path)
	switch {
	case err != nil && errors.Is(err, syscall.ENOENT) && o.Force:
		return emptyResult{}, nil
	case err != nil:
		return emptyResult{}, err
	case !fi.IsDir():
		return emptyResult{}, how.unlink(o.Path)
	case o.Recursive:
		return emptyResult{}, how.removeAll(o.Path)
	}
	return emptyResult{}, how.rmdir(o.Path)
}

// fsRemove: recursive and force default to true.
func (c *call) fsRemove(p *removeParams) (emptyResult, error) {
	path, err := paramPath(p.Path)
	if err != nil {
		return emptyResult{}, err
	}
	op := removeOp{Path: path, Recursive: p.Recursive == nil || *p.Recursive, Force: p.Force == nil || *p.Force}
	return emptyResult{}, c.fsDo("fs/remove", p.Sandbox, true, op)
}

func (p *pathParams) sandboxParam() *sandboxParam            { return &p.Sandbox }
func (p *writeFileParams) sandboxParam() *sandboxParam       { return &p.Sandbox }
func (p *createDirectoryParams) sandboxParam() *sandboxParam { return &p.Sandbox }
func (p *removeParams) sandboxParam() *sandboxParam          { return &p.Sandbox }
func (p *copyParams) sandboxParam() *sandboxParam            { return &p.Sandbox }
func (p *openParams) sandboxParam() *sandboxParam            { return &p.Sandbox }
func (p *walkParams) sandboxParam() *sandboxParam            { return &p.Sandbox }
func (p *watchMissingParams) sandboxParam() *sandboxParam    { return &p.Sandbox }

// fsConfinement is the profile an operation must run under, or nil for direct access (the
// table in the file comment). A read under a profile that visibly grants the whole disk
// (root readable, nothing denied) is decided without resolving the profile, which costs a
// few system calls per entry: the common workspace-write object reads at the speed of no
// sandbox at all.
func (c *call) fsConfinement(sb sandboxParam, write bool) *sandboxProfile {
	r := sb.req
	if r == nil || r.kind != profileManaged || r.fsType != "restricted" || c.srv.cfg.runManagedUnsandboxed {
		return nil
	}
	if !write && readsWholeDisk(r) {
		return nil
	}
	p := r.resolve(sandboxAnchors{tmpdir: c.srv.fsWorkers.tmpdir})
	if !p.confinesFiles() || !write && p.readsFreely() {
		return nil
	}
	return p
}

// readsWholeDisk reports whether a restricted request's entries, before resolving, already
// say that every path is readable: an entry for the root itself, and no deny entry or glob.
// false only means "resolve and see".
func readsWholeDisk(r *sandboxRequest) bool {
	root := false
	for _, e := range r.entries {
		switch {
		case e.access == "deny" || e.glob != "":
			return false
		case e.special == "root" && e.subpath == "", e.special == "" && e.path == "/":
			root = true
		}
	}
	return root
}

// decodeVariant decodes a JSON string that must be one of variants, as serde decodes an enum.
func decodeVariant(raw []byte, variants ...string) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", errInvalidParams("invalid type: %s, expected a string", jsonKind(raw))
	}
	if !slices.Contains(variants, s) {
		return "", errUnknownVariant(s, variants...)
	}
	return s, nil
}

// errUnknownVariant is serde's error for a value that names no variant of an enum.
func errUnknownVariant(got string, variants ...string) error {
	if len(variants) == 2 {
		return errInvalidParams("unknown variant `%s`, expected `%s` or `%s`", got, variants[0], variants[1])
	}
	return errInvalidParams("unknown variant `%s`, expected one of `%s`", got, strings.Join(variants, "`, `"))
}

// errFSSandbox is the answer to an operation that needs a sandbox this host cannot give
// (fail closed, docs/sandbox.md §2).
func errFSSandbox() error {
	return errInvalidRequest("filesystem sandbox cannot be enforced on this executor")
}

// fsError turns an error into the JSON-RPC error the reference sends for it (docs/protocol.md
// §7.2).
func fsError(err error) error {
	var re *rpcError
	if errors.As(err, &re) {
		return re
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return errInternal("%s", err)
	}
	msg := rustIOErrorText(errno)
	switch errno {
	case syscall.ENOENT:
		return errNotFound("%s", msg)
	case syscall.EACCES, syscall.EPERM, syscall.EINVAL:
		return errInvalidRequest("%s", msg)
	}
	return errInternal("%s", msg)
}

// rustIOErrorText renders errno as Rust's io::Error does: "<strerror> (os error N)". The
// reference's Linux build links musl, whose strerror texts differ from glibc's ("I/O error",
// not "Input/output error"); elsewhere the platform's own text is used.
func rustIOErrorText(errno syscall.Errno) string {
	text, ok := "", false
	if runtime.GOOS == "linux" {
		text, ok = muslErrorText[errno]
	}
	if !ok {
		text = errno.Error()
		if text != "" {
			text = strings.ToUpper(text[:1]) + text[1:]
		}
	}
	return fmt.Sprintf("%s (os error %d)", text, int(errno))
}

// muslErrorText holds musl's strerror texts for the errors filesystem and network calls give.
var muslErrorText = map[syscall.Errno]string{
	syscall.EPERM:        "Operation not permitted",
	syscall.ENOENT:       "No such file or directory",
	syscall.ESRCH:        "No such process",
	syscall.EINTR:        "Interrupted system call",
	syscall.EIO:          "I/O error",
	syscall.ENXIO:        "No such device or address",
	syscall.E2BIG:        "Argument list too long",
	syscall.ENOEXEC:      "Exec format error",
	syscall.EBADF:        "Bad file descriptor",
	syscall.ECHILD:       "No child process",
	syscall.EAGAIN:       "Resource temporarily unavailable",
	syscall.ENOMEM:       "Out of memory",
	syscall.EACCES:       "Permission denied",
	syscall.EFAULT:       "Bad address",
	syscall.ENOTBLK:      "Block device required",
	syscall.EBUSY:        "Resource busy",
	syscall.EEXIST:       "File exists",
	syscall.EXDEV:        "Cross-device link",
	syscall.ENODEV:       "No such device",
	syscall.ENOTDIR:      "Not a directory",
	syscall.EISDIR:       "Is a directory",
	syscall.EINVAL:       "Invalid argument",
	syscall.ENFILE:       "Too many open files in system",
	syscall.EMFILE:       "No file descriptors available",
	syscall.ENOTTY:       "Not a tty",
	syscall.ETXTBSY:      "Text file busy",
	syscall.EFBIG:        "File too large",
	syscall.ENOSPC:       "No space left on device",
	syscall.ESPIPE:       "Invalid seek",
	syscall.EROFS:        "Read-only file system",
	syscall.EMLINK:       "Too many links",
	syscall.EPIPE:        "Broken pipe",
	syscall.ENAMETOOLONG: "Filename too long",
	syscall.ENOSYS:       "Function not implemented",
	syscall.ENOTEMPTY:    "Directory not empty",
	syscall.ELOOP:        "Symbolic link loop",
	syscall.EOVERFLOW:    "Value too large for data type",
	syscall.ENOTSUP:      "Not supported",
	syscall.ETIMEDOUT:    "Operation timed out",
	syscall.ECONNREFUSED: "Connection refused",
	syscall.ECONNRESET:   "Connection reset by peer",
	syscall.ESTALE:       "Stale file handle",
	syscall.EDQUOT:       "Quota exceeded",
	syscall.ECANCELED:    "Operation canceled",
}
