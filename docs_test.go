package main

// Executable documentation. docs/protocol.md is checked against the server twice:
//
//   - TestDocsExamples replays every example exchange (a fenced block whose info string is
//     "exchange") on a real server over a real websocket, and compares what the server sends
//     with what the example shows. The format is described at the top of docs/protocol.md:
//     ">> " lines are sent as they are, "<< " lines are expected, "-- reconnect" drops the
//     connection and dials a new one. Replies are matched by id, notifications in the order
//     shown; a ">> " line is sent once every "<< " line above it has arrived. Placeholders:
//     $TMP and $HTTP are replaced everywhere by the example's directory and web server;
//     "$ANY", "$NUMBER" and "$STRING" match any value, number and string; any other
//     "$NAME" binds the value it first matches and must match it again, and a ">> " line
//     sends it. An example that sends no initialize runs after one. At its end a last request
//     (an unknown method) is answered, and nothing the example does not show may have arrived
//     before that answer.
//   - TestDocsMethods checks that the method sections of docs/protocol.md (headings of the
//     form "### N.M `name`") name exactly the methods of the server's method table, and that
//     each section names every member of its method's result type (method.result), where
//     the table knows them: a struct's JSON names, {} for emptyResult.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const docsProtocol = "docs/protocol.md"

// docsLine is one line of an example.
type docsLine struct {
	kind byte // '>' send, '<' expect, 'r' reconnect
	text string
	n    int // line number in the file
}

// docsExample is one fenced "exchange" block and the section it sits in.
type docsExample struct {
	section string
	line    int // where the block starts
	lines   []docsLine
}

// docsSection is the number and title of a heading: "6.3 `process/start`".
var docsHeading = regexp.MustCompile("^#{2,4} ([0-9][0-9.]*) (.*)$")

