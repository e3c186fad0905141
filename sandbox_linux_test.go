package main

// The Linux sandbox, tried the way an attacker would: real processes, real files, the real
// kernel (docs/sandbox.md §2, §4, §9). Every escape row of the table runs a shell
// script inside the sandbox and then checks, from the host, that its target is unchanged.
//
//	TestSandboxEscapeTable           the table, through the server (process/start with the
//	                                 sandbox objects Codex sends: workspace-write and read-only,
//	                                 pipe and PTY, and the older SEED sandboxPolicy shape) and
//	                                 through `exec-server sandbox` (the test binary re-exec'd)
//	TestSandboxEscapeTableInheritPidNamespace   the same with --linux-sandbox-pid-namespace inherit
//	TestSandboxEscapeTableLandlock   the rows Landlock can express, with Landlock forced
//	TestSandboxNetworkEnabled        network:"enabled" reaches a host listener
//	TestSandboxPTY                   24×80, a denial inside a terminal, job control
//	TestSandboxTerminateKillsTheWholeTree, TestSandboxServerKilledKillsTheTree
//	TestSandboxSharedWorkspace       two servers' sandboxes on one workspace
//	TestSandboxType, TestSandboxMissingProgramOrCwd, TestSandboxFailsClosed,
//	TestSandboxMalformedObjects      what process/start answers
//
// The Landlock table skips where the kernel or build has no Landlock.
// Nothing here sleeps to wait for something that has an event; the only polls are for
// processes that are not our children (/proc), which send none.
//
// The fixtures live outside /tmp: Codex's workspace-write profile makes /tmp writable
// (slash_tmp), so a directory under /tmp is no "outside".

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The test binary plays two more parts, chosen by its environment before any test runs: the
// exec-server command line (run), and a network probe run inside the sandbox.
const (
	sbRunEnv   = "EXEC_SERVER_SBTEST_RUN"   // JSON argv for run()
	sbProbeEnv = "EXEC_SERVER_SBTEST_PROBE" // "1": argv[1:] is a probe (sbProbe)
)

func init() {
	if isSandboxStage() {
		return // TestMain runs the stage
	}
	if args := os.Getenv(sbRunEnv); args != "" {
		var argv []string
		if err := json.Unmarshal([]byte(args), &argv); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", sbRunEnv, err)
			os.Exit(2)
		}
		os.Unsetenv(sbRunEnv) // the stage and the command are not to play it again
		os.Exit(run(argv, os.Stdin, os.Stdout, os.Stderr))
	}
	if os.Getenv(sbProbeEnv) == "1" {
		os.Exit(sbProbe(os.Args[1:]))
	}
}

// ---------------------------------------------------------------------------------------
// The escape table

// escapeCase is one row: a script run in the workspace under the profile, what it may do
// in each mode, and what must hold on the host afterwards.
type escapeCase struct {
	name string
	// ws and ro are the outcome under workspace-write and read-only; nil: not run there.
	ws, ro *outcome
	// deny are the texts, any of which shows a denial, when not the mechanism's own
	// ("Read-only file system" with namespaces, "Permission denied" with Landlock).
	deny   []string
	setup  func(t *testing.T, f *sbFixture)
	script string // sh, in the workspace; the fixture's paths are in its environment
	// check looks at the host afterwards; ws: the profile was workspace-write.
	check    func(t *testing.T, f *sbFixture, ws bool)
	checkOut func(t *testing.T, out string) // looks at the output
	landlock bool                           // Landlock can express it (TestSandboxEscapeTableLandlock)
}

// outcome is what a row's script must show: allowed (exit 0) or denied (non-zero, with a
// denial's text), and more text its output must hold either way.
type outcome struct {
	allowed bool
	out     []string
}

func allowed(out ...string) *outcome { return &outcome{allowed: true, out: out} }
func denied(out ...string) *outcome  { return &outcome{out: out} }

// netDenial is what the seccomp filter answers a network call (docs/sandbox.md §2).
var netDenial = []string{"operation not permitted"}

