// Noise channel of remote mode (docs/remote.md §5, §6): the hybridIK handshake and the record
// layer of each harness stream. Codex 0.169 runs it with Rust Clatter 2.2.0; this file is a
// stdlib-only reimplementation, pinned by Clatter's own vector and by classic IK vectors
// regenerated with github.com/flynn/noise (testdata/noise, interop/).
//
// # Names (docs/remote.md §5.1)
//
// The protocol name hashed into the state calls the DH "25519"; the suite label in the public
// key JSON calls it "X25519". Hashing the label makes message 1 fail to decrypt.
//
//	protocol name  Noise_hybridIK_25519+MLKEM768_AESGCM_SHA256    (43 bytes > HASHLEN: h = SHA-256(name))
//	suite label    Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256   (JSON "suite" only)
//
// # Prologue (docs/remote.md §5.3)
//
//	prologue = LP("codex-exec-server-relay-noise/v1") || LP(environment_id)
//	        || LP(executor_registration_id) || LP(stream_id)
//	LP(x)    = uint64be(len(x)) || x            (8-byte prefixes: 4-byte ones fail against 0.169)
//
// # Pattern (docs/remote.md §5.4), run as data by one interpreter loop (noiseHandshakeState)
//
//	<- s                          pre-message: executor static, X25519 then ML-KEM
//	...
//	-> skem, e, es, s, ss         + payload
//	<- ekem, skem, e, ee, se      + payload   (Clatter 2.2.0 order; 2.1.0-rc's order fails)
//
// Each e carries a fresh X25519 and a fresh ML-KEM-768 key pair; each s both static keys.
//
// # Handshake messages (docs/remote.md §5.5; the payload of a relay Handshake frame)
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
//
// # API for the relay
//
//	identity, once per process:
//	  id, err := newNoiseIdentity(rand.Reader)              // or loadOrCreateNoiseIdentity(FILE, rand.Reader) for --identity FILE
//	  js, err := id.publicKeyJSON()                         // executor_public_key; *noisePublicKey is a json.Marshaler/Unmarshaler
//	executor (responder), per stream:
//	  r, err := newNoiseResponder(identity, noisePrologue(envID, regID, streamID))
//	  err = r.readInitiation(msg1)            // authenticates the harness static key
//	  r.peerStatic(), r.authorization()       // -> POST /validate before answering
//	  msg2, t, err := r.respond(nil)          // or respond([]byte(noiseRegistryRejected)) after a 401
//	  r.abandon()                             // instead of respond when the stream is reset
//	harness (initiator), tests and a later bridge:
//	  i, err := newNoiseInitiator(identity, executorKey, prologue)
//	  msg1, err := i.initiate(authorization)
//	  t, err := i.readResponse(msg2)          // errNoiseRegistryRejected for the 401 payload
//	both:
//	  t.sealMessage(json, func(seq uint32, record []byte) error { ...one Data frame... })
//	  t.openRecord(seq, record, func(msg []byte) error { ...one JSON-RPC message... })
//	  t.close()                               // stream reset: drop keys and buffers
//
// emit and deliver run under the direction's lock, in seq and message order. emit's record
// is reused after it returns; deliver's msg is the callee's to keep. Any error from either
// direction is sticky: the stream must be reset.
//
// # Secrets
//
// Chaining keys, HKDF outputs, DH and KEM shared secrets and key seeds are zeroed as soon as
// they are used. Go gives no way to wipe what lives inside crypto/ecdh.PrivateKey,
// mlkem.DecapsulationKey768 or the expanded AES key schedule of a cipher.AEAD: those are only
// dropped for the garbage collector (the static identity lives for the whole process anyway).
package main

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/mlkem"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"unicode/utf8"
)

