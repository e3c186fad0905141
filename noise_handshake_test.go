package main

// Tests of the Noise handshake (docs/remote.md §5.4, §5.5): message sizes, tampering, turn
// order, the authorization payload and the registry rejection.

import (
	"bytes"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
)

// noiseStart makes a production initiator and responder and writes message 1.
func noiseStart(t testing.TB, hid, eid *noiseIdentity, prologue, authorization []byte) (*noiseInitiator, *noiseResponder, []byte) {
	t.Helper()
	ini, err := newNoiseInitiator(hid, eid.publicKey(), prologue)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := newNoiseResponder(eid, prologue)
	if err != nil {
		t.Fatal(err)
	}
	msg1, err := ini.initiate(authorization)
	if err != nil {
		t.Fatal(err)
	}
	return ini, resp, msg1
}

// noiseHandshakePair runs a full production handshake with fresh identities.
func noiseHandshakePair(t testing.TB, authorization []byte) (harness, executor *noiseTransport, msg1, msg2 []byte) {
	t.Helper()
	hid, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	eid, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ini, resp, msg1 := noiseStart(t, hid, eid, noisePrologue("env-test-1", "reg-1", "s-1"), authorization)
	if err = resp.readInitiation(msg1); err != nil {
		t.Fatal(err)
	}
	if !resp.peerStatic().equal(hid.publicKey()) || !bytes.Equal(resp.authorization(), authorization) {
		t.Fatal("responder learned the wrong harness key or authorization")
	}
	if msg2, executor, err = resp.respond(nil); err != nil {
		t.Fatal(err)
	}
	if harness, err = ini.readResponse(msg2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(harness.handshakeHash(), executor.handshakeHash()) {
		t.Fatal("handshake hashes differ")
	}
	return harness, executor, msg1, msg2
}

func TestNoiseMessageSizes(t *testing.T) {
	for _, n := range []int{0, 18, noiseMaxAuthorization} {
		_, _, msg1, msg2 := noiseHandshakePair(t, bytes.Repeat([]byte("a"), n))
		if noiseMsg1Overhead != 3568 || noiseMsg2Overhead != 3424 {
			t.Fatal("size constants changed")
		}
		if len(msg1) != 3568+n {
			t.Errorf("payload %d: msg1 is %d bytes, want %d", n, len(msg1), 3568+n)
		}
		if len(msg2) != 3424 {
			t.Errorf("msg2 is %d bytes, want 3424", len(msg2))
		}
	}
}

func TestNoiseTamperedHandshakeRejected(t *testing.T) {
	hid, _ := newNoiseIdentity(rand.Reader)
	eid, _ := newNoiseIdentity(rand.Reader)
	prologue := noisePrologue("env", "reg", "s")
	// fresh runs the handshake up to the message under test.
	fresh := func(t *testing.T) (*noiseInitiator, *noiseResponder, []byte) {
		return noiseStart(t, hid, eid, prologue, []byte("auth"))
	}
	tamper := func(b []byte, at int) []byte {
		b = bytes.Clone(b)
		if at < 0 {
			return b[:len(b)+at]
		}
		if at >= len(b) {
			return append(b, 0)
		}
		b[at] ^= 0x01
		return b
	}
	msg1Cases := []struct {
		name string
		at   int
	}{
		{"skem ciphertext first byte", 0}, {"skem ciphertext last byte", 1087},
		{"ephemeral x25519", 1088}, {"ephemeral ml-kem", 1120}, {"ephemeral ml-kem last byte", 2303},
		{"static x25519 ciphertext", 2304}, {"static x25519 tag", 2351},
		{"static ml-kem ciphertext", 2352}, {"static ml-kem tag", 3551},
		{"payload", 3552}, {"payload tag", 3571},
		{"truncated", -1}, {"extended", 3572},
	}
	for _, c := range msg1Cases {
		t.Run("msg1 "+c.name, func(t *testing.T) {
			_, resp, msg1 := fresh(t)
			if len(msg1) != 3572 {
				t.Fatalf("msg1 is %d bytes", len(msg1))
			}
			if err := resp.readInitiation(tamper(msg1, c.at)); err == nil {
				t.Fatal("tampered msg1 accepted")
			}
			if _, _, err := resp.respond(nil); err == nil {
				t.Fatal("responder answered after a failed msg1")
			}
		})
	}
	msg2Cases := []struct {
		name string
		at   int
	}{
		{"ekem ciphertext", 0}, {"ekem ciphertext last byte", 1087},
		{"skem ciphertext", 1088}, {"skem tag", 2191},
		{"ephemeral x25519", 2192}, {"ephemeral ml-kem (never used, but hashed)", 3000},
		{"payload tag", 3423}, {"truncated", -1}, {"extended", 3424},
	}
	for _, c := range msg2Cases {
		t.Run("msg2 "+c.name, func(t *testing.T) {
			ini, resp, msg1 := fresh(t)
			if err := resp.readInitiation(msg1); err != nil {
				t.Fatal(err)
			}
			msg2, _, err := resp.respond(nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ini.readResponse(tamper(msg2, c.at)); err == nil {
				t.Fatal("tampered msg2 accepted")
			}
			if _, err := ini.readResponse(msg2); err == nil {
				t.Fatal("initiator state survived a failed msg2")
			}
		})
	}
	t.Run("msg1 with a low-order ephemeral", func(t *testing.T) {
		_, resp, msg1 := fresh(t)
		bad := bytes.Clone(msg1)
		clear(bad[1088:1120])
		if err := resp.readInitiation(bad); err == nil || !strings.Contains(err.Error(), "x25519") {
			t.Fatalf("got %v, want an x25519 failure", err)
		}
	})
	t.Run("msg1 to another executor", func(t *testing.T) {
		_, _, msg1 := fresh(t)
		other, _ := newNoiseIdentity(rand.Reader)
		resp, _ := newNoiseResponder(other, prologue)
		if err := resp.readInitiation(msg1); err == nil {
			t.Fatal("msg1 for another key accepted")
		}
	})
	t.Run("msg1 under another prologue", func(t *testing.T) {
		_, _, msg1 := fresh(t)
		resp, _ := newNoiseResponder(eid, noisePrologue("env", "reg", "s-2"))
		if err := resp.readInitiation(msg1); err == nil {
			t.Fatal("msg1 for another stream accepted")
		}
	})
}

func TestNoiseResponderChecksAuthorization(t *testing.T) {
	hid, _ := newNoiseIdentity(rand.Reader)
	eid, _ := newNoiseIdentity(rand.Reader)
	for _, c := range []struct {
		name string
		auth []byte
		ok   bool
	}{
		{"empty", nil, true},
		{"4096 bytes", bytes.Repeat([]byte("é"), 2048), true},
		{"4097 bytes", bytes.Repeat([]byte("a"), 4097), false},
		{"not UTF-8", []byte{'a', 0xff, 'b'}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, resp, msg1 := noiseStart(t, hid, eid, nil, c.auth)
			if err := resp.readInitiation(msg1); (err == nil) != c.ok {
				t.Fatalf("readInitiation: %v, want ok=%v", err, c.ok)
			}
		})
	}
}

func TestNoiseRegistryRejectionPayload(t *testing.T) {
	hid, _ := newNoiseIdentity(rand.Reader)
	eid, _ := newNoiseIdentity(rand.Reader)
	for _, c := range []struct {
		name    string
		payload []byte
		want    error
	}{
		{"registry rejected", []byte(noiseRegistryRejected), errNoiseRegistryRejected},
		{"other payload", []byte("surprise"), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ini, resp, msg1 := noiseStart(t, hid, eid, nil, nil)
			if err := resp.readInitiation(msg1); err != nil {
				t.Fatal(err)
			}
			msg2, _, err := resp.respond(c.payload)
			if err != nil {
				t.Fatal(err)
			}
			if len(msg2) != noiseMsg2Overhead+len(c.payload) {
				t.Fatalf("msg2 is %d bytes", len(msg2))
			}
			if c.want != nil && len(msg2) != 3465 {
				t.Fatalf("rejection msg2 is %d bytes, want 3465", len(msg2))
			}
			tr, err := ini.readResponse(msg2)
			if tr != nil || err == nil || (c.want != nil && !errors.Is(err, c.want)) {
				t.Fatalf("readResponse: %v, %v; want %v", tr, err, c.want)
			}
		})
	}
}

