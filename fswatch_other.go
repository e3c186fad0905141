//go:build !linux

package main

// fs/watchMissing polls on systems other than Linux (fswatch.go); kqueue could replace it.

import "errors"

func newDirNotifier() (dirNotifier, error) {
	return nil, errors.ErrUnsupported
}
