package main

// Tests of SigV4 re-signing under credential masking (netproxy_sigv4.go, docs/network.md §8,
// "SigV4"): AWS's test suite taken as requests signed with a stand-in, our own vectors
// (testdata/netproxy/sigv4_resign.txt, which interop/ also signs with aws-sdk-go-v2), the
// refusals and the fail-closed cases, a round trip over real HTTP/1.1 and HTTP/2 to an origin
// that verifies with the real secret, and a fuzz target for the Authorization parser.

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// sigv4TestResigner masks env (AWS_* and whatever else) as a process start would and returns
// the resigner of its binding.
func sigv4TestResigner(t testing.TB, env map[string]string) *sigv4Resigner {
	t.Helper()
	res := maskTestEnv(t, newMaskRegistry(), env, nil)
	s := newSigV4Resigner(res.binding)
	if s == nil {
		t.Fatal("no resigner for a binding with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	if s.standIn.AccessKeyID == s.real.AccessKeyID || s.standIn.SecretAccessKey == s.real.SecretAccessKey {
		t.Fatal("stand-ins equal the real values")
	}
	return s
}

// sigv4Leaks fails t when the real secret (or, when not wanted there, any real value) shows in
// r's headers.
func sigv4NoSecret(t testing.TB, h http.Header, secret string) {
	t.Helper()
	for k, vs := range h {
		for _, v := range vs {
			if strings.Contains(v, secret) {
				t.Fatalf("the real secret is in header %s", k)
			}
		}
	}
}

// TestSigV4ResignSuite takes each request of AWS's test suite (testdata/sigv4) as a command's
// request signed with a stand-in (the suite's key), re-signs it for a real key and compares
// with the suite's canonical request signed by the real key; a signature off by one digit is
// passed on unchanged.
func TestSigV4ResignSuite(t *testing.T) {
	real := awsCredentials{AccessKeyID: "AKIAREALKEY000000000", SecretAccessKey: "real/secret+key0000000000000000000000000", SessionToken: "real-session-token"}
	resigned, skipped := 0, 0
	for _, file := range vectorFiles(t, filepath.Join("testdata", "sigv4", "*.txt")) {
		c := readVectorCase(t, file)
		if _, skip := c.fields["skip"]; skip {
			continue
		}
		name := c.field(t, "name")
		t.Run(name, func(t *testing.T) {
			read := func(section string) string { return strings.TrimSuffix(c.section(t, section), "\n") }
			req := parseSigV4SuiteReq(t, read("req"))
			p, q, _ := strings.Cut(req.target, "?")
			u, err := url.Parse("https://" + req.header.Get("Host") + req.target)
			if err != nil || u.EscapedPath() != p || u.RawQuery != q {
				skipped++
				t.Skip("the target is not a URL net/http would send as it is")
			}
			standIn := sigv4SuiteCreds
			standIn.SessionToken = req.header.Get("X-Amz-Security-Token")
			rl := real
			if standIn.SessionToken == "" {
				rl.SessionToken = ""
			}
			s := &sigv4Resigner{real: rl, standIn: standIn, slots: make(chan struct{}, sigv4BufferSlots),
				now:   func() time.Time { return sigv4SuiteTime },
				dests: []maskDest{{https: true, wildcard: true, host: "amazonaws.com", port: 443, path: "/"}}}
			build := func(authz string) *http.Request {
				h := req.header.Clone()
				h.Del("Host")
				h.Set("Authorization", authz)
				if h.Get("X-Amz-Date") == "" {
					h.Set("X-Amz-Date", sigv4SuiteTime.Format(sigv4AmzDate)) // as the suite's signer adds it
				}
				return &http.Request{Method: req.method, URL: u, Host: u.Host, Header: h,
					ContentLength: req.contentLength, Body: io.NopCloser(bytes.NewReader(req.body))}
			}

			r := build(read("authz"))
			out := s.resign(r, u.Hostname(), 443)
			if !out.resigned || out.status != 0 {
				t.Fatalf("not re-signed: %v", out)
			}
			// What the real key signs over the suite's request, signed directly.
			h := req.header.Clone()
			sigv4SetDate(h, rl, sigv4SuiteTime)
			a, _ := parseSigV4Authorization(read("authz"))
			want, err := sigv4Sign(sigv4Request{Method: req.method, Path: p, RawQuery: q, Host: h.Get("Host"), Header: h,
				Body: req.body, SignedHeaders: a.signedHeaders}, rl, "us-east-1", "service", sigv4SuiteTime)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Header.Get("Authorization"); got != want.Authorization {
				t.Errorf("re-signed:\n got %q\nwant %q", got, want.Authorization)
			}
			if standIn.SessionToken != "" && r.Header.Get("X-Amz-Security-Token") != rl.SessionToken {
				t.Error("the session token's stand-in was not swapped")
			}
			if body, _ := io.ReadAll(r.Body); !bytes.Equal(body, req.body) {
				t.Error("the body changed")
			}
			resigned++

			// One digit off: unchanged, with a note.
			bad := read("authz")
			last := "0"
			if strings.HasSuffix(bad, "0") {
				last = "1"
			}
			bad = bad[:len(bad)-1] + last
			r = build(bad)
			before := r.Header.Clone()
			if out := s.resign(r, u.Hostname(), 443); out.resigned || out.status != 0 || !strings.Contains(out.note, "does not verify") {
				t.Fatalf("a signature that does not verify: %v", out)
			}
			if r.Header.Get("Authorization") != bad || r.Header.Get("X-Amz-Security-Token") != before.Get("X-Amz-Security-Token") {
				t.Fatal("a request that does not verify was changed")
			}
		})
	}
	if resigned < 20 {
		t.Errorf("re-signed %d suite requests (%d skipped), want at least 20", resigned, skipped)
	}
	t.Logf("re-signed %d suite requests, %d skipped as targets net/http would not send as they are", resigned, skipped)
}

// sigv4VectorTime is the proxy's clock for the vectors, whose X-Amz-Date are its first seconds.
var sigv4VectorTime = time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)

