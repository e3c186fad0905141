package main

// environmentConfig/read's configuration layers (docs/protocol.md §9.3): the executor-side
// $CODEX_HOME/config.toml, reduced to the key paths the client selects and written back as
// TOML. The TOML reader here takes the whole language but for the corners a Codex config
// never uses (it reads dates and times as their text); the writer lays the selected keys out
// as the reference's does: a table's plain values first, then its tables as [a.b] sections
// and its arrays of tables as [[a.b]], in document order, inline tables and dotted keys
// turned into sections.

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Config limits: the largest config.toml read, and the deepest nesting of arrays and inline
// tables in it.
const (
	maxConfigTOMLBytes = 4 << 20
	maxTOMLNesting     = 64
)

// tomlTable is a TOML table in document order.
type tomlTable struct {
	keys   []string
	vals   map[string]any // string, int64, float64, bool, tomlRaw, []any, *tomlTable, tomlTables
	inline bool           // defined inline or by a dotted key: closed to [headers]
	header bool           // defined by its own [header]
}

// tomlTables is an array of tables ([[name]]).
type tomlTables []*tomlTable

// tomlRaw is a value kept as written (a date or a time).
type tomlRaw string

func newTOMLTable() *tomlTable { return &tomlTable{vals: map[string]any{}} }

func (t *tomlTable) set(k string, v any) {
	if _, ok := t.vals[k]; !ok {
		t.keys = append(t.keys, k)
	}
	t.vals[k] = v
}

// configLayer is one layer of environmentConfig/read's answer.
type configLayer struct {
	Source  string `json:"source"`
	BaseDir string `json:"baseDir"`
	TOML    string `json:"toml"`
}

