package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// wholeBase64 decodes raw the way base64Bytes does, out of place and in one piece: the
// behaviour decodeJSONBase64InPlace must reproduce.
func wholeBase64(raw []byte) ([]byte, error) {
	var b base64Bytes
	err := b.decodeRawJSON(raw)
	return b, err
}

// checkInPlaceAgrees decodes a copy of raw in place with the given block size and compares
// the bytes and the error text with wholeBase64.
func checkInPlaceAgrees(t *testing.T, raw []byte, block int) {
	t.Helper()
	want, wantErr := wholeBase64(bytes.Clone(raw))
	got, gotErr := decodeJSONBase64Blocks(bytes.Clone(raw), block)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("block %d, %.60q…: error %v, want %v", block, raw, gotErr, wantErr)
	}
	if wantErr == nil && !bytes.Equal(got, want) {
		t.Fatalf("block %d, %.60q…: %d bytes differ from the %d wanted", block, raw, len(got), len(want))
	}
}

func TestDecodeJSONBase64InPlaceAgreesWithWholeDecode(t *testing.T) {
	long := make([]byte, 200<<10) // 273 KiB of base64: five 64 KiB blocks
	for i := range long {
		long[i] = byte(rand.Uint32())
	}
	enc := base64.StdEncoding.EncodeToString(long)
	escaped := strings.ReplaceAll(enc, "/", `\/`) // what PHP's json_encode sends
	mid := len(enc) / 2 / 4 * 4
	cases := map[string]string{
		"empty":                          ``,
		"one byte":                       `QQ==`,
		"two bytes":                      `QUI=`,
		"three bytes":                    `QUJD`,
		"long":                           enc,
		"long, every slash escaped":      escaped,
		"escape in the first quantum":    `\/\/\/\/` + enc,
		"escape in the last quantum":     enc + `\/\/\/\/`,
		"unicode escape":                 `QU\u004aD`,
		"invalid symbol in a late block": enc[:mid] + "!" + enc[mid+1:],
		"invalid symbol after an escape": escaped[:len(escaped)-8] + "!" + escaped[len(escaped)-7:],
		"padding in the middle":          enc[:mid] + "QQ==" + enc[mid:],
		"padding, then a bad symbol":     enc[:mid] + "QQ==" + enc[mid:len(enc)-8] + "*" + enc[len(enc)-7:],
		"padding, then an escape":        `QQ==\/\/\/\/`,
		"bad escape after a bad block":   enc[:mid] + "QQ==" + enc[mid:] + `\x`,
		"length not a multiple of four":  enc[:len(enc)-1],
		"lone padding":                   `====`,
		"a quote inside":                 `QU"D`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			raw := []byte(`"` + body + `"`)
			for _, block := range []int{4, 8, 12, 4096, base64Block} {
				checkInPlaceAgrees(t, raw, block)
			}
		})
	}
}

func TestDecodeJSONBase64InPlaceRefusesNonStrings(t *testing.T) {
	for _, raw := range []string{``, `"`, `"QUJD`, `QUJD"`} {
		if _, err := decodeJSONBase64InPlace([]byte(raw)); err == nil {
			t.Errorf("%q decoded without an error", raw)
		}
	}
}

// FuzzDecodeJSONBase64InPlace compares the in-place decoder with the whole-string one on
// JSON strings as an encoder writes them (escapes included) and as a client might send them
// raw. Raw line breaks are taken out: they are invalid JSON, which the whole-string decoder
// skips and the block decoder refuses; so is invalid UTF-8, which a websocket text message
// cannot carry.
func FuzzDecodeJSONBase64InPlace(f *testing.F) {
	f.Add("QUJD", uint8(1))
	f.Add(`QQ==\/\/`, uint8(2))
	f.Add("QUJDQUJDQUJD", uint8(1))
	f.Add("QUJDQQ==QUJD", uint8(1))
	f.Fuzz(func(t *testing.T, s string, quads uint8) {
		s = strings.NewReplacer("\r", "", "\n", "").Replace(strings.ToValidUTF8(s, "?"))
		block := 4 * (int(quads%16) + 1)
		marshalled, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		checkInPlaceAgrees(t, marshalled, block)
		checkInPlaceAgrees(t, []byte(`"`+s+`"`), block)
	})
}

// TestBase64AnswerEncodesInPlace builds answers across chunk boundaries, full and shrunk (a
// file that lost bytes after its size was read), frames them with ids short and long, and
// compares each message with the one appendResponse makes from the same bytes.
func TestBase64AnswerEncodesInPlace(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 4, base64Chunk - 1, base64Chunk, base64Chunk + 1, 3*base64Chunk + 2, 200<<10 + 1} {
		for _, m := range []int{n, n / 2, max(n-1, 0)} {
			for _, id := range []string{`7`, `"a-request-id"`, `"` + strings.Repeat("x", 80) + `"`} {
				data := make([]byte, n)
				for i := range data {
					data[i] = byte(rand.Uint32())
				}
				a := newBase64Answer(`{"chunk":`, n, len(`,"eof":false}`))
				copy(a.data, data)
				f := a.finish(m, `,"eof":true}`)
				want, err := appendResponse(nil, json.RawMessage(id), json.RawMessage(`{"chunk":"`+base64.StdEncoding.EncodeToString(data[:m])+`","eof":true}`))
				if err != nil {
					t.Fatal(err)
				}
				got, framed := f.frame(json.RawMessage(id))
				if !framed {
					if len(id) <= framedRoom-len(`{"id":,"result":`) {
						t.Fatalf("n=%d m=%d id %s: not framed in place", n, m, id)
					}
					got, _ = appendResponse(nil, json.RawMessage(id), rawJSON(f.buf[f.head:]))
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("n=%d m=%d id %.20s: the answer differs from appendResponse's", n, m, id)
				}
			}
		}
	}
}
