package main

// Escapes through the namespace sandbox's file system view (docs/sandbox.md §2), tried as an
// attacker would, with every verdict read on the host:
//
//	TestSandboxMountRaceRenameExchange   a sandboxed command swaps the workspace's parent with
//	                                     a directory whose same-named child is a symlink out of
//	                                     every root, while new sandboxes start on the workspace:
//	                                     none may get the outside directory, nor make the
//	                                     protected names in it (EXEC_SERVER_RACE_ATTEMPTS)
//	TestSandboxProcSysReadOnly           /proc/sys and its kin cannot be written, in a pid
//	                                     namespace of its own and with the host's /proc
//	TestSandboxKernelFSElsewhereReadOnly nor through a proc or sysfs mounted elsewhere (in a
//	                                     workspace, or anywhere under full write)
//	TestSandboxDenyCannotBeMovedAway     a denied file cannot be moved out from under the
//	                                     next sandbox's deny by renaming a directory above it
//	TestSandboxShmBounded                /dev/shm holds --linux-sandbox-shm-size and no more
//
// The helpers these share with the other sandbox tests are in sandbox_helpers_linux_test.go.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// raceSwapEnv makes the test binary the attacker of the mount race: it swaps the two
// directories named by its arguments with RENAME_EXCHANGE until it is killed.
const raceSwapEnv = "EXEC_SERVER_SBTEST_SWAP"

// raceAttemptsEnv overrides defaultRaceAttempts.
const raceAttemptsEnv = "EXEC_SERVER_RACE_ATTEMPTS"

// defaultRaceAttempts is how many sandboxes TestSandboxMountRaceRenameExchange starts against
// the swapping attacker: several times the most the escape ever needed before the view was
// built from descriptors (see the test).
const defaultRaceAttempts = 650

func init() {
	if isSandboxStage() || os.Getenv(raceSwapEnv) != "1" {
		return
	}
	os.Exit(raceSwap(os.Args[1], os.Args[2]))
}

// raceSwap exchanges a and b for ever, saying once that it has started.
func raceSwap(a, b string) int {
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
		fmt.Printf("swap: %v\n", err)
		return 1
	}
	fmt.Println("swapping")
	for {
		unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	}
}

// raceAttempts is the number of sandboxes a race test starts.
func raceAttempts(t *testing.T) int {
	t.Helper()
	s := os.Getenv(raceAttemptsEnv)
	if s == "" {
		return defaultRaceAttempts
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", raceAttemptsEnv, s)
	}
	return n
}

