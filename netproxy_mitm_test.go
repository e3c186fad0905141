package main

// Tests of the credential-masking CA (docs/network.md §8, "The CA"): files and modes on disk,
// the refusals, rotation under concurrent readers, leaves verified against the CA alone (DNS
// and IP), the leaf cache, the bundle, the mitm-ca subcommand and the secret-file deny list.

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func fixedNow(t time.Time) func() time.Time { return func() time.Time { return t } }

func openTestCA(t *testing.T) (*mitmCA, string) {
	t.Helper()
	dir := t.TempDir()
	ca, err := openMITMCA(dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	return ca, dir
}

func TestMITMCAFilesAndModes(t *testing.T) {
	ca, dir := openTestCA(t)
	for name, want := range map[string]os.FileMode{"mitm": 0o700 | os.ModeDir, "mitm/ca.key": 0o600, "mitm/ca.pem": 0o644} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode(), want)
		}
	}
	c := ca.cert
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("CA constraints: IsCA %v MaxPathLen %d MaxPathLenZero %v", c.IsCA, c.MaxPathLen, c.MaxPathLenZero)
	}
	if c.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Errorf("key usage %v", c.KeyUsage)
	}
	if pk, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pk.Curve != elliptic.P256() {
		t.Errorf("CA key is not P-256: %T", c.PublicKey)
	}
	if life := c.NotAfter.Sub(c.NotBefore); life != mitmCAValidity+mitmLeafBackdate {
		t.Errorf("CA lifetime %v", life)
	}
	if !strings.HasPrefix(c.Subject.CommonName, "exec-server credential masking CA ") {
		t.Errorf("CN %q", c.Subject.CommonName)
	}
	// a second open loads the same CA
	again, err := openMITMCA(dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if !again.cert.Equal(ca.cert) {
		t.Error("reopening made a new CA")
	}
}

func TestMITMCARefusals(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, mitm string)
		want  string
	}{
		{"symlink key", func(t *testing.T, mitm string) {
			target := filepath.Join(t.TempDir(), "k")
			os.Rename(filepath.Join(mitm, "ca.key"), target)
			os.Symlink(target, filepath.Join(mitm, "ca.key"))
		}, "symlink"},
		{"group-readable key", func(t *testing.T, mitm string) { os.Chmod(filepath.Join(mitm, "ca.key"), 0o644) }, "lets others read it"},
		{"key without cert", func(t *testing.T, mitm string) { os.Remove(filepath.Join(mitm, "ca.pem")) }, "has no certificate"},
		{"cert without key", func(t *testing.T, mitm string) { os.Remove(filepath.Join(mitm, "ca.key")) }, "has no key"},
		{"key of another CA", func(t *testing.T, mitm string) {
			other := t.TempDir()
			if _, err := openMITMCA(other, time.Now); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(filepath.Join(other, "mitm", "ca.key"))
			os.WriteFile(filepath.Join(mitm, "ca.key"), b, 0o600)
		}, "does not match"},
		{"directory a symlink", func(t *testing.T, mitm string) {
			target := t.TempDir()
			os.RemoveAll(mitm)
			os.Symlink(target, mitm)
		}, "not a directory"},
		{"directory writable by others", func(t *testing.T, mitm string) { os.Chmod(mitm, 0o777) }, "writable by others"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, dir := openTestCA(t)
			mitm := filepath.Join(dir, "mitm")
			c.setup(t, mitm)
			before := snapshotDir(t, mitm)
			_, err := openMITMCA(dir, time.Now)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("open: %v, want an error with %q", err, c.want)
			}
			if after := snapshotDir(t, mitm); after != before {
				t.Errorf("a refused open changed the directory:\n%s\n→\n%s", before, after)
			}
		})
	}
}

// snapshotDir lists a directory's names, modes and contents (following a top symlink).
func snapshotDir(t *testing.T, dir string) string {
	var b strings.Builder
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		fi, _ := os.Lstat(filepath.Join(dir, e.Name()))
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		fmt.Fprintf(&b, "%s %v %x\n", e.Name(), fi.Mode(), data)
	}
	return b.String()
}

func TestMITMCACreateNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	mitm := filepath.Join(dir, "mitm")
	os.Mkdir(mitm, 0o700)
	// a certificate appearing between the check and the link is not overwritten, and the
	// key written for it is removed again
	os.WriteFile(filepath.Join(mitm, "ca.pem"), []byte("theirs"), 0o644)
	if err := writeMITMCA(mitm, time.Now(), false); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("write over an existing cert: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(mitm, "ca.pem")); string(b) != "theirs" {
		t.Error("the existing certificate was overwritten")
	}
	if _, err := os.Lstat(filepath.Join(mitm, "ca.key")); !os.IsNotExist(err) {
		t.Errorf("the key of a failed creation was left: %v", err)
	}
}

