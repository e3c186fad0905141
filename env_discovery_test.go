package main

// Capability discovery and environmentConfig/read (env_discovery.go, env.go; docs/protocol.md §9):
// real files on a real server, answers compared with what the reference 0.171 answered for
// the same trees (testdata/discovery/*.txt).

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// makeDiscoveryFixture builds, under base, the trees of testdata/discovery/v1.txt:
//
//	r1     a plugin (.codex-plugin) declaring ./mcp.json and ./apps.json, beside a .mcp.json it
//	       does not use; skills s1 (with agents/openai.yaml), bad (no front matter), one in a
//	       hidden directory, one in a nested .claude-plugin plugin, one reached through a
//	       directory symlink, one through a file symlink (not listed), at depths 5, 6 and 8
//	r2     a skill, and a SKILL.md that is not UTF-8
//	p/sub  no manifest of its own: p's is its namespace manifest
//	afile  a file, not a directory
//	r5     declarations without ./ and with .., a SKILL.md one byte over the limit
//	r6     mcpServers inline, apps "./"
//	r7     a manifest that is not JSON: the default .mcp.json is read
func makeDiscoveryFixture(t *testing.T, base string) {
	t.Helper()
	w := func(rel, data string) { fsWrite(t, filepath.Join(base, rel), data) }
	w("r1/.codex-plugin/plugin.json", `{"name":"p1","mcpServers":"./mcp.json","apps":"./apps.json"}`+"\n")
	w("r1/mcp.json", `{"mcpServers":{"x":{"command":"y"}}}`+"\n")
	w("r1/apps.json", `{"apps":{}}`+"\n")
	w("r1/.mcp.json", `{"other":1}`+"\n")
	w("r1/skills/s1/SKILL.md", "---\nname: s1\ndescription: skill one\n---\nbody\n")
	w("r1/skills/s1/agents/openai.yaml", "interface: {display_name: S1}\n")
	w("r1/skills/bad/SKILL.md", "no front matter\n")
	w("r1/nested/.claude-plugin/plugin.json", `{"name":"nested"}`+"\n")
	w("r1/nested/skills/n1/SKILL.md", "---\nname: n1\ndescription: d\n---\n")
	w("r1/.hidden/skills/h1/SKILL.md", "---\nname: h1\ndescription: d\n---\n")
	w("outside/skills/o1/SKILL.md", "---\nname: o1\ndescription: d\n---\n")
	fsMust(t, os.Symlink(filepath.Join(base, "outside/skills/o1"), filepath.Join(base, "r1/skills/linkdir")))
	fsMust(t, os.MkdirAll(filepath.Join(base, "r1/deep"), 0o755))
	fsMust(t, os.Symlink(filepath.Join(base, "outside/skills/o1/SKILL.md"), filepath.Join(base, "r1/deep/SKILL.md")))
	w("r1/deep/a/b/c/d/e/f/g/SKILL.md", "deep")
	w("r1/deep/a/b/c/d/SKILL.md", "d5")
	w("r1/deep/a/b/c/d/e/SKILL.md", "d6")
	w("r2/skills/t/SKILL.md", "x")
	w("r2/skills/u/SKILL.md", "\xff\xfe")
	w("p/.codex-plugin/plugin.json", `{"name":"parent"}`+"\n")
	fsMust(t, os.MkdirAll(filepath.Join(base, "p/sub"), 0o755))
	w("afile", "file\n")
	w("r5/.codex-plugin/plugin.json", `{"mcpServers":"mcp.json","apps":"./../x.json"}`+"\n")
	w("r5/skills/big/SKILL.md", strings.Repeat("a", maxDiscoveryFileBytes+1))
	w("r6/.codex-plugin/plugin.json", `{"mcpServers":{"a":{}},"apps":"./"}`+"\n")
	w("r6/.mcp.json", "{}\n")
	w("r7/.codex-plugin/plugin.json", "not json\n")
	w("r7/.mcp.json", `{"m":1}`+"\n")
}

// TestDiscoveryVectors replays testdata/discovery/*.txt on a fresh fixture. With
// EXEC_SERVER_REFERENCE_URL set (a `codex exec-server` 0.171 started by hand on this host) it
// replays them against the reference instead, to check the claim of parity again.
func TestDiscoveryVectors(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the vectors name Linux errors")
	}
	url := os.Getenv("EXEC_SERVER_REFERENCE_URL")
	if url == "" {
		url = startTestServer(t).url
	}
	for _, file := range vectorFiles(t, "testdata/discovery/*.txt") {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			base := t.TempDir()
			makeDiscoveryFixture(t, base)
			playVectors(t, url, file, map[string]string{"{base}": fileURI(base)})
		})
	}
}

