package main

// What the managed network proxy can do on this Linux host with this server's sandboxer
// (docs/network.md §4, §7): the network capabilities initialize advertises follow it, and
// `exec-server sandbox --status` says it. New file: the probe is Linux-only (bpf(2)).

import (
	"fmt"
	"runtime"
	"unsafe"

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
// the sockmap and loads the sk_lookup program, then closes both. Either fails where the
// server lacks CAP_BPF or CAP_NET_ADMIN or the kernel lacks sk_lookup (Linux 5.9) or
// bpf_sk_assign, as a transparent start would.
func probeTransparentTCP() error {
	mapAttr := [4]uint32{unix.BPF_MAP_TYPE_SOCKMAP, 4, 4, 1}
	mapFD, err := bpfCall(unix.BPF_MAP_CREATE, unsafe.Pointer(&mapAttr), unsafe.Sizeof(mapAttr))
	if err != nil {
		return fmt.Errorf("create the sockmap (needs CAP_BPF and CAP_NET_ADMIN): %w", err)
	}
	defer unix.Close(mapFD)
	insns := skLookupProgram(mapFD)
	license := []byte("GPL\x00")
	// BPF_PROG_LOAD, laid out as attachSkLookup's.
	load := struct {
		progType, insnCnt     uint32
		insns, license        unsafe.Pointer
		logLevel, logSize     uint32
		logBuf                unsafe.Pointer
		kernVersion, flags    uint32
		name                  [16]byte
		ifindex, expectedType uint32
	}{
		progType: unix.BPF_PROG_TYPE_SK_LOOKUP, insnCnt: uint32(len(insns)),
		insns:        unsafe.Pointer(&insns[0]),
		license:      unsafe.Pointer(&license[0]),
		expectedType: unix.BPF_SK_LOOKUP,
	}
	copy(load.name[:], "exec_transp_prb")
	progFD, err := bpfCall(unix.BPF_PROG_LOAD, unsafe.Pointer(&load), unsafe.Sizeof(load))
	runtime.KeepAlive(insns)
	runtime.KeepAlive(license)
	if err != nil {
		return fmt.Errorf("load the sk_lookup program: %w", err)
	}
	unix.Close(progFD)
	return nil
}