var escapeCases = []escapeCase{
	{
		name: "root is readable", ws: allowed("root:"), ro: allowed("root:"), landlock: true,
		script: `head -n 1 /etc/passwd`,
	},
	{
		name: "/dev/null is writable", ws: allowed("devnull ok"), ro: allowed("devnull ok"), landlock: true,
		script: `echo x > /dev/null && echo devnull ok`,
	},
	{
		// Not under Landlock: there a writable root's own top level is read-only (the protected
		// names cannot be carved out of a grant on it; docs/sandbox.md §2), see the next row.
		name: "write inside the workspace", ws: allowed("hi"), ro: denied(),
		script: `echo hi > inside.txt && cat inside.txt`,
		check: func(t *testing.T, f *sbFixture, ws bool) {
			if ws {
				wantFile(t, filepath.Join(f.ws, "inside.txt"), "hi\n")
			} else {
				wantAbsent(t, filepath.Join(f.ws, "inside.txt"))
			}
		},
	},
	{
		name: "write inside an existing directory of the workspace", ws: allowed("hi"), ro: denied(), landlock: true,
		setup:  func(t *testing.T, f *sbFixture) { mustMkdir(t, filepath.Join(f.ws, "sub")) },
		script: `echo hi > sub/inside.txt && cat sub/inside.txt`,
		check: func(t *testing.T, f *sbFixture, ws bool) {
			if ws {
				wantFile(t, filepath.Join(f.ws, "sub", "inside.txt"), "hi\n")
			} else {
				wantAbsent(t, filepath.Join(f.ws, "sub", "inside.txt"))
			}
		},
	},
	{
		// Not under Landlock: the file is new at the top level of /tmp and $TMPDIR.
		name: "/tmp and $TMPDIR are writable in workspace-write", ws: allowed("tmp ok"), ro: denied(),
		script: `echo t > "$TMPDIR/t.txt" && echo t > "$SLASHTMP" && echo tmp ok`,
		check: func(t *testing.T, f *sbFixture, ws bool) {
			t.Cleanup(func() { os.Remove(f.slashTmp) })
			if ws {
				wantFile(t, filepath.Join(f.tmp, "t.txt"), "t\n")
				wantFile(t, f.slashTmp, "t\n")
			} else {
				wantAbsent(t, filepath.Join(f.tmp, "t.txt"))
				wantAbsent(t, f.slashTmp)
			}
		},
	},
	{
		name: "write to a sibling directory", ws: denied(), ro: denied(), landlock: true,
		script: `echo pwned > "$OUT/f"`,
		check:  func(t *testing.T, f *sbFixture, _ bool) { wantAbsent(t, filepath.Join(f.outside, "f")) },
	},
	{
		name: "write to $HOME", ws: denied(), ro: denied(), landlock: true,
		script: `echo pwned > "$HOMEPROBE"`,
		check:  func(t *testing.T, f *sbFixture, _ bool) { wantAbsent(t, f.homeProbe) },
	},
	{
		name: "`..` out of the workspace", ws: denied(), ro: denied(), landlock: true,
		script: `echo pwned > ../outside/f`,
		check:  func(t *testing.T, f *sbFixture, _ bool) { wantAbsent(t, filepath.Join(f.outside, "f")) },
	},
	{
		name: "symlink out of the workspace", ws: denied(), ro: denied(), landlock: true,
		setup:  func(t *testing.T, f *sbFixture) { mustSymlink(t, f.outside, filepath.Join(f.ws, "out")) },
		script: `echo pwned > out/f`,
		check: func(t *testing.T, f *sbFixture, _ bool) {
			wantAbsent(t, filepath.Join(f.outside, "f"))
			if fi, err := os.Lstat(filepath.Join(f.ws, "out")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the link ws/out is gone or changed: %v", err)
			}
		},
	},
	{
		name: "existing hard link is written in place", ws: allowed(), ro: denied(), landlock: true,
		setup: func(t *testing.T, f *sbFixture) {
			mustWrite(t, filepath.Join(f.outside, "f"), "old\n")
			if err := os.Link(filepath.Join(f.outside, "f"), filepath.Join(f.ws, "h")); err != nil {
				t.Fatal(err)
			}
		},
		script: `printf 'new\n' > h`,
		check: func(t *testing.T, f *sbFixture, ws bool) {
			outside, link := filepath.Join(f.outside, "f"), filepath.Join(f.ws, "h")
			if !ws {
				wantFile(t, outside, "old\n")
				return
			}
			wantFile(t, outside, "new\n")
			a, err1 := os.Stat(outside)
			b, err2 := os.Stat(link)
			if err1 != nil || err2 != nil || !os.SameFile(a, b) {
				t.Errorf("ws/h and outside/f are no longer one inode (%v, %v): the write replaced the link", err1, err2)
			}
		},
	},
	{
		name: "hard link to an outside file cannot be made", ws: denied(), ro: denied(), landlock: true,
		deny:   []string{"Invalid cross-device link", "Read-only file system", "Permission denied"},
		setup:  func(t *testing.T, f *sbFixture) { mustWrite(t, filepath.Join(f.outside, "f"), "old\n") },
		script: `ln "$OUT/f" h && printf 'new\n' > h`,
		check: func(t *testing.T, f *sbFixture, _ bool) {
			wantFile(t, filepath.Join(f.outside, "f"), "old\n")
			wantAbsent(t, filepath.Join(f.ws, "h"))
		},
	},
	{
		// Whatever the server inherited without close-on-exec (from Codex, say) reaches a
		// child unless the stage stops it; a directory's descriptor is a way around the view.
		name: "descriptor the server inherited", ws: denied(), ro: denied(), landlock: true,
		deny: []string{"Directory nonexistent", "No such file or directory", "Permission denied"},
		setup: func(t *testing.T, f *sbFixture) {
			fd, err := syscall.Open(f.outside, syscall.O_RDONLY|syscall.O_DIRECTORY, 0) // no O_CLOEXEC
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Close(fd) })
			f.leakFD = fd
		},
		script: `echo pwned > "/proc/self/fd/$LEAKFD/f"`,
		check:  func(t *testing.T, f *sbFixture, _ bool) { wantAbsent(t, filepath.Join(f.outside, "f")) },
	},
	protectedRow(".git/config"),
	protectedRow(".codex/config.toml"),
	protectedRow(".aws/config"),
	{
		name: "existing .git cannot be moved away", ws: denied(), ro: denied(),
		deny: []string{"Device or resource busy", "Read-only file system"},
		setup: func(t *testing.T, f *sbFixture) {
			mustMkdir(t, filepath.Join(f.ws, ".git"))
			mustWrite(t, filepath.Join(f.ws, ".git", "config"), "orig\n")
		},
		script: `mv .git gitold && mkdir .git && echo pwned > .git/config`,
		check: func(t *testing.T, f *sbFixture, _ bool) {
			wantFile(t, filepath.Join(f.ws, ".git", "config"), "orig\n")
			wantAbsent(t, filepath.Join(f.ws, "gitold"))
		},
	},
	{
		name: "missing .git cannot be made (git init), and nothing is left behind", ws: denied(), ro: denied(),
		deny:   []string{"Read-only file system", "File exists"},
		script: gitInitScript(),
		check: func(t *testing.T, f *sbFixture, _ bool) {
			for _, name := range protectedNames {
				wantAbsent(t, filepath.Join(f.ws, name))
			}
		},
	},
	{
		name: "missing .codex cannot be made, and nothing is left behind", ws: denied(), ro: denied(),
		deny:   []string{"File exists", "Read-only file system"},
		script: `mkdir .codex`,
		check: func(t *testing.T, f *sbFixture, _ bool) {
			for _, name := range protectedNames {
				wantAbsent(t, filepath.Join(f.ws, name))
			}
		},
	},
	{
		name: "missing .agents cannot be made through mkdir -p", ws: denied(), ro: denied(),
		script: `mkdir -p .agents/x`,
		check:  func(t *testing.T, f *sbFixture, _ bool) { wantAbsent(t, filepath.Join(f.ws, ".agents")) },
	},
	{
		name: ".codex symlinked to a decoy in the workspace", ws: denied(), ro: denied(),
		deny:   linkDenial,
		setup:  decoyCodexLink,
		script: `echo pwned > .codex/config.toml`,
		check:  wantDecoyCodexLink,
	},
	{
		// The link lies in a writable directory: renamed away, it would leave room for a
		// real .codex (upstream calls this a symlink replacement attack).
		name: ".codex symlink cannot be replaced", ws: denied(), ro: denied(),
		deny:   linkDenial,
		setup:  decoyCodexLink,
		script: `mv .codex moved || rm .codex || exit; mkdir .codex && echo pwned > .codex/config.toml`,
		check: func(t *testing.T, f *sbFixture, ws bool) {
			wantDecoyCodexLink(t, f, ws)
			wantAbsent(t, filepath.Join(f.ws, "moved"))
		},
	},
	{
		name: "dangling .agents symlink cannot be followed", ws: denied(), ro: denied(),
		deny: linkDenial,
		setup: func(t *testing.T, f *sbFixture) {
			mustSymlink(t, "later", filepath.Join(f.ws, ".agents"))
		},
		script: `mkdir -p later; echo pwned > .agents/x`,
		check: func(t *testing.T, f *sbFixture, _ bool) {
			wantAbsent(t, filepath.Join(f.ws, "later", "x"))
			if target, err := os.Readlink(filepath.Join(f.ws, ".agents")); err != nil || target != "later" {
				t.Errorf("ws/.agents changed: %q, %v", target, err)
			}
		},
	},
	{
		// The gitdir target lies in a writable root (the fixture's base is one here), so
		// only its protection stops the write.
		name: ".git file's gitdir target is protected", ws: denied("writable ok"), ro: denied(),
		setup: func(t *testing.T, f *sbFixture) {
			mustMkdir(t, filepath.Join(f.base, "realgit"))
			mustWrite(t, filepath.Join(f.base, "realgit", "config"), "orig\n")
			mustWrite(t, filepath.Join(f.ws, ".git"), "gitdir: ../realgit\n")
			f.roots = append(f.roots, f.base)
		},
		script: `echo pwned > "$BASE/realgit/config"; rc=$?; echo ok > "$BASE/w.txt" && echo writable ok; exit $rc`,
		check: func(t *testing.T, f *sbFixture, ws bool) {
			wantFile(t, filepath.Join(f.base, "realgit", "config"), "orig\n")
			wantFile(t, filepath.Join(f.ws, ".git"), "gitdir: ../realgit\n")
			if ws {
				wantFile(t, filepath.Join(f.base, "w.txt"), "ok\n")
			}
		},
	},
	{
		// A user namespace of its own gives the command every capability over a copy of
		// the view; the kernel locks the copied mounts (MNT_LOCKED, MNT_LOCK_READONLY).
		name: "nested namespaces cannot undo the view", ws: denied(), ro: denied(), landlock: true,
		deny: []string{"Read-only file system", "Permission denied", "Operation not permitted"},
		setup: func(t *testing.T, f *sbFixture) {
			mustMkdir(t, filepath.Join(f.ws, ".git"))
			mustWrite(t, filepath.Join(f.ws, ".git", "config"), "orig\n")
		},
		script: `U=; command -v unshare >/dev/null && U="unshare -Um"
$U sh -c 'umount -l .git; umount -l /; mount -o remount,rw /; mount -o remount,rw,bind "$PWD/.git"
echo pwned > .git/config && echo pwned > "$OUT/f"'`,
		check: func(t *testing.T, f *sbFixture, _ bool) {
			wantFile(t, filepath.Join(f.ws, ".git", "config"), "orig\n")
			wantAbsent(t, filepath.Join(f.outside, "f"))
		},
	},
	{
		// The stage is pid 1 here, and the Go runtime's threads other than the one that
		// forked the command keep the capabilities the user namespace gave it: code written
		// into its memory could remount the view read-write. (With inherit or Landlock, pid 1
		// is the host's init.)
		name: "the stage's memory cannot be opened for writing", ws: denied(), ro: denied(), landlock: true,
		deny:   []string{"Permission denied", "Read-only file system"},
		script: `exec 3<>/proc/1/mem && echo opened`,
	},
	{
		// The server runs as the command's user: in a pid namespace of its own the command
		// cannot see it, with inherit or Landlock a Landlock signal scope keeps it out.
		name: "signal the server", ws: denied(), ro: denied(), landlock: true,
		deny:   []string{"No such process", "Operation not permitted"},
		script: `kill -0 "$SERVERPID" && echo reached`,
	},
	{
		name: "minimal /dev", ws: allowed("dev ok"), ro: allowed("dev ok"),
		script: `for n in null zero full random urandom tty; do test -c /dev/$n || echo "missing /dev/$n"; done
test -d /dev/pts || echo "missing /dev/pts"
echo shm > /dev/shm/probe && test "$(cat /dev/shm/probe)" = shm && head -c 4 /dev/urandom | wc -c | grep -q 4 && echo dev ok`,
	},
	{
		name: "no_new_privs, no capabilities", ws: allowed(), ro: allowed(), landlock: true,
		script:   `grep -E '^(NoNewPrivs|CapPrm|CapEff|CapBnd|CapAmb):' /proc/self/status`,
		checkOut: wantNoPrivileges,
	},
	{
		name: "seccomp filter in force (Seccomp: 2)", ws: allowed("Seccomp:\t2"), ro: allowed("Seccomp:\t2"), landlock: true,
		script: `grep '^Seccomp:' /proc/self/status`,
	},
	{
		name: "TCP connect to a host listener", ws: denied(), ro: denied(), deny: netDenial, landlock: true,
		setup:  func(t *testing.T, f *sbFixture) { f.listenTCP(t) },
		script: `EXEC_SERVER_SBTEST_PROBE=1 "$PROBE" tcp "$TCPADDR"`,
		check:  func(t *testing.T, f *sbFixture, _ bool) { f.wantNoTCP(t) },
	},
	{
		name: "UDP datagram to a host socket", ws: denied(), ro: denied(), deny: netDenial, landlock: true,
		setup:  func(t *testing.T, f *sbFixture) { f.listenUDP(t) },
		script: `EXEC_SERVER_SBTEST_PROBE=1 "$PROBE" udp "$UDPADDR"`,
		check:  func(t *testing.T, f *sbFixture, _ bool) { f.wantNoUDP(t) },
	},
	{
		name: "bash /dev/tcp to a host listener", ws: denied(), ro: denied(), deny: netDenial, landlock: true,
		setup:  func(t *testing.T, f *sbFixture) { f.listenTCP(t) },
		script: `bash -c 'echo pwned > "/dev/tcp/${TCPADDR%:*}/${TCPADDR##*:}"'`,
		check:  func(t *testing.T, f *sbFixture, _ bool) { f.wantNoTCP(t) },
	},
	{
		// A network namespace does not isolate sockets bound to a path: seccomp's connect
		// rule is what stops this one (docs/sandbox.md §2).
		name: "connect to a host unix socket", ws: denied(), ro: denied(), deny: netDenial, landlock: true,
		setup:  func(t *testing.T, f *sbFixture) { f.listenUnix(t) },
		script: `EXEC_SERVER_SBTEST_PROBE=1 "$PROBE" unix "$UNIXADDR"`,
		check:  func(t *testing.T, f *sbFixture, _ bool) { f.wantNoUnix(t) },
	},
	{
		// Typed into the caller's terminal (`exec-server sandbox` leaves the command on it),
		// input would run in the caller's shell, unconfined, once the sandbox is gone.
		name: "TIOCSTI cannot push input into the terminal", ws: denied(), ro: denied(), deny: netDenial, landlock: true,
		script: `EXEC_SERVER_SBTEST_PROBE=1 "$PROBE" tiocsti`,
	},
	{
		name: "socketpair(AF_UNIX) works", ws: allowed("socketpair ok"), ro: allowed("socketpair ok"), landlock: true,
		script: `EXEC_SERVER_SBTEST_PROBE=1 "$PROBE" socketpair`,
	},
}

