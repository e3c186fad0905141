package main

// What the managed network proxy can do on this Linux host with this server's sandboxer
// (docs/network.md §4, §7): the network capabilities initialize advertises follow it, and
// `exec-server sandbox --status` says it. New file: the probe is Linux-only (bpf(2)).

import (
	"golang.org/x/sys/unix"
)

// hostNetworkSupport is what a harness's managed-network starts get here: routed only by the
// namespace sandbox with a pid namespace of its own (not the Landlock fallback, not
// --linux-sandbox-pid-namespace inherit), transparent only where the sk_lookup program also
// loads. Under --managed-sandbox run-unsandboxed nothing is routed, so a launch runs as
// without a sandbox, and a transparent start is refused (it confines nothing).
func hostNetworkSupport(sbx *sandboxer, runUnsandboxed bool) networkSupport {
	routes := sbx.routes()
	return networkSupport{
		launch:      routes || runUnsandboxed,
		transparent: routes && !runUnsandboxed && probeTransparentTCP() == nil,
		mask:        routes && !runUnsandboxed,
	}
}

// routes reports whether a sandboxed command can be routed through its proxy here: the
// bridge's stage needs the namespace sandbox with a pid namespace of its own (bridgeTo).
func (s *sandboxer) routes() bool {
	return s.mechanism() == mechanismNamespaces && s.isolatePids
}

// transparentTCPText is `exec-server sandbox --status`'s transparent TCP line.
func transparentTCPText(sbx *sandboxer) string {
	if !sbx.routes() {
		return "refused: a transparent start is routed, and routing is refused here (managed network, above)"
	}
	if err := probeTransparentTCP(); err != nil {
		return "refused: " + err.Error()
	}
	return "a transparent start's every TCP connection goes through its proxy (the sk_lookup program loads)"
}

// probeTransparentTCP does what attachSkLookup does before it attaches anything: it creates
// the sockmap and loads the sk_lookup program (newSkLookupMap, loadSkLookup), then closes both. Either fails where the
// server lacks CAP_BPF or CAP_NET_ADMIN or the kernel lacks sk_lookup (Linux 5.9) or
// bpf_sk_assign, as a transparent start would.
func probeTransparentTCP() error {
	mapFD, err := newSkLookupMap()
	if err != nil {
		return err
	}
	defer unix.Close(mapFD)
	progFD, err := loadSkLookup(mapFD, "exec_transp_prb")
	if err != nil {
		return err
	}
	unix.Close(progFD)
	return nil
}
