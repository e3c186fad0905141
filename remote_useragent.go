package main

// The headers Codex's own HTTP client puts on requests to OpenAI's auth endpoints (token
// refresh, Agent Identity; docs/remote.md §8), its user agent among them.

import (
	"net/http"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// setCodexClientHeaders gives a request to an OpenAI auth endpoint (token refresh, Agent
// Identity) the headers Codex's own HTTP client sends: originator, Accept */* and its user
// agent. (Accept-Encoding is the transport's: gzip, where Codex 0.171 offers zstd too.)
func setCodexClientHeaders(req *http.Request) {
	req.Header.Set("originator", codexOriginator)
	req.Header.Set("Accept", "*/*")
	req.Header.Set("User-Agent", codexUserAgent())
}

// codexUserAgent is Codex's user agent, "codex_cli_rs/VERSION (OS OS_VERSION; ARCH) TERMINAL",
// with this server's protocol version, this host's system and "unknown" for the terminal (a
// service has none).
func codexUserAgent() string {
	return codexOriginator + "/" + executorVersion + " (" + osDescription() + "; " + machineArch() + ") unknown"
}

// osDescription is the system as Codex's user agent names it ("Debian 12.11"): the
// distribution's ID, capitalised, and its VERSION_ID from /etc/os-release (Debian's point
// release from /etc/debian_version); "Mac OS" on darwin.
func osDescription() string {
	if runtime.GOOS == "darwin" {
		return "Mac OS"
	}
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "Linux"
	}
	var id, version string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, "=")
		v = strings.Trim(v, `"'`)
		switch k {
		case "ID":
			id = v
		case "VERSION_ID":
			version = v
		}
	}
	if id == "" {
		return "Linux"
	}
	if id == "debian" { // Debian's point release, as Codex's os_info reads it
		if b, err := os.ReadFile("/etc/debian_version"); err == nil {
			version = strings.TrimSpace(string(b))
		}
	}
	name := strings.ToUpper(id[:1]) + id[1:]
	if version == "" {
		return name
	}
	return name + " " + version
}

// machineArch is the machine's architecture as uname(2) names it (x86_64, aarch64).
func machineArch() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return runtime.GOARCH
	}
	return unix.ByteSliceToString(u.Machine[:])
}
