package main

import (
	"bufio"
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
	files, _ := filepath.Glob("testdata/rpc/*.txt")
	if len(files) == 0 {
		t.Fatal("no vectors in testdata/rpc")
	}
	ts := startTestServer(t)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			playVectors(t, ts.url, file, nil)
		})
	}
}

// TestRPCVectorsAgainstReference replays the vector files that say "checked against codex
// 0.169" against a running reference (EXEC_SERVER_REFERENCE_URL=ws://…, a `codex exec-server`
// 0.169 started by hand), so that a claim of parity can be checked again.
func TestRPCVectorsAgainstReference(t *testing.T) {
	url := os.Getenv("EXEC_SERVER_REFERENCE_URL")
	if url == "" {
		t.Skip("EXEC_SERVER_REFERENCE_URL is not set: no reference to compare with")
	}
	files, _ := filepath.Glob("testdata/rpc/*.txt")
	for _, file := range files {
		if b, _ := os.ReadFile(file); !strings.Contains(string(b), "\n# checked against codex 0.169\n") {
			continue
		}
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			playVectors(t, url, file, nil)
		})
	}
}

// playVectors replays one vector file on a fresh websocket connection to url. Each key of vars
// is replaced by its value in sent and expected lines (quoted for regular expressions).
func playVectors(t *testing.T, url, file string, vars map[string]string) {
	t.Helper()
	var plain, quoted []string
	for k, v := range vars {
		plain = append(plain, k, v)
		quoted = append(quoted, k, regexp.QuoteMeta(v))
	}
	plainR, quotedR := strings.NewReplacer(plain...), strings.NewReplacer(quoted...)
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ws, _, err := dialWebsocket(context.Background(), url, nil, nil, wsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.close(nil)
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if len(line) < 3 || line[0] == '#' {
			continue
		}
		kind, body := line[:3], line[3:]
		switch kind {
		case ">> ":
			if err := ws.writeMessageOp(wsOpText, []byte(plainR.Replace(body))); err != nil {
				t.Fatalf("line %d: send: %v", n, err)
			}
		case "<< ", "<~ ":
			ws.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
			got, err := ws.readMessage()
			if err != nil {
				t.Fatalf("line %d: want %s, read error %v", n, body, err)
			}
			if want := plainR.Replace(body); kind == "<< " && string(got) != want {
				t.Errorf("line %d:\n got %s\nwant %s", n, got, want)
			}
			if kind == "<~ " && !regexp.MustCompile("^(?s:"+quotedR.Replace(body)+")$").Match(got) {
				t.Errorf("line %d:\n got %s\nwant match of %s", n, got, body)
			}
		case "<x ":
			ws.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
			if got, err := ws.readMessage(); err == nil {
				t.Fatalf("line %d: want the connection to end, got %s", n, got)
			} else if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("line %d: the connection did not end", n)
			}
		default:
			t.Fatalf("line %d: unknown line kind %q", n, kind)
		}
	}
}