// protectedRow: an existing protected name's file cannot be written, while its sibling in
// the workspace can (workspace-write).
func protectedRow(rel string) escapeCase {
	return escapeCase{
		name: "existing " + rel + " is read-only", ws: denied("sibling ok"), ro: denied(),
		setup: func(t *testing.T, f *sbFixture) {
			mustMkdir(t, filepath.Join(f.ws, filepath.Dir(rel)))
			mustWrite(t, filepath.Join(f.ws, rel), "orig\n")
		},
		script: fmt.Sprintf(`echo pwned > %s; rc=$?; echo ok > ok.txt && echo sibling ok; exit $rc`, rel),
		check: func(t *testing.T, f *sbFixture, ws bool) {
			wantFile(t, filepath.Join(f.ws, rel), "orig\n")
			if ws {
				wantFile(t, filepath.Join(f.ws, "ok.txt"), "ok\n")
			} else {
				wantAbsent(t, filepath.Join(f.ws, "ok.txt"))
			}
		},
	}
}

// linkDenial are the ways a write through, or a move of, a protected symlink is refused:
// the link is covered by an empty read-only file (ENOTDIR through it, EBUSY to move it),
// its target is read-only.
var linkDenial = []string{"Not a directory", "Directory nonexistent", "Device or resource busy", "Read-only file system"}

// decoyCodexLink makes ws/.codex a symlink to ws/decoy.
func decoyCodexLink(t *testing.T, f *sbFixture) {
	mustMkdir(t, filepath.Join(f.ws, "decoy"))
	mustSymlink(t, "decoy", filepath.Join(f.ws, ".codex"))
}

// wantDecoyCodexLink checks that ws/.codex is still the link to an untouched decoy.
func wantDecoyCodexLink(t *testing.T, f *sbFixture, _ bool) {
	t.Helper()
	if target, err := os.Readlink(filepath.Join(f.ws, ".codex")); err != nil || target != "decoy" {
		t.Errorf("ws/.codex is no longer the link to decoy: %q, %v", target, err)
	}
	wantAbsent(t, filepath.Join(f.ws, "decoy", "config.toml"))
}

// gitInitScript makes a repository where the workspace has none: git init, or a bare mkdir
// where git is not installed.
func gitInitScript() string {
	if _, err := exec.LookPath("git"); err == nil {
		return `git init -q .`
	}
	return `mkdir .git`
}

// sbMode is the profile a driver sends.
type sbMode int

const (
	sbWorkspaceWrite sbMode = iota
	sbReadOnly
)

// sbVia is how a driver runs a script.
type sbVia int

const (
	viaPipe sbVia = iota // process/start, Codex's sandbox object
	viaPTY               // the same with tty:true
	viaSeed              // process/start, the older {"sandboxPolicy":…} shape
	viaCLI               // `exec-server sandbox`, the test binary re-exec'd
)

type sbDriver struct {
	name string
	mode sbMode
	via  sbVia
}

var (
	allDrivers = []sbDriver{
		{"workspace-write/pipe", sbWorkspaceWrite, viaPipe},
		{"workspace-write/pty", sbWorkspaceWrite, viaPTY},
		{"workspace-write/seed", sbWorkspaceWrite, viaSeed},
		{"workspace-write/cli", sbWorkspaceWrite, viaCLI},
		{"read-only/pipe", sbReadOnly, viaPipe},
		{"read-only/pty", sbReadOnly, viaPTY},
		{"read-only/seed", sbReadOnly, viaSeed},
		{"read-only/cli", sbReadOnly, viaCLI},
	}
	pipeDrivers = []sbDriver{
		{"workspace-write/pipe", sbWorkspaceWrite, viaPipe},
		{"read-only/pipe", sbReadOnly, viaPipe},
	}
)

func TestSandboxEscapeTable(t *testing.T) {
	requireUserNamespaces(t)
	runEscapeTable(t, startTestServer(t), mechanismNamespaces, allDrivers)
}

func TestSandboxEscapeTableInheritPidNamespace(t *testing.T) {
	requireUserNamespaces(t)
	runEscapeTable(t, startTestServer(t, withSandboxer(t, "inherit", "")), mechanismNamespaces, pipeDrivers)
}

func TestSandboxEscapeTableLandlock(t *testing.T) {
	if landlockABI() == 0 {
		t.Skip("Landlock unavailable in this kernel/build")
	}
	runEscapeTable(t, startTestServer(t, withSandboxer(t, "isolate", "landlock")), mechanismLandlock, pipeDrivers)
}

// runEscapeTable runs every row through every driver against server ts, whose sandboxer
// uses mech (the CLI drivers force it too).
func runEscapeTable(t *testing.T, ts *testServer, mech sandboxMechanism, drivers []sbDriver) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			for _, c := range escapeCases {
				want := c.ws
				if d.mode == sbReadOnly {
					want = c.ro
				}
				if want == nil || mech == mechanismLandlock && !c.landlock {
					continue
				}
				t.Run(c.name, func(t *testing.T) {
					f := newSBFixture(t)
					if c.setup != nil {
						c.setup(t, f)
					}
					var r sbRun
					if d.via == viaCLI {
						r = f.runCLI(t, d.mode, mech, c.script)
					} else {
						r = f.runServer(t, ts, f.sandboxObject(d.mode, d.via, "restricted"), d.via == viaPTY, c.script)
						if r.sandboxType != "linuxSeccomp" {
							t.Errorf("sandboxType %q, want linuxSeccomp", r.sandboxType)
						}
					}
					deny := c.deny
					if deny == nil {
						deny = []string{map[sandboxMechanism]string{mechanismNamespaces: "Read-only file system", mechanismLandlock: "Permission denied"}[mech]}
					}
					want.verify(t, r, deny)
					// The denial heuristic (docs/sandbox.md §4) must call a denial that shows
					// one of its words a denial.
					if d.via != viaCLI && r.exit != 0 && sandboxDenied("linuxSeccomp", r.exit, []byte(r.out)) != r.sandboxDenied {
						t.Errorf("process/exited: sandboxDenied %v for exit %d and output %q", r.sandboxDenied, r.exit, r.out)
					}
					if c.checkOut != nil {
						c.checkOut(t, r.out)
					}
					if c.check != nil {
						c.check(t, f, d.mode == sbWorkspaceWrite)
					}
				})
			}
		})
	}
}

