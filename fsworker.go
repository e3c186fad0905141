package main

// The fs sandbox worker (docs/sandbox.md §3): a process that runs the filesystem
// methods' cores (the fsOps of fs.go) under one sandbox profile, inside the sandbox stage
// (sandbox_linux.go), so that the kernel and not this code decides what they may touch. A
// worker serves every operation under its profile and lives on between them: the reference
// starts a helper per operation (≈65 ms each), a worker answers in a fraction of a
// millisecond once started. The server keeps its workers in a pool (fsWorkerPool), one per
// resolved profile.
//
//	server ─fd 0: unix stream socket─▶ worker   requests; the other way, descriptors (fs/open)
//	       ◀─fd 1: pipe─────────────────       responses
//	       ◀─fd 2: pipe─────────────────       stderr, of which the last maxWorkerStderr
//	                                           bytes are kept for the error of a dead worker
//
// Wire format: frames of a u32 big-endian length, then that many bytes of JSON. Several
// requests are in flight at once; responses come in any order, matched by id.
//
//	direction        frame
//	server → worker  {"id":N,"method":M,"params":P}           P: the fields of M's fsOp
//	                 {"id":N,"method":"cancel"}               request N's caller is gone
//	worker → server  {"id":N,"result":R}                      R as the method answers it
//	                 {"id":N,"fd":true,"result":{}}           fs/open: the descriptor went first
//	                 {"id":N,"error":{"code":C,"message":T}}  the JSON-RPC error, as is
//	worker → server  8 bytes, N big-endian, carrying one descriptor (SCM_RIGHTS), on fd 0:
//	                 sent before the response that announces it
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
// What lives as long as a worker: the empty directories the stage makes on the host as
// mount points for missing protected names (sandbox_linux.go, syntheticDirs), where the
// reference's helper keeps them for one operation. They go when the worker goes.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fsWorkerArg is argv[1] of the worker (main dispatches on it before anything else).
const fsWorkerArg = "__exec-server-fs-worker"

// Limits and timings of the workers.
const (
	// fsWorkerIdle is how long a worker with nothing to do is kept for the next operation.
	fsWorkerIdle = 30 * time.Second
	// fsWorkerIdleWriting is the same for a worker that can write: its view stands on the
	// protected names of its writable roots, and a missing one is an empty directory on the
	// host for as long as the worker lives (syntheticDirs). Two seconds keep a burst of writes
	// (an apply_patch) on one worker, and the host's tree as it was soon after.
	fsWorkerIdleWriting = 2 * time.Second
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

// ---- the server's side ----

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

// fsWorkerReply is a worker's answer to one request.
type fsWorkerReply struct {
	result any      // framedJSON, the result as the worker encoded it
	file   *os.File // fs/open's descriptor
	err    error    // an *rpcError
}

// fsWorkerProcess is a started worker: its process (the sandbox stage that runs it), and our
// ends of its descriptors. Made by startFSWorkerProcess (fsworker_linux.go).
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
func (p *fsWorkerPool) call(ctx context.Context, sbx *sandboxer, profile *sandboxProfile, method string, op fsOp) (any, *os.File, error) {
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
// replaced (fingerprint: a protected .git removed and made again, a denied file recreated)
// is let go and a new one started: its binds hold the old files, and the new ones would be
// open to it.
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
		idle := p.idle
		if len(profile.Protected) > 0 {
			idle = min(idle, fsWorkerIdleWriting)
		}
		w = &fsWorker{pool: p, key: key, idle: idle, ready: make(chan struct{}), pending: map[uint64]chan fsWorkerReply{}}
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
	fingerprint := viewFingerprint(profile) // now that the stage has made its mount points
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

// roundTrip sends one request and waits for its answer. A caller that goes away (its
// connection ended) tells the worker to give the request up.
func (w *fsWorker) roundTrip(ctx context.Context, method string, op fsOp) (fsWorkerReply, error) {
	ch := make(chan fsWorkerReply, 1)
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return fsWorkerReply{}, err
	}
	w.nextID++
	id := w.nextID
	w.pending[id] = ch
	w.mu.Unlock()
	frame, err := appendWorkerRequest(id, method, op)
	if err == nil {
		_, err = w.proc.sock.Write(frame)
		if err != nil {
			err = errInternal("fs sandbox helper failed: send the request: %v", err)
		}
	}
	if err != nil {
		w.forgetRequest(id)
		return fsWorkerReply{}, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		if w.forgetRequest(id) {
			cancel, _ := appendWorkerCancel(id)
			w.proc.sock.Write(cancel)
		}
		return fsWorkerReply{}, ctx.Err()
	}
}

// forgetRequest drops a request nobody waits for any more; false when it was answered.
func (w *fsWorker) forgetRequest(id uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.pending[id]
	delete(w.pending, id)
	return ok
}

// readLoop reads the worker's responses until its output closes, then reaps it and fails
// whatever it still held.
func (w *fsWorker) readLoop() {
	br := bufio.NewReaderSize(w.proc.out, fsWorkerReadBuffer)
	var cause error
	for {
		frame, err := readWorkerFrame(br, framedRoom)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				cause = err
			}
			break
		}
		id, r, err := parseWorkerReply(frame)
		if err == nil && r.file == nil && r.err == nil && r.result == nil {
			r.file, err = w.receiveDescriptor(id)
		}
		if err != nil {
			cause = err
			break
		}
		w.deliver(id, r)
	}
	w.pool.forget(w, false) // the next call starts a new worker
	if cause != nil {
		w.proc.proc.Kill() // it broke the protocol: it cannot be trusted to exit
	}
	w.idleStop.Stop()
	state, werr := w.proc.proc.Wait()
	<-w.stderrDone
	w.proc.exited()
	w.proc.sock.Close()
	w.proc.out.Close()
	w.proc.errOut.Close()
	for _, f := range w.fds {
		f.Close()
	}
	status := fmt.Sprint(state)
	if werr != nil {
		status = werr.Error()
	}
	msg := fmt.Sprintf("fs sandbox helper failed with status %s", status)
	if cause != nil {
		msg += fmt.Sprintf(" (%v)", cause)
	}
	if tail := strings.TrimSpace(w.stderr.String()); tail != "" {
		msg += ": " + tail
	}
	w.mu.Lock()
	w.err = errInternal("%s", msg)
	pending := w.pending
	w.pending = map[uint64]chan fsWorkerReply{}
	w.mu.Unlock()
	for _, ch := range pending {
		ch <- fsWorkerReply{err: w.err}
	}
	w.pool.forget(w, true)
}

