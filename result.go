package main

// Handler results (docs/protocol.md §3.2): what a handler answers, as one small interface
// with an adapter per encoding, so that the dispatcher never inspects an `any`.

import (
	"encoding/json"
	"fmt"
	"os"
)

// result is a handler's answer. A plain value is wrapped by jsonOf; a pre-encoded one is a
// rawJSON or a framedJSON, sent without a second pass over a large payload.
type result interface {
	// response returns the whole response, {"id":ID,"result":…}. It may write the envelope
	// in place around the result (framedJSON), which an append-to-the-caller's-buffer shape
	// would have to copy: fs/readFile answers up to 512 MiB.
	response(id json.RawMessage) ([]byte, error)
	// body returns the result's JSON alone: what the fs sandbox worker sends back.
	body() ([]byte, error)
}

// afterReplier is a result whose follow-up must reach the client after the reply itself,
// such as the body deltas of a streamed http/request: afterReply runs once the reply is queued.
type afterReplier interface{ afterReply() }

// jsonResult is a plain value, encoded with encoding/json. It is used by pointer, so that
// answering costs the one allocation that boxing the value into an interface always did.
type jsonResult[T any] struct{ v T }

// jsonOf answers v, encoded with encoding/json.
func jsonOf[T any](v T) result { return &jsonResult[T]{v} }

func (r *jsonResult[T]) body() ([]byte, error) { return json.Marshal(&r.v) }

func (r *jsonResult[T]) response(id json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(&r.v)
	if err != nil {
		return nil, err
	}
	return appendEnvelope(make([]byte, 0, 64), id, b), nil
}

// jsonRef is a value held by pointer, encoded with encoding/json. A struct of one pointer
// is stored in an interface as is: answering it allocates nothing more.
type jsonRef[T any] struct{ p *T }

// jsonPtr answers *p, encoded with encoding/json.
func jsonPtr[T any](p *T) result { return jsonRef[T]{p} }

func (r jsonRef[T]) body() ([]byte, error) { return json.Marshal(r.p) }

func (r jsonRef[T]) response(id json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(r.p)
	if err != nil {
		return nil, err
	}
	return appendEnvelope(make([]byte, 0, 64), id, b), nil
}

// emptyResult is the answer {} of the methods that have nothing to say. It has no size, so
// answering it allocates nothing for the interface.
type emptyResult struct{}

func (emptyResult) body() ([]byte, error) { return []byte(`{}`), nil }

func (emptyResult) response(id json.RawMessage) ([]byte, error) {
	return appendEnvelope(make([]byte, 0, 64), id, []byte(`{}`)), nil
}

// rawJSON is a result already encoded as JSON; it is sent as is.
type rawJSON []byte

func (r rawJSON) body() ([]byte, error) { return r, nil }

func (r rawJSON) response(id json.RawMessage) ([]byte, error) {
	return appendEnvelope(make([]byte, 0, 64+len(r)+len(id)), id, r), nil // one exact allocation
}

// framedJSON is a large result already encoded as JSON, with room left before it for the
// response's head ({"id":ID,"result":) and after it for the closing brace: response writes
// the envelope around it instead of copying it (fs/readFile's 43 MiB of base64). An id too
// long for the room is copied the ordinary way.
type framedJSON struct {
	buf  []byte // framedRoom bytes of room, then the result; cap(buf) > len(buf)
	head int    // where the result starts in buf
}

// framedRoom is the room a framedJSON keeps for the response's head: ids of up to 48 bytes.
const framedRoom = 64

func (f framedJSON) body() ([]byte, error) { return f.buf[f.head:], nil }

func (f framedJSON) response(id json.RawMessage) ([]byte, error) {
	if b, ok := f.frame(id); ok {
		return b, nil
	}
	return rawJSON(f.buf[f.head:]).response(id)
}

// frame writes the response's envelope around the result, in place.
func (f framedJSON) frame(id json.RawMessage) ([]byte, bool) {
	n := len(`{"id":`) + len(id) + len(`,"result":`)
	if n > f.head || cap(f.buf) == len(f.buf) {
		return nil, false
	}
	b := f.buf[f.head-n:]
	k := copy(b, `{"id":`)
	k += copy(b[k:], id)
	copy(b[k:], `,"result":`)
	return append(b, '}'), true
}

// openedFile is fs/open's core answer: the open file, which the handle table keeps (or the
// fs sandbox worker passes back as a descriptor). It is never sent as a result itself.
type openedFile struct{ f *os.File }

func (openedFile) body() ([]byte, error) { return nil, fmt.Errorf("an open file is not a result") }

func (o openedFile) response(json.RawMessage) ([]byte, error) { return o.body() }
