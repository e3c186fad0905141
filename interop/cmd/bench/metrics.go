package main

// The metrics of issue 5. Each metric runs against one freshly launched server in one round
// and adds its samples to the rows it owns. All paths and cwds are file: URIs and
// process/start carries arg0:null, forms both the reference (0.169) and ours accept.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"
)

// childEnv is the whole environment of every benchmarked process (docs/protocol.md §6.1:
// env replaces the server's).
var childEnv = map[string]string{"PATH": "/usr/bin:/bin"}

// warmups are discarded samples before each latency series.
const warmups = 3

// cleanupTimeout bounds the clean-up requests a failed metric sends.
const cleanupTimeout = 10 * time.Second

// readBlockLen is the largest fs/readBlock length the reference allows (docs/protocol.md §7.13).
const readBlockLen = 1 << 20

// metric is one selectable measurement and the rows it fills.
type metric struct {
	name string
	rows []string
	run  func(ctx context.Context, rc *runCtx) error
}

// metrics in the order a round runs them: memory first, while the server is fresh, then
// latencies, then the heavy transfers.
var metrics = []metric{
	{"idle", []string{"idle-rss"}, idleRSS},
	{"connect", []string{"connect"}, connectLatency},
	{"getMetadata", []string{"getMetadata"}, getMetadata},
	{"start", []string{"start-pipe", "start-pty", "closed-pipe", "closed-pty"}, startLatency},
	{"sleeps", []string{"sleeps-start", "sleeps-rss", "sleeps-term"}, sleeps},
	{"conns", []string{"conns-wall", "conns-proc"}, manyConns},
	{"pipe", []string{"pipe"}, pipeThroughput},
	{"pty", []string{"pty"}, ptyThroughput},
	{"readFile", []string{"readFile"}, readFile},
	{"writeFile", []string{"writeFile"}, writeFile},
	{"readBlock", []string{"readBlock"}, readBlock},
	{"sandboxed", []string{"sb-writeFile", "sb-createDirectory", "sb-remove", "sb-getMetadata", "sb-readFile", "sb-closed-pipe", "sb-closed-pty"}, sandboxed},
	{"snapshot", []string{"snap-off", "snap-on", "snap-first"}, shellSnapshots},
}

