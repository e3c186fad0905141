package main

// Path parameters (protocol.md §6.1). 0.169 takes only file: URIs; the SEED contract also
// promises native absolute paths. We accept both and answer with file: URIs.
//
//	file:///abs/path  FILE:///abs  file:/abs  file://localhost/abs  file:tmp (= /tmp)
//	%XX decoded (%2F too), "." ".." "//" segments and a trailing "/" normalised
//	/abs/path                       native absolute path (SEED)
//	rejected while decoding params: relative or empty, another scheme, ?query, #fragment, %00
//	rejected when used:             a host other than localhost, a Windows drive path

import (
	"net/url"
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
	scheme, rest, ok := strings.Cut(s, ":")
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
	host := ""
	if strings.HasPrefix(rest, "//") {
		rest = rest[2:]
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			host, rest = rest, "/"
		} else {
			host, rest = rest[:i], rest[i:]
		}
	}
	p, err := url.PathUnescape(rest)
	if err != nil {
		return "", &pathError{msg: "invalid URI: " + err.Error()}
	}
	invalid := &pathError{msg: "'" + s + "' is invalid on '" + runtime.GOOS + "'", atUse: true}
	if strings.IndexByte(p, 0) >= 0 {
		invalid.atUse = false
		return "", invalid
	}
	if host != "" && !strings.EqualFold(host, "localhost") {
		return "", invalid
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	p = path.Clean(p)
	if len(p) >= 3 && p[2] == ':' && isASCIILetter(p[1]) { // /C:/x
		return "", invalid
	}
	return p, nil
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

// fileURI renders a native absolute path as a file: URI, percent-encoding as needed.
func fileURI(p string) string {
	return (&url.URL{Scheme: "file", Path: p}).String()
}

// paramPath parses a path parameter for an fs method: syntax errors are -32602, a path that
// is not usable on this host -32600 (protocol.md §6.1).
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
