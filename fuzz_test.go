package main

// Fuzz targets for the JSON-RPC envelope (parseIncoming, parseMessage's text checks), the
// params of every method (decodeParams and the lifecycle gate, never a handler) and the stdio
// line reader. The other parsers have their targets next to their tests: FuzzWSAuthJWT
// (ws_auth_fuzz_test.go), FuzzNoiseReadResponse and FuzzNoiseDeframer (noise_fuzz_test.go),
// FuzzWSReadFrame and FuzzDispatch (ws_fuzz_test.go), FuzzRelayFrameDecode (the protobuf
// decoder), FuzzNoiseReadInitiation and FuzzNoiseRecords, FuzzParsePath, FuzzParseSandbox,
// FuzzWSAuthCheck (both modes), FuzzDecodeJSONBase64InPlace.
//
// Every target here is pure: no process, no file, no socket. Each asserts properties against
// an independent reading of the same input (encoding/json, a plain scan), not only the
// absence of panics.
//
//	go test -run '^$' -fuzz '^FuzzParseIncoming$' -parallel 1 -fuzztime 30s .

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

const fuzzParsePrefix = "failed to parse websocket JSON-RPC message from exec-server websocket fuzz"

// envelopeErrors are the fixed texts of parseIncoming; the others are "invalid type: ...,
// expected a string" or end with the position of a syntax or Unicode error.
var envelopeErrors = map[string]bool{
	"expected a JSON-RPC object":                                     true,
	"data did not match any variant of untagged enum RequestId":      true,
	"missing field `error`":                                          true,
	"data did not match any variant of untagged enum JSONRPCMessage": true,
}

var atLineColumn = regexp.MustCompile(` at line [1-9][0-9]* column [0-9]+$`)

// checkEnvelopeError: a parse error has one of the reference's texts and reaches the client
// as a well-formed JSON-RPC error: code -32600, id -1, the text after the transport's prefix.
func checkEnvelopeError(t *testing.T, msg []byte, err error) {
	t.Helper()
	s := err.Error()
	if !envelopeErrors[s] && !atLineColumn.MatchString(s) && !strings.HasPrefix(s, "missing field `") &&
		!strings.HasPrefix(s, "invalid type: ") && s != "invalid number" && !strings.HasPrefix(s, "invalid length ") {
		t.Fatalf("%q: unexpected parse error text %q", msg, s)
	}
	checkErrorReply(t, nil, errInvalidRequest("%s: %s", fuzzParsePrefix, err))
}

// checkErrorReply: appendError makes one JSON object with the id (-1 without one), the code
// and the message (exactly, when the message is UTF-8).
func checkErrorReply(t *testing.T, id json.RawMessage, e *rpcError) {
	t.Helper()
	b := appendError(nil, id, e)
	var r struct {
		Error *struct {
			Code    *int    `json:"code"`
			Message *string `json:"message"`
		} `json:"error"`
		ID json.RawMessage `json:"id"`
	}
	if !json.Valid(b) || json.Unmarshal(b, &r) != nil || r.Error == nil || r.Error.Code == nil || r.Error.Message == nil {
		t.Fatalf("error reply %q is not a JSON-RPC error", b)
	}
	wantID := "-1"
	if id != nil {
		wantID = string(id)
	}
	if *r.Error.Code != e.Code || string(r.ID) != wantID {
		t.Fatalf("error reply %q: code or id changed", b)
	}
	if utf8.ValidString(e.Message) && *r.Error.Message != e.Message {
		t.Fatalf("error reply %q: message changed from %q", b, e.Message)
	}
}

// refValidID is RequestId's rule read with encoding/json and math/big: a string, or an
// integer that fits in an i64.
func refValidID(raw json.RawMessage) bool {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		return json.Unmarshal(raw, &s) == nil
	}
	var n json.Number // raw is not a string
	if json.Unmarshal(raw, &n) != nil || strings.ContainsAny(n.String(), ".eE") {
		return false
	}
	v, ok := new(big.Int).SetString(n.String(), 10)
	return ok && v.IsInt64()
}

