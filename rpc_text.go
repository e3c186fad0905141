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
//
// The file also holds the lexical primitives every reader of a message's text shares (the
// checks above, the envelope's classification and the params decoder in rpc_message.go):
// skipping a value, a string or space, and walking an object's members without decoding them.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// unicodeScanLimit is the largest params value scanned for surrogate escapes.
const unicodeScanLimit = 64 << 10

// parseMessage classifies one message (parseIncoming) and refuses, with the reference's
// words, what it would refuse and encoding/json accepts. Of two errors in the text, the one
// that comes first is reported; an error in the text comes before any about the message's
// shape.
// scan holds buffers reused from one message to the next (a connection's reader keeps one);
// nil allocates them.
func parseMessage(msg []byte, knownUTF8 bool, scan *textScan) (in incoming, name string, err error) {
	if scan == nil {
		scan = new(textScan)
	}
	if what, end, ok := scan.scanText(msg); ok && cleanPrefix(msg[:end], knownUTF8) {
		return in, "", textError(msg, end, what)
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

// cleanPrefix reports whether the start of a message, up to an error scanText found, holds
// no error of its own that would be reported first.
func cleanPrefix(prefix []byte, knownUTF8 bool) bool {
	var v any
	var se *json.SyntaxError
	err := json.Unmarshal(prefix, &v) // the prefix ends inside an object: at best it is cut short
	if !errors.As(err, &se) || se.Offset < int64(len(prefix)) {
		return false
	}
	return checkJSONText(prefix, nil, knownUTF8) == nil
}

// Limits the reference puts on the JSON of a message, checked by the same scan as duplicate
// names: past them it refuses the message, so that no message costs unbounded work.
const (
	maxJSONValues  = 262144 // values in one message
	maxJSONNesting = 127    // containers open at once; opening one more is refused
	maxInlineKeys  = 16     // names of one object compared pairwise before they are indexed
)

// textScan is scanText's state: the containers open around the current position, the member
// names of the open objects, and buffers reused from one scan to the next, so that a reader
// that keeps one scans ordinary messages without allocating.
type textScan struct {
	msg    []byte
	stack  []scanContainer
	names  [][2]int // [start, end) of each name, quotes included
	values int
	a, b   []byte                // names unescaped for comparison
	spare  []map[string]struct{} // indexes of closed objects, cleared for reuse
}

// scanContainer is an open object or array.
type scanContainer struct {
	first int                 // index into names of the object's first member name
	index map[string]struct{} // the names, once there are more than maxInlineKeys
	array bool
}

// What scanText expects next.
const (
	scanValue     = iota // a value
	scanNameOrEnd        // after '{': a name or '}'
	scanName             // after ',' in an object
	scanColon            // after a name
	scanNext             // after a value: ',' or the end of the container
)

// scanText finds, in the JSON value msg starts with, the first of: a member name that
// repeats within one object (at any depth), a value past maxJSONValues, a container past
// maxJSONNesting. It returns the reference's words for it and the offset its column counts
// to. found is false when there is none before the value ends or its structure breaks (the
// syntax error is then for encoding/json to report). Names are compared as raw bytes unless
// one holds an escape; an ordinary message allocates nothing.
func (d *textScan) scanText(msg []byte) (what string, end int, found bool) {
	d.reset(msg)
	state := scanValue
	for i := skipSpace(msg, 0); i < len(msg); i = skipSpace(msg, i) {
		c := msg[i]
		switch {
		case state == scanValue:
			if d.values++; d.values > maxJSONValues {
				return fmt.Sprintf("JSON-RPC message exceeds the limit of %d JSON values", maxJSONValues), i, true
			}
			if (c == '{' || c == '[') && len(d.stack) == maxJSONNesting {
				return "recursion limit exceeded", i + 1, true
			}
			if state, i = d.value(i); i < 0 {
				return "", 0, false
			}
		case (state == scanNameOrEnd || state == scanName) && c == '"':
			e := skipString(msg, i)
			if e < 0 {
				return "", 0, false
			}
			if k, dup := d.addName(i, e); dup {
				return "duplicate JSON object key `" + k + "`", e, true
			}
			state, i = scanColon, e
		case state == scanColon && c == ':':
			state, i = scanValue, i+1
		case state == scanNext && len(d.stack) > 0 && c == ',':
			state, i = scanValue, i+1
			if !d.stack[len(d.stack)-1].array {
				state = scanName
			}
		case state == scanNext && len(d.stack) > 0, state == scanNameOrEnd && c == '}':
			if !d.close(c) {
				return "", 0, false
			}
			state, i = scanNext, i+1
		default: // a syntax error, or what follows the first value
			return "", 0, false
		}
		if state == scanNext && len(d.stack) == 0 {
			return "", 0, false // the first value ended
		}
	}
	return "", 0, false
}

// reset readies d for msg, keeping its buffers and the indexes of objects left open.
func (d *textScan) reset(msg []byte) {
	for _, c := range d.stack {
		if c.index != nil {
			clear(c.index)
			d.spare = append(d.spare, c.index)
		}
	}
	d.msg, d.stack, d.names, d.values = msg, d.stack[:0], d.names[:0], 0
}

// value starts the value at msg[i]: it opens a container, or skips a string or a scalar. It
// returns what comes next and where, or i < 0 for a malformed value.
func (d *textScan) value(i int) (state, next int) {
	msg := d.msg
	switch c := msg[i]; {
	case c == '{':
		d.stack = append(d.stack, scanContainer{first: len(d.names)})
		return scanNameOrEnd, i + 1
	case c == '[':
		d.stack = append(d.stack, scanContainer{array: true})
		if j := skipSpace(msg, i+1); j < len(msg) && msg[j] == ']' {
			return scanNext, j // an empty array: closed as after a value
		}
		return scanValue, i + 1
	case c == '"':
		return scanNext, skipString(msg, i)
	case jsonScalarByte(c):
		for i < len(msg) && jsonScalarByte(msg[i]) {
			i++
		}
		return scanNext, i
	}
	return scanValue, -1
}

// close ends the innermost container with c, forgetting an object's names; false when c does
// not close it.
func (d *textScan) close(c byte) bool {
	top := d.stack[len(d.stack)-1]
	if top.array && c != ']' || !top.array && c != '}' {
		return false
	}
	if !top.array {
		d.names = d.names[:top.first]
		if top.index != nil {
			clear(top.index)
			d.spare = append(d.spare, top.index)
		}
	}
	d.stack = d.stack[:len(d.stack)-1]
	return true
}

// addName records the name msg[start:end] (quotes included) as a member of the innermost
// object, and reports whether the object already has it (and its text, unescaped).
func (d *textScan) addName(start, end int) (string, bool) {
	top := &d.stack[len(d.stack)-1]
	raw := d.msg[start:end]
	name, plain := raw[1:len(raw)-1], bytes.IndexByte(raw, '\\') < 0
	if !plain {
		d.a = appendUnquoted(d.a[:0], raw)
		name = d.a
	}
	if top.index == nil {
		for _, n := range d.names[top.first:] {
			prev := d.msg[n[0]:n[1]]
			if bytes.IndexByte(prev, '\\') >= 0 {
				d.b = appendUnquoted(d.b[:0], prev)
				prev = d.b
			} else {
				prev = prev[1 : len(prev)-1]
			}
			if bytes.Equal(prev, name) {
				return string(name), true
			}
		}
		d.names = append(d.names, [2]int{start, end})
		if len(d.names)-top.first <= maxInlineKeys {
			return "", false
		}
		top.index = d.newIndex()
		for _, n := range d.names[top.first:] {
			top.index[string(appendUnquoted(d.b[:0], d.msg[n[0]:n[1]]))] = struct{}{}
		}
		return "", false
	}
	if _, dup := top.index[string(name)]; dup { // no allocation: the map lookup
		return string(name), true
	}
	top.index[string(name)] = struct{}{}
	return "", false
}

// newIndex returns an empty name index, reusing one of a closed object.
func (d *textScan) newIndex() map[string]struct{} {
	if n := len(d.spare); n > 0 {
		m := d.spare[n-1]
		d.spare = d.spare[:n-1]
		return m
	}
	return map[string]struct{}{}
}

// appendUnquoted appends the text of the JSON string raw (quotes included) to dst. A malformed
// escape is appended as it stands: such a name is a syntax error, reported before any
// duplicate.
func appendUnquoted(dst, raw []byte) []byte {
	s := raw[1 : len(raw)-1]
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			dst = append(dst, c)
			continue
		}
		i++
		switch s[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s, i+1)
			if !ok {
				dst = append(dst, '\\', 'u')
				continue
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if lo, ok := hex4(s, i+3); ok && i+2 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
					if dec := utf16.DecodeRune(r, lo); dec != utf8.RuneError {
						r, i = dec, i+6
					}
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // " \\ / and the malformed
			dst = append(dst, s[i])
		}
	}
	return dst
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

// topLevelValue returns the raw value of key in the JSON object obj, or nil.
func topLevelValue(obj []byte, key string) []byte {
	var found []byte
	scanObject(obj, func(k string, v []byte) bool {
		if k == key {
			found = v
			return false
		}
		return true
	})
	return found
}

// scanObject calls fn with each member of the JSON object obj, in order, until fn returns
// false. It checks the object's structure and skips values without decoding them (strings
// are skipped with bytes.IndexByte); whether a value is valid JSON is fn's business. It
// returns false for a malformed object or when fn stops.
func scanObject(obj []byte, fn func(key string, value []byte) bool) bool {
	i := skipSpace(obj, 1)
	if i < len(obj) && obj[i] == '}' {
		return skipSpace(obj, i+1) == len(obj)
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return false
		}
		end := skipString(obj, i)
		if end < 0 {
			return false
		}
		if hasControlByte(obj[i+1 : end-1]) {
			return false
		}
		key := knownKey(obj[i+1 : end-1])
		if strings.IndexByte(key, '\\') >= 0 && json.Unmarshal(obj[i:end], &key) != nil {
			return false
		}
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return false
		}
		i = skipSpace(obj, i+1)
		vend := skipValue(obj, i)
		if vend <= i || !fn(key, obj[i:vend]) {
			return false
		}
		i = skipSpace(obj, vend)
		switch {
		case i >= len(obj):
			return false
		case obj[i] == '}':
			return skipSpace(obj, i+1) == len(obj)
		case obj[i] != ',':
			return false
		}
		i = skipSpace(obj, i+1)
	}
}

