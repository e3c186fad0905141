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
