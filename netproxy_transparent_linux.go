package main

// Transparent TCP for a sandbox's network namespace (docs/network.md §7): every TCP connection
// the command makes, to any address and port, is carried to the per-process proxy and judged
// there as a SOCKS5 CONNECT to that address, for programs that ignore the proxy variables.
//
// In the namespace, the stage (stageTransparent) makes every address local (a "local" route
// for 0.0.0.0/0 and ::/0 on lo, written by netlink) and opens one dual-stack listener, which it
// sends to the server with the namespace itself. The server (attachSkLookup) attaches to that
// namespace a BPF sk_lookup program that gives the listener every TCP connection whose
// destination is not a loopback address, so the accepted socket's local address is the
// destination the command asked for; the proxy judges and relays it (netProxy.serveTransparent
// in netproxy_socks.go). No helper process and no external binary: the program is 33
// instruction slots (skLookupProgram) assembled here and loaded with bpf(2).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// transparentBacklog is the listen(2) backlog of the namespace's transparent listener.
	transparentBacklog = 512
	// transparentMsg is the data byte of the message carrying the transparent listener and
	// the namespace, and of the server's answer once the program is attached.
	transparentMsg = 'T'
	// transparentMaxRefusal bounds the server's reason, sent to the stage instead of the
	// answer when it cannot route the namespace's connections.
	transparentMaxRefusal = 1024
)

// stageTransparent runs in the stage, in the command's network namespace once lo is up and
// before the command is forked: it routes every address to lo, opens the transparent
// listener, sends it and the namespace to the server on sock, and waits until the server has
// attached the program that feeds the listener (or fails). The command inherits neither.
func stageTransparent(sock int) error {
	if err := routeAllLocal(); err != nil {
		return fmt.Errorf("transparent TCP: %w", err)
	}
	ln, err := transparentListen()
	if err != nil {
		return fmt.Errorf("transparent TCP: %w", err)
	}
	defer unix.Close(ln)
	ns, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("transparent TCP: open the network namespace: %w", err)
	}
	defer unix.Close(ns)
	fds := []int{ln, ns}
	dns, err := transparentDNSSockets()
	defer func() {
		for _, fd := range dns {
			unix.Close(fd)
		}
	}()
	if err != nil {
		return fmt.Errorf("transparent TCP: %w", err)
	}
	fds = append(fds, dns...)
	if err := unix.Sendmsg(sock, []byte{transparentMsg}, unix.UnixRights(fds...), nil, 0); err != nil {
		return fmt.Errorf("transparent TCP: send the listener: %w", err)
	}
	ack := make([]byte, transparentMaxRefusal)
	n, err := unix.Read(sock, ack)
	switch {
	case n == 1 && ack[0] == transparentMsg:
		return nil
	case n > 0:
		return errors.New(string(ack[:n])) // the server's reason
	}
	return fmt.Errorf("transparent TCP: the server did not route the namespace's connections (%v)", err)
}

// transparentListen opens the dual-stack listener on [::]:0 that receives every routed
// connection, IPv4 ones as mapped addresses.
func transparentListen() (int, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("dual-stack listener: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind [::]:0: %w", err)
	}
	if err := unix.Listen(fd, transparentBacklog); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("listen: %w", err)
	}
	return fd, nil
}

// transparentDNSSockets binds a UDP socket on port 53 of each nameserver address the
// command's /etc/resolv.conf names (netproxy_dns.go): every address being local in the
// namespace, its queries reach these sockets, which the server answers.
func transparentDNSSockets() ([]int, error) {
	conf, err := os.ReadFile("/etc/resolv.conf")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read /etc/resolv.conf: %w", err)
	}
	var fds []int
	for _, a := range resolvConfServers(string(conf)) {
		family := unix.AF_INET
		var sa unix.Sockaddr = &unix.SockaddrInet4{Port: 53, Addr: a.As4()}
		if a.Is6() {
			family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: 53, Addr: a.As16()}
		}
		fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fds, fmt.Errorf("nameserver socket: %w", err)
		}
		fds = append(fds, fd)
		if err := unix.Bind(fd, sa); err != nil {
			return fds, fmt.Errorf("bind the nameserver address %s:53: %w", a, err)
		}
	}
	return fds, nil
}

