package main

// Base64 inside JSON, on the hot paths: params fields that decode straight from the message
// bytes (process/write, fs/writeBlock) or in place over them (fs/writeFile), and answers whose
// file bytes are read into the answer itself and encoded there (fs/readFile, fs/readBlock).
// Errors are described as the reference's base64 crate does.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// strictBase64 decodes standard padded base64 as the reference's base64 crate does: the unused low bits
// of the last symbol must be zero ("aGl=" is refused). Line breaks, which encoding/base64
// skips, are refused before it sees them (hasLineBreak).
var strictBase64 = base64.StdEncoding.Strict()

// hasLineBreak reports whether s holds a CR or LF: not base64, though encoding/base64 skips
// them. Only strings that were unquoted (a raw one is invalid JSON) need the check.
func hasLineBreak[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' || s[i] == '\r' {
			return true
		}
	}
	return false
}

// base64Bytes is a params field holding standard base64 with padding. Decoding errors become
// -32602 during params decoding, as in the reference (docs/protocol.md §3.3).
type base64Bytes []byte

func (b *base64Bytes) UnmarshalJSON(raw []byte) error { return b.decodeRawJSON(raw) }

// decodeRawJSON decodes the JSON string raw straight from the message bytes. Base64 needs
// no JSON escapes; a string that has some takes the slow path.
func (b *base64Bytes) decodeRawJSON(raw []byte) error {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' || bytes.IndexByte(raw, '\\') >= 0 {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		raw = []byte(`"` + s + `"`)
	}
	body := raw[1 : len(raw)-1]
	if hasLineBreak(body) {
		return base64Error(body, 0)
	}
	out := make([]byte, strictBase64.DecodedLen(len(body)))
	n, err := strictBase64.Decode(out, body)
	if err != nil {
		_, err = decodeBase64(string(body))
		return err
	}
	*b = out[:n]
	return nil
}

// lazyBase64 is a params field holding base64 that its handler decodes, not the params decoder:
// a bad one is the handler's error to report (fs/writeFile answers -32600, not -32602,
// docs/protocol.md §7.5), and a large one is decoded in place, on the handler's goroutine, over
// the message bytes that carried it (its params are a messageBorrower: the scheduler gives the
// message back after that work).
type lazyBase64 struct {
	raw []byte // the JSON string as it came, quotes included: a sub-slice of the message
}

func (l *lazyBase64) UnmarshalJSON(raw []byte) error { return l.decodeRawJSON(raw) }

// MarshalJSON gives the string back as it came: fs/writeFile's data crosses to the sandbox
// worker (fs_worker.go) undecoded, and is decoded there.
func (l lazyBase64) MarshalJSON() ([]byte, error) { return l.raw, nil }

func (l *lazyBase64) decodeRawJSON(raw []byte) error {
	if len(raw) == 0 || raw[0] != '"' {
		return &json.UnmarshalTypeError{Value: jsonKind(raw), Type: reflect.TypeFor[string]()}
	}
	l.raw = raw
	return nil
}

// decodeInPlace returns the decoded bytes, written over the string's own bytes, which it
// destroys: it runs once, on a message the handler has kept.
func (l *lazyBase64) decodeInPlace() ([]byte, error) {
	return decodeJSONBase64InPlace(l.raw)
}

// base64Block is how many base64 characters decodeJSONBase64InPlace decodes at a time (a
// multiple of four).
const base64Block = 64 << 10

// decodeJSONBase64InPlace decodes the JSON string raw (quotes included) as standard padded
// base64 and returns the bytes written over raw itself. Four characters become three bytes, so
// the output never overtakes the characters still to be read. It goes a block at a time
// through a small buffer: each block is read once while in cache, and nothing depends on how
// encoding/base64 treats overlapping slices. Results and errors are base64Bytes's for the same
// raw, when raw is valid JSON: a raw line break (invalid in a JSON string) is skipped by
// base64Bytes, and by this decoder too within the last block only.
func decodeJSONBase64InPlace(raw []byte) ([]byte, error) {
	return decodeJSONBase64Blocks(raw, base64Block)
}