// readDocsExamples parses the exchange blocks of the file. A line starting ">> " or "<< "
// outside an exchange block is an error: every example is replayed.
func readDocsExamples(t *testing.T, path string) []docsExample {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		examples []docsExample
		section  string
		fence    string // the info string of the open fence, "" outside one
		inFence  bool
		cur      *docsExample
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```") && !inFence:
			inFence, fence = true, strings.TrimSpace(line[3:])
			if fence == "exchange" {
				examples = append(examples, docsExample{section: section, line: n})
				cur = &examples[len(examples)-1]
			}
			continue
		case strings.HasPrefix(line, "```"):
			inFence, cur = false, nil
			continue
		case !inFence:
			if m := docsHeading.FindStringSubmatch(line); m != nil {
				section = m[1]
			}
		}
		if cur == nil {
			if strings.HasPrefix(line, ">> ") || strings.HasPrefix(line, "<< ") {
				t.Errorf("%s:%d: an exchange line outside an exchange block", path, n)
			}
			continue
		}
		switch {
		case strings.HasPrefix(line, ">> "):
			cur.lines = append(cur.lines, docsLine{'>', line[3:], n})
		case strings.HasPrefix(line, "<< "):
			cur.lines = append(cur.lines, docsLine{'<', line[3:], n})
		case line == "-- reconnect":
			cur.lines = append(cur.lines, docsLine{'r', "", n})
		case strings.TrimSpace(line) != "":
			t.Errorf("%s:%d: not an exchange line: %q", path, n, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return examples
}

func TestDocsExamples(t *testing.T) {
	examples := readDocsExamples(t, docsProtocol)
	if len(examples) == 0 {
		t.Fatalf("%s has no exchange blocks", docsProtocol)
	}
	web := httptest.NewServer(http.HandlerFunc(docsWebHandler))
	t.Cleanup(web.Close)
	ts := startTestServer(t)
	for _, ex := range examples {
		t.Run(fmt.Sprintf("%s_line%d", ex.section, ex.line), func(t *testing.T) {
			runDocsExample(t, ts, ex, web.URL)
		})
	}
}

// docsWebHandler is the web server of the http/request examples; it sends no Date header, so
// that its answers do not vary.
func docsWebHandler(w http.ResponseWriter, r *http.Request) {
	w.Header()["Date"] = nil
	w.Header().Set("Content-Type", "text/plain")
	switch r.URL.Path {
	case "/hello":
		fmt.Fprint(w, "hello\n")
	case "/moved":
		http.Redirect(w, r, "/hello", http.StatusFound)
	default:
		http.NotFound(w, r)
	}
}

// docsFixture makes the example's directory: a.txt, d/b.txt and link → a.txt.
func docsFixture(t *testing.T) string {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello\n"), 0o644))
	must(os.Mkdir(filepath.Join(dir, "d"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "d", "b.txt"), []byte("bye\n"), 0o644))
	must(os.Symlink("a.txt", filepath.Join(dir, "link")))
	return dir
}

var docsPlaceholder = regexp.MustCompile(`"\$([A-Z][A-Z0-9_]*)"`)

func runDocsExample(t *testing.T, ts *testServer, ex docsExample, webURL string) {
	subst := strings.NewReplacer("$TMP", docsFixture(t), "$HTTP", webURL)
	vars := map[string]json.RawMessage{}
	dc := dialDocs(t, ts)
	sends := func(l docsLine) bool { return l.kind == '>' && docsMethod(l.text) == "initialize" }
	if !slices.ContainsFunc(ex.lines, sends) {
		dc.send(t, `{"id":"docs-init","method":"initialize","params":{"clientName":"docs"}}`)
		dc.expect(t, 0, []byte(`{"id":"docs-init","result":"$ANY"}`), vars)
		dc.send(t, `{"method":"initialized","params":{}}`)
	}
	for _, l := range ex.lines {
		text := subst.Replace(l.text)
		switch l.kind {
		case '>':
			text = docsPlaceholder.ReplaceAllStringFunc(text, func(p string) string {
				if v, ok := vars[p[2:len(p)-1]]; ok {
					return string(v)
				}
				t.Fatalf("%s:%d: %s is not bound yet", docsProtocol, l.n, p)
				return p
			})
			dc.send(t, text)
		case '<':
			got := dc.expect(t, l.n, []byte(text), vars)
			if sid, ok := got["result"]; ok {
				var r struct {
					SessionID string `json:"sessionId"`
				}
				if json.Unmarshal(sid, &r) == nil && r.SessionID != "" {
					dc.session = r.SessionID
				}
			}
		case 'r':
			dc.finish(t, vars)
			if dc.session != "" {
				waitDetached(t, ts, dc.session)
			}
			dc = dialDocs(t, ts)
		}
	}
	dc.finish(t, vars)
}

// docsMethod is the method of a message, or "".
func docsMethod(msg string) string {
	var m struct {
		Method string `json:"method"`
	}
	json.Unmarshal([]byte(msg), &m)
	return m.Method
}

// docsConn is one connection of an example: what the server sent, in arrival order.
type docsConn struct {
	ws      *wsConn
	in      chan []byte // closed when the connection ends
	pending []map[string]json.RawMessage
	session string // the session the last initialize answered
}

func dialDocs(t *testing.T, ts *testServer) *docsConn {
	t.Helper()
	ws, _, err := dialWebsocket(context.Background(), ts.url, nil, nil, wsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dc := &docsConn{ws: ws, in: make(chan []byte, 256)}
	go func() {
		defer close(dc.in)
		for {
			msg, err := ws.readMessage()
			if err != nil {
				return
			}
			dc.in <- bytes.Clone(msg)
		}
	}()
	t.Cleanup(func() { ws.closeTCP() })
	return dc
}

func (dc *docsConn) send(t *testing.T, msg string) {
	t.Helper()
	if err := dc.ws.writeMessageOp(wsOpText, []byte(msg)); err != nil {
		t.Fatalf("send %s: %v", msg, err)
	}
}

// receive adds the next message the server sends to pending.
func (dc *docsConn) receive(t *testing.T, n int, want []byte) {
	t.Helper()
	select {
	case msg, ok := <-dc.in:
		if !ok {
			t.Fatalf("%s:%d: the connection ended while waiting for %s", docsProtocol, n, want)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(msg, &m); err != nil {
			t.Fatalf("the server sent invalid JSON: %v: %s", err, msg)
		}
		dc.pending = append(dc.pending, m)
	case <-time.After(20 * time.Second):
		t.Fatalf("%s:%d: nothing matched %s within 20s; unmatched: %s", docsProtocol, n, want, dc.describePending())
	}
}

// expect waits for the message want describes: the reply with its id, or the next
// notification. It fails the test when that message differs from want.
func (dc *docsConn) expect(t *testing.T, n int, want []byte, vars map[string]json.RawMessage) map[string]json.RawMessage {
	t.Helper()
	var w map[string]json.RawMessage
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s:%d: invalid JSON: %v", docsProtocol, n, err)
	}
	wid, isReply := w["id"]
	for {
		for i, m := range dc.pending {
			id, hasID := m["id"]
			if isReply != hasID || isReply && !bytes.Equal(id, wid) {
				continue
			}
			dc.pending = slices.Delete(dc.pending, i, i+1)
			got, _ := json.Marshal(m)
			if err := docsMatch(want, got, vars); err != nil {
				t.Fatalf("%s:%d: %v\n want %s\n  got %s", docsProtocol, n, err, want, got)
			}
			return m
		}
		dc.receive(t, n, want)
	}
}

// finish checks that the server sent nothing the example does not show, then closes. A last
// request's reply, queued behind what the server sent before it, marks the end.
func (dc *docsConn) finish(t *testing.T, vars map[string]json.RawMessage) {
	t.Helper()
	dc.send(t, `{"id":"docs-end","method":"docs/end"}`)
	dc.expect(t, 0, []byte(`{"id":"docs-end","error":"$ANY"}`), vars)
	for more := true; more; {
		select {
		case msg, ok := <-dc.in:
			if ok {
				var m map[string]json.RawMessage
				json.Unmarshal(msg, &m)
				dc.pending = append(dc.pending, m)
			}
			more = ok
		default:
			more = false
		}
	}
	if len(dc.pending) > 0 {
		t.Errorf("the server sent messages the example does not show: %s", dc.describePending())
	}
	dc.ws.close(nil)
}

func (dc *docsConn) describePending() string {
	var b strings.Builder
	for _, m := range dc.pending {
		j, _ := json.Marshal(m)
		b.WriteString("\n  ")
		b.Write(j)
	}
	return b.String()
}

// docsMatch compares two JSON values structurally, key order aside, with the placeholders of
// want as wildcards.
func docsMatch(want, got []byte, vars map[string]json.RawMessage) error {
	var w, g any
	dw := json.NewDecoder(bytes.NewReader(want))
	dw.UseNumber()
	dg := json.NewDecoder(bytes.NewReader(got))
	dg.UseNumber()
	if err := dw.Decode(&w); err != nil {
		return err
	}
	if err := dg.Decode(&g); err != nil {
		return err
	}
	return docsMatchValue("", w, g, vars)
}

func docsMatchValue(at string, w, g any, vars map[string]json.RawMessage) error {
	if s, ok := w.(string); ok && docsPlaceholder.MatchString(`"`+s+`"`) {
		switch name := s[1:]; name {
		case "ANY":
			return nil
		case "NUMBER":
			if _, ok := g.(json.Number); !ok {
				return fmt.Errorf("%s: want a number, got %v", at, g)
			}
			return nil
		case "STRING":
			if _, ok := g.(string); !ok {
				return fmt.Errorf("%s: want a string, got %v", at, g)
			}
			return nil
		default:
			gj, _ := json.Marshal(g)
			if v, ok := vars[name]; ok {
				if !bytes.Equal(v, gj) {
					return fmt.Errorf("%s: $%s is %s, got %s", at, name, v, gj)
				}
				return nil
			}
			vars[name] = gj
			return nil
		}
	}
	switch w := w.(type) {
	case map[string]any:
		g, ok := g.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want an object, got %v", at, g)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				return fmt.Errorf("%s: unexpected key %q", at, k)
			}
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s: missing key %q", at, k)
			}
			if err := docsMatchValue(at+"."+k, wv, gv, vars); err != nil {
				return err
			}
		}
		return nil
	case []any:
		g, ok := g.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s: want %d elements, got %v", at, len(w), g)
		}
		for i := range w {
			if err := docsMatchValue(fmt.Sprintf("%s[%d]", at, i), w[i], g[i], vars); err != nil {
				return err
			}
		}
		return nil
	}
	if fmt.Sprint(w) != fmt.Sprint(g) || fmt.Sprintf("%T", w) != fmt.Sprintf("%T", g) {
		return fmt.Errorf("%s: want %v, got %v", at, w, g)
	}
	return nil
}

