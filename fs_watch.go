package main

// fs/watchMissing and fs/missingChanged (docs/protocol.md §7.17, §7.18): tell the client, once,
// that a path it waits for has appeared.
//
//	params        watchId (u64), missing (URI[]), [sandbox: decoded, watched in-process]
//	result        {watching}: false when no path is missing or watchId is already in use
//	notification  fs/missingChanged {watchId}: a missing path, or a missing parent of one,
//	              appeared; the watch is then gone
//
// Mechanism. A missing path is armed on its nearest existing ancestor directory, and fires when
// the next component of the path appears there: the path itself or a missing parent of it. On
// Linux the ancestor is watched with inotify (IN_CREATE, IN_MOVED_TO); when the ancestor itself
// goes (deleted, moved away, unmounted) the path is re-armed higher up. A path inotify cannot
// take (the per-user instance or watch limits are reached), and every path on other systems,
// is polled every missingPollInterval instead: it fires when the part of it that exists grows.
// Watches belong to the connection. One goroutine per connection serves them, started by its
// first watch and ended with the connection.
//
// A path counts as missing when lstat says ENOENT or ENOTDIR; a dangling symlink exists.
//
// Under a sandbox that does not let every path be read (docs/sandbox.md §3), a path the
// profile hides (sandboxProfile.hides: outside its readable roots, or denied) is answered
// exactly as a missing path is, whether it exists or not, and never fires: in the sandbox's
// view it does not exist and never appears. Such a path is looked at again when something
// of it appears, in case a symlink on its way was swapped in the meantime.

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Limits of fs/watchMissing.
const (
	// missingPollInterval is how often polled paths are checked.
	missingPollInterval = 500 * time.Millisecond
)

type watchMissingParams struct {
	WatchID uint64   `json:"watchId"`
	Missing []string `json:"missing"`
	// Sandbox is decoded (a malformed one is -32602). The watch runs here, not in a sandbox
	// worker (inotify watches cannot be handed out of one, and the reference's helper has no
	// such operation), so what the profile hides is answered as missing, never watched.
	Sandbox sandboxParam `json:"sandbox,omitempty"`
}

type watchMissingResult struct {
	Watching bool `json:"watching"`
}

type missingChangedParams struct {
	WatchID uint64 `json:"watchId"`
}

// fsWatchMissing runs async (its table entry): adding a watch may wait on the notifier.
func (c *call) fsWatchMissing(p *watchMissingParams) (watchMissingResult, error) {
	paths := make([]string, 0, len(p.Missing))
	for _, raw := range p.Missing {
		path, err := paramPath(raw)
		if err != nil {
			return watchMissingResult{}, err
		}
		paths = append(paths, path)
	}
	ws := scoped(c.scope, &c.scope.watches, func() (*missingWatches, func()) {
		ws := newMissingWatches(missingPollInterval, true, func(id uint64) {
			if b, err := appendNotification(nil, "fs/missingChanged", missingChangedParams{id}); err == nil {
				c.notify(b)
			}
		})
		ws.max = c.srv.cfg.limits.watchedPaths
		ws.newNotifier = c.srv.inotify.view
		return ws, ws.close
	})
	var hides func(string) bool
	if profile := c.fsConfinement(p.Sandbox, false); profile != nil {
		hides = workerProfile(profile, c.srv.fsWorkers.exe).hides // what a worker would see
	}
	watching, err := ws.add(p.WatchID, paths, hides)
	if err != nil {
		return watchMissingResult{}, err
	}
	return watchMissingResult{watching}, nil
}

// missingWatches is a connection's watches for missing paths.
type missingWatches struct {
	interval time.Duration
	kernel   bool // try the kernel's notifier (inotify) before polling
	// newNotifier opens the notifier: a view of the server's shared instance.
	newNotifier func() (dirNotifier, error)
	notify      func(watchID uint64)

	mu      sync.Mutex
	watches map[uint64]*missingWatch
	paths   int // the paths of watches, for max
	// max bounds the paths one connection watches at once (--max-watched-paths): each costs
	// memory, a polled one an lstat per component every interval, and the inotify watches
	// they take come from a per-user budget that every program of the user shares.
	max      int
	fired    []uint64                // watches ended, not yet told (see unlock)
	armed    map[int32][]*missingArm // paths armed with the notifier, by watch descriptor
	polled   []*missingArm
	notifier dirNotifier // nil: polling only
	started  bool
	closed   bool
	stop     chan struct{} // closed by close when polling only
	done     chan struct{} // closed when the goroutine ends
}

// missingWatch is one fs/watchMissing request.
type missingWatch struct {
	id   uint64
	arms []*missingArm
	// hides says which paths its sandbox keeps out of sight; nil without a sandbox that
	// confines reads.
	hides func(path string) bool
}

// missingArm is one missing path of a watch, and where it is armed.
type missingArm struct {
	w     *missingWatch
	path  string
	wd    int32  // the notifier's watch on the nearest existing ancestor, or -1 when polled
	dir   string // that ancestor
	child string // the component of path expected in it
	depth int    // polled: how many leading components of path existed when last checked
	// dormant: the watch's sandbox hides path; it is armed nowhere and never fires.
	dormant bool
}

