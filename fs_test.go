package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// makeFSFixture builds the tree the vectors of testdata/fs run on:
//
//	fs/   a.txt "hello world\n", empty, link -> a.txt, dangling -> missing, loop -> loop,
//	      d1/, sub/only.txt, fifo, big (sparse, one byte over the fs/readFile limit)
//	fs2/  f, dirlink -> ../fs/d1, dangling -> nowhere, fifo
//	fs3/  .hidden/h, dir/g, dir/sub/f, dirlink -> dir, fifo, file
func makeFSFixture(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"fs/a.txt": "hello world\n", "fs/empty": "", "fs/sub/only.txt": "only\n", "fs2/f": "f\n",
		"fs3/.hidden/h": "h\n", "fs3/dir/g": "g\n", "fs3/dir/sub/f": "f\n", "fs3/file": "file\n",
	}
	for name, data := range files {
		fsWrite(t, filepath.Join(root, name), data)
	}
	fsMust(t, os.Mkdir(filepath.Join(root, "fs/d1"), 0o755))
	for link, target := range map[string]string{
		"fs/link": "a.txt", "fs/dangling": "missing", "fs/loop": "loop",
		"fs2/dirlink": "../fs/d1", "fs2/dangling": "nowhere", "fs3/dirlink": "dir",
	} {
		fsMust(t, os.Symlink(target, filepath.Join(root, link)))
	}
	for _, fifo := range []string{"fs/fifo", "fs2/fifo", "fs3/fifo"} {
		fsMust(t, syscall.Mkfifo(filepath.Join(root, fifo), 0o644))
	}
	big, err := os.Create(filepath.Join(root, "fs/big"))
	fsMust(t, err)
	fsMust(t, big.Truncate(maxReadFileBytes+1))
	fsMust(t, big.Close())
	return root
}

// fsSession starts a server, connects a client to it and returns the client and an empty
// directory for the test's files.
func fsSession(t *testing.T) (*testClient, string) {
	t.Helper()
	return startTestServer(t).connect(t), t.TempDir()
}

func fsMust(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func fsWrite(t testing.TB, path, data string) {
	t.Helper()
	fsMust(t, os.MkdirAll(filepath.Dir(path), 0o755))
	fsMust(t, os.WriteFile(path, []byte(data), 0o644))
}

// TestFSVectors replays testdata/fs/*.txt, each on a fresh fixture and connection.
func TestFSVectors(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the vectors name Linux paths and errors")
	}
	files, _ := filepath.Glob("testdata/fs/*.txt")
	if len(files) == 0 {
		t.Fatal("no vectors in testdata/fs")
	}
	ts := startTestServer(t)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			root := makeFSFixture(t)
			real, err := filepath.EvalSymlinks(root)
			fsMust(t, err)
			playVectors(t, ts.url, file, map[string]string{"{root}": fileURI(root), "{rootpath}": root, "{real}": fileURI(real)})
		})
	}
}

// fsCall calls method with params built from a JSON template whose {root} is root's URI.
func fsCall(tc *testClient, root, method, params string) (json.RawMessage, *rpcError) {
	tc.t.Helper()
	var p any
	if err := json.Unmarshal([]byte(strings.ReplaceAll(params, "{root}", fileURI(root))), &p); err != nil {
		tc.t.Fatal(err)
	}
	return tc.call(method, p)
}

func fsMustCall(tc *testClient, root, method, params string) json.RawMessage {
	tc.t.Helper()
	res, err := fsCall(tc, root, method, params)
	if err != nil {
		tc.t.Fatalf("%s %s: error %d %s", method, params, err.Code, err.Message)
	}
	return res
}

func fsReadString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	fsMust(t, err)
	return string(b)
}

func fsInode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	fsMust(t, err)
	return uint64(fi.Sys().(*syscall.Stat_t).Ino)
}

