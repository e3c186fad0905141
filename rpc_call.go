package main

// The call context: what a handler may use of its connection and server, and nothing more
// (docs/protocol.md §5.2). The dispatcher owns the connection; handlers see a *call.

import (
	"context"
	"sync"
)

// call is a handler's view of its connection. One is made per connection and shared by its
// handlers, which only read it: making one per request would cost an allocation each.
type call struct {
	ctx       context.Context // cancelled when the connection ends
	log       *logger
	srv       *serverDeps
	scope     *connScope    // file handles, watches, HTTP streams (typed, closed with the connection)
	sandboxes *sandboxCache // parsed sandbox objects (sandbox_param.go)
	// fileLimit is the largest file fs/readFile returns whole on this connection: the
	// transport's message limit bounds it (readFileLimit).
	fileLimit int64
	// messageLimit is the largest message the transport sends (0: none): a discovery answer
	// stays below it.
	messageLimit int
	notify       func(b []byte)                         // conn.notify: a notification to the client
	session      func() *session                        // the attached session, or nil
	attach       func(resume *string) (*session, error) // initialize's part of the lifecycle (rpc_lifecycle.go)
	// sched runs the work handlers register (later, laterInLane); a handler uses it only
	// on the reader, while it runs (rpc_schedule.go).
	sched *scheduler
}

// serverDeps is what handlers use of the server: its configuration and shared services.
type serverDeps struct {
	cfg       *serverConfig
	envInfo   *environmentInfo
	sandbox   *sandboxer
	fsWorkers *fsWorkerPool // runs the fs operations a sandbox confines (fs_worker.go)
	inotify   *sharedInotify
	listening *selfListeners // the server's websocket listeners (server_listeners.go)
	mask      *maskServer    // credential masking's registry and CA (proc_mask.go)
}

// newCall makes the call context of connection c.
func newCall(c *conn) *call {
	s := c.srv
	return &call{
		ctx:          c.ctx,
		log:          c.log,
		srv:          &serverDeps{cfg: &s.cfg, envInfo: s.envInfo, sandbox: s.sandbox, fsWorkers: s.fsWorkers, inotify: &s.inotify, listening: &s.listening, mask: s.mask},
		scope:        &c.scope,
		sandboxes:    &c.sandboxes,
		fileLimit:    readFileLimit(c.t),
		messageLimit: messageLimitOf(c.t),
		notify:       c.notify,
		session:      c.currentSession,
		attach:       c.attach,
		sched:        &c.sched,
	}
}

// laneDepth is how much work with lane key is queued or running on the connection: a
// request that must follow it joins the lane (laterInLane).
func (c *call) laneDepth(key string) int { return c.sched.laneDepth(key) }

// procs returns the process table of the session this connection is attached to (the exec
// gate guarantees one).
func (c *call) procs() *procTable {
	s := c.session()
	if s == nil {
		return nil
	}
	return s.procs
}

// cachedSandbox parses a sandbox object once per distinct object per connection.
func (c *call) cachedSandbox(raw []byte) (*sandboxRequest, error) { return c.sandboxes.parse(raw) }

// connScope is a connection's typed state, made on first use and closed with the connection.
type connScope struct {
	mu       sync.Mutex
	files    *fileHandles    // fs/open's handles (fs_handle.go)
	watches  *missingWatches // fs/watchMissing (fs_watch.go)
	http     *httpState      // http/request (http.go)
	cleanups []func()
}

// scoped returns the state in *field, making it with mk the first time; the cleanup mk
// returns runs when the connection ends.
func scoped[T any](s *connScope, field **T, mk func() (*T, func())) *T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if *field == nil {
		v, cleanup := mk()
		*field = v
		s.cleanups = append(s.cleanups, cleanup)
	}
	return *field
}

// close runs the cleanups, last made first.
func (s *connScope) close() {
	s.mu.Lock()
	cleanups := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
}