// routeAllLocal adds "local 0.0.0.0/0 dev lo" and "local ::/0 dev lo" to the namespace's
// local table: a connection to any address is then delivered in the namespace, where the
// sk_lookup program finds it, instead of failing with ENETUNREACH. IPv6 may be disabled in
// the namespace: its destinations then stay unreachable, as before.
func routeAllLocal() error {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	for i, family := range []byte{unix.AF_INET, unix.AF_INET6} {
		err := netlinkAddLocalRoute(fd, family, uint32(lo.Index), uint32(i+1))
		if err != nil && !(family == unix.AF_INET6 && (errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EACCES))) {
			return fmt.Errorf("route every address of family %d to lo: %w", family, err)
		}
	}
	return nil
}

// netlinkAddLocalRoute sends RTM_NEWROUTE for the default prefix of family, of type local,
// in the local table, through the interface ifindex, and reads the kernel's acknowledgement.
func netlinkAddLocalRoute(fd int, family byte, ifindex, seq uint32) error {
	const nlmsgHdr, rtmsgLen, rtaOIF = 16, 12, 8
	msg := make([]byte, nlmsgHdr+rtmsgLen+rtaOIF)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.RTM_NEWROUTE)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	ne.PutUint32(msg[8:], seq)
	rt := msg[nlmsgHdr:]
	rt[0] = family              // rtm_family
	rt[1] = 0                   // rtm_dst_len: the whole space
	rt[4] = unix.RT_TABLE_LOCAL // rtm_table
	rt[5] = unix.RTPROT_BOOT    // rtm_protocol
	rt[6] = unix.RT_SCOPE_HOST  // rtm_scope
	rt[7] = unix.RTN_LOCAL      // rtm_type
	attr := msg[nlmsgHdr+rtmsgLen:]
	ne.PutUint16(attr[0:], rtaOIF)
	ne.PutUint16(attr[2:], unix.RTA_OIF)
	ne.PutUint32(attr[4:], ifindex)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	if n < nlmsgHdr+4 || ne.Uint16(buf[4:]) != unix.NLMSG_ERROR {
		return errors.New("no netlink acknowledgement")
	}
	if errno := int32(ne.Uint32(buf[nlmsgHdr:])); errno != 0 {
		return unix.Errno(-errno)
	}
	return nil
}

