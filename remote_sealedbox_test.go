package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"golang.org/x/crypto/blake2b"
	"golang.org/x/crypto/curve25519"
	"golang.org/x/crypto/nacl/box"
	"golang.org/x/crypto/nacl/secretbox"
	"golang.org/x/crypto/salsa20/salsa"
)

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
		if _, ok := openSealedBox(sealed[:box.AnonymousOverhead-1], pub, priv); ok {
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
// openSealedBox; x/crypto's box.OpenAnonymous alone opens them, which the test checks too, so
// that the check in front of it is known to be needed.
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
		h, _ := blake2b.New(24, nil) // the sealed box nonce: BLAKE2b-192 of epk || pub
		h.Write(epk[:])
		h.Write(pub[:])
		var nonce [24]byte
		h.Sum(nonce[:0])
		var key [32]byte // HSalsa20 of the all-zero secret, as the forger computes it
		salsa.HSalsa20(&key, new([16]byte), &zero, &salsa.Sigma)
		forged := secretbox.Seal(epk[:], []byte("forged-task-id"), &nonce, &key)
		if msg, ok := box.OpenAnonymous(nil, forged, pub, priv); !ok || string(msg) != "forged-task-id" {
			t.Errorf("ephemeral key %s…: box.OpenAnonymous did not open the forged box (%q, %v): the forgery is wrong", low[:8], msg, ok)
		}
		if msg, ok := openSealedBox(forged, pub, priv); ok {
			t.Errorf("ephemeral key %s…: opened %q", low[:8], msg)
		}
	}
}
