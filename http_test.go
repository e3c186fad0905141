package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// httpResult is the result of http/request, decoded.
type httpResult struct {
	Status     int          `json:"status"`
	Headers    []httpHeader `json:"headers"`
	BodyBase64 []byte       `json:"bodyBase64"`
}

func httpMustCall(tc *testClient, params map[string]any) httpResult {
	tc.t.Helper()
	var r httpResult
	if err := json.Unmarshal(tc.mustCall("http/request", params), &r); err != nil {
		tc.t.Fatal(err)
	}
	return r
}

func (r httpResult) header(name string) []string {
	var vs []string
	for _, h := range r.Headers {
		if h.Name == name {
			vs = append(vs, h.Value)
		}
	}
	return vs
}

// bodyDeltas waits for the bodyDelta notifications of requestId up to the one with done.
func bodyDeltas(tc *testClient, requestID string) []bodyDeltaParams {
	tc.t.Helper()
	var out []bodyDeltaParams
	for from := 0; ; {
		n, at := tc.waitNote(from, 10*time.Second, func(n testNote) bool {
			return n.Method == "http/request/bodyDelta" && strings.Contains(string(n.Params), `"requestId":"`+requestID+`"`)
		})
		var d bodyDeltaParams
		if err := json.Unmarshal(n.Params, &d); err != nil {
			tc.t.Fatal(err)
		}
		out = append(out, d)
		if d.Done {
			return out
		}
		from = at + 1
	}
}

func TestHTTPRequestBuffered(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header()["X-Multi"] = []string{"b", "a"}
		w.Header().Set("X-Echo-Method", r.Method)
		w.Header().Set("X-Echo-Dup", strings.Join(r.Header.Values("X-Dup"), ","))
		w.Header().Set("X-Echo-UA", r.Header.Get("User-Agent"))
		w.WriteHeader(http.StatusCreated)
		w.Write(append([]byte("got:"), body...))
	}))
	defer srv.Close()
	ts := startTestServer(t)
	tc := ts.connect(t)
	r := httpMustCall(tc, map[string]any{
		"method": "PUT", "url": srv.URL + "/p?q=1", "requestId": "r1",
		"headers":    []map[string]string{{"name": "x-dup", "value": "1"}, {"name": "X-Dup", "value": "2"}},
		"bodyBase64": base64.StdEncoding.EncodeToString([]byte("hello")),
	})
	if r.Status != 201 || string(r.BodyBase64) != "got:hello" {
		t.Errorf("status %d body %q", r.Status, r.BodyBase64)
	}
	for name, want := range map[string]string{"x-multi": "b,a", "x-echo-method": "PUT", "x-echo-dup": "1,2", "x-echo-ua": "", "content-length": "9"} {
		if got := strings.Join(r.header(name), ","); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
	for _, h := range r.Headers {
		if h.Name != strings.ToLower(h.Name) {
			t.Errorf("header name %q is not lower-case", h.Name)
		}
	}
	// Non-2xx statuses are results; a buffered request needs a requestId all the same.
	if r := httpMustCall(tc, map[string]any{"method": "GET", "url": srv.URL + "/missing", "requestId": ""}); r.Status != 201 {
		t.Errorf("status %d", r.Status)
	}
}

