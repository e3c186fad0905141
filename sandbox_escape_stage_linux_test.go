package main

// Escapes through the sandbox stage and its filter (docs/sandbox.md §2, issue 20 rows 4, 5,
// 6, 7 and 10): the server's session keyring, metadata writes under read-only Landlock,
// daemons that outlive their command, a fork bomb, and datagrams to a host unix socket.
// Every verdict is read on the host: the key, the file's mode and times, the daemon's pid,
// the processes running, the socket's queue.

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The test binary's parts in these tests, chosen by its environment before any test runs.
const (
	stageProbeEnv   = "EXEC_SERVER_STAGETEST_PROBE"   // "1": argv[1:] is a probe (stageProbe)
	stageKeyringEnv = "EXEC_SERVER_STAGETEST_KEYRING" // "1": join a session keyring, add a key, exec the server
)

func init() {
	if isSandboxStage() || os.Getenv(sbRunEnv) != "" {
		return // TestMain runs the stage; sandbox_linux_test.go's init the command line
	}
	if os.Getenv(stageProbeEnv) == "1" {
		os.Exit(stageProbe(os.Args[1:]))
	}
	if os.Getenv(stageKeyringEnv) == "1" {
		os.Exit(keyringServer())
	}
}

// keyringServer gives this process a session keyring of its own holding one key, says their
// ids on stdout, and execs the server (sbRunEnv) with them: every thread of the server then
// has that session keyring, as a server started from a login session has one.
func keyringServer() int {
	runtime.LockOSThread() // a session keyring is joined by the calling thread; exec keeps its
	ring, err := unix.KeyctlJoinSessionKeyring(fmt.Sprintf("exec-server-stagetest-%d", os.Getpid()))
	if err != nil {
		fmt.Println("join:", err)
		return 2
	}
	key, err := unix.AddKey("user", "exec-server-stagetest", []byte("secret"), ring)
	if err != nil {
		fmt.Println("add_key:", err)
		return 2
	}
	// The user may view, read, write, search, link and set attributes of both: the sandbox
	// runs as this user, so only the sandbox stands between it and them.
	const allToPossessorAndUser = 0x3f3f0000
	if err := unix.KeyctlSetperm(ring, allToPossessorAndUser); err != nil {
		fmt.Println("setperm:", err)
		return 2
	}
	if err := unix.KeyctlSetperm(key, allToPossessorAndUser); err != nil {
		fmt.Println("setperm:", err)
		return 2
	}
	fmt.Printf("%d %d\n", ring, key)
	os.Unsetenv(stageKeyringEnv)
	env := append(os.Environ(), sbRunEnv+`=["--listen","ws://127.0.0.1:0"]`, "GORACE="+sbGORACE)
	err = syscall.Exec(testBinaryPath, []string{testBinaryPath}, env)
	fmt.Println("exec:", err)
	return 2
}

