package main

// Tests of process/start's managed network proxy (proc_netproxy.go, docs/network.md §6).

import (
	"encoding/json"
	"fmt"
	"testing"
)

// netProxyTestSandbox is a managed sandbox reading everything, writing nothing, with the
// network "enabled" or "restricted".
func netProxyTestSandbox(network string) map[string]any {
	return map[string]any{
		"permissions": map[string]any{
			"type": "managed", "network": network,
			"file_system": map[string]any{"type": "restricted", "entries": []any{
				map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "root"}}, "access": "read"},
			}},
		},
		"windowsSandboxLevel": "disabled",
	}
}

// TestProcessNetProxyParams: process/start decodes networkProxy, managedNetwork and
// enforceManagedNetwork with the reference's answers (each measured on Codex 0.171.0), and
// refuses a disabled proxy before anything else of the start, as it does.
func TestProcessNetProxyParams(t *testing.T) {
	tc := startTestServer(t).connect(t)
	disabled := map[string]any{}
	json.Unmarshal([]byte(netProxyBaseConfig), &disabled)
	disabled["enabled"] = false
	cases := []struct {
		field string
		value any
		want  string // "" when the start succeeds
	}{
		{"enforceManagedNetwork", nil, "invalid type: null, expected a boolean"},
		{"enforceManagedNetwork", "x", `invalid type: string "x", expected a boolean`},
		{"networkProxy", nil, ""},
		{"managedNetwork", nil, ""},
		{"networkProxy", map[string]any{}, "missing field `proxy`"},
		{"networkProxy", map[string]any{"proxy": map[string]any{}}, "missing field `enabled`"},
		{"managedNetwork", map[string]any{"loopbackPorts": nil}, "invalid type: null, expected a sequence"},
		{"managedNetwork", map[string]any{"loopbackPorts": []int{8080}, "allowLocalBinding": true}, ""},
		{"networkProxy", map[string]any{"proxy": disabled}, "invalid network proxy config: executor-local network proxy launch requires an enabled proxy"},
	}
	for i, c := range cases {
		id := fmt.Sprintf("p%d", i)
		params := with(procStart(t, id, "true"), c.field, c.value)
		if c.want == "" {
			if r := tc.run(params); r.exitCode != 0 {
				t.Errorf("%s=%v: exit code %d", c.field, c.value, r.exitCode)
			}
			continue
		}
		// Before argv's own check, as the reference's.
		params["argv"] = []string{}
		err := tc.callErr("process/start", params)
		if err == nil || err.Code != codeInvalidParams || err.Message != c.want {
			t.Errorf("%s=%v: error %+v, want -32602 %q", c.field, c.value, err, c.want)
		}
	}
}
