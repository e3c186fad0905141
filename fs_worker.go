package main

// The fs sandbox worker (docs/sandbox.md §3): a process that runs the filesystem
// methods' cores (the fsOps of fs.go) under one sandbox profile, inside the sandbox stage
// (sandbox_linux.go), so that the kernel and not this code decides what they may touch. A
// worker serves every operation under its profile and lives on between them: the reference
// starts a helper per operation (≈65 ms each), a worker answers in a fraction of a
// millisecond once started. The server keeps its workers in a pool (fsWorkerPool), one per
// resolved profile. This file holds the pool and each worker's lifecycle; fs_worker_protocol.go
// the frames and the server's half of the wire, fs_worker_serve.go the worker's half.
//
//	server ─fd 0: unix stream socket─▶ worker   requests; the other way, descriptors (fs/open)
//	       ◀─fd 1: pipe─────────────────       responses
//	       ◀─fd 2: pipe─────────────────       stderr, of which the last maxWorkerStderr
//	                                           bytes are kept for the error of a dead worker
//
// Lifetime. A worker is started by the first operation under its profile and let go by the
// pool when it has served nothing for fsWorkerIdle, when the pool needs its place
// (maxFSWorkers), when a file its view binds has been replaced since it started (acquire:
// its binds still hold the old file, and the new one would be open to it), or when the
// server shuts down. Once no call holds it, its request direction is closed; it finishes
// what it has, exits, and is reaped. A worker that dies fails the requests it holds (-32603
// "fs sandbox helper failed …"); the next request starts a new one. The stage dies with the
// server (Pdeathsig) and takes the worker along: as pid 1 of its pid namespace, or as the
// worker itself (it execs the worker in place without one, or under Landlock).
//
// Nothing of a worker is seen on the host: it refuses to touch protected names itself
// (fs_worker_guard_linux.go), so its view needs no mount point for a missing one, where the
// reference's helper stands on such directories for the length of an operation.

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// fsWorkerArg is argv[1] of the worker (main dispatches on it before anything else).
const fsWorkerArg = "__exec-server-fs-worker"

// Limits and timings of the workers.
const (
	// fsWorkerIdle is how long a worker with nothing to do is kept for the next operation.
	// A worker leaves nothing on the host, whether it can write or not, so one that can
	// write is kept as long.
	fsWorkerIdle = 30 * time.Second
	// maxFSWorkers bounds the workers (distinct profiles) alive at once: each is two
	// processes. When full, the longest idle one makes room.
	maxFSWorkers = 16
	// maxWorkerInFlight bounds the requests one worker runs at once; more wait in the socket.
	maxWorkerInFlight = 64
	// maxWorkerFrame bounds a frame: the largest is an fs/readFile answer, the base64 of
	// maxReadFileBytes and a little JSON.
	maxWorkerFrame = 1 << 30
	// maxWorkerStderr is how much of a worker's stderr is kept.
	maxWorkerStderr = 4 << 10
	// fsWorkerStopGrace is how long a stopping worker may take to finish before it is killed.
	fsWorkerStopGrace = 2 * time.Second
	// fsWorkerDescriptorWait bounds the wait for a descriptor a response announced (it was
	// sent before the response, so it is only ever late if the worker misbehaves).
	fsWorkerDescriptorWait = 5 * time.Second
	// fsWorkerReadBuffer is the buffer over a worker's responses.
	fsWorkerReadBuffer = 64 << 10
)

// fsWorkerEnv are the environment variables a worker gets from the server, as the
// reference's helper does: nothing else of the server's environment reaches the sandbox.
var fsWorkerEnv = []string{"PATH", "TMPDIR", "TMP", "TEMP"}

// fsWorkerPool is a server's workers, by profile. It is made by newServer and closed by
// server.shutdown; every worker it starts ends before close returns.
type fsWorkerPool struct {
	tmpdir string   // what the special path tmpdir means for the fs methods: the server's TMPDIR
	env    []string // the workers' environment (fsWorkerEnv)
	exe    string   // this binary, resolved: what a worker runs ("" if unknown)
	idle   time.Duration

	mu      sync.Mutex
	workers map[string]*fsWorker // the workers taking calls, by the JSON of their profile
	live    map[*fsWorker]bool   // every worker from its creation until it has been reaped
	closed  bool
	running sync.WaitGroup // counts live
}

func newFSWorkerPool() *fsWorkerPool {
	p := &fsWorkerPool{tmpdir: os.Getenv("TMPDIR"), idle: fsWorkerIdle, workers: map[string]*fsWorker{}, live: map[*fsWorker]bool{}}
	for _, k := range fsWorkerEnv {
		if v, ok := os.LookupEnv(k); ok {
			p.env = append(p.env, k+"="+v)
		}
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			p.exe = real
		}
	}
	return p
}