// TestSandboxMountRaceRenameExchange: the workspace is $TMPDIR/a/ws, and $TMPDIR is writable
// under workspace-write. Command A, in such a sandbox, swaps $TMPDIR/a with $TMPDIR/b, whose
// ws is a relative symlink to a directory outside every root. Meanwhile the server starts
// sandboxes on the workspace, each writing victim.txt through the outside path and in its
// working directory. Built from path strings, a view caught mid-swap bound the outside
// directory read-write, and the server made the missing protected names in it. Each start
// must now either build the view of the real workspace or fail closed.
func TestSandboxMountRaceRenameExchange(t *testing.T) {
	requireUserNamespaces(t)
	attempts := raceAttempts(t)
	f := newSBFixture(t)
	a, b := filepath.Join(f.tmp, "a"), filepath.Join(f.tmp, "b")
	f.ws = filepath.Join(a, "ws")
	f.roots = []string{f.ws}
	mustMkdir(t, f.ws)
	mustMkdir(t, b)
	rel, err := filepath.Rel(b, f.outside)
	if err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, rel, filepath.Join(b, "ws"))
	victim := filepath.Join(f.outside, "victim.txt")

	// Every name made in the outside directory, whoever made it and whenever it went again.
	in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, f.outside, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}

	ts := startTestServer(t)
	sandbox := f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted")
	attacker := ts.connect(t)
	env := f.env()
	env[raceSwapEnv] = "1"
	if res, rerr := attacker.call("process/start", map[string]any{
		"processId": "attacker", "argv": []string{testBinary(t), a, b}, "cwd": fileURI(f.ws), "env": env, "tty": false, "sandbox": sandbox,
	}); rerr != nil {
		t.Fatalf("start the attacker: %v", rerr)
	} else {
		var sr startResult
		if json.Unmarshal(res, &sr); sr.SandboxType != "linuxSeccomp" {
			t.Fatalf("attacker sandboxType %q, want linuxSeccomp", sr.SandboxType)
		}
	}
	waitOutput(attacker, "attacker", "stdout", "swapping")
	t.Cleanup(func() {
		attacker.call("process/terminate", map[string]any{"processId": "attacker"})
		waitClosed(attacker, "attacker")
	})

	script := `echo PWNED >> "$OUT/victim.txt"; echo PWNED >> victim.txt; true`
	var started, refused int
	var wrote, made int // the first attempt that wrote outside, that made a name there
	var tc *testClient
	start := time.Now()
	for i := 1; i <= attempts; i++ {
		if (i-1)%100 == 0 { // a client's notifications pile up: a fresh one every hundred starts
			if tc != nil {
				tc.close()
			}
			tc = ts.connect(t)
		}
		id := nextSBID()
		_, rerr := tc.call("process/start", map[string]any{
			"processId": id, "argv": []string{"sh", "-c", script}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false, "sandbox": sandbox,
		})
		if rerr != nil {
			if refused++; refused == 1 {
				t.Logf("attempt %d refused: %v", i, rerr.Message)
			}
		} else {
			started++
			waitClosed(tc, id)
		}
		if b, err := os.ReadFile(victim); err == nil && wrote == 0 {
			wrote = i
			t.Errorf("attempt %d of %d (%v): the sandbox wrote outside every root: %s holds %q", i, attempts, time.Since(start), victim, b)
		}
		if names := inotifyNames(t, in); len(names) > 0 && made == 0 {
			made = i
			t.Errorf("attempt %d of %d (%v): %v made in the outside directory %s", i, attempts, time.Since(start), names, f.outside)
		}
		if wrote != 0 && made != 0 {
			break
		}
	}
	if wrote != 0 || made != 0 {
		return
	}
	t.Logf("%d sandboxes against the swap in %v: %d started, %d refused; nothing outside", attempts, time.Since(start), started, refused)
	if started == 0 {
		t.Errorf("no sandbox started at all: the view cannot be built while its parent moves")
	}
}

// inotifyNames reads the names of the events waiting on the inotify descriptor in.
func inotifyNames(t *testing.T, in int) []string {
	t.Helper()
	var names []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(in, buf)
		if errors.Is(err, unix.EAGAIN) {
			return names
		}
		if err != nil {
			t.Fatalf("read inotify: %v", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			names = append(names, strings.TrimRight(string(name), "\x00"))
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// procSysProbe is a sysctl the /proc test tries to change: not namespaced, and harmless to
// move by one for the instant the test takes (the grace a lease holder gets, in seconds).
const procSysProbe = "/proc/sys/fs/lease-break-time"

// procWriteTargets are the kernel settings and triggers the /proc test opens for writing
// (never writing to them): a successful open is the escape.
var procWriteTargets = []string{
	"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches",
	"/proc/sys/kernel/sysrq", "/proc/sysrq-trigger", "/proc/irq/default_smp_affinity",
}

// TestSandboxProcSysReadOnly: a command run as root (the server's user here) cannot change
// the host kernel's settings through /proc, whether its /proc is a new one (a pid namespace
// of its own: sysctls that are not namespaced are still the host's) or the host's
// (--linux-sandbox-pid-namespace inherit), under a read-only, a restricted-read and a
// full-write profile. The verdict: procSysProbe, read on the host, never moved.
func TestSandboxProcSysReadOnly(t *testing.T) {
	requireUserNamespaces(t)
	if os.Geteuid() != 0 {
		t.Skip("not root: /proc/sys is not writable by this user, in a sandbox or not")
	}
	if _, err := os.Stat(procSysProbe); err != nil {
		t.Skipf("no %s on this kernel: %v", procSysProbe, err)
	}
	var opens []string
	for _, p := range procWriteTargets {
		opens = append(opens, fmt.Sprintf(`[ -e %[1]s ] && (exec 3>>%[1]s) 2>/dev/null && echo "WRITABLE %[1]s"`, p))
	}
	script := fmt.Sprintf(`v=$(cat %[1]s) && echo $((v+1)) > %[1]s && echo "WROTE %[1]s"
%s
echo done`, procSysProbe, strings.Join(opens, "\n"))
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	for _, pidns := range []string{"isolate", "inherit"} {
		ts := startTestServer(t, withSandboxer(t, pidns, ""))
		for _, prof := range []string{"read-only", "restricted-read", "full-write"} {
			t.Run(pidns+"/"+prof, func(t *testing.T) {
				f := newSBFixture(t)
				var sandbox json.RawMessage
				switch prof {
				case "read-only":
					sandbox = f.sandboxObject(sbReadOnly, viaPipe, "restricted")
				case "restricted-read":
					sandbox = json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"minimal"}},"access":"read"},
   {"path":{"type":"path","path":%s},"access":"write"}]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%s}`, quote(fileURI(f.ws)), quote(fileURI(f.ws))))
				case "full-write":
					mustWrite(t, filepath.Join(f.outside, "secret"), "SECRET\n")
					sandbox = json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"write"},
   {"path":{"type":"path","path":%s},"access":"deny"}]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%s}`, quote(fileURI(filepath.Join(f.outside, "secret"))), quote(fileURI(f.ws))))
				}
				orig, err := os.ReadFile(procSysProbe)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if now, _ := os.ReadFile(procSysProbe); string(now) != string(orig) {
						os.WriteFile(procSysProbe, orig, 0) // the sandbox changed it: put the host back
					}
				})
				r := f.runServer(t, ts, sandbox, false, script)
				if !strings.Contains(r.out, "done") {
					t.Fatalf("exit %d: the script did not run:\n%s", r.exit, r.out)
				}
				if now, err := os.ReadFile(procSysProbe); err != nil || string(now) != string(orig) {
					t.Errorf("the sandbox changed the host's %s: %q, was %q (%v)", procSysProbe, now, orig, err)
				}
				if strings.Contains(r.out, "WRITABLE") || strings.Contains(r.out, "WROTE") {
					t.Errorf("kernel settings writable in the sandbox:\n%s", r.out)
				}
			})
		}
	}
}