// stageProbe is the test binary inside the sandbox. It prints what each attempt gave; the
// tests judge by the host, not by this.
//
//	keyring KEY RING   read and update KEY, add a key to RING and to the session keyring
//	meta PATH          chmod, utimensat, setxattr (user and ACL) and removexattr on PATH
//	dgram PATH         send a datagram to the unix socket PATH from a socket and a socketpair
//	fork N ARG         start N `sleep ARG`, say how many started, then wait for stdin's end
func stageProbe(args []string) int {
	if len(args) < 2 {
		fmt.Println("usage: keyring KEY RING | meta PATH | dgram PATH | fork N ARG")
		return 2
	}
	say := func(what string, err error) {
		if err == nil {
			fmt.Printf("%s: ok\n", what)
		} else {
			fmt.Printf("%s: %v\n", what, err)
		}
	}
	switch args[0] {
	case "keyring":
		key, _ := strconv.Atoi(args[1])
		ring, _ := strconv.Atoi(args[2])
		buf := make([]byte, 64)
		_, err := unix.KeyctlBuffer(unix.KEYCTL_READ, key, buf, 0)
		say("read", err)
		_, err = unix.KeyctlBuffer(unix.KEYCTL_UPDATE, key, []byte("pwned"), 0)
		say("update", err)
		_, err = unix.AddKey("user", "planted", []byte("x"), ring)
		say("add to the server's ring", err)
		_, err = unix.AddKey("user", "planted", []byte("x"), unix.KEY_SPEC_SESSION_KEYRING)
		say("add to @s", err)
	case "meta":
		path := args[1]
		say("chmod", unix.Chmod(path, 0o600))
		say("utimensat", unix.UtimesNano(path, []unix.Timespec{{Sec: 946684800}, {Sec: 946684800}}))
		say("setxattr user", unix.Setxattr(path, "user.exec-server-planted", []byte("x"), 0))
		say("setxattr acl", unix.Setxattr(path, "system.posix_acl_access", posixACLAllowOther(), 0))
		say("removexattr", unix.Removexattr(path, "user.exec-server-keep"))
	case "setversion":
		f, err := os.Open(args[1])
		if err != nil {
			say("open", err)
			break
		}
		gen := int64(0x5eed)
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), seccompFSIocSetVersion, uintptr(unsafe.Pointer(&gen)))
		if errno != 0 {
			err = errno
		}
		say("FS_IOC_SETVERSION", err)
		f.Close()
	case "dgram":
		to := &unix.SockaddrUnix{Name: args[1]}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		say("socket SOCK_DGRAM", err)
		if err == nil {
			say("sendmsg from a socket", unix.Sendmsg(fd, []byte("socket"), nil, to, 0))
			unix.Close(fd)
		}
		fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		say("socket SOCK_RAW", err)
		if err == nil {
			say("sendmsg from a raw socket", unix.Sendmsg(fd, []byte("raw"), nil, to, 0))
			unix.Close(fd)
		}
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		say("socketpair SOCK_DGRAM", err)
		if err == nil {
			say("sendmsg from a socketpair", unix.Sendmsg(fds[0], []byte("socketpair"), nil, to, 0))
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
	case "fork":
		n, _ := strconv.Atoi(args[1])
		started, failed := 0, 0
		var last error
		for range n {
			p, err := os.StartProcess("/bin/sleep", []string{"sleep", args[2]}, &os.ProcAttr{})
			if err != nil {
				failed, last = failed+1, err
				continue
			}
			p.Release()
			started++
		}
		fmt.Printf("started %d, failed %d (%v)\n", started, failed, last)
		os.Stdout.Sync()
		bufio.NewReader(os.Stdin).ReadString('\n') // until process/terminate
	default:
		fmt.Println("unknown probe", args[0])
		return 2
	}
	return 0
}

// posixACLAllowOther is a system.posix_acl_access value (version 2) granting everyone rwx.
func posixACLAllowOther() []byte {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, 2)
	for _, e := range []struct{ tag, perm uint16 }{{0x01, 7}, {0x04, 7}, {0x20, 7}} { // USER_OBJ, GROUP_OBJ, OTHER
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, 0xffffffff)
	}
	return b
}

// stageProbeScript runs the probe with args from a sandboxed shell.
func stageProbeScript(args ...string) string {
	return stageProbeEnv + `=1 "$PROBE" ` + strings.Join(args, " ")
}