func TestNoiseHandshakeOutOfTurn(t *testing.T) {
	hid, _ := newNoiseIdentity(rand.Reader)
	eid, _ := newNoiseIdentity(rand.Reader)
	ini, _ := newNoiseInitiator(hid, eid.publicKey(), nil)
	resp, _ := newNoiseResponder(eid, nil)
	if _, _, err := resp.respond(nil); err == nil {
		t.Fatal("responder wrote before reading msg1")
	}
	ini2, resp2, msg1 := noiseStart(t, hid, eid, nil, nil)
	if err := resp2.readInitiation(msg1); err != nil {
		t.Fatal(err)
	}
	resp2.abandon()
	ini2.abandon()
	if resp2.hs.ss.ck != nil && !bytes.Equal(resp2.hs.ss.ck, make([]byte, len(resp2.hs.ss.ck))) {
		t.Fatal("abandon left the chaining key")
	}
	if _, _, err := resp2.respond(nil); err == nil {
		t.Fatal("responder answered after abandon")
	}
	if _, err := ini2.readResponse(make([]byte, noiseMsg2Overhead)); err == nil {
		t.Fatal("initiator read after abandon")
	}
	if _, err := ini.readResponse(make([]byte, noiseMsg2Overhead)); err == nil {
		t.Fatal("initiator read before writing msg1")
	}
	if _, err := ini.hs.transport(); err == nil {
		t.Fatal("split before the handshake finished")
	}
	if _, err := newNoiseResponder(&noiseIdentity{}, nil); err == nil {
		t.Fatal("responder without an ML-KEM key")
	}
	if _, err := newNoiseInitiator(hid, nil, nil); err == nil {
		t.Fatal("initiator without the executor key")
	}
}

