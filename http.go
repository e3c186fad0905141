package main

// http/request and http/request/bodyDelta (docs/protocol.md §8; gate family "http"): an HTTP
// request made from this host on the client's behalf.
//
//	params        method url requestId [headers:[{name,value[,valueEnvVar]}] bodyBase64 timeoutMs
//	              streamResponse=false redirectPolicy="follow"|"stop"]
//	result        {status, headers:[{name,value}], bodyBase64}
//	notification  http/request/bodyDelta {requestId, seq, deltaBase64, done, error}
//
// Bodies, errors, redirects and proxies behave as docs/protocol.md §8.1 and §8.2 say. The
// credential headers are dropped on a redirect to another origin (scheme, host or port):
// stricter than Go's own rule, which keeps them for subdomains and other ports. Proxies are
// net/http's ProxyFromEnvironment, hence read once, at the server's first request. What
// differs from 0.169 on purpose: docs/protocol.md §12.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Limits of http/request.
const (
	// maxHTTPBufferedBody bounds a response body returned whole. 32 MiB is about 43 MiB of
	// base64, which still fits a relay's 64 MiB message; larger bodies need streamResponse.
	maxHTTPBufferedBody = 32 << 20
	// maxHTTPRedirects is how many redirects are followed, as reqwest's default.
	maxHTTPRedirects = 10
	// httpDeltaBytes bounds the body bytes of one bodyDelta notification.
	httpDeltaBytes = 64 << 10
)

func httpMethods(t methodTable) {
	t["http/request"] = handle("http", "HttpRequestParams", decides, (*call).httpRequest)
}

// httpHeader is a request or response header. A request header with valueEnvVar is sent as
// value followed by that variable of this server's environment (docs/protocol.md §8): the
// client names a credential the executor holds, without ever seeing it.
type httpHeader struct {
	Name        string  `json:"name"`
	Value       string  `json:"value"`
	ValueEnvVar *string `json:"valueEnvVar,omitempty"`
}

// UnmarshalJSON applies the params rules (required fields) to each header.
func (h *httpHeader) UnmarshalJSON(raw []byte) error {
	type plain httpHeader // without this method
	return decodeParams(raw, "HttpHeader", (*plain)(h))
}

// redirectPolicy is "follow" (the default) or "stop".
type redirectPolicy string

func (r *redirectPolicy) UnmarshalJSON(raw []byte) error {
	s, err := decodeVariant(raw, "follow", "stop")
	*r = redirectPolicy(s)
	return err
}

type httpRequestParams struct {
	Method         string          `json:"method"`
	URL            string          `json:"url"`
	RequestID      string          `json:"requestId"`
	Headers        []httpHeader    `json:"headers,omitempty"`
	BodyBase64     *base64Bytes    `json:"bodyBase64"`
	TimeoutMs      *uint64         `json:"timeoutMs"`
	StreamResponse bool            `json:"streamResponse,omitempty"`
	RedirectPolicy *redirectPolicy `json:"redirectPolicy"`
}

type httpResponseResult struct {
	Status     int          `json:"status"`
	Headers    []httpHeader `json:"headers"`
	BodyBase64 []byte       `json:"bodyBase64"`
}

type bodyDeltaParams struct {
	RequestID   string  `json:"requestId"`
	Seq         uint64  `json:"seq"`
	DeltaBase64 []byte  `json:"deltaBase64"`
	Done        bool    `json:"done"`
	Error       *string `json:"error"`
}

// httpState is a connection's HTTP client and its streams in flight.
type httpState struct {
	client *http.Client
	max    int // --max-http-requests
	mu     sync.Mutex
	active map[string]bool // requestIds streaming
	busy   int             // requests under way: waiting for a response, or streaming its body
	wg     sync.WaitGroup  // stream goroutines
}

// begin counts one more request under way, unless max already are.
func (s *httpState) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy >= s.max {
		return errTooMany("http/request calls under way on this connection", s.max, "max-http-requests")
	}
	s.busy++
	return nil
}