func TestFSWriteFileReplacesALoneFileAtomicallyKeepingItsMode(t *testing.T) {
	tc, root := fsSession(t)
	path := filepath.Join(root, "f")
	fsWrite(t, path, "old")
	fsMust(t, os.Chmod(path, 0o640))
	before := fsInode(t, path)
	old, err := os.Open(path)
	fsMust(t, err)
	defer old.Close()

	fsMustCall(tc, root, "fs/writeFile", `{"path":"{root}/f","dataBase64":"bmV3"}`)
	if got := fsReadString(t, path); got != "new" {
		t.Errorf("content %q, want new", got)
	}
	if fsInode(t, path) == before {
		t.Error("the file was rewritten in place, want a rename over it")
	}
	if b, _ := fsReadAt0(old); string(b) != "old" {
		t.Errorf("a reader of the old file saw %q: the replacement was not atomic", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640 kept", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(root); len(ents) != 1 {
		t.Errorf("temporary files left behind: %v", ents)
	}
}

func fsReadAt0(f *os.File) ([]byte, error) {
	b := make([]byte, 64)
	n, err := f.ReadAt(b, 0)
	return b[:n], err
}

// TestFSWritesKeepFilePermissions runs as a user the permission bits bind (root is not
// one): a rename needs only the directory's permission, so an atomic write must not replace a
// file the user may not write; a writable file in a read-only directory is written in place.
func TestFSWritesKeepFilePermissions(t *testing.T) {
	url, dir := fsUnprivilegedServer(t)
	tc := (&testServer{url: url}).connect(t)
	ro, src := filepath.Join(dir, "ro"), filepath.Join(dir, "src")
	fsWrite(t, ro, "old")
	fsWrite(t, src, "new")
	fsMust(t, os.Chmod(ro, 0o444))
	sub := filepath.Join(dir, "rodir")
	fsWrite(t, filepath.Join(sub, "f"), "old")
	fsOwn(t, dir, ro, src, sub, filepath.Join(sub, "f"))
	fsMust(t, os.Chmod(sub, 0o555))
	t.Cleanup(func() { os.Chmod(sub, 0o755) }) // for the directory's removal

	for _, tt := range []struct{ method, params string }{
		{"fs/writeFile", `{"path":"{root}/ro","dataBase64":"bmV3"}`},
		{"fs/copy", `{"sourcePath":"{root}/src","destinationPath":"{root}/ro","recursive":false}`},
	} {
		_, err := fsCall(tc, dir, tt.method, tt.params)
		if err == nil || err.Code != codeInvalidRequest || err.Message != "Permission denied (os error 13)" {
			t.Errorf("%s onto a read-only file: %+v, want -32600 Permission denied", tt.method, err)
		}
		if got := fsReadString(t, ro); got != "old" {
			t.Fatalf("%s replaced a read-only file: content %q", tt.method, got)
		}
	}
	fsMustCall(tc, dir, "fs/writeFile", `{"path":"{root}/rodir/f","dataBase64":"bmV3"}`)
	if got := fsReadString(t, filepath.Join(sub, "f")); got != "new" {
		t.Errorf("file in a read-only directory: content %q, want new", got)
	}
}

// fsUnprivilegedUID is the user fsUnprivilegedServer runs the server as when the tests run as
// root: "nobody".
const fsUnprivilegedUID = 65534

// fsUnprivilegedServer returns the URL of a server whose permission checks are real, and a
// directory for its files (chown them to it with fsOwn). Run as root, it starts the built
// binary as fsUnprivilegedUID; otherwise an in-process server is unprivileged already.
func fsUnprivilegedServer(t *testing.T) (url, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return startTestServer(t).url, t.TempDir()
	}
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin, err := buildServer()
	fsMust(t, err)
	dir, err = os.MkdirTemp("", "exec-server-unprivileged")
	fsMust(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	fsMust(t, os.Chmod(dir, 0o755)) // the user must reach the binary and the files
	data, err := os.ReadFile(bin)
	fsMust(t, err)
	fsMust(t, os.WriteFile(filepath.Join(dir, "exec-server"), data, 0o755))
	cmd := exec.Command(filepath.Join(dir, "exec-server"), "--listen", "ws://127.0.0.1:0")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: fsUnprivilegedUID, Gid: fsUnprivilegedUID}}
	stdout, err := cmd.StdoutPipe()
	fsMust(t, err)
	fsMust(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the unprivileged server said nothing: %v", err)
	}
	files := filepath.Join(dir, "files")
	fsMust(t, os.Mkdir(files, 0o755))
	fsOwn(t, files)
	return strings.TrimSpace(line), files
}

// fsOwn gives paths to the user of fsUnprivilegedServer (a no-op when the tests are not root).
func fsOwn(t *testing.T, paths ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	for _, p := range paths {
		fsMust(t, os.Lchown(p, fsUnprivilegedUID, fsUnprivilegedUID))
	}
}

// TestFSNeverOpensADevice reads and opens a character device whose open fails (no driver):
// the type is checked before the open, so the answer is "not a file", never the open's error.
// An open alone has effects on some devices (a watchdog starts counting) and FIFOs (a blocked
// writer is released).
func TestFSNeverOpensADevice(t *testing.T) {
	root := t.TempDir()
	dev := filepath.Join(root, "dev")
	if err := syscall.Mknod(dev, syscall.S_IFCHR|0o600, 0); err != nil {
		t.Skipf("mknod: %v", err)
	}
	if f, err := os.OpenFile(dev, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
		f.Close()
		t.Skip("device 0,0 opens on this system")
	}
	ts := startTestServer(t)
	tc := ts.connect(t)
	want := "path `" + dev + "` is not a file"
	for _, tt := range []struct{ method, params string }{
		{"fs/readFile", `{"path":"{root}/dev"}`},
		{"fs/open", `{"handleId":"r","path":"{root}/dev"}`},
		{"fs/open", `{"handleId":"w","path":"{root}/dev","mode":"replace"}`},
	} {
		if _, err := fsCall(tc, root, tt.method, tt.params); err == nil || err.Code != codeInvalidRequest || err.Message != want {
			t.Errorf("%s %s: %+v, want -32600 %q", tt.method, tt.params, err, want)
		}
	}
}

