package main

// What serde_json refuses in a message and encoding/json lets through: a member name that
// repeats within one object, text that is not UTF-8, and a \u escape of half a UTF-16
// surrogate pair (docs/protocol.md §3.1). The reference answers each as a parse error of the
// whole message; so do we, with its words and its column.
//
//	text                         error                                      column
//	a name twice in one object,  duplicate JSON object key `NAME`           the closing quote
//	  at any depth (compared                                                 of the second
//	  after unescaping)
//	bytes not UTF-8 in a string  invalid unicode code point                 the closing quote
//	\uD800–\uDBFF not followed   unexpected end of hex escape               the byte after it
//	  by a \u escape
//	\uD800–\uDBFF then a \u      lone leading surrogate in hex escape       the end of the second
//	  escape of no low half                                                  escape
//	\uDC00–\uDFFF alone          lone leading surrogate in hex escape       the end of the escape
//
// Like serde, which reads the message front to back, the first of these (or of the syntax
// errors encoding/json finds) by position is the one reported, and nothing after the first
// JSON value is looked at. A websocket text frame was checked for UTF-8 when it was read (a
// bad one closes the connection, as RFC 6455 asks), so only other messages are; and the
// surrogate scan skips a params value larger than unicodeScanLimit (a file's base64: it has
// no escapes).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// unicodeScanLimit is the largest params value scanned for surrogate escapes.
const unicodeScanLimit = 64 << 10

// parseMessage classifies one message (parseIncoming) and refuses, with the reference's
// words, what it would refuse and encoding/json accepts. Of two errors in the text, the one
// that comes first is reported; an error in the text comes before any about the message's
// shape.
func parseMessage(msg []byte, knownUTF8 bool) (in incoming, name string, err error) {
	if key, end, ok := firstDuplicateKey(msg); ok && cleanPrefix(msg[:end], knownUTF8) {
		return in, "", textError(msg, end, "duplicate JSON object key `"+key+"`")
	}
	in, name, err = parseIncoming(msg)
	terr := checkJSONText(msg, in.Params, knownUTF8)
	var syntax *jsonTextError
	switch {
	case terr == nil:
		return in, name, err
	case errors.As(err, &syntax) && syntax.end < terr.end:
		return in, "", err
	}
	return in, "", terr
}

// cleanPrefix reports whether the start of a message, up to a duplicate key, holds no error
// of its own that would be reported first.
func cleanPrefix(prefix []byte, knownUTF8 bool) bool {
	var v any
	var se *json.SyntaxError
	err := json.Unmarshal(prefix, &v) // the prefix ends inside an object: at best it is cut short
	if !errors.As(err, &se) || se.Offset < int64(len(prefix)) {
		return false
	}
	return checkJSONText(prefix, nil, knownUTF8) == nil
}

// maxNesting is as deep as firstDuplicateKey follows a message: encoding/json's own limit,
// past which it reports the syntax error.
const maxNesting = 10000

// maxInlineKeys is how many names of one object firstDuplicateKey compares pairwise before it
// indexes them in a map (an env object can hold hundreds).
const maxInlineKeys = 16

// dupScan is firstDuplicateKey's state: the containers open around the current position and
// the member names of the open objects.
type dupScan struct {
	stack []dupContainer
	names [][2]int // [start, end) of each name, quotes included
}

// dupContainer is an open object or array.
type dupContainer struct {
	first int                 // index into names of the object's first member name
	index map[string]struct{} // the names, once there are more than maxInlineKeys
	array bool
}

// What firstDuplicateKey expects next.
const (
	dupValue     = iota // a value
	dupNameOrEnd        // after '{': a name or '}'
	dupName             // after ',' in an object
	dupColon            // after a name
	dupNext             // after a value: ',' or the end of the container
)

