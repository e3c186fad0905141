package main

// Noise record transport of remote mode (docs/remote.md §5.6, §6): after the handshake, each
// direction of a stream seals and opens records, with a bounded reordering window.
//
// # Records (docs/remote.md §5.6, §6)
//
// After Split each direction has its own AES-256-GCM key (k1: harness→executor, k2: back),
// empty AD, no rekey. On the relay the Data frame's seq is the nonce: seq n of a direction is
// sealed with nonce n, both starting at 0 and never wrapping (seq is a uint32 on the wire).
//
//	byte stream = { uint32be(len) || JSON-RPC message }*        1 ≤ len ≤ 64 MiB
//	record      = AES-256-GCM(k, nonce(seq), ad = "", chunk)    chunk ≤ 61,440 bytes, record ≤ 61,456
//	nonce(seq)  = 00 00 00 00 || uint64be(seq)
//	frame       = RelayData{seq, segment_index 0, segment_count 1, payload = record}
//
// One record can end several messages and one message can span many records. The receiver
// drops duplicates (seq already seen or buffered), buffers records up to 64 ahead of the next
// expected seq and 1 MiB in total, and treats anything further as a stream error.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
)

// Sizes and limits of the record layer (docs/remote.md §5.6, §6).
const (
	noiseRecordPlaintextMax  = 61440 // 60 KiB of byte stream per record
	noiseRecordCiphertextMax = noiseRecordPlaintextMax + noiseTagLen
	noiseMessageLenLen       = 4        // big-endian length before each JSON-RPC message
	noiseMaxRPCMessage       = 64 << 20 // largest JSON-RPC message, checked before its payload arrives
	noiseReorderRecords      = 64       // records buffered ahead of the next expected seq
	noiseReorderBytes        = 1 << 20  // ciphertext bytes buffered ahead of the next expected seq
	noiseMaxSeq              = math.MaxUint32
)

var errNoiseSeqExhausted = errors.New("noise: record sequence numbers exhausted")

// noiseTransport is one stream's encrypted record layer. The two directions are
// independent and each is safe for concurrent use; a failure of either direction is sticky,
// since the stream must then be reset.
type noiseTransport struct {
	hash []byte // handshake hash (channel binding)

	sendMu  sync.Mutex
	send    noiseCipherState
	sendSeq uint64 // next seq; noiseMaxSeq+1 when exhausted
	sendBuf []byte // one record, reused; grows to noiseRecordCiphertextMax
	sendErr error

	recvMu  sync.Mutex
	recv    noiseCipherState
	recvSeq uint64 // next expected seq
	recvBuf []byte // one in-order record's plaintext, reused
	ahead   [noiseReorderRecords]noiseAheadRecord
	aheadN  int // ciphertext bytes represented in ahead
	deframe noiseDeframer
	recvErr error
}

// noiseAheadRecord is a record that arrived before its predecessors, already opened.
type noiseAheadRecord struct {
	used      bool
	seq       uint64
	plaintext []byte
	size      int // ciphertext length, counted against noiseReorderBytes
}

// handshakeHash returns the channel binding of the stream.
func (t *noiseTransport) handshakeHash() []byte { return bytes.Clone(t.hash) }

// sealMessage frames one JSON-RPC message (1 byte to 64 MiB), cuts the byte stream into
// records of at most noiseRecordPlaintextMax bytes and calls emit once per record, in seq
// order, with the send lock held. record is only valid during the call. If emit fails the
// direction is dead: seqs were consumed, so the stream must be reset.
func (t *noiseTransport) sealMessage(msg []byte, emit func(seq uint32, record []byte) error) error {
	if len(msg) == 0 || len(msg) > noiseMaxRPCMessage {
		return fmt.Errorf("noise: message of %d bytes, want 1..%d", len(msg), noiseMaxRPCMessage)
	}
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	if t.sendErr != nil {
		return t.sendErr
	}
	if t.send.aead == nil {
		return errors.New("noise: transport closed")
	}
	total := noiseMessageLenLen + len(msg)
	records := (total + noiseRecordPlaintextMax - 1) / noiseRecordPlaintextMax
	if t.sendSeq+uint64(records) > noiseMaxSeq+1 {
		t.sendErr = errNoiseSeqExhausted
		return t.sendErr
	}
	var hdr [noiseMessageLenLen]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(msg)))
	rest := msg
	for off := 0; off < total; {
		n := min(noiseRecordPlaintextMax, total-off)
		if cap(t.sendBuf) < n+noiseTagLen {
			t.sendBuf = make([]byte, 0, min(noiseRecordCiphertextMax, max(n+noiseTagLen, 2*cap(t.sendBuf))))
		}
		p := t.sendBuf[:0]
		if off == 0 {
			p = append(p, hdr[:]...)
		}
		k := n - len(p)
		p = append(p, rest[:k]...)
		rest = rest[k:]
		t.send.setNonce(t.sendSeq)
		rec, err := t.send.encryptWithAd(p[:0], nil, p) // in place: exact overlap is allowed
		if err != nil {
			t.sendErr = err
			return err
		}
		seq := uint32(t.sendSeq)
		t.sendSeq++
		if err := emit(seq, rec); err != nil {
			t.sendErr = fmt.Errorf("noise: record %d: %w", seq, err)
			return t.sendErr
		}
		off += n
	}
	return nil
}

