package main

// Tests of Noise keys (docs/remote.md §5.2): the public key JSON and the --identity file.

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