func TestMITMCAAutoRotate(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	ca, err := openMITMCA(dir, fixedNow(start))
	if err != nil {
		t.Fatal(err)
	}
	// with more than 30 days left: kept
	kept, err := openMITMCA(dir, fixedNow(start.Add(mitmCAValidity-mitmCARenewBefore-time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	if !kept.cert.Equal(ca.cert) {
		t.Fatal("a CA with more than 30 days left was replaced")
	}
	// with less: replaced by one valid a year from then
	later := start.Add(mitmCAValidity - mitmCARenewBefore + time.Hour)
	renewed, err := openMITMCA(dir, fixedNow(later))
	if err != nil {
		t.Fatal(err)
	}
	if renewed.cert.Equal(ca.cert) || !renewed.cert.NotAfter.Equal(later.Add(mitmCAValidity).Truncate(time.Second)) {
		t.Fatalf("not renewed: %v → %v", ca.cert.NotAfter, renewed.cert.NotAfter)
	}
	if fi, _ := os.Lstat(filepath.Join(dir, "mitm", "ca.key")); fi.Mode() != 0o600 {
		t.Errorf("renewed key mode %v", fi.Mode())
	}
}

// TestMITMCARotateConcurrentReaders rotates the CA while servers load it (openMITMCA, as a
// masked start does): every load sees a key matching its certificate.
func TestMITMCARotateConcurrentReaders(t *testing.T) {
	_, dir := openTestCA(t)
	mitm := filepath.Join(dir, "mitm")
	stop := make(chan struct{})
	var loads, failures atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ca, err := openMITMCA(dir, time.Now)
				loads.Add(1)
				if err != nil || !ca.key.PublicKey.Equal(ca.cert.PublicKey) {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprint(err))
				}
			}
		}()
	}
	serials := map[string]bool{}
	const rotations = 40
	for range rotations {
		cert, err := rotateMITMCA(dir, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		serials[cert.SerialNumber.String()] = true
	}
	close(stop)
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d of %d loads saw a broken pair: %v", failures.Load(), loads.Load(), firstErr.Load())
	}
	if len(serials) != rotations {
		t.Fatalf("%d rotations made %d CAs", rotations, len(serials))
	}
	t.Logf("%d rotations, %d concurrent loads, all matching", rotations, loads.Load())
	if fi, _ := os.Lstat(filepath.Join(mitm, "ca.key")); fi.Mode() != 0o600 {
		t.Errorf("rotated key mode %v", fi.Mode())
	}
	if leftovers, _ := filepath.Glob(filepath.Join(mitm, ".ca.*")); len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestMITMLeafVerifiesAgainstCAOnly(t *testing.T) {
	ca, _ := openTestCA(t)
	other, _ := openTestCA(t)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(other.cert)
	for _, c := range []struct{ host, verifyAs string }{
		{"api.github.com", "api.github.com"},
		{"API.GitHub.com.", "api.github.com"},
		{"192.0.2.10", "192.0.2.10"},
		{"[::1]", "::1"},
		{"127.0.0.1", "127.0.0.1"},
	} {
		leaf, err := ca.leafFor(c.host)
		if err != nil {
			t.Fatalf("%s: %v", c.host, err)
		}
		l := leaf.Leaf
		opts := x509.VerifyOptions{Roots: roots, DNSName: c.verifyAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		if _, err := l.Verify(opts); err != nil {
			t.Errorf("%s: does not verify against the CA: %v", c.host, err)
		}
		opts.Roots = otherRoots
		if _, err := l.Verify(opts); err == nil {
			t.Errorf("%s: verifies against another CA", c.host)
		}
		opts.Roots, opts.DNSName = roots, "attacker.test"
		if _, err := l.Verify(opts); err == nil {
			t.Errorf("%s: verifies for another name", c.host)
		}
		if ip := net.ParseIP(c.verifyAs); ip != nil && (len(l.IPAddresses) != 1 || !l.IPAddresses[0].Equal(ip) || len(l.DNSNames) != 0) {
			t.Errorf("%s: IP SAN %v DNS %v", c.host, l.IPAddresses, l.DNSNames)
		}
		if life := l.NotAfter.Sub(l.NotBefore); life != mitmLeafValidity+mitmLeafBackdate {
			t.Errorf("%s: leaf lifetime %v", c.host, life)
		}
	}
	for _, bad := range []string{"", "a b", "x/y", "*.github.com", "a..b"} {
		if _, err := ca.leafFor(bad); err == nil {
			t.Errorf("leafFor(%q) issued a certificate", bad)
		}
	}
}

// TestMITMLeafTLSHandshake: a TLS client trusting only the CA completes a real handshake
// against the leaf, h2 offered.
func TestMITMLeafTLSHandshake(t *testing.T) {
	ca, _ := openTestCA(t)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	srv := tls.Server(a, &tls.Config{
		MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) { return ca.leafFor(hi.ServerName) },
	})
	done := make(chan error, 1)
	go func() { done <- srv.Handshake() }()
	cl := tls.Client(b, &tls.Config{RootCAs: roots, ServerName: "vendor.test", NextProtos: []string{"h2"}})
	if err := cl.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p := cl.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Errorf("ALPN %q", p)
	}
}