// rowDefs are the report rows, in report order.
func rowDefs(cfg *config) []*row {
	return []*row{
		{key: "connect", title: "connect + initialize + initialized", unit: "ms", kind: latency},
		{key: "getMetadata", title: "fs/getMetadata round trip", unit: "ms", kind: latency, target: target{op: "≤", ratio: 0.5}},
		{key: "start-pipe", title: "process/start response, pipe (/bin/true)", unit: "ms", kind: latency, target: target{op: "≤", ratio: 0.25}},
		{key: "start-pty", title: "process/start response, PTY (/bin/true)", unit: "ms", kind: latency},
		{key: "closed-pipe", title: "start → process/closed, pipe", unit: "ms", kind: latency, target: target{op: "≤", ratio: 0.1}},
		{key: "closed-pty", title: "start → process/closed, PTY", unit: "ms", kind: latency, target: target{op: "≤", ratio: 0.1}},
		{key: "pipe", title: fmt.Sprintf("pipe output, head -c %s", sizeName(cfg.pipeBytes)), unit: "MB/s", kind: throughput, target: target{op: "≥", ratio: 2}},
		{key: "pty", title: fmt.Sprintf("PTY output, head -c %s", sizeName(cfg.ptyBytes)), unit: "MB/s", kind: throughput, target: target{op: "≥", ratio: 1.4, frac: 0.8}},
		{key: "readFile", title: fmt.Sprintf("fs/readFile %s", sizeName(cfg.fileBytes)), unit: "MB/s", kind: throughput, target: target{op: "≥", ratio: 2}},
		{key: "writeFile", title: fmt.Sprintf("fs/writeFile %s", sizeName(cfg.fileBytes)), unit: "MB/s", kind: throughput, target: target{op: "≥", ratio: 2}},
		{key: "readBlock", title: fmt.Sprintf("fs/readBlock %s (1 MiB blocks)", sizeName(cfg.blockBytes)), unit: "MB/s", kind: throughput},
		{key: "conns-wall", title: fmt.Sprintf("%d conns × %d processes, wall", cfg.conns, cfg.perConn), unit: "s", kind: level, target: target{op: "≤", ratio: 0.2}},
		{key: "conns-proc", title: fmt.Sprintf("%d conns × %d processes, per process start → closed", cfg.conns, cfg.perConn), unit: "ms", kind: latency},
		{key: "sleeps-start", title: fmt.Sprintf("%d concurrent sleeps: start all", cfg.sleeps), unit: "ms", kind: level},
		{key: "sleeps-rss", title: fmt.Sprintf("%d concurrent sleeps: server RSS", cfg.sleeps), unit: "MiB", kind: level, target: target{op: "≤", ratio: 0.3}},
		{key: "sleeps-term", title: fmt.Sprintf("%d concurrent sleeps: terminate all → closed", cfg.sleeps), unit: "ms", kind: level},
		{key: "idle-rss", title: "idle RSS after initialize", unit: "MiB", kind: level, target: target{op: "≤", ratio: 0.2}},
		{key: "sb-writeFile", title: "sandboxed fs/writeFile 4 KiB (workspace-write)", unit: "ms", kind: latency, target: target{op: "≤", ratio: 0.1}},
		{key: "sb-createDirectory", title: "sandboxed fs/createDirectory", unit: "ms", kind: latency, target: target{op: "≤", ratio: 0.1}},
		{key: "sb-remove", title: "sandboxed fs/remove", unit: "ms", kind: latency, target: target{op: "≤", ratio: 0.1}},
		{key: "sb-getMetadata", title: "sandboxed fs/getMetadata", unit: "ms", kind: latency, target: target{op: "≤", ratio: 0.5}},
		{key: "sb-readFile", title: "sandboxed fs/readFile 4 KiB", unit: "ms", kind: latency, target: target{op: "≤", ratio: 0.5}},
		{key: "sb-closed-pipe", title: "sandboxed start → process/closed, pipe (/bin/true)", unit: "ms", kind: latency, target: target{op: "≤", ratio: 0.2}},
		{key: "sb-closed-pty", title: "sandboxed start → process/closed, PTY (/bin/true)", unit: "ms", kind: latency, target: target{op: "≤", ratio: 0.2}},
		{key: "snap-off", title: "bash -lc, 200 ms login profile, no shellSnapshot: start → closed", unit: "ms", kind: latency},
		{key: "snap-on", title: "bash -lc, 200 ms login profile, shellSnapshot (cached): start → closed", unit: "ms", kind: latency},
		{key: "snap-first", title: "bash -lc, 200 ms login profile, shellSnapshot, first command (capture)", unit: "ms", kind: latency},
		{key: "size", title: "binary size", unit: "MB", kind: level, target: target{abs: 10.48}}, // the release cap, 10 MiB
		{key: "raw-pipe", title: fmt.Sprintf("limit only: raw pipe, head -c %s into one reader", sizeName(cfg.pipeBytes)), unit: "MB/s", kind: throughput},
		{key: "raw-conns-wall", title: fmt.Sprintf("limit only: %d goroutines × %d fork+exec+wait of /bin/true, no server", cfg.conns, cfg.perConn), unit: "s", kind: level},
		{key: "tcp", title: "limit only: loopback TCP, one connection", unit: "MB/s", kind: throughput},
		{key: "base64", title: "limit only: base64 encoding, one core", unit: "MB/s", kind: throughput},
	}
}