// FuzzNoiseReadInitiation: any msg1 is rejected or yields an authenticated key and a valid
// authorization, never a panic. Only the harness's own msg1 can be accepted (every byte of it
// is hashed or authenticated), with the harness's key and authorization.
func FuzzNoiseReadInitiation(f *testing.F) {
	rng := &noiseCounterRand{next: 1}
	hid, _ := newNoiseIdentity(rng)
	eid, _ := newNoiseIdentity(rng)
	ini, _ := newNoiseInitiator(hid, eid.publicKey(), nil)
	ini.hs.entropy = noiseDeterministic(rng)
	msg1, err := ini.initiate([]byte("auth"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(msg1)
	f.Add(msg1[:noiseMsg1Overhead])
	f.Add(msg1[:100])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, msg []byte) {
		resp, err := newNoiseResponder(eid, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.readInitiation(msg) != nil {
			return
		}
		if resp.peerStatic() == nil || len(resp.authorization()) > noiseMaxAuthorization {
			t.Fatal("accepted msg1 without a key or with an oversize authorization")
		}
		if !bytes.Equal(msg, msg1) || !resp.peerStatic().equal(hid.publicKey()) || string(resp.authorization()) != "auth" {
			t.Fatalf("accepted a msg1 the harness did not write: %x", msg)
		}
		if _, _, err := resp.respond(nil); err != nil {
			t.Fatal(err)
		}
	})
}

// BenchmarkNoiseHandshake is one complete hybrid handshake, both sides in one process.
func BenchmarkNoiseHandshake(b *testing.B) {
	hid, _ := newNoiseIdentity(rand.Reader)
	eid, _ := newNoiseIdentity(rand.Reader)
	prologue := noisePrologue("env-test-1", "reg-1", "00000000-0000-4000-8000-000000000001")
	auth := []byte("harness-auth-token")
	b.ReportAllocs()
	for b.Loop() {
		ini, resp, msg1 := noiseStart(b, hid, eid, prologue, auth)
		if err := resp.readInitiation(msg1); err != nil {
			b.Fatal(err)
		}
		msg2, _, err := resp.respond(nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ini.readResponse(msg2); err != nil {
			b.Fatal(err)
		}
	}
}
