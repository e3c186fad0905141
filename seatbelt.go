package main

// The macOS sandbox written out (docs/sandbox.md §5): a sandboxProfile becomes a Seatbelt
// profile (SBPL) and the -D parameters that fill it, for /usr/bin/sandbox-exec. Pure text, so it
// builds and is tested on every platform; sandbox_darwin.go puts it in front of a launch.
//
//	(version 1) (deny default)
//	base         processes, signals to the sandbox's own, sysctls, terminals, user lookups,
//	             preferences (read), POSIX semaphores
//	reads        FullRead: everything. Otherwise READABLE_ROOT_i (Read and Write, outermost
//	             only) and the system paths a program needs to start (seatbeltPlatformReads)
//	writes       FullWrite: everything. Otherwise, per WRITABLE_ROOT_i, the root minus its
//	             protected names (regex, so they cannot be created either) minus
//	             WRITABLE_ROOT_i_EXCLUDED_j (read-only carve-outs, gitdir targets, nested
//	             roots' protected names)
//	network      restricted: nothing. Enabled: sockets, and the services names resolve through
//	deny         DENIED_k, neither read nor written; last, because the last matching rule wins
//
// Paths travel as parameters, never inside the profile text, except in the protected-name
// regexes, which escape them (seatbeltRegexQuote).

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// seatbeltExecutable is the only sandbox-exec ever run: an absolute path, never a PATH lookup,
// so nothing placed on PATH can stand in for it.
const seatbeltExecutable = "/usr/bin/sandbox-exec"

// Parameter names, filled with -DKEY=path.
const (
	seatbeltReadableParam = "READABLE_ROOT_%d"
	seatbeltWritableParam = "WRITABLE_ROOT_%d"
	seatbeltExcludedParam = "WRITABLE_ROOT_%d_EXCLUDED_%d"
	seatbeltDeniedParam   = "DENIED_%d"
)

// seatbeltBasePolicy is what every confined program gets, whatever its profile.
const seatbeltBasePolicy = `(version 1)
(deny default)

; Processes. A child inherits the sandbox, so starting programs gives nothing away; signals and
; process inspection stay inside the sandbox.
(allow process-exec process-fork)
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))

; Output thrown away.
(allow file-write-data (literal "/dev/null"))

; Machine facts that language runtimes, build tools and shells read at start-up.
(allow sysctl-read
  ; processor counts (GOMAXPROCS, nproc, make -j, thread pools)
  (sysctl-name "hw.ncpu")
  (sysctl-name "hw.activecpu")
  (sysctl-name "hw.logicalcpu")
  (sysctl-name "hw.logicalcpu_max")
  (sysctl-name "hw.physicalcpu")
  (sysctl-name "hw.physicalcpu_max")
  (sysctl-name "hw.nperflevels")
  (sysctl-name-prefix "hw.perflevel")
  ; memory (allocators)
  (sysctl-name "hw.memsize")
  (sysctl-name "hw.pagesize")
  ; processor identity and features (runtime feature detection, uname -m, Rosetta checks)
  (sysctl-name "hw.machine")
  (sysctl-name "hw.model")
  (sysctl-name "hw.cputype")
  (sysctl-name "hw.cpusubtype")
  (sysctl-name "hw.cpufamily")
  (sysctl-name "hw.byteorder")
  (sysctl-name "hw.cachelinesize")
  (sysctl-name-prefix "hw.optional.")
  (sysctl-name "machdep.cpu.brand_string")
  (sysctl-name "sysctl.proc_cputype")
  ; the system (uname, sw_vers, hostname, uptime, libSystem's own checks)
  (sysctl-name "kern.ostype")
  (sysctl-name "kern.osrelease")
  (sysctl-name "kern.osversion")
  (sysctl-name "kern.osproductversion")
  (sysctl-name "kern.osvariant_status")
  (sysctl-name "kern.version")
  (sysctl-name "kern.hostname")
  (sysctl-name "kern.boottime")
  (sysctl-name "vm.loadavg")
  ; limits (xargs, getconf ARG_MAX, ulimit)
  (sysctl-name "kern.argmax")
  (sysctl-name "kern.maxfilesperproc")
  (sysctl-name "kern.maxproc")
  (sysctl-name "kern.usrstack64")
  ; process lookups by pid and group (ps, job control)
  (sysctl-name-prefix "kern.proc.pid.")
  (sysctl-name-prefix "kern.proc.pgrp."))

; Terminals. The server opens a PTY child's terminal before the sandbox starts; the child may
; still reopen it by name or as /dev/tty, set its modes, and open terminals of its own.
(allow pseudo-tty)
(allow file-read* file-write* file-ioctl
  (literal "/dev/ptmx")
  (literal "/dev/tty")
  (regex #"^/dev/ttys[0-9]+$"))

; Descriptors the process already holds, reopened by name (/dev/stdout, /dev/fd/N).
(allow file-read-data file-write-data (subpath "/dev/fd"))

; User and group lookups (getpwuid: a shell's ~, git's home directory, id, whoami).
(allow mach-lookup (global-name "com.apple.system.opendirectoryd.libinfo"))

; Preferences, read only (CFPreferences, used by many of the system's own tools).
(allow user-preference-read)
(allow ipc-posix-shm-read* (ipc-posix-name-prefix "apple.cfprefs."))
(allow mach-lookup
  (global-name "com.apple.cfprefsd.daemon")
  (global-name "com.apple.cfprefsd.agent")
  (local-name "com.apple.cfprefsd.agent"))

; POSIX semaphores (Python's multiprocessing locks).
(allow ipc-posix-sem)
`