// userConfigLayer is the layer of codexHome/config.toml holding the selected key paths, or
// nil when the file is missing or none of them is in it.
func userConfigLayer(codexHome string, selectors [][]string) (*configLayer, error) {
	path := filepath.Join(codexHome, "config.toml")
	// Non-blocking and regular only: a FIFO (or a link to one) must not hold the request.
	f, err := openRegular(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, errInternal("failed to load executor-local config: %s: %s", path, discoveryErrorText(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigTOMLBytes+1))
	if err != nil {
		return nil, errInternal("failed to load executor-local config: %s: %s", path, discoveryErrorText(err))
	}
	if len(data) > maxConfigTOMLBytes {
		return nil, errInternal("failed to load executor-local config: %s: larger than %d bytes", path, maxConfigTOMLBytes)
	}
	doc, err := parseTOML(string(data))
	if err != nil {
		return nil, errInternal("failed to load executor-local config: %s:%v", path, err)
	}
	sel := projectTOML(doc, selectors)
	if len(sel.keys) == 0 {
		return nil, nil
	}
	return &configLayer{Source: "user (" + path + ")", BaseDir: dirURI(codexHome), TOML: writeTOML(sel)}, nil
}

// projectTOML is the part of doc at the selected key paths, in doc's order.
func projectTOML(doc *tomlTable, selectors [][]string) *tomlTable {
	out := newTOMLTable()
	for _, sel := range selectors {
		mergeTOMLPath(out, doc, sel)
	}
	return reorderTOML(out, doc)
}

// mergeTOMLPath copies the value at path in src into dst, with the tables on its way.
func mergeTOMLPath(dst, src *tomlTable, path []string) {
	v, ok := src.vals[path[0]]
	if !ok {
		return
	}
	if len(path) == 1 {
		dst.set(path[0], v)
		return
	}
	sub, ok := v.(*tomlTable)
	if !ok {
		return
	}
	d, ok := dst.vals[path[0]].(*tomlTable)
	if !ok {
		d = newTOMLTable()
	}
	mergeTOMLPath(d, sub, path[1:])
	if len(d.keys) > 0 {
		dst.set(path[0], d)
	}
}

// reorderTOML puts t's keys (and its tables' keys) in doc's order.
func reorderTOML(t, doc *tomlTable) *tomlTable {
	out := newTOMLTable()
	for _, k := range doc.keys {
		v, ok := t.vals[k]
		if !ok {
			continue
		}
		if sub, ok := v.(*tomlTable); ok {
			if dsub, ok := doc.vals[k].(*tomlTable); ok && sub != dsub {
				v = reorderTOML(sub, dsub)
			}
		}
		out.set(k, v)
	}
	return out
}

// writeTOML lays t out as a document.
func writeTOML(t *tomlTable) string {
	var b strings.Builder
	writeTOMLTable(&b, nil, t, true, false)
	return b.String()
}

func writeTOMLTable(b *strings.Builder, path []string, t *tomlTable, root, arrayItem bool) {
	var plain []string
	for _, k := range t.keys {
		if arr, ok := t.vals[k].([]any); ok && tableArray(arr) != nil {
			t.vals[k] = tableArray(arr)
		}
		switch t.vals[k].(type) {
		case *tomlTable, tomlTables:
		default:
			plain = append(plain, k)
		}
	}
	if !root && (len(plain) > 0 || len(t.keys) == 0 || arrayItem) {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		if arrayItem {
			b.WriteString("[[" + tomlKeyPath(path) + "]]\n")
		} else {
			b.WriteString("[" + tomlKeyPath(path) + "]\n")
		}
	}
	for _, k := range plain {
		b.WriteString(tomlKey(k) + " = " + tomlValue(t.vals[k]) + "\n")
	}
	for _, k := range t.keys {
		sub := append(path[:len(path):len(path)], k)
		switch v := t.vals[k].(type) {
		case *tomlTable:
			writeTOMLTable(b, sub, v, false, false)
		case tomlTables:
			for _, item := range v {
				writeTOMLTable(b, sub, item, false, true)
			}
		}
	}
}

// tableArray is arr as an array of tables when every item is a table, else nil.
func tableArray(arr []any) tomlTables {
	if len(arr) == 0 {
		return nil
	}
	out := make(tomlTables, len(arr))
	for i, v := range arr {
		t, ok := v.(*tomlTable)
		if !ok {
			return nil
		}
		out[i] = t
	}
	return out
}

func tomlKeyPath(path []string) string {
	parts := make([]string, len(path))
	for i, k := range path {
		parts[i] = tomlKey(k)
	}
	return strings.Join(parts, ".")
}

// tomlKey writes a key bare when it can be, quoted otherwise.
func tomlKey(k string) string {
	bare := k != ""
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(isASCIILetter(c) || c >= '0' && c <= '9' || c == '_' || c == '-') {
			bare = false
			break
		}
	}
	if bare {
		return k
	}
	return tomlBasicString(k)
}

