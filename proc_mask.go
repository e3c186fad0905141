package main

// Credential masking in process/start (docs/network.md §8, "What process/start does"): a start
// whose networkProxy.proxy asks for credentialMasking gets its proxy started with an
// interception whose injector is this process's binding, its final environment through
// maskEnv (stand-ins, markers, NO_PROXY trimmed, the CA bundle's variables), its argv and its
// shell snapshot through maskText, and the bundle a read grant in its sandbox. The real
// values stay in this server's memory (the registry and the binding the proxy holds). New
// file: the server-wide masking state and the start's wiring are their own concern, apart
// from the proxy (netproxy*.go) and the masking rules (netproxy_mask.go).

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maskServer is the server's masking state: the registry of stand-ins (server-wide, for the
// server's life, docs/network.md §8) and the CA under the state directory, opened at the
// first masked start and again after a failure.
type maskServer struct {
	stateDir string
	reg      *maskRegistry
	// caDir is <stateDir>/mitm as made at the server's start, before any sandbox denied it
	// (secrets.go); caDirErr why it could not be made. Masking is refused for the server's
	// life when it could not be, or when the directory is no longer that one: a sandbox built
	// meanwhile may not cover the key a first start would create there.
	caDir    fs.FileInfo
	caDirErr error

	mu     sync.Mutex
	ca     *mitmCA
	bundle string

	// originRoots verify the origins of intercepted requests; nil: the system's roots. Only
	// tests set it (a TLS test host with a CA of its own).
	originRoots *x509.CertPool
}

// newMaskServer is the masking state of a server whose state directory is stateDir ("" when
// it has none: a masked start is then refused). On Linux, where masking runs, it makes
// <stateDir>/mitm now, so that every sandbox is denied the directory before the CA's key is
// ever in it (docs/network.md §8, "The CA"); a failure is kept and reported by open (and
// logged by newServer): the server runs, masking is refused.
func newMaskServer(stateDir string) *maskServer {
	m := &maskServer{stateDir: stateDir, reg: newMaskRegistry()}
	if stateDir != "" && runtime.GOOS == "linux" {
		_, m.caDir, m.caDirErr = makeStateSubdir(stateDir, mitmDirName, 0o700, "masking CA directory")
	}
	return m
}

// usable reports whether a masked start can get its CA here: a state directory, and its CA
// directory made at the start. Where not, initialize does not advertise masking, so that the
// harness warns and runs unmasked rather than have every masked start refused.
func (m *maskServer) usable() bool { return m.stateDir != "" && m.caDirErr == nil }

// open returns the CA and the bundle a masked command trusts, loading (or creating) them
// under the state directory the first time.
func (m *maskServer) open() (*mitmCA, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ca != nil {
		return m.ca, m.bundle, nil
	}
	if m.stateDir == "" {
		return nil, "", fmt.Errorf("no state directory for the masking CA (give --state-dir)")
	}
	if m.caDirErr != nil {
		return nil, "", fmt.Errorf("the directory of the masking CA could not be made at the server's start (%v): masking is refused until a restart that can make it", m.caDirErr)
	}
	if m.caDir != nil {
		dir := filepath.Join(m.stateDir, mitmDirName)
		if fi, err := os.Lstat(dir); err != nil || !os.SameFile(fi, m.caDir) {
			return nil, "", fmt.Errorf("the masking CA directory %s is no longer the one made at the server's start, which the sandboxes deny: masking is refused until a restart", dir)
		}
	}
	ca, err := openMITMCA(m.stateDir, time.Now)
	if err != nil {
		return nil, "", err
	}
	bundle, err := ca.bundle(m.stateDir, os.Getenv)
	if err != nil {
		return nil, "", err
	}
	m.ca, m.bundle = ca, bundle
	return ca, bundle, nil
}

// maskSlot is a masked process's injector as its proxy holds it: the proxy starts before the
// command's environment is final, so the binding is set once maskLaunch has made it. Until
// then (and for a start that fails before) nothing is intercepted and nothing swapped.
type maskSlot struct {
	b atomic.Pointer[maskBinding]
	// resigner re-signs the requests the command signed with its AWS stand-ins
	// (netproxy_sigv4.go); set with b, nil when no AWS key is bound.
	resigner atomic.Pointer[sigv4Resigner]
}

