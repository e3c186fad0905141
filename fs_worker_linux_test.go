//go:build linux

package main

// The sandboxed fs worker (fs_worker.go, fs_worker_linux.go; docs/sandbox.md §3) against the real
// kernel: descriptor hand-over, the worker's lifecycle and protocol, its profile, and benchmarks.

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFSSandboxOpenHandsTheDescriptorOver: fs/open under a confining sandbox is opened by the
// worker, which the kernel may refuse; the handle then works here.
func TestFSSandboxOpenHandsTheDescriptorOver(t *testing.T) {
	tc := sandboxedFSServer(t).connect(t)
	f := makeEscapeFixture(t)
	ws, ro := json.RawMessage(workspaceWriteSandboxOf(f.allowed)), json.RawMessage(readOnlySandbox(f.allowed))
	before := fsOpenFDs(t)
	tc.mustCall("fs/open", map[string]any{"handleId": "w", "path": fileURI(filepath.Join(f.allowed, "blocks.txt")), "mode": "replace", "sandbox": ws})
	tc.mustCall("fs/writeBlock", map[string]any{"handleId": "w", "offset": 0, "chunk": b64("written in blocks")})
	tc.mustCall("fs/close", map[string]any{"handleId": "w"})
	if got := fsReadString(t, filepath.Join(f.allowed, "blocks.txt")); got != "written in blocks" {
		t.Errorf("blocks.txt holds %q", got)
	}
	tc.mustCall("fs/open", map[string]any{"handleId": "r", "path": fileURI(filepath.Join(f.allowed, "file.txt")), "sandbox": ro})
	res := tc.mustCall("fs/readBlock", map[string]any{"handleId": "r", "offset": 0, "len": 100})
	if want := `{"chunk":"` + b64("file") + `","eof":true}`; string(res) != want {
		t.Errorf("readBlock: %s, want %s", res, want)
	}
	tc.mustCall("fs/close", map[string]any{"handleId": "r"})
	// Several at once: descriptors may come back out of order.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "p" + strconv.Itoa(i)
			tc.mustCall("fs/open", map[string]any{"handleId": id, "path": fileURI(filepath.Join(f.allowed, "file.txt")), "sandbox": ro})
			tc.mustCall("fs/close", map[string]any{"handleId": id})
		}()
	}
	wg.Wait()
	snap := f.snapshot(t)
	for _, c := range []struct {
		what   string
		params map[string]any
	}{
		{"open to write outside", map[string]any{"handleId": "x1", "path": fileURI(filepath.Join(f.outside, "new.txt")), "mode": "replace", "sandbox": ws}},
		{"open to write through a symlink out", map[string]any{"handleId": "x2", "path": fileURI(filepath.Join(f.allowed, "link", "outside.txt")), "mode": "replace", "sandbox": ws}},
		{"open to read through a symlink out", map[string]any{"handleId": "x3", "path": fileURI(filepath.Join(f.allowed, "link", "secret.txt")), "sandbox": ro}},
		{"open to write under read-only", map[string]any{"handleId": "x4", "path": fileURI(filepath.Join(f.allowed, "file.txt")), "mode": "replace", "sandbox": ro}},
	} {
		_, err := tc.call("fs/open", c.params)
		checkSandboxDenied(t, c.what, err)
	}
	if after := f.snapshot(t); !maps.Equal(snap, after) {
		t.Errorf("denied opens changed the tree:\nbefore %v\nafter  %v", snap, after)
	}
	// The two workers' descriptors beyond the start (the writable one holds no lock on
	// protected directories: its view stands on none); none left per handle.
	if n, want := fsOpenFDs(t), before+2*fsWorkerFDs; n > want {
		t.Errorf("%d descriptors open, want at most %d", n, want)
	}
}

// fsWorkerFDs is what one live worker holds open in the server: its socket, its two pipes,
// and the pidfd of the stage.
const fsWorkerFDs = 4

