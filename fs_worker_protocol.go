package main

// The wire between the server and an fs sandbox worker (docs/sandbox.md §3): frames, and the
// server's half (round trips, the reader, descriptors received). The worker's half is
// fs_worker_serve.go.
//
// Wire format: frames of a u32 big-endian length, then that many bytes of JSON. Several
// requests are in flight at once; responses come in any order, matched by id.
//
//	direction        frame
//	server → worker  {"id":N,"method":M,"params":P}           P: the fields of M's fsOp
//	                 {"id":N,"method":"cancel"}               request N's caller is gone
//	worker → server  {"id":N,"result":R}                      R as the method answers it
//	                 {"id":N,"fd":true,"result":{}}           fs/open: the descriptor went first
//	                 {"id":N,"error":{"code":C,"message":T}}  the JSON-RPC error, as is
//	worker → server  8 bytes, N big-endian, carrying one descriptor (SCM_RIGHTS), on fd 0:
//	                 sent before the response that announces it

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// fsWorkerReply is a worker's answer to one request.
type fsWorkerReply struct {
	result result   // a framedJSON: the result as the worker encoded it
	file   *os.File // fs/open's descriptor
	err    error    // an *rpcError
}

// roundTrip sends one request and waits for its answer. A caller that goes away (its
// connection ended) tells the worker to give the request up.
func (w *fsWorker) roundTrip(ctx context.Context, method string, op fsRequest) (fsWorkerReply, error) {
	ch := make(chan fsWorkerReply, 1)
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return fsWorkerReply{}, err
	}
	w.nextID++
	id := w.nextID
	w.pending[id] = ch
	w.mu.Unlock()
	frame, err := appendWorkerRequest(id, method, op)
	if err == nil {
		_, err = w.proc.sock.Write(frame)
		if err != nil {
			err = errInternal("fs sandbox helper failed: send the request: %v", err)
		}
	}
	if err != nil {
		w.forgetRequest(id)
		return fsWorkerReply{}, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		if w.forgetRequest(id) {
			cancel, _ := appendWorkerCancel(id)
			w.proc.sock.Write(cancel)
		}
		return fsWorkerReply{}, ctx.Err()
	}
}

// forgetRequest drops a request nobody waits for any more; false when it was answered.
func (w *fsWorker) forgetRequest(id uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.pending[id]
	delete(w.pending, id)
	return ok
}

// readLoop reads the worker's responses until its output closes, then reaps it and fails
// whatever it still held.
func (w *fsWorker) readLoop() {
	br := bufio.NewReaderSize(w.proc.out, fsWorkerReadBuffer)
	var cause error
	for {
		frame, err := readWorkerFrame(br, framedRoom)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				cause = err
			}
			break
		}
		id, r, err := parseWorkerReply(frame)
		if err == nil && r.file == nil && r.err == nil && r.result == nil {
			r.file, err = w.receiveDescriptor(id)
		}
		if err != nil {
			cause = err
			break
		}
		w.deliver(id, r)
	}
	w.pool.forget(w, false) // the next call starts a new worker
	if cause != nil {
		w.proc.proc.Kill() // it broke the protocol: it cannot be trusted to exit
	}
	w.idleStop.Stop()
	state, werr := w.proc.proc.Wait()
	<-w.stderrDone
	w.proc.exited()
	w.proc.sock.Close()
	w.proc.out.Close()
	w.proc.errOut.Close()
	for _, f := range w.fds {
		f.Close()
	}
	status := fmt.Sprint(state)
	if werr != nil {
		status = werr.Error()
	}
	msg := fmt.Sprintf("fs sandbox helper failed with status %s", status)
	if cause != nil {
		msg += fmt.Sprintf(" (%v)", cause)
	}
	if tail := strings.TrimSpace(w.stderr.String()); tail != "" {
		msg += ": " + tail
	}
	w.mu.Lock()
	w.err = errInternal("%s", msg)
	pending := w.pending
	w.pending = map[uint64]chan fsWorkerReply{}
	w.mu.Unlock()
	for _, ch := range pending {
		ch <- fsWorkerReply{err: w.err}
	}
	w.pool.forget(w, true)
}

// deliver hands a reply to its caller; a reply nobody waits for is dropped, and its
// descriptor closed.
func (w *fsWorker) deliver(id uint64, r fsWorkerReply) {
	w.mu.Lock()
	ch := w.pending[id]
	delete(w.pending, id)
	w.mu.Unlock()
	if ch == nil {
		if r.file != nil {
			r.file.Close()
		}
		return
	}
	ch <- r
}

