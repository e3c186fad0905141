//go:build linux

package main

// Adversarial tests of round 29 (docs/network.md §2 "Keep-alive", docs/remote.md §12.3): each
// is an attack that worked on the integration branch, kept as a failing test until the fix.
// Every verdict is read on the host (which requests the test host parsed), never from what
// the attacking client got back. Linux only: they use the proxy test helpers of
// netproxy_linux_test.go.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// adv29Dial opens a raw client connection to p's HTTP port.
func adv29Dial(t *testing.T, p *netProxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.httpAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

// adv29AwaitHost waits until h recorded at least n requests past before (the smuggled one
// is parsed after the proxy relayed the first answer), or 3 s passed, and returns them.
func adv29AwaitHost(h *keepAliveHost, before, n int) []string {
	deadline := time.Now().Add(3 * time.Second)
	for {
		got := h.requests()[before:]
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAdv29LimitedSmuggleConnectionContentLength: in limited mode a GET that names
// Content-Length in its Connection header has that header stripped as hop-by-hop on the way
// to its host, while the proxy still frames (and forwards) the body by it. The host then
// reads the body as a second request on its connection: a POST, which limited mode must
// never let reach a host. The test host (startKeepAliveHost, which, like many servers,
// reads a pipelined request after a 204) records it.
func TestAdv29LimitedSmuggleConnectionContentLength(t *testing.T) {
	a := startKeepAliveHost(t, "127.0.0.1")
	p := startIdleTestProxyWith(t, `{"mode":"limited","domains":{"127.0.0.1":"allow"}}`)
	before := len(a.requests())
	c, br := adv29Dial(t, p)
	smuggled := fmt.Sprintf("POST /smuggled HTTP/1.1\r\nHost: %s\r\nContent-Length: 3\r\n\r\nabc", a.addr)
	fmt.Fprintf(c, "GET http://%s/204 HTTP/1.1\r\nHost: %s\r\nConnection: Content-Length\r\nContent-Length: %d\r\n\r\n%s",
		a.addr, a.addr, len(smuggled), smuggled)
	code, _, _ := readAnswer(t, br, "GET")
	got := adv29AwaitHost(a, before, 2)
	t.Logf("client got %d; host parsed %q", code, got)
	for _, r := range got {
		if strings.HasPrefix(r, "POST") {
			t.Errorf("limited mode: the host parsed %q, a POST smuggled in a GET's body whose Content-Length the Connection header dropped", r)
		}
	}
}

// TestAdv29LimitedSmuggleChunkedTrailer: the proxy checks a chunked request body's chunks
// but not its trailer lines, and ends the trailer section only at a CRLF line. A bare LF
// line ends it for a lenient host (Go's net/http among them), so what the proxy forwards as
// "trailer" is read by the host as a second request: in limited mode, a POST.
func TestAdv29LimitedSmuggleChunkedTrailer(t *testing.T) {
	a := startKeepAliveHost(t, "127.0.0.1")
	p := startIdleTestProxyWith(t, `{"mode":"limited","domains":{"127.0.0.1":"allow"}}`)
	before := len(a.requests())
	c, br := adv29Dial(t, p)
	fmt.Fprintf(c, "GET http://%s/204 HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\nPOST /smuggled HTTP/1.1\r\nHost: %s\r\n\r\n",
		a.addr, a.addr, a.addr)
	// The client's answer does not matter (a proxy that refuses the trailer may end the
	// connection before or after the host's answer): the verdict is what the host parsed.
	_, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	got := adv29AwaitHost(a, before, 2)
	t.Logf("client read an answer (error %v); host parsed %q", err, got)
	for _, r := range got {
		if strings.HasPrefix(r, "POST") {
			t.Errorf("limited mode: the host parsed %q, a POST smuggled in a chunked GET's trailer after a bare-LF line", r)
		}
	}
}

// adv29VhostHost is a test host that, like a server of several names behind one address,
// reads request after request on a connection (each answered 204, the connection kept) and
// records each as "METHOD Host /path".
type adv29VhostHost struct {
	addr string
	mu   sync.Mutex
	got  []string
}

func startAdv29VhostHost(t *testing.T) *adv29VhostHost {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &adv29VhostHost{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					h.mu.Lock()
					h.got = append(h.got, req.Method+" "+req.Host+" "+req.URL.Path)
					h.mu.Unlock()
					if _, err := io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return h
}

func (h *adv29VhostHost) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

// TestAdv29FullModeSmuggleOtherHost: in full mode the same smuggling (a GET whose
// Connection header names Content-Length) carries a request with another Host header to the
// allowed host's address. The proxy checks that the Host header of a request matches the
// host it judged; the smuggled one is never checked, and a server of several names behind
// one address (a CDN, a shared front end) serves it as the denied name.
func TestAdv29FullModeSmuggleOtherHost(t *testing.T) {
	h := startAdv29VhostHost(t)
	p := startIdleTestProxyWith(t, `{"domains":{"127.0.0.1":"allow","denied.example":"deny"}}`)
	c, br := adv29Dial(t, p)
	smuggled := "GET /secret HTTP/1.1\r\nHost: denied.example\r\n\r\n"
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: Content-Length\r\nContent-Length: %d\r\n\r\n%s",
		h.addr, h.addr, len(smuggled), smuggled)
	code, _, _ := readAnswer(t, br, "GET")
	deadline := time.Now().Add(3 * time.Second)
	for len(h.requests()) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	got := h.requests()
	t.Logf("client got %d; host parsed %q", code, got)
	for _, r := range got {
		if strings.Contains(r, "denied.example") {
			t.Errorf("full mode: the allowed host's address parsed %q, a request for a denied name smuggled in an allowed request's body", r)
		}
	}
}

// TestAdv29ResponseDesyncChunkedTrailer: the answer side of the unchecked trailer. A host
// (allowed, attacker-run) answers chunked and ends its trailer with a bare LF line, then
// sends what the proxy passes on as trailer lines: a whole answer head. A client that ends
// a trailer at a bare LF (Go's net/http) reads that head as the answer to its next request,
// sent to another host: host A's answer delivered as host B's. Read on host B: what it
// really answered, against what the client was given as its answer.
func TestAdv29ResponseDesyncChunkedTrailer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\n"+
			"HTTP/1.1 200 OK\r\nX-Forged-By: host-a\r\nContent-Length: 0\r\n\r\n")
	}()
	b := startKeepAliveHost(t, "127.0.0.2")
	p := startIdleTestProxyWith(t, `{"domains":{"127.0.0.1":"allow","127.0.0.2":"allow"}}`)
	c, br := adv29Dial(t, p)
	addrA := ln.Addr().String()
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", addrA, addrA)
	// A proxy that refuses the trailer cuts host A's answer and ends the connection: then
	// nothing is read as B's answer, which is the safe outcome.
	if resp, err := http.ReadResponse(br, &http.Request{Method: "GET"}); err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		t.Logf("host A's answer read (body error %v)", err)
	}
	fmt.Fprint(c, keepAliveRequest("GET", b, "/b", "", ""))
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Logf("no answer read after host A's (%v): the connection ended, nothing forged reached the client", err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	t.Logf("host B received %q and answered %q; the client read %d %q, X-Forged-By %q", b.requests(), "hello 127.0.0.2 /b",
		resp.StatusCode, body, resp.Header.Get("X-Forged-By"))
	if resp.Header.Get("X-Forged-By") != "" || string(body) != "hello 127.0.0.2 /b" {
		t.Errorf("the answer to the request to host B is host A's forged head (X-Forged-By %q, body %q), not B's %q",
			resp.Header.Get("X-Forged-By"), body, "hello 127.0.0.2 /b")
	}
}

// TestAdv29ResponseDesyncConnectionContentLength: a host's answer whose Connection header
// names Content-Length is framed by the proxy with that length but relayed without it, and
// the connection kept. The client, reading an HTTP/1.1 answer without length, takes
// everything until the close as its body: the answer of the next request, from another
// host, is delivered inside host A's answer. Read on host B: it got its request and
// answered; the client never gets that answer as B's.
func TestAdv29ResponseDesyncConnectionContentLength(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: Content-Length\r\n\r\nok")
	}()
	b := startKeepAliveHost(t, "127.0.0.2")
	p := startIdleTestProxyWith(t, `{"domains":{"127.0.0.1":"allow","127.0.0.2":"allow"}}`)
	c, br := adv29Dial(t, p)
	addrA := ln.Addr().String()
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", addrA, addrA)
	fmt.Fprint(c, keepAliveRequest("GET", b, "/b", "", ""))
	_, bodyA, _ := readAnswer(t, br, "GET")
	t.Logf("host B received %q; the client read host A's body as %q", b.requests(), bodyA)
	if bodyA != "ok" {
		t.Errorf("host A's answer, relayed without the Content-Length the proxy framed it by, swallowed what followed: %q", bodyA)
	}
}
