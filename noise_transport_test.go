package main

// Tests of the Noise record transport (docs/remote.md §5.6, §6): record sizes, sequence order,
// the reordering window, message length limits, sticky failures and close.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// noiseRecord is one sealed record as the relay would carry it in a Data frame.
type noiseRecord struct {
	seq uint32
	ct  []byte
}

func noiseSeal(t testing.TB, tr *noiseTransport, msgs ...[]byte) []noiseRecord {
	t.Helper()
	var recs []noiseRecord
	for _, m := range msgs {
		err := tr.sealMessage(m, func(seq uint32, rec []byte) error {
			recs = append(recs, noiseRecord{seq, bytes.Clone(rec)})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return recs
}

// noiseOpen feeds records in the given order and returns the delivered messages.
func noiseOpen(tr *noiseTransport, recs []noiseRecord) ([][]byte, error) {
	var got [][]byte
	for _, r := range recs {
		if err := tr.openRecord(r.seq, r.ct, func(m []byte) error { got = append(got, m); return nil }); err != nil {
			return got, err
		}
	}
	return got, nil
}

func noiseMustDeliver(t *testing.T, got [][]byte, err error, want ...[]byte) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("delivered %d messages, want %d", len(got), len(want))
	}
	for i := range want {
		noiseMustEqual(t, fmt.Sprintf("message %d", i), got[i], want[i])
	}
}

func TestNoiseHandshakeAndRecordsBothRoles(t *testing.T) {
	harness, executor, _, _ := noiseHandshakePair(t, []byte("harness-auth-token"))
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320,000 bytes: 6 records
	for _, dir := range []struct {
		name     string
		from, to *noiseTransport
	}{{"harness to executor", harness, executor}, {"executor to harness", executor, harness}} {
		t.Run(dir.name, func(t *testing.T) {
			msgs := [][]byte{[]byte(`{"id":1,"method":"initialize","params":{}}`), big, []byte(`{"id":2}`)}
			recs := noiseSeal(t, dir.from, msgs...)
			got, err := noiseOpen(dir.to, recs)
			noiseMustDeliver(t, got, err, msgs...)
		})
	}
}

// TestNoiseRecordSizesMatch0169: a message whose framed stream is 355,599 bytes went out as
// 5 × 61,456-byte records plus one of 48,415 in 0.169 (docs/remote.md §6).
func TestNoiseRecordSizesMatch0169(t *testing.T) {
	harness, executor, _, _ := noiseHandshakePair(t, nil)
	recs := noiseSeal(t, executor, make([]byte, 5*noiseRecordPlaintextMax+48399-noiseMessageLenLen))
	var sizes []int
	for i, r := range recs {
		if r.seq != uint32(i) {
			t.Fatalf("record %d has seq %d", i, r.seq)
		}
		sizes = append(sizes, len(r.ct))
	}
	if fmt.Sprint(sizes) != "[61456 61456 61456 61456 61456 48415]" {
		t.Fatalf("record sizes %v", sizes)
	}
	if _, err := noiseOpen(harness, recs); err != nil {
		t.Fatal(err)
	}
	// Small messages: one record each, seq continuing.
	recs = noiseSeal(t, executor, []byte("{}"), []byte("[]"))
	if len(recs) != 2 || recs[0].seq != 6 || recs[1].seq != 7 || len(recs[0].ct) != 4+2+16 {
		t.Fatalf("small records %+v", recs)
	}
}

func TestNoiseConcurrentSealKeepsSeqOrder(t *testing.T) {
	harness, executor, _, _ := noiseHandshakePair(t, nil)
	var (
		mu   sync.Mutex
		recs []noiseRecord
		wg   sync.WaitGroup
	)
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				msg := []byte(fmt.Sprintf(`{"g":%d,"i":%d,"pad":%q}`, g, i, strings.Repeat("x", 1000*i)))
				err := executor.sealMessage(msg, func(seq uint32, rec []byte) error {
					mu.Lock()
					defer mu.Unlock()
					recs = append(recs, noiseRecord{seq, bytes.Clone(rec)})
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for i, r := range recs {
		if r.seq != uint32(i) {
			t.Fatalf("record %d emitted with seq %d", i, r.seq)
		}
	}
	got, err := noiseOpen(harness, recs)
	if err != nil || len(got) != 160 {
		t.Fatalf("delivered %d messages, %v", len(got), err)
	}
}

func TestNoiseTamperedRecordsRejected(t *testing.T) {
	for _, c := range []struct {
		name   string
		mutate func([]noiseRecord) []noiseRecord
	}{
		{"flipped ciphertext bit", func(r []noiseRecord) []noiseRecord { r[0].ct[3] ^= 1; return r }},
		{"flipped tag bit", func(r []noiseRecord) []noiseRecord { r[0].ct[len(r[0].ct)-1] ^= 1; return r }},
		{"truncated", func(r []noiseRecord) []noiseRecord { r[0].ct = r[0].ct[:len(r[0].ct)-1]; return r }},
		{"tag only", func(r []noiseRecord) []noiseRecord { r[0].ct = r[0].ct[:noiseTagLen]; return r }},
		{"empty", func(r []noiseRecord) []noiseRecord { r[0].ct = nil; return r }},
		{"records swapped seq", func(r []noiseRecord) []noiseRecord { r[0].seq, r[1].seq = r[1].seq, r[0].seq; return r }},
		{"replayed under a new seq", func(r []noiseRecord) []noiseRecord { return append(r, noiseRecord{2, r[0].ct}) }},
		{"oversized", func(r []noiseRecord) []noiseRecord {
			r[0].ct = make([]byte, noiseRecordCiphertextMax+1)
			return r
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			harness, executor, _, _ := noiseHandshakePair(t, nil)
			recs := c.mutate(noiseSeal(t, harness, []byte(`{"a":1}`), []byte(`{"b":2}`)))
			if _, err := noiseOpen(executor, recs); err == nil {
				t.Fatal("tampered records accepted")
			}
			// The failure is sticky: the stream must be reset.
			good := noiseSeal(t, harness, []byte(`{"c":3}`))
			if _, err := noiseOpen(executor, good); err == nil {
				t.Fatal("transport kept working after a stream error")
			}
		})
	}
}

func TestNoiseReorderWindow(t *testing.T) {
	msg := func(i int) []byte { return []byte(fmt.Sprintf(`{"id":%d}`, i)) }
	var msgs [][]byte
	for i := range 70 {
		msgs = append(msgs, msg(i))
	}
	for _, c := range []struct {
		name    string
		order   []int // indexes into the 70 sealed one-record messages
		want    []int // delivered messages; nil with wantErr
		wantErr bool
	}{
		{"in order", []int{0, 1, 2}, []int{0, 1, 2}, false},
		{"reversed", []int{4, 3, 2, 1, 0}, []int{0, 1, 2, 3, 4}, false},
		{"duplicate of a delivered record dropped", []int{0, 1, 0, 1, 2}, []int{0, 1, 2}, false},
		{"duplicate of a buffered record dropped", []int{2, 2, 1, 0}, []int{0, 1, 2}, false},
		{"64 ahead buffered", append([]int{64}, seqRange(0, 64)...), seqRange(0, 65), false},
		{"65 ahead is a stream error", []int{65}, nil, true},
		{"65 ahead after progress", []int{0, 66}, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			harness, executor, _, _ := noiseHandshakePair(t, nil)
			recs := noiseSeal(t, harness, msgs...)
			var in []noiseRecord
			for _, i := range c.order {
				in = append(in, recs[i])
			}
			got, err := noiseOpen(executor, in)
			if c.wantErr {
				if err == nil {
					t.Fatal("accepted")
				}
				return
			}
			var want [][]byte
			for _, i := range c.want {
				want = append(want, msgs[i])
			}
			noiseMustDeliver(t, got, err, want...)
		})
	}
	t.Run("more than 1 MiB buffered is a stream error", func(t *testing.T) {
		harness, executor, _, _ := noiseHandshakePair(t, nil)
		recs := noiseSeal(t, harness, make([]byte, 20*noiseRecordPlaintextMax))
		// 17 full records (1,044,752 bytes) fit ahead of seq 0, the 18th does not.
		for i := 1; i <= 17; i++ {
			if err := executor.openRecord(recs[i].seq, recs[i].ct, nil); err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
		}
		if err := executor.openRecord(recs[18].seq, recs[18].ct, nil); err == nil {
			t.Fatal("18th buffered record accepted")
		}
	})
	t.Run("buffered bytes are released as the gap fills", func(t *testing.T) {
		harness, executor, _, _ := noiseHandshakePair(t, nil)
		big := make([]byte, 40*noiseRecordPlaintextMax)
		recs := noiseSeal(t, harness, big)
		var order []noiseRecord
		for i := 0; i+1 < len(recs); i += 2 { // pairs swapped: never more than one ahead
			order = append(order, recs[i+1], recs[i])
		}
		order = append(order, recs[len(recs)-1])
		got, err := noiseOpen(executor, order)
		noiseMustDeliver(t, got, err, big)
		if executor.aheadN != 0 {
			t.Fatalf("%d bytes still buffered", executor.aheadN)
		}
	})
}

func seqRange(from, to int) []int {
	var r []int
	for i := from; i < to; i++ {
		r = append(r, i)
	}
	return r
}

// TestNoiseMessageLengthLimits: lengths 0 and over 64 MiB are stream errors as soon as the
// 4 length bytes arrive; the sender refuses them.
func TestNoiseMessageLengthLimits(t *testing.T) {
	for _, c := range []struct {
		name    string
		stream  []byte
		wantErr bool
	}{
		{"zero length", []byte{0, 0, 0, 0}, true},
		{"64 MiB + 1", binary.BigEndian.AppendUint32(nil, noiseMaxRPCMessage+1), true},
		{"max uint32", []byte{0xff, 0xff, 0xff, 0xff}, true},
		{"64 MiB announced, payload pending", binary.BigEndian.AppendUint32(nil, noiseMaxRPCMessage), false},
		{"partial header", []byte{0, 0}, false},
		{"empty chunk", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			harness, executor, _, _ := noiseHandshakePair(t, nil)
			rec := noiseSealRaw(t, harness, 0, c.stream)
			err := executor.openRecord(0, rec, func([]byte) error { t.Fatal("delivered"); return nil })
			if (err != nil) != c.wantErr {
				t.Fatalf("got %v, want error %v", err, c.wantErr)
			}
		})
	}
	t.Run("sender refuses", func(t *testing.T) {
		harness, _, _, _ := noiseHandshakePair(t, nil)
		emit := func(uint32, []byte) error { t.Fatal("emitted"); return nil }
		if err := harness.sealMessage(nil, emit); err == nil {
			t.Fatal("empty message sealed")
		}
		if err := harness.sealMessage(make([]byte, noiseMaxRPCMessage+1), emit); err == nil {
			t.Fatal("oversize message sealed")
		}
	})
	t.Run("header split across records", func(t *testing.T) {
		harness, executor, _, _ := noiseHandshakePair(t, nil)
		var got [][]byte
		deliver := func(m []byte) error { got = append(got, m); return nil }
		for i, part := range [][]byte{{0, 0}, {0, 3, 'a'}, {'b', 'c', 0, 0, 0}, {1, 'd'}} {
			if err := executor.openRecord(uint32(i), noiseSealRaw(t, harness, uint64(i), part), deliver); err != nil {
				t.Fatal(err)
			}
		}
		noiseMustDeliver(t, got, nil, []byte("abc"), []byte("d"))
	})
}

func TestNoiseSeqExhaustion(t *testing.T) {
	harness, _, _, _ := noiseHandshakePair(t, nil)
	harness.sendSeq = noiseMaxSeq
	var seqs []uint32
	emit := func(seq uint32, _ []byte) error { seqs = append(seqs, seq); return nil }
	if err := harness.sealMessage(make([]byte, noiseRecordPlaintextMax), emit); !errors.Is(err, errNoiseSeqExhausted) {
		t.Fatalf("two-record message at the last seq: %v", err)
	}
	if len(seqs) != 0 {
		t.Fatal("emitted part of a message that could not fit")
	}
	harness, _, _, _ = noiseHandshakePair(t, nil)
	harness.sendSeq = noiseMaxSeq
	if err := harness.sealMessage([]byte("{}"), emit); err != nil || len(seqs) != 1 || seqs[0] != noiseMaxSeq {
		t.Fatalf("last seq: %v %v", err, seqs)
	}
	if err := harness.sealMessage([]byte("{}"), emit); !errors.Is(err, errNoiseSeqExhausted) {
		t.Fatalf("after the last seq: %v", err)
	}
}

func TestNoiseEmitFailureIsSticky(t *testing.T) {
	harness, _, _, _ := noiseHandshakePair(t, nil)
	boom := errors.New("socket gone")
	if err := harness.sealMessage([]byte("{}"), func(uint32, []byte) error { return boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if err := harness.sealMessage([]byte("{}"), func(uint32, []byte) error { return nil }); err == nil {
		t.Fatal("send direction kept working after a lost record")
	}
}

func TestNoiseTransportClose(t *testing.T) {
	harness, executor, _, _ := noiseHandshakePair(t, nil)
	recs := noiseSeal(t, harness, []byte("{}"))
	harness.close()
	executor.close()
	if err := harness.sealMessage([]byte("{}"), func(uint32, []byte) error { return nil }); err == nil {
		t.Fatal("sealed after close")
	}
	if _, err := noiseOpen(executor, recs); err == nil {
		t.Fatal("opened after close")
	}
}

// TestNoiseTransportCloseWipesPlaintext: close zeroes the plaintext the receiver still holds,
// both the part of a message that spans records and a record buffered ahead of a gap.
func TestNoiseTransportCloseWipesPlaintext(t *testing.T) {
	harness, executor, _, _ := noiseHandshakePair(t, nil)
	long := bytes.Repeat([]byte{'x'}, noiseRecordPlaintextMax+100) // two records
	recs := noiseSeal(t, harness, long, []byte("tail"))            // seqs 0, 1, 2
	deliver := func([]byte) error { return nil }
	if err := executor.openRecord(recs[0].seq, recs[0].ct, deliver); err != nil {
		t.Fatal(err)
	}
	if err := executor.openRecord(recs[2].seq, recs[2].ct, deliver); err != nil {
		t.Fatal(err)
	}
	partial := executor.deframe.msg[:cap(executor.deframe.msg)]
	ahead := executor.ahead[recs[2].seq%noiseReorderRecords].plaintext
	if len(ahead) == 0 || bytes.Count(partial, []byte{'x'}) == 0 {
		t.Fatal("the test did not leave plaintext in the receiver")
	}
	executor.close()
	if bytes.ContainsAny(partial, "xtail") || bytes.ContainsAny(ahead, "xtail") {
		t.Fatal("close left plaintext behind")
	}
}

// FuzzNoiseRecords: messages sealed, reordered within the window and duplicated come out
// unchanged and in order; a garbage record afterwards is dropped or rejected, never a panic.
func FuzzNoiseRecords(f *testing.F) {
	f.Add([]byte(`{"id":1}`), uint16(3), []byte{0, 1, 2}, uint8(0), uint32(0), []byte("junk"))
	f.Add([]byte("x"), uint16(0), []byte{}, uint8(9), uint32(7), []byte{})
	f.Add(bytes.Repeat([]byte("ab"), 500), uint16(200), []byte{5, 5, 5, 1}, uint8(3), uint32(1<<31), make([]byte, 40))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16, swaps []byte, dup uint8, seq uint32, junk []byte) {
		harness, executor := noiseTestTransports()
		var msgs [][]byte
		c := int(cut) % (len(data) + 1)
		for _, m := range [][]byte{data[:c], data[c:], bytes.Repeat(data, min(len(data), 150))} {
			if len(m) > 0 {
				msgs = append(msgs, m)
			}
		}
		recs := noiseSeal(t, harness, msgs...)
		if len(recs) == 0 {
			return
		}
		for _, s := range swaps[:min(len(swaps), 16)] { // ≤ 16 records ahead: under 1 MiB
			if i := int(s) % len(recs); i+1 < len(recs) {
				recs[i], recs[i+1] = recs[i+1], recs[i]
			}
		}
		i := int(dup) % len(recs)
		recs = append(recs[:i+1], append([]noiseRecord{recs[i]}, recs[i+1:]...)...)
		got, err := noiseOpen(executor, recs)
		noiseMustDeliver(t, got, err, msgs...)
		if err := executor.openRecord(seq, junk, func([]byte) error { t.Fatal("junk delivered"); return nil }); err == nil && uint64(seq) >= executor.recvSeq {
			t.Fatal("junk record accepted")
		}
	})
}

// noiseTestTransports is a connected pair from fixed keys, without a handshake.
func noiseTestTransports() (a, b *noiseTransport) {
	var k1, k2 noiseCipherState
	if k1.initializeKey(bytes.Repeat([]byte{1}, 32)) != nil || k2.initializeKey(bytes.Repeat([]byte{2}, 32)) != nil {
		panic("aes")
	}
	return &noiseTransport{send: k1, recv: k2}, &noiseTransport{send: k2, recv: k1}
}

// BenchmarkNoiseRecord seals and opens one full 61,440-byte record per iteration (a message
// of 61,436 bytes plus its length prefix). The one allocation left is the delivered
// message, which the receiver hands over.
func BenchmarkNoiseRecord(b *testing.B) {
	a, z := noiseTestTransports()
	msg := make([]byte, noiseRecordPlaintextMax-noiseMessageLenLen)
	var rec []byte
	var rseq uint32
	emit := func(seq uint32, r []byte) error { rseq, rec = seq, r; return nil }
	deliver := func([]byte) error { return nil }
	b.SetBytes(noiseRecordPlaintextMax)
	b.ReportAllocs()
	for b.Loop() {
		if err := a.sealMessage(msg, emit); err != nil {
			b.Fatal(err)
		}
		if err := z.openRecord(rseq, rec, deliver); err != nil {
			b.Fatal(err)
		}
	}
}
