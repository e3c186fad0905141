//go:build linux

package main

// capabilityRoots/discoverV1 under a root's sandbox (env_discovery.go, docs/protocol.md §9.5):
// real files, a real restricted profile, the real kernel. What a sandbox hides must not be
// read: the verdict is inotify's, on the host (an open of the hidden files by any process,
// the sandbox worker included, is an event), and the answer must not carry their text.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openWatch reports every open of a file in dir, by any process.
type openWatch struct{ fd int }

func watchOpens(t *testing.T, dir string) *openWatch {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_OPEN|unix.IN_ACCESS); err != nil {
		t.Fatalf("inotify watch %s: %v", dir, err)
	}
	return &openWatch{fd}
}

// drain returns the number of opens and reads seen since the last drain. The events of an
// open are queued by the open itself, before the call that made it answers.
func (w *openWatch) drain(t *testing.T) int {
	t.Helper()
	n := 0
	buf := make([]byte, 64<<10)
	for {
		m, err := unix.Read(w.fd, buf)
		if err == unix.EAGAIN {
			return n
		}
		if err != nil {
			t.Fatalf("inotify read: %v", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= m; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			n++
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// TestCapabilityCapabilityDiscoverySandbox backs capabilityDiscoverySandbox: each root is
// discovered under its own sandbox, in the sandbox worker, so that what its profile hides
// (a root outside it, a skill or MCP config reached through a symlink to outside it, a path
// a deny entry covers, a discoverV2 location) is never opened, while what it grants is found
// as without a sandbox.
func TestCapabilityCapabilityDiscoverySandbox(t *testing.T) {
	if !capabilities()["capabilityDiscoverySandbox"] {
		t.Fatal("capabilityDiscoverySandbox is not advertised")
	}
	tc := sandboxedFSServer(t).connect(t)
	base := t.TempDir()
	root, secret := filepath.Join(base, "root"), filepath.Join(base, "secret")
	fsWrite(t, filepath.Join(root, ".codex-plugin", "plugin.json"), `{"name":"p","mcpServers":"./mcp.json"}`)
	fsWrite(t, filepath.Join(root, "skills", "open", "SKILL.md"), "---\nname: open\ndescription: d\n---\n")
	fsWrite(t, filepath.Join(root, "skills", "denied", "SKILL.md"), "denied by an entry")
	fsWrite(t, filepath.Join(secret, "SKILL.md"), "top secret skill")
	fsWrite(t, filepath.Join(secret, "mcp.json"), `{"top":"secret"}`)
	fsMust(t, os.Symlink(secret, filepath.Join(root, "skills", "leak")))
	fsMust(t, os.Symlink(filepath.Join(secret, "mcp.json"), filepath.Join(root, "mcp.json")))
	deniedDir := filepath.Join(root, "skills", "denied")
	secretOpens, deniedOpens := watchOpens(t, secret), watchOpens(t, deniedDir)

	sandbox := json.RawMessage(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"path","path":"` + fileURI(root) + `"},"access":"read"},` +
		`{"path":{"type":"path","path":"` + fileURI(deniedDir) + `"},"access":"none"}]},"network":"restricted"},` +
		`"windowsSandboxLevel":"disabled"}`)
	discover := func(roots ...map[string]any) []rootDiscovery {
		t.Helper()
		var res struct{ Roots []rootDiscovery }
		fsMust(t, json.Unmarshal(tc.mustCall("capabilityRoots/discoverV1", map[string]any{"roots": roots}), &res))
		if len(res.Roots) != len(roots) {
			t.Fatalf("%d roots answered for %d asked", len(res.Roots), len(roots))
		}
		return res.Roots
	}
	skillPaths := func(d rootDiscovery) []string {
		var out []string
		for _, s := range d.Skills {
			out = append(out, strings.TrimPrefix(s.Instructions.Path, fileURI(root)+"/"))
		}
		return out
	}

	// Control: without a sandbox the hidden files are reached, and the watches see it.
	open := discover(map[string]any{"id": "free", "path": fileURI(root)})[0]
	if got := strings.Join(skillPaths(open), " "); got != "skills/denied/SKILL.md skills/leak/SKILL.md skills/open/SKILL.md" {
		t.Fatalf("unsandboxed skills: %s", got)
	}
	if open.Plugin == nil || open.Plugin.MCPConfig == nil || open.Plugin.MCPConfig.Contents != `{"top":"secret"}` {
		t.Fatalf("unsandboxed plugin: %+v", open.Plugin)
	}
	if secretOpens.drain(t) == 0 || deniedOpens.drain(t) == 0 {
		t.Fatal("the watches saw no open of the files discovery read: they cannot judge the sandbox")
	}

	got := discover(
		map[string]any{"id": "confined", "path": fileURI(root), "sandbox": sandbox},
		map[string]any{"id": "hidden", "path": fileURI(secret), "sandbox": sandbox},
	)
	if n := secretOpens.drain(t); n != 0 {
		t.Errorf("the sandboxed discovery opened or read files of the hidden directory (%d events)", n)
	}
	if n := deniedOpens.drain(t); n != 0 {
		t.Errorf("the sandboxed discovery opened or read files of the denied directory (%d events)", n)
	}
	confined, hidden := got[0], got[1]
	if s := strings.Join(skillPaths(confined), " "); s != "skills/open/SKILL.md" {
		t.Errorf("sandboxed skills: %s, want only skills/open/SKILL.md", s)
	}
	if confined.Error != nil || confined.Plugin == nil || confined.Plugin.MCPConfig != nil {
		t.Errorf("sandboxed root: error %v, plugin %+v: want the manifest and no MCP config", confined.Error, confined.Plugin)
	}
	wantErr := "failed to inspect capability root " + fileURI(secret) + ": No such file or directory (os error 2)"
	if hidden.Error == nil || *hidden.Error != wantErr || hidden.Plugin != nil || len(hidden.Skills) != 0 {
		t.Errorf("hidden root: error %v, plugin %+v, skills %v; want error %q and nothing else", hidden.Error, hidden.Plugin, hidden.Skills, wantErr)
	}
	// discoverV2 under a sandbox that reads only ~/.agents/skills: the skills of
	// $CODEX_HOME/skills are neither listed nor opened.
	codexHome, home := filepath.Join(base, "codex-home"), filepath.Join(base, "home")
	t.Setenv("CODEX_HOME", codexHome)
	t.Setenv("HOME", home)
	fsWrite(t, filepath.Join(codexHome, "skills", "hid", "SKILL.md"), "---\nname: hid\ndescription: top secret\n---\n")
	fsWrite(t, filepath.Join(home, ".agents", "skills", "vis", "SKILL.md"), "---\nname: vis\ndescription: visible\n---\n")
	hiddenSkillOpens := watchOpens(t, filepath.Join(codexHome, "skills", "hid"))
	v2Sandbox := `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"path","path":"` + fileURI(filepath.Join(home, ".agents", "skills")) + `"},"access":"read"}]},"network":"restricted"},` +
		`"cwd":"` + fileURI(base) + `","windowsSandboxLevel":"disabled"}`
	v2 := string(tc.mustCall("capabilities/discoverV2", map[string]any{"cwd": fileURI(base), "sandbox": json.RawMessage(v2Sandbox)}))
	if n := hiddenSkillOpens.drain(t); n != 0 {
		t.Errorf("the sandboxed discoverV2 opened the hidden skill (%d events)", n)
	}
	if !strings.Contains(v2, `"name":"vis"`) || strings.Contains(v2, "top secret") || strings.Contains(v2, `"hid"`) {
		t.Errorf("sandboxed discoverV2: %s, want vis only", v2)
	}
	if v2 := string(tc.mustCall("capabilities/discoverV2", map[string]any{"cwd": fileURI(base)})); !strings.Contains(v2, `"name":"hid"`) || hiddenSkillOpens.drain(t) == 0 {
		t.Errorf("unsandboxed discoverV2 (control): %s", v2)
	}

	raw, _ := json.Marshal(got)
	if strings.Contains(string(raw), "top secret") || strings.Contains(string(raw), `\"top\"`) || strings.Contains(string(raw), "denied by an entry") {
		t.Errorf("the sandboxed answer carries hidden text: %s", raw)
	}
}
