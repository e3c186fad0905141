//go:build linux

package main

// The adversarial tests of the core (rpc_adv_test.go) that need a Linux sandbox.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestAdv21PipelinedWritesKeepTheirBytesHeld: fs/writeFile decodes its data late, straight
// from the message's buffer, while the reader goes on with the next messages. 48 writes of
// mixed sizes (100 B to 3 MiB, so the websocket's large spare buffer is taken and given back)
// are sent back to back without waiting, some stalled behind a FIFO whose reader reads
// slowly (so quick work is handed over while it still reads its message), unsandboxed and
// through the sandbox worker; every file on disk, and every byte out of the FIFOs, must be
// the one its own request carried.
func TestAdv21PipelinedWritesKeepTheirBytesHeld(t *testing.T) {
	ts := startTestServer(t)
	tc := ts.connect(t)
	dir := t.TempDir()
	sb := json.RawMessage(workspaceWriteSandboxOf(dir))
	sizes := []int{100, 200 << 10, 3 << 20, 1<<20 + 7, 64 << 10, 2<<20 + 3}
	type sent struct {
		path  string
		data  []byte
		reply <-chan testReply
	}
	var all []sent
	var fifos []struct {
		path string
		data []byte
		got  chan []byte
	}
	for i := range 48 {
		data := make([]byte, sizes[i%len(sizes)])
		for j := range data {
			data[j] = byte(i*31 + j*7 + j>>9)
		}
		path := filepath.Join(dir, fmt.Sprintf("f%03d", i))
		if i%16 == 5 { // a FIFO read slowly: the write stalls on it while the others go on
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
			got := make(chan []byte, 1)
			ready := make(chan struct{})
			go func() {
				// Read-write, so that it never sees EOF before the server opens it; it reads
				// what its request carried, a page at a time, slowly.
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				close(ready)
				if err != nil {
					got <- nil
					return
				}
				defer f.Close()
				f.SetReadDeadline(time.Now().Add(60 * time.Second))
				var b []byte
				buf := make([]byte, 4096)
				for len(b) < len(data) {
					n, err := f.Read(buf)
					b = append(b, buf[:n]...)
					if err != nil {
						break
					}
					time.Sleep(100 * time.Microsecond)
				}
				got <- b
			}()
			<-ready
			fifos = append(fifos, struct {
				path string
				data []byte
				got  chan []byte
			}{path, data, got})
		}
		params := map[string]any{"path": fileURI(path), "dataBase64": base64.StdEncoding.EncodeToString(data)}
		if i%3 == 1 {
			params["sandbox"] = sb
		}
		all = append(all, sent{path, data, tc.start("fs/writeFile", params)})
		tc.start("fs/getMetadata", map[string]any{"path": fileURI(dir)})
	}
	for i, s := range all {
		select {
		case r := <-s.reply:
			if r.Err != nil {
				t.Fatalf("write %d: %+v", i, r.Err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("write %d: no reply", i)
		}
	}
	bad := 0
	for _, f := range fifos {
		if b := <-f.got; !bytes.Equal(b, f.data) {
			bad++
			t.Errorf("%s: the FIFO's reader got %d bytes, not the %d its request carried", f.path, len(b), len(f.data))
		}
	}
	total := 0
	for _, s := range all {
		fi, err := os.Lstat(s.path)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(s.path)
		if err != nil {
			t.Fatal(err)
		}
		total += len(b)
		if !bytes.Equal(b, s.data) {
			bad++
			t.Errorf("%s: %d bytes on disk, not the %d its request carried", s.path, len(b), len(s.data))
		}
	}
	t.Logf("%d pipelined writes (%d through slow FIFOs), %d bytes checked on disk, %d corrupt", len(all), len(fifos), total, bad)
}
