package interop

// The README's "First five minutes" section, run as written: the server started with the
// flags the README gives (port 0 for its fixed port), its Node script run verbatim, and what
// the script prints compared with the output the README shows.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	readmeSection = "## First five minutes"
	readmePort    = ":8765" // the README's fixed port; the test listens on port 0 instead
)

// readmeSectionText returns the README's section under heading, up to the next "## ".
func readmeSectionText(t *testing.T, heading string) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q section", heading)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	return section
}

// fencedBlock returns the body of the first ``` block of the given language in text.
func fencedBlock(t *testing.T, text, lang string) string {
	t.Helper()
	_, body, ok := strings.Cut(text, "\n```"+lang+"\n")
	if !ok {
		t.Fatalf("no ```%s block in the README section", lang)
	}
	body, _, ok = strings.Cut(body, "\n```\n")
	if !ok {
		t.Fatalf("the ```%s block is not closed", lang)
	}
	return body + "\n"
}

// serverArgs returns the flags of the README's ./exec-server command line, with its fixed
// port replaced by 0.
func serverArgs(t *testing.T, section string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(section, "./exec-server ")
	if !ok {
		t.Fatal("the README section does not start ./exec-server")
	}
	line, _, _ := strings.Cut(rest, "\n")
	args := strings.Fields(line)
	for i, a := range args {
		args[i] = strings.Replace(a, readmePort, ":0", 1)
	}
	return args
}

func TestReadmeFirstFiveMinutes(t *testing.T) {
	section := readmeSectionText(t, readmeSection)
	script := fencedBlock(t, section, "js")
	want := fencedBlock(t, section, "text")
	args := serverArgs(t, section)
	if !strings.Contains(section, "node hello.js ws://127.0.0.1"+readmePort) || !strings.Contains(strings.Join(args, " "), "ws://127.0.0.1:0") {
		t.Fatalf("the README no longer starts the server on ws://127.0.0.1%s and runs node hello.js against it", readmePort)
	}

	node, err := exec.LookPath("node")
	if err != nil {
		skipNoNode(t, "node is not installed (CI installs it)")
	}
	modules, err := filepath.Abs(filepath.Join("node", "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(modules, "ws")); err != nil {
		skipNoNode(t, "node/node_modules/ws is missing: run npm ci in interop/node (CI does)")
	}

	url := startExecServer(t, buildExecServer(t), args...)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.js"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "hello.js", url)
	cmd.Dir = dir // the script's cwd becomes process/start's cwd
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node hello.js %s: %v\nstdout:\n%s\nstderr:\n%s", url, err, out, stderr.String())
	}
	if string(out) != want {
		t.Errorf("the README's script printed\n%s\nthe README shows\n%s", out, want)
	}
}
