package main

// The end-to-end check of AWS SigV4 re-signing under credential masking (docs/network.md §8):
// a real client, curl --aws-sigv4, signs with the stand-ins a masked start gives it, and a TLS
// test host verifies the signature it receives with the real secret. New file: the leak test
// (proc_mask_linux_test.go) covers the providers that travel in a header.

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
)

// TestMaskSigV4ThroughProcessStart: a workspace-write start with masking and AWS keys, with
// AWS_ENDPOINT_URL naming the test host, runs curl --aws-sigv4 with its stand-ins; the host
// receives one request signed with the real key id, and its signature verifies with the real
// secret; the command sees only stand-ins, the key id the host echoes included (D6).
func TestMaskSigV4ThroughProcessStart(t *testing.T) {
	requireUserNamespaces(t)
	netProxyTestHost(t) // skips without curl
	ca := newTestCA(t, "mask sigv4 origin test CA")
	leaf, err := ca.issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	secrets := maskSecrets{
		"AWS_ACCESS_KEY_ID":     maskFake(t, "AKIA", maskTestUpper, 16),
		"AWS_SECRET_ACCESS_KEY": maskFake(t, "", maskTestAlnum, 40),
	}
	var mu sync.Mutex
	var verdicts []string
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		verdict := "verified"
		if err := sigv4Verify(r, body, secrets["AWS_SECRET_ACCESS_KEY"]); err != nil {
			verdict = "refused: " + err.Error()
		}
		key := ""
		if _, cred, ok := strings.Cut(r.Header.Get("Authorization"), "Credential="); ok {
			key, _, _ = strings.Cut(cred, "/")
		}
		mu.Lock()
		verdicts = append(verdicts, verdict+" key="+key)
		mu.Unlock()
		fmt.Fprintf(w, "origin: %s key=%s\n", verdict, key)
	}))
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	origin.StartTLS()
	t.Cleanup(origin.Close)
	url := "https://" + origin.Listener.Addr().String()

	ts, logs := maskTestServer(t, &maskOrigin{pool: ca.pool})
	tc := ts.connect(t)
	// The query is in canonical order: curl before 8.1 signs it as written, which AWS, and
	// so the proxy's check with the stand-in, would refuse in any other order.
	script := `curl -sS --max-time 20 --aws-sigv4 "aws:amz:us-east-1:execute-api" ` +
		`--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" "$AWS_ENDPOINT_URL/prod/items?a=1&b=2"; ` +
		`echo "KEY=$AWS_ACCESS_KEY_ID"; echo "== done"`
	params := netProxyStartParams(t, "m-sigv4", script, map[string]any{
		"domains":           map[string]string{"127.0.0.1": "allow"},
		"credentialMasking": true,
	}, 0)
	env := map[string]string{"PATH": os.Getenv("PATH"), "HOME": t.TempDir(), "AWS_ENDPOINT_URL": url}
	for k, v := range secrets {
		env[k] = v
	}
	dir := t.TempDir()
	params["env"] = env
	params["tty"] = true
	params["cwd"] = fileURI(dir)
	params["sandbox"] = workspaceTestSandbox("restricted", dir)
	params["enforceManagedNetwork"] = true
	out := tc.run(params).pty()

	if leaked := secrets.leaks(out + logs.String()); len(leaked) > 0 {
		t.Errorf("the command's output or the server's log holds the real value of %v", leaked)
	}
	mu.Lock()
	got := append([]string(nil), verdicts...)
	mu.Unlock()
	want := "verified key=" + secrets["AWS_ACCESS_KEY_ID"]
	if len(got) != 1 || got[0] != want {
		t.Fatalf("the origin saw %q, want one request %q\ncommand output:\n%s\nlog:\n%s", got, want, tail(out, 2000), tail(logs.String(), 3000))
	}
	standIn := maskEnvOf("== env\n" + out + "\n== environ")["KEY"]
	if standIn == "" || standIn == secrets["AWS_ACCESS_KEY_ID"] || !strings.Contains(out, "origin: verified key="+standIn) {
		t.Errorf("the command should see the origin's answer with its stand-in key id %q:\n%s", standIn, tail(out, 2000))
	}
}