// receiveDescriptor takes the descriptor the worker sent for request id. Descriptors come
// in the order the worker's requests finished, which need not be the order their responses
// are read in: one that arrives for another request waits in w.fds for its response.
func (w *fsWorker) receiveDescriptor(id uint64) (*os.File, error) {
	if f := w.fds[id]; f != nil {
		delete(w.fds, id)
		return f, nil
	}
	w.proc.sock.SetReadDeadline(time.Now().Add(fsWorkerDescriptorWait))
	defer w.proc.sock.SetReadDeadline(time.Time{})
	for {
		var b [8]byte
		oob := make([]byte, unix.CmsgSpace(4))
		n, oobn, _, _, err := w.proc.sock.ReadMsgUnix(b[:], oob)
		if err != nil {
			return nil, fmt.Errorf("receive a descriptor: %w", err)
		}
		fds, err := descriptorsIn(oob[:oobn])
		if err != nil || n != len(b) || len(fds) != 1 {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("receive a descriptor: a malformed message (%d bytes, %d descriptors, %v)", n, len(fds), err)
		}
		f := os.NewFile(uintptr(fds[0]), "fs/open")
		got := binary.BigEndian.Uint64(b[:])
		if got == id {
			return f, nil
		}
		if old := w.fds[got]; old != nil {
			old.Close()
		}
		w.fds[got] = f
	}
}

// descriptorsIn returns the descriptors of the SCM_RIGHTS messages in oob.
func descriptorsIn(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// ---- frames ----

// readWorkerFrame reads one frame into a new buffer that keeps room bytes free before the
// JSON, and returns the buffer whole (room included).
func readWorkerFrame(r io.Reader, room int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxWorkerFrame {
		return nil, fmt.Errorf("a frame of %d bytes (at most %d)", n, maxWorkerFrame)
	}
	buf := make([]byte, room+int(n))
	if _, err := io.ReadFull(r, buf[room:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// frameBuilder builds a frame: the length is filled in by bytes.
type frameBuilder struct{ bytes.Buffer }

func newFrame() *frameBuilder {
	f := &frameBuilder{}
	f.Write([]byte{0, 0, 0, 0})
	return f
}

func (f *frameBuilder) frame() ([]byte, error) {
	b := f.Bytes()
	if len(b)-4 > maxWorkerFrame {
		return nil, errInternal("fs sandbox: a request of %d bytes (at most %d)", len(b)-4, maxWorkerFrame)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b, nil
}

// appendWorkerRequest is the frame of request id: {"id":N,"method":M,"params":op}.
func appendWorkerRequest(id uint64, method string, op fsRequest) ([]byte, error) {
	f := newFrame()
	f.WriteString(`{"id":`)
	f.WriteString(strconv.FormatUint(id, 10))
	f.WriteString(`,"method":`)
	f.Write(appendJSONString(nil, method))
	f.WriteString(`,"params":`)
	enc := json.NewEncoder(f)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(op); err != nil {
		return nil, errInternal("fs sandbox: encode the request: %v", err)
	}
	f.WriteByte('}')
	return f.frame()
}

// appendWorkerCancel is the frame that gives request id up.
func appendWorkerCancel(id uint64) ([]byte, error) {
	f := newFrame()
	f.WriteString(`{"id":` + strconv.FormatUint(id, 10) + `,"method":"cancel"}`)
	return f.frame()
}

// parseWorkerReply decodes a response frame (framedRoom bytes of room, then the JSON). A
// reply with neither result nor error, and no error returned, announces a descriptor. The
// result stays in the frame's buffer, framed for the client's reply without a copy.
func parseWorkerReply(buf []byte) (uint64, fsWorkerReply, error) {
	frame := buf[framedRoom:]
	var (
		id                 uint64
		haveID, descriptor bool
		r                  fsWorkerReply
		bad                error
	)
	ok := scanObject(frame, func(key string, val []byte) bool {
		switch key {
		case "id":
			id, bad = strconv.ParseUint(string(val), 10, 64)
			haveID = bad == nil
		case "fd":
			descriptor = string(val) == "true"
		case "result":
			start := cap(buf) - cap(val)
			r.result = framedJSON{buf: buf[:start+len(val)], head: start}
		case "error":
			var e rpcError
			if bad = json.Unmarshal(val, &e); bad == nil {
				r.err = &e
			}
		}
		return bad == nil
	})
	switch {
	case bad != nil:
		return 0, r, fmt.Errorf("a malformed response: %w", bad)
	case !ok || !haveID || r.result == nil && r.err == nil:
		return 0, r, fmt.Errorf("a malformed response: %.200q", frame)
	case descriptor:
		r.result = nil
	}
	return id, r, nil
}
