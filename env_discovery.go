package main

// Capability discovery (docs/protocol.md §9.5, §9.4): what a Codex harness asks to find the
// skills and plugins that live on this host.
//
//	capabilityRoots/discoverV1  roots:[{id, path, [sandbox]}]  the plugin manifest, its MCP
//	                            and apps configs, the SKILL.md files and plugin manifests
//	                            below each root, with warnings and a per-root error
//	capabilities/discoverV2     cwd                            the server user's own skills
//	                            ($CODEX_HOME/skills, ~/.agents/skills), below
//
// One root is discovered by one discoverRootOp: a walk of the root and the reads it selects,
// bounded in depth, directories, entries, bytes per file and bytes per root (the constants
// below). The op is an fsOp like fs/readFile's, so a root whose sandbox confines reads is
// discovered whole in the sandbox worker for that profile (fs_worker.go, docs/sandbox.md §3):
// the kernel decides what it may see, and a root the sandbox hides answers with the error the
// reference gives, "failed to inspect capability root <uri>: No such file or directory (os
// error 2)". Nothing here parses a skill or a manifest beyond the two file names a manifest
// may declare: the harness does that with what we send.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
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
	maxDiscoveryRootBytes      = 16 << 20 // bytes of all the files returned for one root, as JSON
	maxDiscoveryConcurrentRoot = 8        // roots discovered at once for one request
	// maxDiscoveryAnswerBytes bounds a whole answer (ours: the reference bounds each root
	// only, so 128 roots could make 2 GiB): past it the request fails. It is one websocket
	// message, the most a client takes in one (wsMaxMessage, and the Codex client's 64 MiB).
	maxDiscoveryAnswerBytes = wsMaxMessage - discoveryAnswerOverhead
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
func (c *call) discoverRoots(p *discoverRootsParams) (rawJSON, error) {
	if len(p.Roots) > maxDiscoveryRoots {
		return nil, errInvalidRequest("capability root discovery accepts at most %d roots", maxDiscoveryRoots)
	}
	jobs := make([]rootJob, len(p.Roots))
	for i, r := range p.Roots {
		sb, err := c.rootSandbox(r.Sandbox)
		if err != nil {
			return nil, err
		}
		path, err := paramPath(r.Path)
		if err != nil {
			// A path this host cannot use (file://host/…) is that root's error, as the
			// reference words it.
			re, ok := err.(*rpcError)
			if !ok || re.Code != codeInvalidRequest {
				return nil, err
			}
			msg := fmt.Sprintf(discoveryRootErrorFmt, r.Path, re.Message)
			jobs[i].answer = marshalNoEscape(&rootDiscovery{ID: r.ID, Path: r.Path, Skills: []discoveredSkill{},
				NamespaceManifests: []capabilityTextFile{}, Warnings: []string{}, Error: &msg})
			continue
		}
		jobs[i] = rootJob{op: discoverRootOp{ID: r.ID, Path: path}, profile: c.fsConfinement(sb, false)}
	}
	later(c, async, func(ctx context.Context) (rawJSON, error) {
		bodies, err := c.runRootJobs(ctx, jobs, false)
		if err != nil {
			return nil, err
		}
		out := append(make([]byte, 0, 64), `{"roots":[`...)
		for i, b := range bodies {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, b...)
		}
		return append(out, "]}"...), nil
	})
	return nil, nil
}

// errTooLargeDiscovery is the failure of a request whose answer would pass
// maxDiscoveryAnswerBytes.
func errTooLargeDiscovery() error {
	return errInternal("capability discovery answer exceeds %d bytes", maxDiscoveryAnswerBytes)
}

// rootSandbox parses the sandbox object of one root, as an fs method's is parsed.
func (c *call) rootSandbox(raw json.RawMessage) (sandboxParam, error) {
	var sb sandboxParam
	if len(raw) == 0 {
		return sb, nil
	}
	req, err := c.sandboxes.parse(raw)
	if err != nil {
		return sb, err
	}
	if req != nil && req.dynamic && req.cwd == "" {
		return sb, errInvalidParams("file system sandbox context with dynamic permissions requires cwd")
	}
	sb.req = req
	return sb, nil
}

// rootJob is one root to discover, and the profile confining it (nil: here, unconfined), or
// its answer when it is known without looking.
type rootJob struct {
	op      discoverRootOp
	profile *sandboxProfile
	answer  []byte
}

// discoveryAnswerOverhead bounds the JSON around a discovery answer's roots, for the
// transport's message limit.
const discoveryAnswerOverhead = 4 << 10

// answerBudget is the bytes of one discovery answer while its roots are built: those
// answered, and a share of the bound reserved for each root being built (reserve), so that
// the roots built at once hold at most about the bound between them. A root waits for room
// while others are built; with none in flight it goes ahead. Whether the answer fits is
// decided on the answered bytes alone.
type answerBudget struct {
	mu       sync.Mutex
	room     *sync.Cond
	answered int64 // the roots' answers so far
	reserved int64 // the shares of the roots being built
	limit    int64
	inFlight int
}

