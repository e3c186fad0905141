package main

// End-to-end tests of remote mode's registry credentials (docs/remote.md §8): the exact headers
// each credential mode sends on register and validate, the refresh of a Codex sign-in after a
// 401, and the errors of a missing sign-in, an expired refresh token and a wrong account, none
// of which may carry a secret.

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// registryHeaders checks that h holds exactly want (besides Content-Length). A value "*"
// only asks for presence.
func registryHeaders(t *testing.T, op string, h http.Header, want map[string]string) {
	t.Helper()
	var got, wanted []string
	for k := range h {
		if k != "Content-Length" {
			got = append(got, k)
		}
	}
	for k, v := range want {
		wanted = append(wanted, http.CanonicalHeaderKey(k))
		if v != "*" && h.Get(k) != v {
			t.Errorf("%s: %s = %q, want %q", op, k, h.Get(k), v)
		}
	}
	sort.Strings(got)
	sort.Strings(wanted)
	if strings.Join(got, ",") != strings.Join(wanted, ",") {
		t.Errorf("%s: headers %v, want exactly %v", op, got, wanted)
	}
}

// requestsTo returns the recorded requests whose path ends in suffix.
func (e *remoteEnv) requestsTo(suffix string) []registryRequest {
	var out []registryRequest
	for _, r := range e.reg.snapshot() {
		if strings.HasSuffix(r.path, suffix) {
			out = append(out, r)
		}
	}
	return out
}

// assertQuiet fails if the executor's log holds any of the secrets.
func (e *remoteEnv) assertQuiet(secrets ...string) {
	e.t.Helper()
	logs := e.logs.String()
	for _, s := range secrets {
		if s != "" && strings.Contains(logs, s) {
			e.t.Errorf("the log contains a secret (%.12s…)", s)
		}
	}
}

// waitErr waits for runRemote to fail and returns its error.
func (e *remoteEnv) waitErr() error {
	e.t.Helper()
	select {
	case err := <-e.done:
		e.done <- nil // for the cleanup
		if err == nil {
			e.t.Fatal("runRemote returned nil, want an error")
		}
		return err
	case <-time.After(remoteTestTimeout):
		e.t.Fatal("runRemote kept running")
		return nil
	}
}

func writeAuthDoc(t *testing.T, doc map[string]any) string {
	t.Helper()
	home := t.TempDir()
	writeCodexAuth(t, home, doc)
	return home
}

func TestRemoteCredentialModeHeaders(t *testing.T) {
	future := time.Now().Add(time.Hour)
	chatAccess := chatGPTTestToken("acct-1", future, nil)
	chatDoc := chatGPTAuthDoc(chatAccess, "rt-secret-1", "acct-1")
	chatDoc["tokens"].(map[string]any)["id_token"] = chatGPTTestToken("acct-1", future, map[string]any{"chatgpt_account_is_fedramp": true})
	chatHome := writeAuthDoc(t, chatDoc)
	keyHome := writeAuthDoc(t, map[string]any{"auth_mode": "apikey", "OPENAI_API_KEY": "sk-file-secret"})
	stdinToken := chatGPTTestToken("acct-2", future, nil)
	agent := newAgentIdentityFixture(t)
	agentJWT := agent.jwt("k1", nil, nil)

	tests := []struct {
		name    string
		setup   remoteSetup
		want    map[string]string
		secrets []string
		check   func(t *testing.T, h http.Header)
	}{
		{"CODEX_API_KEY", remoteSetup{flags: []string{}, env: envOf("CODEX_API_KEY", "sk-env-secret", "CODEX_HOME", chatHome)},
			map[string]string{"Authorization": "Bearer sk-env-secret"}, []string{"sk-env-secret"}, nil},
		{"auth.json API key", remoteSetup{flags: []string{}, env: envOf("CODEX_HOME", keyHome)},
			map[string]string{"Authorization": "Bearer sk-file-secret"}, []string{"sk-file-secret"}, nil},
		{"auth.json ChatGPT", remoteSetup{flags: []string{}, env: envOf("CODEX_HOME", chatHome)},
			map[string]string{"Authorization": "Bearer " + chatAccess, "ChatGPT-Account-ID": "acct-1", "X-OpenAI-Fedramp": "true"},
			[]string{chatAccess, "rt-secret-1"}, nil},
		{"--chatgpt-token-stdin", remoteSetup{flags: []string{"--chatgpt-token-stdin", "--chatgpt-account-id", "acct-2"},
			stdin: strings.NewReader(stdinToken + "\n"), tls: true},
			map[string]string{"Authorization": "Bearer " + stdinToken, "ChatGPT-Account-ID": "acct-2"}, []string{stdinToken}, nil},
		{"--use-agent-identity-auth", remoteSetup{flags: []string{"--use-agent-identity-auth"}, env: envOf(
			"CODEX_ACCESS_TOKEN", agentJWT,
			agentIdentityJWKSBaseEnv, agent.srv.URL+"/backend-api",
			agentIdentityAuthAPIBaseEnv, agent.srv.URL+"/api/accounts")},
			map[string]string{"Authorization": "*", "ChatGPT-Account-ID": "acct-agent", "X-OpenAI-Fedramp": "true"},
			[]string{agentJWT, agent.keyB64}, func(t *testing.T, h http.Header) {
				b64, ok := strings.CutPrefix(h.Get("Authorization"), "AgentAssertion ")
				raw, err := base64.RawURLEncoding.DecodeString(b64)
				var a map[string]string
				if !ok || err != nil || json.Unmarshal(raw, &a) != nil || len(a) != 4 {
					t.Fatalf("Authorization %q is not an AgentAssertion", h.Get("Authorization"))
				}
				sig, _ := base64.StdEncoding.DecodeString(a["signature"])
				if a["agent_runtime_id"] != agentTestRuntime || a["task_id"] != "task-plain" ||
					!ed25519.Verify(agent.agentKey.Public().(ed25519.PublicKey), []byte(agentTestRuntime+":task-plain:"+a["timestamp"]), sig) {
					t.Fatalf("assertion %v does not verify", a)
				}
			}},
		{"--registration-bearer-stdin", remoteSetup{flags: []string{"--registration-bearer-stdin"}, stdin: strings.NewReader("bearer-secret\n")},
			map[string]string{"Authorization": "Bearer bearer-secret"}, []string{"bearer-secret"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startRemoteWith(t, tt.setup)
			e.harness().mustOpen("s-1").initialize()
			reg, val := e.requestsTo("/register"), e.requestsTo("/validate")
			if len(reg) != 1 || len(val) != 1 {
				t.Fatalf("%d registrations and %d validations, want 1 and 1", len(reg), len(val))
			}
			common := map[string]string{"Content-Type": "application/json", "Accept": "*/*", "Accept-Encoding": "gzip"}
			for k, v := range tt.want {
				common[k] = v
			}
			registryHeaders(t, "register", reg[0].header, common)
			common[registryStreamIDHeader] = "s-1"
			registryHeaders(t, "validate", val[0].header, common)
			if tt.check != nil {
				tt.check(t, reg[0].header)
				tt.check(t, val[0].header)
			}
			e.assertQuiet(tt.secrets...)
		})
	}
}

