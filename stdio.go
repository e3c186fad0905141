package main

// stdio transport (docs/protocol.md §2.4): newline-delimited JSON both ways, one connection.
// Blank lines are skipped, "\r\n" works, and EOF ends the connection (the caller then kills
// every process and exits 0).

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
)

// stdioMaxLine bounds one incoming line, as wsMaxMessage bounds a websocket message.
const stdioMaxLine = wsMaxMessage

type stdioTransport struct {
	r      *bufio.Reader
	w      io.Writer
	line   []byte  // the buffer lines are read into, lent to each message (next)
	loan   bufLoan // says whether line is back (ws.go)
	mu     sync.Mutex
	closed bool
	wbuf   []byte // a message and its newline, reused: only the connection's writer writes
}

// stdioKeepBuffer bounds the write buffer kept between messages, as wsKeepBuffer bounds a
// websocket's read buffer: a large answer's buffer is dropped after it.
const stdioKeepBuffer = 1 << 20

func newStdioTransport(r io.Reader, w io.Writer) *stdioTransport {
	return &stdioTransport{r: bufio.NewReaderSize(r, 64<<10), w: w}
}

var errLineTooLong = errors.New("stdio message longer than the limit")

// next implements msgTransport: the next non-blank line, trimmed. A line still held when
// the next one comes is left to its holder, and the next is read into a new buffer.
func (t *stdioTransport) next() (message, error) {
	tag, reuse := t.loan.lend()
	if !reuse {
		t.line = nil
	}
	msg, err := t.readLine()
	if err != nil {
		return message{}, err
	}
	return message{data: msg, lender: t, tag: tag}, nil
}

// releaseMessage implements msgLender.
func (t *stdioTransport) releaseMessage(m message) { t.loan.giveBack(m.tag) }

// peer implements msgTransport.
func (t *stdioTransport) peer() string { return "stdio" }

// readLine reads the next non-blank line into t.line and returns it trimmed.
func (t *stdioTransport) readLine() ([]byte, error) {
	for {
		t.line = t.line[:0]
		for {
			chunk, err := t.r.ReadSlice('\n')
			if len(t.line)+len(chunk) > stdioMaxLine {
				return nil, errLineTooLong
			}
			t.line = append(t.line, chunk...)
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil && (err != io.EOF || len(bytes.TrimSpace(t.line)) == 0) {
				return nil, err
			}
			break
		}
		if msg := bytes.TrimSpace(t.line); len(msg) > 0 {
			return msg, nil
		}
	}
}

func (t *stdioTransport) writeMessage(b []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return io.ErrClosedPipe
	}
	// One write per line, so a line is never interleaved with anything else on stdout.
	t.wbuf = append(append(t.wbuf[:0], b...), '\n')
	_, err := t.w.Write(t.wbuf)
	if cap(t.wbuf) > stdioKeepBuffer {
		t.wbuf = nil
	}
	return err
}

// close implements msgTransport: it stops writing, whatever the reason (a pipe has no way to
// say it); reading ends at stdin's EOF, which the process cannot force.
func (t *stdioTransport) close(error) {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}