func newAnswerBudget(limit, answered int64) *answerBudget {
	b := &answerBudget{limit: limit, answered: answered}
	b.room = sync.NewCond(&b.mu)
	return b
}

// reserve holds n bytes for a root about to be built; false once the answers so far pass the
// limit (the answer cannot fit any more).
func (b *answerBudget) reserve(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.answered+b.reserved+n > b.limit && b.inFlight > 0 && b.answered <= b.limit {
		b.room.Wait()
	}
	if b.answered > b.limit {
		return false
	}
	b.reserved += n
	b.inFlight++
	return true
}

// settle replaces a root's reservation with its answer, and reports whether the answers so
// far still fit.
func (b *answerBudget) settle(reserved, answered int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reserved -= reserved
	b.answered += answered
	b.inFlight--
	b.room.Broadcast()
	return b.answered <= b.limit
}

// runRootJobs discovers every root of jobs, at most maxDiscoveryConcurrentRoot at once, and
// returns their answers in order. It fails only when a sandbox worker cannot be used or the
// request is cancelled.
//
// With trim, a root whose answer no longer fits is left out (nil) rather than failing the
// request (discoverV2 answers what fits, with a warning).
func (c *call) runRootJobs(ctx context.Context, jobs []rootJob, trim bool) ([][]byte, error) {
	bodies := make([][]byte, len(jobs))
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, maxDiscoveryConcurrentRoot)
	var wg sync.WaitGroup
	limit := int64(maxDiscoveryAnswerBytes)
	if c.messageLimit > 0 {
		limit = min(limit, int64(c.messageLimit-discoveryAnswerOverhead))
	}
	var ready int64 // the answers made without a walk (a root this host cannot use)
	for _, j := range jobs {
		ready += int64(len(j.answer) + 1)
	}
	budget := newAnswerBudget(limit, ready)
	// A root being built holds its bound (its files, escaped, and room for its paths and
	// warnings): the answer's bound then holds the roots built at once, three of them at
	// most, so that one request holds a few answers' worth of memory, never eight roots'
	// worth beside the answer (docs/protocol.md §9.5).
	share := int64(maxDiscoveryRootBytes + 4<<20)
	for i, j := range jobs {
		if j.answer != nil {
			bodies[i] = j.answer
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			// A root's answer is reserved at its bound before it is built, so that the roots
			// built together cannot pass the whole answer's bound between them; the
			// reservation becomes the answer's size once it is known.
			if !budget.reserve(share) {
				if !trim {
					errs[i] = errTooLargeDiscovery()
				}
				return
			}
			var err error
			if j.profile == nil {
				bodies[i], err = j.op.run(ctx, fsWritesDirect())
			} else {
				var res result // the worker's answer, framed
				if res, _, err = c.srv.fsWorkers.call(ctx, c.srv.sandbox, j.profile, discoveryRootsMethod, j.op); err == nil {
					bodies[i], err = res.body()
				}
			}
			if !budget.settle(share, int64(len(bodies[i])+1)) {
				if trim {
					bodies[i] = nil
				} else {
					err = errTooLargeDiscovery()
				}
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fsError(err)
		}
	}
	return bodies, nil
}

// discoverRootOp discovers one root: here, or in the sandbox worker of the root's sandbox.
// Its answer is the root's rootDiscovery; only a cancelled request fails it.
type discoverRootOp struct {
	ID   string `json:"id"`
	Path string `json:"path"`
	// Optional: a root that is missing, not a directory or not permitted is an empty
	// answer, not an error (discoverV2's locations).
	Optional bool `json:"optional,omitempty"`
}

func (o discoverRootOp) runEncoded(ctx context.Context, how fsWrites) (result, error) {
	return encoded(o.run(ctx, how))
}

func (o discoverRootOp) run(ctx context.Context, _ fsWrites) (rawJSON, error) {
	d := discoverRoot(ctx, o.ID, o.Path, o.Optional)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return marshalNoEscape(d), nil
}

