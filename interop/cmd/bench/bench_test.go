package main

import (
	"bytes"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the test binary serve as the null server of the limit measurements.
func TestMain(m *testing.M) {
	if os.Getenv(nullServerEnv) != "" {
		os.Exit(serveNull())
	}
	os.Exit(m.Run())
}

// TestSmokeAgainstOwnServer builds exec-server from the root module and runs a tiny bench
// against it, so the bench cannot rot unnoticed. It checks that every selected metric
// produced figures, and the null-server and no-server limits theirs, not how fast they are.
func TestSmokeAgainstOwnServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	bin := filepath.Join(t.TempDir(), "exec-server")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".") // as shipped
	build.Dir = filepath.Join("..", "..", "..")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of exec-server: %v\n%s", err, out)
	}
	var stdout, stderr bytes.Buffer
	args := []string{
		"-a", bin + " --listen ws://127.0.0.1:{PORT}", "-name-a", "ours",
		"-rounds", "1", "-small", "-quiet", "0", "-metrics", "size,idle,connect,getMetadata,start,pipe,pty,writeFile,conns",
	}
	code := run(args, &stdout, &stderr)
	t.Logf("report:\n%s", stdout.String())
	if code != 0 {
		t.Fatalf("bench exited %d\nstderr:\n%s", code, stderr.String())
	}
	for _, title := range []string{
		"connect + initialize + initialized", "fs/getMetadata round trip",
		"process/start response, pipe", "start → process/closed, PTY",
		"pipe output", "PTY output", "idle RSS after initialize", "binary size",
		"fs/writeFile", "4 conns × 3 processes, wall",
	} {
		line := lineWith(stdout.String(), "| "+title)
		if line == "" || strings.Contains(line, "| error |") {
			t.Errorf("row %q missing or failed: %q", title, line)
		}
	}
	for _, title := range []string{
		"connect + initialize + initialized", "fs/getMetadata round trip", "pipe output",
		"fs/writeFile", "4 conns × 3 processes, wall", "limit only: raw pipe",
	} {
		if lim := limitCell(lineWith(stdout.String(), "| "+title)); lim == "" || lim == "–" {
			t.Errorf("row %q has no limit figure (%q)", title, lim)
		}
	}
}

// TestNetProxySmokeAgainstOwnServer builds exec-server and the root package's test binary
// and runs a tiny `bench netproxy` against ours alone: the proxied child's HTTP_PROXY is
// read, every row has a figure and the direct limit is measured. It checks that the bench
// works, not how fast the proxy is.
func TestNetProxySmokeAgainstOwnServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server and the root package's tests")
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
	code := runNetProxy([]string{"-test", testBin, "-a", bin + " --listen ws://127.0.0.1:{PORT}",
		"-rounds", "1", "-downloads", "1", "-latency-time", "20ms", "-idle-procs", "4", "-quiet", "0"}, &stdout, &stderr)
	t.Logf("report:\n%s", stdout.String())
	if code != 0 {
		t.Fatalf("bench netproxy exited %d\nstderr:\n%s", code, stderr.String())
	}
	for _, title := range []string{
		"HTTP proxy, GET of 256 MiB", "HTTP proxy, 256 MiB through CONNECT", "CONNECT + 200 + 1-byte echo",
		"server CPU time per 256 MiB GET", "server RSS per idle proxied process",
	} {
		line := lineWith(stdout.String(), "| "+title)
		if line == "" || strings.Contains(line, "| error |") {
			t.Errorf("row %q missing or failed: %q", title, line)
		}
	}
	for _, title := range []string{"HTTP proxy, GET of 256 MiB", "CONNECT + 200 + 1-byte echo"} {
		if lim := limitCell(lineWith(stdout.String(), "| "+title)); lim == "" || lim == "–" {
			t.Errorf("row %q has no limit figure (%q)", title, lim)
		}
	}
}

// limitCell returns the "limit (no server)" cell of a report row: the last but one.
func limitCell(line string) string {
	cells := strings.Split(strings.TrimSpace(line), "|")
	if len(cells) < 4 {
		return ""
	}
	return strings.TrimSpace(cells[len(cells)-3])
}

func lineWith(text, prefix string) string {
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

func TestMembersFindsTopLevelFieldsOnly(t *testing.T) {
	tests := []struct {
		name, in, key, want string
	}{
		{"compact", `{"id":7,"result":{"id":8}}`, "id", `7`},
		{"nested object is one value", `{"result":{"id":8,"a":[1,{"b":"}"}]},"id":9}`, "result", `{"id":8,"a":[1,{"b":"}"}]}`},
		{"spaces", ` { "method" : "process/output" , "params" : {} } `, "method", `"process/output"`},
		{"escaped quote in string", `{"a":"x\"y","id":3}`, "id", `3`},
		{"escaped backslash before quote", `{"a":"x\\","id":4}`, "id", `4`},
		{"literal", `{"eof":true}`, "eof", `true`},
		{"missing", `{"a":1}`, "b", ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(field([]byte(tt.in), tt.key)); got != tt.want {
				t.Errorf("field(%s, %q) = %q, want %q", tt.in, tt.key, got, tt.want)
			}
		})
	}
}

func TestMembersRejectsBrokenObjects(t *testing.T) {
	for _, in := range []string{``, `[]`, `{"a"}`, `{"a":1`, `{"a":"x}`, `{"a":1 "b":2}`} {
		if err := members([]byte(in), func(k, v []byte) bool { return true }); err == nil {
			t.Errorf("members(%q) = nil, want an error", in)
		}
	}
}

func TestBase64LenMatchesDecodedLength(t *testing.T) {
	for n := range 10 {
		enc := []byte(base64.StdEncoding.EncodeToString(make([]byte, n)))
		got, err := base64Len(enc)
		if err != nil || got != n {
			t.Errorf("base64Len(%q) = %d, %v; want %d", enc, got, err, n)
		}
	}
	if _, err := base64Len([]byte("abc")); err == nil {
		t.Error("base64Len of unpadded text: want an error")
	}
}

func TestStringValueUnescapes(t *testing.T) {
	got, err := stringValue([]byte(`"a\/b\u0041"`))
	if err != nil || string(got) != "a/bA" {
		t.Errorf("stringValue = %q, %v; want a/bA", got, err)
	}
}

func TestProcWatchAcceptsReorderedButNotLostEvents(t *testing.T) {
	tests := []struct {
		name    string
		seqs    []uint64
		wantErr bool
	}{
		{"in order", []uint64{1, 2, 3}, false},
		{"exited after later output", []uint64{1, 3, 4, 2, 5}, false},
		{"lost", []uint64{1, 3}, true},
		{"duplicate", []uint64{1, 1, 2}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &procWatch{exited: true}
			for _, s := range tt.seqs {
				w.see(s)
			}
			if err := w.check(-1, 0); (err != nil) != tt.wantErr {
				t.Errorf("check after %v = %v, want error %v", tt.seqs, err, tt.wantErr)
			}
		})
	}
}

func TestRatiosArePerRound(t *testing.T) {
	r := &row{kind: throughput}
	r.series[sideA] = [][]float64{{200}, {300}, {400}}
	r.series[sideB] = [][]float64{{100}, {100}, {400}}
	rs := r.ratios()
	if len(rs) != 3 || median(rs) != 2 {
		t.Errorf("ratios = %v (median %v), want [2 3 1] with median 2", rs, median(rs))
	}
}
