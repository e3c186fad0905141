package main

// What the fs sandbox worker guards itself (docs/sandbox.md §3): the protected names of its
// profile's writable roots. The worker runs only this program's code, so instead of a view
// that stands on mount points for the names that do not exist (empty directories made on the
// host, seen by everyone for as long as the worker lives), it refuses, with the kernel's
// answer for a read-only file system, every change that would create, write, remove or
// replace a protected name or anything inside one (protectGuard, fs_worker_guard_linux.go).
// The server hands the worker its writable roots and protected paths on its command line
// (fsGuardArgs); the names that exist are still read-only in the worker's view under
// Landlock, where no mount point is ever made.

import (
	"encoding/json"
	"errors"
	"fmt"
)

// fsGuardSpec is what the worker must protect: the writable roots, whose top-level
// protectedNames it refuses to touch, and every protected path of the profile (those names,
// and `.git` files' gitdir targets), inside which it changes nothing.
type fsGuardSpec struct {
	Write     []string `json:"write"`
	Protected []string `json:"protected"`
}

// fsGuardArgs is the worker's argv after fsWorkerArg: its guard, as JSON.
func fsGuardArgs(p *sandboxProfile) ([]string, error) {
	b, err := json.Marshal(fsGuardSpec{Write: p.Write, Protected: p.Protected})
	if err != nil {
		return nil, fmt.Errorf("encode the worker's guard: %w", err)
	}
	return []string{string(b)}, nil
}

// parseFSGuardArgs decodes the worker's guard from the rest of its argv. A worker without one
// does not start: it would change protected names unguarded.
func parseFSGuardArgs(args []string) (fsGuardSpec, error) {
	var spec fsGuardSpec
	if len(args) != 1 {
		return spec, errors.New("fs worker: no guard on the command line")
	}
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		return spec, fmt.Errorf("fs worker: decode the guard: %w", err)
	}
	return spec, nil
}