// bind hands the slot its process's binding, once maskLaunch has made it.
func (s *maskSlot) bind(b *maskBinding) {
	s.resigner.Store(newSigV4Resigner(b))
	s.b.Store(b)
}

func (s *maskSlot) intercepts(host string, port uint16) bool {
	b := s.b.Load()
	return b != nil && b.intercepts(host, port)
}

func (s *maskSlot) inject(r *http.Request) []string {
	b := s.b.Load()
	if b == nil {
		return nil
	}
	return b.inject(r)
}

// resign re-signs r, signed with the command's AWS stand-ins, with the real key
// (netproxy_sigv4.go); the interception answers a refusal itself.
func (s *maskSlot) resign(r *http.Request, host string, port uint16) sigv4Outcome {
	return s.resigner.Load().resign(r, host, port) // a nil resigner (no AWS key bound) re-signs nothing
}

func (s *maskSlot) unmask(h http.Header) {
	if b := s.b.Load(); b != nil {
		b.unmask(h)
	}
}

func (s *maskSlot) unmaskPairs() []unmaskPair {
	if b := s.b.Load(); b != nil {
		return b.unmaskPairs()
	}
	return nil
}

var (
	_ credentialInjector = (*maskSlot)(nil)
	_ responseUnmasker   = (*maskSlot)(nil)
	_ bodyUnmasker       = (*maskSlot)(nil)
	_ requestResigner    = (*maskSlot)(nil)
)

// wantsMasking reports whether p asks for credential masking on an enabled proxy.
func wantsMasking(p *startParams) bool {
	return p.NetworkProxy != nil && p.NetworkProxy.Proxy.Enabled && bool(p.NetworkProxy.Proxy.CredentialMasking)
}

// maskIntercept is the interception a masked start's proxy starts with (nil when p asks for
// no masking). It refuses, with the reason and never a value, a start it cannot mask.
func (c *call) maskIntercept(p *startParams) (*interceptConfig, error) {
	if !wantsMasking(p) {
		return nil, nil
	}
	if runtime.GOOS != "linux" {
		return nil, errInvalidParams("credential masking is Linux-only here (credentialMasking is advertised false); refusing rather than run the command with its real credentials (docs/network.md §8)")
	}
	ms := c.srv.mask
	ca, _, err := ms.open()
	if err != nil {
		return nil, errInternal("credential masking: the masking CA: %v; refusing rather than run the command with its real credentials (docs/network.md §8)", err)
	}
	return &interceptConfig{issuer: ca, injector: &maskSlot{}, roots: ms.originRoots}, nil
}

// maskLaunch masks spec, the launch of a start that asks for masking, whose proxy is np
// (docs/network.md §8): its final environment through maskEnv plus the bundle's variables,
// its argv through maskText; the binding goes to the proxy and to spec (for the snapshot
// and the sandbox's read grant). Nothing to do for a start without masking.
func (c *call) maskLaunch(p *startParams, spec *launchSpec, np *netProxy, sb *processSandbox) error {
	if !wantsMasking(p) {
		return nil
	}
	if np == nil || np.mitm == nil { // maskIntercept gave the proxy its interception: fail closed
		return errInternal("credential masking: the start's proxy does not intercept; refusing rather than run the command with its real credentials (docs/network.md §8)")
	}
	slot, ok := np.mitm.cfg.injector.(*maskSlot)
	if !ok {
		return errInternal("credential masking: the proxy has no masking injector")
	}
	why := maskExposure(c.srv.sandbox, sb, spec)
	if why != "" && sandboxConfines(sb) {
		// A sandbox is asked for: the client relies on it to contain the command, and this
		// one would leave the real values in its reach (decision D1, docs/network.md §8).
		return errInvalidParams("credential masking: this sandbox would leave this server's memory, where the real values are, in the command's reach (%s); refusing rather than promise a masking it could read past (docs/network.md §8)", why)
	}
	ms := c.srv.mask
	_, bundle, err := ms.open()
	if err != nil {
		return errInternal("credential masking: the masking CA: %v; refusing rather than run the command with its real credentials (docs/network.md §8)", err)
	}
	env := make(map[string]string, len(spec.env))
	for _, kv := range spec.env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	res, err := ms.reg.maskEnv(env, p.NetworkProxy.Proxy.CredentialProviders, os.Environ())
	if err != nil {
		// maskEnv's errors name variables and providers, never a value.
		return errInternal("%v; refusing rather than run the command with a real credential (docs/network.md §8)", err)
	}
	mitmCAEnv(res.env, bundle)
	list := make([]string, 0, len(res.env))
	for k, v := range res.env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	spec.env = list
	for i, a := range spec.argv {
		spec.argv[i] = res.binding.maskText(a)
	}
	spec.mask, spec.maskBundle = res.binding, bundle
	slot.bind(res.binding)

	// The log: names and reasons only.
	var providers []string
	for _, b := range res.binding.bound {
		if !slices.Contains(providers, b.p.name) {
			providers = append(providers, b.p.name)
		}
	}
	attrs := []any{"processId", p.ProcessID, "providers", providers, "aliases", res.aliases}
	for _, u := range res.unset {
		c.log.Warn("credential masking: a variable was removed from the command's environment", "processId", p.ProcessID, "variable", u.key, "provider", u.provider, "reason", u.reason)
	}
	if why != "" {
		// No sandbox confines it (danger-full-access): masked all the same, as hygiene
		// (decision D8, docs/network.md §8), and said so.
		c.log.Warn("credential masking: not a boundary for this command: it can read this server's memory, where the real values are", append(attrs, "why", why)...)
	} else {
		c.log.Info("credential masking", attrs...)
	}
	return nil
}

