package main

// The smoke test of `bench relay` (relay.go).

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRelaySmokeAgainstOwnServer builds exec-server and the root package's test binary and
// runs a tiny `bench relay` with ours alone: the relay, a direct and a registered executor,
// every row of both tables with a figure. It checks that the bench works, not how fast.
func TestRelaySmokeAgainstOwnServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server, the relay and the root package's benchmarks")
	}
	dir := t.TempDir()
	root := filepath.Join("..", "..", "..")
	bin, testBin := filepath.Join(dir, "exec-server"), filepath.Join(dir, "exec-server.test")
	for _, args := range [][]string{
		{"build", "-trimpath", "-ldflags=-s -w", "-o", bin, "."},
		{"test", "-c", "-o", testBin, "."},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
	}
	var stdout, stderr bytes.Buffer
	code := runRelay([]string{"-test", testBin, "-exec", bin, "-rounds", "1", "-start-n", "2", "-meta-n", "5", "-pipe-n", "1",
		"-fwd-n", "50", "-echo-n", "20", "-streams-n", "1", "-quiet", "0"}, &stdout, &stderr)
	t.Logf("report:\n%s", stdout.String())
	if code != 0 {
		t.Fatalf("bench relay exited %d\nstderr:\n%s", code, stderr.String())
	}
	for _, title := range []string{"process start → closed", "fs/getMetadata round trip", "pipe output"} {
		cells := strings.Split(lineWith(stdout.String(), "| "+title), "|")
		if len(cells) < 5 || !strings.Contains(cells[2], "ms") && !strings.Contains(cells[2], "MB/s") ||
			!strings.Contains(cells[3], "ms") && !strings.Contains(cells[3], "MB/s") {
			t.Errorf("row %q lacks ours' direct and relayed figures: %q", title, cells)
		}
	}
	for _, title := range []string{"round trip added", "raw echo round trip", "forwarding, one stream", "relay CPU per GB", "relay RSS", "relay memory per idle stream"} {
		if line := lineWith(stdout.String(), "| "+title); line == "" || strings.Contains(line, "NaN") {
			t.Errorf("row %q missing or empty: %q", title, line)
		}
	}
}