// TestDiscoverV1Limits: more roots than maxDiscoveryRoots is refused whole; a root walk stops
// at maxDiscoveryDepth.
func TestDiscoverV1Limits(t *testing.T) {
	tc := startTestServer(t).connect(t)
	roots := make([]map[string]any, maxDiscoveryRoots+1)
	for i := range roots {
		roots[i] = map[string]any{"id": "r", "path": "file:///nonexistent"}
	}
	err := tc.callErr("capabilityRoots/discoverV1", map[string]any{"roots": roots})
	if err == nil || err.Code != codeInvalidRequest || err.Message != "capability root discovery accepts at most 128 roots" {
		t.Fatalf("129 roots: %+v", err)
	}
	res := tc.mustCall("capabilityRoots/discoverV1", map[string]any{"roots": roots[:maxDiscoveryRoots]})
	var got struct{ Roots []rootDiscovery }
	fsMust(t, json.Unmarshal(res, &got))
	if len(got.Roots) != maxDiscoveryRoots {
		t.Fatalf("128 roots: %d answered", len(got.Roots))
	}
}

// TestCapabilityCapabilityDiscoveryV2 backs capabilityDiscoveryV2: the server user's skills
// in $CODEX_HOME/skills and ~/.agents/skills, with their front matter and agents/openai.yaml
// read as the reference 0.171 reads them, a broken skill left out with the reference's one
// warning per location, and the plugins installed in $CODEX_HOME/plugins/cache with their
// namespaced skills (env_discovery_linux_test.go has the sandbox).
func TestCapabilityCapabilityDiscoveryV2(t *testing.T) {
	if !capabilities()["capabilityDiscoveryV2"] {
		t.Fatal("capabilityDiscoveryV2 is not advertised")
	}
	codexHome, home := t.TempDir(), t.TempDir()
	t.Setenv("CODEX_HOME", codexHome)
	t.Setenv("HOME", home)
	fsWrite(t, filepath.Join(codexHome, "skills/alpha/SKILL.md"),
		"---\nname: alpha\ndescription: Alpha skill\nmetadata:\n  short-description: short alpha\n---\nbody\n")
	fsWrite(t, filepath.Join(codexHome, "skills/broken/SKILL.md"), "no front matter\n")
	fsWrite(t, filepath.Join(codexHome, "skills/noname/SKILL.md"), "---\ndescription: |\n  only\n  desc\n---\n")
	fsWrite(t, filepath.Join(codexHome, "skills/meta/SKILL.md"), "---\nname: 'meta'\ndescription: \"Meta: skill\" # c\n---\n")
	fsWrite(t, filepath.Join(codexHome, "skills/meta/agents/openai.yaml"),
		"interface:\n  display_name: Meta D\ndependencies:\n  tools:\n    - type: env_var\n      value: FOO\n"+
			"    - type: mcp\n      value: srv\n      transport: streamable_http\n      url: http://x\npolicy:\n"+
			"  allow_implicit_invocation: false\n  products: [codex, \"chatgpt\"]\n")
	fsWrite(t, filepath.Join(home, ".agents/skills/beta/SKILL.md"), "---\nname: beta\ndescription: Beta skill\n---\n")
	// An installed plugin: the last version by name (9.0, not 10.0) is the one listed.
	for _, v := range []string{"10.0", "9.0"} {
		fsWrite(t, filepath.Join(codexHome, "plugins/cache/mkt/myplug", v, ".codex-plugin/plugin.json"), `{"name":"myplug","interface":{"displayName":"My Plug"}}`)
		fsWrite(t, filepath.Join(codexHome, "plugins/cache/mkt/myplug", v, "skills/ps/SKILL.md"), "---\nname: ps\ndescription: plugin skill\n---\n")
	}

	tc := startTestServer(t).connect(t)
	cs, ua := fileURI(filepath.Join(codexHome, "skills")), fileURI(filepath.Join(home, ".agents/skills"))
	skill := func(name, desc, short, path, rootID, root, deps, policy string) string {
		return `{"name":"` + name + `","description":"` + desc + `","shortDescription":` + short + `,"path":"` + path +
			`","discoveryRoot":{"id":"` + rootID + `","path":"` + root + `"},"dependencies":` + deps + `,"policy":` + policy + `}`
	}
	pr := fileURI(filepath.Join(codexHome, "plugins/cache/mkt/myplug/9.0"))
	want := `{"plugins":[{"id":"myplug@mkt","displayName":"My Plug","remotePluginId":null,"version":"9.0","root":"` + pr + `",` +
		`"files":{"manifest":{"path":"` + pr + `/.codex-plugin/plugin.json","contents":"{\"name\":\"myplug\",\"interface\":{\"displayName\":\"My Plug\"}}"},"mcpConfig":null,"appsConfig":null},` +
		`"skills":[{"name":"myplug:ps","description":"plugin skill","shortDescription":null,"path":"` + pr + `/skills/ps/SKILL.md","dependencies":null,"policy":null}]}],"skills":[` +
		skill("alpha", "Alpha skill", `"short alpha"`, cs+"/alpha/SKILL.md", "codex-home-skills", cs, "null", "null") + "," +
		skill("meta", "Meta: skill", "null", cs+"/meta/SKILL.md", "codex-home-skills", cs,
			`{"tools":[{"type":"env_var","value":"FOO","description":null,"transport":null,"command":null,"url":null,"oauthCallbackPort":null},`+
				`{"type":"mcp","value":"srv","description":null,"transport":"streamable_http","command":null,"url":"http://x","oauthCallbackPort":null}]}`,
			`{"allowImplicitInvocation":false,"products":["codex","chatgpt"]}`) + "," +
		skill("noname", "only desc", "null", cs+"/noname/SKILL.md", "codex-home-skills", cs, "null", "null") + "," +
		skill("beta", "Beta skill", "null", ua+"/beta/SKILL.md", "user-agent-skills", ua, "null", "null") +
		`],"warnings":["some capability metadata could not be loaded; discovery may be incomplete"]}`
	if got := string(tc.mustCall("capabilities/discoverV2", map[string]any{"cwd": fileURI(home)})); got != want {
		t.Errorf("discoverV2:\n got %s\nwant %s", got, want)
	}

	// Neither location: an empty answer, no warning.
	t.Setenv("CODEX_HOME", filepath.Join(codexHome, "missing"))
	t.Setenv("HOME", filepath.Join(home, "missing"))
	if got := string(tc.mustCall("capabilities/discoverV2", map[string]any{"cwd": fileURI(home)})); got != `{"plugins":[],"skills":[],"warnings":[]}` {
		t.Errorf("no locations: %s", got)
	}
	if err := tc.callErr("capabilities/discoverV2", map[string]any{"cwd": "rel"}); err == nil || err.Code != codeInvalidParams {
		t.Errorf("relative cwd: %+v", err)
	}
}