// Names, labels and fixed strings (docs/remote.md §2.3, §5.1, §5.3).
const (
	noiseProtocolName     = "Noise_hybridIK_25519+MLKEM768_AESGCM_SHA256"
	noiseSuiteLabel       = "Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256"
	noisePrologueTag      = "codex-exec-server-relay-noise/v1"
	noiseRegistryRejected = "codex-registry-authentication-rejected/v1"
)

// Sizes and limits (docs/remote.md §5.2, §5.5, §6).
const (
	noiseDHLen          = 32 // X25519 public key and shared secret
	noiseKEMPublicLen   = mlkem.EncapsulationKeySize768
	noiseKEMCiphertext  = mlkem.CiphertextSize768
	noiseKeyLen         = 32 // AES-256 key
	noiseTagLen         = 16 // AES-GCM tag
	noisePrologueLenLen = 8  // width of the prologue's length prefixes; newer upstream uses 4

	noiseMsg1Overhead        = 3568  // msg1 = this + len(payload)
	noiseMsg2Overhead        = 3424  // msg2 = this + len(payload)
	noiseMaxHandshakeMessage = 65535 // Noise's message cap, enforced by Clatter
	noiseMaxAuthorization    = 4096  // harness_key_authorization bytes accepted in msg1

	noiseRecordPlaintextMax  = 61440 // 60 KiB of byte stream per record
	noiseRecordCiphertextMax = noiseRecordPlaintextMax + noiseTagLen
	noiseMessageLenLen       = 4        // big-endian length before each JSON-RPC message
	noiseMaxRPCMessage       = 64 << 20 // largest JSON-RPC message, checked before its payload arrives
	noiseReorderRecords      = 64       // records buffered ahead of the next expected seq
	noiseReorderBytes        = 1 << 20  // ciphertext bytes buffered ahead of the next expected seq
	noiseMaxSeq              = math.MaxUint32
)

var (
	errNoiseRegistryRejected = errors.New("noise: executor reports that the registry rejected its credentials")
	errNoiseSeqExhausted     = errors.New("noise: record sequence numbers exhausted")
)

// noisePrologue binds a handshake to one registration and one stream (docs/remote.md §5.3).
func noisePrologue(environmentID, registrationID, streamID string) []byte {
	fields := [...]string{noisePrologueTag, environmentID, registrationID, streamID}
	n := 0
	for _, f := range fields {
		n += noisePrologueLenLen + len(f)
	}
	p := make([]byte, 0, n)
	for _, f := range fields {
		p = binary.BigEndian.AppendUint64(p, uint64(len(f)))
		p = append(p, f...)
	}
	return p
}

// noiseToken is one step of a handshake pattern (Noise spec §7, Clatter's KEM tokens).
type noiseToken uint8

const (
	noiseE    noiseToken = iota + 1 // ephemeral public key(s), in clear
	noiseS                          // static public key(s), encrypted once a key exists
	noiseEE                         // MixKey(DH(e, re))
	noiseES                         // MixKey(DH(e, rs)) at the initiator, DH(s, re) at the responder
	noiseSE                         // MixKey(DH(s, re)) at the initiator, DH(e, rs) at the responder
	noiseSS                         // MixKey(DH(s, rs))
	noiseEkem                       // encapsulate to the peer's ephemeral KEM key: MixHash(ct), MixKey(ss)
	noiseSkem                       // encapsulate to the peer's static KEM key: EncryptAndHash(ct), MixKeyAndHash(ss)
)

var noiseTokenNames = [...]string{noiseE: "e", noiseS: "s", noiseEE: "ee", noiseES: "es", noiseSE: "se", noiseSS: "ss", noiseEkem: "ekem", noiseSkem: "skem"}

func (t noiseToken) String() string {
	if int(t) < len(noiseTokenNames) && noiseTokenNames[t] != "" {
		return noiseTokenNames[t]
	}
	return fmt.Sprintf("token(%d)", uint8(t))
}

