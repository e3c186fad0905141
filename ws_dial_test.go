package main

// Tests of the websocket client side: the dial, the masked role, the CONNECT proxy.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestWSClientRole drives dialWebsocket (the relay's side) against a hand-written server:
// our frames are masked and decode right, the server's fragmented message with a ping inside
// is reassembled and the ping answered, and a masked server frame fails with 1002.
func TestWSClientRole(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		frames []wsTestFrame
		err    error
	}
	served := make(chan result, 1)
	go func() {
		var res result
		defer func() { served <- res }()
		nc, err := ln.Accept()
		if err != nil {
			res.err = err
			return
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(nc)
		req, err := http.ReadRequest(br)
		if err != nil {
			res.err = err
			return
		}
		fmt.Fprintf(nc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", acceptKey(req.Header.Get("Sec-WebSocket-Key")))
		next := func() bool {
			fr, err := readTestFrame(br)
			if err != nil {
				res.err = err
				return false
			}
			res.frames = append(res.frames, fr)
			return fr.op != wsOpClose
		}
		if !next() { // the client's text
			return
		}
		// Text in two fragments, a ping between them.
		nc.Write([]byte{0x01, 3, 'a', 'b', 'c', 0x89, 2, 'h', 'i', 0x80, 3, 'd', 'e', 'f'})
		if !next() { // the pong
			return
		}
		nc.Write(maskedFrame(0x81, wsTestKey, []byte("masked from a server")))
		next() // the client's close
	}()
	ws, _, err := dialWebsocket(context.Background(), "ws://"+ln.Addr().String(), nil, nil, wsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("0123456789abcdef"), 10000) // past the write buffer: masking continues across flushes
	keep := bytes.Clone(payload)
	if err := ws.writeMessage(payload); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(payload, keep) {
		t.Fatal("writeMessage changed the caller's bytes")
	}
	op, msg, err := ws.readFrameMessage()
	if err != nil || op != wsOpText || string(msg) != "abcdef" {
		t.Fatalf("got %d %q %v", op, msg, err)
	}
	var ce *wsCloseError
	if _, _, err := ws.readFrameMessage(); !errors.As(err, &ce) || ce.code != wsCloseProtocolError {
		t.Fatalf("masked server frame: %v", err)
	}
	res := <-served
	if len(res.frames) != 3 {
		t.Fatalf("server saw %d frames (%v)", len(res.frames), res.err)
	}
	for i, fr := range res.frames {
		if !fr.masked {
			t.Errorf("client frame %d unmasked", i)
		}
	}
	if !bytes.Equal(res.frames[0].payload, keep) || res.frames[0].op != wsOpText {
		t.Errorf("text frame decoded to %d bytes, opcode %d", len(res.frames[0].payload), res.frames[0].op)
	}
	if res.frames[1].op != wsOpPong || string(res.frames[1].payload) != "hi" {
		t.Errorf("want pong hi, got %d %q", res.frames[1].op, res.frames[1].payload)
	}
	if res.frames[2].op != wsOpClose || binary.BigEndian.Uint16(res.frames[2].payload) != wsCloseProtocolError {
		t.Errorf("want close 1002, got %d %q", res.frames[2].op, res.frames[2].payload)
	}
}

// TestWSDialThroughConnectProxy: a client dial with a proxy goes through an HTTP CONNECT
// tunnel, with the proxy's credentials, and speaks websocket through it.
func TestWSDialThroughConnectProxy(t *testing.T) {
	ts := startTestServer(t)
	target := strings.TrimPrefix(ts.url, "ws://")
	seen := make(chan string, 1)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect || r.Host != target {
			http.Error(w, "unexpected "+r.Method+" "+r.Host, http.StatusBadRequest)
			return
		}
		seen <- r.Header.Get("Proxy-Authorization")
		up, err := net.Dial("tcp", target)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		down, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			up.Close()
			return
		}
		io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n")
		go func() { io.Copy(up, brw); up.Close() }()
		io.Copy(down, up)
		down.Close()
	}))
	defer proxy.Close()
	pu, _ := url.Parse(proxy.URL)
	pu.User = url.UserPassword("u", "p")
	ws, _, err := dialWebsocket(context.Background(), ts.url, nil, nil, wsOptions{
		proxy: func(*http.Request) (*url.URL, error) { return pu, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.close(nil)
	if got := <-seen; got != "Basic dTpw" {
		t.Errorf("Proxy-Authorization %q, want Basic dTpw", got)
	}
	if err := ws.writeMessage([]byte(`{"id":1,"method":"environment/status"}`)); err != nil {
		t.Fatal(err)
	}
	ws.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	reply, err := ws.readMessage()
	if err != nil || !strings.Contains(string(reply), "must call initialize") {
		t.Fatalf("reply through the tunnel: %s %v", reply, err)
	}
}

// TestDialUpgradeRequestIs0169s compares the upgrade request's head, byte for byte but the
// random key, with what 0.169 sent to a raw listener: its rendezvous dial (x-request-id) and
// its direct dial (the SigV4 headers, in that order). A header value with a line break is
// refused before anything is dialled.
func TestDialUpgradeRequestIs0169s(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	heads := make(chan string, 1)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(nc)
			var head strings.Builder
			for {
				line, err := br.ReadString('\n')
				head.WriteString(line)
				if err != nil || line == "\r\n" {
					break
				}
			}
			io.WriteString(nc, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
			nc.Close()
			heads <- head.String()
		}
	}()
	host := ln.Addr().String()
	key := regexp.MustCompile(`(?m)^Sec-WebSocket-Key: [A-Za-z0-9+/]{22}==\r$`)
	for _, c := range []struct {
		url   string
		extra []upgradeHeader
		want  string
	}{
		{"ws://" + host + "/relay?role=environment", []upgradeHeader{{"x-request-id", "req_97203c28a9c6443495e3f48588d6e30a"}},
			"GET /relay?role=environment HTTP/1.1\r\nHost: " + host + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: <key>\r\nx-request-id: req_97203c28a9c6443495e3f48588d6e30a\r\n\r\n"},
		{"ws://" + host + "/direct", []upgradeHeader{{"X-Amz-Security-Token", "sesstok"}, {"Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261126/us-east-1/execute-api/aws4_request, SignedHeaders=host;x-amz-date;x-amz-security-token, Signature=de7b"}, {"X-Amz-Date", "20261126T021936Z"}},
			"GET /direct HTTP/1.1\r\nHost: " + host + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: <key>\r\nx-amz-security-token: sesstok\r\nauthorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261126/us-east-1/execute-api/aws4_request, SignedHeaders=host;x-amz-date;x-amz-security-token, Signature=de7b\r\nx-amz-date: 20261126T021936Z\r\n\r\n"},
		{"ws://" + host, nil,
			"GET / HTTP/1.1\r\nHost: " + host + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: <key>\r\n\r\n"},
	} {
		_, resp, err := dialWebsocket(t.Context(), c.url, c.extra, nil, wsOptions{})
		if err == nil || resp == nil || resp.StatusCode != 403 {
			t.Fatalf("%s: %v, %v; want the 403", c.url, resp, err)
		}
		if got := key.ReplaceAllString(<-heads, "Sec-WebSocket-Key: <key>\r"); got != c.want {
			t.Errorf("%s: head\n%q\nwant\n%q", c.url, got, c.want)
		}
	}
	for _, bad := range []upgradeHeader{{"Authorization", "Bearer a\r\nX-Injected: 1"}, {"Bad Name", "v"}, {"", "v"}, {"x", "nul\x00"}} {
		if _, _, err := dialWebsocket(t.Context(), "ws://"+host, []upgradeHeader{bad}, nil, wsOptions{}); err == nil || !strings.Contains(err.Error(), "invalid name or value") {
			t.Errorf("header %q: %v, want refused", bad, err)
		}
	}
	select {
	case h := <-heads:
		t.Errorf("a refused header was dialled: %q", h)
	default:
	}
}

func TestHostWithoutZone(t *testing.T) {
	for in, want := range map[string]string{
		"[fe80::1%25eth0]:80": "[fe80::1]:80", "[fe80::1%eth0]": "[fe80::1]", "[::1]:9": "[::1]:9", "127.0.0.1:9": "127.0.0.1:9", "h.example": "h.example",
	} {
		if got := hostWithoutZone(in); got != want {
			t.Errorf("hostWithoutZone(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDialBoundsTheAnswerHead: an upgrade answer, or a proxy's CONNECT answer, whose head never
// ends is refused once it passes wsMaxAnswerHeadBytes, however long the server keeps writing.
func TestDialBoundsTheAnswerHead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for { // the request's head
					line, err := br.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
				}
				io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nX-Endless: ")
				chunk := bytes.Repeat([]byte("a"), 32<<10)
				for { // until the client hangs up
					if _, err := nc.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	addr := ln.Addr().String()
	if _, _, err := dialWebsocket(t.Context(), "ws://"+addr, nil, nil, wsOptions{}); !errors.Is(err, errAnswerHeadTooLarge) {
		t.Errorf("upgrade answer: %v, want %v", err, errAnswerHeadTooLarge)
	}
	proxy := func(*http.Request) (*url.URL, error) { return &url.URL{Scheme: "http", Host: addr}, nil }
	if _, _, err := dialWebsocket(t.Context(), "ws://example.invalid", nil, nil, wsOptions{proxy: proxy}); !errors.Is(err, errAnswerHeadTooLarge) {
		t.Errorf("CONNECT answer: %v, want %v", err, errAnswerHeadTooLarge)
	}
}

// TestDialRefusesBadURLsAndHidesProxyPasswords: a URL whose request line would hold a space is
// refused before the dial, and a proxy variable that does not parse is reported without its
// value, which may carry a password.
func TestDialRefusesBadURLsAndHidesProxyPasswords(t *testing.T) {
	if _, _, err := dialWebsocket(t.Context(), "ws://127.0.0.1:9/p?q=1 HTTP/1.0", nil, nil, wsOptions{}); err == nil || !strings.Contains(err.Error(), "space or a control character") {
		t.Errorf("space in the query: %v", err)
	}
	badProxy := func(*http.Request) (*url.URL, error) {
		_, err := url.Parse("http://user:hunter2@proxy\x7f:3128")
		return nil, fmt.Errorf("invalid proxy address %q: %w", "http://user:hunter2@proxy\x7f:3128", err)
	}
	_, _, err := dialWebsocket(t.Context(), "ws://127.0.0.1:9", nil, nil, wsOptions{proxy: badProxy})
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "not a valid URL") {
		t.Errorf("bad proxy variable: %v", err)
	}
}