// hasControlByte reports whether b holds a byte below 0x20, which a JSON string may only
// spell as an escape.
func hasControlByte(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// knownKey returns a member name as a string, without allocating for the names every
// message carries.
func knownKey(b []byte) string {
	switch string(b) {
	case "id":
		return "id"
	case "method":
		return "method"
	case "params":
		return "params"
	case "jsonrpc":
		return "jsonrpc"
	case "path":
		return "path"
	case "processId":
		return "processId"
	case "handleId":
		return "handleId"
	}
	return string(b)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the JSON string starting at b[i], or -1 if it is
// not terminated.
func skipString(b []byte, i int) int {
	for j := i + 1; ; {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		backslashes := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			backslashes++
		}
		if backslashes%2 == 0 {
			return j + 1
		}
		j++
	}
}

// skipValue returns the index just past the JSON value starting at b[i], or i if there is
// none. Nesting is followed by bracket depth only: the value's own validity is checked by
// whoever decodes it.
func skipValue(b []byte, i int) int {
	if i < len(b) && b[i] != '"' && b[i] != '{' && b[i] != '[' { // a number or a literal
		j := i
		for j < len(b) && jsonScalarByte(b[j]) {
			j++
		}
		return j
	}
	depth := 0
	for j := i; j < len(b); {
		switch b[j] {
		case '"':
			end := skipString(b, j)
			if end < 0 {
				return i
			}
			j = end
			if depth == 0 {
				return j
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return j
			}
			depth--
			if depth == 0 {
				return j + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return j
			}
		}
		j++
	}
	if depth != 0 {
		return i
	}
	return len(b)
}

// jsonScalarByte reports whether c may be part of a number or of true, false or null: a
// scalar ends at any other byte, so that bytes.TrimSpace in a decoder cannot make whitespace
// JSON does not know ("null\v", "\v{}") part of a value.
func jsonScalarByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}
