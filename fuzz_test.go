package main

// Fuzz targets for the parsers the older targets leave out: the JSON-RPC envelope
// (parseIncoming, checkJSONText), the params of every method (decodeParams and the lifecycle
// gate, never a handler), the JSON of a signed bearer token, message 2 of the Noise
// handshake, the Noise byte-stream deframer and the stdio line reader. The other parsers have
// their targets next to their tests:
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
	"encoding/base64"
	"encoding/binary"
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
	"time"
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
				derr = (&conn{}).parseSandbox(&cp)
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
		if err := json.Unmarshal(raw, q.Interface()); err != nil {
			t.Fatalf("%s %q: accepted, but encoding/json says %v", name, raw, err)
		}
		if !reflect.DeepEqual(p.Elem().Interface(), q.Elem().Interface()) {
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

// refJWTObject decodes a JWT segment's JSON with encoding/json: one object, UTF-8, no member
// name twice (after unescaping).
func refJWTObject(b []byte) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if !utf8.Valid(b) || !json.Valid(b) || bytes.Trim(b, " \t\r\n")[0] != '{' || json.Unmarshal(b, &m) != nil {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.Token()
	n := 0
	for ; dec.More(); n++ {
		var v json.RawMessage
		if _, err := dec.Token(); err != nil || dec.Decode(&v) != nil {
			return nil, false
		}
	}
	return m, n == len(m)
}

// refJWTInt reads a JSON integer in the i64 range; absent says whether the member is absent or
// null.
func refJWTInt(raw json.RawMessage) (v *big.Int, absent, ok bool) {
	if raw == nil || string(raw) == "null" {
		return nil, true, true
	}
	var n json.Number // which would also take a string holding a number
	if raw[0] == '"' || json.Unmarshal(raw, &n) != nil || strings.ContainsAny(n.String(), ".eE") {
		return nil, false, false
	}
	v, ok = new(big.Int).SetString(n.String(), 10)
	return v, false, ok && v.IsInt64()
}

// refJWTString reads a JSON string (not null).
func refJWTString(raw json.RawMessage) (string, bool) {
	var s string
	return s, len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil
}

// refJWTBody is docs/protocol.md §2.3's answer for a token signed with the right secret, from
// encoding/json and exact integer arithmetic.
func refJWTBody(a *wsAuthConfig, token string, header, claims []byte, now int64) string {
	if len(token) > maxWSBearerTokenBytes {
		return wsAuthInvalidJWT
	}
	h, ok := refJWTObject(header)
	if !ok {
		return wsAuthInvalidJWT
	}
	if alg, ok := refJWTString(h["alg"]); !ok || alg != "HS256" {
		return wsAuthInvalidJWT
	}
	if _, crit := h["crit"]; crit {
		return wsAuthInvalidJWT
	}
	c, ok := refJWTObject(claims)
	if !ok {
		return wsAuthInvalidJWT
	}
	exp, absent, ok := refJWTInt(c["exp"])
	if !ok || absent {
		return wsAuthInvalidJWT
	}
	nbf, noNBF, ok := refJWTInt(c["nbf"])
	if !ok {
		return wsAuthInvalidJWT
	}
	var iss string
	hasISS := c["iss"] != nil && string(c["iss"]) != "null"
	if hasISS {
		if iss, ok = refJWTString(c["iss"]); !ok {
			return wsAuthInvalidJWT
		}
	}
	var aud []string
	switch raw := c["aud"]; {
	case raw == nil || string(raw) == "null":
	case raw[0] == '"':
		s, _ := refJWTString(raw)
		aud = []string{s}
	case raw[0] == '[':
		var items []any
		json.Unmarshal(raw, &items)
		for _, item := range items {
			s, ok := item.(string)
			if !ok {
				return wsAuthInvalidJWT
			}
			aud = append(aud, s)
		}
	default:
		return wsAuthInvalidJWT
	}
	n, skew := big.NewInt(now), big.NewInt(a.skewSeconds)
	switch {
	case n.Cmp(new(big.Int).Add(exp, skew)) > 0:
		return wsAuthExpiredJWT
	case !noNBF && n.Cmp(new(big.Int).Sub(nbf, skew)) < 0:
		return wsAuthJWTNotYetValid
	case a.issuer != "" && (!hasISS || iss != a.issuer):
		return wsAuthJWTIssuerMismatch
	case a.audience != "" && !slices.Contains(aud, a.audience):
		return wsAuthJWTAudMismatch
	}
	return ""
}

// FuzzWSAuthJWT signs the fuzzer's header and claims with the configured secret, so that every
// input reaches the JSON rules, and compares check's answer, body for body, with refJWTBody:
// the header's alg and crit, the claims' types, duplicates, the time window with and without
// skew (near the int64 bounds too), issuer and audience. FuzzWSAuthCheck covers the
// Authorization header, the segments' encoding and the signature.
func FuzzWSAuthJWT(f *testing.F) {
	var configs []*wsAuthConfig
	for _, c := range []struct {
		iss, aud string
		skew     time.Duration
	}{
		{skew: defaultWSMaxClockSkew},
		{iss: "exec-issuer", aud: "exec-server", skew: defaultWSMaxClockSkew},
		{iss: "exec-issuer", skew: 0},
		{aud: "exec-server", skew: 0},
	} {
		a, err := newWSAuth("signed-bearer-token", "", "", testSharedSecretFile, c.iss, c.aud, c.skew)
		if err != nil {
			f.Fatal(err)
		}
		configs = append(configs, a)
	}
	f.Fuzz(func(t *testing.T, header, claims []byte, now int64, sel uint8) { // seeds: testdata/fuzz/FuzzWSAuthJWT
		a := configs[int(sel)%len(configs)]
		token := signTestJWT(header, claims, testSharedSecret, "HS256", base64.RawURLEncoding)
		body, ok := a.check("Bearer "+token, time.Unix(now, 0))
		if want := refJWTBody(a, token, header, claims, now); body != want || ok != (want == "") {
			t.Fatalf("header %q claims %q at %d (issuer %q, audience %q, skew %d): %q, %v; want %q",
				header, claims, now, a.issuer, a.audience, a.skewSeconds, body, ok, want)
		}
	})
}

// cloneNoiseHandshake copies a handshake state so that each fuzz input reads into a fresh
// one without redoing the expensive writes before it. The identities are shared (nothing
// writes to them); ck and h are written in place, and the hasher has state, so they are not.
func cloneNoiseHandshake(hs *noiseHandshakeState) *noiseHandshakeState {
	c := *hs
	c.ss.hasher = hs.ss.hash.new()
	c.ss.ck = bytes.Clone(hs.ss.ck)
	c.ss.h = bytes.Clone(hs.ss.h)
	return &c
}

// FuzzNoiseReadResponse feeds message 2 to an initiator that has sent message 1. Only the
// executor's own two answers can be accepted: the empty payload, which yields a transport
// paired with the executor's, and the registry rejection, which yields
// errNoiseRegistryRejected. Anything else is refused, and a refusal is final. The executor
// never reads a message 2 itself; this is the harness half of the handshake, which shares
// readTokens with the executor's reading of message 1.
func FuzzNoiseReadResponse(f *testing.F) {
	rng := &noiseCounterRand{next: 7}
	hid, _ := newNoiseIdentity(rng)
	eid, _ := newNoiseIdentity(rng)
	prologue := noisePrologue("env-fuzz", "reg-fuzz", "00000000-0000-4000-8000-00000000f022")
	ini, err := newNoiseInitiator(hid, eid.publicKey(), prologue)
	if err != nil {
		f.Fatal(err)
	}
	ini.hs.entropy = noiseDeterministic(rng)
	msg1, err := ini.initiate([]byte("auth"))
	if err != nil {
		f.Fatal(err)
	}
	respond := func(payload []byte) ([]byte, *noiseTransport) {
		r, err := newNoiseResponder(eid, prologue)
		if err != nil {
			f.Fatal(err)
		}
		r.hs.entropy = noiseDeterministic(rng)
		if err := r.readInitiation(msg1); err != nil {
			f.Fatal(err)
		}
		msg2, tr, err := r.respond(payload)
		if err != nil {
			f.Fatal(err)
		}
		return msg2, tr
	}
	okMsg2, executor := respond(nil)
	rejectMsg2, _ := respond([]byte(noiseRegistryRejected))
	f.Add(okMsg2)
	f.Add(rejectMsg2)
	f.Add(okMsg2[:len(okMsg2)-1])
	f.Add(append(bytes.Clone(okMsg2), 0))
	f.Add(okMsg2[:noiseKEMCiphertext])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, msg2 []byte) {
		i := &noiseInitiator{hs: cloneNoiseHandshake(ini.hs)}
		harness, err := i.readResponse(msg2)
		switch {
		case err == nil:
			if !bytes.Equal(msg2, okMsg2) {
				t.Fatalf("accepted a message 2 the executor did not write: %x", msg2)
			}
			if !bytes.Equal(harness.handshakeHash(), executor.handshakeHash()) {
				t.Fatal("handshake hashes differ")
			}
			for _, dir := range [][2]*noiseTransport{{harness, executor}, {executor, harness}} {
				ct := noiseSealRaw(t, dir[0], 0, []byte("ping"))
				if pt := noiseOpenRaw(t, dir[1], 0, ct); string(pt) != "ping" {
					t.Fatalf("transport keys do not pair: %q", pt)
				}
			}
		case errors.Is(err, errNoiseRegistryRejected):
			if !bytes.Equal(msg2, rejectMsg2) {
				t.Fatalf("a message 2 the executor did not write reads as a registry rejection: %x", msg2)
			}
		case bytes.Equal(msg2, okMsg2):
			t.Fatalf("the executor's message 2 refused: %v", err)
		}
		if _, err := i.readResponse(okMsg2); err == nil {
			t.Fatal("a second message 2 was read")
		}
	})
}

