package main

// Landlock fallback (landlock_linux.go) against the real kernel. A Landlock domain cannot be
// lifted from a thread, so every escape case runs in a child: the test binary re-executed as
// TestLandlockChild, which restricts its locked thread and execs /bin/sh from it, so that
// the probe script runs under exactly the domain the sandbox stage would give a command.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Environment of the TestLandlockChild re-exec: the rules as JSON and the probe script.
const (
	landlockRulesEnv = "EXEC_SERVER_TEST_LANDLOCK_RULES"
	landlockProbeEnv = "EXEC_SERVER_TEST_LANDLOCK_PROBE"
)

// landlockSetupFailed is the child's exit code when it could not restrict itself or exec the
// probe, so that it is never mistaken for a probe's own answer.
const landlockSetupFailed = 97

// TestLandlockChild is the re-exec'd child of the escape tests; run directly it only skips.
func TestLandlockChild(t *testing.T) {
	rulesJSON, ok := os.LookupEnv(landlockRulesEnv)
	if !ok {
		t.Skip("helper process of TestLandlockEscapes")
	}
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "landlock child: %s: %v\n", what, err)
		os.Exit(landlockSetupFailed)
	}
	runtime.LockOSThread() // never unlocked: the thread ends in exec
	var r landlockRules
	if err := json.Unmarshal([]byte(rulesJSON), &r); err != nil {
		fail("decode rules", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail("no_new_privs", err)
	}
	if err := restrictThreadLandlock(r); err != nil {
		fail("restrict", err)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, landlockRulesEnv+"=") || strings.HasPrefix(kv, landlockProbeEnv+"=")
	})
	err := syscall.Exec("/bin/sh", []string{"sh", "-c", os.Getenv(landlockProbeEnv)}, env)
	fail("exec /bin/sh", err)
}

// runLandlockProbe runs probe under r in a child and returns its exit code and output.
func runLandlockProbe(t *testing.T, r landlockRules, probe string) (int, string) {
	t.Helper()
	rulesJSON, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLandlockChild$")
	cmd.Env = append(os.Environ(), landlockRulesEnv+"="+string(rulesJSON), landlockProbeEnv+"="+probe)
	out, err := cmd.CombinedOutput()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run child: %v", err)
	}
	if code == landlockSetupFailed {
		t.Fatalf("child setup failed:\n%s", out)
	}
	return code, string(out)
}

// requireLandlock skips when the kernel has no Landlock, the one reason to skip.
func requireLandlock(t *testing.T) int {
	t.Helper()
	abi := landlockABI()
	if abi == 0 {
		t.Skip("Landlock is unavailable or disabled on this kernel (landlock_create_ruleset version query failed)")
	}
	return abi
}

// landlockLayout is the tree the escape cases run in, all paths resolved:
//
//	ws/            the writable root
//	  sub/         existing subdirectory, holding kept
//	  file         existing top-level file
//	  .git/config  protected
//	  link         symlink to ../outside
//	  hard         hard link to outside/h
//	  private/p    denied in the deny profile
//	outside/       secret, h, x
//	wslink         symlink to ws/sub: the writable root of the linked profile, without any
//	               protected name
type landlockLayout struct{ ws, out string }

