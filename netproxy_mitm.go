package main

// The credential-masking CA (docs/network.md §8, "The CA"): the server's own certificate
// authority, kept under --state-dir, which signs the certificates the managed proxy shows a
// masked command for the hosts whose credentials it swaps back; the bundle (the system roots
// plus this CA) the command trusts; and `exec-server mitm-ca rotate`. stdlib only.

import (
	"bytes"
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// mitmCAValidity is the CA's lifetime, and mitmCARenewBefore how long before its end a
	// load replaces it (docs/network.md §8: upstream's never ends and is never rotated).
	mitmCAValidity    = 365 * 24 * time.Hour
	mitmCARenewBefore = 30 * 24 * time.Hour
	// mitmLeafValidity is a leaf's lifetime from issue; mitmLeafBackdate covers clocks a
	// little behind ours; a cached leaf with less than mitmLeafRenewBefore left is reissued.
	mitmLeafValidity    = 7 * 24 * time.Hour
	mitmLeafBackdate    = time.Hour
	mitmLeafRenewBefore = 24 * time.Hour
	// mitmLeafCacheSize is how many hosts' leaves stay in memory (never on disk).
	mitmLeafCacheSize = 256
	// mitmBundleMax caps the system roots read into the bundle, and the bundle.
	mitmBundleMax = 4 << 20
	// mitmLoadAttempts bounds the re-reads of a pair a rotation replaced between the reads
	// of its two files.
	mitmLoadAttempts = 16

	// mitmDirName holds the CA's key, certificate, lock and the temporary files of a
	// rotation: denied, as a directory, to every sandbox (secrets.go). mitmBundleDirName,
	// beside it, holds the bundles masked commands read.
	mitmDirName       = "mitm"
	mitmBundleDirName = "mitm-bundles"
	mitmKeyName       = "ca.key"
	mitmCertName      = "ca.pem"
	mitmLockName      = "lock"
)

// mitmCAEnvKeys are the variables a masked command gets pointing at the bundle: upstream's
// ten, then AWS_CA_BUNDLE, CARGO_HTTP_CAINFO and DENO_CERT (ours: botocore, cargo and deno
// read them). SSL_CERT_DIR is removed instead (mitmCAEnvUnset).
var mitmCAEnvKeys = []string{
	"CODEX_CA_CERTIFICATE", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
	"NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT", "BUNDLE_SSL_CA_CERT",
	"npm_config_cafile", "NPM_CONFIG_CAFILE",
	"AWS_CA_BUNDLE", "CARGO_HTTP_CAINFO", "DENO_CERT",
}

// mitmCAEnvUnset are the variables removed from a masked command's environment: an inherited
// certificate directory would not hold our CA, and OpenSSL clients may prefer it.
var mitmCAEnvUnset = []string{"SSL_CERT_DIR"}

// mitmSystemRootFiles are the files Go itself reads for the system roots, in its order.
var mitmSystemRootFiles = map[string][]string{
	"linux": {
		"/etc/ssl/certs/ca-certificates.crt",
		"/etc/pki/tls/certs/ca-bundle.crt",
		"/etc/ssl/ca-bundle.pem",
		"/etc/pki/tls/cacert.pem",
		"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
		"/etc/ssl/cert.pem",
	},
	"darwin": {"/etc/ssl/cert.pem"},
}

// defaultStateDir is --state-dir's default: $XDG_STATE_HOME/exec-server, else
// ~/.local/state/exec-server; on macOS ~/Library/Application Support/exec-server.
func defaultStateDir(goos string, getenv func(string) string) (string, error) {
	if goos != "darwin" {
		if x := getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
			return filepath.Join(x, "exec-server"), nil
		}
	}
	home := getenv("HOME")
	if !filepath.IsAbs(home) {
		return "", errors.New("no state directory: HOME is not an absolute path (give --state-dir)")
	}
	if goos == "darwin" {
		return filepath.Join(home, "Library", "Application Support", "exec-server"), nil
	}
	return filepath.Join(home, ".local", "state", "exec-server"), nil
}