func tomlValue(v any) string {
	switch v := v.(type) {
	case string:
		return tomlString(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		switch {
		case math.IsNaN(v):
			return "nan"
		case math.IsInf(v, 1):
			return "inf"
		case math.IsInf(v, -1):
			return "-inf"
		case v == math.Trunc(v) && math.Abs(v) < 1e16:
			return strconv.FormatFloat(v, 'f', 1, 64)
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case tomlRaw:
		return string(v)
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = tomlValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *tomlTable: // inside an array: inline
		parts := make([]string, len(v.keys))
		for i, k := range v.keys {
			parts[i] = tomlKey(k) + " = " + tomlValue(v.vals[k])
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	}
	return `""`
}

// tomlString writes s as the reference's writer does: a multi-line string when it holds a
// newline, a literal string when it holds a quote or a backslash (and no apostrophe or
// control), a basic string otherwise.
func tomlString(s string) string {
	if strings.Contains(s, "\n") && !strings.Contains(s, `"""`) {
		var b strings.Builder
		b.WriteString("\"\"\"\n")
		for _, r := range s {
			switch {
			case r == '\n':
				b.WriteByte('\n')
			case r == '\\':
				b.WriteString(`\\`)
			case r < 0x20 && r != '\t' || r == 0x7f:
				fmt.Fprintf(&b, `\u%04X`, r)
			default:
				b.WriteRune(r)
			}
		}
		b.WriteString(`"""`)
		return b.String()
	}
	if strings.ContainsAny(s, "\"\\") && !strings.ContainsAny(s, "'\r\n") && !hasTOMLControl(s) {
		return "'" + s + "'"
	}
	if strings.Contains(s, `"`) && !strings.Contains(s, `"""`) && !strings.ContainsAny(s, "\r\\") && !hasTOMLControl(s) {
		return `"""` + s + `"""` // a quote needs no escape there
	}
	return tomlBasicString(s)
}

func hasTOMLControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 && s[i] != '\t' || s[i] == 0x7f {
			return true
		}
	}
	return false
}

func tomlBasicString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// The reader.

type tomlParser struct {
	s     string
	i     int
	keyAt int // where the key being defined starts, for "duplicate key"
	root  *tomlTable
	cur   *tomlTable
}

// tomlError is a parse error at a line and column, written "<line>:<col>: <message>".
type tomlError struct {
	line, col int
	msg       string
}

func (e *tomlError) Error() string { return fmt.Sprintf("%d:%d: %s", e.line, e.col, e.msg) }

func (p *tomlParser) fail(format string, args ...any) error {
	return p.failAt(p.i, format, args...)
}

// failAt is a parse error at offset i.
func (p *tomlParser) failAt(i int, format string, args ...any) error {
	line := 1 + strings.Count(p.s[:i], "\n")
	col := i - strings.LastIndexByte(p.s[:i], '\n')
	return &tomlError{line, col, fmt.Sprintf(format, args...)}
}

func parseTOML(s string) (*tomlTable, error) {
	if !utf8.ValidString(s) {
		return nil, &tomlError{1, 1, "invalid UTF-8"}
	}
	p := &tomlParser{s: strings.TrimPrefix(s, "\ufeff"), root: newTOMLTable()}
	p.cur = p.root
	for {
		p.skipSpaceAndComments()
		if p.i >= len(p.s) {
			return p.root, nil
		}
		var err error
		if p.s[p.i] == '[' {
			err = p.header()
		} else {
			err = p.keyValue(p.cur, 0)
		}
		if err != nil {
			return nil, err
		}
		if err := p.endOfLine(); err != nil {
			return nil, err
		}
	}
}

func (p *tomlParser) skipWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *tomlParser) skipComment() {
	if p.i < len(p.s) && p.s[p.i] == '#' {
		for p.i < len(p.s) && p.s[p.i] != '\n' {
			p.i++
		}
	}
}

func (p *tomlParser) skipSpaceAndComments() {
	for {
		p.skipWS()
		p.skipComment()
		if p.i < len(p.s) && (p.s[p.i] == '\n' || strings.HasPrefix(p.s[p.i:], "\r\n")) {
			p.i++
			continue
		}
		return
	}
}

func (p *tomlParser) endOfLine() error {
	p.skipWS()
	p.skipComment()
	switch {
	case p.i >= len(p.s):
		return nil
	case p.s[p.i] == '\n':
		p.i++
		return nil
	case strings.HasPrefix(p.s[p.i:], "\r\n"):
		p.i += 2
		return nil
	}
	return p.fail("expected newline, `#`")
}

// header reads [a.b] or [[a.b]] and makes its table the current one.
func (p *tomlParser) header() error {
	array := strings.HasPrefix(p.s[p.i:], "[[")
	if array {
		p.i += 2
	} else {
		p.i++
	}
	p.skipWS()
	p.keyAt = p.i
	keys, err := p.key()
	if err != nil {
		return err
	}
	p.skipWS()
	closing := "]"
	if array {
		closing = "]]"
	}
	if !strings.HasPrefix(p.s[p.i:], closing) {
		return p.fail("invalid table header, expected `%s`", closing)
	}
	p.i += len(closing)
	t := p.root
	for _, k := range keys[:len(keys)-1] {
		next, err := p.descend(t, k)
		if err != nil {
			return err
		}
		t = next
	}
	last := keys[len(keys)-1]
	v, exists := t.vals[last]
	if array {
		arr, ok := v.(tomlTables)
		if exists && !ok {
			return p.failAt(p.keyAt, "duplicate key")
		}
		item := newTOMLTable()
		t.set(last, append(arr, item))
		p.cur = item
		return nil
	}
	switch v := v.(type) {
	case nil:
		nt := newTOMLTable()
		nt.header = true
		t.set(last, nt)
		p.cur = nt
	case *tomlTable:
		if v.header || v.inline {
			return p.failAt(p.keyAt, "duplicate key")
		}
		v.header = true
		p.cur = v
	default:
		return p.failAt(p.keyAt, "duplicate key")
	}
	return nil
}

