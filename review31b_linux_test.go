// Cold review 31b of the masking fixes (docs/network.md "Interception"): a trailer the origin
// did not announce in a Trailer header still reaches the child with the real value.
package main

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestReview31bUndeclaredTrailerEcho: with no Trailer header, resp.Trailer is nil when
// modifyResponse runs; the transport makes a new map at the body's end, which the
// trailerUnmasker (holding the old, nil, map) never sees, and the reverse proxy forwards it.
func TestReview31bUndeclaredTrailerEcho(t *testing.T) {
	ca := newTestCA(t, "review31b origin test CA")
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
		io.WriteString(w, "ok\n")
		w.(http.Flusher).Flush()
		w.Header().Set(http.TrailerPrefix+"X-Echo", a) // not announced
	}))
	o.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	o.srv.StartTLS()
	t.Cleanup(o.srv.Close)
	real, out := adv31Run(t, o, "review31b-trailer",
		`curl -sS --max-time 20 --http1.1 -D - -H "Authorization: Bearer $ACME_TOKEN" `+o.url()+`/utrailer; echo "== done"`)
	adv31Check(t, o, "/utrailer", real, out)
}