// TestSandboxEscapeStageKeyring (row 4): a server with a session keyring of its own, and a
// key in it the user may read and write. A sandboxed command given both ids tries to read
// and update the key and to add keys; on the host, the key still holds what it held and
// the keyring holds that key alone.
func TestSandboxEscapeStageKeyring(t *testing.T) {
	requireUserNamespaces(t)
	if _, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_USER_KEYRING, 0, 0, 0); errors.Is(err, unix.ENOSYS) {
		t.Skip("this kernel has no keyrings")
	}
	cmd := exec.Command(testBinary(t))
	cmd.Env = append(os.Environ(), stageKeyringEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	rd := bufio.NewReader(stdout)
	var ring, key int
	line, _ := rd.ReadString('\n')
	if _, err := fmt.Sscanf(line, "%d %d", &ring, &key); err != nil {
		t.Fatalf("keyring server said %q", line)
	}
	line, err = rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ws://") {
		t.Fatalf("server printed %q, %v", line, err)
	}
	ts := &testServer{url: strings.TrimSpace(line)}
	f := newSBFixture(t)
	for _, mode := range []sbMode{sbReadOnly, sbWorkspaceWrite} {
		r := f.runServer(t, ts, f.sandboxObject(mode, viaPipe, "restricted"), false,
			stageProbeScript("keyring", strconv.Itoa(key), strconv.Itoa(ring)))
		t.Logf("inside:\n%s", r.out)
		buf := make([]byte, 64)
		n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, key, buf, 0)
		if err != nil || string(buf[:n]) != "secret" {
			t.Errorf("the server's key holds %q (%v), want %q", buf[:max(n, 0)], err, "secret")
		}
		n, err = unix.KeyctlBuffer(unix.KEYCTL_READ, ring, buf, 0)
		if err != nil || n != 4 || int(binary.NativeEndian.Uint32(buf)) != key {
			t.Errorf("the server's session keyring lists %d bytes (%v), want its one key %d", n, err, key)
		}
		if !strings.Contains(r.out, "read: operation not permitted") {
			t.Errorf("the command read the server's key:\n%s", r.out)
		}
	}
}

// TestSandboxEscapeStageLandlockMetadata (row 5): under the Landlock mechanism and a
// read-only profile, chmod, utimensat, setxattr (a user attribute and a POSIX ACL) and
// removexattr on a host file all fail; on the host its mode, times and attributes are as
// they were.
func TestSandboxEscapeStageLandlockMetadata(t *testing.T) {
	if landlockABI() == 0 {
		t.Skip("Landlock is unavailable on this kernel")
	}
	ts := startTestServer(t, withSandboxer(t, "isolate", "landlock"))
	f := newSBFixture(t)
	victim := filepath.Join(f.outside, "victim")
	if err := os.WriteFile(victim, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	xattrs := unix.Setxattr(victim, "user.exec-server-keep", []byte("1"), 0) == nil
	before, err := os.Stat(victim)
	if err != nil {
		t.Fatal(err)
	}
	r := f.runServer(t, ts, f.sandboxObject(sbReadOnly, viaPipe, "restricted"), false, stageProbeScript("meta", victim))
	t.Logf("inside:\n%s", r.out)
	after, err := os.Stat(victim)
	if err != nil {
		t.Fatal(err)
	}
	if after.Mode() != before.Mode() {
		t.Errorf("mode %v, was %v: chmod went through", after.Mode(), before.Mode())
	}
	if !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("mtime %v, was %v: utimensat went through", after.ModTime(), before.ModTime())
	}
	if xattrs {
		if _, err := unix.Getxattr(victim, "user.exec-server-planted", nil); err == nil {
			t.Error("a user attribute was planted")
		}
		if _, err := unix.Getxattr(victim, "user.exec-server-keep", nil); err != nil {
			t.Errorf("the user attribute is gone: %v", err)
		}
	}
	if _, err := unix.Getxattr(victim, "system.posix_acl_access", nil); err == nil {
		t.Error("an ACL was set")
	}
}

