package main

// fs/copy (docs/protocol.md §7.11): a file, a symlink or a whole tree, never into itself.

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
)

type copyParams struct {
	SourcePath      string       `json:"sourcePath" uri:"path"`
	DestinationPath string       `json:"destinationPath" uri:"path"`
	Recursive       bool         `json:"recursive"`
	Sandbox         sandboxParam `json:"sandbox,omitempty"`
}

// copyOp is fs/copy's core: a file, a symlink (as a symlink) or, with recursive, a directory
// tree, merged into an existing directory.
type copyOp struct {
	Source      string `json:"sourcePath"`
	Destination string `json:"destinationPath"`
	Recursive   bool   `json:"recursive"`
}

func (o copyOp) runEncoded(ctx context.Context, how fsWrites) (result, error) {
	return encoded(o.run(ctx, how))
}

func (o copyOp) run(ctx context.Context, how fsWrites) (emptyResult, error) {
	src, dst := o.Source, o.Destination
	fi, err := os.Lstat(src)
	if err != nil {
		return emptyResult{}, err
	}
	switch {
	case fi.IsDir():
		if !o.Recursive {
			return emptyResult{}, errInvalidRequest("fs/copy requires recursive: true when sourcePath is a directory")
		}
		inside, err := isSameOrBelow(src, dst)
		if err != nil {
			return emptyResult{}, err
		}
		if inside {
			return emptyResult{}, errInvalidRequest("fs/copy cannot copy a directory to itself or one of its descendants")
		}
		return emptyResult{}, copyTree(ctx, src, dst, how)
	case fi.Mode()&os.ModeSymlink != 0:
		return emptyResult{}, copySymlink(src, dst, how)
	case fi.Mode().IsRegular():
		return emptyResult{}, copyFile(ctx, src, dst, how)
	}
	return emptyResult{}, errInvalidRequest("fs/copy only supports regular files, directories, and symlinks")
}

func (c *call) fsCopy(p *copyParams) (emptyResult, error) {
	src, err := paramPath(p.SourcePath)
	if err != nil {
		return emptyResult{}, err
	}
	dst, err := paramPath(p.DestinationPath)
	if err != nil {
		return emptyResult{}, err
	}
	return emptyResult{}, c.fsDo("fs/copy", p.Sandbox, true, copyOp{Source: src, Destination: dst, Recursive: p.Recursive})
}

// isSameOrBelow says whether dst, once its existing part is resolved, is src or lies inside it.
func isSameOrBelow(src, dst string) (bool, error) {
	realSrc, err := realPath(src)
	if err != nil {
		return false, err
	}
	existing, rest := dst, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			break
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
	realDst, err := realPath(existing)
	if err != nil {
		return false, err
	}
	realDst = filepath.Join(realDst, rest)
	return realDst == realSrc || strings.HasPrefix(realDst, strings.TrimSuffix(realSrc, "/")+"/"), nil
}

// copyTree copies the directory src into dst: directories, regular files and symlinks; other
// entries (FIFOs, sockets, devices) are skipped, as the reference does.
func copyTree(ctx context.Context, src, dst string, how fsWrites) error {
	if err := how.mkdirAll(dst); err != nil {
		return err
	}
	ents, err := readDirUnsorted(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return err
		}
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		switch t := e.Type(); {
		case t.IsDir():
			err = copyTree(ctx, from, to, how)
		case t.IsRegular():
			err = copyFile(ctx, from, to, how)
		case t&os.ModeSymlink != 0:
			err = copySymlink(from, to, how)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// copyFile copies a regular file's bytes and permission bits. A destination that is the source
// itself (the same path, a symlink to it, another hard link) is left untouched.
func copyFile(ctx context.Context, src, dst string, how fsWrites) error {
	in, err := openRegular(src, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	sfi, err := in.Stat()
	if err != nil {
		return err
	}
	if dfi, err := os.Stat(dst); err == nil && os.SameFile(sfi, dfi) {
		return nil
	}
	perm := permBits(sfi.Mode())
	return writeFileContents(ctx, dst, &perm, how, func(out *os.File) error {
		if _, err := in.Seek(0, io.SeekStart); err != nil { // fill may run twice
			return err
		}
		_, err := io.Copy(out, in)
		return err
	})
}

func copySymlink(src, dst string, how fsWrites) error {
	target, err := os.Readlink(src)
	if err != nil {
		return err
	}
	return how.symlink(target, dst)
}