func TestHTTPRequestStreamsTheBodyInDeltas(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-After-Transfer-Encoding", "1")
		w.Write([]byte("part1"))
		w.(http.Flusher).Flush()
		<-release
		w.Write([]byte("part2"))
	}))
	defer srv.Close()
	ts := startTestServer(t)
	tc := ts.connect(t)
	r := httpMustCall(tc, map[string]any{"method": "GET", "url": srv.URL, "requestId": "s1", "streamResponse": true})
	if r.Status != 200 || len(r.BodyBase64) != 0 || r.header("content-type")[0] != "text/plain" || r.header("transfer-encoding")[0] != "chunked" {
		t.Fatalf("result %+v", r)
	}
	if !slices.IsSortedFunc(r.Headers, func(a, b httpHeader) int { return strings.Compare(a.Name, b.Name) }) {
		t.Errorf("headers not sorted by name: %+v", r.Headers)
	}
	n, _ := tc.waitNote(0, 10*time.Second, func(n testNote) bool { return n.Method == "http/request/bodyDelta" })
	if string(n.Params) != `{"requestId":"s1","seq":1,"deltaBase64":"cGFydDE=","done":false,"error":null}` {
		t.Errorf("first delta %s", n.Params)
	}
	// The id is busy while its body streams.
	if e := tc.callErr("http/request", map[string]any{"method": "GET", "url": srv.URL, "requestId": "s1", "streamResponse": true}); e.Code != codeInvalidParams || e.Message != "http/request streamResponse requestId `s1` is already active" {
		t.Errorf("busy id: %+v", e)
	}
	close(release)
	ds := bodyDeltas(tc, "s1")
	var body string
	for i, d := range ds {
		if d.Seq != uint64(i+1) || d.Error != nil {
			t.Errorf("delta %d: %+v", i, d)
		}
		body += string(d.DeltaBase64)
	}
	if last := ds[len(ds)-1]; body != "part1part2" || len(last.DeltaBase64) != 0 {
		t.Errorf("body %q, last delta %+v", body, last)
	}
	// Once done, the id is free again.
	httpMustCall(tc, map[string]any{"method": "GET", "url": srv.URL, "requestId": "s1", "streamResponse": true})
}

// hangingServer answers nothing until the request's context ends. Each request it takes is
// reported on arrived, and its end on gone.
func hangingServer(t *testing.T, headersFirst bool) (srv *httptest.Server, arrived, gone <-chan struct{}) {
	in, out := make(chan struct{}, 8), make(chan struct{}, 8)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in <- struct{}{}
		if headersFirst {
			w.Write([]byte("start"))
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
		out <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	return srv, in, out
}

func TestHTTPRequestTimeoutCoversTheWholeExchange(t *testing.T) {
	srv, _, _ := hangingServer(t, false)
	ts := startTestServer(t)
	tc := ts.connect(t)
	for _, ms := range []int{0, 200} {
		e := tc.callErr("http/request", map[string]any{"method": "GET", "url": srv.URL, "requestId": "t", "timeoutMs": ms})
		if e.Code != codeInternal || e.Message != "http/request failed: route-aware request timed out" {
			t.Errorf("timeoutMs %d: %+v", ms, e)
		}
	}
	// A streamed body that stops coming ends with an error delta when the time is up.
	slow, _, _ := hangingServer(t, true)
	httpMustCall(tc, map[string]any{"method": "GET", "url": slow.URL, "requestId": "slow", "streamResponse": true, "timeoutMs": 300})
	ds := bodyDeltas(tc, "slow")
	last := ds[len(ds)-1]
	if string(ds[0].DeltaBase64) != "start" || last.Error == nil || *last.Error != "error decoding response body" {
		t.Errorf("deltas %+v", ds)
	}
}

func TestHTTPRequestIsCancelledWhenTheConnectionEnds(t *testing.T) {
	buffered, arrived, gone := hangingServer(t, false)
	streamed, _, streamGone := hangingServer(t, true)
	ts := startTestServer(t)
	tc := ts.connect(t)
	tc.start("http/request", map[string]any{"method": "GET", "url": buffered.URL, "requestId": "c"})
	tc.mustCall("http/request", map[string]any{"method": "GET", "url": streamed.URL, "requestId": "s", "streamResponse": true})
	httpAwait(t, arrived, "the buffered request never reached the server")
	tc.close()
	httpAwait(t, gone, "the buffered request outlived its connection")
	httpAwait(t, streamGone, "the streamed request outlived its connection")
}

func httpAwait(t *testing.T, ch <-chan struct{}, failure string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal(failure)
	}
}

func TestHTTPRequestParamErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()
	ts := startTestServer(t)
	tc := ts.connect(t)
	ok := map[string]any{"method": "GET", "url": "http://127.0.0.1:1/", "requestId": "e"}
	for _, tt := range []struct {
		name   string
		change map[string]any
		code   int
		msg    string
	}{
		{"bad method", map[string]any{"method": "GE T"}, codeInvalidParams, "http/request method is invalid: invalid HTTP method"},
		{"empty method", map[string]any{"method": ""}, codeInvalidParams, "http/request method is invalid: invalid HTTP method"},
		{"ftp", map[string]any{"url": "ftp://127.0.0.1/x"}, codeInvalidParams, "http/request only supports http and https URLs, got ftp"},
		{"relative url", map[string]any{"url": "/x"}, codeInvalidParams, "http/request url is invalid: relative URL without a base"},
		{"no host", map[string]any{"url": "http:///x"}, codeInvalidParams, "http/request url is invalid: empty host"},
		{"bad port", map[string]any{"url": "http://127.0.0.1:99999999/"}, codeInvalidParams, "http/request url is invalid: invalid port number"},
		{"header name", map[string]any{"headers": []map[string]string{{"name": "a b", "value": "x"}}}, codeInvalidParams, "http/request header name is invalid: invalid HTTP header name"},
		{"header value", map[string]any{"headers": []map[string]string{{"name": "a", "value": "x\ny"}}}, codeInvalidParams, "http/request header value is invalid for a: failed to parse header value"},
		{"header without value", map[string]any{"headers": []map[string]string{{"name": "a"}}}, codeInvalidParams, "missing field `value`"},
		{"body base64", map[string]any{"bodyBase64": "!!"}, codeInvalidParams, "Invalid symbol 33, offset 0."},
		{"redirect policy", map[string]any{"redirectPolicy": "sometimes"}, codeInvalidParams, "unknown variant `sometimes`, expected `follow` or `stop`"},
		{"negative timeout", map[string]any{"timeoutMs": -1}, codeInvalidParams, "invalid number"},
		{"refused", map[string]any{"url": refused}, codeInternal, "http/request failed: error sending request for url (" + refused + "/)"},
	} {
		params := map[string]any{}
		for k, v := range ok {
			params[k] = v
		}
		for k, v := range tt.change {
			params[k] = v
		}
		if e := tc.callErr("http/request", params); e.Code != tt.code || e.Message != tt.msg {
			t.Errorf("%s: got %d %q, want %d %q", tt.name, e.Code, e.Message, tt.code, tt.msg)
		}
	}
	if e := tc.callErr("http/request", map[string]any{"method": "GET", "url": "http://x/"}); e.Message != "missing field `requestId`" {
		t.Errorf("no requestId: %+v", e)
	}
}

func TestHTTPRequestBufferedBodyIsBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, maxHTTPBufferedBody+1))
	}))
	defer srv.Close()
	ts := startTestServer(t)
	tc := ts.connect(t)
	e := tc.callErr("http/request", map[string]any{"method": "GET", "url": srv.URL, "requestId": "big"})
	if e.Code != codeInternal || !strings.Contains(e.Message, "use streamResponse") {
		t.Errorf("got %+v", e)
	}
}

