package main

// The fs sandbox worker's main (docs/sandbox.md §3): it decodes requests from the server
// (fs_worker_protocol.go), runs their fsOps concurrently and answers, handing fs/open's
// descriptors over first.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// isFSWorker reports whether this process was started as an fs sandbox worker.
func isFSWorker() bool {
	return len(os.Args) > 1 && os.Args[1] == fsWorkerArg
}

// runFSWorker is the worker's main: it serves its stdin and stdout until the server closes
// the request direction, then exits at once: like the stage (exitStage), it skips what
// os.Exit runs first, which in a race-enabled test binary is a pause of a second. Every
// change it makes goes through the guard its command line describes (fs_worker_guard.go);
// without one it does not serve.
func runFSWorker() {
	spec, err := parseFSGuardArgs(os.Args[2:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		syscall.Exit(1)
	}
	guard, err := newProtectGuard(spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fs worker: %v\n", err)
		syscall.Exit(1)
	}
	syscall.Exit(serveFSWorker(os.Stdin, os.Stdout, int(os.Stdin.Fd()), fsWrites{inPlace: true, guard: guard}))
}

// fsWorkerServer is the worker's state: its requests in flight, and the writer of answers.
type fsWorkerServer struct {
	sock  int      // where descriptors go (fd 0, the request socket)
	how   fsWrites // in place, through the guard
	outMu sync.Mutex
	out   io.Writer

	mu      sync.Mutex
	cancels map[uint64]context.CancelFunc
	slots   chan struct{}
	wg      sync.WaitGroup
}

// serveFSWorker serves requests from in, answers on out, and descriptors on the socket
// sock, until in ends; it returns the exit status. Every operation changes files as how
// says. Each request runs on a goroutine of its own, at most maxWorkerInFlight of them
// running at once; all have ended when it returns.
func serveFSWorker(in io.Reader, out io.Writer, sock int, how fsWrites) int {
	ctx, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	s := &fsWorkerServer{sock: sock, how: how, out: out, cancels: map[uint64]context.CancelFunc{}, slots: make(chan struct{}, maxWorkerInFlight)}
	br := bufio.NewReaderSize(in, fsWorkerReadBuffer)
	status := 0
	for {
		frame, err := readWorkerFrame(br, 0)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintf(os.Stderr, "fs worker: read a request: %v\n", err)
				status = 1
			}
			break
		}
		id, method, params, err := parseWorkerRequest(frame)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fs worker: %v\n", err)
			status = 1
			break
		}
		if method == "cancel" {
			s.cancel(id)
			continue
		}
		rctx, cancel := context.WithCancel(ctx)
		s.mu.Lock()
		s.cancels[id] = cancel
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.cancel(id)
			// Waiting for a slot here, not in the loop, keeps the loop reading: a cancel
			// still reaches a request that waits.
			select {
			case s.slots <- struct{}{}:
			case <-rctx.Done():
				s.answerError(id, errInternal("fs sandbox worker: %v", rctx.Err()))
				return
			}
			defer func() { <-s.slots }()
			s.serve(rctx, id, method, params)
		}()
	}
	if status != 0 {
		cancelAll()
	}
	s.wg.Wait()
	return status
}

func (s *fsWorkerServer) cancel(id uint64) {
	s.mu.Lock()
	cancel := s.cancels[id]
	delete(s.cancels, id)
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// parseWorkerRequest splits a request frame; params stays in the frame.
func parseWorkerRequest(frame []byte) (id uint64, method string, params []byte, err error) {
	haveID := false
	ok := scanObject(frame, func(key string, val []byte) bool {
		switch key {
		case "id":
			id, err = strconv.ParseUint(string(val), 10, 64)
			haveID = err == nil
		case "method":
			err = json.Unmarshal(val, &method)
		case "params":
			params = val
		}
		return err == nil
	})
	if err == nil && (!ok || !haveID || method == "") {
		err = fmt.Errorf("a malformed request: %.200q", frame)
	}
	return id, method, params, err
}

// newFSOp is a pointer to the op of a method as the worker serves it (serveFSOp), for its
// params to be decoded into.
func newFSOp(method string) any {
	switch method {
	case "fs/readFile":
		return &readFileOp{}
	case "fs/writeFile":
		return &writeFileOp{}
	case "fs/createDirectory":
		return &createDirectoryOp{}
	case "fs/getMetadata":
		return &metadataOp{}
	case "fs/canonicalize":
		return &canonicalizeOp{}
	case "fs/readDirectory":
		return &readDirectoryOp{}
	case "fs/remove":
		return &removeOp{}
	case "fs/copy":
		return &copyOp{}
	case "fs/walk":
		return &walkOp{}
	case "fs/open":
		return &openOp{}
	case discoveryRootsMethod: // one root of it (env_discovery.go)
		return &discoverRootOp{}
	}
	return nil
}

// serve runs one request and answers it.
func (s *fsWorkerServer) serve(ctx context.Context, id uint64, method string, params []byte) {
	op := newFSOp(method)
	if op == nil {
		s.answerError(id, errInternal("fs sandbox worker: unknown method `%s`", method))
		return
	}
	if err := decodeParams(params, method, op); err != nil {
		s.answerError(id, errInternal("fs sandbox worker: %s: %v", method, err))
		return
	}
	body, f, err := serveFSOp(ctx, op, s.how)
	if err != nil {
		s.answerError(id, toRPCError(fsError(err)))
		return
	}
	if f != nil {
		err := s.sendDescriptor(id, f)
		f.Close()
		if err != nil {
			s.answerError(id, errInternal("fs sandbox worker: send the descriptor: %v", err))
			return
		}
		s.answer(id, `,"fd":true,"result":`, []byte(`{}`))
		return
	}
	s.answer(id, `,"result":`, body)
}

// sendDescriptor sends f for request id, ahead of the response that announces it.
func (s *fsWorkerServer) sendDescriptor(id uint64, f *os.File) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], id)
	return unix.Sendmsg(s.sock, b[:], unix.UnixRights(int(f.Fd())), nil, 0)
}

func (s *fsWorkerServer) answerError(id uint64, e *rpcError) {
	body, _ := json.Marshal(e)
	s.answer(id, `,"error":`, body)
}

// answer writes {"id":N<member>body}: the head and tail around body, which may be large, as
// writes of their own.
func (s *fsWorkerServer) answer(id uint64, member string, body []byte) {
	head := make([]byte, 4, 64)
	head = append(head, `{"id":`...)
	head = strconv.AppendUint(head, id, 10)
	head = append(head, member...)
	binary.BigEndian.PutUint32(head, uint32(len(head)-4+len(body)+1))
	s.outMu.Lock()
	defer s.outMu.Unlock()
	// A failed write means the server is gone; the request direction ends with it.
	if _, err := s.out.Write(head); err != nil {
		return
	}
	if _, err := s.out.Write(body); err != nil {
		return
	}
	s.out.Write([]byte{'}'})
}
