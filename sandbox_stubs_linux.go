package main

// TEMPORARY stubs until seccomp_linux.go and landlock_linux.go land.

import "errors"

type seccompMode int

const (
	seccompOff seccompMode = iota
	seccompNetwork
	seccompVsock
)

func installSeccomp(mode seccompMode) error { return nil }

type landlockRules struct{ Read, Write, WriteFiles []string }

func landlockABI() int { return 0 }

func landlockRulesFor(p *sandboxProfile) (landlockRules, error) { return landlockRules{}, nil }

func restrictThreadLandlock(r landlockRules) error { return errors.New("no landlock") }