// fsLimitedTransport is an in-memory transport that, like the relay's Noise channel, cannot
// carry a message over limit bytes: writing one fails, which ends the connection.
type fsLimitedTransport struct {
	limit int
	in    chan []byte
	out   chan []byte
	done  chan struct{}
	once  sync.Once
}

func (m *fsLimitedTransport) maxMessageBytes() int { return m.limit }

func (m *fsLimitedTransport) next() (message, error) {
	select {
	case b := <-m.in:
		return message{data: b}, nil
	case <-m.done:
		return message{}, io.EOF
	}
}

func (m *fsLimitedTransport) peer() string { return "limited" }

func (m *fsLimitedTransport) writeMessage(b []byte) error {
	if len(b) > m.limit {
		return fmt.Errorf("message of %d bytes over the limit of %d", len(b), m.limit)
	}
	select {
	case m.out <- append([]byte(nil), b...):
		return nil
	case <-m.done:
		return io.ErrClosedPipe
	}
}

func (m *fsLimitedTransport) close(error) {
	m.once.Do(func() { close(m.done) })
}

// call sends a request and returns the next message, or fails when the connection ends.
func (m *fsLimitedTransport) call(t *testing.T, req string) string {
	t.Helper()
	m.in <- []byte(req)
	select {
	case b := <-m.out:
		return string(b)
	case <-m.done:
		t.Fatalf("%.80s: the connection ended", req)
	}
	return ""
}

// TestFSReadFileFitsTheTransport: on a transport with a message limit (the relay), fs/readFile
// answers what fits and refuses the rest with the reference's error, naming the lower limit,
// instead of writing an answer the transport must drop the connection for (docs/protocol.md
// §7.4).
func TestFSReadFileFitsTheTransport(t *testing.T) {
	ts := startTestServer(t)
	m := &fsLimitedTransport{limit: 1 << 20, in: make(chan []byte), out: make(chan []byte, 4), done: make(chan struct{})}
	ts.srv.conns.Add(1)
	go func() {
		defer ts.srv.conns.Done()
		ts.srv.serveConn(m, "test transport")
	}()
	t.Cleanup(func() { m.close(nil) })
	m.call(t, `{"id":1,"method":"initialize","params":{"clientName":"limited"}}`)
	m.in <- []byte(`{"method":"initialized"}`)

	limit := (m.limit - readFileAnswerOverhead) / 4 * 3
	root := t.TempDir()
	fsMust(t, os.WriteFile(filepath.Join(root, "fits"), make([]byte, limit), 0o644))
	fsMust(t, os.WriteFile(filepath.Join(root, "big"), make([]byte, 1<<20), 0o644))
	if got := m.call(t, `{"id":"a-long-request-id-of-sixty-four-bytes-0123456789abcdefghijklmn","method":"fs/readFile","params":{"path":"`+fileURI(filepath.Join(root, "fits"))+`"}}`); !strings.Contains(got, `"result":{"dataBase64":"AAAA`) {
		t.Errorf("a file that fits: %.100s", got)
	}
	want := fmt.Sprintf(`{"error":{"code":-32600,"message":"file is too large to read: limit is %d bytes"},"id":3}`, limit)
	if got := m.call(t, `{"id":3,"method":"fs/readFile","params":{"path":"`+fileURI(filepath.Join(root, "big"))+`"}}`); got != want {
		t.Errorf("a file that does not fit:\n got %.200s\nwant %s", got, want)
	}
	if got := m.call(t, `{"id":4,"method":"environment/status"}`); got != `{"id":4,"result":{"status":"ready"}}` {
		t.Errorf("after the refusal: %s", got)
	}
}

func TestFSWriteFileKeepsTheInodeOfHardLinks(t *testing.T) {
	tc, root := fsSession(t)
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	fsWrite(t, a, "old")
	fsMust(t, os.Link(a, b))
	before := fsInode(t, a)
	fsMustCall(tc, root, "fs/writeFile", `{"path":"{root}/a","dataBase64":"bmV3"}`)
	if fsReadString(t, a) != "new" || fsReadString(t, b) != "new" {
		t.Errorf("a=%q b=%q, want both new", fsReadString(t, a), fsReadString(t, b))
	}
	if fsInode(t, a) != before || fsInode(t, b) != before {
		t.Error("the shared inode was replaced")
	}
}

func TestFSWriteFileWritesThroughSymlinks(t *testing.T) {
	tc, root := fsSession(t)
	target := filepath.Join(root, "target")
	fsWrite(t, target, "old")
	before := fsInode(t, target)
	fsMust(t, os.Symlink("target", filepath.Join(root, "link")))
	fsMust(t, os.Symlink("created", filepath.Join(root, "dangling")))

	fsMustCall(tc, root, "fs/writeFile", `{"path":"{root}/link","dataBase64":"bmV3"}`)
	if fi, _ := os.Lstat(filepath.Join(root, "link")); fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the symlink was replaced by a file")
	}
	if fsReadString(t, target) != "new" || fsInode(t, target) != before {
		t.Error("the target was not written in place")
	}
	fsMustCall(tc, root, "fs/writeFile", `{"path":"{root}/dangling","dataBase64":"bmV3"}`)
	if fsReadString(t, filepath.Join(root, "created")) != "new" {
		t.Error("writing through a dangling symlink did not create its target")
	}
}

