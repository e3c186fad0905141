package main

// Review tests of the plain HTTP proxy's keep-alive (docs/network.md §2, "Keep-alive"; §3):
// each demonstrates a finding of the int29 review and fails on int29 (f77d7b5). The hosts
// parse what they receive with net/http's own request reader, as a real host would.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// review29Host accepts one connection and reads requests from it with http.ReadRequest until
// the proxy closes it, answering the first with "ok"; it reports "METHOD PATH" of each
// request it parsed, and what failed to parse where a next request would start.
func review29Host(t *testing.T) (addr string, parsed <-chan []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan []string, 1)
	go func() {
		var reqs []string
		defer func() { got <- reqs }()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err == io.EOF {
				return
			}
			if err != nil {
				reqs = append(reqs, "unparsable bytes: "+err.Error())
				return
			}
			reqs = append(reqs, req.Method+" "+req.URL.Path)
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				return
			}
			if len(reqs) == 1 {
				c.Write([]byte("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"))
			}
		}
	}()
	return ln.Addr().String(), got
}

// review29Limited starts a limited-mode proxy (GET, HEAD, OPTIONS only) allowing 127.0.0.1.
func review29Limited(t *testing.T) *netProxy {
	t.Helper()
	p, err := startNetProxy(netProxyConfig{processID: "r29",
		params: netProxyParamsFor(t, `{"mode":"limited","domains":{"127.0.0.1":"allow"}}`, nil)}, netProxyHooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return p
}

// review29Send writes raw to the proxy's HTTP listener, half-closes, and returns what the
// client read until the proxy ended the connection (or 5 s).
func review29Send(t *testing.T, p *netProxy, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", p.httpAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(c)
	return string(b)
}

// review29CheckOnlyGET fails unless the host parsed exactly the one judged GET.
func review29CheckOnlyGET(t *testing.T, parsed <-chan []string, resp string) {
	t.Helper()
	var reqs []string
	select {
	case reqs = <-parsed:
	case <-time.After(10 * time.Second):
		t.Fatal("the host did not finish")
	}
	t.Logf("the client got %q; the host parsed %q", resp, reqs)
	for _, r := range reqs {
		if r != "GET /ok" {
			t.Errorf("limited mode: after the judged GET the host read %q, bytes no verdict covered", r)
		}
	}
}

// TestReview29ConnectionNamesContentLength: a request whose Connection header names
// Content-Length has that field dropped as hop-by-hop (hopHeaders), while the proxy still
// forwards its Content-Length bytes of body (requestBody): the host, reading a GET without
// body, reads the body as the next request, a POST no verdict ever covered (limited mode
// allows only GET). Read on the host: net/http's request reader.
func TestReview29ConnectionNamesContentLength(t *testing.T) {
	host, parsed := review29Host(t)
	p := review29Limited(t)
	smuggled := fmt.Sprintf("POST /smuggled HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n\r\n", host)
	raw := fmt.Sprintf("GET http://%s/ok HTTP/1.1\r\nHost: %s\r\nConnection: content-length\r\nContent-Length: %d\r\n\r\n%s",
		host, host, len(smuggled), smuggled)
	review29CheckOnlyGET(t, parsed, review29Send(t, p, raw))
}

// TestReview29ConnectionNamesTransferEncoding: the same with Transfer-Encoding: the chunked
// body is forwarded verbatim, its framing field dropped, so the host reads the chunk-size
// line as a request line. net/http takes no chunk-size line for a request line, so here the
// host finds garbage where the next request would start rather than the POST; a request
// line that is also a chunk-size line ("ADD ;/x HTTP/1.1": hex, BWS, an extension) is only a
// lenient host's parse away.
func TestReview29ConnectionNamesTransferEncoding(t *testing.T) {
	host, parsed := review29Host(t)
	p := review29Limited(t)
	smuggled := fmt.Sprintf("POST /smuggled HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n\r\n", host)
	raw := fmt.Sprintf("GET http://%s/ok HTTP/1.1\r\nHost: %s\r\nConnection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
		host, host, len(smuggled), smuggled)
	review29CheckOnlyGET(t, parsed, review29Send(t, p, raw))
}

// TestReview29ChunkedTrailerBareLF: chunkedBody ends a trailer section only at a line that is
// exactly CRLF, and passes any other trailer line on unchecked; a host that takes a bare LF
// as a line's end (RFC 9112 §2.2 allows it, net/http does it, and the proxy's own head
// reader does it) ends the body at "0\r\n\n" and reads the "trailer lines" after it as the
// next request, a POST the proxy never judged.
func TestReview29ChunkedTrailerBareLF(t *testing.T) {
	host, parsed := review29Host(t)
	p := review29Limited(t)
	raw := fmt.Sprintf("GET http://%s/ok HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"0\r\n\nPOST /smuggled HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n\r\n", host, host, host)
	review29CheckOnlyGET(t, parsed, review29Send(t, p, raw))
}

// TestReview29ResponseConnectionNamesContentLength: an answer whose Connection header names
// Content-Length is relayed framed by its length (relayResponse) but without the field
// (encode drops what Connection names) and without "connection: close": the client's HTTP
// reader can only read its body to the connection's end, which the proxy keeps open for the
// next request, up to the idle time (10 min).
func TestReview29ResponseConnectionNamesContentLength(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		c.Write([]byte("HTTP/1.1 200 OK\r\nConnection: content-length\r\nContent-Length: 2\r\n\r\nok"))
		io.Copy(io.Discard, c)
	}()
	host := ln.Addr().String()
	p := review29Limited(t)
	c, err := net.Dial("tcp", p.httpAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://%s/ok HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Logf("relayed head: %d, content-length %d, close %v, transfer-encoding %q", resp.StatusCode, resp.ContentLength, resp.Close, resp.TransferEncoding)
	if resp.ContentLength < 0 && len(resp.TransferEncoding) == 0 && !strings.EqualFold(resp.Header.Get("Connection"), "close") {
		t.Errorf("the answer reached the client without framing on a connection the proxy keeps open")
	}
}

// TestReview29ClientGoneMidBodyHoldsHost: a client that leaves in the middle of a request's
// body (here a FIN after 10 of its 100 Content-Length bytes) leaves the host's connection
// open: exchange's body copy ends without an error (a LimitReader's short read is io.EOF),
// nothing closes up, and relayResponse waits for an answer the host, still waiting for 90
// bytes, never sends, until the idle clock (netProxyIdleTimeout, 10 min) ends it; a slot of
// netProxyMaxConns is held as long. Read on the host: when its connection ends.
func TestReview29ClientGoneMidBodyHoldsHost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ended := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ended <- err
			return
		}
		defer c.Close()
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			ended <- err
			return
		}
		_, err = io.Copy(io.Discard, req.Body) // a host waiting for the whole body
		ended <- err
	}()
	host := ln.Addr().String()
	p := review29Limited(t)
	c, err := net.Dial("tcp", p.httpAddr())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET http://%s/ok HTTP/1.1\r\nHost: %s\r\nContent-Length: 100\r\n\r\n0123456789", host, host)
	c.Close()
	select {
	case err := <-ended:
		t.Logf("the host's connection ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Errorf("5 s after the client left mid-body the host's connection is still open")
	}
}

