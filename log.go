package main

// The server's logger (README.md's --log-level and --log-format; docs/remote.md §3 for the
// throttled lines of remote mode): leveled lines of a message and key-value pairs, written
// as text or as JSON to stderr. A new file because it is one concern, the log line's
// encoding, shared by every part of the server. It writes what log/slog's TextHandler and
// JSONHandler write, byte for byte, for the values the server logs (log_test.go compares
// the two), at a fraction of the size: log/slog was some 78 KB of the release binary, which
// has a size cap (scripts/release.sh).

import (
	"context"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// logLevel is a line's importance; a logger writes the lines at or above its level. The
// values are log/slog's, and so are their names (String).
type logLevel int

const (
	levelDebug logLevel = -4
	levelInfo  logLevel = 0
	levelWarn  logLevel = 4
	levelError logLevel = 8
)

// String names the level as a line shows it: DEBUG, INFO, WARN, ERROR, or the nearest one
// below with an offset (INFO+2).
func (l logLevel) String() string {
	name, base := "ERROR", levelError
	switch {
	case l < levelInfo:
		name, base = "DEBUG", levelDebug
	case l < levelWarn:
		name, base = "INFO", levelInfo
	case l < levelError:
		name, base = "WARN", levelWarn
	}
	if l == base {
		return name
	}
	return fmt.Sprintf("%s%+d", name, int(l-base))
}

// parseLogLevel reads a level's name, in any case, with an optional offset (info+2): what
// --log-level accepts.
func parseLogLevel(s string) (logLevel, error) {
	name, offset := s, 0
	if i := strings.IndexAny(s, "+-"); i >= 0 {
		n, err := strconv.Atoi(s[i:])
		if err != nil {
			return 0, fmt.Errorf("log level %q: %w", s, err)
		}
		name, offset = s[:i], n
	}
	var l logLevel
	switch strings.ToUpper(name) {
	case "DEBUG":
		l = levelDebug
	case "INFO":
		l = levelInfo
	case "WARN":
		l = levelWarn
	case "ERROR":
		l = levelError
	default:
		return 0, fmt.Errorf("log level %q: unknown name", s)
	}
	return l + logLevel(offset), nil
}

// logger writes log lines. Those made by With share their output with the logger they were
// made from, and add their attributes to each of its lines. It is safe for concurrent use.
type logger struct {
	out   *logOutput
	attrs []byte // With's attributes, encoded, each after its separator
}

// logOutput is where a logger's lines go, one Write per line.
type logOutput struct {
	mu    sync.Mutex
	w     io.Writer
	level logLevel // the least level written
	json  bool     // JSON lines, else key=value text
}

// newTextLogger writes text lines of level and above to w.
func newTextLogger(w io.Writer, level logLevel) *logger {
	return &logger{out: &logOutput{w: w, level: level}}
}

// newJSONLogger writes JSON lines of level and above to w.
func newJSONLogger(w io.Writer, level logLevel) *logger {
	return &logger{out: &logOutput{w: w, level: level, json: true}}
}

// discardLogger writes nothing: every level is disabled.
func discardLogger() *logger {
	return &logger{out: &logOutput{w: io.Discard, level: math.MaxInt}}
}

// Enabled reports whether the logger writes lines of level.
func (l *logger) Enabled(_ context.Context, level logLevel) bool { return level >= l.out.level }

func (l *logger) Debug(msg string, args ...any) { l.write(levelDebug, msg, args) }
func (l *logger) Info(msg string, args ...any)  { l.write(levelInfo, msg, args) }
func (l *logger) Warn(msg string, args ...any)  { l.write(levelWarn, msg, args) }
func (l *logger) Error(msg string, args ...any) { l.write(levelError, msg, args) }

// Log writes a line of level; ctx is not used.
func (l *logger) Log(_ context.Context, level logLevel, msg string, args ...any) {
	l.write(level, msg, args)
}

// With returns a logger whose lines carry args, key-value pairs, after the message.
func (l *logger) With(args ...any) *logger {
	if len(args) == 0 {
		return l
	}
	attrs := l.out.appendArgs(append([]byte(nil), l.attrs...), args)
	return &logger{out: l.out, attrs: attrs}
}

// stdLogger is a standard library logger (http.Server's ErrorLog) whose lines are written as
// messages of level, without their final newline.
func (l *logger) stdLogger(level logLevel) *log.Logger {
	return log.New(&logWriter{l: l, level: level}, "", 0)
}

// logWriter is a stdLogger's output: each Write is one line.
type logWriter struct {
	l     *logger
	level logLevel
}

func (w *logWriter) Write(b []byte) (int, error) {
	if !w.l.Enabled(context.Background(), w.level) {
		return 0, nil
	}
	n := len(b)
	if n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	return n, w.l.writeAt(time.Now(), w.level, string(b), nil)
}

func (l *logger) write(level logLevel, msg string, args []any) {
	if !l.Enabled(context.Background(), level) {
		return
	}
	_ = l.writeAt(time.Now(), level, msg, args)
}

// writeAt encodes and writes one line: its time, level and message, the logger's attributes,
// then args.
func (l *logger) writeAt(t time.Time, level logLevel, msg string, args []any) error {
	o := l.out
	b := make([]byte, 0, 256)
	if o.json {
		b = append(b, `{"time":`...)
		b = appendLogTime(b, t, true)
		b = append(b, `,"level":`...)
	} else {
		b = append(b, "time="...)
		b = appendLogTime(b, t, false)
		b = append(b, " level="...)
	}
	b = o.appendString(b, level.String())
	if o.json {
		b = append(b, `,"msg":`...)
	} else {
		b = append(b, " msg="...)
	}
	b = o.appendString(b, msg)
	b = append(b, l.attrs...)
	b = o.appendArgs(b, args)
	if o.json {
		b = append(b, '}')
	}
	b = append(b, '\n')
	o.mu.Lock()
	defer o.mu.Unlock()
	_, err := o.w.Write(b)
	return err
}

// logBadKey is the key of a value given where a key was expected.
const logBadKey = "!BADKEY"

// appendArgs appends the attributes of args, key-value pairs, each after its separator. A
// value without a string key before it gets the key !BADKEY; an empty key with a nil value
// is left out.
func (o *logOutput) appendArgs(b []byte, args []any) []byte {
	for len(args) > 0 {
		var key string
		var v any
		if k, ok := args[0].(string); ok {
			if len(args) == 1 {
				key, v, args = logBadKey, k, nil
			} else {
				key, v, args = k, args[1], args[2:]
			}
		} else {
			key, v, args = logBadKey, args[0], args[1:]
		}
		if key == "" && v == nil {
			continue
		}
		if o.json {
			b = append(b, ',')
			b = o.appendString(b, key)
			b = append(b, ':')
		} else {
			b = append(b, ' ')
			b = o.appendString(b, key)
			b = append(b, '=')
		}
		b = o.appendValue(b, v)
	}
	return b
}

// appendLogTime appends t: to the millisecond in text, to the nanosecond and quoted in JSON.
func appendLogTime(b []byte, t time.Time, json bool) []byte {
	if json {
		b = append(b, '"')
		b = t.AppendFormat(b, time.RFC3339Nano)
		return append(b, '"')
	}
	return t.Truncate(time.Millisecond).AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
}

// appendString appends s: in JSON as a string; in text as it is, or quoted as a Go string
// where it is empty or has a space, '=', a quote, a control or unprintable character.
func (o *logOutput) appendString(b []byte, s string) []byte {
	if o.json {
		b = append(b, '"')
		b = appendLogJSONString(b, s)
		return append(b, '"')
	}
	if logNeedsQuotes(s) {
		return strconv.AppendQuote(b, s)
	}
	return append(b, s...)
}

// logValuer is a value that is logged as the string LogValue returns, never as itself: a
// value that holds a secret (log/slog's LogValuer, resolved to a string).
type logValuer interface{ LogValue() string }

// appendValue appends a value: a logValuer as its LogValue, strings as appendString does, numbers, booleans and
// durations as Go writes them (a duration in JSON as its nanoseconds), times as
// appendLogTime, an error as its message, and any other value in text as its
// encoding.TextMarshaler text, quoted bytes or fmt's %+v, in JSON as encoding/json encodes
// it (an error of the encoding is written as a string, !ERROR:…).
func (o *logOutput) appendValue(b []byte, v any) (out []byte) {
	start := len(b)
	defer func() {
		if r := recover(); r != nil {
			// A method of the value panicked: a nil pointer is written <nil>.
			out = b[:start]
			if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
				out = o.appendString(out, "<nil>")
				return
			}
			out = o.appendString(out, fmt.Sprintf("!PANIC: %v", r))
		}
	}()
	switch x := v.(type) {
	case logValuer:
		return o.appendString(b, x.LogValue())
	case string:
		return o.appendString(b, x)
	case int:
		return strconv.AppendInt(b, int64(x), 10)
	case int8:
		return strconv.AppendInt(b, int64(x), 10)
	case int16:
		return strconv.AppendInt(b, int64(x), 10)
	case int32:
		return strconv.AppendInt(b, int64(x), 10)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case uint:
		return strconv.AppendUint(b, uint64(x), 10)
	case uint8:
		return strconv.AppendUint(b, uint64(x), 10)
	case uint16:
		return strconv.AppendUint(b, uint64(x), 10)
	case uint32:
		return strconv.AppendUint(b, uint64(x), 10)
	case uint64:
		return strconv.AppendUint(b, x, 10)
	case uintptr:
		return strconv.AppendUint(b, uint64(x), 10)
	case bool:
		return strconv.AppendBool(b, x)
	case float32:
		return o.appendFloat(b, float64(x))
	case float64:
		return o.appendFloat(b, x)
	case time.Duration:
		if o.json {
			return strconv.AppendInt(b, int64(x), 10)
		}
		return append(b, x.String()...)
	case time.Time:
		return appendLogTime(b, x, o.json)
	}
	if o.json {
		_, marshals := v.(json.Marshaler)
		if err, ok := v.(error); ok && !marshals {
			return o.appendString(b, err.Error())
		}
		return o.appendJSON(b, v)
	}
	if tm, ok := v.(encoding.TextMarshaler); ok {
		text, err := tm.MarshalText()
		if err != nil {
			return o.appendString(b, fmt.Sprintf("!ERROR:%v", err))
		}
		return o.appendString(b, string(text))
	}
	if t := reflect.TypeOf(v); t != nil && t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
		return strconv.AppendQuote(b, string(reflect.ValueOf(v).Bytes()))
	}
	return o.appendString(b, fmt.Sprintf("%+v", v))
}

