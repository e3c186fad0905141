package main

// Capability discovery (docs/protocol.md §9.5, §9.4): what a Codex harness asks to find the
// skills and plugins that live on this host.
//
//	capabilityRoots/discoverV1  roots:[{id, path, [sandbox]}]  the plugin manifest, its MCP
//	                            and apps configs, the SKILL.md files and plugin manifests
//	                            below each root, with warnings and a per-root error
//	capabilities/discoverV2     cwd                            the server user's own skills
//	                            ($CODEX_HOME/skills, ~/.agents/skills), see discovery_v2.go
//
// One root is discovered by one discoverRootOp: a walk of the root and the reads it selects,
// bounded in depth, directories, entries, bytes per file and bytes per root (the constants
// below). The op is an fsOp like fs/readFile's, so a root whose sandbox confines reads is
// discovered whole in the sandbox worker for that profile (fsworker.go, docs/sandbox.md §3):
// the kernel decides what it may see, and a root the sandbox hides answers with the error the
// reference gives, "failed to inspect capability root <uri>: No such file or directory (os
// error 2)". Nothing here parses a skill or a manifest beyond the two file names a manifest
// may declare: the harness does that with what we send.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Discovery limits: the reference's figures (docs/protocol.md §9.5).
const (
	maxDiscoveryRoots          = 128      // roots in one request
	maxDiscoveryDepth          = 6        // directory levels walked below a root
	maxDiscoveryDirectories    = 2_000    // directories walked per root
	maxDiscoveryEntries        = 20_000   // entries listed per root
	maxDiscoveryFileBytes      = 1 << 20  // bytes of one file returned
	maxDiscoveryRootBytes      = 16 << 20 // bytes of all the files returned for one root
	maxDiscoveryConcurrentRoot = 8        // roots discovered at once for one request
)

// Names discovery recognises.
const (
	skillFileName         = "SKILL.md"
	skillMetadataPath     = "agents/openai.yaml" // beside a SKILL.md
	defaultMCPConfigPath  = ".mcp.json"          // below a plugin root
	pluginManifestName    = "plugin.json"
	discoveryRootsMethod  = "capabilityRoots/discoverV1"
	discoveryRootErrorFmt = "failed to inspect capability root %s: %s"
)

// pluginManifestDirs are the directories of a plugin root that may hold its plugin.json, in
// the order they are tried.
var pluginManifestDirs = [...]string{".codex-plugin", ".claude-plugin", ".cursor-plugin"}

type discoverRootsParams struct {
	Roots []discoverRootRequest `json:"roots"`
}

// discoverRootRequest is one root of capabilityRoots/discoverV1.
type discoverRootRequest struct {
	ID      string          `json:"id"`
	Path    string          `json:"path" uri:"path"`
	Sandbox json.RawMessage `json:"sandbox,omitempty"`
}

// UnmarshalJSON applies the params rules (required fields, path syntax) to each root.
func (r *discoverRootRequest) UnmarshalJSON(raw []byte) error {
	type plain discoverRootRequest // without this method
	return decodeParams(raw, "CapabilityRootDiscoverRequest", (*plain)(r))
}

// capabilityTextFile is a file discovery returns: its URI and its UTF-8 text.
type capabilityTextFile struct {
	Path     string `json:"path"`
	Contents string `json:"contents"`
}

type discoveredPlugin struct {
	Manifest   capabilityTextFile  `json:"manifest"`
	MCPConfig  *capabilityTextFile `json:"mcpConfig"`
	AppsConfig *capabilityTextFile `json:"appsConfig"`
}

type discoveredSkill struct {
	Instructions capabilityTextFile  `json:"instructions"`
	Metadata     *capabilityTextFile `json:"metadata"`
}

// rootDiscovery is one root's answer, in the reference's member order.
type rootDiscovery struct {
	ID                 string               `json:"id"`
	Path               string               `json:"path"`
	Plugin             *discoveredPlugin    `json:"plugin"`
	Skills             []discoveredSkill    `json:"skills"`
	NamespaceManifests []capabilityTextFile `json:"namespaceManifests"`
	Warnings           []string             `json:"warnings"`
	Error              *string              `json:"error"`
}

