package main

// AWS Signature Version 4, written on the standard library, for
// `--remote-transport direct --aws-sigv4`: the direct register POST and the
// websocket upgrade GET are signed for API Gateway (service execute-api).
//
// The steps, as AWS specifies them (non-S3 services):
//
//	canonical request  METHOD \n canonical URI \n canonical query \n
//	                   canonical headers \n signed headers \n hex(SHA256(body))
//	  canonical URI    the path as sent, dot segments and empty segments removed,
//	                   then URI-encoded again (so %20 on the wire becomes %2520)
//	  canonical query  name=value pairs decoded, URI-encoded, sorted by name then value
//	  headers          lower-case names, sorted; values trimmed, inner runs of
//	                   spaces collapsed, repeated headers joined with ","
//	string to sign     AWS4-HMAC-SHA256 \n X-Amz-Date \n scope \n hex(SHA256(canonical request))
//	  scope            YYYYMMDD/region/service/aws4_request
//	signing key        HMAC("AWS4"+secret, YYYYMMDD) → region → service → "aws4_request"
//	signature          hex(HMAC(signing key, string to sign))
//	Authorization      AWS4-HMAC-SHA256 Credential=AKID/scope, SignedHeaders=a;b, Signature=…
//
// URI-encoding keeps only the unreserved bytes A-Z a-z 0-9 - . _ ~ and writes
// every other byte as %XX with upper-case hex.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

const (
	sigv4Algorithm    = "AWS4-HMAC-SHA256"
	sigv4AmzDate      = "20060102T150405Z"
	defaultAWSService = "execute-api"
)

// sigv4Unsigned reports the headers left out of the signature. User-Agent
// is left out as the AWS SDKs do, because proxies rewrite it; the hop-by-hop
// headers belong to each connection, not to the request; the websocket
// handshake headers are drawn afresh by the dialer (and the reference signs
// its upgrade GET with host;x-amz-date only).
func sigv4Unsigned(lowerName string) bool {
	switch lowerName {
	case "authorization", "user-agent", "x-amzn-trace-id",
		"connection", "keep-alive", "proxy-authorization", "proxy-connection",
		"te", "trailer", "transfer-encoding", "upgrade", "expect",
		"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol":
		return true
	}
	return false
}

// awsCredentials is a static access key, with a session token for
// temporary credentials. Its String hides the secret, so a credential
// printed by mistake in a log or an error does not leak.
type awsCredentials struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
}

func (c awsCredentials) String() string {
	s := "awsCredentials{AccessKeyID: " + c.AccessKeyID + ", SecretAccessKey: <redacted>"
	if c.SessionToken != "" {
		s += ", SessionToken: <redacted>"
	}
	return s + "}"
}

func (c awsCredentials) GoString() string { return c.String() }

// sigv4Request is what SigV4 reads of a request. Path and RawQuery are the
// escaped forms, as they go on the wire: the canonical URI encodes the path
// once more, which is what non-S3 services check.
type sigv4Request struct {
	Method   string
	Path     string
	RawQuery string
	Host     string
	Header   http.Header
	Body     []byte

	// Re-signing an intercepted request (netproxy_sigv4.go) must sign exactly what its sender
	// signed, so it fixes what signing a request of our own derives:
	//
	// SignedHeaders, when not nil, are the lower-case names signed, sorted, exactly: host is
	// Host, every other one must be in Header (none is left out as sigv4Unsigned says).
	SignedHeaders []string
	// CanonicalURI, when set, is the canonical URI as it is, in place of Path's normalised and
	// re-encoded form (S3 signs the path as sent).
	CanonicalURI string
	// PayloadHash, when set, stands for hex(SHA256(Body)): X-Amz-Content-Sha256's value, such
	// as UNSIGNED-PAYLOAD.
	PayloadHash string
}

// sigv4Signed keeps the intermediate texts of one signing, so tests can
// compare each step with the AWS test suite, not only the final header.
type sigv4Signed struct {
	CanonicalRequest string
	SignedHeaders    string
	StringToSign     string
	Signature        string
	Authorization    string
}

