package main

// Review 31's failing tests (docs/network.md §8): each one a defect found reading the
// integration branch cold, failing on it and passing once the fix it names is in. New file:
// the review's tests are kept apart from the features' own so that the fixes can be checked
// against them one by one.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReview31MaskRoutedFullWrite: a masked start whose managed sandbox writes every file but
// restricts the network, with enforceManagedNetwork, is routed (TestProcessNetProxyRouted's
// "full-write restricted"), so it runs in a pid namespace of its own and cannot read this
// server: docs/network.md §8's table calls that "a boundary", and maskExposure means to let
// it run ("confines no file and it is not routed" is its refusal). maskLaunch runs before
// processStart sets spec.route, so maskExposure always sees an unrouted start and refuses
// it (D1, -32602).
func TestReview31MaskRoutedFullWrite(t *testing.T) {
	requireUserNamespaces(t)
	netProxyTestHost(t) // skips without curl
	o := startMaskOrigin(t)
	secrets := newMaskSecrets(t)
	ts, _ := maskTestServer(t, o)
	tc := ts.connect(t)

	own, err := os.ReadFile("/proc/self/environ")
	if err != nil || len(own) < 16 {
		t.Skipf("this process's environ cannot be read (%v)", err)
	}
	pid := os.Getpid()
	reach := fmt.Sprintf(`; echo "== server"; cat /proc/%d/environ 2>/dev/null; ( exec 3< /proc/%d/mem ) 2>/dev/null && echo mem=open`, pid, pid)
	params := maskStart(t, "m-full-write", maskScript(secrets, o)+reach, secrets, o)
	dir := t.TempDir()
	params["cwd"] = fileURI(dir)
	params["sandbox"] = fullWriteTestSandbox("restricted")
	params["enforceManagedNetwork"] = true
	if _, err := tc.call("process/start", params); err != nil {
		t.Fatalf("a routed masked start (full write, network restricted, enforceManagedNetwork) was refused: %d %s", err.Code, err.Message)
	}
	r := waitClosed(tc, "m-full-write")
	out := r.pty()
	if leaked := secrets.leaks(out); len(leaked) > 0 {
		t.Errorf("the command saw the real value of %v", leaked)
	}
	// Read on the host: the allowed start really is out of this server's reach.
	if _, server, _ := strings.Cut(out, "== server"); strings.Contains(server, string(own[:16])) || strings.Contains(server, "mem=open") {
		t.Errorf("the command read this server's environ or opened its mem:\n%s", tail(server, 500))
	}
	want := "Bearer " + secrets["ACME_TOKEN"]
	if got := o.received(); len(got) != 1 || got[0] != want {
		t.Errorf("the origin received %q: want one request carrying the real ACME_TOKEN", got)
	}
}

// TestReview31MaskSnapshotCustomProvider: a login profile that exports the variable of a
// credentialProviders entry the start does not carry hands its real value to the masked
// command: maskSnapshotVar drops only built-in providers' variables and values of a built-in
// shape, while docs/network.md §8 (step 3) says "a profile's own token never reaches the
// command" (true for a GitHub token: TestMaskNoLeak/snapshot's PROFILE_GH).
func TestReview31MaskSnapshotCustomProvider(t *testing.T) {
	requireUserNamespaces(t)
	netProxyTestHost(t)
	o := startMaskOrigin(t)
	secrets := newMaskSecrets(t)
	ts, _ := maskTestServer(t, o)
	tc := ts.connect(t)

	bash := shellPath(t, "bash")
	home := t.TempDir()
	profileAcme := maskFake(t, "acme_", maskTestAlnum, 32) // the custom provider's shape and variable
	profile := "export ACME_TOKEN=" + profileAcme + "\nexport OTHER_NAME=" + profileAcme + "\nexport REVIEW_PLAIN=plain\n"
	if err := os.WriteFile(filepath.Join(home, ".bash_profile"), []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `echo "== env"; env | sort; echo "== environ"; echo "== done"`
	delete(secrets, "ACME_TOKEN") // the start does not carry it: only the profile does
	params := maskStart(t, "snap-acme", script, secrets, o)
	params["argv"] = []string{bash, "-lc", script}
	params["cwd"] = fileURI(home)
	params["env"].(map[string]string)["HOME"] = home
	params["shellSnapshot"] = map[string]any{"scopeId": "review31", "shell": map[string]string{"name": "bash", "path": bash}}
	params["sandbox"] = netProxyTestSandbox("restricted")
	params["enforceManagedNetwork"] = true
	out := tc.run(params).pty()
	env := maskEnvOf(out)
	if env["REVIEW_PLAIN"] != "plain" {
		t.Fatalf("the profile's plain variable did not reach the command (snapshot not applied?):\n%s", tail(out, 2000))
	}
	for _, k := range []string{"ACME_TOKEN", "OTHER_NAME"} {
		if strings.Contains(env[k], profileAcme) {
			t.Errorf("the profile's real %s (a custom provider's credential) reached the masked command as %s", "ACME_TOKEN", k)
		}
	}
}