// stateDirOf is o's --state-dir (made absolute), or the default; "" when neither can be had.
func stateDirOf(o *cliOptions) string {
	if o.stateDir != "" {
		abs, err := filepath.Abs(o.stateDir)
		if err != nil {
			return ""
		}
		return abs
	}
	d, _ := defaultStateDir(runtime.GOOS, os.Getenv)
	return d
}

// mitmCADir is the directory of the CA under o's state directory, denied whole to every
// sandbox (secrets.go): a cover on the directory survives the renames a rotation makes in
// it and covers the key a first masked start creates there later, where a cover on the key
// file would be undone by the one and miss the other (docs/network.md §8, "The CA").
func mitmCADir(o *cliOptions) string {
	d := stateDirOf(o)
	if d == "" {
		return ""
	}
	return filepath.Join(d, mitmDirName)
}

// mitmCA is the masking CA in memory and the leaves it issued. Safe for concurrent use.
type mitmCA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	now     func() time.Time

	mu     sync.Mutex
	lru    *list.List // of *mitmLeaf, most recent first
	leaves map[string]*list.Element
}

type mitmLeaf struct {
	host     string
	cert     *tls.Certificate
	notAfter time.Time
}

// openMITMCA loads the CA under stateDir, creating it when there is none and replacing it
// when it has less than mitmCARenewBefore left. It refuses a key that is a symlink, not a
// regular file or readable by others, and a key without its certificate (or the reverse).
func openMITMCA(stateDir string, now func() time.Time) (*mitmCA, error) {
	dir, err := mitmStateDir(stateDir)
	if err != nil {
		return nil, err
	}
	unlock, err := mitmLock(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ca, err := loadMITMCA(dir, now)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := writeMITMCA(dir, now(), false); err != nil {
			return nil, err
		}
		return loadMITMCA(dir, now)
	case err != nil:
		return nil, err
	case ca.cert.NotAfter.Sub(now()) < mitmCARenewBefore:
		if err := writeMITMCA(dir, now(), true); err != nil {
			return nil, fmt.Errorf("renew the masking CA: %w", err)
		}
		return loadMITMCA(dir, now)
	}
	return ca, nil
}

