//go:build !linux

package main

// What the kernel knows of a TCP connection that its reader has not read yet (not linux).

import "golang.org/x/sys/unix"

// tcpPeerHungUp reports whether the peer of the TCP socket fd has hung up, as far as a peek
// can tell: the next byte is the EOF, or the connection was reset. Data still waiting hides
// a FIN behind it.
func tcpPeerHungUp(fd int) bool {
	var b [1]byte
	n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return n == 0 && err == nil || err == unix.ECONNRESET
}
