package main

// Environment and discovery methods (docs/protocol.md §9): what a Codex harness asks about the
// host before it runs anything.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// executorVersion is the protocol level we serve. Clients read it as the reference's
// version, so it names the Codex release whose wire behaviour we match.
const executorVersion = "0.171.0"

// environmentInfo is the result of environment/info and initialize.environmentInfo. Every key
// the reference sends is present: clients decode them.
type environmentInfo struct {
	Shell                shellInfo       `json:"shell"`
	ExecutorVersion      string          `json:"executorVersion"`
	ProviderID           string          `json:"providerId"`
	Cwd                  string          `json:"cwd"`
	UserHomeDir          string          `json:"userHomeDir"`
	PlatformOS           string          `json:"platformOs"`
	PrependPathDirs      []string        `json:"prependPathDirs"`
	TemporaryDirectories []string        `json:"temporaryDirectories"`
	TempDir              string          `json:"tempDir"`
	Capabilities         map[string]bool `json:"capabilities"`
}

type shellInfo struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// networkSupport is what the managed network proxy can do for the starts a harness sends
// (docs/network.md §4, §7), which the network capabilities advertise: the harness refuses a
// network-enabled profile itself, with its own clear words, when networkProxyLaunch is false,
// and trusts it when it is true.
type networkSupport struct {
	// launch: a start with networkProxy runs. The harness sends every one of them with
	// enforceManagedNetwork under a sandbox, so the host must route a sandboxed command
	// through its proxy (the namespace sandbox with a pid namespace of its own), unless
	// --managed-sandbox run-unsandboxed leaves nothing to route.
	launch bool
	// transparent: a transparent start runs: it is routed, and the kernel loads the
	// sk_lookup program (CAP_BPF and CAP_NET_ADMIN).
	transparent bool
	// mask: credential masking is a boundary for the harness's starts (docs/network.md §8):
	// they are routed, so the command runs in a pid namespace of its own and cannot read
	// this server's memory. Not under --managed-sandbox run-unsandboxed, where it could.
	mask bool
}

// capabilities are the reference's capability flags as a server with the default flags
// advertises them before it knows its sandboxer: the managed network proxy is launched on
// every platform, but only Linux routes a sandboxed command through it (docs/network.md §4)
// and makes it transparent (§7). The server itself advertises capabilitiesFor what its
// host and flags allow (hostNetworkSupport).
func capabilities() map[string]bool {
	linux := runtime.GOOS == "linux"
	return capabilitiesFor(networkSupport{launch: linux, transparent: linux, mask: linux})
}

// capabilitiesFor are the capability flags, each true only where we implement the feature
// (client behaviour depends on them); the managed network's follow n.
func capabilitiesFor(n networkSupport) map[string]bool {
	return map[string]bool{
		"networkProxyLaunch":                          n.launch,
		"networkProxyReviewDomains":                   n.launch,
		"networkProxyTransparentTcp":                  n.transparent,
		"credentialMasking":                           n.mask,
		"credentialMaskingCustomProviders":            n.mask,
		"capabilityDiscoverySandbox":                  true,
		"fsWatchMissing":                              true,
		"capabilityDiscoveryV2":                       true,
		"environmentConfigRead":                       true,
		"httpHeaderEnvVars":                           true,
		"sandboxedFileStreaming":                      true,
		"fileWriteStreaming":                          true,
		"shellSnapshotV2":                             true,
		"windowsMxc":                                  false,
		"linuxRootWritePreservesDevices":              true,
		"linuxApprovedRootWritePreservesRestrictions": true,
	}
}

// hostEnvironment reads what is true of this host once, at start-up.
func hostEnvironment() *environmentInfo {
	cwd, _ := os.Getwd()
	shell := userShell()
	host, _ := os.Hostname()
	id := sha256.Sum256([]byte("exec-server\x00" + host + "\x00" + strconv.Itoa(os.Getuid()) + "\x00" + machineID()))
	info := &environmentInfo{
		Shell:                shellInfo{Name: filepath.Base(shell), Path: shell},
		ExecutorVersion:      executorVersion,
		ProviderID:           "sha256:" + hex.EncodeToString(id[:]),
		Cwd:                  dirURI(cwd),
		UserHomeDir:          dirURI(userHome()),
		PlatformOS:           runtime.GOOS,
		PrependPathDirs:      []string{},
		TemporaryDirectories: []string{},
		TempDir:              dirURI(os.TempDir()),
		Capabilities:         capabilities(),
	}
	if runtime.GOOS == "darwin" {
		info.PlatformOS = "macos"
	}
	return info
}