// end counts one request fewer under way.
func (s *httpState) end() {
	s.mu.Lock()
	s.busy--
	s.mu.Unlock()
}

// httpState returns the connection's HTTP state, made on first use.
func (c *call) httpState() *httpState {
	return scoped(c.scope, &c.scope.http, func() (*httpState, func()) {
		// A clone of the default transport takes proxies from the environment. Bodies go to
		// the client as the server sent them: no transparent gzip.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DisableCompression = true
		s := &httpState{client: &http.Client{Transport: tr}, active: map[string]bool{}, max: c.srv.cfg.limits.httpRequests}
		return s, func() {
			s.wg.Wait() // the connection's context is done: every stream is ending
			tr.CloseIdleConnections()
		}
	})
}

// reserve marks requestId as streaming, or says it already is.
func (s *httpState) reserve(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active[id] {
		return errInvalidParams("http/request streamResponse requestId `%s` is already active", id)
	}
	s.active[id] = true
	return nil
}

// release ends a streamed request: its id is free again and it is no longer under way.
func (s *httpState) release(id string) {
	s.mu.Lock()
	delete(s.active, id)
	s.busy--
	s.mu.Unlock()
}

func (c *call) httpRequest(p *httpRequestParams) (httpResponseResult, error) {
	req, err := newHTTPRequest(p)
	if err != nil {
		return httpResponseResult{}, err
	}
	if p.TimeoutMs != nil && *p.TimeoutMs == 0 {
		return httpResponseResult{}, errHTTPTimeout()
	}
	s := c.httpState()
	if err := s.begin(); err != nil {
		return httpResponseResult{}, err
	}
	if p.StreamResponse {
		if err := s.reserve(p.RequestID); err != nil {
			s.end()
			return httpResponseResult{}, err
		}
	}
	cl := *s.client
	cl.CheckRedirect = checkRedirect(p.RedirectPolicy == nil || *p.RedirectPolicy == "follow")
	var w *work
	w = later(c, async, func(ctx context.Context) (httpResponseResult, error) {
		var cancel context.CancelFunc
		if p.TimeoutMs != nil {
			ctx, cancel = context.WithTimeout(ctx, time.Duration(min(*p.TimeoutMs, math.MaxInt64/uint64(time.Millisecond)))*time.Millisecond)
		} else {
			ctx, cancel = context.WithCancel(ctx)
		}
		resp, err := cl.Do(req.WithContext(ctx))
		if err != nil {
			cancel()
			if p.StreamResponse {
				s.release(p.RequestID)
			} else {
				s.end()
			}
			return httpResponseResult{}, httpFailure(ctx, req.URL, err)
		}
		res := httpResponseResult{Status: resp.StatusCode, Headers: responseHeaders(resp), BodyBase64: []byte{}}
		if p.StreamResponse {
			st := &bodyStream{c: c, s: s, id: p.RequestID, resp: resp, cancel: cancel, replied: make(chan struct{})}
			s.wg.Add(1)
			go st.run()
			w.afterReply = st.headersReplied // its body deltas go out after the reply
			return res, nil
		}
		defer s.end()
		defer cancel()
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxHTTPBufferedBody+1))
		if err != nil {
			return httpResponseResult{}, errInternal("failed to read http/request response body: error decoding response body")
		}
		if len(body) > maxHTTPBufferedBody {
			return httpResponseResult{}, errInternal("http/request response body exceeds %d bytes: use streamResponse to read it", maxHTTPBufferedBody)
		}
		res.BodyBase64 = body
		return res, nil
	})
	return httpResponseResult{}, nil
}

