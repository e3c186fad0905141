package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// logTestStringer is a value with a String method, logged as fmt's %+v shows it.
type logTestStringer struct{ n int }

func (s logTestStringer) String() string { return fmt.Sprintf("stringer %d", s.n) }

// logTestJSONError is an error that is also a json.Marshaler: JSON encodes it as such.
type logTestJSONError struct{}

func (logTestJSONError) Error() string                { return "json error" }
func (logTestJSONError) MarshalJSON() ([]byte, error) { return []byte(`{"e":1}`), nil }

// logTestSecret and logTestSlogSecret hold a secret that is never logged: ours with a
// logValuer, slog's with a LogValuer.
type logTestSecret struct{ real string }

func (logTestSecret) LogValue() string { return "[masking binding]" }

type logTestSlogSecret struct{ real string }

func (logTestSlogSecret) LogValue() slog.Value { return slog.StringValue("[masking binding]") }

// logTestBadText fails its MarshalText.
type logTestBadText struct{}

func (logTestBadText) MarshalText() ([]byte, error) { return nil, errors.New("no text") }

// logTestValues are values of every kind the server's call sites log (strings of every
// quoting case, integers, booleans, durations, errors, panic values, addresses) and of the
// rest slog distinguishes.
func logTestValues() []any {
	var nilErr *url.Error
	var nilPtr *logTestStringer
	return []any{
		"plain", "", "two words", "a=b", `q"uote`, `back\slash`, "line\nbreak", "tab\there", "cr\r",
		"bell\a", "del\x7f", "héllo", "日本", "nb\u00a0sp", "ls\u2028ps\u2029", "bad\xffutf8", "<&>",
		"stream-1f", "http://127.0.0.1:8080/x?a=b",
		0, -7, 42, int8(-8), int16(300), int32(-70000), int64(math.MinInt64), uint(7), uint8(255),
		uint16(65535), uint32(1 << 31), uint64(math.MaxUint64), uintptr(12),
		true, false,
		1.5, float32(0.1), 1e21, 1e-7, math.Inf(1), math.NaN(), -0.0,
		time.Duration(0), 1500 * time.Millisecond, 3 * time.Hour, -time.Microsecond,
		time.Date(2026, 11, 29, 11, 22, 33, 456789000, time.UTC),
		errors.New("boom"), fmt.Errorf("wrap: %w", os.ErrNotExist), &fs.PathError{Op: "open", Path: "/x y", Err: os.ErrPermission},
		&url.Error{Op: "Get", URL: "http://h", Err: errors.New("refused")}, nilErr, logTestJSONError{},
		"panic value", fmt.Errorf("runtime error: index out of range [3] with length 2"),
		netip.MustParseAddr("127.0.0.1"), netip.MustParseAddrPort("[::1]:80"), logTestBadText{},
		logTestStringer{3}, nilPtr, []byte("bytes \x00"), rawJSON(`{"a":1}`), []string{"a", "b c"},
		map[string]int{"k": 1}, struct{ A int }{1}, nil, levelWarn,
	}
}

// slogLevel is our level as log/slog's.
func slogLevel(l logLevel) slog.Level { return slog.Level(l) }

// TestLoggerWritesWhatSlogWrites writes the same records through log/slog's TextHandler and
// JSONHandler and through our logger, and compares the bytes: time, level, message, With's
// attributes and the record's, over every kind of value the server logs.
func TestLoggerWritesWhatSlogWrites(t *testing.T) {
	east := time.FixedZone("east", 5*3600+30*60)
	times := []time.Time{
		time.Date(2026, 11, 29, 11, 24, 38, 123456789, time.UTC),
		time.Date(2026, 11, 29, 11, 24, 38, 0, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 999999999, east),
		time.Date(2026, 1, 2, 3, 4, 5, 100000, time.Local),
		time.Now(),
	}
	levels := []logLevel{levelDebug, levelInfo, levelWarn, levelError, levelInfo + 2, levelDebug - 1, levelError + 3}
	msgs := []string{"relay stream open", "", "a=b", "handler panic", "line\nbreak", "registered"}
	var argSets [][]any
	for _, v := range logTestValues() {
		argSets = append(argSets, []any{"key", v})
	}
	argSets = append(argSets,
		nil,
		[]any{"environment_id", "env-1", "attempt", 3, "retry_in", 250 * time.Millisecond, "tls", true},
		[]any{"odd"},                       // a lone key: !BADKEY
		[]any{42, "x"},                     // a value for a key
		[]any{"", nil, "after", 1},         // an empty attribute, left out
		[]any{"", 0},                       // an empty key with a value, kept
		[]any{"spaced key", 1, "k=v", "w"}, // keys that are quoted in text
		[]any{"error", errors.New("a\nb"), "err", nil},
	)
	argSets = append(argSets, []any{"binding", logTestSecret{"sk-real"}, "n", 1})
	withs := [][]any{nil, {"stream_id", "1f", "stream", 7}, {"peer", "a b"}}
	for _, json := range []bool{false, true} {
		for _, with := range withs {
			var want bytes.Buffer
			var h slog.Handler = slog.NewTextHandler(&want, &slog.HandlerOptions{Level: slog.LevelDebug})
			var got bytes.Buffer
			l := newTextLogger(&got, levelDebug)
			if json {
				h = slog.NewJSONHandler(&want, &slog.HandlerOptions{Level: slog.LevelDebug})
				l = newJSONLogger(&got, levelDebug)
			}
			if with != nil {
				h = slog.New(h).With(with...).Handler()
				l = l.With(with...)
			}
			n := 0
			for _, tm := range times {
				for _, lv := range levels {
					for _, msg := range msgs {
						for _, args := range argSets {
							want.Reset()
							got.Reset()
							r := slog.NewRecord(tm, slogLevel(lv), msg, 0)
							r.Add(slogArgs(args)...)
							if err := h.Handle(context.Background(), r); err != nil {
								t.Fatal(err)
							}
							if err := l.writeAt(tm, lv, msg, args); err != nil {
								t.Fatal(err)
							}
							if !bytes.Equal(got.Bytes(), want.Bytes()) {
								t.Fatalf("json=%v with=%v time=%v level=%v msg=%q args=%#v:\n got %q\nwant %q",
									json, with, tm, lv, msg, args, got.String(), want.String())
							}
							n++
						}
					}
				}
			}
			t.Logf("json=%v with=%v: %d records identical", json, with, n)
		}
	}
}