func newLandlockLayout(t *testing.T) landlockLayout {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := landlockLayout{ws: filepath.Join(root, "ws"), out: filepath.Join(root, "outside")}
	for _, d := range []string{l.ws + "/sub", l.ws + "/.git", l.ws + "/private", l.out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		l.ws + "/sub/kept":    "kept\n",
		l.ws + "/file":        "top\n",
		l.ws + "/.git/config": "[core]\n",
		l.ws + "/private/p":   "private\n",
		l.out + "/secret":     "secret\n",
		l.out + "/h":          "h\n",
		l.out + "/x":          "x\n",
	}
	for name, content := range files {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(l.out, l.ws+"/link"); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(l.out+"/h", l.ws+"/hard"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ws/sub", filepath.Join(root, "wslink")); err != nil {
		t.Fatal(err)
	}
	return l
}

// Profiles of the escape cases.
const (
	llWorkspace  = "workspace"  // full read, ws writable
	llRestricted = "restricted" // read ws only (plus the minimum), nothing writable
	llDeny       = "deny"       // restricted read, ws writable, ws/private denied
	llLinked     = "linked"     // full read, ws/sub writable, named through the symlink wslink
)

func (l landlockLayout) profile(kind string) *sandboxProfile {
	switch kind {
	case llWorkspace:
		return &sandboxProfile{Kind: profileManaged, FullRead: true, Write: []string{l.ws}, Protected: protectedPaths([]string{l.ws})}
	case llRestricted:
		return &sandboxProfile{Kind: profileManaged, Read: []string{l.ws}}
	case llLinked:
		link := filepath.Join(filepath.Dir(l.ws), "wslink")
		return &sandboxProfile{Kind: profileManaged, FullRead: true, Write: []string{link}, Protected: protectedPaths([]string{link})}
	case llDeny:
		return &sandboxProfile{Kind: profileManaged, Write: []string{l.ws}, Deny: []string{l.ws + "/private"}, Protected: protectedPaths([]string{l.ws})}
	}
	panic("unknown profile " + kind)
}

// firstBlockDevice is a block device in /dev this process can open for reading (root
// usually can: a raw disk), "" when there is none.
func firstBlockDevice() string {
	entries, _ := os.ReadDir("/dev")
	for _, e := range entries {
		if e.Type()&os.ModeDevice == 0 || e.Type()&os.ModeCharDevice != 0 {
			continue
		}
		if f, err := os.Open("/dev/" + e.Name()); err == nil {
			f.Close()
			return "/dev/" + e.Name()
		}
	}
	return ""
}

// TestLandlockEscapes runs each probe under the domain of its profile. A probe is a shell
// script; $WS and $OUT name the two trees. ok says whether it must exit 0; a failing one must
// say errText (the kernel's EACCES or EXDEV, proof that Landlock refused, since the tests run
// as root). check then inspects the tree from outside the sandbox.
func TestLandlockEscapes(t *testing.T) {
	abi := requireLandlock(t)
	blockDev, noBlockDev := firstBlockDevice(), ""
	if blockDev == "" {
		noBlockDev = "no block device in /dev"
	}
	const (
		eacces = "Permission denied"
		exdev  = "cross-device link"
		eperm  = "not permitted"
	)
	noPython := ""
	if _, err := exec.LookPath("python3"); err != nil {
		noPython = "no python3 to open a pty with"
	}
	cases := []struct {
		name, profile, probe string
		ok                   bool
		errText              string
		minABI               int
		skip                 string
		check                func(t *testing.T, l landlockLayout)
	}{
		{name: "write below a subdirectory", profile: llWorkspace, probe: `echo new > "$WS/sub/f"`, ok: true,
			check: wantContent("ws/sub/f", "new\n")},
		{name: "mkdir and remove below a subdirectory", profile: llWorkspace,
			probe: `mkdir "$WS/sub/d" && echo y > "$WS/sub/d/f" && mv "$WS/sub/d/f" "$WS/sub/g" && rm -r "$WS/sub/d" "$WS/sub/g" "$WS/sub/kept"`, ok: true,
			check: wantMissing("ws/sub/d", "ws/sub/g", "ws/sub/kept")},
		{name: "overwrite a top-level file", profile: llWorkspace, probe: `echo new > "$WS/file"`, ok: true,
			check: wantContent("ws/file", "new\n")},
		{name: "write outside", profile: llWorkspace, probe: `echo pwned > "$OUT/secret"`, errText: eacces,
			check: wantContent("outside/secret", "secret\n")},
		{name: "create outside", profile: llWorkspace, probe: `echo pwned > "$OUT/new"`, errText: eacces,
			check: wantMissing("outside/new")},
		{name: "write through a symlink", profile: llWorkspace, probe: `echo pwned > "$WS/link/new"`, errText: eacces,
			check: wantMissing("outside/new")},
		{name: "dot-dot escape", profile: llWorkspace, probe: `echo pwned > "$WS/sub/../../outside/new"`, errText: eacces,
			check: wantMissing("outside/new")},
		{name: "write .git/config", profile: llWorkspace, probe: `echo pwned > "$WS/.git/config"`, errText: eacces,
			check: wantContent("ws/.git/config", "[core]\n")},
		{name: "create in .git", profile: llWorkspace, probe: `echo pwned > "$WS/.git/hook"`, errText: eacces,
			check: wantMissing("ws/.git/hook")},
		{name: "mkdir .codex", profile: llWorkspace, probe: `mkdir "$WS/.codex"`, errText: eacces,
			check: wantMissing("ws/.codex")},
		{name: "read .git/config", profile: llWorkspace, probe: `grep -q core "$WS/.git/config"`, ok: true},
		{name: "append through a hard link", profile: llWorkspace, probe: `echo more >> "$WS/hard"`, ok: true,
			check: func(t *testing.T, l landlockLayout) {
				wantContent("outside/h", "h\nmore\n")(t, l)
				a, errA := os.Stat(l.ws + "/hard")
				b, errB := os.Stat(l.out + "/h")
				if errA != nil || errB != nil || !os.SameFile(a, b) {
					t.Errorf("ws/hard and outside/h are no longer one inode (%v, %v)", errA, errB)
				}
			}},
		{name: "hard link from outside", profile: llWorkspace, probe: `ln "$OUT/x" "$WS/sub/y"`, errText: exdev,
			check: wantMissing("ws/sub/y")},
		{name: "move out", profile: llWorkspace, probe: `mv "$WS/sub/kept" "$OUT/"`, errText: eacces,
			check: func(t *testing.T, l landlockLayout) {
				wantContent("ws/sub/kept", "kept\n")(t, l)
				wantMissing("outside/kept")(t, l)
			}},
		{name: "device node below a subdirectory", profile: llWorkspace, probe: `mknod "$WS/sub/blk" b 7 0`, errText: eacces,
			check: wantMissing("ws/sub/blk")},
		{name: "open a pty", profile: llRestricted, skip: noPython, ok: true,
			probe: `python3 -c 'import os, termios; m, s = os.openpty(); termios.tcgetattr(s); os.write(s, b"ok\n"); assert os.read(m, 8) == b"ok\r\n"'`},
		{name: "dev/null writable", profile: llWorkspace, probe: `echo x > /dev/null && head -c 4 /dev/zero > /dev/null`, ok: true},
		{name: "limitation: create at the top level", profile: llWorkspace, probe: `echo x > "$WS/newtop"`, errText: eacces,
			check: wantMissing("ws/newtop")},
		{name: "limitation: remove at the top level", profile: llWorkspace, probe: `rm "$WS/file"`, errText: eacces,
			check: wantContent("ws/file", "top\n")},
		{name: "signal the parent", profile: llWorkspace, minABI: landlockABIScoped,
			probe: fmt.Sprintf(`kill -0 %d`, os.Getpid()), errText: eperm},

		{name: "restricted: read outside", profile: llRestricted, probe: `cat "$OUT/secret"`, errText: eacces},
		{name: "restricted: read through a symlink", profile: llRestricted, probe: `cat "$WS/link/secret"`, errText: eacces},
		{name: "restricted: dot-dot read", profile: llRestricted, probe: `cat "$WS/sub/../../outside/secret"`, errText: eacces},
		{name: "restricted: read the root", profile: llRestricted, probe: `ls "$WS/sub" && cat "$WS/file" && ls -a "$WS" | grep -q private`, ok: true},
		{name: "restricted: minimal system dirs", profile: llRestricted, probe: `cat /etc/hostname > /dev/null && ls /usr/bin > /dev/null`, ok: true},
		{name: "restricted: no write", profile: llRestricted, probe: `echo x > "$WS/sub/f"`, errText: eacces,
			check: wantMissing("ws/sub/f")},
		{name: "restricted: raw disk", profile: llRestricted, probe: fmt.Sprintf(`head -c 1 %s > /dev/null`, blockDev), errText: eacces,
			skip: noBlockDev},

		{name: "linked: mkdir .codex", profile: llLinked, probe: `mkdir "$WS/sub/.codex"`, errText: eacces,
			check: wantMissing("ws/sub/.codex")},
		{name: "linked: git init", profile: llLinked, probe: `mkdir "$WS/sub/.git"`, errText: eacces,
			check: wantMissing("ws/sub/.git")},
		{name: "linked: overwrite a top-level file", profile: llLinked, probe: `echo new > "$WS/sub/kept"`, ok: true,
			check: wantContent("ws/sub/kept", "new\n")},

		{name: "deny: read a denied file", profile: llDeny, probe: `cat "$WS/private/p"`, errText: eacces},
		{name: "deny: write a denied dir", profile: llDeny, probe: `echo x > "$WS/private/q"`, errText: eacces,
			check: wantMissing("ws/private/q")},
		{name: "deny: the rest works", profile: llDeny, probe: `cat "$WS/file" && echo new > "$WS/sub/f"`, ok: true,
			check: wantContent("ws/sub/f", "new\n")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if abi < c.minABI {
				t.Skipf("needs Landlock ABI %d, kernel has %d", c.minABI, abi)
			}
			if c.skip != "" {
				t.Skip(c.skip)
			}
			l := newLandlockLayout(t)
			rules, err := landlockRulesFor(l.profile(c.profile))
			if err != nil {
				t.Fatal(err)
			}
			probe := fmt.Sprintf("WS=%s OUT=%s; %s", shellQuote(l.ws), shellQuote(l.out), c.probe)
			code, out := runLandlockProbe(t, rules, probe)
			switch {
			case c.ok && code != 0:
				t.Errorf("probe failed (exit %d), want success:\n%s", code, out)
			case !c.ok && code == 0:
				t.Errorf("probe succeeded, want a denial:\n%s", out)
			case !c.ok && !strings.Contains(out, c.errText):
				t.Errorf("probe failed without %q:\n%s", c.errText, out)
			}
			if c.check != nil {
				c.check(t, l)
			}
		})
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// wantContent checks a file of the layout (relative to its root) holds content.
func wantContent(rel, content string) func(*testing.T, landlockLayout) {
	return func(t *testing.T, l landlockLayout) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(filepath.Dir(l.ws), rel))
		if err != nil || string(got) != content {
			t.Errorf("%s = %q, %v; want %q", rel, got, err, content)
		}
	}
}

