package main

// Tests of the SigV4 signer: AWS's test suite replayed step by step, the
// IAM example from AWS's documentation, the two requests the direct
// transport signs, and a server that checks signatures with code of its own.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// The suite's credentials and clock (AWS's published examples, not real keys).
var (
	sigv4SuiteCreds = awsCredentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}
	sigv4SuiteTime  = time.Date(2015, 8, 30, 12, 36, 0, 0, time.UTC)
)

// sigv4SuiteReq is a parsed .req file.
type sigv4SuiteReq struct {
	method, target string
	header         http.Header
	contentLength  int64
	body           []byte
}

// parseSigV4SuiteReq reads the suite's .req text. The request line is split
// at its first and last spaces, since a target such as "/example space/" has
// spaces of its own; Content-Length goes to contentLength, where net/http
// keeps it, not into the headers.
func parseSigV4SuiteReq(t *testing.T, text string) sigv4SuiteReq {
	t.Helper()
	head, body, _ := strings.Cut(text, "\n\n")
	lines := strings.Split(strings.TrimSuffix(head, "\n"), "\n")
	first, last := strings.Index(lines[0], " "), strings.LastIndex(lines[0], " ")
	if first < 0 || first == last {
		t.Fatalf("bad request line %q", lines[0])
	}
	r := sigv4SuiteReq{method: lines[0][:first], target: lines[0][first+1 : last], header: http.Header{}, body: []byte(body)}
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			t.Fatalf("bad header line %q", l)
		}
		if strings.EqualFold(name, "Content-Length") {
			fmt.Sscan(value, &r.contentLength)
			continue
		}
		r.header.Add(name, value)
	}
	return r
}

// TestSigV4Suite replays AWS's test suite, one vector file per case (testdata/sigv4/NAME.txt,
// whose head says where the case comes from): req is signed, and what the signer gets is
// compared with creq, sts and authz. A case the published files get wrong says so in a field:
// "creq unchecked" (its creq disagrees with its sts and authz, which are still compared) or
// "skip" (no signer can match all of its files).
func TestSigV4Suite(t *testing.T) {
	files := vectorFiles(t, filepath.Join("testdata", "sigv4", "*.txt"))
	cases, skipped, viaHTTP := 0, 0, 0
	for _, file := range files {
		c := readVectorCase(t, file)
		c.only(t, "name", "skip", "creq unchecked")
		name := c.field(t, "name")
		if want := strings.TrimSuffix(filepath.Base(file), ".txt"); name != want {
			t.Fatalf("%s: name %q, want the file's, %q", c.where(), name, want)
		}
		t.Run(name, func(t *testing.T) {
			// Each section is a published file's text with a final newline, which the
			// files' comparison has always dropped.
			read := func(section string) string { return strings.TrimSuffix(c.section(t, section), "\n") }
			if reason, ok := c.fields["skip"]; ok {
				skipped++
				t.Skip("the published files disagree: " + reason)
			}
			req := parseSigV4SuiteReq(t, read("req"))
			creds := sigv4SuiteCreds
			creds.SessionToken = req.header.Get("X-Amz-Security-Token")
			p, q, _ := strings.Cut(req.target, "?")

			h := req.header.Clone()
			sigv4SetDate(h, creds, sigv4SuiteTime)
			got, err := sigv4Sign(sigv4Request{
				Method: req.method, Path: p, RawQuery: q,
				Host: h.Get("Host"), Header: h, Body: req.body,
			}, creds, "us-east-1", "service", sigv4SuiteTime)
			if err != nil {
				t.Fatal(err)
			}
			if _, unchecked := c.fields["creq unchecked"]; !unchecked {
				if want := read("creq"); got.CanonicalRequest != want {
					t.Errorf("canonical request:\n got %q\nwant %q", got.CanonicalRequest, want)
				}
			}
			if want := read("sts"); got.StringToSign != want {
				t.Errorf("string to sign:\n got %q\nwant %q", got.StringToSign, want)
			}
			authz := read("authz")
			if got.Authorization != authz {
				t.Errorf("authorization:\n got %q\nwant %q", got.Authorization, authz)
			}
			cases++

			// Where the target is a valid URL whose escaped form is the target
			// itself, sign it again the way the transport will: a real
			// *http.Request through signSigV4.
			u, err := url.Parse("http://" + req.header.Get("Host") + req.target)
			if err != nil || u.EscapedPath() != p || u.RawQuery != q {
				return
			}
			hr := &http.Request{Method: req.method, URL: u, Host: u.Host, Header: req.header.Clone(), ContentLength: req.contentLength}
			hr.Header.Del("Host")
			if err := signSigV4(hr, req.body, creds, "us-east-1", "service", sigv4SuiteTime); err != nil {
				t.Fatal(err)
			}
			if got := hr.Header.Get("Authorization"); got != authz {
				t.Errorf("signSigV4 authorization:\n got %q\nwant %q", got, authz)
			}
			viaHTTP++
		})
	}
	if cases+skipped != len(files) || cases < 29 {
		t.Errorf("replayed %d suite cases and skipped %d of %d files, want at least 29 replayed and none lost", cases, skipped, len(files))
	}
	t.Logf("replayed %d suite cases, %d of them also through signSigV4 on an *http.Request", cases, viaHTTP)
}