// TestHTTPRedirectsKeepCredentialsAtHome follows redirects within an origin with the client's
// credentials, and to another origin (here: another port) without them, also when the other
// origin sends the request back home.
func TestHTTPRedirectsKeepCredentialsAtHome(t *testing.T) {
	seen := make(chan http.Header, 4)
	var homeURL string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/back" {
			http.Redirect(w, r, homeURL+"/landing?chosen-by=other", http.StatusFound)
			return
		}
		seen <- r.Header.Clone()
		w.Write([]byte("other"))
	}))
	defer other.Close()
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, other.URL+"/landing", http.StatusFound)
		case "/bounce":
			http.Redirect(w, r, other.URL+"/back", http.StatusFound)
		case "/here":
			http.Redirect(w, r, "/landing", http.StatusTemporaryRedirect)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		default:
			seen <- r.Header.Clone()
			w.Write([]byte("home"))
		}
	}))
	defer home.Close()
	homeURL = home.URL
	ts := startTestServer(t)
	tc := ts.connect(t)
	creds := []map[string]string{{"name": "Authorization", "value": "Bearer secret"}, {"name": "Cookie", "value": "s=1"}, {"name": "X-Other", "value": "kept"}}

	r := httpMustCall(tc, map[string]any{"method": "GET", "url": home.URL + "/away", "requestId": "a", "headers": creds})
	h := <-seen
	if r.Status != 200 || string(r.BodyBase64) != "other" || h.Get("Authorization") != "" || h.Get("Cookie") != "" || h.Get("X-Other") != "kept" {
		t.Errorf("cross-origin redirect: status %d body %q headers %v", r.Status, r.BodyBase64, h)
	}
	r = httpMustCall(tc, map[string]any{"method": "GET", "url": home.URL + "/here", "requestId": "a", "headers": creds})
	h = <-seen
	if string(r.BodyBase64) != "home" || h.Get("Authorization") != "Bearer secret" || h.Get("Cookie") != "s=1" {
		t.Errorf("same-origin redirect: body %q headers %v", r.BodyBase64, h)
	}
	r = httpMustCall(tc, map[string]any{"method": "GET", "url": home.URL + "/bounce", "requestId": "a", "headers": creds})
	h = <-seen
	if string(r.BodyBase64) != "home" || h.Get("Authorization") != "" || h.Get("Cookie") != "" || h.Get("X-Other") != "kept" {
		t.Errorf("redirect back home from another origin: body %q headers %v", r.BodyBase64, h)
	}
	r = httpMustCall(tc, map[string]any{"method": "GET", "url": home.URL + "/away", "requestId": "a", "redirectPolicy": "stop"})
	if r.Status != 302 || r.header("location")[0] != other.URL+"/landing" {
		t.Errorf("stop: status %d location %v", r.Status, r.header("location"))
	}
	e := tc.callErr("http/request", map[string]any{"method": "GET", "url": home.URL + "/loop", "requestId": "a"})
	if e.Code != codeInternal || e.Message != "http/request failed: error following redirect for url ("+home.URL+"/loop)" {
		t.Errorf("redirect loop: %+v", e)
	}
}

// TestHTTPRequestUsesTheProxyFromTheEnvironment runs the server binary with HTTP_PROXY set:
// a request for a remote host goes through the proxy, one for a loopback address does not.
func TestHTTPRequestUsesTheProxyFromTheEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	proxied := make(chan string, 1)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied <- r.RequestURI
		w.Write([]byte("via proxy"))
	}))
	defer proxy.Close()
	direct := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("direct")) }))
	defer direct.Close()

	bin, err := buildServer()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	cmd := exec.Command(bin, "--listen", "ws://127.0.0.1:0")
	cmd.Env = append(os.Environ(), "HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL, "NO_PROXY=", "no_proxy=")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	tc := (&testServer{url: strings.TrimSpace(line)}).connect(t)

	r := httpMustCall(tc, map[string]any{"method": "GET", "url": "http://remote.example/x", "requestId": "p"})
	if string(r.BodyBase64) != "via proxy" || <-proxied != "http://remote.example/x" {
		t.Errorf("remote host: body %q", r.BodyBase64)
	}
	if r := httpMustCall(tc, map[string]any{"method": "GET", "url": direct.URL, "requestId": "p"}); string(r.BodyBase64) != "direct" {
		t.Errorf("loopback: body %q", r.BodyBase64)
	}
}

