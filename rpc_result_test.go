package main

// Tests of the encoding of handler results (rpc_result.go, docs/protocol.md §3.2).

import (
	"encoding/json"
	"testing"
)

// jsonOf answers v as a test method built by hand does (method.call returns a result).
func jsonOf[T any](v T) result { return answer(v) }

// TestAnswerEncodings: each kind of typed answer is encoded as the wire expects, the two
// pre-encoded forms as they are.
func TestAnswerEncodings(t *testing.T) {
	id := json.RawMessage(`7`)
	framed := newBase64Answer(`{"chunk":`, 3, len(`,"eof":true}`))
	copy(framed.data, "abc")
	for _, c := range []struct {
		name string
		res  result
		want string
	}{
		{"struct", answer(statusResult{"ready"}), `{"id":7,"result":{"status":"ready"}}`},
		{"pointer", answer(&terminateResult{true}), `{"id":7,"result":{"running":true}}`},
		{"empty", answer(emptyResult{}), `{"id":7,"result":{}}`},
		{"raw", answer(rawJSON(`{"a":1}`)), `{"id":7,"result":{"a":1}}`},
		{"framed", answer(framed.finish(3, `,"eof":true}`)), `{"id":7,"result":{"chunk":"YWJj","eof":true}}`},
	} {
		b, err := c.res.response(id)
		if err != nil || string(b) != c.want {
			t.Errorf("%s: %s %v, want %s", c.name, b, err, c.want)
		}
	}
	if _, ok := answer(rawJSON(`1`)).(rawJSON); !ok {
		t.Error("a rawJSON answer is not sent as is")
	}
	if _, ok := answer(framedJSON{}).(framedJSON); !ok {
		t.Error("a framedJSON answer is not sent as is")
	}
}

// TestAnswerAllocations: encoding an answer costs what boxing it into an interface always
// did: nothing for {} and a pointer's worth for the rest.
func TestAnswerAllocations(t *testing.T) {
	raw := rawJSON(`{}`)
	if n := testing.AllocsPerRun(100, func() { _ = answer(emptyResult{}) }); n != 0 {
		t.Errorf("answer({}) allocates %v times, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = answer(raw) }); n > 1 {
		t.Errorf("answer(rawJSON) allocates %v times, want at most 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = answer(statusResult{"ready"}) }); n > 1 {
		t.Errorf("answer(struct) allocates %v times, want at most 1", n)
	}
}
