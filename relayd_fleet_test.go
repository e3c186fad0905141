package main

// Tests of `exec-server relay` as a fleet (docs/remote.md "Self-hosted relay", 12.7): three
// relay processes on loopback share one configuration with a peer list; executors and
// harnesses are spread over them; one node is killed mid-run.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// relaydFreePorts reserves n loopback ports and frees them for the relays to listen on: the
// peer list names every node's URL before any starts.
func relaydFreePorts(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs
}

// relaydReadyz reads a node's /readyz; ok is false if it did not answer 200.
func relaydReadyz(base string) (live []string, ok bool) {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(base + "/readyz")
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var v struct {
		Live []string `json:"live_peers"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&v) != nil {
		return nil, false
	}
	return v.Live, true
}

// relaydAwaitLive waits until the node at base sees exactly the peers want live.
func relaydAwaitLive(t *testing.T, base string, want []string) {
	t.Helper()
	deadline := time.Now().Add(remoteTestTimeout)
	for {
		live, ok := relaydReadyz(base)
		if ok && slices.Equal(live, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s sees %v live, want %v", base, live, want)
		}
		time.Sleep(20 * time.Millisecond) // the probe has no event to wait on from outside
	}
}

// relaydConnectServed asks base for envID's bundle until one is given (404 and 502 are the
// answers while the environment moves), dials it and opens a stream.
func relaydConnectServed(t *testing.T, c *relaydHarnessClient, envID, streamID string, deadline time.Time) (relaydBundle, *testStream, error) {
	t.Helper()
	for {
		status, v := relaydPost(t, c.http, c.base, envID, "connect", c.bearer, map[string]any{"harness_public_key": c.id.publicKey()})
		if status == http.StatusOK {
			raw, _ := json.Marshal(v)
			var b relaydBundle
			if err := json.Unmarshal(raw, &b); err != nil {
				return b, nil, err
			}
			h, err := c.dial(b)
			if err == nil {
				var s *testStream
				if s, err = relaydOpenStreamOrEnd(h, b, streamID); err == nil {
					return b, s, nil
				}
			}
			if time.Now().After(deadline) {
				return b, nil, err
			}
		} else if (status != http.StatusNotFound && status != http.StatusBadGateway) || time.Now().After(deadline) {
			return relaydBundle{}, nil, fmt.Errorf("connect %s at %s: %d %v", envID, c.base, status, v)
		}
		time.Sleep(20 * time.Millisecond) // polling a registry that has no event to wait on
	}
}

// relaydOpenStreamOrEnd is relaydOpenStream for a socket that may end meanwhile (a node
// giving up an environment that moves closes it): that is an error, not the test's end.
func relaydOpenStreamOrEnd(h *testHarness, b relaydBundle, id string) (*testStream, error) {
	h.t.Helper()
	i, err := newNoiseInitiator(h.id, h.execKey, noisePrologue(b.EnvironmentID, b.RegID, id))
	if err != nil {
		return nil, err
	}
	m, err := i.initiate([]byte(b.Authorization))
	if err != nil {
		return nil, err
	}
	for _, f := range []relayFrame{{streamID: id, body: relayBodyResume}, {streamID: id, body: relayBodyHandshake, payload: m}} {
		f.version = relayFrameVersion
		if err := h.ws.writeMessageOp(wsOpBinary, appendRelayFrame(nil, &f)); err != nil {
			return nil, fmt.Errorf("send: %w", err)
		}
	}
	var f relayFrame
	select {
	case f = <-h.frames(id):
	case <-h.ended:
		return nil, fmt.Errorf("stream %s: the socket ended", id)
	case <-time.After(remoteTestTimeout):
		return nil, fmt.Errorf("stream %s: no answer", id)
	}
	if f.body != relayBodyHandshake {
		return nil, fmt.Errorf("%v frame (%s) instead of msg2", f.body, f.reason)
	}
	tr, err := i.readResponse(f.payload)
	if err != nil {
		return nil, err
	}
	return &testStream{h: h, id: id, t: tr}, nil
}

// TestRelaydFleet: three relay processes with one peer list. Nine executors, one for each
// (node it registers through, node that owns its environment) pair, and harnesses that ask a
// third node: each bundle names the owner's rendezvous, and every harness is served there.
// Then node c is killed: the executors whose environments it owned, and whose registry is a
// survivor, register again on a survivor and serve new streams; the others serve on.
func TestRelaydFleet(t *testing.T) {
	addrs := relaydFreePorts(t, 3)
	nodes := []string{"a", "b", "c"}
	var peers []relaydPeer
	bases := map[string]string{}
	for i, id := range nodes {
		bases[id] = "http://" + addrs[i]
		peers = append(peers, relaydPeer{ID: id, URL: bases[id]})
	}
	pj, _ := json.Marshal(peers)
	f := newRelaydFixture(t, `,"peers":`+string(pj))
	procs := map[string]*relaydProc{}
	for i, id := range nodes {
		p, base := startRelayProcess(t, f, addrs[i], "--node-id", id)
		if base != bases[id] {
			t.Fatalf("node %s printed %s, want %s", id, base, bases[id])
		}
		procs[id] = p
	}
	for _, id := range nodes {
		relaydAwaitLive(t, bases[id], nodes)
	}

	// One environment for each (entry, owner) pair, owner by the same hashing the nodes use.
	type env struct{ id, entry, owner, asker string }
	var envs []env
	all := func(string) bool { return true }
	for i := 0; len(envs) < 9; i++ {
		id := fmt.Sprintf("box-fleet-%d", i)
		o, _ := relaydOwner(peers, id, all)
		entry := nodes[len(envs)%3]
		if o.ID != nodes[len(envs)/3] {
			continue
		}
		envs = append(envs, env{id: id, entry: entry, owner: o.ID, asker: nodes[(len(envs)%3+1)%3]})
	}
	for _, e := range envs {
		startRelayExecutor(t, bases[e.entry], e.id, f.fleet)
	}

	var wg sync.WaitGroup
	for _, e := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newRelaydHarnessClient(t, bases[e.asker], f.alice)
			b, s, err := relaydConnectServed(t, c, e.id, "s-before", time.Now().Add(remoteTestTimeout))
			if err != nil {
				t.Errorf("%s (registered at %s, owner %s, asked at %s): %v", e.id, e.entry, e.owner, e.asker, err)
				return
			}
			if u, _ := url.Parse(b.URL); "http://"+u.Host != bases[e.owner] {
				t.Errorf("%s: bundle from %s names %s, want the owner %s (%s)", e.id, e.asker, u.Host, e.owner, bases[e.owner])
			}
			s.initialize()
			if out := s.runScript("echo " + e.id); out != e.id+"\n" {
				t.Errorf("%s: output %q", e.id, out)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("9 executors (3 registered at each node, 3 owned by each) served harnesses asking a third node")

	// Kill node c.
	procs["c"].cmd.Process.Kill()
	procs["c"].wait(t)
	killed := time.Now()
	var noticeMu sync.Mutex
	notice := map[string]time.Duration{}
	for _, id := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			relaydAwaitLive(t, bases[id], []string{"a", "b"})
			noticeMu.Lock()
			notice[id] = time.Since(killed)
			noticeMu.Unlock()
		}()
	}
	type result struct {
		env    env
		served time.Duration
		owner  string
	}
	results := make(chan result, len(envs))
	for _, e := range envs {
		if e.entry == "c" {
			continue // its registry is gone: it cannot register anywhere (docs/remote.md 12.7)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			asker := map[string]string{"a": "b", "b": "a"}[e.entry]
			c := newRelaydHarnessClient(t, bases[asker], f.alice)
			b, s, err := relaydConnectServed(t, c, e.id, "s-after", time.Now().Add(remoteTestTimeout))
			if err != nil {
				t.Errorf("%s (registered at %s, owner %s) after the kill: %v", e.id, e.entry, e.owner, err)
				return
			}
			s.initialize()
			if out := s.runScript("echo again"); out != "again\n" {
				t.Errorf("%s: output %q", e.id, out)
			}
			u, _ := url.Parse(b.URL)
			results <- result{env: e, served: time.Since(killed), owner: u.Host}
		}()
	}
	wg.Wait()
	close(results)
	t.Logf("node c killed; a saw it down after %v, b after %v", notice["a"].Round(time.Millisecond), notice["b"].Round(time.Millisecond))
	limit := 3*backoffInitial + 5*time.Second
	moved := 0
	for r := range results {
		if strings.HasSuffix(bases["c"], r.owner) {
			t.Errorf("%s is still placed on the killed node", r.env.id)
		}
		t.Logf("%s (registered at %s, owned by %s before): a new stream served %v after the kill, at %s",
			r.env.id, r.env.entry, r.env.owner, r.served.Round(time.Millisecond), r.owner)
		if r.env.owner == "c" {
			moved++
			if r.served > limit {
				t.Errorf("%s moved and served after %v, want within %v", r.env.id, r.served, limit)
			}
		}
	}
	if moved != 2 {
		t.Errorf("%d environments of the killed node were checked, want 2", moved)
	}
	if t.Failed() {
		t.FailNow()
	}

	// Node c comes back on its address: its environments move back to it (the survivors
	// give them up once they see it live, and the executors register again).
	for deadline := time.Now().Add(remoteTestTimeout); ; {
		p, base := startPrinting(t, nil, "relay", "--config", f.config, "--listen", addrs[2], "--node-id", "c")
		if p != nil {
			if base != bases["c"] {
				t.Fatalf("c restarted at %s", base)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node c could not listen again on its address")
		}
		time.Sleep(50 * time.Millisecond) // no event says when a port is free again
	}
	restarted := time.Now()
	for _, e := range envs {
		if e.entry == "c" || e.owner != "c" {
			continue
		}
		c := newRelaydHarnessClient(t, bases[map[string]string{"a": "b", "b": "a"}[e.entry]], f.alice)
		for deadline := time.Now().Add(remoteTestTimeout); ; {
			b, s, err := relaydConnectServed(t, c, e.id, fmt.Sprintf("s-back-%d", time.Now().UnixNano()), deadline)
			if err != nil {
				t.Fatalf("%s after c came back: %v", e.id, err)
			}
			if u, _ := url.Parse(b.URL); "http://"+u.Host == bases["c"] {
				// Before, the stream may be on a survivor that gives the environment up
				// under it; on c it stays.
				s.initialize()
				t.Logf("%s: back on c and served %v after c restarted", e.id, time.Since(restarted).Round(time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s stays at %s after c came back", e.id, b.URL)
			}
			time.Sleep(20 * time.Millisecond) // the move waits for the probe and the executor's retry
		}
	}
}

// TestRelaydPlacement: the weight is SHA-256 of (node id, 0, environment id), the same in
// every process (the values are those of Python's hashlib for the same bytes); a node that
// leaves moves only its own environments, spread over the others.
func TestRelaydPlacement(t *testing.T) {
	if w := relaydWeight("relay-a", "build-1"); w != 14974153330552103940 {
		t.Errorf("weight(relay-a, build-1) = %d", w)
	}
	peers := []relaydPeer{{"a", "https://a.example"}, {"b", "https://b.example"}, {"c", "https://c.example"}}
	all := func(string) bool { return true }
	noC := func(id string) bool { return id != "c" }
	count := map[string]int{}
	moved := map[string]int{}
	const n = 3000
	for i := range n {
		id := fmt.Sprintf("env-%d", i)
		before, _ := relaydOwner(peers, id, all)
		after, _ := relaydOwner(peers, id, noC)
		count[before.ID]++
		if before.ID != after.ID {
			if before.ID != "c" {
				t.Fatalf("%s moved from %s to %s though %s is live", id, before.ID, after.ID, before.ID)
			}
			moved[after.ID]++
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		if count[id] < n/3-n/10 || count[id] > n/3+n/10 {
			t.Errorf("node %s owns %d of %d environments", id, count[id], n)
		}
	}
	if moved["a"]+moved["b"] != count["c"] || moved["a"] < count["c"]/3 || moved["b"] < count["c"]/3 {
		t.Errorf("c's %d environments moved %v", count["c"], moved)
	}
	t.Logf("3000 environments: %v; without c, c's went %v, no other moved", count, moved)
}

// TestRelaydFleetConfigRefusals: the peer list and --node-id are checked at start.
func TestRelaydFleetConfigRefusals(t *testing.T) {
	for _, tt := range []struct{ peers, want string }{
		{`[{"id":"a b","url":"http://127.0.0.1:1"}]`, `id "a b"`},
		{`[{"id":"a","url":"http://relay.example"}]`, "want https, or http to a loopback address"},
		{`[{"id":"a","url":"https://relay.example/path"}]`, "want scheme://host[:port] only"},
		{`[{"id":"a","url":"http://127.0.0.1:1"},{"id":"a","url":"http://127.0.0.1:2"}]`, "must be unique"},
		{`[{"id":"a","url":"http://127.0.0.1:1"},{"id":"b","url":"http://127.0.0.1:1"}]`, "must be unique"},
		{`[{"id":"a","url":"http://127.0.0.1:1","weight":2}]`, `unknown field "weight"`},
	} {
		f := newRelaydFixture(t, `,"peers":`+tt.peers)
		if _, err := loadRelaydConfig(f.config); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("peers %s: %v, want %q", tt.peers, err, tt.want)
		}
	}
	fleet := newRelaydFixture(t, `,"peers":[{"id":"a","url":"http://127.0.0.1:1"}]`)
	one := newRelaydFixture(t, "")
	for _, tt := range []struct {
		f    *relaydFixture
		args []string
		want string
	}{
		{fleet, nil, "give --node-id"},
		{fleet, []string{"--node-id", "z"}, `--node-id "z" is not among`},
		{fleet, []string{"--node-id", "a", "--public-url", "http://127.0.0.1:2"}, "is not node a's url"},
		{one, []string{"--node-id", "a"}, "--node-id needs the configuration's peers"},
	} {
		p := startExecServer(t, nil, nil, append([]string{"relay", "--config", tt.f.config, "--listen", "127.0.0.1:0"}, tt.args...)...)
		if err := p.wait(t); err == nil || !strings.Contains(p.stderr.String(), tt.want) {
			t.Errorf("%v: %v, stderr %q, want %q", tt.args, err, p.stderr.String(), tt.want)
		}
	}
}

// TestRelaydConnectWaitsForARegistration: in the minute after a node starts (or its fleet's
// live set changes) executors are registering again, and the real harness gives up a
// session's reconnect at the first 404: a connect for an environment not registered yet
// waits for its registration (up to relaydConnectWait) and gets the bundle in one request.
func TestRelaydConnectWaitsForARegistration(t *testing.T) {
	f := newRelaydFixture(t, "")
	p, base := startRelayProcess(t, f, "127.0.0.1:0", "--log-level", "debug")
	c := newRelaydHarnessClient(t, base, f.alice)
	type answer struct {
		status int
		took   time.Duration
	}
	done := make(chan answer, 1)
	start := time.Now()
	go func() {
		status, _ := relaydPost(t, c.http, base, "box-w", "connect", f.alice, map[string]any{"harness_public_key": c.id.publicKey()})
		done <- answer{status, time.Since(start)}
	}()
	p.stderr.waitFor(t, "connect waits for a registration")
	waiting := time.Since(start)
	startRelayExecutor(t, base, "box-w", f.fleet)
	a := <-done
	if a.status != http.StatusOK || a.took > relaydConnectWait {
		t.Fatalf("connect while the executor registers: %d after %v, want 200 within %v", a.status, a.took, relaydConnectWait)
	}
	t.Logf("a connect waiting %v before the executor started was answered 200 after %v",
		waiting.Round(time.Millisecond), a.took.Round(time.Millisecond))
}