// runCtx is what a metric needs: the server, the fixtures, and where its figures go.
type runCtx struct {
	cfg   *config
	srv   *server
	res   *results
	side  side
	round int
	fx    *fixtures
	seq   int // makes process ids unique within a server
	logf  func(format string, a ...any)
}

func (rc *runCtx) add(key string, v ...float64) { rc.res.add(key, rc.side, rc.round, v...) }

func (rc *runCtx) connect(ctx context.Context) (*client, error) { return connect(ctx, rc.srv.url) }

// withClient runs fn on a fresh initialized connection and closes it after.
func (rc *runCtx) withClient(ctx context.Context, fn func(c *client) error) error {
	c, err := rc.connect(ctx)
	if err != nil {
		return err
	}
	defer c.close()
	return fn(c)
}

// procID returns a fresh process id.
func (rc *runCtx) procID(kind string) string {
	rc.seq++
	return fmt.Sprintf("bench-%s-%d-%d", kind, rc.round, rc.seq)
}

// fixtures are the files the fs metrics use, made once per bench run.
type fixtures struct {
	dir      string
	dirURI   string
	small    string // a small file for fs/getMetadata
	data     []byte // content of big
	big      string // cfg.fileBytes of random data, for fs/readFile
	sparse   string // cfg.blockBytes sparse file, for fs/readBlock (page-cache reads, no disk)
	writeDst string // fs/writeFile target
}

