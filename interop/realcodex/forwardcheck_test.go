package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

const refHead = "GET / HTTP/1.1\r\nHost: 127.0.0.1:41234\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
	"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"

func TestMaskHead(t *testing.T) {
	got := maskHead([]byte(refHead))
	want := []string{"GET / HTTP/1.1", "Host: 127.0.0.1:<port>", "Connection: Upgrade", "Upgrade: websocket",
		"Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: <random>"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("maskHead = %q", got)
	}
	if v := headValue([]byte(refHead), "sec-websocket-version"); v != "13" {
		t.Errorf("headValue = %q", v)
	}
}

func TestCompareUpgrades(t *testing.T) {
	ref := &forwardRun{heads: [][]byte{[]byte(refHead)}, msgTypes: "forward->target binary"}
	respelt := "GET / HTTP/1.1\r\nHost: 127.0.0.1:5\r\nConnection: Upgrade\r\nSec-Websocket-Key: x\r\n" +
		"Sec-Websocket-Version: 13\r\nUpgrade: websocket\r\n\r\n"
	status := func(rs []stepResult) []string {
		var out []string
		for _, r := range rs {
			switch {
			case r.Skip:
				out = append(out, "SKIP")
			case r.OK:
				out = append(out, "PASS")
			default:
				out = append(out, "FAIL")
			}
		}
		return out
	}
	same := &forwardRun{heads: [][]byte{[]byte(strings.Replace(refHead, "41234", "7", 1))}, msgTypes: "forward->target binary"}
	if got := status(compareUpgrades(same, ref)); !reflect.DeepEqual(got, []string{"PASS", "PASS", "PASS", "PASS", "PASS"}) {
		t.Errorf("identical upgrades: %v", got)
	}
	ours := &forwardRun{heads: [][]byte{[]byte(respelt), []byte(respelt)}, msgTypes: "forward->target text"}
	rs := compareUpgrades(ours, ref)
	if got := status(rs); !reflect.DeepEqual(got, []string{"PASS", "PASS", "PASS", "FAIL", "FAIL"}) { // same fields, other spelling and order: still a difference
		t.Errorf("respelt upgrade: %v", got)
	}
	if !strings.Contains(rs[3].Detail, "+ Sec-Websocket-Key: <random>") || !strings.Contains(rs[3].Detail, "- Sec-WebSocket-Key: <random>") {
		t.Errorf("respelt detail:\n%s", rs[3].Detail)
	}
	extra := &forwardRun{heads: [][]byte{[]byte(strings.Replace(refHead, "\r\n\r\n", "\r\nUser-Agent: x\r\n\r\n", 1))}, msgTypes: "forward->target binary"}
	rs = compareUpgrades(extra, ref)
	if got := status(rs); got[2] != "FAIL" || !strings.Contains(rs[2].Detail, "+ user-agent: x") {
		t.Errorf("extra header: %v\n%s", got, rs[2].Detail)
	}
	if got := status(compareUpgrades(ours, &forwardRun{skipped: "no"})); !reflect.DeepEqual(got, []string{"SKIP"}) {
		t.Errorf("skipped control: %v", got)
	}
}

func TestResetResult(t *testing.T) {
	for _, c := range []struct {
		resets []string
		want   int
		ok     bool
	}{
		{nil, 0, true},
		{[]string{"executor->harness s1 noise_relay_protocol_error"}, 0, false},
		{[]string{"executor->harness s1 noise_relay_protocol_error", "executor->harness s1 noise_relay_protocol_error"}, 1, true},
		{[]string{"executor->harness s1 noise_relay_protocol_error", "executor->harness s2 noise_relay_protocol_error"}, 1, false},
		{[]string{"executor->harness s1 other"}, 1, false},
	} {
		if r := resetResult(c.resets, c.want, ""); r.OK != c.ok {
			t.Errorf("resetResult(%v, %d).OK = %v", c.resets, c.want, r.OK)
		}
	}
}

// TestProxyHeadsAndPass checks that the proxy records the client's upgrade head byte for byte
// (spelling and order kept) and copies only the named headers upstream.
func TestProxyHeadsAndPass(t *testing.T) {
	upstreamAuth := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamAuth <- r.Header.Get("Authorization") + "|" + r.Header.Get("X-Other")
		c, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			typ, b, err := c.ReadMessage()
			if err != nil || c.WriteMessage(typ, b) != nil {
				return
			}
		}
	}))
	defer up.Close()
	logf := newEventLog(io.Discard, false)
	p, err := startWSProxy(logf, "test", "ws"+strings.TrimPrefix(up.URL, "http"), "Authorization")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	conn, err := net.Dial("tcp", strings.TrimPrefix(p.URL(), "ws://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	head := "GET /x HTTP/1.1\r\nHost: " + strings.TrimPrefix(p.URL(), "ws://") + "\r\nupgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nauthorization: Bearer t\r\nX-Other: o\r\n\r\n"
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 12)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "HTTP/1.1 101" {
		t.Fatalf("answer %q, %v", buf, err)
	}
	if got := <-upstreamAuth; got != "Bearer t|" {
		t.Errorf("upstream saw Authorization|X-Other %q", got)
	}
	heads := p.Heads()
	if len(heads) != 1 || string(heads[0]) != head {
		t.Errorf("heads %q", heads)
	}
	if n := p.DropAll(); n != 1 {
		t.Errorf("DropAll = %d, want 1", n)
	}
}
