package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRPCVectors replays the scripted sessions of testdata/rpc/*.txt, each on a fresh
// websocket connection, and checks every server message in order.
func TestRPCVectors(t *testing.T) {
	files := vectorFiles(t, "testdata/rpc/*.txt")
	ts := startTestServer(t)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			playVectors(t, ts.url, file, nil)
		})
	}
}

// rpcReference is the "checked against:" field of the sessions a reference has given
// every answer of.
const rpcReference = "codex 0.169"

// TestRPCVectorsAgainstReference replays the vector files that say "checked against: codex
// 0.169" against a running reference (EXEC_SERVER_REFERENCE_URL=ws://…, a `codex exec-server`
// 0.169 started by hand), so that a claim of parity can be checked again.
func TestRPCVectorsAgainstReference(t *testing.T) {
	url := os.Getenv("EXEC_SERVER_REFERENCE_URL")
	if url == "" {
		t.Skip("EXEC_SERVER_REFERENCE_URL is not set: no reference to compare with")
	}
	for _, file := range vectorFiles(t, "testdata/rpc/*.txt") {
		if c := readVectorCase(t, file); c.fields["checked against"] != rpcReference {
			continue
		}
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			playVectors(t, url, file, nil)
		})
	}
}

// playVectors replays the steps of one vector file (one case) on a fresh websocket connection
// to url. Each key of vars is replaced by its value in sent and expected text (quoted for
// regular expressions).
func playVectors(t *testing.T, url, file string, vars map[string]string) {
	t.Helper()
	c := readVectorCase(t, file)
	c.only(t, "name", "checked against")
	var plain, quoted []string
	for k, v := range vars {
		plain = append(plain, k, v)
		quoted = append(quoted, k, regexp.QuoteMeta(v))
	}
	plainR, quotedR := strings.NewReplacer(plain...), strings.NewReplacer(quoted...)
	ws, _, err := dialWebsocket(context.Background(), url, nil, nil, wsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.close(nil)
	for _, s := range c.steps {
		n, body := s.line, s.text
		switch s.kind {
		case ">>":
			if err := ws.writeMessageOp(wsOpText, []byte(plainR.Replace(body))); err != nil {
				t.Fatalf("line %d: send: %v", n, err)
			}
		case "<<", "<~":
			ws.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
			got, err := ws.readMessage()
			if err != nil {
				t.Fatalf("line %d: want %s, read error %v", n, body, err)
			}
			if want := plainR.Replace(body); s.kind == "<<" && string(got) != want {
				t.Errorf("line %d:\n got %s\nwant %s", n, got, want)
			}
			if s.kind == "<~" && !regexp.MustCompile("^(?s:"+quotedR.Replace(body)+")$").Match(got) {
				t.Errorf("line %d:\n got %s\nwant match of %s", n, got, body)
			}
		case "<x":
			ws.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
			if got, err := ws.readMessage(); err == nil {
				t.Fatalf("line %d: want the connection to end, got %s", n, got)
			} else if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("line %d: the connection did not end", n)
			}
		}
	}
}
