package main

// inotify for fs/watchMissing (fs_watch.go). The descriptor is non-blocking and served by the
// runtime's poller, so reads honour deadlines and closing it ends a pending read.
//
// One inotify instance serves the whole server (sharedInotify): a user has 128 instances in
// all (fs.inotify.max_user_instances), and a connection each would let 128 connections take
// every one the user's other programs need. Each connection's watches see the instance through
// a view, which receives the events of the descriptors it watches.

import (
	"bytes"
	"encoding/binary"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// inotifyMask is what a watched ancestor reports: entries appearing, and its own end.
const inotifyMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

type inotify struct {
	f   *os.File
	rc  syscall.RawConn
	buf []byte
}

func newInotify() (*inotify, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "inotify")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &inotify{f: f, rc: rc, buf: make([]byte, 16<<10)}, nil
}

// watchDir goes through the RawConn so that the descriptor cannot be closed (and its number
// reused) during the call.
func (n *inotify) watchDir(dir string) (int32, error) {
	var wd int
	var err error
	if cerr := n.rc.Control(func(fd uintptr) { wd, err = unix.InotifyAddWatch(int(fd), dir, inotifyMask) }); cerr != nil {
		return -1, cerr
	}
	return int32(wd), err
}

func (n *inotify) unwatchDir(wd int32) {
	n.rc.Control(func(fd uintptr) { unix.InotifyRmWatch(int(fd), uint32(wd)) })
}

func (n *inotify) setDeadline(t time.Time) { n.f.SetReadDeadline(t) }

func (n *inotify) close() { n.f.Close() }

func (n *inotify) next() ([]dirEvent, error) {
	k, err := n.f.Read(n.buf)
	if err != nil {
		return nil, err
	}
	var evs []dirEvent
	for off := 0; off+unix.SizeofInotifyEvent <= k; {
		b := n.buf[off:]
		wd := int32(binary.NativeEndian.Uint32(b[0:]))
		mask := binary.NativeEndian.Uint32(b[4:])
		nameLen := int(binary.NativeEndian.Uint32(b[12:]))
		end := min(unix.SizeofInotifyEvent+nameLen, len(b))
		name := b[unix.SizeofInotifyEvent:end]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		off += unix.SizeofInotifyEvent + nameLen
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			evs = append(evs, dirEvent{wd: wd, kind: eventsLost})
		case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			evs = append(evs, dirEvent{wd: wd, kind: entryCreated, name: string(name)})
		case mask&unix.IN_MOVE_SELF != 0:
			evs = append(evs, dirEvent{wd: wd, kind: dirMoved})
		case mask&(unix.IN_DELETE_SELF|unix.IN_IGNORED|unix.IN_UNMOUNT) != 0:
			evs = append(evs, dirEvent{wd: wd, kind: dirGone})
		}
	}
	return evs, nil
}

// viewQueue bounds the event batches waiting for one view; past it the view is told its
// events were lost (and re-checks its paths), so a slow connection holds up no other.
const viewQueue = 64

// sharedInotify is the server's one inotify instance, open while any view is.
type sharedInotify struct {
	mu    sync.Mutex
	n     *inotify
	subs  map[int32]map[*inotifyView]bool // watch descriptor → the views watching it
	views map[*inotifyView]bool
}

// view opens a connection's view of the instance, opening the instance first if need be.
func (s *sharedInotify) view() (dirNotifier, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		n, err := newInotify()
		if err != nil {
			return nil, err
		}
		s.n, s.subs, s.views = n, map[int32]map[*inotifyView]bool{}, map[*inotifyView]bool{}
		go s.serve(n)
	}
	v := &inotifyView{s: s, events: make(chan []dirEvent, viewQueue), done: make(chan struct{}), deadline: make(chan struct{})}
	s.views[v] = true
	return v, nil
}

// serve reads n's events and hands each to the views watching its descriptor, until n is
// closed (its last view closed).
func (s *sharedInotify) serve(n *inotify) {
	for {
		evs, err := n.next()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.n != n { // closed and replaced meanwhile: these events are no view's any more
			s.mu.Unlock()
			return
		}
		batches := map[*inotifyView][]dirEvent{}
		for _, ev := range evs {
			if ev.kind == eventsLost {
				for v := range s.views {
					batches[v] = append(batches[v], ev)
				}
				continue
			}
			for v := range s.subs[ev.wd] {
				batches[v] = append(batches[v], ev)
			}
			if ev.kind == dirGone {
				delete(s.subs, ev.wd) // the kernel has dropped the watch
			}
		}
		for v, b := range batches {
			select {
			case v.events <- b:
			default:
				select {
				case v.events <- []dirEvent{{kind: eventsLost}}:
				default: // a loss is already queued: it covers this one
				}
			}
		}
		s.mu.Unlock()
	}
}

// inotifyView is one connection's dirNotifier on the shared instance.
type inotifyView struct {
	s      *sharedInotify
	events chan []dirEvent
	done   chan struct{} // closed by close

	mu       sync.Mutex
	timer    *time.Timer
	deadline chan struct{} // closed when the deadline passes; replaced by setDeadline
}

func (v *inotifyView) watchDir(dir string) (int32, error) {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	if !v.s.views[v] {
		return -1, os.ErrClosed
	}
	wd, err := v.s.n.watchDir(dir)
	if err != nil {
		return -1, err
	}
	if v.s.subs[wd] == nil {
		v.s.subs[wd] = map[*inotifyView]bool{}
	}
	v.s.subs[wd][v] = true
	return wd, nil
}

func (v *inotifyView) unwatchDir(wd int32) {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	v.s.unsubscribeLocked(v, wd)
}

// unsubscribeLocked drops v's interest in wd, and the watch when nobody else has one.
func (s *sharedInotify) unsubscribeLocked(v *inotifyView, wd int32) {
	views := s.subs[wd]
	if !views[v] {
		return
	}
	delete(views, v)
	if len(views) == 0 {
		delete(s.subs, wd)
		s.n.unwatchDir(wd)
	}
}

func (v *inotifyView) setDeadline(t time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.timer != nil {
		v.timer.Stop()
	}
	v.deadline = make(chan struct{})
	v.timer = nil
	if t.IsZero() {
		return
	}
	d := v.deadline
	v.timer = time.AfterFunc(time.Until(t), func() { close(d) })
}

func (v *inotifyView) next() ([]dirEvent, error) {
	v.mu.Lock()
	deadline := v.deadline
	v.mu.Unlock()
	select {
	case evs := <-v.events:
		return evs, nil
	case <-deadline:
		return nil, os.ErrDeadlineExceeded
	case <-v.done:
		return nil, os.ErrClosed
	}
}

// close ends the view: its watches are dropped, and the instance is closed with its last view.
func (v *inotifyView) close() {
	s := v.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.views[v] {
		return
	}
	delete(s.views, v)
	close(v.done)
	for wd := range s.subs {
		s.unsubscribeLocked(v, wd)
	}
	v.mu.Lock()
	if v.timer != nil {
		v.timer.Stop()
	}
	v.mu.Unlock()
	if len(s.views) == 0 {
		s.n.close()
		s.n, s.subs, s.views = nil, nil, nil
	}
}
