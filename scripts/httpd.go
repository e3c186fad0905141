//go:build ignore

// Command httpd serves one directory over HTTP on a loopback port, for the install tests of
// scripts/ci-release.sh: it prints its base URL (one line), logs each request on stderr, and
// serves until killed.
//
//	go build -o httpd scripts/httpd.go && ./httpd DIR
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
)

// statusWriter remembers the status of a response, for the log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: httpd DIR")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("http://%s\n", ln.Addr())
	os.Stdout.Sync()
	files := http.FileServer(http.Dir(os.Args[1]))
	log.SetFlags(0)
	log.Fatal(http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		files.ServeHTTP(sw, r)
		log.Printf("httpd: %s %s %d", r.Method, r.URL.Path, sw.status)
	})))
}
