package main

// The leak test of credential masking (docs/network.md §8, "Tests"): real processes under
// each sandbox profile, with fake GitHub, OpenAI, AWS and custom credentials in the request's
// environment, and every channel a real value could reach the command or the client by read
// on the host: the command's environment, /proc/<pid>/environ of every process it can see,
// the PTY, argv, the shell snapshot and its capture, the server's errors and its log; then a
// local TLS host behind the proxy receives the real value while the command sees only the
// stand-in. New file: the end-to-end test of the wiring (proc_mask.go).

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// maskFake draws n characters of alphabet: a fake credential, fresh for each run.
func maskFake(t testing.TB, prefix, alphabet string, n int) string {
	t.Helper()
	b := []byte(prefix)
	for range n {
		i, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, alphabet[i.Int64()])
	}
	return string(b)
}

const (
	maskTestAlnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	maskTestUpper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
)

// maskSecrets are one run's fake credentials, by variable.
type maskSecrets map[string]string

func newMaskSecrets(t testing.TB) maskSecrets {
	return maskSecrets{
		"GITHUB_TOKEN":          maskFake(t, "ghp_", maskTestAlnum, 36),
		"OPENAI_API_KEY":        maskFake(t, "sk-proj-", maskTestAlnum, 48),
		"AWS_ACCESS_KEY_ID":     maskFake(t, "AKIA", maskTestUpper, 16),
		"AWS_SECRET_ACCESS_KEY": maskFake(t, "", maskTestAlnum, 40),
		"ACME_TOKEN":            maskFake(t, "acme_", maskTestAlnum, 32),
		// a custom provider that cannot compile: its variable is removed (D2)
		"BROKEN_TOKEN": maskFake(t, "brk_", maskTestAlnum, 32),
	}
}

// leaks names every secret whose real value s contains.
func (m maskSecrets) leaks(s string) []string {
	var out []string
	for k, v := range m {
		if strings.Contains(s, v) {
			out = append(out, k)
		}
	}
	return out
}

// maskOrigin is a TLS test host on 127.0.0.1 whose certificate is signed by a CA of its own,
// which only the server is given: it records every Authorization it receives and answers
// "auth=<it>".
type maskOrigin struct {
	srv  *httptest.Server
	pool *x509.CertPool
	mu   sync.Mutex
	seen []string
}

func startMaskOrigin(t *testing.T) *maskOrigin {
	t.Helper()
	ca := newTestCA(t, "mask origin test CA")
	leaf, err := ca.issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	o := &maskOrigin{pool: ca.pool}
	o.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		o.mu.Lock()
		o.seen = append(o.seen, a)
		o.mu.Unlock()
		fmt.Fprintf(w, "auth=%s\n", a)
	}))
	o.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	o.srv.StartTLS()
	t.Cleanup(o.srv.Close)
	return o
}

func (o *maskOrigin) received() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen...)
}

func (o *maskOrigin) url() string { return "https://" + o.srv.Listener.Addr().String() }

// maskStart is a PTY process/start of sh running script with secrets (and PATH) in its
// environment, masking on, ACME_TOKEN a custom provider for the origin, BROKEN_TOKEN one
// that cannot compile.
func maskStart(t *testing.T, id, script string, secrets maskSecrets, o *maskOrigin) map[string]any {
	env := map[string]string{"PATH": os.Getenv("PATH"), "HOME": t.TempDir()}
	for k, v := range secrets {
		env[k] = v
	}
	params := netProxyStartParams(t, id, script, map[string]any{
		"domains":           map[string]string{"127.0.0.1": "allow"},
		"credentialMasking": true,
		"credentialProviders": map[string]any{
			"acme":   map[string]any{"env": []string{"ACME_TOKEN"}, "patterns": []string{"acme_[A-Za-z0-9]{32}"}, "url_prefixes": []string{o.url()}, "auth": []string{"bearer"}},
			"broken": map[string]any{"env": []string{"BROKEN_TOKEN"}, "patterns": []string{"("}, "url_prefixes": []string{o.url()}},
		},
	}, 0)
	params["env"] = env
	params["tty"] = true
	return params
}

