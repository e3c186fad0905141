//go:build !linux

package main

// Connect-back on macOS (docs/sandbox.md §5): there is no sandbox stage to trace a peer to, so
// nothing is refused here; these keep the callers platform-free.

import "net"

func (s *sandboxer) refusePeer(nc net.Conn, due bool) string { return "" }
func (s *sandboxer) peerCheckDue() bool                      { return false }
func (s *sandboxer) setSecrets(files []string)               {}
func (st *sandboxStage) started(pid int)                     {}
