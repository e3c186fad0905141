package main

// Release and service checks (README "Building a release", "Running as a service"; issue 12):
// the --version line scripts/release.sh stamps, and contrib/'s systemd unit and launchd plist:
// hardened without breaking the sandbox, the credential on stdin and never in argv, and a
// command line this binary accepts.

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestVersionLineNamesVersionCommitDateAndProtocol(t *testing.T) {
	var stdout bytes.Buffer
	if code := run([]string{"--version"}, nil, &stdout, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	want := "exec-server " + version + " (commit " + commit + ", date " + date + ", protocol of codex " + executorVersion + ")\n"
	if stdout.String() != want {
		t.Errorf("--version printed %q, want %q", stdout.String(), want)
	}
	if !regexp.MustCompile(`^exec-server \S+ \(commit \S+, date \S+, protocol of codex [0-9.]+\)\n$`).MatchString(stdout.String()) {
		t.Errorf("--version %q: not one line of version, commit, date and protocol", stdout.String())
	}
}

// systemdUnit is a unit file's settings: "Section.Key" → values in order.
func systemdUnit(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	unit := map[string][]string{}
	section := ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: not key=value: %q", path, line)
			}
			unit[section+"."+k] = append(unit[section+"."+k], strings.TrimSpace(v))
		}
	}
	return unit
}

func TestSystemdUnitIsHardenedAndKeepsTheSandbox(t *testing.T) {
	unit := systemdUnit(t, "contrib/exec-server.service")
	for key, want := range map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "Restart": "on-failure",
		"User": "exec-server", "StandardInput": "file:/etc/exec-server/registry-bearer",
	} {
		if got := unit["Service."+key]; len(got) != 1 || got[0] != want {
			t.Errorf("%s=%v, want %s", key, got, want)
		}
	}
	// Each of these would take the sandbox's namespaces, mounts or syscalls away (see the
	// unit's comment); none may creep in as "more hardening".
	for _, key := range []string{"RestrictNamespaces", "PrivateUsers", "SystemCallFilter", "ProtectKernelTunables",
		"ProtectKernelLogs", "ProtectProc", "ProcSubset", "MemoryDenyWriteExecute", "DynamicUser"} {
		if v, ok := unit["Service."+key]; ok {
			t.Errorf("%s=%v: it breaks the sandbox or the commands agents run", key, v)
		}
	}
	for _, key := range []string{"Environment", "EnvironmentFile"} {
		if v, ok := unit["Service."+key]; ok {
			t.Errorf("%s=%v: the credential goes on stdin, not in the environment", key, v)
		}
	}
	argv := strings.Fields(strings.Join(unit["Service.ExecStart"], " "))
	checkServiceArgv(t, argv)
}

// plistValue is one launchd plist value: a string, an integer (as text), a bool, an array or
// a dict.
type plistValue struct {
	kind  string // string, integer, true, false, array, dict
	text  string
	items []plistValue
	dict  map[string]plistValue
}

// decodePlistValue reads the value whose start element is start.
func decodePlistValue(d *xml.Decoder, start xml.StartElement) (plistValue, error) {
	v := plistValue{kind: start.Name.Local}
	switch v.kind {
	case "array", "dict":
		if v.kind == "dict" {
			v.dict = map[string]plistValue{}
		}
		key := ""
		for {
			tok, err := d.Token()
			if err != nil {
				return v, err
			}
			switch tok := tok.(type) {
			case xml.StartElement:
				if tok.Name.Local == "key" {
					if err := d.DecodeElement(&key, &tok); err != nil {
						return v, err
					}
					continue
				}
				item, err := decodePlistValue(d, tok)
				if err != nil {
					return v, err
				}
				if v.kind == "dict" {
					v.dict[key] = item
				} else {
					v.items = append(v.items, item)
				}
			case xml.EndElement:
				return v, nil
			}
		}
	default:
		err := d.DecodeElement(&v.text, &start)
		return v, err
	}
}

func TestLaunchdPlistKeepsTheCredentialOnStdin(t *testing.T) {
	f, err := os.Open("contrib/exec-server.plist")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	var root plistValue
	for root.kind == "" {
		tok, err := d.Token()
		if err != nil {
			t.Fatalf("plist: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "dict" {
			if root, err = decodePlistValue(d, se); err != nil {
				t.Fatalf("plist: %v", err)
			}
		}
	}
	for key, want := range map[string]string{"Label": "string", "ProgramArguments": "array", "StandardInPath": "string",
		"UserName": "string", "KeepAlive": "dict", "RunAtLoad": "true", "WorkingDirectory": "string"} {
		if got := root.dict[key].kind; got != want {
			t.Errorf("%s is %q, want a %s", key, got, want)
		}
	}
	if ka := root.dict["KeepAlive"].dict["SuccessfulExit"].kind; ka != "false" {
		t.Errorf("KeepAlive.SuccessfulExit is %q, want false (restart on failure only)", ka)
	}
	if _, ok := root.dict["EnvironmentVariables"].dict["CODEX_API_KEY"]; ok {
		t.Error("CODEX_API_KEY in EnvironmentVariables: the credential goes on stdin")
	}
	var argv []string
	for _, a := range root.dict["ProgramArguments"].items {
		argv = append(argv, a.text)
	}
	checkServiceArgv(t, argv)
}

// checkServiceArgv checks a service's command line: this binary, in remote mode, with the
// bearer read from stdin, and flags it accepts. Run with an empty stdin it must get as far
// as reading the token (a bad flag would exit 2 before).
func checkServiceArgv(t *testing.T, argv []string) {
	t.Helper()
	if len(argv) < 2 || filepath.Base(argv[0]) != "exec-server" {
		t.Fatalf("command line %q: not exec-server", argv)
	}
	if !slices.Contains(argv, "--registration-bearer-stdin") || !slices.Contains(argv, "--remote") {
		t.Errorf("command line %q: want remote mode with --registration-bearer-stdin", argv)
	}
	args := slices.Clone(argv[1:])
	if i := slices.Index(args, "--identity"); i >= 0 && i+1 < len(args) {
		args[i+1] = filepath.Join(t.TempDir(), "identity")
	}
	var stderr bytes.Buffer
	code := run(args, strings.NewReader(""), io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "--registration-bearer-stdin: reading the token") {
		t.Errorf("%q with an empty stdin: exit %d, stderr %q; want 1 and the token read failing", argv, code, stderr.String())
	}
}