// TestSandboxEscapeStageLandlockSetVersion (row 5): under read-only Landlock, a command sets
// the generation number of a host file it owns through FS_IOC_SETVERSION on a descriptor
// opened read-only (ext4 lets the owner, and moves the file's ctime). On the host the
// generation and the ctime must be unchanged.
func TestSandboxEscapeStageLandlockSetVersion(t *testing.T) {
	if landlockABI() == 0 {
		t.Skip("Landlock is unavailable on this kernel")
	}
	ts := startTestServer(t, withSandboxer(t, "isolate", "landlock"))
	f := newSBFixture(t)
	victim := filepath.Join(f.outside, "victim")
	if err := os.WriteFile(victim, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	generation := func() (int64, unix.Timespec) {
		t.Helper()
		fd, err := os.Open(victim)
		if err != nil {
			t.Fatal(err)
		}
		defer fd.Close()
		var gen int64
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd.Fd(), seccompFSIocGetVersion, uintptr(unsafe.Pointer(&gen))); errno != 0 {
			t.Skipf("this file system has no generation number to set (FS_IOC_GETVERSION: %v)", errno)
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(fd.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		return gen, st.Ctim
	}
	gen, ctime := generation()
	r := f.runServer(t, ts, f.sandboxObject(sbReadOnly, viaPipe, "restricted"), false, stageProbeScript("setversion", victim))
	t.Logf("inside:\n%s", r.out)
	if gen2, ctime2 := generation(); gen2 != gen || ctime2 != ctime {
		t.Errorf("generation %#x, ctime %v; was %#x, %v: FS_IOC_SETVERSION went through", gen2, ctime2, gen, ctime)
	}
}

// TestSandboxEscapeStageDaemon (row 6): in the server's pid namespace and under Landlock, a
// command starts a daemon (setsid, then a double fork) that appends to a file every few
// milliseconds and leaves its pid. Once process/terminate has killed the command, and once a
// command has exited by itself, the daemon is gone: its pidfd reports it, so the file can
// grow no more.
func TestSandboxEscapeStageDaemon(t *testing.T) {
	for _, c := range []struct{ name, pidns, mech string }{
		{"inherit", "inherit", "namespaces"},
		{"landlock", "isolate", "landlock"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.mech == "namespaces" {
				requireUserNamespaces(t)
			} else if landlockABI() == 0 {
				t.Skip("Landlock is unavailable on this kernel")
			}
			ts := startTestServer(t, withSandboxer(t, c.pidns, c.mech))
			for _, end := range []string{"terminate", "exit"} {
				t.Run(end, func(t *testing.T) {
					f := newSBFixture(t)
					mustMkdir(t, filepath.Join(f.ws, "d"))
					tc := ts.connect(t)
					id := nextSBID()
					script := stageDaemonScript
					if end == "terminate" {
						script += "exec sleep 1000"
					} else {
						script += "exit 0"
					}
					tc.mustCall("process/start", map[string]any{
						"processId": id, "argv": []string{"sh", "-c", script}, "cwd": fileURI(f.ws),
						"env": f.env(), "tty": false, "sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
					})
					waitOutput(tc, id, "stdout", "started")
					pid, pidfd, gone := daemonPidfd(t, f, end == "exit")
					if gone { // the command exited right after "started", the daemon with it
						waitClosed(tc, id)
						return
					}
					if end == "terminate" {
						tc.mustCall("process/terminate", map[string]any{"processId": id})
					}
					waitClosed(tc, id)
					awaitDaemonGone(t, pid, pidfd, end, filepath.Join(f.ws, "d", "grow"))
				})
			}
		})
	}
}

// stageDaemonScript starts, in d/, a daemon (setsid, then a double fork) that appends to
// d/grow every 5 ms, and says "started" once it has left its pid in d/daemon.pid. In d/, a
// directory the test makes: under Landlock the top level of a writable root takes no new
// entries (docs/sandbox.md §2).
const stageDaemonScript = `cd d; setsid sh -c 'sh -c "echo \$\$ > daemon.pid.tmp; mv daemon.pid.tmp daemon.pid; while :; do echo x >> grow; sleep 0.005; done" &' </dev/null >/dev/null 2>&1 & while [ ! -s daemon.pid ]; do sleep 0.01; done; echo started; `

// awaitDaemonGone waits, on its pidfd, for the daemon pid to end; procWait without that is
// the escape. Once it is gone, grow grows no more.
func awaitDaemonGone(t *testing.T, pid, pidfd int, after, grow string) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(procWait/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			unix.Kill(pid, unix.SIGKILL)
			t.Fatalf("the daemon %d outlived its command (%s) by %v: %v", pid, after, procWait, err)
		}
		break
	}
	size := fileSize(t, grow)
	if again := fileSize(t, grow); again != size {
		t.Errorf("grow went on growing: %d, then %d bytes", size, again)
	}
}