// descend is the table k of t for a header's path, made when missing; an array of tables
// stands for its last item.
func (p *tomlParser) descend(t *tomlTable, k string) (*tomlTable, error) {
	switch v := t.vals[k].(type) {
	case nil:
		nt := newTOMLTable()
		t.set(k, nt)
		return nt, nil
	case *tomlTable:
		if v.inline {
			return nil, p.failAt(p.keyAt, "duplicate key")
		}
		return v, nil
	case tomlTables:
		return v[len(v)-1], nil
	}
	return nil, p.failAt(p.keyAt, "duplicate key")
}

// keyValue reads key = value into t, at the nesting depth of the inline table it is in.
func (p *tomlParser) keyValue(t *tomlTable, depth int) error {
	p.keyAt = p.i
	keys, err := p.key()
	if err != nil {
		return err
	}
	p.skipWS()
	if p.i >= len(p.s) || p.s[p.i] != '=' {
		return p.fail("expected `.`, `=`")
	}
	p.i++
	p.skipWS()
	v, err := p.value(depth)
	if err != nil {
		return err
	}
	for _, k := range keys[:len(keys)-1] {
		switch sub := t.vals[k].(type) {
		case nil:
			nt := newTOMLTable()
			nt.inline = true // a dotted key's table takes no [header] later
			t.set(k, nt)
			t = nt
		case *tomlTable:
			if sub.header && t != p.cur {
				return p.failAt(p.keyAt, "duplicate key")
			}
			t = sub
		default:
			return p.failAt(p.keyAt, "duplicate key")
		}
	}
	last := keys[len(keys)-1]
	if _, dup := t.vals[last]; dup {
		return p.failAt(p.keyAt, "duplicate key")
	}
	t.set(last, v)
	return nil
}

// key reads a possibly dotted key.
func (p *tomlParser) key() ([]string, error) {
	var keys []string
	for {
		p.skipWS()
		if p.i >= len(p.s) {
			return nil, p.fail("expected a key")
		}
		var k string
		switch c := p.s[p.i]; {
		case c == '"':
			s, err := p.basicString()
			if err != nil {
				return nil, err
			}
			k = s
		case c == '\'':
			s, err := p.literalString()
			if err != nil {
				return nil, err
			}
			k = s
		default:
			start := p.i
			for p.i < len(p.s) {
				c := p.s[p.i]
				if !(isASCIILetter(c) || c >= '0' && c <= '9' || c == '_' || c == '-') {
					break
				}
				p.i++
			}
			if p.i == start {
				return nil, p.fail("invalid key")
			}
			k = p.s[start:p.i]
		}
		keys = append(keys, k)
		p.skipWS()
		if p.i < len(p.s) && p.s[p.i] == '.' {
			p.i++
			continue
		}
		return keys, nil
	}
}

func (p *tomlParser) value(depth int) (any, error) {
	if depth > maxTOMLNesting {
		return nil, p.fail("nesting deeper than %d", maxTOMLNesting)
	}
	if p.i >= len(p.s) {
		return nil, p.fail("expected a value")
	}
	rest := p.s[p.i:]
	switch {
	case strings.HasPrefix(rest, `"""`):
		return p.multilineString('"')
	case strings.HasPrefix(rest, "'''"):
		return p.multilineString('\'')
	case rest[0] == '"':
		return p.basicString()
	case rest[0] == '\'':
		return p.literalString()
	case rest[0] == '[':
		return p.array(depth)
	case rest[0] == '{':
		return p.inlineTable(depth)
	case strings.HasPrefix(rest, "true") && tomlTokenEnd(rest, 4):
		p.i += 4
		return true, nil
	case strings.HasPrefix(rest, "false") && tomlTokenEnd(rest, 5):
		p.i += 5
		return false, nil
	}
	return p.scalarToken()
}