func decodeJSONBase64Blocks(raw []byte, block int) ([]byte, error) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		var s string
		return nil, json.Unmarshal(raw, &s) // not a whole string: say what is wrong with it
	}
	body := raw[1 : len(raw)-1]
	buf := make([]byte, base64.StdEncoding.DecodedLen(min(len(body), block)))
	n := 0 // decoded bytes, at the front of body
	for i := 0; i < len(body); i += block {
		blk := body[i:min(len(body), i+block)]
		if bytes.IndexByte(blk, '\\') >= 0 {
			// An escaped string (some encoders write "\/"). All before blk is plain base64 and
			// already decoded; unquote and decode the rest the slow way.
			s, err := unquoteFrom(raw, i)
			if err != nil {
				return nil, err
			}
			if hasLineBreak(s) {
				return nil, base64Error(s, i)
			}
			rest, err := strictBase64.DecodeString(s)
			if err != nil {
				return nil, base64Error(s, i)
			}
			return append(body[:n], rest...), nil // it fits: rest is shorter than s
		}
		k, err := strictBase64.Decode(buf, blk)
		if err == nil && k != len(blk)/4*3 && i+len(blk) < len(body) {
			err = errors.New("padding before the last block")
		}
		if err != nil {
			// What is wrong is in body[i:], which is intact; an escape later on is unquoted
			// first, so that offsets count characters as the whole string's decoding would.
			if bytes.IndexByte(body[i:], '\\') < 0 {
				return nil, base64Error(body[i:], i)
			}
			s, err := unquoteFrom(raw, i)
			if err != nil {
				return nil, err
			}
			return nil, base64Error(s, i)
		}
		n += copy(body[n:], buf[:k])
	}
	return body[:n], nil
}

// unquoteFrom unquotes the JSON string raw from its body's offset i on.
func unquoteFrom(raw []byte, i int) (string, error) {
	var s string
	err := json.Unmarshal(append([]byte{'"'}, raw[1+i:]...), &s)
	return s, err
}

// decodeBase64 decodes standard padded base64, describing a failure as the reference's base64
// crate does ("Invalid symbol 33, offset 0.", "Invalid padding").
func decodeBase64(s string) ([]byte, error) {
	out, err := strictBase64.DecodeString(s)
	if err != nil || hasLineBreak(s) {
		return nil, base64Error(s, 0)
	}
	return out, nil
}

// base64Error describes why s, which failed to decode, is not base64, as the reference's
// base64 crate does: the first byte outside the alphabet is named with its offset (plus base,
// the offset of s in the whole string); anything else is a padding or length error.
func base64Error[T string | []byte](s T, base int) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return fmt.Errorf("Invalid symbol %d, offset %d.", c, base+i)
		}
	}
	// Every symbol is in the alphabet. Well padded, it can only be the last symbol's unused
	// bits that are not zero.
	body := len(s)
	for body > 0 && s[body-1] == '=' {
		body--
	}
	if pad := len(s) - body; len(s)%4 == 0 && pad <= 2 && body > 0 && (body%4 == 2 && pad == 2 || body%4 == 3 && pad == 1) {
		return fmt.Errorf("Invalid last symbol %d, offset %d.", s[body-1], base+body-1)
	}
	return errors.New("Invalid padding")
}

// base64Answer is a framedJSON result being built: prefix, then n bytes as a base64 string,
// then a suffix. The bytes are read straight into data, the tail of the base64's place, and
// finish encodes them forward over themselves: a 32 MiB file costs one buffer and no copy.
type base64Answer struct {
	buf   []byte // framedRoom, prefix, the opening quote, the base64's place
	start int    // where the base64's place begins
	data  []byte // where the n bytes go: its last n bytes
}

// newBase64Answer makes room for a result of prefix, n bytes of base64 and at most maxSuffix
// more bytes.
func newBase64Answer(prefix string, n, maxSuffix int) *base64Answer {
	start := framedRoom + len(prefix) + 1
	end := start + base64.StdEncoding.EncodedLen(n)
	buf := make([]byte, end, end+1+maxSuffix+1) // the closing quote, suffix, the reply's '}'
	copy(buf[framedRoom:], prefix)
	buf[start-1] = '"'
	return &base64Answer{buf: buf, start: start, data: buf[end-n : end]}
}

// base64Chunk is how many bytes finish encodes at a time (a multiple of three).
const base64Chunk = 48 << 10

// finish encodes the first m bytes of data (m ≤ n: a file may have shrunk), then closes the
// string and appends suffix. Three bytes become four, and the bytes sit at least n/3 past
// where their encoding starts, so the encoding never overtakes the bytes still to be read.
// Each chunk is copied out first, so nothing depends on how encoding/base64 treats
// overlapping slices.
func (a *base64Answer) finish(m int, suffix string) framedJSON {
	out := a.start
	chunk := make([]byte, min(m, base64Chunk))
	for i := 0; i < m; i += len(chunk) {
		c := copy(chunk, a.data[i:min(m, i+len(chunk))])
		base64.StdEncoding.Encode(a.buf[out:], chunk[:c])
		out += base64.StdEncoding.EncodedLen(c)
	}
	b := append(a.buf[:out], '"')
	return framedJSON{buf: append(b, suffix...), head: framedRoom}
}