func TestMITMLeafCache(t *testing.T) {
	start := time.Now()
	var now atomic.Pointer[time.Time]
	now.Store(&start)
	ca, err := openMITMCA(t.TempDir(), func() time.Time { return *now.Load() })
	if err != nil {
		t.Fatal(err)
	}
	first, _ := ca.leafFor("api.github.com")
	if again, _ := ca.leafFor("API.GITHUB.COM"); again != first {
		t.Fatal("a second leafFor for the same host issued again (no cache hit)")
	}
	// 6 days on: more than a day left, still cached; 6.5 days: reissued
	d6 := start.Add(6 * 24 * time.Hour)
	now.Store(&d6)
	if again, _ := ca.leafFor("api.github.com"); again != first {
		t.Fatal("reissued with a day left")
	}
	d65 := start.Add(6*24*time.Hour + 13*time.Hour)
	now.Store(&d65)
	renewed, _ := ca.leafFor("api.github.com")
	if renewed == first {
		t.Fatal("not reissued with less than a day left")
	}
	// LRU: 256 other hosts push it out
	for i := range mitmLeafCacheSize {
		if _, err := ca.leafFor(fmt.Sprintf("h%d.test", i)); err != nil {
			t.Fatal(err)
		}
	}
	if ca.lru.Len() != mitmLeafCacheSize || len(ca.leaves) != mitmLeafCacheSize {
		t.Fatalf("cache holds %d/%d", ca.lru.Len(), len(ca.leaves))
	}
	if again, _ := ca.leafFor("api.github.com"); again == renewed {
		t.Fatal("the least recently used leaf was not evicted")
	}
	// concurrent use
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ca.leafFor(fmt.Sprintf("c%d.test", i%4)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// otherCAPEM is the certificate of a CA of its own: a stand-in for a system root.
func otherCAPEM(t *testing.T) []byte {
	t.Helper()
	ca, _ := openTestCA(t)
	return ca.certPEM
}

func TestMITMBundle(t *testing.T) {
	ca, dir := openTestCA(t)
	r1, r2 := otherCAPEM(t), otherCAPEM(t)
	sys := filepath.Join(t.TempDir(), "roots.pem")
	junk := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("not a cert")})
	broken := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("garbage")})
	os.WriteFile(sys, slices.Concat(r1, []byte("# comment\n"), junk, r2, r1, broken), 0o644)
	getenv := func(k string) string {
		if k == "SSL_CERT_FILE" {
			return sys
		}
		return ""
	}
	path, err := ca.bundle(dir, getenv)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Concat(r1, r2, ca.certPEM); !bytes.Equal(data, want) {
		t.Fatalf("bundle holds:\n%s\nwant the two roots then the CA", data)
	}
	fi, _ := os.Lstat(path)
	// beside <state>/mitm, which every sandbox is denied whole: masked commands read bundles
	if fi.Mode() != 0o644 || filepath.Dir(path) != filepath.Join(dir, "mitm-bundles") || !strings.HasPrefix(filepath.Base(path), "ca-bundle-") {
		t.Errorf("bundle %s mode %v", path, fi.Mode())
	}
	if di, _ := os.Lstat(filepath.Dir(path)); di.Mode() != 0o755|os.ModeDir {
		t.Errorf("bundle directory mode %v, want drwxr-xr-x", di.Mode())
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "mitm")); slices.ContainsFunc(ents, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), "ca-bundle-") }) {
		t.Errorf("a bundle was written in the CA's own directory")
	}
	again, err := ca.bundle(dir, getenv)
	if err != nil || again != path {
		t.Fatalf("second bundle: %s %v", again, err)
	}
	// an existing file of that name with other content, or a symlink, is refused
	os.Chmod(path, 0o644)
	os.WriteFile(path, []byte("tampered"), 0o644)
	if _, err := ca.bundle(dir, getenv); err == nil {
		t.Error("a tampered bundle was reused")
	}
	os.Remove(path)
	os.Symlink(sys, path)
	if _, err := ca.bundle(dir, getenv); err == nil {
		t.Error("a symlinked bundle was used")
	}
	// the platform roots, as this server's Go reads them: every certificate of them is there
	os.Remove(path)
	sysPath, err := ca.bundle(dir, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(sysPath)
	n := bytes.Count(data, []byte("-----BEGIN CERTIFICATE-----"))
	if n < 2 || !bytes.HasSuffix(data, ca.certPEM) {
		t.Fatalf("system bundle: %d certificates, CA last: %v", n, bytes.HasSuffix(data, ca.certPEM))
	}
	t.Logf("system bundle: %d certificates, %d bytes", n, len(data))
	// a bundle directory others may write, or a symlink in its place, is refused
	bdir := filepath.Join(dir, "mitm-bundles")
	os.Chmod(bdir, 0o777)
	if _, err := ca.bundle(dir, getenv); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("a world-writable bundle directory: %v", err)
	}
	os.RemoveAll(bdir)
	os.Symlink(t.TempDir(), bdir)
	if _, err := ca.bundle(dir, getenv); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("a symlinked bundle directory: %v", err)
	}
	env := map[string]string{"SSL_CERT_DIR": "/etc/ssl/certs", "KEEP": "1"}
	mitmCAEnv(env, path)
	if _, ok := env["SSL_CERT_DIR"]; ok || env["KEEP"] != "1" || len(env) != len(mitmCAEnvKeys)+1 {
		t.Fatalf("CA env: %v", env)
	}
	for _, k := range []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "PIP_CERT", "AWS_CA_BUNDLE"} {
		if env[k] != path {
			t.Errorf("%s = %q", k, env[k])
		}
	}
}