func newMissingWatches(interval time.Duration, kernel bool, notify func(uint64)) *missingWatches {
	return &missingWatches{
		interval: interval,
		kernel:   kernel,
		notify:   notify,
		watches:  map[uint64]*missingWatch{},
		armed:    map[int32][]*missingArm{},
		max:      defaultLimits.watchedPaths,
		newNotifier: func() (dirNotifier, error) {
			var own sharedInotify // a watch set of its own (tests)
			return own.view()
		},
	}
}

// add arms watch id for the paths that are missing now, and keeps those that hides (nil: none)
// says are hidden as missing and dormant. It returns false, arming nothing, when no path is
// missing or hidden, or id is in use, and an error when the connection would watch over its
// bound (--max-watched-paths).
func (ws *missingWatches) add(id uint64, paths []string, hides func(string) bool) (bool, error) {
	ws.mu.Lock()
	defer ws.unlock()
	if ws.closed || ws.watches[id] != nil {
		return false, nil
	}
	var missing, hidden []string
	if hides == nil {
		missing = missingPaths(paths)
	} else {
		seen := make(map[string]bool, len(paths))
		for _, p := range paths {
			switch {
			case seen[p]:
			case hides(p):
				hidden = append(hidden, p)
			case isMissing(p):
				missing = append(missing, p)
			}
			seen[p] = true
		}
	}
	switch n := len(missing) + len(hidden); {
	case n == 0:
		return false, nil
	case ws.paths+n > ws.max:
		return false, errInvalidRequest("at most %d missing paths may be watched per connection (--max-watched-paths)", ws.max)
	}
	ws.start()
	w := &missingWatch{id: id, hides: hides}
	for _, p := range hidden {
		w.arms = append(w.arms, &missingArm{w: w, path: p, wd: -1, dormant: true})
	}
	fire := false
	for _, p := range missing {
		a := &missingArm{w: w, path: p}
		w.arms = append(w.arms, a)
		fire = !ws.arm(a) && ws.stillVisible(a) || fire
	}
	ws.watches[id] = w
	ws.paths += len(w.arms)
	if fire {
		ws.fire(w)
	}
	return true, nil
}

// missingPaths is paths without repeats and without those that exist.
func missingPaths(paths []string) []string {
	seen := make(map[string]bool, len(paths))
	var missing []string
	for _, p := range paths {
		if !seen[p] && isMissing(p) {
			missing = append(missing, p)
		}
		seen[p] = true
	}
	return missing
}

// start starts the goroutine that serves the watches, once.
func (ws *missingWatches) start() {
	if ws.started {
		return
	}
	ws.started = true
	ws.done = make(chan struct{})
	if ws.kernel {
		if n, err := ws.newNotifier(); err == nil {
			ws.notifier = n
			go ws.serveNotifier()
			return
		}
	}
	ws.stop = make(chan struct{})
	go ws.servePolling()
}

// arm places a on the nearest existing ancestor of its path. It returns false when a should
// fire now: its path exists, or a component of it appeared while it was being armed.
func (ws *missingWatches) arm(a *missingArm) bool {
	if !isMissing(a.path) {
		return false
	}
	if ws.notifier != nil {
		dir, child := filepath.Dir(a.path), filepath.Base(a.path)
		childWasMissing := true // a.path is missing
		for {
			wd, err := ws.notifier.watchDir(dir)
			if err == nil {
				a.wd, a.dir, a.child = wd, dir, child
				ws.armed[wd] = append(ws.armed[wd], a)
				return !childWasMissing || isMissing(filepath.Join(dir, child))
			}
			if dir == "/" || isResourceLimit(err) {
				break
			}
			childWasMissing = errors.Is(err, syscall.ENOENT)
			dir, child = filepath.Dir(dir), filepath.Base(dir)
		}
	}
	a.wd = -1
	a.depth = existingDepth(a.path)
	ws.polled = append(ws.polled, a)
	if ws.notifier != nil {
		ws.notifier.setDeadline(time.Now().Add(ws.interval))
	}
	return true
}

// disarm forgets where a is armed.
func (ws *missingWatches) disarm(a *missingArm) {
	if a.wd < 0 {
		ws.polled = slices.DeleteFunc(ws.polled, func(b *missingArm) bool { return b == a })
		return
	}
	arms := slices.DeleteFunc(ws.armed[a.wd], func(b *missingArm) bool { return b == a })
	if len(arms) > 0 {
		ws.armed[a.wd] = arms
		return
	}
	delete(ws.armed, a.wd)
	ws.notifier.unwatchDir(a.wd)
}

// stillVisible reports whether something appearing on a's path may be told: true unless a's
// sandbox hides the path now (a symlink on its way was swapped), in which case a is
// disarmed and stays dormant.
func (ws *missingWatches) stillVisible(a *missingArm) bool {
	if a.w.hides == nil || !a.w.hides(a.path) {
		return true
	}
	ws.disarm(a)
	a.wd, a.dormant = -1, true
	return false
}

