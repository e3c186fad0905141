package main

// The JSON-RPC envelope, its errors and encoders, and params decoding: pure functions over
// message bytes, shared by every transport (docs/protocol.md §3). The lexer they use is in
// rpc_text.go, beside the text checks.
//
// Wire format (one JSON object per transport message):
//
//	client → server
//	  {"id":ID,"method":M,"params":P}   request        ID: int64 or string, echoed byte for byte
//	  {"method":M,"params":P}           notification   only "initialized" is expected
//	  {"id":ID,"result":R} / "error"    response       to a request of ours (rpc_outgoing.go); an id we never gave closes
//	  anything else                     parse error    {"error":{"code":-32600,...},"id":-1}, connection kept
//	server → client (no "jsonrpc" member, compact)
//	  {"id":ID,"result":R}
//	  {"error":{"code":C,"message":T},"id":ID}
//	  {"method":M,"params":P}
//	  {"id":N,"method":M,"params":P}    a request of ours, N = 1, 2, … (rpc_outgoing.go)

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// JSON-RPC error codes used by the reference (docs/protocol.md §10).
const (
	codeInvalidRequest  = -32600
	codeMethodNotFound  = -32601
	codeInvalidParams   = -32602
	codeInternal        = -32603
	codeNotFound        = -32004
	codeSessionAttached = -32010
)

// rpcError is an error that reaches the client as a JSON-RPC error object.
type rpcError struct {
	Code    int        `json:"code"`
	Message string     `json:"message"`
	Data    *errorData `json:"data,omitempty"`
}

// errorData is an error object's data: only a failed spawn has one (docs/protocol.md §6.4).
type errorData struct {
	Kind string `json:"kind"`
}

func (e *rpcError) Error() string { return e.Message }

func newRPCError(code int, format string, a ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, a...)}
}

func errInvalidRequest(format string, a ...any) *rpcError {
	return newRPCError(codeInvalidRequest, format, a...)
}
func errInvalidParams(format string, a ...any) *rpcError {
	return newRPCError(codeInvalidParams, format, a...)
}
func errInternal(format string, a ...any) *rpcError { return newRPCError(codeInternal, format, a...) }
func errNotFound(format string, a ...any) *rpcError { return newRPCError(codeNotFound, format, a...) }

// toRPCError turns any handler error into the error object sent to the client. Errors that are
// not already an *rpcError are internal errors.
func toRPCError(err error) *rpcError {
	var re *rpcError
	if errors.As(err, &re) {
		return re
	}
	return errInternal("%s", err.Error())
}

