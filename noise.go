// Noise channel of remote mode (docs/remote.md §5, §6): the framework (names, tokens, patterns,
// CipherState, SymmetricState). noise_handshake.go runs the hybridIK handshake on it,
// noise_identity.go holds the keys and noise_transport.go the record layer of each stream.
// Codex 0.169 runs it with Rust Clatter 2.2.0; these files are a stdlib-only reimplementation,
// pinned by Clatter's own vector and by classic IK vectors regenerated with
// github.com/flynn/noise (testdata/noise, interop/).
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
	"crypto/hmac"
	"crypto/mlkem"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math"
)

// Names, labels and fixed strings (docs/remote.md §2.3, §5.1, §5.3).
const (
	noiseProtocolName     = "Noise_hybridIK_25519+MLKEM768_AESGCM_SHA256"
	noiseSuiteLabel       = "Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256"
	noisePrologueTag      = "codex-exec-server-relay-noise/v1"
	noiseRegistryRejected = "codex-registry-authentication-rejected/v1"
)

// Sizes and limits of the handshake (docs/remote.md §5.2, §5.5).
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
)

var errNoiseRegistryRejected = errors.New("noise: executor reports that the registry rejected its credentials")

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
