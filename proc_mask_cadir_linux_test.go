package main

// Tests of the masking CA's directory as a secret (docs/network.md §8, "The CA"): every
// sandbox is denied <state>/mitm whole, made at the server's start, in both mechanisms; a
// server that cannot make it runs and refuses masking. New file: these tests need a sandbox
// mechanism of their choice and a state directory prepared before the server starts, which
// the masking tests' harness (proc_mask_linux_test.go) does not give.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMaskCADirDeniedWhole: a sandboxed command started before the server's first masked
// start waits while, on the host, the CA is created, a rotation's temporary key file is left
// in <state>/mitm and the CA is rotated; it then reads every file of <state>/mitm. Verdict on
// the host: none of the keys written there, nor the temporary file's marker, is in its
// output. Namespaces with the read-only (full read) and a restricted-read profile; Landlock
// with the restricted-read one (Landlock cannot deny under full read, docs/sandbox.md §2).
func TestMaskCADirDeniedWhole(t *testing.T) {
	for _, c := range []struct{ name, mech, profile string }{
		{"namespaces/read-only", "namespaces", "read-only"},
		{"namespaces/restricted-read", "namespaces", "restricted"},
		{"landlock/restricted-read", "landlock", "restricted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cbRequire(t, c.mech)
			state := filepath.Join(t.TempDir(), "state")
			if err := os.MkdirAll(state, 0o700); err != nil { // a state directory in use
				t.Fatal(err)
			}
			ts := startTestServer(t, withSandboxer(t, "isolate", c.mech), func(s *server) {
				s.mask = newMaskServer(state)
				s.sandbox.setSecrets(secretFiles(&cliOptions{stateDir: state}))
			})
			tc := ts.connect(t)
			ws := t.TempDir()
			goFile := filepath.Join(ws, "go")
			mitm := filepath.Join(state, "mitm")
			script := `echo "== ready"; while [ ! -e ` + goFile + ` ]; do sleep 0.05; done; echo "== after"; ` +
				`ls -la ` + mitm + `; for f in ` + mitm + `/* ` + mitm + `/.ca*; do echo "-- $f"; cat "$f"; done; echo "== done"`
			sandbox := netProxyTestSandbox("restricted")
			if c.profile == "restricted" {
				entry := func(path, access string) map[string]any {
					return map[string]any{"path": map[string]any{"type": "path", "path": fileURI(path)}, "access": access}
				}
				sandbox = map[string]any{"permissions": map[string]any{"type": "managed", "network": "restricted",
					"file_system": map[string]any{"type": "restricted", "entries": []any{
						map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "minimal"}}, "access": "read"},
						entry(state, "read"), entry(ws, "write"),
					}}}, "windowsSandboxLevel": "disabled"}
			}
			tc.mustCall("process/start", with(procStart(t, "cadir", "sh", "-c", script), "sandbox", sandbox, "cwd", fileURI(ws)))
			waitOutput(tc, "cadir", "stdout", "== ready")

			// on the host, after the sandbox was built: the CA, a rotation's leftover, a rotation
			if _, err := openMITMCA(state, time.Now); err != nil {
				t.Fatal(err)
			}
			first, err := os.ReadFile(filepath.Join(mitm, "ca.key"))
			if err != nil {
				t.Fatal(err)
			}
			const marker = "TEMPORARY-KEY-MARKER"
			if err := os.WriteFile(filepath.Join(mitm, ".ca.key.probe"), []byte(marker), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := rotateMITMCA(state, time.Now()); err != nil {
				t.Fatal(err)
			}
			second, err := os.ReadFile(filepath.Join(mitm, "ca.key"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(goFile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			r := waitClosed(tc, "cadir")
			out := string(r.out["stdout"]) + string(r.out["stderr"])
			if !strings.Contains(out, "== done") {
				t.Fatalf("the command did not run to its end:\n%s", tail(out, 1500))
			}
			for name, key := range map[string][]byte{"first": first, "rotated": second} {
				k := strings.TrimSpace(string(key))
				if mid := k[len(k)/2 : len(k)/2+32]; strings.Contains(out, mid) {
					t.Errorf("the command read the %s masking CA key:\n%s", name, tail(out, 1500))
				}
			}
			if strings.Contains(out, marker) || strings.Contains(out, "PRIVATE KEY") {
				t.Errorf("the command read a file of the CA's directory:\n%s", tail(out, 1500))
			}
		})
	}
}

// TestMaskCADirUnmakeable: a server whose <state>/mitm cannot be made at its start (a symlink
// is in its place) says so in its log, runs unmasked commands, and refuses a masked start
// with that reason; a server whose directory was replaced after its start refuses too.
// Verdict on the host: the masked start's origin never received the real token.
func TestMaskCADirUnmakeable(t *testing.T) {
	requireUserNamespaces(t)
	netProxyTestHost(t)
	o := startAdv31Origin(t)
	for _, c := range []struct{ name, want string }{
		{"symlink at start", "could not be made at the server's start"},
		{"replaced after start", "no longer the one made at the server's start"},
	} {
		t.Run(c.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			if err := os.MkdirAll(state, 0o700); err != nil {
				t.Fatal(err)
			}
			if c.name == "symlink at start" {
				if err := os.Symlink(t.TempDir(), filepath.Join(state, "mitm")); err != nil {
					t.Fatal(err)
				}
			}
			logs := &syncBuffer{}
			srv := newServer(context.Background(), serverConfig{stateDir: state}, newTextLogger(logs, levelDebug))
			srv.shutdown()
			if c.name == "symlink at start" && !strings.Contains(logs.String(), "credential masking will be refused") {
				t.Errorf("the server's log does not say masking will be refused:\n%s", logs.String())
			}
			ts := startTestServer(t, func(s *server) {
				maskTestHooks(s, state, o.pool)
				s.sandbox.setSecrets(secretFiles(&cliOptions{stateDir: state}))
			})
			if c.name == "replaced after start" {
				mitm := filepath.Join(state, "mitm")
				if err := os.Rename(mitm, mitm+".old"); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(mitm, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			tc := ts.connect(t)
			if r := tc.run(procStart(t, "plain", "sh", "-c", "echo plain-ran")); !strings.Contains(string(r.out["stdout"]), "plain-ran") {
				t.Fatalf("an unmasked command did not run: %q", r.out["stdout"])
			}
			real := maskFake(t, "acme_", maskTestAlnum, 32)
			_, rpcErr := tc.call("process/start", adv31Params(t, o, "masked", "curl -sS "+o.url()+"/plain", real))
			if rpcErr == nil || !strings.Contains(rpcErr.Message, c.want) {
				t.Fatalf("masked start: %v, want an error saying %q", rpcErr, c.want)
			}
			for _, seen := range o.received() {
				if strings.Contains(seen, real) {
					t.Errorf("the origin received the real token: %s", seen)
				}
			}
		})
	}
}