// noisePattern is a handshake pattern as data; noiseHandshakeState interprets it.
type noisePattern struct {
	name         string         // as it appears in the protocol name
	kem          bool           // e and s carry an ML-KEM-768 key after the X25519 key
	responderPre []noiseToken   // pre-message from the responder (only s is supported)
	messages     [][]noiseToken // alternate, initiator first
}

var (
	noisePatternHybridIK = noisePattern{
		name:         "hybridIK",
		kem:          true,
		responderPre: []noiseToken{noiseS},
		messages: [][]noiseToken{
			{noiseSkem, noiseE, noiseES, noiseS, noiseSS},
			{noiseEkem, noiseSkem, noiseE, noiseEE, noiseSE},
		},
	}
	// noisePatternIK is classic IK. Production never runs it: it exists so that the
	// interpreter can be checked against an independent implementation (flynn/noise).
	noisePatternIK = noisePattern{
		name:         "IK",
		responderPre: []noiseToken{noiseS},
		messages: [][]noiseToken{
			{noiseE, noiseES, noiseS, noiseSS},
			{noiseE, noiseEE, noiseSE},
		},
	}
)

// noiseHash is the HASH of a Noise protocol. Production uses SHA-256 only; tests swap in
// SHA-512 to replay Clatter's published vector.
type noiseHash struct {
	name string
	new  func() hash.Hash
	size int
}

var noiseSHA256 = noiseHash{name: "SHA256", new: sha256.New, size: sha256.Size}

// noiseProtocol is a pattern with its primitives. DH is always 25519, the KEM ML-KEM-768
// and the cipher AES-256-GCM.
type noiseProtocol struct {
	name    string // hashed into h; see noiseProtocolNameFor
	pattern *noisePattern
	hash    noiseHash
}

var noiseHybridIK = noiseProtocol{name: noiseProtocolName, pattern: &noisePatternHybridIK, hash: noiseSHA256}

// noiseProtocolNameFor spells a protocol name the way Clatter does: DH "25519" (never the
// "X25519" of the suite label) and, when both KEMs are ML-KEM-768, a single "+MLKEM768".
func noiseProtocolNameFor(p *noisePattern, h noiseHash) string {
	kem := ""
	if p.kem {
		kem = "+MLKEM768"
	}
	return "Noise_" + p.name + "_25519" + kem + "_AESGCM_" + h.name
}

// noiseCipherState is the Noise CipherState (Noise spec §5.1): an AES-256-GCM key and a nonce.
// The key itself is not kept: only the AEAD built from it.
type noiseCipherState struct {
	aead  cipher.AEAD // nil: no key
	n     uint64
	nonce [12]byte // scratch, so that Seal and Open do not allocate
}

