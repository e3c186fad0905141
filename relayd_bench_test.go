package main

// Benchmarks through `exec-server relay` (docs/remote.md §12; BENCHMARKS.md "Self-hosted
// relay"). scripts/bench-relay.sh runs them round by round with interop/cmd/bench (`bench
// relay`), which starts the relay and the executors; alone they skip.
//
// BenchmarkRelaydRPC/{Start,Metadata,Pipe} are a harness's view of one executor: process
// start → closed of /bin/true, an fs/getMetadata round trip, and pipe output of head -c
// relaydBenchPipeBytes. The executor is reached either directly, on its websocket
// (EXEC_SERVER_BENCH_WS=ws://…), or through the relay as the real harness does
// (EXEC_SERVER_BENCH_RELAY=http://… and EXEC_SERVER_BENCH_ENV: a connect bundle, the harness
// socket, Noise hybridIK of docs/remote.md §5, records of §6).
//
// BenchmarkRelaydForward, BenchmarkRelaydEcho and BenchmarkRelaydStreams measure the relay
// alone: their executors are raw rendezvous sockets of this process that answer the
// handshake with a token message and push or echo Data frames, so that nothing but the relay
// (and the loopback) is in the path. With EXEC_SERVER_BENCH_RELAY_PID they read the relay's
// CPU time and RSS from /proc.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// relaydBenchPipeBytes is the output of one pipe operation.
	relaydBenchPipeBytes = 64 << 20
	// relaydBenchStreams is the number of streams BenchmarkRelaydStreams holds open: the
	// issue's 1,000, spread over relaydBenchStreamEnvs environments (the per-environment
	// stream limit of a socket is 128).
	relaydBenchStreams    = 1000
	relaydBenchStreamEnvs = 8
	// relaydBenchActiveFrame is the payload of each frame of the active phase.
	relaydBenchActiveFrame = 16 << 10
	// relaydBenchTimeout bounds a setup step.
	relaydBenchTimeout = 30 * time.Second
)

// relaydBenchEnv holds the benchmarks' environment variables.
type relaydBenchEnv struct {
	ws, relay, env, connectToken, registerToken string
	pid                                         int
}

func relaydBenchEnvironment() relaydBenchEnv {
	e := relaydBenchEnv{ws: os.Getenv("EXEC_SERVER_BENCH_WS"), relay: os.Getenv("EXEC_SERVER_BENCH_RELAY"),
		env: os.Getenv("EXEC_SERVER_BENCH_ENV"), connectToken: os.Getenv("EXEC_SERVER_BENCH_CONNECT_TOKEN"),
		registerToken: os.Getenv("EXEC_SERVER_BENCH_REGISTER_TOKEN")}
	e.pid, _ = strconv.Atoi(os.Getenv("EXEC_SERVER_BENCH_RELAY_PID"))
	return e
}

// relaydBenchPost sends a registry request and decodes a 200 answer into out.
func relaydBenchPost(base, envID, op, bearer string, body, out any) error {
	raw, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, base+"/cloud/environment/"+envID+"/"+op, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, envID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: status %d", op, envID, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// relaydBenchDial opens a websocket with room for any relay frame or JSON-RPC message.
func relaydBenchDial(u string) (*wsConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), relaydBenchTimeout)
	defer cancel()
	ws, _, err := dialWebsocket(ctx, u, nil, nil, wsOptions{maxFrame: relayMaxMessage << 8, maxMessage: relayMaxMessage << 8})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", u, err)
	}
	return ws, nil
}

// relaydBenchClient is a JSON-RPC client of an executor: on its websocket, or on a Noise
// stream through the relay.
type relaydBenchClient struct {
	ws     *wsConn
	tr     *noiseTransport // nil: direct, one JSON message per websocket message
	stream string
	inbox  [][]byte
	next   int
}

