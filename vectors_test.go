package main

// The one format and the one reader of the test vectors under testdata/ (testdata/README.md;
// the model is age's internal/testkit). Every vector test reads its files with readVectors;
// what a case means (a session to replay, a frame to decode, a call and its answer, a golden
// listing) is up to the test that reads it.
//
// A file is a sequence of cases separated by blank lines. Each line of a case is one of:
//
//	# text         a comment, ignored
//	key: value     a field: the key is the text before the first colon, the value the rest,
//	               trimmed; a key appears once per case
//	>> text        a step: a message to send, text verbatim (spaces included)
//	<< text        a step: the next message expected, exactly
//	<~ text        a step: a regular expression the next message must match in full
//	<x text        a step: the connection ends (text is a remark)
//	---            a rule between groups of fields, for the eye only
//	-- name --     a raw section: every line up to the next section or the end of the file,
//	               verbatim; sections come last in a file and belong to its last case

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// vectorStep is one ">> ", "<< ", "<~ " or "<x " line of a case, in file order.
type vectorStep struct {
	kind string // ">>", "<<", "<~" or "<x"
	text string
	line int
}

// vectorSection is one "-- name --" section: its lines verbatim, newlines included.
type vectorSection struct {
	name, text string
}

// vectorCase is one case of a vector file.
type vectorCase struct {
	file     string
	line     int // where the case starts
	fields   map[string]string
	steps    []vectorStep
	sections []vectorSection
}

var (
	vectorKey         = regexp.MustCompile(`^[A-Za-z0-9_\[\]]+( [A-Za-z0-9_\[\]]+)*$`)
	vectorSectionLine = regexp.MustCompile(`^-- (\S(.*\S)?) --$`)
)

// vectorSteps are the step kinds, each written as its two characters and a space.
var vectorSteps = map[string]bool{">>": true, "<<": true, "<~": true, "<x": true}

// parseVectors splits data, the contents of file, into its cases.
func parseVectors(file string, data string) ([]vectorCase, error) {
	var cases []vectorCase
	var cur *vectorCase
	open := func(n int) *vectorCase {
		if cur == nil {
			cases = append(cases, vectorCase{file: file, line: n, fields: map[string]string{}})
			cur = &cases[len(cases)-1]
		}
		return cur
	}
	lines := strings.SplitAfter(data, "\n")
	for i, raw := range lines {
		n, line := i+1, strings.TrimSuffix(raw, "\n")
		if m := vectorSectionLine.FindStringSubmatch(line); m != nil {
			if cur == nil && len(cases) > 0 {
				cur = &cases[len(cases)-1]
			}
			return cases, open(n).readSections(lines[i:], n)
		}
		switch {
		case strings.TrimSpace(line) == "":
			cur = nil
		case strings.HasPrefix(line, "#"), line == "---":
		case len(line) >= 2 && vectorSteps[line[:2]] && (len(line) == 2 || line[2] == ' '):
			c := open(n)
			c.steps = append(c.steps, vectorStep{kind: line[:2], text: line[min(3, len(line)):], line: n})
		default:
			key, value, ok := strings.Cut(line, ":")
			if !ok || !vectorKey.MatchString(key) {
				return nil, fmt.Errorf("%s:%d: not a comment, field, step or section: %q", file, n, line)
			}
			c := open(n)
			if _, dup := c.fields[key]; dup {
				return nil, fmt.Errorf("%s:%d: %q given twice in the case of line %d", file, n, key, c.line)
			}
			c.fields[key] = strings.TrimSpace(value)
		}
	}
	return cases, nil
}

// readSections reads the sections that lines, starting at line n of the file, hold.
func (c *vectorCase) readSections(lines []string, n int) error {
	for i, raw := range lines {
		if m := vectorSectionLine.FindStringSubmatch(strings.TrimSuffix(raw, "\n")); m != nil {
			if _, dup := c.lookupSection(m[1]); dup {
				return fmt.Errorf("%s:%d: section %q given twice", c.file, n+i, m[1])
			}
			c.sections = append(c.sections, vectorSection{name: m[1]})
			continue
		}
		c.sections[len(c.sections)-1].text += raw
	}
	return nil
}

// readVectors reads the cases of a vector file.
func readVectors(t testing.TB, path string) []vectorCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cases, err := parseVectors(filepath.ToSlash(path), string(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatalf("%s: no cases", path)
	}
	return cases
}

// readVectorCase reads a vector file that holds one case.
func readVectorCase(t testing.TB, path string) vectorCase {
	t.Helper()
	cases := readVectors(t, path)
	if len(cases) != 1 {
		t.Fatalf("%s: %d cases, want one (a blank line ends a case)", path, len(cases))
	}
	return cases[0]
}

// vectorFiles lists the files that match pattern, and fails when there are none.
func vectorFiles(t testing.TB, pattern string) []string {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no vector files %s (%v)", pattern, err)
	}
	return files
}

