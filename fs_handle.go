package main

// File handles (docs/protocol.md §7.12–§7.15): a file opened once and read or written in
// blocks, so that no file is too large to move. Handles belong to the connection
// (docs/protocol.md §5.2); requests on one handle run in order (later key "fh/"+handleId).
//
//	fs/open        handleId (≤32 bytes, "" allowed) path [mode sandbox]   {handleId}
//	               mode "read" (default): a regular file, for fs/readBlock
//	               mode "replace": created or truncated in place, for fs/writeBlock
//	               under a sandbox that confines it, the sandbox worker opens the file and
//	               hands the descriptor over (fs_worker.go): the kernel decides the open,
//	               and the blocks then move here, at full speed
//	fs/readBlock   handleId offset len (1..1048576)   {chunk, eof}: eof when fewer than len came
//	fs/writeBlock  handleId offset chunk              {}: a gap past the end reads back as zeros
//	fs/close       handleId                           {}: an unknown handle is not an error
//
// Reading through the wrong kind of handle fails as the OS says (EBADF, -32603), as in 0.169.

import (
	"context"
	"io"
	"math"
	"os"
	"sync"
	"syscall"
)

// Limits of file handles.
const (
	maxReadBlockBytes = 1 << 20 // one fs/readBlock (docs/protocol.md §7.13)
	maxHandleIDBytes  = 32      // a client-chosen handle id (docs/protocol.md §7.12)
)

// fileHandles is a connection's open files, by client-chosen id.
type fileHandles struct {
	mu     sync.Mutex
	files  map[string]*os.File
	closed bool
	max    int // --max-open-handles
}

// fileHandles returns the connection's handles, made on first use.
func (c *call) fileHandles() *fileHandles {
	return scoped(c.scope, &c.scope.files, func() (*fileHandles, func()) {
		h := &fileHandles{files: map[string]*os.File{}, max: c.srv.cfg.limits.openHandles}
		return h, h.closeAll
	})
}

// add files f under id, or says why it cannot.
func (h *fileHandles) add(id string, f *os.File) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return errInternal("connection closed")
	case h.files[id] != nil:
		return errInvalidRequest("file handle `%s` already exists", id)
	case len(h.files) >= h.max:
		return errInvalidRequest("at most %d file handles may be open per connection (--max-open-handles)", h.max)
	}
	h.files[id] = f
	return nil
}

func (h *fileHandles) get(id string) (*os.File, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.files[id]; f != nil {
		return f, nil
	}
	return nil, errNotFound("unknown file handle `%s`", id)
}

func (h *fileHandles) remove(id string) *os.File {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.files[id]
	delete(h.files, id)
	return f
}

func (h *fileHandles) closeAll() {
	h.mu.Lock()
	files := h.files
	h.files, h.closed = nil, true
	h.mu.Unlock()
	for _, f := range files {
		f.Close()
	}
}

func checkHandleID(id string) error {
	if len(id) > maxHandleIDBytes {
		return errInvalidRequest("file handle ID must not exceed %d bytes", maxHandleIDBytes)
	}
	return nil
}

// handleLane orders the requests on one handle: the handle methods run in the lane of their
// handleId (runMode lane).
func handleLane(id string) string { return "fh/" + id }

func (p *openParams) laneKey() string       { return handleLane(p.HandleID) }
func (p *readBlockParams) laneKey() string  { return handleLane(p.HandleID) }
func (p *writeBlockParams) laneKey() string { return handleLane(p.HandleID) }
func (p *closeParams) laneKey() string      { return handleLane(p.HandleID) }

// openMode is fs/open's mode: "read" (the default) or "replace".
type openMode string

func (m *openMode) UnmarshalJSON(raw []byte) error {
	s, err := decodeVariant(raw, "read", "replace")
	*m = openMode(s)
	return err
}

type openParams struct {
	HandleID string       `json:"handleId"`
	Path     string       `json:"path" uri:"path"`
	Mode     *openMode    `json:"mode"`
	Sandbox  sandboxParam `json:"sandbox,omitempty"`
}

type openResult struct {
	HandleID string `json:"handleId"`
}

// onHandle is the shape of the handle methods, which run in the handle's lane, after every
// earlier request on the same handle: the handle id is checked, then op runs.
func onHandle[R any](c *call, id string, op func(h *fileHandles) (R, error)) (R, error) {
	if err := checkHandleID(id); err != nil {
		var none R
		return none, err
	}
	return op(c.fileHandles())
}

