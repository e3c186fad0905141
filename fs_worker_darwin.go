package main

// Starting an fs sandbox worker on macOS (fs_worker.go, docs/sandbox.md §5): not yet. The
// Seatbelt launcher (sandbox_darwin.go) could wrap a worker, but that is neither wired nor
// verified on a Mac; until it is, an operation that needs a worker is refused (fail closed),
// never run unconfined.

import (
	"fmt"
	"os"
	"syscall"
)

// appendFileIdentity appends the device and inode of the file at path, or "-".
func appendFileIdentity(b []byte, path string) []byte {
	fi, err := os.Stat(path)
	if err != nil {
		return append(b, '-')
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return append(b, '-')
	}
	return fmt.Appendf(b, "%d:%d", st.Dev, st.Ino)
}

// protectGuard is the worker's guard of protected names (fs_worker_guard_linux.go). No worker
// runs on this platform: every change through it is refused.
type protectGuard struct{}

func newProtectGuard(fsGuardSpec) (*protectGuard, error) { return nil, errFSSandbox() }

func (g *protectGuard) openWrite(string, int, os.FileMode) (*os.File, error) {
	return nil, errFSSandbox()
}
func (g *protectGuard) mkdir(string, os.FileMode) error { return errFSSandbox() }
func (g *protectGuard) symlink(string, string) error    { return errFSSandbox() }
func (g *protectGuard) remove(string, bool) error       { return errFSSandbox() }
func (g *protectGuard) removeAll(string) error          { return errFSSandbox() }

// startFSWorkerProcess refuses: nothing on this platform confines a worker yet.
func startFSWorkerProcess(sbx *sandboxer, profile *sandboxProfile, env []string) (*fsWorkerProcess, error) {
	return nil, errFSSandbox()
}
