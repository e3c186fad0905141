package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMCPServerBearer drives the loopback MCP server over real HTTP: without the bearer it
// answers 401 and lists nothing; with it, initialize echoes the protocol version and tools/list
// names the probe tool.
func TestMCPServerBearer(t *testing.T) {
	s, err := startMCPServer(newEventLog(io.Discard, false), "tok-1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	post := func(auth, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, s.URL(), strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := post("Bearer wrong", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); code != http.StatusUnauthorized {
		t.Errorf("wrong bearer: status %d, want 401", code)
	}
	if code, body := post("Bearer tok-1", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`); code != 200 || !strings.Contains(body, `"protocolVersion":"2025-03-26"`) {
		t.Errorf("initialize: %d %s", code, body)
	}
	if code, _ := post("Bearer tok-1", `{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
		t.Errorf("notification: status %d, want 202", code)
	}
	if code, body := post("Bearer tok-1", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); code != 200 || !strings.Contains(body, mcpToolName) {
		t.Errorf("tools/list: %d %s", code, body)
	}
	st := s.Stats()
	if st.AuthBad != 1 || st.AuthOK != 3 || !st.Listed {
		t.Errorf("stats %+v", st)
	}
}

// TestCapsWireHelpers checks the wire readers the capability checks explain failures with.
func TestCapsWireHelpers(t *testing.T) {
	msg := func(conn int, dir, s string) wireMessage {
		return wireMessage{Conn: conn, Dir: dir, Data: []byte(s)}
	}
	msgs := []wireMessage{
		msg(1, "c2s", `{"id":1,"method":"initialize","params":{}}`),
		msg(1, "s2c", `{"id":1,"result":{"environmentInfo":{"capabilities":{"shellSnapshotV2":false,"httpHeaderEnvVars":true}}}}`),
		msg(1, "c2s", `{"id":2,"method":"capabilities/discoverV2","params":{"cwd":"file:///w"}}`),
		msg(2, "s2c", `{"id":2,"result":{"other":true}}`), // another connection's id 2
		msg(1, "s2c", `{"id":2,"result":{"skills":[]}}`),
	}
	if got := wireCalls(msgs, "capabilities/discoverV2"); len(got) != 1 || string(got[0]) != `{"cwd":"file:///w"}` {
		t.Errorf("wireCalls = %s", got)
	}
	if got := wireAnswers(msgs, "capabilities/discoverV2"); len(got) != 1 || got[0] != `{"skills":[]}` {
		t.Errorf("wireAnswers = %q", got)
	}
	if got := advertised(msgs, "shellSnapshotV2"); got != "the executor advertises shellSnapshotV2=false" {
		t.Errorf("advertised = %q", got)
	}
	if got := advertised(nil, "shellSnapshotV2"); got != "" {
		t.Errorf("advertised without a wire = %q", got)
	}
	if r := snapshotWireResult(msgs, true); r.OK || !strings.Contains(r.Detail, "shellSnapshotV2=false") {
		t.Errorf("snapshotWireResult = %+v", r)
	}
}

// TestCapsFixture checks the fixture tree: each skill where one discovery path finds it, with
// the run's marker in its description, and the profile's export.
func TestCapsFixture(t *testing.T) {
	f, err := newCapsFixture(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		filepath.Join(f.execHome, "skills", homeSkill, "SKILL.md"):              "description: " + f.skillDescription(homeSkill),
		filepath.Join(f.userHome, ".agents", "skills", agentsSkill, "SKILL.md"): "name: " + agentsSkill,
		filepath.Join(f.capRoot, "skills", rootSkill, "SKILL.md"):               f.marker,
		filepath.Join(f.userHome, ".bash_profile"):                              "export " + profileVar + "=" + f.profileValue(),
	} {
		b, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s: %v, lacks %q", path, err, want)
		}
	}
	var toml strings.Builder
	toml.WriteString(capsConfig("http://127.0.0.1:1/mcp", true))
	for _, want := range []string{"executor_capability_discovery_v2 = true", `bearer_token_env_var = "` + mcpTokenEnv + `"`, `environment_id = "remote"`} {
		if !strings.Contains(toml.String(), want) {
			t.Errorf("capsConfig lacks %q", want)
		}
	}
	if b, _ := json.Marshal(f.executorEnv()); !strings.Contains(string(b), mcpTokenEnv+"="+f.token) {
		t.Errorf("executorEnv %s lacks the token", b)
	}
}