// marshalNoEscape encodes v as serde does: '<', '>' and '&' are left as they are, so that a
// file's text reads back as sent.
func marshalNoEscape(v any) []byte {
	var b bytes.Buffer // its bytes are the answer: no copy out of a builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Every value here is strings, slices and pointers to them: it always encodes.
		panic(fmt.Sprintf("discovery: encode the answer: %v", err))
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
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
func discoverRoot(ctx context.Context, id, root string, optional bool) *rootDiscovery {
	rootURI := fileURI(root)
	d := &rootDiscovery{
		ID: id, Path: rootURI,
		Skills: []discoveredSkill{}, NamespaceManifests: []capabilityTextFile{}, Warnings: []string{},
	}
	fail := func(msg string) *rootDiscovery { d.Error = &msg; return d }
	fi, err := os.Stat(root)
	if optional && (err == nil && !fi.IsDir() || errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission)) {
		return d
	}
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
	// sort.Slice rather than slices.SortFunc here and below: these sorts are rare and short,
	// and the one reflective copy of sort serves them all, where each element type of slices'
	// would be another copy of the sorting code in the binary.
	sort.Slice(skills, func(i, j int) bool { return fileURI(skills[i]) < fileURI(skills[j]) })
	sort.SliceStable(manifests, func(i, j int) bool {
		a, b := manifests[i], manifests[j]
		if c := strings.Compare(fileURI(pluginRootOf(a)), fileURI(pluginRootOf(b))); c != 0 {
			return c < 0
		}
		return manifestPriority(a) < manifestPriority(b)
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
	// Counted as the answer will hold it: a control byte is six there (\u0001), so a root
	// of 16 MiB of them would otherwise answer 96 MiB.
	n := jsonStringLen(data)
	if budget.bytes+n > maxDiscoveryRootBytes {
		budget.warn("capability root bundle exceeds the %d-byte limit", maxDiscoveryRootBytes)
		return nil
	}
	budget.bytes += n
	return &capabilityTextFile{Path: uri, Contents: string(data)}
}

// jsonStringLen is the length of data as the contents of a JSON string, without HTML escaping
// (marshalNoEscape).
func jsonStringLen(data []byte) int {
	n := len(data)
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n++
		case c < 0x20:
			n += 5
		case c == 0xe2 && i+2 < len(data) && data[i+1] == 0x80 && (data[i+2] == 0xa8 || data[i+2] == 0xa9):
			n += 3 // U+2028, U+2029: \u2028
		}
	}
	return n
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

// capabilities/discoverV2 (docs/protocol.md §9.4): the server user's own skills. Each location
// is discovered as a discoverV1 root is (discoverRootOp, under the request's sandbox), then
// each SKILL.md's front matter and agents/openai.yaml are read here into the skill's fields.

// discoverV2 limits and texts: the reference's.
const (
	maxSkillNameChars        = 64
	maxDiscoverV2Skills      = 2_048
	maxDiscoverV2Bytes       = 4 << 20
	discoverV2MetadataWarn   = "some capability metadata could not be loaded; discovery may be incomplete"
	discoverV2SizeLimitWarn  = "capability discovery size limit reached"
	maxPluginCacheEntries    = 10_000 // directories looked at in $CODEX_HOME/plugins/cache
	maxQualifiedSkillChars   = 64*2 + 1
	pluginCacheLimitWarn     = "plugin cache traversal limit reached"
	codexHomeSkillsRootID    = "codex-home-skills"
	userAgentSkillsRootID    = "user-agent-skills"
	defaultSkillNameFallback = "skill"
)

type discoverV2Params struct {
	Cwd     string       `json:"cwd" uri:"path"`
	Sandbox sandboxParam `json:"sandbox,omitempty"`
}

func (p *discoverV2Params) sandboxParam() *sandboxParam { return &p.Sandbox }

type discoveryRootRef struct {
	ID   string `json:"id"`
	Path string `json:"path"`
}

// executorSkill is one skill of discoverV2, in the reference's member order.
type executorSkill struct {
	Name             string           `json:"name"`
	Description      string           `json:"description"`
	ShortDescription *string          `json:"shortDescription"`
	Path             string           `json:"path"`
	DiscoveryRoot    discoveryRootRef `json:"discoveryRoot"`
	Dependencies     *skillDeps       `json:"dependencies"`
	Policy           *skillPolicy     `json:"policy"`
}

type skillDeps struct {
	Tools []skillTool `json:"tools"`
}

type skillTool struct {
	Type              string  `json:"type"`
	Value             string  `json:"value"`
	Description       *string `json:"description"`
	Transport         *string `json:"transport"`
	Command           *string `json:"command"`
	URL               *string `json:"url"`
	OAuthCallbackPort *uint16 `json:"oauthCallbackPort"`
}

type skillPolicy struct {
	AllowImplicitInvocation *bool    `json:"allowImplicitInvocation"`
	Products                []string `json:"products"`
}

type discoverV2Result struct {
	Plugins  []executorPlugin `json:"plugins"`
	Skills   []executorSkill  `json:"skills"`
	Warnings []string         `json:"warnings"`
}

// executorPlugin is one installed plugin of discoverV2: $CODEX_HOME/plugins/cache/
// <marketplace>/<plugin>/<version>, the last version by name.
type executorPlugin struct {
	ID             string           `json:"id"` // <plugin>@<marketplace>
	DisplayName    string           `json:"displayName"`
	RemotePluginID *string          `json:"remotePluginId"`
	Version        string           `json:"version"`
	Root           string           `json:"root"`
	Files          discoveredPlugin `json:"files"`
	Skills         []pluginSkill    `json:"skills"`
}

// pluginSkill is a skill of a plugin: an executorSkill without a discovery root, its name
// qualified by the plugin's namespace.
type pluginSkill struct {
	Name             string       `json:"name"`
	Description      string       `json:"description"`
	ShortDescription *string      `json:"shortDescription"`
	Path             string       `json:"path"`
	Dependencies     *skillDeps   `json:"dependencies"`
	Policy           *skillPolicy `json:"policy"`
}

// installedPlugin is a plugin root found in the cache.
type installedPlugin struct {
	id, version, root string
}

// skillLocations are where discoverV2 looks, in order: $CODEX_HOME/skills (CODEX_HOME
// defaulting to ~/.codex) and ~/.agents/skills.
func skillLocations() ([]discoveryRootRef, string) {
	home := userHome()
	codexHome := os.Getenv("CODEX_HOME")
	if codexHome == "" {
		codexHome = filepath.Join(home, ".codex")
	}
	if abs, err := filepath.Abs(codexHome); err == nil {
		codexHome = abs
	}
	return []discoveryRootRef{
		{codexHomeSkillsRootID, filepath.Join(codexHome, "skills")},
		{userAgentSkillsRootID, filepath.Join(home, ".agents", "skills")},
	}, codexHome
}

func (c *call) discoverV2(p *discoverV2Params) (rawJSON, error) {
	// cwd is decoded (its syntax checked) but not used: the locations are the user's.
	if p.Sandbox.req != nil {
		// Here the sandbox context's cwd is required, as in the reference's type for it.
		var members map[string]json.RawMessage
		if json.Unmarshal(p.Sandbox.raw, &members) == nil {
			if _, ok := members["cwd"]; !ok {
				return nil, errInvalidParams("missing field `cwd`")
			}
		}
	}
	locs, codexHome := skillLocations()
	profile := c.fsConfinement(p.Sandbox, false)
	later(c, async, func(ctx context.Context) (rawJSON, error) {
		res := discoverV2Result{Plugins: []executorPlugin{}, Skills: []executorSkill{}, Warnings: []string{}}
		plugins, truncated, err := c.installedPlugins(ctx, profile, filepath.Join(codexHome, "plugins", "cache"))
		if err != nil {
			return nil, err
		}
		if truncated {
			res.Warnings = append(res.Warnings, pluginCacheLimitWarn)
		}
		jobs := make([]rootJob, 0, len(locs)+len(plugins))
		for _, l := range locs {
			jobs = append(jobs, rootJob{op: discoverRootOp{Path: l.Path, Optional: true}, profile: profile})
		}
		for _, pl := range plugins {
			jobs = append(jobs, rootJob{op: discoverRootOp{ID: pl.id, Path: pl.root}, profile: profile})
		}
		bodies, err := c.runRootJobs(ctx, jobs, true)
		if err != nil {
			return nil, err
		}
		count, size, full := 0, 0, false
		admit := func(n int, v any) bool {
			b := len(marshalNoEscape(v))
			if count+n > maxDiscoverV2Skills || size+b > maxDiscoverV2Bytes {
				full = true
				return false
			}
			count, size = count+n, size+b
			return true
		}
		for i, b := range bodies {
			if b == nil {
				full = true // left out: the answer's bound was reached
				continue
			}
			var d rootDiscovery
			if err := json.Unmarshal(b, &d); err != nil {
				return nil, errInternal("capability discovery: decode a root: %v", err)
			}
			if i < len(locs) {
				ref := discoveryRootRef{locs[i].ID, fileURI(locs[i].Path)}
				skills, bad := executorSkills(&d, ref)
				if bad {
					res.Warnings = append(res.Warnings, discoverV2MetadataWarn)
				}
				for _, sk := range skills {
					if admit(1, sk) {
						res.Skills = append(res.Skills, sk)
					}
				}
				continue
			}
			pl, bad := pluginOf(&d, plugins[i-len(locs)])
			if bad {
				res.Warnings = append(res.Warnings, discoverV2MetadataWarn)
			}
			if pl != nil && admit(1+len(pl.Skills), pl) {
				res.Plugins = append(res.Plugins, *pl)
			}
		}
		sort.SliceStable(res.Plugins, func(i, j int) bool {
			a, b := &res.Plugins[i], &res.Plugins[j]
			if a.ID != b.ID {
				return a.ID < b.ID
			}
			return a.Root < b.Root
		})
		if full {
			res.Warnings = append([]string{discoverV2SizeLimitWarn}, res.Warnings...)
		}
		return marshalNoEscape(res), nil
	})
	return nil, nil
}

// installedPlugins lists the plugins of the cache, <marketplace>/<plugin>/<version>, the
// last version by name of each, in the request's sandbox (a directory it hides is empty).
// truncated: maxPluginCacheEntries directories were looked at.
func (c *call) installedPlugins(ctx context.Context, profile *sandboxProfile, cache string) ([]installedPlugin, bool, error) {
	seen := 0
	list := func(dir string) ([]string, error) {
		op := readDirectoryOp{Path: dir}
		var r readDirectoryResult
		var err error
		if profile == nil {
			r, err = op.run(ctx, fsWritesDirect())
		} else {
			r, err = workerListing(ctx, c, profile, op)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// Missing, not a directory, hidden by the sandbox, or a worker that could not
			// start (nothing is then read unconfined): no plugins there.
			return nil, nil
		}
		var dirs []string
		for _, e := range r.Entries {
			if e.IsDirectory {
				dirs = append(dirs, e.FileName)
			}
		}
		slices.Sort(dirs)
		seen += len(dirs)
		return dirs, nil
	}
	var out []installedPlugin
	markets, err := list(cache)
	if err != nil {
		return nil, false, err
	}
	for _, m := range markets {
		plugins, err := list(filepath.Join(cache, m))
		if err != nil {
			return nil, false, err
		}
		for _, pl := range plugins {
			if seen > maxPluginCacheEntries {
				return out, true, nil
			}
			versions, err := list(filepath.Join(cache, m, pl))
			if err != nil {
				return nil, false, err
			}
			if len(versions) == 0 {
				continue
			}
			v := versions[len(versions)-1]
			out = append(out, installedPlugin{id: pl + "@" + m, version: v, root: filepath.Join(cache, m, pl, v)})
		}
	}
	return out, seen > maxPluginCacheEntries, nil
}

// pluginOf is an installed plugin's answer from its root's discovery, or nil (and bad) when
// the root has no readable manifest. Its skills are named <namespace>:<name>, the namespace
// being the name in the nearest plugin manifest above the skill (or that plugin root's
// directory name).
func pluginOf(d *rootDiscovery, inst installedPlugin) (*executorPlugin, bool) {
	bad := d.Error != nil || len(d.Warnings) > 0
	if d.Plugin == nil {
		return nil, true
	}
	namespaces := map[string]string{}
	for _, m := range d.NamespaceManifests {
		mp, err := parsePath(m.Path)
		if err != nil {
			continue
		}
		root := pluginRootOf(mp)
		var fields struct {
			Name json.RawMessage `json:"name"`
		}
		if json.Unmarshal([]byte(m.Contents), &fields) != nil {
			continue
		}
		var name string
		if len(fields.Name) > 0 && string(fields.Name) != "null" && json.Unmarshal(fields.Name, &name) != nil {
			continue
		}
		if strings.TrimSpace(name) == "" {
			name = filepath.Base(root)
		}
		if _, ok := namespaces[root]; !ok {
			namespaces[root] = name
		}
	}
	pl := &executorPlugin{
		ID: inst.id, Version: inst.version, Root: fileURI(inst.root), Files: *d.Plugin, Skills: []pluginSkill{},
		DisplayName: pluginDisplayName(d.Plugin.Manifest.Contents, filepath.Base(inst.root)),
	}
	for _, s := range d.Skills {
		p, err := parsePath(s.Instructions.Path)
		if err != nil {
			bad = true
			continue
		}
		fm, ok := parseSkillFrontMatter(s.Instructions.Contents, filepath.Base(filepath.Dir(p)))
		if !ok {
			bad = true
			continue
		}
		name := fm.name
		for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
			if ns, ok := namespaces[dir]; ok {
				if len([]rune(ns))+1+len([]rune(name)) > maxQualifiedSkillChars {
					bad, name = true, ""
				} else {
					name = ns + ":" + name
				}
				break
			}
			if dir == "/" || dir == "." {
				break
			}
		}
		if name == "" {
			continue
		}
		sk := pluginSkill{Name: name, Description: fm.description, ShortDescription: fm.short, Path: s.Instructions.Path}
		if s.Metadata != nil {
			sk.Dependencies, sk.Policy = parseSkillMetadata(s.Metadata.Contents)
		}
		pl.Skills = append(pl.Skills, sk)
	}
	return pl, bad
}

