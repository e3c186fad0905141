package main

// Tests of the bridge into a sandbox's network namespace (docs/network.md §4): a child in a
// user and network namespace of its own makes the bridge listener as the stage will, hands it
// over, takes the routed seccomp filter and connects. Every verdict is read on the host: what
// the host's test listener (standing for the proxy) received.

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nbProbeEnv makes the test binary the bridge probe: its value is the seccomp mode
// ("routed" or "network"), argv[1..] the host addresses it tries to reach directly. fd 3 is
// the unix socket to send the listener on.
const nbProbeEnv = "EXEC_SERVER_NBTEST"

func init() {
	if isSandboxStage() {
		return
	}
	if mode := os.Getenv(nbProbeEnv); mode == "command" {
		os.Exit(nbCommand(os.Args[1:]))
	} else if mode != "" && len(os.Args) >= 2 {
		os.Exit(nbProbe(mode, os.Args[1:]))
	}
}

// nbCommand is the command under a real namespace stage with a bridge: it sends
// "via-bridge" to $HTTP_PROXY, tries each direct address, then sends what it saw as
// "report:..." through the bridge again. The host judges by what arrives.
func nbCommand(direct []string) int {
	proxy := strings.TrimPrefix(os.Getenv("HTTP_PROXY"), "http://")
	send := func(msg string) error {
		c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.Write([]byte(msg))
		c.(*net.TCPConn).CloseWrite()
		_, err = io.ReadAll(c)
		return err
	}
	report := "report: proxy=" + proxy
	if err := send("via-bridge"); err != nil {
		report += " bridge=" + err.Error()
	}
	for _, addr := range direct {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			report += fmt.Sprintf(" | %s: %v", addr, err)
			continue
		}
		c.Write([]byte("direct"))
		c.Close()
		report += " | " + addr + ": connected"
	}
	send(report)
	return 0
}

// nbProbe runs in the new namespaces: lo up, the bridge listener made and sent, the filter,
// then one connection through the bridge and one direct attempt per address.
func nbProbe(mode string, direct []string) int {
	if err := loopbackUp(); err != nil {
		fmt.Println("lo:", err)
		return 2
	}
	f, port, err := bridgeListen()
	if err != nil {
		fmt.Println("listen:", err)
		return 2
	}
	if err := sendBridgeListeners(3, []*os.File{f}); err != nil {
		fmt.Println("send:", err)
		return 2
	}
	f.Close()
	unix.Close(3)
	seccomp := map[string]seccompMode{"routed": seccompProxyRouted, "network": seccompNetwork}[mode]
	if err := installSeccomp(seccomp); err != nil {
		fmt.Println("seccomp:", err)
		return 2
	}
	if c, err := net.Dial("tcp", bridgePortText(port)); err != nil {
		fmt.Println("bridge: dial:", err)
	} else {
		c.Write([]byte("via-bridge"))
		c.(*net.TCPConn).CloseWrite()
		reply, _ := io.ReadAll(c)
		c.Close()
		fmt.Printf("bridge: %s\n", reply)
	}
	for _, addr := range direct {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			fmt.Printf("direct %s: %v\n", addr, err)
			continue
		}
		c.Write([]byte("direct"))
		c.Close()
		fmt.Printf("direct %s: connected\n", addr)
	}
	for _, fam := range []int{unix.AF_PACKET, unix.AF_NETLINK, unix.AF_VSOCK} {
		fd, err := unix.Socket(fam, unix.SOCK_RAW, 0)
		if err == nil {
			unix.Close(fd)
		}
		fmt.Printf("socket(%d): %v\n", fam, err)
	}
	return 0
}

// nbHost is the host's test listener on every address: it records what each connection sent
// and answers "ok:" and that.
type nbHost struct {
	ln   net.Listener
	mu   sync.Mutex
	got  []string
	wg   sync.WaitGroup
	done chan struct{}
}

func newNBHost(t *testing.T) *nbHost {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	h := &nbHost{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				defer c.Close()
				b, _ := io.ReadAll(c)
				h.mu.Lock()
				h.got = append(h.got, string(b))
				h.mu.Unlock()
				c.Write(append([]byte("ok:"), b...))
			}()
		}
	}()
	return h
}

