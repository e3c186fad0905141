package main

// Starting an fs sandbox worker on Linux (fs_worker.go, docs/sandbox.md §3): the worker is
// this binary again, launched through the sandbox stage as any sandboxed process is, with its
// three descriptors wired to the server.
//
//	fd  worker's end                          server's end
//	0   unix stream socket (blocking)         *net.UnixConn: requests out, descriptors in
//	1   pipe, write end                       pipe, read end: responses
//	2   pipe, write end                       pipe, read end: stderr
//
// The stage runs with childSysProcAttr's session and Pdeathsig (it dies with the server, and
// the worker, pid 2 of its pid namespace, with it), in the directory "/", with only the
// environment fsWorkerEnv names.

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// startFSWorkerProcess starts a worker confined to profile. A host without a mechanism to
// confine files refuses (fail closed).
//
// The worker guards the profile's protected names itself (its command line carries them,
// fsGuardArgs), so in new namespaces its view is built without them: no mount point is
// made on the host for a missing one, and nothing of the sandbox appears in the workspace.
// Under Landlock, which makes nothing on the host, the rules keep them read-only as well.
func startFSWorkerProcess(sbx *sandboxer, profile *sandboxProfile, env []string) (*fsWorkerProcess, error) {
	mech := sbx.mechanism()
	if mech == mechanismNone {
		return nil, errFSSandbox()
	}
	guard, err := fsGuardArgs(profile)
	if err != nil {
		return nil, errInternal("fs sandbox helper failed: %v", err)
	}
	view := profile
	if mech == mechanismNamespaces {
		v := *profile
		v.Protected = nil
		view = &v
	}
	spec := &launchSpec{path: stageExe, argv: append([]string{"exec-server-fs-worker", fsWorkerArg}, guard...), env: env, dir: "/"}
	if _, err := sbx.confine(spec, view); err != nil {
		return nil, errInternal("fs sandbox helper failed: %v", err)
	}
	if spec.stage == nil {
		// confine leaves a profile that confines files to a stage, always; never run a
		// worker that nothing confines.
		return nil, errFSSandbox()
	}
	fail := func(err error, closers ...*os.File) (*fsWorkerProcess, error) {
		for _, f := range closers {
			if f != nil {
				f.Close()
			}
		}
		spec.stage.closeOurEnds()
		return nil, errInternal("fs sandbox helper failed to start: %v", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("socketpair: %w", err))
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "fs-worker"), os.NewFile(uintptr(fds[1]), "fs-worker-stdin")
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(err, ours, theirs)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return fail(err, ours, theirs, outR, outW)
	}
	attr := &os.ProcAttr{Dir: spec.dir, Env: spec.env, Files: []*os.File{theirs, outW, errW}, Sys: childSysProcAttr(false)}
	if err := spec.stage.prepare(attr, spec); err != nil {
		return fail(err, ours, theirs, outR, outW, errR, errW)
	}
	proc, err := os.StartProcess(spec.path, spec.argv, attr)
	spec.stage.closeChildEnds()
	theirs.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		return fail(err, ours, outR, errR)
	}
	if err := spec.stage.await(); err != nil {
		proc.Kill()
		proc.Wait()
		spec.stage.exited()
		ours.Close()
		outR.Close()
		errR.Close()
		return nil, errInternal("fs sandbox helper failed to start: %v", err)
	}
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		proc.Kill()
		proc.Wait()
		spec.stage.exited()
		outR.Close()
		errR.Close()
		return nil, errInternal("fs sandbox helper failed to start: %v", err)
	}
	return &fsWorkerProcess{proc: proc, exited: spec.stage.exited, sock: conn.(*net.UnixConn), out: outR, errOut: errR,
		oneShot: spec.stage.cfg.Landlock}, nil
}

// appendFileIdentity appends what identifies the file at path: its device, inode and birth
// time, or "-" when there is none. An inode number alone is not enough: a directory removed
// and made again often gets the same one back at once (ext4 does), but never the same birth
// time. Times that change with use (mtime, ctime) are left out: a writable root changes them
// with every file made in it.
func appendFileIdentity(b []byte, path string) []byte {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_INO|unix.STATX_BTIME, &st); err != nil {
		return append(b, '-')
	}
	b = fmt.Appendf(b, "%d:%d:%d", st.Dev_major, st.Dev_minor, st.Ino)
	if st.Mask&unix.STATX_BTIME != 0 {
		b = fmt.Appendf(b, "@%d.%d", st.Btime.Sec, st.Btime.Nsec)
	}
	return b
}
