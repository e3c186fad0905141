package main

// Adversary tests of credential masking as wired today (docs/network.md §8, decision D6 in
// "Interception"): a prompt-injected command under a masked, routed read-only start holds
// stand-ins and tries to get a real value back from a credential's own origin that reflects
// what it receives. Each TestAdv31* here is one way past the response unmasking, read on
// the host: the origin records the real value it received, and the command's PTY output is
// searched for it. New file: the adversary round of issue 23 (its findings, kept as tests).

import (
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// adv31Origin is a TLS host on 127.0.0.1 (its CA given to the server only) that reflects the
// Authorization it receives in a way chosen by the path: a gzip body when asked for one, a
// trailer, a 103 Early Hints header, the bytes after a 101 upgrade, a plain body otherwise.
type adv31Origin struct {
	srv  *httptest.Server
	pool *x509.CertPool
	mu   sync.Mutex
	seen []string // "path Authorization"
}

func startAdv31Origin(t *testing.T) *adv31Origin {
	t.Helper()
	ca := newTestCA(t, "adv31 origin test CA")
	leaf, err := ca.issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	o := &adv31Origin{pool: ca.pool}
	o.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		o.mu.Lock()
		o.seen = append(o.seen, r.URL.Path+" "+a)
		o.mu.Unlock()
		switch r.URL.Path {
		case "/gzip": // compresses when the client asks for it, as most APIs do
			if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				w.Header().Set("Content-Encoding", "gzip")
				gz := gzip.NewWriter(w)
				fmt.Fprintf(gz, "auth=%s\n", a)
				gz.Close()
				return
			}
		case "/trailer":
			w.Header().Set("Trailer", "X-Echo")
			io.WriteString(w, "ok\n")
			w.(http.Flusher).Flush()
			w.Header().Set("X-Echo", a)
			return
		case "/hint":
			w.Header().Set("X-Echo", a)
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("X-Echo")
			io.WriteString(w, "ok\n")
			return
		case "/upgrade":
			if r.Header.Get("Upgrade") != "adv31" {
				http.Error(w, "want Upgrade: adv31", http.StatusBadRequest)
				return
			}
			c, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: adv31\r\n\r\nupgraded auth=%s\n", a)
			rw.Flush() // then the deferred close ends the tunnel
			return
		}
		fmt.Fprintf(w, "auth=%s\n", a)
	}))
	o.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	o.srv.StartTLS()
	t.Cleanup(o.srv.Close)
	return o
}

func (o *adv31Origin) url() string { return "https://" + o.srv.Listener.Addr().String() }

func (o *adv31Origin) received() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen...)
}

// adv31Run runs script (sh -c) in a masked PTY start under the routed read-only profile,
// with a fresh ACME_TOKEN whose custom provider is the origin, and returns the real token
// and the command's output.
func adv31Run(t *testing.T, o *adv31Origin, id, script string) (real, out string) {
	t.Helper()
	requireUserNamespaces(t)
	netProxyTestHost(t) // skips without curl
	mo := &maskOrigin{pool: o.pool}
	ts, logs := maskTestServer(t, mo)
	tc := ts.connect(t)
	real = maskFake(t, "acme_", maskTestAlnum, 32)
	params := netProxyStartParams(t, id, script, map[string]any{
		"domains":           map[string]string{"127.0.0.1": "allow"},
		"credentialMasking": true,
		"credentialProviders": map[string]any{
			"acme": map[string]any{"env": []string{"ACME_TOKEN"}, "patterns": []string{"acme_[A-Za-z0-9]{32}"}, "url_prefixes": []string{o.url()}, "auth": []string{"bearer"}},
		},
	}, 0)
	params["env"] = map[string]string{"PATH": "/usr/bin:/bin", "HOME": t.TempDir(), "ACME_TOKEN": real}
	params["tty"] = true
	params["sandbox"] = netProxyTestSandbox("restricted")
	params["enforceManagedNetwork"] = true
	out = tc.run(params).pty()
	if strings.Contains(logs.String(), real) {
		t.Errorf("the server's log holds the real ACME_TOKEN")
	}
	return real, out
}

// adv31Check fails t when the command saw the real token, after checking that the attempt
// was a real one: the origin received the real value on path.
func adv31Check(t *testing.T, o *adv31Origin, path, real, out string) {
	t.Helper()
	if !slices31Contains(o.received(), path+" Bearer "+real) {
		t.Fatalf("the origin never received the real token on %s (attempt invalid); it saw %q\n%s", path, o.received(), tail(out, 2000))
	}
	if strings.Contains(out, real) {
		t.Errorf("the command read the real ACME_TOKEN reflected by its origin via %s:\n%s", path, tail(out, 1500))
	}
}

func slices31Contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestAdv31GzipEcho: the command asks for gzip (its Accept-Encoding is forwarded as it is);
// the origin's compressed echo is passed on unscanned and curl --compressed prints it.
func TestAdv31GzipEcho(t *testing.T) {
	o := startAdv31Origin(t)
	real, out := adv31Run(t, o, "adv31-gzip",
		`curl -sS --max-time 20 --compressed -H "Authorization: Bearer $ACME_TOKEN" `+o.url()+`/gzip; echo "== done"`)
	adv31Check(t, o, "/gzip", real, out)
}

// TestAdv31TrailerEcho: a trailer's value only exists once the body has been read, after
// modifyResponse ran unmask on the (still empty) trailer map.
func TestAdv31TrailerEcho(t *testing.T) {
	o := startAdv31Origin(t)
	real, out := adv31Run(t, o, "adv31-trailer",
		`curl -sS --max-time 20 --http1.1 -D - -H "Authorization: Bearer $ACME_TOKEN" `+o.url()+`/trailer; echo "== done"`)
	adv31Check(t, o, "/trailer", real, out)
}

// TestAdv31EarlyHintsEcho: a 1xx response's headers are relayed by the reverse proxy's
// Got1xxResponse hook, which modifyResponse never sees.
func TestAdv31EarlyHintsEcho(t *testing.T) {
	o := startAdv31Origin(t)
	real, out := adv31Run(t, o, "adv31-hint",
		`curl -sS --max-time 20 --http1.1 -D - -H "Authorization: Bearer $ACME_TOKEN" `+o.url()+`/hint; echo "== done"`)
	adv31Check(t, o, "/hint", real, out)
}

// TestAdv31UpgradeEcho: after a 101 the tunnel is relayed byte for byte, unscanned.
func TestAdv31UpgradeEcho(t *testing.T) {
	o := startAdv31Origin(t)
	host := strings.TrimPrefix(o.url(), "https://")
	real, out := adv31Run(t, o, "adv31-upgrade",
		`P=${HTTPS_PROXY:-$https_proxy}; P=${P#http://}; P=${P%/}; `+
			`{ printf 'GET /upgrade HTTP/1.1\r\nHost: `+host+`\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: adv31\r\n\r\n' "$ACME_TOKEN"; } | timeout 20 `+
			`openssl s_client -quiet -proxy "$P" -connect `+host+` -CAfile "$SSL_CERT_FILE" -verify_return_error 2>&1; echo "== done"`)
	adv31Check(t, o, "/upgrade", real, out)
}