func TestRemoteCodexLoginRefreshesOn401(t *testing.T) {
	te := newTokenEndpoint(t)
	old := chatGPTTestToken("acct-1", time.Now().Add(time.Hour), nil)
	home := writeAuthDoc(t, chatGPTAuthDoc(old, "rt-old-secret", "acct-1"))
	var validates atomic.Int32
	e := startRemoteWith(t, remoteSetup{flags: []string{}, env: envOf("CODEX_HOME", home)}, func(e *remoteEnv, _ *remoteConfig) {
		e.reg.register = []func(http.ResponseWriter){status(401)}
		e.reg.validate = func(w http.ResponseWriter, _ map[string]json.RawMessage) {
			if validates.Add(1) == 1 {
				w.WriteHeader(401)
				return
			}
			io.WriteString(w, `{"valid":true}`)
		}
	})
	h := e.harness()
	// The token refreshed for register is refused by validate at once: that is no stale
	// token, so it is not refreshed again (docs/remote.md §8), and the harness hears that the
	// registry refused the executor's credential.
	if _, err := h.open("s-1"); err == nil || !errors.Is(err, errNoiseRegistryRejected) {
		t.Fatalf("open s-1 under a validate 401: %v, want the registry rejection", err)
	}
	h.mustOpen("s-2").initialize()

	tokens := func() map[string]any { return readAuthJSON(t, home)["tokens"].(map[string]any) }
	reg := e.requestsTo("/register")
	if len(reg) != 2 || reg[0].header.Get("Authorization") != "Bearer "+old {
		t.Fatalf("%d registrations (want 2), the first with the old token", len(reg))
	}
	if te.requests.Load() != 1 || te.seen[0] != "rt-old-secret" {
		t.Fatalf("refreshes %d with %v, want 1: rt-old-secret", te.requests.Load(), te.seen)
	}
	if got := tokens()["refresh_token"]; got != "rt-new-1" {
		t.Fatalf("auth.json refresh_token %v, want rt-new-1", got)
	}
	access := tokens()["access_token"].(string)
	val := e.requestsTo("/validate")
	if len(val) != 2 || val[0].header.Get("Authorization") != "Bearer "+access || val[1].header.Get("Authorization") != "Bearer "+access ||
		reg[1].header.Get("Authorization") != "Bearer "+access {
		t.Fatal("the requests after the refresh did not carry the refreshed tokens")
	}
	e.assertQuiet(old, access, "rt-old-secret", "rt-new-1")
}