func TestFSWriteFileToAFIFOWithoutReaderFailsInsteadOfBlocking(t *testing.T) {
	tc, root := fsSession(t)
	fsMust(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	_, err := fsCall(tc, root, "fs/writeFile", `{"path":"{root}/fifo","dataBase64":"aGkK"}`)
	if err == nil || err.Code != codeInternal || !strings.Contains(err.Message, "(os error 6)") {
		t.Errorf("got %+v, want -32603 ENXIO", err)
	}
}

func TestFSDotDotIsResolvedBeforeSymlinks(t *testing.T) {
	tc, _ := fsSession(t)
	root := makeFSFixture(t)
	// fs2/dirlink -> ../fs/d1: the kernel would take dirlink/.. to fs; the path is cleaned
	// first, so it names fs2 itself, as in the reference.
	res := fsMustCall(tc, root, "fs/readFile", `{"path":"{root}/fs2/dirlink/../f"}`)
	if string(res) != `{"dataBase64":"Zgo="}` {
		t.Errorf("got %s, want fs2/f", res)
	}
	res = fsMustCall(tc, root, "fs/canonicalize", `{"path":"{root}/fs2/dirlink/.."}`)
	real, _ := filepath.EvalSymlinks(filepath.Join(root, "fs2"))
	if want := `{"path":"` + fileURI(real) + `"}`; string(res) != want {
		t.Errorf("got %s, want %s", res, want)
	}
}

func TestFSReadDirectoryFollowsSymlinksAndOmitsDanglingOnes(t *testing.T) {
	tc, _ := fsSession(t)
	root := makeFSFixture(t)
	var res readDirectoryResult
	fsMust(t, json.Unmarshal(fsMustCall(tc, root, "fs/readDirectory", `{"path":"{root}/fs2"}`), &res))
	slices.SortFunc(res.Entries, func(a, b dirEntry) int { return strings.Compare(a.FileName, b.FileName) })
	want := []dirEntry{{"dirlink", true, false}, {"f", false, true}, {"fifo", false, false}}
	if !slices.Equal(res.Entries, want) {
		t.Errorf("got %+v, want %+v", res.Entries, want)
	}
}

func TestFSCopyOfAFileOntoItselfLeavesItIntact(t *testing.T) {
	tc, root := fsSession(t)
	fsWrite(t, filepath.Join(root, "a"), "keep")
	fsMust(t, os.Link(filepath.Join(root, "a"), filepath.Join(root, "hard")))
	fsMust(t, os.Symlink("a", filepath.Join(root, "soft")))
	for _, dst := range []string{"a", "hard", "soft", "./a", "x/../a"} {
		fsMustCall(tc, root, "fs/copy", `{"sourcePath":"{root}/a","destinationPath":"{root}/`+dst+`","recursive":false}`)
		if got := fsReadString(t, filepath.Join(root, "a")); got != "keep" {
			t.Fatalf("copy onto %s: content %q, want keep", dst, got)
		}
	}
}

func TestFSCopyKeepsPermissionsAndWritesThroughHardLinks(t *testing.T) {
	tc, root := fsSession(t)
	src, dst, other := filepath.Join(root, "src"), filepath.Join(root, "dst"), filepath.Join(root, "other")
	fsWrite(t, src, "new")
	fsMust(t, os.Chmod(src, 0o750))
	fsMustCall(tc, root, "fs/copy", `{"sourcePath":"{root}/src","destinationPath":"{root}/dst","recursive":false}`)
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o750 || fsReadString(t, dst) != "new" {
		t.Errorf("copy: mode %v content %q, want 0750 new", fi.Mode().Perm(), fsReadString(t, dst))
	}
	fsWrite(t, dst, "old")
	fsMust(t, os.Link(dst, other))
	fsMustCall(tc, root, "fs/copy", `{"sourcePath":"{root}/src","destinationPath":"{root}/dst","recursive":false}`)
	if fsReadString(t, other) != "new" {
		t.Error("copy onto a hard-linked file replaced it instead of writing the shared inode")
	}
}

func TestFSCopyTreeMergesCopiesSymlinksAndSkipsFIFOs(t *testing.T) {
	tc, _ := fsSession(t)
	root := makeFSFixture(t)
	dst := filepath.Join(root, "out")
	fsWrite(t, filepath.Join(dst, "kept"), "kept")
	fsWrite(t, filepath.Join(dst, "f"), "overwritten")
	fsMustCall(tc, root, "fs/copy", `{"sourcePath":"{root}/fs2","destinationPath":"{root}/out","recursive":true}`)
	if fsReadString(t, filepath.Join(dst, "kept")) != "kept" || fsReadString(t, filepath.Join(dst, "f")) != "f\n" {
		t.Error("the copy did not merge into the existing directory")
	}
	for link, target := range map[string]string{"dirlink": "../fs/d1", "dangling": "nowhere"} {
		if got, err := os.Readlink(filepath.Join(dst, link)); err != nil || got != target {
			t.Errorf("%s: readlink %q, %v; want a symlink to %s", link, got, err, target)
		}
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); err == nil {
		t.Error("the FIFO was copied")
	}
}

// TestFSHandleRequestsKeepTheirOrder pipelines open, overlapping writes and close on one
// handle without waiting: each write must land after the one before, and close after all.
func TestFSHandleRequestsKeepTheirOrder(t *testing.T) {
	tc, root := fsSession(t)
	var replies []<-chan testReply
	replies = append(replies, tc.start("fs/open", map[string]any{"handleId": "w", "path": fileURI(filepath.Join(root, "f")), "mode": "replace"}))
	want := ""
	for i := 0; i < 200; i++ {
		want = strings.Repeat(string(rune('a'+i%26)), 200-i)
		replies = append(replies, tc.start("fs/writeBlock", map[string]any{"handleId": "w", "offset": 0, "chunk": base64.StdEncoding.EncodeToString([]byte(want))}))
	}
	replies = append(replies, tc.start("fs/close", map[string]any{"handleId": "w"}))
	for i, ch := range replies {
		if r := <-ch; r.Err != nil {
			t.Fatalf("request %d: %+v", i, r.Err)
		}
	}
	// Each write is shorter than the one before: the file holds the last chunk over the
	// tail of the earlier ones.
	got := fsReadString(t, filepath.Join(root, "f"))
	if !strings.HasPrefix(got, want) || len(got) != 200 {
		t.Errorf("file %q..., want %q first and 200 bytes", got[:min(20, len(got))], want)
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1] && got[i] != got[i-1]-1 && !(got[i-1] == 'a' && got[i] == 'z') {
			t.Fatalf("byte %d: %q after %q: writes were reordered", i, got[i], got[i-1])
		}
	}
}

