//go:build linux

package main

// Adversarial tests of capability discovery and environmentConfig/read (env_discovery.go,
// env_config.go, docs/protocol.md §9.3–9.5). Every verdict is read on the host: inotify says
// whether a hidden file was opened by any process (the sandbox worker included), and a
// request that must answer is given a deadline.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// advRestrictedRead is a restricted sandbox that reads root only, and denies each of deny.
func advRestrictedRead(root string, deny ...string) json.RawMessage {
	s := `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"path","path":"` + fileURI(root) + `"},"access":"read"}`
	for _, d := range deny {
		s += `,{"path":{"type":"path","path":"` + fileURI(d) + `"},"access":"none"}`
	}
	return json.RawMessage(s + `]},"network":"restricted"},"windowsSandboxLevel":"disabled"}`)
}

func advDiscover(t *testing.T, tc *testClient, roots ...map[string]any) []rootDiscovery {
	t.Helper()
	var res struct{ Roots []rootDiscovery }
	fsMust(t, json.Unmarshal(tc.mustCall("capabilityRoots/discoverV1", map[string]any{"roots": roots}), &res))
	if len(res.Roots) != len(roots) {
		t.Fatalf("%d roots answered for %d asked", len(res.Roots), len(roots))
	}
	return res.Roots
}

