package main

// inotify for fs/watchMissing (fswatch.go). The descriptor is non-blocking and served by the
// runtime's poller, so reads honour deadlines and closing it ends a pending read.

import (
	"bytes"
	"encoding/binary"
	"os"
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

func newDirNotifier() (dirNotifier, error) {
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