func (c *noiseCipherState) initializeKey(k []byte) error {
	block, err := aes.NewCipher(k[:noiseKeyLen])
	if err != nil {
		return fmt.Errorf("noise: cipher key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return fmt.Errorf("noise: cipher key: %w", err)
	}
	c.aead, c.n = aead, 0
	return nil
}

func (c *noiseCipherState) hasKey() bool { return c.aead != nil }

func (c *noiseCipherState) setNonce(n uint64) { c.n = n }

// nextNonce returns nonce(n) and advances n. 2^64-1 is reserved by the Noise spec.
func (c *noiseCipherState) nextNonce() ([]byte, error) {
	if c.n == math.MaxUint64 {
		return nil, errors.New("noise: nonce exhausted")
	}
	binary.BigEndian.PutUint64(c.nonce[4:], c.n)
	c.n++
	return c.nonce[:], nil
}

// encryptWithAd appends the sealed plaintext to out. Without a key it appends the
// plaintext unchanged, as EncryptAndHash requires. out may alias plaintext exactly.
func (c *noiseCipherState) encryptWithAd(out, ad, plaintext []byte) ([]byte, error) {
	if c.aead == nil {
		return append(out, plaintext...), nil
	}
	nonce, err := c.nextNonce()
	if err != nil {
		return nil, err
	}
	return c.aead.Seal(out, nonce, plaintext, ad), nil
}

// decryptWithAd appends the opened ciphertext to out. n advances only on success.
func (c *noiseCipherState) decryptWithAd(out, ad, ciphertext []byte) ([]byte, error) {
	if c.aead == nil {
		return append(out, ciphertext...), nil
	}
	n := c.n
	nonce, err := c.nextNonce()
	if err != nil {
		return nil, err
	}
	p, err := c.aead.Open(out, nonce, ciphertext, ad)
	if err != nil {
		c.n = n
		return nil, errors.New("noise: decryption failed")
	}
	return p, nil
}

// noiseSymmetricState is the Noise SymmetricState (Noise spec §5.2).
type noiseSymmetricState struct {
	hash   noiseHash
	hasher hash.Hash
	cs     noiseCipherState
	ck     []byte
	h      []byte
}

func (s *noiseSymmetricState) initializeSymmetric(hf noiseHash, protocolName string) {
	s.hash, s.hasher = hf, hf.new()
	s.h = make([]byte, hf.size)
	if len(protocolName) <= hf.size {
		copy(s.h, protocolName)
	} else {
		s.hasher.Write([]byte(protocolName))
		s.h = s.hasher.Sum(s.h[:0])
	}
	s.ck = bytes.Clone(s.h)
	s.cs = noiseCipherState{}
}

func (s *noiseSymmetricState) mixHash(data []byte) {
	s.hasher.Reset()
	s.hasher.Write(s.h)
	s.hasher.Write(data)
	s.h = s.hasher.Sum(s.h[:0])
}

// hkdf is Noise's HKDF(ck, ikm, n) (Noise spec §4.3): n outputs of HASHLEN bytes, which the
// caller must zero.
func (s *noiseSymmetricState) hkdf(ikm []byte, n int) [][]byte {
	mac := hmac.New(s.hash.new, s.ck)
	mac.Write(ikm)
	temp := mac.Sum(nil)
	defer clear(temp)
	mac = hmac.New(s.hash.new, temp)
	out := make([][]byte, n)
	var prev []byte
	for i := range out {
		mac.Reset()
		mac.Write(prev)
		mac.Write([]byte{byte(i + 1)})
		out[i] = mac.Sum(nil)
		prev = out[i]
	}
	return out
}

func (s *noiseSymmetricState) mixKey(ikm []byte) error {
	o := s.hkdf(ikm, 2)
	defer noiseClearAll(o)
	copy(s.ck, o[0])
	return s.cs.initializeKey(o[1])
}

func (s *noiseSymmetricState) mixKeyAndHash(ikm []byte) error {
	o := s.hkdf(ikm, 3)
	defer noiseClearAll(o)
	copy(s.ck, o[0])
	s.mixHash(o[1])
	return s.cs.initializeKey(o[2])
}

func (s *noiseSymmetricState) encryptAndHash(out, plaintext []byte) ([]byte, error) {
	start := len(out)
	out, err := s.cs.encryptWithAd(out, s.h, plaintext)
	if err != nil {
		return nil, err
	}
	s.mixHash(out[start:])
	return out, nil
}

// decryptAndHash hashes the ciphertext, never the plaintext, and only after opening it
// with the old h as AD.
func (s *noiseSymmetricState) decryptAndHash(ciphertext []byte) ([]byte, error) {
	p, err := s.cs.decryptWithAd(nil, s.h, ciphertext)
	if err != nil {
		return nil, err
	}
	s.mixHash(ciphertext)
	return p, nil
}

// split returns the initiator→responder and responder→initiator cipher states.
func (s *noiseSymmetricState) split() (c1, c2 noiseCipherState, err error) {
	o := s.hkdf(nil, 2)
	defer noiseClearAll(o)
	if err := c1.initializeKey(o[0]); err != nil {
		return c1, c2, err
	}
	err = c2.initializeKey(o[1])
	return c1, c2, err
}

// destroy zeroes the chaining key and drops the cipher.
func (s *noiseSymmetricState) destroy() {
	clear(s.ck)
	s.cs = noiseCipherState{}
}

func noiseClearAll(bufs [][]byte) {
	for _, b := range bufs {
		clear(b)
	}
}

// noisePublicKey is a static or ephemeral public key: X25519, plus ML-KEM-768 for hybrid
// patterns (kem is nil for classic IK).
type noisePublicKey struct {
	x   *ecdh.PublicKey
	kem *mlkem.EncapsulationKey768
}

func (k *noisePublicKey) equal(o *noisePublicKey) bool {
	if k == nil || o == nil || !k.x.Equal(o.x) || (k.kem == nil) != (o.kem == nil) {
		return false
	}
	return k.kem == nil || bytes.Equal(k.kem.Bytes(), o.kem.Bytes())
}

// noisePublicKeyJSON is the wire form of a hybrid public key (docs/remote.md §5.2), in the field
// order 0.169 emits. Values are standard base64 with padding.
type noisePublicKeyJSON struct {
	Suite  string `json:"suite"`
	X25519 string `json:"x25519_public_key"`
	MLKEM  string `json:"mlkem768_public_key"`
}

// MarshalJSON lets the relay embed a key in register, connect and validate bodies.
func (k *noisePublicKey) MarshalJSON() ([]byte, error) {
	if k == nil || k.x == nil || k.kem == nil {
		return nil, errors.New("noise: public key JSON needs both X25519 and ML-KEM-768 keys")
	}
	return json.Marshal(noisePublicKeyJSON{
		Suite:  noiseSuiteLabel,
		X25519: base64.StdEncoding.EncodeToString(k.x.Bytes()),
		MLKEM:  base64.StdEncoding.EncodeToString(k.kem.Bytes()),
	})
}

// UnmarshalJSON is as strict as 0.169's serde type, and stricter than encoding/json's struct
// decoding: the three keys exactly once each, matched case-sensitively, no others, string
// values only, the suite label (not the protocol name), canonical padded base64, lengths 32
// and 1184, and an ML-KEM key that passes FIPS 203's modulus check.
func (k *noisePublicKey) UnmarshalJSON(data []byte) error {
	v, err := noisePublicKeyFields(data)
	if err != nil {
		return err
	}
	if *v[0] != noiseSuiteLabel {
		return fmt.Errorf("noise public key: unsupported suite %q", *v[0])
	}
	xb, err := noiseDecodeBase64(*v[1], noiseDHLen)
	if err != nil {
		return fmt.Errorf("noise public key: x25519_public_key: %w", err)
	}
	kb, err := noiseDecodeBase64(*v[2], noiseKEMPublicLen)
	if err != nil {
		return fmt.Errorf("noise public key: mlkem768_public_key: %w", err)
	}
	x, err := ecdh.X25519().NewPublicKey(xb)
	if err != nil {
		return fmt.Errorf("noise public key: x25519_public_key: %w", err)
	}
	kem, err := mlkem.NewEncapsulationKey768(kb)
	if err != nil {
		return fmt.Errorf("noise public key: mlkem768_public_key: %w", err)
	}
	k.x, k.kem = x, kem
	return nil
}

// noisePublicKeyFields reads the public key object's three string fields (suite,
// x25519_public_key, mlkem768_public_key), each exactly once, matched case-sensitively, and
// nothing else, which encoding/json's struct decoding would not enforce.
func noisePublicKeyFields(data []byte) ([3]*string, error) {
	var v [3]*string
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return v, errors.New("noise public key: not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return v, fmt.Errorf("noise public key: %w", err)
		}
		name, _ := t.(string)
		i := -1
		switch name {
		case "suite":
			i = 0
		case "x25519_public_key":
			i = 1
		case "mlkem768_public_key":
			i = 2
		}
		if i < 0 {
			return v, fmt.Errorf("noise public key: unknown field %q", name)
		}
		if v[i] != nil {
			return v, fmt.Errorf("noise public key: duplicate field %q", name)
		}
		t, err = dec.Token()
		s, ok := t.(string)
		if err != nil || !ok {
			return v, fmt.Errorf("noise public key: field %q is not a string", name)
		}
		v[i] = &s
	}
	if _, err := dec.Token(); err != nil {
		return v, fmt.Errorf("noise public key: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return v, errors.New("noise public key: trailing data after the object")
	}
	if v[0] == nil || v[1] == nil || v[2] == nil {
		return v, errors.New("noise public key: suite, x25519_public_key and mlkem768_public_key are required")
	}
	return v, nil
}

// noiseDecodeBase64 accepts only the canonical padded standard encoding of exactly n bytes.
// The round trip rejects what the decoder would otherwise tolerate: embedded CR/LF and
// non-zero padding bits, both of which would let one key have several spellings.
func noiseDecodeBase64(s string, n int) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not standard padded base64: %w", err)
	}
	if len(b) != n {
		return nil, fmt.Errorf("decodes to %d bytes, want %d", len(b), n)
	}
	if base64.StdEncoding.EncodeToString(b) != s {
		return nil, errors.New("not canonical base64")
	}
	return b, nil
}

