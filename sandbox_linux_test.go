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
// The table and its driver live here, the other tests in sandbox_process_linux_test.go, the
// fixture, probes and helpers in sandbox_helpers_linux_test.go.
//
// The Landlock table skips where the kernel or build has no Landlock.
// Nothing here sleeps to wait for something that has an event; the only polls are for
// processes that are not our children (/proc), which send none.
//
// The fixtures live outside /tmp: Codex's workspace-write profile makes /tmp writable
// (slash_tmp), so a directory under /tmp is no "outside".

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
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

// TestSandboxCLILimits: `exec-server sandbox` takes the server's sandbox limits, so that what
// a person sees is what an agent's commands get: /dev/shm of --linux-sandbox-shm-size, and a
// bad --linux-sandbox-max-processes is a usage error.
func TestSandboxCLILimits(t *testing.T) {
	requireUserNamespaces(t)
	f := newSBFixture(t)
	r := f.runCLI(t, sbWorkspaceWrite, mechanismNamespaces, `df -k /dev/shm | awk 'NR==2 {print $2}'`, "--linux-sandbox-shm-size", "2M")
	if r.exit != 0 || strings.TrimSpace(r.out) != "2048" {
		t.Errorf("exit %d, output %q: want a /dev/shm of 2048 KiB", r.exit, r.out)
	}
	r = f.runCLI(t, sbWorkspaceWrite, mechanismNamespaces, `true`, "--linux-sandbox-max-processes", "0")
	if r.exit != 2 || !strings.Contains(r.out, "--linux-sandbox-max-processes") {
		t.Errorf("exit %d, output %q: want a usage error naming --linux-sandbox-max-processes", r.exit, r.out)
	}
}
