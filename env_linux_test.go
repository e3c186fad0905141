package main

// Tests that the managed network's capabilities and `exec-server sandbox --status` follow what
// this host and the server's flags let a harness's starts do (env_linux.go, docs/network.md
// §7). New file: the tests need Linux and, for the CAP_BPF case, setpriv(1).

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// noCapBPFCapsEnv marks the run of TestCapabilitiesFollowTheHost that setpriv(1) started
// without CAP_BPF and CAP_SYS_ADMIN.
const noCapBPFCapsEnv = "EXEC_SERVER_CAPS_NOCAPBPF"

// serverNetworkCapabilities runs the server with args on stdio, as a harness would, and
// returns the network capabilities its initialize answer advertises.
func serverNetworkCapabilities(t *testing.T, args ...string) [3]bool {
	t.Helper()
	var stdout syncBuffer
	var stderr strings.Builder
	in := `{"id":1,"method":"initialize","params":{"clientName":"x"}}` + "\n"
	if code := run(append([]string{"--listen", "stdio"}, args...), strings.NewReader(in), &stdout, &stderr); code != 0 {
		t.Fatalf("exec-server %v: exit %d: %s", args, code, stderr.String())
	}
	var reply struct {
		Result struct {
			EnvironmentInfo environmentInfo `json:"environmentInfo"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &reply); err != nil {
		t.Fatalf("initialize reply %q: %v", stdout.String(), err)
	}
	c := reply.Result.EnvironmentInfo.Capabilities
	return [3]bool{c["networkProxyLaunch"], c["networkProxyReviewDomains"], c["networkProxyTransparentTcp"]}
}

// sandboxStatusLine runs `exec-server sandbox --status` with args and returns its line that
// starts with prefix.
func sandboxStatusLine(t *testing.T, prefix string, args ...string) string {
	t.Helper()
	var stdout, stderr strings.Builder
	if code := run(append([]string{"sandbox", "--status"}, args...), strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("sandbox --status %v: exit %d: %s", args, code, stderr.String())
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	t.Fatalf("sandbox --status %v has no %q line:\n%s", args, prefix, stdout.String())
	return ""
}

// TestCapabilitiesFollowTheHost: networkProxyLaunch, networkProxyReviewDomains and
// networkProxyTransparentTcp are true only where a harness's start (enforceManagedNetwork
// under a sandbox) would run: with --linux-sandbox-pid-namespace inherit or the Landlock
// fallback routing is refused, so all three read false and the harness refuses in its own
// words instead of every start failing here; run-unsandboxed routes nothing, so a launch
// runs but nothing is transparent; a server without CAP_BPF (run again by setpriv(1): the host
// property is real) launches but is not transparent, and sandbox --status says why.
func TestCapabilitiesFollowTheHost(t *testing.T) {
	requireUserNamespaces(t)
	if os.Getenv(noCapBPFCapsEnv) == "1" {
		status, _ := os.ReadFile("/proc/self/status")
		t.Logf("%s", regexp.MustCompile(`(?m)^CapEff:.*$`).Find(status))
		if got := serverNetworkCapabilities(t); got != [3]bool{true, true, false} {
			t.Errorf("without CAP_BPF: launch, reviewDomains, transparentTcp = %v, want [true true false]", got)
		}
		if line := sandboxStatusLine(t, "transparent TCP: "); !strings.Contains(line, "refused: create the sockmap") || !strings.Contains(line, "operation not permitted") {
			t.Errorf("without CAP_BPF: %q, want the kernel's reason", line)
		}
		return
	}
	if err := probeTransparentTCP(); err != nil {
		t.Skipf("this host cannot load the sk_lookup program (%v): the full case cannot be shown", err)
	}
	for _, tt := range []struct {
		name string
		args []string
		want [3]bool
	}{
		{"default", nil, [3]bool{true, true, true}},
		{"pid namespace inherit", []string{"--linux-sandbox-pid-namespace", "inherit"}, [3]bool{false, false, false}},
		{"run-unsandboxed", []string{"--managed-sandbox", "run-unsandboxed"}, [3]bool{true, true, false}},
		{"inherit, run-unsandboxed", []string{"--linux-sandbox-pid-namespace", "inherit", "--managed-sandbox", "run-unsandboxed"}, [3]bool{true, true, false}},
	} {
		if got := serverNetworkCapabilities(t, tt.args...); got != tt.want {
			t.Errorf("%s: launch, reviewDomains, transparentTcp = %v, want %v", tt.name, got, tt.want)
		}
	}
	// The Landlock fallback (no server flag forces it: the sandboxer the server would get).
	landlock, err := newSandboxer("isolate", "landlock")
	if err != nil {
		t.Fatal(err)
	}
	if got := hostNetworkSupport(landlock, false); got.launch || got.transparent {
		t.Errorf("Landlock fallback: %+v, want neither", got)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "transparent TCP: a transparent start's every TCP connection goes through its proxy"},
		{[]string{"--linux-sandbox-pid-namespace", "inherit"}, "transparent TCP: refused: a transparent start is routed, and routing is refused here"},
		{[]string{"--mechanism", "landlock"}, "transparent TCP: refused: a transparent start is routed, and routing is refused here"},
	} {
		if line := sandboxStatusLine(t, "transparent TCP: ", tt.args...); !strings.HasPrefix(line, tt.want) {
			t.Errorf("sandbox --status %v: %q, want %q…", tt.args, line, tt.want)
		}
	}

	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv(1) to run the server without CAP_BPF")
	}
	cmd := exec.Command(setpriv, "--bounding-set", "-bpf,-sys_admin", os.Args[0],
		"-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), noCapBPFCapsEnv+"=1", "GORACE="+sbGORACE)
	out, err := cmd.CombinedOutput()
	t.Logf("without CAP_BPF and CAP_SYS_ADMIN:\n%s", strings.TrimSpace(string(out)))
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("the test without CAP_BPF failed: %v", err)
	}
}