// rotateMITMCA replaces the CA under stateDir by a new one (exec-server mitm-ca rotate):
// both files are written aside, then renamed over the old ones, the key first, under the
// directory's lock, which openMITMCA takes too: a server never loads half a rotation. A
// reader without the lock that reads between the two renames sees a key that does not match
// its certificate and reads again (loadMITMCA).
func rotateMITMCA(stateDir string, now time.Time) (*x509.Certificate, error) {
	dir, err := mitmStateDir(stateDir)
	if err != nil {
		return nil, err
	}
	unlock, err := mitmLock(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := checkMITMKeyFile(filepath.Join(dir, mitmKeyName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := writeMITMCA(dir, now, true); err != nil {
		return nil, err
	}
	ca, err := loadMITMCA(dir, func() time.Time { return now })
	if err != nil {
		return nil, err
	}
	return ca.cert, nil
}

// mitmStateDir makes (0700) or checks <stateDir>/mitm: a real directory, writable by its
// owner only.
func mitmStateDir(stateDir string) (string, error) {
	dir, _, err := makeStateSubdir(stateDir, mitmDirName, 0o700, "masking CA directory")
	return dir, err
}

// mitmBundleDir makes (0755: masked commands read the bundles) or checks
// <stateDir>/mitm-bundles, as mitmStateDir does <stateDir>/mitm.
func mitmBundleDir(stateDir string) (string, error) {
	dir, _, err := makeStateSubdir(stateDir, mitmBundleDirName, 0o755, "CA bundle directory")
	return dir, err
}

// makeStateSubdir makes (with mode) or checks <stateDir>/name: a real directory (a symlink is
// refused), writable by its owner only. It returns the directory and what Lstat says of it.
func makeStateSubdir(stateDir, name string, mode fs.FileMode, what string) (string, fs.FileInfo, error) {
	if !filepath.IsAbs(stateDir) {
		return "", nil, fmt.Errorf("state directory %q is not an absolute path", stateDir)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return "", nil, fmt.Errorf("state directory: %w", err)
	}
	dir := filepath.Join(stateDir, name)
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", nil, fmt.Errorf("%s: %w", what, err)
	}
	fi, err := os.Lstat(dir)
	switch {
	case err != nil:
		return "", nil, fmt.Errorf("%s: %w", what, err)
	case !fi.IsDir():
		return "", nil, fmt.Errorf("%s %s is not a directory (a symlink is refused)", what, dir)
	case fi.Mode().Perm()&0o022 != 0:
		return "", nil, fmt.Errorf("%s %s is writable by others (mode %04o)", what, dir, fi.Mode().Perm())
	}
	return dir, fi, nil
}

// mitmLock serialises creations and rotations of the CA in dir, across processes.
func mitmLock(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, mitmLockName), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("masking CA lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("masking CA lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// checkMITMKeyFile refuses a key file that is a symlink, not a regular file, or open to
// its group or others.
func checkMITMKeyFile(path string) (fs.FileInfo, error) {
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return nil, err
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("refusing the masking CA key %s: it is a symlink", path)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("refusing the masking CA key %s: not a regular file", path)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("refusing the masking CA key %s: mode %04o lets others read it (want 0600)", path, fi.Mode().Perm())
	}
	return fi, nil
}

// loadMITMCA reads the pair in dir. Both missing is fs.ErrNotExist; one missing, or a key
// that does not match the certificate after mitmLoadAttempts reads, is an error.
func loadMITMCA(dir string, now func() time.Time) (*mitmCA, error) {
	keyPath, certPath := filepath.Join(dir, mitmKeyName), filepath.Join(dir, mitmCertName)
	var lastErr error
	for range mitmLoadAttempts {
		_, kerr := checkMITMKeyFile(keyPath)
		_, cerr := os.Lstat(certPath)
		switch {
		case errors.Is(kerr, fs.ErrNotExist) && errors.Is(cerr, fs.ErrNotExist):
			return nil, fs.ErrNotExist
		case errors.Is(kerr, fs.ErrNotExist):
			return nil, fmt.Errorf("masking CA certificate %s has no key %s", certPath, mitmKeyName)
		case kerr != nil:
			return nil, kerr
		case errors.Is(cerr, fs.ErrNotExist):
			return nil, fmt.Errorf("masking CA key %s has no certificate %s (refusing to guess: rotate it)", keyPath, mitmCertName)
		case cerr != nil:
			return nil, fmt.Errorf("masking CA certificate: %w", cerr)
		}
		keyPEM, err := readNoFollow(keyPath)
		if err != nil {
			return nil, fmt.Errorf("masking CA key: %w", err)
		}
		certPEM, err := readNoFollow(certPath)
		if err != nil {
			return nil, fmt.Errorf("masking CA certificate: %w", err)
		}
		ca, err := parseMITMCA(keyPEM, certPEM)
		if err == nil {
			ca.now = now
			return ca, nil
		}
		lastErr = err // a rotation may have renamed one file and not yet the other
	}
	return nil, fmt.Errorf("masking CA in %s: %w", dir, lastErr)
}

// readNoFollow reads a regular file without following a final symlink, bounded.
func readNoFollow(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > mitmBundleMax {
		return nil, fmt.Errorf("%s: not a regular file of at most %d bytes", path, mitmBundleMax)
	}
	var b bytes.Buffer
	_, err = b.ReadFrom(f)
	return b.Bytes(), err
}

func parseMITMCA(keyPEM, certPEM []byte) (*mitmCA, error) {
	kb, _ := pem.Decode(keyPEM)
	cb, _ := pem.Decode(certPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" || cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("the key or the certificate is not PEM of the expected type")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("key is not ECDSA")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	if !cert.IsCA || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("the key does not match the certificate")
	}
	return &mitmCA{
		cert: cert, certPEM: pem.EncodeToMemory(cb), key: key,
		lru: list.New(), leaves: map[string]*list.Element{},
	}, nil
}

// writeMITMCA makes a new pair in dir. Without replace, each file is linked in and an existing
// one is never overwritten (a key written before a failed certificate is removed again);
// with replace, each is renamed over the old, the key first.
func writeMITMCA(dir string, now time.Time, replace bool) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("masking CA key: %w", err)
	}
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(spki)
	tmpl := &x509.Certificate{
		SerialNumber:          randSerial(),
		Subject:               pkix.Name{CommonName: "exec-server credential masking CA " + hex.EncodeToString(sum[:4])},
		NotBefore:             now.Add(-mitmLeafBackdate),
		NotAfter:              now.Add(mitmCAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		SubjectKeyId:          sum[:20],
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("masking CA certificate: %w", err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8})
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPath, certPath := filepath.Join(dir, mitmKeyName), filepath.Join(dir, mitmCertName)
	keyTmp, err := writeTemp(keyPath, keyPEM, 0o600)
	if err != nil {
		return fmt.Errorf("masking CA key: %w", err)
	}
	defer os.Remove(keyTmp)
	certTmp, err := writeTemp(certPath, certPEM, 0o644)
	if err != nil {
		return fmt.Errorf("masking CA certificate: %w", err)
	}
	defer os.Remove(certTmp)
	// both are on disk before either is put in place, so the two renames (or links) follow
	// each other closely
	if err := putFile(keyTmp, keyPath, replace); err != nil {
		return fmt.Errorf("masking CA key: %w", err)
	}
	if err := putFile(certTmp, certPath, replace); err != nil {
		if !replace {
			os.Remove(keyPath)
		}
		return fmt.Errorf("masking CA certificate: %w", err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// placeFile writes data to a new file beside path (mode exact, synced), then links it to path
// (refusing to overwrite) or, with replace, renames it over path.
func placeFile(path string, data []byte, mode fs.FileMode, replace bool) error {
	tmp, err := writeTemp(path, data, mode)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	return putFile(tmp, path, replace)
}

// writeTemp writes data, synced and with exactly mode, to a new file beside path.
func writeTemp(path string, data []byte, mode fs.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// putFile puts tmp at path: a rename with replace, else a link that refuses an existing path.
func putFile(tmp, path string, replace bool) error {
	if replace {
		return os.Rename(tmp, path)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("refusing to overwrite existing %s", path)
		}
		return err
	}
	return nil
}

func randSerial() *big.Int {
	b := make([]byte, 16)
	rand.Read(b)
	b[0] &= 0x7f
	b[0] |= 0x01 // never zero, always 16 bytes
	return new(big.Int).SetBytes(b)
}

// leafFor is the certificate the proxy shows the command for host (a DNS name or an IP
// literal, brackets allowed), signed by the CA: from the cache while it has a day left, else
// a new P-256 key and certificate. Safe for concurrent use.
func (ca *mitmCA) leafFor(host string) (*tls.Certificate, error) {
	name := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(host)), ".")
	if strings.HasPrefix(name, "[") && strings.HasSuffix(name, "]") {
		name = name[1 : len(name)-1]
	}
	ip, ipErr := netip.ParseAddr(name)
	if ipErr == nil {
		name = ip.Unmap().String()
	} else if !validLeafName(name) {
		return nil, fmt.Errorf("no certificate for %q: not a host name or an IP address", host)
	}
	now := ca.now()
	ca.mu.Lock()
	if e, ok := ca.leaves[name]; ok {
		l := e.Value.(*mitmLeaf)
		if l.notAfter.Sub(now) >= mitmLeafRenewBefore {
			ca.lru.MoveToFront(e)
			ca.mu.Unlock()
			return l.cert, nil
		}
	}
	ca.mu.Unlock()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf key: %w", err)
	}
	notAfter := now.Add(mitmLeafValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:   randSerial(),
		Subject:        pkix.Name{CommonName: name},
		NotBefore:      now.Add(-mitmLeafBackdate),
		NotAfter:       notAfter,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		AuthorityKeyId: ca.cert.SubjectKeyId,
	}
	if ipErr == nil {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	cert := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}

	ca.mu.Lock()
	defer ca.mu.Unlock()
	if e, ok := ca.leaves[name]; ok {
		ca.lru.Remove(e)
	}
	ca.leaves[name] = ca.lru.PushFront(&mitmLeaf{host: name, cert: cert, notAfter: notAfter})
	for ca.lru.Len() > mitmLeafCacheSize {
		old := ca.lru.Back()
		ca.lru.Remove(old)
		delete(ca.leaves, old.Value.(*mitmLeaf).host)
	}
	return cert, nil
}

// validLeafName reports whether name can be a certificate's DNS name: LDH labels, dots.
func validLeafName(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// systemRootsPEM is the system roots as this server's Go reads them (SSL_CERT_FILE, else the
// first of the platform's files; plus the files of SSL_CERT_DIR), each certificate once,
// re-encoded; blocks that are not certificates are left out. At most mitmBundleMax.
func systemRootsPEM(goos string, getenv func(string) string) ([]byte, error) {
	var files []string
	if f := getenv("SSL_CERT_FILE"); f != "" {
		files = append(files, f)
	} else {
		for _, f := range mitmSystemRootFiles[goos] {
			if _, err := os.Stat(f); err == nil {
				files = append(files, f)
				break
			}
		}
	}
	if d := getenv("SSL_CERT_DIR"); d != "" {
		for _, dir := range filepath.SplitList(d) {
			ents, err := os.ReadDir(dir)
			if err != nil {
				continue
			}
			for _, e := range ents {
				files = append(files, filepath.Join(dir, e.Name()))
			}
		}
	}
	var out bytes.Buffer
	seen := map[[32]byte]bool{}
	total := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if total += len(data); total > mitmBundleMax {
			return nil, fmt.Errorf("system roots exceed %d bytes", mitmBundleMax)
		}
		for {
			var b *pem.Block
			b, data = pem.Decode(data)
			if b == nil {
				break
			}
			if b.Type != "CERTIFICATE" {
				continue
			}
			if _, err := x509.ParseCertificate(b.Bytes); err != nil {
				continue
			}
			if h := sha256.Sum256(b.Bytes); !seen[h] {
				seen[h] = true
				pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes})
			}
		}
	}
	return out.Bytes(), nil
}