// maskScript prints what the command can see: argv (a real value written into the script),
// its environment, /proc/<pid>/environ of every process it can see, then fetches the origin
// through its proxy with the stand-in of ACME_TOKEN.
func maskScript(secrets maskSecrets, o *maskOrigin) string {
	return `echo "ARGV ` + secrets["GITHUB_TOKEN"] + `"; echo "== env"; env | sort; ` +
		`echo "== environ"; for f in /proc/[0-9]*/environ; do echo "-- $f"; tr '\0' '\n' < "$f" 2>/dev/null; done; ` +
		`echo "== curl"; curl -sS --max-time 20 -H "Authorization: Bearer $ACME_TOKEN" ` + o.url() + `/echo; echo "== done"`
}

// maskTestServer starts a server with its masking state under a fresh state directory, the
// origin's CA as the only roots it verifies intercepted origins with, and its log kept.
func maskTestServer(t *testing.T, o *maskOrigin, opts ...func(*server)) (*testServer, *syncBuffer) {
	logs := &syncBuffer{}
	all := append([]func(*server){func(s *server) {
		s.log = newTextLogger(logs, levelDebug)
		maskTestHooks(s, filepath.Join(t.TempDir(), "state"), o.pool)
	}}, opts...)
	return startTestServer(t, all...), logs
}

var maskEnvLineRE = regexp.MustCompile(`(?m)^([A-Z_]+)=(.*?)\r?$`)

// maskEnvOf is the KEY=value lines of the "== env" section of out.
func maskEnvOf(out string) map[string]string {
	_, after, _ := strings.Cut(out, "== env")
	sec, _, _ := strings.Cut(after, "== environ")
	env := map[string]string{}
	for _, m := range maskEnvLineRE.FindAllStringSubmatch(sec, -1) {
		env[m[1]] = m[2]
	}
	return env
}

