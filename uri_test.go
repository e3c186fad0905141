package main

import (
	"path"
	"runtime"
	"strings"
	"testing"
)

// TestParsePathForms checks the path forms of docs/protocol.md §7.1.
func TestParsePathForms(t *testing.T) {
	invalid := func(s string) string { return "'" + s + "' is invalid on '" + runtime.GOOS + "'" }
	for _, tt := range []struct {
		in, want string // want: the native path, or the error message
		code     int    // 0: accepted
	}{
		{"file:///abs/path", "/abs/path", 0},
		{"FILE:///abs", "/abs", 0},
		{"File:/abs", "/abs", 0},
		{"file://localhost/abs", "/abs", 0},
		{"file://LOCALHOST/abs", "/abs", 0},
		{"file://localhost", "/", 0},
		{"file:tmp", "/tmp", 0},
		{"file:///a%20b/%61", "/a b/a", 0},
		{"file:///a%2Fb", "/a/b", 0},
		{"file:///a/./b/../c//d/", "/a/c/d", 0},
		{"file:///../..", "/", 0},
		{"file:///", "/", 0},
		{"/native/abs", "/native/abs", 0},
		{"/native/../x/", "/x", 0},
		{"//double", "/double", 0},
		{"/C:/x", "/C:/x", 0}, // a native path may look like anything
		{"relative/path", "invalid URI: relative URL without a base", codeInvalidParams},
		{"", "invalid URI: relative URL without a base", codeInvalidParams},
		{"1abc:/x", "invalid URI: relative URL without a base", codeInvalidParams},
		{"http://host/x", "unsupported path URI scheme `http`", codeInvalidParams},
		{"HTTPS://host/x", "unsupported path URI scheme `https`", codeInvalidParams},
		{"file:///x?y=1", "query parameters are not allowed in path URIs", codeInvalidParams},
		{"file:///x#frag", "fragments are not allowed in path URIs", codeInvalidParams},
		{"file:///x%zz", "/x%zz", 0}, // a bad escape is text, as in a WHATWG parser
		{"file:///100%", "/100%", 0},
		{"file:///a%2", "/a%2", 0},
		{"file:///a\\b", "/a/b", 0}, // "\" separates segments in a file: URI
		{"file:///a%5Cb", "/a\\b", 0},
		{"file:///a\tb\r\n", "/ab", 0},
		{" \x01file:///x ", "/x", 0},
		{"file:///C:foo", "/C:foo", 0}, // not a drive: the segment is longer
		{"file:///C%3A/x", "/C:/x", 0}, // not a drive: the colon is escaped
		{"file:///x/C:", "/x/C:", 0},
		{"file:///home/user/%00", invalid("file:///home/user/%00"), codeInvalidParams},
		{"/nul\x00byte", invalid("/nul\x00byte"), codeInvalidParams},
		{"file://127.0.0.1/tmp", invalid("file://127.0.0.1/tmp"), codeInvalidRequest},
		{"file://server/share", invalid("file://server/share"), codeInvalidRequest},
		{"file:///C:/x", invalid("file:///C:/x"), codeInvalidRequest},
		{"file:///c:", invalid("file:///c:"), codeInvalidRequest},
		{"file:///C|/x", invalid("file:///C|/x"), codeInvalidRequest},
		{"file:////C:/x", invalid("file:////C:/x"), codeInvalidRequest},
		{"file:///x/../C:/y", invalid("file:///x/../C:/y"), codeInvalidRequest},
		{"file:C:/x", invalid("file:C:/x"), codeInvalidRequest},
		{"file:\\\\server\\share", invalid("file:\\\\server\\share"), codeInvalidRequest},
	} {
		got, err := paramPath(tt.in)
		switch {
		case tt.code == 0 && (err != nil || got != tt.want):
			t.Errorf("%q: got %q, %v; want %q", tt.in, got, err, tt.want)
		case tt.code != 0 && err == nil:
			t.Errorf("%q: accepted as %q, want error %d %q", tt.in, got, tt.code, tt.want)
		case tt.code != 0:
			if re := toRPCError(err); re.Code != tt.code || re.Message != tt.want {
				t.Errorf("%q: got %d %q, want %d %q", tt.in, re.Code, re.Message, tt.code, tt.want)
			}
		}
	}
}

func TestFileURIEncodesWhatAPathMayHold(t *testing.T) {
	for p, want := range map[string]string{
		"/":                 "file:///",
		"/home/user":        "file:///home/user",
		"/a b/100%/q?#":     "file:///a%20b/100%25/q%3F%23",
		"/caf\u00e9":        "file:///caf%C3%A9",
		"/bad\xffutf8":      "file:///bad%FFutf8",
		"/semi;colon:plus+": "file:///semi;colon:plus+",
		// The reference's URL library leaves these as they are; Go's url package would not.
		"/a(1)[2]!'*^|~$&,=@": "file:///a(1)[2]!'*^|~$&,=@",
		"/back\\slash\t\x7f":  "file:///back%5Cslash%09%7F",
		"/q\"<>`{}":           "file:///q%22%3C%3E%60%7B%7D",
	} {
		if got := fileURI(p); got != want {
			t.Errorf("fileURI(%q) = %q, want %q", p, got, want)
		}
		if back, err := parsePath(fileURI(p)); err != nil || back != p {
			t.Errorf("parsePath(fileURI(%q)) = %q, %v", p, back, err)
		}
	}
}

// FuzzParsePath checks that no input makes parsePath panic, that what it accepts is a clean
// absolute path, and that fileURI and parsePath are inverse on every clean path (but the
// Windows drive forms the reference refuses in URIs).
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{
		"file:///abs/path", "FILE:///abs", "file:/abs", "file://localhost/abs", "file:tmp",
		"file:///a%20b/%2F", "/native/../x", "relative", "", "http://x/y", "file:///x?y",
		"file:///x#y", "file:///%00", "file://host/x", "file:///C:/x", "file:", "file://",
		"file:%", "/a:b", "//x", "\xff", "file:///a\\b", "file:///C|/x", "file:///%zz", "file:\tx",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if p, err := parsePath(s); err == nil {
			if !strings.HasPrefix(p, "/") || path.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
				t.Fatalf("parsePath(%q) = %q: not a clean absolute path", s, p)
			}
		} else if _, ok := err.(*pathError); !ok {
			t.Fatalf("parsePath(%q): error of type %T", s, err)
		}
		p := path.Clean("/" + s)
		if strings.IndexByte(p, 0) >= 0 || hasDriveSegment(p) {
			return
		}
		if back, err := parsePath(fileURI(p)); err != nil || back != p {
			t.Fatalf("parsePath(fileURI(%q)) = %q, %v (uri %q)", p, back, err, fileURI(p))
		}
	})
}