// where is the case's place in its file, for messages.
func (c *vectorCase) where() string { return c.file + ":" + strconv.Itoa(c.line) }

// name is the case's "name:" field, or its place when it has none.
func (c *vectorCase) name() string {
	if n := c.fields["name"]; n != "" {
		return n
	}
	return c.where()
}

// only fails when the case has a field whose key is not among keys: a misspelt key must not
// read as an absent one.
func (c *vectorCase) only(t testing.TB, keys ...string) {
	t.Helper()
	for k := range c.fields {
		if !slices.Contains(keys, k) {
			t.Fatalf("%s: unknown key %q (known: %s)", c.where(), k, strings.Join(keys, ", "))
		}
	}
}

// field is the value of key, which the case must have.
func (c *vectorCase) field(t testing.TB, key string) string {
	t.Helper()
	v, ok := c.fields[key]
	if !ok {
		t.Fatalf("%s: no %q", c.where(), key)
	}
	return v
}

func (c *vectorCase) lookupSection(name string) (string, bool) {
	for _, s := range c.sections {
		if s.name == name {
			return s.text, true
		}
	}
	return "", false
}

// section is the text of the section name, which the case must have.
func (c *vectorCase) section(t testing.TB, name string) string {
	t.Helper()
	text, ok := c.lookupSection(name)
	if !ok {
		t.Fatalf("%s: no section %q", c.where(), name)
	}
	return text
}

// checkCall compares what a JSON-RPC call gave with the case's expectation, one of
//
//	result: <the result as JSON, exactly>
//	error: <code> <the message as a JSON string, exactly>
func (c *vectorCase) checkCall(t *testing.T, what string, res json.RawMessage, rerr *rpcError) {
	t.Helper()
	if want, ok := c.fields["result"]; ok {
		if rerr != nil || string(res) != want {
			t.Errorf("%s: %s: got %s %+v, want result %s", c.where(), what, res, rerr, want)
		}
		return
	}
	code, msgJSON, _ := strings.Cut(c.field(t, "error"), " ")
	var msg string
	if err := json.Unmarshal([]byte(msgJSON), &msg); err != nil {
		t.Fatalf("%s: error: want `<code> <message as a JSON string>`: %v", c.where(), err)
	}
	if rerr == nil || strconv.Itoa(rerr.Code) != code || rerr.Message != msg {
		t.Errorf("%s: %s: got %s %+v, want error %s %q", c.where(), what, res, rerr, code, msg)
	}
}

// writeVectorSections rewrites the sections of the one-case file at path, keeping what comes
// before them; a file that does not exist yet gets header first. Golden tests call it to
// regenerate their files.
func writeVectorSections(t testing.TB, path, header string, sections ...vectorSection) {
	t.Helper()
	if old, err := os.ReadFile(path); err == nil {
		lines := strings.SplitAfter(string(old), "\n")
		i := slices.IndexFunc(lines, func(l string) bool { return vectorSectionLine.MatchString(strings.TrimSuffix(l, "\n")) })
		if i < 0 {
			i = len(lines)
		}
		header = strings.Join(lines[:i], "")
	}
	var b strings.Builder
	b.WriteString(header)
	for i, s := range sections {
		if i < len(sections)-1 && !strings.HasSuffix(s.text, "\n") && s.text != "" {
			t.Fatalf("%s: section %q does not end in a newline", path, s.name)
		}
		b.WriteString("-- " + s.name + " --\n" + s.text)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVectorFormat pins the reader on every line kind and on the lines it refuses.
func TestVectorFormat(t *testing.T) {
	const file = "# a comment\n" +
		"name: first: with a colon\n" +
		"msg[0] payload:\n" +
		"---\n" +
		">>   {\"id\":1}  \n" +
		"<< ok\n" +
		"\n\n" +
		"name: second\n" +
		"<~ o.\n" +
		"<x\n" +
		"-- a --\n" +
		"# kept\n\n" +
		"-- b --\n" +
		"x"
	cases, err := parseVectors("f", file)
	if err != nil {
		t.Fatal(err)
	}
	want := []vectorCase{
		{file: "f", line: 2, fields: map[string]string{"name": "first: with a colon", "msg[0] payload": ""},
			steps: []vectorStep{{">>", "  {\"id\":1}  ", 5}, {"<<", "ok", 6}}},
		{file: "f", line: 9, fields: map[string]string{"name": "second"},
			steps:    []vectorStep{{"<~", "o.", 10}, {"<x", "", 11}},
			sections: []vectorSection{{"a", "# kept\n\n"}, {"b", "x"}}},
	}
	if !reflect.DeepEqual(cases, want) {
		t.Fatalf("got  %+v\nwant %+v", cases, want)
	}
	for _, bad := range []string{"name: a\nname: b\n", " indented: x\n", "{\"json\":1}\n", ">>x\n", "-- a --\nx\n-- a --\n"} {
		if _, err := parseVectors("f", bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
