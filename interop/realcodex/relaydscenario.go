package main

// The relayd checks (-checks relayd): the real Codex harness through our product's own
// `exec-server relay` (docs/remote.md §12) in place of this program's test registry. The relay
// processes are the exec-server binary under test, set up as §12.1 tells a user (token files
// of 32 random bytes in base64, mode 0600, and a relay.json granting `register` and `connect`
// on `build-*`); the harness is the unchanged `codex app-server`, pointed at the relay by the
// three CODEX_EXEC_SERVER_NOISE_* variables alone. The executors are ours (`exec-server
// --remote`, `exec-server forward`) and, as the control, the reference's `codex exec-server
// --remote`.
//
//	relayd-ours, relayd-forward, relayd-ref   one relay; the base scenario, then the relay is
//	                                          killed (SIGKILL) and started again on its address
//	                                          and another turn runs
//	relayd-fleet-ours, -forward, -ref         three relays with one peer list (§12.7): the
//	                                          executor registers through node c, the harness
//	                                          asks node a, node b owns the environment; b is
//	                                          killed (SIGKILL) mid-run, a turn runs, b is
//	                                          started again, a turn runs
//	relayd-acl                                the refusals of §12.3 as the real harness and
//	                                          the real executors meet them
//
// The relay cannot be made to drop one socket from outside, so the breaks here are the ones
// a deployment meets: a relay process that dies. Every wait after a break is measured and
// printed (the time to a registration on the node that now owns the environment, as a
// harness's /connect sees it).

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/mlkem"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const (
	// relaydEnvID is the one-node checks' environment id: matched by §12.1's `build-*`.
	relaydEnvID = "build-1"
	// relaydRegisterBound bounds the time from a relay's death (or restart) to the executor's
	// registration on the node that now owns its environment: one re-registration round of
	// the executor (its first reconnect waits one backoff step of about 1 s, docs/remote.md
	// §2.4), with the bound relayd_fleet_test.go asserts, 3 × 1 s + 5 s.
	relaydRegisterBound = 8 * time.Second
	// relaydStartWait bounds a relay's start and an executor's first registration.
	relaydStartWait = 30 * time.Second
	// relaydExitWait bounds how long a refused executor may take to exit.
	relaydExitWait = 20 * time.Second
	// relaydBackWait bounds the wait for a registration on a restarted node: Codex's own
	// executor comes back only on its next retry of the node's URL, and its retries are up to
	// a minute apart by then (docs/remote.md §2.4).
	relaydBackWait = 75 * time.Second
	// relaydSystemRoots is the system's CA bundle (Debian's path), which Codex's
	// SSL_CERT_FILE bundle must keep for its other HTTPS peers.
	relaydSystemRoots = "/etc/ssl/certs/ca-certificates.crt"
)

// relaydCheck is one relayd check: whose executor serves the environment, and whether the
// relay is one node or a fleet of three.
type relaydCheck struct {
	name     string
	executor string // "ours" (exec-server --remote), "forward" (exec-server forward to ours), "ref" (codex exec-server --remote)
	fleet    bool
	tls      bool // one relay serving HTTPS from a private CA's certificate (docs/remote.md §12.1, §12.6)
}

var relaydChecks = []relaydCheck{
	{name: "relayd-ours", executor: "ours"},
	{name: "relayd-forward", executor: "forward"},
	{name: "relayd-ref", executor: "ref"},
	{name: "relayd-tls", executor: "ours", tls: true},
	{name: "relayd-fleet-ours", executor: "ours", fleet: true},
	{name: "relayd-fleet-forward", executor: "forward", fleet: true},
	{name: "relayd-fleet-ref", executor: "ref", fleet: true},
}

// relaydFleetIDs are the fleet's node ids; relaydFleetHarness is the node the harness asks,
// relaydFleetRegistry the one the executor registers through, relaydFleetOwner the one that
// owns the environment and is killed.
var relaydFleetIDs = []string{"relay-a", "relay-b", "relay-c"}

const (
	relaydFleetHarness  = "relay-a"
	relaydFleetOwner    = "relay-b"
	relaydFleetRegistry = "relay-c"
)

// relaydSetup is the relay's directory as docs/remote.md §12.1 makes it: the token files,
// the per-environment secret and relay.json. Beyond §12.1's two tokens it holds two whose
// grants cover only `other-*`, for the refusals.
type relaydSetup struct {
	dir    string
	config string
	tokens map[string]string // token name → its value, as the file holds it (trimmed)
	// With TLS: the private CA the executors are given, the bundle Codex is given (the
	// system's roots and the CA), and the relay's certificate and key.
	ca, bundle, cert, key string
	client                *http.Client // trusts ca, if set
}

// relaydTokenGrants are the tokens of relay.json: §12.1's executors and codex, and the two
// for the access-control check.
var relaydTokenGrants = []struct {
	name              string
	register, connect []string
}{
	{name: "executors", register: []string{"build-*"}},
	{name: "codex", connect: []string{"build-*"}},
	{name: "other-executors", register: []string{"other-*"}},
	{name: "other-codex", connect: []string{"other-*"}},
}

