package main

// Tests of remote mode's command line (docs/remote.md §2.1): flag validation and --remote-ca.

import (
	"encoding/pem"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func noEnv(string) (string, bool) { return "", false }

// envOf is a lookupEnv of name, value pairs.
func envOf(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestRemoteConfigValidate(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	os.WriteFile(ca, pemCert(srv.Certificate().Raw), 0o600)
	notPEM := filepath.Join(t.TempDir(), "x.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	apiKey := func(string) (string, bool) { return "sk-test", true }
	awsEnv := envOf("AWS_ACCESS_KEY_ID", "AKIDTEST", "AWS_SECRET_ACCESS_KEY", "secret/KEY", "HOME", "/nonexistent")

	tests := []struct {
		name    string
		args    []string
		env     func(string) (string, bool)
		wantErr string // "" = valid
	}{
		{"https with bearer", []string{"--remote", "https://registry.example/api/", "--environment-id", "env-1", "--registration-bearer-stdin"}, noEnv, ""},
		{"loopback http", []string{"--remote", "http://127.0.0.1:9", "--environment-id", "e_1", "--executor-credential-stdin"}, noEnv, ""},
		{"localhost http", []string{"--remote", "http://localhost:9", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, ""},
		{"ipv6 loopback http", []string{"--remote", "http://[::1]:9", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, ""},
		{"api key to loopback", []string{"--remote", "http://127.0.0.1:9", "--environment-id", "e"}, apiKey, ""},
		{"api key to openai", []string{"--remote", "https://api.openai.com", "--environment-id", "e"}, apiKey, ""},
		{"remote CA", []string{"--remote", "https://r.example", "--environment-id", "e", "--registration-bearer-stdin", "--remote-ca", ca}, noEnv, ""},
		{"env id without remote", []string{"--environment-id", "e"}, noEnv, "need --remote"},
		{"remote without env id", []string{"--remote", "https://r.example", "--registration-bearer-stdin"}, noEnv, "needs --environment-id"},
		{"plain http off loopback", []string{"--remote", "http://registry.example", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "must use https"},
		{"userinfo", []string{"--remote", "https://u:p@registry.example", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "userinfo"},
		{"fragment", []string{"--remote", "https://registry.example/#x", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "fragment"},
		{"empty fragment", []string{"--remote", "https://registry.example/#", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "fragment"},
		{"space in the query", []string{"--remote", "https://registry.example/?a b", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "space or a control character"},
		{"query", []string{"--remote", "https://registry.example/?a=b", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "query"},
		{"relative", []string{"--remote", "registry.example", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "absolute URL"},
		{"ws scheme", []string{"--remote", "ws://127.0.0.1:9", "--environment-id", "e", "--registration-bearer-stdin"}, noEnv, "must use https"},
		{"env id with slash", []string{"--remote", "https://r.example", "--environment-id", "bad/id", "--registration-bearer-stdin"}, noEnv, "only letters"},
		{"env id with space", []string{"--remote", "https://r.example", "--environment-id", "a b", "--registration-bearer-stdin"}, noEnv, "only letters"},
		{"env id too long", []string{"--remote", "https://r.example", "--environment-id", strings.Repeat("a", 257), "--registration-bearer-stdin"}, noEnv, "1 to 256"},
		{"two stdin credentials", []string{"--remote", "https://r.example", "--environment-id", "e", "--registration-bearer-stdin", "--executor-credential-stdin"}, noEnv, "cannot be combined"},
		{"no flag: the Codex sign-in", []string{"--remote", "https://r.example", "--environment-id", "e"}, noEnv, ""},
		{"chatgpt token", []string{"--remote", "https://r.example", "--environment-id", "e", "--chatgpt-token-stdin", "--chatgpt-account-id", "acct-1"}, noEnv, ""},
		{"chatgpt token over loopback http", []string{"--remote", "http://127.0.0.1:9", "--environment-id", "e", "--chatgpt-token-stdin"}, noEnv, "must use HTTPS"},
		{"chatgpt account without token", []string{"--remote", "https://r.example", "--environment-id", "e", "--chatgpt-account-id", "a"}, apiKey, "needs --chatgpt-token-stdin"},
		{"chatgpt account invalid", []string{"--remote", "https://r.example", "--environment-id", "e", "--chatgpt-token-stdin", "--chatgpt-account-id", "a b"}, noEnv, "invalid ChatGPT account ID"},
		{"chatgpt token and bearer", []string{"--remote", "https://r.example", "--environment-id", "e", "--chatgpt-token-stdin", "--registration-bearer-stdin"}, noEnv, "cannot be combined"},
		{"agent identity", []string{"--remote", "https://r.example", "--environment-id", "e", "--use-agent-identity-auth"}, envOf("CODEX_ACCESS_TOKEN", "a.b.c"), ""},
		{"agent identity without token", []string{"--remote", "https://r.example", "--environment-id", "e", "--use-agent-identity-auth"}, noEnv, "CODEX_ACCESS_TOKEN"},
		{"agent identity and executor credentials", []string{"--remote", "https://r.example", "--environment-id", "e", "--use-agent-identity-auth", "--executor-credential-stdin"}, envOf("CODEX_ACCESS_TOKEN", "a.b.c"), "cannot be combined"},
		{"direct", []string{"--remote", "https://r.example", "--environment-id", "e", "--remote-transport", "direct", "--aws-sigv4", "--aws-region", "eu-west-1"}, awsEnv, ""},
		{"direct without sigv4", []string{"--remote", "https://r.example", "--environment-id", "e", "--remote-transport", "direct"}, awsEnv, "--remote-transport direct requires --aws-sigv4"},
		{"sigv4 without direct", []string{"--remote", "https://r.example", "--environment-id", "e", "--aws-sigv4"}, awsEnv, "--aws-sigv4 requires --remote-transport direct"},
		{"direct with executor credentials", []string{"--remote", "https://r.example", "--environment-id", "e", "--remote-transport", "direct", "--aws-sigv4", "--executor-credential-stdin"}, awsEnv, "direct transport does not support scoped executor credentials"},
		{"direct with agent identity", []string{"--remote", "https://r.example", "--environment-id", "e", "--remote-transport", "direct", "--aws-sigv4", "--use-agent-identity-auth"}, awsEnv, "cannot be combined"},
		{"direct without AWS keys", []string{"--remote", "https://r.example", "--environment-id", "e", "--remote-transport", "direct", "--aws-sigv4", "--aws-region", "r"}, envOf("HOME", "/nonexistent"), "--aws-sigv4"},
		{"aws flags without sigv4", []string{"--remote", "https://r.example", "--environment-id", "e", "--aws-region", "r"}, apiKey, "need --aws-sigv4"},
		{"unknown transport", []string{"--remote", "https://r.example", "--environment-id", "e", "--remote-transport", "carrier-pigeon"}, apiKey, "want noise or direct"},
		{"api key to a foreign host", []string{"--remote", "https://r.example", "--environment-id", "e"}, apiKey, "only sent to HTTPS openai.com"},
		{"api key over http to openai", []string{"--remote", "http://api.openai.com", "--environment-id", "e"}, apiKey, "must use https"},
		{"missing CA file", []string{"--remote", "https://r.example", "--environment-id", "e", "--registration-bearer-stdin", "--remote-ca", "/nonexistent/ca.pem"}, noEnv, "--remote-ca"},
		{"CA file without PEM", []string{"--remote", "https://r.example", "--environment-id", "e", "--registration-bearer-stdin", "--remote-ca", notPEM}, noEnv, "no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			var c remoteConfig
			c.registerFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if !c.enabled() {
				t.Fatal("enabled() = false with remote flags")
			}
			c.lookupEnv = tt.env
			err := c.validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("validate = %v, want an error containing %q", err, tt.wantErr)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
	t.Run("no remote flags: disabled", func(t *testing.T) {
		var c remoteConfig
		c.registerFlags(flag.NewFlagSet("x", flag.ContinueOnError))
		if c.enabled() {
			t.Fatal("enabled() = true without flags")
		}
	})
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