// dialRelaydBench connects as the environment variables say and initializes a session.
func dialRelaydBench(b *testing.B) *relaydBenchClient {
	e := relaydBenchEnvironment()
	var c *relaydBenchClient
	var err error
	switch {
	case e.ws != "":
		var ws *wsConn
		if ws, err = relaydBenchDial(e.ws); err == nil {
			c = &relaydBenchClient{ws: ws}
		}
	case e.relay != "" && e.env != "":
		c, err = relaydBenchHarness(e)
	default:
		b.Skip("set EXEC_SERVER_BENCH_WS, or EXEC_SERVER_BENCH_RELAY and EXEC_SERVER_BENCH_ENV: scripts/bench-relay.sh runs these")
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.ws.closeTCP)
	if _, err := c.call("initialize", map[string]any{"clientName": "relay-bench"}, nil); err != nil {
		b.Fatal(err)
	}
	if err := c.send(map[string]any{"method": "initialized", "params": map[string]any{}}); err != nil {
		b.Fatal(err)
	}
	return c
}

// relaydBenchHarness is the harness's way in (docs/remote.md §12.3, §5): a connect bundle for
// a fresh identity, the bundle's socket, one stream with Resume and Noise message 1, and
// message 2.
func relaydBenchHarness(e relaydBenchEnv) (*relaydBenchClient, error) {
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		return nil, err
	}
	var bundle relaydBundle
	if err := relaydBenchPost(e.relay, e.env, "connect", e.connectToken, map[string]any{"harness_public_key": id.publicKey()}, &bundle); err != nil {
		return nil, err
	}
	ws, err := relaydBenchDial(bundle.URL)
	if err != nil {
		return nil, err
	}
	c := &relaydBenchClient{ws: ws, stream: randomRelaydID("bench-", 8)}
	i, err := newNoiseInitiator(id, bundle.ExecutorKey, noisePrologue(bundle.EnvironmentID, bundle.RegID, c.stream))
	if err == nil {
		var m1 []byte
		if m1, err = i.initiate([]byte(bundle.Authorization)); err == nil {
			err = c.writeFrame(relayFrame{body: relayBodyResume})
			if err == nil {
				err = c.writeFrame(relayFrame{body: relayBodyHandshake, payload: m1})
			}
		}
	}
	var f relayFrame
	if err == nil {
		f, err = c.readFrame()
	}
	if err == nil && f.body != relayBodyHandshake {
		err = fmt.Errorf("%v frame (%q) instead of message 2", f.body, f.reason)
	}
	if err == nil {
		c.tr, err = i.readResponse(f.payload)
	}
	if err != nil {
		ws.closeTCP()
		return nil, fmt.Errorf("stream through the relay: %w", err)
	}
	return c, nil
}

func (c *relaydBenchClient) writeFrame(f relayFrame) error {
	f.version, f.streamID = relayFrameVersion, c.stream
	return c.ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &f))
}

// readFrame reads the next frame of the client's stream; its payload is valid until the next
// read.
func (c *relaydBenchClient) readFrame() (relayFrame, error) {
	for {
		op, data, err := c.ws.readFrameMessage()
		if err != nil {
			return relayFrame{}, err
		}
		if op != wsOpBinary {
			continue
		}
		f, err := decodeRelayFrame(data)
		if err != nil {
			return relayFrame{}, err
		}
		if f.streamID == c.stream {
			return f, nil
		}
	}
}

func (c *relaydBenchClient) send(v any) error {
	msg, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if c.tr == nil {
		return c.ws.writeMessageOp(wsOpText, msg)
	}
	return c.tr.sealMessage(msg, func(seq uint32, rec []byte) error {
		return c.writeFrame(relayFrame{body: relayBodyData, seq: seq, segmentCount: 1, payload: rec})
	})
}

