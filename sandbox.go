package main

// The sandbox a request asks for (docs/sandbox.md §1): the `sandbox` object of process/start and
// of every fs method, decoded with the reference's rules and resolved into a sandboxProfile,
// the one type every platform enforces (sandbox_linux.go, sandbox_darwin.go).
//
//	sandbox (FileSystemSandboxContext; outer keys camelCase, permissions snake_case)
//	  permissions          required   {"type":"managed","file_system":FS,"network":NET}
//	                                  {"type":"disabled"}
//	                                  {"type":"external","network":NET}
//	  windowsSandboxLevel  required   disabled | restricted-token | elevated | mxc
//	  cwd                  file: URI  anchors current_working_directory, project_roots, globs
//	  workspaceRoots       [file: URI] what project_roots means (default: cwd)
//	  temporaryDirectories [file: URI] what tmpdir means (default: the TMPDIR in force)
//	  userHomeDir, useLegacyLandlock, sandboxOverride, windowsSandboxProxySettingsMode,
//	  windowsSandboxPrivateDesktop                     accepted, not used on Linux or macOS
//	  sandboxPolicy, sandboxPolicyCwd                  the older shape (below), used when
//	                                                   permissions is absent
//	FS     {"type":"unrestricted"}
//	       {"type":"restricted","entries":[ENTRY…],"glob_scan_max_depth":N>0}
//	ENTRY  {"path":PATH,"access":"read"|"write"|"deny"|"none","missing_path_behavior":"skip"}
//	PATH   {"type":"path","path":URI} | {"type":"glob_pattern","pattern":GLOB} |
//	       {"type":"special","value":{"kind":K,"subpath":REL}}
//	K      root | minimal | current_working_directory | project_roots | tmpdir | slash_tmp |
//	       unknown (ignored)
//	NET    restricted | enabled
//
// The older shape (sandboxPolicy, tagged by type) maps onto the same profiles:
//
//	danger-full-access                      disabled
//	external-sandbox {network_access}       external
//	read-only {network_access}              managed, root:read
//	workspace-write {writable_roots, network_access, exclude_tmpdir_env_var,
//	                 exclude_slash_tmp}     managed, root:read + cwd, roots, /tmp, $TMPDIR :write
//
// Every writable root keeps its top-level protectedNames read-only (missing ones cannot be
// created), and a `.git` file's gitdir target with it.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// protectedNames are the top-level entries of every writable root that stay read-only.
var protectedNames = []string{".git", ".codex", ".agents", ".aws"}

// minimalReadRoots are what the special path `minimal` makes readable: enough to run programs.
var minimalReadRoots = []string{"/bin", "/etc", "/lib", "/lib64", "/sbin", "/usr"}

// Profile kinds, the permissions' type.
const (
	profileManaged  = "managed"
	profileDisabled = "disabled"
	profileExternal = "external"
)

// sandboxProfile is a sandbox object resolved to absolute paths: what a process or an fs
// operation under it may read, write and reach. It is what crosses to the sandbox stage
// (sandbox_linux.go), so its fields are exported for encoding/json.
type sandboxProfile struct {
	Kind    string `json:"kind"`    // profileManaged, profileDisabled or profileExternal
	Network bool   `json:"network"` // the network may be used
	// FullRead: every path is readable (a root entry). Otherwise only Read, Write and what
	// the platform needs to start a program.
	FullRead bool `json:"fullRead"`
	// FullWrite: every path is writable (root:write, or an unrestricted file system).
	FullWrite bool     `json:"fullWrite"`
	Read      []string `json:"read,omitempty"`  // readable roots; inside a writable root, or with FullWrite, read-only carve-outs
	Write     []string `json:"write,omitempty"` // writable roots, outermost first
	Deny      []string `json:"deny,omitempty"`  // neither readable nor writable
	// Protected are the protected names of each writable root, and `.git` files' gitdir
	// targets: read-only whether they exist or not.
	Protected []string `json:"protected,omitempty"`
	// Unenforceable says why the profile cannot be enforced as asked (a glob that matches
	// more than maxGlobMatches paths); confine refuses such a profile. It stays in the server.
	Unenforceable string `json:"-"`
}