func TestRemoteCredentialErrors(t *testing.T) {
	t.Run("no sign-in", func(t *testing.T) {
		e := startRemoteWith(t, remoteSetup{flags: []string{}, env: envOf("CODEX_HOME", t.TempDir())})
		if err := e.waitErr(); !errors.Is(err, errCodexNotLoggedIn) || !strings.Contains(err.Error(), "codex login") {
			t.Fatalf("err = %v, want errCodexNotLoggedIn", err)
		}
		if e.count("/register") != 0 {
			t.Fatal("registered without a credential")
		}
	})
	t.Run("expired refresh token", func(t *testing.T) {
		te := newTokenEndpoint(t)
		te.status, te.body = 401, `{"error":{"code":"refresh_token_expired","message":"expired"}}`
		stale := chatGPTTestToken("acct-1", time.Now().Add(-time.Hour), nil)
		home := writeAuthDoc(t, chatGPTAuthDoc(stale, "rt-expired-secret", "acct-1"))
		e := startRemoteWith(t, remoteSetup{flags: []string{}, env: envOf("CODEX_HOME", home)})
		err := e.waitErr()
		if !errors.Is(err, errCodexLoginExpired) || !strings.Contains(err.Error(), "codex login") {
			t.Fatalf("err = %v, want errCodexLoginExpired", err)
		}
		assertNoSecrets(t, err, stale, "rt-expired-secret")
		e.assertQuiet(stale, "rt-expired-secret")
	})
	t.Run("registry rejects the refreshed token too", func(t *testing.T) {
		newTokenEndpoint(t)
		old := chatGPTTestToken("acct-1", time.Now().Add(time.Hour), nil)
		home := writeAuthDoc(t, chatGPTAuthDoc(old, "rt-old-secret", "acct-1"))
		e := startRemoteWith(t, remoteSetup{flags: []string{}, env: envOf("CODEX_HOME", home)}, func(e *remoteEnv, _ *remoteConfig) {
			e.reg.register = []func(http.ResponseWriter){status(401), status(401)}
		})
		if err := e.waitErr(); !strings.Contains(err.Error(), "HTTP 401") {
			t.Fatalf("err = %v, want HTTP 401", err)
		}
		if n := e.count("/register"); n != 2 {
			t.Fatalf("%d registrations, want 2: one recovery, then final", n)
		}
	})
	t.Run("wrong ChatGPT account", func(t *testing.T) {
		tok := chatGPTTestToken("acct-real", time.Now().Add(time.Hour), nil)
		e := startRemoteWith(t, remoteSetup{flags: []string{"--chatgpt-token-stdin", "--chatgpt-account-id", "acct-other"},
			stdin: strings.NewReader(tok + "\n"), tls: true})
		err := e.waitErr()
		if !errors.Is(err, errChatGPTAccountID) {
			t.Fatalf("err = %v, want errChatGPTAccountID", err)
		}
		assertNoSecrets(t, err, tok)
		if e.count("/register") != 0 {
			t.Fatal("registered with a token of another account")
		}
	})
	t.Run("ChatGPT token without a newline", func(t *testing.T) {
		tok := chatGPTTestToken("acct-1", time.Now().Add(time.Hour), nil)
		e := startRemoteWith(t, remoteSetup{flags: []string{"--chatgpt-token-stdin"}, stdin: strings.NewReader(tok), tls: true})
		err := e.waitErr()
		if !strings.Contains(err.Error(), "newline-terminated") {
			t.Fatalf("err = %v", err)
		}
		assertNoSecrets(t, err, tok)
	})
	t.Run("ChatGPT token from a regular file", func(t *testing.T) {
		f, err := os.Create(filepath.Join(t.TempDir(), "token"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		io.WriteString(f, "x.y.z\n")
		f.Seek(0, io.SeekStart)
		e := startRemoteWith(t, remoteSetup{flags: []string{"--chatgpt-token-stdin"}, stdin: f, tls: true})
		if err := e.waitErr(); !strings.Contains(err.Error(), "pipe or a socket") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("Agent Identity JWT that does not verify", func(t *testing.T) {
		agent := newAgentIdentityFixture(t)
		jwt := agent.jwt("unknown-kid", nil, nil)
		e := startRemoteWith(t, remoteSetup{flags: []string{"--use-agent-identity-auth"}, env: envOf(
			"CODEX_ACCESS_TOKEN", jwt, agentIdentityJWKSBaseEnv, agent.srv.URL+"/backend-api",
			agentIdentityAuthAPIBaseEnv, agent.srv.URL+"/api/accounts")})
		err := e.waitErr()
		if !strings.Contains(err.Error(), "--use-agent-identity-auth") {
			t.Fatalf("err = %v", err)
		}
		assertNoSecrets(t, err, jwt, agent.keyB64)
	})
}