// fsWorker is one worker process, as the server sees it.
type fsWorker struct {
	idle  time.Duration // how long it is kept with nothing to do
	pool  *fsWorkerPool
	key   string
	ready chan struct{} // closed once started, or failed to start (err set)

	// Set (under mu) before ready is closed, read-only after.
	proc        *fsWorkerProcess
	fingerprint string // of the files its view was built on (viewFingerprint)
	stderr      *tailBuffer
	stderrDone  chan struct{}
	idleStop    *time.Timer

	mu          sync.Mutex
	nextID      uint64
	pending     map[uint64]chan fsWorkerReply
	users       int       // calls holding the worker (acquire … release)
	lastUsed    time.Time // when the last call let go
	err         error     // why the worker is dead or could not start; nil while it serves
	stopping    bool      // the pool let it go: its request direction closes with its last call
	inputClosed bool

	fds map[uint64]*os.File // descriptors received ahead of their response (readLoop only)
}

// fsWorkerProcess is a started worker: its process (the sandbox stage that runs it), and our
// ends of its descriptors. Made by startFSWorkerProcess (fs_worker_linux.go).
type fsWorkerProcess struct {
	proc   *os.Process
	exited func()        // gives back what the stage took, once it has been reaped
	sock   *net.UnixConn // its fd 0: requests out, descriptors in
	out    *os.File      // its fd 1: responses
	errOut *os.File      // its fd 2
	// oneShot: the worker's confinement is a snapshot that goes stale (Landlock grants the
	// children of a writable root as they are at its start): it serves the calls that
	// started it, and no later one.
	oneShot bool
}

// call runs op in the worker for profile (started if need be) and returns its answer: the
// result as the worker encoded it, the descriptor of an fs/open, or the error to send. A
// host that cannot confine files refuses (fail closed).
func (p *fsWorkerPool) call(ctx context.Context, sbx *sandboxer, profile *sandboxProfile, method string, op fsRequest) (result, *os.File, error) {
	wp := workerProfile(profile, p.exe)
	key, err := json.Marshal(wp)
	if err != nil {
		return nil, nil, errInternal("fs sandbox: encode the profile: %v", err)
	}
	w, err := p.acquire(ctx, sbx, wp, string(key), viewFingerprint(wp))
	if err != nil {
		return nil, nil, err
	}
	defer w.release()
	r, err := w.roundTrip(ctx, method, op)
	if err != nil {
		return nil, nil, err
	}
	return r.result, r.file, r.err
}

// workerProfile is p as a worker runs under it: without the network, whatever p says (the
// worker needs none, and the reference forces it off too), and, under restricted read, with
// what it takes to start the worker readable, as the reference's helper has: the minimal
// roots (the dynamic loader and libc of a cgo build, such as a race-enabled test binary) and
// the worker's binary, exe. The namespace stage would reach the binary without it (it execs
// /proc/self/exe, a link the kernel follows to the file itself); Landlock checks the file. The
// minimal roots are given as they are named, not resolved: the view then recreates the
// symlinks on the way (/lib64 -> usr/lib64 on a merged-/usr host), which is how the loader is
// named in the binary.
func workerProfile(p *sandboxProfile, exe string) *sandboxProfile {
	wp := *p
	wp.Network = false
	if !wp.FullRead {
		read := append(slices.Clone(wp.Read), minimalReadRoots...)
		if exe != "" {
			read = append(read, exe)
		}
		wp.Read = uniquePaths(read)
	}
	return &wp
}

// acquire returns the running worker for key, starting it if there is none, and holds it
// for the caller until release. A worker whose view was built on files that have since been
// replaced (fingerprint: a writable root or a denied file removed and made again; a
// protected path, which Landlock's rules name) is let go and a new one started: its binds
// hold the old files, and the new ones would be open to it.
func (p *fsWorkerPool) acquire(ctx context.Context, sbx *sandboxer, profile *sandboxProfile, key, fingerprint string) (*fsWorker, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errInternal("fs sandbox helper failed: the server is shutting down")
	}
	w := p.workers[key]
	if w != nil && w.staleFor(fingerprint) {
		delete(p.workers, key)
		w.stop()
		w = nil
	}
	start := w == nil
	if start {
		if len(p.workers) >= maxFSWorkers && !p.evictIdleLocked() {
			p.mu.Unlock()
			return nil, errInternal("fs sandbox helper failed: %d sandbox workers are all busy", maxFSWorkers)
		}
		w = &fsWorker{pool: p, key: key, idle: p.idle, ready: make(chan struct{}), pending: map[uint64]chan fsWorkerReply{}}
		p.workers[key] = w
		p.live[w] = true
		p.running.Add(1)
	}
	w.mu.Lock()
	w.users++
	w.mu.Unlock()
	p.mu.Unlock()
	if start {
		w.start(sbx, profile)
	}
	select {
	case <-w.ready:
	case <-ctx.Done():
		w.release()
		return nil, ctx.Err()
	}
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if err != nil {
		w.release()
		return nil, err
	}
	if w.proc.oneShot {
		p.forget(w, false)
		w.stop()
	}
	return w, nil
}