// TestSandboxShmBounded: /dev/shm in the sandbox is a tmpfs of --linux-sandbox-shm-size
// bytes (64 MiB unless set), not half of the host's memory: writing past it is ENOSPC. The
// size is read on the host, from the running command's mountinfo.
func TestSandboxShmBounded(t *testing.T) {
	requireUserNamespaces(t)
	for _, tc := range []struct {
		name  string
		limit int64 // 0: the default
		want  string
	}{
		{"default", 0, fmt.Sprintf("size=%dk", defaultShmSize>>10)},
		{"1M", 1 << 20, "size=1024k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sbx, err := newSandboxer("isolate", "")
			if err != nil {
				t.Fatal(err)
			}
			if tc.limit != 0 {
				sbx.limitShm(tc.limit)
			}
			ts := startTestServer(t, func(s *server) { s.sandbox = sbx })
			f := newSBFixture(t)
			size := tc.limit
			if size == 0 {
				size = defaultShmSize
			}
			sleep := uniqueSleepArg()
			script := fmt.Sprintf(`head -c %d /dev/zero > /dev/shm/fill 2>err.txt; echo "rc=$?"; cat err.txt; exec sleep %s`, size+(1<<20), sleep)
			tcl := ts.connect(t)
			id := nextSBID()
			tcl.mustCall("process/start", map[string]any{
				"processId": id, "argv": []string{"sh", "-c", script}, "cwd": fileURI(f.ws), "env": f.env(), "tty": false,
				"sandbox": f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted"),
			})
			pid := waitHostPid(t, "sleep", sleep)
			info, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
			if err != nil {
				t.Fatal(err)
			}
			var shm string
			for _, line := range strings.Split(string(info), "\n") {
				if fields := strings.Fields(line); len(fields) > 4 && fields[4] == "/dev/shm" {
					shm = line
				}
			}
			tcl.mustCall("process/terminate", map[string]any{"processId": id})
			r := waitClosed(tcl, id)
			if !strings.Contains(shm, tc.want+",") && !strings.HasSuffix(shm, tc.want) {
				t.Errorf("the sandbox's /dev/shm is mounted %q, want %s", shm, tc.want)
			}
			if out := r.stdout(); !strings.Contains(out, "rc=1") || !strings.Contains(out, "No space left on device") {
				t.Errorf("writing %d bytes into a %d-byte /dev/shm: want ENOSPC, got:\n%s", size+(1<<20), size, out)
			}
		})
	}
}

