package main

// Path parameters (docs/protocol.md §7.1): file: URIs, read as WHATWG URLs just as the reference
// reads them, and native absolute paths (an extension, §11); answers are file: URIs.
//
//	file:///abs/path  FILE:///abs  file:/abs  file://localhost/abs  file:tmp (= /tmp)
//	%XX decoded (%2F too; a "%" not followed by two hex digits is itself), "\" is "/",
//	tab, CR and LF dropped, "." ".." "//" segments and a trailing "/" normalised
//	/abs/path                       native absolute path, taken as it is
//	rejected while decoding params: relative or empty, another scheme, ?query, #fragment, %00
//	rejected when used:             a host other than localhost, a Windows drive ("C:", "C|")
//	                                as the first segment
//
// Answers render a path as the reference's URL library does (fileURI): every byte but the
// controls, space, non-ASCII and " # % < > ? \ ` { } stays as it is.

import (
	"path"
	"runtime"
	"strings"
)

// pathError is a path parameter that cannot be used. atUse distinguishes the errors the
// reference raises when the path is used (a foreign host or drive) from syntax errors.
type pathError struct {
	msg   string
	atUse bool
}

func (e *pathError) Error() string { return e.msg }

// parsePath turns a path parameter into a clean native absolute path.
func parsePath(s string) (string, error) {
	if strings.HasPrefix(s, "/") {
		if strings.IndexByte(s, 0) >= 0 {
			return "", &pathError{msg: "'" + s + "' is invalid on '" + runtime.GOOS + "'"}
		}
		return path.Clean(s), nil
	}
	scheme, rest, ok := strings.Cut(whatwgTrim(s), ":")
	if !ok || scheme == "" || !validScheme(scheme) {
		return "", &pathError{msg: "invalid URI: relative URL without a base"}
	}
	if !strings.EqualFold(scheme, "file") {
		return "", &pathError{msg: "unsupported path URI scheme `" + strings.ToLower(scheme) + "`"}
	}
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		return "", &pathError{msg: "fragments are not allowed in path URIs"}
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		return "", &pathError{msg: "query parameters are not allowed in path URIs"}
	}
	host, rawPath := splitFileAuthority(strings.ReplaceAll(rest, `\`, "/"))
	invalid := func(atUse bool) error {
		return &pathError{msg: "'" + s + "' is invalid on '" + runtime.GOOS + "'", atUse: atUse}
	}
	p := percentDecode(rawPath)
	if strings.IndexByte(p, 0) >= 0 {
		return "", invalid(false)
	}
	cleanRaw := path.Clean("/" + rawPath)
	if host != "" && !strings.EqualFold(host, "localhost") || hasDriveSegment(cleanRaw) {
		return "", invalid(true)
	}
	if p == rawPath { // no escapes: the path is cleaned already
		return cleanRaw, nil
	}
	return path.Clean("/" + p), nil
}

// whatwgTrim drops what a WHATWG URL parser ignores: leading and trailing controls and spaces,
// and every tab, CR and LF.
func whatwgTrim(s string) string {
	s = strings.TrimFunc(s, func(r rune) bool { return r <= ' ' })
	if strings.ContainsAny(s, "\t\r\n") {
		s = strings.NewReplacer("\t", "", "\r", "", "\n", "").Replace(s)
	}
	return s
}

// splitFileAuthority splits what follows "file:" into the host of a "//host" authority and the
// path.
func splitFileAuthority(rest string) (host, p string) {
	after, ok := strings.CutPrefix(rest, "//")
	if !ok {
		return "", rest
	}
	if i := strings.IndexByte(after, '/'); i >= 0 {
		return after[:i], after[i:]
	}
	return after, "/"
}

// hasDriveSegment says whether the first segment of a URI path, cleaned ("." and ".."
// resolved), is a Windows drive ("C:" or "C|"): the reference takes such a URI for a Windows
// path and refuses it on other systems.
func hasDriveSegment(cleanRaw string) bool {
	first, _, _ := strings.Cut(strings.TrimPrefix(cleanRaw, "/"), "/")
	return len(first) == 2 && isASCIILetter(first[0]) && (first[1] == ':' || first[1] == '|')
}

// percentDecode decodes %XX escapes as a WHATWG URL parser does: a "%" not followed by two hex
// digits stays as it is.
func percentDecode(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isASCIILetter(c) && (i == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

func isHex(c byte) bool { return c >= '0' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'f' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c | 0x20 - 'a' + 10
}

// fileURI renders a native absolute path as a file: URI. It escapes exactly what the
// reference's URL library escapes in a path segment, so that paths in answers read the same:
// controls, space, non-ASCII bytes and " # % < > ? \ ` { }.
func fileURI(p string) string {
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, 0, len("file://")+len(p)+8)
	b = append(b, "file://"...)
	for i := 0; i < len(p); i++ {
		if c := p[i]; uriSegmentEscape(c) {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&0xf])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

// uriSegmentEscape says whether a path byte is percent-encoded in a file: URI.
func uriSegmentEscape(c byte) bool {
	return c <= ' ' || c >= 0x7f || strings.IndexByte("\"#%<>?\\`{}", c) >= 0
}

// paramPath parses a path parameter for an fs method: syntax errors are -32602, a path that
// is not usable on this host -32600 (docs/protocol.md §7.1).
// checkPathSyntax refuses, as a -32602, a path parameter the reference refuses while it
// decodes params: before the lifecycle gate, in the order of the fields.
func checkPathSyntax(s string) error {
	if _, err := parsePath(s); err != nil && !err.(*pathError).atUse {
		return errInvalidParams("%s", err)
	}
	return nil
}

func paramPath(s string) (string, error) {
	p, err := parsePath(s)
	if err != nil {
		if err.(*pathError).atUse {
			return "", errInvalidRequest("%s", err)
		}
		return "", errInvalidParams("%s", err)
	}
	return p, nil
}