// firstDuplicateKey finds the first member name that repeats within one object of the JSON
// value msg starts with, at any depth, and the offset just past its closing quote. ok is false
// when there is none before the value ends or its structure breaks (the syntax error is then
// for encoding/json to report). Names are compared as raw bytes unless one holds an escape; a
// message without objects of more than maxInlineKeys members allocates nothing.
func firstDuplicateKey(msg []byte) (key string, end int, ok bool) {
	var (
		stackBuf [16]dupContainer
		nameBuf  [64][2]int
		d        = dupScan{stack: stackBuf[:0], names: nameBuf[:0]}
		state    = dupValue
	)
	for i := skipSpace(msg, 0); i < len(msg); i = skipSpace(msg, i) {
		c := msg[i]
		switch {
		case (c == '{' || c == '[') && len(d.stack) == maxNesting:
			return "", 0, false
		case state == dupValue:
			if state, i = d.value(msg, i); i < 0 {
				return "", 0, false
			}
		case (state == dupNameOrEnd || state == dupName) && c == '"':
			e := skipString(msg, i)
			if e < 0 {
				return "", 0, false
			}
			top := &d.stack[len(d.stack)-1]
			if k, dup := addName(msg, &d.names, top.first, &top.index, i, e); dup {
				return k, e, true
			}
			state, i = dupColon, e
		case state == dupColon && c == ':':
			state, i = dupValue, i+1
		case state == dupNext && len(d.stack) > 0 && c == ',':
			state, i = dupValue, i+1
			if !d.stack[len(d.stack)-1].array {
				state = dupName
			}
		case state == dupNext && len(d.stack) > 0, state == dupNameOrEnd && c == '}':
			if !d.close(c) {
				return "", 0, false
			}
			state, i = dupNext, i+1
		default: // a syntax error, or what follows the first value
			return "", 0, false
		}
		if state == dupNext && len(d.stack) == 0 {
			return "", 0, false // the first value ended
		}
	}
	return "", 0, false
}

// value starts the value at msg[i]: it opens a container, or skips a string or a scalar. It
// returns what comes next and where, or i < 0 for a malformed value.
func (d *dupScan) value(msg []byte, i int) (state, next int) {
	switch c := msg[i]; {
	case c == '{':
		d.stack = append(d.stack, dupContainer{first: len(d.names)})
		return dupNameOrEnd, i + 1
	case c == '[':
		d.stack = append(d.stack, dupContainer{array: true})
		if j := skipSpace(msg, i+1); j < len(msg) && msg[j] == ']' {
			return dupNext, j // an empty array: closed as after a value
		}
		return dupValue, i + 1
	case c == '"':
		return dupNext, skipString(msg, i)
	case jsonScalarByte(c):
		for i < len(msg) && jsonScalarByte(msg[i]) {
			i++
		}
		return dupNext, i
	}
	return dupValue, -1
}

// close ends the innermost container with c, forgetting an object's names; false when c does
// not close it.
func (d *dupScan) close(c byte) bool {
	top := d.stack[len(d.stack)-1]
	if top.array && c != ']' || !top.array && c != '}' {
		return false
	}
	if !top.array {
		d.names = d.names[:top.first]
	}
	d.stack = d.stack[:len(d.stack)-1]
	return true
}

// addName records the name msg[start:end] (quotes included) as a member of the object whose
// names begin at names[first], and reports whether the object already has it.
func addName(msg []byte, names *[][2]int, first int, index *map[string]struct{}, start, end int) (string, bool) {
	raw := msg[start:end]
	escaped := bytes.IndexByte(raw, '\\') >= 0
	if *index == nil && !escaped {
		for _, n := range (*names)[first:] {
			prev := msg[n[0]:n[1]]
			if bytes.Equal(prev, raw) {
				return string(raw[1 : len(raw)-1]), true
			}
			if bytes.IndexByte(prev, '\\') >= 0 && unquoteName(prev) == string(raw[1:len(raw)-1]) {
				return string(raw[1 : len(raw)-1]), true
			}
		}
		*names = append(*names, [2]int{start, end})
		if len(*names)-first <= maxInlineKeys {
			return "", false
		}
	}
	if *index == nil { // build the index from the names so far
		*index = make(map[string]struct{}, 2*maxInlineKeys)
		for _, n := range (*names)[first:] {
			(*index)[unquoteName(msg[n[0]:n[1]])] = struct{}{}
		}
		if !escaped {
			return "", false // raw was appended and indexed above: no duplicate inline
		}
	}
	k := unquoteName(raw)
	if _, dup := (*index)[k]; dup {
		return k, true
	}
	(*index)[k] = struct{}{}
	return "", false
}

