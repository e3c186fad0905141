package main

// Noise identity of remote mode (docs/remote.md §5.2): public keys and their JSON form, the
// executor's static key pair and the --identity file that keeps it.

import (
	"bytes"
	"crypto/ecdh"
	"crypto/mlkem"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

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