// wantMissing checks paths of the layout do not exist.
func wantMissing(rels ...string) func(*testing.T, landlockLayout) {
	return func(t *testing.T, l landlockLayout) {
		t.Helper()
		for _, rel := range rels {
			if _, err := os.Lstat(filepath.Join(filepath.Dir(l.ws), rel)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists (%v)", rel, err)
			}
		}
	}
}

// TestLandlockRulesFor checks how profiles map onto rules: which paths each list must hold
// and must not hold (relative paths are of the layout). It needs no Landlock.
func TestLandlockRulesFor(t *testing.T) {
	type want struct{ read, noRead, write, noWrite, files []string }
	cases := []struct {
		name    string
		profile func(l landlockLayout) *sandboxProfile
		want    want
		err     string
	}{
		{name: "unrestricted",
			profile: func(l landlockLayout) *sandboxProfile {
				return &sandboxProfile{Kind: profileManaged, FullRead: true, FullWrite: true}
			},
			// Written everywhere but in the kernel's file systems (landlockKernelMounts).
			want: want{read: []string{"/"}, write: []string{"/etc", "/tmp"}, noWrite: []string{"/", "/proc", "/sys"}}},
		{name: "workspace: children of the root, never protected names or symlinks",
			profile: func(l landlockLayout) *sandboxProfile { return l.profile(llWorkspace) },
			want: want{read: []string{"/"},
				write:   []string{"/dev/pts", "ws/file", "ws/hard", "ws/private", "ws/sub"},
				noWrite: []string{"ws", "ws/.git", "ws/link", "outside"},
				files:   []string{"/dev/full", "/dev/null", "/dev/ptmx", "/dev/tty", "/dev/zero"}}},
		{name: "restricted read: roots, minimal dirs, /proc, never all of /dev",
			profile: func(l landlockLayout) *sandboxProfile { return l.profile(llRestricted) },
			want: want{read: []string{"ws", "/etc", "/proc", "/dev/urandom"},
				noRead: []string{"/", "/dev", "outside"}, write: []string{"/dev/pts"}, noWrite: []string{"ws"}}},
		{name: "deny splits read and write",
			profile: func(l landlockLayout) *sandboxProfile { return l.profile(llDeny) },
			want: want{read: []string{"ws/sub", "ws/file", "ws/.git", "/etc"},
				noRead: []string{"ws", "ws/private", "/"},
				write:  []string{"ws/sub", "ws/file"}, noWrite: []string{"ws", "ws/private", "ws/.git"}}},
		{name: "deny inside a subdirectory splits it",
			profile: func(l landlockLayout) *sandboxProfile {
				return &sandboxProfile{Kind: profileManaged, Read: []string{l.ws}, Write: []string{l.ws}, Deny: []string{l.ws + "/sub/kept"}}
			},
			want: want{noRead: []string{"ws/sub", "ws/sub/kept"}, noWrite: []string{"ws/sub", "ws/sub/kept"},
				write: []string{"ws/file", "ws/private"}}},
		{name: "a writable file",
			profile: func(l landlockLayout) *sandboxProfile {
				return &sandboxProfile{Kind: profileManaged, FullRead: true, Write: []string{l.ws + "/file"}}
			},
			want: want{write: []string{"ws/file"}, noWrite: []string{"ws"}}},
		{name: "gitdir target in another writable root",
			profile: func(l landlockLayout) *sandboxProfile {
				gitFile := filepath.Join(l.ws, "sub", ".git")
				if err := os.WriteFile(gitFile, []byte("gitdir: "+l.out+"\n"), 0o644); err != nil {
					panic(err)
				}
				write := []string{l.ws + "/sub", filepath.Dir(l.out)}
				return &sandboxProfile{Kind: profileManaged, FullRead: true, Write: write, Protected: protectedPaths(write)}
			},
			want: want{write: []string{"ws/file"}, noWrite: []string{"outside", "ws/sub/.git", "ws/sub"}}},
		{name: "missing roots grant nothing",
			profile: func(l landlockLayout) *sandboxProfile {
				return &sandboxProfile{Kind: profileManaged, FullRead: true, Write: []string{l.ws + "/nope"}}
			},
			want: want{write: []string{"/dev/pts"}, noWrite: []string{"ws/nope"}}},
		{name: "deny under full read",
			profile: func(l landlockLayout) *sandboxProfile {
				return &sandboxProfile{Kind: profileManaged, FullRead: true, Write: []string{l.ws}, Deny: []string{l.ws + "/private"}}
			},
			err: "landlock cannot deny " + "ws/private" + " under a full-read profile"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLandlockLayout(t)
			root := filepath.Dir(l.ws)
			abs := func(p string) string {
				if filepath.IsAbs(p) {
					return p
				}
				return filepath.Join(root, p)
			}
			r, err := landlockRulesFor(c.profile(l))
			if c.err != "" {
				if err == nil || err.Error() != strings.Replace(c.err, "ws/", l.ws+"/", 1) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			check := func(list string, got, has, hasNot []string) {
				for _, p := range has {
					if !slices.Contains(got, abs(p)) {
						t.Errorf("%s lacks %s: %q", list, p, got)
					}
				}
				for _, p := range hasNot {
					if slices.Contains(got, abs(p)) {
						t.Errorf("%s holds %s: %q", list, p, got)
					}
				}
				if !slices.Equal(got, landlockOutermost(slices.Clone(got))) {
					t.Errorf("%s is not sorted, unique and outermost: %q", list, got)
				}
			}
			check("Read", r.Read, c.want.read, c.want.noRead)
			check("Write", r.Write, c.want.write, c.want.noWrite)
			check("WriteFiles", r.WriteFiles, c.want.files, nil)
		})
	}
}