// refLoneSurrogate reports whether the valid JSON text msg has a \u escape of half a surrogate
// pair that is not immediately completed by the other half, string by string.
func refLoneSurrogate(msg []byte) bool {
	inString := false
	high := -1 // where the escape completing a high surrogate must start
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if !inString {
			inString = c == '"'
			continue
		}
		if c != '\\' || msg[i+1] != 'u' {
			if high >= 0 {
				return true
			}
			switch c {
			case '"':
				inString = false
			case '\\':
				i++
			}
			continue
		}
		u, err := strconv.ParseUint(string(msg[i+2:i+6]), 16, 16)
		if err != nil {
			panic(err) // valid JSON
		}
		r, completes := rune(u), high == i
		high = -1
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if completes {
				return true
			}
			high = i + 6
		case utf16.IsSurrogate(r):
			if !completes {
				return true
			}
		case completes:
			return true
		}
		i += 5
	}
	return false
}

// FuzzParseIncoming checks the envelope against encoding/json: a message that is valid JSON is
// classified as its decoded members say (last duplicate wins), one that is not is refused,
// unless only its params value is malformed (params is delimited here and decoded later, by
// decodeParams); every refusal is a well-formed -32600 error. checkJSONText is compared with a
// string-by-string scan for lone surrogate escapes, and must refuse text that is not UTF-8.
func FuzzParseIncoming(f *testing.F) {
	f.Fuzz(func(t *testing.T, msg []byte) { // seeds: testdata/fuzz/FuzzParseIncoming
		in, name, perr := parseIncoming(msg)
		if perr != nil {
			checkEnvelopeError(t, msg, perr)
		}
		if json.Valid(msg) {
			checkEnvelopeAgainstDecoder(t, msg, in, name, perr)
		} else if perr == nil {
			if in.Params == nil {
				t.Fatalf("%q: invalid JSON accepted", msg)
			}
			off := cap(msg) - cap(in.Params)
			patched := slices.Concat(msg[:off], []byte("null"), msg[off+len(in.Params):])
			if !json.Valid(patched) {
				t.Fatalf("%q: invalid JSON outside params accepted", msg)
			}
		}
		if what, end, found := new(textScan).scanText(msg); json.Valid(msg) && utf8.Valid(msg) && !strings.HasPrefix(what, "recursion") {
			key, dup := strings.CutPrefix(what, "duplicate JSON object key `")
			key = strings.TrimSuffix(key, "`")
			if rkey, rend, rdup := refDuplicateKey(msg); dup != rdup || dup && (key != rkey || end != rend) || found != dup {
				t.Fatalf("%q: scanText %q %d %v, encoding/json's tokens say %q %d %v", msg, what, end, found, rkey, rend, rdup)
			}
			if _, _, err := parseMessage(msg, false, nil); dup && cleanPrefix(msg[:end], false) && (err == nil || !strings.HasPrefix(err.Error(), what+" at line ")) {
				t.Fatalf("%q: %s, parseMessage says %v", msg, what, err)
			}
		}
		if perr != nil {
			return
		}
		terr := checkJSONText(msg, in.Params, false)
		switch {
		case !utf8.Valid(msg):
			if terr == nil || !strings.HasPrefix(terr.Error(), "invalid unicode code point at line ") {
				t.Fatalf("%q: text that is not UTF-8 gave %v", msg, terr)
			}
		case json.Valid(msg) && len(in.Params) <= unicodeScanLimit:
			if lone := refLoneSurrogate(msg); lone != (terr != nil) {
				t.Fatalf("%q: lone surrogate escape %v, checkJSONText %v", msg, lone, terr)
			}
		}
		if utf8.Valid(msg) {
			if known := checkJSONText(msg, in.Params, true); fmt.Sprint(known) != fmt.Sprint(terr) {
				t.Fatalf("%q: a transport's UTF-8 promise changed the answer: %v, %v", msg, known, terr)
			}
		}
		if terr != nil {
			checkEnvelopeError(t, msg, terr)
		}
	})
}