// TestSandboxShmSizeFlag: --linux-sandbox-shm-size takes bytes or a K, M or G suffix, and
// refuses 0, negative and malformed sizes with a usage error.
func TestSandboxShmSizeFlag(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want int64 // 0: refused
	}{
		{"", defaultShmSize}, {"65536", 65536}, {"512k", 512 << 10}, {"64M", 64 << 20}, {"2G", 2 << 30},
		{"0", 0}, {"0M", 0}, {"-1", 0}, {"1T", 0}, {"M", 0}, {"lots", 0}, {"99999999999G", 0},
	} {
		var o cliOptions
		fs := newFlagSet(&o)
		args := []string{}
		if tc.arg != "" {
			args = []string{"--linux-sandbox-shm-size", tc.arg}
		}
		err := fs.Parse(args)
		switch {
		case tc.want == 0 && err == nil:
			t.Errorf("--linux-sandbox-shm-size %q: accepted as %d, want refused", tc.arg, o.shmSize)
		case tc.want != 0 && err != nil:
			t.Errorf("--linux-sandbox-shm-size %q: %v", tc.arg, err)
		case tc.want != 0 && int64(o.shmSize) != tc.want:
			t.Errorf("--linux-sandbox-shm-size %q = %d, want %d", tc.arg, o.shmSize, tc.want)
		}
	}
	var stderr strings.Builder
	if code := run([]string{"--linux-sandbox-shm-size", "0"}, strings.NewReader(""), io.Discard, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), `invalid value "0" for flag -linux-sandbox-shm-size: want a size above 0`) {
		t.Errorf("--linux-sandbox-shm-size 0: exit %d, stderr %q; want 2 and a usage error", code, stderr.String())
	}
}

// TestSandboxMountLegitSymlinks: the symlinks a path legitimately goes through still lead
// where they lead once the view is built from descriptors: a workspace reached through a
// symlink outside every writable root (a symlinked home) is writable, under full and
// restricted read, and a readable root named through a symlink (/var/run -> /run) is there.
func TestSandboxMountLegitSymlinks(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	for _, prof := range []string{"full-read", "restricted-read"} {
		t.Run(prof, func(t *testing.T) {
			f := newSBFixture(t)
			real := filepath.Join(f.base, "home-real")
			mustMkdir(t, filepath.Join(real, "ws"))
			link := filepath.Join(f.base, "home")
			mustSymlink(t, "home-real", link)
			f.ws = filepath.Join(link, "ws")
			f.roots = []string{f.ws}
			sandbox := f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted")
			script := `echo hi > inside.txt && cat inside.txt`
			if prof == "restricted-read" {
				sandbox = json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"minimal"}},"access":"read"},
   {"path":{"type":"path","path":"file:///var/run"},"access":"read"},
   {"path":{"type":"path","path":%s},"access":"write"}]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%s}`, quote(fileURI(f.ws)), quote(fileURI(f.ws))))
				if fi, err := os.Lstat("/var/run"); err == nil && fi.Mode()&os.ModeSymlink != 0 {
					script += ` && test -L /var/run && test -d /var/run/ && echo varrun ok`
				}
			}
			r := f.runServer(t, ts, sandbox, false, script)
			if r.exit != 0 || !strings.Contains(r.out, "hi") {
				t.Errorf("exit %d: the workspace behind a symlink is not writable:\n%s", r.exit, r.out)
			}
			if strings.Contains(script, "varrun") && !strings.Contains(r.out, "varrun ok") {
				t.Errorf("/var/run is not the link to /run in the view:\n%s", r.out)
			}
			wantFile(t, filepath.Join(real, "ws", "inside.txt"), "hi\n")
		})
	}
}

// TestSandboxOtherTmpfsCannotBeFilled: /dev/shm is the only tmpfs of the view the command can
// write. A restricted-read root (an empty tmpfs) and /dev (a tmpfs) are read-only, and the
// staging tmpfs the view was built on is detached before the command runs: none of them is in
// its mount table, read on the host.
func TestSandboxOtherTmpfsCannotBeFilled(t *testing.T) {
	requireUserNamespaces(t)
	ts := startTestServer(t)
	f := newSBFixture(t)
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	sandbox := json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"minimal"}},"access":"read"},
   {"path":{"type":"path","path":%s},"access":"write"}]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%s}`, quote(fileURI(f.ws)), quote(fileURI(f.ws))))
	sleep := uniqueSleepArg()
	tc := ts.connect(t)
	id := nextSBID()
	tc.mustCall("process/start", map[string]any{
		"processId": id, "argv": []string{"sh", "-c", `echo x > /fill; echo x > /dev/fill; exec sleep ` + sleep},
		"cwd": fileURI(f.ws), "env": f.env(), "tty": false, "sandbox": sandbox,
	})
	pid := waitHostPid(t, "sleep", sleep)
	info, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	tc.mustCall("process/terminate", map[string]any{"processId": id})
	r := waitClosed(tc, id)
	seen := map[string]bool{}
	for _, line := range strings.Split(string(info), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 6 {
			continue
		}
		seen[fields[4]] = true
		switch mp, opts := fields[4], fields[5]; {
		case mp == oldRoot || mp == newRoot || strings.HasPrefix(mp, oldRoot+"/"):
			t.Errorf("the staging tree is still mounted in the sandbox: %s", line)
		case (mp == "/" || mp == "/dev") && !strings.HasPrefix(opts, "ro"):
			t.Errorf("%s is writable in the sandbox: %s", mp, line)
		}
	}
	if !seen["/"] || !seen["/dev"] || !seen["/dev/shm"] {
		t.Errorf("the sandbox's mount table lacks /, /dev or /dev/shm:\n%s", info)
	}
	if n := strings.Count(r.stdout()+r.stderr(), "Read-only file system"); n != 2 {
		t.Errorf("want both writes refused with EROFS, got:\n%s", r.stdout()+r.stderr())
	}
}

