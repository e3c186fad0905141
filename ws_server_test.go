package main

// Tests of the websocket listener: the 101 answer and the HTTP routes (docs/protocol.md §2.1, §2.3).

import (
	"encoding/base64"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWSHandshakeHeaders pins the 101 answer: exactly the reference's headers, no subprotocol
// and no extension even when asked for.
func TestWSHandshakeHeaders(t *testing.T) {
	ts := startTestServer(t)
	_, _, resp := rawHTTP(t, ts, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"+
		"Sec-WebSocket-Protocol: chat, superchat\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %s", resp.Status)
	}
	var names []string
	for k := range resp.Header {
		names = append(names, strings.ToLower(k))
	}
	slices.Sort(names)
	if strings.Join(names, " ") != "connection date sec-websocket-accept upgrade" {
		t.Errorf("101 headers %v", resp.Header)
	}
	if resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Errorf("accept key %q", resp.Header.Get("Sec-WebSocket-Accept"))
	}
}

const wsUpgradeHeaders = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"

// httpRoute is one hand-written HTTP request and the answer it must get.
type httpRoute struct {
	name, req string
	status    int
	body      string
	header    map[string]string
}

// checkRoutes sends each request on a connection of its own. Every body is plain text.
func checkRoutes(t *testing.T, ts *testServer, routes []httpRoute) {
	t.Helper()
	for _, tt := range routes {
		t.Run(tt.name, func(t *testing.T) {
			_, _, resp := rawHTTP(t, ts, tt.req)
			var got []byte
			if resp.StatusCode != http.StatusSwitchingProtocols {
				got, _ = io.ReadAll(resp.Body)
			}
			if resp.StatusCode != tt.status || string(got) != tt.body {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, got, tt.status, tt.body)
			}
			if len(got) > 0 && resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
			}
			for k, v := range tt.header {
				if resp.Header.Get(k) != v {
					t.Errorf("%s: %q, want %q", k, resp.Header.Get(k), v)
				}
			}
		})
	}
}