// verify checks a run's exit status and output against the outcome.
func (o *outcome) verify(t *testing.T, r sbRun, deny []string) {
	t.Helper()
	lower := strings.ToLower(r.out)
	switch {
	case o.allowed && r.exit != 0:
		t.Errorf("exit %d, want 0 (allowed); output:\n%s", r.exit, r.out)
	case !o.allowed && r.exit == 0:
		t.Errorf("exit 0: the sandbox allowed it; output:\n%s", r.out)
	case !o.allowed && !containsAny(lower, deny):
		t.Errorf("exit %d without a denial (%q); output:\n%s", r.exit, deny, r.out)
	}
	for _, s := range o.out {
		if !strings.Contains(r.out, s) {
			t.Errorf("output lacks %q:\n%s", s, r.out)
		}
	}
}

// wantNoPrivileges checks the status lines of a process in the sandbox: no new privileges,
// and no capability in any set.
func wantNoPrivileges(t *testing.T, out string) {
	t.Helper()
	want := map[string]string{"NoNewPrivs": "1", "CapPrm": "0000000000000000", "CapEff": "0000000000000000", "CapBnd": "0000000000000000", "CapAmb": "0000000000000000"}
	got := map[string]string{}
	for _, line := range strings.Split(strings.ReplaceAll(out, "\r", ""), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
}

// ---------------------------------------------------------------------------------------
// Network enabled, PTY, process trees

func TestSandboxNetworkEnabled(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	const script = `EXEC_SERVER_SBTEST_PROBE=1 "$PROBE" tcp "$TCPADDR"`
	for _, via := range []sbVia{viaPipe, viaPTY, viaCLI} {
		t.Run(map[sbVia]string{viaPipe: "pipe", viaPTY: "pty", viaCLI: "cli"}[via], func(t *testing.T) {
			f := newSBFixture(t)
			f.listenTCP(t)
			var r sbRun
			if via == viaCLI {
				r = f.runCLI(t, sbWorkspaceWrite, mechanismNamespaces, script, "--network")
			} else {
				r = f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, via, "enabled"), via == viaPTY, script)
			}
			if r.exit != 0 || !strings.Contains(r.out, "connected") {
				t.Fatalf("exit %d, output %q: want a connection", r.exit, r.out)
			}
			f.wantTCP(t, "hello\n")
		})
	}
}

// TestSandboxStageOutOfReach: with the network on, seccomp allows ptrace, and the command is
// the stage's child, of the same user: neither ptrace nor /proc/1/mem may reach the stage,
// pid 1, whose other threads hold capabilities over the view.
func TestSandboxStageOutOfReach(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	for _, network := range []string{"restricted", "enabled"} {
		t.Run(network, func(t *testing.T) {
			f := newSBFixture(t)
			r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, network), false,
				`EXEC_SERVER_SBTEST_PROBE=1 "$PROBE" ptrace 1; exec 3<>/proc/1/mem && echo mem opened`)
			if strings.Contains(r.out, "attached") || strings.Contains(r.out, "mem opened") || r.exit == 0 {
				t.Errorf("exit %d: the command reached the stage:\n%s", r.exit, r.out)
			}
		})
	}
}

func TestSandboxPTY(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	t.Run("stty size is 24 80", func(t *testing.T) {
		f := newSBFixture(t)
		r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPTY, "restricted"), true, `stty size`)
		if r.exit != 0 || r.out != "24 80\r\n" {
			t.Errorf("exit %d, output %q, want 24 80", r.exit, r.out)
		}
	})
	t.Run("denied write in a terminal", func(t *testing.T) {
		f := newSBFixture(t)
		r := f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPTY, "restricted"), true, `echo pwned > "$OUT/f"`)
		if r.exit == 0 || !strings.Contains(r.out, "Read-only file system") {
			t.Errorf("exit %d, output %q: want a Read-only file system denial", r.exit, r.out)
		}
		wantAbsent(t, filepath.Join(f.outside, "f"))
		if !r.sandboxDenied {
			t.Error("process/exited: sandboxDenied false for a denied write")
		}
	})
	t.Run("job control in an interactive shell", func(t *testing.T) {
		f := newSBFixture(t)
		tc := ts.connect(t)
		id := nextSBID()
		shell := []string{"bash", "--norc", "--noprofile", "-i"}
		if _, err := exec.LookPath("bash"); err != nil {
			shell = []string{"sh", "-i"}
		}
		env := f.env()
		env["PS1"] = "sbx$ "
		tc.mustCall("process/start", map[string]any{
			"processId": id, "argv": shell, "cwd": fileURI(f.ws), "env": env, "tty": true,
			"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPTY, "restricted"),
		})
		term := &ptySession{tc: tc, id: id}
		term.expect(t, "sbx$ ")
		term.send(t, "EXEC_SERVER_SBTEST_PROBE=1 \"$PROBE\" fgwait &\n")
		term.expect(t, "sbx$ ")
		term.send(t, "jobs\n")
		term.expect(t, "fgwait")
		term.send(t, "fg\n")
		// The shell names the job before it hands it the terminal: the job itself says
		// when it has it, and only then does ^C reach it.
		term.expect(t, "in the foreground")
		term.send(t, "\x03")
		term.expect(t, "sbx$ ")
		term.send(t, "echo fg=$?\n")
		term.expect(t, "fg=130")
		term.send(t, "sleep 101 &\n")
		term.expect(t, "sbx$ ")
		term.send(t, "kill %1; wait %1; echo killed=$?\n")
		term.expect(t, "killed=143")
		term.send(t, "exit\n")
		r := waitClosed(tc, id)
		if r.exitCode != 0 {
			t.Errorf("exit %d", r.exitCode)
		}
		if out := r.pty(); strings.Contains(out, "no job control") || strings.Contains(out, "cannot set terminal process group") {
			t.Errorf("the shell found no job control:\n%s", out)
		}
	})
}

func TestSandboxTerminateKillsTheWholeTree(t *testing.T) {
	requireUserNamespaces(t)
	for _, pidns := range []string{"isolate", "inherit"} {
		ts := startTestServer(t, withSandboxer(t, pidns, ""))
		for _, tty := range []bool{false, true} {
			t.Run(fmt.Sprintf("pidns=%s tty=%v", pidns, tty), func(t *testing.T) {
				f := newSBFixture(t)
				tc := ts.connect(t)
				id := nextSBID()
				arg := uniqueSleepArg()
				tc.mustCall("process/start", map[string]any{
					"processId": id, "argv": []string{"sh", "-c", "sleep " + arg + " & echo $! > grandchild.pid; echo started; wait"},
					"cwd": fileURI(f.ws), "env": f.env(), "tty": tty,
					"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
				})
				waitOutput(tc, id, map[bool]string{false: "stdout", true: "pty"}[tty], "started")
				host := waitHostPid(t, "sleep", arg)
				inner := readPidFile(t, filepath.Join(f.ws, "grandchild.pid"))
				if nspid := hostNSpid(t, host); nspid[len(nspid)-1] != inner {
					t.Errorf("the grandchild is %d inside, but its NSpid is %v", inner, nspid)
				} else if (len(nspid) > 1) != (pidns == "isolate") {
					t.Errorf("pidns=%s: NSpid %v", pidns, nspid)
				}
				if res := tc.mustCall("process/terminate", map[string]any{"processId": id}); string(res) != `{"running":true}` {
					t.Errorf("terminate: %s", res)
				}
				waitClosed(tc, id)
				waitPidGone(t, host)
				wantAbsent(t, filepath.Join(f.ws, ".git")) // the synthetic mount points went with it
			})
		}
	}
}