// TestAdvDiscoverySymlinkedFilesOut: under a sandbox that reads the root only, every file
// discovery reads by name rather than by walking (a declared mcpServers/apps file, the
// default .mcp.json, a skill's agents/openai.yaml, a plugin manifest directory) is a
// symlink to a secret directory outside the root; manifest paths also try `..`, absolute and
// backslash forms. Nothing of the secret directory may be opened.
func TestAdvDiscoverySymlinkedFilesOut(t *testing.T) {
	tc := sandboxedFSServer(t).connect(t)
	base := t.TempDir()
	root, secret := filepath.Join(base, "root"), filepath.Join(base, "secret")
	fsWrite(t, filepath.Join(secret, "mcp.json"), `{"secret":"mcp"}`)
	fsWrite(t, filepath.Join(secret, "apps.json"), `{"secret":"apps"}`)
	fsWrite(t, filepath.Join(secret, "meta.yaml"), "secret: meta\n")
	fsWrite(t, filepath.Join(secret, "plug", ".codex-plugin", "plugin.json"), `{"name":"secretplugin"}`)
	fsWrite(t, filepath.Join(secret, "plug", "SKILL.md"), "secret skill")
	// The root's own manifest declares its files through symlinks.
	fsWrite(t, filepath.Join(root, ".codex-plugin", "plugin.json"), `{"name":"p","mcpServers":"./mcplink","apps":"./appslink"}`)
	fsMust(t, os.Symlink(filepath.Join(secret, "mcp.json"), filepath.Join(root, "mcplink")))
	fsMust(t, os.Symlink(filepath.Join(secret, "apps.json"), filepath.Join(root, "appslink")))
	fsWrite(t, filepath.Join(root, "skills", "a", "SKILL.md"), "---\nname: a\ndescription: d\n---\n")
	fsMust(t, os.MkdirAll(filepath.Join(root, "skills", "a", "agents"), 0o755))
	fsMust(t, os.Symlink(filepath.Join(secret, "meta.yaml"), filepath.Join(root, "skills", "a", "agents", "openai.yaml")))
	// A nested plugin whose manifest directory is a symlink out, and a nested plugin whose
	// manifest declares `..` paths (its own root's declarations are the only ones read).
	fsMust(t, os.MkdirAll(filepath.Join(root, "nested"), 0o755))
	fsMust(t, os.Symlink(filepath.Join(secret, "plug", ".codex-plugin"), filepath.Join(root, "nested", ".codex-plugin")))
	fsMust(t, os.Symlink(filepath.Join(secret, "plug"), filepath.Join(root, "plugdir")))

	// A second root whose manifest climbs out by name.
	root2 := filepath.Join(base, "root2")
	fsWrite(t, filepath.Join(root2, ".claude-plugin", "plugin.json"), `{"name":"q","mcpServers":"./../secret/mcp.json","apps":"./x/../../secret/apps.json"}`)
	root3 := filepath.Join(base, "root3")
	fsWrite(t, filepath.Join(root3, ".cursor-plugin", "plugin.json"), `{"name":"r","mcpServers":"./`+filepath.Join(secret, "mcp.json")+`","apps":"./..\\secret\\apps.json"}`)
	root4 := filepath.Join(base, "root4")
	fsWrite(t, filepath.Join(root4, ".codex-plugin", "plugin.json"), `{"name":"s","mcpServers":"`+filepath.Join(secret, "mcp.json")+`","apps":"./"}`)

	opens := watchOpens(t, secret)
	plugOpens := watchOpens(t, filepath.Join(secret, "plug"))
	sandboxed := func(r string) map[string]any {
		return map[string]any{"id": filepath.Base(r), "path": fileURI(r), "sandbox": advRestrictedRead(r)}
	}
	got := advDiscover(t, tc, sandboxed(root), sandboxed(root2), sandboxed(root3), sandboxed(root4))
	if n := opens.drain(t) + plugOpens.drain(t); n != 0 {
		t.Errorf("the sandboxed discovery opened files of the secret directory (%d inotify events)", n)
	}
	raw, _ := json.Marshal(got)
	if strings.Contains(string(raw), "secret") && strings.Contains(string(raw), `\"secret\"`) || strings.Contains(string(raw), "secret skill") || strings.Contains(string(raw), "secretplugin") || strings.Contains(string(raw), "secret: meta") {
		t.Errorf("the sandboxed answer carries secret text: %s", raw)
	}
	if got[0].Plugin == nil || got[0].Plugin.MCPConfig != nil || got[0].Plugin.AppsConfig != nil || len(got[0].Skills) != 1 || got[0].Skills[0].Metadata != nil {
		t.Errorf("root: %s", raw)
	}

	// Unconfined (no sandbox), the manifest's `..` forms are still refused by name: the
	// secret files are neither opened nor returned.
	opens.drain(t)
	free := advDiscover(t, tc,
		map[string]any{"id": "r2", "path": fileURI(root2)},
		map[string]any{"id": "r3", "path": fileURI(root3)},
		map[string]any{"id": "r4", "path": fileURI(root4)})
	if n := opens.drain(t); n != 0 {
		t.Errorf("unsandboxed, a `..`/absolute manifest path opened the secret directory (%d events)", n)
	}
	for _, d := range free {
		if d.Plugin == nil || d.Plugin.MCPConfig != nil || d.Plugin.AppsConfig != nil {
			b, _ := json.Marshal(d)
			t.Errorf("unsandboxed root %s: %s", d.ID, b)
		}
	}
}

// TestAdvDiscoveryDeniedFilesInRoot: deny entries on single files inside a readable root
// (the default .mcp.json, a skill's agents/openai.yaml, a SKILL.md, a nested manifest): none
// is opened, and the rest of the root is found.
func TestAdvDiscoveryDeniedFilesInRoot(t *testing.T) {
	tc := sandboxedFSServer(t).connect(t)
	root := filepath.Join(t.TempDir(), "root")
	mcp := filepath.Join(root, ".mcp.json")
	meta := filepath.Join(root, "skills", "a", "agents", "openai.yaml")
	skill := filepath.Join(root, "skills", "b", "SKILL.md")
	nested := filepath.Join(root, "n", ".codex-plugin", "plugin.json")
	fsWrite(t, filepath.Join(root, ".codex-plugin", "plugin.json"), `{"name":"p"}`)
	fsWrite(t, mcp, `{"denied":"mcp"}`)
	fsWrite(t, filepath.Join(root, "skills", "a", "SKILL.md"), "---\nname: a\ndescription: d\n---\n")
	fsWrite(t, meta, "denied: meta\n")
	fsWrite(t, skill, "denied skill")
	fsWrite(t, nested, `{"name":"deniednested"}`)
	var watches []*openWatch
	for _, f := range []string{mcp, meta, skill, nested} {
		watches = append(watches, watchOpens(t, f))
	}
	got := advDiscover(t, tc, map[string]any{"id": "r", "path": fileURI(root), "sandbox": advRestrictedRead(root, mcp, meta, skill, nested)})
	for i, w := range watches {
		if n := w.drain(t); n != 0 {
			t.Errorf("denied file %d was opened (%d inotify events)", i, n)
		}
	}
	raw, _ := json.Marshal(got)
	if containsAny(string(raw), []string{"denied: meta", "denied skill", `\"denied\"`, "deniednested"}) {
		t.Errorf("the answer carries denied text: %s", raw)
	}
	if got[0].Plugin == nil || len(got[0].Skills) != 1 {
		t.Errorf("the readable rest was not found: %s", raw)
	}
}

