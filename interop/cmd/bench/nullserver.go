package main

// The null server: the floor of a request's round trip. It is this bench binary run again
// with nullServerEnv set; it speaks just enough of the protocol for the connect and
// getMetadata metrics, answering every request at once from the goroutine that read it, with
// gorilla/websocket. What a real server adds on top of it is its own cost.

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"

	"github.com/gorilla/websocket"
)

// nullServerEnv makes the bench binary (or its test binary) serve as the null server.
const nullServerEnv = "EXEC_BENCH_NULL_SERVER"

// nullServerSpec is the command line that launches the null server.
func nullServerSpec() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("env %s=1 %s", nullServerEnv, strconv.Quote(exe)), nil
}

// serveNull listens on a loopback port, prints its URL and serves until killed.
func serveNull() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("ws://%s\n", l.Addr())
	up := websocket.Upgrader{ReadBufferSize: wsReadBuffer, WriteBufferSize: wsReadBuffer}
	err = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		var out []byte
		for {
			_, msg, err := ws.ReadMessage()
			if err != nil {
				return
			}
			id := field(msg, "id")
			if id == nil {
				continue // a notification
			}
			out = append(out[:0], `{"id":`...)
			out = append(out, bytes.TrimSpace(id)...)
			out = append(out, `,"result":{"isFile":true}}`...)
			if err := ws.WriteMessage(websocket.TextMessage, out); err != nil {
				return
			}
		}
	}))
	fmt.Fprintln(os.Stderr, err)
	return 1
}