func makeFixtures(cfg *config) (*fixtures, error) {
	dir, err := os.MkdirTemp("", "exec-bench-")
	if err != nil {
		return nil, err
	}
	fx := &fixtures{dir: dir, dirURI: fileURI(dir),
		small: dir + "/small.txt", big: dir + "/big.bin", sparse: dir + "/sparse.bin", writeDst: dir + "/written.bin"}
	fx.data = make([]byte, cfg.fileBytes)
	seed := uint64(0x9e3779b97f4a7c15)
	for i := range fx.data { // cheap deterministic bytes; randomness does not matter, variety does
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		fx.data[i] = byte(seed)
	}
	if err := os.WriteFile(fx.small, []byte("hello\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(fx.big, fx.data, 0o644); err != nil {
		return nil, err
	}
	f, err := os.Create(fx.sparse)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.Truncate(cfg.blockBytes); err != nil {
		return nil, err
	}
	return fx, nil
}

func fileURI(path string) string { return (&url.URL{Scheme: "file", Path: path}).String() }

// startParams is process/start (docs/protocol.md §6.4).
type startParams struct {
	ProcessID string            `json:"processId"`
	Argv      []string          `json:"argv"`
	Cwd       string            `json:"cwd"`
	Env       map[string]string `json:"env"`
	TTY       bool              `json:"tty"`
	Arg0      *string           `json:"arg0"`
}

// spawn watches id, then sends process/start for argv.
func (rc *runCtx) spawn(c *client, id string, argv []string, tty, verifyZero bool) (*call, *procWatch, error) {
	w := c.watch(id, verifyZero)
	cl, err := c.start("process/start", startParams{ProcessID: id, Argv: argv, Cwd: rc.fx.dirURI, Env: childEnv, TTY: tty})
	if err != nil {
		c.unwatch(id)
		return nil, nil, err
	}
	return cl, w, nil
}

// runToClose starts argv and waits for its process/closed; it returns the start call, its
// reply and the watch.
func (rc *runCtx) runToClose(ctx context.Context, c *client, id string, argv []string, tty, verifyZero bool) (*call, reply, *procWatch, error) {
	cl, w, err := rc.spawn(c, id, argv, tty, verifyZero)
	if err != nil {
		return nil, reply{}, nil, err
	}
	defer c.unwatch(id)
	r, err := cl.wait(ctx, c)
	if err != nil {
		return nil, r, nil, fmt.Errorf("process/start %v: %w", argv, err)
	}
	if err := c.waitClosed(ctx, w); err != nil {
		return nil, r, nil, fmt.Errorf("%v: %w", argv, err)
	}
	return cl, r, w, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mbps(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func idleRSS(ctx context.Context, rc *runCtx) error {
	return rc.withClient(ctx, func(c *client) error {
		time.Sleep(200 * time.Millisecond) // let the server settle after its first session; a measurement delay, not synchronisation
		n, err := rc.srv.rssBytes()
		if err != nil {
			return err
		}
		rc.add("idle-rss", mib(n))
		return nil
	})
}

func connectLatency(ctx context.Context, rc *runCtx) error {
	for i := 0; i < warmups+rc.cfg.samples; i++ {
		t0 := time.Now()
		c, err := rc.connect(ctx)
		d := time.Since(t0)
		if err != nil {
			return err
		}
		c.close()
		if i >= warmups {
			rc.add("connect", ms(d))
		}
	}
	return nil
}

// getMetadata times fs/getMetadata round trips, after calling it untimed for metaWarmup. On a
// VM a round trip that follows a pause (the idle metric before this one sleeps 200 ms) is up
// to 1.6 times slower, for every server, the null server included, until the guest's idle
// polling has adapted to back-to-back wake-ups again; three warm-up calls do not undo that.
// The constant it adds would make every ratio look closer to 1.
func getMetadata(ctx context.Context, rc *runCtx) error {
	return rc.withClient(ctx, func(c *client) error {
		params := map[string]any{"path": fileURI(rc.fx.small)}
		check := func(r reply) error {
			if string(field(r.result, "isFile")) != "true" {
				return fmt.Errorf("fs/getMetadata: unexpected result %.200s", r.result)
			}
			return nil
		}
		for end := time.Now().Add(rc.cfg.metaWarmup); time.Now().Before(end); {
			r, _, err := c.call(ctx, "fs/getMetadata", params)
			if err == nil {
				err = check(r)
			}
			if err != nil {
				return err
			}
		}
		for i := 0; i < warmups+rc.cfg.metaSamples; i++ {
			r, d, err := c.call(ctx, "fs/getMetadata", params)
			if err == nil {
				err = check(r)
			}
			if err != nil {
				return err
			}
			if i >= warmups {
				rc.add("getMetadata", ms(d))
			}
		}
		return nil
	})
}

func startLatency(ctx context.Context, rc *runCtx) error {
	return rc.withClient(ctx, func(c *client) error {
		for _, tty := range []bool{false, true} {
			mode := "pipe"
			if tty {
				mode = "pty"
			}
			for i := 0; i < warmups+rc.cfg.samples; i++ {
				cl, r, w, err := rc.runToClose(ctx, c, rc.procID(mode), []string{"/bin/true"}, tty, false)
				if err != nil {
					return fmt.Errorf("%s: %w", mode, err)
				}
				if err := w.check(0, 0); err != nil {
					return fmt.Errorf("%s /bin/true: %w", mode, err)
				}
				if i >= warmups {
					rc.add("start-"+mode, ms(cl.latency(r)))
					rc.add("closed-"+mode, ms(w.closedAt.Sub(cl.sent)))
				}
			}
		}
		return nil
	})
}

// sleeps starts cfg.sleeps `sleep 600` processes on one connection without waiting between
// requests, reads the server's RSS, then terminates them all the same way.
func sleeps(ctx context.Context, rc *runCtx) error {
	return rc.withClient(ctx, func(c *client) error {
		n := rc.cfg.sleeps
		ids := make([]string, n)
		watches := make([]*procWatch, n)
		calls := make([]*call, n)
		started := 0
		defer func() { // on failure, do not leave 600 s sleeps behind
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			for _, id := range ids[:started] {
				c.call(ctx, "process/terminate", map[string]any{"processId": id})
			}
		}()
		t0 := time.Now()
		for i := range n {
			var err error
			ids[i] = rc.procID("sleep")
			calls[i], watches[i], err = rc.spawn(c, ids[i], []string{"sleep", "600"}, false, false)
			if err != nil {
				return err
			}
			started = i + 1
		}
		var last time.Time
		for i, cl := range calls {
			r, err := cl.wait(ctx, c)
			if err != nil {
				return fmt.Errorf("process/start sleep #%d: %w", i, err)
			}
			last = maxTime(last, r.at)
		}
		rc.add("sleeps-start", ms(last.Sub(t0)))
		if rss, err := rc.srv.rssBytes(); err == nil {
			rc.add("sleeps-rss", mib(rss))
		} else {
			rc.res.fail("sleeps-rss", rc.side, err)
		}

		t1 := time.Now()
		for i, id := range ids {
			var err error
			if calls[i], err = c.start("process/terminate", map[string]any{"processId": id}); err != nil {
				return err
			}
		}
		for i, cl := range calls {
			r, err := cl.wait(ctx, c)
			if err != nil {
				return fmt.Errorf("process/terminate #%d: %w", i, err)
			}
			if string(field(r.result, "running")) != "true" {
				return fmt.Errorf("process/terminate #%d: %s, want running:true", i, r.result)
			}
		}
		started = 0 // all terminated
		last = time.Time{}
		for i, w := range watches {
			if err := c.waitClosed(ctx, w); err != nil {
				return fmt.Errorf("sleep #%d: %w", i, err)
			}
			if !w.exited || w.exitCode != 137 {
				return fmt.Errorf("sleep #%d: exit code %d after terminate, want 137", i, w.exitCode)
			}
			last = maxTime(last, w.closedAt)
			c.unwatch(ids[i])
		}
		rc.add("sleeps-term", ms(last.Sub(t1)))
		return nil
	})
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// manyConns opens cfg.conns connections, then runs cfg.perConn /bin/true processes one after
// another on each, all connections at once.
func manyConns(ctx context.Context, rc *runCtx) error {
	clients := make([]*client, rc.cfg.conns)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.close()
			}
		}
	}()
	for i := range clients {
		c, err := rc.connect(ctx)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		clients[i] = c
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		lat   []float64
		first error
	)
	t0 := time.Now()
	for ci, c := range clients {
		wg.Go(func() {
			for j := range rc.cfg.perConn {
				id := fmt.Sprintf("bench-many-%d-%d-%d", rc.round, ci, j)
				cl, _, w, err := rc.runToClose(ctx, c, id, []string{"/bin/true"}, false, false)
				if err == nil {
					err = w.check(0, 0)
				}
				mu.Lock()
				if err != nil {
					if first == nil {
						first = fmt.Errorf("connection %d process %d: %w", ci, j, err)
					}
					mu.Unlock()
					return
				}
				lat = append(lat, ms(w.closedAt.Sub(cl.sent)))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wall := time.Since(t0)
	if first != nil {
		return first
	}
	rc.add("conns-wall", wall.Seconds())
	rc.add("conns-proc", lat...)
	return nil
}

// outputThroughput runs `head -c N /dev/zero` and counts the decoded output bytes until
// process/closed.
func outputThroughput(ctx context.Context, rc *runCtx, tty bool, n int64, key string) error {
	return rc.withClient(ctx, func(c *client) error {
		argv := []string{"head", "-c", strconv.FormatInt(n, 10), "/dev/zero"}
		for range rc.cfg.reps {
			cl, _, w, err := rc.runToClose(ctx, c, rc.procID(key), argv, tty, rc.cfg.verify)
			if err != nil {
				return err
			}
			if err := w.check(n, 0); err != nil {
				return err
			}
			rc.add(key, mbps(n, w.closedAt.Sub(cl.sent)))
			if rc.cfg.verbose {
				rc.logf("    %s: %.0f MB/s, %d chunks of %d bytes on average, %d events out of seq order",
					key, mbps(n, w.closedAt.Sub(cl.sent)), w.chunks, n/int64(max(w.chunks, 1)), w.reorders)
			}
		}
		return nil
	})
}

func pipeThroughput(ctx context.Context, rc *runCtx) error {
	return outputThroughput(ctx, rc, false, rc.cfg.pipeBytes, "pipe")
}

func ptyThroughput(ctx context.Context, rc *runCtx) error {
	return outputThroughput(ctx, rc, true, rc.cfg.ptyBytes, "pty")
}

func readFile(ctx context.Context, rc *runCtx) error {
	return rc.withClient(ctx, func(c *client) error {
		params := map[string]any{"path": fileURI(rc.fx.big)}
		for range rc.cfg.reps {
			r, d, err := c.call(ctx, "fs/readFile", params)
			if err != nil {
				return err
			}
			s, err := stringValue(field(r.result, "dataBase64"))
			if err != nil {
				return fmt.Errorf("fs/readFile dataBase64: %w", err)
			}
			got, err := base64.StdEncoding.AppendDecode(nil, s)
			if err != nil {
				return fmt.Errorf("fs/readFile dataBase64: %w", err)
			}
			if !bytes.Equal(got, rc.fx.data) {
				return fmt.Errorf("fs/readFile returned %d bytes that differ from the file's %d", len(got), len(rc.fx.data))
			}
			rc.add("readFile", mbps(int64(len(got)), d))
		}
		return nil
	})
}

func writeFile(ctx context.Context, rc *runCtx) error {
	return rc.withClient(ctx, func(c *client) error {
		params, err := json.Marshal(map[string]string{
			"path":       fileURI(rc.fx.writeDst),
			"dataBase64": base64.StdEncoding.EncodeToString(rc.fx.data),
		})
		if err != nil {
			return err
		}
		for range rc.cfg.reps {
			os.Remove(rc.fx.writeDst)
			_, d, err := c.call(ctx, "fs/writeFile", json.RawMessage(params))
			if err != nil {
				return err
			}
			got, err := os.ReadFile(rc.fx.writeDst)
			if err != nil {
				return err
			}
			if !bytes.Equal(got, rc.fx.data) {
				return fmt.Errorf("fs/writeFile wrote %d bytes that differ from the %d sent", len(got), len(rc.fx.data))
			}
			rc.add("writeFile", mbps(int64(len(got)), d))
		}
		return nil
	})
}

// readBlock reads the sparse fixture through fs/open and sequential 1 MiB fs/readBlock calls.
func readBlock(ctx context.Context, rc *runCtx) error {
	return rc.withClient(ctx, func(c *client) error {
		h := "bench-block"
		if _, _, err := c.call(ctx, "fs/open", map[string]any{"handleId": h, "path": fileURI(rc.fx.sparse), "mode": "read"}); err != nil {
			return err
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			c.call(ctx, "fs/close", map[string]any{"handleId": h})
		}()
		var off int64
		t0 := time.Now()
		var last time.Time
		for {
			r, _, err := c.call(ctx, "fs/readBlock", map[string]any{"handleId": h, "offset": off, "len": readBlockLen})
			if err != nil {
				return fmt.Errorf("at offset %d: %w", off, err)
			}
			last = r.at
			s, err := stringValue(field(r.result, "chunk"))
			if err != nil {
				return fmt.Errorf("fs/readBlock chunk at %d: %w", off, err)
			}
			n, err := base64Len(s)
			if err != nil {
				return fmt.Errorf("fs/readBlock chunk at %d: %w", off, err)
			}
			off += int64(n)
			if string(field(r.result, "eof")) == "true" || n == 0 {
				break
			}
		}
		if off != rc.cfg.blockBytes {
			return fmt.Errorf("fs/readBlock read %d bytes, file has %d", off, rc.cfg.blockBytes)
		}
		rc.add("readBlock", mbps(off, last.Sub(t0)))
		return nil
	})
}