// TestAdvDiscoverySwapRace races renames on the host (what a sandboxed command that may
// write the workspace can do) against sandboxed discovery: a skill directory and a SKILL.md
// flip between real ones and symlinks to a secret directory outside the sandbox, and the
// root's .mcp.json between a file and a symlink out. The secret directory is never opened.
func TestAdvDiscoverySwapRace(t *testing.T) {
	tc := sandboxedFSServer(t).connect(t)
	base := t.TempDir()
	root, secret := filepath.Join(base, "root"), filepath.Join(base, "secret")
	fsWrite(t, filepath.Join(secret, "SKILL.md"), "secret skill")
	fsWrite(t, filepath.Join(secret, "mcp.json"), `{"secret":1}`)
	fsWrite(t, filepath.Join(root, ".codex-plugin", "plugin.json"), `{"name":"p"}`)
	fsWrite(t, filepath.Join(root, "skills", "real", "SKILL.md"), "---\nname: r\ndescription: d\n---\n")
	fsWrite(t, filepath.Join(root, "skills", "f", "SKILL.md"), "plain")
	fsWrite(t, filepath.Join(root, "alt.mcp.json"), `{}`)
	dirLink := filepath.Join(root, "skills", "swap")
	fileLink := filepath.Join(root, "skills", "f", "SKILL.md")
	mcp := filepath.Join(root, ".mcp.json")
	opens := watchOpens(t, secret)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var swaps atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		tmpDir, tmpLink := filepath.Join(root, "skills", ".d"), filepath.Join(root, "skills", ".l")
		tmpFile, tmpFLink := filepath.Join(root, "skills", "f", ".f"), filepath.Join(root, "skills", "f", ".fl")
		tmpMCP := filepath.Join(root, ".m")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				os.MkdirAll(tmpDir, 0o755)
				os.WriteFile(filepath.Join(tmpDir, "SKILL.md"), []byte("x"), 0o644)
				os.RemoveAll(dirLink)
				os.Rename(tmpDir, dirLink)
				os.WriteFile(tmpFile, []byte("plain"), 0o644)
				os.Rename(tmpFile, fileLink)
				os.WriteFile(tmpMCP, []byte("{}"), 0o644)
				os.Rename(tmpMCP, mcp)
			} else {
				os.Remove(tmpLink)
				os.Symlink(secret, tmpLink)
				os.RemoveAll(dirLink)
				os.Rename(tmpLink, dirLink)
				os.Remove(tmpFLink)
				os.Symlink(filepath.Join(secret, "SKILL.md"), tmpFLink)
				os.Rename(tmpFLink, fileLink)
				os.Remove(tmpMCP)
				os.Symlink(filepath.Join(secret, "mcp.json"), tmpMCP)
				os.Rename(tmpMCP, mcp)
			}
			swaps.Add(1)
		}
	}()
	const rounds = 300
	leaks := 0
	for range rounds {
		got := advDiscover(t, tc, map[string]any{"id": "r", "path": fileURI(root), "sandbox": advRestrictedRead(root)})
		raw, _ := json.Marshal(got)
		if strings.Contains(string(raw), "secret") {
			leaks++
		}
	}
	close(stop)
	wg.Wait()
	if n := opens.drain(t); n != 0 || leaks != 0 {
		t.Errorf("%d rounds against %d swaps: the secret directory was opened (%d inotify events), %d answers carry its text", rounds, swaps.Load(), n, leaks)
	}
	t.Logf("%d rounds against %d swaps", rounds, swaps.Load())
}