// TestMaskNoLeak: under read-only, workspace-write, network-enabled, minimal-read and
// danger-full-access profiles, no real value reaches the command's environment, any
// /proc/<pid>/environ it can see, its PTY or its argv; each credential has a stand-in of its
// shape; the broken provider's variable is gone; the origin receives the real ACME_TOKEN and
// the command sees only the stand-in echoed. A snapshot's profile and capture, the errors of
// failed starts and the server's log hold no real value either.
func TestMaskNoLeak(t *testing.T) {
	requireUserNamespaces(t)
	netProxyTestHost(t) // skips without curl
	o := startMaskOrigin(t)
	secrets := newMaskSecrets(t)
	ts, logs := maskTestServer(t, o)
	tc := ts.connect(t)

	minimalRead := func(dir string) map[string]any {
		return map[string]any{
			"permissions": map[string]any{
				"type": "managed", "network": "restricted",
				"file_system": map[string]any{"type": "restricted", "entries": []any{
					map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "minimal"}}, "access": "read"},
					map[string]any{"path": map[string]any{"type": "path", "path": fileURI(dir)}, "access": "write"},
				}},
			},
			"windowsSandboxLevel": "disabled",
		}
	}
	for _, c := range []struct {
		name    string
		sandbox func(dir string) map[string]any
		routed  bool
	}{
		{"read-only", func(string) map[string]any { return netProxyTestSandbox("restricted") }, true},
		{"workspace-write", func(dir string) map[string]any { return workspaceTestSandbox("restricted", dir) }, true},
		{"network enabled", func(string) map[string]any { return netProxyTestSandbox("enabled") }, true},
		{"minimal read", minimalRead, true},
		{"danger-full-access", func(string) map[string]any {
			return map[string]any{"permissions": map[string]any{"type": "disabled"}, "windowsSandboxLevel": "disabled"}
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(o.received())
			params := maskStart(t, "m-"+strings.ReplaceAll(c.name, " ", "-"), maskScript(secrets, o), secrets, o)
			dir := t.TempDir()
			params["cwd"] = fileURI(dir)
			params["sandbox"] = c.sandbox(dir)
			if c.routed {
				params["enforceManagedNetwork"] = true
			}
			r := tc.run(params)
			out := r.pty()
			if leaked := secrets.leaks(out); len(leaked) > 0 {
				t.Errorf("the command saw the real value of %v", leaked)
			}
			env := maskEnvOf(out)
			for k, real := range secrets {
				if k == "BROKEN_TOKEN" {
					if v, ok := env[k]; ok {
						t.Errorf("BROKEN_TOKEN (its provider cannot compile) reached the command: %q", v)
					}
					continue
				}
				s := env[k]
				if s == "" || s == real || len(s) < len(real) {
					t.Errorf("%s = %q in the command's environment: want a stand-in of the real value's shape", k, s)
				}
			}
			if gh := env["GITHUB_TOKEN"]; !strings.HasPrefix(gh, "ghp_") || !strings.Contains(out, "ARGV "+gh) {
				t.Errorf("argv's real GitHub token did not become its stand-in %q", gh)
			}
			if env[maskMarkerActive] != "1" || env["SSL_CERT_FILE"] == "" || env["CURL_CA_BUNDLE"] != env["SSL_CERT_FILE"] {
				t.Errorf("markers or CA variables missing: active=%q SSL_CERT_FILE=%q CURL_CA_BUNDLE=%q", env[maskMarkerActive], env["SSL_CERT_FILE"], env["CURL_CA_BUNDLE"])
			}
			if !strings.Contains(out, "-- /proc/") {
				t.Errorf("the command walked no /proc/<pid>/environ")
			}
			got := o.received()[before:]
			want := "Bearer " + secrets["ACME_TOKEN"]
			if len(got) != 1 || got[0] != want {
				t.Errorf("the origin received %d requests, Authorization %q: want one carrying the real ACME_TOKEN", len(got), got)
			}
			if !strings.Contains(out, "auth=Bearer "+env["ACME_TOKEN"]) {
				t.Errorf("the command did not see the origin's echo as the stand-in:\n%s", tail(out, 2000))
			}
			if t.Failed() || os.Getenv("MASK_TEST_SHOW") != "" {
				t.Logf("command output (tail):\n%s", tail(out, 3000))
			}
		})
	}

	t.Run("snapshot", func(t *testing.T) {
		bash := shellPath(t, "bash")
		home := t.TempDir()
		profileGH := maskFake(t, "ghp_", maskTestAlnum, 36) // a credential the start does not carry
		profile := "export PROFILE_GH=" + profileGH + "\nsnapfn() { echo \"fn " + secrets["GITHUB_TOKEN"] + "\"; }\n"
		if err := os.WriteFile(filepath.Join(home, ".bash_profile"), []byte(profile), 0o644); err != nil {
			t.Fatal(err)
		}
		script := `echo "== env"; env | sort; echo "== environ"; for f in /proc/[0-9]*/environ; do echo "-- $f"; tr '\0' '\n' < "$f" 2>/dev/null; done; snapfn`
		params := maskStart(t, "snap", script, secrets, o)
		params["argv"] = []string{bash, "-lc", script}
		params["cwd"] = fileURI(home)
		params["env"].(map[string]string)["HOME"] = home
		params["shellSnapshot"] = map[string]any{"scopeId": "mask", "shell": map[string]string{"name": "bash", "path": bash}}
		params["sandbox"] = netProxyTestSandbox("restricted")
		params["enforceManagedNetwork"] = true
		r := tc.run(params)
		out := r.pty()
		secretsAndProfile := maskSecrets{"PROFILE_GH": profileGH}
		for k, v := range secrets {
			secretsAndProfile[k] = v
		}
		if leaked := secretsAndProfile.leaks(out); len(leaked) > 0 {
			t.Errorf("the command saw the real value of %v through its snapshot", leaked)
		}
		env := maskEnvOf(out)
		if !strings.Contains(out, "fn "+env["GITHUB_TOKEN"]) || env["GITHUB_TOKEN"] == "" {
			t.Errorf("the profile's function did not run with the stand-in (GITHUB_TOKEN=%q):\n%s", env["GITHUB_TOKEN"], tail(out, 2000))
		}
		if _, ok := env["PROFILE_GH"]; ok {
			t.Errorf("the profile's own GitHub token reached the command")
		}
		// The capture, read in the server's memory: it ran with stand-ins only.
		captured := 0
		for _, s := range ts.srv.sessions.all() {
			s.procs.snapshots.mu.Lock()
			for _, e := range s.procs.snapshots.entries {
				if e.cur != nil && e.cur.snap != nil {
					captured++
					var request maskSecrets = secrets
					all := e.cur.snap.state
					for k, v := range e.cur.snap.env {
						all += "\n" + k + "=" + v
					}
					if leaked := request.leaks(strings.ReplaceAll(all, "fn "+secrets["GITHUB_TOKEN"], "")); len(leaked) > 0 {
						t.Errorf("the capture saw the real value of %v", leaked)
					}
					if g := e.cur.snap.env["GITHUB_TOKEN"]; g != env["GITHUB_TOKEN"] {
						t.Errorf("the capture's GITHUB_TOKEN is %q, want the stand-in %q", g, env["GITHUB_TOKEN"])
					}
				}
			}
			s.procs.snapshots.mu.Unlock()
		}
		if captured == 0 {
			t.Errorf("no snapshot was captured")
		}
	})

	t.Run("errors", func(t *testing.T) {
		var msgs []string
		// a PTY program named after a credential: its spawn error names it
		p := maskStart(t, "e1", "true", secrets, o)
		p["argv"] = []string{"./no-such-" + secrets["GITHUB_TOKEN"]}
		if _, err := tc.call("process/start", p); err == nil {
			t.Errorf("a missing program started")
		} else {
			msgs = append(msgs, err.Message)
		}
		// an unknown sandbox field, an empty argv
		p = maskStart(t, "e2", "true", secrets, o)
		p["argv"] = []string{}
		if _, err := tc.call("process/start", p); err == nil {
			t.Errorf("an empty argv started")
		} else {
			msgs = append(msgs, err.Message)
		}
		// D1: a sandbox under which the command would see this server (pid namespace
		// inherit) is refused
		sbx, err := newSandboxer("inherit", "")
		if err != nil {
			t.Fatal(err)
		}
		ts2, logs2 := maskTestServer(t, o, func(s *server) { s.sandbox = sbx })
		t.Cleanup(sbx.close)
		tc2 := ts2.connect(t)
		p = maskStart(t, "e3", "echo ran $GITHUB_TOKEN", secrets, o)
		p["sandbox"] = netProxyTestSandbox("restricted")
		if _, err := tc2.call("process/start", p); err == nil {
			t.Errorf("a masked start whose sandbox leaves this server in reach (pid namespace inherit) started")
		} else {
			msgs = append(msgs, err.Message)
			if !strings.Contains(err.Message, "credential masking") {
				t.Errorf("the refusal does not say why: %s", err.Message)
			}
		}
		for _, m := range msgs {
			if leaked := secrets.leaks(m); len(leaked) > 0 {
				t.Errorf("an error carries the real value of %v: %s", leaked, m)
			}
		}
		if leaked := secrets.leaks(logs2.String()); len(leaked) > 0 {
			t.Errorf("the second server's log carries the real value of %v", leaked)
		}
		t.Logf("errors: %q", msgs)
	})

	log := logs.String()
	if leaked := secrets.leaks(log); len(leaked) > 0 {
		t.Errorf("the server's log carries the real value of %v", leaked)
	}
	if !strings.Contains(log, "credential masking") || !strings.Contains(log, "BROKEN_TOKEN") {
		t.Errorf("the log does not show the masked starts and the removed variable:\n%s", tail(log, 2000))
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// maskCapabilityServer is a masking test server and a client that initialized on it, with
// the capabilities initialize advertised.
func maskCapabilityServer(t *testing.T, o *maskOrigin) (*testClient, map[string]bool) {
	ts, _ := maskTestServer(t, o)
	tc := ts.dial(t)
	var init struct {
		EnvironmentInfo environmentInfo `json:"environmentInfo"`
	}
	if err := json.Unmarshal(tc.mustCall("initialize", map[string]any{"clientName": "test"}), &init); err != nil {
		t.Fatal(err)
	}
	tc.notify("initialized", map[string]any{})
	return tc, init.EnvironmentInfo.Capabilities
}

// TestCapabilityCredentialMasking backs credentialMasking: advertised, a routed read-only
// command that echoes its GitHub and OpenAI credentials prints stand-ins, its request with
// the OpenAI stand-in to OPENAI_BASE_URL (the TLS test host) arrives there with the real
// key, and nothing real leaks over any channel (TestMaskNoLeak).
func TestCapabilityCredentialMasking(t *testing.T) {
	requireUserNamespaces(t)
	netProxyTestHost(t) // skips without curl
	o := startMaskOrigin(t)
	secrets := newMaskSecrets(t)
	tc, caps := maskCapabilityServer(t, o)
	if !caps["credentialMasking"] {
		t.Fatalf("initialize advertises credentialMasking false")
	}
	script := `echo "gh=$GITHUB_TOKEN"; echo "openai=$OPENAI_API_KEY"; curl -sS --max-time 20 -H "Authorization: Bearer $OPENAI_API_KEY" "$OPENAI_BASE_URL/models"`
	params := maskStart(t, "cap", script, secrets, o)
	params["env"].(map[string]string)["OPENAI_BASE_URL"] = o.url() + "/v1"
	params["sandbox"] = netProxyTestSandbox("restricted")
	params["enforceManagedNetwork"] = true
	out := tc.run(params).pty()
	if leaked := secrets.leaks(out); len(leaked) > 0 {
		t.Errorf("the command printed the real value of %v", leaked)
	}
	gh := regexp.MustCompile(`gh=(ghp_[A-Za-z0-9]+)`).FindStringSubmatch(out)
	oa := regexp.MustCompile(`openai=(sk-proj-[A-Za-z0-9]+)`).FindStringSubmatch(out)
	if gh == nil || oa == nil {
		t.Fatalf("the command did not print stand-ins of the GitHub and OpenAI shapes:\n%s", out)
	}
	if got, want := o.received(), []string{"Bearer " + secrets["OPENAI_API_KEY"]}; !slices.Equal(got, want) {
		t.Errorf("the test host received Authorization %q, want the real OpenAI key once", got)
	}
	if !strings.Contains(out, "auth=Bearer "+oa[1]) {
		t.Errorf("the command did not see the test host's echo as the stand-in:\n%s", out)
	}
	t.Run("no leak", TestMaskNoLeak)
}

// TestCapabilityCredentialMaskingCustomProviders backs credentialMaskingCustomProviders: a
// request's custom provider (ACME_TOKEN, for the TLS test host) is masked, its stand-in is
// swapped for the real value on the way to the host and back on the way to the command,
// and a provider that cannot compile has its variable removed (TestMaskNoLeak).
func TestCapabilityCredentialMaskingCustomProviders(t *testing.T) {
	requireUserNamespaces(t)
	netProxyTestHost(t) // skips without curl
	o := startMaskOrigin(t)
	secrets := newMaskSecrets(t)
	tc, caps := maskCapabilityServer(t, o)
	if !caps["credentialMaskingCustomProviders"] {
		t.Fatalf("initialize advertises credentialMaskingCustomProviders false")
	}
	script := `echo "acme=$ACME_TOKEN"; echo "broken=${BROKEN_TOKEN-unset}"; curl -sS --max-time 20 -H "Authorization: Bearer $ACME_TOKEN" ` + o.url() + `/x`
	params := maskStart(t, "cap", script, secrets, o)
	params["sandbox"] = netProxyTestSandbox("restricted")
	params["enforceManagedNetwork"] = true
	out := tc.run(params).pty()
	if leaked := secrets.leaks(out); len(leaked) > 0 {
		t.Errorf("the command printed the real value of %v", leaked)
	}
	m := regexp.MustCompile(`acme=(acme_[A-Za-z0-9]{32})\b`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "broken=unset") {
		t.Fatalf("want a stand-in of the custom pattern for ACME_TOKEN and BROKEN_TOKEN unset:\n%s", out)
	}
	if got, want := o.received(), []string{"Bearer " + secrets["ACME_TOKEN"]}; !slices.Equal(got, want) {
		t.Errorf("the test host received Authorization %q, want the real ACME_TOKEN once", got)
	}
	if !strings.Contains(out, "auth=Bearer "+m[1]) {
		t.Errorf("the command did not see the test host's echo as the stand-in:\n%s", out)
	}
	t.Run("no leak", TestMaskNoLeak)
}

// TestMaskCapabilityFollowsHost: credentialMasking (and custom providers) is advertised only
// where the harness's starts run in a pid namespace of their own: not under
// --linux-sandbox-pid-namespace inherit, the Landlock fallback, or --managed-sandbox
// run-unsandboxed, where the command could read this server's memory.
func TestMaskCapabilityFollowsHost(t *testing.T) {
	requireUserNamespaces(t)
	for _, c := range []struct {
		name, pid, force  string
		unsandboxed, want bool
	}{
		{"default", "isolate", "", false, true},
		{"pid namespace inherit", "inherit", "", false, false},
		{"landlock", "isolate", "landlock", false, false},
		{"run-unsandboxed", "isolate", "", true, false},
	} {
		sbx, err := newSandboxer(c.pid, c.force)
		if err != nil {
			t.Fatal(err)
		}
		caps := capabilitiesFor(hostNetworkSupport(sbx, c.unsandboxed))
		sbx.close()
		if caps["credentialMasking"] != c.want || caps["credentialMaskingCustomProviders"] != c.want {
			t.Errorf("%s: credentialMasking %v, credentialMaskingCustomProviders %v, want %v", c.name,
				caps["credentialMasking"], caps["credentialMaskingCustomProviders"], c.want)
		}
	}
}

// TestMaskServerOutOfReach backs the table of docs/network.md §8 ("Where the real values
// are"): a command under the namespace sandbox (pid namespace of its own) or under Landlock
// confining files can neither read this server's /proc/<pid>/environ nor open its mem;
// unsandboxed (D8) it can. Read on the host: the command's output is compared with the
// server's own environ. A fact of the host the decisions rest on, not new behaviour: it
// passes before the wiring too.
func TestMaskServerOutOfReach(t *testing.T) {
	requireUserNamespaces(t)
	own, err := os.ReadFile("/proc/self/environ")
	if err != nil || len(own) < 16 {
		t.Skipf("this process's environ cannot be read (%v)", err)
	}
	pid := os.Getpid()
	script := fmt.Sprintf(`cat /proc/%d/environ; ( exec 3< /proc/%d/mem ) 2>/dev/null && echo mem=open`, pid, pid)
	namespaces, err := newSandboxer("isolate", "")
	if err != nil {
		t.Fatal(err)
	}
	landlock, err := newSandboxer("isolate", "landlock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(namespaces.close)
	t.Cleanup(landlock.close)
	for _, c := range []struct {
		name    string
		sbx     *sandboxer
		sandbox map[string]any
		reads   bool
	}{
		{"namespaces", namespaces, netProxyTestSandbox("restricted"), false},
		{"landlock", landlock, netProxyTestSandbox("restricted"), false},
		{"unsandboxed", namespaces, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.sbx == landlock && landlockABI() == 0 {
				t.Skip("the kernel has no Landlock")
			}
			ts := startTestServer(t, func(s *server) { s.sandbox = c.sbx })
			p := procStart(t, "r", "sh", "-c", script)
			if c.sandbox != nil {
				p["sandbox"] = c.sandbox
			}
			out := ts.connect(t).run(p).stdout()
			got := strings.Contains(out, string(own[:16]))
			if got != c.reads || strings.Contains(out, "mem=open") != c.reads {
				t.Errorf("the command read this server's environ: %v, opened its mem: %v; want %v", got, strings.Contains(out, "mem=open"), c.reads)
			}
		})
	}
}

// TestMaskServerUsable: masking is advertised only where a masked start can get its CA: with
// a state directory whose CA directory could be made at the start (main.go clears the
// capability otherwise, so the harness warns instead of every masked start being refused).
func TestMaskServerUsable(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, dir string
		want      bool
	}{
		{"no state directory", "", false},
		{"a state directory under a file", filepath.Join(blocker, "state"), false},
		{"a fresh state directory", filepath.Join(t.TempDir(), "state"), true},
	} {
		if got := newMaskServer(c.dir).usable(); got != c.want {
			t.Errorf("%s: usable %v, want %v", c.name, got, c.want)
		}
	}
}
