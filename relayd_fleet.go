package main

// `exec-server relay` in a fleet: several relay processes serve one set of environments with
// no shared database (docs/remote.md "Self-hosted relay", 12.7).
//
// Each environment id has one owning node, picked by rendezvous (highest-random-weight)
// hashing of the id over the configured peers that are live: relayd.place. The owner holds
// the registration and both rendezvous sockets, so an executor and a harness meet there
// whichever node they asked. A register, connect or validate that reaches another node is
// checked there (401/403 stay local) and forwarded to the owner, whose answer, naming its own
// rendezvous URL, is passed back unchanged: the clients follow the URL in the answer, never a
// redirect (they follow none).
//
// Liveness: each node asks every peer's /readyz every relaydPeerProbeInterval, within
// relaydPeerProbeTimeout; a peer that fails is left out of placement until it answers again,
// and a forward whose dial fails leaves it out at once. After each round a node gives up the
// registrations it holds but no longer owns (a peer came back, or views differed for a
// moment): their sockets close, the executor's reconnect is answered unknown_route, and it
// registers again, on the owner. The only state is that placement, computed from the peer
// list and the live set: nothing to replicate.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fleet timings and limits.
const (
	// relaydPeerProbeInterval is how often a node asks each peer's /readyz; a dead peer
	// stops owning environments within about one interval plus relaydPeerProbeTimeout.
	relaydPeerProbeInterval = time.Second
	// relaydPeerProbeTimeout bounds one /readyz probe.
	relaydPeerProbeTimeout = time.Second
	// relaydPeerForwardTimeout bounds a registry request forwarded to the owning node: under
	// the 10 s the executor and the harness give the whole request.
	relaydPeerForwardTimeout = relaydConnectWait + 3*time.Second
	// relaydPeerMaxAnswer bounds the answer of a forwarded request read back.
	relaydPeerMaxAnswer = 1 << 20
	// relaydMaxPeers bounds the peer list.
	relaydMaxPeers = 256
	// relaydForwardedHeader marks a registry request forwarded by peers: its value lists the
	// ids of the nodes it passed, comma-separated, each forwarder appending its own. Any
	// client can send it, so it never makes a node serve what it does not own: it only
	// bounds the hops, so that two nodes whose views of the live set differ for a moment
	// cannot bounce a request between them.
	relaydForwardedHeader = "X-Exec-Server-Relay-Forwarded-By"
	// relaydMaxForwardHops is how many times one request may be forwarded: one forward is
	// the normal case, a second covers views that differ. A request that already passed
	// that many nodes (or this node), and lands on a node that does not own its
	// environment, is answered 503 peer_unavailable, to be tried again.
	relaydMaxForwardHops = 2
)

// relaydForwardHops is the list of node ids a request's relaydForwardedHeader names.
func relaydForwardHops(h http.Header) []string {
	v := h.Get(relaydForwardedHeader)
	if v == "" {
		return nil
	}
	hops := strings.Split(v, ",")
	for i := range hops {
		hops[i] = strings.TrimSpace(hops[i])
	}
	return hops
}

// relaydMaxNodeID bounds a node id.
const relaydMaxNodeID = 64

// checkRelaydNodeID accepts what a node id may be: 1 to relaydMaxNodeID letters, digits, _
// or -. A loop, not a regexp: the regexp matcher it would pull in costs the binary more than
// the whole check (BENCHMARKS.md, the relay's size row).
func checkRelaydNodeID(id string) bool {
	return len(id) <= relaydMaxNodeID && checkEnvironmentID(id) == nil
}

// relaydPeer is one node of the fleet, as configured.
type relaydPeer struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// checkRelaydPeers checks the configuration's peer list: unique ids and URLs, each URL a
// relay base URL (checkRelaydPublicURL).
func checkRelaydPeers(peers []relaydPeer) error {
	if len(peers) > relaydMaxPeers {
		return fmt.Errorf("peers: at most %d", relaydMaxPeers)
	}
	ids, urls := map[string]bool{}, map[string]bool{}
	for i, p := range peers {
		if !checkRelaydNodeID(p.ID) {
			return fmt.Errorf("peers[%d]: id %q: want 1 to 64 letters, digits, _ or -", i, p.ID)
		}
		if err := checkRelaydPublicURL(p.URL); err != nil {
			return fmt.Errorf("peers[%d] (%s): url %q: %w", i, p.ID, p.URL, err)
		}
		if ids[p.ID] || urls[p.URL] {
			return fmt.Errorf("peers[%d] (%s): id and url must be unique", i, p.ID)
		}
		ids[p.ID], urls[p.URL] = true, true
	}
	return nil
}