// appendFloat appends f: in text as strconv's shortest form, in JSON as encoding/json's.
func (o *logOutput) appendFloat(b []byte, f float64) []byte {
	if o.json {
		return o.appendJSON(b, f)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

// appendJSON appends v as encoding/json encodes it, HTML characters as they are.
func (o *logOutput) appendJSON(b []byte, v any) []byte {
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return o.appendString(b, fmt.Sprintf("!ERROR:%v", err))
	}
	return append(b, strings.TrimSuffix(buf.String(), "\n")...)
}

// logNeedsQuotes reports whether a text value must be quoted: it is empty, or has a space,
// '=', '"', an ASCII control character, invalid UTF-8, or a space or unprintable rune.
func logNeedsQuotes(s string) bool {
	if s == "" {
		return true
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c != '\\' && (c == ' ' || c == '=' || !logJSONSafe(c)) {
				return true
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += n
	}
	return false
}

// logJSONSafe reports whether an ASCII byte stands for itself in a JSON string: all but the
// control characters, '"' and '\'.
func logJSONSafe(c byte) bool { return c >= ' ' && c != '"' && c != '\\' }

// appendLogJSONString appends s escaped for a JSON string, without its quotes: '"', '\' and
// control characters escaped (\n, \r, \t or \u00XX), invalid UTF-8 as \ufffd, U+2028 and
// U+2029 escaped; '<', '>' and '&' as they are.
func appendLogJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if logJSONSafe(c) {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += n
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += n
			start = i
			continue
		}
		i += n
	}
	return append(b, s[start:]...)
}