// TestSandboxServerKilledKillsTheTree kills a real server (the test binary as exec-server)
// with SIGKILL: every sandboxed process it started, grandchildren included, dies with it.
// The mount points it made for missing protected names outlive it, and go with the next
// sandbox on the same workspace.
func TestSandboxServerKilledKillsTheTree(t *testing.T) {
	requireUserNamespaces(t)
	cmd := exec.Command(testBinary(t))
	cmd.Env = append(os.Environ(), sbRunEnv+`=["--listen","ws://127.0.0.1:0"]`, "GORACE="+sbGORACE)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ws://") {
		t.Fatalf("server printed %q, %v", line, err)
	}
	tc := (&testServer{url: strings.TrimSpace(line)}).connect(t)
	var pids []int
	var fixtures []*sbFixture
	for _, tty := range []bool{false, true} {
		f := newSBFixture(t)
		fixtures = append(fixtures, f)
		id := nextSBID()
		child, grandchild := uniqueSleepArg(), uniqueSleepArg()
		tc.mustCall("process/start", map[string]any{
			"processId": id, "argv": []string{"sh", "-c", "sleep " + grandchild + " & echo started; exec sleep " + child},
			"cwd": fileURI(f.ws), "env": f.env(), "tty": tty,
			"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
		})
		waitOutput(tc, id, map[bool]string{false: "stdout", true: "pty"}[tty], "started")
		pids = append(pids, waitHostPid(t, "sleep", child), waitHostPid(t, "sleep", grandchild))
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	for _, pid := range pids {
		waitPidGone(t, pid)
	}
	ts := startTestServer(t)
	for _, f := range fixtures {
		f.runServer(t, ts, f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), false, "true")
		for _, name := range protectedNames {
			// Only the fixtures' own: other processes on the host may use /tmp's.
			wantAbsent(t, filepath.Join(f.ws, name))
		}
	}
}

// TestSandboxSharedWorkspace runs two servers (two sandboxers, as two exec-server processes
// would be) on one workspace without .codex. The first to end must not take away the
// mount point the other's protection stands on: removing a mount point detaches its
// mounts in every namespace. The last one out removes it.
func TestSandboxSharedWorkspace(t *testing.T) {
	requireUserNamespaces(t)
	a := startTestServer(t, withSandboxer(t, "isolate", "")).connect(t)
	b := startTestServer(t, withSandboxer(t, "isolate", "")).connect(t)
	f := newSBFixture(t)
	start := func(tc *testClient, id, script string) {
		tc.mustCall("process/start", map[string]any{
			"processId": id, "argv": []string{"sh", "-c", script}, "cwd": fileURI(f.ws), "env": f.env(),
			"tty": false, "pipeStdin": true, "sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
		})
		waitOutput(tc, id, "stdout", "ready")
	}
	start(a, "a", `echo ready; read line; true`)
	start(b, "b", `echo ready; read line; mkdir -p .codex; echo pwned > .codex/config.toml`)
	a.mustCall("process/closeStdin", map[string]any{"processId": "a"})
	if r := waitClosed(a, "a"); r.exitCode != 0 {
		t.Fatalf("a: exit %d", r.exitCode)
	}
	b.mustCall("process/closeStdin", map[string]any{"processId": "b"})
	r := waitClosed(b, "b")
	if r.exitCode == 0 || !strings.Contains(r.stderr(), "Read-only file system") {
		t.Errorf("b: exit %d, stderr %q: want the write to .codex denied", r.exitCode, r.stderr())
	}
	wantAbsent(t, filepath.Join(f.ws, ".codex", "config.toml"))
	for _, name := range protectedNames {
		wantAbsent(t, filepath.Join(f.ws, name))
	}
}

// TestSandboxRestrictedReadProtectedGrantNothing: under a profile that reads only the minimal
// roots and its writable roots, a protected name that leads out of them (a `.git` file's
// gitdir, a `.aws` symlink: whoever could write the workspace, or /tmp, before) makes
// nothing readable; one that leads into a writable root still keeps its target read-only.
func TestSandboxRestrictedReadProtectedGrantNothing(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	ws2 := filepath.Join(f.base, "ws2")
	for _, d := range []string{"realgit", "awsdir"} {
		mustMkdir(t, filepath.Join(f.outside, d))
		mustWrite(t, filepath.Join(f.outside, d, "secret"), "SECRET\n")
	}
	mustWrite(t, filepath.Join(f.ws, ".git"), "gitdir: "+filepath.Join(f.outside, "realgit")+"\n")
	mustSymlink(t, filepath.Join(f.outside, "awsdir"), filepath.Join(f.ws, ".aws"))
	mustMkdir(t, filepath.Join(ws2, "inner"))
	mustWrite(t, filepath.Join(ws2, "inner", "config"), "orig\n")
	mustWrite(t, filepath.Join(ws2, ".git"), "gitdir: inner\n")
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	sandbox := json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"minimal"}},"access":"read"},
   {"path":{"type":"path","path":%s},"access":"write"},
   {"path":{"type":"path","path":%s},"access":"write"}]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%s}`, quote(fileURI(f.ws)), quote(fileURI(ws2)), quote(fileURI(f.ws))))
	r := f.runServer(t, ts, sandbox, false, `cat "$OUT/realgit/secret" .aws/secret "$OUT/awsdir/secret"
echo pwned > "$BASE/ws2/inner/config"
echo ok > ok.txt && echo ran`)
	if strings.Contains(r.out, "SECRET") || !strings.Contains(r.out, "ran") {
		t.Errorf("exit %d: a protected name made a path outside the readable roots readable, or the script did not run:\n%s", r.exit, r.out)
	}
	wantFile(t, filepath.Join(ws2, "inner", "config"), "orig\n")
	wantFile(t, filepath.Join(f.ws, "ok.txt"), "ok\n")
}

// TestSandboxFullWriteWithDeny: a profile that writes everywhere but denies a path confines
// files only for that path; the rest of the host stays writable.
func TestSandboxFullWriteWithDeny(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	mustWrite(t, filepath.Join(f.outside, "secret"), "SECRET\n")
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	sandbox := json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"write"},
   {"path":{"type":"path","path":%s},"access":"deny"}]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%s}`, quote(fileURI(filepath.Join(f.outside, "secret"))), quote(fileURI(f.ws))))
	r := f.runServer(t, ts, sandbox, false, `cat "$OUT/secret"; echo ok > "$OUT/new" && echo wrote`)
	if strings.Contains(r.out, "SECRET") || !strings.Contains(r.out, "wrote") {
		t.Errorf("exit %d: want the denied file unreadable and the rest writable:\n%s", r.exit, r.out)
	}
	wantFile(t, filepath.Join(f.outside, "new"), "ok\n")
	wantFile(t, filepath.Join(f.outside, "secret"), "SECRET\n")
}

