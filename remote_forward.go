package main

// `exec-server forward` (docs/remote.md §11): register as a remote environment exactly as
// --remote does, but bridge each relay stream, once its Noise handshake is done, to a
// websocket of its own to an existing exec-server (--connect), instead of serving it here.
//
//	stream -> target    each JSON-RPC message becomes one binary message on the websocket, as 0.169
//	target -> stream    each websocket message becomes one JSON-RPC message on the stream
//	close               the stream's end closes the websocket (the target's session detaches),
//	                    and the websocket's end resets the stream
//	back-pressure       one message in flight each way: while a write blocks, nothing is read
//	                    from the other side (the stream's own queue is bounded, relayInbox)

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
)

// forwardConfig is the command line of `exec-server forward`.
type forwardConfig struct {
	connect   string // --connect: the target's ws:// or wss:// URL
	tokenFile string // --connect-token-file: its capability token, sent as a bearer

	header []upgradeHeader // set by validate: the upgrade's extra headers
}

func (f *forwardConfig) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.connect, "connect", "", "`URL` of the exec-server to forward each stream to: ws://HOST:PORT or wss://…")
	fs.StringVar(&f.tokenFile, "connect-token-file", "", "`FILE` holding the target's capability token, sent as Authorization: Bearer on each upgrade")
}

// validate checks the forward flags; a nil f (no forward subcommand) is valid.
func (f *forwardConfig) validate() error {
	if f == nil {
		return nil
	}
	if f.connect == "" {
		return errors.New("forward needs --connect URL")
	}
	u, err := url.Parse(f.connect)
	switch {
	case err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Hostname() == "":
		return errors.New("--connect must be a ws:// or wss:// URL")
	case u.User != nil:
		return errors.New("--connect must not carry userinfo")
	case strings.Contains(f.connect, "#"):
		return errors.New("--connect must not have a fragment")
	case !requestLineSafe(u):
		return errors.New("--connect holds a space or a control character")
	}
	f.header = nil
	if f.tokenFile != "" {
		token, err := readWSAuthFile("--connect-token-file", f.tokenFile)
		if err != nil {
			return err
		}
		h := upgradeHeader{"Authorization", "Bearer " + string(token)}
		switch {
		case !validUpgradeHeader(h):
			return fmt.Errorf("--connect-token-file %s: the token holds a line break or another control character", f.tokenFile)
		case u.Scheme == "ws" && !isLoopbackHost(u.Hostname()):
			return errors.New("--connect-token-file needs a wss:// --connect URL (or ws:// on loopback): the token would cross the network in clear")
		}
		f.header = []upgradeHeader{h}
	}
	return nil
}

// streamServer is what serves each relay stream of runRemote: srv itself, or, with forward, a
// bridge to the target.
func (f *forwardConfig) streamServer(ctx context.Context, srv *server, cfg *remoteConfig, log *logger) func(msgTransport, string) {
	if f == nil {
		return srv.serveStream
	}
	u, _ := url.Parse(f.connect)
	log.Info("forwarding each stream", "connect", redactQuery(u))
	b := &forwardBridge{ctx: ctx, cfg: f, timings: cfg.relayTimings(), tls: cfg.tlsConfig(), log: log}
	return b.serve
}

// serveStream serves one relay stream with this process's own server.
func (s *server) serveStream(t msgTransport, parsePrefix string) {
	s.conns.Add(1)
	defer s.conns.Done()
	s.serveConn(t, parsePrefix)
}

// forwardBridge connects each stream to the target.
type forwardBridge struct {
	ctx     context.Context // runRemote's: its end abandons a dial in progress
	cfg     *forwardConfig
	timings relayTimings
	tls     *tls.Config
	log     *logger
}

// serve bridges stream t to a websocket of its own to the target until either ends.
func (b *forwardBridge) serve(t msgTransport, _ string) {
	log := b.log.With("stream", t.peer())
	ws, err := b.dial()
	if err != nil {
		log.Warn("forward: cannot reach the target exec-server", "error", err.Error())
		t.close(err)
		return
	}
	log.Info("forward: stream connected to the target")
	back := make(chan struct{})
	go func() { // target -> stream
		defer close(back)
		for {
			m, err := ws.next()
			if err == nil {
				err = t.writeMessage(m.data)
				m.release()
			}
			if err != nil {
				t.close(err)
				ws.close(nil)
				return
			}
		}
	}()
	if e, ok := t.(interface{ ended() <-chan struct{} }); ok {
		// The stream may end while a write to the target blocks: close the websocket then,
		// which bounds that write by its close wait.
		go func() {
			select {
			case <-e.ended():
				ws.close(nil)
			case <-back:
			}
		}()
	}
	for { // stream -> target
		m, err := t.next()
		if err == nil {
			err = ws.writeMessageOp(wsOpBinary, m.data) // binary, as 0.169's forward
			m.release()
		}
		if err != nil {
			break
		}
	}
	ws.close(nil) // a normal close: the target detaches the session
	<-back
	log.Info("forward: stream ended")
}

// dial opens the websocket to the target within the dial timeout.
func (b *forwardBridge) dial() (*wsConn, error) {
	ctx, cancel := context.WithTimeout(b.ctx, b.timings.dialTimeout)
	defer cancel()
	ws, _, err := dialWebsocket(ctx, b.cfg.connect, b.cfg.header, b.tls, wsOptions{
		pingInterval: b.timings.pingInterval,
		pongTimeout:  b.timings.pongTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("--connect: %w", err)
	}
	return ws, nil
}
