package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"golang.org/x/crypto/curve25519"
	"golang.org/x/crypto/nacl/box"
	"golang.org/x/crypto/nacl/secretbox"
	"golang.org/x/crypto/salsa20/salsa"
)

// TestBlake2bSum compares blake2bSum with Python's hashlib.blake2b (an independent
// implementation) across the block boundaries, and with RFC 7693's Appendix A.
func TestBlake2bSum(t *testing.T) {
	data := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i % 251)
		}
		return b
	}
	// python3 -c 'import hashlib; print(hashlib.blake2b(DATA, digest_size=24).hexdigest())',
	// DATA = b"abc", or bytes(i % 251 for i in range(n)).
	for _, c := range []struct {
		data []byte
		want string
	}{
		{data(0), "ab3b5331a7135ed50d0f182d026e60abdb3646fd51bcf8a3"},
		{[]byte("abc"), "56a17e38cc371a46b12c32f18e0c61de2a84e9c2555b114e"},
		{data(64), "aa054507b4916837a6d2b35b1ce7c525facdb7868ed55a8a"},
		{data(128), "2f5f6c3d92c87ec6916cd0034fea92dfd83b28dc91485d41"},
		{data(129), "921c466b582e135fab21c8e052fe3715d9113bcd864276ba"},
		{data(1000), "7f71153365089ea59ea52d9dac2eabc5107c3c08082e79b1"},
	} {
		var out [24]byte
		blake2bSum(out[:], c.data)
		if got := hex.EncodeToString(out[:]); got != c.want {
			t.Errorf("BLAKE2b-192 of %d bytes: %s, want %s", len(c.data), got, c.want)
		}
	}
	var out [64]byte
	blake2bSum(out[:], []byte("abc"))
	const rfc7693 = "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d17d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923"
	if got := hex.EncodeToString(out[:]); got != rfc7693 {
		t.Errorf("BLAKE2b-512(abc): %s", got)
	}
}

// TestOpenSealedBox opens boxes sealed by golang.org/x/crypto/nacl/box (the libsodium format),
// and refuses a changed byte anywhere, a short box and another recipient's key.
func TestOpenSealedBox(t *testing.T) {
	pub, priv, err := box.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range [][]byte{nil, []byte("task-123"), bytes.Repeat([]byte("x"), 1000)} {
		sealed, err := box.SealAnonymous(nil, msg, pub, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := openSealedBox(sealed, pub, priv)
		if !ok || !bytes.Equal(got, msg) {
			t.Fatalf("%d-byte message: %q, %v", len(msg), got, ok)
		}
		for i := range sealed {
			bad := bytes.Clone(sealed)
			bad[i] ^= 1
			if _, ok := openSealedBox(bad, pub, priv); ok {
				t.Fatalf("%d-byte message: a flipped byte %d was accepted", len(msg), i)
			}
		}
		if _, ok := openSealedBox(sealed[:sealedBoxOverhead-1], pub, priv); ok {
			t.Fatal("a short box was accepted")
		}
	}
	var other [32]byte
	rand.Read(other[:])
	otherPub, _ := curve25519.X25519(other[:], curve25519.Basepoint)
	sealed, _ := box.SealAnonymous(nil, []byte("m"), pub, rand.Reader)
	var op [32]byte
	copy(op[:], otherPub)
	if _, ok := openSealedBox(sealed, &op, &other); ok {
		t.Fatal("another recipient opened the box")
	}
}

// TestOpenSealedBoxRefusesLowOrderKeys: an ephemeral key of small order makes the X25519 secret
// all zeros, a key anyone can compute, so a box sealed under it authenticates without knowing
// the recipient's key. libsodium's crypto_box_seal_open refuses such keys, and so does
// openSealedBox (x/crypto's box.OpenAnonymous would open it).
func TestOpenSealedBoxRefusesLowOrderKeys(t *testing.T) {
	pub, priv, err := box.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, low := range []string{
		"0000000000000000000000000000000000000000000000000000000000000000",
		"0100000000000000000000000000000000000000000000000000000000000000",
		"e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
	} {
		var epk, zero [32]byte
		hex.Decode(epk[:], []byte(low))
		var nonce [24]byte
		blake2bSum(nonce[:], append(epk[:], pub[:]...))
		var key [32]byte // HSalsa20 of the all-zero secret, as the forger computes it
		salsa.HSalsa20(&key, new([16]byte), &zero, &salsa.Sigma)
		forged := secretbox.Seal(epk[:], []byte("forged-task-id"), &nonce, &key)
		if msg, ok := openSealedBox(forged, pub, priv); ok {
			t.Errorf("ephemeral key %s…: opened %q", low[:8], msg)
		}
	}
}
