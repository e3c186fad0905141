package main

// The tests that back the Linux-only capability flags of initialize (docs/protocol.md §9.1,
// docs/sandbox.md §2): each fails if the flag stopped holding. Separate from
// capabilities_test.go because they need the Linux sandbox fixtures.

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// rootWriteWithDeny is a sandbox object that makes `/` writable and denies deny: the profile
// of an approved write to `/` that keeps a restriction.
func rootWriteWithDeny(cwd, deny string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"write"},
   {"path":{"type":"path","path":%q},"access":"none"}]},"network":"restricted"},
  "windowsSandboxLevel":"disabled","cwd":%q}`, fileURI(deny), fileURI(cwd)))
}

// TestCapabilityLinuxRootWritePreservesDevices backs linuxRootWritePreservesDevices: with `/`
// writable and a deny entry (the host tree bound read-write in the view), /dev is still the
// sandbox's device directory: /dev/null is the null device and takes writes, /dev/zero and
// /dev/urandom read, and the host's /dev/null is untouched. The deny still holds.
func TestCapabilityLinuxRootWritePreservesDevices(t *testing.T) {
	requireUserNamespaces(t)
	f := newSBFixture(t)
	denied := filepath.Join(f.outside, "denied.txt")
	mustWrite(t, denied, "secret")
	var before unix.Stat_t
	if err := unix.Stat("/dev/null", &before); err != nil {
		t.Fatal(err)
	}
	ts := startTestServer(t, withSandboxer(t, "isolate", ""))
	r := f.runServer(t, ts, rootWriteWithDeny(f.ws, denied), false, `
set -e
test -c /dev/null
echo discarded > /dev/null
: > /dev/null
test "$(cat /dev/null | wc -c)" -eq 0
test "$(head -c 4096 /dev/zero | wc -c)" -eq 4096
test "$(head -c 16 /dev/urandom | wc -c)" -eq 16
echo x > "$WS/written"
echo devices-ok
(echo x > "$OUT/denied.txt") 2>/dev/null && echo denied-written || true`)
	if r.exit != 0 || !strings.Contains(r.out, "devices-ok") || r.sandboxType != "linuxSeccomp" {
		t.Fatalf("exit %d, sandboxType %q, output %q", r.exit, r.sandboxType, r.out)
	}
	wantFile(t, filepath.Join(f.ws, "written"), "x\n")
	wantFile(t, denied, "secret")
	var after unix.Stat_t
	if err := unix.Stat("/dev/null", &after); err != nil {
		t.Fatal(err)
	}
	if after.Mode&unix.S_IFMT != unix.S_IFCHR || after.Rdev != before.Rdev || after.Ino != before.Ino {
		t.Errorf("the host's /dev/null changed: mode %o rdev %d ino %d, was rdev %d ino %d", after.Mode, after.Rdev, after.Ino, before.Rdev, before.Ino)
	}
}

// TestCapabilityLinuxApprovedRootWritePreservesRestrictions backs
// linuxApprovedRootWritePreservesRestrictions: with `/` writable and a deny entry, `/` is a
// writable root whose protected names stay read-only: /.git, /.codex and /.agents as symlinks
// to directories elsewhere can neither be written through, nor their targets written, nor
// the links removed, and a missing /.aws cannot be made. Every verdict is read on the host.
// The test makes those names at the host's `/`, so it skips where any of them exists.
func TestCapabilityLinuxApprovedRootWritePreservesRestrictions(t *testing.T) {
	requireUserNamespaces(t)
	names := []string{"git", "codex", "agents"}
	for _, n := range append(names, "aws") {
		if _, err := os.Lstat("/." + n); err == nil {
			t.Skipf("/.%s exists on this host: the test makes its own there", n)
		}
	}
	f := newSBFixture(t)
	denied := filepath.Join(f.outside, "denied.txt")
	mustWrite(t, denied, "secret")
	for _, n := range names {
		target := filepath.Join(f.outside, n)
		mustMkdir(t, target)
		mustWrite(t, filepath.Join(target, "f"), "orig")
		link := "/." + n
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // ours, or what the command made of it when the test failed
			if got, err := os.Readlink(link); err == nil && pathWithin(got, f.base) {
				os.Remove(link)
			}
		})
	}
	t.Cleanup(func() {
		os.Remove("/.aws/f")
		os.Remove("/.aws")
	})
	snap := func() map[string]string {
		out := map[string]string{}
		for _, n := range names {
			target, _ := os.Readlink("/." + n)
			b, _ := os.ReadFile(filepath.Join(f.outside, n, "f"))
			out[n] = target + " " + string(b)
		}
		return out
	}
	before := snap()
	ts := startTestServer(t, withSandboxer(t, "isolate", ""))
	r := f.runServer(t, ts, rootWriteWithDeny(f.ws, denied), false, `
