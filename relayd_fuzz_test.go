package main

// Fuzz targets of `exec-server relay` (docs/remote.md "Self-hosted relay"): the frame
// routing of the rendezvous, and the HTTP handling of the registry and the upgrade.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// FuzzRelaydRoute: what the rendezvous routes on. A frame it accepts has a non-blank stream id
// within the limit and a body, and its re-encoding routes the same way; anything else is an
// error, never a panic.
func FuzzRelaydRoute(f *testing.F) {
	for _, fr := range []relayFrame{
		{version: 1, streamID: "s-1", body: relayBodyResume},
		{version: 1, streamID: "s-1", body: relayBodyHandshake, payload: []byte{1, 2, 3}},
		{version: 1, streamID: "00000000-0000-4000-8000-000000000001", body: relayBodyData, seq: 5, segmentCount: 1, payload: []byte("x")},
		{version: 1, streamID: "s", body: relayBodyReset, reason: "harness_disconnected"},
		{version: 2, streamID: "s", body: relayBodyHeartbeat},
	} {
		f.Add(appendRelayFrame(nil, &fr))
	}
	f.Add([]byte{0x08, 0x01, 0x12, 0x03, 's', '-', '1', 0x3a, 0x00, 0x5a, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, body, err := relaydRoute(b)
		if err != nil {
			if id != "" || body != relayBodyNone {
				t.Fatalf("an error with a route: %q %v", id, body)
			}
			return
		}
		if strings.TrimSpace(id) == "" || len(id) > relayMaxStreamID || body == relayBodyNone {
			t.Fatalf("accepted stream %q body %v", id, body)
		}
		fr, _ := decodeRelayFrame(b)
		id2, body2, err := relaydRoute(appendRelayFrame(nil, &fr))
		if err != nil || id2 != id || body2 != body {
			t.Fatalf("re-encoded: %q %v %v, want %q %v", id2, body2, err, id, body)
		}
	})
}

// relaydFuzzTokens are the static tokens of FuzzRelaydHTTP's configuration.
const (
	relaydFuzzFleet = "fleet-token-0123456789"
	relaydFuzzAlice = "alice-token-0123456789"
)

// FuzzRelaydHTTP: up to four HTTP requests of the fuzzer's making, read as a server reads
// them, served in turn by one fresh relay. Every answer is JSON with a status of the
// documented set; a 200 from the registry goes only to a bearer that holds the grant; and
// once the requests are served, no socket or connection is left counted.
func FuzzRelaydHTTP(f *testing.F) {
	dir := f.TempDir()
	for name, v := range map[string]string{"fleet.token": relaydFuzzFleet, "alice.token": relaydFuzzAlice, "env.secret": strings.Repeat("s", 40)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			f.Fatal(err)
		}
	}
	config := filepath.Join(dir, "relay.json")
	os.WriteFile(config, []byte(`{"tokens":[{"name":"fleet","file":"fleet.token","register":["box-*"]},
		{"name":"alice","file":"alice.token","connect":["box-*"]}],"environment_token_secret_file":"env.secret"}`), 0o600)
	cfg, err := loadRelaydConfig(config)
	if err != nil {
		f.Fatal(err)
	}
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	key, _ := json.Marshal(id.publicKey())
	req := func(path, bearer, body string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, bearer, len(body), body)
	}
	register := req("/cloud/environment/box-1/register", relaydFuzzFleet, `{"security_profile":"noise_hybrid_ik_v1","executor_public_key":`+string(key)+`}`)
	connect := req("/cloud/environment/box-1/connect", relaydFuzzAlice, `{"harness_public_key":`+string(key)+`}`)
	validate := req("/cloud/environment/box-1/validate", relaydFuzzFleet, `{"executor_registration_id":"reg-1","harness_public_key":`+string(key)+`,"harness_key_authorization":"hka-1"}`)
	upgrade := "GET /relay/v1/harness/box-1?role=harness&ticket=t HTTP/1.1\r\nHost: r\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	perEnv := req("/cloud/environment/box-2/register", relaydMintToken(cfg.secret, relaydRoleExecutor, "box-2", time.Unix(1<<40, 0)), `{}`)
	for _, s := range []string{register, register + connect, register + connect + validate, register + upgrade, perEnv,
		"GET /readyz HTTP/1.1\r\nHost: r\r\n\r\n", "GET /cloud/environment/box-1/register HTTP/1.1\r\nHost: r\r\n\r\n"} {
		f.Add([]byte(s))
	}
	allowed := map[int]bool{200: true, 400: true, 401: true, 403: true, 404: true, 405: true, 429: true, 503: true}
	f.Fuzz(func(t *testing.T, b []byte) {
		d := newRelayd(cfg, "http://127.0.0.1:1", newTextLogger(io.Discard, levelInfo))
		d.moving = time.Time{} // a connect's wait for a moving registration is timing, not parsing
		br := bufio.NewReader(bytes.NewReader(b))
		for range 4 {
			r, err := http.ReadRequest(br)
			if err != nil {
				break
			}
			r.RemoteAddr = "127.0.0.1:2"
			w := httptest.NewRecorder()
			d.ServeHTTP(w, r)
			r.Body.Close()
			if w.Code == http.StatusInternalServerError && strings.HasPrefix(r.URL.Path, relaydRendezvousPath) {
				continue // an admitted upgrade: the recorder cannot be hijacked
			}
			if !allowed[w.Code] || !json.Valid(w.Body.Bytes()) {
				t.Fatalf("%s %s: %d %q", r.Method, r.URL, w.Code, w.Body.Bytes())
			}
			if w.Code == http.StatusOK && strings.HasPrefix(r.URL.Path, "/cloud/environment/") {
				tok, err := cfg.authenticate(r.Header, time.Now())
				if err != nil {
					t.Fatalf("%s answered 200 to a bearer it does not know", r.URL.Path)
				}
				envID, op, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/cloud/environment/"), "/")
				grants := tok.register
				if op == "connect" {
					grants = tok.connect
				}
				if !tok.may(grants, envID) {
					t.Fatalf("%s answered 200 to token %s without the grant", r.URL.Path, tok.name)
				}
			}
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.sockets != 0 || len(d.conns) != 0 || len(d.live) != 0 {
			t.Fatalf("left counted: %d sockets, conns %v", d.sockets, d.conns)
		}
	})
}