// confinesFiles reports whether the profile restricts the file system at all. Full write
// narrowed by a read-only carve-out or a deny entry still does (the reference's
// has_full_disk_write_access is false then).
func (p *sandboxProfile) confinesFiles() bool {
	return p != nil && p.Kind == profileManaged && !(p.FullWrite && len(p.Deny) == 0 && len(p.Read) == 0)
}

// readsFreely reports whether every read is allowed: reads then run in the server, as in
// the reference, and only writes need the sandbox.
func (p *sandboxProfile) readsFreely() bool {
	return !p.confinesFiles() || p.FullRead && len(p.Deny) == 0
}

// restrictsNetwork reports whether the profile takes the network away. A disabled profile
// never does; external and managed ones follow their network field (the reference blocks the
// network of an external or unrestricted profile too).
func (p *sandboxProfile) restrictsNetwork() bool {
	return p != nil && p.Kind != profileDisabled && !p.Network
}

// sandboxContext is the wire object (the table above).
type sandboxContext struct {
	Permissions          json.RawMessage `json:"permissions,omitempty"`
	WindowsSandboxLevel  *string         `json:"windowsSandboxLevel"` // required; checked after permissions, as serde does
	Cwd                  *string         `json:"cwd"`
	WorkspaceRoots       *[]string       `json:"workspaceRoots"`
	UserHomeDir          *string         `json:"userHomeDir"`
	TemporaryDirectories *[]string       `json:"temporaryDirectories"`
	UseLegacyLandlock    *bool           `json:"useLegacyLandlock"`
	SandboxOverride      *string         `json:"sandboxOverride"`
	ProxySettingsMode    *string         `json:"windowsSandboxProxySettingsMode"`
	SandboxPolicy        json.RawMessage `json:"sandboxPolicy,omitempty"`
	SandboxPolicyCwd     *string         `json:"sandboxPolicyCwd"`
}

// permissionProfile is the permissions object.
type permissionProfile struct {
	Type       string          `json:"type"`
	FileSystem json.RawMessage `json:"file_system,omitempty"`
	Network    json.RawMessage `json:"network,omitempty"`
}

type fileSystemPolicy struct {
	Type      string          `json:"type"`
	Entries   *[]sandboxEntry `json:"entries"`
	GlobDepth *json.Number    `json:"glob_scan_max_depth"`
}

type sandboxEntry struct {
	Path    json.RawMessage `json:"path"`
	Access  string          `json:"access"`
	Missing *string         `json:"missing_path_behavior"`
}

type sandboxPath struct {
	Type    string          `json:"type"`
	Path    *string         `json:"path"`
	Pattern *string         `json:"pattern"`
	Value   json.RawMessage `json:"value,omitempty"`
}

type specialPath struct {
	Kind    string  `json:"kind"`
	Subpath *string `json:"subpath"`
	Path    *string `json:"path"`
}

// legacyPolicy is the older SandboxPolicy (sandboxPolicy), snake_case inside.
type legacyPolicy struct {
	Type                string    `json:"type"`
	WritableRoots       *[]string `json:"writable_roots"`
	NetworkAccess       any       `json:"network_access"`
	ExcludeTmpdirEnvVar *bool     `json:"exclude_tmpdir_env_var"`
	ExcludeSlashTmp     *bool     `json:"exclude_slash_tmp"`
}

// sandboxRequest is a decoded sandbox object: the profile's entries still unresolved, since
// what tmpdir and a missing cwd mean differs between process/start and the fs methods.
type sandboxRequest struct {
	kind      string
	network   bool
	fsType    string // "restricted" or "unrestricted" (managed only)
	entries   []resolvableEntry
	dynamic   bool // an entry needs cwd: current_working_directory, project_roots, a glob
	cwd       string
	roots     []string // workspaceRoots
	tmpdirs   []string // temporaryDirectories; nil when not given
	globDepth int
}

// resolvableEntry is one entry: a path, a special kind or a glob, and what it grants.
type resolvableEntry struct {
	path    string // type path
	special string // type special: the kind
	subpath string
	glob    string // type glob_pattern
	access  string // read, write or deny (none is deny)
	skip    bool   // missing_path_behavior skip
}