// refDeframe splits a whole byte stream into its length-prefixed messages; bad is set when
// a complete length is 0 or over the limit (the messages before it still count).
func refDeframe(stream []byte) (msgs [][]byte, bad bool) {
	for len(stream) >= noiseMessageLenLen {
		n := uint64(binary.BigEndian.Uint32(stream))
		if n == 0 || n > noiseMaxRPCMessage {
			return msgs, true
		}
		if uint64(len(stream)-noiseMessageLenLen) < n {
			break
		}
		msgs = append(msgs, bytes.Clone(stream[noiseMessageLenLen:noiseMessageLenLen+n]))
		stream = stream[noiseMessageLenLen+n:]
	}
	return msgs, false
}

// FuzzNoiseDeframer feeds a decrypted byte stream to the deframer cut into arbitrary pieces
// (records end anywhere): it must deliver exactly the messages of the whole stream, in order,
// whatever the cuts, refuse a bad length as soon as its four bytes are in, and never keep a
// reference to the pieces it was fed, since a record's buffer is reused.
func FuzzNoiseDeframer(f *testing.F) {
	// seeds: testdata/fuzz/FuzzNoiseDeframer
	f.Fuzz(func(t *testing.T, stream, cuts []byte) {
		want, bad := refDeframe(stream)
		var d noiseDeframer
		var got [][]byte
		deliver := func(m []byte) error { got = append(got, m); return nil }
		fed := bytes.Clone(stream)
		var err error
		for k := 0; len(fed) > 0 && err == nil; k++ {
			n := len(fed)
			if k < len(cuts) {
				n = min(n, int(cuts[k]))
			}
			err = d.feed(fed[:n], deliver)
			clear(fed[:n]) // the record buffer is reused
			fed = fed[n:]
		}
		if (err != nil) != bad {
			t.Fatalf("%x cut at %v: error %v, want bad=%v", stream, cuts, err, bad)
		}
		if len(got) != len(want) {
			t.Fatalf("%x cut at %v: %d messages, want %d", stream, cuts, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%x cut at %v: message %d is %q, want %q", stream, cuts, i, got[i], want[i])
			}
		}
	})
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