// pluginDisplayName is the manifest's interface.displayName, else its name, else fallback.
func pluginDisplayName(manifest, fallback string) string {
	var m struct {
		Name      any `json:"name"`
		Interface struct {
			DisplayName any `json:"displayName"`
		} `json:"interface"`
	}
	json.Unmarshal([]byte(manifest), &m)
	for _, v := range []any{m.Interface.DisplayName, m.Name} {
		if s, ok := v.(string); ok && strings.TrimSpace(s) != "" {
			return s
		}
	}
	return fallback
}

// executorSkills turns one root's discovery into skills; bad reports that something could
// not be loaded (a root error, a warning, a skill whose front matter is invalid).
func executorSkills(d *rootDiscovery, ref discoveryRootRef) (skills []executorSkill, bad bool) {
	bad = d.Error != nil || len(d.Warnings) > 0
	for _, s := range d.Skills {
		p, err := parsePath(s.Instructions.Path)
		if err != nil {
			bad = true
			continue
		}
		fm, ok := parseSkillFrontMatter(s.Instructions.Contents, filepath.Base(filepath.Dir(p)))
		if !ok {
			bad = true
			continue
		}
		sk := executorSkill{
			Name: fm.name, Description: fm.description, ShortDescription: fm.short,
			Path: s.Instructions.Path, DiscoveryRoot: ref,
		}
		if s.Metadata != nil {
			sk.Dependencies, sk.Policy = parseSkillMetadata(s.Metadata.Contents)
		}
		skills = append(skills, sk)
	}
	return skills, bad
}

