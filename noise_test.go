package main

// Tests of the Noise framework (docs/remote.md §5): names, prologue and the published vectors
// under testdata/noise; shared helpers of the noise_*_test.go files.

import (
	"bytes"
	"crypto/mlkem"
	"crypto/mlkem/mlkemtest"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

var noiseSHA512 = noiseHash{name: "SHA512", new: sha512.New, size: sha512.Size}

// noiseCounterRand is the RNG of Clatter's vectors (testdata/noise/README.md): byte i of the stream
// is (start + i) mod 256.
type noiseCounterRand struct{ next byte }

func (r *noiseCounterRand) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = r.next
		r.next++
	}
	return len(p), nil
}

func noiseReadN(t testing.TB, r io.Reader, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// noiseDeterministic draws ephemerals and encapsulation randomness from one stream, in
// token order, as Clatter's DummyRng does.
func noiseDeterministic(rng io.Reader) noiseEntropy {
	return noiseEntropy{rand: rng, encapsulate: func(ek *mlkem.EncapsulationKey768) ([]byte, []byte, error) {
		m := make([]byte, 32)
		if _, err := io.ReadFull(rng, m); err != nil {
			return nil, nil, err
		}
		return mlkemtest.Encapsulate768(ek, m)
	}}
}

// noiseVector is the one case of a vector file of testdata/noise: key → hex.
type noiseVector map[string]string

func readNoiseVector(t *testing.T, path string) noiseVector {
	t.Helper()
	return noiseVector(readVectorCase(t, path).fields)
}

func (v noiseVector) has(key string) bool { _, ok := v[key]; return ok }

func (v noiseVector) hex(t *testing.T, key string) []byte {
	t.Helper()
	s, ok := v[key]
	if !ok {
		t.Fatalf("vector has no %q", key)
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("vector %q: %v", key, err)
	}
	return b
}

func noiseMustEqual(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s mismatch (got %d bytes, want %d)\n got %.64x…\nwant %.64x…", what, len(got), len(want), got, want)
	}
}

// noiseSealRaw and noiseOpenRaw run one transport message through a cipher state at nonce
// n, without record framing, as the vectors' transport messages are.
func noiseSealRaw(t *testing.T, tr *noiseTransport, n uint64, p []byte) []byte {
	t.Helper()
	return noiseRaw(t, &tr.send, n, p, tr.send.encryptWithAd)
}

func noiseOpenRaw(t *testing.T, tr *noiseTransport, n uint64, c []byte) []byte {
	t.Helper()
	return noiseRaw(t, &tr.recv, n, c, tr.recv.decryptWithAd)
}

