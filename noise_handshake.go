package main

// Noise handshake of remote mode (docs/remote.md §5.4, §5.5): the HandshakeState that runs a
// noisePattern as data, and the executor's responder and the harness's initiator on top of it.
//
// # Messages (docs/remote.md §5.5; the payload of a relay Handshake frame)
//
//	msg1, harness -> executor: 3568 + len(payload) bytes
//	| bytes   | token   | content                                                          |
//	|---------|---------|------------------------------------------------------------------|
//	| 1088    | skem    | ML-KEM ciphertext to the executor static key (clear: no key yet)  |
//	| 32      | e       | harness ephemeral X25519 public key                              |
//	| 1184    | e       | harness ephemeral ML-KEM-768 encapsulation key                   |
//	| 32+16   | s       | AEAD(harness static X25519 public key), nonce 0                  |
//	| 1184+16 | s       | AEAD(harness static ML-KEM-768 encapsulation key), nonce 1       |
//	| n+16    | payload | AEAD(harness_key_authorization), UTF-8, n ≤ 4096                 |
//
//	msg2, executor -> harness: 3424 bytes (3465 with the registry rejection payload)
//	| bytes   | token   | content                                                          |
//	|---------|---------|------------------------------------------------------------------|
//	| 1088    | ekem    | ML-KEM ciphertext to the harness ephemeral (clear, but hashed)   |
//	| 1088+16 | skem    | AEAD(ML-KEM ciphertext to the harness static key)                |
//	| 32      | e       | executor ephemeral X25519 public key                             |
//	| 1184    | e       | executor ephemeral ML-KEM-768 key (sent, never used)             |
//	| 16 / 57 | payload | AEAD(empty), or AEAD("codex-registry-authentication-rejected/v1")|

