package main

// Refusing connect-back (docs/sandbox.md §2, "Connect-back"): a sandboxed command whose
// network is enabled can reach the server's own websocket listener on loopback, and a
// connection there may start a process with no sandbox. So every accepted connection whose
// peer is a socket of this host is traced to the process holding it, and refused when that
// process is one of our sandbox stages or descends from one.
//
//	peer address  --NETLINK_SOCK_DIAG, exact 4-tuple-->  the peer's socket inode (and uid)
//	not found     remote, or another network namespace: allowed (a loopback or local address
//	              whose socket has gone is refused: its bytes may already be queued)
//	inode 0       refused (closed by its holder: its bytes may already be queued)
//	inode         --/proc/<pid>/fd-->  the first process holding it (the last client served,
//	              our parents, then every process, newest first)
//	              --/proc/<pid>/stat ppid-->  a stage on the way up: refused (one of ours,
//	              registered, or any process whose argv is a stage's: a supervisor still
//	              ending its command's daemons, another exec-server's sandbox)
//	no holder     refused (hidden in flight in a unix socket message, or unreadable)
//
// The check costs a reading of /proc while no network-enabled stage of ours is live
// (registered in liveStages when started, removed when reaped, checked for peerCheckGrace
// more), and nothing more unless the stage of a network-enabled command runs on the host; a restricted-network stage cannot open a TCP socket in this
// network namespace at all (its own namespace, or the seccomp filter). Stages above this
// server itself (it runs in a sandbox) are no reason to refuse.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Netlink sock_diag layout (linux/inet_diag.h), written by hand: x/sys has the constants only.
const (
	inetDiagReqLen   = 56 // struct inet_diag_req_v2
	inetDiagMsgLen   = 72 // struct inet_diag_msg
	inetDiagNoCookie = 0xffffffff
	inetDiagAllTCP   = 0xfff // every TCP state, TIME_WAIT and the rest included
	tcpListen        = 10    // TCP_LISTEN, the state of a listener
	// maxPeerAncestry bounds the parent walk from a socket's holder (pid_max is 4M; real trees
	// are a few dozen deep).
	maxPeerAncestry = 4096
)

// liveStages are the pids of this server's running network-enabled sandbox stages.
type liveStages struct {
	mu   sync.Mutex
	pids map[int]int // pid -> registrations (a pid is registered once at a time)
	// lastClient is the last process found holding a served peer's socket: a client that
	// connects again is looked at first. An order only: whoever holds the socket is checked.
	lastClient int
	// ended is when the last registered stage was removed: connections are still checked for
	// peerCheckGrace after it (recent).
	ended time.Time
}

// peerCheckGrace is how long after the last network-enabled stage of this server has been
// reaped connections are still checked. A connection its command made, its request already
// queued, may be read only after the stage is gone (its supervisor still ending the
// command's daemons, which may still hold the socket; or the socket closed, its bytes
// waiting): unchecked, it would be served. It covers the time from a connection's
// establishment to its first read, microseconds unless the server is starved.
const peerCheckGrace = 10 * time.Second

// recent reports whether a registered stage is live, or was within peerCheckGrace.
func (l *liveStages) recent() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pids) > 0 || !l.ended.IsZero() && time.Since(l.ended) < peerCheckGrace
}

func (l *liveStages) hint() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastClient
}

func (l *liveStages) setHint(pid int) {
	l.mu.Lock()
	l.lastClient = pid
	l.mu.Unlock()
}

func (l *liveStages) add(pid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pids == nil {
		l.pids = map[int]int{}
	}
	l.pids[pid]++
}

func (l *liveStages) remove(pid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pids[pid]--; l.pids[pid] <= 0 {
		delete(l.pids, pid)
	}
	if len(l.pids) == 0 {
		l.ended = time.Now()
	}
}

// snapshot is the set of live stage pids, nil when there is none.
func (l *liveStages) snapshot() map[int]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pids) == 0 {
		return nil
	}
	m := make(map[int]bool, len(l.pids))
	for pid := range l.pids {
		m[pid] = true
	}
	return m
}