// stop ends the listener and returns what every connection sent.
func (h *nbHost) stop() []string {
	h.ln.Close()
	<-h.done
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got
}

// nbRun runs the probe under mode and returns its output and what the host received.
func nbRun(t *testing.T, mode string) (string, []string) {
	h := newNBHost(t)
	port := h.ln.Addr().(*net.TCPAddr).Port
	direct := []string{fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("[::1]:%d", port)}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
				direct = append(direct, fmt.Sprintf("%s:%d", ipn.IP, port))
			}
		}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	defer ours.Close()
	var out bytes.Buffer
	cmd := exec.Command(testBinary(t), direct...)
	cmd.Env = append(os.Environ(), nbProbeEnv+"="+mode, "GORACE="+sbGORACE)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.ExtraFiles = []*os.File{theirs}
	uid, gid := os.Getuid(), os.Getgid()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	lns, err := receiveBridgeListeners(ours)
	if err != nil {
		cmd.Wait()
		t.Fatalf("%v; probe: %s", err, out.String())
	}
	b, err := startNetBridge(lns[0], h.ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	werr := cmd.Wait()
	b.close()
	got := h.stop()
	if werr != nil {
		t.Fatalf("probe: %v: %s", werr, out.String())
	}
	return out.String(), got
}

// TestNetBridgeNamespace: under the routed filter the command reaches the host's listener
// through the bridge and only through it; under today's network filter it cannot even reach
// the bridge, which is why the routed mode exists.
func TestNetBridgeNamespace(t *testing.T) {
	requireUserNamespaces(t)
	t.Run("routed", func(t *testing.T) {
		out, got := nbRun(t, "routed")
		t.Logf("probe:\n%s", out)
		if len(got) != 1 || got[0] != "via-bridge" {
			t.Errorf("host received %q, want exactly [\"via-bridge\"]", got)
		}
		if !strings.Contains(out, "bridge: ok:via-bridge\n") {
			t.Errorf("the answer did not come back through the bridge")
		}
		if strings.Contains(out, "connected") {
			t.Errorf("a direct connection succeeded inside the namespace")
		}
		for _, fam := range []int{unix.AF_PACKET, unix.AF_NETLINK, unix.AF_VSOCK} {
			if !strings.Contains(out, fmt.Sprintf("socket(%d): operation not permitted", fam)) {
				t.Errorf("socket family %d not denied", fam)
			}
		}
	})
	t.Run("network filter", func(t *testing.T) {
		out, got := nbRun(t, "network")
		t.Logf("probe:\n%s", out)
		if len(got) != 0 {
			t.Errorf("host received %q under seccompNetwork, want nothing", got)
		}
	})
}

// TestNetBridgeStage: the same through the real namespace stage (confine with a bridge): the
// command, with a read-only file system and no network, finds $HTTP_PROXY rewritten to the
// listener in its namespace and reaches the host's listener through it, and only so.
func TestNetBridgeStage(t *testing.T) {
	requireUserNamespaces(t)
	sbx, err := newSandboxer("isolate", "namespaces")
	if err != nil {
		t.Fatal(err)
	}
	defer sbx.close()
	h := newNBHost(t)
	hostAddr := h.ln.Addr().(*net.TCPAddr)
	proxy := fmt.Sprintf("127.0.0.1:%d", hostAddr.Port)
	direct := []string{proxy, fmt.Sprintf("[::1]:%d", hostAddr.Port)}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
				direct = append(direct, fmt.Sprintf("%s:%d", ipn.IP, hostAddr.Port))
			}
		}
	}
	p, err := sandboxCommandProfile(true, false, nil, "/")
	if err != nil {
		t.Fatal(err)
	}
	bin := testBinary(t)
	spec := &launchSpec{path: bin, argv: append([]string{bin}, direct...), dir: "/",
		env:    []string{nbProbeEnv + "=command", "HTTP_PROXY=http://" + proxy, "GORACE=" + sbGORACE},
		bridge: []string{proxy}}
	if _, err := sbx.confine(spec, p); err != nil {
		t.Fatal(err)
	}
	child, exit, err := startChild(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range child.outs {
		go io.Copy(io.Discard, o.f)
	}
	exit.wait(child.proc.Pid) // a non-blocking pidfd: Wait alone would not wait
	ps, err := child.proc.Wait()
	exit.close()
	child.stage.exited()
	for _, o := range child.outs {
		o.f.Close()
	}
	got := h.stop()
	t.Logf("host received %q", got)
	if err != nil || ps.ExitCode() != 0 {
		t.Fatalf("command: %v %v", ps, err)
	}
	if len(got) != 2 || got[0] != "via-bridge" || !strings.HasPrefix(got[1], "report:") {
		t.Fatalf("host received %q, want via-bridge then the report", got)
	}
	if strings.Contains(got[1], "proxy="+proxy+" ") {
		t.Errorf("HTTP_PROXY was not rewritten to the namespace's listener: %s", got[1])
	}
	if strings.Contains(got[1], "connected") {
		t.Errorf("a direct connection succeeded: %s", got[1])
	}
}

