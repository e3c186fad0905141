package main

import (
	"encoding/json"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
)

func TestEnvironmentInfoDescribesThisHost(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.dial(t)
	initRes := tc.mustCall("initialize", map[string]any{"clientName": "env"})
	tc.notify("initialized", nil)
	raw := tc.mustCall("environment/info", nil)
	var info environmentInfo
	if err := json.Unmarshal(raw, &info); err != nil {
		t.Fatal(err)
	}
	var fromInit struct {
		EnvironmentInfo json.RawMessage `json:"environmentInfo"`
	}
	json.Unmarshal(initRes, &fromInit)
	if string(fromInit.EnvironmentInfo) != string(raw) {
		t.Errorf("initialize's environmentInfo differs from environment/info:\n%s\n%s", fromInit.EnvironmentInfo, raw)
	}
	cwd, _ := os.Getwd()
	home, _ := os.UserHomeDir()
	wantOS := runtime.GOOS
	if wantOS == "darwin" {
		wantOS = "macos"
	}
	if fi, err := os.Stat(info.Shell.Path); err != nil || fi.IsDir() || info.Shell.Name != filepath.Base(info.Shell.Path) {
		t.Errorf("shell %+v is not an existing program", info.Shell)
	}
	for name, got := range map[string][2]string{
		"executorVersion": {info.ExecutorVersion, "0.171.0"},
		"cwd":             {info.Cwd, fileURI(cwd)},
		"userHomeDir":     {info.UserHomeDir, fileURI(home)},
		"platformOs":      {info.PlatformOS, wantOS},
		"tempDir":         {info.TempDir, fileURI(filepath.Clean(os.TempDir()))},
	} {
		if got[0] != got[1] {
			t.Errorf("%s = %q, want %q", name, got[0], got[1])
		}
	}
	if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(info.ProviderID) {
		t.Errorf("providerId %q", info.ProviderID)
	}
	if info.PrependPathDirs == nil || info.TemporaryDirectories == nil {
		t.Error("prependPathDirs and temporaryDirectories must be lists, not null")
	}
	if len(info.Capabilities) != 16 || !info.Capabilities["fsWatchMissing"] || !info.Capabilities["environmentConfigRead"] || !info.Capabilities["capabilityDiscoveryV2"] {
		t.Errorf("capabilities %v", info.Capabilities)
	}
	if res := tc.mustCall("environment/status", map[string]any{}); string(res) != `{"status":"ready"}` {
		t.Errorf("environment/status %s", res)
	}
}

func TestEnvironmentConfigReadAnswersWithoutLayers(t *testing.T) {
	codexHome := t.TempDir()
	t.Setenv("CODEX_HOME", codexHome)
	ts := startTestServer(t)
	tc := ts.connect(t)
	cwd, _ := os.Getwd()
	home, _ := os.UserHomeDir()
	host, _ := os.Hostname()
	res := tc.mustCall("environmentConfig/read", map[string]any{"cwd": fileURI(cwd), "configPaths": [][]string{{"model"}}, "requirementsPaths": [][]string{}})
	want, _ := json.Marshal(map[string]any{
		"userHomeDir": fileURI(home), "codexHomeDir": fileURI(codexHome), "hostname": host,
		"config":       map[string]any{"layers": []any{}, "cloudInsertionIndex": 0},
		"requirements": map[string]any{"layers": []any{}, "cloudInsertionIndex": 0},
	})
	if !jsonEqual(res, want) {
		t.Errorf("got %s\nwant %s", res, want)
	}
	// A native path is a cwd too (docs/protocol.md §7.1).
	tc.mustCall("environmentConfig/read", map[string]any{"cwd": cwd, "configPaths": [][]string{}, "requirementsPaths": [][]string{{"model"}}})
}

// TestEnvironmentDirectoriesAreAbsoluteURIs: a service may run without $HOME, or with
// CODEX_HOME or TMPDIR relative to its working directory; the client still gets absolute
// file: URIs (a relative path would render as "file://codex", a URI naming a host).
func TestEnvironmentDirectoriesAreAbsoluteURIs(t *testing.T) {
	t.Setenv("HOME", "")
	t.Setenv("CODEX_HOME", "codex-home")
	t.Setenv("TMPDIR", "tmp-dir")
	u, err := user.Current()
	if err != nil || u.HomeDir == "" {
		t.Skipf("no home directory in the user database: %v", err)
	}
	cwd, _ := os.Getwd()
	ts := startTestServer(t)
	tc := ts.connect(t)
	var info environmentInfo
	if err := json.Unmarshal(tc.mustCall("environment/info", nil), &info); err != nil {
		t.Fatal(err)
	}
	var cfg environmentConfigResult
	if err := json.Unmarshal(tc.mustCall("environmentConfig/read", map[string]any{"cwd": fileURI(cwd), "configPaths": [][]string{{"model"}}, "requirementsPaths": [][]string{}}), &cfg); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][2]string{
		"environment/info userHomeDir":        {info.UserHomeDir, fileURI(u.HomeDir)},
		"environment/info tempDir":            {info.TempDir, fileURI(filepath.Join(cwd, "tmp-dir"))},
		"environmentConfig/read userHomeDir":  {cfg.UserHomeDir, fileURI(u.HomeDir)},
		"environmentConfig/read codexHomeDir": {cfg.CodexHomeDir, fileURI(filepath.Join(cwd, "codex-home"))},
	} {
		if got[0] != got[1] {
			t.Errorf("%s = %q, want %q", name, got[0], got[1])
		}
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && string(mustJSON(x)) == string(mustJSON(y))
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v) // map keys come out sorted
	return b
}