// fireArm ends a's watch because something of a's path appeared, if that may be told.
func (ws *missingWatches) fireArm(a *missingArm) {
	if ws.stillVisible(a) {
		ws.fire(a.w)
	}
}

// fire ends watch w; the client is told when ws.mu is released (unlock).
func (ws *missingWatches) fire(w *missingWatch) {
	if ws.watches[w.id] != w {
		return
	}
	delete(ws.watches, w.id)
	ws.paths -= len(w.arms)
	for _, a := range w.arms {
		ws.disarm(a)
	}
	ws.fired = append(ws.fired, w.id)
}

// unlock releases ws.mu, then tells the client which watches fired meanwhile. Telling may wait
// for a slow client, and must not hold up the other watches (or a new fs/watchMissing) while
// it does.
func (ws *missingWatches) unlock() {
	fired := ws.fired
	ws.fired = nil
	ws.mu.Unlock()
	for _, id := range fired {
		ws.notify(id)
	}
}

// serveNotifier reads the notifier's events until it is closed, polling the paths it could not
// take in between.
func (ws *missingWatches) serveNotifier() {
	defer close(ws.done)
	for {
		ws.mu.Lock()
		if len(ws.polled) > 0 {
			ws.notifier.setDeadline(time.Now().Add(ws.interval))
		} else {
			ws.notifier.setDeadline(time.Time{})
		}
		ws.mu.Unlock()
		evs, err := ws.notifier.next()
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			ws.poll()
		case err != nil:
			return
		default:
			ws.handle(evs)
		}
	}
}

func (ws *missingWatches) servePolling() {
	defer close(ws.done)
	t := time.NewTicker(ws.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			ws.poll()
		case <-ws.stop:
			return
		}
	}
}

// handle applies the notifier's events.
func (ws *missingWatches) handle(evs []dirEvent) {
	ws.mu.Lock()
	defer ws.unlock()
	for _, ev := range evs {
		switch ev.kind {
		case entryCreated:
			for _, a := range slices.Clone(ws.armed[ev.wd]) {
				if a.child == ev.name {
					ws.fireArm(a)
				}
			}
		case dirMoved, dirGone:
			arms := ws.armed[ev.wd]
			delete(ws.armed, ev.wd)
			if ev.kind == dirMoved && len(arms) > 0 {
				ws.notifier.unwatchDir(ev.wd)
			}
			for _, a := range arms {
				// The ancestor went: the path is armed higher up. If it is armed as deep as
				// before, the ancestor came back in the meantime: that is an appearance.
				old := a.dir
				if ws.watches[a.w.id] == a.w && (!ws.arm(a) || a.wd >= 0 && len(a.dir) >= len(old)) {
					ws.fireArm(a)
				}
			}
		case eventsLost: // anything may have appeared
			for _, w := range ws.watches {
				ws.fire(w)
			}
		}
	}
}

// poll checks the polled paths.
func (ws *missingWatches) poll() {
	ws.mu.Lock()
	defer ws.unlock()
	for _, a := range slices.Clone(ws.polled) {
		switch d := existingDepth(a.path); {
		case d > a.depth:
			ws.fireArm(a)
		case d < a.depth:
			a.depth = d
		}
	}
}

// close ends every watch and the goroutine.
func (ws *missingWatches) close() {
	ws.mu.Lock()
	ws.closed = true
	ws.watches, ws.armed, ws.polled = nil, nil, nil
	started := ws.started
	ws.mu.Unlock()
	if !started {
		return
	}
	if ws.notifier != nil {
		ws.notifier.close()
	} else {
		close(ws.stop)
	}
	<-ws.done
}

// isMissing says whether nothing is at path.
func isMissing(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR)
}

// existingDepth counts the leading components of path that exist.
func existingDepth(path string) int {
	depth := 0
	for i := 1; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		if isMissing(path[:i]) {
			break
		}
		depth++
	}
	return depth
}

func isResourceLimit(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.EMFILE)
}

// dirNotifier is the kernel's report of entries appearing in watched directories (inotify).
// watchDir and unwatchDir may be called while next waits.
type dirNotifier interface {
	// watchDir watches the directory dir (following a symlink); the same directory gives
	// the same descriptor.
	watchDir(dir string) (int32, error)
	unwatchDir(wd int32)
	// next waits for events, until the deadline (os.ErrDeadlineExceeded) or close.
	next() ([]dirEvent, error)
	setDeadline(t time.Time)
	close()
}

type dirEventKind int

const (
	entryCreated dirEventKind = iota // name appeared in the directory (created or moved in)
	dirMoved                         // the directory was moved away: its watch follows it
	dirGone                          // the directory's watch ended (deleted, unmounted)
	eventsLost                       // the kernel's queue overflowed
)

type dirEvent struct {
	wd   int32
	kind dirEventKind
	name string
}