// signSigV4 signs req for AWS: it sets X-Amz-Date (from now, not the wall
// clock, so tests are repeatable), X-Amz-Security-Token when creds carry a
// session token, and Authorization. body must be the exact bytes that will
// be sent (nil for none): its SHA-256 is part of the signature, and
// signSigV4 neither reads nor replaces req.Body. service "" means
// execute-api. Headers set after signing are not covered by the signature.
func signSigV4(req *http.Request, body []byte, creds awsCredentials, region, service string, now time.Time) error {
	if req == nil || req.URL == nil {
		return errors.New("sigv4: request has no URL")
	}
	if req.URL.Opaque != "" {
		return errors.New("sigv4: opaque request URLs are not supported")
	}
	if req.Header == nil {
		req.Header = http.Header{}
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	// net/http drops an empty port ("host:") before sending; sign what it sends.
	host = strings.TrimSuffix(host, ":")
	if host == "" {
		return errors.New("sigv4: request has no host")
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	sigv4SetDate(req.Header, creds, now)
	s, err := sigv4Sign(sigv4Request{
		Method:   method,
		Path:     req.URL.EscapedPath(),
		RawQuery: req.URL.RawQuery,
		Host:     host,
		Header:   req.Header,
		Body:     body,
	}, creds, region, service, now)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", s.Authorization)
	return nil
}

// sigv4SetDate writes the headers that signing adds before it canonicalises:
// X-Amz-Date, and X-Amz-Security-Token for temporary credentials (signed, as
// the SDKs do, so the token cannot be swapped in transit).
func sigv4SetDate(h http.Header, creds awsCredentials, now time.Time) {
	h.Del("Authorization")
	h.Set("X-Amz-Date", now.UTC().Format(sigv4AmzDate))
	if creds.SessionToken != "" {
		h.Set("X-Amz-Security-Token", creds.SessionToken)
	}
}

// sigv4Sign computes the signature of r. It checks its inputs first, and
// its errors name what is missing, never the secret.
func sigv4Sign(r sigv4Request, creds awsCredentials, region, service string, now time.Time) (sigv4Signed, error) {
	if service == "" {
		service = defaultAWSService
	}
	switch {
	case creds.AccessKeyID == "":
		return sigv4Signed{}, errors.New("sigv4: no AWS access key id")
	case creds.SecretAccessKey == "":
		return sigv4Signed{}, errors.New("sigv4: no AWS secret access key")
	case region == "":
		return sigv4Signed{}, errors.New("sigv4: no AWS region")
	}
	creq, signed, err := sigv4CanonicalRequest(r)
	if err != nil {
		return sigv4Signed{}, err
	}
	now = now.UTC()
	day := now.Format("20060102")
	scope := day + "/" + region + "/" + service + "/aws4_request"
	sts := sigv4Algorithm + "\n" + now.Format(sigv4AmzDate) + "\n" + scope + "\n" + sha256Hex([]byte(creq))

	key := hmacSHA256([]byte("AWS4"+creds.SecretAccessKey), day)
	for _, part := range []string{region, service, "aws4_request"} {
		key = hmacSHA256(key, part)
	}
	sig := hex.EncodeToString(hmacSHA256(key, sts))
	return sigv4Signed{
		CanonicalRequest: creq,
		SignedHeaders:    signed,
		StringToSign:     sts,
		Signature:        sig,
		Authorization: sigv4Algorithm + " Credential=" + creds.AccessKeyID + "/" + scope +
			", SignedHeaders=" + signed + ", Signature=" + sig,
	}, nil
}

// sigv4CanonicalRequest builds the canonical request of r and returns it
// with its signed-headers list.
func sigv4CanonicalRequest(r sigv4Request) (creq, signedHeaders string, err error) {
	query, err := sigv4CanonicalQuery(r.RawQuery)
	if err != nil {
		return "", "", err
	}
	values := map[string][]string{"host": {r.Host}}
	for name, vs := range r.Header {
		lower := strings.ToLower(name)
		// Host in Header is ignored by net/http when it sends; r.Host is what goes out.
		if lower == "host" || r.SignedHeaders == nil && sigv4Unsigned(lower) {
			continue
		}
		values[lower] = append(values[lower], vs...)
	}
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	slices.Sort(names)
	if r.SignedHeaders != nil {
		for _, name := range r.SignedHeaders {
			if _, ok := values[name]; !ok {
				return "", "", fmt.Errorf("sigv4: signed header %q is not in the request", name)
			}
		}
		names = r.SignedHeaders
	}
	uri := r.CanonicalURI
	if uri == "" {
		uri = sigv4CanonicalURI(r.Path)
	}
	payload := r.PayloadHash
	if payload == "" {
		payload = sha256Hex(r.Body)
	}

	var b strings.Builder
	b.WriteString(r.Method + "\n" + uri + "\n" + query + "\n")
	for _, name := range names {
		vs := values[name]
		trimmed := make([]string, len(vs))
		for i, v := range vs {
			trimmed[i] = sigv4TrimValue(v)
		}
		b.WriteString(name + ":" + strings.Join(trimmed, ",") + "\n")
	}
	signedHeaders = strings.Join(names, ";")
	b.WriteString("\n" + signedHeaders + "\n" + payload)
	return b.String(), signedHeaders, nil
}

// sigv4CanonicalURI normalises the escaped path as RFC 3986 removes dot
// segments, drops empty segments (AWS treats "//" as "/"), and encodes the
// result once more, keeping "/".
func sigv4CanonicalURI(escapedPath string) string {
	parts := strings.Split(escapedPath, "/")
	segs := make([]string, 0, len(parts))
	for _, p := range parts {
		switch p {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, p)
		}
	}
	last := parts[len(parts)-1]
	trailing := last == "" || last == "." || last == ".."
	p := "/" + strings.Join(segs, "/")
	if trailing && len(segs) > 0 {
		p += "/"
	}
	return awsURIEncode(p, true)
}

// sigv4CanonicalQuery decodes each name=value pair of a raw query and
// re-encodes it the AWS way, sorted by name then value. "+" stays a plus
// (it is %2B, not a space), as in the suite's get-query-plus case.
func sigv4CanonicalQuery(rawQuery string) (string, error) {
	// Each pair as "name\x00value": sorting these sorts by encoded name, then value, since
	// NUL sorts below every byte of an encoded name. Sorting "name=value" would not: '%', '-',
	// '.' and the digits sort below '=' ("a1=x" before "a=y", where AWS puts a before a1).
	var pairs []string
	for _, kv := range strings.Split(rawQuery, "&") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		dk, err := url.PathUnescape(k)
		if err != nil {
			return "", fmt.Errorf("sigv4: query parameter name: %w", err)
		}
		dv, err := url.PathUnescape(v)
		if err != nil {
			return "", fmt.Errorf("sigv4: query parameter %q: %w", dk, err)
		}
		pairs = append(pairs, awsURIEncode(dk, false)+"\x00"+awsURIEncode(dv, false))
	}
	slices.Sort(pairs)
	return strings.ReplaceAll(strings.Join(pairs, "&"), "\x00", "="), nil
}

// sigv4TrimValue trims the spaces around a header value and collapses each run of spaces
// inside it to one, as the canonical form requires ("a   b" and "a b" sign the same). Spaces
// only, as the aws-sigv4 crate of 0.169 does: tabs and other white space stay as they are.
func sigv4TrimValue(v string) string {
	v = strings.Trim(v, " ")
	for strings.Contains(v, "  ") {
		v = strings.ReplaceAll(v, "  ", " ")
	}
	return v
}

// awsURIEncode is AWS's UriEncode: unreserved bytes stay, "/" stays when
// keepSlash (paths), every other byte becomes %XX in upper-case hex.
// url.PathEscape and url.QueryEscape differ from it (they keep "!$&'()*+,;=:@"
// or turn " " into "+"), hence this.
func awsURIEncode(s string, keepSlash bool) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '/' && keepSlash {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