// newHTTPRequest checks the params and builds the request, without a context yet.
func newHTTPRequest(p *httpRequestParams) (*http.Request, error) {
	if !isToken(p.Method) {
		return nil, errInvalidParams("http/request method is invalid: invalid HTTP method")
	}
	if err := checkHTTPURL(p.URL); err != nil {
		return nil, err
	}
	var body io.Reader
	if p.BodyBase64 != nil {
		body = bytes.NewReader(*p.BodyBase64)
	}
	req, err := http.NewRequest(p.Method, p.URL, body)
	if err != nil {
		return nil, errInvalidParams("http/request url is invalid: %s", err)
	}
	req.Header["User-Agent"] = []string{""} // none unless the client sends one, as the reference
	for _, h := range p.Headers {
		if !isToken(h.Name) {
			return nil, errInvalidParams("http/request header name is invalid: invalid HTTP header name")
		}
		value := h.Value
		if h.ValueEnvVar != nil {
			v, err := headerEnvValue(h.Name, *h.ValueEnvVar)
			if err != nil {
				return nil, err
			}
			value += v
		}
		if !validHeaderValue(value) {
			return nil, errInvalidParams("http/request header value is invalid for %s: failed to parse header value", h.Name)
		}
		switch k := http.CanonicalHeaderKey(h.Name); {
		case k == "Host":
			req.Host = value
		case k == "User-Agent" && req.Header.Get(k) == "":
			req.Header.Set(k, value)
		default:
			req.Header.Add(k, value)
		}
	}
	return req, nil
}

// headerEnvValue reads the variable a header's valueEnvVar names from this server's
// environment. A name no environment can hold (empty, with '=' or NUL), an unset variable and
// one whose value is not UTF-8 are all "required"; a set but empty one is refused separately,
// as the reference words it: an empty credential is never sent.
func headerEnvValue(header, name string) (string, error) {
	v, ok := "", false
	if name != "" && !strings.ContainsAny(name, "=\x00") {
		v, ok = os.LookupEnv(name)
	}
	if !ok || !utf8.ValidString(v) {
		return "", errInvalidParams("http/request header %s requires executor environment variable %s", header, name)
	}
	if v == "" {
		return "", errInvalidParams("http/request header %s requires a non-empty executor environment variable %s", header, name)
	}
	return v, nil
}

// checkHTTPURL accepts an absolute http or https URL, naming what is wrong as the reference's
// URL parser does.
func checkHTTPURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil && strings.Contains(err.Error(), "invalid port"):
		return errInvalidParams("http/request url is invalid: invalid port number")
	case err != nil:
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return errInvalidParams("http/request url is invalid: %s", err)
	case u.Scheme == "":
		return errInvalidParams("http/request url is invalid: relative URL without a base")
	case u.Scheme != "http" && u.Scheme != "https":
		return errInvalidParams("http/request only supports http and https URLs, got %s", u.Scheme)
	case u.Hostname() == "":
		return errInvalidParams("http/request url is invalid: empty host")
	}
	if p := u.Port(); p != "" {
		if _, err := strconv.ParseUint(p, 10, 16); err != nil {
			return errInvalidParams("http/request url is invalid: invalid port number")
		}
	}
	return nil
}

// displayURL renders u as the reference's URL type does: an empty path is "/".
func displayURL(u *url.URL) string {
	if u.Path == "" && u.Opaque == "" {
		v := *u
		v.Path = "/"
		return v.String()
	}
	return u.String()
}

// checkRedirect stops at the first response (policy "stop") or follows up to maxHTTPRedirects,
// dropping the client's credentials once a redirect has left the original origin.
func checkRedirect(follow bool) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if !follow {
			return http.ErrUseLastResponse
		}
		if len(via) >= maxHTTPRedirects {
			return errTooManyRedirects
		}
		if leftOrigin(req, via) {
			for _, k := range []string{"Authorization", "Proxy-Authorization", "Cookie", "Cookie2", "Www-Authenticate"} {
				req.Header.Del(k)
			}
		}
		return nil
	}
}