// TestSandboxKernelFSElsewhereReadOnly: a procfs or sysfs the host has mounted somewhere other
// than /proc and /sys (a chroot's /proc inside the workspace, a container host's /host/proc)
// is read-only in the sandbox too: under a full-write profile, which brings the whole host
// along, and under workspace-write, whose writable root brings what is mounted in it. Before,
// both let a command run as root change the host's kernel settings through it (the probe moved
// on the host). The verdict: procSysProbe, read on the host, never moved.
func TestSandboxKernelFSElsewhereReadOnly(t *testing.T) {
	requireUserNamespaces(t)
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot mount a proc elsewhere, and /proc/sys is not writable by this user anyway")
	}
	if _, err := os.Stat(procSysProbe); err != nil {
		t.Skipf("no %s on this kernel: %v", procSysProbe, err)
	}
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	for _, c := range []struct{ name, pidns, mech string }{
		{"isolate", "isolate", ""}, {"inherit", "inherit", ""}, {"landlock", "isolate", "landlock"},
	} {
		if c.mech == "landlock" && landlockABI() == 0 {
			continue
		}
		ts := startTestServer(t, withSandboxer(t, c.pidns, c.mech))
		for _, prof := range []string{"full-write", "workspace-write"} {
			if c.mech == "landlock" && prof == "full-write" {
				continue // a deny under full read: Landlock refuses the profile
			}
			t.Run(c.name+"/"+prof, func(t *testing.T) {
				f := newSBFixture(t)
				var sandbox json.RawMessage
				dir := f.outside // outside every root: only full-write reaches it writable
				if prof == "workspace-write" {
					dir = filepath.Join(f.ws, "chroot")
					sandbox = f.sandboxObject(sbWorkspaceWrite, viaPipe, "restricted")
				} else {
					mustWrite(t, filepath.Join(f.outside, "secret"), "SECRET\n")
					sandbox = json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"write"},
   {"path":{"type":"path","path":%s},"access":"deny"}]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%s}`, quote(fileURI(filepath.Join(f.outside, "secret"))), quote(fileURI(f.ws))))
				}
				proc, sys := filepath.Join(dir, "proc"), filepath.Join(dir, "sys")
				for _, m := range []struct{ point, fsType string }{{proc, "proc"}, {sys, "sysfs"}} {
					mustMkdir(t, m.point)
					if err := unix.Mount(m.fsType, m.point, m.fsType, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
						t.Skipf("mount a %s at %s: %v", m.fsType, m.point, err)
					}
					t.Cleanup(func() {
						if err := unix.Unmount(m.point, unix.MNT_DETACH); err != nil {
							t.Errorf("unmount %s: %v", m.point, err)
						}
					})
				}
				orig, err := os.ReadFile(procSysProbe)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if now, _ := os.ReadFile(procSysProbe); string(now) != string(orig) {
						os.WriteFile(procSysProbe, orig, 0) // the sandbox changed it: put the host back
					}
				})
				probe := proc + strings.TrimPrefix(procSysProbe, "/proc")
				script := fmt.Sprintf(`v=$(cat %[1]s) && echo $((v+1)) > %[1]s && echo "WROTE %[1]s"
for p in %[2]s/sysrq-trigger %[2]s/sys/kernel/core_pattern %[3]s/kernel/uevent_helper %[3]s/kernel/mm/transparent_hugepage/enabled; do
  [ -e $p ] && (exec 3>>$p) 2>/dev/null && echo "WRITABLE $p"
done
echo done`, probe, proc, sys)
				r := f.runServer(t, ts, sandbox, false, script)
				if !strings.Contains(r.out, "done") {
					t.Fatalf("exit %d: the script did not run:\n%s", r.exit, r.out)
				}
				if now, err := os.ReadFile(procSysProbe); err != nil || string(now) != string(orig) {
					t.Errorf("the sandbox changed the host's %s through %s: %q, was %q (%v)", procSysProbe, proc, now, orig, err)
				}
				if strings.Contains(r.out, "WRITABLE") || strings.Contains(r.out, "WROTE") {
					t.Errorf("kernel settings writable in the sandbox:\n%s", r.out)
				}
			})
		}
	}
}

// TestSandboxDenyCannotBeMovedAway: a deny entry in a directory the sandbox may write cannot
// be escaped by renaming a directory above it. Before, a command renamed ws/sub (holding the
// denied ws/sub/deep/secret) to ws/sub2: its own view kept the deny on the moved file, but the
// next sandbox, whose deny entry named the old path (now missing), read ws/sub2/deep/secret.
// Under workspace-write and under full write; the verdict on the host: every directory on
// the denied path is still where it was, and the second command printed no secret.
func TestSandboxDenyCannotBeMovedAway(t *testing.T) {
	requireUserNamespaces(t)
	quote := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	ts := startTestServer(t)
	for _, prof := range []string{"workspace-write", "full-write"} {
		t.Run(prof, func(t *testing.T) {
			f := newSBFixture(t)
			dir := f.ws
			first := "read"
			if prof == "full-write" {
				dir, first = f.outside, "write"
			}
			secret := filepath.Join(dir, "sub", "deep", "secret")
			mustMkdir(t, filepath.Dir(secret))
			mustWrite(t, secret, "SECRET\n")
			sandbox := json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":%s},
   {"path":{"type":"path","path":%s},"access":"write"},
   {"path":{"type":"path","path":%s},"access":"deny"}]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%s}`, quote(first), quote(fileURI(f.ws)), quote(fileURI(secret)), quote(fileURI(f.ws))))
			r := f.runServer(t, ts, sandbox, false, fmt.Sprintf(`cd %s
mv sub/deep sub/deep2 && echo "MOVED deep"
mv sub sub2 && echo "MOVED sub"
echo done`, dir))
			if !strings.Contains(r.out, "done") {
				t.Fatalf("exit %d: the first script did not run:\n%s", r.exit, r.out)
			}
			if _, err := os.Stat(secret); err != nil {
				t.Errorf("after the first command the denied file is no longer at %s (%v):\n%s", secret, err, r.out)
			}
			r = f.runServer(t, ts, sandbox, false, fmt.Sprintf(`cd %s
cat sub2/deep/secret sub/deep2/secret sub2/deep2/secret sub/deep/secret 2>/dev/null
echo done`, dir))
			if !strings.Contains(r.out, "done") {
				t.Fatalf("exit %d: the second script did not run:\n%s", r.exit, r.out)
			}
			if strings.Contains(r.out, "SECRET") {
				t.Errorf("the next sandbox read the denied file:\n%s", r.out)
			}
		})
	}
}
