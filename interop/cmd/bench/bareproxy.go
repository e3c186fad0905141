package main

// The floor of any proxy on this machine, for `bench netproxy`: an HTTP proxy that does nothing
// but what both measured proxies must do at least (accept, read the head, dial, answer,
// splice), with no policy, no notification, no deadline and no limit. Measured in the same
// rounds as the two servers, it says how much of a target is left to a proxy's own work and
// how much the kernel takes anyway. Its own file: a test-only tool of the bench, nothing of
// the server.

import (
	"bufio"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
)

// bareProxy serves on 127.0.0.1 until close.
type bareProxy struct {
	ln net.Listener
	wg sync.WaitGroup
}

func startBareProxy() (*bareProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &bareProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				serveBare(c.(*net.TCPConn))
			}()
		}
	}()
	return p, nil
}

func (p *bareProxy) addr() string { return p.ln.Addr().String() }

// close stops accepting and waits for the connections in flight (the bench closes its own).
func (p *bareProxy) close() {
	p.ln.Close()
	p.wg.Wait()
}

// serveBare handles one connection: CONNECT host:port, or an absolute-form request sent on
// in origin form; the rest of the connection is spliced both ways.
func serveBare(c *net.TCPConn) {
	defer c.Close()
	r := bufio.NewReaderSize(c, 4096)
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	method, rest, _ := strings.Cut(strings.TrimRight(line, "\r\n"), " ")
	target, proto, _ := strings.Cut(rest, " ")
	var head strings.Builder
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if l == "\r\n" {
			break
		}
		head.WriteString(l)
	}
	hostport := target
	if method != "CONNECT" {
		u, err := url.Parse(target)
		if err != nil {
			return
		}
		hostport = u.Host
		target = u.RequestURI()
	}
	up, err := net.Dial("tcp", hostport)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	if method == "CONNECT" {
		io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	} else {
		io.WriteString(up, method+" "+target+" "+proto+"\r\n"+head.String()+"\r\n")
	}
	if n := r.Buffered(); n > 0 {
		b, _ := r.Peek(n)
		up.Write(b)
	}
	done := make(chan struct{})
	go func() {
		io.Copy(up, c) // splice(2) between the two TCP sockets
		up.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(c, up)
	c.CloseWrite()
	<-done
}
