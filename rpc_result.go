package main

// Handler results (docs/protocol.md §3.2): how a handler's typed answer is encoded, as one
// small interface with an adapter per encoding (a value, {}, pre-encoded JSON, pre-encoded
// JSON framed in place), so that the scheduler never inspects an `any`; and the response
// envelope they are written into.

import (
	"encoding/json"
)

// result is an answer as the scheduler sends it: a handler's typed answer encoded (answer),
// or one of the two pre-encoded forms, rawJSON and framedJSON, sent without a second pass
// over a large payload. Handlers return their own result type, never a result: the method
// table (handle) encodes it.
type result interface {
	// response returns the whole response, {"id":ID,"result":…}. It may write the envelope
	// in place around the result (framedJSON), which an append-to-the-caller's-buffer shape
	// would have to copy: fs/readFile answers up to 512 MiB.
	response(id json.RawMessage) ([]byte, error)
	// body returns the result's JSON alone: what the fs sandbox worker sends back.
	body() ([]byte, error)
}

// answer encodes a handler's typed answer r: rawJSON and framedJSON as they are, emptyResult
// as {}, any other type with encoding/json. The type switch is on a pointer to r, which
// costs no allocation; a value encoded with encoding/json costs the one allocation that
// boxing it into an interface always did.
//
// It is not inlined: one copy per result type serves every method that answers it, which
// keeps each instantiation of handle small.
//
//go:noinline
func answer[R any](r R) result {
	switch v := any(&r).(type) {
	case *rawJSON:
		return *v
	case *framedJSON:
		return *v
	case *emptyResult:
		return emptyResult{}
	}
	b := &jsonBox[R]{v: r}
	b.r.ptr = &b.v
	return &b.r
}

// encoded is answer after a handler's error check.
func encoded[R any](r R, err error) (result, error) {
	if err != nil {
		return nil, err
	}
	return answer(r), nil
}

// jsonResult is a plain value, encoded with encoding/json: ptr points at it, in the jsonBox
// that holds both. Its methods are not generic, so that one copy serves every result type;
// the box costs the one allocation a generic result would.
type jsonResult struct{ ptr any }

// jsonBox is a jsonResult and the value it encodes, allocated together (answer). The
// jsonResult is a field, not embedded, and the box is not comparable, so that no answer type
// gets method wrappers or an equality function of its own.
type jsonBox[T any] struct {
	_ [0]func()
	r jsonResult
	v T
}

func (r *jsonResult) body() ([]byte, error) { return json.Marshal(r.ptr) }

func (r *jsonResult) response(id json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(r.ptr)
	if err != nil {
		return nil, err
	}
	return appendEnvelope(make([]byte, 0, 64), id, b), nil
}

// emptyResult is the answer {} of the methods that have nothing to say, as a handler's result
// type and as its encoding. It has no size, so answering it allocates nothing for the
// interface.
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

// appendEnvelope appends {"id":ID,"result":R} to dst, R being JSON already.
func appendEnvelope(dst []byte, id json.RawMessage, r []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":`...)
	dst = append(dst, r...)
	return append(dst, '}')
}
