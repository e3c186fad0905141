package main

// Opening a libsodium sealed box (crypto_box_seal), the form in which the Agent Identity task
// registration may return the task id (docs/remote.md §8). golang.org/x/crypto/nacl/box's
// OpenAnonymous does the work; this file adds the one check libsodium's crypto_box_seal_open
// makes and OpenAnonymous does not: an ephemeral key of small order is refused.

import (
	"golang.org/x/crypto/curve25519"
	"golang.org/x/crypto/nacl/box"
)

// openSealedBox returns the message of a sealed box addressed to pub, whose secret key is
// priv, or false if the box is not authentic.
//
// OpenAnonymous computes the shared secret with curve25519.ScalarMult, which accepts an
// ephemeral key of small order: the secret is then all zeros, a key anyone can compute, and a
// box sealed under it would authenticate without knowledge of priv. curve25519.X25519 returns
// an error for exactly those keys, so it is asked first.
func openSealedBox(sealed []byte, pub, priv *[32]byte) ([]byte, bool) {
	if len(sealed) < box.AnonymousOverhead {
		return nil, false
	}
	if _, err := curve25519.X25519(priv[:], sealed[:32]); err != nil {
		return nil, false
	}
	return box.OpenAnonymous(nil, sealed, pub, priv)
}