// userHome is $HOME, or, when it is unset (a service), the home directory the user database
// gives the server's user, as the reference's lookup does.
func userHome() string {
	if home, err := os.UserHomeDir(); err == nil {
		return home
	}
	if u, err := user.Current(); err == nil && u.HomeDir != "" {
		return u.HomeDir
	}
	return "/"
}

// dirURI renders a directory as a file: URI. The environment may name one relatively
// (CODEX_HOME=codex, TMPDIR=tmp): it is then taken from the server's working directory, so
// that the client always gets an absolute URI, never "file://codex" (a host).
func dirURI(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return fileURI(dir)
}

// userShell is the login shell of the server's user: /etc/passwd, then $SHELL, then /bin/sh.
func userShell() string {
	if f, err := os.Open("/etc/passwd"); err == nil {
		defer f.Close()
		uid := strconv.Itoa(os.Getuid())
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) >= 7 && fields[2] == uid && strings.HasPrefix(fields[6], "/") {
				return fields[6]
			}
		}
	}
	if s := os.Getenv("SHELL"); strings.HasPrefix(s, "/") {
		return s
	}
	return "/bin/sh"
}

func machineID() string {
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(p); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// envMethods registers the environment and discovery methods.
func envMethods(t methodTable) {
	t["environment/info"] = handleNoParams("environment info", func(c *call) (*environmentInfo, error) {
		return c.srv.envInfo, nil
	})
	t["environment/status"] = handleNoParams("environment status", func(c *call) (statusResult, error) {
		return statusResult{"ready"}, nil // {"status":"ready"}
	})
	t["environmentConfig/read"] = handle("environment config", "EnvironmentConfigReadParams", quick, (*call).environmentConfigRead)
	t["capabilities/discoverV2"] = handle("capability discovery", "DiscoverV2CapabilitiesRequest", decides, (*call).discoverV2)
	t["capabilityRoots/discoverV1"] = handle("capability discovery", "WireCapabilityRootsDiscoverParams", decides, (*call).discoverRoots)
}

type environmentConfigParams struct {
	Cwd               string     `json:"cwd" uri:"path"`
	ConfigPaths       [][]string `json:"configPaths"`
	RequirementsPaths [][]string `json:"requirementsPaths"`
}

type configLayers struct {
	Layers              []any `json:"layers"`
	CloudInsertionIndex int   `json:"cloudInsertionIndex"`
}

type environmentConfigResult struct {
	UserHomeDir  string       `json:"userHomeDir"`
	CodexHomeDir string       `json:"codexHomeDir"`
	Hostname     string       `json:"hostname"`
	Config       configLayers `json:"config"`
	Requirements configLayers `json:"requirements"`
}

// environmentConfigRead answers the executor-side configuration the harness selects: the
// user layer of $CODEX_HOME/config.toml holding the selected keys (env_config.go), no
// requirements layers, and the directories.
func (c *call) environmentConfigRead(p *environmentConfigParams) (environmentConfigResult, error) {
	// The reference parses cwd as it decodes the params (a malformed URI comes first), checks
	// the selectors, and only then makes cwd a path.
	_, cwdErr := paramPath(p.Cwd)
	if re, ok := cwdErr.(*rpcError); ok && re.Code == codeInvalidParams {
		return environmentConfigResult{}, cwdErr
	}
	if len(p.ConfigPaths) == 0 && len(p.RequirementsPaths) == 0 {
		return environmentConfigResult{}, errInvalidParams("at least one config or requirements path is required")
	}
	for _, sel := range slices.Concat(p.ConfigPaths, p.RequirementsPaths) {
		if len(sel) == 0 {
			return environmentConfigResult{}, errInvalidParams("TOML paths must contain at least one key segment")
		}
	}
	if cwdErr != nil {
		return environmentConfigResult{}, errInvalidParams("%s", cwdErr.(*rpcError).Message) // the reference's code here
	}
	home := userHome()
	codexHome := os.Getenv("CODEX_HOME")
	if codexHome == "" {
		codexHome = filepath.Join(home, ".codex")
	}
	host, _ := os.Hostname()
	config := configLayers{Layers: []any{}}
	if len(p.ConfigPaths) > 0 {
		layer, err := userConfigLayer(codexHome, p.ConfigPaths)
		if err != nil {
			return environmentConfigResult{}, err
		}
		if layer != nil {
			config.Layers = append(config.Layers, layer)
		}
	}
	return environmentConfigResult{
		UserHomeDir:  dirURI(home),
		CodexHomeDir: dirURI(codexHome),
		Hostname:     host,
		Config:       config,
		Requirements: configLayers{Layers: []any{}},
	}, nil
}