// TestBridgeRewriteEnv: only the proxy variables naming the host proxy change, keeping
// their scheme, user information and path.
func TestBridgeRewriteEnv(t *testing.T) {
	env := []string{"HTTP_PROXY=http://127.0.0.1:3128", "ALL_PROXY=socks5h://127.0.0.1:3128/",
		"PIP_PROXY=127.0.0.1:3128", "https_proxy=http://u:p@127.0.0.1:3128/x?y",
		"OTHER=http://127.0.0.1:3128", "NO_PROXY=127.0.0.1:3128", "FTP_PROXY=http://127.0.0.1:31280", "PATH=/bin"}
	got := bridgeRewriteEnv(env, map[string]string{"127.0.0.1:3128": "127.0.0.1:40000"})
	want := []string{"HTTP_PROXY=http://127.0.0.1:40000", "ALL_PROXY=socks5h://127.0.0.1:40000/",
		"PIP_PROXY=127.0.0.1:40000", "https_proxy=http://u:p@127.0.0.1:40000/x?y",
		"OTHER=http://127.0.0.1:3128", "NO_PROXY=127.0.0.1:3128", "FTP_PROXY=http://127.0.0.1:31280", "PATH=/bin"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// TestBridgeRewriteEnvOnce: a namespace port that is the number of another host endpoint
// does not get rewritten again (seen: HTTP_PROXY's namespace port was the host's SOCKS5
// port, and HTTP_PROXY ended up naming the SOCKS5 bridge).
func TestBridgeRewriteEnvOnce(t *testing.T) {
	env := []string{"HTTP_PROXY=http://127.0.0.1:1000", "ALL_PROXY=socks5h://127.0.0.1:2000"}
	to := map[string]string{"127.0.0.1:1000": "127.0.0.1:2000", "127.0.0.1:2000": "127.0.0.1:3000"}
	got := bridgeRewriteEnv(env, to)
	want := []string{"HTTP_PROXY=http://127.0.0.1:2000", "ALL_PROXY=socks5h://127.0.0.1:3000"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// TestNetBridgeCloseEndsDial: a bridge whose target never answers (its accept queue is full,
// so the kernel drops the SYNs) still closes at once: the dial in progress ends with the
// bridge, instead of holding close, and so the process's exit, for the whole dial timeout.
func TestNetBridgeCloseEndsDial(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*unix.SockaddrInet4).Port
	target := fmt.Sprintf("127.0.0.1:%d", port)
	// Fill the accept queue (a backlog of 0 holds one): later SYNs are dropped.
	for range 2 {
		c, err := net.DialTimeout("tcp", target, time.Second)
		if err != nil {
			break
		}
		defer c.Close()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	b, err := startNetBridge(f, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", b.ln.Addr().String())
	if err != nil {
		b.close()
		t.Fatal(err)
	}
	defer c.Close()
	// Wait until the bridge's dial to the target is in the kernel, unanswered (SYN_SENT).
	synSent := fmt.Sprintf(":%04X 02 ", port)
	for {
		tcp, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(tcp, []byte(synSent)) {
			break
		}
		runtime.Gosched()
	}
	closed := make(chan struct{})
	go func() { b.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(netProxyDialTimeout / 2):
		t.Fatalf("close still waits on the dial to a target that never answers after %v", netProxyDialTimeout/2)
	}
}
