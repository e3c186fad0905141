//go:build !linux

package main

// What the managed network proxy can do off Linux (docs/network.md §4, §7): no sandboxed
// command is routed through its proxy, and nothing is transparent.

// hostNetworkSupport: a launch runs only where nothing is to be routed (--managed-sandbox
// run-unsandboxed); a harness's sandboxed starts ask for routing, which is refused here.
func hostNetworkSupport(_ *sandboxer, runUnsandboxed bool) networkSupport {
	return networkSupport{launch: runUnsandboxed}
}

// transparentTCPText is `exec-server sandbox --status`'s transparent TCP line.
func transparentTCPText(*sandboxer) string {
	return "refused: transparent TCP is Linux-only"
}