// TestSandboxReadOnlyCarveOut: a read entry inside a writable root, or anywhere under
// root:write (the reference's write-narrowing entries), stays read-only under either
// mechanism, and root:write so narrowed is no full write.
func TestSandboxReadOnlyCarveOut(t *testing.T) {
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	entry := func(path, access string) string {
		return fmt.Sprintf(`{"path":{"type":"path","path":%s},"access":%q}`, quote(fileURI(path)), access)
	}
	root := func(access string) string {
		return fmt.Sprintf(`{"path":{"type":"special","value":{"kind":"root"}},"access":%q}`, access)
	}
	for _, mech := range []string{"namespaces", "landlock"} {
		for _, tt := range []struct {
			name    string
			entries func(f *sbFixture) []string
			carved  func(f *sbFixture) string // must stay read-only
		}{
			{"root write, outside read", func(f *sbFixture) []string { return []string{root("write"), entry(f.outside, "read")} },
				func(f *sbFixture) string { return f.outside }},
			{"workspace write, ws/ro read", func(f *sbFixture) []string {
				return []string{root("read"), entry(f.ws, "write"), entry(filepath.Join(f.ws, "ro"), "read")}
			}, func(f *sbFixture) string { return filepath.Join(f.ws, "ro") }},
		} {
			t.Run(mech+"/"+tt.name, func(t *testing.T) {
				if mech == "namespaces" {
					requireUserNamespaces(t)
				} else if landlockABI() == 0 {
					t.Skip("Landlock unavailable in this kernel/build")
				}
				ts := startTestServer(t, withSandboxer(t, "isolate", mech))
				f := newSBFixture(t)
				mustMkdir(t, filepath.Join(f.ws, "sub"))
				mustMkdir(t, filepath.Join(f.ws, "ro"))
				carved := tt.carved(f)
				sandbox := json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[%s]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%s}`, strings.Join(tt.entries(f), ","), quote(fileURI(f.ws))))
				r := f.runServer(t, ts, sandbox, false, fmt.Sprintf(`echo pwned > %s/f; echo ok > "$WS/sub/new" && echo wrote`, shellQuote(carved)))
				if !strings.Contains(r.out, "wrote") {
					t.Errorf("exit %d: want the rest writable:\n%s", r.exit, r.out)
				}
				wantAbsent(t, filepath.Join(carved, "f"))
				wantFile(t, filepath.Join(f.ws, "sub", "new"), "ok\n")
			})
		}
	}
}

// TestSandboxProtectedDirLockedByAnother: anyone who can read a workspace's .git (a
// sandboxed command of another workspace, under a full-read profile) can flock it
// exclusively. A sandbox on that workspace is then refused after a bounded wait, instead of
// process/start hanging for as long as the lock is held; once it is let go, it starts.
func TestSandboxProtectedDirLockedByAnother(t *testing.T) {
	requireUserNamespaces(t)
	sbx, err := newSandboxer("isolate", "")
	if err != nil {
		t.Fatal(err)
	}
	sbx.synthetic.wait = 200 * time.Millisecond
	ts := startTestServer(t, func(s *server) { s.sandbox = sbx })
	tc := ts.connect(t)
	f := newSBFixture(t)
	mustMkdir(t, filepath.Join(f.ws, ".git"))
	lock, err := os.Open(filepath.Join(f.ws, ".git"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	params := func() map[string]any {
		return map[string]any{
			"processId": nextSBID(), "argv": []string{"true"}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false,
			"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
		}
	}
	select {
	case r := <-tc.start("process/start", params()):
		if r.Err == nil || r.Err.Code != codeInternal || !strings.Contains(r.Err.Message, ".git") {
			t.Errorf("process/start with .git locked by another: %s %+v, want -32603 naming it", r.Result, r.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("process/start hangs while another process holds .git locked")
	}
	unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	if _, e := tc.call("process/start", params()); e != nil {
		t.Errorf("process/start once the lock is gone: %+v", e)
	}
}

// TestSandboxGlobOverTheCapIsRefused: a glob_pattern deny entry that matches more paths than
// one entry may deny (maxGlobMatches) cannot be enforced whole: the sandbox is refused, and
// no match beyond the cap is left readable.
func TestSandboxGlobOverTheCapIsRefused(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	tc := ts.connect(t)
	f := newSBFixture(t)
	dir := filepath.Join(f.ws, "secrets")
	mustMkdir(t, dir)
	for i := range maxGlobMatches + 1 {
		mustWrite(t, filepath.Join(dir, fmt.Sprintf("s%05d.env", i)), "SECRET\n")
	}
	last := filepath.Join(dir, fmt.Sprintf("s%05d.env", maxGlobMatches))
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	sandbox := json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"read"},
   {"path":{"type":"glob_pattern","pattern":"**/*.env"},"access":"deny"}]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%s}`, quote(fileURI(f.ws))))
	id := nextSBID()
	res, e := tc.call("process/start", map[string]any{
		"processId": id, "argv": []string{"cat", last}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false, "sandbox": sandbox,
	})
	if e == nil {
		r := waitClosed(tc, id)
		t.Fatalf("process/start %s: the sandbox ran, and read the last match: exit %d, %q", res, r.exitCode, r.stdout())
	}
	if e.Code != codeInvalidParams || !strings.Contains(e.Message, "sandbox intent cannot be enforced") {
		t.Errorf("error %d %q, want -32602 sandbox intent cannot be enforced", e.Code, e.Message)
	}
	_, e = tc.call("fs/readFile", map[string]any{"path": fileURI(last), "sandbox": sandbox})
	if e == nil {
		t.Error("fs/readFile read the last match")
	}
}

// ---------------------------------------------------------------------------------------
// What process/start answers

func TestSandboxType(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	tc := ts.connect(t)
	f := newSBFixture(t)
	for _, tt := range []struct {
		name    string
		sandbox any
		want    string
	}{
		{"no sandbox", nil, "none"},
		{"workspace-write", f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"), "linuxSeccomp"},
		{"read-only", f.sandboxObject(sbReadOnly, viaPipe, "restricted"), "linuxSeccomp"},
		{"seed workspace-write", f.sandboxObject(sbWorkspaceWrite, viaSeed, "restricted"), "linuxSeccomp"},
		{"disabled", json.RawMessage(`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`), "linuxSeccomp"},
		{"external", json.RawMessage(`{"permissions":{"type":"external","network":"enabled"},"windowsSandboxLevel":"disabled"}`), "linuxSeccomp"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id := nextSBID()
			params := map[string]any{"processId": id, "argv": []string{"true"}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false}
			if tt.sandbox != nil {
				params["sandbox"] = tt.sandbox
			}
			res := tc.mustCall("process/start", params)
			if want := fmt.Sprintf(`{"processId":%q,"sandboxType":%q}`, id, tt.want); string(res) != want {
				t.Errorf("result %s, want %s", res, want)
			}
			if r := waitClosed(tc, id); r.exitCode != 0 {
				t.Errorf("exit %d", r.exitCode)
			}
		})
	}
}

func TestSandboxMissingProgramOrCwd(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	tc := ts.connect(t)
	for _, tt := range []struct {
		name string
		argv []string
		cwd  func(f *sbFixture) string
	}{
		{"program not on PATH", []string{"exec-server-no-such-program"}, nil},
		{"absolute path that does not exist", []string{"/nonexistent-exec-server-dir/prog"}, nil},
		{"cwd that does not exist", []string{"true"}, func(f *sbFixture) string { return filepath.Join(f.ws, "missing") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, tty := range []bool{false, true} {
				f := newSBFixture(t)
				cwd := f.ws
				if tt.cwd != nil {
					cwd = tt.cwd(f)
				}
				id := nextSBID()
				e := tc.callErr("process/start", map[string]any{
					"processId": id, "argv": tt.argv, "cwd": fileURI(cwd), "env": f.env(), "tty": tty,
					"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
				})
				want := "No such file or directory (os error 2)"
				if tty && tt.cwd == nil && !strings.HasPrefix(tt.argv[0], "/") {
					want = "Unable to spawn exec-server-no-such-program because:\nNo viable candidates found in PATH"
				}
				if e.Code != codeInternal || !strings.HasPrefix(e.Message, want) {
					t.Errorf("tty=%v: error %d %q, want -32603 %q", tty, e.Code, e.Message, want)
				}
				for _, name := range protectedNames {
					wantAbsent(t, filepath.Join(f.ws, name)) // a failed start gives back its mount points
				}
				if tc.callErr("process/read", map[string]any{"processId": id}) == nil {
					t.Error("the failed start kept its process id")
				}
			}
		})
	}
}

// TestSandboxFailsClosed: with no mechanism to confine files, a profile that confines them
// is refused and nothing runs; one that does not still runs.
func TestSandboxFailsClosed(t *testing.T) {
	ts := startTestServer(t, withSandboxer(t, "isolate", "none"))
	tc := ts.connect(t)
	f := newSBFixture(t)
	for _, mode := range []sbMode{sbWorkspaceWrite, sbReadOnly} {
		for _, tty := range []bool{false, true} {
			id := nextSBID()
			e := tc.callErr("process/start", map[string]any{
				"processId": id, "argv": []string{"sh", "-c", "echo ran > ran.txt"}, "cwd": fileURI(f.ws), "env": f.env(), "tty": tty,
				"sandbox": f.sandboxObject(mode, viaPipe, "restricted"),
			})
			if e.Code != codeInvalidParams || !strings.Contains(e.Message, "sandbox intent cannot be enforced on this executor") {
				t.Errorf("mode %d tty=%v: error %d %q", mode, tty, e.Code, e.Message)
			}
			if tc.callErr("process/read", map[string]any{"processId": id}) == nil {
				t.Error("the refused start kept its process id")
			}
		}
	}
	wantAbsent(t, filepath.Join(f.ws, "ran.txt"))
	for _, name := range protectedNames {
		wantAbsent(t, filepath.Join(f.ws, name))
	}
	id := nextSBID()
	res := tc.mustCall("process/start", map[string]any{
		"processId": id, "argv": []string{"sh", "-c", "echo ran"}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false,
		"sandbox": json.RawMessage(`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`),
	})
	if r := waitClosed(tc, id); r.stdout() != "ran\n" || !strings.Contains(string(res), "linuxSeccomp") {
		t.Errorf("a disabled profile under no mechanism: %s, output %q", res, r.stdout())
	}
}

func TestSandboxMalformedObjects(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	f := newSBFixture(t)
	root := `{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}`
	managed := func(entries, network string) string {
		return `{"type":"managed","file_system":{"type":"restricted","entries":[` + entries + `]},"network":"` + network + `"}`
	}
	for _, tt := range []struct {
		name, sandbox, want string
	}{
		{"windowsSandboxLevel bogus", `{"permissions":` + managed(root, "restricted") + `,"windowsSandboxLevel":"bogus"}`,
			"unknown variant `bogus`"},
		{"network bogus", `{"permissions":` + managed(root, "bogus") + `,"windowsSandboxLevel":"disabled"}`,
			"unknown variant `bogus`, expected `restricted` or `enabled`"},
		{"cwd not a file: URI", `{"permissions":` + managed(root, "restricted") + `,"windowsSandboxLevel":"disabled","cwd":` + strconv.Quote(f.ws) + `}`,
			"invalid URI: relative URL without a base"},
		{"bare path in an entry", `{"permissions":` + managed(`{"path":{"type":"path","path":`+strconv.Quote(f.ws)+`},"access":"write"}`, "restricted") + `,"windowsSandboxLevel":"disabled"}`,
			"invalid URI: relative URL without a base"},
		{"legacy bare read-only", `{"type":"read-only"}`, "missing field `permissions`"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id := nextSBID()
			e := tc.callErr("process/start", map[string]any{
				"processId": id, "argv": []string{"sh", "-c", "echo ran > ran.txt"}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false,
				"sandbox": json.RawMessage(tt.sandbox),
			})
			if e.Code != codeInvalidParams || !strings.Contains(e.Message, tt.want) {
				t.Errorf("error %d %q, want -32602 containing %q", e.Code, e.Message, tt.want)
			}
		})
	}
	wantAbsent(t, filepath.Join(f.ws, "ran.txt"))
}