// deliver hands a reply to its caller; a reply nobody waits for is dropped, and its
// descriptor closed.
func (w *fsWorker) deliver(id uint64, r fsWorkerReply) {
	w.mu.Lock()
	ch := w.pending[id]
	delete(w.pending, id)
	w.mu.Unlock()
	if ch == nil {
		if r.file != nil {
			r.file.Close()
		}
		return
	}
	ch <- r
}

// receiveDescriptor takes the descriptor the worker sent for request id. Descriptors come
// in the order the worker's requests finished, which need not be the order their responses
// are read in: one that arrives for another request waits in w.fds for its response.
func (w *fsWorker) receiveDescriptor(id uint64) (*os.File, error) {
	if f := w.fds[id]; f != nil {
		delete(w.fds, id)
		return f, nil
	}
	w.proc.sock.SetReadDeadline(time.Now().Add(fsWorkerDescriptorWait))
	defer w.proc.sock.SetReadDeadline(time.Time{})
	for {
		var b [8]byte
		oob := make([]byte, unix.CmsgSpace(4))
		n, oobn, _, _, err := w.proc.sock.ReadMsgUnix(b[:], oob)
		if err != nil {
			return nil, fmt.Errorf("receive a descriptor: %w", err)
		}
		fds, err := descriptorsIn(oob[:oobn])
		if err != nil || n != len(b) || len(fds) != 1 {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("receive a descriptor: a malformed message (%d bytes, %d descriptors, %v)", n, len(fds), err)
		}
		f := os.NewFile(uintptr(fds[0]), "fs/open")
		got := binary.BigEndian.Uint64(b[:])
		if got == id {
			return f, nil
		}
		if old := w.fds[got]; old != nil {
			old.Close()
		}
		w.fds[got] = f
	}
}