// sigv4Vector is one request of testdata/netproxy/sigv4_resign.txt.
type sigv4Vector struct {
	name, method, rawURL, region, service, date, signed, authz, payload string
	headers                                                             [][2]string
	body                                                                []byte
	token, s3                                                           bool
}

func readSigV4Vectors(t testing.TB) (real awsCredentials, vs []sigv4Vector) {
	t.Helper()
	cases := readVectors(t, filepath.Join("testdata", "netproxy", "sigv4_resign.txt"))
	c := cases[0]
	c.only(t, "name", "real key id", "real secret", "real token")
	real = awsCredentials{AccessKeyID: c.field(t, "real key id"), SecretAccessKey: c.field(t, "real secret"), SessionToken: c.field(t, "real token")}
	for _, c := range cases[1:] {
		v := sigv4Vector{name: c.field(t, "name"), method: c.field(t, "method"), rawURL: c.field(t, "url"),
			region: c.field(t, "region"), service: c.field(t, "service"), date: c.field(t, "date"),
			signed: c.field(t, "signed"), authz: c.field(t, "authz"), payload: c.fields["payload"],
			body: []byte(c.fields["body"]), token: c.fields["token"] == "yes", s3: c.fields["s3"] == "yes"}
		for i := 1; ; i++ {
			hv, ok := c.fields["header "+strconv.Itoa(i)]
			if !ok {
				break
			}
			name, val, _ := strings.Cut(hv, ":")
			val = strings.TrimSpace(val)
			if strings.HasPrefix(val, `"`) {
				uq, err := strconv.Unquote(val)
				if err != nil {
					t.Fatalf("%s: header %d: %v", c.where(), i, err)
				}
				val = uq
			}
			v.headers = append(v.headers, [2]string{name, val})
		}
		vs = append(vs, v)
	}
	return real, vs
}