// openOp is fs/open's core: a regular file, opened to read or (Replace) created or truncated
// in place to write.
type openOp struct {
	Path    string `json:"path"`
	Replace bool   `json:"replace"`
}

// run returns the open *os.File.
func (o openOp) run(_ context.Context, how fsWrites) (*os.File, error) {
	flag := os.O_RDONLY
	if o.Replace {
		flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := how.openRegular(o.Path, flag, 0o666)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// fsOpen opens a regular file for fs/readBlock, or with mode "replace" creates or truncates it
// in place for fs/writeBlock.
func (c *call) fsOpen(p *openParams) (openResult, error) {
	path, err := paramPath(p.Path)
	if err != nil {
		return openResult{}, err
	}
	op := &openOp{Path: path, Replace: p.Mode != nil && *p.Mode == "replace"}
	profile := c.fsConfinement(p.Sandbox, op.Replace)
	return onHandle(c, p.HandleID, func(h *fileHandles) (openResult, error) {
		if _, err := h.get(p.HandleID); err == nil {
			return openResult{}, errInvalidRequest("file handle `%s` already exists", p.HandleID)
		}
		var f *os.File
		if profile == nil {
			if f, err = op.run(c.ctx, fsWritesDirect()); err != nil {
				return openResult{}, fsError(err)
			}
		} else {
			_, fd, err := c.srv.fsWorkers.call(c.ctx, c.srv.sandbox, profile, "fs/open", op)
			if err != nil {
				return openResult{}, err
			}
			if fd == nil {
				return openResult{}, errInternal("fs sandbox helper failed: fs/open answered without a descriptor")
			}
			f = fd
		}
		if err := h.add(p.HandleID, f); err != nil {
			f.Close()
			return openResult{}, err
		}
		return openResult{p.HandleID}, nil
	})
}

type readBlockParams struct {
	HandleID string `json:"handleId"`
	Offset   uint64 `json:"offset"`
	Len      uint64 `json:"len"`
}

// fsReadBlock reads up to len bytes at offset; eof is true when fewer came back.
func (c *call) fsReadBlock(p *readBlockParams) (framedJSON, error) {
	if p.Len < 1 || p.Len > maxReadBlockBytes {
		return framedJSON{}, errInvalidRequest("file read block length must be between 1 and %d", maxReadBlockBytes)
	}
	return onHandle(c, p.HandleID, func(h *fileHandles) (framedJSON, error) {
		f, err := h.get(p.HandleID)
		if err != nil {
			return framedJSON{}, err
		}
		if p.Offset > math.MaxInt64 {
			return framedJSON{}, fsError(syscall.EINVAL)
		}
		// {"chunk":"…","eof":B}, read and encoded in place (base64Answer).
		a := newBase64Answer(`{"chunk":`, int(p.Len), len(`,"eof":false}`))
		n, err := f.ReadAt(a.data, int64(p.Offset))
		if err != nil && err != io.EOF {
			return framedJSON{}, fsError(err)
		}
		if n < len(a.data) {
			return a.finish(n, `,"eof":true}`), nil
		}
		return a.finish(n, `,"eof":false}`), nil
	})
}

type writeBlockParams struct {
	HandleID string      `json:"handleId"`
	Offset   uint64      `json:"offset"`
	Chunk    base64Bytes `json:"chunk"`
}

// fsWriteBlock writes chunk at offset; a gap past the end reads back as zeros.
func (c *call) fsWriteBlock(p *writeBlockParams) (emptyResult, error) {
	return onHandle(c, p.HandleID, func(h *fileHandles) (emptyResult, error) {
		f, err := h.get(p.HandleID)
		if err != nil {
			return emptyResult{}, err
		}
		if p.Offset > math.MaxInt64-uint64(len(p.Chunk)) {
			return emptyResult{}, fsError(syscall.EINVAL)
		}
		if _, err := f.WriteAt(p.Chunk, int64(p.Offset)); err != nil {
			return emptyResult{}, fsError(err)
		}
		return emptyResult{}, nil
	})
}

type closeParams struct {
	HandleID string `json:"handleId"`
}

// fsClose closes a handle; an unknown one is not an error.
func (c *call) fsClose(p *closeParams) (emptyResult, error) {
	return onHandle(c, p.HandleID, func(h *fileHandles) (emptyResult, error) {
		if f := h.remove(p.HandleID); f != nil {
			if err := f.Close(); err != nil {
				return emptyResult{}, fsError(err)
			}
		}
		return emptyResult{}, nil
	})
}