// TestCapabilityEnvironmentConfigRead backs environmentConfigRead: the reference's two
// refusals of empty selectors, its order of checks, and its answers for a config.toml absent,
// present (the selected keys, laid out as the reference lays them out) and malformed.
func TestCapabilityEnvironmentConfigRead(t *testing.T) {
	if !capabilities()["environmentConfigRead"] {
		t.Fatal("environmentConfigRead is not advertised")
	}
	codexHome := t.TempDir()
	t.Setenv("CODEX_HOME", codexHome)
	tc := startTestServer(t).connect(t)
	cwd := fileURI(t.TempDir())
	for _, c := range []struct {
		params map[string]any
		code   int
		msg    string
	}{
		{map[string]any{"cwd": cwd, "configPaths": [][]string{}, "requirementsPaths": [][]string{}}, codeInvalidParams, "at least one config or requirements path is required"},
		{map[string]any{"cwd": cwd, "configPaths": [][]string{{"a"}}, "requirementsPaths": [][]string{{}}}, codeInvalidParams, "TOML paths must contain at least one key segment"},
		{map[string]any{"cwd": "rel", "configPaths": [][]string{}, "requirementsPaths": [][]string{}}, codeInvalidParams, "invalid URI: relative URL without a base"},
		{map[string]any{"cwd": cwd, "configPaths": [][]string{}}, codeInvalidParams, "missing field `requirementsPaths`"},
	} {
		if err := tc.callErr("environmentConfig/read", c.params); err == nil || err.Code != c.code || err.Message != c.msg {
			t.Errorf("%v: %+v, want %d %q", c.params, err, c.code, c.msg)
		}
	}
	read := func(config ...[]string) (string, *rpcError) {
		t.Helper()
		res, err := tc.call("environmentConfig/read", map[string]any{
			"cwd": cwd, "configPaths": config, "requirementsPaths": [][]string{{"mcp_servers"}},
		})
		if err != nil {
			return "", err
		}
		var r struct {
			CodexHomeDir string
			Config       struct{ Layers []configLayer }
			Requirements struct{ Layers []configLayer }
		}
		fsMust(t, json.Unmarshal(res, &r))
		if r.CodexHomeDir != fileURI(codexHome) || len(r.Requirements.Layers) != 0 || len(r.Config.Layers) > 1 {
			t.Fatalf("answer: %s", res)
		}
		if len(r.Config.Layers) == 0 {
			return "", nil
		}
		l := r.Config.Layers[0]
		if want := "user (" + filepath.Join(codexHome, "config.toml") + ")"; l.Source != want || l.BaseDir != fileURI(codexHome) {
			t.Errorf("layer %q %q, want %q %q", l.Source, l.BaseDir, want, fileURI(codexHome))
		}
		return l.TOML, nil
	}
	if got, err := read([]string{"mcp_servers"}); got != "" || err != nil {
		t.Errorf("without a config.toml: %q %v, want no layer", got, err)
	}

	// The answers the reference 0.171 gave for this file and these selectors.
	fsWrite(t, filepath.Join(codexHome, "config.toml"), `# comment
model = "o3"   # trailing
approval_policy = 'never'
n = 5
f = 1.5
b = true
arr = [1, 2, "x"]
inl = { a = 1, b = "two" }
dotted.key = "v"
"quoted key" = 1
ml = """
line1
line2"""

[mcp_servers.docs]
url = "https://example.com/mcp"
bearer_token_env_var = "TOK"
http_headers = { "X-A" = "b" }

[mcp_servers."weird name"]
command = "npx"
args = ["-y", "pkg"]
env = { K = "V" }

[[profiles_list]]
name = "a"
[[profiles_list]]
name = "b"

[tbl.sub]
x = 1
[tbl]
y = 2
`)
	for _, c := range []struct {
		sel  [][]string
		want string
	}{
		{[][]string{{"mcp_servers"}}, "[mcp_servers.docs]\nurl = \"https://example.com/mcp\"\nbearer_token_env_var = \"TOK\"\n\n" +
			"[mcp_servers.docs.http_headers]\nX-A = \"b\"\n\n[mcp_servers.\"weird name\"]\ncommand = \"npx\"\nargs = [\"-y\", \"pkg\"]\n\n" +
			"[mcp_servers.\"weird name\".env]\nK = \"V\"\n"},
		{[][]string{{"model"}, {"n"}, {"f"}, {"b"}, {"arr"}, {"inl"}, {"dotted"}, {"quoted key"}, {"ml"}, {"profiles_list"}, {"tbl"}, {"approval_policy"}},
			"model = \"o3\"\napproval_policy = \"never\"\nn = 5\nf = 1.5\nb = true\narr = [1, 2, \"x\"]\n\"quoted key\" = 1\n" +
				"ml = \"\"\"\nline1\nline2\"\"\"\n\n[inl]\na = 1\nb = \"two\"\n\n[dotted]\nkey = \"v\"\n\n[[profiles_list]]\nname = \"a\"\n\n" +
				"[[profiles_list]]\nname = \"b\"\n\n[tbl]\ny = 2\n\n[tbl.sub]\nx = 1\n"},
		{[][]string{{"mcp_servers", "docs", "url"}, {"inl", "a"}, {"nope", "x"}}, "[inl]\na = 1\n\n[mcp_servers.docs]\nurl = \"https://example.com/mcp\"\n"},
		{[][]string{{"zzz"}}, ""},
	} {
		if got, err := read(c.sel...); got != c.want || err != nil {
			t.Errorf("%v:\n got %q %v\nwant %q", c.sel, got, err, c.want)
		}
	}

	fsWrite(t, filepath.Join(codexHome, "config.toml"), "model = \n")
	_, err := read([]string{"model"})
	if want := "failed to load executor-local config: " + filepath.Join(codexHome, "config.toml") +
		":1:9: string values must be quoted, expected literal string"; err == nil || err.Code != codeInternal || err.Message != want {
		t.Errorf("malformed config.toml: %+v, want -32603 %q", err, want)
	}
}

