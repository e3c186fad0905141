package main

// The server: its configuration, its sessions and method table, and its shutdown. Every
// transport (websocket, stdio, a relay stream) hands its connections to serveConn (conn.go);
// main.go and cli.go build one from the command line (docs/protocol.md §5).

import (
	"context"
	"sync"
	"time"
)

// serverConfig is what the flags decide about serving.
type serverConfig struct {
	sessionTTL time.Duration // how long a detached session waits for a resume
	retention  time.Duration // how long a closed process stays readable
	// stallTimeout is how long a connection's full outgoing queue may make no progress
	// before the client is disconnected (see outQueue).
	stallTimeout time.Duration
	// runManagedUnsandboxed runs requests that ask for a managed (restricted) sandbox without
	// one, answering sandboxType "none", instead of enforcing them. Opt-in, for hosts that
	// are themselves the sandbox (a container, a throwaway VM).
	runManagedUnsandboxed bool
	// maxConnections bounds the websocket connections served at once (0: no bound); past it
	// an upgrade is answered 503.
	maxConnections int
	limits         serverLimits // zero fields: their defaults (limits.go)
	// watchdog starts a watchdog process with the first child, which kills what is left of
	// the children if the server dies without cleaning up (watchdog.go).
	watchdog bool
	netproxy netProxyServerOptions // the managed network proxy's flags (docs/network.md §7)
	stateDir string                // --state-dir: the credential-masking CA (proc_mask.go)
}

// server is one exec-server: its sessions, its method table and its configuration. Every
// transport hands its connections to serveConn.
type server struct {
	ctx      context.Context
	cfg      serverConfig
	log      *logger
	methods  methodTable
	sessions sessionTable
	envInfo  *environmentInfo
	sandbox  *sandboxer
	watchdog *watchdog     // nil unless cfg.watchdog
	inotify  sharedInotify // fs/watchMissing's one inotify instance (fs_watch_linux.go)
	// fsWorkers runs the fs operations a sandbox confines (fs_worker.go).
	fsWorkers *fsWorkerPool
	auth      *wsAuthConfig
	conns     sync.WaitGroup
	listening selfListeners // the websocket listeners, which no sandboxed proxy may reach (server_listeners.go)
	mask      *maskServer   // credential masking's registry and CA (proc_mask.go)
}

func newServer(ctx context.Context, cfg serverConfig, log *logger) *server {
	sbx, _ := newSandboxer("isolate", "")
	cfg.limits = cfg.limits.withDefaults()
	s := &server{ctx: ctx, cfg: cfg, log: log, methods: newMethodTable(), envInfo: hostEnvironment(), sandbox: sbx,
		fsWorkers: newFSWorkerPool(), mask: newMaskServer(cfg.stateDir)}
	if err := s.mask.caDirErr; err != nil {
		log.Warn("credential masking will be refused: its CA directory could not be made", "err", err)
	}
	if cfg.watchdog {
		s.watchdog = &watchdog{onError: func(err error) {
			log.Warn("children may outlive a crash of this server", "err", err)
		}}
	}
	return s
}

// shutdown kills every managed process group of every session, and stops the fs sandbox
// workers.
func (s *server) shutdown() {
	for _, sess := range s.sessions.all() {
		sess.shutdown()
	}
	s.fsWorkers.close()
	s.sandbox.close()
	s.watchdog.close()
}
