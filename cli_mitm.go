package main

// `exec-server mitm-ca rotate`: replace the credential-masking CA under the state directory
// (docs/network.md §8, "The CA"). A running server picks the new CA up at its next masked
// start; commands already running keep the bundle they were started with.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
)

const mitmCAUsage = `usage: exec-server mitm-ca rotate [--state-dir DIR]

Replace the credential-masking CA under DIR/mitm by a new one (a new P-256 key and a
certificate valid for one year). Commands started afterwards trust only the new CA.
`

// runMITMCACommand runs `exec-server mitm-ca ARGS`; it returns the exit status.
func runMITMCACommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "rotate" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, mitmCAUsage)
			return 0
		}
		fmt.Fprint(stderr, mitmCAUsage)
		return 2
	}
	var o cliOptions
	fs := flag.NewFlagSet("exec-server mitm-ca rotate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.stateDir, "state-dir", "", "state `DIR`")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, mitmCAUsage)
			return 0
		}
		fmt.Fprintf(stderr, "exec-server mitm-ca: %v\n%s", err, mitmCAUsage)
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "exec-server mitm-ca: unexpected argument %q\n%s", fs.Arg(0), mitmCAUsage)
		return 2
	}
	dir := stateDirOf(&o)
	if dir == "" {
		fmt.Fprintln(stderr, "exec-server mitm-ca: no state directory: give --state-dir")
		return 1
	}
	cert, err := rotateMITMCA(dir, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "exec-server mitm-ca: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "new masking CA %q valid until %s\n", cert.Subject.CommonName, cert.NotAfter.UTC().Format(time.RFC3339))
	return 0
}
