package main

// TEMPORARY darwin side until the Seatbelt launcher lands.

import (
	"io"
	"os"
)

type sandboxer struct{}

func newSandboxer(pidNamespace, force string) (*sandboxer, error) { return &sandboxer{}, nil }

func (s *sandboxer) describe() string { return "seatbelt" }

func (s *sandboxer) statusLines(w io.Writer) { io.WriteString(w, "sandbox: seatbelt\n") }

func (s *sandboxer) confine(spec *launchSpec, p *sandboxProfile) (string, error) {
	if p == nil {
		return "none", nil
	}
	return "macosSeatbelt", nil
}

type sandboxStage struct{}

func (st *sandboxStage) prepare(attr *os.ProcAttr, spec *launchSpec) error { return nil }
func (st *sandboxStage) closeChildEnds()                                   {}
func (st *sandboxStage) closeOurEnds()                                     {}
func (st *sandboxStage) await() error                                      { return nil }
func (st *sandboxStage) exited()                                           {}

func isSandboxStage() bool { return false }
func runSandboxStage()     {}

func (s *sandboxer) runForeground(p *sandboxProfile, path string, argv []string, dir string) (int, error) {
	return 1, nil
}
