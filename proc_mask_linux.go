package main

// What a masked command can see of this server on Linux (docs/network.md §8, "Where it is a
// boundary"). New file: the answer depends on the Linux sandbox's mechanisms.

// maskExposure says why a masked command could read this server's memory, where the real
// values are ("" when it cannot): the namespace sandbox with a pid namespace of its own shows
// it a /proc without this server, and Landlock denies a confined process ptrace access
// (/proc/<pid>/mem, environ) to every process outside its domain. Without either the command
// runs as this server's user and sees it in /proc.
func maskExposure(sbx *sandboxer, sb *processSandbox, spec *launchSpec) string {
	switch {
	case sb == nil:
		return "no sandbox"
	case sb.unenforced:
		return "a managed sandbox this server runs unsandboxed (--managed-sandbox run-unsandboxed)"
	case sb.req.kind == profileDisabled:
		return "danger-full-access"
	}
	prof := sb.req.resolve(sandboxAnchors{cwd: spec.dir, tmpdir: envValue(spec.env, "TMPDIR")})
	routed := spec.route != nil
	switch sbx.mechanism() {
	case mechanismNamespaces:
		switch {
		case !prof.confinesFiles() && !routed:
			return "its sandbox confines no file and it is not routed: it runs under seccomp only, beside this server"
		case !sbx.isolatePids:
			return "--linux-sandbox-pid-namespace inherit: it sees this server in /proc"
		}
		return ""
	case mechanismLandlock:
		if !prof.confinesFiles() {
			return "its sandbox confines no file: it runs under seccomp only, beside this server"
		}
		return ""
	}
	return "no sandbox mechanism on this host"
}