// recv returns the executor's next JSON-RPC message.
func (c *relaydBenchClient) recv() ([]byte, error) {
	for len(c.inbox) == 0 {
		if c.tr == nil {
			_, data, err := c.ws.readFrameMessage()
			if err != nil {
				return nil, err
			}
			c.inbox = append(c.inbox, bytes.Clone(data))
			continue
		}
		f, err := c.readFrame()
		if err != nil {
			return nil, err
		}
		if f.body != relayBodyData {
			return nil, fmt.Errorf("stream ended: %v frame (%q)", f.body, f.reason)
		}
		if err := c.tr.openRecord(f.seq, f.payload, func(m []byte) error {
			c.inbox = append(c.inbox, bytes.Clone(m))
			return nil
		}); err != nil {
			return nil, err
		}
	}
	m := c.inbox[0]
	c.inbox = c.inbox[1:]
	return m, nil
}

// call sends a request and returns its result; the notifications before the reply go to
// note, undecoded.
func (c *relaydBenchClient) call(method string, params any, note func([]byte)) (json.RawMessage, error) {
	c.next++
	id := c.next
	if err := c.send(map[string]any{"id": id, "method": method, "params": params}); err != nil {
		return nil, err
	}
	for {
		m, err := c.recv()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
		if relaydBenchIsNote(m) {
			if note != nil {
				note(m)
			}
			continue
		}
		var r struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(m, &r); err != nil || r.ID != id {
			return nil, fmt.Errorf("%s: reply %.200s", method, m)
		}
		if r.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, r.Error.Message)
		}
		return r.Result, nil
	}
}

// relaydBenchIsNote says whether a message is a notification: the server's replies carry
// no method.
func relaydBenchIsNote(m []byte) bool { return bytes.Contains(m, []byte(`"method":`)) }

// relaydBenchNote reads a notification from its bytes, so that a megabyte of output is not
// decoded to learn its length: its method, its seq (0 if none), and for process/output the
// decoded length of its chunk (base64 of zeros).
func relaydBenchNote(m []byte) (method string, seq uint64, n int) {
	field := func(key string) []byte {
		_, rest, ok := bytes.Cut(m, []byte(`"`+key+`":`))
		if !ok {
			return nil
		}
		return bytes.TrimLeft(rest, " ")
	}
	if v := field("method"); len(v) > 1 && v[0] == '"' {
		if end := bytes.IndexByte(v[1:], '"'); end >= 0 {
			method = string(v[1 : 1+end])
		}
	}
	if v := field("seq"); v != nil {
		end := 0
		for end < len(v) && v[end] >= '0' && v[end] <= '9' {
			end++
		}
		seq, _ = strconv.ParseUint(string(v[:end]), 10, 64)
	}
	if method == "process/output" {
		if v := field("chunk"); len(v) > 1 && v[0] == '"' {
			if end := bytes.IndexByte(v[1:], '"'); end >= 0 {
				s := v[1 : 1+end]
				n = len(s)/4*3 - bytes.Count(s[max(0, len(s)-2):], []byte("="))
			}
		}
	}
	return method, seq, n
}

// relaydBenchProc follows one process's events. It is over once process/closed and
// process/exited have come and every event numbered before them: the reference may send
// closed before exited or before the last output (docs/protocol.md §6.2).
type relaydBenchProc struct {
	events, maxSeq uint64
	exited, closed bool
	output         int
}

func (p *relaydBenchProc) note(m []byte) {
	method, seq, n := relaydBenchNote(m)
	switch method {
	case "process/output":
		p.output += n
	case "process/exited":
		p.exited = true
	case "process/closed":
		p.closed = true
	default:
		return
	}
	if seq > 0 {
		p.events++
		p.maxSeq = max(p.maxSeq, seq)
	}
}

func (p *relaydBenchProc) over() bool { return p.closed && p.exited && p.events == p.maxSeq }

// run starts argv as a process and waits until it is over; it returns the output bytes.
func (c *relaydBenchClient) run(id string, argv []string, dir string) (int, error) {
	var p relaydBenchProc
	if _, err := c.call("process/start", map[string]any{"processId": id, "argv": argv, "cwd": "file://" + dir,
		"env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": false, "arg0": nil}, p.note); err != nil {
		return 0, err
	}
	for !p.over() {
		m, err := c.recv()
		if err != nil {
			return p.output, fmt.Errorf("%s: %w", id, err)
		}
		p.note(m)
	}
	return p.output, nil
}