// receiveTransparent receives what stageTransparent sent on sock: the listener and the
// namespace. Each descriptor is checked: a stage cannot have the server attach a program to
// anything but a network namespace, or serve anything but a listening TCP socket.
func receiveTransparent(sock *os.File) (ln, netns *os.File, dns []*os.File, err error) {
	conn, err := sock.SyscallConn()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("transparent TCP: %w", err)
	}
	data := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*(2+transparentDNSMaxServers)))
	var n, oobn, flags int
	var rerr error
	if err := conn.Read(func(fd uintptr) bool {
		n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), data, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	}); err != nil {
		return nil, nil, nil, fmt.Errorf("transparent TCP: receive the listener: %w", err)
	}
	if rerr != nil {
		return nil, nil, nil, fmt.Errorf("transparent TCP: receive the listener: %w", rerr)
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil {
			for i := range msgs {
				if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	fail := func(err error) (*os.File, *os.File, []*os.File, error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, nil, nil, err
	}
	// MSG_CTRUNC: descriptors were dropped (more than the buffer holds, or this server ran out
	// of descriptors): what arrived is not what the stage sent.
	if flags&unix.MSG_CTRUNC != 0 {
		return fail(errors.New("transparent TCP: the stage's descriptors arrived truncated"))
	}
	if n != 1 || data[0] != transparentMsg || len(fds) < 3 || len(fds) > 2+transparentDNSMaxServers {
		return fail(fmt.Errorf("transparent TCP: expected the listener, the namespace and the nameserver sockets, got %d descriptors", len(fds)))
	}
	if err := isListeningTCP(fds[0]); err != nil {
		return fail(fmt.Errorf("transparent TCP: %w", err))
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fds[1], &st); err != nil || st.Type != unix.NSFS_MAGIC {
		return fail(errors.New("transparent TCP: the second descriptor is not a namespace"))
	}
	for _, fd := range fds[2:] {
		typ, err1 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
		proto, err2 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
		if err1 != nil || err2 != nil || typ != unix.SOCK_DGRAM || proto != unix.IPPROTO_UDP {
			return fail(errors.New("transparent TCP: a nameserver descriptor is not a UDP socket"))
		}
	}
	for _, fd := range fds[2:] {
		dns = append(dns, os.NewFile(uintptr(fd), "transparent-dns"))
	}
	return os.NewFile(uintptr(fds[0]), "transparent"), os.NewFile(uintptr(fds[1]), "netns"), dns, nil
}

// skLookupLink is an attached sk_lookup program: closing it detaches the program. Close may
// be called more than once (by the proxy's close and a failed start): the descriptor is
// closed once, never a number reused since.
type skLookupLink struct {
	once sync.Once
	fd   int
}

func (l *skLookupLink) Close() error {
	l.once.Do(func() { unix.Close(l.fd) })
	return nil
}

// bpf(2) commands and the helpers the program calls (include/uapi/linux/bpf.h).
const (
	bpfFuncMapLookupElem = 1
	bpfFuncSkRelease     = 86
	bpfFuncSkAssign      = 124
	bpfPseudoMapFD       = 1
	// Offsets in struct bpf_sk_lookup.
	skLookupFamily   = 8
	skLookupProtocol = 12
	skLookupLocalIP4 = 40
	skLookupLocalIP6 = 44
	skPass           = 1
	// bpfLogSize is the verifier's log kept when the program is refused.
	bpfLogSize = 1 << 16
)

// bpfInsnRaw is one eBPF instruction.
type bpfInsnRaw struct {
	code uint8
	regs uint8 // dst in the low nibble, src in the high one
	off  int16
	imm  int32
}

func ebpf(code, dst, src uint8, off int16, imm int32) bpfInsnRaw {
	return bpfInsnRaw{code: code, regs: dst | src<<4, off: off, imm: imm}
}

// eBPF opcodes used below (class | size/op | source).
const (
	ebpfLdxW   = unix.BPF_LDX | unix.BPF_W | unix.BPF_MEM
	ebpfStW    = unix.BPF_ST | unix.BPF_W | unix.BPF_MEM
	ebpfMov64X = unix.BPF_ALU64 | unix.BPF_MOV | unix.BPF_X
	ebpfMov64K = unix.BPF_ALU64 | unix.BPF_MOV | unix.BPF_K
	ebpfAdd64K = unix.BPF_ALU64 | unix.BPF_ADD | unix.BPF_K
	ebpfAnd32K = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
	ebpfJeqK   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	ebpfJneK   = unix.BPF_JMP | unix.BPF_JNE | unix.BPF_K
	ebpfJa     = unix.BPF_JMP | unix.BPF_JA
	ebpfCall   = unix.BPF_JMP | unix.BPF_CALL
	ebpfExit   = unix.BPF_JMP | unix.BPF_EXIT
	ebpfLdDW   = unix.BPF_LD | unix.BPF_DW | unix.BPF_IMM
)

// skLookupProgram assembles the program: a TCP connection to an address that is not a
// loopback one (127/8, ::1) goes to the socket in slot 0 of the sockmap mapFD; everything
// else (UDP, loopback: the bridge's listeners and the command's own servers) takes the
// usual lookup. Jumps are relative to the next instruction.
func skLookupProgram(mapFD int) []bpfInsnRaw {
	lo127 := int32(127) // the first byte of local_ip4 (network order) as a little-endian load sees it
	v6one := int32(binary.NativeEndian.Uint32([]byte{0, 0, 0, 1}))
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 { // big-endian
		lo127 = 127 << 24
	}
	p := []bpfInsnRaw{
		/* 0 */ ebpf(ebpfMov64X, 6, 1, 0, 0), // r6 = ctx
		/* 1 */ ebpf(ebpfLdxW, 2, 6, skLookupProtocol, 0),
		/* 2 */ ebpf(ebpfJneK, 2, 0, 0, unix.IPPROTO_TCP), // → pass (patched)
		/* 3 */ ebpf(ebpfLdxW, 2, 6, skLookupFamily, 0),
		/* 4 */ ebpf(ebpfJneK, 2, 0, 4, unix.AF_INET), // → 9 (IPv6)
		/* 5 */ ebpf(ebpfLdxW, 2, 6, skLookupLocalIP4, 0),
		/* 6 */ ebpf(ebpfAnd32K, 2, 0, 0, 0),
		/* 7 */ ebpf(ebpfJeqK, 2, 0, 0, lo127), // → pass (patched)
		/* 8 */ ebpf(ebpfJa, 0, 0, 8, 0), // → 17 (lookup)
		/* 9 */ ebpf(ebpfLdxW, 2, 6, skLookupLocalIP6, 0),
		/* 10 */ ebpf(ebpfJneK, 2, 0, 6, 0), // → 17
		/* 11 */ ebpf(ebpfLdxW, 2, 6, skLookupLocalIP6+4, 0),
		/* 12 */ ebpf(ebpfJneK, 2, 0, 4, 0), // → 17
		/* 13 */ ebpf(ebpfLdxW, 2, 6, skLookupLocalIP6+8, 0),
		/* 14 */ ebpf(ebpfJneK, 2, 0, 2, 0), // → 17
		/* 15 */ ebpf(ebpfLdxW, 2, 6, skLookupLocalIP6+12, 0),
		/* 16 */ ebpf(ebpfJeqK, 2, 0, 0, v6one), // → pass (patched)
		/* 17 */ ebpf(ebpfStW, 10, 0, -4, 0), // key = 0
		/* 18 */ ebpf(ebpfMov64X, 2, 10, 0, 0),
		/* 19 */ ebpf(ebpfAdd64K, 2, 0, 0, -4),
		/* 20 */ ebpf(ebpfLdDW, 1, bpfPseudoMapFD, 0, int32(mapFD)),
		/* 21 */ ebpf(0, 0, 0, 0, 0),
		/* 22 */ ebpf(ebpfCall, 0, 0, 0, bpfFuncMapLookupElem),
		/* 23 */ ebpf(ebpfJeqK, 0, 0, 0, 0), // → pass (patched)
		/* 24 */ ebpf(ebpfMov64X, 7, 0, 0, 0),
		/* 25 */ ebpf(ebpfMov64X, 1, 6, 0, 0),
		/* 26 */ ebpf(ebpfMov64X, 2, 7, 0, 0),
		/* 27 */ ebpf(ebpfMov64K, 3, 0, 0, 0),
		/* 28 */ ebpf(ebpfCall, 0, 0, 0, bpfFuncSkAssign),
		/* 29 */ ebpf(ebpfMov64X, 1, 7, 0, 0),
		/* 30 */ ebpf(ebpfCall, 0, 0, 0, bpfFuncSkRelease),
		/* 31 */ ebpf(ebpfMov64K, 0, 0, 0, skPass), // pass
		/* 32 */ ebpf(ebpfExit, 0, 0, 0, 0),
	}
	const pass = 31
	p[6].imm = 0xff
	if lo127 != 127 {
		p[6].imm = -0x1000000 // 0xff000000
	}
	for _, i := range []int{2, 7, 16, 23} {
		p[i].off = int16(pass - i - 1)
	}
	return p
}

// bpfCall is bpf(2) with attr of size n.
func bpfCall(cmd int, attr unsafe.Pointer, n uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(attr), n)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// attachSkLookup makes every non-loopback TCP connection in the namespace netns go to the
// listener ln: a one-slot sockmap holding ln, the program, and a link attaching it to netns,
// which stays attached until the returned link is closed (or the namespace is gone). It
// needs CAP_BPF and CAP_NET_ADMIN (the server runs as root); without them it fails, and the
// command is not started.
func attachSkLookup(netns, ln *os.File) (*skLookupLink, error) {
	mapFD, err := newSkLookupMap()
	if err != nil {
		return nil, fmt.Errorf("transparent TCP: %w", err)
	}
	defer unix.Close(mapFD)
	key, value := uint32(0), uint32(ln.Fd())
	// BPF_MAP_UPDATE_ELEM: map_fd, pad, key, value, flags. Addresses are kept as pointers
	// (8 bytes, as the kernel's u64 on the 64-bit platforms we build for), so that the
	// runtime keeps them right if the stack moves before the call.
	upd := struct {
		mapFD      uint32
		_          uint32
		key, value unsafe.Pointer
		flags      uint64
	}{mapFD: uint32(mapFD), key: unsafe.Pointer(&key), value: unsafe.Pointer(&value)}
	if _, err := bpfCall(unix.BPF_MAP_UPDATE_ELEM, unsafe.Pointer(&upd), unsafe.Sizeof(upd)); err != nil {
		return nil, fmt.Errorf("transparent TCP: put the listener in the sockmap: %w", err)
	}
	progFD, err := loadSkLookup(mapFD, "exec_transp_tcp")
	if err != nil {
		return nil, fmt.Errorf("transparent TCP: %w", err)
	}
	defer unix.Close(progFD)
	// BPF_LINK_CREATE: prog_fd, target_fd, attach_type, flags.
	link := [4]uint32{uint32(progFD), uint32(netns.Fd()), unix.BPF_SK_LOOKUP, 0}
	linkFD, err := bpfCall(unix.BPF_LINK_CREATE, unsafe.Pointer(&link), unsafe.Sizeof(link))
	if err != nil {
		return nil, fmt.Errorf("transparent TCP: attach the program to the namespace: %w", err)
	}
	unix.CloseOnExec(linkFD)
	return &skLookupLink{fd: linkFD}, nil
}

// newSkLookupMap creates the one-slot SOCKMAP the sk_lookup program assigns from.
func newSkLookupMap() (int, error) {
	// union bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size, max_entries.
	mapAttr := [4]uint32{unix.BPF_MAP_TYPE_SOCKMAP, 4, 4, 1}
	fd, err := bpfCall(unix.BPF_MAP_CREATE, unsafe.Pointer(&mapAttr), unsafe.Sizeof(mapAttr))
	if err != nil {
		return -1, fmt.Errorf("create the sockmap (needs CAP_BPF and CAP_NET_ADMIN): %w", err)
	}
	return fd, nil
}

// loadSkLookup loads the sk_lookup program over the map mapFD under name (at most 15
// bytes); where the verifier refuses it, the error carries the verifier's words.
func loadSkLookup(mapFD int, name string) (int, error) {
	insns := skLookupProgram(mapFD)
	license := []byte("GPL\x00")
	// BPF_PROG_LOAD: prog_type, insn_cnt, insns, license, log_level, log_size, log_buf,
	// kern_version, prog_flags, prog_name[16], prog_ifindex, expected_attach_type.
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
	copy(load.name[:15], name)
	progFD, err := bpfCall(unix.BPF_PROG_LOAD, unsafe.Pointer(&load), unsafe.Sizeof(load))
	if err != nil {
		// Ask for the verifier's words only when it refused.
		log := make([]byte, bpfLogSize)
		load.logLevel, load.logSize, load.logBuf = 1, uint32(len(log)), unsafe.Pointer(&log[0])
		if fd, err2 := bpfCall(unix.BPF_PROG_LOAD, unsafe.Pointer(&load), unsafe.Sizeof(load)); err2 == nil {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("load the sk_lookup program: %w: %s", err, cString(log))
	}
	return progFD, nil
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// serveTransparent receives the stage's transparent listener (after its bridge listeners),
// attaches the program that feeds it, hands it to the proxy, and tells the stage it may
// start the command. The listener and the link end with the proxy.
func (st *sandboxStage) serveTransparent() error {
	err := st.routeTransparent()
	if err != nil {
		msg := err.Error()
		st.bridge.Write([]byte(msg[:min(len(msg), transparentMaxRefusal)]))
	}
	return err
}

func (st *sandboxStage) routeTransparent() error {
	ln, netns, dns, err := receiveTransparent(st.bridge)
	if err != nil {
		return err
	}
	defer netns.Close()
	link, err := attachSkLookup(netns, ln)
	if err != nil {
		ln.Close()
		for _, f := range dns {
			f.Close()
		}
		return err
	}
	if err := st.transparent.serveTransparentListener(ln, link, dns); err != nil {
		return err
	}
	if _, err := st.bridge.Write([]byte{transparentMsg}); err != nil {
		return fmt.Errorf("transparent TCP: tell the stage: %w", err)
	}
	return nil
}

// transparentTo makes every TCP connection of the stage's command go through p's SOCKS
// policy (docs/network.md §7). It needs a stage bridged to p (bridgeTo); not p's SOCKS5
// listener, which a request asking for transparency must enable (checkNetworkProxyRequest)
// but which --linux-sandbox-transparent-tcp does without, as the reference does.
func (st *sandboxStage) transparentTo(p *netProxy) error {
	switch {
	case st == nil || len(st.cfg.Bridge) == 0:
		return errors.New(errTransparentNoSandbox)
	case p == nil:
		return errors.New(errTransparentNoProxy)
	}
	st.cfg.Transparent = true
	st.transparent = p
	return nil
}