// ---------------------------------------------------------------------------------------
// Helpers

// sbFixture is one row's world: a workspace and its surroundings, outside /tmp.
type sbFixture struct {
	base      string   // holds the rest
	ws        string   // the workspace: cwd, project root, --writable
	outside   string   // a sibling of ws
	tmp       string   // the command's TMPDIR
	roots     []string // the writable project roots: ws, and what a row adds
	homeProbe string   // a file in $HOME that must never appear
	slashTmp  string   // a file in /tmp the workspace-write profile may write
	tcp       net.Listener
	udp       net.PacketConn
	unix      *net.UnixListener
	leakFD    int // a descriptor of outside open in this process without close-on-exec
}

func newSBFixture(t *testing.T) *sbFixture {
	t.Helper()
	base := sbBaseDir(t)
	f := &sbFixture{base: base, ws: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside"), tmp: filepath.Join(base, "tmp")}
	for _, d := range []string{f.ws, f.outside, f.tmp} {
		mustMkdir(t, d)
	}
	f.roots = []string{f.ws}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		home = "/root"
	}
	name := "exec-server-sbtest-" + filepath.Base(base)
	f.homeProbe = filepath.Join(home, name)
	f.slashTmp = filepath.Join("/tmp", name)
	t.Cleanup(func() { os.Remove(f.homeProbe) }) // only there if the sandbox failed
	return f
}

// sbBaseDir makes a directory for one fixture outside /tmp and outside os.TempDir: in
// workspace-write, both are writable.
func sbBaseDir(t *testing.T) string {
	t.Helper()
	home, _ := os.UserHomeDir()
	for _, parent := range []string{"/var/tmp", home} {
		if parent == "" {
			continue
		}
		real, err := filepath.EvalSymlinks(parent)
		if err != nil || pathWithin(real, "/tmp") || pathWithin(real, os.TempDir()) {
			continue
		}
		dir, err := os.MkdirTemp(real, "exec-server-sbtest-")
		if err != nil {
			continue
		}
		t.Cleanup(func() {
			if err := os.RemoveAll(dir); err != nil {
				t.Errorf("clean up %s: %v", dir, err)
			}
		})
		return dir
	}
	t.Skip("no writable directory outside /tmp for the fixtures")
	return ""
}

// env is the command's environment: PATH, HOME, TMPDIR, GORACE, and the fixture's paths.
func (f *sbFixture) env() map[string]string {
	home, _ := os.UserHomeDir()
	env := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": home, "TMPDIR": f.tmp, "LANG": "C", "GORACE": sbGORACE,
		"WS": f.ws, "OUT": f.outside, "BASE": f.base, "HOMEPROBE": f.homeProbe, "SLASHTMP": f.slashTmp,
		"PROBE": testBinaryPath, "SERVERPID": strconv.Itoa(os.Getpid()),
	}
	if f.tcp != nil {
		env["TCPADDR"] = f.tcp.Addr().String()
	}
	if f.udp != nil {
		env["UDPADDR"] = f.udp.LocalAddr().String()
	}
	if f.unix != nil {
		env["UNIXADDR"] = f.unix.Addr().String()
	}
	if f.leakFD > 0 {
		env["LEAKFD"] = strconv.Itoa(f.leakFD)
	}
	return env
}

// sandboxObject is the sandbox a driver sends: Codex's objects, or the older SEED
// sandboxPolicy shape (both in docs/sandbox.md §1).
func (f *sbFixture) sandboxObject(mode sbMode, via sbVia, network string) json.RawMessage {
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	if via == viaSeed {
		// network_access for read-only too: this server's decoder requires it, though the
		// oldest read-only policy had no fields at all.
		policy := `{"type":"read-only","network_access":false}`
		if mode == sbWorkspaceWrite {
			policy = fmt.Sprintf(`{"type":"workspace-write","writable_roots":%s,"network_access":%v}`, quote(f.roots), network == "enabled")
		}
		return json.RawMessage(fmt.Sprintf(`{"sandboxPolicy":%s,"sandboxPolicyCwd":%s,"windowsSandboxLevel":"disabled"}`, policy, quote(fileURI(f.ws))))
	}
	if mode == sbReadOnly {
		return json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]},"network":%s},
  "windowsSandboxLevel":"disabled","cwd":%s}`, quote(network), quote(fileURI(f.ws))))
	}
	var roots []string
	for _, r := range f.roots {
		roots = append(roots, fileURI(r))
	}
	return json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"read"},
   {"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"},
   {"path":{"type":"special","value":{"kind":"slash_tmp"}},"access":"write"},
   {"path":{"type":"special","value":{"kind":"tmpdir"}},"access":"write"}]},"network":%s},
  "windowsSandboxLevel":"disabled","cwd":%s,"workspaceRoots":%s}`, quote(network), quote(fileURI(f.ws)), quote(roots)))
}

// sbRun is what one sandboxed run showed.
type sbRun struct {
	exit          int
	out           string // every stream, in order within each
	sandboxType   string
	sandboxDenied bool
}

var sbIDs atomic.Int64

func nextSBID() string { return fmt.Sprintf("sb%d", sbIDs.Add(1)) }

// runServer runs script through process/start on ts, in the workspace, and waits for it to close.
func (f *sbFixture) runServer(t *testing.T, ts *testServer, sandbox json.RawMessage, tty bool, script string) sbRun {
	t.Helper()
	tc := ts.connect(t)
	id := nextSBID()
	res := tc.mustCall("process/start", map[string]any{
		"processId": id, "argv": []string{"sh", "-c", script}, "cwd": fileURI(f.ws), "env": f.env(), "tty": tty, "sandbox": sandbox,
	})
	var sr startResult
	if err := json.Unmarshal(res, &sr); err != nil {
		t.Fatal(err)
	}
	r := waitClosed(tc, id)
	return sbRun{exit: r.exitCode, out: r.stdout() + r.stderr() + r.pty(), sandboxType: sr.SandboxType, sandboxDenied: exitedSandboxDenied(tc, id)}
}

// runCLI runs script through `exec-server sandbox`, the test binary re-exec'd, in the workspace.
func (f *sbFixture) runCLI(t *testing.T, mode sbMode, mech sandboxMechanism, script string, flags ...string) sbRun {
	t.Helper()
	args := []string{"sandbox", "--mechanism", mech.String()}
	if mode == sbReadOnly {
		args = append(args, "--read-only")
	} else {
		for _, r := range f.roots {
			args = append(args, "--writable", r)
		}
	}
	args = append(append(args, flags...), "--", "sh", "-c", script)
	argv, _ := json.Marshal(args)
	cmd := exec.Command(testBinary(t))
	cmd.Dir = f.ws
	cmd.Env = append(os.Environ(), sbRunEnv+"="+string(argv))
	for k, v := range f.env() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exitErr *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("exec-server sandbox: %v", err)
	}
	return sbRun{exit: code, out: out.String()}
}

// exitedSandboxDenied is process/exited's sandboxDenied for process id.
func exitedSandboxDenied(tc *testClient, id string) bool {
	for _, n := range tc.notesSnapshot() {
		var p struct {
			ProcessID     string `json:"processId"`
			SandboxDenied bool   `json:"sandboxDenied"`
		}
		if n.Method == "process/exited" && json.Unmarshal(n.Params, &p) == nil && p.ProcessID == id {
			return p.SandboxDenied
		}
	}
	return false
}

// withSandboxer gives a test server a sandboxer of its own.
func withSandboxer(t *testing.T, pidNamespace, mechanism string) func(*server) {
	sbx, err := newSandboxer(pidNamespace, mechanism)
	if err != nil {
		t.Fatal(err)
	}
	return func(s *server) { s.sandbox = sbx }
}