// fsWorkerPids lists the processes of the server's live workers: each stage, and what runs
// under it.
func fsWorkerPids(t testing.TB, srv *server) []int {
	t.Helper()
	var pids []int
	srv.fsWorkers.mu.Lock()
	for w := range srv.fsWorkers.live {
		w.mu.Lock()
		if w.proc != nil {
			pids = append(pids, w.proc.proc.Pid)
		}
		w.mu.Unlock()
	}
	srv.fsWorkers.mu.Unlock()
	return append(pids, childrenOf(t, pids)...)
}

// childrenOf lists the processes whose parent is one of pids.
func childrenOf(t testing.TB, pids []int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		_, rest, ok := bytes.Cut(b, []byte(") "))
		fields := strings.Fields(string(rest))
		if !ok || len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); slices.Contains(pids, ppid) {
			out = append(out, pid)
		}
	}
	return out
}

// TestFSSandboxWorkerLifecycle: a worker is reused, stops when idle, is restarted after it
// dies (failing what it held), and is gone with every descriptor after shutdown.
func TestFSSandboxWorkerLifecycle(t *testing.T) {
	const idle = 300 * time.Millisecond
	ts := sandboxedFSServer(t, func(s *server) { s.fsWorkers.idle = idle })
	fdsBefore := fsOpenFDs(t)
	tc := ts.connect(t)
	dir := t.TempDir()
	sb := json.RawMessage(workspaceWriteSandboxOf(dir))
	write := func(name string) *rpcError {
		_, err := tc.call("fs/writeFile", map[string]any{"path": fileURI(filepath.Join(dir, name)), "dataBase64": b64(name), "sandbox": sb})
		return err
	}
	if err := write("a"); err != nil {
		t.Fatal(err)
	}
	first := fsWorkerPids(t, ts.srv)
	if len(first) != 2 {
		t.Fatalf("worker processes %v, want the stage and the worker", first)
	}
	if err := write("b"); err != nil {
		t.Fatal(err)
	}
	if again := fsWorkerPids(t, ts.srv); !slices.Equal(again, first) {
		t.Errorf("a second call started another worker: %v, then %v", first, again)
	}

	// Idle: the worker goes by itself.
	for _, pid := range first {
		waitPidGone(t, pid)
	}
	if err := write("c"); err != nil {
		t.Fatalf("after the idle stop: %v", err)
	}

	// Death: a request in flight fails, the next one gets a new worker.
	fifo := filepath.Join(dir, "fifo")
	fsMust(t, syscall.Mkfifo(fifo, 0o644))
	reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	fsMust(t, err)
	stuck := tc.start("fs/writeFile", map[string]any{"path": fileURI(fifo), "dataBase64": base64.StdEncoding.EncodeToString(make([]byte, 1<<20)), "sandbox": sb})
	// Killed only once the write has filled the FIFO: it is then blocked inside the worker.
	pipeSize, err := unix.FcntlInt(reader.Fd(), unix.F_GETPIPE_SZ, 0)
	fsMust(t, err)
	waitFor(t, "the worker's write to fill the FIFO", func() bool {
		n, err := unix.IoctlGetInt(int(reader.Fd()), unix.TIOCINQ)
		return err == nil && n >= pipeSize
	})
	pids := fsWorkerPids(t, ts.srv)
	if len(pids) != 2 {
		t.Fatalf("worker processes %v", pids)
	}
	fsMust(t, syscall.Kill(pids[0], syscall.SIGKILL))
	select {
	case r := <-stuck:
		if r.Err == nil || r.Err.Code != codeInternal || !strings.HasPrefix(r.Err.Message, "fs sandbox helper failed") {
			t.Errorf("the request in flight: %s %+v, want -32603 fs sandbox helper failed …", r.Result, r.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request in flight was not failed")
	}
	reader.Close()
	if err := write("d"); err != nil {
		t.Fatalf("after the worker died: %v", err)
	}
	last := fsWorkerPids(t, ts.srv)
	if len(last) != 2 || last[0] == pids[0] {
		t.Errorf("worker processes %v after a restart (the dead stage was %d)", last, pids[0])
	}

	tc.close()
	ts.srv.conns.Wait()
	ts.srv.shutdown()
	for _, pid := range append(pids, last...) {
		waitPidGone(t, pid)
	}
	if n := fsOpenFDs(t); n > fdsBefore {
		t.Errorf("%d descriptors open after shutdown, %d before", n, fdsBefore)
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		if got := fsReadString(t, filepath.Join(dir, name)); got != name {
			t.Errorf("%s holds %q", name, got)
		}
	}
}

// TestFSSandboxManyAtOnce: concurrent sandboxed calls on several connections and profiles.
func TestFSSandboxManyAtOnce(t *testing.T) {
	ts := sandboxedFSServer(t)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var wg sync.WaitGroup
	for c := range 3 {
		tc := ts.connect(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var replies []<-chan testReply
			for i := range 40 {
				dir := dirs[(c+i)%len(dirs)]
				replies = append(replies, tc.start("fs/writeFile", map[string]any{
					"path": fileURI(filepath.Join(dir, fmt.Sprintf("%d-%d", c, i))), "dataBase64": b64(fmt.Sprint(c, i)),
					"sandbox": json.RawMessage(workspaceWriteSandboxOf(dir))}))
			}
			for i, ch := range replies {
				if r := <-ch; r.Err != nil {
					t.Errorf("write %d-%d: %+v", c, i, r.Err)
				}
			}
		}()
	}
	wg.Wait()
	n := 0
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if !slices.Contains(protectedNames, e.Name()) {
				n++
			}
		}
	}
	if n != 120 {
		t.Errorf("%d files written, want 120", n)
	}
}