type skillFrontMatter struct {
	name, description string
	short             *string
}

// parseSkillFrontMatter reads a SKILL.md's front matter as the reference's skill loader does:
// name (default: the skill's directory name), description (required) and
// metadata.short-description, each folded to one line; a name of more than
// maxSkillNameChars characters is invalid.
func parseSkillFrontMatter(contents, dirName string) (skillFrontMatter, bool) {
	lines := strings.Split(strings.ReplaceAll(contents, "\r\n", "\n"), "\n")
	if len(lines) == 0 || strings.TrimSpace(lines[0]) != "---" {
		return skillFrontMatter{}, false
	}
	end := slices.IndexFunc(lines[1:], func(l string) bool { return strings.TrimSpace(l) == "---" })
	if end <= 0 {
		return skillFrontMatter{}, false // no closing line, or nothing between
	}
	doc, ok := parseYAMLSubset(lines[1 : 1+end])
	if !ok || doc.kind != yamlMap && !doc.null {
		return skillFrontMatter{}, false
	}
	name, ok1 := doc.get("name").text()
	desc, ok2 := doc.get("description").text()
	meta := doc.get("metadata")
	if !ok1 || !ok2 || meta != nil && !meta.null && meta.kind != yamlMap {
		return skillFrontMatter{}, false
	}
	short, ok3 := meta.get("short-description").text()
	if !ok3 {
		return skillFrontMatter{}, false
	}
	fm := skillFrontMatter{name: oneLine(name), description: oneLine(desc)}
	if fm.name == "" {
		if fm.name = oneLine(dirName); fm.name == "" {
			fm.name = defaultSkillNameFallback
		}
	}
	if s := oneLine(short); s != "" {
		fm.short = &s
	}
	if len([]rune(fm.name)) > maxSkillNameChars || fm.description == "" {
		return skillFrontMatter{}, false
	}
	return fm, true
}

