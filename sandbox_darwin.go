package main

// Confining a launch on macOS (docs/sandbox.md §6, §8.2): the program runs under
// /usr/bin/sandbox-exec with the Seatbelt policy seatbelt.go writes for its profile. No cgo:
// sandbox-exec applies the policy and then execs the program, which cannot leave it.
// Not yet run on a Mac: built and vetted for darwin, the policy text tested on Linux.

import (
	"fmt"
	"os"
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
