package main

// Every capability initialize advertises is backed by a test of its own (docs/protocol.md
// §9.1): the harness trusts the flags, so a flag reads true only while a test shows the
// feature working. New file: the rule and the tests of the flags that are not one method's.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestCapabilitiesAreBacked requires, for every capability that reads true, a test function
// TestCapability<Key> (the key with its first letter upper-cased) in this package's test
// files, whatever their build constraints.
func TestCapabilitiesAreBacked(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "TestCapability") {
				tests[fn.Name.Name] = true
			}
		}
	}
	for key, on := range capabilities() {
		r, n := utf8.DecodeRuneInString(key)
		name := "TestCapability" + string(unicode.ToUpper(r)) + key[n:]
		if on && !tests[name] {
			t.Errorf("capability %s reads true but no test %s backs it", key, name)
		}
	}
}

// TestCapabilityFsWatchMissing backs fsWatchMissing: a watch fires once when a missing file
// appears, and when a missing parent does.
func TestCapabilityFsWatchMissing(t *testing.T) {
	t.Run("file", TestFSWatchMissingSeesAFileAppearOnce)
	t.Run("parent", TestFSWatchMissingSeesAMissingParentAppear)
	t.Run("rearm", TestFSWatchMissingRearmsWhenTheAncestorGoes)
}

// TestCapabilityFileWriteStreaming backs fileWriteStreaming: fs/open in replace mode truncates
// the file in place, fs/writeBlock writes each block at its offset (out of order too), and
// the host file holds exactly the blocks once the handle is closed.
func TestCapabilityFileWriteStreaming(t *testing.T) {
	tc, root := fsSession(t)
	path := filepath.Join(root, "streamed.bin")
	fsWrite(t, path, "an older, longer content that replace must truncate")
	tc.mustCall("fs/open", map[string]any{"handleId": "w", "path": fileURI(path), "mode": "replace"})
	if got := fsReadString(t, path); got != "" {
		t.Errorf("after open in replace mode the file holds %q, want it truncated", got)
	}
	block := strings.Repeat("b", 64<<10)
	tc.mustCall("fs/writeBlock", map[string]any{"handleId": "w", "offset": len(block), "chunk": b64("tail")})
	tc.mustCall("fs/writeBlock", map[string]any{"handleId": "w", "offset": 0, "chunk": b64(block)})
	tc.mustCall("fs/close", map[string]any{"handleId": "w"})
	if got := fsReadString(t, path); got != block+"tail" {
		t.Errorf("the file holds %d bytes (%.20q…), want %d", len(got), got, len(block)+4)
	}
	if e := tc.callErr("fs/writeBlock", map[string]any{"handleId": "w", "offset": 0, "chunk": b64("x")}); e.Code != codeNotFound {
		t.Errorf("writeBlock after close: %d %s", e.Code, e.Message)
	}
}