// openRecord takes the record that arrived in a Data frame with seq and calls deliver for
// every JSON-RPC message it completes, in order, with the receive lock held. A delivered
// message is a fresh slice the callee may keep. Duplicates are dropped silently; records up
// to noiseReorderRecords ahead (and noiseReorderBytes in total) wait for their
// predecessors. They are authenticated on arrival, because seq is the nonce. Any error is
// a stream error and sticky. record is not modified or retained.
func (t *noiseTransport) openRecord(seq uint32, record []byte, deliver func(msg []byte) error) error {
	t.recvMu.Lock()
	defer t.recvMu.Unlock()
	if t.recvErr != nil {
		return t.recvErr
	}
	if err := t.openRecordLocked(uint64(seq), record, deliver); err != nil {
		t.recvErr = err
		t.dropAhead()
		return err
	}
	return nil
}

func (t *noiseTransport) openRecordLocked(seq uint64, record []byte, deliver func([]byte) error) error {
	if t.recv.aead == nil {
		return errors.New("noise: transport closed")
	}
	// An empty chunk (a bare tag) is never sent by 0.169 but is harmless, so it is accepted.
	if len(record) < noiseTagLen || len(record) > noiseRecordCiphertextMax {
		return fmt.Errorf("noise: record %d is %d bytes, want %d..%d", seq, len(record), noiseTagLen, noiseRecordCiphertextMax)
	}
	if seq < t.recvSeq {
		return nil // duplicate of a delivered record
	}
	if seq > t.recvSeq {
		return t.bufferAhead(seq, record)
	}
	p, err := t.openAt(seq, t.recvBuf[:0], record)
	if err != nil {
		return err
	}
	t.recvBuf = p[:0]
	if err := t.deframe.feed(p, deliver); err != nil {
		return err
	}
	t.recvSeq++
	for {
		slot := &t.ahead[t.recvSeq%noiseReorderRecords]
		if !slot.used || slot.seq != t.recvSeq {
			return nil
		}
		p, size := slot.plaintext, slot.size
		*slot = noiseAheadRecord{}
		t.aheadN -= size
		if err := t.deframe.feed(p, deliver); err != nil {
			return err
		}
		t.recvSeq++
	}
}

func (t *noiseTransport) bufferAhead(seq uint64, record []byte) error {
	if seq-t.recvSeq > noiseReorderRecords {
		return fmt.Errorf("noise: record %d is more than %d ahead of %d", seq, noiseReorderRecords, t.recvSeq)
	}
	slot := &t.ahead[seq%noiseReorderRecords]
	if slot.used {
		return nil // duplicate of a buffered record (slots are unique within the window)
	}
	if t.aheadN+len(record) > noiseReorderBytes {
		return fmt.Errorf("noise: more than %d bytes of records buffered ahead of %d", noiseReorderBytes, t.recvSeq)
	}
	p, err := t.openAt(seq, make([]byte, 0, len(record)-noiseTagLen), record)
	if err != nil {
		return err
	}
	*slot = noiseAheadRecord{used: true, seq: seq, plaintext: p, size: len(record)}
	t.aheadN += len(record)
	return nil
}

func (t *noiseTransport) openAt(seq uint64, out, record []byte) ([]byte, error) {
	t.recv.setNonce(seq)
	p, err := t.recv.decryptWithAd(out, nil, record)
	if err != nil {
		return nil, fmt.Errorf("noise: record %d: %w", seq, err)
	}
	return p, nil
}

func (t *noiseTransport) dropAhead() {
	for i := range t.ahead {
		clear(t.ahead[i].plaintext)
		t.ahead[i] = noiseAheadRecord{}
	}
	t.aheadN = 0
}

// close drops both keys and the buffered plaintext; later calls fail.
func (t *noiseTransport) close() {
	t.sendMu.Lock()
	t.send = noiseCipherState{}
	clear(t.sendBuf[:cap(t.sendBuf)])
	t.sendMu.Unlock()
	t.recvMu.Lock()
	t.recv = noiseCipherState{}
	clear(t.recvBuf[:cap(t.recvBuf)])
	t.dropAhead()
	clear(t.deframe.msg[:cap(t.deframe.msg)]) // the part of a message that spans records
	t.deframe = noiseDeframer{}
	t.recvMu.Unlock()
}

// noiseDeframer splits the decrypted byte stream into length-prefixed messages. A length
// is checked as soon as its 4 bytes are in, before any of the message arrives, and the
// buffer grows with the bytes that actually arrive rather than with the announced length.
type noiseDeframer struct {
	hdr  [noiseMessageLenLen]byte
	hdrN int
	want int    // length of the message being collected; 0 while reading a header
	msg  []byte // bytes collected so far
}

// noiseDeframerFirstAlloc bounds the first allocation for an announced length.
const noiseDeframerFirstAlloc = 1 << 20

func (d *noiseDeframer) feed(p []byte, deliver func([]byte) error) error {
	for len(p) > 0 {
		if d.want == 0 {
			k := copy(d.hdr[d.hdrN:], p)
			d.hdrN += k
			p = p[k:]
			if d.hdrN < len(d.hdr) {
				return nil
			}
			d.hdrN = 0
			n := binary.BigEndian.Uint32(d.hdr[:])
			if n == 0 || n > noiseMaxRPCMessage {
				return fmt.Errorf("noise: message length %d, want 1..%d", n, noiseMaxRPCMessage)
			}
			d.want = int(n)
			d.msg = make([]byte, 0, min(d.want, noiseDeframerFirstAlloc))
			continue
		}
		k := min(d.want-len(d.msg), len(p))
		d.msg = append(d.msg, p[:k]...)
		p = p[k:]
		if len(d.msg) == d.want {
			msg := d.msg
			d.msg, d.want = nil, 0
			if err := deliver(msg); err != nil {
				return err
			}
		}
	}
	return nil
}