// incoming is the untagged shape of any client message (docs/protocol.md §3.1).
type incoming struct {
	ID     json.RawMessage `json:"id"`
	Method json.RawMessage `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// parseIncoming classifies one message. It returns the validated id (nil for a notification)
// and the method name; a non-nil error is the serde-style text of a parse error.
//
// The envelope is split by scanObject without decoding it: every member but params is small
// and checked with json.Valid, while params is only delimited here and decoded field by field
// by decodeParams, so a 40 MB base64 string is never run through encoding/json's scanner.
// The returned slices alias msg.
func parseIncoming(msg []byte) (in incoming, name string, err error) {
	t := bytes.TrimRight(msg, " \t\r\n") // JSON's whitespace, not bytes.TrimSpace's
	if len(t) == 0 {
		return in, "", textError(msg, len(msg), "EOF while parsing a value")
	}
	// Leading whitespace stays in t, for syntax errors to count columns from the frame's
	// start, as the reference does.
	if obj := t[skipSpace(t, 0):]; obj[0] != '{' {
		if !json.Valid(t) {
			return in, "", jsonSyntaxError(t)
		}
		return in, "", errors.New("expected a JSON-RPC object")
	}
	ok := scanObject(t[skipSpace(t, 0):], func(key string, val []byte) bool {
		switch key {
		case "params":
			if in.Params != nil && !json.Valid(in.Params) { // a duplicate: the last one wins, but the first is JSON too
				return false
			}
			in.Params = val
			return true
		case "id":
			in.ID = val
		case "method":
			in.Method = val
		case "result":
			in.Result = val
		case "error":
			in.Error = val
		}
		return json.Valid(val)
	})
	if !ok {
		return in, "", jsonSyntaxError(t)
	}
	if in.ID != nil && !validID(in.ID) {
		return in, "", errors.New("data did not match any variant of untagged enum RequestId")
	}
	switch {
	case in.Method != nil && plainJSONString(in.Method):
		return in, string(in.Method[1 : len(in.Method)-1]), nil
	case in.Method != nil:
		if err := json.Unmarshal(in.Method, &name); err != nil {
			return in, "", fmt.Errorf("invalid type: %s, expected a string", jsonKind(in.Method))
		}
		return in, name, nil
	case in.Result != nil || in.Error != nil: // a response: its shape is checked as 0.169 checks it
		if in.ID == nil {
			return in, "", errors.New("missing field `id`")
		}
		if in.Result == nil {
			return in, "", checkClientError(in.Error)
		}
		return in, "", nil
	case in.ID != nil:
		return in, "", errors.New("missing field `error`")
	default:
		return in, "", errors.New("data did not match any variant of untagged enum JSONRPCMessage")
	}
}

// validID accepts what the reference's RequestId accepts: a signed 64-bit integer or a string.
func validID(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	switch raw[0] {
	case '"':
		var s string
		return json.Unmarshal(raw, &s) == nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		_, err := strconv.ParseInt(string(raw), 10, 64)
		return err == nil
	}
	return false
}

// clientError is the error member of an error response from a client, as the reference
// decodes it before it hangs up: a malformed one is a parse error instead.
type clientError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// checkClientError refuses an error member the reference cannot decode, in its words.
func checkClientError(raw []byte) error {
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '[' { // serde's positional form
		var elems []json.RawMessage
		if json.Unmarshal(t, &elems) == nil && len(elems) != 3 {
			return fmt.Errorf("invalid length %d, expected struct JSONRPCErrorError with 3 elements", len(elems))
		}
		return nil
	}
	var e clientError
	if err := decodeParams(raw, "JSONRPCErrorError", &e); err != nil {
		return errors.New(toRPCError(err).Message)
	}
	return nil
}

// jsonKind names the JSON type of a raw value, as serde's "invalid type" messages do.
func jsonKind(raw []byte) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return "null"
	}
	switch t[0] {
	case '"':
		if bytes.IndexByte(t, '\\') >= 0 { // the text, not its escapes, as serde shows it
			var str string
			if json.Unmarshal(t, &str) == nil {
				return "string " + strconv.Quote(str)
			}
		}
		return "string " + string(t)
	case '{':
		return "map"
	case '[':
		return "sequence"
	case 't', 'f':
		return "boolean `" + string(t) + "`"
	case 'n':
		return "null"
	}
	return "number" // serde_json's word for a number, without its value
}

// appendResponse appends {"id":ID,"result":R} to dst, R encoded with encoding/json unless
// it is already JSON.
func appendResponse(dst []byte, id json.RawMessage, result any) ([]byte, error) {
	var r []byte
	switch v := result.(type) {
	case rawJSON:
		r = v
	case json.RawMessage: // built by a handler, not taken from the client
		r = v
	default:
		var err error
		if r, err = json.Marshal(result); err != nil {
			return dst, err
		}
	}
	return appendEnvelope(dst, id, r), nil
}

// appendError appends {"error":{"code":C,"message":T},"id":ID} to dst, with "data":{"kind":K}
// before the message when e has data, in the reference's key order.
func appendError(dst []byte, id json.RawMessage, e *rpcError) []byte {
	dst = append(dst, `{"error":{"code":`...)
	dst = strconv.AppendInt(dst, int64(e.Code), 10)
	if e.Data != nil {
		dst = append(dst, `,"data":{"kind":`...)
		dst = appendJSONString(dst, e.Data.Kind)
		dst = append(dst, '}')
	}
	dst = append(dst, `,"message":`...)
	dst = appendJSONString(dst, e.Message)
	dst = append(dst, `},"id":`...)
	if id == nil {
		id = json.RawMessage("-1")
	}
	dst = append(dst, id...)
	return append(dst, '}')
}

// appendNotification appends {"method":M,"params":P} to dst.
func appendNotification(dst []byte, name string, params any) ([]byte, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return dst, err
	}
	dst = append(dst, `{"method":`...)
	dst = appendJSONString(dst, name)
	dst = append(dst, `,"params":`...)
	dst = append(dst, p...)
	return append(dst, '}'), nil
}

// appendJSONString appends s as a JSON string. Plain ASCII, the common case, is copied as is.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			b, _ := json.Marshal(s)
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// rawJSONDecoder is a params field that decodes its own raw JSON value, skipping
// encoding/json entirely: large base64 payloads decode straight from the message bytes.
type rawJSONDecoder interface {
	decodeRawJSON(raw []byte) error
}

// nullDecoder is a required params field that words its own refusal of null (an enum).
type nullDecoder interface{ decodesNull() }

// paramField is one decodable field of a params struct.
type paramField struct {
	name     string
	index    int
	required bool // a json tag without omitempty on a non-pointer field
	uri      bool // a path URI (tag uri:"path"), whose syntax is checked as it is decoded
	seen     bool
	null     bool
}

// paramFields lists the json-tagged fields of a params struct type.
func paramFields(rt reflect.Type) []paramField {
	fields := make([]paramField, 0, rt.NumField())
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		tag := f.Tag.Get("json")
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		required := !strings.Contains(opts, "omitempty") && f.Type.Kind() != reflect.Pointer
		fields = append(fields, paramField{name: name, index: i, required: required, uri: f.Tag.Get("uri") == "path"})
	}
	return fields
}

// decodeParams decodes params into the struct *v, which the reference calls name, with the
// reference's (serde's) rules: keys match exactly, unknown fields are ignored, a field whose
// json tag lacks omitempty is required, and null or non-object params are an error ("invalid
// type: null, expected struct NAME": name is a wire text, never derived from the Go type).
// Fields are decoded in document order, so the first bad value is the one reported, then the
// first missing field. Every failure is a -32602 in the reference's words: an *rpcError with
// codeInvalidParams, the one params-error type (errInvalidParams), which toRPCError sends as
// is — a separate Go type would only be converted into it.
func decodeParams(raw json.RawMessage, name string, v any) error {
	rv := reflect.ValueOf(v).Elem()
	rt := rv.Type()
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '{' {
		kind := "null"
		if len(t) > 0 {
			kind = jsonKind(t)
		}
		return errInvalidParams("invalid type: %s, expected struct %s", kind, name)
	}
	fields := paramFields(rt)
	var ferr error
	ok := scanObject(t, func(key string, val []byte) bool {
		i := slices.IndexFunc(fields, func(f paramField) bool { return f.name == key })
		if i < 0 {
			if !json.Valid(val) {
				ferr = errInvalidParams("invalid JSON in params field `%s`", key)
			}
			return ferr == nil
		}
		f := &fields[i]
		f.seen, f.null = true, string(val) == "null"
		if _, own := rv.Field(f.index).Addr().Interface().(nullDecoder); f.null && f.required && !own {
			ferr = errInvalidParams("invalid type: null, expected %s", wireTypeName(rt.Field(f.index).Type))
			return false
		}
		ferr = decodeField(rv.Field(f.index), key, val)
		if ferr == nil && f.uri {
			ferr = checkPathSyntax(rv.Field(f.index).String())
		}
		return ferr == nil
	})
	if ferr != nil {
		return ferr
	}
	if !ok {
		return errInvalidParams("invalid JSON in params: %s", jsonSyntaxError(t))
	}
	for _, f := range fields {
		if f.required && !f.seen {
			return errInvalidParams("missing field `%s`", f.name)
		}
	}
	return nil
}

// decodeField decodes one params value into field fv, named key.
func decodeField(fv reflect.Value, key string, val []byte) error {
	if fv.Type() == reflect.TypeFor[string]() && plainJSONString(val) { // paths, ids: most fields
		fv.SetString(string(val[1 : len(val)-1]))
		return nil
	}
	target := fv.Addr().Interface()
	var err error
	if d, ok := target.(rawJSONDecoder); ok {
		err = d.decodeRawJSON(val)
	} else {
		err = json.Unmarshal(val, target)
	}
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	var re *rpcError
	switch {
	case errors.As(err, &re):
		return re
	case errors.As(err, &te):
		switch {
		case te.Value == "number -0" && te.Field == "" && isUnsigned(te.Type): // serde reads -0 as 0
			if fv.Kind() == reflect.Pointer {
				fv.Set(reflect.New(fv.Type().Elem()))
			} else {
				fv.SetUint(0)
			}
			return nil
		case strings.HasPrefix(te.Value, "number") && (isUnsigned(te.Type) || isSigned(te.Type)):
			return errInvalidParams("invalid number")
		}
		got := val
		if te.Field != "" || !sameKind(val, te.Value) { // the mismatch is inside val
			got = valueEndingAt(val, int(te.Offset))
		}
		return errInvalidParams("invalid type: %s, expected %s", jsonKind(got), wireTypeName(te.Type))
	}
	return errInvalidParams("%s", strings.TrimPrefix(err.Error(), "json: "))
}

// valueEndingAt returns the scalar JSON value that ends at val[end] (where encoding/json
// stopped on a type error), or val if there is none.
func valueEndingAt(val []byte, end int) []byte {
	if end <= 0 || end > len(val) {
		return val
	}
	start := end
	if val[end-1] == '"' {
		for start = end - 2; start >= 0; start-- {
			if val[start] == '"' {
				backslashes := 0
				for p := start - 1; p >= 0 && val[p] == '\\'; p-- {
					backslashes++
				}
				if backslashes%2 == 0 {
					break
				}
			}
		}
	} else {
		for start > 0 && jsonScalarByte(val[start-1]) {
			start--
		}
	}
	if start < 0 || start == end {
		return val
	}
	return val[start:end]
}

// plainJSONString reports whether val is a JSON string of printable ASCII with no escapes,
// which decodes to its own bytes.
func plainJSONString(val []byte) bool {
	if len(val) < 2 || val[0] != '"' || val[len(val)-1] != '"' {
		return false
	}
	for _, c := range val[1 : len(val)-1] {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// sameKind reports whether the raw value val is of the JSON type encoding/json names goValue
// ("string", "number", "bool", "array", "object"), so that val itself is what failed.
func sameKind(val []byte, goValue string) bool {
	if len(val) == 0 {
		return false
	}
	switch kind, _, _ := strings.Cut(goValue, " "); kind {
	case "string":
		return val[0] == '"'
	case "number":
		return val[0] == '-' || val[0] >= '0' && val[0] <= '9'
	case "bool":
		return val[0] == 't' || val[0] == 'f'
	case "array":
		return val[0] == '['
	case "object":
		return val[0] == '{'
	}
	return false
}

func isSigned(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return true
	}
	return false
}

func isUnsigned(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// wireTypeName names a Go type in serde's words, for error messages.
func wireTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "u64"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "i64"
	case reflect.Slice, reflect.Array:
		return "a sequence"
	case reflect.Map:
		return "a map"
	case reflect.Struct:
		return "struct " + strings.ToUpper(t.Name()[:1]) + t.Name()[1:]
	case reflect.Pointer:
		return wireTypeName(t.Elem())
	}
	return t.String()
}