// slogArgs is args as slog is given them: our secrets as slog's.
func slogArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if s, ok := a.(logTestSecret); ok {
			a = logTestSlogSecret(s)
		}
		out[i] = a
	}
	return out
}

// logTimeField is the time of a line, which differs between two loggers writing one after
// the other.
var logTimeField = regexp.MustCompile(`^time=\S+ |^\{"time":"[^"]+",`)

// TestLoggerMethodsMatchSlog checks the methods the server calls, as slog's Logger: the level
// each writes at, the levels a logger writes (Enabled), With of With, Log, and the
// http.Server ErrorLog (stdLogger as slog.NewLogLogger), their lines compared without the time.
func TestLoggerMethodsMatchSlog(t *testing.T) {
	for _, json := range []bool{false, true} {
		for _, min := range []logLevel{levelDebug, levelInfo, levelWarn, levelError} {
			var want, got bytes.Buffer
			opts := &slog.HandlerOptions{Level: slogLevel(min)}
			sl := slog.New(slog.NewTextHandler(&want, opts))
			l := newTextLogger(&got, min)
			if json {
				sl = slog.New(slog.NewJSONHandler(&want, opts))
				l = newJSONLogger(&got, min)
			}
			for _, lv := range []logLevel{levelDebug - 1, levelDebug, levelInfo, levelWarn, levelError, levelError + 1} {
				if g, w := l.Enabled(context.Background(), lv), sl.Enabled(context.Background(), slogLevel(lv)); g != w {
					t.Fatalf("min %v: Enabled(%v) = %v, slog %v", min, lv, g, w)
				}
			}
			sl.Debug("d", "a", 1)
			l.Debug("d", "a", 1)
			sl.Info("i", "b", "two words")
			l.Info("i", "b", "two words")
			sl.Warn("w", "err", errors.New("x"))
			l.Warn("w", "err", errors.New("x"))
			sl.Error("e", "panic", "boom")
			l.Error("e", "panic", "boom")
			sl.Log(context.Background(), slog.LevelInfo+1, "log", "n", 2)
			l.Log(context.Background(), levelInfo+1, "log", "n", 2)
			sl.With("s", 1).With("t", "u v").Info("nested", "k", 3)
			l.With("s", 1).With("t", "u v").Info("nested", "k", 3)
			sl.With("binding", logTestSlogSecret{"sk-real"}).Info("secret", "b", logTestSlogSecret{"sk-real"})
			l.With("binding", logTestSecret{"sk-real"}).Info("secret", "b", logTestSecret{"sk-real"})
			sl.With().Info("empty with")
			l.With().Info("empty with")
			slog.NewLogLogger(sl.With("srv", "ws").Handler(), slog.LevelDebug).Printf("http: TLS handshake error from %s: EOF", "1.2.3.4:5")
			l.With("srv", "ws").stdLogger(levelDebug).Printf("http: TLS handshake error from %s: EOF", "1.2.3.4:5")
			slog.NewLogLogger(sl.Handler(), slog.LevelDebug).Print("no newline\n\n")
			l.stdLogger(levelDebug).Print("no newline\n\n")
			if strings.Contains(got.String(), "sk-real") {
				t.Fatalf("a logValuer's value was logged:\n%s", got.String())
			}
			wl, gl := strings.SplitAfter(want.String(), "\n"), strings.SplitAfter(got.String(), "\n")
			if len(wl) != len(gl) {
				t.Fatalf("json=%v min=%v: %d lines, slog %d:\n%s\nslog:\n%s", json, min, len(gl), len(wl), got.String(), want.String())
			}
			for i := range wl {
				w, g := logTimeField.ReplaceAllString(wl[i], ""), logTimeField.ReplaceAllString(gl[i], "")
				if w != g {
					t.Fatalf("json=%v min=%v line %d:\n got %q\nwant %q", json, min, i, g, w)
				}
			}
			t.Logf("json=%v min=%v: %d lines identical but for their time", json, min, len(wl)-1)
		}
	}
}

// TestLogLevelNamesMatchSlog checks the levels' names and what --log-level accepts against
// slog.Level's String and UnmarshalText.
func TestLogLevelNamesMatchSlog(t *testing.T) {
	for l := logLevel(-12); l <= 14; l++ {
		if g, w := l.String(), slog.Level(l).String(); g != w {
			t.Fatalf("%d: %q, slog %q", l, g, w)
		}
	}
	for _, s := range []string{"debug", "DEBUG", "Info", "warn", "error", "info+2", "debug-1", "ERROR+10",
		"", "x", "info+", "+3", "warning", "info+x", "in+fo"} {
		var sl slog.Level
		werr := sl.UnmarshalText([]byte(s))
		l, err := parseLogLevel(s)
		if (err == nil) != (werr == nil) || err == nil && slog.Level(l) != sl {
			t.Fatalf("%q: %v %v, slog %v %v", s, l, err, sl, werr)
		}
	}
}