// TestAdvDiscoverySpecialFiles gives an unconfined root (no sandbox: read in the server
// itself) FIFOs and devices where discovery reads: a SKILL.md that is a FIFO, an
// agents/openai.yaml and .mcp.json that link to a FIFO and /dev/zero, and a SKILL.md that a
// host goroutine flips between a regular file and a FIFO. Each request answers in time; a
// FIFO opened for reading would block the server forever.
func TestAdvDiscoverySpecialFiles(t *testing.T) {
	tc := startTestServer(t).connect(t)
	root := filepath.Join(t.TempDir(), "root")
	fsWrite(t, filepath.Join(root, ".codex-plugin", "plugin.json"), `{"name":"p","apps":"./apps"}`)
	fsWrite(t, filepath.Join(root, "skills", "b", "SKILL.md"), "---\nname: b\ndescription: d\n---\n")
	fsMust(t, os.MkdirAll(filepath.Join(root, "skills", "a"), 0o755))
	fsMust(t, os.MkdirAll(filepath.Join(root, "skills", "b", "agents"), 0o755))
	fifo := filepath.Join(root, "fifo")
	fsMust(t, syscall.Mkfifo(fifo, 0o644))
	fsMust(t, syscall.Mkfifo(filepath.Join(root, "skills", "a", "SKILL.md"), 0o644))
	fsMust(t, os.Symlink(fifo, filepath.Join(root, "skills", "b", "agents", "openai.yaml")))
	fsMust(t, os.Symlink("/dev/zero", filepath.Join(root, ".mcp.json")))
	fsMust(t, os.Symlink(fifo, filepath.Join(root, "apps")))
	flip := filepath.Join(root, "skills", "c", "SKILL.md")
	fsWrite(t, flip, "---\nname: c\ndescription: d\n---\n")
	t.Cleanup(func() { advUnblockFIFOs(root) })

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tmpF, tmpP := flip+".f", flip+".p"
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				os.WriteFile(tmpF, []byte("---\nname: c\ndescription: d\n---\n"), 0o644)
				os.Rename(tmpF, flip)
			} else {
				os.Remove(tmpP)
				syscall.Mkfifo(tmpP, 0o644)
				os.Rename(tmpP, flip)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for i := range 40 {
		select {
		case r := <-tc.start("capabilityRoots/discoverV1", map[string]any{"roots": []map[string]any{{"id": "r", "path": fileURI(root)}}}):
			if r.Err != nil {
				t.Fatalf("round %d: %d %s", i, r.Err.Code, r.Err.Message)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: discovery of a root with FIFOs did not answer within 10 s", i)
		}
	}
}

// advUnblockFIFOs opens every FIFO below dir for writing without blocking, so that a
// reader the server left blocked on one returns (and the test server can shut down).
func advUnblockFIFOs(dir string) {
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
			if fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				syscall.Close(fd)
			}
		}
		return nil
	})
}