func TestFSHandlesAreBoundedPerConnection(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	root := makeFSFixture(t)
	for i := 0; i < defaultLimits.openHandles; i++ {
		fsMustCall(tc, root, "fs/open", fmt.Sprintf(`{"handleId":"h%d","path":"{root}/fs/a.txt"}`, i))
	}
	_, err := fsCall(tc, root, "fs/open", `{"handleId":"one-more","path":"{root}/fs/a.txt"}`)
	if err == nil || err.Code != codeInvalidRequest || err.Message != "at most 128 file handles may be open per connection (--max-open-handles)" {
		t.Fatalf("handle %d: %+v", defaultLimits.openHandles+1, err)
	}
	fsMustCall(tc, root, "fs/close", `{"handleId":"h0"}`)
	fsMustCall(tc, root, "fs/open", `{"handleId":"one-more","path":"{root}/fs/a.txt"}`)
	// Another connection has handles of its own.
	tc2 := ts.connect(t)
	fsMustCall(tc2, root, "fs/open", `{"handleId":"h1","path":"{root}/fs/a.txt"}`)
}

// TestFSConnectionEndClosesHandlesAndWatches checks that nothing a connection opened outlives
// it: file descriptors (handles, the inotify instance) and, on resume, the handles themselves.
func TestFSConnectionEndClosesHandlesAndWatches(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts /proc/self/fd")
	}
	ts := startTestServer(t)
	root := makeFSFixture(t)
	before := fsOpenFDs(t)
	tc := ts.connect(t)
	for i := 0; i < 5; i++ {
		fsMustCall(tc, root, "fs/open", fmt.Sprintf(`{"handleId":"h%d","path":"{root}/fs/a.txt"}`, i))
	}
	fsMustCall(tc, root, "fs/watchMissing", `{"watchId":1,"missing":["{root}/never"]}`)
	if n := fsOpenFDs(t); n < before+6 {
		t.Fatalf("%d descriptors open, want at least %d", n, before+6)
	}
	session := tc.sessionID
	tc.close()
	ts.srv.conns.Wait()
	if n := fsOpenFDs(t); n > before {
		t.Errorf("%d descriptors open after the connection ended, want at most %d", n, before)
	}
	tc2 := ts.dial(t)
	tc2.initialize(&session)
	if _, err := fsCall(tc2, root, "fs/readBlock", `{"handleId":"h1","offset":0,"len":1}`); err == nil || err.Code != codeNotFound {
		t.Errorf("a handle survived its connection: %+v", err)
	}
}

func fsOpenFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	fsMust(t, err)
	return len(ents)
}