func tomlTokenEnd(s string, n int) bool {
	return len(s) == n || strings.IndexByte(" \t\r\n,]}#", s[n]) >= 0
}

// scalarToken reads a number, a date or a time.
func (p *tomlParser) scalarToken() (any, error) {
	start := p.i
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n,]}#", p.s[p.i]) < 0 {
		p.i++
	}
	tok := p.s[start:p.i]
	// A date-time may have one space between date and time.
	if len(tok) == 10 && tok[4] == '-' && p.i+1 < len(p.s) && p.s[p.i] == ' ' && p.s[p.i+1] >= '0' && p.s[p.i+1] <= '9' {
		p.i++
		for p.i < len(p.s) && strings.IndexByte(" \t\r\n,]}#", p.s[p.i]) < 0 {
			p.i++
		}
		tok = p.s[start:p.i]
	}
	if tok == "" {
		p.i = start
		return nil, p.fail("string values must be quoted, expected literal string")
	}
	v, ok := tomlNumber(tok)
	if ok {
		return v, nil
	}
	if v == errTOMLLeadingZero {
		p.i = start
		return nil, p.fail("unexpected leading zero, expected nothing")
	}
	if isTOMLDateTime(tok) {
		return tomlRaw(tok), nil
	}
	p.i = start
	return nil, p.fail("string values must be quoted, expected literal string")
}

// errTOMLLeadingZero is tomlNumber's word for a number written with a leading zero.
var errTOMLLeadingZero = errors.New("leading zero")

// tomlNumber reads an integer or a float; false (with errTOMLLeadingZero for 01) otherwise.
func tomlNumber(tok string) (any, bool) {
	switch tok {
	case "inf", "+inf":
		return math.Inf(1), true
	case "-inf":
		return math.Inf(-1), true
	case "nan", "+nan", "-nan":
		return math.NaN(), true
	}
	if strings.Contains(tok, "__") || strings.HasPrefix(tok, "_") || strings.HasSuffix(tok, "_") {
		return nil, false
	}
	clean := strings.ReplaceAll(tok, "_", "")
	for _, pfx := range []struct {
		p    string
		base int
	}{{"0x", 16}, {"0o", 8}, {"0b", 2}} {
		if digits, ok := strings.CutPrefix(clean, pfx.p); ok {
			n, err := strconv.ParseInt(digits, pfx.base, 64)
			return n, err == nil
		}
	}
	unsigned := strings.TrimLeft(clean, "+-")
	if len(unsigned) > 1 && unsigned[0] == '0' && unsigned[1] >= '0' && unsigned[1] <= '9' && !isTOMLDateTime(tok) {
		return errTOMLLeadingZero, false
	}
	if n, err := strconv.ParseInt(clean, 10, 64); err == nil {
		return n, true
	}
	if strings.ContainsAny(clean, ".eE") && !strings.ContainsAny(clean, "xob") {
		f, err := strconv.ParseFloat(clean, 64)
		return f, err == nil
	}
	return nil, false
}

func isTOMLDateTime(tok string) bool {
	digits := 0
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case c >= '0' && c <= '9':
			digits++
		case strings.IndexByte("-:.TtZz+ ", c) >= 0:
		default:
			return false
		}
	}
	return digits >= 4 && (strings.Count(tok, "-") >= 2 || strings.Count(tok, ":") >= 1)
}

func (p *tomlParser) basicString() (string, error) {
	p.i++ // "
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return b.String(), nil
		case c == '\\':
			if err := p.escape(&b); err != nil {
				return "", err
			}
		case c == '\n' || c < 0x20 && c != '\t' || c == 0x7f:
			return "", p.fail("invalid basic string, expected `\"`")
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return "", p.fail("invalid basic string, expected `\"`")
}

