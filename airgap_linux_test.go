package main

// The air-gapped promise (README "Install"; issue 12): the binary makes no network call at
// start-up or in local mode. The test re-executes itself in a new network namespace, whose
// only interface is lo, starts the built binary on 127.0.0.1 there and drives a session. A
// call would show three ways: a DNS lookup prints "go package net:" under
// GODEBUG=netdns=go+2 (checked to work at the end, with an http/request that needs one), a
// socket to anything but loopback or a UDP or raw socket shows in the namespace's /proc/net
// tables, and anything that needed an answer from the network would fail the session, since
// nothing but lo is reachable.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// airgapChildEnv names the built binary for the re-executed test in the namespace.
const airgapChildEnv = "EXEC_SERVER_AIRGAP_BINARY"

func TestAirGappedSession(t *testing.T) {
	if bin := os.Getenv(airgapChildEnv); bin != "" {
		airgappedSession(t, bin)
		return
	}
	bin, err := buildServer()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAirGappedSession$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), airgapChildEnv+"="+bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if uid, gid := os.Getuid(), os.Getgid(); uid != 0 {
		// Unprivileged: a user namespace of our own, where we are root and may own a network
		// namespace and bring its lo up.
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Skipf("network namespaces are unavailable here (%v): the air-gapped test did not run", err)
	}
	t.Logf("in a new network namespace:\n%s", strings.TrimSpace(string(out)))
	if err != nil || !strings.Contains(string(out), "--- PASS: TestAirGappedSession") {
		t.Fatalf("the session in the network namespace failed: %v", err)
	}
}

// airgappedSession runs in the new network namespace.
func airgappedSession(t *testing.T, bin string) {
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range ifaces {
		names = append(names, i.Name)
	}
	if len(names) != 1 || names[0] != "lo" {
		t.Fatalf("interfaces %v: want only lo", names)
	}
	if err := loopbackUp(); err != nil {
		t.Fatalf("bringing lo up: %v", err)
	}
	// No route leaves: the IPv4 routing table holds nothing but its header (lo's routes live
	// in the local table). Checked by reading it, so that the test itself sends nothing.
	routes, err := os.ReadFile("/proc/self/net/route")
	if err != nil {
		t.Fatalf("routing table: %v", err)
	}
	if n := strings.Count(strings.TrimSpace(string(routes)), "\n"); n != 0 {
		t.Fatalf("%d routes out of this namespace: this is no air gap:\n%s", n, routes)
	}
	t.Logf("interfaces %v; no route out", names)

	cmd := exec.Command(bin, "--listen", "ws://127.0.0.1:0", "--log-level", "debug")
	// No proxy either: the lookup at the end must be the server's own.
	cmd.Env = append(os.Environ(), "GODEBUG=netdns=go+2", "HTTP_PROXY=", "HTTPS_PROXY=", "http_proxy=", "https_proxy=")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("no listen line: %v; stderr: %s", err, stderr.String())
	}
	tc := (&testServer{url: strings.TrimSpace(line)}).connect(t)

	// A session: a process, a sandboxed one where this host has a sandbox, files.
	r := tc.run(procStart(t, "p", "sh", "-c", "echo air-gapped"))
	if r.stdout() != "air-gapped\n" || r.exitCode != 0 {
		t.Errorf("process: stdout %q exit %d", r.stdout(), r.exitCode)
	}
	sbx, _ := newSandboxer("isolate", "")
	if sbx.enforces() {
		ws := t.TempDir()
		managed := map[string]any{
			"permissions": map[string]any{
				"type":    "managed",
				"network": "restricted",
				"file_system": map[string]any{"type": "restricted", "entries": []any{
					map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "root"}}, "access": "read"},
					map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "current_working_directory"}}, "access": "write"},
				}},
			},
			"windowsSandboxLevel": "disabled",
			"cwd":                 fileURI(ws),
		}
		r := tc.run(with(procStart(t, "s", "sh", "-c", "echo sandboxed > f && cat f"), "cwd", fileURI(ws), "sandbox", managed))
		if r.stdout() != "sandboxed\n" || r.exitCode != 0 {
			t.Errorf("sandboxed process: stdout %q stderr %q exit %d", r.stdout(), r.stderr(), r.exitCode)
		}
	}
	path := filepath.Join(t.TempDir(), "f")
	tc.mustCall("fs/writeFile", map[string]any{"path": fileURI(path), "dataBase64": b64("data")})
	var rf struct {
		DataBase64 []byte `json:"dataBase64"`
	}
	json.Unmarshal(tc.mustCall("fs/readFile", map[string]any{"path": fileURI(path)}), &rf)
	if string(rf.DataBase64) != "data" {
		t.Errorf("fs/readFile: %q", rf.DataBase64)
	}

	// No network call so far: no lookup, and no socket but loopback TCP in the namespace.
	bad, loopback := nonLoopbackSockets(t)
	if loopback < 3 { // the listener and both ends of our connection
		t.Errorf("%d loopback TCP sockets in the namespace's tables: is this the right namespace?", loopback)
	}
	if len(bad) > 0 {
		t.Errorf("sockets beyond loopback TCP in the namespace:\n%s", strings.Join(bad, "\n"))
	}
	if strings.Contains(stderr.String(), "go package net:") {
		t.Errorf("the server looked a name up:\n%s", stderr.String())
	}

	// The detector works: an http/request for a name does look it up (and fails).
	e := tc.callErr("http/request", map[string]any{"method": "GET", "url": "http://airgap.invalid/", "requestId": "h"})
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(stderr.String(), "go package net:") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // stderr is copied by a goroutine of os/exec
	}
	if !strings.Contains(stderr.String(), "go package net:") {
		t.Log(stderr.String())
		t.Error("GODEBUG=netdns=go+2 printed nothing for a lookup: the DNS check above proves nothing")
	}
	t.Logf("session: a process, files, a sandboxed process: %v (%s); no lookup, %d sockets, all loopback TCP; then http/request: %s",
		sbx.enforces(), sbx.describe(), loopback, e.Message)
}

// nonLoopbackSockets lists the namespace's UDP and raw sockets, and its TCP sockets with an
// end that is not loopback, and counts the loopback TCP ones.
func nonLoopbackSockets(t *testing.T) (bad []string, loopback int) {
	for _, table := range []string{"tcp", "tcp6", "udp", "udp6", "raw", "raw6"} {
		f, err := os.Open("/proc/self/net/" + table)
		if err != nil {
			continue // no IPv6 here
		}
		lines, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
			fields := strings.Fields(l)
			if i == 0 || len(fields) < 3 {
				continue // the header
			}
			if !strings.HasPrefix(table, "tcp") || !loopbackHex(fields[1]) || !loopbackHex(fields[2]) {
				bad = append(bad, fmt.Sprintf("%s: %s", table, l))
			} else {
				loopback++
			}
		}
	}
	return bad, loopback
}

// loopbackHex reports whether a /proc/net address (hex IP:port, IPv4 in host byte order on
// little-endian) is loopback or unspecified.
func loopbackHex(a string) bool {
	ip, _, _ := strings.Cut(a, ":")
	switch {
	case len(ip) == 8:
		return strings.HasSuffix(ip, "7F") || ip == "00000000"
	case len(ip) == 32:
		return ip == "00000000000000000000000001000000" || ip == strings.Repeat("0", 32) ||
			(strings.HasPrefix(ip, "0000000000000000FFFF0000") && strings.HasSuffix(ip, "7F"))
	}
	return false
}