// parseSandbox decodes a sandbox object; nil when absent or null. Every error is the -32602
// the reference sends for the same object.
func parseSandbox(raw json.RawMessage) (*sandboxRequest, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	var ctx sandboxContext
	if err := decodeParams(raw, "WireFileSystemSandboxContext", &ctx); err != nil {
		return nil, err
	}
	switch {
	case len(ctx.Permissions) == 0 && len(ctx.SandboxPolicy) == 0:
		return nil, errInvalidParams("missing field `permissions`")
	case ctx.WindowsSandboxLevel == nil:
		return nil, errInvalidParams("missing field `windowsSandboxLevel`")
	}
	if err := checkVariant(*ctx.WindowsSandboxLevel, "disabled", "restricted-token", "elevated", "mxc"); err != nil {
		return nil, err
	}
	if ctx.SandboxOverride != nil {
		if err := checkVariant(*ctx.SandboxOverride, "noOverride", "escalatedSandboxWithRestrictions", "bypassSandboxFirstAttempt"); err != nil {
			return nil, err
		}
	}
	if ctx.ProxySettingsMode != nil {
		if err := checkVariant(*ctx.ProxySettingsMode, "reconcile", "preserve"); err != nil {
			return nil, err
		}
	}
	req := &sandboxRequest{}
	var err error
	cwd := ctx.Cwd
	if cwd == nil {
		cwd = ctx.SandboxPolicyCwd
	}
	if cwd != nil {
		if req.cwd, err = sandboxURI(*cwd); err != nil {
			return nil, err
		}
	}
	if req.roots, err = sandboxURIs(ctx.WorkspaceRoots); err != nil {
		return nil, err
	}
	if ctx.TemporaryDirectories != nil {
		if req.tmpdirs, err = sandboxURIs(ctx.TemporaryDirectories); err != nil {
			return nil, err
		}
		if req.tmpdirs == nil {
			req.tmpdirs = []string{}
		}
	}
	if ctx.UserHomeDir != nil {
		if _, err := sandboxURI(*ctx.UserHomeDir); err != nil {
			return nil, err
		}
	}
	switch {
	case len(ctx.Permissions) > 0:
		err = req.decodePermissions(ctx.Permissions)
	default:
		err = req.decodeLegacy(ctx.SandboxPolicy)
	}
	if err != nil {
		return nil, err
	}
	return req, nil
}

// decodePermissions decodes the permissions object.
func (r *sandboxRequest) decodePermissions(raw json.RawMessage) error {
	var p permissionProfile
	if err := decodeParams(raw, "PermissionProfile", &p); err != nil {
		return err
	}
	if err := checkVariant(p.Type, profileManaged, profileDisabled, profileExternal); err != nil {
		return err
	}
	r.kind = p.Type
	if p.Type == profileDisabled {
		r.network = true
		return nil
	}
	if len(p.Network) == 0 {
		return errInvalidParams("missing field `network`")
	}
	network, err := decodeVariant(p.Network, "restricted", "enabled")
	if err != nil {
		return err
	}
	r.network = network == "enabled"
	if p.Type == profileExternal {
		return nil
	}
	if len(p.FileSystem) == 0 {
		return errInvalidParams("missing field `file_system`")
	}
	var fs fileSystemPolicy
	if err := decodeParams(p.FileSystem, "FileSystemPolicy", &fs); err != nil {
		return err
	}
	if err := checkVariant(fs.Type, "restricted", "unrestricted"); err != nil {
		return err
	}
	r.fsType = fs.Type
	if fs.Type == "unrestricted" {
		return nil
	}
	if fs.Entries == nil {
		return errInvalidParams("missing field `entries`")
	}
	if fs.GlobDepth != nil {
		n, err := fs.GlobDepth.Int64()
		if err != nil || n < 0 {
			return errInvalidParams("invalid value: %s, expected a nonzero usize", fs.GlobDepth)
		}
		if n == 0 {
			return errInvalidParams("invalid value: integer `0`, expected a nonzero usize")
		}
		r.globDepth = int(min(n, 64))
	}
	for _, e := range *fs.Entries {
		re, err := decodeEntry(e)
		if err != nil {
			return err
		}
		switch re.special {
		case "current_working_directory", "project_roots":
			r.dynamic = true
		}
		if re.glob != "" {
			r.dynamic = true
		}
		r.entries = append(r.entries, re)
	}
	return nil
}