// discoverRoots answers capabilityRoots/discoverV1: each root under its own sandbox, at most
// maxDiscoveryConcurrentRoot at once, answered in request order.
func (c *call) discoverRoots(p *discoverRootsParams) (result, error) {
	if len(p.Roots) > maxDiscoveryRoots {
		return nil, errInvalidRequest("capability root discovery accepts at most %d roots", maxDiscoveryRoots)
	}
	type job struct {
		op      discoverRootOp
		profile *sandboxProfile
	}
	jobs := make([]job, len(p.Roots))
	for i, r := range p.Roots {
		path, err := paramPath(r.Path)
		if err != nil {
			return nil, err
		}
		var sb sandboxParam
		if len(r.Sandbox) > 0 {
			if sb.req, err = c.sandboxes.parse(r.Sandbox); err != nil {
				return nil, err
			}
			if sb.req != nil && sb.req.dynamic && sb.req.cwd == "" {
				return nil, errInvalidParams("file system sandbox context with dynamic permissions requires cwd")
			}
		}
		jobs[i] = job{discoverRootOp{ID: r.ID, Path: path}, c.fsConfinement(sb, false)}
	}
	return deferTo(async, func(ctx context.Context) (result, error) {
		bodies := make([][]byte, len(jobs))
		errs := make([]error, len(jobs))
		sem := make(chan struct{}, maxDiscoveryConcurrentRoot)
		var wg sync.WaitGroup
		for i, j := range jobs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				var res result
				var err error
				if j.profile == nil {
					res, err = j.op.run(ctx, fsWritesDirect())
				} else {
					res, _, err = c.srv.fsWorkers.call(ctx, c.srv.sandbox, j.profile, discoveryRootsMethod, j.op)
				}
				if err == nil {
					bodies[i], err = res.body()
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, fsError(err)
		}
		out := append(make([]byte, 0, 64), `{"roots":[`...)
		for i, b := range bodies {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, b...)
		}
		return rawJSON(append(out, "]}"...)), nil
	}), nil
}

// discoverRootOp discovers one root: here, or in the sandbox worker of the root's sandbox.
// Its answer is the root's rootDiscovery; only a cancelled request fails it.
type discoverRootOp struct {
	ID   string `json:"id"`
	Path string `json:"path"`
}

func (o discoverRootOp) run(ctx context.Context, _ fsWrites) (result, error) {
	d := discoverRoot(ctx, o.ID, o.Path)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return rawJSON(marshalNoEscape(d)), nil
}

// marshalNoEscape encodes v as serde does: '<', '>' and '&' are left as they are, so that a
// file's text reads back as sent.
func marshalNoEscape(v any) []byte {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Every value here is strings, slices and pointers to them: it always encodes.
		panic(fmt.Sprintf("discovery: encode the answer: %v", err))
	}
	return []byte(strings.TrimSuffix(b.String(), "\n"))
}

// discoveryBudget is what one root's files may still add to its answer.
type discoveryBudget struct {
	bytes    int
	warnings *[]string
}

func (b *discoveryBudget) warn(format string, args ...any) {
	*b.warnings = append(*b.warnings, fmt.Sprintf(format, args...))
}