// TestFSWorkerProtocol drives serveFSWorker in this process, without a sandbox: frames,
// answers out of order, a descriptor ahead of its answer, a cancel, and the end of input.
func TestFSWorkerProtocol(t *testing.T) {
	dir := t.TempDir()
	fsWrite(t, filepath.Join(dir, "f"), "hello")
	fifo := filepath.Join(dir, "fifo")
	fsMust(t, syscall.Mkfifo(fifo, 0o644))
	reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	fsMust(t, err)
	defer reader.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	fsMust(t, err)
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	status := make(chan int, 1)
	go func() {
		status <- serveFSWorker(inR, outW, fds[1], fsWrites{inPlace: true})
		outW.Close()
	}()
	send := func(id uint64, method string, op fsRequest) {
		var frame []byte
		var err error
		if op == nil {
			frame, err = appendWorkerCancel(id)
		} else {
			frame, err = appendWorkerRequest(id, method, op)
		}
		fsMust(t, err)
		_, err = inW.Write(frame)
		fsMust(t, err)
	}
	send(1, "fs/writeFile", &writeFileOp{Path: fifo, Data: lazyBase64{raw: []byte(`"` + base64.StdEncoding.EncodeToString(make([]byte, 1<<20)) + `"`)}})
	send(2, "fs/readFile", &readFileOp{Path: filepath.Join(dir, "f"), Limit: 100})
	send(3, "fs/getMetadata", &metadataOp{Path: filepath.Join(dir, "missing")})
	send(4, "fs/open", &openOp{Path: filepath.Join(dir, "f")})
	send(5, "fs/bogus", &metadataOp{})
	got := map[uint64]string{}
	for len(got) < 4 {
		frame, err := readWorkerFrame(outR, framedRoom)
		fsMust(t, err)
		id, r, err := parseWorkerReply(frame)
		fsMust(t, err)
		switch {
		case r.err != nil:
			got[id] = fmt.Sprintf("error %d %s", r.err.(*rpcError).Code, r.err.(*rpcError).Message)
		case r.result != nil:
			got[id] = string(r.result.(framedJSON).buf[r.result.(framedJSON).head:])
		default:
			got[id] = "descriptor"
		}
	}
	want := map[uint64]string{
		2: `{"dataBase64":"aGVsbG8="}`,
		3: "error -32004 No such file or directory (os error 2)",
		4: "descriptor",
		5: "error -32603 fs sandbox worker: unknown method `fs/bogus`",
	}
	if !maps.Equal(got, want) {
		t.Errorf("answers %v, want %v", got, want)
	}
	var b [8]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(fds[0], b[:], oob, 0)
	fsMust(t, err)
	rights, err := descriptorsIn(oob[:oobn])
	if err != nil || n != 8 || binary.BigEndian.Uint64(b[:]) != 4 || len(rights) != 1 {
		t.Fatalf("descriptor message: %d bytes %x, %v %v", n, b, rights, err)
	}
	f := os.NewFile(uintptr(rights[0]), "received")
	if data, _ := io.ReadAll(f); string(data) != "hello" {
		t.Errorf("the descriptor reads %q", data)
	}
	f.Close()
	// Request 1 waits on the FIFO; a cancel ends it with an error.
	send(1, "", nil)
	frame, err := readWorkerFrame(outR, framedRoom)
	fsMust(t, err)
	if id, r, err := parseWorkerReply(frame); err != nil || id != 1 || r.err == nil {
		t.Errorf("the cancelled request: %d %+v %v, want an error for 1", id, r, err)
	}
	inW.Close()
	select {
	case s := <-status:
		if s != 0 {
			t.Errorf("exit status %d at the end of input", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the worker did not end with its input")
	}
}

// TestWorkerProfile: the network is always off, and a restricted-read profile gains the
// minimal roots, unresolved, and the worker's binary.
func TestWorkerProfile(t *testing.T) {
	p := &sandboxProfile{Kind: profileManaged, Network: true, Write: []string{"/w"}}
	wp := workerProfile(p, "/opt/exec-server")
	if !slices.Contains(wp.Read, "/opt/exec-server") {
		t.Errorf("read roots %v lack the worker's binary", wp.Read)
	}
	if wp.Network || !p.Network {
		t.Errorf("network %v (original %v), want off in the worker's copy only", wp.Network, p.Network)
	}
	for _, root := range minimalReadRoots {
		if !slices.Contains(wp.Read, root) {
			t.Errorf("read roots %v lack %s", wp.Read, root)
		}
	}
	full := workerProfile(&sandboxProfile{Kind: profileManaged, FullRead: true, Write: []string{"/w"}}, "/opt/exec-server")
	if len(full.Read) != 0 {
		t.Errorf("a full-read profile gained read roots %v", full.Read)
	}
}

// sandboxedBench runs op through a real server and websocket under a workspace-write
// sandbox of one directory, and reports the median as p50-ms.
func sandboxedBench(b *testing.B, op func(tc *testClient, dir string, sb json.RawMessage, i int)) {
	ts := sandboxedFSServer(b)
	tc := ts.connect(b)
	dir := b.TempDir()
	sb := json.RawMessage(workspaceWriteSandboxOf(dir))
	op(tc, dir, sb, -1) // starts the worker
	var times []time.Duration
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		op(tc, dir, sb, i)
		times = append(times, time.Since(start))
		i++
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2])/float64(time.Millisecond), "p50-ms")
}

func BenchmarkSandboxedWriteFile4K(b *testing.B) {
	data := base64.StdEncoding.EncodeToString(make([]byte, 4<<10))
	b.SetBytes(4 << 10)
	sandboxedBench(b, func(tc *testClient, dir string, sb json.RawMessage, _ int) {
		if _, err := tc.call("fs/writeFile", map[string]any{"path": fileURI(filepath.Join(dir, "f")), "dataBase64": data, "sandbox": sb}); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkSandboxedCreateDirectory(b *testing.B) {
	sandboxedBench(b, func(tc *testClient, dir string, sb json.RawMessage, i int) {
		path := filepath.Join(dir, "d"+strconv.Itoa(i))
		if _, err := tc.call("fs/createDirectory", map[string]any{"path": fileURI(path), "sandbox": sb}); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkSandboxedRemove(b *testing.B) {
	sandboxedBench(b, func(tc *testClient, dir string, sb json.RawMessage, i int) {
		path := filepath.Join(dir, "r")
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			b.Fatal(err)
		}
		if _, err := tc.call("fs/remove", map[string]any{"path": fileURI(path), "sandbox": sb}); err != nil {
			b.Fatal(err)
		}
	})
}