// relaydFuzzPeer is a peer node of FuzzRelaydFleet: a loopback listener that reads each
// request a node sends it, records its head, and answers with the bytes of the current
// input, then closes.
type relaydFuzzPeer struct {
	ln     net.Listener
	url    string
	answer atomic.Pointer[[]byte]
	mu     sync.Mutex
	got    []*http.Request // the requests read since the last take
	wg     sync.WaitGroup
}

func startRelaydFuzzPeer(f *testing.F) *relaydFuzzPeer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	p := &relaydFuzzPeer{ln: ln, url: "http://" + ln.Addr().String()}
	p.answer.Store(&[]byte{})
	p.wg.Add(1)
	go func() { // the accept loop: ends when the listener is closed
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() { // one connection: ends within its deadline
				defer p.wg.Done()
				p.serve(c)
			}()
		}
	}()
	f.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

// serve answers one connection, each in a goroutine of its own: a connection the node opened
// and left idle must not hold back the next input's requests.
func (p *relaydFuzzPeer) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	io.Copy(io.Discard, r.Body)
	if r.URL.Path != "/readyz" { // a probe is not a forward; a late one (its client gave up) must not count for the next input
		p.mu.Lock()
		p.got = append(p.got, r)
		p.mu.Unlock()
	}
	c.Write(*p.answer.Load())
}

func (p *relaydFuzzPeer) take() []*http.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	got := p.got
	p.got = nil
	return got
}