// TestSigV4ResignVectors signs each vector with the stand-ins masking drew (our signer),
// re-signs it and compares with the vector's authz, which interop/ checks against
// aws-sdk-go-v2's signer with the real credentials.
func TestSigV4ResignVectors(t *testing.T) {
	real, vs := readSigV4Vectors(t)
	s := sigv4TestResigner(t, map[string]string{"AWS_ACCESS_KEY_ID": real.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY": real.SecretAccessKey, "AWS_SESSION_TOKEN": real.SessionToken})
	s.now = func() time.Time { return sigv4VectorTime }
	if s.real != real {
		t.Fatal("the resigner does not hold the bound real credentials")
	}
	for _, v := range vs {
		t.Run(v.name, func(t *testing.T) {
			r := sigv4VectorRequest(t, v, s.standIn)
			if t.Failed() {
				return
			}
			out := s.resign(r, r.URL.Hostname(), 443)
			if !out.resigned {
				t.Fatalf("not re-signed: %v", out)
			}
			got := r.Header.Get("Authorization")
			if v.authz == "TODO" {
				t.Errorf("authz: %s", got)
				return
			}
			if got != v.authz {
				t.Errorf("re-signed:\n got %q\nwant %q", got, v.authz)
			}
			if v.token && r.Header.Get("X-Amz-Security-Token") != real.SessionToken {
				t.Error("the session token's stand-in was not swapped")
			}
			sigv4NoSecret(t, r.Header, real.SecretAccessKey)
		})
	}
}

// sigv4VectorRequest builds v as a client sends it, signed with creds by our signer over
// exactly v's signed headers (the SDK's choice) and in its form (S3's canonical URI or not).
func sigv4VectorRequest(t testing.TB, v sigv4Vector, creds awsCredentials) *http.Request {
	t.Helper()
	r, err := http.NewRequest(v.method, v.rawURL, bytes.NewReader(v.body))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.body) == 0 {
		r.Body, r.ContentLength = http.NoBody, 0
	}
	for _, h := range v.headers {
		r.Header.Add(h[0], h[1])
	}
	switch v.payload {
	case "":
	case "sha256":
		r.Header.Set("X-Amz-Content-Sha256", sha256Hex(v.body))
	default:
		r.Header.Set("X-Amz-Content-Sha256", v.payload)
	}
	when, err := time.Parse(sigv4AmzDate, v.date)
	if err != nil {
		t.Fatal(err)
	}
	c := creds
	if !v.token {
		c.SessionToken = ""
	}
	sigv4SetDate(r.Header, c, when)
	h := r.Header.Clone()
	if r.ContentLength > 0 {
		h.Set("Content-Length", strconv.FormatInt(r.ContentLength, 10))
	}
	req := sigv4Request{Method: v.method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Host: r.URL.Host,
		Header: h, Body: v.body, SignedHeaders: strings.Split(v.signed, ";"), PayloadHash: r.Header.Get("X-Amz-Content-Sha256")}
	if v.s3 {
		req.CanonicalURI = r.URL.EscapedPath()
	}
	signed, err := sigv4Sign(req, c, v.region, v.service, when)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", signed.Authorization)
	return r
}

// TestSigV4ResignRefusals: what is refused with the proxy's own 4xx, and what goes on
// unchanged (fail closed), each time with no real value in the request.
func TestSigV4ResignRefusals(t *testing.T) {
	real, vs := readSigV4Vectors(t)
	env := map[string]string{"AWS_ACCESS_KEY_ID": real.AccessKeyID, "AWS_SECRET_ACCESS_KEY": real.SecretAccessKey,
		"AWS_SESSION_TOKEN": real.SessionToken}
	s := sigv4TestResigner(t, env)
	s.now = func() time.Time { return sigv4VectorTime }
	var post sigv4Vector
	for _, v := range vs {
		if v.name == "post-body" {
			post = v
		}
	}
	sign := func(edit func(v *sigv4Vector)) *http.Request {
		v := post
		v.headers = append([][2]string(nil), post.headers...)
		if edit != nil {
			edit(&v)
		}
		return sigv4VectorRequest(t, v, s.standIn)
	}
	check := func(name string, r *http.Request, host string, wantStatus int, wantNote string) {
		t.Helper()
		before := r.Header.Clone()
		out := s.resign(r, host, 443)
		if out.resigned || out.status != wantStatus || !strings.Contains(out.note, wantNote) || wantNote == "" && out.note != "" {
			t.Errorf("%s: %v, want status %d and a note with %q", name, out, wantStatus, wantNote)
		}
		for k := range before {
			if r.Header.Get(k) != before.Get(k) {
				t.Errorf("%s: header %s changed", name, k)
			}
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				for _, secret := range []string{real.AccessKeyID, real.SecretAccessKey, real.SessionToken} {
					if strings.Contains(v, secret) {
						t.Errorf("%s: a real value in header %s", name, k)
					}
				}
			}
		}
		if strings.Contains(out.text+out.note, real.SecretAccessKey) {
			t.Errorf("%s: the real secret in the answer", name)
		}
		if r.Body != nil {
			r.Body.Close() // as the transport does once the request is forwarded
		}
	}

	// Signed chunks chain from the seed signature: the proxy answers 400 itself.
	r := sign(func(v *sigv4Vector) {
		v.payload = sigv4StreamingSigned
		v.signed = "content-length;content-type;host;x-amz-content-sha256;x-amz-date;x-amz-target"
	})
	check("streaming signed chunks", r, "dynamodb.eu-west-1.amazonaws.com", http.StatusBadRequest, "")
	r = sign(func(v *sigv4Vector) {
		v.payload = sigv4StreamingSignedTrailer
		v.signed = "content-length;content-type;host;x-amz-content-sha256;x-amz-date;x-amz-target"
	})
	check("streaming signed chunks with trailer", r, "dynamodb.eu-west-1.amazonaws.com", http.StatusBadRequest, "")
	// A body over the limit with no X-Amz-Content-Sha256: 413, before and while reading.
	big := bytes.Repeat([]byte("x"), sigv4MaxBufferedBody+1)
	r = sign(func(v *sigv4Vector) { v.body = big })
	check("body over the limit", r, "dynamodb.eu-west-1.amazonaws.com", http.StatusRequestEntityTooLarge, "")
	r = sign(func(v *sigv4Vector) { v.body = big; v.signed = "content-type;host;x-amz-date;x-amz-target" })
	r.ContentLength = -1
	check("body over the limit, chunked", r, "dynamodb.eu-west-1.amazonaws.com", http.StatusRequestEntityTooLarge, "")
	if len(s.slots) != 0 {
		t.Fatalf("%d buffer slots held after refusals", len(s.slots))
	}

	// Fail closed: passed on unchanged.
	check("another host (not aws)", sign(nil), "api.github.com", 0, "")
	check("the host is not the forwarded one", sign(nil), "dynamodb.us-east-1.amazonaws.com", 0, "signed host")
	r = sign(nil)
	r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), s.standIn.AccessKeyID, "AKIAOTHERKEY00000000", 1))
	check("another key id", r, "dynamodb.eu-west-1.amazonaws.com", 0, "")
	r = sign(nil)
	r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), "Signature=", "Signature=x", 1))
	check("malformed", r, "dynamodb.eu-west-1.amazonaws.com", 0, "not understood")
	r = sign(nil)
	r.Header.Set("X-Amz-Target", "DynamoDB_20120810.DeleteTable")
	check("a signed header changed", r, "dynamodb.eu-west-1.amazonaws.com", 0, "does not verify")
	r = sign(nil)
	r.Header.Del("X-Amz-Target")
	check("a signed header missing", r, "dynamodb.eu-west-1.amazonaws.com", 0, "missing")
	r = sign(nil)
	r.Header.Set("X-Amz-Date", "20260116T120001Z")
	check("X-Amz-Date not the scope's day", r, "dynamodb.eu-west-1.amazonaws.com", 0, "X-Amz-Date")
	for _, off := range []time.Duration{-16 * time.Minute, 16 * time.Minute} {
		s.now = func() time.Time { return sigv4VectorTime.Add(off) }
		check("X-Amz-Date 16 minutes off", sign(nil), "dynamodb.eu-west-1.amazonaws.com", 0, "15 minutes")
	}
	s.now = func() time.Time { return sigv4VectorTime }
	r = sign(func(v *sigv4Vector) { v.body = []byte(`{"Limit":4}`) })
	r.Body = io.NopCloser(strings.NewReader(`{"Limit":5}`))
	check("body changed after signing", r, "dynamodb.eu-west-1.amazonaws.com", 0, "does not verify")
	r = sign(func(v *sigv4Vector) { v.signed = "content-length;content-type;x-amz-date;x-amz-target" })
	check("host not signed", r, "dynamodb.eu-west-1.amazonaws.com", 0, "not understood")
	r = sign(func(v *sigv4Vector) {
		v.payload = "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD"
		v.signed = "content-length;content-type;host;x-amz-content-sha256;x-amz-date;x-amz-target"
	})
	check("a payload hash not understood", r, "dynamodb.eu-west-1.amazonaws.com", 0, "payload hash")
	// A presigned URL: never re-signed.
	r, _ = http.NewRequest("GET", "https://examplebucket.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="+
		s.standIn.AccessKeyID+"%2F20260115%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260115T120000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature="+strings.Repeat("0", 64), nil)
	check("presigned URL", r, "examplebucket.s3.amazonaws.com", 0, "presigned")
	if len(s.slots) != 0 {
		t.Fatalf("%d buffer slots held", len(s.slots))
	}

	// Accepted: STREAMING-UNSIGNED-PAYLOAD-TRAILER carries no chunk signature.
	r = sign(func(v *sigv4Vector) {
		v.payload = sigv4StreamingUnsignedTrailer
		v.signed = "content-length;content-type;host;x-amz-content-sha256;x-amz-date;x-amz-target"
	})
	if out := s.resign(r, "dynamodb.eu-west-1.amazonaws.com", 443); !out.resigned {
		t.Errorf("STREAMING-UNSIGNED-PAYLOAD-TRAILER: %v", out)
	}
	// A buffered body goes on byte for byte and gives its slot back when closed.
	r = sign(nil)
	if out := s.resign(r, "dynamodb.eu-west-1.amazonaws.com", 443); !out.resigned || r.Header.Get("Authorization") != post.authz {
		t.Fatalf("post-body: %v", out)
	}
	if len(s.slots) != 1 {
		t.Fatalf("%d slots held while the body is buffered, want 1", len(s.slots))
	}
	if b, _ := io.ReadAll(r.Body); !bytes.Equal(b, post.body) {
		t.Fatal("the buffered body differs")
	}
	r.Body.Close()
	r.Body.Close()
	if len(s.slots) != 0 {
		t.Fatalf("%d slots held after the body's close", len(s.slots))
	}
	// Without the secret bound there is nothing to re-sign with.
	if newSigV4Resigner(maskTestEnv(t, newMaskRegistry(), map[string]string{"AWS_ACCESS_KEY_ID": real.AccessKeyID}, nil).binding) != nil {
		t.Error("a resigner without the secret")
	}
}