// seatbeltPlatformReads is what starting a program needs when reads are restricted: without
// it nothing at all could run, since the loader, libSystem and /bin/sh live here. It is the
// macOS counterpart of minimalReadRoots, system-owned paths only; software installed
// elsewhere (/opt/homebrew) is readable when the profile names it.
const seatbeltPlatformReads = `(allow file-read* file-map-executable
  ; the loader, the shared cache, libraries and frameworks
  (subpath "/System")
  (subpath "/Library/Apple")
  ; programs, libraries, terminfo, locales, zoneinfo (all of /usr, as minimalReadRoots on
  ; Linux; /usr/local is where Homebrew lives on Intel Macs)
  (subpath "/usr")
  (subpath "/bin")
  (subpath "/sbin"))
(allow file-read*
  ; system configuration: passwd, shells, profiles, resolv.conf, localtime's target
  (subpath "/private/etc")
  (subpath "/private/var/db/timezone")
  ; which shell /bin/sh runs
  (subpath "/private/var/select")
  ; system-wide preferences
  (subpath "/Library/Preferences")
  ; devices (random, zero, fd; what a device allows is still up to its owner and mode)
  (subpath "/dev")
  ; the root directory itself (listing it, resolving paths from it)
  (literal "/"))
; the symbolic links into /private, so paths through them resolve
(allow file-read-metadata
  (literal "/etc")
  (literal "/tmp")
  (literal "/var"))
`

// seatbeltNetworkPolicy is an enabled network: sockets of every kind, and the system services
// that name resolution and TLS go through (getaddrinfo asks mDNSResponder over its socket,
// which network-outbound covers, after reading the resolver configuration from configd).
const seatbeltNetworkPolicy = `(allow network-outbound)
(allow network-inbound)
(allow system-socket)
(allow mach-lookup
  ; resolver and proxy configuration
  (global-name "com.apple.SystemConfiguration.DNSConfiguration")
  (global-name "com.apple.SystemConfiguration.configd")
  ; mDNSResponder (DNS-SD)
  (global-name "com.apple.dnssd.service")
  ; certificate trust evaluation for TLS (curl, git over https)
  (global-name "com.apple.trustd.agent")
  (global-name "com.apple.SecurityServer"))
; routing and interface tables (getifaddrs, route lookups)
(allow sysctl-read (sysctl-name-prefix "net.routetable."))
`

