package main

import (
	"bytes"
	"crypto/mlkem"
	"crypto/mlkem/mlkemtest"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// noiseRecord is one sealed record as the relay would carry it in a Data frame.
type noiseRecord struct {
	seq uint32
	ct  []byte
}

func noiseSeal(t testing.TB, tr *noiseTransport, msgs ...[]byte) []noiseRecord {
	t.Helper()
	var recs []noiseRecord
	for _, m := range msgs {
		err := tr.sealMessage(m, func(seq uint32, rec []byte) error {
			recs = append(recs, noiseRecord{seq, bytes.Clone(rec)})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return recs
}

// noiseOpen feeds records in the given order and returns the delivered messages.
func noiseOpen(tr *noiseTransport, recs []noiseRecord) ([][]byte, error) {
	var got [][]byte
	for _, r := range recs {
		if err := tr.openRecord(r.seq, r.ct, func(m []byte) error { got = append(got, m); return nil }); err != nil {
			return got, err
		}
	}
	return got, nil
}

func noiseMustDeliver(t *testing.T, got [][]byte, err error, want ...[]byte) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("delivered %d messages, want %d", len(got), len(want))
	}
	for i := range want {
		noiseMustEqual(t, fmt.Sprintf("message %d", i), got[i], want[i])
	}
}

func TestNoiseHandshakeAndRecordsBothRoles(t *testing.T) {
	harness, executor, _, _ := noiseHandshakePair(t, []byte("harness-auth-token"))
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320,000 bytes: 6 records
	for _, dir := range []struct {
		name     string
		from, to *noiseTransport
	}{{"harness to executor", harness, executor}, {"executor to harness", executor, harness}} {
		t.Run(dir.name, func(t *testing.T) {
			msgs := [][]byte{[]byte(`{"id":1,"method":"initialize","params":{}}`), big, []byte(`{"id":2}`)}
			recs := noiseSeal(t, dir.from, msgs...)
			got, err := noiseOpen(dir.to, recs)
			noiseMustDeliver(t, got, err, msgs...)
		})
	}
}

// TestNoiseRecordSizesMatch0169: a message whose framed stream is 355,599 bytes went out as
// 5 × 61,456-byte records plus one of 48,415 in 0.169 (docs/remote.md §6).
func TestNoiseRecordSizesMatch0169(t *testing.T) {
	harness, executor, _, _ := noiseHandshakePair(t, nil)
	recs := noiseSeal(t, executor, make([]byte, 5*noiseRecordPlaintextMax+48399-noiseMessageLenLen))
	var sizes []int
	for i, r := range recs {
		if r.seq != uint32(i) {
			t.Fatalf("record %d has seq %d", i, r.seq)
		}
		sizes = append(sizes, len(r.ct))
	}
	if fmt.Sprint(sizes) != "[61456 61456 61456 61456 61456 48415]" {
		t.Fatalf("record sizes %v", sizes)
	}
	if _, err := noiseOpen(harness, recs); err != nil {
		t.Fatal(err)
	}
	// Small messages: one record each, seq continuing.
	recs = noiseSeal(t, executor, []byte("{}"), []byte("[]"))
	if len(recs) != 2 || recs[0].seq != 6 || recs[1].seq != 7 || len(recs[0].ct) != 4+2+16 {
		t.Fatalf("small records %+v", recs)
	}
}

func TestNoiseConcurrentSealKeepsSeqOrder(t *testing.T) {
	harness, executor, _, _ := noiseHandshakePair(t, nil)
	var (
		mu   sync.Mutex
		recs []noiseRecord
		wg   sync.WaitGroup
	)
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				msg := []byte(fmt.Sprintf(`{"g":%d,"i":%d,"pad":%q}`, g, i, strings.Repeat("x", 1000*i)))
				err := executor.sealMessage(msg, func(seq uint32, rec []byte) error {
					mu.Lock()
					defer mu.Unlock()
					recs = append(recs, noiseRecord{seq, bytes.Clone(rec)})
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for i, r := range recs {
		if r.seq != uint32(i) {
			t.Fatalf("record %d emitted with seq %d", i, r.seq)
		}
	}
	got, err := noiseOpen(harness, recs)
	if err != nil || len(got) != 160 {
		t.Fatalf("delivered %d messages, %v", len(got), err)
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

func TestNoiseTamperedRecordsRejected(t *testing.T) {
	for _, c := range []struct {
		name   string
		mutate func([]noiseRecord) []noiseRecord
	}{
		{"flipped ciphertext bit", func(r []noiseRecord) []noiseRecord { r[0].ct[3] ^= 1; return r }},
		{"flipped tag bit", func(r []noiseRecord) []noiseRecord { r[0].ct[len(r[0].ct)-1] ^= 1; return r }},
		{"truncated", func(r []noiseRecord) []noiseRecord { r[0].ct = r[0].ct[:len(r[0].ct)-1]; return r }},
		{"tag only", func(r []noiseRecord) []noiseRecord { r[0].ct = r[0].ct[:noiseTagLen]; return r }},
		{"empty", func(r []noiseRecord) []noiseRecord { r[0].ct = nil; return r }},
		{"records swapped seq", func(r []noiseRecord) []noiseRecord { r[0].seq, r[1].seq = r[1].seq, r[0].seq; return r }},
		{"replayed under a new seq", func(r []noiseRecord) []noiseRecord { return append(r, noiseRecord{2, r[0].ct}) }},
		{"oversized", func(r []noiseRecord) []noiseRecord {
			r[0].ct = make([]byte, noiseRecordCiphertextMax+1)
			return r
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			harness, executor, _, _ := noiseHandshakePair(t, nil)
			recs := c.mutate(noiseSeal(t, harness, []byte(`{"a":1}`), []byte(`{"b":2}`)))
			if _, err := noiseOpen(executor, recs); err == nil {
				t.Fatal("tampered records accepted")
			}
			// The failure is sticky: the stream must be reset.
			good := noiseSeal(t, harness, []byte(`{"c":3}`))
			if _, err := noiseOpen(executor, good); err == nil {
				t.Fatal("transport kept working after a stream error")
			}
		})
	}
}

func TestNoiseReorderWindow(t *testing.T) {
	msg := func(i int) []byte { return []byte(fmt.Sprintf(`{"id":%d}`, i)) }
	var msgs [][]byte
	for i := range 70 {
		msgs = append(msgs, msg(i))
	}
	for _, c := range []struct {
		name    string
		order   []int // indexes into the 70 sealed one-record messages
		want    []int // delivered messages; nil with wantErr
		wantErr bool
	}{
		{"in order", []int{0, 1, 2}, []int{0, 1, 2}, false},
		{"reversed", []int{4, 3, 2, 1, 0}, []int{0, 1, 2, 3, 4}, false},
		{"duplicate of a delivered record dropped", []int{0, 1, 0, 1, 2}, []int{0, 1, 2}, false},
		{"duplicate of a buffered record dropped", []int{2, 2, 1, 0}, []int{0, 1, 2}, false},
		{"64 ahead buffered", append([]int{64}, seqRange(0, 64)...), seqRange(0, 65), false},
		{"65 ahead is a stream error", []int{65}, nil, true},
		{"65 ahead after progress", []int{0, 66}, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			harness, executor, _, _ := noiseHandshakePair(t, nil)
			recs := noiseSeal(t, harness, msgs...)
			var in []noiseRecord
			for _, i := range c.order {
				in = append(in, recs[i])
			}
			got, err := noiseOpen(executor, in)
			if c.wantErr {
				if err == nil {
					t.Fatal("accepted")
				}
				return
			}
			var want [][]byte
			for _, i := range c.want {
				want = append(want, msgs[i])
			}
			noiseMustDeliver(t, got, err, want...)
		})
	}
	t.Run("more than 1 MiB buffered is a stream error", func(t *testing.T) {
		harness, executor, _, _ := noiseHandshakePair(t, nil)
		recs := noiseSeal(t, harness, make([]byte, 20*noiseRecordPlaintextMax))
		// 17 full records (1,044,752 bytes) fit ahead of seq 0, the 18th does not.
		for i := 1; i <= 17; i++ {
			if err := executor.openRecord(recs[i].seq, recs[i].ct, nil); err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
		}
		if err := executor.openRecord(recs[18].seq, recs[18].ct, nil); err == nil {
			t.Fatal("18th buffered record accepted")
		}
	})
	t.Run("buffered bytes are released as the gap fills", func(t *testing.T) {
		harness, executor, _, _ := noiseHandshakePair(t, nil)
		big := make([]byte, 40*noiseRecordPlaintextMax)
		recs := noiseSeal(t, harness, big)
		var order []noiseRecord
		for i := 0; i+1 < len(recs); i += 2 { // pairs swapped: never more than one ahead
			order = append(order, recs[i+1], recs[i])
		}
		order = append(order, recs[len(recs)-1])
		got, err := noiseOpen(executor, order)
		noiseMustDeliver(t, got, err, big)
		if executor.aheadN != 0 {
			t.Fatalf("%d bytes still buffered", executor.aheadN)
		}
	})
}

func seqRange(from, to int) []int {
	var r []int
	for i := from; i < to; i++ {
		r = append(r, i)
	}
	return r
}

// TestNoiseMessageLengthLimits: lengths 0 and over 64 MiB are stream errors as soon as the
// 4 length bytes arrive; the sender refuses them.
func TestNoiseMessageLengthLimits(t *testing.T) {
	for _, c := range []struct {
		name    string
		stream  []byte
		wantErr bool
	}{
		{"zero length", []byte{0, 0, 0, 0}, true},
		{"64 MiB + 1", binary.BigEndian.AppendUint32(nil, noiseMaxRPCMessage+1), true},
		{"max uint32", []byte{0xff, 0xff, 0xff, 0xff}, true},
		{"64 MiB announced, payload pending", binary.BigEndian.AppendUint32(nil, noiseMaxRPCMessage), false},
		{"partial header", []byte{0, 0}, false},
		{"empty chunk", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			harness, executor, _, _ := noiseHandshakePair(t, nil)
			rec := noiseSealRaw(t, harness, 0, c.stream)
			err := executor.openRecord(0, rec, func([]byte) error { t.Fatal("delivered"); return nil })
			if (err != nil) != c.wantErr {
				t.Fatalf("got %v, want error %v", err, c.wantErr)
			}
		})
	}
	t.Run("sender refuses", func(t *testing.T) {
		harness, _, _, _ := noiseHandshakePair(t, nil)
		emit := func(uint32, []byte) error { t.Fatal("emitted"); return nil }
		if err := harness.sealMessage(nil, emit); err == nil {
			t.Fatal("empty message sealed")
		}
		if err := harness.sealMessage(make([]byte, noiseMaxRPCMessage+1), emit); err == nil {
			t.Fatal("oversize message sealed")
		}
	})
	t.Run("header split across records", func(t *testing.T) {
		harness, executor, _, _ := noiseHandshakePair(t, nil)
		var got [][]byte
		deliver := func(m []byte) error { got = append(got, m); return nil }
		for i, part := range [][]byte{{0, 0}, {0, 3, 'a'}, {'b', 'c', 0, 0, 0}, {1, 'd'}} {
			if err := executor.openRecord(uint32(i), noiseSealRaw(t, harness, uint64(i), part), deliver); err != nil {
				t.Fatal(err)
			}
		}
		noiseMustDeliver(t, got, nil, []byte("abc"), []byte("d"))
	})
}

func TestNoiseSeqExhaustion(t *testing.T) {
	harness, _, _, _ := noiseHandshakePair(t, nil)
	harness.sendSeq = noiseMaxSeq
	var seqs []uint32
	emit := func(seq uint32, _ []byte) error { seqs = append(seqs, seq); return nil }
	if err := harness.sealMessage(make([]byte, noiseRecordPlaintextMax), emit); !errors.Is(err, errNoiseSeqExhausted) {
		t.Fatalf("two-record message at the last seq: %v", err)
	}
	if len(seqs) != 0 {
		t.Fatal("emitted part of a message that could not fit")
	}
	harness, _, _, _ = noiseHandshakePair(t, nil)
	harness.sendSeq = noiseMaxSeq
	if err := harness.sealMessage([]byte("{}"), emit); err != nil || len(seqs) != 1 || seqs[0] != noiseMaxSeq {
		t.Fatalf("last seq: %v %v", err, seqs)
	}
	if err := harness.sealMessage([]byte("{}"), emit); !errors.Is(err, errNoiseSeqExhausted) {
		t.Fatalf("after the last seq: %v", err)
	}
}

func TestNoiseEmitFailureIsSticky(t *testing.T) {
	harness, _, _, _ := noiseHandshakePair(t, nil)
	boom := errors.New("socket gone")
	if err := harness.sealMessage([]byte("{}"), func(uint32, []byte) error { return boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if err := harness.sealMessage([]byte("{}"), func(uint32, []byte) error { return nil }); err == nil {
		t.Fatal("send direction kept working after a lost record")
	}
}

func TestNoiseTransportClose(t *testing.T) {
	harness, executor, _, _ := noiseHandshakePair(t, nil)
	recs := noiseSeal(t, harness, []byte("{}"))
	harness.close()
	executor.close()
	if err := harness.sealMessage([]byte("{}"), func(uint32, []byte) error { return nil }); err == nil {
		t.Fatal("sealed after close")
	}
	if _, err := noiseOpen(executor, recs); err == nil {
		t.Fatal("opened after close")
	}
}

// TestNoiseTransportCloseWipesPlaintext: close zeroes the plaintext the receiver still holds,
// both the part of a message that spans records and a record buffered ahead of a gap.
func TestNoiseTransportCloseWipesPlaintext(t *testing.T) {
	harness, executor, _, _ := noiseHandshakePair(t, nil)
	long := bytes.Repeat([]byte{'x'}, noiseRecordPlaintextMax+100) // two records
	recs := noiseSeal(t, harness, long, []byte("tail"))            // seqs 0, 1, 2
	deliver := func([]byte) error { return nil }
	if err := executor.openRecord(recs[0].seq, recs[0].ct, deliver); err != nil {
		t.Fatal(err)
	}
	if err := executor.openRecord(recs[2].seq, recs[2].ct, deliver); err != nil {
		t.Fatal(err)
	}
	partial := executor.deframe.msg[:cap(executor.deframe.msg)]
	ahead := executor.ahead[recs[2].seq%noiseReorderRecords].plaintext
	if len(ahead) == 0 || bytes.Count(partial, []byte{'x'}) == 0 {
		t.Fatal("the test did not leave plaintext in the receiver")
	}
	executor.close()
	if bytes.ContainsAny(partial, "xtail") || bytes.ContainsAny(ahead, "xtail") {
		t.Fatal("close left plaintext behind")
	}
}

func TestNoisePublicKeyJSON(t *testing.T) {
	id, err := newNoiseIdentity(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	js, err := id.publicKeyJSON()
	if err != nil {
		t.Fatal(err)
	}
	x := base64.StdEncoding.EncodeToString(id.pub.x.Bytes())
	k := base64.StdEncoding.EncodeToString(id.pub.kem.Bytes())
	want := `{"suite":"Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256","x25519_public_key":"` + x + `","mlkem768_public_key":"` + k + `"}`
	if string(js) != want {
		t.Fatalf("public key JSON\n got %s\nwant %s", js, want)
	}
	var back noisePublicKey
	if err := json.Unmarshal(js, &back); err != nil || !back.equal(id.publicKey()) {
		t.Fatalf("round trip: %v", err)
	}
	// Embedded in a request body, as the relay does.
	body, err := json.Marshal(struct {
		Key *noisePublicKey `json:"harness_public_key"`
	}{id.publicKey()})
	if err != nil || !bytes.Contains(body, js) {
		t.Fatalf("embedded: %s %v", body, err)
	}

	badKEM := make([]byte, noiseKEMPublicLen)
	for i := range badKEM {
		badKEM[i] = 0xff // coefficients ≥ q fail FIPS 203's modulus check
	}
	obj := func(suite, xv, kv string) string {
		return `{"suite":` + suite + `,"x25519_public_key":` + xv + `,"mlkem768_public_key":` + kv + `}`
	}
	q := func(s string) string { return `"` + s + `"` }
	for _, c := range []struct{ name, in string }{
		{"protocol name as suite", obj(q(noiseProtocolName), q(x), q(k))},
		{"other suite", obj(q("Noise_IK_25519_AESGCM_SHA256"), q(x), q(k))},
		{"unknown key", strings.Replace(want, `{`, `{"extra":"1",`, 1)},
		{"duplicate key", strings.Replace(want, `}`, `,"suite":"`+noiseSuiteLabel+`"}`, 1)},
		{"key in other case", strings.Replace(want, `"suite"`, `"Suite"`, 1)},
		{"missing key", `{"suite":"` + noiseSuiteLabel + `","x25519_public_key":"` + x + `"}`},
		{"null value", obj(q(noiseSuiteLabel), "null", q(k))},
		{"number value", obj(q(noiseSuiteLabel), "1", q(k))},
		{"short x25519", obj(q(noiseSuiteLabel), q(base64.StdEncoding.EncodeToString(make([]byte, 31))), q(k))},
		{"short ml-kem", obj(q(noiseSuiteLabel), q(x), q(k[:len(k)-8]))},
		{"unpadded base64", obj(q(noiseSuiteLabel), q(strings.TrimRight(x, "=")), q(k))},
		{"url-safe base64", obj(q(noiseSuiteLabel), q(base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32))), q(k))},
		{"non-canonical padding bits", obj(q(noiseSuiteLabel), q(x[:42]+"B="), q(k))},
		{"embedded newline", obj(q(noiseSuiteLabel), q(x[:20]+`\n`+x[20:]), q(k))},
		{"ml-kem key out of range", obj(q(noiseSuiteLabel), q(x), q(base64.StdEncoding.EncodeToString(badKEM)))},
		{"array", `[]`},
		{"trailing data", want + `{}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var k noisePublicKey
			if err := k.UnmarshalJSON([]byte(c.in)); err == nil {
				t.Fatalf("accepted %s", c.in)
			}
		})
	}
	if _, err := (&noisePublicKey{x: id.pub.x}).MarshalJSON(); err == nil {
		t.Fatal("marshalled a key without ML-KEM")
	}
}

func TestNoiseIdentityFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "identity")
	id, err := loadOrCreateNoiseIdentity(path, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("identity file mode %v, %v", fi.Mode(), err)
	}
	again, err := loadOrCreateNoiseIdentity(path, rand.Reader)
	if err != nil || !again.publicKey().equal(id.publicKey()) {
		t.Fatalf("second start got another identity: %v", err)
	}
	if err := saveNoiseIdentity(path, id); !errors.Is(err, os.ErrExist) {
		t.Fatalf("save over an existing file: %v", err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".noise-identity-*")); len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
	good, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(good), "\n")
	if len(lines) != 4 || lines[0] != "exec-server-noise-identity/v1\n" {
		t.Fatalf("file format: %q", good)
	}

	for _, c := range []struct {
		name string
		mode os.FileMode
		data string
	}{
		{"group readable", 0o640, string(good)},
		{"world readable", 0o604, string(good)},
		{"group writable", 0o620, string(good)},
		{"empty", 0o600, ""},
		{"no final newline", 0o600, strings.TrimSuffix(string(good), "\n")},
		{"extra line", 0o600, string(good) + "\n"},
		{"wrong header", 0o600, strings.Replace(string(good), "/v1", "/v2", 1)},
		{"lines swapped", 0o600, lines[0] + lines[2] + lines[1]},
		{"short key", 0o600, lines[0] + "x25519-private-key: AAAA\n" + lines[2]},
		{"CRLF", 0o600, strings.ReplaceAll(string(good), "\n", "\r\n")},
		{"huge", 0o600, string(good) + strings.Repeat("#", 2000)},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
			if err := os.WriteFile(p, []byte(c.data), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, c.mode); err != nil {
				t.Fatal(err)
			}
			if _, err := loadNoiseIdentity(p); err == nil {
				t.Fatal("loaded")
			}
		})
	}
	if _, err := loadNoiseIdentity(dir); err == nil {
		t.Fatal("loaded a directory")
	}
	if _, err := loadNoiseIdentity(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestNoiseIdentityIsPerProcessRandom(t *testing.T) {
	a, _ := newNoiseIdentity(rand.Reader)
	b, _ := newNoiseIdentity(rand.Reader)
	if a.publicKey().equal(b.publicKey()) {
		t.Fatal("two identities are equal")
	}
	if _, err := newNoiseIdentity(bytes.NewReader(make([]byte, 10))); err == nil {
		t.Fatal("identity from a short random source")
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

// FuzzNoiseRecords: messages sealed, reordered within the window and duplicated come out
// unchanged and in order; a garbage record afterwards is dropped or rejected, never a panic.
func FuzzNoiseRecords(f *testing.F) {
	f.Add([]byte(`{"id":1}`), uint16(3), []byte{0, 1, 2}, uint8(0), uint32(0), []byte("junk"))
	f.Add([]byte("x"), uint16(0), []byte{}, uint8(9), uint32(7), []byte{})
	f.Add(bytes.Repeat([]byte("ab"), 500), uint16(200), []byte{5, 5, 5, 1}, uint8(3), uint32(1<<31), make([]byte, 40))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16, swaps []byte, dup uint8, seq uint32, junk []byte) {
		harness, executor := noiseTestTransports()
		var msgs [][]byte
		c := int(cut) % (len(data) + 1)
		for _, m := range [][]byte{data[:c], data[c:], bytes.Repeat(data, min(len(data), 150))} {
			if len(m) > 0 {
				msgs = append(msgs, m)
			}
		}
		recs := noiseSeal(t, harness, msgs...)
		if len(recs) == 0 {
			return
		}
		for _, s := range swaps[:min(len(swaps), 16)] { // ≤ 16 records ahead: under 1 MiB
			if i := int(s) % len(recs); i+1 < len(recs) {
				recs[i], recs[i+1] = recs[i+1], recs[i]
			}
		}
		i := int(dup) % len(recs)
		recs = append(recs[:i+1], append([]noiseRecord{recs[i]}, recs[i+1:]...)...)
		got, err := noiseOpen(executor, recs)
		noiseMustDeliver(t, got, err, msgs...)
		if err := executor.openRecord(seq, junk, func([]byte) error { t.Fatal("junk delivered"); return nil }); err == nil && uint64(seq) >= executor.recvSeq {
			t.Fatal("junk record accepted")
		}
	})
}

// noiseTestTransports is a connected pair from fixed keys, without a handshake.
func noiseTestTransports() (a, b *noiseTransport) {
	var k1, k2 noiseCipherState
	if k1.initializeKey(bytes.Repeat([]byte{1}, 32)) != nil || k2.initializeKey(bytes.Repeat([]byte{2}, 32)) != nil {
		panic("aes")
	}
	return &noiseTransport{send: k1, recv: k2}, &noiseTransport{send: k2, recv: k1}
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

// BenchmarkNoiseRecord seals and opens one full 61,440-byte record per iteration (a message
// of 61,436 bytes plus its length prefix). The one allocation left is the delivered
// message, which the receiver hands over.
func BenchmarkNoiseRecord(b *testing.B) {
	a, z := noiseTestTransports()
	msg := make([]byte, noiseRecordPlaintextMax-noiseMessageLenLen)
	var rec []byte
	var rseq uint32
	emit := func(seq uint32, r []byte) error { rseq, rec = seq, r; return nil }
	deliver := func([]byte) error { return nil }
	b.SetBytes(noiseRecordPlaintextMax)
	b.ReportAllocs()
	for b.Loop() {
		if err := a.sealMessage(msg, emit); err != nil {
			b.Fatal(err)
		}
		if err := z.openRecord(rseq, rec, deliver); err != nil {
			b.Fatal(err)
		}
	}
}