// TestHTTPRoutes pins every row of docs/protocol.md §2.1's table.
func TestHTTPRoutes(t *testing.T) {
	ts := startTestServer(t)
	port := ts.url[strings.LastIndexByte(ts.url, ':')+1:]
	checkRoutes(t, ts, []httpRoute{
		{"upgrade", "GET / HTTP/1.1\r\nHost: x\r\n" + wsUpgradeHeaders + "\r\n", 101, "", nil},
		{"readyz GET", "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "", nil},
		{"readyz HEAD", "HEAD /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "", nil},
		{"readyz with a query", "GET /readyz?verbose=1 HTTP/1.1\r\nHost: x\r\n\r\n", 200, "", nil},
		{"readyz POST", "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405, "", map[string]string{"Allow": "GET,HEAD"}},
		{"GET / without upgrade", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "Connection header did not include 'upgrade'", map[string]string{"Content-Type": "text/plain; charset=utf-8"}},
		{"upgrade without a key", "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n", 400, "`Sec-WebSocket-Key` header missing", nil},
		{"POST /", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405, "Request method must be `GET`", nil},
		{"upgrade on /ws", "GET /ws HTTP/1.1\r\nHost: x\r\n" + wsUpgradeHeaders + "\r\n", 404, "", nil},
		{"upgrade on /foo", "GET /foo HTTP/1.1\r\nHost: x\r\n" + wsUpgradeHeaders + "\r\n", 404, "", nil},
		{"empty Origin", "GET / HTTP/1.1\r\nHost: x\r\nOrigin: \r\n" + wsUpgradeHeaders + "\r\n", 403, "", nil},
		{"Origin null", "GET / HTTP/1.1\r\nHost: x\r\nOrigin: null\r\n" + wsUpgradeHeaders + "\r\n", 403, "", nil},
		{"Origin of the server itself", "GET / HTTP/1.1\r\nHost: x\r\nOrigin: http://127.0.0.1:" + port + "\r\n" + wsUpgradeHeaders + "\r\n", 403, "", nil},
		{"healthz", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 404, "", nil},
		{"health", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 404, "", nil},
		{"livez", "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n", 404, "", nil},
		{"metrics", "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 404, "", nil},
		{"readyz/x", "GET /readyz/x HTTP/1.1\r\nHost: x\r\n\r\n", 404, "", nil},
	})
}

// TestAuthHTTPRoutes pins every row of docs/protocol.md §2.3's 401 tables through a real server
// configured as --ws-auth would, plus the accepted forms and /readyz without auth.
func TestAuthHTTPRoutes(t *testing.T) {
	upgrade := func(auth string) string {
		return "GET / HTTP/1.1\r\nHost: x\r\n" + auth + wsUpgradeHeaders + "\r\n"
	}
	authz := func(v string) string { return "Authorization: " + v + "\r\n" }
	withAuth := func(a *wsAuthConfig) func(*server) { return func(s *server) { s.auth = a } }

	t.Run("capability-token", func(t *testing.T) {
		a, err := newWSAuth("capability-token", testTokenFile, "", "", "", "", defaultWSMaxClockSkew)
		if err != nil {
			t.Fatal(err)
		}
		ts := startTestServer(t, withAuth(a))
		checkRoutes(t, ts, []httpRoute{
			{"no Authorization", upgrade(""), 401, "missing websocket bearer token", nil},
			{"token only in the query", strings.Replace(upgrade(""), "GET / ", "GET /?token="+testToken+" ", 1), 401, "missing websocket bearer token", nil},
			{"token only as subprotocol", upgrade("Sec-WebSocket-Protocol: " + testToken + "\r\n"), 401, "missing websocket bearer token", nil},
			{"wrong token", upgrade(authz("Bearer wrong")), 401, "invalid websocket bearer token", nil},
			{"token without scheme", upgrade(authz(testToken)), 401, "invalid authorization header", nil},
			{"Basic", upgrade(authz("Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+testToken)))), 401, "invalid authorization header", nil},
			{"empty Bearer", upgrade(authz("Bearer ")), 401, "invalid authorization header", nil},
			{"right token", upgrade(authz("Bearer " + testToken)), 101, "", nil},
			{"lower-case scheme", upgrade(authz("bearer " + testToken)), 101, "", nil},
			{"extra spaces", upgrade(authz("Bearer    " + testToken)), 101, "", nil},
			{"readyz needs no token", "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "", nil},
			{"Origin is checked before the token", upgrade("Origin: null\r\n" + authz("Bearer "+testToken)), 403, "", nil},
		})
	})

	t.Run("signed-bearer-token", func(t *testing.T) {
		a, err := newWSAuth("signed-bearer-token", "", "", testSharedSecretFile, "exec-issuer", "exec-audience", defaultWSMaxClockSkew)
		if err != nil {
			t.Fatal(err)
		}
		ts := startTestServer(t, withAuth(a))
		now := time.Now().Unix()
		// Times are minutes away from the skew, so the clock moving during the test never matters.
		jwt := func(claims string, alg, secret string) string {
			claims = strings.NewReplacer("EXP", strconv.FormatInt(now+600, 10), "PAST", strconv.FormatInt(now-600, 10),
				"FUTURE", strconv.FormatInt(now+600, 10)).Replace(claims)
			return upgrade(authz("Bearer " + signTestJWT([]byte(`{"alg":"`+alg+`","typ":"JWT"}`), []byte(claims), secret, alg, base64.RawURLEncoding)))
		}
		good := func(claims string) string { return jwt(claims, "HS256", testSharedSecret) }
		checkRoutes(t, ts, []httpRoute{
			{"valid", good(`{"exp":EXP,"iss":"exec-issuer","aud":"exec-audience"}`), 101, "", nil},
			{"valid with aud array", good(`{"exp":EXP,"iss":"exec-issuer","aud":["other","exec-audience"]}`), 101, "", nil},
			{"valid with nbf in the past", good(`{"exp":EXP,"nbf":PAST,"iss":"exec-issuer","aud":"exec-audience"}`), 101, "", nil},
			{"no Authorization", upgrade(""), 401, "missing websocket bearer token", nil},
			{"bad signature", jwt(`{"exp":EXP,"iss":"exec-issuer","aud":"exec-audience"}`, "HS256", testSharedSecret+"x"), 401, "invalid websocket jwt", nil},
			{"HS512", jwt(`{"exp":EXP,"iss":"exec-issuer","aud":"exec-audience"}`, "HS512", testSharedSecret), 401, "invalid websocket jwt", nil},
			{"no exp", good(`{"iss":"exec-issuer","aud":"exec-audience"}`), 401, "invalid websocket jwt", nil},
			{"malformed", upgrade(authz("Bearer not.a.jwt")), 401, "invalid websocket jwt", nil},
			{"expired beyond the skew", good(`{"exp":PAST,"iss":"exec-issuer","aud":"exec-audience"}`), 401, "expired websocket jwt", nil},
			{"nbf beyond the skew", good(`{"exp":EXP,"nbf":FUTURE,"iss":"exec-issuer","aud":"exec-audience"}`), 401, "websocket jwt is not valid yet", nil},
			{"iss missing", good(`{"exp":EXP,"aud":"exec-audience"}`), 401, "websocket jwt issuer mismatch", nil},
			{"iss mismatch", good(`{"exp":EXP,"iss":"other","aud":"exec-audience"}`), 401, "websocket jwt issuer mismatch", nil},
			{"aud missing", good(`{"exp":EXP,"iss":"exec-issuer"}`), 401, "websocket jwt audience mismatch", nil},
			{"aud mismatch", good(`{"exp":EXP,"iss":"exec-issuer","aud":"other"}`), 401, "websocket jwt audience mismatch", nil},
			{"aud array without ours", good(`{"exp":EXP,"iss":"exec-issuer","aud":["a","b"]}`), 401, "websocket jwt audience mismatch", nil},
			{"readyz needs no token", "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "", nil},
		})
	})
}
