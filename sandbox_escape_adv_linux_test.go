package main

// Second adversarial pass over the stage and the connect-back refusal (docs/sandbox.md §2,
// "Processes" and "Connect-back"): the command turns on its own supervisor. Every verdict is
// read on the host: the daemon's pid through a pidfd, the file an unsandboxed process writes.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// advSupervisedModes are the modes whose command runs below an anchor and a supervisor (no
// pid namespace of its own): the command's parent is the supervisor, of its user, and in its
// Landlock domain.
var advSupervisedModes = []struct{ name, pidNS, mech string }{
	{"namespaces-inherit", "inherit", "namespaces"},
	{"landlock", "isolate", "landlock"},
}

// advDaemonWait bounds the wait for a daemon to end once its command was terminated: the
// stage kills it within milliseconds.
const advDaemonWait = 10 * time.Second

// TestSandboxEscapeStageSupervisorStopped: the command stops its supervisor (SIGSTOP to its
// parent, a process of its own user, and of its own Landlock domain) before starting a
// daemon. Once process/terminate has killed the command, the daemon must be gone: a stopped
// supervisor never sees the anchor's death.
func TestSandboxEscapeStageSupervisorStopped(t *testing.T) {
	for _, m := range advSupervisedModes {
		for _, sig := range []string{"STOP", "TSTP"} {
			t.Run(m.name+"/"+sig, func(t *testing.T) {
				cbRequire(t, m.mech)
				ts := startTestServer(t, withSandboxer(t, m.pidNS, m.mech))
				f := newSBFixture(t)
				mustMkdir(t, filepath.Join(f.ws, "d"))
				tc := ts.connect(t)
				id := nextSBID()
				tc.mustCall("process/start", map[string]any{
					"processId": id, "argv": []string{"sh", "-c", stageDaemonScript + "while [ ! -e go ]; do sleep 0.01; done; kill -" + sig + " $PPID; exec sleep 1000"},
					"cwd": fileURI(f.ws), "env": f.env(), "tty": false,
					"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
				})
				waitOutput(tc, id, "stdout", "started")
				pid, pidfd, _ := daemonPidfd(t, f, false)
				// Once started is answered, the command stops its supervisor (it waits for d/go).
				if err := os.WriteFile(filepath.Join(f.ws, "d", "go"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				tc.call("process/terminate", map[string]any{"processId": id})
				waitEvent(tc, id, "process/exited")
				fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
				for {
					n, err := unix.Poll(fds, int(advDaemonWait/time.Millisecond))
					if errors.Is(err, unix.EINTR) {
						continue
					}
					if err != nil || n == 0 {
						unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
						t.Fatalf("the daemon %d outlived its terminated command by %v (supervisor stopped with SIG%s): %v", pid, advDaemonWait, sig, err)
					}
					break
				}
			})
		}
	}
}

// TestSandboxConnectBackSupervisorStopped: the command stops its supervisor, and leaves a
// daemon that dials the server again and again. Once process/terminate has ended the stage,
// the daemon must still be refused, or gone: its file must never appear on the host.
func TestSandboxConnectBackSupervisorStopped(t *testing.T) {
	for _, m := range advSupervisedModes {
		t.Run(m.name, func(t *testing.T) {
			cbRequire(t, m.mech)
			log := &cbLog{refused: make(chan struct{})}
			ts := startTestServer(t, withSandboxer(t, m.pidNS, m.mech), withLog(log))
			f := newSBFixture(t)
			target := filepath.Join(f.outside, "pwned")
			tc := ts.connect(t)
			// At most 300 tries, 50 ms apart: 15 s at least.
			id := cbStart(t, tc, f, f.sandboxObject(sbWorkspaceWrite, viaPipe, "enabled"),
				`while [ ! -e go ]; do sleep 0.01; done; kill -STOP $PPID; (setsid sh -c 'i=0; while [ $i -lt 300 ] && ! "$PROBE" "$URL" "$TARGET"; do i=$((i+1)); sleep 0.05; done' > /dev/null 2>&1 &); exec sleep 1000`,
				map[string]string{cbProbeEnv: "client", "URL": ts.url, "TARGET": target})
			if err := os.WriteFile(filepath.Join(f.ws, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			select {
			case <-log.refused:
			case <-time.After(30 * time.Second):
				t.Fatalf("no connection refused in 30 s\nserver log:\n%s", log)
			}
			tc.call("process/terminate", map[string]any{"processId": id})
			waitEvent(tc, id, "process/exited")
			deadline := time.Now().Add(5 * time.Second)
			tick := time.NewTicker(20 * time.Millisecond) // the host file has no event to await
			defer tick.Stop()
			for time.Now().Before(deadline) {
				if _, err := os.Stat(target); err == nil {
					kerr, _ := os.ReadFile(filepath.Join(f.ws, "kill.err"))
					t.Fatalf("the sandboxed daemon drove the server once its stage was gone: %s was written on the host (kill: %s)\nserver log:\n%s", target, kerr, log)
				}
				<-tick.C
			}
		})
	}
}

// TestSandboxConnectBackOtherServer: a network-enabled command of one server (B) dials
// another exec-server of the same user on the same host (A), which runs no sandbox of its
// own. A must refuse it as its own sandboxes' connections: an unsandboxed process it started
// would write anywhere.
func TestSandboxConnectBackOtherServer(t *testing.T) {
	for _, m := range cbMechanisms {
		t.Run(m.name, func(t *testing.T) {
			cbRequire(t, m.mech)
			log := &cbLog{refused: make(chan struct{})}
			victim := startTestServer(t, withSandboxer(t, m.pidNS, m.mech), withLog(log))
			ts := startTestServer(t, withSandboxer(t, m.pidNS, m.mech))
			f := newSBFixture(t)
			target := filepath.Join(f.outside, "pwned")
			tc := ts.connect(t)
			id := cbStart(t, tc, f, f.sandboxObject(sbWorkspaceWrite, viaPipe, "enabled"),
				`"$PROBE" "$URL" "$TARGET"`, map[string]string{cbProbeEnv: "client", "URL": victim.url, "TARGET": target})
			r := waitClosed(tc, id)
			if _, err := os.Stat(target); err == nil {
				t.Fatalf("a sandbox of another server drove this one: %s was written on the host\nvictim's log:\n%s", target, log)
			}
			if out := r.stdout() + r.stderr(); !strings.Contains(out, "refused:") {
				t.Errorf("the client says %q, want a refused connection", out)
			}
		})
	}
}

// TestSandboxConnectBackAfterTerminate: a daemon of a network-enabled command dials the
// server in a loop (cbProbeLoop), each connection carrying its whole request at once. When
// process/terminate kills the anchor, the server reaps it, and the supervisor, told by its
// death, kills what is left: a connection checked in between finds no registered stage above
// the daemon. It must still be refused: the file must never appear on the host.
func TestSandboxConnectBackAfterTerminate(t *testing.T) {
	for _, m := range advSupervisedModes {
		for round := range advTerminateRounds {
			t.Run(fmt.Sprintf("%s/%d", m.name, round), func(t *testing.T) {
				cbRequire(t, m.mech)
				log := &cbLog{refused: make(chan struct{})}
				ts := startTestServer(t, withSandboxer(t, m.pidNS, m.mech), withLog(log))
				f := newSBFixture(t)
				target := filepath.Join(f.outside, "pwned")
				tc := ts.connect(t)
				id := cbStart(t, tc, f, f.sandboxObject(sbWorkspaceWrite, viaPipe, "enabled"),
					`(setsid "$PROBE" "$URL" "$TARGET" > /dev/null 2>&1 &); exec sleep 1000`,
					map[string]string{cbProbeEnv: "loop", "URL": ts.url, "TARGET": target})
				select {
				case <-log.refused:
				case <-time.After(30 * time.Second):
					t.Fatalf("no connection refused in 30 s\nserver log:\n%s", log)
				}
				tc.call("process/terminate", map[string]any{"processId": id})
				waitClosed(tc, id)
				deadline := time.Now().Add(2 * time.Second)
				tick := time.NewTicker(20 * time.Millisecond) // the host file has no event to await
				defer tick.Stop()
				for time.Now().Before(deadline) {
					if _, err := os.Stat(target); err == nil {
						t.Fatalf("the sandboxed daemon drove the server as its stage ended: %s was written on the host", target)
					}
					<-tick.C
				}
			})
		}
	}
}

// advTerminateRounds is how many times TestSandboxConnectBackAfterTerminate races each mode.
const advTerminateRounds = 5

// TestSandboxConnectBackAddresses: the server listens on every address, IPv4 and IPv6 ([::]),
// and a network-enabled command dials it at each of the host's addresses it can name: ::1,
// 127.0.0.1 (a v4-mapped peer on that listener), 127.0.0.2, 0.0.0.0, [::], and every
// non-loopback address of the host's interfaces. Every one must be refused: the file the
// unsandboxed process would write must never appear on the host.
func TestSandboxConnectBackAddresses(t *testing.T) {
	for _, m := range cbMechanisms[:3] {
		t.Run(m.name, func(t *testing.T) {
			cbRequire(t, m.mech)
			log := &cbLog{refused: make(chan struct{})}
			ts := startTestServer(t, withSandboxer(t, m.pidNS, m.mech), withLog(log))
			srv := ts.srv
			ln, err := net.Listen("tcp", "[::]:0")
			if err != nil {
				t.Skipf("no dual-stack listener: %v", err)
			}
			ws := newWSServer(srv)
			done := make(chan struct{})
			go func() {
				defer close(done)
				ws.serve(ln)
			}()
			defer func() { ws.close(); <-done }()
			port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
			hosts := []string{"::1", "127.0.0.1", "127.0.0.2", "0.0.0.0", "::"}
			if addrs, err := net.InterfaceAddrs(); err == nil {
				for _, a := range addrs {
					if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
						hosts = append(hosts, n.IP.String())
					}
				}
			}
			f := newSBFixture(t)
			tc := ts.connect(t) // the sandboxes are this server's own
			for _, h := range hosts {
				target := filepath.Join(f.outside, "pwned-"+strings.ReplaceAll(h, ":", "_"))
				url := "ws://" + net.JoinHostPort(h, port)
				id := cbStart(t, tc, f, f.sandboxObject(sbWorkspaceWrite, viaPipe, "enabled"),
					`"$PROBE" "$URL" "$TARGET"`, map[string]string{cbProbeEnv: "client", "URL": url, "TARGET": target})
				r := waitClosed(tc, id)
				if _, err := os.Stat(target); err == nil {
					t.Errorf("%s: the sandboxed command drove the server: %s was written on the host", url, target)
				}
				t.Logf("%s: %s", url, strings.TrimSpace(r.stdout()+r.stderr()))
			}
		})
	}
}

// TestSandboxEscapeStagePrlimitSupervisor: the command lowers its supervisor's and anchor's
// open-file limit (prlimit on their pids: same user, and Landlock has no hook for it), so
// that neither can open /proc to find what to kill, then leaves a daemon and exits. The
// daemon must be gone once the command has exited.
func TestSandboxEscapeStagePrlimitSupervisor(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("no prlimit(1) on this host")
	}
	for _, m := range advSupervisedModes {
		t.Run(m.name, func(t *testing.T) {
			cbRequire(t, m.mech)
			ts := startTestServer(t, withSandboxer(t, m.pidNS, m.mech))
			f := newSBFixture(t)
			mustMkdir(t, filepath.Join(f.ws, "d"))
			tc := ts.connect(t)
			id := nextSBID()
			tc.mustCall("process/start", map[string]any{
				"processId": id, "argv": []string{"sh", "-c", `A=$(cut -d' ' -f4 /proc/$PPID/stat); prlimit --pid $PPID --nofile=0:0; prlimit --pid $A --nofile=0:0; ` + stageDaemonScript + "exit 0"},
				"cwd": fileURI(f.ws), "env": f.env(), "tty": false,
				"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
			})
			waitOutput(tc, id, "stdout", "started")
			pid, pidfd, gone := daemonPidfd(t, f, true) // the command exits at once
			r := waitClosed(tc, id)
			t.Logf("command: %s", r.stdout()+r.stderr())
			if !gone {
				awaitDaemonGone(t, pid, pidfd, "exit, after lowering its supervisor's limits", filepath.Join(f.ws, "d", "grow"))
			}
		})
	}
}