// TestAdvEnvironmentConfigSpecialFiles: $CODEX_HOME/config.toml is a FIFO (anyone who may
// write CODEX_HOME can make one), then a symlink to /dev/zero. environmentConfig/read must
// answer, and must not hold up the connection's other requests.
func TestAdvEnvironmentConfigSpecialFiles(t *testing.T) {
	home := filepath.Join(t.TempDir(), "codex")
	fsMust(t, os.MkdirAll(home, 0o755))
	t.Setenv("CODEX_HOME", home)
	cfg := filepath.Join(home, "config.toml")
	fsMust(t, syscall.Mkfifo(cfg, 0o644))
	t.Cleanup(func() { advUnblockFIFOs(home) })
	tc := startTestServer(t).connect(t)
	params := map[string]any{"cwd": fileURI(home), "configPaths": [][]string{{"mcp_servers"}}, "requirementsPaths": [][]string{}}
	reply := tc.start("environmentConfig/read", params)
	// A request behind it on the same connection.
	other := tc.start("fs/getMetadata", map[string]any{"path": fileURI(home)})
	select {
	case <-other:
	case <-time.After(5 * time.Second):
		t.Errorf("a config.toml FIFO holds up the connection: fs/getMetadata behind environmentConfig/read got no answer in 5 s")
	}
	select {
	case r := <-reply:
		if r.Err == nil {
			t.Errorf("a FIFO config.toml answered %s, want an error", r.Result)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("environmentConfig/read of a FIFO config.toml did not answer in 5 s")
	}
	advUnblockFIFOs(home)

	os.Remove(cfg)
	fsMust(t, os.Symlink("/dev/zero", cfg))
	if err := tc.callErr("environmentConfig/read", params); !strings.Contains(err.Message, "config.toml") {
		t.Errorf("/dev/zero config.toml: %d %s", err.Code, err.Message)
	}
}

// TestAdvEnvironmentConfigKeyPathsAreKeys: configPaths that look like file paths select
// keys and read no other file.
func TestAdvEnvironmentConfigKeyPathsAreKeys(t *testing.T) {
	home := filepath.Join(t.TempDir(), "codex")
	fsWrite(t, filepath.Join(home, "config.toml"), "[mcp_servers.x]\ncommand = \"y\"\n")
	secretDir := filepath.Join(t.TempDir(), "secret")
	fsWrite(t, filepath.Join(secretDir, "s.toml"), "k = \"secret\"\n")
	t.Setenv("CODEX_HOME", home)
	tc := startTestServer(t).connect(t)
	opens := watchOpens(t, secretDir)
	res := tc.mustCall("environmentConfig/read", map[string]any{"cwd": fileURI(home),
		"configPaths":       [][]string{{filepath.Join(secretDir, "s.toml")}, {"..", "..", "secret", "s.toml"}, {"/etc/shadow"}, {"mcp_servers"}},
		"requirementsPaths": [][]string{{filepath.Join(secretDir, "s.toml")}}})
	if n := opens.drain(t); n != 0 || strings.Contains(string(res), "secret") {
		t.Errorf("a key path read a file: %d events, answer %s", n, res)
	}
}

// FuzzAdvTOML: the config parser never panics, and the writer's output of what it parsed
// parses again.
func FuzzAdvTOML(f *testing.F) {
	for _, s := range []string{"a=1", "[a]\nb.c=[1,[2,{x=1}]]", "a='''x\n'''", "[[a]]\n[[a]]\nb=1", `a="\u0000"`, "a={b={c={}}}", "a.b.c.d=1\n[a.b]\ne=2", "x=1979-05-27T07:32:00Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		done := make(chan string, 1)
		go func() {
			doc, err := parseTOML(s)
			if err != nil {
				done <- ""
				return
			}
			out := writeTOML(doc)
			if _, err := parseTOML(out); err != nil {
				done <- fmt.Sprintf("%q parsed, its rewrite %q does not: %v", s, out, err)
				return
			}
			done <- ""
		}()
		select {
		case msg := <-done:
			if msg != "" {
				t.Fatal(msg)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("parse, write and parse again of %q did not return within 2 s", s)
		}
	})
}

// TestAdvTOMLDeepNesting: nesting far past the 64 levels does not exhaust the stack or hang.
func TestAdvTOMLDeepNesting(t *testing.T) {
	for _, s := range []string{
		"a=" + strings.Repeat("[", 1<<20),
		"a=" + strings.Repeat("{b=", 1<<18),
		strings.Repeat("a.", 1<<18) + "b=1",
		"[" + strings.Repeat("a.", 1<<18) + "b]",
	} {
		start := time.Now()
		parseTOML(s)
		// A parse that is not linear in the depth takes hours on these; 30 s leaves room
		// for the race detector on a loaded 2-core machine (5 s did not: 5.05 s was seen).
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("a %d-byte document took %v", len(s), d)
		}
	}
}

