package main

// SigV4 re-signing under credential masking (docs/network.md §8, "SigV4"): a masked command
// holds stand-ins for AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN and signs
// its requests with them. An AWS signature cannot be fixed by swapping a header value, so the
// interception verifies the command's signature with the stand-in secret and, only when it
// verifies, signs the same canonical request again with the real key (the signer is
// remote_sigv4.go's). It is a file of its own because re-signing is one concern, apart from
// the header swap of netproxy_mask.go and the forwarding of netproxy_intercept.go.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limits of re-signing (docs/network.md §8, "SigV4").
const (
	// sigv4MaxBufferedBody bounds the body the proxy reads to hash when a request carries no
	// X-Amz-Content-Sha256 (the services that need none take JSON or form bodies, DynamoDB's
	// largest being 16 MB; S3, where bodies are large, always sends the header).
	sigv4MaxBufferedBody = 8 << 20
	// sigv4BufferSlots bounds the bodies one proxy holds at once for hashing, so that a
	// command's concurrent requests hold at most sigv4BufferSlots × sigv4MaxBufferedBody.
	sigv4BufferSlots = 4
	// sigv4MaxAuthorization bounds the Authorization header the parser reads.
	sigv4MaxAuthorization = 4096
	// sigv4MaxSignedHeaders bounds the SignedHeaders list.
	sigv4MaxSignedHeaders = 64
	// sigv4MaxClockSkew is how far X-Amz-Date may be from the proxy's clock: AWS refuses a
	// request further off (15 minutes), so re-signing one would only hand out signatures for
	// later use.
	sigv4MaxClockSkew = 15 * time.Minute
)

// The payload hashes X-Amz-Content-Sha256 may carry besides a hex SHA-256.
const (
	sigv4UnsignedPayload          = "UNSIGNED-PAYLOAD"
	sigv4StreamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	sigv4StreamingSigned          = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	sigv4StreamingSignedTrailer   = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
)

// The proxy's own answers when it refuses to forward (fixed texts: never request data).
const (
	sigv4TextStreaming = "credential masking cannot re-sign an aws-chunked body signed chunk by chunk " +
		"(STREAMING-AWS4-HMAC-SHA256-PAYLOAD): sign the whole payload or send UNSIGNED-PAYLOAD"
	sigv4TextTooLarge = "credential masking re-signs a body without X-Amz-Content-Sha256 only up to 8 MiB"
	sigv4TextBodyRead = "credential masking could not read the request body to re-sign it"
)

// sigv4Auth is a parsed AWS4-HMAC-SHA256 Authorization header.
type sigv4Auth struct {
	keyID, date, region, service string
	signedHeaders                []string // lower case, sorted, distinct, host among them
	signature                    string   // 64 lower-case hex digits
}

