package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseModes(t *testing.T) {
	for in, want := range map[string][]string{
		"danger-full-access":                     {modeFull},
		"all":                                    allModes,
		"read-only, workspace-write,read-only":   {modeRead, modeWrite},
		"workspace-write,all":                    {modeWrite, modeFull, modeRead},
		"danger-full-access,workspace-write,all": allModes,
	} {
		got, err := parseModes(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseModes(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseModes("workspace"); err == nil {
		t.Error("parseModes accepted an unknown mode")
	}
	if sandboxed([]string{modeFull}) || !sandboxed([]string{modeFull, modeRead}) {
		t.Error("sandboxed is wrong")
	}
}

func TestUnderTempDir(t *testing.T) {
	t.Setenv("TMPDIR", "")
	for path, want := range map[string]string{
		"/tmp":              "/tmp",
		"/tmp/x/y":          "/tmp",
		"/tmpx/y":           "",
		"/var/tmp/realcode": "",
		"/root/.cache/x":    "",
	} {
		if got := underTempDir(path); got != want {
			t.Errorf("underTempDir(%q) = %q, want %q", path, got, want)
		}
	}
	t.Setenv("TMPDIR", "/scratch/t/")
	if got := underTempDir("/scratch/t/rc"); got != "/scratch/t" {
		t.Errorf("under $TMPDIR: %q", got)
	}
}

func TestNewWorkdirAvoidsTmp(t *testing.T) {
	home := t.TempDir() // under /tmp: must be skipped
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", home)
	d, err := newWorkdir()
	if err != nil {
		t.Skipf("no /var/tmp here: %v", err)
	}
	defer os.RemoveAll(d)
	if underTempDir(d) != "" || !strings.HasPrefix(d, "/var/tmp/realcodex-") {
		t.Errorf("newWorkdir() = %s", d)
	}
}

func TestModelCatalog(t *testing.T) {
	var c struct {
		Models []map[string]any `json:"models"`
	}
	if err := json.Unmarshal(modelCatalog(), &c); err != nil || len(c.Models) != 1 {
		t.Fatalf("catalog: %v %v", err, c)
	}
	m := c.Models[0]
	if m["slug"] != "realcodex-mock" || m["apply_patch_tool_type"] != "freeform" || m["base_instructions"] == "" {
		t.Errorf("catalog entry %v", m)
	}
}

func TestTurnSandboxPolicy(t *testing.T) {
	for mode, typ := range map[string]string{modeFull: "dangerFullAccess", modeWrite: "workspaceWrite", modeRead: "readOnly"} {
		if got := turnSandboxPolicy(mode)["type"]; got != typ {
			t.Errorf("%s: type %v", mode, got)
		}
	}
}

// TestMockModelCustomToolCall checks that apply_patch is called with a custom_tool_call item
// and that its custom_tool_call_output counts as the step's output.
func TestMockModelCustomToolCall(t *testing.T) {
	logf, _ := os.Create(filepath.Join(t.TempDir(), "events.log"))
	defer logf.Close()
	m, err := startMockModel(newEventLog(logf, false))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.SetScript([]toolCall{patchCall("a.txt", "hello"), cmdCall("true")})
	post := func(input []any) string {
		body, _ := json.Marshal(map[string]any{"input": input, "tools": []any{map[string]string{"type": "custom", "name": "apply_patch"}}})
		resp, err := http.Post(m.BaseURL()+"/responses", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	first := post(nil)
	if !strings.Contains(first, `"type":"custom_tool_call"`) || !strings.Contains(first, `"input":"*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n"`) {
		t.Fatalf("first answer: %s", first)
	}
	second := post([]any{map[string]any{"type": "custom_tool_call_output", "call_id": m.CallID(0), "output": "Success."}})
	if !strings.Contains(second, `"type":"function_call"`) || !strings.Contains(second, `"name":"exec_command"`) {
		t.Fatalf("second answer: %s", second)
	}
	if _, _, outs := m.Result(); len(outs) != 1 || outs[0] != "Success." {
		t.Errorf("outputs %q", outs)
	}
}
