//go:build !linux

package main

// fs/watchMissing polls on systems other than Linux (fs_watch.go); kqueue could replace it.

import "errors"

// sharedInotify has nothing to share here: every view is refused, and watches poll.
type sharedInotify struct{}

func (s *sharedInotify) view() (dirNotifier, error) {
	return nil, errors.ErrUnsupported
}