// decodeEntry decodes one entry of a restricted file system.
func decodeEntry(e sandboxEntry) (resolvableEntry, error) {
	var re resolvableEntry
	if err := checkVariant(e.Access, "read", "write", "deny", "none"); err != nil {
		return re, err
	}
	re.access = e.Access
	if re.access == "none" {
		re.access = "deny"
	}
	if e.Missing != nil {
		if err := checkVariant(*e.Missing, "skip"); err != nil {
			return re, err
		}
		re.skip = true
	}
	if len(e.Path) == 0 {
		return re, errInvalidParams("missing field `path`")
	}
	var p sandboxPath
	if err := decodeParams(e.Path, "SandboxPath", &p); err != nil {
		return re, err
	}
	switch p.Type {
	case "path":
		if p.Path == nil {
			return re, errInvalidParams("missing field `path`")
		}
		path, err := sandboxURI(*p.Path)
		if err != nil {
			return re, err
		}
		re.path = path
	case "glob_pattern":
		if p.Pattern == nil {
			return re, errInvalidParams("missing field `pattern`")
		}
		if re.access != "deny" {
			return re, errInvalidParams("glob_pattern entries support only `deny` access")
		}
		if *p.Pattern == "" { // it would name no path, or the whole of cwd: refused, not guessed
			return re, errInvalidParams("glob_pattern entries need a non-empty `pattern`")
		}
		re.glob = *p.Pattern
	case "special":
		if len(p.Value) == 0 {
			return re, errInvalidParams("missing field `value`")
		}
		var sp specialPath
		if err := decodeParams(p.Value, "SpecialPath", &sp); err != nil {
			return re, err
		}
		if err := checkVariant(sp.Kind, "root", "minimal", "current_working_directory", "project_roots", "tmpdir", "slash_tmp", "unknown"); err != nil {
			return re, err
		}
		re.special = sp.Kind
		if sp.Subpath != nil {
			re.subpath = *sp.Subpath
		}
	default:
		return re, errUnknownVariant(p.Type, "path", "glob_pattern", "special")
	}
	return re, nil
}

// decodeLegacy maps the older SandboxPolicy onto a profile (the table at the top).
func (r *sandboxRequest) decodeLegacy(raw json.RawMessage) error {
	var p legacyPolicy
	if err := decodeParams(raw, "LegacyPolicy", &p); err != nil {
		return err
	}
	network := false
	switch v := p.NetworkAccess.(type) {
	case nil:
	case bool:
		network = v
	case string:
		if err := checkVariant(v, "restricted", "enabled"); err != nil {
			return err
		}
		network = v == "enabled"
	default:
		return errInvalidParams("invalid type for `network_access`")
	}
	r.network = network
	root := resolvableEntry{special: "root", access: "read"}
	switch p.Type {
	case "danger-full-access":
		r.kind, r.network = profileDisabled, true
	case "external-sandbox":
		r.kind = profileExternal
	case "read-only":
		r.kind, r.fsType = profileManaged, "restricted"
		r.entries = []resolvableEntry{root}
	case "workspace-write":
		r.kind, r.fsType = profileManaged, "restricted"
		r.entries = []resolvableEntry{root, {special: "current_working_directory", access: "write"}}
		r.dynamic = true
		if p.WritableRoots != nil {
			for _, w := range *p.WritableRoots {
				path, err := sandboxURIOrPath(w)
				if err != nil {
					return err
				}
				r.entries = append(r.entries, resolvableEntry{path: path, access: "write"})
			}
		}
		if p.ExcludeSlashTmp == nil || !*p.ExcludeSlashTmp {
			r.entries = append(r.entries, resolvableEntry{special: "slash_tmp", access: "write"})
		}
		if p.ExcludeTmpdirEnvVar == nil || !*p.ExcludeTmpdirEnvVar {
			r.entries = append(r.entries, resolvableEntry{special: "tmpdir", access: "write"})
		}
	default:
		return errUnknownVariant(p.Type, "danger-full-access", "read-only", "external-sandbox", "workspace-write")
	}
	return nil
}

// checkVariant is decodeVariant for a string already decoded.
func checkVariant(got string, variants ...string) error {
	if slices.Contains(variants, got) {
		return nil
	}
	if len(variants) == 1 {
		return errInvalidParams("unknown variant `%s`, expected `%s`", got, variants[0])
	}
	return errUnknownVariant(got, variants...)
}