// requireUserNamespaces skips when this kernel cannot give a process user and mount
// namespaces, the one thing these tests cannot do without.
func requireUserNamespaces(t *testing.T) {
	t.Helper()
	if err := namespacesProbe(); err != nil {
		t.Skipf("user namespaces unavailable on this kernel (%v): the namespace sandbox cannot run here", err)
	}
}

var namespacesProbe = sync.OnceValue(probeNamespaces)

// sbGORACE spares every run of this test binary built with -race (the stage, the probe,
// the command line) the race runtime's one-second sleep at exit.
var sbGORACE = strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")

// testBinaryPath is this test binary, which the sandbox runs as its network probe.
var testBinaryPath, _ = os.Executable()

func testBinary(t *testing.T) string {
	t.Helper()
	if testBinaryPath == "" {
		t.Fatal("cannot find the test binary")
	}
	return testBinaryPath
}

// sbProbe is the test binary inside the sandbox: tcp ADDR (connect, send hello), unix PATH
// (connect), udp ADDR (send one datagram), socketpair (AF_UNIX), fgwait (say when this job
// has the terminal, then wait for a signal), ptrace PID (attach, detach), tiocsti (push a
// newline into the terminal on stdin). It prints what happened, and exits 1 on an error.
func sbProbe(args []string) int {
	fail := func(what string, err error) int {
		fmt.Printf("%s: %v\n", what, err)
		return 1
	}
	if len(args) == 0 {
		return fail("probe", errors.New("no operation"))
	}
	switch args[0] {
	case "tcp":
		c, err := net.DialTimeout("tcp", args[1], 10*time.Second)
		if err != nil {
			return fail("tcp", err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("hello\n")); err != nil {
			return fail("tcp write", err)
		}
		fmt.Println("connected")
	case "unix":
		c, err := net.DialTimeout("unix", args[1], 10*time.Second)
		if err != nil {
			return fail("unix", err)
		}
		defer c.Close()
		c.Write([]byte("pwned\n"))
		fmt.Println("connected")
	case "udp":
		ap, err := netip4(args[1])
		if err != nil {
			return fail("udp", err)
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fail("udp: socket", err)
		}
		defer unix.Close(fd)
		if err := unix.Sendto(fd, []byte("pwned"), 0, ap); err != nil {
			return fail("udp: sendto", err)
		}
		fmt.Println("sent")
	case "fgwait":
		for {
			fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
			if err != nil {
				return fail("fgwait", err)
			}
			if fg == unix.Getpgrp() {
				break
			}
			time.Sleep(time.Millisecond) // inside the sandbox: nothing tells a job it got the terminal
		}
		fmt.Println("in the foreground")
		time.Sleep(time.Hour) // until ^C
	case "ptrace":
		pid, err := strconv.Atoi(args[1])
		if err != nil {
			return fail("ptrace", err)
		}
		if err := unix.PtraceAttach(pid); err != nil {
			return fail("ptrace", err)
		}
		fmt.Println("attached")
		unix.PtraceDetach(pid)
	case "tiocsti":
		c := byte('\n')
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c))); e != 0 {
			return fail("tiocsti", e)
		}
		fmt.Println("pushed")
	case "socketpair":
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fail("socketpair", err)
		}
		unix.Write(fds[0], []byte("ping"))
		buf := make([]byte, 4)
		if n, err := unix.Read(fds[1], buf); err != nil || string(buf[:n]) != "ping" {
			return fail("socketpair read", err)
		}
		fmt.Println("socketpair ok")
	default:
		return fail("probe", fmt.Errorf("unknown operation %q", args[0]))
	}
	return 0
}

func netip4(addr string) (*unix.SockaddrInet4, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(host).To4()
	p, err := strconv.Atoi(port)
	if ip == nil || err != nil {
		return nil, fmt.Errorf("bad address %q", addr)
	}
	sa := &unix.SockaddrInet4{Port: p}
	copy(sa.Addr[:], ip)
	return sa, nil
}

// listenTCP opens a host listener on 127.0.0.1 for the sandbox to try.
func (f *sbFixture) listenTCP(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f.tcp = ln
}

func (f *sbFixture) listenUDP(t *testing.T) {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	f.udp = pc
}

// listenUnix opens a host unix socket in the fixture, outside the workspace.
func (f *sbFixture) listenUnix(t *testing.T) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(f.outside, "sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f.unix = ln
}

// wantNoUnix checks that no connection reached the unix listener (see wantNoTCP).
func (f *sbFixture) wantNoUnix(t *testing.T) {
	t.Helper()
	f.unix.SetDeadline(time.Now().Add(50 * time.Millisecond))
	if c, err := f.unix.Accept(); err == nil {
		c.Close()
		t.Errorf("a connection from the sandbox reached the host unix socket %s", f.unix.Addr())
	}
}

// wantNoTCP checks, once the sandboxed process is gone, that no connection reached the
// listener: a connect that had succeeded would wait in its accept queue by now.
func (f *sbFixture) wantNoTCP(t *testing.T) {
	t.Helper()
	f.tcp.(*net.TCPListener).SetDeadline(time.Now().Add(50 * time.Millisecond))
	if c, err := f.tcp.Accept(); err == nil {
		c.Close()
		t.Errorf("a connection from the sandbox reached the host listener %s", f.tcp.Addr())
	}
}

// wantTCP accepts the connection the sandbox made and checks what it sent.
func (f *sbFixture) wantTCP(t *testing.T, want string) {
	t.Helper()
	f.tcp.(*net.TCPListener).SetDeadline(time.Now().Add(procWait))
	c, err := f.tcp.Accept()
	if err != nil {
		t.Fatalf("no connection reached the host listener: %v", err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(procWait))
	got, _ := bufio.NewReader(c).ReadString('\n')
	if got != want {
		t.Errorf("the connection sent %q, want %q", got, want)
	}
}

// wantNoUDP checks that no datagram reached the host socket: local delivery is
// synchronous, so one that was sent is queued by now.
func (f *sbFixture) wantNoUDP(t *testing.T) {
	t.Helper()
	f.udp.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	buf := make([]byte, 64)
	if n, from, err := f.udp.ReadFrom(buf); err == nil {
		t.Errorf("a datagram from the sandbox reached the host socket: %q from %v", buf[:n], from)
	}
}

// ptySession drives an interactive program in a PTY: each expect looks only at what came
// after the previous one.
type ptySession struct {
	tc     *testClient
	id     string
	seen   int // bytes of output consumed by expect
	writes int
}

func (p *ptySession) send(t *testing.T, s string) {
	t.Helper()
	p.writes++
	if res := p.tc.mustCall("process/write", map[string]any{"processId": p.id, "chunk": b64(s), "writeId": strconv.Itoa(p.writes)}); string(res) != `{"status":"accepted"}` {
		t.Fatalf("write %q: %s", s, res)
	}
}

func (p *ptySession) expect(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(procWait)
	for {
		p.tc.mu.Lock()
		changed := p.tc.changed
		p.tc.mu.Unlock()
		out := procOutput(p.tc, p.id)
		if i := strings.Index(out[p.seen:], want); i >= 0 {
			p.seen += i + len(want)
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no %q in the terminal after:\n%s", want, out[p.seen:])
		}
	}
}

// sleepArgs makes each uniqueSleepArg unique within and across test binaries.
var sleepArgs atomic.Int64

// uniqueSleepArg is a duration argument for sleep that no other process on the host has,
// to find that sleep from the host by its command line.
func uniqueSleepArg() string {
	return fmt.Sprintf("%d.%07d", 300+sleepArgs.Add(1), os.Getpid()%10000000)
}

// waitHostPid finds, by its exact argv, a process a sandbox started: its pid as the host
// sees it. It polls /proc: a process that is not our child sends no event.
func waitHostPid(t *testing.T, argv ...string) int {
	t.Helper()
	want := strings.Join(argv, "\x00") + "\x00"
	deadline := time.Now().Add(procWait)
	for {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && string(b) == want {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process %q on the host", argv)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hostNSpid is the NSpid line of a host process: its pid in each pid namespace, outermost first.
func hostNSpid(t *testing.T, pid int) []int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			var out []int
			for _, s := range strings.Fields(rest) {
				n, _ := strconv.Atoi(s)
				out = append(out, n)
			}
			return out
		}
	}
	t.Fatalf("no NSpid for %d", pid)
	return nil
}

func readPidFile(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return firstLineInt(t, string(b))
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, strings.ToLower(sub)) {
			return true
		}
	}
	return false
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// wantFile checks a host file's content.
func wantFile(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
	} else if string(b) != want {
		t.Errorf("%s holds %q, want %q", path, b, want)
	}
}

// wantAbsent checks that nothing is at path on the host.
func wantAbsent(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists on the host (%v)", path, err)
	}
}