// started registers the stage pid as live until exited gives back what confine took. It runs
// before the stage is sent its configuration, so the command cannot run (nor connect)
// unregistered. Only a stage whose profile leaves the network on is registered.
func (st *sandboxStage) started(pid int) {
	if st == nil || st.live == nil || st.cfg.Profile.restrictsNetwork() {
		return
	}
	st.live.add(pid)
	release := st.release
	st.release = func() {
		st.live.remove(pid)
		if release != nil {
			release()
		}
	}
}

// peerCheckDue reports, cheaply, whether a connection accepted now must be checked: a
// network-enabled stage of this server is live, or was within peerCheckGrace. The listener
// asks at accept (refusePeer asks again, and more, at the first read).
func (s *sandboxer) peerCheckDue() bool {
	return s != nil && s.live.recent()
}

// refusePeer reports why nc must be refused, "" to serve it: its peer is a socket of this host
// held by one of our sandboxes, or a local socket whose holder cannot be told. due: the check
// was due when nc was accepted (peerCheckDue).
func (s *sandboxer) refusePeer(nc net.Conn, due bool) string {
	if s == nil {
		return ""
	}
	stages := s.live.snapshot()
	// Stages this server stands in itself (it was started in a sandbox) confine it as much as
	// its peer: they are no reason to refuse.
	own := ownStages()
	if !due && !s.live.recent() && !anyNetworkStage(own) {
		return ""
	}
	local, lok := nc.LocalAddr().(*net.TCPAddr)
	remote, rok := nc.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return ""
	}
	inode, uid, found, err := peerSocket(remote, local)
	switch {
	case err != nil:
		return fmt.Sprintf("cannot identify the peer's socket: %v", err)
	case !found && !isLocalAddr(remote.IP):
		return "" // from another host, or from another network namespace
	case !found:
		return "the peer's local socket is gone"
	case uid != uint32(os.Geteuid()):
		// A sandboxed process creates its sockets as our user (its user namespace maps
		// that one user only): this one is another user's.
		return ""
	case inode == 0:
		return "the peer's local socket is no longer held by any process"
	}
	holder := socketHolder(inode, s.live.hint())
	if holder <= 0 {
		return fmt.Sprintf("no process holds the peer's socket (inode %d)", inode)
	}
	stage, err := sandboxAncestor(holder, stages, own)
	switch {
	case err != nil:
		return fmt.Sprintf("the ancestry of pid %d, which holds the peer's socket: %v", holder, err)
	case stage > 0:
		return fmt.Sprintf("the peer is pid %d, in sandbox stage %d", holder, stage)
	case !processHolds(holder, socketLink(inode), make([]byte, 64)):
		// Gone meanwhile: the pid, hence the ancestry just read, may be another process's.
		return fmt.Sprintf("pid %d let go of the peer's socket while it was checked", holder)
	}
	s.live.setHint(holder)
	return ""
}

// peerSocket asks the kernel (NETLINK_SOCK_DIAG) for the TCP socket whose local end is peer
// and whose remote end is us, in this network namespace.
func peerSocket(peer, us *net.TCPAddr) (inode, uid uint32, found bool, err error) {
	family, src, dst := uint8(unix.AF_INET6), peer.IP.To16(), us.IP.To16()
	if p4, u4 := peer.IP.To4(), us.IP.To4(); p4 != nil && u4 != nil {
		family, src, dst = unix.AF_INET, p4, u4
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, 0, false, fmt.Errorf("netlink sock_diag: %w", err)
	}
	defer unix.Close(fd)

	req := make([]byte, unix.NLMSG_HDRLEN+inetDiagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], 1) // sequence
	r := req[unix.NLMSG_HDRLEN:]
	r[0], r[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(r[4:], inetDiagAllTCP)
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], uint16(peer.Port))
	binary.BigEndian.PutUint16(id[2:], uint16(us.Port))
	copy(id[4:20], src)
	copy(id[20:36], dst)
	ne.PutUint32(id[40:], inetDiagNoCookie)
	ne.PutUint32(id[44:], inetDiagNoCookie)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, 0, false, fmt.Errorf("netlink sock_diag: %w", err)
	}
	buf := make([]byte, 4096)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, 0, false, fmt.Errorf("netlink sock_diag: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return 0, 0, false, fmt.Errorf("netlink sock_diag: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return 0, 0, false, errors.New("netlink sock_diag: short error")
				}
				switch errno := -int32(ne.Uint32(m.Data)); errno {
				case 0:
					continue
				case int32(unix.ENOENT):
					return 0, 0, false, nil
				default:
					return 0, 0, false, fmt.Errorf("netlink sock_diag: %w", unix.Errno(errno))
				}
			case unix.SOCK_DIAG_BY_FAMILY:
				if len(m.Data) < inetDiagMsgLen {
					return 0, 0, false, errors.New("netlink sock_diag: short answer")
				}
				// The lookup falls back to a listener on the port: only the very connection counts.
				n := len(src)
				if got := m.Data[4:]; m.Data[1] == tcpListen || !bytes.Equal(got[:4], id[:4]) ||
					!bytes.Equal(got[4:4+n], src) || !bytes.Equal(got[20:20+n], dst) {
					return 0, 0, false, nil
				}
				return ne.Uint32(m.Data[68:]), ne.Uint32(m.Data[64:]), true, nil
			case unix.NLMSG_DONE:
				return 0, 0, false, nil
			}
		}
	}
}

