package main

// Benchmarks of the managed network proxy (docs/network.md §5): a 256 MiB download from a
// test host on 127.0.0.1 through the HTTP proxy, plainly and through a CONNECT tunnel, and
// the latency of a tunnel's first round trip; "direct" does the same without a proxy (the
// limit of the machine). The proxy measured as "ours" is the component
// started in the test, or, with EXEC_SERVER_PROXY_UNDER_TEST=host:port, the HTTP proxy of a
// process a running exec-server started (as a client gets it); with
// EXEC_SERVER_REFERENCE_PROXY=host:port each also runs against the reference's proxy, started
// the same way with the same policy. scripts/bench-netproxy.sh starts both servers and runs
// these benchmarks round by round, alternating the two (BENCHMARKS.md).

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
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

// startBenchEcho serves an echo on 127.0.0.1 that closes each connection at its client's end,
// as a real host does: a proxy's tunnel then ends (the tests' loopbackEcho keeps connections
// open until it is closed, which would leave every tunnel of the latency loop half-open and
// run into netProxyMaxConns).
func startBenchEcho(b *testing.B) (port int, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
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
				buf := make([]byte, 512)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						c.Write(buf[:n])
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, func() { ln.Close(); wg.Wait() }
}

// benchProxy is one HTTP proxy to measure; "direct", with no address, is the same work
// without a proxy: the limit of this machine.
type benchProxy struct{ name, addr string }

// benchProxies are the HTTP proxies to measure, always in this order: ours (the in-test
// component, or the one EXEC_SERVER_PROXY_UNDER_TEST names), and the reference's when
// EXEC_SERVER_REFERENCE_PROXY names one. The policy is the one the bench script asks both
// servers for: full mode, an allow entry for 127.0.0.1, no SOCKS5.
func benchProxies(b *testing.B) []benchProxy {
	ours := os.Getenv("EXEC_SERVER_PROXY_UNDER_TEST")
	if ours == "" {
		p, err := startNetProxy(netProxyConfig{processID: "bench",
			params: netProxyParamsFor(b, `{"domains":{"127.0.0.1":"allow"},"enableSocks5":false,"enableSocks5Udp":false}`, nil)}, netProxyHooks{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(p.close)
		ours = p.httpAddr()
	}
	out := []benchProxy{{"direct", ""}, {"ours", ours}}
	if ref := os.Getenv("EXEC_SERVER_REFERENCE_PROXY"); ref != "" {
		out = append(out, benchProxy{"reference", ref})
	}
	return out
}

// download fetches one response through the proxy at proxy (directly when proxy is empty)
// and returns its body's length.
func download(b *testing.B, proxy string, port int, tunnel bool) int64 {
	target := "127.0.0.1:" + strconv.Itoa(port)
	c, err := net.Dial("tcp", cmp.Or(proxy, target))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReaderSize(c, 64<<10)
	if proxy == "" {
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", target)
	} else if tunnel {
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		if err := skipHead(r, "200"); err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", target)
	} else {
		fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	}
	length, err := responseLength(r)
	if err != nil {
		b.Fatal(err)
	}
	// Read the body's length, as a client does, not to the end of the connection: a proxy
	// may keep the client's connection open after the response (the reference does, for
	// about 30 s, when the request did not ask to close it).
	n, err := io.CopyN(io.Discard, r, length)
	if err != nil {
		b.Fatalf("after %d bytes: %v", n, err)
	}
	return n
}

// responseLength reads a response head, checks that its status is 200, and returns its
// Content-Length.
func responseLength(r *bufio.Reader) (int64, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || line[9:12] != "200" {
		return 0, fmt.Errorf("status line %q", line)
	}
	length := int64(-1)
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			return 0, err
		}
		if l == "\r\n" {
			break
		}
		if name, value, ok := strings.Cut(l, ":"); ok && strings.EqualFold(name, "Content-Length") {
			if length, err = strconv.ParseInt(strings.TrimSpace(value), 10, 64); err != nil {
				return 0, fmt.Errorf("content-length %q", value)
			}
		}
	}
	if length < 0 {
		return 0, errors.New("response without content-length")
	}
	return length, nil
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
	for _, p := range benchProxies(b) {
		addr := p.addr
		b.Run(p.name, func(b *testing.B) {
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

// BenchmarkNetProxyConnectLatency: CONNECT, the 200, and one byte there and back (direct:
// the connection and the byte).
func BenchmarkNetProxyConnectLatency(b *testing.B) {
	echo, stop := startBenchEcho(b)
	defer stop()
	for _, p := range benchProxies(b) {
		addr := p.addr
		b.Run(p.name, func(b *testing.B) {
			target := "127.0.0.1:" + strconv.Itoa(echo)
			for b.Loop() {
				c, err := net.Dial("tcp", cmp.Or(addr, target))
				if err != nil {
					b.Fatal(err)
				}
				r := bufio.NewReader(c)
				if addr != "" {
					fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
					if err := skipHead(r, "200"); err != nil {
						b.Fatal(err)
					}
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