// oneLine folds every run of white space to one space, and trims the ends.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// parseSkillMetadata reads dependencies and policy from a skill's agents/openai.yaml. A file
// that does not parse, or whose fields have the wrong types, gives neither, as the reference's
// does; a dependencies without tools is none.
func parseSkillMetadata(contents string) (*skillDeps, *skillPolicy) {
	doc, ok := parseYAMLSubset(strings.Split(strings.ReplaceAll(contents, "\r\n", "\n"), "\n"))
	if !ok || doc.kind != yamlMap {
		return nil, nil
	}
	var deps *skillDeps
	if d := doc.get("dependencies"); d != nil && !d.null {
		if d.kind != yamlMap {
			return nil, nil
		}
		if tools := d.get("tools"); tools != nil && !tools.null {
			if tools.kind != yamlSeq {
				return nil, nil
			}
			var out []skillTool
			for _, t := range tools.items {
				if t.kind != yamlMap {
					return nil, nil
				}
				typ, ok1 := t.get("type").text()
				val, ok2 := t.get("value").text()
				if !ok1 || !ok2 || t.get("type") == nil || t.get("value") == nil {
					return nil, nil
				}
				tool := skillTool{Type: typ, Value: val}
				for _, f := range []struct {
					key string
					dst **string
				}{{"description", &tool.Description}, {"transport", &tool.Transport}, {"command", &tool.Command}, {"url", &tool.URL}} {
					v := t.get(f.key)
					s, ok := v.text()
					if !ok {
						return nil, nil
					}
					if v != nil && !v.null {
						*f.dst = &s
					}
				}
				out = append(out, tool)
			}
			if len(out) > 0 {
				deps = &skillDeps{Tools: out}
			}
		}
	}
	var policy *skillPolicy
	if p := doc.get("policy"); p != nil && !p.null {
		if p.kind != yamlMap {
			return nil, nil
		}
		policy = &skillPolicy{Products: []string{}}
		if a := p.get("allow_implicit_invocation"); a != nil && !a.null {
			if a.kind != yamlScalar || a.quoted || a.str != "true" && a.str != "false" {
				return nil, nil
			}
			b := a.str == "true"
			policy.AllowImplicitInvocation = &b
		}
		if pr := p.get("products"); pr != nil && !pr.null {
			if pr.kind != yamlSeq {
				return nil, nil
			}
			for _, it := range pr.items {
				s, ok := it.text()
				if !ok || it.null {
					return nil, nil
				}
				policy.Products = append(policy.Products, s)
			}
		}
	}
	return deps, policy
}

// The YAML that skills' front matter and agents/openai.yaml use, and no more: block mappings
// and sequences by indentation, plain, quoted and block (| >) scalars, flow sequences of
// scalars, and {} and [] as empty. Anything else (anchors, tags, flow mappings, multi-line
// quoted scalars) does not parse, and the caller treats the file as the reference treats an
// invalid one. A value that looks like flow but is not ("[unclosed") is a plain scalar, as
// the reference's repair of such lines makes it.

type yamlKind int

const (
	yamlScalar yamlKind = iota
	yamlMap
	yamlSeq
)