// TestCapabilityHttpHeaderEnvVars backs httpHeaderEnvVars: a header with valueEnvVar reaches a
// real loopback server as value followed by the server's variable, valueEnvVar null is a
// literal header, and the three refusals are the reference's, word for word, with nothing sent.
func TestCapabilityHttpHeaderEnvVars(t *testing.T) {
	var (
		mu  sync.Mutex
		got [][]string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Values("X-A"))
		mu.Unlock()
	}))
	defer srv.Close()
	arrived := func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		out := got
		got = nil
		return out
	}
	t.Setenv("EXEC_SERVER_TEST_TOK", "s3cret")
	t.Setenv("EXEC_SERVER_TEST_EMPTY", "")
	t.Setenv("EXEC_SERVER_TEST_CTRL", "a\x01b")
	os.Unsetenv("EXEC_SERVER_TEST_UNSET")
	ts := startTestServer(t)
	tc := ts.connect(t)
	hdr := func(value string, envVar any) map[string]any {
		return map[string]any{"name": "X-A", "value": value, "valueEnvVar": envVar}
	}
	for _, tt := range []struct {
		headers []map[string]any
		want    []string
	}{
		{[]map[string]any{hdr("Bearer ", "EXEC_SERVER_TEST_TOK")}, []string{"Bearer s3cret"}},
		{[]map[string]any{hdr("", "EXEC_SERVER_TEST_TOK")}, []string{"s3cret"}},
		{[]map[string]any{hdr("lit", nil)}, []string{"lit"}},
		{[]map[string]any{hdr("v", "EXEC_SERVER_TEST_TOK"), hdr("w", "EXEC_SERVER_TEST_TOK")}, []string{"vs3cret", "ws3cret"}},
	} {
		if r := httpMustCall(tc, map[string]any{"method": "GET", "url": srv.URL, "requestId": "e", "headers": tt.headers}); r.Status != http.StatusOK {
			t.Fatalf("%v: status %d", tt.headers, r.Status)
		}
		if a := arrived(); len(a) != 1 || !slices.Equal(a[0], tt.want) {
			t.Errorf("%v: the server got X-A %q, want %q", tt.headers, a, tt.want)
		}
	}
	for _, tt := range []struct {
		headers []map[string]any
		msg     string
	}{
		{[]map[string]any{hdr("v", "EXEC_SERVER_TEST_UNSET")}, "http/request header X-A requires executor environment variable EXEC_SERVER_TEST_UNSET"},
		{[]map[string]any{hdr("v", "")}, "http/request header X-A requires executor environment variable "},
		{[]map[string]any{hdr("v", "BAD=NAME")}, "http/request header X-A requires executor environment variable BAD=NAME"},
		{[]map[string]any{hdr("v", "A\x00B")}, "http/request header X-A requires executor environment variable A\x00B"},
		{[]map[string]any{hdr("v", "EXEC_SERVER_TEST_EMPTY")}, "http/request header X-A requires a non-empty executor environment variable EXEC_SERVER_TEST_EMPTY"},
		{[]map[string]any{hdr("v", "EXEC_SERVER_TEST_CTRL")}, "http/request header value is invalid for X-A: failed to parse header value"},
		// The variable is looked up before the value is checked, and headers in order.
		{[]map[string]any{hdr("a\nb", "EXEC_SERVER_TEST_UNSET")}, "http/request header X-A requires executor environment variable EXEC_SERVER_TEST_UNSET"},
		{[]map[string]any{hdr("v", "EXEC_SERVER_TEST_UNSET"), {"name": "bad name", "value": "v"}}, "http/request header X-A requires executor environment variable EXEC_SERVER_TEST_UNSET"},
		{[]map[string]any{hdr("v", 5)}, "invalid type: number, expected a string"},
	} {
		if e := tc.callErr("http/request", map[string]any{"method": "GET", "url": srv.URL, "requestId": "e", "headers": tt.headers}); e.Code != codeInvalidParams || e.Message != tt.msg {
			t.Errorf("%v: error %d %q, want %d %q", tt.headers, e.Code, e.Message, codeInvalidParams, tt.msg)
		}
	}
	if a := arrived(); len(a) != 0 {
		t.Errorf("refused requests reached the server: %q", a)
	}
}