// TestReview29AnswerTrailerBareLFFeedsTheNextRequest: the answer's side of
// TestReview29ChunkedTrailerBareLF. An allowed host ends its chunked answer with "0\r\n\n"
// and goes on with a whole answer of its making; chunkedBody takes all of it for trailer
// lines, up to the blank CRLF line, and relays it. The client's HTTP reader (net/http here)
// ends the first answer at the bare LF and reads the host's forged answer as the answer to
// its next request on the connection, which went to another host.
func TestReview29AnswerTrailerBareLFFeedsTheNextRequest(t *testing.T) {
	serve := func(answer string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
				return
			}
			io.WriteString(c, answer)
			io.Copy(io.Discard, c)
		}()
		return ln.Addr().String()
	}
	evil := serve("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\n" +
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Forged: by the first host\r\n\r\n")
	other := serve("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nfrom-b")
	p := review29Limited(t)
	c, err := net.Dial("tcp", p.httpAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "GET http://%s/a HTTP/1.1\r\nHost: %s\r\n\r\n", evil, evil)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(resp.Body); err != nil {
		t.Logf("the first answer was cut (%q, %v): the connection ends with it", b, err)
		return
	}
	fmt.Fprintf(c, "GET http://%s/b HTTP/1.1\r\nHost: %s\r\n\r\n", other, other)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Logf("no second answer (the connection ended): %v", err)
		return
	}
	b, _ := io.ReadAll(resp.Body)
	t.Logf("second answer: %d %v %q", resp.StatusCode, resp.Header, b)
	if string(b) != "from-b" || resp.Header.Get("X-Forged") != "" {
		t.Errorf("the answer to the request to %s came from %s", other, evil)
	}
}

// TestReview29HeadLineOfBufferSize: readHeadFrom takes a line fragment of 1 or 2 bytes
// ("\n", "\r\n") for the blank line that ends a head, though after a bufio.ErrBufferFull it
// is only the end of a line of netProxyMaxChunkLine (4 KiB) bytes: a well-formed request
// with a header line of exactly 4,096 bytes (a long cookie) is cut there and answered 400
// (an answer head with such a line gets 502 the same way, relayResponse reading it with the
// same function).
func TestReview29HeadLineOfBufferSize(t *testing.T) {
	host, parsed := review29Host(t)
	p := review29Limited(t)
	line := "Cookie: c="
	line += strings.Repeat("x", netProxyMaxChunkLine-len(line))
	resp := review29Send(t, p, fmt.Sprintf("GET http://%s/ok HTTP/1.1\r\nHost: %s\r\n%s\r\nConnection: close\r\n\r\n", host, host, line))
	if !strings.HasPrefix(resp, "HTTP/1.1 200 ") {
		t.Errorf("a request with a %d-byte header line (under netProxyMaxHeaderBytes) got %.40q", len(line), resp)
	}
	if strings.HasPrefix(resp, "HTTP/1.1 200 ") {
		t.Logf("the host parsed %q", <-parsed)
	}
}

// TestReview29RefusedExpectContinueEnds: a refused request that waits for "100 Continue"
// (its client may never send the body) ends the connection with its 403, instead of reading
// the client's next request as the dropped body. The denied host is never asked.
func TestReview29RefusedExpectContinueEnds(t *testing.T) {
	p := review29Limited(t)
	c, err := net.Dial("tcp", p.httpAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST http://denied.example/x HTTP/1.1\r\nHost: denied.example\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 403 || !resp.Close {
		t.Errorf("answer %d, close %v: want 403 that ends the connection", resp.StatusCode, resp.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("the connection stayed open after the refusal: %v", err)
	}
}