// TestSigV4ResignOverHTTP: a command's SDK-like client signs with the stand-ins and sends over
// TLS, HTTP/1.1 and HTTP/2, to a front that does what the interception does (re-sign, then
// forward by httputil.ReverseProxy) to an origin that checks the signature with the real
// secret (sigv4Verify, code of its own) and reads the real token. The destination is
// AWS_ENDPOINT_URL, as masking computes it.
func TestSigV4ResignOverHTTP(t *testing.T) {
	real := awsCredentials{AccessKeyID: "AKIAIOSFODNN7EXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", SessionToken: "FQoGZXIvYXdzEXAMPLE/token+=="}
	type seen struct {
		err           error
		keyID, token  string
		body          string
		contentLength int64
	}
	var mu sync.Mutex
	var got []seen
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			err = sigv4Verify(r, body, real.SecretAccessKey)
		}
		a, _ := parseSigV4Authorization(r.Header.Get("Authorization"))
		mu.Lock()
		got = append(got, seen{err, a.keyID, r.Header.Get("X-Amz-Security-Token"), string(body), r.ContentLength})
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	originURL, _ := url.Parse(origin.URL)

	var s *sigv4Resigner
	front := httptest.NewUnstartedServer(nil)
	front.EnableHTTP2 = true
	front.StartTLS()
	defer front.Close()
	_, portStr, _ := net.SplitHostPort(front.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)
	s = sigv4TestResigner(t, map[string]string{"AWS_ACCESS_KEY_ID": real.AccessKeyID, "AWS_SECRET_ACCESS_KEY": real.SecretAccessKey,
		"AWS_SESSION_TOKEN": real.SessionToken, "AWS_ENDPOINT_URL": "https://127.0.0.1:" + portStr})
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(originURL); pr.Out.Host = pr.In.Host }}
	done := make(chan struct{}, 1) // each request's handler has returned (the forwarded body closed)
	front.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }()
		if out := s.resign(r, "127.0.0.1", uint16(port)); out.status != 0 {
			writeMITMText(w, out.status, out.text)
			return
		}
		rp.ServeHTTP(w, r)
	})

	pool := x509.NewCertPool()
	pool.AddCert(front.Certificate())
	clients := map[string]*http.Client{
		"HTTP/1.1": {Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}},
		"HTTP/2.0": {Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}},
	}
	base := "https://127.0.0.1:" + portStr
	now := time.Now()
	for proto, c := range clients {
		for _, tc := range []struct {
			name, method, target, body string
		}{
			{"get-query", "GET", "/?Action=GetCallerIdentity&Version=2011-06-15", ""},
			{"post-body", "POST", "/prod/items/a%20b", `{"Limit":3}`},
		} {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, err := http.NewRequest(tc.method, base+tc.target, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/x-amz-json-1.0")
			if err := signSigV4(req, []byte(tc.body), s.standIn, "us-east-1", "sts", now); err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			<-done
			if resp.StatusCode != 200 || resp.Proto != proto {
				t.Fatalf("%s %s: %s %s %q", proto, tc.name, resp.Proto, resp.Status, b)
			}
			mu.Lock()
			last := got[len(got)-1]
			mu.Unlock()
			if last.err != nil || last.keyID != real.AccessKeyID || last.token != real.SessionToken || last.body != tc.body {
				t.Fatalf("%s %s: the origin saw key %q, token real %v, body %q, verify: %v", proto, tc.name, last.keyID, last.token == real.SessionToken, last.body, last.err)
			}
		}
		// Signed chunks: the proxy's 400, nothing at the origin.
		mu.Lock()
		n := len(got)
		mu.Unlock()
		req, _ := http.NewRequest("PUT", base+"/bucket/key", strings.NewReader("5;chunk-signature=x\r\nhello\r\n"))
		req.Header.Set("X-Amz-Content-Sha256", sigv4StreamingSigned)
		req.Header.Set("Content-Encoding", "aws-chunked")
		if err := signSigV4(req, nil, s.standIn, "us-east-1", "s3", now); err != nil {
			t.Fatal(err)
		}
		// signSigV4 hashes the body it is given; sign again with the streaming hash as S3 clients do.
		a, _ := parseSigV4Authorization(req.Header.Get("Authorization"))
		h := req.Header.Clone()
		signed, err := sigv4Sign(sigv4Request{Method: "PUT", Path: "/bucket/key", Host: req.URL.Host, Header: h,
			SignedHeaders: a.signedHeaders, PayloadHash: sigv4StreamingSigned, CanonicalURI: "/bucket/key"}, s.standIn, "us-east-1", "s3", now)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", signed.Authorization)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		<-done
		mu.Lock()
		m := len(got)
		mu.Unlock()
		if resp.StatusCode != http.StatusBadRequest || string(b) != sigv4TextStreaming || m != n {
			t.Fatalf("%s streaming: %s %q, %d requests at the origin", proto, resp.Status, b, m-n)
		}
	}
	// Every slot comes back once the requests have ended: take them all.
	timeout := time.After(10 * time.Second)
	for range sigv4BufferSlots {
		select {
		case s.slots <- struct{}{}:
		case <-timeout:
			t.Fatalf("%d buffer slots still held 10 s after the last request", len(s.slots))
		}
	}
}