// unquoteName decodes a JSON string with its quotes; a malformed one decodes to itself, which
// no well-formed name equals (its syntax error is reported instead).
func unquoteName(raw []byte) string {
	var s string
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	if json.Unmarshal(raw, &s) != nil {
		return string(raw)
	}
	return s
}

// checkJSONText returns the reference's parse error for msg, or nil. params is the params
// value within msg (nil when absent).
func checkJSONText(msg, params []byte, knownUTF8 bool) *jsonTextError {
	if !knownUTF8 && !utf8.Valid(msg) {
		return textError(msg, firstInvalidUTF8String(msg), "invalid unicode code point")
	}
	if bytes.IndexByte(msg, '\\') < 0 {
		return nil
	}
	skipFrom, skipTo := -1, -1
	if len(params) > unicodeScanLimit {
		skipFrom = cap(msg) - cap(params)
		skipTo = skipFrom + len(params)
	}
	for i := 0; i < len(msg); i++ {
		if i == skipFrom {
			i = skipTo - 1
			continue
		}
		if msg[i] != '\\' {
			continue
		}
		if i+1 >= len(msg) {
			return nil
		}
		if msg[i+1] != 'u' {
			i++ // \" \\ and the rest
			continue
		}
		r, ok := hex4(msg, i+2)
		if !ok {
			return nil // not ours to report: the JSON parser will
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return textError(msg, i+6, "lone leading surrogate in hex escape")
		case r >= 0xD800 && r <= 0xDBFF:
			j := i + 6
			if j+1 >= len(msg) || msg[j] != '\\' || msg[j+1] != 'u' {
				return textError(msg, j+1, "unexpected end of hex escape")
			}
			lo, ok := hex4(msg, j+2)
			if !ok {
				return nil
			}
			if lo < 0xDC00 || lo > 0xDFFF {
				return textError(msg, j+6, "lone leading surrogate in hex escape")
			}
			i = j + 5
		default:
			i += 5
		}
	}
	return nil
}

// hex4 decodes the four hex digits at msg[i:].
func hex4(msg []byte, i int) (rune, bool) {
	if i+4 > len(msg) {
		return 0, false
	}
	var r rune
	for _, c := range msg[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// firstInvalidUTF8String is the offset just past the closing quote of the string holding
// msg's first invalid byte (or of the message, outside any string).
func firstInvalidUTF8String(msg []byte) int {
	bad := 0
	for bad < len(msg) {
		r, n := utf8.DecodeRune(msg[bad:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		bad += n
	}
	for i := bad; i < len(msg); i++ {
		switch msg[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(msg)
}

// jsonTextError is an error in a message's text, worded as serde words it: what, and the
// line and column where it was found.
type jsonTextError struct {
	what      string
	end       int // bytes consumed when it was found
	line, col int
}

func (e *jsonTextError) Error() string {
	return fmt.Sprintf("%s at line %d column %d", e.what, e.line, e.col)
}

// textError is the error what, found when end bytes of msg were consumed. Columns count bytes
// from the start of the line, as serde counts them.
func textError(msg []byte, end int, what string) *jsonTextError {
	end = min(end, len(msg))
	e := &jsonTextError{what: what, end: end, line: 1}
	for _, c := range msg[:end] {
		if c == '\n' {
			e.line, e.col = e.line+1, 0
		} else {
			e.col++
		}
	}
	return e
}

// jsonSyntaxError describes invalid JSON the way the reference does: what (in encoding/json's
// words, not serde's) and where.
func jsonSyntaxError(b []byte) error {
	var v any
	err := json.Unmarshal(b, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return textError(b, int(se.Offset), strings.TrimPrefix(se.Error(), "json: "))
	}
	if err != nil {
		return err
	}
	return errors.New("invalid JSON-RPC message")
}