// TestAdvDiscoveryAnswerMemory measures what one discoverV1 request may make the server
// hold. A file of control characters is valid UTF-8 and escapes to six times its size: a
// root's 16 MiB are counted escaped, and the roots built at once reserve their bound against
// the answer's (one websocket message) before they are built.
func TestAdvDiscoveryAnswerMemory(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	chunk := strings.Repeat("\x01", maxDiscoveryFileBytes-16)
	for i := range 16 {
		fsWrite(t, filepath.Join(root, "s", string(rune('a'+i)), "SKILL.md"), chunk)
	}
	tc := startTestServer(t).connect(t)
	var roots []map[string]any
	for i := range maxDiscoveryConcurrentRoot {
		roots = append(roots, map[string]any{"id": string(rune('a' + i)), "path": fileURI(root)})
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	peak := before.HeapInuse
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-time.After(20 * time.Millisecond):
			case <-done:
				return
			}
		}
	}()
	_, rerr := tc.call("capabilityRoots/discoverV1", map[string]any{"roots": roots})
	done <- struct{}{}
	<-done
	grew := int64(peak) - int64(before.HeapInuse)
	t.Logf("answer error %v; heap in use grew by %d MiB at its peak", rerr, grew>>20)
	// The answer's bound holds the roots being built (their reservations); each is built
	// with its encoder's copy beside it, and the heap is sampled, not exact: 4× the bound.
	// Before the reservations and the escaped count, this request held 2177 MiB.
	if grew > 4*maxDiscoveryAnswerBytes {
		t.Errorf("one request made the server hold %d MiB, more than 4 times the %d MiB answer bound", grew>>20, maxDiscoveryAnswerBytes>>20)
	}
}

// TestAdvTOMLMutations is a bounded stand-in for FuzzAdvTOML that runs in the ordinary test
// run: seeds mutated at random (bytes flipped, inserted, spliced from TOML's punctuation),
// each parsed, written and parsed again within a time bound.
func TestAdvTOMLMutations(t *testing.T) {
	seeds := []string{"a=1\n[b]\nc=\"x\"\n", "[a]\nb.c=[1,[2,{x=1}]]\n", "a='''x\n'''\nb=\"\"\"y\\\n z\"\"\"\n",
		"[[a]]\n[[a]]\nb=1\n[a.c]\nd=2\n", "a={b={c={}}}\n", "a.b.c.d=1\n[a.b]\ne=2\n", "x=1979-05-27T07:32:00Z\ny=-inf\nz=0x1F\n",
		"'k.k'.\"q\\u00e9\"=1\n", "[mcp_servers.x]\ncommand=\"y\"\nargs=[\"a\",\n\"b\",]\nenv={A=\"1\"}\n"}
	punct := []string{"[", "]", "{", "}", "=", ".", "\"", "'", "'''", "\"\"\"", "\\", "\n", ",", "#", "[[", "]]", "\\u", "\r\n", "\x00", "\xff", " "}
	rng := uint64(0x9E3779B97F4A7C15)
	next := func(n int) int {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return int(rng % uint64(n))
	}
	iters := 100_000
	if testing.Short() {
		iters = 10_000
	}
	for range iters {
		b := []byte(seeds[next(len(seeds))])
		for range 1 + next(6) {
			if len(b) == 0 {
				b = append(b, punct[next(len(punct))]...)
				continue
			}
			at := next(len(b))
			switch next(3) {
			case 0:
				b[at] = byte(next(256))
			case 1:
				b = append(b[:at], append([]byte(punct[next(len(punct))]), b[at:]...)...)
			case 2:
				b = append(b[:at], b[at+1:]...)
			}
		}
		s := string(b)
		start := time.Now()
		doc, err := parseTOML(s)
		if err == nil {
			out := writeTOML(doc)
			if _, err := parseTOML(out); err != nil {
				t.Errorf("%q parsed, its rewrite %q does not: %v", s, out, err)
			}
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%q took %v", s, d)
		}
	}
}

