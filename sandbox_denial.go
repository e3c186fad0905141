package main

// The denial heuristic (docs/sandbox.md §4): when a sandboxed process fails, did the sandbox
// probably stop it? The answer is process/exited's and process/read's sandboxDenied, which
// tells a Codex client that a retry outside the sandbox may succeed. It is a guess from the
// exit code and the output, made exactly as the reference makes it, so a client sees the same
// answer from either server.

import (
	"runtime"
	"time"
)

// Wire names of the sandbox a process runs in (process/start's sandboxType, docs/protocol.md §6.4).
const (
	sandboxTypeNone  = "none"
	sandboxTypeLinux = "linuxSeccomp"
	sandboxTypeMacOS = "macosSeatbelt"
)

// platformSandboxType is what process/start answers on this host for a process started with a
// sandbox object: the reference names its platform's launcher for every such object, even a
// disabled one (docs/sandbox.md §2, "What the profile kinds do"), and its clients key the
// heuristic on that name.
func platformSandboxType() string {
	switch runtime.GOOS {
	case "linux":
		return sandboxTypeLinux
	case "darwin":
		return sandboxTypeMacOS
	}
	return sandboxTypeNone
}

// isSandboxed reports whether a process of this sandboxType runs under a sandbox object ("" is
// a process no sandbox was decided for: none).
func isSandboxed(sandboxType string) bool {
	return sandboxType != sandboxTypeNone && sandboxType != ""
}

// sandboxDenialGrace is how long the exit report of a sandboxed process waits for one more
// output chunk before it classifies the output (docs/sandbox.md §4, "Timing"): what a dying
// sandbox launcher prints just after its child exits still counts; later output does not.
const sandboxDenialGrace = 20 * time.Millisecond

// sigsysExitCode is 128+SIGSYS: the exit code of a process that seccomp killed for a denied
// system call (SIGSYS is 31 on Linux, the only platform whose sandbox type uses it).
const sigsysExitCode = 128 + 31

// denialKeywords are the phrases whose presence, in any letter case, marks a failure as a
// probable sandbox denial (docs/sandbox.md §4 rule 3). All are ASCII and lower case.
var denialKeywords = [...]string{
	"operation not permitted",
	"permission denied",
	"read-only file system",
	"seccomp",
	"sandbox",
	"landlock",
	"failed to write file",
}

// denialKeywordMaxLen bounds the length of every denial keyword (a test checks it): a
// keyword scanner carries this many bytes less one from one piece of output to the next.
const denialKeywordMaxLen = 32

// quickRejectExitCodes are the shell's own failures (misused builtin, not executable, not
// found): without a keyword, they are not a denial (docs/sandbox.md §4 rule 4).
var quickRejectExitCodes = [...]int{2, 126, 127}

// sandboxDenied is the reference's heuristic (docs/sandbox.md): did the sandbox probably stop
// this command? Each of outputs is one whole text the process wrote (its stdout, its stderr,
// the two interleaved as they came); PTY output counts as stdout. A process's exit report
// applies the same rules (denialVerdict) to its retained chunks, which it scans in place
// (retainedDenialKeyword) rather than join into texts.
func sandboxDenied(sandboxType string, exitCode int, outputs ...[]byte) bool {
	return denialVerdict(sandboxType, exitCode, func() bool {
		for _, out := range outputs {
			var s keywordScanner
			if s.write(out); s.found {
				return true
			}
		}
		return false
	})
}

// denialVerdict applies the rules of docs/sandbox.md §4 in their order; hasKeyword reports
// whether the output holds a denial keyword, and runs only when the answer depends on it (a
// failed sandboxed process), since it may scan a megabyte. The keyword check comes before
// the exit-code quick reject: a shell's 126 "Permission denied" is a denial.
func denialVerdict(sandboxType string, exitCode int, hasKeyword func() bool) bool {
	if !isSandboxed(sandboxType) || exitCode == 0 {
		return false
	}
	if hasKeyword() {
		return true
	}
	for _, c := range quickRejectExitCodes {
		if exitCode == c {
			return false
		}
	}
	return sandboxType == sandboxTypeLinux && exitCode == sigsysExitCode
}