// noiseIdentity is a static key pair: X25519, plus ML-KEM-768 for hybrid patterns. The
// executor makes one per process (or loads it with --identity) and reuses it on every
// registration and stream (docs/remote.md §5.2).
type noiseIdentity struct {
	x   *ecdh.PrivateKey
	kem *mlkem.DecapsulationKey768 // nil only in classic IK tests
	pub noisePublicKey
}

// newNoiseIdentity generates a hybrid identity from random (crypto/rand.Reader in production).
func newNoiseIdentity(random io.Reader) (*noiseIdentity, error) {
	var seed [noiseDHLen + mlkem.SeedSize]byte
	defer clear(seed[:])
	if _, err := io.ReadFull(random, seed[:]); err != nil {
		return nil, fmt.Errorf("noise identity: %w", err)
	}
	return newNoiseIdentityFromSeeds(seed[:noiseDHLen], seed[noiseDHLen:])
}

// newNoiseIdentityFromSeeds builds an identity from a 32-byte X25519 private key and a
// 64-byte ML-KEM-768 seed (d || z). A nil kemSeed gives a classic X25519-only identity.
func newNoiseIdentityFromSeeds(xPriv, kemSeed []byte) (*noiseIdentity, error) {
	x, err := ecdh.X25519().NewPrivateKey(xPriv)
	if err != nil {
		return nil, fmt.Errorf("noise identity: x25519: %w", err)
	}
	id := &noiseIdentity{x: x, pub: noisePublicKey{x: x.PublicKey()}}
	if kemSeed != nil {
		if id.kem, err = mlkem.NewDecapsulationKey768(kemSeed); err != nil {
			return nil, fmt.Errorf("noise identity: ml-kem-768: %w", err)
		}
		id.pub.kem = id.kem.EncapsulationKey()
	}
	return id, nil
}

