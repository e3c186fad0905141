package main

// The steps that run only under -s workspace-write and -s read-only. The harness prepares a
// fixture on the host first (sandboxFixture): a sibling directory of the workspace, an outward
// symlink in it, a .git directory, and a TCP and a unix-socket listener that count what
// reaches them. Each step is one tool call of the mock model; its check reads the tool output
// and then the host, so a write that "failed" but left a file, or a connection that was
// refused only after it was accepted, still fails.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
)

// turnSandboxPolicy is turn/start's sandboxPolicy for mode (app-server v2 spelling). Every
// turn of a mode sends it, so no turn depends on what an earlier one left behind.
func turnSandboxPolicy(mode string) map[string]any {
	switch mode {
	case modeWrite:
		return map[string]any{"type": "workspaceWrite", "writableRoots": []string{}, "networkAccess": false,
			"excludeTmpdirEnvVar": false, "excludeSlashTmp": false}
	case modeRead:
		return map[string]any{"type": "readOnly"}
	}
	return map[string]any{"type": "dangerFullAccess"}
}

// sandboxFixture is what the harness prepares on the host for one sandboxed scenario.
type sandboxFixture struct {
	outside   string // a sibling directory of the workspace, which the sandbox must not write
	link      string // workspace/out, a symlink to outside
	gitConfig []byte // workspace/.git/config as created (workspace-write only)
	readme    string // workspace/readme.txt's content, for the read checks
	tcp       net.Listener
	unix      net.Listener // nil if the socket path is too long
	unixPath  string
	tcpHits   atomic.Int32 // connections the listeners accepted
	unixHits  atomic.Int32
}

// prepareSandbox builds the fixture next to and inside s.workdir.
func (s *scenario) prepareSandbox() (*sandboxFixture, error) {
	f := &sandboxFixture{
		outside: filepath.Join(filepath.Dir(s.workdir), "outside"),
		link:    filepath.Join(s.workdir, "out"),
		readme:  s.marker + "-readme\n",
	}
	if err := os.MkdirAll(f.outside, 0o755); err != nil {
		return nil, err
	}
	if err := os.Symlink(f.outside, f.link); err != nil && !os.IsExist(err) {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(s.workdir, "readme.txt"), []byte(f.readme), 0o644); err != nil {
		return nil, err
	}
	if s.mode == modeWrite {
		if err := initGit(s.workdir); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(filepath.Join(s.workdir, ".git", "config"))
		if err != nil {
			return nil, err
		}
		f.gitConfig = b
	}
	var err error
	if f.tcp, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	go countAccepts(f.tcp, &f.tcpHits)
	f.unixPath = filepath.Join(filepath.Dir(s.workdir), "net.sock")
	os.Remove(f.unixPath)
	if len(f.unixPath) < 100 {
		if f.unix, err = net.Listen("unix", f.unixPath); err != nil {
			f.Close()
			return nil, err
		}
		go countAccepts(f.unix, &f.unixHits)
	}
	s.log.Printf("sandbox fixture: outside %s, link %s, tcp %s, unix %s", f.outside, f.link, f.tcp.Addr(), f.unixPath)
	return f, nil
}