func TestMITMCACommand(t *testing.T) {
	ca, dir := openTestCA(t)
	var out, errb bytes.Buffer
	if code := run([]string{"mitm-ca", "rotate", "--state-dir", dir}, nil, &out, &errb); code != 0 {
		t.Fatalf("rotate: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "new masking CA") {
		t.Errorf("output %q", out.String())
	}
	rotated, err := openMITMCA(dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.cert.Equal(ca.cert) {
		t.Fatal("rotate kept the CA")
	}
	for _, args := range [][]string{{"mitm-ca"}, {"mitm-ca", "renew"}, {"mitm-ca", "rotate", "extra"}, {"mitm-ca", "rotate", "--bogus"}} {
		out.Reset()
		errb.Reset()
		if code := run(args, nil, io.Discard, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	// a relative --state-dir is taken from the working directory
	t.Chdir(dir)
	if code := run([]string{"mitm-ca", "rotate", "--state-dir", "."}, nil, io.Discard, &errb); code != 0 {
		t.Fatalf("rotate --state-dir .: exit %d: %s", code, errb.String())
	}
	// a key others can read is refused by rotate too, and left as it is
	os.Chmod(filepath.Join(dir, "mitm", "ca.key"), 0o640)
	if code := run([]string{"mitm-ca", "rotate", "--state-dir", dir}, nil, io.Discard, &errb); code != 1 {
		t.Errorf("rotate over a loose key: exit %d", code)
	}
}

// TestSecretFilesHoldMITMDir: the masking CA's whole directory is a secret file, not its key
// alone (a rotation renames a new key over the old, a first masked start creates it later).
func TestSecretFilesHoldMITMDir(t *testing.T) {
	dir := t.TempDir()
	want := filepath.Join(dir, "mitm")
	if files := secretFiles(&cliOptions{stateDir: dir}); !slices.Contains(files, want) {
		t.Fatalf("secretFiles %v lacks %s", files, want)
	}
	for _, c := range []struct {
		goos string
		env  map[string]string
		want string
	}{
		{"linux", map[string]string{"XDG_STATE_HOME": "/x", "HOME": "/h"}, "/x/exec-server"},
		{"linux", map[string]string{"XDG_STATE_HOME": "rel", "HOME": "/h"}, "/h/.local/state/exec-server"},
		{"darwin", map[string]string{"XDG_STATE_HOME": "/x", "HOME": "/h"}, "/h/Library/Application Support/exec-server"},
	} {
		got, err := defaultStateDir(c.goos, func(k string) string { return c.env[k] })
		if err != nil || got != c.want {
			t.Errorf("%s %v: %q %v, want %q", c.goos, c.env, got, err, c.want)
		}
	}
	if _, err := defaultStateDir("linux", func(string) string { return "" }); err == nil {
		t.Error("no HOME: no error")
	}
}