func (id *noiseIdentity) publicKey() *noisePublicKey { return &id.pub }

func (id *noiseIdentity) publicKeyJSON() ([]byte, error) { return id.pub.MarshalJSON() }

// Identity file (--identity FILE). Three lines, each ending in "\n", nothing else:
//
//	exec-server-noise-identity/v1
//	x25519-private-key: <standard padded base64 of the 32-byte X25519 private key>
//	mlkem768-seed: <standard padded base64 of the 64-byte ML-KEM-768 seed d || z>
//
// The file is a secret: it is created with mode 0600, and loading refuses a file that any
// group or other permission bit opens up, like ssh does for private keys.
const (
	noiseIdentityHeader  = "exec-server-noise-identity/v1"
	noiseIdentityX25519  = "x25519-private-key: "
	noiseIdentityMLKEM   = "mlkem768-seed: "
	noiseIdentityMaxFile = 1024
)

func (id *noiseIdentity) marshalFile() []byte {
	xb := id.x.Bytes()
	kb := id.kem.Bytes()
	defer clear(xb)
	defer clear(kb)
	var b []byte
	b = append(b, noiseIdentityHeader+"\n"+noiseIdentityX25519...)
	b = base64.StdEncoding.AppendEncode(b, xb)
	b = append(b, "\n"+noiseIdentityMLKEM...)
	b = base64.StdEncoding.AppendEncode(b, kb)
	return append(b, '\n')
}