// TestLandlockABIShape checks the handled rights and attr size for each ABI.
func TestLandlockABIShape(t *testing.T) {
	v1 := uint64(landlockRightsV1)
	cases := []struct {
		abi     int
		handled uint64
		size    uintptr
	}{
		{0, 0, 8},
		{1, v1, 8},
		{2, v1 | unix.LANDLOCK_ACCESS_FS_REFER, 8},
		{3, v1 | unix.LANDLOCK_ACCESS_FS_REFER | unix.LANDLOCK_ACCESS_FS_TRUNCATE, 8},
		{4, v1 | unix.LANDLOCK_ACCESS_FS_REFER | unix.LANDLOCK_ACCESS_FS_TRUNCATE, 16},
		{5, v1 | unix.LANDLOCK_ACCESS_FS_REFER | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV, 16},
		{6, v1 | unix.LANDLOCK_ACCESS_FS_REFER | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV, 24},
		{7, v1 | unix.LANDLOCK_ACCESS_FS_REFER | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV, 24},
	}
	for _, c := range cases {
		if got := landlockHandledFS(c.abi); got != c.handled {
			t.Errorf("ABI %d: handled %#x, want %#x", c.abi, got, c.handled)
		}
		if got := landlockAttrSize(c.abi); got != c.size {
			t.Errorf("ABI %d: attr size %d, want %d", c.abi, got, c.size)
		}
	}
	if bits := fmt.Sprintf("%b", v1); strings.Count(bits, "1") != 13 {
		t.Errorf("ABI 1 has %d rights, want 13", strings.Count(bits, "1"))
	}
	if landlockWriteRights&(unix.LANDLOCK_ACCESS_FS_MAKE_CHAR|unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK) != 0 {
		t.Error("write rights let a command create device nodes")
	}
}

// TestLandlockRestrictSkipsWhatItCannotUse: rules naming missing paths, a file among the
// directories of Write and a symlink in Write still build a domain, and the symlink grants
// nothing (in a child, so that this process stays unrestricted).
func TestLandlockRestrictSkipsWhatItCannotUse(t *testing.T) {
	requireLandlock(t)
	l := newLandlockLayout(t)
	r := landlockRules{
		Read:       []string{"/", l.ws + "/nope"},
		Write:      []string{l.ws + "/file", l.ws + "/link", l.ws + "/nope/deeper"},
		WriteFiles: []string{"/dev/null", "/dev/nope"},
	}
	code, out := runLandlockProbe(t, r, fmt.Sprintf(`echo ok > %s && ! echo x > %s/new 2>/dev/null`,
		shellQuote(l.ws+"/file"), shellQuote(l.out)))
	if code != 0 {
		t.Fatalf("probe exit %d:\n%s", code, out)
	}
	wantMissing("outside/new")(t, l)
}