type yamlNode struct {
	kind   yamlKind
	str    string // a scalar's text
	null   bool   // a scalar that is null: empty, ~ or null
	quoted bool
	keys   []string
	vals   map[string]*yamlNode
	items  []*yamlNode
}

// get is the value of key in a mapping, or nil (also for a nil or null node).
func (n *yamlNode) get(key string) *yamlNode {
	if n == nil || n.kind != yamlMap {
		return nil
	}
	return n.vals[key]
}

// text is a scalar's text as a string field reads it: "" for an absent or null value; false
// for a mapping or a sequence.
func (n *yamlNode) text() (string, bool) {
	switch {
	case n == nil || n.null:
		return "", true
	case n.kind != yamlScalar:
		return "", false
	}
	return n.str, true
}

// yamlLine is a line with its indentation measured; comment-only and blank lines are not kept.
type yamlParser struct {
	lines []string
	i     int
}

func parseYAMLSubset(lines []string) (*yamlNode, bool) {
	p := &yamlParser{lines: lines}
	p.skipBlank()
	if p.i >= len(p.lines) {
		return &yamlNode{null: true}, true
	}
	n, ok := p.block(indentOf(p.lines[p.i]))
	if !ok {
		return nil, false
	}
	p.skipBlank()
	return n, p.i >= len(p.lines)
}

func indentOf(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }

func isBlankYAML(l string) bool {
	t := strings.TrimSpace(l)
	return t == "" || strings.HasPrefix(t, "#")
}

func (p *yamlParser) skipBlank() {
	for p.i < len(p.lines) && isBlankYAML(p.lines[p.i]) {
		p.i++
	}
}

// block parses the mapping or sequence whose lines start at column indent.
func (p *yamlParser) block(indent int) (*yamlNode, bool) {
	p.skipBlank()
	if p.i >= len(p.lines) || strings.Contains(p.lines[p.i][:indentOf(p.lines[p.i])], "\t") {
		return nil, false
	}
	content := strings.TrimSpace(p.lines[p.i])
	if content == "-" || strings.HasPrefix(content, "- ") {
		return p.sequence(indent)
	}
	return p.mapping(indent)
}

func (p *yamlParser) sequence(indent int) (*yamlNode, bool) {
	n := &yamlNode{kind: yamlSeq}
	for p.skipBlank(); p.i < len(p.lines); p.skipBlank() {
		l := p.lines[p.i]
		if indentOf(l) < indent {
			break
		}
		content := strings.TrimSpace(l)
		if indentOf(l) > indent || content != "-" && !strings.HasPrefix(content, "- ") {
			return nil, false
		}
		rest := strings.TrimSpace(strings.TrimPrefix(content, "-"))
		var item *yamlNode
		var ok bool
		switch {
		case rest == "":
			p.i++
			p.skipBlank()
			if p.i < len(p.lines) && indentOf(p.lines[p.i]) > indent {
				item, ok = p.block(indentOf(p.lines[p.i]))
			} else {
				item, ok = &yamlNode{null: true}, true
			}
		case yamlKeyOf(rest) != "":
			// "- key: value": a mapping whose keys sit where "key" does.
			col := indent + (len(content) - len(rest))
			p.lines[p.i] = strings.Repeat(" ", col) + rest
			item, ok = p.mapping(col)
		default:
			item, ok = p.scalar(rest, indent)
		}
		if !ok {
			return nil, false
		}
		n.items = append(n.items, item)
	}
	return n, true
}

// yamlKeyOf is the key of a "key: value" or "key:" line content, or "".
func yamlKeyOf(content string) string {
	if strings.HasPrefix(content, "'") || strings.HasPrefix(content, `"`) || strings.HasPrefix(content, "[") || strings.HasPrefix(content, "{") {
		return ""
	}
	if k, _, ok := strings.Cut(content, ": "); ok {
		return strings.TrimSpace(k)
	}
	if k, ok := strings.CutSuffix(content, ":"); ok {
		return strings.TrimSpace(k)
	}
	return ""
}

func (p *yamlParser) mapping(indent int) (*yamlNode, bool) {
	n := &yamlNode{kind: yamlMap, vals: map[string]*yamlNode{}}
	for p.skipBlank(); p.i < len(p.lines); p.skipBlank() {
		l := p.lines[p.i]
		if indentOf(l) < indent {
			break
		}
		content := strings.TrimSpace(l)
		key := yamlKeyOf(content)
		if indentOf(l) > indent || key == "" {
			return nil, false
		}
		if _, dup := n.vals[key]; dup {
			return nil, false // serde_yaml refuses a duplicate key
		}
		rest := strings.TrimSpace(strings.TrimPrefix(content[len(key):], ":"))
		var v *yamlNode
		var ok bool
		if rest == "" || strings.HasPrefix(rest, "#") {
			p.i++
			p.skipBlank()
			next := -1
			if p.i < len(p.lines) {
				next = indentOf(p.lines[p.i])
			}
			switch {
			case next > indent:
				v, ok = p.block(next)
			case next == indent && strings.HasPrefix(strings.TrimSpace(p.lines[p.i]), "-"):
				v, ok = p.sequence(indent) // a sequence may sit at its key's column
			default:
				v, ok = &yamlNode{null: true}, true
			}
		} else {
			v, ok = p.scalar(rest, indent)
		}
		if !ok {
			return nil, false
		}
		n.keys = append(n.keys, key)
		n.vals[key] = v
	}
	return n, true
}

