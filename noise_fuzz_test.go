package main

// FuzzNoiseReadResponse and FuzzNoiseDeframer: message 2 and the decrypted stream of the Noise
// channel (docs/remote.md §5, §6).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

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