func parseNoiseIdentityFile(b []byte) (*noiseIdentity, error) {
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines) != 4 || len(lines[3]) != 0 || string(lines[0]) != noiseIdentityHeader+"\n" {
		return nil, errors.New("not an exec-server noise identity file (want 3 lines, first " + noiseIdentityHeader + ")")
	}
	field := func(line []byte, prefix string, n int) ([]byte, error) {
		v, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\n")), []byte(prefix))
		if !ok {
			return nil, fmt.Errorf("missing %q line", prefix)
		}
		b, err := noiseDecodeBase64(string(v), n)
		if err != nil {
			return nil, fmt.Errorf("%s%w", prefix, err)
		}
		return b, nil
	}
	xb, err := field(lines[1], noiseIdentityX25519, noiseDHLen)
	if err != nil {
		return nil, err
	}
	defer clear(xb)
	kb, err := field(lines[2], noiseIdentityMLKEM, mlkem.SeedSize)
	if err != nil {
		return nil, err
	}
	defer clear(kb)
	return newNoiseIdentityFromSeeds(xb, kb)
}

// loadNoiseIdentity reads an identity file written by saveNoiseIdentity.
func loadNoiseIdentity(path string) (*noiseIdentity, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("noise identity: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("noise identity %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("noise identity %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("noise identity %s: permissions %#o are too open (want 0600)", path, perm)
	}
	b, err := io.ReadAll(io.LimitReader(f, noiseIdentityMaxFile+1))
	defer clear(b)
	if err != nil {
		return nil, fmt.Errorf("noise identity %s: %w", path, err)
	}
	if len(b) > noiseIdentityMaxFile {
		return nil, fmt.Errorf("noise identity %s: file larger than %d bytes", path, noiseIdentityMaxFile)
	}
	id, err := parseNoiseIdentityFile(b)
	if err != nil {
		return nil, fmt.Errorf("noise identity %s: %w", path, err)
	}
	return id, nil
}

// saveNoiseIdentity writes id to path with mode 0600, and never replaces an existing file:
// the bytes go to a temporary file in the same directory that is then hard-linked into
// place, so a reader never sees a partial file and a racing writer gets fs.ErrExist.
func saveNoiseIdentity(path string, id *noiseIdentity) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".noise-identity-*")
	if err != nil {
		return fmt.Errorf("noise identity: %w", err)
	}
	defer os.Remove(tmp.Name())
	b := id.marshalFile()
	defer clear(b)
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.Write(b)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("noise identity %s: %w", path, err)
	}
	return nil
}

// loadOrCreateNoiseIdentity implements --identity FILE: load FILE if it exists, otherwise
// generate an identity and save it there. Two processes racing on a new FILE end up with
// the same identity.
func loadOrCreateNoiseIdentity(path string, random io.Reader) (*noiseIdentity, error) {
	id, err := loadNoiseIdentity(path)
	if !errors.Is(err, os.ErrNotExist) {
		return id, err
	}
	if id, err = newNoiseIdentity(random); err != nil {
		return nil, err
	}
	if err = saveNoiseIdentity(path, id); errors.Is(err, os.ErrExist) {
		return loadNoiseIdentity(path)
	}
	if err != nil {
		return nil, err
	}
	return id, nil
}

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
