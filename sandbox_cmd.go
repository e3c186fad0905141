package main

// `exec-server sandbox`: one command under a sandbox profile, in the foreground, so that a
// person can see what an agent's commands will see (docs/sandbox.md §9).
//
//	exec-server sandbox [--read-only | --writable DIR …] [--network] [--mechanism M] -- CMD ARGS…
//	exec-server sandbox --status
//
// The profile is the one Codex sends in its workspace-write mode: everything readable; the
// current directory (or each --writable DIR), /tmp and $TMPDIR writable but for their
// protected names; no network unless --network. --read-only writes nowhere. The command
// keeps this terminal and process group, and its exit status is the command's.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// runSandboxCommand is `exec-server sandbox`.
func runSandboxCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("exec-server sandbox", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var writable stringList
	readOnly := fs.Bool("read-only", false, "nothing is writable")
	fs.Var(&writable, "writable", "a writable `DIR` (repeatable; default: the current directory)")
	network := fs.Bool("network", false, "allow the network")
	mechanism := fs.String("mechanism", "", "force a `MECHANISM`: namespaces, landlock or none (default: the best this host has)")
	pidNamespace := fs.String("linux-sandbox-pid-namespace", "isolate", "pid namespace `MODE` of the command: isolate or inherit")
	shmSize := byteSize(defaultShmSize)
	fs.Var(&shmSize, "linux-sandbox-shm-size", "`SIZE` of the sandbox's /dev/shm, in bytes or with a K, M or G suffix (default 64M)")
	maxProcs := fs.Int("linux-sandbox-max-processes", defaultSandboxMaxProcesses, "processes and threads (`N`) the sandbox may run at once")
	status := fs.Bool("status", false, "print the mechanism in force and exit")
	usageErr := func(msg string) int {
		fmt.Fprintf(stderr, "exec-server sandbox: %s; run exec-server sandbox --help\n", msg)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			sandboxCommandUsage(stdout, fs)
			return 0
		}
		return usageErr(strings.ReplaceAll(err.Error(), "\n", " "))
	}
	sbx, err := newSandboxer(*pidNamespace, *mechanism)
	if err != nil {
		return usageErr(err.Error())
	}
	// The server's limits, so that this command sees what an agent's would (docs/sandbox.md §2).
	sbx.limitShm(int64(shmSize))
	if err := sbx.setMaxProcesses(*maxProcs); err != nil {
		return usageErr(err.Error())
	}
	if *status {
		sbx.statusLines(stdout)
		fmt.Fprintf(stdout, "transparent TCP: %s\n", transparentTCPText(sbx))
		return 0
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return usageErr("no command given")
	}
	if *readOnly && len(writable) > 0 {
		return usageErr("--read-only and --writable exclude each other")
	}
	cwd, err := os.Getwd()
	if err != nil {
		fmt.Fprintf(stderr, "exec-server sandbox: %v\n", err)
		return 1
	}
	profile, err := sandboxCommandProfile(*readOnly, *network, writable, cwd)
	if err != nil {
		return usageErr(err.Error())
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(stderr, "exec-server sandbox: %v\n", err)
		return 127
	}
	code, err := sbx.runForeground(profile, path, argv, cwd)
	if err != nil {
		fmt.Fprintf(stderr, "exec-server sandbox: %v\n", err)
	}
	return code
}

// sandboxCommandUsage prints `exec-server sandbox --help`.
func sandboxCommandUsage(stdout io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(stdout, "usage: exec-server sandbox [--read-only | --writable DIR ...] [--network] [--mechanism M] -- CMD ARGS...")
	fmt.Fprintln(stdout, "       exec-server sandbox --status")
	fmt.Fprintln(stdout)
	fmt.Fprint(stdout, wrapText("Runs CMD in the foreground under the sandbox Codex's workspace-write mode asks for "+
		"(everything readable; the current directory, or each --writable DIR, and /tmp writable; no network), "+
		"or read-only, so that you can see what an agent's commands will see. Exits with CMD's status.", "", 96))
	fmt.Fprintln(stdout)
	fs.VisitAll(func(f *flag.Flag) { writeFlagUsage(stdout, f) })
}

// sandboxCommandProfile is the profile of `exec-server sandbox`: Codex's workspace-write
// (writable: each DIR, or cwd, plus /tmp and $TMPDIR), or read-only. An error is a usage error.
func sandboxCommandProfile(readOnly, network bool, writable stringList, cwd string) (*sandboxProfile, error) {
	if !readOnly && len(writable) == 0 {
		writable = stringList{cwd}
	}
	profile := &sandboxProfile{Kind: profileManaged, Network: network, FullRead: true}
	for _, w := range writable {
		abs, err := filepath.Abs(w)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			return nil, fmt.Errorf("--writable %s: %v", w, err)
		}
		profile.Write = append(profile.Write, abs)
	}
	if !readOnly {
		// Codex's workspace-write makes these writable too (slash_tmp, tmpdir).
		for _, tmp := range []string{"/tmp", os.Getenv("TMPDIR")} {
			if fi, err := os.Stat(tmp); tmp != "" && err == nil && fi.IsDir() {
				profile.Write = append(profile.Write, filepath.Clean(tmp))
			}
		}
	}
	profile.Write = uniquePaths(profile.Write)
	profile.Protected = protectedPaths(profile.Write)
	return profile, nil
}
