package main

// The kernel's byte counters of a proxied TCP connection (linux), read by a tunnel's idle
// clock (netproxy.go, docs/network.md §5). A file of its own because TCP_INFO's byte counters
// are Linux's: other systems count the bytes as they are copied (netproxy_tcpinfo_other.go).

import (
	"net"

	"golang.org/x/sys/unix"
)

// tcpCountsKernel reports whether tcpProgress can see bytes that splice(2) moves without
// the copying loop's knowledge.
const tcpCountsKernel = true

// tcpProgress is the bytes c has received plus the bytes its peer acknowledged (TCP_INFO's
// tcpi_bytes_received and tcpi_bytes_acked); ok is false when the kernel would not say.
func tcpProgress(c *net.TCPConn) (n uint64, ok bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	cerr := rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil {
			n, ok = info.Bytes_received+info.Bytes_acked, true
		}
	})
	if cerr != nil {
		return 0, false
	}
	return n, ok
}