// BenchmarkRelaydRPC: a harness's round trips and output, directly or through the relay.
func BenchmarkRelaydRPC(b *testing.B) {
	b.Run("Start", func(b *testing.B) {
		c, dir := dialRelaydBench(b), b.TempDir()
		b.ResetTimer()
		for i := range b.N {
			if _, err := c.run(fmt.Sprintf("s-%d", i), []string{"/bin/true"}, dir); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Metadata", func(b *testing.B) {
		c := dialRelaydBench(b)
		path := b.TempDir() + "/small"
		if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
		params := map[string]any{"path": "file://" + path}
		b.ResetTimer()
		for range b.N {
			r, err := c.call("fs/getMetadata", params, nil)
			if err != nil {
				b.Fatal(err)
			}
			if !bytes.Contains(r, []byte(`"isFile":true`)) {
				b.Fatalf("fs/getMetadata: %.200s", r)
			}
		}
	})
	b.Run("Pipe", func(b *testing.B) {
		c, dir := dialRelaydBench(b), b.TempDir()
		b.SetBytes(relaydBenchPipeBytes)
		b.ResetTimer()
		for i := range b.N {
			n, err := c.run(fmt.Sprintf("p-%d", i), []string{"head", "-c", strconv.Itoa(relaydBenchPipeBytes), "/dev/zero"}, dir)
			if err != nil {
				b.Fatal(err)
			}
			if n != relaydBenchPipeBytes {
				b.Fatalf("%d bytes of output, want %d", n, relaydBenchPipeBytes)
			}
		}
	})
}

// relaydRawExecutor is a rendezvous socket of an environment registered by the benchmark: it
// answers each harness handshake with a token message 2, echoes Data frames when echo is
// set, and lets the benchmark push frames.
type relaydRawExecutor struct {
	ws   *wsConn
	echo bool
	done chan struct{}
	open chan string // stream ids as their handshake is answered
}

func startRelaydRawExecutor(b *testing.B, e relaydBenchEnv, envID string, echo bool) *relaydRawExecutor {
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	var reg struct {
		URL string `json:"url"`
	}
	if err := relaydBenchPost(e.relay, envID, "register", e.registerToken,
		map[string]any{"security_profile": registrySecurityProfile, "executor_public_key": id.publicKey()}, &reg); err != nil {
		b.Fatal(err)
	}
	ws, err := relaydBenchDial(reg.URL)
	if err != nil {
		b.Fatal(err)
	}
	x := &relaydRawExecutor{ws: ws, echo: echo, done: make(chan struct{}), open: make(chan string, relaydBenchStreams)}
	go x.serve() // ends when the socket does (cleanup)
	b.Cleanup(func() { ws.closeTCP(); <-x.done })
	return x
}

func (x *relaydRawExecutor) serve() {
	defer close(x.done)
	for {
		_, data, err := x.ws.readFrameMessage()
		if err != nil {
			return
		}
		f, err := decodeRelayFrame(data)
		if err != nil {
			continue
		}
		switch {
		case f.body == relayBodyHandshake:
			x.ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: f.streamID, body: relayBodyHandshake, payload: []byte{2}}))
			x.open <- f.streamID
		case f.body == relayBodyData && x.echo:
			x.ws.writeMessageOp(wsOpBinary, data)
		}
	}
}