// seatbeltPolicy is an SBPL profile and the -D parameters that fill it, for /usr/bin/sandbox-exec.
type seatbeltPolicy struct {
	Text   string
	Params []string // "KEY=value", in the order the keys first appear in Text
}

// seatbeltPolicyFor builds the policy for profile p: deny by default, then what p grants.
// Paths are p's, already absolute, clean and symlink-free as Seatbelt matches them.
func seatbeltPolicyFor(p *sandboxProfile) seatbeltPolicy {
	b := seatbeltBuilder{}
	b.text.WriteString(seatbeltBasePolicy)
	b.reads(p)
	b.writes(p)
	if p.restrictsNetwork() {
		b.section("Network: none (denied by default).")
	} else {
		b.section("Network: enabled.")
		b.text.WriteString(seatbeltNetworkPolicy)
	}
	b.denies(p)
	return seatbeltPolicy{Text: b.text.String(), Params: b.params}
}

// seatbeltArgs is the argv that runs path with args under pol:
// sandbox-exec -p TEXT -DKEY=value... -- path args...
func seatbeltArgs(pol seatbeltPolicy, path string, args []string) []string {
	argv := make([]string, 0, 4+len(pol.Params)+len(args))
	argv = append(argv, seatbeltExecutable, "-p", pol.Text)
	for _, kv := range pol.Params {
		argv = append(argv, "-D"+kv)
	}
	argv = append(argv, "--", path)
	return append(argv, args...)
}

// seatbeltBuilder collects a policy's text and parameters as the sections are written.
type seatbeltBuilder struct {
	text   strings.Builder
	params []string
}

// param defines the parameter named by format and args as value, and returns its name.
func (b *seatbeltBuilder) param(value, format string, args ...any) string {
	key := fmt.Sprintf(format, args...)
	b.params = append(b.params, key+"="+value)
	return key
}

// section starts a section of the policy with a comment line.
func (b *seatbeltBuilder) section(comment string) {
	fmt.Fprintf(&b.text, "\n; %s\n", comment)
}

// reads writes the read rules: everything, or the readable roots and the platform's paths.
// Writable roots are readable too; a root inside another adds nothing and is left out.
func (b *seatbeltBuilder) reads(p *sandboxProfile) {
	if p.FullRead {
		b.section("Reads: everywhere.")
		b.text.WriteString("(allow file-read* file-map-executable)\n")
		return
	}
	b.section("Reads: the readable and writable roots, and what the system needs to start a program.")
	roots := outermostPaths(append(slices.Clone(p.Read), p.Write...))
	if len(roots) > 0 {
		b.text.WriteString("(allow file-read* file-map-executable")
		for i, root := range roots {
			fmt.Fprintf(&b.text, "\n  (subpath (param \"%s\"))", b.param(root, seatbeltReadableParam, i))
		}
		b.text.WriteString(")\n")
	}
	b.text.WriteString(seatbeltPlatformReads)
}

