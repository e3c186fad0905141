//go:build !linux

package main

// The kernel's byte counters of a proxied TCP connection (not linux): none are read, so a
// tunnel's idle clock (netproxy.go, docs/network.md §5) counts the bytes as its copying loop
// moves them, and no splice is used. A file of its own as the linux side is.

import "net"

// tcpCountsKernel reports whether tcpProgress can see bytes that splice(2) moves without
// the copying loop's knowledge.
const tcpCountsKernel = false

// tcpProgress never knows here.
func tcpProgress(*net.TCPConn) (uint64, bool) { return 0, false }