// maskSnapshotVar is what a masked command's shell snapshot may carry of variable k, whose
// value a login profile exported (docs/network.md §8): every bound real value replaced by its
// stand-in, and dropped (ok false) when it is a variable of one of the start's providers
// (built-in or custom) or still holds a value of a provider's shape: a credential the start
// did not carry never reaches the command through its profile
// (TestReview31MaskSnapshotCustomProvider).
func (b *maskBinding) maskSnapshotVar(k, v string) (string, bool) {
	v = b.maskText(v)
	providers := b.providers
	if providers == nil {
		providers = maskBuiltins(nil)
	}
	for _, p := range providers {
		if slices.Contains(p.env, k) {
			return "", false
		}
		if p.find == nil {
			continue
		}
		for _, m := range p.find(v) {
			if s := v[m[0]:m[1]]; !b.isStandIn(s) {
				return "", false
			}
		}
	}
	return v, true
}

// isStandIn reports whether s is one of the binding's stand-ins.
func (b *maskBinding) isStandIn(s string) bool {
	for _, x := range b.bound {
		if x.e.standIn == s {
			return true
		}
	}
	return false
}

// LogValue keeps the logger from ever printing a binding (it holds real values).
func (b *maskBinding) LogValue() string { return "[masking binding]" }

var _ logValuer = (*maskBinding)(nil)

// maskStartError keeps the real values of a masked start out of its error (docs/network.md
// §8): a start can fail before its binding exists (a program named after a credential, a
// sandbox refusal), so the message loses every value of the request's environment that a
// provider's variable holds, and every value of a built-in provider's shape, each replaced
// by "[masked]". Errors of starts without masking are returned as they are.
func maskStartError(p *startParams, err error) error {
	var re *rpcError
	if err == nil || !wantsMasking(p) || !errors.As(err, &re) {
		return err
	}
	var reals []string
	builtins := maskBuiltins(p.Env)
	owned := func(k string) bool {
		for _, b := range builtins {
			if slices.Contains(b.env, k) {
				return true
			}
		}
		for _, c := range p.NetworkProxy.Proxy.CredentialProviders {
			if slices.Contains(c.Env, k) {
				return true
			}
		}
		return false
	}
	for k, v := range p.Env {
		if v = strings.TrimSpace(v); v != "" && owned(k) {
			reals = append(reals, v)
		}
	}
	sort.Slice(reals, func(i, j int) bool { return len(reals[i]) > len(reals[j]) })
	msg := re.Message
	for _, r := range reals {
		msg = strings.ReplaceAll(msg, r, "[masked]")
	}
	for _, b := range builtins {
		if b.find == nil {
			continue
		}
		for {
			m := b.find(msg)
			if len(m) == 0 {
				break
			}
			msg = msg[:m[0][0]] + "[masked]" + msg[m[0][1]:]
		}
	}
	if msg == re.Message {
		return err
	}
	e := *re
	e.Message = msg
	return &e
}
