package main

// What serde_json refuses in a message and encoding/json lets through: text that is not
// UTF-8, and a \u escape of half a UTF-16 surrogate pair (docs: README, "Deviations"). The
// reference answers either as a parse error of the whole message; so do we, with its words
// and its column.
//
//	text                         error                                      column
//	bytes not UTF-8 in a string  invalid unicode code point                 the closing quote
//	\uD800–\uDBFF not followed   unexpected end of hex escape               the byte after it
//	  by a \u escape
//	\uD800–\uDBFF then a \u      lone leading surrogate in hex escape       the end of the second
//	  escape of no low half                                                  escape
//	\uDC00–\uDFFF alone          lone leading surrogate in hex escape       the end of the escape
//
// A websocket text frame was checked for UTF-8 when it was read (a bad one closes the
// connection, as RFC 6455 asks), so only other messages are; and the surrogate scan skips a
// params value larger than unicodeScanLimit (a file's base64: it has no escapes).

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// unicodeScanLimit is the largest params value scanned for surrogate escapes.
const unicodeScanLimit = 64 << 10

// utf8Checker is a transport whose last message is known to be valid UTF-8.
type utf8Checker interface{ lastMessageUTF8() bool }

// checkJSONText returns the reference's parse error for msg, or nil. params is the params
// value within msg (nil when absent).
func checkJSONText(msg, params []byte, knownUTF8 bool) error {
	if !knownUTF8 && !utf8.Valid(msg) {
		return unicodeError(msg, firstInvalidUTF8String(msg), "invalid unicode code point")
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
			return unicodeError(msg, i+6, "lone leading surrogate in hex escape")
		case r >= 0xD800 && r <= 0xDBFF:
			j := i + 6
			if j+1 >= len(msg) || msg[j] != '\\' || msg[j+1] != 'u' {
				return unicodeError(msg, j+1, "unexpected end of hex escape")
			}
			lo, ok := hex4(msg, j+2)
			if !ok {
				return nil
			}
			if lo < 0xDC00 || lo > 0xDFFF {
				return unicodeError(msg, j+6, "lone leading surrogate in hex escape")
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

// unicodeError words err at byte offset end (consumed bytes) as serde does.
func unicodeError(msg []byte, end int, what string) error {
	end = min(end, len(msg))
	line, col := 1, 0
	for _, c := range msg[:end] {
		if c == '\n' {
			line, col = line+1, 0
		} else {
			col++
		}
	}
	return fmt.Errorf("%s at line %d column %d", what, line, col)
}