// FuzzParseTOML: any input parses or fails cleanly, and what parses writes back as TOML that
// parses to the same layout.
func FuzzParseTOML(f *testing.F) {
	for _, s := range []string{"a = 1\n[t]\nb = 'x'\n", "[[a]]\nb = [1, {c = 2}]\n", "m = \"\"\"\nx\\\n  y\"\"\"\n", "k = 1979-05-27 07:32:00\n", "a.b.c = {d = [[]]}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		doc, err := parseTOML(s)
		if err != nil {
			return
		}
		out := writeTOML(doc)
		again, err := parseTOML(out)
		if err != nil {
			t.Fatalf("%q wrote %q, which does not parse: %v", s, out, err)
		}
		if writeTOML(again) != out {
			t.Fatalf("%q wrote %q, then %q", s, out, writeTOML(again))
		}
	})
}

// FuzzSkillFrontMatter: any SKILL.md or agents/openai.yaml is read or refused, never a panic.
func FuzzSkillFrontMatter(f *testing.F) {
	for _, s := range []string{"---\nname: a\ndescription: b\nmetadata:\n  short-description: c\n---\n", "---\ndescription: |\n  x\n---", "dependencies:\n  tools:\n    - type: a\n      value: b\npolicy:\n  products: [x]\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		parseSkillFrontMatter(s, "dir")
		parseSkillMetadata(s)
	})
}
