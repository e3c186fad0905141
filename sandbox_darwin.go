package main

// Confining a launch on macOS (docs/sandbox.md §5): the program runs under
// /usr/bin/sandbox-exec with the Seatbelt policy seatbelt.go writes for its profile. No cgo:
// sandbox-exec applies the policy and then execs the program, which cannot leave it.
// Not yet run on a Mac: built and vetted for darwin, the policy text tested on Linux.

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// sandboxTypeSeatbelt is process/start's sandboxType for a process under a sandbox object on
// macOS, as the reference reports it.
const sandboxTypeSeatbelt = "macosSeatbelt"

// confineLaunch rewrites spec so that it runs under profile p, and says which sandbox it runs
// in (process/start's sandboxType).
//
// A disabled profile, or one that confines neither files nor the network (an external
// sandbox with the network enabled), runs as is: there is nothing to enforce, and a missing
// sandbox-exec is then no reason to refuse it. Anything else runs under sandbox-exec, or is
// refused when this Mac has none (fail closed). sandbox-exec execs the word after `--` as
// both the program and its argv[0]; we give it the path already resolved, so the lookup stays
// ours (the reference gives the bare name and lets sandbox-exec search PATH). The child thus
// sees that path as its argv[0], not spec.argv[0] (a PTY's arg0 included): accepted.
func confineLaunch(spec *launchSpec, p *sandboxProfile) (sandboxType string, err error) {
	if p == nil {
		return "none", nil
	}
	if p.Unenforceable != "" {
		return "", errInvalidParams("sandbox intent cannot be enforced on this executor: %s", p.Unenforceable)
	}
	if p.Kind == profileDisabled || !p.confinesFiles() && !p.restrictsNetwork() {
		return sandboxTypeSeatbelt, nil
	}
	if !seatbeltAvailable() {
		return "", errInvalidParams("sandbox intent cannot be enforced on this executor")
	}
	var args []string
	if len(spec.argv) > 1 {
		args = spec.argv[1:]
	}
	spec.argv = seatbeltArgs(seatbeltPolicyFor(p), spec.path, args)
	spec.path = seatbeltExecutable
	return sandboxTypeSeatbelt, nil
}

// sandboxMechanism names the mechanism in force on this host, for the start-up log line and
// `exec-server sandbox --status`.
func sandboxMechanism() string {
	if !seatbeltAvailable() {
		return fmt.Sprintf("none: %s not found", seatbeltExecutable)
	}
	return fmt.Sprintf("seatbelt (%s)", seatbeltExecutable)
}

// seatbeltAvailable reports whether sandbox-exec is present as a regular file. It is checked
// at each launch rather than remembered, so there is no state to go stale.
func seatbeltAvailable() bool {
	fi, err := os.Stat(seatbeltExecutable)
	return err == nil && fi.Mode().IsRegular()
}

// sandboxer is a server's sandbox on macOS: Seatbelt, with nothing to remember between
// launches. The flags Linux reads are accepted and have no effect here.
type sandboxer struct{}

func newSandboxer(pidNamespace, force string) (*sandboxer, error) {
	switch pidNamespace {
	case "", "isolate", "inherit":
	default:
		return nil, fmt.Errorf("invalid --linux-sandbox-pid-namespace %q: want isolate or inherit", pidNamespace)
	}
	return &sandboxer{}, nil
}

func (s *sandboxer) describe() string { return sandboxMechanism() }

// limitShm is --linux-sandbox-shm-size, which has no effect here.
func (s *sandboxer) limitShm(int64) {}
func (s *sandboxer) close()         {}

// defaultSandboxMaxProcesses is --linux-sandbox-max-processes' default; the flag is checked
// and has no effect here.
const defaultSandboxMaxProcesses = 1024

func (s *sandboxer) setMaxProcesses(n int) error {
	if n <= 0 {
		return fmt.Errorf("invalid --linux-sandbox-max-processes %d: want at least 1", n)
	}
	return nil
}

// enforces reports whether this host can confine files at all.
func (s *sandboxer) enforces() bool { return seatbeltAvailable() }

func (s *sandboxer) statusLines(w io.Writer) { fmt.Fprintf(w, "sandbox: %s\n", s.describe()) }

func (s *sandboxer) confine(spec *launchSpec, p *sandboxProfile) (string, error) {
	return confineLaunch(spec, p)
}

// runForeground runs path under profile p as `exec-server sandbox` does, in this process's
// group and on its terminal, and returns the command's exit status.
func (s *sandboxer) runForeground(p *sandboxProfile, path string, argv []string, dir string) (int, error) {
	spec := &launchSpec{path: path, argv: argv, env: os.Environ(), dir: dir}
	if _, err := s.confine(spec, p); err != nil {
		return 127, err
	}
	proc, err := os.StartProcess(spec.path, spec.argv, &os.ProcAttr{Dir: dir, Env: spec.env, Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		return 127, err
	}
	ps, err := proc.Wait()
	if err != nil {
		return 127, err
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}

// sandboxStage is Linux's re-exec stage; on macOS sandbox-exec takes its place and a launch
// has none.
type sandboxStage struct{}

func (st *sandboxStage) prepare(attr *os.ProcAttr, spec *launchSpec) error { return nil }
func (st *sandboxStage) closeChildEnds()                                   {}
func (st *sandboxStage) startWarm(env []string, files []*os.File) (*os.Process, *childExit, bool) {
	return nil, nil, false
}
func (st *sandboxStage) closeOurEnds() {}
func (st *sandboxStage) await() error  { return nil }
func (st *sandboxStage) exited()       {}

func isSandboxStage() bool { return false }
func runSandboxStage()     {}