// TestSigV4IAMExample is the worked example of AWS's "Examples of the
// complete Signature Version 4 signing process" (IAM ListUsers).
func TestSigV4IAMExample(t *testing.T) {
	req, err := http.NewRequest(http.MethodGet, "https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	if err := signSigV4(req, nil, sigv4SuiteCreds, "us-east-1", "iam", sigv4SuiteTime); err != nil {
		t.Fatal(err)
	}
	want := "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, " +
		"SignedHeaders=content-type;host;x-amz-date, " +
		"Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
	if got := req.Header.Get("Authorization"); got != want {
		t.Errorf("Authorization:\n got %s\nwant %s", got, want)
	}
}

// TestSigV4DirectRegister signs the direct register POST as the reference
// sends it, with and without a session token.
func TestSigV4DirectRegister(t *testing.T) {
	body := []byte(`{"transport":"direct_jsonrpc_v1"}`)
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("CET", 3600))
	for _, token := range []string{"", "FQoGZXIvYXdzEXAMPLETOKEN"} {
		req, err := http.NewRequest(http.MethodPost, "https://abc123.execute-api.eu-west-1.amazonaws.com/prod/cloud/environment/env-42/direct/register", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		creds := awsCredentials{AccessKeyID: "AKIDREGISTER", SecretAccessKey: "register/secret+KEY", SessionToken: token}
		if err := signSigV4(req, body, creds, "eu-west-1", "", now); err != nil {
			t.Fatal(err)
		}
		if got, want := req.Header.Get("X-Amz-Date"), "20260304T040607Z"; got != want {
			t.Errorf("X-Amz-Date = %q, want %q (UTC)", got, want)
		}
		signed := "content-type;host;x-amz-date"
		if token != "" {
			signed += ";x-amz-security-token"
		}
		if got := req.Header.Get("X-Amz-Security-Token"); got != token {
			t.Errorf("X-Amz-Security-Token = %q, want %q", got, token)
		}
		authz := req.Header.Get("Authorization")
		prefix := "AWS4-HMAC-SHA256 Credential=AKIDREGISTER/20260304/eu-west-1/execute-api/aws4_request, SignedHeaders=" + signed + ", Signature="
		if !strings.HasPrefix(authz, prefix) || len(authz) != len(prefix)+64 {
			t.Errorf("Authorization = %q, want %q + 64 hex digits", authz, prefix)
		}
	}
}

// TestSigV4WebsocketUpgrade: the handshake headers a dialer adds are not
// signed, so the upgrade GET signs host;x-amz-date as the reference does.
func TestSigV4WebsocketUpgrade(t *testing.T) {
	req, err := http.NewRequest(http.MethodGet, "wss://abc123.execute-api.us-east-1.amazonaws.com/prod/cloud/environment/env-42/direct/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"Upgrade": "websocket", "Connection": "Upgrade", "User-Agent": "exec-server",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13",
	} {
		req.Header.Set(k, v)
	}
	if err := signSigV4(req, nil, sigv4SuiteCreds, "us-east-1", "", sigv4SuiteTime); err != nil {
		t.Fatal(err)
	}
	if got := req.Header.Get("Authorization"); !strings.Contains(got, "/us-east-1/execute-api/aws4_request, SignedHeaders=host;x-amz-date, Signature=") {
		t.Errorf("Authorization = %q, want SignedHeaders=host;x-amz-date for execute-api", got)
	}
}