import (
	"bytes"
	"crypto/ecdh"
	"crypto/mlkem"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// noiseEntropy is where a handshake gets its randomness. Production uses crypto/rand and
// mlkem's own encapsulation; the vector tests inject a counter stream and derandomized
// encapsulation (crypto/mlkem/mlkemtest), which stays out of the binary.
type noiseEntropy struct {
	rand        io.Reader                                                                     // ephemeral X25519 keys and ML-KEM seeds
	encapsulate func(ek *mlkem.EncapsulationKey768) (sharedKey, ciphertext []byte, err error) // nil: ek.Encapsulate
}

// noiseHandshakeState is the Noise HandshakeState (Noise spec §5.3): it runs a noisePattern's
// token lists, one message at a time, alternately writing and reading. Any error is fatal:
// the state is destroyed and every later call fails.
type noiseHandshakeState struct {
	proto     *noiseProtocol
	ss        noiseSymmetricState
	initiator bool
	s         *noiseIdentity
	e         *noiseIdentity // set by the e token
	rs, re    *noisePublicKey
	entropy   noiseEntropy
	msg       int   // index of the next message in proto.pattern.messages
	err       error // sticky failure
}

func newNoiseHandshake(proto *noiseProtocol, initiator bool, s *noiseIdentity, rs *noisePublicKey, prologue []byte) (*noiseHandshakeState, error) {
	p := proto.pattern
	if s == nil || (p.kem && s.kem == nil) {
		return nil, errors.New("noise: local static identity missing or without an ML-KEM key")
	}
	hs := &noiseHandshakeState{proto: proto, initiator: initiator, s: s, rs: rs, entropy: noiseEntropy{rand: rand.Reader}}
	hs.ss.initializeSymmetric(proto.hash, proto.name)
	hs.ss.mixHash(prologue)
	for _, t := range p.responderPre {
		if t != noiseS {
			return nil, fmt.Errorf("noise: unsupported pre-message token %s", t)
		}
		k := &s.pub
		if initiator {
			k = rs
		}
		if k == nil || k.x == nil || (p.kem && k.kem == nil) {
			return nil, errors.New("noise: responder static key missing")
		}
		hs.ss.mixHash(k.x.Bytes())
		if p.kem {
			hs.ss.mixHash(k.kem.Bytes())
		}
	}
	return hs, nil
}

// fail destroys the state and makes err sticky.
func (hs *noiseHandshakeState) fail(err error) error {
	hs.ss.destroy()
	hs.e = nil
	hs.err = err
	return err
}

func (hs *noiseHandshakeState) turn(writing bool) error {
	if hs.err != nil {
		return hs.err
	}
	if hs.msg >= len(hs.proto.pattern.messages) {
		return errors.New("noise: handshake already complete")
	}
	if initiatorsTurn := hs.msg%2 == 0; (initiatorsTurn == hs.initiator) != writing {
		return errors.New("noise: handshake message out of turn")
	}
	return nil
}

func (hs *noiseHandshakeState) done() bool {
	return hs.err == nil && hs.msg == len(hs.proto.pattern.messages)
}

// handshakeHash is h, the channel binding; final once the handshake is done.
func (hs *noiseHandshakeState) handshakeHash() []byte { return bytes.Clone(hs.ss.h) }

// writeMessage appends the next handshake message, carrying payload, to out.
func (hs *noiseHandshakeState) writeMessage(out, payload []byte) ([]byte, error) {
	if err := hs.turn(true); err != nil {
		return nil, err
	}
	start := len(out)
	out, err := hs.writeTokens(out, payload)
	if err == nil && len(out)-start > noiseMaxHandshakeMessage {
		err = fmt.Errorf("noise: handshake message of %d bytes exceeds %d", len(out)-start, noiseMaxHandshakeMessage)
	}
	if err != nil {
		return nil, hs.fail(err)
	}
	hs.msg++
	return out, nil
}

func (hs *noiseHandshakeState) writeTokens(out, payload []byte) ([]byte, error) {
	var err error
	kem := hs.proto.pattern.kem
	for _, t := range hs.proto.pattern.messages[hs.msg] {
		switch t {
		case noiseE:
			if hs.e, err = hs.generateEphemeral(); err != nil {
				return nil, err
			}
			x := hs.e.pub.x.Bytes()
			out = append(out, x...)
			hs.ss.mixHash(x)
			if kem {
				k := hs.e.pub.kem.Bytes()
				out = append(out, k...)
				hs.ss.mixHash(k)
			}
		case noiseS:
			if out, err = hs.ss.encryptAndHash(out, hs.s.pub.x.Bytes()); err == nil && kem {
				out, err = hs.ss.encryptAndHash(out, hs.s.pub.kem.Bytes())
			}
		case noiseEkem, noiseSkem:
			out, err = hs.writeKEM(out, t)
		default:
			err = hs.mixDH(t)
		}
		if err != nil {
			return nil, fmt.Errorf("%w (token %s of message %d)", err, t, hs.msg+1)
		}
	}
	return hs.ss.encryptAndHash(out, payload)
}

// readMessage consumes the next handshake message and returns its payload.
func (hs *noiseHandshakeState) readMessage(msg []byte) ([]byte, error) {
	if err := hs.turn(false); err != nil {
		return nil, err
	}
	if len(msg) > noiseMaxHandshakeMessage {
		return nil, hs.fail(fmt.Errorf("noise: handshake message of %d bytes exceeds %d", len(msg), noiseMaxHandshakeMessage))
	}
	payload, err := hs.readTokens(msg)
	if err != nil {
		return nil, hs.fail(err)
	}
	hs.msg++
	return payload, nil
}

func (hs *noiseHandshakeState) readTokens(msg []byte) ([]byte, error) {
	kem := hs.proto.pattern.kem
	take := func(n int) ([]byte, error) {
		if len(msg) < n {
			return nil, errors.New("noise: handshake message too short")
		}
		b := msg[:n]
		msg = msg[n:]
		return b, nil
	}
	// sealed is the size on the wire of n bytes that go through EncryptAndHash.
	sealed := func(n int) int {
		if hs.ss.cs.hasKey() {
			return n + noiseTagLen
		}
		return n
	}
	for _, t := range hs.proto.pattern.messages[hs.msg] {
		var err error
		switch t {
		case noiseE:
			hs.re, err = hs.readPublicKey(kem, func(n int) ([]byte, error) {
				b, err := take(n)
				if err == nil {
					hs.ss.mixHash(b)
				}
				return b, err
			})
		case noiseS:
			hs.rs, err = hs.readPublicKey(kem, func(n int) ([]byte, error) {
				c, err := take(sealed(n))
				if err != nil {
					return nil, err
				}
				return hs.ss.decryptAndHash(c)
			})
		case noiseEkem:
			var ct []byte
			if ct, err = take(noiseKEMCiphertext); err == nil { // in clear even with a key
				hs.ss.mixHash(ct)
				err = hs.decapsulate(hs.e, ct, hs.ss.mixKey)
			}
		case noiseSkem:
			var c, ct []byte
			if c, err = take(sealed(noiseKEMCiphertext)); err == nil {
				if ct, err = hs.ss.decryptAndHash(c); err == nil {
					err = hs.decapsulate(hs.s, ct, hs.ss.mixKeyAndHash)
				}
			}
		default:
			err = hs.mixDH(t)
		}
		if err != nil {
			return nil, fmt.Errorf("%w (token %s of message %d)", err, t, hs.msg+1)
		}
	}
	p, err := hs.ss.decryptAndHash(msg)
	if err != nil {
		return nil, fmt.Errorf("%w (payload of message %d)", err, hs.msg+1)
	}
	return p, nil
}

// readPublicKey reads an X25519 key and, for hybrid patterns, an ML-KEM-768 key with read,
// which takes or decrypts n plaintext bytes.
func (hs *noiseHandshakeState) readPublicKey(kem bool, read func(n int) ([]byte, error)) (*noisePublicKey, error) {
	b, err := read(noiseDHLen)
	if err != nil {
		return nil, err
	}
	k := &noisePublicKey{}
	if k.x, err = ecdh.X25519().NewPublicKey(b); err != nil {
		return nil, fmt.Errorf("noise: peer x25519 key: %w", err)
	}
	if kem {
		if b, err = read(noiseKEMPublicLen); err != nil {
			return nil, err
		}
		if k.kem, err = mlkem.NewEncapsulationKey768(b); err != nil {
			return nil, fmt.Errorf("noise: peer ml-kem-768 key: %w", err)
		}
	}
	return k, nil
}

func (hs *noiseHandshakeState) generateEphemeral() (*noiseIdentity, error) {
	var seed [noiseDHLen + mlkem.SeedSize]byte
	defer clear(seed[:])
	n := noiseDHLen
	if hs.proto.pattern.kem {
		n = len(seed)
	}
	if _, err := io.ReadFull(hs.entropy.rand, seed[:n]); err != nil {
		return nil, fmt.Errorf("noise: ephemeral key: %w", err)
	}
	var kemSeed []byte
	if hs.proto.pattern.kem {
		kemSeed = seed[noiseDHLen:]
	}
	return newNoiseIdentityFromSeeds(seed[:noiseDHLen], kemSeed)
}

// mixDH runs one of the DH tokens. crypto/ecdh rejects an all-zero shared secret (a
// low-order peer key) where Rust's x25519 does not; that fails the handshake here, which is
// the safe reading.
func (hs *noiseHandshakeState) mixDH(t noiseToken) error {
	var local *noiseIdentity
	var remote *noisePublicKey
	switch t {
	case noiseEE:
		local, remote = hs.e, hs.re
	case noiseSS:
		local, remote = hs.s, hs.rs
	case noiseES, noiseSE:
		if (t == noiseES) == hs.initiator {
			local, remote = hs.e, hs.rs
		} else {
			local, remote = hs.s, hs.re
		}
	default:
		return fmt.Errorf("noise: unknown token %s", t)
	}
	if local == nil || remote == nil {
		return errors.New("noise: DH before the keys it needs")
	}
	shared, err := local.x.ECDH(remote.x)
	if err != nil {
		return fmt.Errorf("noise: x25519: %w", err)
	}
	defer clear(shared)
	return hs.ss.mixKey(shared)
}

// writeKEM runs ekem (to the peer's ephemeral key, ciphertext in clear) or skem (to the
// peer's static key, ciphertext through EncryptAndHash).
func (hs *noiseHandshakeState) writeKEM(out []byte, t noiseToken) ([]byte, error) {
	peer := hs.rs
	if t == noiseEkem {
		peer = hs.re
	}
	if peer == nil || peer.kem == nil {
		return nil, errors.New("noise: KEM token before the peer's ML-KEM key")
	}
	var shared, ct []byte
	var err error
	if hs.entropy.encapsulate != nil {
		shared, ct, err = hs.entropy.encapsulate(peer.kem)
		if err != nil {
			return nil, fmt.Errorf("noise: ml-kem-768 encapsulation: %w", err)
		}
	} else {
		shared, ct = peer.kem.Encapsulate()
	}
	defer clear(shared)
	if t == noiseEkem {
		out = append(out, ct...)
		hs.ss.mixHash(ct)
		return out, hs.ss.mixKey(shared)
	}
	if out, err = hs.ss.encryptAndHash(out, ct); err != nil {
		return nil, err
	}
	return out, hs.ss.mixKeyAndHash(shared)
}

func (hs *noiseHandshakeState) decapsulate(local *noiseIdentity, ct []byte, mix func([]byte) error) error {
	if local == nil || local.kem == nil {
		return errors.New("noise: KEM token without a local ML-KEM key")
	}
	shared, err := local.kem.Decapsulate(ct)
	if err != nil {
		return fmt.Errorf("noise: ml-kem-768 decapsulation: %w", err)
	}
	defer clear(shared)
	return mix(shared)
}

// transport ends a completed handshake: it splits the keys and destroys the handshake
// secrets.
func (hs *noiseHandshakeState) transport() (*noiseTransport, error) {
	if !hs.done() {
		return nil, errors.New("noise: handshake not complete")
	}
	c1, c2, err := hs.ss.split()
	if err != nil {
		return nil, hs.fail(err)
	}
	t := &noiseTransport{hash: hs.handshakeHash(), send: c2, recv: c1}
	if hs.initiator {
		t.send, t.recv = c1, c2
	}
	hs.fail(errors.New("noise: handshake state already split"))
	return t, nil
}

// noiseResponder is the executor's side of one stream's handshake. Use: readInitiation,
// then ask the registry about peerStatic and authorization, then respond.
type noiseResponder struct {
	hs   *noiseHandshakeState
	auth []byte
}

func newNoiseResponder(id *noiseIdentity, prologue []byte) (*noiseResponder, error) {
	hs, err := newNoiseHandshake(&noiseHybridIK, false, id, nil, prologue)
	if err != nil {
		return nil, err
	}
	return &noiseResponder{hs: hs}, nil
}

// readInitiation reads message 1. On success the harness has proved possession of the
// static key that peerStatic returns, and authorization is the payload it sent: at most
// 4096 bytes of UTF-8, as 0.169 requires.
func (r *noiseResponder) readInitiation(msg1 []byte) error {
	if len(msg1) < noiseMsg1Overhead {
		return r.hs.fail(fmt.Errorf("noise: message 1 is %d bytes, want at least %d", len(msg1), noiseMsg1Overhead))
	}
	p, err := r.hs.readMessage(msg1)
	if err != nil {
		return err
	}
	if len(p) > noiseMaxAuthorization {
		return r.hs.fail(fmt.Errorf("noise: harness key authorization is %d bytes, over %d", len(p), noiseMaxAuthorization))
	}
	if !utf8.Valid(p) {
		return r.hs.fail(errors.New("noise: harness key authorization is not UTF-8"))
	}
	r.auth = p
	return nil
}

// abandon zeroes the handshake secrets of a stream that ends before respond (registry said
// no, reset, timeout). Safe to call at any point.
func (r *noiseResponder) abandon() { r.hs.fail(errors.New("noise: handshake abandoned")) }

// peerStatic is the harness static key, authenticated by readInitiation.
func (r *noiseResponder) peerStatic() *noisePublicKey { return r.hs.rs }

// authorization is the harness_key_authorization carried by message 1.
func (r *noiseResponder) authorization() []byte { return r.auth }

// respond writes message 2 with payload: nil once the registry said valid, or
// noiseRegistryRejected after a 401 (the transport is then to be dropped).
func (r *noiseResponder) respond(payload []byte) (msg2 []byte, t *noiseTransport, err error) {
	msg2, err = r.hs.writeMessage(make([]byte, 0, noiseMsg2Overhead+len(payload)), payload)
	if err != nil {
		return nil, nil, err
	}
	t, err = r.hs.transport()
	if err != nil {
		return nil, nil, err
	}
	return msg2, t, nil
}

// noiseInitiator is the harness's side of one stream's handshake.
type noiseInitiator struct {
	hs *noiseHandshakeState
}

// newNoiseInitiator starts a handshake to the executor key from the connect bundle.
func newNoiseInitiator(id *noiseIdentity, executor *noisePublicKey, prologue []byte) (*noiseInitiator, error) {
	hs, err := newNoiseHandshake(&noiseHybridIK, true, id, executor, prologue)
	if err != nil {
		return nil, err
	}
	return &noiseInitiator{hs: hs}, nil
}

// initiate writes message 1 carrying the registry's harness_key_authorization.
func (i *noiseInitiator) initiate(authorization []byte) ([]byte, error) {
	return i.hs.writeMessage(make([]byte, 0, noiseMsg1Overhead+len(authorization)), authorization)
}

// abandon zeroes the handshake secrets of a stream that ends before readResponse.
func (i *noiseInitiator) abandon() { i.hs.fail(errors.New("noise: handshake abandoned")) }

// readResponse reads message 2. Its payload must be empty; the registry rejection payload
// gives errNoiseRegistryRejected (docs/remote.md §5.5).
func (i *noiseInitiator) readResponse(msg2 []byte) (*noiseTransport, error) {
	p, err := i.hs.readMessage(msg2)
	if err != nil {
		return nil, err
	}
	if len(p) != 0 {
		if string(p) == noiseRegistryRejected {
			err = errNoiseRegistryRejected
		} else {
			err = fmt.Errorf("noise: unexpected %d-byte payload in message 2", len(p))
		}
		return nil, i.hs.fail(err)
	}
	return i.hs.transport()
}