// TestFSReadBlockOf1GiBKeepsMemoryFlat reads a sparse 1 GiB file in 1 MiB blocks, four in
// flight, and bounds the heap while it does. The client is a bare websocket that checks each
// answer's shape without decoding it, so the time goes to the server. The race detector makes
// the server's base64 ten times slower: under it the file is 128 MiB.
func TestFSReadBlockOf1GiBKeepsMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 1 GiB")
	}
	size := 1 << 30
	if fsRaceBuild() {
		size = 128 << 20
	}
	ts := startTestServer(t)
	root := t.TempDir()
	f, err := os.Create(filepath.Join(root, "big"))
	fsMust(t, err)
	fsMust(t, f.Truncate(int64(size)))
	f.Close()
	ws := fsRawSession(t, ts.url, 0)
	fsRawCall(t, ws, `{"id":1,"method":"fs/open","params":{"handleId":"big","path":"`+fileURI(filepath.Join(root, "big"))+`"}}`)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	const block, inFlight = maxReadBlockBytes, 4
	blocks := size / block
	// 1 MiB of zeros is 1398102 "A"s and "==".
	const suffix = `","eof":false}}`
	wantLen := len(`{"id":NNNN,"result":{"chunk":"`) + base64.StdEncoding.EncodedLen(block) + len(suffix)
	sent, got := 0, 0
	for got < blocks {
		for sent < blocks && sent-got < inFlight {
			req := fmt.Sprintf(`{"id":%d,"method":"fs/readBlock","params":{"handleId":"big","offset":%d,"len":%d}}`, 1000+sent, sent*block, block)
			fsMust(t, ws.writeMessageOp(wsOpText, []byte(req)))
			sent++
		}
		msg, err := ws.readMessage()
		fsMust(t, err)
		chunk, ok := strings.CutPrefix(string(msg[min(len(msg), 10):]), `,"result":{"chunk":"`)
		if !ok || len(msg) != wantLen || !strings.HasSuffix(chunk, suffix) || strings.Count(chunk, "A") != 1398102 {
			t.Fatalf("block %d: answer of %d bytes: %.80s", got, len(msg), msg)
		}
		got++
		if got%64 == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	}
	const bound = 64 << 20
	if peak > base+bound {
		t.Errorf("heap in use grew from %d MiB to %d MiB reading %d MiB, want under %d MiB more", base>>20, peak>>20, size>>20, bound>>20)
	}
	t.Logf("heap in use: %d MiB before, %d MiB at most while reading %d MiB", base>>20, peak>>20, size>>20)
}

// fsRaceBuild says whether the test binary was built with -race.
func fsRaceBuild() bool {
	bi, ok := debug.ReadBuildInfo()
	return ok && slices.Contains(bi.Settings, debug.BuildSetting{Key: "-race", Value: "true"})
}

// fsRawSession opens a bare websocket (frames up to maxFrame, 0 for the default) and runs
// initialize and initialized on it.
func fsRawSession(t testing.TB, url string, maxFrame int) *wsConn {
	t.Helper()
	ws, _, err := dialWebsocket(context.Background(), url, nil, nil, wsOptions{maxFrame: maxFrame})
	fsMust(t, err)
	t.Cleanup(func() { ws.close(nil) })
	fsRawCall(t, ws, `{"id":1,"method":"initialize","params":{"clientName":"raw"}}`)
	fsMust(t, ws.writeMessageOp(wsOpText, []byte(`{"method":"initialized"}`)))
	return ws
}

// fsRawCall sends one request and returns the next message, which must not be an error.
func fsRawCall(t testing.TB, ws *wsConn, req string) []byte {
	t.Helper()
	fsMust(t, ws.writeMessageOp(wsOpText, []byte(req)))
	msg, err := ws.readMessage()
	fsMust(t, err)
	if strings.HasPrefix(string(msg), `{"error"`) {
		t.Fatalf("%s: %s", req, msg)
	}
	return msg
}

func TestFSWatchMissingSeesAFileAppearOnce(t *testing.T) {
	tc, root := fsSession(t)
	res := fsMustCall(tc, root, "fs/watchMissing", `{"watchId":7,"missing":["{root}/will-appear","{root}/will-appear2"]}`)
	if string(res) != `{"watching":true}` {
		t.Fatalf("watchMissing: %s", res)
	}
	fsMustCall(tc, root, "fs/writeFile", `{"path":"{root}/will-appear","dataBase64":"aGkK"}`)
	_, at := tc.waitNote(0, 10*time.Second, func(n testNote) bool {
		return n.Method == "fs/missingChanged" && string(n.Params) == `{"watchId":7}`
	})
	// The watch is consumed: the second path appearing says nothing. Watch 8, armed after,
	// fires after it, so its notification proves nothing came for 7 in between.
	fsMustCall(tc, root, "fs/watchMissing", `{"watchId":8,"missing":["{root}/third"]}`)
	fsWrite(t, filepath.Join(root, "will-appear2"), "")
	fsWrite(t, filepath.Join(root, "third"), "")
	tc.waitNote(at+1, 10*time.Second, func(n testNote) bool { return string(n.Params) == `{"watchId":8}` })
	for _, n := range tc.notesSnapshot()[at+1:] {
		if string(n.Params) == `{"watchId":7}` {
			t.Error("watch 7 fired twice")
		}
	}
}