// TestAdvDiscoveryFullReadWithDeny: a sandbox that reads the whole disk but denies one
// directory is still discovered in the worker: symlinks from the root into the denied
// directory (a skill directory, the .mcp.json, a skill's agents/openai.yaml) open nothing
// there, and a root inside it is hidden.
func TestAdvDiscoveryFullReadWithDeny(t *testing.T) {
	tc := sandboxedFSServer(t).connect(t)
	base := t.TempDir()
	root, secret := filepath.Join(base, "root"), filepath.Join(base, "secret")
	fsWrite(t, filepath.Join(secret, "skills", "s", "SKILL.md"), "---\nname: s\ndescription: secret skill\n---\n")
	fsWrite(t, filepath.Join(secret, "mcp.json"), `{"secret":1}`)
	fsWrite(t, filepath.Join(secret, "meta.yaml"), "secret: meta\n")
	fsWrite(t, filepath.Join(root, ".codex-plugin", "plugin.json"), `{"name":"p"}`)
	fsWrite(t, filepath.Join(root, "skills", "a", "SKILL.md"), "---\nname: a\ndescription: d\n---\n")
	fsMust(t, os.MkdirAll(filepath.Join(root, "skills", "a", "agents"), 0o755))
	fsMust(t, os.Symlink(filepath.Join(secret, "meta.yaml"), filepath.Join(root, "skills", "a", "agents", "openai.yaml")))
	fsMust(t, os.Symlink(filepath.Join(secret, "mcp.json"), filepath.Join(root, ".mcp.json")))
	fsMust(t, os.Symlink(filepath.Join(secret, "skills"), filepath.Join(root, "skills", "link")))
	opens, skillOpens := watchOpens(t, secret), watchOpens(t, filepath.Join(secret, "skills", "s"))
	sb := json.RawMessage(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},` +
		`{"path":{"type":"path","path":"` + fileURI(secret) + `"},"access":"none"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}`)
	got := advDiscover(t, tc,
		map[string]any{"id": "r", "path": fileURI(root), "sandbox": sb},
		map[string]any{"id": "s", "path": fileURI(secret), "sandbox": sb})
	if n := opens.drain(t) + skillOpens.drain(t); n != 0 {
		t.Errorf("the denied directory was opened (%d inotify events)", n)
	}
	raw, _ := json.Marshal(got)
	if containsAny(string(raw), []string{"secret skill", "secret: meta", `\"secret\":1`}) || len(got[0].Skills) != 1 || len(got[1].Skills) != 0 || got[1].Plugin != nil {
		t.Errorf("answer: %s", raw)
	}
}

// TestAdvDiscoveryCyclesAndDepth: a root full of symlink cycles (to itself, to its parent,
// a self-loop) and a tree far deeper than the walk's depth answers promptly, with each real
// directory walked once and nothing below depth 6.
func TestAdvDiscoveryCyclesAndDepth(t *testing.T) {
	tc := startTestServer(t).connect(t)
	root := filepath.Join(t.TempDir(), "root")
	deep := root
	for i := range 40 {
		deep = filepath.Join(deep, fmt.Sprint("d", i))
		fsWrite(t, filepath.Join(deep, "SKILL.md"), fmt.Sprintf("---\nname: s%d\ndescription: d\n---\n", i))
	}
	fsMust(t, os.Symlink(root, filepath.Join(root, "self")))
	fsMust(t, os.Symlink("..", filepath.Join(root, "d0", "up")))
	fsMust(t, os.Symlink("loop", filepath.Join(root, "loop")))
	fsMust(t, os.Symlink("/", filepath.Join(root, "slash")))
	start := time.Now()
	got := advDiscover(t, tc, map[string]any{"id": "r", "path": fileURI(root)})
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
	seen := map[string]bool{}
	for _, s := range got[0].Skills {
		p, _ := parsePath(s.Instructions.Path)
		rel, _ := filepath.Rel(root, p)
		seen[filepath.Dir(rel)] = true
		if strings.Count(rel, "/") > maxDiscoveryDepth {
			t.Errorf("a skill below the depth bound: %s", rel)
		}
	}
	t.Logf("%d skills, %d warnings: %v", len(got[0].Skills), len(got[0].Warnings), got[0].Warnings)
}