// isLocalAddr reports whether ip is an address of this network namespace: loopback, or one
// of its interfaces'.
func isLocalAddr(ip net.IP) bool {
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: treat it as local, so a missing socket is refused
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// socketHolder is a process holding socket inode in its descriptor table, 0 for none found.
// It looks at hint first (the last client served), then at this server's parents (a client
// that started the server), then at every process, newest first: a sandboxed command, like a
// client started after the server, is younger than most of the host. Skipping a process can
// only make the check refuse a connection, never serve one: only a holder found serves it.
func socketHolder(inode uint32, hint int) int {
	target := socketLink(inode)
	link := make([]byte, 64)
	seen := map[int]bool{}
	if hint > 0 {
		seen[hint] = true
		if processHolds(hint, target, link) {
			return hint
		}
	}
	for pid, n := parentPid(os.Getpid()), 0; pid > 1 && n < maxPeerAncestry; pid, n = parentPid(pid), n+1 {
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if processHolds(pid, target, link) {
			return pid
		}
	}
	names, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	pids := make([]int, 0, len(names))
	for _, e := range names {
		if pid, err := strconv.Atoi(e.Name()); err == nil && !seen[pid] {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	for _, pid := range slices.Backward(pids) {
		if processHolds(pid, target, link) {
			return pid
		}
	}
	return 0
}

// socketLink is what a descriptor's link in /proc/<pid>/fd reads for socket inode.
func socketLink(inode uint32) []byte {
	return []byte("socket:[" + strconv.FormatUint(uint64(inode), 10) + "]")
}

// processHolds reports whether pid's descriptor table holds a link that reads target. The
// links are read relative to the open fd directory: no path walk through /proc for each.
func processHolds(pid int, target, link []byte) bool {
	dfd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(dfd)
	var buf [8192]byte
	for {
		n, err := unix.Getdents(dfd, buf[:])
		if err != nil || n <= 0 {
			return false
		}
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:]))
			if reclen < 19 || reclen > len(b) {
				return false
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			if len(name) == 0 || name[0] == '.' {
				continue
			}
			if n, err := unix.Readlinkat(dfd, string(name), link); err == nil && bytes.Equal(link[:n], target) {
				return true
			}
		}
	}
}

// sandboxAncestor is the live stage among pid and its ancestors, 0 when there is none: one of
// stages, or any process running as a stage (isStageProcess) but those in own. A process on
// the way that cannot be read (it has exited, and its children moved) is an error: the chain
// read would not be the one the socket was made in.
//
// The registry alone is not enough: a stage is unregistered once the server has reaped it,
// while, without a pid namespace, its supervisor may still be killing what the command left
// (docs/sandbox.md §2, "Processes"); and another exec-server's sandboxes are in no registry
// of this one. Both still run below a stage, whose argv nothing below it can change.
func sandboxAncestor(pid int, stages, own map[int]bool) (int, error) {
	for n := 0; n < maxPeerAncestry; n++ {
		if stages[pid] || !own[pid] && isStageProcess(pid) {
			return pid, nil
		}
		ppid := parentPid(pid)
		switch {
		case ppid == 0:
			return 0, nil
		case ppid < 0:
			return 0, fmt.Errorf("cannot read the parent of pid %d", pid)
		}
		pid = ppid
	}
	return 0, fmt.Errorf("more than %d ancestors", maxPeerAncestry)
}

