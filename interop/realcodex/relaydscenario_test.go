package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRelaydOwner checks the placement against weights computed outside Go
// (`printf 'relay-X\0build-ours-1' | sha256sum`, first 8 bytes): relay-a 115148ccde15ae92,
// relay-b 2e024e5ed8c828fe, relay-c 3e365105f88fbe6c, so relay-c owns build-ours-1, and
// relay-b once relay-c is gone. Taking away a node that does not own an id leaves its owner.
func TestRelaydOwner(t *testing.T) {
	if got := relaydOwner(relaydFleetIDs, "build-ours-1"); got != "relay-c" {
		t.Errorf("owner of build-ours-1 = %s, want relay-c", got)
	}
	if got := relaydOwner([]string{"relay-a", "relay-b"}, "build-ours-1"); got != "relay-b" {
		t.Errorf("owner of build-ours-1 without relay-c = %s, want relay-b", got)
	}
	for _, kind := range []string{"ours", "forward", "ref"} {
		id := relaydFleetEnvID(kind)
		if !strings.HasPrefix(id, "build-"+kind+"-") || relaydOwner(relaydFleetIDs, id) != relaydFleetOwner {
			t.Errorf("relaydFleetEnvID(%s) = %s, owned by %s", kind, id, relaydOwner(relaydFleetIDs, id))
		}
		for _, gone := range relaydFleetIDs {
			if gone == relaydFleetOwner {
				continue
			}
			rest := slices.DeleteFunc(slices.Clone(relaydFleetIDs), func(n string) bool { return n == gone })
			if got := relaydOwner(rest, id); got != relaydFleetOwner {
				t.Errorf("without %s, %s moved to %s", gone, id, got)
			}
		}
	}
}

// TestWriteRelaydSetup checks the directory docs/remote.md §12.1 describes: token files and
// the secret of mode 0600 holding base64 of 32 and 48 random bytes, a relay.json with the
// four tokens and the peers, and with TLS a certificate for 127.0.0.1 that the setup's own
// client (the CA alone) and Codex's bundle (the system's roots and the CA) both trust.
func TestWriteRelaydSetup(t *testing.T) {
	dir := t.TempDir()
	s, err := writeRelaydSetup(dir, [][2]string{{"relay-a", "http://127.0.0.1:1"}, {"relay-b", "http://127.0.0.1:2"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"executors.token", "codex.token", "other-executors.token", "other-codex.token", "env.secret", "relay.json", "key.pem"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	for name, v := range s.tokens {
		b, _ := os.ReadFile(filepath.Join(dir, name+".token"))
		if strings.TrimSpace(string(b)) != v || len(v) != 44 {
			t.Errorf("%s.token holds %q, want the 44 base64 characters %q", name, b, v)
		}
	}
	var conf struct {
		Tokens []struct {
			Name, File        string
			Register, Connect []string
		}
		Secret string `json:"environment_token_secret_file"`
		Peers  []struct{ ID, URL string }
	}
	raw, _ := os.ReadFile(s.config)
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Tokens) != 4 || conf.Tokens[0].Name != "executors" || !slices.Equal(conf.Tokens[0].Register, []string{"build-*"}) ||
		conf.Tokens[1].Name != "codex" || !slices.Equal(conf.Tokens[1].Connect, []string{"build-*"}) || conf.Secret != "env.secret" ||
		len(conf.Peers) != 2 || conf.Peers[1].ID != "relay-b" || conf.Peers[1].URL != "http://127.0.0.1:2" {
		t.Errorf("relay.json is not §12.1's: %s", raw)
	}

	cert, err := tls.LoadX509KeyPair(s.cert, s.key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	resp, err := s.client.Get(srv.URL)
	if err != nil {
		t.Fatalf("the setup's client does not trust the relay's certificate: %v", err)
	}
	resp.Body.Close()
	bundle, _ := os.ReadFile(s.bundle)
	ca, _ := os.ReadFile(s.ca)
	if !bytes.HasSuffix(bundle, ca) {
		t.Error("Codex's bundle does not end with the CA")
	}
	if system, err := os.ReadFile(relaydSystemRoots); err == nil && !bytes.HasPrefix(bundle, system) {
		t.Error("Codex's bundle does not keep the system's roots")
	}
}

// TestRelaydSetupServes starts the real `exec-server relay` (built from this repository) on
// a §12.1 directory and asks it what the checks ask: a connect for an environment nobody
// registered is 404 for the codex token, 403 for other-codex, 401 for an unknown token; the
// refusal bodies are the ones docs/remote.md §12.3 lists.
func TestRelaydSetupServes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the exec-server")
	}
	bin := filepath.Join(t.TempDir(), "exec-server")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	s, err := writeRelaydSetup(filepath.Join(dir, "relay"), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	n := &relaydNode{addr: "127.0.0.1:0", bin: bin, setup: s, dir: dir}
	if err := n.start(); err != nil {
		t.Fatal(err)
	}
	defer n.c.Stop()
	if !strings.HasPrefix(n.url, "http://127.0.0.1:") || strings.HasSuffix(n.addr, ":0") {
		t.Fatalf("relay printed %q, address %q", n.url, n.addr)
	}
	for _, c := range []struct {
		token, want string
		status      int
	}{
		{s.tokens["codex"], "not_registered", http.StatusNotFound},
		{s.tokens["other-codex"], "token other-codex may not connect to environment build-1", http.StatusForbidden},
		{"realcodex-unknown-0123456789", "unauthorized", http.StatusUnauthorized},
	} {
		status, body, err := relaydConnect(s.client, n.url, relaydEnvID, c.token)
		if err != nil || status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("connect: %d %s (%v), want %d with %q", status, body, err, c.status, c.want)
		}
	}
	if err := relaydAwaitLive(t.Context(), n.url, nil, time.Second); err != nil {
		t.Errorf("a lone relay's /readyz: %v", err)
	}
	n.kill()
	if !n.c.Exited() {
		t.Error("the relay survived SIGKILL")
	}
}