// leftOrigin says whether a redirect chain has been outside its first request's origin, now or
// at any earlier hop. A chain that comes back (A, then B, then A again) stays stripped: the
// path it comes back to was chosen by B, so the credentials meant for the client's URL must
// not follow it (net/http strips for good too, but counts another port as the same host).
func leftOrigin(req *http.Request, via []*http.Request) bool {
	if !sameOrigin(req.URL, via[0].URL) {
		return true
	}
	for _, r := range via[1:] {
		if !sameOrigin(r.URL, via[0].URL) {
			return true
		}
	}
	return false
}

var errTooManyRedirects = errors.New("too many redirects")

func sameOrigin(a, b *url.URL) bool {
	return a.Scheme == b.Scheme && strings.EqualFold(a.Hostname(), b.Hostname()) && portOf(a) == portOf(b)
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

// httpFailure describes a failed exchange as the reference does.
func httpFailure(ctx context.Context, u *url.URL, err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return errHTTPTimeout()
	case errors.Is(err, errTooManyRedirects):
		return errInternal("http/request failed: error following redirect for url (%s)", displayURL(u))
	}
	return errInternal("http/request failed: error sending request for url (%s)", displayURL(u))
}

func errHTTPTimeout() error {
	return errInternal("http/request failed: route-aware request timed out")
}

// responseHeaders lists the response's headers with lower-case names, sorted by name. Values
// that are not visible ASCII are left out, as the reference does.
func responseHeaders(resp *http.Response) []httpHeader {
	h := resp.Header
	if len(resp.TransferEncoding) > 0 { // Go moves it out of Header
		h = h.Clone()
		h["Transfer-Encoding"] = []string{strings.Join(resp.TransferEncoding, ", ")}
	}
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	out := make([]httpHeader, 0, len(names))
	for _, k := range names {
		for _, v := range h[k] {
			if isVisibleASCII(v) {
				out = append(out, httpHeader{Name: strings.ToLower(k), Value: v})
			}
		}
	}
	return out
}

// isToken says whether s is an RFC 9110 token (a method or a header name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validHeaderValue accepts what the reference's HTTP library accepts: no control characters
// but tab.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func isVisibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}

// bodyStream sends one response body as bodyDelta notifications.
type bodyStream struct {
	c       *call
	s       *httpState
	id      string
	resp    *http.Response
	cancel  context.CancelFunc
	replied chan struct{} // closed once the reply carrying the headers is queued (headersReplied)
}

// headersReplied lets the body deltas go: the reply carrying the headers is queued. The
// scheduler calls it once, after that reply (work.afterReply).
func (b *bodyStream) headersReplied() { close(b.replied) }

func (b *bodyStream) run() {
	defer b.s.wg.Done()
	defer b.s.release(b.id)
	defer b.cancel()
	defer b.resp.Body.Close()
	select {
	case <-b.replied:
	case <-b.c.ctx.Done():
		return
	}
	buf := make([]byte, httpDeltaBytes)
	seq := uint64(1)
	for {
		n, err := b.resp.Body.Read(buf)
		if n > 0 {
			b.send(bodyDeltaParams{RequestID: b.id, Seq: seq, DeltaBase64: buf[:n]})
			seq++
		}
		switch {
		case err == io.EOF:
			b.send(bodyDeltaParams{RequestID: b.id, Seq: seq, DeltaBase64: []byte{}, Done: true})
			return
		case err != nil && b.c.ctx.Err() != nil: // the connection is gone: nobody to tell
			return
		case err != nil:
			msg := "error decoding response body"
			b.send(bodyDeltaParams{RequestID: b.id, Seq: seq, DeltaBase64: []byte{}, Done: true, Error: &msg})
			return
		}
	}
}

// send queues one delta, waiting while the client is slow: the body read pauses with it.
func (b *bodyStream) send(d bodyDeltaParams) {
	if msg, err := appendNotification(nil, "http/request/bodyDelta", d); err == nil {
		b.c.notify(msg)
	}
}