func TestFSWatchMissingSeesAMissingParentAppear(t *testing.T) {
	tc, root := fsSession(t)
	fsMustCall(tc, root, "fs/watchMissing", `{"watchId":1,"missing":["{root}/x/y/z"]}`)
	fsMustCall(tc, root, "fs/createDirectory", `{"path":"{root}/x"}`)
	tc.waitNote(0, 10*time.Second, func(n testNote) bool { return string(n.Params) == `{"watchId":1}` })
}

// TestFSWatchMissingRearmsWhenTheAncestorGoes removes the watched ancestor and creates it
// again: whichever the server sees first, the re-creation fires the watch.
func TestFSWatchMissingRearmsWhenTheAncestorGoes(t *testing.T) {
	tc, root := fsSession(t)
	fsMust(t, os.Mkdir(filepath.Join(root, "a"), 0o755))
	fsMustCall(tc, root, "fs/watchMissing", `{"watchId":1,"missing":["{root}/a/b/c"]}`)
	fsMust(t, os.Remove(filepath.Join(root, "a")))
	fsMust(t, os.Mkdir(filepath.Join(root, "a"), 0o755))
	tc.waitNote(0, 10*time.Second, func(n testNote) bool { return string(n.Params) == `{"watchId":1}` })
}

func TestFSWatchMissingAnswersFalseWhenThereIsNothingToWatch(t *testing.T) {
	tc, _ := fsSession(t)
	root := makeFSFixture(t)
	for _, tt := range []struct{ name, params string }{
		{"empty list", `{"watchId":1,"missing":[]}`},
		{"all exist", `{"watchId":1,"missing":["{root}/fs/a.txt","{root}/fs/dangling"]}`},
		{"id in use", `{"watchId":2,"missing":["{root}/other"]}`},
	} {
		if tt.name == "id in use" {
			fsMustCall(tc, root, "fs/watchMissing", `{"watchId":2,"missing":["{root}/missing"]}`)
		}
		if res := fsMustCall(tc, root, "fs/watchMissing", tt.params); string(res) != `{"watching":false}` {
			t.Errorf("%s: %s", tt.name, res)
		}
	}
	if _, err := fsCall(tc, root, "fs/watchMissing", `{"watchId":-1,"missing":[]}`); err == nil || err.Code != codeInvalidParams {
		t.Errorf("negative watchId: %+v", err)
	}
	if _, err := fsCall(tc, root, "fs/watchMissing", `{"watchId":3,"missing":["relative"]}`); err == nil || err.Code != codeInvalidParams {
		t.Errorf("relative path: %+v", err)
	}
}

// TestFSWatchMissingIsBoundedPerConnection watches as many paths as a connection may, then
// one more; once the first watch fires its paths are free again.
func TestFSWatchMissingIsBoundedPerConnection(t *testing.T) {
	tc, root := fsSession(t)
	paths := make([]string, defaultLimits.watchedPaths)
	for i := range paths {
		paths[i] = fileURI(filepath.Join(root, "m", strconv.Itoa(i)))
	}
	if res := tc.mustCall("fs/watchMissing", map[string]any{"watchId": 1, "missing": paths}); string(res) != `{"watching":true}` {
		t.Fatalf("watch 1: %s", res)
	}
	one := map[string]any{"watchId": 2, "missing": []string{fileURI(filepath.Join(root, "x"))}}
	if e := tc.callErr("fs/watchMissing", one); e.Code != codeInvalidRequest || e.Message != "at most 4096 missing paths may be watched per connection (--max-watched-paths)" {
		t.Errorf("one path over the bound: %+v", e)
	}
	fsMust(t, os.Mkdir(filepath.Join(root, "m"), 0o755))
	tc.waitNote(0, 10*time.Second, func(n testNote) bool { return string(n.Params) == `{"watchId":1}` })
	if res := tc.mustCall("fs/watchMissing", one); string(res) != `{"watching":true}` {
		t.Errorf("after watch 1 fired: %s", res)
	}
}

// TestMissingWatchesPolling drives the polling fallback (other systems, or no inotify left).
func TestMissingWatchesPolling(t *testing.T) {
	root := t.TempDir()
	fired := make(chan uint64, 4)
	ws := newMissingWatches(5*time.Millisecond, false, func(id uint64) { fired <- id })
	defer ws.close()
	if ok, _ := ws.add(1, []string{filepath.Join(root, "file")}, nil); !ok {
		t.Fatal("nothing armed")
	}
	if ok, _ := ws.add(2, []string{filepath.Join(root, "p/q/r")}, nil); !ok {
		t.Fatal("nothing armed")
	}
	if ok, _ := ws.add(1, []string{filepath.Join(root, "other")}, nil); ok {
		t.Error("watch id 1 armed twice")
	}
	fsWrite(t, filepath.Join(root, "file"), "")
	if id := <-fired; id != 1 {
		t.Errorf("fired %d, want 1", id)
	}
	fsMust(t, os.Mkdir(filepath.Join(root, "p"), 0o755))
	if id := <-fired; id != 2 {
		t.Errorf("fired %d, want 2", id)
	}
}