// writes writes the write rules: everything, nothing, or one require-all per writable root.
// Inside a root, what must stay read-only is taken out of it:
//   - its protectedNames, by regex on the path, which also matches them before they exist,
//     so they cannot be created (a root whose path a regex literal cannot hold uses the
//     parameter form below for them instead);
//   - the Protected paths and Read paths beneath it that those regexes do not cover (gitdir
//     targets, read-only carve-outs, the protected names of a root nested in it), by
//     literal and subpath: subpath for what lies beneath, literal so the path itself cannot
//     be created when it is missing.
//
// Another writable root inside an excluded path is writable again by its own rule: rules
// add up, the more specific grant wins.
func (b *seatbeltBuilder) writes(p *sandboxProfile) {
	if p.FullWrite {
		b.section("Writes: everywhere.")
		b.text.WriteString("(allow file-write*)\n")
		return
	}
	if len(p.Write) == 0 {
		b.section("Writes: none.")
		return
	}
	b.section("Writes: the writable roots, less their protected names and read-only paths.")
	b.text.WriteString("(allow file-write*")
	for i, root := range p.Write {
		fmt.Fprintf(&b.text, "\n  (require-all (subpath (param \"%s\"))", b.param(root, seatbeltWritableParam, i))
		var excluded []string
		for _, name := range protectedNames {
			re, ok := seatbeltProtectedRegex(root, name)
			if !ok {
				excluded = append(excluded, joinPath(root, name))
				continue
			}
			fmt.Fprintf(&b.text, "\n    (require-not (regex #\"%s\"))", re)
		}
		for _, path := range append(slices.Clone(p.Protected), p.Read...) {
			if path != root && pathWithin(path, root) && !coveredByProtectedName(path, root) {
				excluded = append(excluded, path)
			}
		}
		for j, path := range uniquePaths(excluded) {
			key := b.param(path, seatbeltExcludedParam, i, j)
			fmt.Fprintf(&b.text, "\n    (require-not (literal (param \"%s\")))", key)
			fmt.Fprintf(&b.text, "\n    (require-not (subpath (param \"%s\")))", key)
		}
		b.text.WriteString(")")
	}
	b.text.WriteString(")\n")
}

// denies writes the denied paths, after every allow so that they win over all of them.
func (b *seatbeltBuilder) denies(p *sandboxProfile) {
	if len(p.Deny) == 0 {
		return
	}
	b.section("Denied: neither read nor written, whatever allowed them above.")
	for k, path := range p.Deny {
		fmt.Fprintf(&b.text, "(deny file-read* file-write* (subpath (param \"%s\")))\n", b.param(path, seatbeltDeniedParam, k))
	}
}

// outermostPaths sorts paths outermost first and drops repeats and paths within another.
func outermostPaths(paths []string) []string {
	var out []string
	for _, path := range uniquePaths(paths) {
		if !slices.ContainsFunc(out, func(root string) bool { return pathWithin(path, root) }) {
			out = append(out, path)
		}
	}
	return out
}

// coveredByProtectedName reports whether path is one of root's protected names or beneath one,
// which root's regexes already keep read-only.
func coveredByProtectedName(path, root string) bool {
	return slices.ContainsFunc(protectedNames, func(name string) bool {
		return pathWithin(path, joinPath(root, name))
	})
}

// joinPath is root/name without doubling the slash of "/"; unlike filepath.Join it does not
// clean, so a root is matched exactly as given.
func joinPath(root, name string) string {
	return strings.TrimSuffix(root, "/") + "/" + name
}

// seatbeltRegexMeta are the characters that mean something in a POSIX extended regex outside
// a bracket expression. Each is literal after a backslash, in Seatbelt's regex engine and in
// Go's alike; every other character (including a lone ] or }) is literal as it stands.
const seatbeltRegexMeta = `\^.[$()|*+?{`

// seatbeltRegexQuote returns a regex that matches s literally, to be written inside an SBPL
// regex literal #"...". The literal is raw: backslashes reach the regex engine as written,
// and a double quote ends the literal whatever precedes it, so s with a double quote cannot
// be written in one and ok is false; so it is for control characters and invalid UTF-8,
// which are kept out of the profile text too.
func seatbeltRegexQuote(s string) (re string, ok bool) {
	if !utf8.ValidString(s) {
		return "", false
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '"' || r < 0x20 || r == 0x7f:
			return "", false
		case strings.ContainsRune(seatbeltRegexMeta, r):
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String(), true
}

// seatbeltProtectedRegex is the regex that matches root/name and everything beneath it, and
// nothing else: not root/name-with-a-suffix, not the name deeper in the tree.
func seatbeltProtectedRegex(root, name string) (re string, ok bool) {
	quoted, ok := seatbeltRegexQuote(joinPath(root, name))
	if !ok {
		return "", false
	}
	return "^" + quoted + "(/.*)?$", true
}