// refDuplicateKey finds the first repeated member name in the valid JSON text msg from
// encoding/json's token stream: the name and the offset just past it.
func refDuplicateKey(msg []byte) (string, int, bool) {
	type frame struct {
		names   map[string]bool // nil in an array
		wantKey bool
	}
	dec := json.NewDecoder(bytes.NewReader(msg))
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", 0, false
		}
		if n := len(stack); n > 0 && stack[n-1].wantKey {
			if k, ok := tok.(string); ok {
				if stack[n-1].names[k] {
					return k, int(dec.InputOffset()), true
				}
				stack[n-1].names[k], stack[n-1].wantKey = true, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{names: map[string]bool{}, wantKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			return "", 0, false // the value ended
		}
		if top := stack[len(stack)-1]; top.names != nil {
			top.wantKey = true
		}
	}
}

// refClientError reports whether raw is an error member the reference decodes: an object
// with an integer code that fits an i64 and a string message, or an array of three.
func refClientError(raw json.RawMessage) bool {
	var arr []json.RawMessage
	if json.Unmarshal(raw, &arr) == nil {
		return len(arr) == 3
	}
	var e struct {
		Code    *json.Number `json:"code"`
		Message *string      `json:"message"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("null")) || dec.Decode(&e) != nil || e.Code == nil || e.Message == nil {
		return false
	}
	_, err := strconv.ParseInt(e.Code.String(), 10, 64)
	return err == nil || e.Code.String() == "-0"
}

// checkEnvelopeAgainstDecoder classifies the valid JSON text msg with encoding/json and
// compares with what parseIncoming said.
func checkEnvelopeAgainstDecoder(t *testing.T, msg []byte, in incoming, name string, perr error) {
	t.Helper()
	if bytes.Trim(msg, " \t\r\n")[0] != '{' {
		if perr == nil || perr.Error() != "expected a JSON-RPC object" {
			t.Fatalf("%q: a JSON value that is not an object gave %v", msg, perr)
		}
		return
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(msg, &m); err != nil {
		t.Fatalf("%q: valid JSON object: %v", msg, err)
	}
	id, hasID := m["id"]
	method, hasMethod := m["method"]
	_, hasResult := m["result"]
	_, hasError := m["error"]
	var want, wantName string
	switch {
	case hasID && !refValidID(id):
		want = "data did not match any variant of untagged enum RequestId"
	case hasMethod:
		if err := json.Unmarshal(method, &wantName); err != nil {
			want = "invalid type: "
		}
	case (hasResult || hasError) && !hasID:
		want = "missing field `id`"
	case hasResult:
	case hasError && !refClientError(m["error"]):
		want = "" // refused in the words of serde; which words, checkEnvelopeError checks
		if perr == nil {
			t.Fatalf("%q: an error member 0.169 cannot decode was taken for a response", msg)
		}
		return
	case hasError:
	case hasID:
		want = "missing field `error`"
	default:
		want = "data did not match any variant of untagged enum JSONRPCMessage"
	}
	switch {
	case want == "" && perr != nil:
		t.Fatalf("%q: valid message refused: %v", msg, perr)
	case want != "" && (perr == nil || !strings.HasPrefix(perr.Error(), want)):
		t.Fatalf("%q: got %v, want %q", msg, perr, want)
	case perr != nil:
		return
	case name != wantName:
		t.Fatalf("%q: method name %q, want %q", msg, name, wantName)
	}
	for _, member := range []struct {
		key string
		got json.RawMessage
	}{{"id", in.ID}, {"method", in.Method}, {"params", in.Params}, {"result", in.Result}, {"error", in.Error}} {
		want, ok := m[member.key]
		if ok != (member.got != nil) || !bytes.Equal(want, member.got) {
			t.Fatalf("%q: member %s is %q, encoding/json says %q", msg, member.key, member.got, want)
		}
	}
}

// fuzzMethodParamTypes is the params type of every method in the table, read from the
// handlers' signatures; nil for the methods that take no params.
func fuzzMethodParamTypes() map[string]reflect.Type {
	p := func(handler any) reflect.Type { return reflect.TypeOf(handler).In(1).Elem() }
	return map[string]reflect.Type{
		"initialize":                 p((*call).initialize),
		"environment/info":           nil,
		"environment/status":         nil,
		"environmentConfig/read":     p((*call).environmentConfigRead),
		"capabilities/discoverV2":    reflect.TypeFor[discoverV2Params](),
		"capabilityRoots/discoverV1": reflect.TypeFor[discoverRootsParams](),
		"process/start":              p((*call).processStart),
		"process/read":               p((*call).processRead),
		"process/write":              p((*call).processWrite),
		"process/signal":             p((*call).processSignal),
		"process/terminate":          p((*call).processTerminate),
		"process/resize":             p((*call).processResize),
		"process/closeStdin":         p((*call).processCloseStdin),
		"fs/readFile":                p((*call).fsReadFile),
		"fs/writeFile":               p((*call).fsWriteFile),
		"fs/createDirectory":         p((*call).fsCreateDirectory),
		"fs/getMetadata":             p((*call).fsGetMetadata),
		"fs/canonicalize":            p((*call).fsCanonicalize),
		"fs/readDirectory":           p((*call).fsReadDirectory),
		"fs/remove":                  p((*call).fsRemove),
		"fs/copy":                    p((*call).fsCopy),
		"fs/open":                    p((*call).fsOpen),
		"fs/readBlock":               p((*call).fsReadBlock),
		"fs/writeBlock":              p((*call).fsWriteBlock),
		"fs/close":                   p((*call).fsClose),
		"fs/walk":                    p((*call).fsWalk),
		"fs/watchMissing":            p((*call).fsWatchMissing),
		"http/request":               p((*call).httpRequest),
	}
}

// fuzzMethodNames is the method table's names, sorted: the fuzzer's selector indexes it.
func fuzzMethodNames(tb testing.TB) []string {
	table, types := newMethodTable(), fuzzMethodParamTypes()
	var names []string
	for name := range table {
		if _, ok := types[name]; !ok {
			tb.Fatalf("method %s has no params type in fuzzMethodParamTypes", name)
		}
		names = append(names, name)
	}
	for name := range types {
		if _, ok := table[name]; !ok {
			tb.Fatalf("fuzzMethodParamTypes names %s, which the table lacks", name)
		}
	}
	slices.Sort(names)
	return names
}

// hasFieldOfType reports whether rt (a struct) has a field of type ft at the top level.
func hasFieldOfType(rt, ft reflect.Type) bool {
	for i := 0; i < rt.NumField(); i++ {
		if t := rt.Field(i).Type; t == ft || t.Kind() == reflect.Pointer && t.Elem() == ft {
			return true
		}
	}
	return false
}

// dropLineBreaksInStrings removes raw CR and LF inside the strings of a JSON text.
func dropLineBreaksInStrings(b []byte) []byte {
	out := make([]byte, 0, len(b))
	inString := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case !inString:
			inString = c == '"'
		case c == '\\' && i+1 < len(b):
			out = append(out, c)
			i++
			c = b[i]
		case c == '"':
			inString = false
		case c == '\r' || c == '\n':
			continue
		}
		out = append(out, b[i])
	}
	return out
}

// FuzzMethodParams feeds params of every method, inside a real envelope, to the method's
// params decoder and to the method itself on a connection that has not called initialize, so
// that no handler runs: a method either refuses its params with -32602 or stops at the
// lifecycle gate, and the two answers agree with decodeParams. Params accepted must be valid
// JSON (but for raw line breaks inside base64, which its decoder skips), hold every required
// field, decode alike with encoding/json when no key differs from a field's name only by case,
// and survive an encode/decode round trip. initialize, the one method without a gate, is only
// decoded.
func FuzzMethodParams(f *testing.F) {
	names := fuzzMethodNames(f)
	table, types := newMethodTable(), fuzzMethodParamTypes()
	f.Fuzz(func(t *testing.T, sel uint8, params []byte) { // seeds: testdata/fuzz/FuzzMethodParams
		name := names[int(sel)%len(names)]
		msg := []byte(`{"id":7,"method":"` + name + `","params":` + string(params) + `}`)
		in, got, err := parseMessage(msg, false, nil)
		if err != nil || got != name || in.ID == nil {
			return // refused before any method: FuzzParseIncoming's business
		}
		raw := json.RawMessage(in.Params)
		m, pt := table[name], types[name]
		var p reflect.Value
		var derr error
		if pt != nil {
			p = reflect.New(pt)
			derr = decodeParams(raw, pt.Name(), p.Interface())
			if sc, ok := p.Interface().(sandboxCarrier); ok && derr == nil {
				cp := *sc.sandboxParam() // parsed as handle does after decoding; the value itself stays as decoded
				derr = (&sandboxCache{}).check(&cp)
			}
		}
		reached := false
		if m.family != "" {
			res, cerr := m.call(&conn{}, raw)
			var re *rpcError
			if res != nil || !errors.As(cerr, &re) {
				t.Fatalf("%s %q: before initialize: %v, %v", name, raw, res, cerr)
			}
			reached = re.Code == codeInvalidRequest && re.Message == "client must call initialize before using "+m.family+" methods"
			if !reached && re.Code != codeInvalidParams {
				t.Fatalf("%s %q: error %d %q is neither -32602 nor the gate", name, raw, re.Code, re.Message)
			}
			if pt != nil && ((derr == nil) != reached || derr != nil && withoutStructName(derr.Error()) != withoutStructName(cerr.Error())) {
				t.Fatalf("%s %q: the method said %v, decodeParams %v", name, raw, cerr, derr)
			}
			if !reached {
				checkErrorReply(t, in.ID, re)
			}
		}
		if pt == nil {
			var obj map[string]json.RawMessage
			empty := json.Valid(raw) && (string(raw) == "null" || raw[0] == '{' && json.Unmarshal(raw, &obj) == nil && len(obj) == 0)
			if reached != empty {
				t.Fatalf("%s %q: params without members accepted %v, but they are %v", name, raw, reached, empty)
			}
			return
		}
		if derr != nil {
			var re *rpcError
			if !errors.As(derr, &re) || re.Code != codeInvalidParams || re.Message == "" {
				t.Fatalf("%s %q: decode error %#v is not a -32602", name, raw, derr)
			}
			checkErrorReply(t, in.ID, re)
			return
		}
		checkDecodedParams(t, name, raw, pt, p)
	})
}

// withoutStructName drops the params type's name from an error ("expected struct ReadParams"):
// the method table names it as the reference does, decodeParams after the Go type.
func withoutStructName(msg string) string {
	if i := strings.Index(msg, "expected struct "); i >= 0 {
		return msg[:i+len("expected struct")]
	}
	return msg
}

// checkDecodedParams checks params that decodeParams accepted into p (a *pt).
func checkDecodedParams(t *testing.T, name string, raw json.RawMessage, pt reflect.Type, p reflect.Value) {
	t.Helper()
	if hasFieldOfType(pt, reflect.TypeFor[lazyBase64]()) {
		// fs/writeFile: the data is only delimited here, and decoded (and refused) by the
		// handler. It must still be a whole JSON string.
		for i := 0; i < pt.NumField(); i++ {
			if l, ok := p.Elem().Field(i).Addr().Interface().(*lazyBase64); ok && l.raw != nil {
				if len(l.raw) < 2 || l.raw[0] != '"' || l.raw[len(l.raw)-1] != '"' {
					t.Fatalf("%s %q: base64 kept as %q", name, raw, l.raw)
				}
			}
		}
		return
	}
	text := raw
	if !json.Valid(text) && hasFieldOfType(pt, reflect.TypeFor[base64Bytes]()) {
		text = dropLineBreaksInStrings(raw)
	}
	var obj map[string]json.RawMessage
	if !json.Valid(text) || json.Unmarshal(text, &obj) != nil {
		t.Fatalf("%s %q: params that are not a JSON object accepted", name, raw)
	}
	fold := false
	for _, f := range paramFields(pt) {
		if v, ok := obj[f.name]; f.required && (!ok || string(v) == "null") {
			t.Fatalf("%s %q: accepted without required field %s", name, raw, f.name)
		}
		for key := range obj {
			fold = fold || key != f.name && strings.EqualFold(key, f.name)
		}
	}
	if !fold && bytes.Equal(text, raw) {
		q := reflect.New(pt)
		err := json.Unmarshal(raw, q.Interface())
		switch {
		case err != nil && strings.Contains(err.Error(), "number -0 into"): // serde reads -0 as 0; encoding/json refuses it
		case err != nil:
			t.Fatalf("%s %q: accepted, but encoding/json says %v", name, raw, err)
		case !reflect.DeepEqual(p.Elem().Interface(), q.Elem().Interface()):
			t.Fatalf("%s %q: decoded %+v, encoding/json %+v", name, raw, p.Elem().Interface(), q.Elem().Interface())
		}
	}
	enc, err := encodeParams(p, pt)
	if err != nil {
		t.Fatalf("%s %q: decoded params do not encode: %v", name, raw, err)
	}
	p2 := reflect.New(pt)
	if err := decodeParams(enc, pt.Name(), p2.Interface()); err != nil {
		t.Fatalf("%s %q: re-encoded as %s, refused: %v", name, raw, enc, err)
	}
	if enc2, _ := encodeParams(p2, pt); !bytes.Equal(enc, enc2) {
		t.Fatalf("%s %q: round trip %s -> %s", name, raw, enc, enc2)
	}
}

// encodeParams encodes decoded params *p for a round trip, leaving out the fields that keep
// what they decoded to themselves (a struct with no exported field and no MarshalJSON: the
// fs methods' sandboxParam), which the comparison with encoding/json covers instead.
func encodeParams(p reflect.Value, pt reflect.Type) ([]byte, error) {
	b, err := json.Marshal(p.Interface())
	if err != nil {
		return nil, err
	}
	var opaque []string
	for _, f := range paramFields(pt) {
		ft := pt.Field(f.index).Type
		if ft.Kind() == reflect.Struct && !ft.Implements(reflect.TypeFor[json.Marshaler]()) &&
			!slices.ContainsFunc(reflect.VisibleFields(ft), func(sf reflect.StructField) bool { return sf.IsExported() }) {
			opaque = append(opaque, f.name)
		}
	}
	if len(opaque) == 0 {
		return b, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for _, k := range opaque {
		delete(m, k)
	}
	return json.Marshal(m)
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	r io.Reader
	n int
}

func (c chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// FuzzStdioReadMessage reads newline-delimited input in reads of 1 to 8 bytes or whole, after a
// first line longer than the read buffer or not, and keeping each message or not: the
// messages are the input's non-blank lines, trimmed, in order, then io.EOF; a message not
// released is never overwritten by the next read.
func FuzzStdioReadMessage(f *testing.F) {
	// seeds: testdata/fuzz/FuzzStdioReadMessage
	f.Fuzz(func(t *testing.T, input []byte, flags uint8) {
		var r io.Reader = bytes.NewReader(input)
		if n := int(flags>>3) & 7; flags&2 != 0 {
			r = chunkReader{r, n + 1}
		}
		if flags&1 != 0 { // a first line past bufio's buffer: ReadSlice's ErrBufferFull path
			long := bytes.Repeat([]byte("L"), 70<<10)
			r = io.MultiReader(bytes.NewReader(long), r)
			input = append(long, input...)
		}
		keep := flags&4 != 0
		tr := newStdioTransport(r, io.Discard)
		var got [][]byte
		for {
			m, err := tr.next()
			if err != nil {
				if err != io.EOF {
					t.Fatalf("read error %v", err)
				}
				break
			}
			if keep {
				got = append(got, m.data)
			} else {
				got = append(got, bytes.Clone(m.data))
				m.release()
			}
		}
		var want [][]byte
		for _, line := range bytes.Split(input, []byte("\n")) {
			if line = bytes.TrimSpace(line); len(line) > 0 {
				want = append(want, line)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%d messages, want %d", len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("message %d is %.80q, want %.80q", i, got[i], want[i])
			}
		}
	})
}