// stageCmdline is how /proc/<pid>/cmdline of a sandbox stage (anchor, supervisor or pid 1),
// of this or any exec-server, begins: its argv, which a process can change only for itself
// (PR_SET_MM needs CAP_SYS_RESOURCE), never for its parent. A process that names itself so
// only gets itself refused.
const stageCmdline = "exec-server-sandbox\x00" + sandboxStageArg + "\x00"

// isStageProcess reports whether pid runs as a sandbox stage (stageCmdline).
func isStageProcess(pid int) bool {
	stage, _ := stageProcess(pid)
	return stage
}

// stageProcess reports whether pid runs as a sandbox stage (stageCmdline), and whether that
// stage's command has the network (sandboxStageNetworkArg).
func stageProcess(pid int) (stage, network bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false, false
	}
	defer f.Close()
	const netArg = sandboxStageNetworkArg + "\x00"
	b := make([]byte, len(stageCmdline)+len(netArg)+1)
	n, _ := io.ReadFull(f, b)
	if n < len(stageCmdline) || string(b[:len(stageCmdline)]) != stageCmdline {
		return false, false
	}
	return true, string(b[len(stageCmdline):n]) == netArg
}

// anyNetworkStage reports whether a process of this host (this pid namespace) runs as the
// stage of a command that has the network, those in own aside: only such a command can dial
// the listener. Without one (and none registered) connections are served unchecked, so that
// a local client the server cannot look into (not dumpable) is refused only while one runs.
func anyNetworkStage(own map[int]bool) bool {
	names, err := os.ReadDir("/proc")
	if err != nil {
		return true // cannot tell: check the peer
	}
	for _, e := range names {
		if pid, err := strconv.Atoi(e.Name()); err == nil && !own[pid] {
			if _, network := stageProcess(pid); network {
				return true
			}
		}
	}
	return false
}

// ownStages are the stages among this server's ancestors: it runs in their sandboxes.
func ownStages() map[int]bool {
	var own map[int]bool
	for pid, n := parentPid(os.Getpid()), 0; pid > 1 && n < maxPeerAncestry; pid, n = parentPid(pid), n+1 {
		if isStageProcess(pid) {
			if own == nil {
				own = map[int]bool{}
			}
			own[pid] = true
		}
	}
	return own
}

// parentPid is pid's parent from /proc/<pid>/stat: 0 for none (pid 1, a kernel thread, a
// process whose parent is outside this pid namespace), -1 when it cannot be read.
func parentPid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// pid (comm) state ppid …: comm may hold spaces and parentheses, so cut at the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return -1
	}
	return ppid
}

// denySecrets is p with the server's secret files (secrets.go) denied, where the profile could
// read them: the token that lets a client drive this server must not be readable from inside.
// The namespace view covers each with an empty unreadable file. Landlock cannot deny a path
// under a full-read profile (docs/sandbox.md §2), so such a profile keeps them readable there:
// the connection refusal above still stands between it and the server.
func (s *sandboxer) denySecrets(p *sandboxProfile) *sandboxProfile {
	if len(s.secrets) == 0 || p.FullRead && s.mechanism() != mechanismNamespaces {
		return p
	}
	var deny []string
	for _, f := range s.secrets {
		if p.FullRead || slices.ContainsFunc(slices.Concat(p.Read, p.Write), func(root string) bool { return pathWithin(f, root) }) {
			deny = append(deny, f)
		}
	}
	if len(deny) == 0 {
		return p
	}
	q := *p
	q.Deny = slices.Concat(p.Deny, deny)
	return &q
}

// setSecrets names the files denySecrets keeps from the stages; called once, before serving.
func (s *sandboxer) setSecrets(files []string) { s.secrets = files }