for n in git codex agents; do
  (echo x >> "/.$n/f") 2>/dev/null && echo "wrote through /.$n"
  (echo x >> "$OUT/$n/f") 2>/dev/null && echo "wrote the target of /.$n"
  rm -f "/.$n" 2>/dev/null
  ln -sfn "$WS" "/.$n" 2>/dev/null
done
mkdir /.aws 2>/dev/null; touch /.aws/f 2>/dev/null && echo "made /.aws/f"
echo x > "$WS/written"
echo done`)
	if r.exit != 0 || !strings.Contains(r.out, "done") || r.sandboxType != "linuxSeccomp" {
		t.Fatalf("exit %d, sandboxType %q, output %q", r.exit, r.sandboxType, r.out)
	}
	wantFile(t, filepath.Join(f.ws, "written"), "x\n") // `/` is writable
	if after := snap(); !maps.Equal(before, after) {
		t.Errorf("the protected links or their targets changed on the host:\nbefore %v\nafter  %v\noutput %q", before, after, r.out)
	}
	if _, err := os.Lstat("/.aws/f"); err == nil {
		t.Errorf("the command made /.aws/f on the host (output %q)", r.out)
	}
	wantFile(t, denied, "secret")
}

// TestCapabilitySandboxedFileStreaming backs sandboxedFileStreaming: fs/open and
// fs/readBlock/fs/writeBlock honour the request's sandbox. Reads inside the readable root
// stream, while a path outside it, a denied path in it, and a replace under a read-only
// profile are refused, with the host's files unchanged; a replace under a writable profile
// lands on the host.
func TestCapabilitySandboxedFileStreaming(t *testing.T) {
	tc := sandboxedFSServer(t).connect(t)
	f := makeEscapeFixture(t)
	fsWrite(t, filepath.Join(f.allowed, "private.txt"), "private")
	deny := `,{"path":{"type":"path","path":"` + fileURI(filepath.Join(f.allowed, "private.txt")) + `"},"access":"none"}]`
	ro := json.RawMessage(strings.Replace(readOnlySandbox(f.allowed), `"access":"read"}]`, `"access":"read"}`+deny, 1))
	ws := json.RawMessage(strings.Replace(workspaceWriteSandboxOf(f.allowed), `"access":"write"}]`, `"access":"write"}`+deny, 1))
	tc.mustCall("fs/open", map[string]any{"handleId": "r", "path": fileURI(filepath.Join(f.allowed, "file.txt")), "sandbox": ro})
	if res := tc.mustCall("fs/readBlock", map[string]any{"handleId": "r", "offset": 1, "len": 2}); string(res) != `{"chunk":"`+b64("il")+`","eof":false}` {
		t.Errorf("readBlock: %s", res)
	}
	tc.mustCall("fs/close", map[string]any{"handleId": "r"})
	snap := f.snapshot(t)
	for _, c := range []struct {
		what   string
		params map[string]any
	}{
		{"read outside the root", map[string]any{"handleId": "a", "path": fileURI(filepath.Join(f.outside, "secret.txt")), "sandbox": ro}},
		{"read a denied file", map[string]any{"handleId": "b", "path": fileURI(filepath.Join(f.allowed, "private.txt")), "sandbox": ro}},
		{"replace under read-only", map[string]any{"handleId": "c", "path": fileURI(filepath.Join(f.allowed, "file.txt")), "mode": "replace", "sandbox": ro}},
		{"replace a denied file", map[string]any{"handleId": "d", "path": fileURI(filepath.Join(f.allowed, "private.txt")), "mode": "replace", "sandbox": ws}},
		{"replace outside the root", map[string]any{"handleId": "e", "path": fileURI(filepath.Join(f.outside, "outside.txt")), "mode": "replace", "sandbox": ws}},
	} {
		_, err := tc.call("fs/open", c.params)
		checkSandboxDenied(t, c.what, err)
	}
	if after := f.snapshot(t); !maps.Equal(snap, after) {
		t.Errorf("refused opens changed the tree:\nbefore %v\nafter  %v", snap, after)
	}
	tc.mustCall("fs/open", map[string]any{"handleId": "w", "path": fileURI(filepath.Join(f.allowed, "streamed.txt")), "mode": "replace", "sandbox": ws})
	tc.mustCall("fs/writeBlock", map[string]any{"handleId": "w", "offset": 0, "chunk": b64("streamed")})
	tc.mustCall("fs/close", map[string]any{"handleId": "w"})
	if got := fsReadString(t, filepath.Join(f.allowed, "streamed.txt")); got != "streamed" {
		t.Errorf("streamed.txt holds %q", got)
	}
}
