package main

// The server's resource limits (docs/protocol.md §5.5, SECURITY.md §6): each a flag with a
// safe default, each refusal a clear JSON-RPC error or HTTP status.
//
//	flag                          default  scope        past it
//	--max-connections             2048     server       the upgrade is answered 503
//	--max-sessions                1024     server       initialize: -32600 "too many sessions …"
//	--max-processes-per-session   1024     session      process/start: -32600 "too many running processes …"
//	--max-open-handles            128      connection   fs/open: -32600 "at most N file handles …"
//	--max-watched-paths           4096     connection   fs/watchMissing: -32600 "at most N missing paths …"
//	--max-http-requests           64       connection   http/request: -32600 "too many http/request calls …"
//	--max-queued-bytes            16 MiB   connection   the producers and the reader wait; a client that
//	                                                    reads nothing for 30 s is disconnected

import "flag"

// serverLimits are the limits in force; a zero field means its default.
type serverLimits struct {
	sessions            int
	processesPerSession int
	openHandles         int
	watchedPaths        int
	httpRequests        int
	queuedBytes         int
}

// defaultLimits are the limits when no flag says otherwise.
var defaultLimits = serverLimits{
	sessions:            1024,
	processesPerSession: 1024,
	openHandles:         128,
	watchedPaths:        4096,
	httpRequests:        64,
	queuedBytes:         16 << 20,
}

// withDefaults fills the zero fields of l with their defaults.
func (l serverLimits) withDefaults() serverLimits {
	d := defaultLimits
	for _, f := range []struct{ v, def *int }{
		{&l.sessions, &d.sessions}, {&l.processesPerSession, &d.processesPerSession},
		{&l.openHandles, &d.openHandles}, {&l.watchedPaths, &d.watchedPaths},
		{&l.httpRequests, &d.httpRequests}, {&l.queuedBytes, &d.queuedBytes},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return l
}

// registerFlags adds the limit flags to fs, writing into l.
func (l *serverLimits) registerFlags(fs *flag.FlagSet) {
	fs.IntVar(&l.sessions, "max-sessions", defaultLimits.sessions, "sessions at once, attached or waiting to be resumed")
	fs.IntVar(&l.processesPerSession, "max-processes-per-session", defaultLimits.processesPerSession, "running processes per session")
	fs.IntVar(&l.openHandles, "max-open-handles", defaultLimits.openHandles, "fs/open handles per connection")
	fs.IntVar(&l.watchedPaths, "max-watched-paths", defaultLimits.watchedPaths, "fs/watchMissing paths per connection")
	fs.IntVar(&l.httpRequests, "max-http-requests", defaultLimits.httpRequests, "http/request calls under way per connection")
	fs.IntVar(&l.queuedBytes, "max-queued-bytes", defaultLimits.queuedBytes, "bytes of replies and notifications queued per connection")
}

func errTooMany(what string, limit int, flagName string) error {
	return errInvalidRequest("too many %s: at most %d (--%s)", what, limit, flagName)
}