// staleFor reports whether a started worker's view was built on other files than the
// fingerprint now says. One still starting is taken as it is.
func (w *fsWorker) staleFor(fingerprint string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.proc != nil && w.fingerprint != fingerprint
}

// viewFingerprint identifies the files a profile's view is built on: the identity of every
// path it binds (appendFileIdentity), or its absence. Computed for each call, a stat per path.
func viewFingerprint(p *sandboxProfile) string {
	var b []byte
	for _, list := range [][]string{p.Write, p.Read, p.Protected, p.Deny} {
		for _, path := range list {
			b = appendFileIdentity(b, path)
			b = append(b, ';')
		}
		b = append(b, '|')
	}
	return string(b)
}

// evictIdleLocked stops the worker that has been idle longest, if any is idle. p.mu is held.
func (p *fsWorkerPool) evictIdleLocked() bool {
	var oldest *fsWorker
	for _, w := range p.workers {
		w.mu.Lock()
		idle := w.users == 0 && w.proc != nil && (oldest == nil || w.lastUsed.Before(oldest.lastUsed))
		w.mu.Unlock()
		if idle {
			oldest = w
		}
	}
	if oldest == nil {
		return false
	}
	delete(p.workers, oldest.key)
	oldest.stop()
	return true
}

// start starts the worker's process, then closes ready. A worker that cannot start is
// dead from the outset: its callers get the error, and the pool forgets it so that the
// next call tries again.
func (w *fsWorker) start(sbx *sandboxer, profile *sandboxProfile) {
	defer close(w.ready)
	proc, err := startFSWorkerProcess(sbx, profile, w.pool.env)
	if err != nil {
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
		w.pool.forget(w, true)
		return
	}
	fingerprint := viewFingerprint(profile) // now that the stage has built its view
	w.mu.Lock()
	w.proc = proc
	w.fingerprint = fingerprint
	w.stderr = &tailBuffer{max: maxWorkerStderr}
	w.stderrDone = make(chan struct{})
	w.fds = map[uint64]*os.File{}
	w.idleStop = time.AfterFunc(w.idle, w.stopIfIdle)
	w.mu.Unlock()
	go func() {
		defer close(w.stderrDone)
		io.Copy(w.stderr, proc.errOut)
	}()
	go w.readLoop()
	w.pool.mu.Lock()
	stopped := w.pool.closed || w.pool.workers[w.key] != w
	w.pool.mu.Unlock()
	if stopped {
		w.stop() // the pool closed while it started
	}
}

// forget drops w from the pool unless another worker has taken its key since, and, once it
// is gone for good (reaped, or never started), from the live workers.
func (p *fsWorkerPool) forget(w *fsWorker, gone bool) {
	p.mu.Lock()
	if p.workers[w.key] == w {
		delete(p.workers, w.key)
	}
	if gone {
		delete(p.live, w)
	}
	p.mu.Unlock()
	if gone {
		p.running.Done()
	}
}

// release lets go of a worker taken by acquire; the last one out arms the idle stop, or
// closes the request direction of a worker the pool has let go.
func (w *fsWorker) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.users--
	w.lastUsed = time.Now()
	if w.users == 0 && w.idleStop != nil {
		w.idleStop.Reset(w.idle)
	}
	w.closeInputLocked()
}

// stopIfIdle is the idle timer: a worker that has had no caller for the idle time is let go.
func (w *fsWorker) stopIfIdle() {
	p := w.pool
	p.mu.Lock()
	w.mu.Lock()
	idle := w.users == 0 && time.Since(w.lastUsed) >= w.idle
	w.mu.Unlock()
	if idle && p.workers[w.key] == w {
		delete(p.workers, w.key)
	}
	p.mu.Unlock()
	if idle {
		w.stop()
	}
}

// stop lets a worker go (the pool has dropped it): once no call holds it, its request
// direction is closed; it finishes what it has and exits, and readLoop reaps it.
func (w *fsWorker) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopping = true
	w.closeInputLocked()
}

func (w *fsWorker) closeInputLocked() {
	if w.stopping && w.users == 0 && w.proc != nil && !w.inputClosed {
		w.inputClosed = true
		w.proc.sock.CloseWrite()
	}
}

// close stops every worker and waits until each has been reaped: those that do not finish
// within fsWorkerStopGrace are killed. Further calls fail. Safe to call more than once.
func (p *fsWorkerPool) close() {
	p.mu.Lock()
	p.closed = true
	workers := make([]*fsWorker, 0, len(p.live))
	for w := range p.live {
		workers = append(workers, w)
	}
	clear(p.workers)
	p.mu.Unlock()
	for _, w := range workers {
		<-w.ready
		w.stop()
	}
	done := make(chan struct{})
	go func() {
		p.running.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-time.After(fsWorkerStopGrace):
	}
	for _, w := range workers {
		if w.proc != nil {
			w.proc.proc.Kill() // the stage: pid 1 of the worker's pid namespace
		}
	}
	<-done
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