// descriptorsIn returns the descriptors of the SCM_RIGHTS messages in oob.
func descriptorsIn(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
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

// ---- frames ----

// readWorkerFrame reads one frame into a new buffer that keeps room bytes free before the
// JSON, and returns the buffer whole (room included).
func readWorkerFrame(r io.Reader, room int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxWorkerFrame {
		return nil, fmt.Errorf("a frame of %d bytes (at most %d)", n, maxWorkerFrame)
	}
	buf := make([]byte, room+int(n))
	if _, err := io.ReadFull(r, buf[room:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// frameBuilder builds a frame: the length is filled in by bytes.
type frameBuilder struct{ bytes.Buffer }

func newFrame() *frameBuilder {
	f := &frameBuilder{}
	f.Write([]byte{0, 0, 0, 0})
	return f
}

func (f *frameBuilder) frame() ([]byte, error) {
	b := f.Bytes()
	if len(b)-4 > maxWorkerFrame {
		return nil, errInternal("fs sandbox: a request of %d bytes (at most %d)", len(b)-4, maxWorkerFrame)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b, nil
}

// appendWorkerRequest is the frame of request id: {"id":N,"method":M,"params":op}.
func appendWorkerRequest(id uint64, method string, op fsOp) ([]byte, error) {
	f := newFrame()
	f.WriteString(`{"id":`)
	f.WriteString(strconv.FormatUint(id, 10))
	f.WriteString(`,"method":`)
	f.Write(appendJSONString(nil, method))
	f.WriteString(`,"params":`)
	enc := json.NewEncoder(f)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(op); err != nil {
		return nil, errInternal("fs sandbox: encode the request: %v", err)
	}
	f.WriteByte('}')
	return f.frame()
}

// appendWorkerCancel is the frame that gives request id up.
func appendWorkerCancel(id uint64) ([]byte, error) {
	f := newFrame()
	f.WriteString(`{"id":` + strconv.FormatUint(id, 10) + `,"method":"cancel"}`)
	return f.frame()
}

// parseWorkerReply decodes a response frame (framedRoom bytes of room, then the JSON). A
// reply with neither result nor error, and no error returned, announces a descriptor. The
// result stays in the frame's buffer, framed for the client's reply without a copy.
func parseWorkerReply(buf []byte) (uint64, fsWorkerReply, error) {
	frame := buf[framedRoom:]
	var (
		id                 uint64
		haveID, descriptor bool
		r                  fsWorkerReply
		bad                error
	)
	ok := scanObject(frame, func(key string, val []byte) bool {
		switch key {
		case "id":
			id, bad = strconv.ParseUint(string(val), 10, 64)
			haveID = bad == nil
		case "fd":
			descriptor = string(val) == "true"
		case "result":
			start := cap(buf) - cap(val)
			r.result = framedJSON{buf: buf[:start+len(val)], head: start}
		case "error":
			var e rpcError
			if bad = json.Unmarshal(val, &e); bad == nil {
				r.err = &e
			}
		}
		return bad == nil
	})
	switch {
	case bad != nil:
		return 0, r, fmt.Errorf("a malformed response: %w", bad)
	case !ok || !haveID || r.result == nil && r.err == nil:
		return 0, r, fmt.Errorf("a malformed response: %.200q", frame)
	case descriptor:
		r.result = nil
	}
	return id, r, nil
}

// ---- the worker's side ----

// isFSWorker reports whether this process was started as an fs sandbox worker.
func isFSWorker() bool {
	return len(os.Args) > 1 && os.Args[1] == fsWorkerArg
}

// runFSWorker is the worker's main: it serves its stdin and stdout until the server closes
// the request direction, then exits at once: like the stage (exitStage), it skips what
// os.Exit runs first, which in a race-enabled test binary is a pause of a second.
func runFSWorker() {
	syscall.Exit(serveFSWorker(os.Stdin, os.Stdout, int(os.Stdin.Fd())))
}

// fsWorkerServer is the worker's state: its requests in flight, and the writer of answers.
type fsWorkerServer struct {
	sock  int // where descriptors go (fd 0, the request socket)
	outMu sync.Mutex
	out   io.Writer

	mu      sync.Mutex
	cancels map[uint64]context.CancelFunc
	slots   chan struct{}
	wg      sync.WaitGroup
}

// serveFSWorker serves requests from in, answers on out, and descriptors on the socket
// sock, until in ends; it returns the exit status. Each request runs on a goroutine of its
// own, at most maxWorkerInFlight of them running at once; all have ended when it returns.
func serveFSWorker(in io.Reader, out io.Writer, sock int) int {
	ctx, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	s := &fsWorkerServer{sock: sock, out: out, cancels: map[uint64]context.CancelFunc{}, slots: make(chan struct{}, maxWorkerInFlight)}
	br := bufio.NewReaderSize(in, fsWorkerReadBuffer)
	status := 0
	for {
		frame, err := readWorkerFrame(br, 0)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintf(os.Stderr, "fs worker: read a request: %v\n", err)
				status = 1
			}
			break
		}
		id, method, params, err := parseWorkerRequest(frame)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fs worker: %v\n", err)
			status = 1
			break
		}
		if method == "cancel" {
			s.cancel(id)
			continue
		}
		rctx, cancel := context.WithCancel(ctx)
		s.mu.Lock()
		s.cancels[id] = cancel
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.cancel(id)
			// Waiting for a slot here, not in the loop, keeps the loop reading: a cancel
			// still reaches a request that waits.
			select {
			case s.slots <- struct{}{}:
			case <-rctx.Done():
				s.answerError(id, errInternal("fs sandbox worker: %v", rctx.Err()))
				return
			}
			defer func() { <-s.slots }()
			s.serve(rctx, id, method, params)
		}()
	}
	if status != 0 {
		cancelAll()
	}
	s.wg.Wait()
	return status
}

func (s *fsWorkerServer) cancel(id uint64) {
	s.mu.Lock()
	cancel := s.cancels[id]
	delete(s.cancels, id)
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// parseWorkerRequest splits a request frame; params stays in the frame.
func parseWorkerRequest(frame []byte) (id uint64, method string, params []byte, err error) {
	haveID := false
	ok := scanObject(frame, func(key string, val []byte) bool {
		switch key {
		case "id":
			id, err = strconv.ParseUint(string(val), 10, 64)
			haveID = err == nil
		case "method":
			err = json.Unmarshal(val, &method)
		case "params":
			params = val
		}
		return err == nil
	})
	if err == nil && (!ok || !haveID || method == "") {
		err = fmt.Errorf("a malformed request: %.200q", frame)
	}
	return id, method, params, err
}

// newFSOp is the fsOp of a method, for its params to be decoded into.
func newFSOp(method string) fsOp {
	switch method {
	case "fs/readFile":
		return &readFileOp{}
	case "fs/writeFile":
		return &writeFileOp{}
	case "fs/createDirectory":
		return &createDirectoryOp{}
	case "fs/getMetadata":
		return &metadataOp{}
	case "fs/canonicalize":
		return &canonicalizeOp{}
	case "fs/readDirectory":
		return &readDirectoryOp{}
	case "fs/remove":
		return &removeOp{}
	case "fs/copy":
		return &copyOp{}
	case "fs/walk":
		return &walkOp{}
	case "fs/open":
		return &openOp{}
	}
	return nil
}

// serve runs one request and answers it.
func (s *fsWorkerServer) serve(ctx context.Context, id uint64, method string, params []byte) {
	op := newFSOp(method)
	if op == nil {
		s.answerError(id, errInternal("fs sandbox worker: unknown method `%s`", method))
		return
	}
	if err := decodeParams(params, op); err != nil {
		s.answerError(id, errInternal("fs sandbox worker: %s: %v", method, err))
		return
	}
	res, err := op.run(ctx, fsWritesInPlace)
	if err != nil {
		s.answerError(id, toRPCError(fsError(err)))
		return
	}
	if f, ok := res.(*os.File); ok {
		err := s.sendDescriptor(id, f)
		f.Close()
		if err != nil {
			s.answerError(id, errInternal("fs sandbox worker: send the descriptor: %v", err))
			return
		}
		s.answer(id, `,"fd":true,"result":`, []byte(`{}`))
		return
	}
	var body []byte
	switch r := res.(type) {
	case framedJSON:
		body = r.buf[r.head:]
	case rawJSON:
		body = r
	default:
		if body, err = json.Marshal(res); err != nil {
			s.answerError(id, errInternal("fs sandbox worker: encode the result: %v", err))
			return
		}
	}
	s.answer(id, `,"result":`, body)
}

// sendDescriptor sends f for request id, ahead of the response that announces it.
func (s *fsWorkerServer) sendDescriptor(id uint64, f *os.File) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], id)
	return unix.Sendmsg(s.sock, b[:], unix.UnixRights(int(f.Fd())), nil, 0)
}

func (s *fsWorkerServer) answerError(id uint64, e *rpcError) {
	body, _ := json.Marshal(e)
	s.answer(id, `,"error":`, body)
}

// answer writes {"id":N<member>body}: the head and tail around body, which may be large, as
// writes of their own.
func (s *fsWorkerServer) answer(id uint64, member string, body []byte) {
	head := make([]byte, 4, 64)
	head = append(head, `{"id":`...)
	head = strconv.AppendUint(head, id, 10)
	head = append(head, member...)
	binary.BigEndian.PutUint32(head, uint32(len(head)-4+len(body)+1))
	s.outMu.Lock()
	defer s.outMu.Unlock()
	// A failed write means the server is gone; the request direction ends with it.
	if _, err := s.out.Write(head); err != nil {
		return
	}
	if _, err := s.out.Write(body); err != nil {
		return
	}
	s.out.Write([]byte{'}'})
}
