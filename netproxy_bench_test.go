package main

// Benchmarks of the managed network proxy (docs/network.md §5): a 256 MiB download from a
// test host on 127.0.0.1 through the HTTP proxy, plainly and through a CONNECT tunnel, and
// the latency of a tunnel's first round trip. With EXEC_SERVER_REFERENCE_PROXY=host:port (the
// HTTP proxy of a process the reference started, with the same policy) each also runs
// against the reference's proxy, in the same run.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
)

const benchDownload = 256 << 20

// benchHost serves, for any request, a response of size bytes, then closes.
func startBenchHost(b *testing.B, size int) (port int, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	var wg sync.WaitGroup
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
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if l == "\r\n" {
						break
					}
				}
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", size)
				for left := size; left > 0; left -= len(chunk) {
					if _, err := c.Write(chunk[:min(left, len(chunk))]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, func() { ln.Close(); wg.Wait() }
}

// benchProxies are the HTTP proxies to measure: ours, and the reference's when given.
func benchProxies(b *testing.B) map[string]string {
	p, err := startNetProxy(netProxyConfig{processID: "bench",
		params: netProxyParamsFor(b, `{"domains":{"127.0.0.1":"allow"},"allowLocalBinding":true}`, nil)}, netProxyHooks{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.close)
	out := map[string]string{"ours": p.httpAddr()}
	if ref := os.Getenv("EXEC_SERVER_REFERENCE_PROXY"); ref != "" {
		out["reference"] = ref
	}
	return out
}

// download fetches one response through the proxy at proxy and returns its body's length.
func download(b *testing.B, proxy string, port int, tunnel bool) int64 {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReaderSize(c, 64<<10)
	target := "127.0.0.1:" + strconv.Itoa(port)
	if tunnel {
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		if err := skipHead(r, "200"); err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", target)
	} else {
		fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	}
	if err := skipHead(r, "200"); err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, r)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// skipHead reads a response head and checks its status.
func skipHead(r *bufio.Reader, status string) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if len(line) < 12 || line[9:12] != status {
		return fmt.Errorf("status line %q", line)
	}
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if l == "\r\n" {
			return nil
		}
	}
}

func benchmarkDownload(b *testing.B, tunnel bool) {
	port, stop := startBenchHost(b, benchDownload)
	defer stop()
	for name, addr := range benchProxies(b) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(benchDownload)
			for b.Loop() {
				if n := download(b, addr, port, tunnel); n != benchDownload {
					b.Fatalf("downloaded %d bytes", n)
				}
			}
		})
	}
}

// BenchmarkNetProxyHTTP: a 256 MiB download, a forwarded absolute-form GET.
func BenchmarkNetProxyHTTP(b *testing.B) { benchmarkDownload(b, false) }

// BenchmarkNetProxyCONNECT: a 256 MiB download through a CONNECT tunnel.
func BenchmarkNetProxyCONNECT(b *testing.B) { benchmarkDownload(b, true) }

// BenchmarkNetProxyConnectLatency: CONNECT, the 200, and one byte there and back.
func BenchmarkNetProxyConnectLatency(b *testing.B) {
	echo := startLoopbackEcho(b)
	defer echo.close()
	for name, addr := range benchProxies(b) {
		b.Run(name, func(b *testing.B) {
			target := "127.0.0.1:" + strconv.Itoa(echo.port())
			for b.Loop() {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				r := bufio.NewReader(c)
				fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
				if err := skipHead(r, "200"); err != nil {
					b.Fatal(err)
				}
				c.Write([]byte{'x'})
				if _, err := r.ReadByte(); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}