// FuzzRelaydFleet: what a fleet node parses from others (docs/remote.md 12.7). A client's
// registry request (with or without the forwarded mark, for any environment, so any owner)
// and a peer's answer (any bytes, to the forwarded request and to the /readyz probe) are of
// the fuzzer's making, and down picks peers that are not listening. The node (a, of a, b, c)
// serves the request: a request marked as forwarded, or from a bearer without the grant, is
// never forwarded; a forwarded one goes to the owner placement names, at most once per peer,
// with the mark and the client's bearer; what comes back carries only the headers the node
// passes on; the owner placement names is a live node with the highest weight.
func FuzzRelaydFleet(f *testing.F) {
	dir := f.TempDir()
	for name, v := range map[string]string{"fleet.token": relaydFuzzFleet, "alice.token": relaydFuzzAlice} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			f.Fatal(err)
		}
	}
	b, c := startRelaydFuzzPeer(f), startRelaydFuzzPeer(f)
	dead, err := net.Listen("tcp", "127.0.0.1:0") // an address nobody listens on once closed
	if err != nil {
		f.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String()
	dead.Close()
	// down bit 0: b's URL is a closed port; bit 1: c's is port 3, where nobody listens; bit 2:
	// a probe round follows the request.
	cfgs := map[uint8]*relaydConfig{}
	for down := range uint8(4) {
		peers := []relaydPeer{{ID: "a", URL: "http://127.0.0.1:1"}, {ID: "b", URL: b.url}, {ID: "c", URL: c.url}}
		if down&1 != 0 {
			peers[1].URL = deadURL
		}
		if down&2 != 0 {
			peers[2].URL = "http://127.0.0.1:3"
		}
		raw, _ := json.Marshal(peers)
		path := filepath.Join(dir, fmt.Sprintf("relay-%d.json", down))
		os.WriteFile(path, []byte(`{"tokens":[{"name":"fleet","file":"fleet.token","register":["box-*"]},
			{"name":"alice","file":"alice.token","connect":["box-*"]}],"peers":`+string(raw)+`}`), 0o600)
		cfg, err := loadRelaydConfig(path)
		if err != nil {
			f.Fatal(err)
		}
		cfgs[down] = cfg
	}
	req := func(env, op, bearer, extra, body string) []byte {
		return []byte(fmt.Sprintf("POST /cloud/environment/%s/%s HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer %s\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			env, op, bearer, extra, len(body), body))
	}
	ok := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n{\"valid\":true}")
	for i, env := range []string{"box-1", "box-2", "box-3", "box-4", "box-5", "box-6", "box-7", "box-8"} {
		f.Add(req(env, "connect", relaydFuzzAlice, "", `{"harness_public_key":{}}`), ok, uint8(i))
		f.Add(req(env, "register", relaydFuzzFleet, "", `{}`), []byte("HTTP/1.1 404 Not Found\r\nSet-Cookie: x=1\r\nRetry-After: 3\r\n\r\n{}"), uint8(0))
		f.Add(req(env, "validate", relaydFuzzFleet, relaydForwardedHeader+": b\r\n", `{}`), ok, uint8(0))
		f.Add(req(env, "connect", relaydFuzzFleet, "", `{}`), ok, uint8(3))
	}
	f.Add(req("box-1", "connect", relaydFuzzAlice, "", `{}`), []byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"), uint8(0))
	f.Add(req("box-1", "connect", relaydFuzzAlice, "", `{}`), []byte("HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{"), uint8(0))
	passed := map[string]bool{"Content-Type": true, "Cache-Control": true, "Www-Authenticate": true, "Retry-After": true,
		http.CanonicalHeaderKey(rendezvousRejectionHeader): true, "Content-Length": true}
	f.Fuzz(func(t *testing.T, request, answer []byte, down uint8) {
		probe := down&4 != 0
		down &= 3
		cfg := cfgs[down]
		d := newRelayd(cfg, "http://127.0.0.1:1", newTextLogger(io.Discard, levelInfo))
		d.moving = time.Time{}
		d.fleet = newRelaydFleet("a", nil)
		defer d.fleet.client.CloseIdleConnections()
		b.answer.Store(&answer)
		c.answer.Store(&answer)
		b.take()
		c.take()

		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(request)))
		if err != nil {
			return
		}
		r.RemoteAddr = "127.0.0.1:2"
		envID, op, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/cloud/environment/"), "/")
		ownerBefore := d.owner(envID)
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		r.Body.Close()
		got := append(b.take(), c.take()...)

		hops := relaydForwardHops(r.Header)
		looped := len(hops) >= relaydMaxForwardHops || slices.Contains(hops, "a")
		tok, authErr := cfg.authenticate(r.Header, time.Now())
		granted := authErr == nil && tok.may(map[bool][]string{true: tok.connect, false: tok.register}[op == "connect"], envID)
		switch {
		case len(got) > 0 && looped:
			t.Fatalf("a request marked %s %q (past the hops, or through this node) was forwarded", relaydForwardedHeader, r.Header.Get(relaydForwardedHeader))
		case len(got) > 0 && !granted:
			t.Fatalf("a request without the grant was forwarded (%d)", w.Code)
		case len(got) > len(cfg.peers)-1:
			t.Fatalf("forwarded %d times", len(got))
		case len(got) > 0 && ownerBefore.ID == "a":
			t.Fatalf("forwarded a request for %s, which this node owns", envID)
		}
		for _, g := range got {
			if g.Header.Get(relaydForwardedHeader) != strings.Join(append(hops, "a"), ",") || g.Header.Get("Authorization") != r.Header.Get("Authorization") || g.URL.Path != r.URL.Path {
				t.Fatalf("forwarded %s with mark %q, bearer %q", g.URL.Path, g.Header.Get(relaydForwardedHeader), g.Header.Get("Authorization"))
			}
		}
		if len(got) > 0 {
			for k := range w.Header() {
				if !passed[k] {
					t.Fatalf("the peer's header %s was passed on", k)
				}
			}
		}
		if !d.fleet.live("a") {
			t.Fatal("this node left its own placement")
		}
		if o := d.owner(envID); !d.fleet.live(o.ID) {
			t.Fatalf("owner %s is not live", o.ID)
		} else {
			for _, p := range cfg.peers {
				if d.fleet.live(p.ID) && relaydWeight(p.ID, envID) > relaydWeight(o.ID, envID) {
					t.Fatalf("owner %s, but live %s weighs more", o.ID, p.ID)
				}
			}
		}
		// With bit 2 of down, a probe round reads the same answer: whatever it is, the round ends.
		if probe {
			d.probeRound(context.Background())
		}
	})
}