// keywordScanner looks for the denial keywords in a text it is given piece by piece (the
// chunks of a stream), ignoring ASCII letter case, without copying the text: it keeps the
// last bytes of what it saw, so a keyword split across two pieces is found too. The
// reference lower-cases with Unicode rules; the only non-ASCII letter that lower-cases into
// a keyword's letters is the Kelvin sign (U+212A → k), which is not worth a Unicode pass.
type keywordScanner struct {
	tail  [denialKeywordMaxLen - 1]byte // the text's last bytes, up to len(tail)
	ntail int
	found bool
}

// write scans the next piece of the text; found stays true once set.
func (s *keywordScanner) write(piece []byte) {
	if s.found || len(piece) == 0 {
		return
	}
	s.found = hasDenialKeyword(piece)
	s.writeScanned(piece)
}

// writeScanned is write for a piece the caller already searched on its own and found no
// keyword in: only a keyword that straddles the boundary is left to find. Several scanners
// that see the same piece (retainedDenialKeyword) search it once.
func (s *keywordScanner) writeScanned(piece []byte) {
	if s.found || len(piece) == 0 {
		return
	}
	// Such a keyword lies within the tail and the piece's first len(tail) bytes; joined,
	// those are a substring of the text, so any match in them counts.
	var join [2 * len(s.tail)]byte
	n := copy(join[:], s.tail[:s.ntail])
	n += copy(join[n:], piece)
	if s.found = hasDenialKeyword(join[:n]); s.found {
		return
	}
	if len(piece) >= len(s.tail) {
		s.ntail = copy(s.tail[:], piece[len(piece)-len(s.tail):])
		return
	}
	// A short piece: join holds the whole old tail and the piece; keep its end.
	keep := min(n, len(s.tail))
	s.ntail = copy(s.tail[:], join[n-keep:n])
}

// denialFirstBytes has bit c-64 set for every byte c that starts a denial keyword, in either
// letter case (all are ASCII letters, so 64 <= c < 128); a test checks it against
// denialKeywords. One shift and mask per byte rejects the others.
const denialFirstBytes uint64 = 1<<('o'-64) | 1<<('O'-64) | 1<<('p'-64) | 1<<('P'-64) |
	1<<('r'-64) | 1<<('R'-64) | 1<<('s'-64) | 1<<('S'-64) | 1<<('l'-64) | 1<<('L'-64) |
	1<<('f'-64) | 1<<('F'-64)

// hasDenialKeyword reports whether text holds a denial keyword, ignoring ASCII case. One pass:
// a byte that can start a keyword is compared with the keywords that start with it.
func hasDenialKeyword(text []byte) bool {
	for i, c := range text {
		if c-64 >= 64 || denialFirstBytes>>(c-64)&1 == 0 {
			continue // also every c < 64, which wraps around
		}
		first := foldASCII(c)
		for _, kw := range denialKeywords {
			if kw[0] == first && hasPrefixFold(text[i:], kw) {
				return true
			}
		}
	}
	return false
}

// hasPrefixFold reports whether text starts with lower, a lower-case ASCII string, in any
// ASCII letter case.
func hasPrefixFold(text []byte, lower string) bool {
	if len(text) < len(lower) {
		return false
	}
	for j := 0; j < len(lower); j++ {
		if foldASCII(text[j]) != lower[j] {
			return false
		}
	}
	return true
}

// foldASCII lower-cases an ASCII capital letter and leaves every other byte alone.
func foldASCII(c byte) byte {
	if c-'A' < 'Z'-'A'+1 {
		return c + 'a' - 'A'
	}
	return c
}

// retainedDenialKeyword reports whether the retained output holds a denial keyword in any of
// the texts the reference checks (docs/sandbox.md §4 rule 3): stdout (PTY output included),
// stderr, and everything in arrival order. Each chunk is searched once in place and handed to
// two of three scanners for the keywords that straddle chunks; nothing is copied. The caller
// holds p.sendMu, which every change to the retained output holds too, so p.mu need not be
// held: process/read answers meanwhile.
func (p *process) retainedDenialKeyword() bool {
	var out, errs, all keywordScanner
	for i := range p.out.chunks {
		c := &p.out.chunks[i]
		stream := &out
		if c.stream == streamStderr {
			stream = &errs
		}
		b := p.out.bytesOf(c)
		if hasDenialKeyword(b) {
			return true
		}
		stream.writeScanned(b)
		all.writeScanned(b)
		if stream.found || all.found {
			return true
		}
	}
	return false
}