// TestCapabilityDiscoveryAnswersEmpty: discovery with nothing to find (env_discovery_test.go has
// the rest).
func TestCapabilityDiscoveryAnswersEmpty(t *testing.T) {
	t.Setenv("CODEX_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	ts := startTestServer(t)
	tc := ts.connect(t)
	cwd, _ := os.Getwd()
	if res := tc.mustCall("capabilities/discoverV2", map[string]any{"cwd": fileURI(cwd), "extra": 1}); string(res) != `{"plugins":[],"skills":[],"warnings":[]}` {
		t.Errorf("capabilities/discoverV2 %s", res)
	}
	if res := tc.mustCall("capabilityRoots/discoverV1", map[string]any{"roots": []any{}}); string(res) != `{"roots":[]}` {
		t.Errorf("capabilityRoots/discoverV1 without roots: %s", res)
	}
	empty := t.TempDir()
	want := `{"roots":[{"id":"r1","path":"` + fileURI(empty) + `","plugin":null,"skills":[],"namespaceManifests":[],"warnings":[],"error":null}]}`
	if res := tc.mustCall("capabilityRoots/discoverV1", map[string]any{"roots": []any{map[string]any{"id": "r1", "path": fileURI(empty)}}}); string(res) != want {
		t.Errorf("capabilityRoots/discoverV1 of an empty directory: %s", res)
	}
}

func TestEnvironmentMethodErrors(t *testing.T) {
	ts := startTestServer(t)
	fresh := ts.dial(t)
	for method, family := range map[string]string{
		"environment/info":           "environment info",
		"environment/status":         "environment status",
		"environmentConfig/read":     "environment config",
		"capabilities/discoverV2":    "capability discovery",
		"capabilityRoots/discoverV1": "capability discovery",
	} {
		params := any(map[string]any{"cwd": "file:///", "configPaths": [][]string{}, "requirementsPaths": [][]string{}, "roots": []any{}})
		if method == "environment/info" || method == "environment/status" {
			params = nil
		}
		if e := fresh.callErr(method, params); e.Code != codeInvalidRequest || e.Message != "client must call initialize before using "+family+" methods" {
			t.Errorf("%s before initialize: %+v", method, e)
		}
	}
	tc := ts.connect(t)
	for _, tt := range []struct {
		method string
		params any
		code   int
		msg    string
	}{
		{"environmentConfig/read", map[string]any{}, codeInvalidParams, "missing field `cwd`"},
		{"environmentConfig/read", map[string]any{"cwd": "file:///tmp"}, codeInvalidParams, "missing field `configPaths`"},
		{"environmentConfig/read", map[string]any{"cwd": "file:///tmp", "configPaths": [][]string{}}, codeInvalidParams, "missing field `requirementsPaths`"},
		{"environmentConfig/read", nil, codeInvalidParams, "invalid type: null, expected struct EnvironmentConfigReadParams"},
		{"environmentConfig/read", map[string]any{"cwd": "relative/dir", "configPaths": [][]string{}, "requirementsPaths": [][]string{}}, codeInvalidParams, "invalid URI: relative URL without a base"},
		{"environmentConfig/read", map[string]any{"cwd": "file://server/share", "configPaths": [][]string{{"a"}}, "requirementsPaths": [][]string{}}, codeInvalidParams, "'file://server/share' is invalid on '" + runtime.GOOS + "'"},
		{"environmentConfig/read", map[string]any{"cwd": "file://server/share", "configPaths": [][]string{}, "requirementsPaths": [][]string{}}, codeInvalidParams, "at least one config or requirements path is required"},
		{"capabilityRoots/discoverV1", map[string]any{}, codeInvalidParams, "missing field `roots`"},
		{"capabilities/discoverV2", map[string]any{}, codeInvalidParams, "missing field `cwd`"},
		{"capabilities/discoverV2", map[string]any{"cwd": "https://x/"}, codeInvalidParams, "unsupported path URI scheme `https`"},
		{"environment/info", []any{}, codeInvalidParams, "invalid type: sequence, expected unit"},
		{"environment/status", map[string]any{"a": 1}, codeInvalidParams, "invalid type: map, expected unit"},
	} {
		if e := tc.callErr(tt.method, tt.params); e.Code != tt.code || e.Message != tt.msg {
			t.Errorf("%s %v: got %d %q, want %d %q", tt.method, tt.params, e.Code, e.Message, tt.code, tt.msg)
		}
	}
}