// advOpenBreakEnv runs the tests of breaks that are reported but not fixed on this branch.
const advOpenBreakEnv = "EXEC_SERVER_ADV_OPEN_BREAKS"

// advOpenBreak skips a test that shows an open break unless advOpenBreakEnv is 1: it fails
// until the break is fixed, and some cost much time or memory.
func advOpenBreak(t *testing.T, what string) {
	t.Helper()
	if os.Getenv(advOpenBreakEnv) != "1" {
		t.Skipf("open break, not fixed here: %s (set %s=1 to run)", what, advOpenBreakEnv)
	}
}

// TestAdvDiscoverV2SymlinksOut: under a sandbox that reads $CODEX_HOME only, the plugin
// cache's marketplace, plugin and version directories and $CODEX_HOME/skills are symlinks to
// a secret directory outside it: nothing there is opened or answered.
func TestAdvDiscoverV2SymlinksOut(t *testing.T) {
	tc := sandboxedFSServer(t).connect(t)
	base := t.TempDir()
	codexHome, home, secret := filepath.Join(base, "codex"), filepath.Join(base, "home"), filepath.Join(base, "secret")
	t.Setenv("CODEX_HOME", codexHome)
	t.Setenv("HOME", home)
	fsWrite(t, filepath.Join(secret, "v1", ".codex-plugin", "plugin.json"), `{"name":"secretplugin"}`)
	fsWrite(t, filepath.Join(secret, "v1", "skills", "s", "SKILL.md"), "---\nname: s\ndescription: secret skill\n---\n")
	fsWrite(t, filepath.Join(secret, "skills", "k", "SKILL.md"), "---\nname: k\ndescription: secret skill\n---\n")
	fsMust(t, os.MkdirAll(filepath.Join(codexHome, "plugins", "cache", "m1", "p1"), 0o755))
	fsMust(t, os.Symlink(filepath.Join(secret, "v1"), filepath.Join(codexHome, "plugins", "cache", "m1", "p1", "1.0")))
	fsMust(t, os.MkdirAll(filepath.Join(codexHome, "plugins", "cache", "m2"), 0o755))
	fsMust(t, os.Symlink(secret, filepath.Join(codexHome, "plugins", "cache", "m2", "p2")))
	fsMust(t, os.Symlink(secret, filepath.Join(codexHome, "plugins", "cache", "m3")))
	fsMust(t, os.Symlink(filepath.Join(secret, "skills"), filepath.Join(codexHome, "skills")))
	var watches []*openWatch
	for _, d := range []string{secret, filepath.Join(secret, "v1", ".codex-plugin"), filepath.Join(secret, "v1", "skills", "s"), filepath.Join(secret, "skills", "k")} {
		watches = append(watches, watchOpens(t, d))
	}
	sb := `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
		`{"path":{"type":"path","path":"` + fileURI(codexHome) + `"},"access":"read"}]},"network":"restricted"},` +
		`"cwd":"` + fileURI(base) + `","windowsSandboxLevel":"disabled"}`
	res := string(tc.mustCall("capabilities/discoverV2", map[string]any{"cwd": fileURI(base), "sandbox": json.RawMessage(sb)}))
	for i, w := range watches {
		if n := w.drain(t); n != 0 {
			t.Errorf("secret directory %d was opened (%d inotify events)", i, n)
		}
	}
	if containsAny(res, []string{"secretplugin", "secret skill"}) {
		t.Errorf("the sandboxed answer carries secret text: %s", res)
	}
	// Control: without the sandbox the same layout reaches the secret.
	if res := string(tc.mustCall("capabilities/discoverV2", map[string]any{"cwd": fileURI(base)})); !strings.Contains(res, "secret skill") {
		t.Errorf("unsandboxed control found nothing: %s", res)
	}
}