func BenchmarkFSGetMetadata(b *testing.B) {
	ts := startTestServer(b)
	tc := ts.connect(b)
	root := b.TempDir()
	fsWrite(b, filepath.Join(root, "f"), "x")
	params := map[string]any{"path": fileURI(filepath.Join(root, "f"))}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tc.call("fs/getMetadata", params); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFSReadFile32MiB reads a 32 MiB file whole, on a bare websocket that takes the
// answer's 43 MiB frame.
func BenchmarkFSReadFile32MiB(b *testing.B) {
	ts := startTestServer(b)
	root := b.TempDir()
	fsMust(b, os.WriteFile(filepath.Join(root, "f"), make([]byte, 32<<20), 0o644))
	ws := fsRawSession(b, ts.url, 64<<20)
	req := `{"id":2,"method":"fs/readFile","params":{"path":"` + fileURI(filepath.Join(root, "f")) + `"}}`
	b.SetBytes(32 << 20)
	b.ReportAllocs()
	for b.Loop() {
		if msg := fsRawCall(b, ws, req); len(msg) < 32<<20 {
			b.Fatalf("answer of %d bytes", len(msg))
		}
	}
}

// BenchmarkFSWriteFile4K writes 4 KiB over one file again and again, with no sandbox: the
// in-process path that BenchmarkSandboxedWriteFile4K (fs_sandbox_test.go) is compared with.
func BenchmarkFSWriteFile4K(b *testing.B) {
	ts := startTestServer(b)
	tc := ts.connect(b)
	root := b.TempDir()
	params := map[string]any{
		"path":       fileURI(filepath.Join(root, "f")),
		"dataBase64": base64.StdEncoding.EncodeToString(make([]byte, 4<<10)),
	}
	b.SetBytes(4 << 10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tc.call("fs/writeFile", params); err != nil {
			b.Fatal(err)
		}
	}
}

// workspaceWriteSandbox is the sandbox the Codex harness sends in its default workspace-write
// mode: read everything, write the working directory, deny one file, no network
// (fs_sandbox_test.go).
const workspaceWriteSandbox = `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[` +
	`{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},` +
	`{"path":{"type":"special","value":{"kind":"current_working_directory"}},"access":"write"},` +
	`{"path":{"type":"path","path":"{root}/secret"},"access":"deny"}]},"network":"restricted"},` +
	`"windowsSandboxLevel":"disabled","cwd":"{root}"}`

// TestWriteFilePipelinedKeepsEachMessage sends fs/writeFile requests back to back without
// waiting: each one's base64 is decoded in place later, on its lane, so the websocket reader
// must not read the next message into the same bytes (small messages share one reassembly
// buffer; large ones get a buffer given back by the previous write). Every file must hold
// its own content.
func TestWriteFilePipelinedKeepsEachMessage(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	root := t.TempDir()
	sizes := []int{10 << 10, 600 << 10, 100, 3 << 20, 3 << 20, 5 << 20, 200 << 10, 3 << 20, 7}
	want := make([][]byte, len(sizes))
	replies := make([]<-chan testReply, len(sizes))
	for i, n := range sizes {
		want[i] = make([]byte, n)
		for j := range want[i] {
			want[i][j] = byte(i*31 + j*7 + j>>9)
		}
		replies[i] = tc.start("fs/writeFile", map[string]string{
			"path":       fileURI(filepath.Join(root, strconv.Itoa(i))),
			"dataBase64": base64.StdEncoding.EncodeToString(want[i]),
		})
	}
	for i, ch := range replies {
		select {
		case r := <-ch:
			if r.Err != nil {
				t.Fatalf("write %d (%d bytes): error %d %s", i, sizes[i], r.Err.Code, r.Err.Message)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("write %d: no reply within a minute", i)
		}
	}
	for i := range sizes {
		got, err := os.ReadFile(filepath.Join(root, strconv.Itoa(i)))
		fsMust(t, err)
		if !slices.Equal(got, want[i]) {
			t.Errorf("file %d holds %d bytes that differ from the %d written", i, len(got), len(want[i]))
		}
	}
}

// TestMetadataResultAppendJSONIsEncodingJSON pins the hand-written encoder of fs/getMetadata's
// answer to what encoding/json makes of the same struct.
func TestMetadataResultAppendJSONIsEncodingJSON(t *testing.T) {
	for _, m := range []metadataResult{
		{},
		{IsFile: true, Size: 5, ModifiedAtMs: 1763779200000},
		{IsDirectory: true, IsSymlink: true, Size: 1 << 62, CreatedAtMs: -1, ModifiedAtMs: 1},
	} {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.appendJSON(nil); string(got) != string(want) {
			t.Errorf("appendJSON gives %s, encoding/json %s", got, want)
		}
	}
}
