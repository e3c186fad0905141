package main

// A minimal walker over the members of one JSON object. The bench receives hundreds of
// megabytes of base64 inside JSON; running encoding/json over every process/output
// notification would make the client, not the server, the bottleneck on a 2-core machine.
// The walker only finds member boundaries: strings are skipped with bytes.IndexByte, so a
// 43 MB dataBase64 value costs a memchr, not a decoder.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

var errNotObject = errors.New("not a JSON object")

// members calls fn with the raw key (between its quotes, escapes untouched) and the raw value
// of each member of the object in b, in order, until fn returns false.
func members(b []byte, fn func(key, val []byte) bool) error {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return errNotObject
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return fmt.Errorf("object key expected at offset %d", i)
		}
		end, err := skipString(b, i)
		if err != nil {
			return err
		}
		key := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return fmt.Errorf("':' expected at offset %d", i)
		}
		i = skipSpace(b, i+1)
		vend, err := skipValue(b, i)
		if err != nil {
			return err
		}
		if !fn(key, b[i:vend]) {
			return nil
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return errors.New("unterminated object")
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return nil
		default:
			return fmt.Errorf("',' or '}' expected at offset %d", i)
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset just past the string that opens at b[i].
func skipString(b []byte, i int) (int, error) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, errors.New("unterminated string")
		}
		k += j
		n := 0
		for p := k - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return k + 1, nil
		}
		j = k + 1
	}
}

// skipValue returns the offset just past the value that starts at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errors.New("value expected")
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		return 0, errors.New("unterminated object or array")
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j, nil
		}
		j++
	}
	if j == i {
		return 0, errors.New("value expected")
	}
	return j, nil
}

// stringValue returns the contents of a raw JSON string. Without escapes it is a sub-slice
// of raw; with escapes it is decoded by encoding/json.
func stringValue(raw []byte) ([]byte, error) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, fmt.Errorf("string expected, got %.40q", raw)
	}
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') < 0 {
		return in, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// uintValue parses a raw JSON unsigned integer.
func uintValue(raw []byte) (uint64, error) {
	return strconv.ParseUint(string(raw), 10, 64)
}

// field returns the raw value of member key of the object obj, or nil.
func field(obj []byte, key string) []byte {
	var v []byte
	members(obj, func(k, val []byte) bool {
		if string(k) == key {
			v = val
			return false
		}
		return true
	})
	return v
}

// base64Len is the number of bytes the padded standard base64 text s decodes to.
func base64Len(s []byte) (int, error) {
	if len(s)%4 != 0 {
		return 0, fmt.Errorf("base64 length %d is not a multiple of 4", len(s))
	}
	n := len(s) / 4 * 3
	if len(s) > 0 && s[len(s)-1] == '=' {
		n--
		if s[len(s)-2] == '=' {
			n--
		}
	}
	return n, nil
}

// envelope is the top-level members of one JSON-RPC message, as slices of it.
type envelope struct{ id, method, params, result, err []byte }

// splitEnvelope finds the members of msg that a JSON-RPC peer routes on.
func splitEnvelope(msg []byte) (envelope, error) {
	var e envelope
	err := members(msg, func(k, v []byte) bool {
		switch string(k) {
		case "id":
			e.id = v
		case "method":
			e.method = v
		case "params":
			e.params = v
		case "result":
			e.result = v
		case "error":
			e.err = v
		}
		return true
	})
	return e, err
}