// scalar parses the value text of the current line (and, for block and multi-line plain
// scalars, the more indented lines after it); parent is the indentation of its key.
func (p *yamlParser) scalar(text string, parent int) (*yamlNode, bool) {
	p.i++
	switch text[0] {
	case '|', '>':
		var parts []string
		for ; p.i < len(p.lines); p.i++ {
			l := p.lines[p.i]
			if strings.TrimSpace(l) != "" && indentOf(l) <= parent {
				break
			}
			parts = append(parts, strings.TrimSpace(l))
		}
		// Only the folded form matters to its readers (oneLine), so both styles keep lines.
		return &yamlNode{str: strings.Join(parts, "\n")}, true
	case '\'', '"':
		s, ok := unquoteYAML(stripYAMLComment(text, true))
		return &yamlNode{str: s, quoted: true}, ok
	case '[':
		if items, ok := flowSeqYAML(stripYAMLComment(text, false)); ok {
			return &yamlNode{kind: yamlSeq, items: items}, true
		}
	case '{':
		if strings.TrimSpace(stripYAMLComment(text, false)) == "{}" {
			return &yamlNode{kind: yamlMap, vals: map[string]*yamlNode{}}, true
		}
		if strings.HasSuffix(strings.TrimSpace(stripYAMLComment(text, false)), "}") {
			return nil, false // a flow mapping: not in this subset
		}
	case '&', '*', '!':
		return nil, false
	}
	s := stripYAMLComment(text, false)
	// A plain scalar goes on over more indented lines.
	for p.i < len(p.lines) && !isBlankYAML(p.lines[p.i]) && indentOf(p.lines[p.i]) > parent {
		s += " " + stripYAMLComment(strings.TrimSpace(p.lines[p.i]), false)
		p.i++
	}
	s = strings.TrimSpace(s)
	if s == "" || s == "~" || s == "null" || s == "Null" || s == "NULL" {
		return &yamlNode{null: true}, true
	}
	return &yamlNode{str: s}, true
}

// stripYAMLComment drops a " #" comment; in a quoted scalar, only after the closing quote.
func stripYAMLComment(s string, quoted bool) string {
	start := 0
	if quoted && len(s) > 1 {
		if end := strings.LastIndexByte(s, s[0]); end > 0 {
			start = end
		}
	}
	if strings.HasPrefix(s, "#") {
		return ""
	}
	if i := strings.Index(s[start:], " #"); i >= 0 {
		return strings.TrimSpace(s[:start+i])
	}
	return strings.TrimSpace(s)
}

// unquoteYAML reads a whole single- or double-quoted scalar.
func unquoteYAML(s string) (string, bool) {
	if len(s) < 2 || s[len(s)-1] != s[0] {
		return "", false
	}
	body := s[1 : len(s)-1]
	if s[0] == '\'' {
		if strings.Count(strings.ReplaceAll(body, "''", ""), "'") > 0 {
			return "", false
		}
		return strings.ReplaceAll(body, "''", "'"), true
	}
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c == '"' {
			return "", false
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i++; i >= len(body) {
			return "", false
		}
		switch body[i] {
		case '"', '\\', '/':
			b.WriteByte(body[i])
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case ' ':
			b.WriteByte(' ')
		default:
			return "", false
		}
	}
	return b.String(), true
}

// flowSeqYAML reads "[a, 'b', "c"]"; false for anything else (it is then a plain scalar).
func flowSeqYAML(s string) ([]*yamlNode, bool) {
	if !strings.HasSuffix(s, "]") {
		return nil, false
	}
	body := strings.TrimSpace(s[1 : len(s)-1])
	items := []*yamlNode{}
	if body == "" {
		return items, true
	}
	for _, part := range strings.Split(body, ",") {
		part = strings.TrimSpace(part)
		switch {
		case part == "" || strings.ContainsAny(part, "[]{}"):
			return nil, false
		case part[0] == '\'' || part[0] == '"':
			v, ok := unquoteYAML(part)
			if !ok {
				return nil, false
			}
			items = append(items, &yamlNode{str: v, quoted: true})
		default:
			items = append(items, &yamlNode{str: part})
		}
	}
	return items, true
}

// workerListing lists a directory in the sandbox worker of profile, decoding its answer.
func workerListing(ctx context.Context, c *call, profile *sandboxProfile, op readDirectoryOp) (readDirectoryResult, error) {
	var r readDirectoryResult
	res, _, err := c.srv.fsWorkers.call(ctx, c.srv.sandbox, profile, "fs/readDirectory", op)
	if err != nil {
		return r, err
	}
	body, err := res.body()
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return r, errInternal("capability discovery: decode a listing: %v", err)
	}
	return r, nil
}