// bundle writes (or finds) <stateDir>/mitm-bundles/ca-bundle-<sha256>.pem, the system roots
// then the CA, mode 0644, and returns its path. An existing file of that name is used only if
// it is a regular file (not a symlink) with exactly that content. The bundles live outside
// <stateDir>/mitm, which every sandbox is denied whole, since masked commands read them.
func (ca *mitmCA) bundle(stateDir string, getenv func(string) string) (string, error) {
	roots, err := systemRootsPEM(runtime.GOOS, getenv)
	if err != nil {
		return "", err
	}
	content := append(roots, ca.certPEM...)
	if len(content) > mitmBundleMax {
		return "", fmt.Errorf("CA bundle exceeds %d bytes", mitmBundleMax)
	}
	dir, err := mitmBundleDir(stateDir)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(content)
	path := filepath.Join(dir, "ca-bundle-"+hex.EncodeToString(sum[:])+".pem")
	for range 2 {
		have, err := readNoFollow(path)
		if err == nil {
			if !bytes.Equal(have, content) {
				return "", fmt.Errorf("CA bundle %s exists with other content", path)
			}
			return path, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("CA bundle: %w", err)
		}
		if err := placeFile(path, content, 0o644, false); err == nil {
			return path, nil
		} else if !strings.Contains(err.Error(), "refusing to overwrite") {
			return "", fmt.Errorf("CA bundle: %w", err)
		}
		// another start wrote it meanwhile: read it back
	}
	return "", fmt.Errorf("CA bundle %s: changed while written", path)
}

// mitmCAEnv sets each of mitmCAEnvKeys to bundle in env and removes mitmCAEnvUnset.
func mitmCAEnv(env map[string]string, bundle string) {
	for _, k := range mitmCAEnvKeys {
		env[k] = bundle
	}
	for _, k := range mitmCAEnvUnset {
		delete(env, k)
	}
}