// sandboxURI parses a path inside a sandbox object: a file: URI, never a native path (the
// reference's rule for these fields).
func sandboxURI(s string) (string, error) {
	if strings.HasPrefix(s, "/") {
		return "", errInvalidParams("invalid URI: relative URL without a base")
	}
	p, err := parsePath(s)
	if err != nil {
		return "", errInvalidParams("%s", err)
	}
	return p, nil
}

// sandboxURIOrPath parses a path of the older shape, which carried native paths.
func sandboxURIOrPath(s string) (string, error) {
	p, err := parsePath(s)
	if err != nil {
		return "", errInvalidParams("%s", err)
	}
	return p, nil
}

func sandboxURIs(list *[]string) ([]string, error) {
	if list == nil {
		return nil, nil
	}
	out := make([]string, 0, len(*list))
	for _, s := range *list {
		p, err := sandboxURI(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// sandboxAnchors are what resolve needs to know of the request that carries the sandbox.
type sandboxAnchors struct {
	// cwd is the process's cwd (process/start only). It anchors a relative glob deny entry
	// when the sandbox names no cwd, and nothing else: a deny only narrows. It never stands
	// in for a missing cwd or workspaceRoots where an entry would grant (docs/sandbox.md §1).
	cwd    string
	tmpdir string // the TMPDIR in force for tmpdir when temporaryDirectories is absent
}

// resolve turns a decoded request into a profile: specials and URIs into absolute, clean
// paths, missing paths dropped, protected names added.
func (r *sandboxRequest) resolve(a sandboxAnchors) *sandboxProfile {
	p := &sandboxProfile{Kind: r.kind, Network: r.network}
	if r.kind != profileManaged || r.fsType == "unrestricted" {
		p.FullRead, p.FullWrite = true, true
		return p
	}
	sp := r.specials(a)
	var deny []string
	for _, e := range r.entries {
		if e.special == "" && e.glob != "" {
			matches, complete := expandGlob(sp.globBase, e.glob, r.globDepth)
			if !complete && p.Unenforceable == "" {
				p.Unenforceable = fmt.Sprintf("glob_pattern `%s` matches more than %d paths", e.glob, maxGlobMatches)
			}
			deny = append(deny, matches...)
			continue
		}
		for _, path := range sp.paths(e) {
			deny = p.grant(e, path, deny)
		}
	}
	p.Read = uniquePaths(p.Read)
	p.Write = withoutRedirectedRoots(uniquePaths(p.Write))
	p.Deny = uniquePaths(deny)
	switch {
	case !p.FullWrite:
		p.Protected = protectedPaths(p.Write)
	case p.confinesFiles():
		// `/` writable but narrowed (an approved root write keeps its restrictions): `/` is
		// then a writable root like any other, whose protected names, and the targets of
		// those that are symlinks, stay read-only (docs/sandbox.md §1).
		p.Protected = protectedPaths([]string{"/"})
	}
	return p
}

// sandboxSpecials are what the special paths of one request stand for.
type sandboxSpecials struct {
	cwd      string   // current_working_directory: the sandbox's cwd, or nothing
	globBase string   // where relative glob patterns are expanded
	roots    []string // project_roots
	tmpdirs  []string // tmpdir
}

// specials resolves the special paths of r: project roots are workspaceRoots, or the
// sandbox's cwd; without either they are nothing, as in the reference, never the process's
// cwd (a profile is never widened from what the request did not send). tmpdir is the
// TMPDIR in force unless temporaryDirectories says otherwise. A relative glob deny entry is
// expanded under the sandbox's cwd, or the process's when there is none.
func (r *sandboxRequest) specials(a sandboxAnchors) sandboxSpecials {
	sp := sandboxSpecials{cwd: r.cwd, globBase: r.cwd, roots: r.roots, tmpdirs: r.tmpdirs}
	if len(sp.roots) == 0 && sp.cwd != "" {
		sp.roots = []string{sp.cwd}
	}
	if sp.globBase == "" {
		sp.globBase = a.cwd
	}
	if sp.tmpdirs == nil && a.tmpdir != "" {
		sp.tmpdirs = []string{a.tmpdir}
	}
	return sp
}

// paths is what a non-glob entry names, before its subpath.
func (sp sandboxSpecials) paths(e resolvableEntry) []string {
	switch e.special {
	case "":
		return []string{e.path}
	case "root":
		return []string{"/"}
	case "minimal":
		return minimalReadRoots
	case "current_working_directory":
		if sp.cwd != "" {
			return []string{sp.cwd}
		}
	case "project_roots":
		return sp.roots
	case "tmpdir":
		return sp.tmpdirs
	case "slash_tmp":
		return []string{"/tmp"}
	}
	return nil
}

// grant applies entry e to one path it names: added to p's read or write roots (or the whole
// disk), or, for a deny entry, to deny, which it returns. A missing path grants nothing.
func (p *sandboxProfile) grant(e resolvableEntry, path string, deny []string) []string {
	if e.subpath != "" {
		path = filepath.Join(path, e.subpath)
	}
	// Paths keep the names they were given: the stage recreates the symlinks on
	// the way to each (a restricted-read view needs /lib64 as well as /usr/lib64).
	path = filepath.Clean(path)
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return deny // a missing path grants nothing (skip or not)
	}
	// Only a path that is the root by name grants the whole disk: one that reaches
	// it through a symlink is an ordinary root, checked like any other below.
	switch {
	case e.access == "deny":
		deny = append(deny, path)
	case path == "/" && e.access == "write":
		p.FullRead, p.FullWrite = true, true
	case path == "/":
		p.FullRead = true
	case real == "/" && e.access != "write":
		p.FullRead = true
	case e.access == "write":
		p.Write = append(p.Write, path)
	default:
		p.Read = append(p.Read, path)
	}
	return deny
}

// maxHidesHops bounds the symlinks hides follows on one path, as the kernel bounds a lookup.
const maxHidesHops = 40

// hides reports whether a sandbox under p could not see path (fs/watchMissing asks, for a
// path the server watches on the sandbox's behalf): it lies outside every readable root, or
// in a denied one, once the symlinks on its way are followed. Only what the sandbox could
// see itself is looked at: the walk stops at the first component it could not see, without
// asking whether that exists. A path missing below a visible directory is not hidden.
func (p *sandboxProfile) hides(path string) bool {
	if p.readsFreely() {
		return false
	}
	withReal := func(paths []string) []string {
		out := slices.Clone(paths)
		for _, x := range paths {
			if real, err := filepath.EvalSymlinks(x); err == nil && real != x {
				out = append(out, real)
			}
		}
		return out
	}
	roots, deny := withReal(append(slices.Clone(p.Read), p.Write...)), withReal(p.Deny)
	visible := func(x string) bool {
		if slices.ContainsFunc(deny, func(d string) bool { return pathWithin(x, d) }) {
			return false
		}
		// Inside a readable root, or on the way to one (the view has the directories
		// above a root, holding only what leads to it).
		return p.FullRead || slices.ContainsFunc(roots, func(r string) bool { return pathWithin(x, r) || pathWithin(r, x) })
	}
	cur := "/"
	rest := strings.Split(filepath.Clean(path), "/")
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		if !visible(next) {
			return true
		}
		fi, err := os.Lstat(next)
		if err != nil {
			return false // missing (or unreadable) where the sandbox looks: as it is
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		target, err := os.Readlink(next)
		if hops++; err != nil || hops > maxHidesHops {
			return true
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return false
}

// withoutRedirectedRoots drops the writable roots that redirectedRoot says a sandbox could
// have redirected.
func withoutRedirectedRoots(write []string) []string {
	out := write[:0:0]
	for _, w := range write {
		if !redirectedRoot(w, write) {
			out = append(out, w)
		}
	}
	return out
}

// redirectedRoot reports whether the writable root path reaches its target through a symlink
// that lies inside another writable root and leads out of it. A sandboxed command could have
// made that link ($TMPDIR=/tmp/a/b, and in /tmp: rm -r a; mkdir a; ln -s / a/b), so the next
// sandbox would write wherever it points. Such a root grants nothing (a workspace under /tmp
// that is a symlink to elsewhere is one, when /tmp is writable too: name it by its target).
func redirectedRoot(path string, write []string) bool {
	var roots []string
	for _, w := range write {
		if w == path {
			continue
		}
		roots = append(roots, w)
		if real, err := filepath.EvalSymlinks(w); err == nil && real != w {
			roots = append(roots, real)
		}
	}
	cur := "/"
	for hops := 0; ; {
		rest := strings.TrimPrefix(filepath.Clean(path), cur)
		c, _, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
		if c == "" {
			return false
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return false
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		real, err := filepath.EvalSymlinks(next)
		if err != nil || hops > 40 {
			return true
		}
		hops++
		for _, w := range roots {
			if next != w && pathWithin(next, w) && !pathWithin(real, w) {
				return true
			}
		}
		path = filepath.Join(real, strings.TrimPrefix(filepath.Clean(path), next))
		cur = real
	}
}

// protectedPaths lists the protected names of every writable root, existing or not, and the
// gitdir target of a `.git` file.
func protectedPaths(write []string) []string {
	var out []string
	for _, root := range write {
		for _, name := range protectedNames {
			path := filepath.Join(root, name)
			out = append(out, path)
			if name == ".git" {
				if dir := gitdirTarget(path); dir != "" {
					out = append(out, dir)
				}
			}
		}
	}
	return uniquePaths(out)
}

// gitdirTarget is where a `.git` file ("gitdir: <path>") points, resolved; "" otherwise.
func gitdirTarget(path string) string {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > 4096 {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	dir, ok := strings.CutPrefix(strings.TrimSpace(line), "gitdir:")
	if !ok {
		return ""
	}
	dir = strings.TrimSpace(dir)
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(filepath.Dir(path), dir)
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		return real
	}
	return ""
}

// uniquePaths sorts paths outermost first and drops repeats. It sorts with sort.Slice: a
// short list, and one copy of the sorting code for every element type in the binary.
func uniquePaths(paths []string) []string {
	sort.Slice(paths, func(i, j int) bool {
		a, b := paths[i], paths[j]
		if d := strings.Count(a, "/") - strings.Count(b, "/"); d != 0 {
			return d < 0
		}
		return a < b
	})
	return slices.Compact(paths)
}

// pathWithin reports whether path is root or beneath it.
func pathWithin(path, root string) bool {
	return path == root || root == "/" || strings.HasPrefix(path, root+"/")
}

// defaultGlobDepth bounds how deep a glob_pattern looks below cwd when the profile does not say.
const defaultGlobDepth = 8

// maxGlobMatches bounds how many paths one glob_pattern denies. A glob that matches more
// cannot be enforced whole, and its profile is refused (sandboxProfile.Unenforceable).
const maxGlobMatches = 4096

// expandGlob lists the existing paths under cwd that pattern matches ("**" matches any
// number of directories), at most depth levels down. Deny-only: a match found now is denied
// for the life of the process; a file created later is not. complete is false when there
// were more than maxGlobMatches matches: the list then holds only the first ones.
func expandGlob(cwd, pattern string, depth int) (matches []string, complete bool) {
	if cwd == "" && !filepath.IsAbs(pattern) {
		return nil, true // nothing to anchor it: it names no path
	}
	if depth == 0 {
		depth = defaultGlobDepth
	}
	if !filepath.IsAbs(pattern) {
		pattern = filepath.Join(cwd, pattern)
	}
	pattern = filepath.Clean(pattern)
	base := cwd
	if cwd == "" || !pathWithin(pattern, cwd) {
		base = filepath.Dir(pattern[:max(strings.IndexAny(pattern, "*?["), 1)])
	}
	var out []string
	complete = true
	baseDepth := strings.Count(base, "/")
	filepath.WalkDir(base, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return filepath.SkipDir
		}
		if globMatch(pattern, path) {
			if len(out) == maxGlobMatches {
				complete = false
				return filepath.SkipAll
			}
			out = append(out, path)
		}
		if d.IsDir() && strings.Count(path, "/")-baseDepth >= depth {
			return filepath.SkipDir
		}
		return nil
	})
	return out, complete
}

// globMatch matches path against pattern segment by segment; "**" matches zero or more
// segments, other segments as filepath.Match.
func globMatch(pattern, path string) bool {
	return globSegments(strings.Split(pattern, "/"), strings.Split(path, "/"))
}

func globSegments(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if globSegments(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, err := filepath.Match(pat[0], segs[0]); err != nil || !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}