// docsMethodHeading is the heading of a method's section.
var docsMethodHeading = regexp.MustCompile("^### [0-9][0-9.]* `([a-zA-Z0-9]+(?:/[a-zA-Z0-9]+)*)`$")

func TestDocsMethods(t *testing.T) {
	b, err := os.ReadFile(docsProtocol)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	sections := map[string]string{} // a method's section, up to the next heading
	current := ""
	for _, line := range strings.Split(string(b), "\n") {
		if m := docsMethodHeading.FindStringSubmatch(line); m != nil {
			if documented[m[1]] {
				t.Errorf("%s: two sections for %s", docsProtocol, m[1])
			}
			documented[m[1]] = true
			current = m[1]
			continue
		}
		if strings.HasPrefix(line, "#") {
			current = ""
		}
		if current != "" {
			sections[current] += line + "\n"
		}
	}
	for name, m := range newMethodTable() {
		if !documented[name] {
			t.Errorf("%s: no section for the method %s", docsProtocol, name)
		}
		delete(documented, name)
		if m.result == nil {
			t.Errorf("%s: the method table does not know its result type", name)
			continue
		}
		for _, member := range resultMembers(m.result) {
			if !docsNamesMember(sections[name], member) {
				t.Errorf("%s: the section of %s does not show the result member %s (%v)", docsProtocol, name, member, m.result)
			}
		}
	}
	for name := range documented {
		t.Errorf("%s: a section for %s, which the server does not have", docsProtocol, name)
	}
}

// resultMembers is what a section must show of a result type: the JSON names of a struct's
// members ("{}" for emptyResult); nothing for pre-encoded JSON (rawJSON, framedJSON), whose
// shape the example exchanges check.
func resultMembers(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[emptyResult]():
		return []string{"{}"}
	case t.Kind() != reflect.Struct:
		return nil
	}
	var names []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		if f.Anonymous && f.Tag.Get("json") == "" {
			names = append(names, resultMembers(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}

// docsNamesMember reports whether a section shows member: as a key of an example's result
// ("name":), or as a word of a code span (`{name, other}`); "{}" as a code span or an
// example's empty result.
func docsNamesMember(section, member string) bool {
	if member == "{}" {
		return strings.Contains(section, "`{}`") || strings.Contains(section, `"result":{}`)
	}
	if strings.Contains(section, `"`+member+`":`) {
		return true
	}
	spans := strings.Split(section, "`")
	for i := 1; i < len(spans); i += 2 {
		words := strings.FieldsFunc(spans[i], func(r rune) bool {
			return !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
		})
		if slices.Contains(words, member) {
			return true
		}
	}
	return false
}