// writeRelaydSetup writes the relay's directory under dir. peers, if not empty, is the
// fleet's peer list (node id → base URL, in relaydFleetIDs order). withTLS adds a private
// CA (ca.pem) and a certificate for 127.0.0.1 it signed (cert.pem, key.pem).
func writeRelaydSetup(dir string, peers [][2]string, withTLS bool) (*relaydSetup, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &relaydSetup{dir: dir, config: filepath.Join(dir, "relay.json"), tokens: map[string]string{},
		client: &http.Client{Timeout: 15 * time.Second}}
	if withTLS {
		s.ca, s.cert, s.key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		cert, err := testCA(s.ca)
		if err != nil {
			return nil, err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(s.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
			return nil, err
		}
		if err := os.WriteFile(s.key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
			return nil, err
		}
		caPEM, err := os.ReadFile(s.ca)
		if err != nil {
			return nil, err
		}
		// SSL_CERT_FILE replaces the system's roots for Codex, so its bundle holds both.
		system, _ := os.ReadFile(relaydSystemRoots)
		s.bundle = filepath.Join(dir, "codex-roots.pem")
		if err := os.WriteFile(s.bundle, append(append(system, '\n'), caPEM...), 0o600); err != nil {
			return nil, err
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(caPEM)
		s.client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	}
	// As §12.1's `head -c 32 /dev/urandom | base64 > NAME` under umask 077.
	secret := func(file string, n int) (string, error) {
		b := make([]byte, n)
		rand.Read(b)
		v := base64.StdEncoding.EncodeToString(b)
		return v, os.WriteFile(filepath.Join(dir, file), []byte(v+"\n"), 0o600)
	}
	var tokens []map[string]any
	for _, g := range relaydTokenGrants {
		v, err := secret(g.name+".token", 32)
		if err != nil {
			return nil, err
		}
		s.tokens[g.name] = v
		t := map[string]any{"name": g.name, "file": g.name + ".token"}
		if g.register != nil {
			t["register"] = g.register
		}
		if g.connect != nil {
			t["connect"] = g.connect
		}
		tokens = append(tokens, t)
	}
	if _, err := secret("env.secret", 48); err != nil {
		return nil, err
	}
	conf := map[string]any{"tokens": tokens, "environment_token_secret_file": "env.secret"}
	if len(peers) > 0 {
		var ps []map[string]string
		for _, p := range peers {
			ps = append(ps, map[string]string{"id": p[0], "url": p[1]})
		}
		conf["peers"] = ps
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, err
	}
	return s, os.WriteFile(s.config, append(b, '\n'), 0o600)
}

// relaydNode is one `exec-server relay` process.
type relaydNode struct {
	id     string // "" for a lone relay
	addr   string // 127.0.0.1:P, the same across restarts
	url    string // http://127.0.0.1:P, as it printed it
	bin    string
	setup  *relaydSetup
	dir    string
	starts int
	c      *child
}

// start runs the relay (again) on n.addr and waits for the URL it prints.
func (n *relaydNode) start() error {
	n.starts++
	args := []string{"relay", "--config", n.setup.config, "--listen", n.addr, "--log-level", "debug"}
	if n.setup.cert != "" {
		args = append(args, "--tls-cert", n.setup.cert, "--tls-key", n.setup.key)
	}
	name := "relay"
	if n.id != "" {
		args = append(args, "--node-id", n.id)
		name = n.id
	}
	logPath := filepath.Join(n.dir, fmt.Sprintf("%s-%d.log", name, n.starts))
	c, url, err := startChild(name, n.bin, args, nil, n.setup.dir, "", logPath, true)
	if err != nil {
		return err
	}
	n.c, n.url = c, url
	if n.addr == "" || strings.HasSuffix(n.addr, ":0") {
		_, n.addr, _ = strings.Cut(url, "://")
	}
	return nil
}

// kill ends the relay with SIGKILL, as a crash or an OOM kill would: nothing is closed
// in order, its sockets are simply gone.
func (n *relaydNode) kill() {
	if n.c == nil || n.c.Exited() {
		return
	}
	syscall.Kill(-n.c.cmd.Process.Pid, syscall.SIGKILL)
	<-n.c.done
}

func (n *relaydNode) logs() string {
	var b strings.Builder
	for i := 1; i <= n.starts; i++ {
		name := "relay"
		if n.id != "" {
			name = n.id
		}
		raw, _ := os.ReadFile(filepath.Join(n.dir, fmt.Sprintf("%s-%d.log", name, i)))
		b.Write(raw)
	}
	return b.String()
}

// relaydFreeAddrs reserves n loopback ports and frees them: the peer list names every
// node's URL before any starts.
func relaydFreeAddrs(n int) ([]string, error) {
	var addrs []string
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// relaydOwner is docs/remote.md §12.7's placement: of the live nodes, the one whose first 8
// bytes of SHA-256(node id, 0, environment id) are highest, ties to the smaller id. The
// checks use it to pick environment ids whose owner is the node they kill, and check it
// against the relay's own answer (the rendezvous URL of a connect names the owner).
func relaydOwner(nodes []string, envID string) string {
	var owner string
	var best uint64
	for _, id := range nodes {
		sum := sha256.Sum256([]byte(id + "\x00" + envID))
		w := binary.BigEndian.Uint64(sum[:8])
		if owner == "" || w > best || (w == best && id < owner) {
			owner, best = id, w
		}
	}
	return owner
}

// relaydFleetEnvID returns the first build-<tag>-N that relaydFleetOwner owns while all
// three nodes are live.
func relaydFleetEnvID(tag string) string {
	for i := 1; ; i++ {
		id := fmt.Sprintf("build-%s-%d", tag, i)
		if relaydOwner(relaydFleetIDs, id) == relaydFleetOwner {
			return id
		}
	}
}

// relaydProbeKey is a harness public key for the checks' own /connect probes (a real
// X25519 and ML-KEM-768 key: the relay checks both).
var relaydProbeKey = func() json.RawMessage {
	x, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	k, err := mlkem.GenerateKey768()
	if err != nil {
		panic(err)
	}
	b, _ := json.Marshal(map[string]any{"harness_public_key": map[string]string{
		"suite":               noiseSuiteLabel,
		"x25519_public_key":   base64.StdEncoding.EncodeToString(x.PublicKey().Bytes()),
		"mlkem768_public_key": base64.StdEncoding.EncodeToString(k.EncapsulationKey().Bytes()),
	}})
	return b
}()

// relaydConnect asks base for envID's connect bundle as a harness does (docs/remote.md
// §12.3), and returns the status and, on 200, the bundle's rendezvous URL; otherwise the
// answer body.
func relaydConnect(client *http.Client, base, envID, bearer string) (status int, urlOrBody string, err error) {
	req, err := http.NewRequest(http.MethodPost, base+"/cloud/environment/"+envID+"/connect", bytes.NewReader(relaydProbeKey))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, strings.TrimSpace(string(b)), nil
	}
	var v struct{ URL string }
	if err := json.Unmarshal(b, &v); err != nil {
		return resp.StatusCode, "", err
	}
	return resp.StatusCode, v.URL, nil
}

// relaydAwaitServed polls base's /connect until a bundle whose rendezvous URL is on a node
// accepted by onNode is given, or until limit. It returns the time that took and the URL.
func relaydAwaitServed(ctx context.Context, client *http.Client, base, envID, bearer string, limit time.Duration, onNode func(url string) bool) (time.Duration, string, error) {
	start := time.Now()
	last := ""
	for {
		status, v, err := relaydConnect(client, base, envID, bearer)
		switch {
		case err != nil:
			last = err.Error()
		case status == http.StatusOK && onNode(v):
			return time.Since(start), v, nil
		default:
			last = fmt.Sprintf("%d %s", status, v)
		}
		if time.Since(start) > limit || ctx.Err() != nil {
			return time.Since(start), "", fmt.Errorf("no bundle on the expected node within %v (last answer: %s)", limit, clip(last, 300))
		}
		// The relay has no event to wait on from outside; the connect itself waits up to 5 s
		// for a registration while environments move (docs/remote.md §12.3).
		time.Sleep(50 * time.Millisecond)
	}
}

// relaydOnAddr accepts a rendezvous URL on the node listening on addr.
func relaydOnAddr(addr string) func(string) bool {
	return func(u string) bool {
		return strings.HasPrefix(u, "ws://"+addr+"/") || strings.HasPrefix(u, "wss://"+addr+"/")
	}
}

// relaydExecutor starts the check's executor against regURL for envID and returns it with
// what else it started (the forward's target and proxy), to be stopped by the caller.
type relaydExecutor struct {
	exe, target *child
	proxy       *wsProxy
	log         string
}

func (e *relaydExecutor) Stop() {
	e.exe.Stop()
	e.target.Stop()
	if e.proxy != nil {
		e.proxy.Close()
	}
}

// startRelaydExecutor starts kind's executor ("ours", "forward" or "ref") in dir, with the
// registration bearer bearer on standard input, as §12.1's `--registration-bearer-stdin <
// executors.token`.
func startRelaydExecutor(cfg config, log *eventLog, kind, dir, workdir, regURL, envID, bearer, ca string) (*relaydExecutor, error) {
	e := &relaydExecutor{log: filepath.Join(dir, "executor.log")}
	home := filepath.Join(dir, "exec-home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	var bin string
	var args []string
	env := []string{"CODEX_HOME=" + home}
	switch kind {
	case "ours":
		bin, args = cfg.ours, []string{"--log-level", "debug"}
	case "ref":
		bin, args = cfg.codex, []string{"exec-server"}
		env = append(env, "RUST_LOG=codex_exec_server=debug,info")
	case "forward":
		targetHome := filepath.Join(dir, "target-home")
		if err := os.MkdirAll(targetHome, 0o700); err != nil {
			return nil, err
		}
		t, url, err := startChild("exec-server/ours", cfg.ours, []string{"--listen", "ws://127.0.0.1:0", "--log-level", "debug"},
			[]string{"CODEX_HOME=" + targetHome}, workdir, "", filepath.Join(dir, "exec-server.log"), true)
		if err != nil {
			return nil, fmt.Errorf("start the forward's target: %w", err)
		}
		e.target = t
		if e.proxy, err = startWSProxy(log, filepath.Base(dir), url); err != nil {
			t.Stop()
			return nil, err
		}
		bin, args = cfg.ours, []string{"forward", "--connect", e.proxy.URL(), "--log-level", "debug"}
		e.log = filepath.Join(dir, "forward.log")
	default:
		return nil, fmt.Errorf("unknown executor %q", kind)
	}
	args = append(args, "--remote", regURL, "--environment-id", envID, "--registration-bearer-stdin")
	if ca != "" {
		if kind == "ref" {
			env = append(env, "CODEX_CA_CERTIFICATE="+ca)
		} else {
			args = append(args, "--remote-ca", ca) // docs/remote.md §2.1
		}
	}
	c, _, err := startChild("executor/"+kind, bin, args, env, workdir, bearer+"\n", e.log, false)
	if err != nil {
		e.Stop()
		return nil, err
	}
	e.exe = c
	return e, nil
}

// runRelayd runs one relayd check under mode m.
func runRelayd(ctx context.Context, cfg config, log *eventLog, m modeRun, rc relaydCheck) []stepResult {
	var out []stepResult
	fail := func(name string, err error) []stepResult {
		return append(out, stepResult{Name: name, Detail: err.Error()})
	}
	dir := filepath.Join(m.dir, rc.name)
	workdir := filepath.Join(dir, "work")
	if err := os.MkdirAll(workdir, 0o700); err != nil {
		return fail("setup", err)
	}
	log.Printf("==== %s (executor %s, %s), sandbox mode %s", rc.name, rc.executor, map[bool]string{false: "one relay", true: "a fleet of three"}[rc.fleet], m.mode)

	// The relays.
	var nodes []*relaydNode
	byID := map[string]*relaydNode{}
	defer func() {
		for _, n := range nodes {
			n.c.Stop()
		}
	}()
	envID := relaydEnvID
	var peers [][2]string
	var addrs []string
	if rc.fleet {
		var err error
		if addrs, err = relaydFreeAddrs(len(relaydFleetIDs)); err != nil {
			return fail("setup", err)
		}
		for i, id := range relaydFleetIDs {
			peers = append(peers, [2]string{id, "http://" + addrs[i]})
		}
		envID = relaydFleetEnvID(rc.executor)
	} else {
		addrs = []string{"127.0.0.1:0"}
	}
	setup, err := writeRelaydSetup(filepath.Join(dir, "relay"), peers, rc.tls)
	if err != nil {
		return fail("write the relay's configuration (docs/remote.md §12.1)", err)
	}
	for i, addr := range addrs {
		n := &relaydNode{addr: addr, bin: cfg.ours, setup: setup, dir: dir}
		if rc.fleet {
			n.id = relaydFleetIDs[i]
		}
		if err := n.start(); err != nil {
			return fail("start `exec-server relay`", err)
		}
		nodes = append(nodes, n)
		byID[n.id] = n
	}
	harnessNode, registryNode, owner := nodes[0], nodes[0], nodes[0]
	if rc.fleet {
		harnessNode, registryNode, owner = byID[relaydFleetHarness], byID[relaydFleetRegistry], byID[relaydFleetOwner]
		log.Printf("%s: nodes %s, environment %s (owner %s), executor via %s, harness via %s", rc.name,
			strings.Join(addrs, " "), envID, relaydFleetOwner, relaydFleetRegistry, relaydFleetHarness)
	}
	codexToken := setup.tokens["codex"]
	if rc.fleet {
		// Every node sees every other before the executor comes: the placement is then the
		// same on all of them (right after a start a node's view is itself alone).
		for _, n := range nodes {
			if err := relaydAwaitLive(ctx, n.url, relaydFleetIDs, relaydStartWait); err != nil {
				return fail("the fleet's nodes see each other", err)
			}
		}
	}

	// The executor, registered through registryNode.
	exe, err := startRelaydExecutor(cfg, log, rc.executor, dir, workdir, registryNode.url, envID, setup.tokens["executors"], setup.ca)
	if err != nil {
		return fail("start the executor", err)
	}
	defer exe.Stop()
	took, bundle, err := relaydAwaitServed(ctx, setup.client, harnessNode.url, envID, codexToken, relaydStartWait, relaydOnAddr(owner.addr))
	if err != nil {
		b, _ := os.ReadFile(exe.log)
		return fail("executor registers with `exec-server relay`", fmt.Errorf("%v; executor log: %s", err, logTail(string(b))))
	}
	name := fmt.Sprintf("executor registered with `exec-server relay` (a connect answered 200 after %.2f s)", took.Seconds())
	if rc.fleet {
		name = fmt.Sprintf("placement: %s, registered through %s, is held by %s, the node §12.7's hash names; a connect asked of %s names %s's rendezvous (after %.2f s)",
			envID, relaydFleetRegistry, relaydFleetOwner, relaydFleetHarness, relaydFleetOwner, took.Seconds())
	}
	out = append(out, stepResult{Name: name, OK: true, Detail: bundle})

	// The breaks, and what they measured.
	var measured []stepResult
	measure := func(what string, d time.Duration, err error) {
		r := stepResult{Name: fmt.Sprintf("%s: %.2f s (bound %v)", what, d.Seconds(), relaydRegisterBound), OK: err == nil && d <= relaydRegisterBound}
		if err != nil {
			r.Name, r.Detail = what, err.Error()
		}
		log.Printf("%s: %s", rc.name, r.Name)
		measured = append(measured, r)
	}
	var breaks []func() string
	var breakAt []time.Time
	var breakNotes []string
	began := func(note string) { breakAt, breakNotes = append(breakAt, time.Now()), append(breakNotes, note) }
	if !rc.fleet {
		breaks = append(breaks, func() string {
			n := nodes[0]
			began("relay killed and restarted")
			n.kill()
			if err := n.start(); err != nil {
				measure("the relay started again on its address", 0, err)
				return "the relay was killed (SIGKILL) and failed to start again"
			}
			d, _, err := relaydAwaitServed(ctx, setup.client, n.url, envID, codexToken, 4*relaydRegisterBound, relaydOnAddr(n.addr))
			measure("relay killed (SIGKILL) and restarted on its address: the executor registered again after the restart", d, err)
			return "the relay was killed (SIGKILL) and started again on its address"
		})
	} else {
		breaks = append(breaks, func() string {
			began(owner.id + " killed")
			owner.kill()
			t0 := time.Now()
			down := relaydAwaitDown(ctx, harnessNode.url, owner.id, 10*time.Second)
			survivors := []string{relaydFleetHarness, relaydFleetRegistry}
			next := byID[relaydOwner(survivors, envID)]
			// Codex's own executor is not expected on a survivor (docs/remote.md §12.7): one
			// bound shows it; ours get four, to say how late they were if they were.
			limit := 4 * relaydRegisterBound
			if rc.executor == "ref" {
				limit = relaydRegisterBound
			}
			_, u, err := relaydAwaitServed(ctx, setup.client, harnessNode.url, envID, codexToken, limit, relaydOnAddr(next.addr))
			d := time.Since(t0)
			measure(fmt.Sprintf("%s (owner of %s) killed (SIGKILL): %s saw it down after %s; the executor registered on the survivor %s",
				owner.id, envID, relaydFleetHarness, down, next.id), d, err)
			log.Printf("%s: after the kill the bundle names %s", rc.name, u)
			return owner.id + ", the node owning the environment, was killed (SIGKILL)"
		}, func() string {
			began(owner.id + " restarted")
			t0 := time.Now()
			if err := owner.start(); err != nil {
				measure(owner.id+" started again", 0, err)
				return owner.id + " failed to start again"
			}
			_, _, err := relaydAwaitServed(ctx, setup.client, harnessNode.url, envID, codexToken, relaydBackWait, relaydOnAddr(owner.addr))
			d := time.Since(t0)
			r := stepResult{Name: fmt.Sprintf("%s started again: %s moved back to it and was registered there after %.2f s", owner.id, envID, d.Seconds()), OK: err == nil}
			if err != nil {
				r.Detail = err.Error()
			}
			log.Printf("%s: %s", rc.name, r.Name)
			measured = append(measured, r)
			return owner.id + " was started again on its address"
		})
	}

	turnStart := len(out)
	harnessEnv := []string{
		// §12.1, on the Codex host: the three variables, and nothing else about the relay.
		"CODEX_EXEC_SERVER_NOISE_REGISTRY_URL=" + harnessNode.url,
		"CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID=" + envID,
		"CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN=" + codexToken,
	}
	if setup.ca != "" {
		// §12.1 with a private CA. CODEX_CA_CERTIFICATE is not enough: 0.171 trusts it for
		// the registry's HTTPS but not for the rendezvous websocket (checked first).
		out = append(out, relaydCAVariableResult(ctx, cfg, log, m, filepath.Join(dir, "ca-variable"), workdir, harnessEnv, setup.ca))
		harnessEnv = append(harnessEnv, "SSL_CERT_FILE="+setup.bundle)
	}
	out = append(out, runHarness(ctx, cfg, log, m.mode, dir, workdir, m.label(rc.name), harnessEnv, func(s *scenario) {
		s.reference = rc.executor == "ref"
		if exe.proxy != nil {
			s.wire = exe.proxy.Messages // the forward's side of each stream, in clear text
		}
		s.breaks = breaks
		s.afterBreakTurn = func(i int) {
			r := stepResult{Name: fmt.Sprintf("the turn after break %d (%s) ended %.2f s after the break began", i+1, breakNotes[i], time.Since(breakAt[i]).Seconds()), OK: true}
			log.Printf("%s: %s", rc.name, r.Name)
			measured = append(measured, r)
		}
	})...)
	if rc.executor == "ref" && rc.fleet {
		// docs/remote.md §12.7: the reference executor retries the dead node's URL for ever
		// without registering again, so its environment moves only when the node comes back.
		for i := turnStart; i < len(out); i++ {
			if !out[i].OK && strings.Contains(out[i].Name, "killed") {
				out[i].Skip = true
				out[i].Detail = "the reference executor does not register again after an unanswered dial (docs/remote.md §12.7): " + out[i].Detail
			}
		}
		for i := range measured {
			if !measured[i].OK && strings.Contains(measured[i].Name, "killed") {
				measured[i].Skip = true
				measured[i].Detail = "the reference executor does not register again after an unanswered dial (docs/remote.md §12.7): " + measured[i].Detail
			}
		}
	}
	out = append(out, measured...)
	if exe.proxy != nil {
		writeWire(filepath.Join(dir, "wire.jsonl"), exe.proxy.Messages())
	}
	if exe.exe.Exited() {
		out = append(out, stepResult{Name: "executor still running after the scenario", Detail: "exited; see " + exe.log})
	}
	for _, n := range nodes {
		if l := n.logs(); strings.Contains(l, "panic") {
			out = append(out, stepResult{Name: "relay " + n.id + " logged no panic", Detail: logTail(l)})
		}
	}
	return out
}

// relaydAwaitLive waits until the node at base counts every one of want as live.
func relaydAwaitLive(ctx context.Context, base string, want []string, limit time.Duration) error {
	start := time.Now()
	c := &http.Client{Timeout: time.Second}
	var live []string
	for time.Since(start) < limit && ctx.Err() == nil {
		if resp, err := c.Get(base + "/readyz"); err == nil {
			var v struct {
				Live []string `json:"live_peers"`
			}
			json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if live = v.Live; len(live) == len(want) {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond) // the probe has no event to wait on from outside
	}
	return fmt.Errorf("%s sees %v live after %v, want %v", base, live, limit, want)
}

// relaydAwaitDown waits until the node at base no longer counts peer among its live peers
// and returns how long that took, as text ("not within …" if it did not).
func relaydAwaitDown(ctx context.Context, base, peer string, limit time.Duration) string {
	start := time.Now()
	c := &http.Client{Timeout: time.Second}
	for time.Since(start) < limit && ctx.Err() == nil {
		resp, err := c.Get(base + "/readyz")
		if err == nil {
			var v struct {
				Live []string `json:"live_peers"`
			}
			json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			gone := true
			for _, p := range v.Live {
				if p == peer {
					gone = false
				}
			}
			if gone {
				return fmt.Sprintf("%.2f s", time.Since(start).Seconds())
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "not within " + limit.String()
}

// runRelaydACL shows the refusals of docs/remote.md §12.3 as the real clients meet them: a
// harness whose token may not connect to the environment (another environment's grant, an
// unknown token, a per-environment token of another environment), against a per-environment
// token that may (the control); and an executor whose token may not register the id, ours
// and the reference's.
func runRelaydACL(ctx context.Context, cfg config, log *eventLog, m modeRun) []stepResult {
	var out []stepResult
	fail := func(name string, err error) []stepResult {
		return append(out, stepResult{Name: name, Detail: err.Error()})
	}
	dir := filepath.Join(m.dir, "relayd-acl")
	workdir := filepath.Join(dir, "work")
	if err := os.MkdirAll(workdir, 0o700); err != nil {
		return fail("setup", err)
	}
	log.Printf("==== relayd-acl, sandbox mode %s", m.mode)
	setup, err := writeRelaydSetup(filepath.Join(dir, "relay"), nil, false)
	if err != nil {
		return fail("write the relay's configuration (docs/remote.md §12.1)", err)
	}
	node := &relaydNode{addr: "127.0.0.1:0", bin: cfg.ours, setup: setup, dir: dir}
	if err := node.start(); err != nil {
		return fail("start `exec-server relay`", err)
	}
	defer node.c.Stop()

	exe, err := startRelaydExecutor(cfg, log, "ours", dir, workdir, node.url, relaydEnvID, setup.tokens["executors"], "")
	if err != nil {
		return fail("start the executor", err)
	}
	defer exe.Stop()
	if _, _, err := relaydAwaitServed(ctx, setup.client, node.url, relaydEnvID, setup.tokens["codex"], relaydStartWait, relaydOnAddr(node.addr)); err != nil {
		return fail("executor registers with `exec-server relay`", err)
	}

	// Per-environment harness tokens, minted as §12.2 says.
	mint := func(envID string) (string, error) {
		cmd := exec.Command(cfg.ours, "relay", "token", "--config", setup.config, "--environment-id", envID, "--role", "harness", "--bare")
		b, err := cmd.Output()
		return strings.TrimSpace(string(b)), err
	}
	good, err := mint(relaydEnvID)
	if err != nil {
		return fail("exec-server relay token --role harness --bare", err)
	}
	otherEnv, err := mint("build-2")
	if err != nil {
		return fail("exec-server relay token --role harness --bare", err)
	}

	// The relay names a minted token by its environment and role and a short hash of the
	// token (each is a scope of its own, docs/remote.md §12.5).
	sum := sha256.Sum256([]byte(otherEnv))
	otherName := fmt.Sprintf("env:harness:build-2:%x", sum[:6])
	harnesses := []struct {
		what, token, want string // want: "ready", or the HTTP status the relay must have answered
		msg               string // the relay's refusal message (docs/remote.md §12.3)
	}{
		{"a per-environment harness token for " + relaydEnvID + " (`relay token --role harness --bare`)", good, "ready", ""},
		{"token other-codex (connect other-* only)", setup.tokens["other-codex"], "403", "token other-codex may not connect to environment " + relaydEnvID},
		{"a per-environment harness token for build-2", otherEnv, "403", "token " + otherName + " may not connect to environment " + relaydEnvID},
		{"an unknown token", "realcodex-unknown-" + randomHex(16), "401", "missing, unknown or expired bearer token"},
	}
	for i, h := range harnesses {
		out = append(out, relaydHarnessACL(ctx, cfg, log, m, filepath.Join(dir, fmt.Sprintf("harness-%d", i+1)), workdir, node.url, h.what, h.token, h.want, h.msg))
	}

	// Executors whose token may not register the id: the relay answers 403, a permanent
	// refusal (docs/remote.md §2.4), so the process must exit at once.
	for _, kind := range []string{"ours", "ref"} {
		out = append(out, relaydExecutorACL(ctx, cfg, log, filepath.Join(dir, "refused-executor-"+kind), workdir, node, kind, setup))
	}
	return out
}

// relaydHarnessACL starts the real app-server with bearer, reads environment/status, and, if
// the environment is not ready, starts a thread on it and runs a turn whose one command
// would write a file in the workspace: what a user of a refused token meets. want is
// "ready", or the HTTP status the relay must have refused the connect with; then
// environment/status must carry the relay's refusal (status and message), the command must
// not have run (no file on the host), and the turn's tool output must carry the refusal.
func relaydHarnessACL(ctx context.Context, cfg config, log *eventLog, m modeRun, dir, workdir, regURL, what, bearer, want, relayMsg string) stepResult {
	r := stepResult{Name: "harness with " + what}
	c, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	app, model, res, err := relaydStatus(c, cfg, log, m, dir, []string{
		"CODEX_EXEC_SERVER_NOISE_REGISTRY_URL=" + regURL,
		"CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID=" + relaydEnvID,
		"CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN=" + bearer,
	})
	if app == nil {
		r.Detail = err.Error()
		return r
	}
	defer model.Close()
	defer app.Close()
	answer := string(res)
	if err != nil {
		answer = err.Error()
	}
	if want == "ready" {
		r.Name += ": environment/status is ready"
		r.OK = err == nil && jsonHas(res, "status", "ready")
		r.Detail = answer
		log.Printf("relayd-acl: harness with %s: environment/status %s", what, answer)
		return r
	}
	var status struct{ Status, Error string }
	json.Unmarshal(res, &status)

	// What the user meets next: a thread on the environment, and a turn with a command.
	marker := "realcodex-acl-" + randomHex(4)
	probe := filepath.Join(workdir, marker+".txt")
	tres, err := app.Call(c, "thread/start", map[string]any{"cwd": workdir,
		"environments":   []map[string]string{{"environmentId": harnessEnvID, "cwd": workdir}},
		"approvalPolicy": "never", "sandbox": m.mode, "ephemeral": true})
	var thread struct {
		Thread struct{ ID string } `json:"thread"`
	}
	json.Unmarshal(tres, &thread)
	toolOut := "(no turn: thread/start " + clip(string(tres), 200) + fmt.Sprint(err) + ")"
	if err == nil && thread.Thread.ID != "" {
		s := &scenario{app: app, log: log, model: model, mode: m.mode, workdir: workdir, marker: marker}
		s.agentTurn(c, thread.Thread.ID, "refused turn", []agentStep{{Name: "write a file", Call: cmdCall("echo " + marker + " > " + probe),
			Check: func(string) error { return nil }}}, turnSandboxPolicy(m.mode))
		if _, _, outs := model.Result(); len(outs) > 0 {
			toolOut = outs[0]
		}
	}
	_, ranErr := os.Stat(probe)
	log.Printf("relayd-acl: harness with %s: environment/status %s; the turn's tool output: %s", what, answer, toolOut)

	r.Name += fmt.Sprintf(": environment/status %q, error %q; a turn's command did not run, its tool output: %q",
		status.Status, status.Error, clip(strings.TrimSpace(toolOut), 300))
	var bad []string
	if status.Status == "ready" || !strings.Contains(status.Error, "("+want+" ") || !strings.Contains(status.Error, relayMsg) {
		bad = append(bad, fmt.Sprintf("environment/status does not carry the relay's %s (%q)", want, relayMsg))
	}
	if ranErr == nil {
		bad = append(bad, "the command ran: "+probe+" exists on the host")
		os.Remove(probe)
	}
	if strings.Contains(toolOut, marker) && !strings.Contains(toolOut, "echo "+marker) {
		bad = append(bad, "the tool output shows the command's output")
	}
	r.OK = len(bad) == 0
	r.Detail = strings.Join(bad, "; ")
	return r
}

// relaydStatus starts the real app-server (a fresh CODEX_HOME in dir, the mock model) with
// env and asks environment/status of the exec-server environment. app is nil if it could
// not be started and initialised (err says why); else the caller closes app and model, and
// err is environment/status's.
func relaydStatus(ctx context.Context, cfg config, log *eventLog, m modeRun, dir string, env []string) (*appServer, *mockModel, json.RawMessage, error) {
	model, err := startMockModel(log)
	if err != nil {
		return nil, nil, nil, err
	}
	home := filepath.Join(dir, "codex-home")
	if err := codexHomeConfig(home, model.BaseURL(), m.mode); err != nil {
		model.Close()
		return nil, nil, nil, err
	}
	app, err := startAppServer(log, "relayd app", cfg.codex, append([]string{"CODEX_HOME=" + home, "CODEX_API_KEY=sk-unused", "RUST_LOG=info"}, env...),
		filepath.Join(dir, "app-server.log"))
	if err != nil {
		model.Close()
		return nil, nil, nil, err
	}
	if err := app.initialize(ctx); err != nil {
		app.Close()
		model.Close()
		return nil, nil, nil, fmt.Errorf("initialize: %w", err)
	}
	res, err := app.Call(ctx, "environment/status", map[string]string{"environmentId": harnessEnvID})
	return app, model, res, err
}

// relaydCAVariableResult pins what docs/remote.md §12.1 says of a private CA: with
// CODEX_CA_CERTIFICATE alone, 0.171 reaches the registry over HTTPS (it is given the
// rendezvous URL) but its websocket to the rendezvous refuses the certificate, so Codex needs
// SSL_CERT_FILE.
func relaydCAVariableResult(ctx context.Context, cfg config, log *eventLog, m modeRun, dir, workdir string, env []string, ca string) stepResult {
	r := stepResult{Name: "Codex with CODEX_CA_CERTIFICATE alone: the registry's HTTPS is trusted, the rendezvous websocket is not (UnknownIssuer), as docs/remote.md §12.1 says"}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		r.Detail = err.Error()
		return r
	}
	c, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	app, model, res, err := relaydStatus(c, cfg, log, m, dir, append(append([]string{}, env...), "CODEX_CA_CERTIFICATE="+ca))
	if app == nil {
		r.Detail = err.Error()
		return r
	}
	defer model.Close()
	defer app.Close()
	var st struct{ Status, Error string }
	json.Unmarshal(res, &st)
	log.Printf("relayd-tls: CODEX_CA_CERTIFICATE alone: environment/status %s (%v)", res, err)
	r.OK = err == nil && st.Status != "ready" && strings.Contains(st.Error, "wss://") && strings.Contains(st.Error, "UnknownIssuer")
	if !r.OK {
		r.Detail = fmt.Sprintf("environment/status %s (%v)", res, err)
	}
	return r
}

// relaydLogLine returns the first line of logText that holds every one of want, or "".
func relaydLogLine(logText string, want ...string) string {
	for _, l := range strings.Split(logText, "\n") {
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// relaydExecutorACL starts kind's executor with token other-executors (register other-*)
// for build-acl-denied: the relay must refuse it 403, the executor must exit, and the relay
// must hold no registration of the id.
func relaydExecutorACL(ctx context.Context, cfg config, log *eventLog, dir, workdir string, node *relaydNode, kind string, setup *relaydSetup) stepResult {
	const envID = "build-acl-denied"
	r := stepResult{Name: kind + " executor with token other-executors (register other-*) registering " + envID}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		r.Detail = err.Error()
		return r
	}
	e, err := startRelaydExecutor(cfg, log, kind, dir, workdir, node.url, envID, setup.tokens["other-executors"], "")
	if err != nil {
		r.Detail = err.Error()
		return r
	}
	defer e.Stop()
	start := time.Now()
	exited := false
	select {
	case <-e.exe.done:
		exited = true
	case <-time.After(relaydExitWait):
	case <-ctx.Done():
	}
	took := time.Since(start)
	code := -1
	if exited {
		code = e.exe.cmd.ProcessState.ExitCode()
	}
	b, _ := os.ReadFile(e.log)
	line := relaydLogLine(string(b), "403")
	relayLine := relaydLogLine(node.logs(), "relay: refused", "token=other-executors", "environment_id="+envID, "action=register")
	status, body, _ := relaydConnect(setup.client, node.url, envID, setup.tokens["codex"])
	registered := status == http.StatusOK
	log.Printf("relayd-acl: %s executor refused: exited %v (status %d) after %.2f s; log: %s; connect for %s: %d %s", kind, exited, code, took.Seconds(), line, envID, status, body)
	if i := strings.Index(relayLine, "relay: refused"); i > 0 {
		relayLine = strings.Replace(relayLine[i:], `refused"`, "refused", 1)
	}
	r.Name += fmt.Sprintf(": refused 403, exit status %d after %.2f s; it logged %q; the relay logged %q", code, took.Seconds(), clip(line, 300), relayLine)
	var bad []string
	if !exited || code == 0 {
		bad = append(bad, fmt.Sprintf("still running after %v, or exited 0", relaydExitWait))
	}
	if line == "" {
		bad = append(bad, "no log line naming the 403")
	}
	if relayLine == "" {
		bad = append(bad, "the relay logged no refusal naming the token, the environment and the action")
	}
	if registered {
		bad = append(bad, "the relay holds a registration of "+envID)
	}
	r.OK = len(bad) == 0
	if !r.OK {
		r.Detail = strings.Join(bad, "; ") + "; log: " + logTail(string(b))
	}
	return r
}

// relaydCheckNames are the -checks names of this file: each relayd check and relayd-acl.
func relaydCheckNames() []string {
	var names []string
	for _, rc := range relaydChecks {
		names = append(names, rc.name)
	}
	return append(names, "relayd-acl")
}
