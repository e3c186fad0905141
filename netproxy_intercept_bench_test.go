package main

// Benchmarks of interception (docs/network.md, "Interception"): against the test origin of
// netproxy_intercept_test.go, the same work through an intercepted CONNECT (api.test, whose
// credential the proxy swaps) and through a spliced one (plain.test): a new connection's
// first response, a keep-alive request (HTTP/1.1 and HTTP/2, with and without the swap), and
// a 256 MiB download with its CPU time per MiB (the whole test process: client, proxy and
// origin, so the difference between the rows is the proxy's extra work).

import (
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user plus system time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchGet does one request with c and reads the body to its end.
func benchGet(b *testing.B, c *http.Client, u, auth string) int64 {
	req, _ := http.NewRequest("GET", u, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("GET %s: %d %v", u, resp.StatusCode, err)
	}
	return n
}

// benchMITMCases are the two ways through the proxy: intercepted (the client trusts the
// masking CA) and spliced (it trusts the origin's).
func benchMITMCases(b *testing.B) (o *testOrigin, mitmCA *testCA, p *netProxy) {
	o = startTestOrigin(b)
	mitmCA = newTestCA(b, "masking bench CA")
	p, _ = startInterceptProxy(b, o, mitmCA, "")
	return o, mitmCA, p
}

// BenchmarkNetProxyMITMConnectLatency: a new connection (CONNECT, the child's TLS handshake,
// one GET and its response) through a spliced and an intercepted tunnel; the intercepted one
// reuses the proxy's connection to the origin, as a child's next connection does.
func BenchmarkNetProxyMITMConnectLatency(b *testing.B) {
	o, mitmCA, p := benchMITMCases(b)
	for _, c := range []struct{ name, host string }{{"spliced", "plain.test"}, {"intercepted", "api.test"}} {
		b.Run(c.name, func(b *testing.B) {
			roots := o.ca.pool
			if c.host == "api.test" {
				roots = mitmCA.pool
			}
			cl := mitmClient(p, roots, false)
			cl.Transport.(*http.Transport).DisableKeepAlives = true
			for b.Loop() {
				benchGet(b, cl, "https://"+c.host+"/l", "Bearer "+testStandIn)
			}
		})
	}
}

// BenchmarkNetProxyMITMRequest: a keep-alive request on an open tunnel, HTTP/1.1 and HTTP/2
// from the child, spliced, intercepted without a swap (echo.test) and with one (api.test).
func BenchmarkNetProxyMITMRequest(b *testing.B) {
	o, mitmCA, p := benchMITMCases(b)
	for _, h2 := range []bool{false, true} {
		for _, c := range []struct{ name, host string }{{"spliced", "plain.test"}, {"intercepted", "echo.test"}, {"injected", "api.test"}} {
			b.Run(fmt.Sprintf("%s/%s", map[bool]string{false: "h1", true: "h2"}[h2], c.name), func(b *testing.B) {
				roots := mitmCA.pool
				if c.host == "plain.test" {
					roots = o.ca.pool
				}
				cl := mitmClient(p, roots, h2)
				defer cl.CloseIdleConnections()
				u := "https://" + c.host + "/r"
				benchGet(b, cl, u, "Bearer "+testStandIn)
				for b.Loop() {
					benchGet(b, cl, u, "Bearer "+testStandIn)
				}
			})
		}
	}
}

// headerOnlyInjector is the test injector without the body scan (no unmaskPairs).
type headerOnlyInjector struct{ i *testInjector }

func (h headerOnlyInjector) intercepts(host string, port uint16) bool {
	return h.i.intercepts(host, port)
}
func (h headerOnlyInjector) inject(r *http.Request) []string { return h.i.inject(r) }
func (h headerOnlyInjector) unmask(hd http.Header)           { h.i.unmask(hd) }

// BenchmarkNetProxyMITMDownload: 256 MiB over HTTP/1.1, spliced, intercepted with the
// response-body scan (D6) and without it; cpu-ms/MiB is the process's CPU time per MiB.
func BenchmarkNetProxyMITMDownload(b *testing.B) {
	o, mitmCA, p := benchMITMCases(b)
	headersOnly, _ := startInterceptProxyWith(b, o, mitmCA, "", headerOnlyInjector{&testInjector{hosts: map[string]bool{"api.test": true}, credHost: "api.test"}})
	for _, c := range []struct {
		name, host string
		p          *netProxy
	}{{"spliced", "plain.test", p}, {"intercepted-scan", "api.test", p}, {"intercepted-noscan", "api.test", headersOnly}} {
		b.Run(c.name, func(b *testing.B) {
			p := c.p
			roots := o.ca.pool
			if c.host == "api.test" {
				roots = mitmCA.pool
			}
			cl := mitmClient(p, roots, false)
			cl.Timeout = 0
			defer cl.CloseIdleConnections()
			b.SetBytes(benchDownload)
			cpu0 := cpuTime(b)
			for b.Loop() {
				if n := benchGet(b, cl, fmt.Sprintf("https://%s/big?n=%d", c.host, benchDownload), "Bearer "+testStandIn); n != benchDownload {
					b.Fatalf("downloaded %d bytes", n)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(time.Millisecond)/float64(b.N*(benchDownload>>20)), "cpu-ms/MiB")
		})
	}
}