// discoverRoot is the whole of one root's discovery, with the file system this process sees.
func discoverRoot(ctx context.Context, id, root string) *rootDiscovery {
	rootURI := fileURI(root)
	d := &rootDiscovery{
		ID: id, Path: rootURI,
		Skills: []discoveredSkill{}, NamespaceManifests: []capabilityTextFile{}, Warnings: []string{},
	}
	fail := func(msg string) *rootDiscovery { d.Error = &msg; return d }
	fi, err := os.Stat(root)
	if err != nil {
		return fail(fmt.Sprintf(discoveryRootErrorFmt, rootURI, discoveryErrorText(err)))
	}
	if !fi.IsDir() {
		return fail(fmt.Sprintf("capability root %s is not a directory", rootURI))
	}
	walk, err := walkTree(ctx, root, walkOptions{
		MaxDepth:                maxDiscoveryDepth,
		MaxDirectories:          maxDiscoveryDirectories,
		MaxEntries:              maxDiscoveryEntries,
		FollowDirectorySymlinks: true,
	})
	if err != nil {
		return fail(fmt.Sprintf("failed to scan capability root %s: %s", rootURI, discoveryErrorText(err)))
	}
	for _, e := range walk.Errors {
		d.Warnings = append(d.Warnings, fmt.Sprintf("failed to scan capability path %s: %s", e.Path, e.Message))
	}
	if walk.Truncated {
		d.Warnings = append(d.Warnings, fmt.Sprintf("capability scan reached its traversal limit (root: %s)", rootURI))
	}

	var skills, manifests []string // paths, from the walk's URIs
	for _, e := range walk.Entries {
		if e.Kind != "file" {
			continue
		}
		p, err := parsePath(e.Path)
		if err != nil {
			continue
		}
		if filepath.Base(p) == skillFileName {
			skills = append(skills, p)
		}
		if manifestPriority(p) >= 0 {
			manifests = append(manifests, p)
		}
	}
	slices.SortFunc(skills, func(a, b string) int { return strings.Compare(fileURI(a), fileURI(b)) })
	slices.SortStableFunc(manifests, func(a, b string) int {
		if c := strings.Compare(fileURI(pluginRootOf(a)), fileURI(pluginRootOf(b))); c != 0 {
			return c
		}
		return manifestPriority(a) - manifestPriority(b)
	})

	budget := &discoveryBudget{warnings: &d.Warnings}
	rootManifest := firstPluginManifest(root, budget)
	inherited := rootManifest
	for dir := filepath.Dir(root); inherited == nil; dir = filepath.Dir(dir) {
		inherited = firstPluginManifest(dir, budget)
		if dir == "/" {
			break
		}
	}
	seen := map[string]bool{}
	if inherited != nil {
		p, _ := parsePath(inherited.Path)
		seen[pluginRootOf(p)] = true
		d.NamespaceManifests = append(d.NamespaceManifests, *inherited)
	}
	for _, m := range manifests {
		if pr := pluginRootOf(m); !seen[pr] {
			seen[pr] = true
			if f := readCapabilityFile(m, budget); f != nil {
				d.NamespaceManifests = append(d.NamespaceManifests, *f)
			}
		}
	}

	if rootManifest != nil {
		decl := pluginDeclarations(root, rootManifest, budget)
		plugin := &discoveredPlugin{Manifest: *rootManifest}
		mcp := decl.mcpConfig
		if mcp == "" && !decl.mcpInline {
			mcp = filepath.Join(root, defaultMCPConfigPath)
		}
		if mcp != "" {
			plugin.MCPConfig = readCapabilityFile(mcp, budget)
		}
		if decl.appsConfig != "" {
			plugin.AppsConfig = readCapabilityFile(decl.appsConfig, budget)
		}
		d.Plugin = plugin
	}

	for _, s := range skills {
		if ctx.Err() != nil {
			return d
		}
		f := readCapabilityFile(s, budget)
		if f == nil {
			continue
		}
		d.Skills = append(d.Skills, discoveredSkill{
			Instructions: *f,
			Metadata:     readCapabilityFile(filepath.Join(filepath.Dir(s), skillMetadataPath), budget),
		})
	}
	return d
}

// discoveryErrorText words an OS error as the reference does: "No such file or directory (os
// error 2)".
func discoveryErrorText(err error) string {
	var re *rpcError
	if errors.As(fsError(err), &re) {
		return re.Message
	}
	return err.Error()
}

// manifestPriority is the index in pluginManifestDirs of the directory holding the plugin
// manifest p, or -1 when p is no plugin manifest.
func manifestPriority(p string) int {
	if filepath.Base(p) != pluginManifestName {
		return -1
	}
	return slices.Index(pluginManifestDirs[:], filepath.Base(filepath.Dir(p)))
}

// pluginRootOf is the plugin root of the manifest p: the directory above its manifest
// directory.
func pluginRootOf(p string) string { return filepath.Dir(filepath.Dir(p)) }

// firstPluginManifest reads the first plugin manifest of dir there is, in pluginManifestDirs
// order.
func firstPluginManifest(dir string, budget *discoveryBudget) *capabilityTextFile {
	for _, m := range pluginManifestDirs {
		if f := readCapabilityFile(filepath.Join(dir, m, pluginManifestName), budget); f != nil {
			return f
		}
	}
	return nil
}