// parseSigV4Authorization reads an Authorization header strictly: the algorithm, then
// Credential, SignedHeaders and Signature once each, in any order, separated by commas and
// optional spaces. Anything else is an error: re-signing starts only from a header it fully
// understands. Errors never quote the value.
func parseSigV4Authorization(v string) (sigv4Auth, error) {
	var a sigv4Auth
	if len(v) > sigv4MaxAuthorization {
		return a, errors.New("sigv4: Authorization too long")
	}
	rest, ok := strings.CutPrefix(v, sigv4Algorithm+" ")
	if !ok {
		return a, errors.New("sigv4: not AWS4-HMAC-SHA256")
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(rest, ",") {
		k, val, ok := strings.Cut(strings.Trim(part, " "), "=")
		if !ok || seen[k] {
			return a, errors.New("sigv4: malformed Authorization component")
		}
		seen[k] = true
		switch k {
		case "Credential":
			f := strings.Split(val, "/")
			if len(f) != 5 || f[4] != "aws4_request" || !sigv4KeyID(f[0]) || !sigv4Digits(f[1], 8) ||
				!sigv4ScopeName(f[2]) || !sigv4ScopeName(f[3]) {
				return a, errors.New("sigv4: malformed Credential")
			}
			a.keyID, a.date, a.region, a.service = f[0], f[1], f[2], f[3]
		case "SignedHeaders":
			names := strings.Split(val, ";")
			if len(names) > sigv4MaxSignedHeaders {
				return a, errors.New("sigv4: too many signed headers")
			}
			for i, n := range names {
				if !sigv4HeaderName(n) || i > 0 && names[i-1] >= n || n == "authorization" {
					return a, errors.New("sigv4: malformed SignedHeaders")
				}
			}
			// A signature that does not cover the host could be replayed at any AWS host.
			if !slices.Contains(names, "host") {
				return a, errors.New("sigv4: host is not signed")
			}
			a.signedHeaders = names
		case "Signature":
			if !sigv4LowerHex(val, 64) {
				return a, errors.New("sigv4: malformed Signature")
			}
			a.signature = val
		default:
			return a, errors.New("sigv4: unknown Authorization component")
		}
	}
	if len(seen) != 3 {
		return a, errors.New("sigv4: Authorization lacks a component")
	}
	return a, nil
}

// String is the header in the signer's own spelling.
func (a sigv4Auth) String() string {
	return sigv4Algorithm + " Credential=" + a.keyID + "/" + a.date + "/" + a.region + "/" + a.service +
		"/aws4_request, SignedHeaders=" + strings.Join(a.signedHeaders, ";") + ", Signature=" + a.signature
}

func sigv4KeyID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

func sigv4Digits(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// sigv4ScopeName is a region or a service of a credential scope: lower-case letters, digits
// and hyphens (us-east-1, execute-api, s3-object-lambda).
func sigv4ScopeName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// sigv4HeaderName is a lower-case header name (an RFC 9110 token without upper case).
func sigv4HeaderName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func sigv4LowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// sigv4Resigner re-signs one process's AWS requests: its bound credentials (real and
// stand-in) and the destinations they belong to. Safe for concurrent use; nil re-signs
// nothing.
type sigv4Resigner struct {
	real, standIn awsCredentials
	dests         []maskDest
	slots         chan struct{}    // one per body held for hashing (sigv4BufferSlots)
	now           func() time.Time // nil: time.Now; tests fix it
}

// newSigV4Resigner takes the aws credentials bound to a process (AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN when given); nil when the key id or the secret is
// not bound, since neither verifying nor signing is possible without both.
func newSigV4Resigner(b *maskBinding) *sigv4Resigner {
	if b == nil {
		return nil
	}
	s := &sigv4Resigner{slots: make(chan struct{}, sigv4BufferSlots)}
	for _, x := range b.bound {
		if !x.p.sigv4 {
			continue
		}
		switch x.e.env {
		case "AWS_ACCESS_KEY_ID":
			s.real.AccessKeyID, s.standIn.AccessKeyID = x.e.real, x.e.standIn
		case "AWS_SECRET_ACCESS_KEY":
			s.real.SecretAccessKey, s.standIn.SecretAccessKey = x.e.real, x.e.standIn
		case "AWS_SESSION_TOKEN":
			s.real.SessionToken, s.standIn.SessionToken = x.e.real, x.e.standIn
		default:
			continue
		}
		s.dests = x.p.dests
	}
	if s.real.AccessKeyID == "" || s.real.SecretAccessKey == "" {
		return nil
	}
	return s
}

// sigv4Outcome is what resign did. status non-zero: the proxy answers the command with
// status and text and forwards nothing. note non-empty: a request signed with the stand-in
// key id was passed on unchanged, and why (a fixed text: log it, it holds no value).
type sigv4Outcome struct {
	resigned bool
	status   int
	text     string
	note     string
}

// resign re-signs r, an intercepted request about to be forwarded to host:port (the CONNECT
// target), when it goes to an aws destination and its Authorization, naming the stand-in key
// id, verifies with the stand-in secret: X-Amz-Security-Token's stand-in becomes the real
// token, and Authorization the real key id and the signature of the same canonical request
// with the real secret. Everything else stays as sent; a request it does not fully understand
// goes on unchanged, carrying stand-ins only. Presigned URLs (X-Amz-Credential in the query)
// are never re-signed: masking swaps headers only.
func (s *sigv4Resigner) resign(r *http.Request, host string, port uint16) sigv4Outcome {
	if s == nil || r == nil || r.URL == nil || !s.ours(host, port) {
		return sigv4Outcome{}
	}
	authz := r.Header.Values("Authorization")
	if len(authz) == 0 {
		if strings.Contains(r.URL.RawQuery, s.standIn.AccessKeyID) {
			return sigv4Outcome{note: "sigv4: a presigned URL with the stand-in key id is not re-signed"}
		}
		return sigv4Outcome{}
	}
	if len(authz) != 1 || !strings.Contains(authz[0], "Credential="+s.standIn.AccessKeyID+"/") {
		return sigv4Outcome{} // not signed with the stand-in: not ours to touch
	}
	a, err := parseSigV4Authorization(authz[0])
	if err != nil || a.keyID != s.standIn.AccessKeyID {
		return sigv4Outcome{note: "sigv4: Authorization not understood; passed on unchanged"}
	}
	// The host that goes out must be the one the command signed.
	if r.Host != strings.TrimSuffix(net.JoinHostPort(host, strconv.Itoa(int(port))), ":443") {
		return sigv4Outcome{note: "sigv4: the signed host is not the forwarded one; passed on unchanged"}
	}
	when, ok := sigv4RequestTime(r.Header, a.date)
	if !ok {
		return sigv4Outcome{note: "sigv4: X-Amz-Date missing or not the scope's day; passed on unchanged"}
	}
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	if d := now().Sub(when); d > sigv4MaxClockSkew || d < -sigv4MaxClockSkew {
		return sigv4Outcome{note: "sigv4: X-Amz-Date more than 15 minutes from the proxy's clock; passed on unchanged"}
	}
	hdr := http.Header{}
	for _, n := range a.signedHeaders {
		if n == "host" {
			continue
		}
		vs := r.Header.Values(n)
		if len(vs) == 0 && n == "content-length" && r.ContentLength >= 0 {
			vs = []string{strconv.FormatInt(r.ContentLength, 10)} // a client request keeps it out of Header
		}
		if len(vs) == 0 {
			return sigv4Outcome{note: "sigv4: a signed header is missing; passed on unchanged"}
		}
		hdr[http.CanonicalHeaderKey(n)] = slices.Clone(vs)
	}

	payload, streaming := "", false
	switch ph := r.Header.Values("X-Amz-Content-Sha256"); {
	case len(ph) > 1:
		return sigv4Outcome{note: "sigv4: X-Amz-Content-Sha256 repeated; passed on unchanged"}
	case len(ph) == 1:
		switch v := ph[0]; {
		case sigv4LowerHex(v, 64), v == sigv4UnsignedPayload, v == sigv4StreamingUnsignedTrailer:
			payload = v
		case v == sigv4StreamingSigned, v == sigv4StreamingSignedTrailer:
			payload, streaming = v, true
		default:
			return sigv4Outcome{note: "sigv4: payload hash not understood; passed on unchanged"}
		}
	}
	var body []byte
	if payload == "" {
		var out sigv4Outcome
		if body, out = s.readBody(r); out.status != 0 {
			return out
		}
		payload = sha256Hex(body)
	}

	// The command may have built its canonical request the S3 way or the other services' way:
	// the first form under which its signature verifies is the one re-signed.
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	queries := []string{r.URL.RawQuery}
	if strings.Contains(r.URL.RawQuery, "+") {
		queries = append(queries, strings.ReplaceAll(r.URL.RawQuery, "+", "%20")) // "+" read as a space
	}
	var form *sigv4Request
	for _, uri := range slices.Compact([]string{sigv4CanonicalURI(path), awsURIEncode(path, true), path}) {
		for _, q := range queries {
			req := sigv4Request{Method: r.Method, Path: path, RawQuery: q, Host: r.Host, Header: hdr,
				SignedHeaders: a.signedHeaders, CanonicalURI: uri, PayloadHash: payload}
			got, err := sigv4Sign(req, s.standIn, a.region, a.service, when)
			if err == nil && hmac.Equal([]byte(got.Signature), []byte(a.signature)) {
				form = &req
				break
			}
		}
		if form != nil {
			break
		}
	}
	if form == nil {
		return sigv4Outcome{note: "sigv4: the signature does not verify with the stand-in; passed on unchanged"}
	}
	if streaming {
		return sigv4Outcome{status: http.StatusBadRequest, text: sigv4TextStreaming}
	}

	// The session token: its stand-in becomes the real token, whether it is signed or not.
	tok := r.Header.Values("X-Amz-Security-Token")
	swapToken := s.standIn.SessionToken != "" && slices.Contains(tok, s.standIn.SessionToken)
	if swapToken {
		if len(tok) != 1 {
			return sigv4Outcome{note: "sigv4: X-Amz-Security-Token repeated; passed on unchanged"}
		}
		if _, signed := hdr["X-Amz-Security-Token"]; signed {
			hdr["X-Amz-Security-Token"] = []string{s.real.SessionToken}
		}
	}
	signed, err := sigv4Sign(*form, s.real, a.region, a.service, when)
	if err != nil {
		return sigv4Outcome{note: "sigv4: re-signing failed; passed on unchanged"}
	}
	if swapToken {
		r.Header.Set("X-Amz-Security-Token", s.real.SessionToken)
	}
	r.Header.Set("Authorization", signed.Authorization)
	return sigv4Outcome{resigned: true}
}

// ours reports whether host:port is an https destination of the aws credentials.
func (s *sigv4Resigner) ours(host string, port uint16) bool {
	for _, d := range s.dests {
		if d.matchHost(true, host, port) {
			return true
		}
	}
	return false
}

// sigv4RequestTime reads X-Amz-Date (one value, in the signer's exact format) and checks that
// its day is the credential scope's.
func sigv4RequestTime(h http.Header, day string) (time.Time, bool) {
	vs := h.Values("X-Amz-Date")
	if len(vs) != 1 {
		return time.Time{}, false
	}
	t, err := time.Parse(sigv4AmzDate, vs[0])
	if err != nil || t.Format(sigv4AmzDate) != vs[0] || t.Format("20060102") != day {
		return time.Time{}, false
	}
	return t, true
}

// readBody reads r's body whole, at most sigv4MaxBufferedBody bytes, holding one of the
// proxy's buffer slots while the request lasts, and puts it back as r.Body.
func (s *sigv4Resigner) readBody(r *http.Request) ([]byte, sigv4Outcome) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil, sigv4Outcome{}
	}
	if r.ContentLength > sigv4MaxBufferedBody {
		return nil, sigv4Outcome{status: http.StatusRequestEntityTooLarge, text: sigv4TextTooLarge}
	}
	select {
	case s.slots <- struct{}{}:
	case <-r.Context().Done():
		return nil, sigv4Outcome{status: http.StatusBadRequest, text: sigv4TextBodyRead}
	}
	release := sync.OnceFunc(func() { <-s.slots })
	body, err := io.ReadAll(io.LimitReader(r.Body, sigv4MaxBufferedBody+1))
	switch {
	case err != nil:
		release()
		return nil, sigv4Outcome{status: http.StatusBadRequest, text: sigv4TextBodyRead}
	case len(body) > sigv4MaxBufferedBody:
		release()
		return nil, sigv4Outcome{status: http.StatusRequestEntityTooLarge, text: sigv4TextTooLarge}
	}
	r.Body.Close()
	// The slot comes back when the request ends (its context, which the server cancels when the
	// handler returns: httputil.ReverseProxy never closes the body it forwards) or when the body
	// is closed, whichever comes first.
	stop := context.AfterFunc(r.Context(), release)
	r.Body = &sigv4Body{Reader: bytes.NewReader(body), release: func() { stop(); release() }}
	return body, sigv4Outcome{}
}

// sigv4Body is a buffered body that gives its buffer slot back when closed.
type sigv4Body struct {
	*bytes.Reader
	release func()
}

func (b *sigv4Body) Close() error {
	b.release()
	return nil
}

// String keeps an outcome printable for tests and logs: no values.
func (o sigv4Outcome) String() string {
	return fmt.Sprintf("resigned=%v status=%d note=%q", o.resigned, o.status, o.note)
}