// FuzzSigV4Authorization: the parser never panics; what it accepts is well-formed (host
// signed, names sorted and distinct, a 64-digit signature) and reads back the same from its
// own spelling; and a request carrying it, with the stand-in key id, is re-signed only if it
// verifies (never, for a fuzzed signature) and otherwise left exactly as it was.
func FuzzSigV4Authorization(f *testing.F) {
	for _, seed := range []string{
		"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
		"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request,SignedHeaders=host,Signature=" + strings.Repeat("a", 64),
		"AWS4-HMAC-SHA256 Signature=" + strings.Repeat("0", 64) + ", SignedHeaders=host, Credential=K/20150830/r/s/aws4_request",
		"AWS4-HMAC-SHA256 Credential=a/b/c/d/e, SignedHeaders=, Signature=",
		"AWS4-HMAC-SHA256 ,,,", "Bearer x", "",
	} {
		f.Add(seed)
	}
	s := &sigv4Resigner{real: awsCredentials{AccessKeyID: "AKIAREAL", SecretAccessKey: "real"},
		standIn: awsCredentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "standin"},
		dests:   []maskDest{{https: true, wildcard: true, host: "amazonaws.com", port: 443, path: "/"}},
		slots:   make(chan struct{}, sigv4BufferSlots), now: func() time.Time { return sigv4SuiteTime }}
	f.Fuzz(func(t *testing.T, v string) {
		a, err := parseSigV4Authorization(v)
		if err == nil {
			if len(a.signature) != 64 || a.keyID == "" || len(a.date) != 8 || a.region == "" || a.service == "" {
				t.Fatalf("accepted with an empty or short part: %#v", a)
			}
			hasHost := false
			for i, n := range a.signedHeaders {
				if i > 0 && a.signedHeaders[i-1] >= n || n != strings.ToLower(n) || strings.ContainsAny(n, ":;, \n") {
					t.Fatalf("signed headers not sorted, distinct, lower-case tokens: %q", a.signedHeaders)
				}
				hasHost = hasHost || n == "host"
			}
			if !hasHost {
				t.Fatal("accepted without host signed")
			}
			b, err := parseSigV4Authorization(a.String())
			if err != nil || b.String() != a.String() {
				t.Fatalf("its own spelling reads back differently: %v", err)
			}
		}
		if !strings.Contains(v, "\n") && !strings.Contains(v, "\r") {
			r, _ := http.NewRequest("GET", "https://sts.amazonaws.com/", nil)
			r.Header.Set("Authorization", v)
			r.Header.Set("X-Amz-Date", "20150830T123600Z")
			out := s.resign(r, "sts.amazonaws.com", 443)
			if out.resigned || out.status != 0 || r.Header.Get("Authorization") != v {
				t.Fatalf("a fuzzed Authorization was acted on: %v", out)
			}
		}
	})
}