// sigv4Verify checks a received request's signature the way a service
// does, with code that shares nothing with the signer: it reads the
// request target from the wire, cleans it with path.Clean, and takes the
// signed headers from the Authorization header.
func sigv4Verify(r *http.Request, body []byte, secret string) error {
	authz := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(authz, "AWS4-HMAC-SHA256 ")
	if !ok {
		return fmt.Errorf("not SigV4: %q", authz)
	}
	fields := map[string]string{}
	for _, f := range strings.Split(rest, ", ") {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = v
	}
	cred := strings.Split(fields["Credential"], "/") // AKID, day, region, service, aws4_request
	if len(cred) != 5 {
		return fmt.Errorf("bad credential %q", fields["Credential"])
	}
	enc := func(s string, slash bool) string {
		var out []string
		for _, c := range []byte(s) {
			switch {
			case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', strings.IndexByte("-._~", c) >= 0, slash && c == '/':
				out = append(out, string(c))
			default:
				out = append(out, fmt.Sprintf("%%%02X", c))
			}
		}
		return strings.Join(out, "")
	}
	rawPath, rawQuery, _ := strings.Cut(r.RequestURI, "?")
	clean := path.Clean(rawPath)
	if strings.HasSuffix(rawPath, "/") && clean != "/" {
		clean += "/"
	}
	type kv struct{ k, v string }
	var params []kv
	for _, p := range strings.Split(rawQuery, "&") {
		if p == "" {
			continue
		}
		k, v, _ := strings.Cut(p, "=")
		k, _ = url.PathUnescape(k)
		v, _ = url.PathUnescape(v)
		params = append(params, kv{enc(k, false), enc(v, false)})
	}
	sort.Slice(params, func(i, j int) bool {
		if params[i].k != params[j].k {
			return params[i].k < params[j].k
		}
		return params[i].v < params[j].v
	})
	var q []string
	for _, p := range params {
		q = append(q, p.k+"="+p.v)
	}
	var hdrs []string
	for _, name := range strings.Split(fields["SignedHeaders"], ";") {
		vals := r.Header.Values(name)
		if name == "host" {
			vals = []string{r.Host}
		}
		for i, v := range vals {
			vals[i] = strings.Join(strings.Fields(v), " ")
		}
		hdrs = append(hdrs, name+":"+strings.Join(vals, ","))
	}
	sum := sha256.Sum256(body)
	creq := strings.Join([]string{r.Method, enc(clean, true), strings.Join(q, "&"),
		strings.Join(hdrs, "\n") + "\n", fields["SignedHeaders"], hex.EncodeToString(sum[:])}, "\n")
	creqSum := sha256.Sum256([]byte(creq))
	sts := "AWS4-HMAC-SHA256\n" + r.Header.Get("X-Amz-Date") + "\n" + strings.Join(cred[1:], "/") + "\n" + hex.EncodeToString(creqSum[:])
	key := []byte("AWS4" + secret)
	for _, part := range append(cred[1:4], "aws4_request", sts) {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(part))
		key = m.Sum(nil)
	}
	if want := hex.EncodeToString(key); fields["Signature"] != want {
		return fmt.Errorf("signature %s, recomputed %s over\n%s", fields["Signature"], want, creq)
	}
	return nil
}

// TestSigV4ServerVerifies sends signed requests through net/http to a
// server that recomputes the signature independently, so what was signed
// is what was sent: host, path escaping, query order, headers and body.
func TestSigV4ServerVerifies(t *testing.T) {
	creds := awsCredentials{AccessKeyID: "AKIDSERVER", SecretAccessKey: "server+secret/KEY", SessionToken: "tok/en+=="}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			err = sigv4Verify(r, body, creds.SecretAccessKey)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
		}
	}))
	defer srv.Close()

	for _, tc := range []struct {
		method, target, body string
		header               map[string]string
	}{
		{"POST", "/cloud/environment/env-42/direct/register", `{"transport":"direct_jsonrpc_v1"}`, map[string]string{"Content-Type": "application/json"}},
		{"GET", "/cloud/environment/env-42/direct/ws", "", map[string]string{"Upgrade": "websocket", "Sec-WebSocket-Key": "x3JJHMbDL1EzLkh9GBhXDw=="}},
		{"GET", "/a%20b/c+d/%E1%88%B4/?z=1&a=b+c&a=%2F&empty&x-y=~", "", map[string]string{"X-Custom": "  spaced   out  ", "Accept": "a, b"}},
		{"PUT", "/x/./y/../z", "payload", nil},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.target, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			if err := signSigV4(req, []byte(tc.body), creds, "us-west-2", "", time.Now()); err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			msg, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("server rejected the signature: %s", msg)
			}
		})
	}
}

