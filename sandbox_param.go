package main

// A request's sandbox object, as the fs methods and process/start carry it: kept as bytes
// while the params decode, then parsed once per distinct object per connection
// (docs/sandbox.md §1, docs/protocol.md §5.2). A client sends the same object with every
// call, and parsing one costs tens of microseconds, several times a whole fs/getMetadata.

import (
	"bytes"
	"sync"
)

// sandboxParam is the optional sandbox of the fs methods (docs/sandbox.md §1), parsed by
// the parser process/start uses (sandboxCache.check): a malformed object is the same -32602
// on every method. The fs methods add one rule of the reference's: a profile
// with entries anchored on cwd (current_working_directory, project_roots, a glob) needs the
// object's cwd, since the operation has no cwd of its own to fall back on.
type sandboxParam struct {
	raw []byte          // the object as it came (a copy), until the connection parses it
	req *sandboxRequest // nil: absent or null
}

func (s *sandboxParam) UnmarshalJSON(raw []byte) error { return s.decodeRawJSON(raw) }

// decodeRawJSON keeps the object for the connection to parse (sandboxCache.check): a client
// sends the same object with every call, and the connection parses each one once.
func (s *sandboxParam) decodeRawJSON(raw []byte) error {
	s.raw = bytes.Clone(raw)
	return nil
}

// sandboxCarrier is a params struct with a sandbox: handle parses it right after decoding.
type sandboxCarrier interface{ sandboxParam() *sandboxParam }

// maxSandboxCache bounds the sandbox objects a connection remembers parsed.
const maxSandboxCache = 8

// check parses an fs method's sandbox object through the cache, as the reference's decoder
// would (a malformed one is a -32602), and keeps the result in s.
func (sc *sandboxCache) check(s *sandboxParam) error {
	if s.raw == nil {
		return nil
	}
	req, err := sc.parse(s.raw)
	if err != nil {
		return err
	}
	if req != nil && req.dynamic && req.cwd == "" {
		return errInvalidParams("file system sandbox context with dynamic permissions requires cwd")
	}
	s.req = req
	return nil
}

// sandboxCache is a connection's parsed sandbox objects, by their bytes: at most
// maxSandboxCache, forgotten all at once past that.
type sandboxCache struct {
	mu     sync.Mutex
	parsed map[string]*sandboxRequest
}

// parse is parseSandbox(raw), remembered for the connection's next calls. A parsed request
// is never changed after, so calls share it.
func (sc *sandboxCache) parse(raw []byte) (*sandboxRequest, error) {
	sc.mu.Lock()
	req, ok := sc.parsed[string(raw)]
	sc.mu.Unlock()
	if ok {
		return req, nil
	}
	req, err := parseSandbox(raw)
	if err != nil {
		return nil, err
	}
	sc.mu.Lock()
	if len(sc.parsed) >= maxSandboxCache || sc.parsed == nil {
		sc.parsed = make(map[string]*sandboxRequest, maxSandboxCache)
	}
	sc.parsed[string(raw)] = req
	sc.mu.Unlock()
	return req, nil
}