// relaydRawHarness opens a harness socket with one stream on envID's raw executor.
func relaydRawHarness(e relaydBenchEnv, envID string, bundle *relaydBundle, stream string) (*relaydBenchClient, error) {
	if bundle.URL == "" {
		id, err := newNoiseIdentity(rand.Reader)
		if err != nil {
			return nil, err
		}
		if err := relaydBenchPost(e.relay, envID, "connect", e.connectToken, map[string]any{"harness_public_key": id.publicKey()}, bundle); err != nil {
			return nil, err
		}
	}
	ws, err := relaydBenchDial(bundle.URL)
	if err != nil {
		return nil, err
	}
	c := &relaydBenchClient{ws: ws, stream: stream}
	if err := c.writeFrame(relayFrame{body: relayBodyResume}); err != nil {
		ws.closeTCP()
		return nil, err
	}
	if err := c.writeFrame(relayFrame{body: relayBodyHandshake, payload: []byte{1}}); err != nil {
		ws.closeTCP()
		return nil, err
	}
	f, err := c.readFrame()
	if err == nil && f.body != relayBodyHandshake {
		err = fmt.Errorf("%v frame (%q) instead of the handshake answer", f.body, f.reason)
	}
	if err != nil {
		ws.closeTCP()
		return nil, err
	}
	return c, nil
}

// relaydBenchRaw is the setup of the relay-only benchmarks.
func relaydBenchRaw(b *testing.B) relaydBenchEnv {
	e := relaydBenchEnvironment()
	if e.relay == "" || e.registerToken == "" {
		b.Skip("set EXEC_SERVER_BENCH_RELAY, EXEC_SERVER_BENCH_REGISTER_TOKEN and EXEC_SERVER_BENCH_CONNECT_TOKEN: scripts/bench-relay.sh runs these")
	}
	return e
}