func noiseRaw(t *testing.T, cs *noiseCipherState, n uint64, in []byte, op func(out, ad, in []byte) ([]byte, error)) []byte {
	t.Helper()
	cs.setNonce(n)
	out, err := op(nil, nil, in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// noiseMustHandshake and noiseMustTransport are the constructors of the vector tests.
func noiseMustHandshake(t *testing.T, proto *noiseProtocol, initiator bool, s *noiseIdentity, rs *noisePublicKey, prologue []byte, entropy noiseEntropy) *noiseHandshakeState {
	t.Helper()
	hs, err := newNoiseHandshake(proto, initiator, s, rs, prologue)
	if err != nil {
		t.Fatal(err)
	}
	hs.entropy = entropy
	return hs
}

func noiseMustTransport(t *testing.T, hs *noiseHandshakeState) *noiseTransport {
	t.Helper()
	tr, err := hs.transport()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestNoiseNamesSplitProtocolNameFromSuiteLabel(t *testing.T) {
	if got := noiseProtocolNameFor(&noisePatternHybridIK, noiseSHA256); got != noiseProtocolName {
		t.Fatalf("protocol name %q, want %q", got, noiseProtocolName)
	}
	if noiseProtocolName != "Noise_hybridIK_25519+MLKEM768_AESGCM_SHA256" {
		t.Fatalf("protocol name changed: %q", noiseProtocolName)
	}
	if noiseSuiteLabel != "Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256" {
		t.Fatalf("suite label changed: %q", noiseSuiteLabel)
	}
	if strings.Replace(noiseSuiteLabel, "_X25519+", "_25519+", 1) != noiseProtocolName {
		t.Fatal("label and name must differ only in X25519 vs 25519")
	}
	if noiseHybridIK.name != noiseProtocolName || noiseHybridIK.hash.name != "SHA256" {
		t.Fatal("production protocol is not the hard-coded SHA-256 name")
	}
	// 43 bytes > HASHLEN: h = SHA-256(name), and hashing the label instead gives another h.
	var ss, label noiseSymmetricState
	ss.initializeSymmetric(noiseSHA256, noiseProtocolName)
	label.initializeSymmetric(noiseSHA256, noiseSuiteLabel)
	want := sha256.Sum256([]byte(noiseProtocolName))
	noiseMustEqual(t, "initial h", ss.h, want[:])
	noiseMustEqual(t, "initial ck", ss.ck, want[:])
	if bytes.Equal(ss.h, label.h) {
		t.Fatal("label and protocol name give the same h")
	}
	// A name that fits HASHLEN is zero-padded, not hashed (SHA-512 vector, classic IK).
	var pad noiseSymmetricState
	pad.initializeSymmetric(noiseSHA512, "Noise_hybridIK_25519+MLKEM768_AESGCM_SHA512")
	noiseMustEqual(t, "padded h", pad.h, append([]byte("Noise_hybridIK_25519+MLKEM768_AESGCM_SHA512"), make([]byte, 64-43)...))
}

func TestNoisePrologueUsesEightByteLengths(t *testing.T) {
	// docs/remote.md §5.3, spelled out for one registration and stream.
	want, _ := hex.DecodeString("0000000000000020" + "636f6465782d657865632d7365727665722d72656c61792d6e6f6973652f7631" +
		"000000000000000a" + "656e762d746573742d31" + "0000000000000005" + "7265672d31" + "0000000000000024" +
		"30303030303030302d303030302d343030302d383030302d303030303030303030303031")
	got := noisePrologue("env-test-1", "reg-1", "00000000-0000-4000-8000-000000000001")
	noiseMustEqual(t, "prologue", got, want)
	noiseMustEqual(t, "empty ids", noisePrologue("", "", ""),
		append(append([]byte{0, 0, 0, 0, 0, 0, 0, 32}, noisePrologueTag...), make([]byte, 24)...))
}

// noiseVectorIdentities draws the static keys in the vectors' order: initiator X25519,
// responder X25519, initiator ML-KEM seed, responder ML-KEM seed.
func noiseVectorIdentities(t *testing.T, rng io.Reader) (ini, resp *noiseIdentity) {
	ix, rx := noiseReadN(t, rng, 32), noiseReadN(t, rng, 32)
	ik, rk := noiseReadN(t, rng, 64), noiseReadN(t, rng, 64)
	ini, err := newNoiseIdentityFromSeeds(ix, ik)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = newNoiseIdentityFromSeeds(rx, rk)
	if err != nil {
		t.Fatal(err)
	}
	return ini, resp
}

const (
	noiseVectorT0 = "Scream without a sound"        // initiator -> responder, nonce 0
	noiseVectorT1 = "Flying off the handle"         // responder -> initiator, nonce 0
	noiseVectorT2 = "Eugene gene the dance machine" // initiator -> responder, nonce 1
)

// TestNoiseHybridVectorSHA512 replays Clatter 2.2.0's vector byte for byte, each role on
// its own against the other role's recorded messages.
func TestNoiseHybridVectorSHA512(t *testing.T) {
	v := readNoiseVector(t, filepath.Join("testdata", "noise", "hybrid_ik_sha512.txt"))
	proto := &noiseProtocol{name: noiseProtocolNameFor(&noisePatternHybridIK, noiseSHA512), pattern: &noisePatternHybridIK, hash: noiseSHA512}
	if proto.name != "Noise_hybridIK_25519+MLKEM768_AESGCM_SHA512" || v["hash"] != "SHA512" || v["pattern"] != "hybridIK" {
		t.Fatalf("unexpected vector header or name %q", proto.name)
	}
	prologue := v.hex(t, "prologue_hex")
	msg1, h0, msg2, h1 := v.hex(t, "msg[0] initiator"), v.hex(t, "h[0]"), v.hex(t, "msg[1] responder"), v.hex(t, "h[1]")
	noiseMustEqual(t, "handshake_hash", v.hex(t, "handshake_hash"), h1)
	if len(msg1) != noiseMsg1Overhead || len(msg2) != noiseMsg2Overhead {
		t.Fatalf("vector sizes %d, %d", len(msg1), len(msg2))
	}
	t0, t1, t2 := v.hex(t, "transport[0] initiator"), v.hex(t, "transport[1] responder"), v.hex(t, "transport[2] initiator")

	t.Run("initiator", func(t *testing.T) {
		rng := &noiseCounterRand{next: 0xef}
		ini, resp := noiseVectorIdentities(t, rng)
		hs := noiseMustHandshake(t, proto, true, ini, resp.publicKey(), prologue, noiseDeterministic(rng))
		got, err := hs.writeMessage(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		noiseMustEqual(t, "msg[0]", got, msg1)
		noiseMustEqual(t, "h[0]", hs.handshakeHash(), h0)
		if p, err := hs.readMessage(msg2); err != nil || len(p) != 0 {
			t.Fatalf("reading msg[1]: payload %q, %v", p, err)
		}
		noiseMustEqual(t, "h[1]", hs.handshakeHash(), h1)
		tr := noiseMustTransport(t, hs)
		noiseMustEqual(t, "transport[0]", noiseSealRaw(t, tr, 0, []byte(noiseVectorT0)), t0)
		noiseMustEqual(t, "transport[1]", noiseOpenRaw(t, tr, 0, t1), []byte(noiseVectorT1))
		noiseMustEqual(t, "transport[2]", noiseSealRaw(t, tr, 1, []byte(noiseVectorT2)), t2)
	})
	t.Run("responder", func(t *testing.T) {
		rng := &noiseCounterRand{next: 0xef}
		_, resp := noiseVectorIdentities(t, rng)
		noiseReadN(t, rng, 32+32+64) // the initiator's msg[0] draws: skem m, e X25519, e ML-KEM seed
		hs := noiseMustHandshake(t, proto, false, resp, nil, prologue, noiseDeterministic(rng))
		if p, err := hs.readMessage(msg1); err != nil || len(p) != 0 {
			t.Fatalf("reading msg[0]: payload %q, %v", p, err)
		}
		noiseMustEqual(t, "h[0]", hs.handshakeHash(), h0)
		got, err := hs.writeMessage(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		noiseMustEqual(t, "msg[1]", got, msg2)
		noiseMustEqual(t, "h[1]", hs.handshakeHash(), h1)
		tr := noiseMustTransport(t, hs)
		noiseMustEqual(t, "transport[0]", noiseOpenRaw(t, tr, 0, t0), []byte(noiseVectorT0))
		noiseMustEqual(t, "transport[1]", noiseSealRaw(t, tr, 0, []byte(noiseVectorT1)), t1)
		noiseMustEqual(t, "transport[2]", noiseOpenRaw(t, tr, 1, t2), []byte(noiseVectorT2))
	})
}

// TestNoiseCodexSuiteDigests reproduces the derived Codex-suite vector (testdata/noise/README.md:
// SHA-256, Codex prologue, msg1 payload "harness-auth-token") through the production
// initiator and responder types.
func TestNoiseCodexSuiteDigests(t *testing.T) {
	rng := &noiseCounterRand{next: 0xef}
	iid, rid := noiseVectorIdentities(t, rng)
	prologue := noisePrologue("env-test-1", "reg-1", "00000000-0000-4000-8000-000000000001")
	ini, err := newNoiseInitiator(iid, rid.publicKey(), prologue)
	if err != nil {
		t.Fatal(err)
	}
	ini.hs.entropy = noiseDeterministic(rng)
	resp, err := newNoiseResponder(rid, prologue)
	if err != nil {
		t.Fatal(err)
	}
	resp.hs.entropy = noiseDeterministic(rng)

	msg1, err := ini.initiate([]byte("harness-auth-token"))
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.readInitiation(msg1); err != nil {
		t.Fatal(err)
	}
	if string(resp.authorization()) != "harness-auth-token" || !resp.peerStatic().equal(iid.publicKey()) {
		t.Fatal("responder did not learn the harness key and authorization")
	}
	msg2, rt, err := resp.respond(nil)
	if err != nil {
		t.Fatal(err)
	}
	it, err := ini.readResponse(msg2)
	if err != nil {
		t.Fatal(err)
	}
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	for _, c := range []struct{ what, got, want string }{
		{"msg1 size", fmt.Sprint(len(msg1)), "3586"},
		{"msg1 sha256", sum(msg1), "f63f7faf563bed3d79cea2512fa50edc3c069f8168b9a786a4885aa8cc1e1a44"},
		{"msg2 size", fmt.Sprint(len(msg2)), "3424"},
		{"msg2 sha256", sum(msg2), "2b1ceb080799aae4b7ba07f5c08e9b6b8c002daee03c1c0b6c4c0d62a1b1cb98"},
		{"final h (initiator)", hex.EncodeToString(it.handshakeHash()), "e8f24ddaf77d66abe68be5d46831d6c113c72e66071b82f1dc5679f2075ba3ff"},
		{"final h (responder)", hex.EncodeToString(rt.handshakeHash()), "e8f24ddaf77d66abe68be5d46831d6c113c72e66071b82f1dc5679f2075ba3ff"},
		{"transport i->r", hex.EncodeToString(noiseSealRaw(t, it, 0, []byte(noiseVectorT0))),
			"3b189fa4945c685419351fa099e2f0c49f4db52bfd3ec41fb0250f095a466f610794eead140c"},
		{"transport r->i", hex.EncodeToString(noiseSealRaw(t, rt, 0, []byte(noiseVectorT1))),
			"bd64f2e09491877ff4b887ca38c3bf851378dbcdf493f55046d55bae50e245bb062e516b4f"},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %s, want %s", c.what, c.got, c.want)
		}
	}
}

// TestNoiseClassicIKVectors runs the pattern interpreter on classic IK against vectors that
// interop/noise_test.go regenerates with github.com/flynn/noise.
func TestNoiseClassicIKVectors(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "noise", "ik_*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no classic IK vectors: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			v := readNoiseVector(t, file)
			h := noiseSHA256
			if strings.HasSuffix(v["protocol_name"], "_SHA512") {
				h = noiseSHA512
			}
			proto := &noiseProtocol{name: noiseProtocolNameFor(&noisePatternIK, h), pattern: &noisePatternIK, hash: h}
			if proto.name != v["protocol_name"] {
				t.Fatalf("protocol name %q, vector %q", proto.name, v["protocol_name"])
			}
			iid, err := newNoiseIdentityFromSeeds(v.hex(t, "init_static"), nil)
			if err != nil {
				t.Fatal(err)
			}
			rid, err := newNoiseIdentityFromSeeds(v.hex(t, "resp_static"), nil)
			if err != nil {
				t.Fatal(err)
			}
			prologue := v.hex(t, "prologue_hex")
			ini := noiseMustHandshake(t, proto, true, iid, rid.publicKey(), prologue, noiseEntropy{rand: bytes.NewReader(v.hex(t, "init_ephemeral"))})
			resp := noiseMustHandshake(t, proto, false, rid, nil, prologue, noiseEntropy{rand: bytes.NewReader(v.hex(t, "resp_ephemeral"))})

			// Each side writes its own message and reads the recorded one.
			msg1, msg2 := v.hex(t, "msg[0] initiator"), v.hex(t, "msg[1] responder")
			got, err := ini.writeMessage(nil, v.hex(t, "msg[0] payload"))
			if err != nil {
				t.Fatal(err)
			}
			noiseMustEqual(t, "msg[0]", got, msg1)
			p, err := resp.readMessage(msg1)
			if err != nil {
				t.Fatal(err)
			}
			noiseMustEqual(t, "msg[0] payload", p, v.hex(t, "msg[0] payload"))
			if got, err = resp.writeMessage(nil, v.hex(t, "msg[1] payload")); err != nil {
				t.Fatal(err)
			}
			noiseMustEqual(t, "msg[1]", got, msg2)
			if p, err = ini.readMessage(msg2); err != nil {
				t.Fatal(err)
			}
			noiseMustEqual(t, "msg[1] payload", p, v.hex(t, "msg[1] payload"))
			noiseMustEqual(t, "handshake_hash (initiator)", ini.handshakeHash(), v.hex(t, "handshake_hash"))
			noiseMustEqual(t, "handshake_hash (responder)", resp.handshakeHash(), v.hex(t, "handshake_hash"))
			it, rt := noiseMustTransport(t, ini), noiseMustTransport(t, resp)
			var nonce [2]uint64 // per direction: 0 initiator->responder, 1 back
			n := 0
			for ; v.has(fmt.Sprintf("transport[%d] payload", n)); n++ {
				payload := v.hex(t, fmt.Sprintf("transport[%d] payload", n))
				from, to, dir, key := it, rt, 0, fmt.Sprintf("transport[%d] initiator", n)
				if !v.has(key) {
					from, to, dir, key = rt, it, 1, fmt.Sprintf("transport[%d] responder", n)
				}
				c := noiseSealRaw(t, from, nonce[dir], payload)
				noiseMustEqual(t, key, c, v.hex(t, key))
				noiseMustEqual(t, key+" opened", noiseOpenRaw(t, to, nonce[dir], c), payload)
				nonce[dir]++
			}
			if n == 0 {
				t.Fatal("vector has no transport messages")
			}
		})
	}
}