func (p *tomlParser) escape(b *strings.Builder) error {
	p.i++
	if p.i >= len(p.s) {
		return p.fail("invalid escape sequence")
	}
	c := p.s[p.i]
	p.i++
	switch c {
	case 'b':
		b.WriteByte('\b')
	case 't':
		b.WriteByte('\t')
	case 'n':
		b.WriteByte('\n')
	case 'f':
		b.WriteByte('\f')
	case 'r':
		b.WriteByte('\r')
	case 'e':
		b.WriteByte(0x1b)
	case '"':
		b.WriteByte('"')
	case '\\':
		b.WriteByte('\\')
	case 'u', 'U':
		n := 4
		if c == 'U' {
			n = 8
		}
		if p.i+n > len(p.s) {
			return p.fail("invalid unicode escape")
		}
		r, err := strconv.ParseUint(p.s[p.i:p.i+n], 16, 32)
		if err != nil || !utf8.ValidRune(rune(r)) {
			return p.fail("invalid unicode escape")
		}
		b.WriteRune(rune(r))
		p.i += n
	default:
		p.i--
		return p.fail("invalid escape sequence")
	}
	return nil
}

func (p *tomlParser) literalString() (string, error) {
	p.i++
	end := strings.IndexAny(p.s[p.i:], "'\n")
	if end < 0 || p.s[p.i+end] != '\'' {
		return "", p.fail("invalid literal string")
	}
	s := p.s[p.i : p.i+end]
	p.i += end + 1
	return s, nil
}

// multilineString reads """…""" or ”'…”'; a newline right after the opening is dropped.
func (p *tomlParser) multilineString(q byte) (string, error) {
	delim := strings.Repeat(string(q), 3)
	p.i += 3
	if strings.HasPrefix(p.s[p.i:], "\r\n") {
		p.i += 2
	} else if strings.HasPrefix(p.s[p.i:], "\n") {
		p.i++
	}
	var b strings.Builder
	for p.i < len(p.s) {
		if strings.HasPrefix(p.s[p.i:], delim) {
			// Up to two more quotes just before the closing belong to the string.
			extra := 0
			for extra < 2 && p.i+3+extra < len(p.s) && p.s[p.i+3+extra] == q {
				extra++
			}
			b.WriteString(p.s[p.i : p.i+extra])
			p.i += 3 + extra
			return b.String(), nil
		}
		c := p.s[p.i]
		if q == '"' && c == '\\' {
			// A backslash at the end of a line trims the newline and the white space after it.
			j := p.i + 1
			for j < len(p.s) && (p.s[j] == ' ' || p.s[j] == '\t') {
				j++
			}
			if j < len(p.s) && (p.s[j] == '\n' || p.s[j] == '\r') {
				for j < len(p.s) && strings.IndexByte(" \t\r\n", p.s[j]) >= 0 {
					j++
				}
				p.i = j
				continue
			}
			if err := p.escape(&b); err != nil {
				return "", err
			}
			continue
		}
		b.WriteByte(c)
		p.i++
	}
	return "", p.fail("invalid multiline string")
}

func (p *tomlParser) array(depth int) ([]any, error) {
	p.i++
	out := []any{}
	for {
		p.skipSpaceAndComments()
		if p.i >= len(p.s) {
			return nil, p.fail("invalid array")
		}
		if p.s[p.i] == ']' {
			p.i++
			return out, nil
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		end := p.i
		p.skipSpaceAndComments()
		if p.i >= len(p.s) {
			return nil, p.failAt(end, "unclosed array, expected `]`")
		}
		if p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return out, nil
		}
		return nil, p.fail("invalid array, expected `,` or `]`")
	}
}

func (p *tomlParser) inlineTable(depth int) (*tomlTable, error) {
	p.i++
	t := newTOMLTable()
	t.inline = true
	p.skipWS()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return t, nil
	}
	saved := p.cur
	p.cur = t
	defer func() { p.cur = saved }()
	for {
		p.skipWS()
		if err := p.keyValue(t, depth+1); err != nil {
			return nil, err
		}
		p.skipWS()
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			markInline(t)
			return t, nil
		}
		return nil, p.fail("invalid inline table, expected `,` or `}`")
	}
}

// markInline closes an inline table and the tables its dotted keys made.
func markInline(t *tomlTable) {
	t.inline = true
	for _, v := range t.vals {
		if sub, ok := v.(*tomlTable); ok {
			markInline(sub)
		}
	}
}