// relaydProcCPU is the CPU time of process pid, from /proc/PID/stat (0 without a pid).
func relaydProcCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(raw, ')') // the command name may hold spaces
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// relaydProcRSS is the resident memory of process pid in MiB, from /proc/PID/status.
func relaydProcRSS(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

var relaydBenchSeq atomic.Int64

// relaydBenchEnvID is an environment id of its own for each benchmark run: a relay that
// serves several runs keeps no stream of an earlier one on it.
func relaydBenchEnvID(kind string) string {
	return fmt.Sprintf("bench-%s-%d-%d", kind, os.Getpid(), relaydBenchSeq.Add(1))
}

// BenchmarkRelaydForward: one stream, the executor pushing frames of one full record
// (61,440 bytes of payload) as fast as the relay forwards them to the harness. MB/s is the
// relay's forwarding rate; cpu-s/GB the relay's CPU time per GB forwarded.
func BenchmarkRelaydForward(b *testing.B) {
	e := relaydBenchRaw(b)
	envID := relaydBenchEnvID("fwd")
	x := startRelaydRawExecutor(b, e, envID, false)
	h, err := relaydRawHarness(e, envID, &relaydBundle{}, "fwd")
	if err != nil {
		b.Fatal(err)
	}
	defer h.ws.closeTCP()
	<-x.open
	frame := appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: "fwd", body: relayBodyData, segmentCount: 1, payload: make([]byte, noiseRecordPlaintextMax+16)})
	b.SetBytes(int64(len(frame)))
	cpu0 := relaydProcCPU(e.pid)
	b.ResetTimer()
	pushed := make(chan error, 1)
	go func() { // the executor's writer: ends after b.N frames or a failed write
		for range b.N {
			if err := x.ws.writeMessageOp(wsOpBinary, frame); err != nil {
				pushed <- err
				return
			}
		}
		pushed <- nil
	}()
	for range b.N {
		if _, err := h.readFrame(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := <-pushed; err != nil {
		b.Fatal(err)
	}
	if e.pid != 0 {
		b.ReportMetric((relaydProcCPU(e.pid)-cpu0).Seconds()/(float64(b.N)*float64(len(frame))/1e9), "cpu-s/GB")
	}
}

// BenchmarkRelaydEcho: the round trip of one small Data frame, harness → relay → executor →
// relay → harness.
func BenchmarkRelaydEcho(b *testing.B) {
	e := relaydBenchRaw(b)
	envID := relaydBenchEnvID("echo")
	x := startRelaydRawExecutor(b, e, envID, true)
	h, err := relaydRawHarness(e, envID, &relaydBundle{}, "echo")
	if err != nil {
		b.Fatal(err)
	}
	defer h.ws.closeTCP()
	<-x.open
	b.ResetTimer()
	for i := range b.N {
		if err := h.writeFrame(relayFrame{body: relayBodyData, seq: uint32(i), segmentCount: 1, payload: make([]byte, 200)}); err != nil {
			b.Fatal(err)
		}
		if f, err := h.readFrame(); err != nil || f.body != relayBodyData {
			b.Fatalf("echo: %v %v", f.body, err)
		}
	}
}

// BenchmarkRelaydStreams: relaydBenchStreams streams open at once, each on a harness socket
// of its own, over relaydBenchStreamEnvs raw executors, opened once (the parent benchmark
// runs once). Its Active sub-benchmark reports the relay's RSS before (base-MiB), with every
// stream open and idle (idle-MiB), and at its highest while every stream carries b.N frames
// of relaydBenchActiveFrame bytes (active-MiB), and the rate of that traffic in all.
func BenchmarkRelaydStreams(b *testing.B) {
	e := relaydBenchRaw(b)
	if e.pid == 0 {
		b.Skip("set EXEC_SERVER_BENCH_RELAY_PID: this benchmark reads the relay's memory")
	}
	base := relaydProcRSS(e.pid)
	per := relaydBenchStreams / relaydBenchStreamEnvs
	execs := make([]*relaydRawExecutor, relaydBenchStreamEnvs)
	hs := make([][]*relaydBenchClient, relaydBenchStreamEnvs)
	for k := range execs {
		envID := relaydBenchEnvID("streams")
		execs[k] = startRelaydRawExecutor(b, e, envID, false)
		for j := range per {
			// A bundle per harness, as the real harness asks /connect for every connection
			// (a ticket opens relaydMaxTicketSockets sockets at most).
			h, err := relaydRawHarness(e, envID, &relaydBundle{}, fmt.Sprintf("s-%d", j))
			if err != nil {
				b.Fatalf("stream %d of %s: %v", j, envID, err)
			}
			<-execs[k].open
			hs[k] = append(hs[k], h)
			b.Cleanup(h.ws.closeTCP)
		}
	}
	time.Sleep(time.Second) // let the relay's heap settle before reading its RSS; a measurement delay
	idle := relaydProcRSS(e.pid)
	b.Run("Active", func(b *testing.B) {
		var peak atomic.Uint64 // KiB
		stop := make(chan struct{})
		var sampler sync.WaitGroup
		sampler.Add(1)
		go func() { // the RSS sampler: ends with stop
			defer sampler.Done()
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for {
				if v := uint64(relaydProcRSS(e.pid) * 1024); v > peak.Load() {
					peak.Store(v)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
		b.SetBytes(int64(relaydBenchStreams * relaydBenchActiveFrame))
		b.ResetTimer()
		var wg sync.WaitGroup
		errs := make(chan error, relaydBenchStreams+relaydBenchStreamEnvs)
		for k, x := range execs {
			wg.Add(1)
			go func() { // one executor's writer: b.N frames on each of its streams, in turn
				defer wg.Done()
				frames := make([][]byte, per)
				for j := range frames {
					frames[j] = appendRelayFrame(nil, &relayFrame{version: relayFrameVersion, streamID: fmt.Sprintf("s-%d", j), body: relayBodyData, segmentCount: 1, payload: make([]byte, relaydBenchActiveFrame)})
				}
				for range b.N {
					for _, f := range frames {
						if err := x.ws.writeMessageOp(wsOpBinary, f); err != nil {
							errs <- err
							return
						}
					}
				}
			}()
			for _, h := range hs[k] {
				wg.Add(1)
				go func() { // one harness's reader: ends after b.N frames
					defer wg.Done()
					for range b.N {
						if _, err := h.readFrame(); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		b.StopTimer()
		close(stop)
		sampler.Wait()
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		b.ReportMetric(base, "base-MiB")
		b.ReportMetric(idle, "idle-MiB")
		b.ReportMetric(float64(peak.Load())/1024, "active-MiB")
		b.ReportMetric((idle-base)*1024/relaydBenchStreams, "KiB/stream")
	})
}
