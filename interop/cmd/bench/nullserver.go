package main

// The null server: the floor under every server. It is this bench binary run again with
// nullServerEnv set, speaking just enough of the protocol for the bench's limit
// measurements over gorilla/websocket, with each request handled to the end by the goroutine
// that read it (no locks, no queues). It does the least work any server must do:
//
//	request          what the null server does                                 reply
//	process/start    runs argv with stdout on a pipe, answers, then reads the   {"processId":P}
//	                 pipe in 64 KiB read(2)s and sends each read as one
//	                 process/output notification (base64, in our layout),
//	                 then process/exited and process/closed
//	fs/writeFile     decodes dataBase64 and writes the file in place            {}
//	anything else    nothing                                                   {"isFile":true}
//
// What a real server measures above it is its own cost; what it cannot beat is the
// null server's figure, which already contains the pipe, base64, the websocket and the client.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
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
		(&nullConn{ws: ws}).serve()
	}))
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// nullConn is one connection of the null server. Its buffers are reused from message to
// message, so a 32 MiB fs/writeFile costs no allocation after the first.
type nullConn struct {
	ws   *websocket.Conn
	in   bytes.Buffer // the request being handled
	out  []byte       // the message being written
	data []byte       // decoded fs/writeFile content
}

// serve handles requests until the connection ends.
func (nc *nullConn) serve() {
	for {
		_, r, err := nc.ws.NextReader()
		if err != nil {
			return
		}
		nc.in.Reset()
		if _, err := nc.in.ReadFrom(r); err != nil {
			return
		}
		if err := nc.handle(nc.in.Bytes()); err != nil {
			fmt.Fprintln(os.Stderr, "null server:", err)
			return
		}
	}
}

// handle answers one message; notifications are ignored.
func (nc *nullConn) handle(msg []byte) error {
	e, err := splitEnvelope(msg)
	if err != nil {
		return err
	}
	id, method, params := e.id, e.method, e.params
	if id == nil {
		return nil
	}
	switch string(method) {
	case `"process/start"`:
		err = nc.processStart(id, params)
	case `"fs/writeFile"`:
		err = nc.writeFile(id, params)
	default:
		return nc.reply(id, []byte(`{"isFile":true}`))
	}
	var rerr *rpcError
	if errors.As(err, &rerr) {
		return nc.replyError(id, rerr)
	}
	return err
}

// reply sends a result.
func (nc *nullConn) reply(id, result []byte) error {
	nc.out = append(nc.out[:0], `{"id":`...)
	nc.out = append(nc.out, id...)
	nc.out = append(nc.out, `,"result":`...)
	nc.out = append(nc.out, result...)
	nc.out = append(nc.out, '}')
	return nc.ws.WriteMessage(websocket.TextMessage, nc.out)
}

// replyError sends a JSON-RPC error.
func (nc *nullConn) replyError(id []byte, e *rpcError) error {
	b, err := json.Marshal(map[string]any{"id": json.RawMessage(id), "error": e})
	if err != nil {
		return err
	}
	return nc.ws.WriteMessage(websocket.TextMessage, b)
}

// requestError makes err the JSON-RPC error of a request, so the connection survives it.
func requestError(method string, err error) error {
	return &rpcError{Code: -32000, Message: fmt.Sprintf("%s: %v", method, err)}
}

// processStart runs a pipe-mode process/start to its end: answer, stream stdout, then
// exited and closed, all before reading the next request (the bench waits for closed).
func (nc *nullConn) processStart(id, params []byte) error {
	var p startParams
	if err := json.Unmarshal(params, &p); err != nil || len(p.Argv) == 0 {
		return requestError("process/start", fmt.Errorf("bad params %.200s", params))
	}
	cmd := exec.Command(p.Argv[0], p.Argv[1:]...)
	for k, v := range p.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		return requestError("process/start", err)
	}
	pid, _ := json.Marshal(p.ProcessID)
	if err := nc.reply(id, append(append([]byte(`{"processId":`), pid...), '}')); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return err
	}
	var seq uint64
	_, werr := readEach(out, func(chunk []byte) error {
		seq++
		nc.out = appendNullOutput(nc.out[:0], pid, seq, chunk)
		return nc.ws.WriteMessage(websocket.TextMessage, nc.out)
	})
	if werr != nil {
		cmd.Process.Kill()
	}
	cmd.Wait()
	if werr != nil {
		return werr
	}
	seq++
	nc.out = fmt.Appendf(nc.out[:0], `{"method":"process/exited","params":{"processId":%s,"seq":%d,"exitCode":%d,"sandboxDenied":false}}`,
		pid, seq, cmd.ProcessState.ExitCode())
	if err := nc.ws.WriteMessage(websocket.TextMessage, nc.out); err != nil {
		return err
	}
	seq++
	nc.out = fmt.Appendf(nc.out[:0], `{"method":"process/closed","params":{"processId":%s,"seq":%d}}`, pid, seq)
	return nc.ws.WriteMessage(websocket.TextMessage, nc.out)
}

// appendNullOutput appends a process/output notification in the layout our server sends
// (docs/protocol.md §6.11), base64-encoding data straight into place.
func appendNullOutput(dst, pid []byte, seq uint64, data []byte) []byte {
	dst = append(dst, `{"method":"process/output","params":{"processId":`...)
	dst = append(dst, pid...)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"stream":"stdout","chunk":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, data)
	return append(dst, `"}}`...)
}

// writeFile decodes dataBase64 and writes it to path: no temporary file, no rename, no
// sandbox check, the least a server can do with the request.
func (nc *nullConn) writeFile(id, params []byte) error {
	var path, data []byte
	if err := members(params, func(k, v []byte) bool {
		switch string(k) {
		case "path":
			path = v
		case "dataBase64":
			data = v
		}
		return true
	}); err != nil {
		return requestError("fs/writeFile", err)
	}
	name, err := stringValue(path)
	if err != nil {
		return requestError("fs/writeFile path", err)
	}
	u, err := url.Parse(string(name))
	if err != nil || u.Scheme != "file" {
		return requestError("fs/writeFile", fmt.Errorf("path %q is not a file: URI", name))
	}
	b64, err := stringValue(data)
	if err != nil {
		return requestError("fs/writeFile dataBase64", err)
	}
	if nc.data, err = base64.StdEncoding.AppendDecode(nc.data[:0], b64); err != nil {
		return requestError("fs/writeFile dataBase64", err)
	}
	if err := os.WriteFile(u.Path, nc.data, 0o644); err != nil {
		return requestError("fs/writeFile", err)
	}
	return nc.reply(id, []byte(`{}`))
}