// loadRelaydPeerCA reads the PEM certificates that peers' TLS certificates may chain to,
// beside the system roots.
func loadRelaydPeerCA(path string) (*x509.CertPool, error) {
	pemBytes, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// relaydWeight is the rendezvous-hashing weight of a node for an environment: SHA-256 of
// both, the same in every process and every version, so that every node computes the same
// owner from the same live set.
func relaydWeight(nodeID, envID string) uint64 {
	h := sha256.New()
	h.Write([]byte(nodeID))
	h.Write([]byte{0})
	h.Write([]byte(envID))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}

// relaydOwner picks the owner of envID among peers for which live is true: the highest
// weight, ties to the smaller id. ok is false if no peer is live.
func relaydOwner(peers []relaydPeer, envID string, live func(id string) bool) (owner relaydPeer, ok bool) {
	var best uint64
	for _, p := range peers {
		if !live(p.ID) {
			continue
		}
		w := relaydWeight(p.ID, envID)
		if !ok || w > best || (w == best && p.ID < owner.ID) {
			owner, best, ok = p, w, true
		}
	}
	return owner, ok
}

// relaydFleet is a node's view of its peers: which are down, and at which addresses they
// were reached.
type relaydFleet struct {
	self   string // this node's id
	client *http.Client

	mu   sync.Mutex
	down map[string]bool // peer id → its last probe or forward dial failed
	// addrs: peer id → the address its last probe reached it at. A connection from one of
	// them is a peer's (isPeer).
	addrs map[string]netip.Addr
}

func newRelaydFleet(self string, roots *x509.CertPool) *relaydFleet {
	tr := &http.Transport{
		Proxy:               nil, // peers are reached directly
		DialContext:         (&net.Dialer{Timeout: relaydPeerProbeTimeout}).DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: relaydPeerProbeTimeout,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     relaydHTTPIdle,
	}
	return &relaydFleet{self: self, down: map[string]bool{}, addrs: map[string]netip.Addr{},
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// live says whether a peer takes part in placement: this node always does.
func (f *relaydFleet) live(id string) bool {
	if id == f.self {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.down[id]
}

// mark records a peer's state and says whether it changed.
func (f *relaydFleet) mark(id string, up bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	changed := f.down[id] == up
	if up {
		delete(f.down, id)
	} else {
		f.down[id] = true
	}
	return changed
}

// reachedAt records the address a peer's probe reached it at.
func (f *relaydFleet) reachedAt(id string, a net.Addr) {
	if _, addr := relaydSource(a); addr.IsValid() {
		f.mu.Lock()
		f.addrs[id] = addr
		f.mu.Unlock()
	}
}

// isPeer says whether a connection from addr comes from a peer: from an address at which
// this node reached one. The rule of docs/remote.md §12.5: a node's connections to its
// peers come from the address its own URL names, unless it sits behind NAT or a proxy, or
// its host has several; then its connections are treated as anyone's.
func (f *relaydFleet) isPeer(addr netip.Addr) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.addrs {
		if a == addr {
			return true
		}
	}
	return false
}

// forgetAddrs drops the addresses of ids no longer among peers (a reload took them out).
func (f *relaydFleet) forgetAddrs(peers []relaydPeer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.addrs {
		if !slices.ContainsFunc(peers, func(p relaydPeer) bool { return p.ID == id }) {
			delete(f.addrs, id)
		}
	}
}

// liveIDs lists the peers taking part in placement, for /readyz.
func (f *relaydFleet) liveIDs(peers []relaydPeer) []string {
	ids := []string{}
	for _, p := range peers {
		if f.live(p.ID) {
			ids = append(ids, p.ID)
		}
	}
	sort.Strings(ids)
	return ids
}

// owner is the node that serves envID: this one when the relay is not in a fleet.
func (d *relayd) owner(envID string) relaydPeer {
	cfg := d.cfg.Load()
	if d.fleet == nil || len(cfg.peers) == 0 {
		return relaydPeer{ID: "", URL: d.public}
	}
	p, ok := relaydOwner(cfg.peers, envID, d.fleet.live)
	if !ok { // cannot happen: this node is in the list and always live
		return relaydPeer{ID: d.fleet.self, URL: d.public}
	}
	return p
}

// place names the node that serves an environment: the base URL its rendezvous URLs point
// at. The one mapping of environment ids to nodes (docs/remote.md 12.7).
func (d *relayd) place(envID string) string { return d.owner(envID).URL }

// probePeers asks every peer's /readyz each relaydPeerProbeInterval until ctx ends, and after
// each round gives up the registrations this node no longer owns.
func (d *relayd) probePeers(ctx context.Context) {
	t := time.NewTicker(relaydPeerProbeInterval)
	defer t.Stop()
	defer d.fleet.client.CloseIdleConnections()
	for {
		d.probeRound(ctx)
		d.rebalance()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeRound probes the peers at once and waits for every probe.
func (d *relayd) probeRound(ctx context.Context) {
	peers := d.cfg.Load().peers
	d.fleet.forgetAddrs(peers)
	var wg sync.WaitGroup
	for _, p := range peers {
		if p.ID == d.fleet.self {
			continue
		}
		wg.Add(1)
		go func() { // one probe, bounded by relaydPeerProbeTimeout
			defer wg.Done()
			up := d.probe(ctx, p)
			if d.fleet.mark(p.ID, up) && ctx.Err() == nil {
				d.startMoving()
				if up {
					d.log.Info("relay: peer up", "peer", p.ID, "url", p.URL)
				} else {
					d.log.Warn("relay: peer down", "peer", p.ID, "url", p.URL)
				}
			}
		}()
	}
	wg.Wait()
}

// probe says whether a peer answers its /readyz with 200 in time, and records the address
// it reached the peer at.
func (d *relayd) probe(ctx context.Context, p relaydPeer) bool {
	ctx, cancel := context.WithTimeout(ctx, relaydPeerProbeTimeout)
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(c httptrace.GotConnInfo) { d.fleet.reachedAt(p.ID, c.Conn.RemoteAddr()) },
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := d.fleet.client.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, relaydPeerMaxAnswer))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// rebalance gives up the registrations whose owner is now another node: their sockets are
// closed, and the executors register again, on the owner.
func (d *relayd) rebalance() {
	d.mu.Lock()
	var drop []*relaydSocket
	var moved []string
	for id, env := range d.envs {
		if d.owner(id).ID != d.fleet.self {
			d.dropEnvLocked(env)
			drop = append(drop, d.retireLocked(env)...)
			moved = append(moved, id)
		}
	}
	d.mu.Unlock()
	for _, s := range drop {
		s.ws.closeTCP()
	}
	for _, id := range moved {
		d.log.Info("relay: environment moved to its owner", "environment_id", id, "owner", d.owner(id).ID)
	}
}

// forwardToOwner serves a registry request (op on envID) whose environment another node
// owns: the bearer is checked here, then the request goes to the owner and its answer back.
// It returns false when this node should serve the request itself: not in a fleet, or this
// node the owner (perhaps after the owner's dial failed). A request marked as forwarded is
// forwarded again like any other (the mark is the client's to forge:
// TestAdv24ForgedForwardedHeader), unless it passed relaydMaxForwardHops nodes or this one
// already: then it is answered 503.
func (d *relayd) forwardToOwner(w http.ResponseWriter, r *http.Request, envID, op string) bool {
	if d.fleet == nil {
		return false
	}
	owner := d.owner(envID)
	if owner.ID == d.fleet.self {
		return false
	}
	if d.relaydBearer(w, r, envID, op != "connect") == nil {
		return true
	}
	hops := relaydForwardHops(r.Header)
	if len(hops) >= relaydMaxForwardHops || slices.Contains(hops, d.fleet.self) {
		d.peerLog.Info("relay: forward loop refused", "environment_id", envID, "owner", owner.ID, "hops", len(hops))
		w.Header().Set("Retry-After", "1")
		relaydError(w, http.StatusServiceUnavailable, "peer_unavailable", "the nodes disagree on who serves environment "+envID+": try again")
		return true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, relaydMaxBody+1))
	if err != nil || len(body) > relaydMaxBody {
		relaydError(w, http.StatusBadRequest, "invalid_request", "the body is unreadable or over its limit")
		return true
	}
	mark := strings.Join(append(hops, d.fleet.self), ",")
	for tries := 0; owner.ID != d.fleet.self && tries < len(d.cfg.Load().peers); tries++ {
		resp, err := d.forwardOnce(r, owner, body, mark)
		var dialErr *net.OpError
		if err != nil && errors.As(err, &dialErr) && dialErr.Op == "dial" {
			// The owner is gone: leave it out now, without waiting for the probe.
			if d.fleet.mark(owner.ID, false) {
				d.startMoving()
				d.log.Warn("relay: peer down", "peer", owner.ID, "url", owner.URL, "error", err)
			}
			owner = d.owner(envID)
			continue
		}
		if err != nil {
			d.peerLog.Info("relay: forward failed", "environment_id", envID, "peer", owner.ID, "error", err)
			relaydError(w, http.StatusBadGateway, "peer_unavailable", "the node serving environment "+envID+" did not answer: try again")
			return true
		}
		for _, k := range []string{"Content-Type", "Cache-Control", "Www-Authenticate", "Retry-After", rendezvousRejectionHeader} {
			if v := resp.header.Get(k); v != "" {
				w.Header().Set(k, v)
			}
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(resp.body)))
		w.WriteHeader(resp.status)
		w.Write(resp.body)
		return true
	}
	r.Body = io.NopCloser(bytes.NewReader(body)) // this node owns it now
	return false
}

// relaydAnswer is a forwarded request's answer, read whole.
type relaydAnswer struct {
	status int
	header http.Header
	body   []byte
}

// forwardOnce sends a registry request to a peer within relaydPeerForwardTimeout.
func (d *relayd) forwardOnce(r *http.Request, to relaydPeer, body []byte, mark string) (*relaydAnswer, error) {
	ctx, cancel := context.WithTimeout(r.Context(), relaydPeerForwardTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, to.URL+r.URL.Path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"Authorization", "Content-Type", registryStreamIDHeader} {
		if v := r.Header.Get(k); v != "" {
			req.Header.Set(k, v)
		}
	}
	req.Header.Set(relaydForwardedHeader, mark)
	resp, err := d.fleet.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// A final status only: the answer is passed on with WriteHeader, which takes nothing
	// outside 100-999 (a peer's "000" made it panic: FuzzRelaydFleet), and an informational
	// or switching status would be followed by an implicit 200.
	if resp.StatusCode < 200 || resp.StatusCode > 599 {
		return nil, fmt.Errorf("the peer answered status %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, relaydPeerMaxAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if len(b) > relaydPeerMaxAnswer {
		return nil, fmt.Errorf("answer over %d bytes", relaydPeerMaxAnswer)
	}
	return &relaydAnswer{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// startMoving opens a relaydMoveWindow: the live set changed, executors will register
// again, and connects wait for them.
func (d *relayd) startMoving() {
	d.mu.Lock()
	d.moving = d.now().Add(relaydMoveWindow)
	d.mu.Unlock()
}

// peer finds a node of the configuration's peer list by id.
func (c *relaydConfig) peer(id string) *relaydPeer {
	for i := range c.peers {
		if c.peers[i].ID == id {
			return &c.peers[i]
		}
	}
	return nil
}

// checkFleetConfig refuses a reloaded configuration that would change what this node is: in
// a fleet, it must still list this node at the same URL; out of one, it must list no peers.
func (d *relayd) checkFleetConfig(cfg *relaydConfig) error {
	if d.fleet == nil {
		if len(cfg.peers) > 0 {
			return errors.New("peers added: a node joins a fleet at start (--node-id), not on reload")
		}
		return nil
	}
	p := cfg.peer(d.fleet.self)
	if p == nil || p.URL != d.public {
		return fmt.Errorf("peers: this node (%s at %s) must stay in the list at its url", d.fleet.self, d.public)
	}
	return nil
}

// readyz answers GET /readyz: 200 while serving, 503 once shutting down (so that peers stop
// placing environments here at once); in a fleet it names this node and the peers it sees
// live.
func (d *relayd) readyz(w http.ResponseWriter) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		relaydError(w, http.StatusServiceUnavailable, "pod_draining", "the relay is shutting down")
		return
	}
	v := map[string]any{"status": "ready"}
	if d.fleet != nil {
		v["node_id"] = d.fleet.self
		v["live_peers"] = d.fleet.liveIDs(d.cfg.Load().peers)
	}
	relaydJSON(w, http.StatusOK, v)
}