// TestSigV4CanonicalForms: paths are normalised and encoded twice; query parameters sort by
// encoded name, then value, even where one name is a prefix of another (checked against
// botocore 1.43's canonical_query_string); header values collapse runs of spaces, and only
// spaces.
func TestSigV4CanonicalForms(t *testing.T) {
	query := func(s string) string {
		q, err := sigv4CanonicalQuery(s)
		if err != nil {
			return "error: " + err.Error()
		}
		return q
	}
	for _, c := range []struct {
		name    string
		f       func(string) string
		in, out string
	}{
		{"uri", sigv4CanonicalURI, "", "/"},
		{"uri", sigv4CanonicalURI, "/", "/"},
		{"uri", sigv4CanonicalURI, "/a/b/..", "/a/"},
		{"uri", sigv4CanonicalURI, "/a/b/.", "/a/b/"},
		{"uri", sigv4CanonicalURI, "/../a", "/a"},
		{"uri", sigv4CanonicalURI, "//a//b", "/a/b"},
		{"uri", sigv4CanonicalURI, "/a%20b", "/a%2520b"},
		{"uri", sigv4CanonicalURI, "/%E1%88%B4", "/%25E1%2588%25B4"},
		{"uri", sigv4CanonicalURI, "/a:b@c!$&'()*+,;=d", "/a%3Ab%40c%21%24%26%27%28%29%2A%2B%2C%3B%3Dd"},
		{"query", query, "a1=x&a=y", "a=y&a1=x"},
		{"query", query, "a-b=x&a=y", "a=y&a-b=x"},
		{"query", query, "a.b=1&a=2&a%25=3", "a=2&a%25=3&a.b=1"},
		{"query", query, "b=2&a=2&a=1", "a=1&a=2&b=2"},
		{"query", query, "id-x=1&id=2&id0=3", "id=2&id-x=1&id0=3"},
		{"query", query, "k=a b&k=a%20a", "k=a%20a&k=a%20b"},
		{"value", sigv4TrimValue, "  a   b c  ", "a b c"},
		{"value", sigv4TrimValue, "\ta \t b\u00a0 c", "\ta \t b\u00a0 c"},
	} {
		if got := c.f(c.in); got != c.out {
			t.Errorf("%s %q: %q, want %q", c.name, c.in, got, c.out)
		}
	}
}

// TestSigV4Errors: bad inputs fail with errors that say what is missing and
// never show the secret, and a credential printed by mistake hides it.
func TestSigV4Errors(t *testing.T) {
	const secret = "SECRETwJalrXUtnFEMI"
	const token = "TOKENsessionEXAMPLE"
	good := awsCredentials{AccessKeyID: "AKID", SecretAccessKey: secret, SessionToken: token}
	for _, tc := range []struct {
		name   string
		creds  awsCredentials
		region string
		url    string
		want   string
	}{
		{"no key id", awsCredentials{SecretAccessKey: secret}, "us-east-1", "https://h/", "access key id"},
		{"no secret", awsCredentials{AccessKeyID: "AKID", SessionToken: token}, "us-east-1", "https://h/", "secret access key"},
		{"no region", good, "", "https://h/", "region"},
		{"bad query", good, "us-east-1", "https://h/?a=%zz", "query"},
	} {
		req := &http.Request{Method: "GET", Header: http.Header{}}
		req.URL, _ = url.Parse("https://h/")
		if tc.url != "https://h/" {
			req.URL = &url.URL{Scheme: "https", Host: "h", Path: "/", RawQuery: "a=%zz"}
		}
		err := signSigV4(req, nil, tc.creds, tc.region, "", sigv4SuiteTime)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one about %q", tc.name, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), token) {
			t.Errorf("%s: error shows a secret: %v", tc.name, err)
		}
	}
	if err := signSigV4(&http.Request{Method: "GET"}, nil, good, "us-east-1", "", sigv4SuiteTime); err == nil {
		t.Error("a request without a URL was signed")
	}
	printed := fmt.Sprintf("%v %+v %#v %s", good, good, good, good)
	if strings.Contains(printed, secret) || strings.Contains(printed, token) || !strings.Contains(printed, "AKID") {
		t.Errorf("printed credentials = %q, want the key id and no secret", printed)
	}
}