// readCapabilityFile reads path as a capability file, or returns nil: silently when it does
// not exist or is not a regular file, with a warning when it cannot be read, is too large
// for maxDiscoveryFileBytes or the root's budget, or is not UTF-8.
func readCapabilityFile(path string, budget *discoveryBudget) *capabilityTextFile {
	uri := fileURI(path)
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		budget.warn("failed to inspect capability file %s: %s", uri, discoveryErrorText(err))
		return nil
	case !fi.Mode().IsRegular():
		return nil
	case fi.Size() > maxDiscoveryFileBytes:
		budget.warn("capability file %s exceeds the %d-byte limit", uri, maxDiscoveryFileBytes)
		return nil
	case budget.bytes+int(fi.Size()) > maxDiscoveryRootBytes:
		budget.warn("capability root bundle exceeds the %d-byte limit", maxDiscoveryRootBytes)
		return nil
	}
	f, err := openRegular(path, os.O_RDONLY, 0)
	if err != nil {
		budget.warn("failed to read capability file %s: %s", uri, discoveryErrorText(err))
		return nil
	}
	defer f.Close()
	// One byte more than may be returned tells a file that grew since its stat.
	limit := min(maxDiscoveryFileBytes, maxDiscoveryRootBytes-budget.bytes)
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		budget.warn("failed to read capability file %s: %s", uri, discoveryErrorText(err))
		return nil
	}
	if len(data) > limit {
		budget.warn("capability file %s exceeded its read limit", uri)
		return nil
	}
	if msg, ok := utf8ErrorText(data); !ok {
		budget.warn("capability file %s is not UTF-8: %s", uri, msg)
		return nil
	}
	budget.bytes += len(data)
	return &capabilityTextFile{Path: uri, Contents: string(data)}
}

// pluginDecl is what a root's plugin manifest declares of its MCP and apps configs.
type pluginDecl struct {
	mcpConfig  string // a declared file, or ""
	mcpInline  bool   // mcpServers is an object: no file to read
	appsConfig string
}

// pluginDeclarations reads mcpServers and apps from the manifest. A manifest that is not a
// JSON object declares nothing (the harness reports it); a declared path that is not
// "./…" below the root is ignored with a warning.
func pluginDeclarations(root string, manifest *capabilityTextFile, budget *discoveryBudget) pluginDecl {
	var fields map[string]json.RawMessage
	if json.Unmarshal([]byte(manifest.Contents), &fields) != nil {
		return pluginDecl{}
	}
	var d pluginDecl
	if v, ok := fields["mcpServers"]; ok {
		d.mcpConfig = declaredFile(root, "mcpServers", v, manifest.Path, budget)
		d.mcpInline = len(v) > 0 && v[0] == '{'
	}
	if v, ok := fields["apps"]; ok {
		d.appsConfig = declaredFile(root, "apps", v, manifest.Path, budget)
	}
	return d
}

// declaredFile is the file a manifest field names, or "" when it names none (not a string)
// or one discovery must not read.
func declaredFile(root, field string, v json.RawMessage, manifestURI string, budget *discoveryBudget) string {
	var s string
	if json.Unmarshal(v, &s) != nil {
		return ""
	}
	rel, ok := strings.CutPrefix(s, "./")
	if !ok {
		budget.warn("ignoring %s in %s: path must start with `./`", field, manifestURI)
		return ""
	}
	below := rel != "" && !strings.HasPrefix(rel, "/") &&
		!slices.Contains(strings.FieldsFunc(rel, func(r rune) bool { return r == '/' || r == '\\' }), "..")
	p := path.Join(root, rel)
	if !below || !strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/") {
		budget.warn("ignoring %s in %s: path must remain below the capability root", field, manifestURI)
		return ""
	}
	return p
}

// utf8ErrorText checks that b is UTF-8; if not, it words the first error as Rust's Utf8Error
// does, which the reference's warning quotes.
func utf8ErrorText(b []byte) (string, bool) {
	for i := 0; i < len(b); {
		c := b[i]
		if c < 0x80 {
			i++
			continue
		}
		width, lo, hi := 0, byte(0x80), byte(0xBF)
		switch {
		case c >= 0xC2 && c <= 0xDF:
			width = 2
		case c == 0xE0:
			width, lo = 3, 0xA0
		case c == 0xED:
			width, hi = 3, 0x9F
		case c >= 0xE1 && c <= 0xEF:
			width = 3
		case c == 0xF0:
			width, lo = 4, 0x90
		case c >= 0xF1 && c <= 0xF3:
			width = 4
		case c == 0xF4:
			width, hi = 4, 0x8F
		}
		if width == 0 {
			return fmt.Sprintf("invalid utf-8 sequence of 1 bytes from index %d", i), false
		}
		for k := 1; k < width; k++ {
			if i+k >= len(b) {
				return fmt.Sprintf("incomplete utf-8 byte sequence from index %d", i), false
			}
			l, h := byte(0x80), byte(0xBF)
			if k == 1 {
				l, h = lo, hi
			}
			if b[i+k] < l || b[i+k] > h {
				return fmt.Sprintf("invalid utf-8 sequence of %d bytes from index %d", k, i), false
			}
		}
		i += width
	}
	return "", true
}