// initGit makes dir a git work tree: `git init` if git is installed, else the minimum
// (.git/config) that the sandbox's protected-name rule looks at.
func initGit(dir string) error {
	if git, err := exec.LookPath("git"); err == nil {
		cmd := exec.Command(git, "init", "-q", dir)
		cmd.Env = append(baseEnv(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git init: %v: %s", err, out)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Join(dir, ".git"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ".git", "config"), []byte("[core]\n\trepositoryformatversion = 0\n\tbare = false\n"), 0o644)
}

func countAccepts(ln net.Listener, n *atomic.Int32) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n.Add(1)
		c.Close()
	}
}

func (f *sandboxFixture) Close() {
	if f.tcp != nil {
		f.tcp.Close()
	}
	if f.unix != nil {
		f.unix.Close()
		os.Remove(f.unixPath)
	}
}

// leftoverResult checks that the sandbox left nothing in the workspace the commands did not
// write: no mount points for the protected names (.agents, .aws, .codex; .git only if the
// fixture made it). The reference makes them on the host while a command runs and removes
// them afterwards, as ours does (docs/sandbox.md §2); one left behind also changes what the
// harness sends next (it then lists it as an explicit read-only entry of the sandbox).
//
// A server may keep them a little after the turn: ours keeps a sandboxed fs worker, whose
// view stands on them, for leftoverGrace after its last write (docs/sandbox.md §3); the
// reference keeps them for each operation and each sandboxed command. So the check waits that
// long for them to go.
func (s *scenario) leftoverResult(turn string, f *sandboxFixture) stepResult {
	r := stepResult{Name: turn + ": the sandbox left no mount points in the workspace (.agents, .aws, .codex, .git)"}
	var left []string
	for deadline := time.Now().Add(leftoverGrace); ; time.Sleep(100 * time.Millisecond) {
		left = left[:0]
		for _, name := range []string{".agents", ".aws", ".codex", ".git"} {
			if name == ".git" && f.gitConfig != nil {
				continue
			}
			if fi, err := os.Lstat(filepath.Join(s.workdir, name)); err == nil {
				kind := "a file"
				if fi.IsDir() {
					kind = "a directory"
				}
				left = append(left, name+" ("+kind+")")
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	r.OK = len(left) == 0
	if !r.OK {
		r.Detail = "left on the host in " + s.workdir + ": " + strings.Join(left, ", ")
	}
	return r
}

// leftoverGrace is how long leftoverResult waits for mount points to go: a little over our
// fs worker's idle time after writes (fsWorkerIdleWriting, 2 s).
const leftoverGrace = 3 * time.Second

// skipStep is returned by a check that cannot run on this host; the step prints SKIP.
type skipStep string

func (s skipStep) Error() string { return string(s) }

// denialTexts are the errors a sandboxed command prints when a write or a socket is refused:
// EROFS (bind mounts), EACCES (Landlock), EPERM (seccomp).
var denialTexts = []string{"Read-only file system", "Permission denied", "Operation not permitted"}

// showsDenial checks that out is a failed command whose output names the denial.
func showsDenial(out string) error {
	if strings.Contains(out, "exited with code 0") {
		return errors.New("the command succeeded")
	}
	for _, t := range denialTexts {
		if strings.Contains(out, t) {
			return nil
		}
	}
	return fmt.Errorf("the output names no denial (%s)", strings.Join(denialTexts, ", "))
}

// absent checks that a command left none of paths behind, and removes any it left.
func absent(paths ...string) error {
	var bad []string
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			bad = append(bad, p)
			os.RemoveAll(p)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("written despite the sandbox: %s", strings.Join(bad, ", "))
	}
	return nil
}

// deniedWrite is the check of a write the sandbox must refuse: nothing at paths, a failed
// command, and the denial in its output.
func deniedWrite(paths ...string) func(string) error {
	return func(out string) error {
		if err := absent(paths...); err != nil {
			return err
		}
		return showsDenial(out)
	}
}

// denial names a step whose command the exec-server must report with process/exited
// sandboxDenied:true (docs/sandbox.md §4); sandboxDeniedResult checks that after the turn.
func (s *scenario) denial(name string) string {
	if s.denialSteps == nil {
		s.denialSteps = map[string]bool{}
	}
	s.denialSteps[name] = true
	return name
}

// sandboxDeniedResult checks, on the wire (local runs only: the relay is encrypted), that the
// exec-server flagged every command of the expectDenial steps with sandboxDenied:true. The
// reference does (its keyword heuristic sees "Read-only file system", "Operation not
// permitted"). The harness does not show the flag in the tool output: a denied command reads
// "Process exited with code 1" either way.
func (s *scenario) sandboxDeniedResult(turn string) stepResult {
	r := stepResult{Name: turn + ": process/exited reports sandboxDenied:true for each denied command"}
	if s.wire == nil {
		r.Skip, r.Detail = true, "the relay's traffic is encrypted: checked by the local runs"
		return r
	}
	procOf := map[string]string{} // toolCallId -> processId
	denied := map[string]bool{}   // processId -> sandboxDenied
	exited := map[string]bool{}
	for _, m := range s.wire() {
		var msg struct {
			Method string `json:"method"`
			Params struct {
				ProcessID     string `json:"processId"`
				SandboxDenied bool   `json:"sandboxDenied"`
				Metadata      struct {
					ToolCallID string `json:"toolCallId"`
				} `json:"metadata"`
			} `json:"params"`
		}
		if json.Unmarshal(m.Data, &msg) != nil {
			continue
		}
		switch {
		case m.Dir == "c2s" && msg.Method == "process/start" && msg.Params.Metadata.ToolCallID != "":
			procOf[msg.Params.Metadata.ToolCallID] = msg.Params.ProcessID
		case m.Dir == "s2c" && msg.Method == "process/exited":
			exited[msg.Params.ProcessID] = true
			denied[msg.Params.ProcessID] = msg.Params.SandboxDenied
		}
	}
	var bad []string
	for _, call := range s.deniedCalls {
		p, ok := procOf[call]
		switch {
		case !ok:
			bad = append(bad, call+": no process/start")
		case !exited[p]:
			bad = append(bad, call+": no process/exited")
		case !denied[p]:
			bad = append(bad, call+": sandboxDenied:false")
		}
	}
	r.OK = len(bad) == 0
	r.Detail = fmt.Sprintf("%d denied commands", len(s.deniedCalls))
	if !r.OK {
		r.Detail += "; " + strings.Join(bad, ", ")
	}
	return r
}

// hostFile checks that path holds want.
func hostFile(path, want string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("on the host: %v", err)
	}
	if string(b) != want {
		return fmt.Errorf("on the host %s holds %q, want %q", path, b, want)
	}
	return nil
}

func all(checks ...func(string) error) func(string) error {
	return func(out string) error {
		for _, c := range checks {
			if err := c(out); err != nil {
				return err
			}
		}
		return nil
	}
}

func cmdCall(cmd string) toolCall {
	return toolCall{"exec_command", execArgs(map[string]any{"cmd": cmd, "yield_time_ms": 10000})}
}

func ptyCall(cmd string) toolCall {
	return toolCall{"exec_command", execArgs(map[string]any{"cmd": cmd, "tty": true, "yield_time_ms": 10000})}
}

// patchCall is an apply_patch call that adds one file with one line.
func patchCall(path, line string) toolCall {
	patch := "*** Begin Patch\n*** Add File: " + path + "\n+" + line + "\n*** End Patch\n"
	return toolCall{"apply_patch", func([]string) string { return patch }}
}

var sttySize = regexp.MustCompile(`(?m)^\d+ \d+\r?$`)

// networkSteps try the host's loopback TCP listener (bash's /dev/tcp) and its unix socket
// (curl --unix-socket): under network "restricted" neither may connect. A network namespace
// alone stops the first; only the seccomp filter (connect is EPERM for every family but
// socketpair's) stops the second.
func (s *scenario) networkSteps(f *sandboxFixture) []agentStep {
	m := s.marker
	port := f.tcp.Addr().(*net.TCPAddr).Port
	tcpCmd := fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' && echo %s-connected", port, m)
	unixCmd := fmt.Sprintf("curl -sS --max-time 5 --unix-socket %s http://realcodex/ ; echo %s-curl-exit=$?", f.unixPath, m)
	_, curlErr := exec.LookPath("curl")
	return []agentStep{
		{s.denial("network: TCP connect to a loopback listener on the host is denied"), cmdCall(tcpCmd), func(out string) error {
			if n := f.tcpHits.Load(); n > 0 || strings.Contains(out, m+"-connected") {
				return fmt.Errorf("the command connected (%d accepted)", n)
			}
			if strings.Contains(out, "exited with code 0") {
				return errors.New("the command succeeded")
			}
			if !strings.Contains(out, "Operation not permitted") {
				return errors.New("no connection, but not refused with EPERM (\"Operation not permitted\", the seccomp filter's answer to socket(AF_INET)) either: a network namespace alone?")
			}
			return nil
		}},
		{"network: connect to a unix socket on the host is denied", cmdCall(unixCmd), func(out string) error {
			switch {
			case f.unix == nil:
				return skipStep("socket path too long: " + f.unixPath)
			case curlErr != nil:
				return skipStep("no curl on PATH")
			}
			if n := f.unixHits.Load(); n > 0 {
				return fmt.Errorf("the command connected (%d accepted)", n)
			}
			if !strings.Contains(out, m+"-curl-exit=") || strings.Contains(out, m+"-curl-exit=0") {
				return errors.New("curl did not fail")
			}
			return nil
		}},
	}
}

// workspaceWriteSteps is the script of the workspace-write checks.
func (s *scenario) workspaceWriteSteps(f *sandboxFixture) []agentStep {
	m := s.marker
	ws := s.workdir
	gitConfig := filepath.Join(ws, ".git", "config")
	steps := []agentStep{
		{"write inside the workspace succeeds", cmdCall("echo " + m + "-inside > inside.txt && cat inside.txt"),
			all(contains(m+"-inside", "exited with code 0"), func(string) error {
				return hostFile(filepath.Join(ws, "inside.txt"), m+"-inside\n")
			})},
		{s.denial("write to a sibling directory of the workspace is denied"), cmdCall("echo escaped > " + filepath.Join(f.outside, m+"-sibling.txt")),
			deniedWrite(filepath.Join(f.outside, m+"-sibling.txt"))},
		{s.denial("write into the workspace's .git/ is denied and leaves .git/config unchanged"),
			cmdCall("echo tampered >> .git/config; echo escaped > .git/" + m + "-probe"),
			func(out string) error {
				b, err := os.ReadFile(gitConfig)
				if err != nil || !bytes.Equal(b, f.gitConfig) {
					os.WriteFile(gitConfig, f.gitConfig, 0o644)
					return fmt.Errorf(".git/config changed (%v)", err)
				}
				return deniedWrite(filepath.Join(ws, ".git", m+"-probe"))(out)
			}},
		{s.denial("write through the outward symlink out/ is denied"), cmdCall("echo escaped > out/" + m + "-link.txt"),
			deniedWrite(filepath.Join(f.outside, m+"-link.txt"))},
	}
	steps = append(steps, s.networkSteps(f)...)
	return append(steps,
		agentStep{s.denial("PTY (tty:true) runs sandboxed: stty size works, a write outside is denied"),
			ptyCall("tty; stty size; echo escaped > " + filepath.Join(f.outside, m+"-pty.txt")),
			all(func(out string) error {
				if !sttySize.MatchString(out) {
					return errors.New("no `stty size` answer in the output")
				}
				return nil
			}, deniedWrite(filepath.Join(f.outside, m+"-pty.txt")))},
		agentStep{"apply_patch adds a file inside the workspace", patchCall(m+"-patched.txt", m+"-patched"),
			func(out string) error { return hostFile(filepath.Join(ws, m+"-patched.txt"), m+"-patched\n") }},
		agentStep{"apply_patch through the outward symlink out/ is denied", patchCall("out/"+m+"-patched-link.txt", "escaped"),
			func(out string) error {
				if err := absent(filepath.Join(f.outside, m+"-patched-link.txt")); err != nil {
					return err
				}
				// The exec-server's fs/writeFile error, as the harness reports it.
				return contains("Exit code: 1", "Failed to write file")(out)
			}},
	)
}

// readOnlySteps is the script of the read-only checks.
func (s *scenario) readOnlySteps(f *sandboxFixture) []agentStep {
	m := s.marker
	ws := s.workdir
	tmpFile := filepath.Join("/tmp", m+"-ro.txt")
	steps := []agentStep{
		{"reads work (a workspace file and /etc/passwd)", cmdCall("cat readme.txt && head -c 4 /etc/passwd"),
			contains(strings.TrimSpace(f.readme), "exited with code 0")},
		{s.denial("write inside the workspace is denied"), cmdCall("echo escaped > " + m + "-ro.txt"),
			deniedWrite(filepath.Join(ws, m+"-ro.txt"))},
		{s.denial("write to /tmp is denied"), cmdCall("echo escaped > " + tmpFile),
			deniedWrite(tmpFile)},
		{s.denial("write to a sibling directory of the workspace is denied"), cmdCall("echo escaped > " + filepath.Join(f.outside, m+"-sibling.txt")),
			deniedWrite(filepath.Join(f.outside, m+"-sibling.txt"))},
	}
	steps = append(steps, s.networkSteps(f)...)
	return append(steps,
		agentStep{s.denial("PTY (tty:true) runs sandboxed: stty size works, a workspace write is denied"),
			ptyCall("tty; stty size; echo escaped > " + m + "-pty.txt"),
			all(func(out string) error {
				if !sttySize.MatchString(out) {
					return errors.New("no `stty size` answer in the output")
				}
				return nil
			}, deniedWrite(filepath.Join(ws, m+"-pty.txt")))},
		agentStep{"apply_patch inside the workspace is rejected or fails", patchCall(m+"-ro-patched.txt", "escaped"),
			func(out string) error {
				if err := absent(filepath.Join(ws, m+"-ro-patched.txt")); err != nil {
					return err
				}
				// 0.169 rejects it itself ("patch rejected: writing is blocked by read-only
				// sandbox; …"); if it ever reaches the exec-server, fs/writeFile must fail.
				if strings.Contains(out, "patch rejected") || strings.Contains(out, "Failed to write file") {
					return nil
				}
				return errors.New("neither rejected nor failed")
			}},
	)
}