// TestSandboxEscapeStageDaemonServerKilled (row 6): a real server (the test binary) in the
// server's pid namespace is killed with SIGKILL while a sandboxed command's daemon runs: the
// daemon ends with it.
func TestSandboxEscapeStageDaemonServerKilled(t *testing.T) {
	requireUserNamespaces(t)
	cmd, ts := startServerProcess(t, "--linux-sandbox-pid-namespace", "inherit")
	tc := ts.connect(t)
	f := newSBFixture(t)
	mustMkdir(t, filepath.Join(f.ws, "d"))
	id := nextSBID()
	tc.mustCall("process/start", map[string]any{
		"processId": id, "argv": []string{"sh", "-c", stageDaemonScript + "exec sleep 1000"}, "cwd": fileURI(f.ws),
		"env": f.env(), "tty": false, "sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
	})
	waitOutput(tc, id, "stdout", "started")
	pid, pidfd, _ := daemonPidfd(t, f, false)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	awaitDaemonGone(t, pid, pidfd, "server killed", filepath.Join(f.ws, "d", "grow"))
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestSandboxEscapeStageForkBomb (row 7): with --linux-sandbox-max-processes 400, a command
// that starts 600 processes gets EAGAIN past the cap; on the host at most 400 of them run
// at once, and the server answers afterwards. The server runs as root here, which
// RLIMIT_NPROC does not bind: the pid namespace's pid_max does (Linux 6.14).
func TestSandboxEscapeStageForkBomb(t *testing.T) {
	requireUserNamespaces(t)
	const limit, attempts = 400, 600
	if os.Geteuid() == 0 && !kernelAtLeast(pidMaxPerNamespaceMajor, pidMaxPerNamespaceMinor) {
		t.Skip("as root the cap needs a pid_max per pid namespace (Linux 6.14)")
	}
	sbx, err := newSandboxer("isolate", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := sbx.setMaxProcesses(limit); err != nil {
		t.Fatal(err)
	}
	ts := startTestServer(t, func(s *server) { s.sandbox = sbx })
	f := newSBFixture(t)
	tc := ts.connect(t)
	id := nextSBID()
	arg := uniqueSleepArg()
	tc.mustCall("process/start", map[string]any{
		"processId": id, "argv": []string{"sh", "-c", stageProbeScript("fork", strconv.Itoa(attempts), arg)},
		"cwd": fileURI(f.ws), "env": f.env(), "tty": true,
		"sandbox": f.sandboxObject(sbReadOnly, viaPipe, "restricted"),
	})
	waitOutput(tc, id, "pty", "started ")
	running := countHostProcesses(t, "sleep", arg)
	t.Logf("%d of %d sleeps run", running, attempts)
	if running > limit || running == 0 {
		t.Errorf("%d sleeps run at once, want at most %d", running, limit)
	}
	tc.mustCall("process/terminate", map[string]any{"processId": id})
	waitClosed(tc, id)
	r := f.runServer(t, ts, f.sandboxObject(sbReadOnly, viaPipe, "restricted"), false, "echo alive")
	if r.exit != 0 || !strings.Contains(r.out, "alive") {
		t.Errorf("after the bomb: exit %d, %q", r.exit, r.out)
	}
}

// countHostProcesses counts the processes on the host whose argv is argv exactly.
func countHostProcesses(t *testing.T, argv ...string) int {
	t.Helper()
	want := strings.Join(argv, "\x00") + "\x00"
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && string(b) == want {
			n++
		}
	}
	return n
}

// TestSandboxEscapeStageUnixDatagram (row 10): a command without the network sends
// datagrams, by path, to a unix socket the test has bound on the host, from a socket, a raw
// one and a socketpair. Delivery is synchronous, so once the command has exited the socket's
// queue holds whatever reached it: nothing.
func TestSandboxEscapeStageUnixDatagram(t *testing.T) {
	requireUserNamespaces(t)
	for _, mech := range []string{"namespaces", "landlock"} {
		t.Run(mech, func(t *testing.T) {
			if mech == "landlock" && landlockABI() == 0 {
				t.Skip("Landlock is unavailable on this kernel")
			}
			ts := startTestServer(t, withSandboxer(t, "isolate", mech))
			f := newSBFixture(t)
			sock := filepath.Join(f.outside, "log.sock")
			conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			os.Chmod(sock, 0o777)
			r := f.runServer(t, ts, f.sandboxObject(sbReadOnly, viaPipe, "restricted"), false, stageProbeScript("dgram", sock))
			t.Logf("inside:\n%s", r.out)
			raw, err := conn.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			raw.Read(func(fd uintptr) bool {
				for {
					buf := make([]byte, 64)
					n, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
					if err != nil {
						return true
					}
					got = append(got, string(buf[:n]))
				}
			})
			if len(got) > 0 {
				b, _ := json.Marshal(got)
				t.Errorf("the host socket received %s", b)
			}
		})
	}
}

// TestSandboxEscapeStageForkBombUnprivileged (row 7): `exec-server sandbox` run as an
// unprivileged user, in the server's pid namespace, where RLIMIT_NPROC in the sandbox's own
// user namespace is the bound: a command starting 1500 processes gets at most the default
// 1024 tasks, counted on the host.
func TestSandboxEscapeStageForkBombUnprivileged(t *testing.T) {
	requireUserNamespaces(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the sandbox as another user")
	}
	const nobody, attempts = 65534, 1500
	dir := sbBaseDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "exec-server")
	if err := copyExecutable(testBinary(t), exe); err != nil {
		t.Fatal(err)
	}
	arg := uniqueSleepArg()
	cmd := exec.Command(exe)
	cmd.Dir = dir
	argv, _ := json.Marshal([]string{"sandbox", "--read-only", "--linux-sandbox-pid-namespace", "inherit", "--",
		exe, "fork", strconv.Itoa(attempts), arg})
	cmd.Env = []string{"PATH=/usr/bin:/bin", sbRunEnv + "=" + string(argv), stageProbeEnv + "=1", "GORACE=" + sbGORACE}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "started ") {
		t.Fatalf("the probe said %q, %v", line, err)
	}
	running := countHostProcesses(t, "sleep", arg)
	t.Logf("%s%d of %d sleeps run", line, running, attempts)
	if running > defaultSandboxMaxProcesses || running == 0 {
		t.Errorf("%d sleeps run at once, want at most %d", running, defaultSandboxMaxProcesses)
	}
}

// copyExecutable copies the executable src to dst, mode 0755.
func copyExecutable(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// daemonPidfd is the pid of the daemon stageDaemonScript started in f's workspace, and a
// pidfd of it, closed when the test ends. gone: no process has that pid any more, the stage
// having ended the daemon already, which only a test whose command exits at once may accept
// (mayBeGone); any other test fails there.
func daemonPidfd(t *testing.T, f *sbFixture, mayBeGone bool) (pid, pidfd int, gone bool) {
	t.Helper()
	pid = readPidFile(t, filepath.Join(f.ws, "d", "daemon.pid"))
	pidfd, err := unix.PidfdOpen(pid, 0)
	if mayBeGone && errors.Is(err, unix.ESRCH) {
		return pid, -1, true
	}
	if err != nil {
		t.Fatalf("pidfd of the daemon %d: %v", pid, err)
	}
	t.Cleanup(func() { unix.Close(pidfd) })
	return pid, pidfd, false
}
