package main

// Tests of the driver's own logic, without a server: what it parses of /proc and of the
// server's messages, how it rebuilds a process's output from overlapping sources, and how it
// reports. The checks themselves run against the real binary (scripts/soak.sh).

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseStatus(t *testing.T) {
	status := "Name:\texec-server\nState:\tS (sleeping)\nVmRSS:\t   14336 kB\nThreads:\t12\n"
	rss, threads, err := parseStatus([]byte(status))
	if err != nil || rss != 14336<<10 || threads != 12 {
		t.Errorf("parseStatus = %d, %d, %v; want %d, 12", rss, threads, err, 14336<<10)
	}
	if _, _, err := parseStatus([]byte("Name:\tx\n")); err == nil {
		t.Error("a status without VmRSS parsed")
	}
}

func TestParseStat(t *testing.T) {
	st, err := parseStat([]byte("4242 (a (weird) name) Z 17 4242 4242 0 -1 4194560 0 0"))
	if err != nil {
		t.Fatal(err)
	}
	if st.pid != 4242 || st.comm != "a (weird) name" || st.state != 'Z' || st.ppid != 17 {
		t.Errorf("parseStat = %+v", st)
	}
	if _, err := parseStat([]byte("12 no parentheses S 1")); err == nil {
		t.Error("a line without (comm) parsed")
	}
}

func TestParseEnvelope(t *testing.T) {
	for _, tt := range []struct {
		msg  string
		want envelope
	}{
		{`{"id":7,"result":{"a":1}}`, envelope{reply: true, id: 7, result: []byte(`{"a":1}`)}},
		{`{"error":{"code":-32010,"message":"attached"},"id":3}`, envelope{reply: true, id: 3, err: &rpcError{Code: -32010, Message: "attached"}}},
		{`{"method":"process/closed","params":{"processId":"p","seq":4}}`, envelope{method: "process/closed", params: []byte(`{"processId":"p","seq":4}`)}},
		{`{"result":[],"id":9}`, envelope{reply: true, id: 9, result: []byte(`[]`)}},
	} {
		got, err := parseEnvelope([]byte(tt.msg))
		if err != nil {
			t.Errorf("%s: %v", tt.msg, err)
			continue
		}
		if got.reply != tt.want.reply || got.id != tt.want.id || got.method != tt.want.method ||
			!bytes.Equal(got.result, tt.want.result) || !bytes.Equal(got.params, tt.want.params) ||
			(got.err == nil) != (tt.want.err == nil) || (got.err != nil && *got.err != *tt.want.err) {
			t.Errorf("%s: got %+v, want %+v", tt.msg, got, tt.want)
		}
	}
	for _, bad := range []string{``, `[1]`, `{"x":1}`} {
		if _, err := parseEnvelope([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestNoteProcessID(t *testing.T) {
	for params, want := range map[string]string{
		`{"processId":"abc","seq":1}`:   "abc",
		`{"seq":1,"processId":"x\"y"}`:  `x"y`,
		`{"processId":"a\u0062","s":1}`: "ab",
	} {
		if got := noteProcessID([]byte(params)); got != want {
			t.Errorf("%s: %q, want %q", params, got, want)
		}
	}
}

// TestSeqLog: notifications and reads overlap and arrive in any order; the log puts the output
// together once, in seq order, and knows when the process is done.
func TestSeqLog(t *testing.T) {
	l := newSeqLog()
	l.note(1, []byte("a"), true, false)
	l.note(3, []byte("c"), true, false) // 2 was missed while detached
	if st := l.state(); st.known != 1 || st.bytes != 1 {
		t.Fatalf("after 1 and 3: known %d bytes %d", st.known, st.bytes)
	}
	// The read after the resume gives 2 and 3 again; 4 is exited, 5 output, 6 closed.
	l.read(1, []readChunk{{2, []byte("b")}, {3, []byte("c")}, {5, []byte("e")}}, 7, true)
	st := l.state()
	if st.known != 6 || !st.done || st.fromRead != 2 {
		t.Fatalf("after the read: %+v", st)
	}
	out, err := l.output()
	if err != nil || string(out) != "abce" {
		t.Errorf("output %q, %v", out, err)
	}

	l = newSeqLog()
	l.note(1, []byte("a"), true, false)
	l.read(0, []readChunk{{1, []byte("X")}}, 2, false)
	if _, err := l.output(); err == nil {
		t.Error("a seq with two different chunks went unnoticed")
	}

	l = newSeqLog()
	l.note(1, []byte("a"), true, false)
	l.note(1, []byte("a"), true, false)
	if _, err := l.output(); err == nil {
		t.Error("a seq notified twice went unnoticed")
	}

	l = newSeqLog()
	l.note(2, []byte("b"), true, false)
	if _, err := l.output(); err == nil {
		t.Error("a chunk past a gap went unnoticed")
	}
}

func TestProducerOutput(t *testing.T) {
	if got := string(producerOutput(3)); got != "line 0\nline 1\nline 2\n" {
		t.Errorf("producerOutput(3) = %q", got)
	}
	if got := firstDiff([]byte("abcd"), []byte("abXd")); got != 2 {
		t.Errorf("firstDiff = %d", got)
	}
}

func TestReport(t *testing.T) {
	r := &result{name: "1000 conns"}
	r.add(mib("rss", 141<<20+1, 400), count("fds", 2013, 2100), info("rate", 957.4, "proc/s"))
	want := "soak: 1000 conns: rss 142 MiB (≤ 400), fds 2013 (≤ 2100), rate 957 proc/s … PASS"
	if got := r.String(); got != want || !r.pass() {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	r.add(atLeast("replies", 4, 5))
	if r.pass() || !strings.HasSuffix(r.String(), "replies 4 (≥ 5) OUT OF BOUNDS … FAIL") {
		t.Errorf("a figure under its floor: %s", r)
	}
	r = &result{name: "x", err: errors.New("boom")}
	if r.pass() || !strings.Contains(r.String(), "error: boom … FAIL") {
		t.Errorf("an error: %s", r)
	}
	r = &result{name: "gap", infoOnly: true}
	r.add(info("survivors", 1, ""))
	if !r.pass() || !strings.HasSuffix(r.String(), "survivors 1 … INFO") {
		t.Errorf("an informational probe: %s", r)
	}
}

func TestParallel(t *testing.T) {
	var ran atomic.Int64
	if err := parallel(context.Background(), 100, 8, func(context.Context, int) error { ran.Add(1); return nil }); err != nil || ran.Load() != 100 {
		t.Errorf("ran %d jobs, err %v", ran.Load(), err)
	}
	boom := errors.New("boom")
	err := parallel(context.Background(), 1000, 4, func(_ context.Context, i int) error {
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("err %v, want boom", err)
	}
}

func TestPoll(t *testing.T) {
	calls := 0
	if ok, _ := poll(time.Second, func() bool { calls++; return calls == 3 }); !ok {
		t.Error("poll gave up on a condition that came true")
	}
	if ok, took := poll(3*pollInterval, func() bool { return false }); ok || took < 3*pollInterval {
		t.Errorf("poll of a false condition: %v after %v", ok, took)
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-bin", "x", "-small", "-cycles", "7", "-checks", "resume,flood"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.cycles != 7 || cfg.conns != smallScale.conns || !cfg.checks["flood"] || cfg.checks["conns"] {
		t.Errorf("config %+v", cfg)
	}
	for _, args := range [][]string{{}, {"-bin", "x", "-checks", "nope"}, {"-bin", "x", "extra"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
