package main

// fs/walk (docs/protocol.md §7.16): a bounded breadth-first listing of a directory tree.
//
//	params  path, options{maxDepth, maxDirectories, maxEntries, followDirectorySymlinks,
//	        [pruneHiddenDirectories=false]}, [sandbox: a read, in the sandbox worker when reads
//	        are confined (fs.go)]
//	result  {entries:[{path: URI, kind: "file"|"directory"}], errors:[{path: URI, message}], truncated}
//
// Directories are read level by level, each real directory once; what is listed, and when
// truncated is set, is docs/protocol.md §7.16.

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Walk limits: the largest a client may ask for, and the most an answer may carry.
const (
	maxWalkDepth         = 64
	maxWalkDirectories   = 10_000
	maxWalkEntries       = 50_000
	maxWalkResponseBytes = 4 << 20
	walkItemOverhead     = 64 // JSON around one entry's path, for maxWalkResponseBytes
)

type walkParams struct {
	Path    string       `json:"path" uri:"path"`
	Options walkOptions  `json:"options"`
	Sandbox sandboxParam `json:"sandbox,omitempty"`
}

type walkOptions struct {
	MaxDepth                uint64 `json:"maxDepth"`
	MaxDirectories          uint64 `json:"maxDirectories"`
	MaxEntries              uint64 `json:"maxEntries"`
	FollowDirectorySymlinks bool   `json:"followDirectorySymlinks"`
	PruneHiddenDirectories  bool   `json:"pruneHiddenDirectories,omitempty"`
}

// UnmarshalJSON applies the params rules (required fields) to the nested options object.
func (o *walkOptions) UnmarshalJSON(raw []byte) error {
	type plain walkOptions // without this method
	return decodeParams(raw, "WalkOptions", (*plain)(o))
}

type walkEntry struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
}

type walkError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

type walkResult struct {
	Entries   []walkEntry `json:"entries"`
	Errors    []walkError `json:"errors"`
	Truncated bool        `json:"truncated"`
}

func (c *call) fsWalk(p *walkParams) (walkResult, error) {
	o := p.Options
	if o.MaxDirectories == 0 || o.MaxEntries == 0 {
		return walkResult{}, errInvalidRequest("filesystem walk limits must be greater than zero")
	}
	if o.MaxDepth > maxWalkDepth || o.MaxDirectories > maxWalkDirectories || o.MaxEntries > maxWalkEntries {
		return walkResult{}, errInvalidRequest("filesystem walk limits exceed maximums: depth=%d, directories=%d, entries=%d",
			maxWalkDepth, maxWalkDirectories, maxWalkEntries)
	}
	path, err := paramPath(p.Path)
	if err != nil {
		return walkResult{}, err
	}
	return walkResult{}, c.fsDo("fs/walk", p.Sandbox, false, walkOp{Path: path, Options: o})
}

// walkOp is fs/walk's core: a read, run in the sandbox worker when reads are confined.
type walkOp struct {
	Path    string      `json:"path"`
	Options walkOptions `json:"options"`
}

func (o walkOp) runEncoded(ctx context.Context, how fsWrites) (result, error) {
	return encoded(o.run(ctx, how))
}

func (o walkOp) run(ctx context.Context, _ fsWrites) (walkResult, error) {
	res, err := walkTree(ctx, o.Path, o.Options)
	if err != nil {
		return walkResult{}, err
	}
	return *res, nil
}

// walker is the state of one fs/walk.
type walker struct {
	opts    walkOptions
	res     walkResult
	bytes   int             // the answer's size so far, roughly
	visited map[string]bool // directories queued, by real path when following symlinks
}

type walkDir struct {
	path  string
	depth uint64
}

func walkTree(ctx context.Context, root string, o walkOptions) (*walkResult, error) {
	w := &walker{opts: o, res: walkResult{Entries: []walkEntry{}, Errors: []walkError{}}}
	fi, isLink, err := statFollowing(root)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() || isLink && !o.FollowDirectorySymlinks {
		return &w.res, nil
	}
	rootID := root
	if o.FollowDirectorySymlinks {
		if rootID, err = realPath(root); err != nil {
			return nil, err
		}
	}
	w.visited = map[string]bool{rootID: true}
	queue := []walkDir{{root, 0}}
	dirs, entries := uint64(1), uint64(0)
	for len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dir := queue[0]
		queue = queue[1:]
		ents, err := readDirUnsorted(dir.path)
		if err != nil {
			if !w.addError(dir.path, err) {
				return &w.res, nil
			}
			continue
		}
		slices.SortFunc(ents, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		for _, e := range ents {
			if entries == o.MaxEntries {
				w.res.Truncated = true
				return &w.res, nil
			}
			entries++
			path := filepath.Join(dir.path, e.Name())
			kind := w.entryKind(dir.path, e)
			if kind == "" {
				continue
			}
			uri := fileURI(path)
			if !w.reserve(len(uri)) {
				return &w.res, nil
			}
			w.res.Entries = append(w.res.Entries, walkEntry{Path: uri, Kind: kind})
			if kind != "directory" || dir.depth >= o.MaxDepth || o.PruneHiddenDirectories && strings.HasPrefix(e.Name(), ".") {
				continue
			}
			id := path
			if o.FollowDirectorySymlinks {
				if id, err = realPath(path); err != nil {
					if !w.addError(path, err) {
						return &w.res, nil
					}
					continue
				}
			}
			if w.visited[id] {
				continue
			}
			w.visited[id] = true
			if dirs == o.MaxDirectories {
				w.res.Truncated = true
				continue
			}
			dirs++
			queue = append(queue, walkDir{path, dir.depth + 1})
		}
	}
	return &w.res, nil
}

// entryKind is what fs/walk reports e, in dir, as: "file" or "directory" (a symlink only when
// followed to a directory), or "" for an entry it skips.
func (w *walker) entryKind(dir string, e os.DirEntry) string {
	mode, ok := followedType(dir, e)
	isLink := e.Type()&os.ModeSymlink != 0
	if !ok || isLink && (!w.opts.FollowDirectorySymlinks || !mode.IsDir()) {
		return ""
	}
	switch {
	case mode.IsDir():
		return "directory"
	case !mode.IsRegular():
		return ""
	}
	return "file"
}

// reserve accounts for an item of n bytes; false (and truncated) when the answer is full.
func (w *walker) reserve(n int) bool {
	if w.bytes+n+walkItemOverhead > maxWalkResponseBytes {
		w.res.Truncated = true
		return false
	}
	w.bytes += n + walkItemOverhead
	return true
}

func (w *walker) addError(path string, err error) bool {
	uri := fileURI(path)
	msg := fsError(err).Error()
	if !w.reserve(len(uri) + len(msg)) {
		return false
	}
	w.res.Errors = append(w.res.Errors, walkError{Path: uri, Message: msg})
	return true
}
