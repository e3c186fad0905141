package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestFirstDuplicateKey covers what the vectors (testdata/rpc/duplicates.txt) cannot say on
// one line, and the switch from pairwise comparison to an index in a large object.
func TestFirstDuplicateKey(t *testing.T) {
	many := func(n int, last string) string { // an object of n names k0…, then last
		var b strings.Builder
		b.WriteString(`{"id":1,"method":"x","params":{"env":{`)
		for i := range n {
			fmt.Fprintf(&b, `"k%d":"v",`, i)
		}
		b.WriteString(last + `:"v"}}}`)
		return b.String()
	}
	for _, c := range []struct {
		msg  string
		want string // the parseMessage error, "" for none about duplicates
	}{
		{"{\"id\":1,\n  \"method\":\"x\",\n  \"id\":2}", "duplicate JSON object key `id` at line 3 column 6"},
		{"   {\"id\":1,\"id\":2}", "duplicate JSON object key `id` at line 1 column 15"},
		{many(40, `"k39"`), "duplicate JSON object key `k39` at line 1 column 433"},
		{many(40, `"k\u0033"`), "duplicate JSON object key `k3` at line 1 column 437"},
		{many(10, `"k\u0033"`), "duplicate JSON object key `k3` at line 1 column 137"},
		{many(40, `"k40"`), ""},
		{`{"a":{"b":1},"c":{"b":1},"d":[{"b":1},{"b":1}]}`, ""},
		{`{"a":1}{"a":1,"a":2}`, ""}, // after the first value: trailing characters
		{`{"a":[1,{"b":[]},[]],"a":2}`, "duplicate JSON object key `a` at line 1 column 24"},
		{`{"a":"\"a","a":2}`, "duplicate JSON object key `a` at line 1 column 14"},
		{`{"a\"":1,"a":2}`, ""},
		{`{"a":` + strings.Repeat("[", 126) + strings.Repeat("]", 126) + `,"a":1}`, "duplicate JSON object key `a` at line 1 column 261"},
	} {
		_, _, err := parseMessage([]byte(c.msg), false, nil)
		got := ""
		if err != nil && strings.HasPrefix(err.Error(), "duplicate") {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%.60q: got %q, want %q", c.msg, got, c.want)
		}
	}
}

// TestParseMessageErrorOrder: of two errors in a message's text, serde reports the first it
// reads; an error in the text comes before one about the message's shape (each checked
// against codex 0.169).
func TestParseMessageErrorOrder(t *testing.T) {
	for _, c := range []struct{ msg, want string }{
		{`  {"id":1,"x":"\ud800"}`, "unexpected end of hex escape at line 1 column 22"},
		{`{"id":1,"x":"\ud800","id":2}`, "unexpected end of hex escape at line 1 column 20"},
		{`{"id":1,"id":2,"x":"\ud800"}`, "duplicate JSON object key `id` at line 1 column 12"},
		{`{"id":1,"method":"x","params":{"a":1,"a":tru}}`, "duplicate JSON object key `a` at line 1 column 40"},
	} {
		if _, _, err := parseMessage([]byte(c.msg), false, nil); err == nil || err.Error() != c.want {
			t.Errorf("%s: got %v, want %q", c.msg, err, c.want)
		}
	}
	// A syntax error before the duplicate hides it. (Inside params the syntax error itself
	// is left to the params decoder: docs/protocol.md §3.3.)
	for _, msg := range []string{`{"id":1,"method":"x","params":{"a":tru,"a":1}}`, `{"id":tru,"id":1}`} {
		if _, _, err := parseMessage([]byte(msg), false, nil); err != nil && strings.HasPrefix(err.Error(), "duplicate") {
			t.Errorf("%s: %v", msg, err)
		}
	}
	// Columns count from the start of the frame, leading whitespace included.
	_, _, err := parseMessage([]byte(`   {"id":1,,}`), false, nil)
	if err == nil || !strings.HasSuffix(err.Error(), "at line 1 column 12") {
		t.Errorf("leading whitespace: %v", err)
	}
}

// BenchmarkParseMessage is the envelope of a process/write carrying 64 KiB: the duplicate scan
// must stay a small part of it, and allocate nothing.
func BenchmarkParseMessage(b *testing.B) {
	msg := []byte(`{"id":12,"method":"process/write","params":{"processId":"p1","writeId":"w1","chunk":"` +
		strings.Repeat("QUJD", 64<<10/3) + `"}}`)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := parseMessage(msg, true, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTextLimits: the reference's bounds on a message's JSON, with its words and columns
// (checked against codex 0.169): at most 262,144 values, at most 127 containers open.
func TestTextLimits(t *testing.T) {
	zeros := func(n int) string { return strings.TrimSuffix(strings.Repeat("0,", n), ",") }
	for _, c := range []struct{ msg, want string }{
		{`{"id":1,"method":"x","params":[` + zeros(262141) + `]}`, "JSON-RPC message exceeds the limit of 262144 JSON values at line 1 column 524311"},
		{`{"id":1,"method":"x","params":[` + zeros(262140) + `]}`, ""},
		{strings.Repeat("[", 200), "recursion limit exceeded at line 1 column 128"},
		{`{"a":` + strings.Repeat("[", 127) + strings.Repeat("]", 127) + `,"a":1}`, "recursion limit exceeded at line 1 column 132"},
		{"   ", "EOF while parsing a value at line 1 column 3"},
		{"\n \n  ", "EOF while parsing a value at line 3 column 2"},
	} {
		_, _, err := parseMessage([]byte(c.msg), false, nil)
		if got := fmt.Sprint(err); c.want == "" && err != nil && !strings.Contains(got, "expected") || c.want != "" && got != c.want {
			t.Errorf("%.50q…: got %v, want %q", c.msg, err, c.want)
		}
	}
}

// TestScanTextAllocatesNothing: an ordinary message costs the duplicate and limit scan no
// allocation, escaped names included; only an object of more than maxInlineKeys names is
// indexed.
func TestScanTextAllocatesNothing(t *testing.T) {
	msg := []byte(`{"id":7,"method":"process/start","params":{"processId":"p","argv":["sh","-c","echo"],` +
		`"cwd":"file:///tmp","env":{"PATH":"/bin","HOME":"/root","L\u0041NG":"C"},"tty":false,"arg0":null}}`)
	var scan textScan // as a connection's reader keeps it
	if n := testing.AllocsPerRun(100, func() { scan.scanText(msg) }); n != 0 {
		t.Errorf("scanText allocated %v times per message", n)
	}
}
