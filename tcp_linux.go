package main

// What the kernel knows of a TCP connection that its reader has not read yet (linux).

import "golang.org/x/sys/unix"

// tcpPeerHungUp reports whether the peer of the TCP socket fd has sent its FIN or a reset:
// the socket is in CLOSE-WAIT (or closed), whatever data still waits to be read before the
// EOF.
func tcpPeerHungUp(fd int) bool {
	info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return false
	}
	switch info.State {
	case tcpCloseWait, tcpClose, tcpLastAck, tcpTimeWait:
		return true
	}
	return false
}

// TCP states of include/net/tcp_states.h.
const (
	tcpTimeWait  = 6
	tcpClose     = 7
	tcpCloseWait = 8
	tcpLastAck   = 9
)
