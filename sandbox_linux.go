package main

// The Linux sandbox (docs/sandbox.md §2): a sandboxed process runs inside the sandbox stage, a
// re-exec of this binary (/proc/self/exe, dispatched on argv before anything else runs) that
// confines itself and then starts the command.
//
//	server ── /proc/self/exe __exec-server-sandbox ──▶ stage ──fork+exec──▶ command
//	           fd 3: stageConfig (JSON), read to EOF
//	           fd 4: status: EOF once the command runs, or one line, the error
//
// Without a pid namespace of its own the stage is two processes, so that nothing the command
// starts outlives it (runSandboxStage):
//
//	server ──▶ anchor ──exec, setsid──▶ supervisor (subreaper) ──fork+exec──▶ command
//	           the server's child:     confines itself, forks the command, kills every
//	           what it signals and     descendant when the command exits or the anchor
//	           kills                   dies (its Pdeathsig)
//
//	mechanism   when                              the stage
//	namespaces  user namespaces work              user+mount+ipc(+pid)(+net) namespaces: the
//	                                              file system view of sandbox_mount_linux.go,
//	                                              loopback up, then no_new_privs, every
//	                                              capability dropped, seccomp; as pid 1 it
//	                                              forks the command, forwards signals, reaps
//	landlock    no user namespaces, Landlock      no_new_privs, Landlock, seccomp on its
//	                                              locked thread, then forks the command
//	none        neither                           a profile that confines files fails closed
//
// A profile that only takes the network away (external, or an unrestricted file system) gets
// the seccomp filter alone, under the anchor and supervisor; one that restricts nothing runs
// as is. Every stage joins a session keyring of its own and caps its tasks where it has a
// user namespace of its own (capProcesses, capPidNamespace). Every
// per-thread restriction (capabilities, no_new_privs, Landlock) is made on the stage's one
// locked thread, and the command is forked or exec'd from that thread, so it inherits them
// whatever Go does with its other threads.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// sandboxStageArg is argv[1] of the sandbox stage.
const sandboxStageArg = "__exec-server-sandbox"

// sandboxStageNetworkArg is argv[2] of a stage whose command has the network: other
// exec-servers of the host, and this one once the stage is unregistered, tell from it that
// connections must be checked (peer_linux.go).
const sandboxStageNetworkArg = "network"

// stageArgv is a stage's argv, which nothing below the stage can change.
func stageArgv(network bool) []string {
	if network {
		return []string{"exec-server-sandbox", sandboxStageArg, sandboxStageNetworkArg}
	}
	return []string{"exec-server-sandbox", sandboxStageArg}
}

// The stage's descriptors beyond 0, 1, 2.
const (
	stageConfigFD = 3
	stageStatusFD = 4
	// stageBridgeFD is the unix socket on which a stage with Bridge sends its listeners
	// (docs/network.md §4).
	stageBridgeFD = 5
)

// maxStageConfig bounds the configuration the stage reads.
const maxStageConfig = 16 << 20

// stageFailureExit is the stage's exit status when it could not start the command.
const stageFailureExit = 127

// sandboxMechanism is how this host confines files (the table above).
type sandboxMechanism int

const (
	mechanismNone sandboxMechanism = iota
	mechanismLandlock
	mechanismNamespaces
)

func (m sandboxMechanism) String() string {
	switch m {
	case mechanismNamespaces:
		return "namespaces"
	case mechanismLandlock:
		return "landlock"
	}
	return "none"
}

// stageConfig is what the server tells the stage, on fd 3.
type stageConfig struct {
	Profile    *sandboxProfile `json:"profile"`
	Namespaces bool            `json:"namespaces"` // the stage runs in new namespaces
	PidNS      bool            `json:"pidns"`      // … including a pid namespace: the stage is pid 1
	Landlock   bool            `json:"landlock"`
	Seccomp    seccompMode     `json:"seccomp"`
	TTY        bool            `json:"tty"`
	Dir        string          `json:"dir"`
	Path       string          `json:"path"`
	Argv       []string        `json:"argv"`
	Probe      bool            `json:"probe,omitempty"` // confine, then exit 0 instead of running a command
	// MaxProcs caps the tasks of the sandbox (RLIMIT_NPROC in its user namespace); 0: no cap.
	MaxProcs int `json:"maxProcs,omitempty"`
	// Anchor is set in the configuration the anchor stage gives the supervisor it starts:
	// the anchor's pid (stageAnchor).
	Anchor int `json:"anchor,omitempty"`
	// Foreground: the command stays in the stage's process group, on the caller's terminal
	// (`exec-server sandbox`), instead of leading a group or session of its own.
	Foreground bool  `json:"foreground,omitempty"`
	ShmSize    int64 `json:"shmSize,omitempty"` // bytes of /dev/shm; 0: defaultShmSize
	// Env is the command's environment, for a warm stage, whose own is empty
	// (sandbox_pool_linux.go); a cold stage's command has the stage's. KEY=value entries each
	// ended by a NUL, as bytes, not strings: JSON would replace what is not UTF-8, which
	// execve passes as it is. nil: the stage's own.
	Env []byte `json:"env,omitempty"`
	// Bridge names the proxy listeners on the server's loopback ("127.0.0.1:P") that the
	// command reaches through a listener in its network namespace (docs/network.md §4).
	Bridge []string `json:"bridge,omitempty"`
	// Transparent: every TCP connection of the command goes to the proxy too (docs/network.md §7).
	Transparent bool `json:"transparent,omitempty"`
}

// sandboxer is a server's sandbox: the mechanism this host offers (probed once) and the
// mount points it made for protected names that did not exist.
type sandboxer struct {
	isolatePids bool   // --linux-sandbox-pid-namespace isolate
	shmSize     int64  // --linux-sandbox-shm-size; 0: defaultShmSize
	force       string // a mechanism to use instead of probing (tests, and `sandbox --mechanism`)
	maxProcs    int    // --linux-sandbox-max-processes; 0: defaultSandboxMaxProcesses

	once     sync.Once
	mech     sandboxMechanism
	probeErr error

	synthetic syntheticDirs

	warm    stagePool  // a stage forked ahead of need (sandbox_pool_linux.go)
	live    liveStages // network-enabled stages running now, refused as peers (peer_linux.go)
	secrets []string   // files the server holds as secrets, denied to every stage (peer_linux.go)

	// bridgeFault, in tests only, fails a routed stage's bridge on the server's side once its
	// listeners arrived, as net.FileListener would out of descriptors. Nil outside tests.
	bridgeFault func() error
}

// newSandboxer makes a server's sandboxer. pidNamespace is isolate or inherit; force is "",
// "namespaces", "landlock" or "none".
func newSandboxer(pidNamespace, force string) (*sandboxer, error) {
	switch pidNamespace {
	case "", "isolate", "inherit":
	default:
		return nil, fmt.Errorf("invalid --linux-sandbox-pid-namespace %q: want isolate or inherit", pidNamespace)
	}
	switch force {
	case "", "namespaces", "landlock", "none":
	default:
		return nil, fmt.Errorf("invalid sandbox mechanism %q: want namespaces, landlock or none", force)
	}
	return &sandboxer{isolatePids: pidNamespace != "inherit", force: force}, nil
}

// limitShm sets the size of each sandbox's /dev/shm (--linux-sandbox-shm-size), in bytes.
func (s *sandboxer) limitShm(bytes int64) { s.shmSize = bytes }

// defaultSandboxMaxProcesses is --linux-sandbox-max-processes' default: the tasks (processes
// and threads, the stage's included) one sandbox may have at once. A build (make -j, a test
// runner, cargo's rustc and linker threads) stays far below it; a fork bomb stops there, at
// 3% of the kernel's default pid_max (32,768), so a few sandboxes at their cap together still
// leave the host room.
const defaultSandboxMaxProcesses = 1024

// stageThreadSlack is how far above the command's cap the stage's own limit lies: its Go
// runtime starts threads while it supervises, and must not fail to (a runtime that cannot
// start a thread dies) when the command has used up its cap.
const stageThreadSlack = 64

// setMaxProcesses sets --linux-sandbox-max-processes: at least 1.
func (s *sandboxer) setMaxProcesses(n int) error {
	if n <= 0 {
		return fmt.Errorf("invalid --linux-sandbox-max-processes %d: want at least 1", n)
	}
	s.maxProcs = n
	return nil
}

// maxProcesses is the cap in force.
func (s *sandboxer) maxProcesses() int {
	if s.maxProcs > 0 {
		return s.maxProcs
	}
	return defaultSandboxMaxProcesses
}

// mechanism is the mechanism in force, probed on first use: a stage is started in new
// namespaces and builds a read-only view; if that fails, Landlock is used if the kernel has it.
func (s *sandboxer) mechanism() sandboxMechanism {
	s.once.Do(func() {
		switch s.force {
		case "namespaces":
			s.mech = mechanismNamespaces
			return
		case "landlock":
			s.mech = mechanismLandlock
			return
		case "none":
			return
		}
		if s.probeErr = probeNamespaces(); s.probeErr == nil {
			s.mech = mechanismNamespaces
		} else if landlockABI() > 0 {
			s.mech = mechanismLandlock
		}
	})
	return s.mech
}

// enforces reports whether this host can confine files at all.
func (s *sandboxer) enforces() bool { return s.mechanism() != mechanismNone }

// describe is the start-up log line's text and `sandbox --status`'s answer.
func (s *sandboxer) describe() string {
	switch m := s.mechanism(); m {
	case mechanismNamespaces:
		return "namespaces (user, mount, pid, net) + seccomp"
	case mechanismLandlock:
		why := ""
		if s.probeErr != nil {
			why = fmt.Sprintf(" (user namespaces unavailable: %v)", s.probeErr)
		}
		return fmt.Sprintf("landlock ABI %d + seccomp%s", landlockABI(), why)
	default:
		why := "forced"
		if s.probeErr != nil {
			why = fmt.Sprintf("user namespaces unavailable (%v) and no Landlock", s.probeErr)
		}
		return "none: " + why + "; requests that confine files are refused"
	}
}

// probeNamespaces starts a stage that confines itself as a read-only profile would and exits.
func probeNamespaces() error {
	spec := &launchSpec{path: "/", argv: []string{"probe"}, dir: "/"}
	cfg := stageConfig{
		Profile:    &sandboxProfile{Kind: profileManaged, FullRead: true},
		Namespaces: true, PidNS: true, Seccomp: seccompNetwork, Dir: "/", Probe: true,
	}
	st := &sandboxStage{cfg: cfg}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	attr := &os.ProcAttr{Dir: "/", Files: []*os.File{devnull, devnull, devnull}, Sys: childSysProcAttr(false)}
	if err := st.prepare(attr, spec); err != nil {
		return err
	}
	proc, err := os.StartProcess(stageExe, []string{"exec-server-sandbox", sandboxStageArg}, attr)
	st.closeChildEnds()
	if err != nil {
		st.closeOurEnds()
		return err
	}
	err = st.await()
	ps, werr := proc.Wait()
	switch {
	case err != nil:
		return err
	case werr != nil:
		return werr
	case !ps.Success():
		return fmt.Errorf("probe stage: %v", ps)
	}
	return nil
}

// stageExe is what the server runs as the stage: this very binary, never a name on PATH.
const stageExe = "/proc/self/exe"

// confine rewrites spec to run under profile p, and says which sandbox it runs in
// (process/start's sandboxType). Any sandbox object reports linuxSeccomp, as the reference
// does, even one that restricts nothing.
func (s *sandboxer) confine(spec *launchSpec, p *sandboxProfile) (sandboxType string, err error) {
	if p == nil {
		return "none", nil
	}
	if p.Unenforceable != "" {
		return "", errInvalidParams("sandbox intent cannot be enforced on this executor: %s", p.Unenforceable)
	}
	routed := len(spec.bridge) > 0
	if routed {
		// The command's network is its namespace's lo and the bridge, whatever the profile's
		// network (docs/network.md §4).
		q := *p
		q.Network = false
		p = &q
	}
	files, network := p.confinesFiles(), p.restrictsNetwork()
	if !files && !network {
		return "linuxSeccomp", nil
	}
	if files {
		p = s.denySecrets(p)
	}
	cfg := stageConfig{Profile: p, TTY: spec.tty, Dir: spec.dir, Path: spec.path, Argv: spec.argv, ShmSize: s.shmSize}
	switch {
	case network:
		cfg.Seccomp = seccompNetwork
	default:
		cfg.Seccomp = seccompVsock
	}
	if files {
		switch s.mechanism() {
		case mechanismNamespaces:
			cfg.Namespaces, cfg.PidNS = true, s.isolatePids
			cfg.MaxProcs = s.maxProcesses()
		case mechanismLandlock:
			if _, err := landlockRulesFor(p); err != nil {
				return "", errInvalidParams("sandbox intent cannot be enforced on this executor: %v", err)
			}
			cfg.Landlock = true
			if !p.FullWrite && len(p.Write) == 0 {
				// Nothing is writable, yet Landlock leaves chmod, utimes and xattrs alone.
				cfg.Seccomp |= seccompNoMetadata
			}
		default:
			return "", errInvalidParams("sandbox intent cannot be enforced on this executor: %s", s.describe())
		}
	}
	st := &sandboxStage{cfg: cfg, live: &s.live, pool: &s.warm}
	if routed {
		if spec.route != nil {
			st.proxy = spec.route.proxy
		}
		st.fault = s.bridgeFault
		if !files && s.mechanism() == mechanismNamespaces {
			// Only the network namespace is wanted: the file system stays the host's.
			q := *p
			q.FullRead, q.FullWrite = true, true
			st.cfg.Profile = &q
			st.cfg.Namespaces, st.cfg.PidNS = true, s.isolatePids
			st.cfg.MaxProcs = s.maxProcesses()
		}
		transparent := spec.route != nil && spec.route.transparent != nil
		if err := st.bridgeTo(spec.bridge...); err != nil {
			if transparent {
				return "", errInvalidParams("%s: %v", errTransparentNoSandbox, err)
			}
			return "", errInvalidParams("enforceManagedNetwork: %v", err)
		}
		if transparent {
			if err := st.transparentTo(spec.route.transparent); err != nil {
				return "", errInvalidParams("%v", err)
			}
		}
	}
	if cfg.Namespaces {
		if st.release, err = s.synthetic.acquire(p.Protected); err != nil {
			return "", errInternal("sandbox: %v", err)
		}
	}
	spec.stage = st
	spec.path, spec.argv = stageExe, stageArgv(!p.restrictsNetwork())
	return "linuxSeccomp", nil
}

// sandboxStage is one stage being started: its configuration, and the pipes that carry it
// and its verdict.
type sandboxStage struct {
	cfg       stageConfig
	release   func()      // gives back the synthetic mount points, once the stage has exited
	live      *liveStages // where started registers a network-enabled stage (peer_linux.go)
	pool      *stagePool  // where a warm stage may be taken (sandbox_pool_linux.go)
	childEnds []*os.File
	config    *os.File // our end of fd 3
	status    *os.File // our end of fd 4
	payload   []byte
	bridge    *os.File     // our end of fd 5, with Bridge (docs/network.md §4)
	bridges   []*netBridge // serving the listeners the stage sent, until exited
	proxy     *netProxy    // the process's proxy, handed the bridged connections; nil: dial
	fault     func() error // sandboxer.bridgeFault

	// transparent serves the transparent listener, with Transparent (docs/network.md §7).
	transparent *netProxy
}

// bridgeTo makes the command reach the proxy listeners addrs (on the server's loopback)
// through listeners in its network namespace, under seccompProxyRouted (docs/network.md
// §4). Only a namespace stage with a pid namespace of its own, whose command has no network
// of its own, can: anywhere else it fails closed (confine gives a routed command such a
// stage where the host allows it).
func (st *sandboxStage) bridgeTo(addrs ...string) error {
	switch {
	case st == nil || !st.cfg.Profile.restrictsNetwork():
		return errors.New("sandbox: the managed network bridge needs a stage whose command has no network of its own")
	case !st.cfg.Namespaces || !st.cfg.PidNS:
		return errors.New("sandbox: the managed network bridge needs the namespace sandbox with a pid namespace of its own (not --linux-sandbox-pid-namespace inherit, not the Landlock fallback); refusing rather than run the process with a proxy it cannot reach")
	case len(addrs) == 0 || len(addrs) > netBridgeMaxListeners:
		return fmt.Errorf("sandbox: %d proxy listeners to bridge", len(addrs))
	}
	st.cfg.Bridge = addrs
	st.cfg.Seccomp = seccompProxyRouted | st.cfg.Seccomp&seccompNoMetadata
	return nil
}

// prepare adds the stage's descriptors and namespaces to attr. A nil stage changes nothing.
func (st *sandboxStage) prepare(attr *os.ProcAttr, spec *launchSpec) error {
	if st == nil {
		return nil
	}
	payload, err := json.Marshal(st.cfg)
	if err != nil {
		return fmt.Errorf("sandbox: encode the stage's configuration: %w", err)
	}
	st.payload = payload
	cr, cw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	sr, sw, err := os.Pipe()
	if err != nil {
		cr.Close()
		cw.Close()
		return fmt.Errorf("sandbox: %w", err)
	}
	st.childEnds, st.config, st.status = []*os.File{cr, sw}, cw, sr
	for len(attr.Files) < stageConfigFD {
		attr.Files = append(attr.Files, nil)
	}
	attr.Files = append(attr.Files[:stageConfigFD], cr, sw)
	if len(st.cfg.Bridge) > 0 {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("sandbox: bridge socket: %w", err)
		}
		st.bridge = os.NewFile(uintptr(fds[0]), "bridge")
		theirs := os.NewFile(uintptr(fds[1]), "bridge")
		st.childEnds = append(st.childEnds, theirs)
		attr.Files = append(attr.Files, theirs)
	}
	sys := attr.Sys
	if st.cfg.Namespaces {
		stageNamespaces(sys, st.cfg.PidNS, st.cfg.Profile.restrictsNetwork())
	}
	if !st.cfg.Probe {
		// The command, the stage's child or grandchild, takes the terminal: the stage itself
		// stays out of it.
		sys.Setctty = false
	}
	return nil
}

// stageNamespaces makes sys fork a namespace stage: a user namespace mapping the server's
// user to itself, mount and IPC namespaces, and a pid and a network namespace where asked.
func stageNamespaces(sys *syscall.SysProcAttr, pidNS, newNet bool) {
	uid, gid := os.Getuid(), os.Getgid()
	sys.Cloneflags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWIPC
	if pidNS {
		sys.Cloneflags |= unix.CLONE_NEWPID
	}
	if newNet {
		sys.Cloneflags |= unix.CLONE_NEWNET
	}
	sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	sys.GidMappingsEnableSetgroups = false
	if uid != 0 {
		// Exec'ing as a non-zero uid drops the capabilities the new user namespace gave
		// the stage; it needs these to build its view and drop the rest.
		sys.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_SETPCAP}
	}
}

// close lets the warm stage go (sandbox_pool_linux.go).
func (s *sandboxer) close() {
	if s != nil {
		s.warm.close()
	}
}

// closeChildEnds closes our copies of the stage's descriptors once it has its own, and
// sends it its configuration.
func (st *sandboxStage) closeChildEnds() {
	if st == nil {
		return
	}
	for _, f := range st.childEnds {
		f.Close()
	}
	st.childEnds = nil
	if st.config != nil {
		// The pipe holds 64 KiB; a larger configuration is written as the stage reads it.
		st.config.Write(st.payload)
		st.config.Close()
		st.config = nil
	}
}

// closeOurEnds closes our ends of a stage that did not start, and gives back what confine took.
func (st *sandboxStage) closeOurEnds() {
	if st == nil {
		return
	}
	if st.config != nil {
		st.config.Close()
	}
	if st.status != nil {
		st.status.Close()
	}
	if st.bridge != nil {
		st.bridge.Close()
		st.bridge = nil
	}
	st.exited()
}

// await waits for the stage's verdict: nil once the command runs, or the error that stopped it.
func (st *sandboxStage) await() error {
	if st == nil {
		return nil
	}
	defer st.status.Close()
	bridgeErr := st.serveBridges()
	msg, err := io.ReadAll(io.LimitReader(st.status, 4096))
	switch {
	case err != nil:
		return errInternal("sandbox: read the stage's status: %v", err)
	case len(msg) == 0 && bridgeErr != nil:
		return errInternal("%v", bridgeErr)
	case len(msg) == 0:
		return nil
	}
	return errInternal("%s", strings.TrimSpace(string(msg)))
}

// serveBridges receives the listeners a stage with Bridge made in its namespace and serves
// each (docs/network.md §4): handed to the process's proxy, or spliced to the client's own
// loopback proxy. The stage sends them before it starts the command, or fails and closes
// the socket; then it waits for netBridgeServed, or the reason we could not serve them, with
// which it fails: no command ever runs with a bridge nobody serves, and process/start never
// waits for a command it will not register.
func (st *sandboxStage) serveBridges() error {
	if st.bridge == nil {
		return nil
	}
	defer func() {
		st.bridge.Close()
		st.bridge = nil
	}()
	lns, err := receiveBridgeListeners(st.bridge)
	if err != nil {
		return err
	}
	if err := st.startBridges(lns); err != nil {
		refuseBridge(st.bridge, err)
		return err
	}
	if _, err := st.bridge.Write([]byte{netBridgeServed}); err != nil {
		return fmt.Errorf("sandbox: tell the stage its bridge is served: %w", err)
	}
	if st.cfg.Transparent {
		return st.serveTransparent()
	}
	return nil
}

// startBridges serves the listeners lns (which it takes over), one per st.cfg.Bridge entry.
// What it started before a failure is closed by exited.
func (st *sandboxStage) startBridges(lns []*os.File) error {
	if len(lns) != len(st.cfg.Bridge) {
		for _, f := range lns {
			f.Close()
		}
		return fmt.Errorf("sandbox: %d bridge listeners for %d proxies", len(lns), len(st.cfg.Bridge))
	}
	for i, f := range lns {
		var b *netBridge
		var err error
		if st.fault != nil {
			err = st.fault()
		}
		if err == nil {
			b, err = startNetBridge(f, st.cfg.Bridge[i], st.proxy)
		} else {
			f.Close()
		}
		if err != nil {
			for _, f := range lns[i+1:] {
				f.Close()
			}
			return err
		}
		st.bridges = append(st.bridges, b)
	}
	return nil
}

// exited gives back what confine took for the stage, once it is gone.
func (st *sandboxStage) exited() {
	if st != nil && st.release != nil {
		st.release()
		st.release = nil
	}
	if st != nil {
		for _, b := range st.bridges {
			b.close()
		}
		st.bridges = nil
	}
}

// isSandboxStage reports whether this process was started as the sandbox stage.
func isSandboxStage() bool {
	return len(os.Args) > 1 && os.Args[1] == sandboxStageArg
}

// runSandboxStage is the stage's main. It never returns to the caller's code: it exits
// with the command's status (128+N for a death by signal N), or stageFailureExit after
// writing why to fd 4.
//
// Every stage that runs a command supervises it, so that nothing the command starts outlives
// it (docs/sandbox.md §2, "Processes"). In a pid namespace of its own the stage is pid 1: the
// kernel kills whatever is left in the namespace when it exits. Elsewhere (the server's pid
// namespace, Landlock, the network filter alone) it is two processes: the anchor, the
// server's child, which the server signals and kills, starts the supervisor, a second stage
// in a session of its own, which confines itself, forks the command and, as the subreaper of
// everything below it, kills every descendant when the command exits or the anchor dies
// (stageAnchor, stageSupervise).
func runSandboxStage() {
	runtime.LockOSThread() // every per-thread restriction is made on this thread, and the command forked from it
	// As pid 1 the stage outlives the command's start, and only this thread gives up its
	// capabilities: the Go runtime's other threads keep those the user namespace gave the
	// stage (CAP_SYS_ADMIN over the view's mounts). The command runs as the same user, so
	// /proc/1/mem, ptrace or pidfd_getfd on the stage would let it write code that one of those
	// threads runs, and remount the view read-write. Not dumpable, the stage is out of reach of
	// anything without CAP_SYS_PTRACE in its namespace. The command gets its own dumpable flag
	// back from execve. The anchor and the supervisor are kept out of reach the same way.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(os.NewFile(stageStatusFD, "status"), "sandbox: not dumpable: %v\n", err)
		exitStage(stageFailureExit)
	}
	// Nothing the stage inherited beyond 0, 1, 2 may reach the command: not fd 4 (the
	// server's wait for EOF on it would last as long as the command), and not a descriptor
	// the server itself inherited (a directory's is a way around the read-only view).
	if err := closeOnExecFrom(stageConfigFD); err != nil {
		fmt.Fprintf(os.NewFile(stageStatusFD, "status"), "sandbox: %v\n", err)
		exitStage(stageFailureExit)
	}
	status := os.NewFile(stageStatusFD, "status")
	fail := func(err error) {
		fmt.Fprintf(status, "%s\n", stageErrorText(err))
		exitStage(stageFailureExit)
	}
	// The signals passed on to the command are caught from here on: one sent while the
	// sandbox is built reaches the command once it runs instead of ending the stage. A warm
	// stage catches them while it waits for its start, which then does not wait for it.
	sigs := make(chan os.Signal, 8)
	warm := stageIsWarm()
	var mark chan os.Signal
	if warm {
		mark = make(chan os.Signal, 1)
		signal.Notify(sigs, forwardedSignals...)
		signal.Notify(mark, warmStageMarkSignal)
		warmUpDecoder()
		if err := warmStageWaits(); err != nil {
			exitStage(0) // the server is gone
		}
	}
	cfg, err := readStageConfig(warm)
	if errors.Is(err, errStageLetGo) {
		exitStage(0)
	}
	if err != nil {
		fail(err)
	}
	if warm {
		dropWaitingSignals(sigs, mark)
	}
	if warm && !cfg.warmable() {
		fail(errors.New("sandbox: a warm stage was sent a configuration of another kind"))
	}
	supervised := !cfg.PidNS && !cfg.Probe
	if supervised && cfg.Anchor == 0 {
		exitStage(stageAnchor(&cfg, status))
	}
	if !cfg.Probe && !warm {
		signal.Notify(sigs, forwardedSignals...)
	}
	// The anchor's death is the supervisor's signal to end everything: listen before
	// checking that it is still there, so that no death goes unseen.
	anchorGone := make(chan os.Signal, 1)
	if supervised {
		signal.Notify(anchorGone, stageAnchorGoneSignal)
		if unix.Getppid() != cfg.Anchor {
			fail(errors.New("sandbox: the stage's anchor is gone"))
		}
	}
	if cfg.Namespaces {
		if cfg.PidNS {
			capPidNamespace(cfg.MaxProcs)
		}
		if err := buildMountView(&cfg); err != nil {
			fail(fmt.Errorf("sandbox: %w", err))
		}
		if cfg.Profile.restrictsNetwork() {
			if err := loopbackUp(); err != nil {
				fail(fmt.Errorf("sandbox: bring up loopback: %w", err))
			}
		}
	}
	var bridged map[string]string // host proxy address → namespace listener address
	if len(cfg.Bridge) > 0 {
		if bridged, err = stageBridge(&cfg); err != nil {
			fail(fmt.Errorf("sandbox: %w", err))
		}
	}
	if err := os.Chdir(cfg.Dir); err != nil {
		fail(err)
	}
	if !supervised {
		if err := restrictThread(&cfg); err != nil {
			fail(fmt.Errorf("sandbox: %w", err))
		}
	}
	if cfg.Probe {
		exitStage(0)
	}
	if supervised {
		// Orphans below the command come to the supervisor, whose descendants they stay.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			fail(fmt.Errorf("sandbox: become a subreaper: %w", err))
		}
	}
	limit, err := capProcesses(&cfg)
	if err != nil {
		fail(fmt.Errorf("sandbox: %w", err))
	}
	sys := &syscall.SysProcAttr{Setpgid: !cfg.TTY, Setsid: cfg.TTY, Setctty: cfg.TTY, Ctty: 0}
	if cfg.Foreground {
		sys = &syscall.SysProcAttr{}
	}
	attr := &os.ProcAttr{Env: os.Environ(), Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: sys}
	if cfg.Env != nil {
		attr.Env = strings.SplitAfter(string(cfg.Env), "\x00")
		attr.Env = attr.Env[:len(attr.Env)-1] // after the last NUL
		for i, kv := range attr.Env {
			attr.Env[i] = kv[:len(kv)-1]
		}
	}
	if bridged != nil {
		attr.Env = bridgeRewriteEnv(attr.Env, bridged)
	}
	if limit != nil {
		// The command inherits the cap as its soft limit (capProcesses): the filter keeps the
		// stage from setting another process's limits once it is forked.
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, limit); err != nil {
			fail(fmt.Errorf("sandbox: cap the processes: %w", err))
		}
	}
	var proc *os.Process
	if supervised {
		proc, err = startConfined(&cfg, attr)
	} else {
		proc, err = os.StartProcess(cfg.Path, cfg.Argv, attr)
	}
	if err != nil {
		fail(err)
	}
	if limit != nil {
		// The stage's own limit again, above the command's (capProcesses).
		own := unix.Rlimit{Cur: limit.Max, Max: limit.Max}
		unix.Setrlimit(unix.RLIMIT_NPROC, &own)
	}
	status.Close()
	if !supervised {
		exitStage(superviseChild(proc.Pid, cfg.Foreground, sigs, nil))
	}
	exitStage(superviseChild(proc.Pid, cfg.Foreground, sigs, anchorGone))
}

// startConfined is the supervisor's start of the command: restricted (restrictThread) on a
// thread of its own, which forks the command and then ends, so that no thread of the
// supervisor stays in the command's Landlock domain. kill(2) and pidfd_send_signal check a
// process's domain on its main thread, tgkill(2) on the thread named: were the supervisor's
// in the command's domain, the command could SIGSTOP it (same user, same domain), and a
// stopped supervisor never sees its anchor die, so the command's daemons would outlive it
// and, once the server had reaped the anchor, connect back as nobody's sandbox
// (docs/sandbox.md §2, "Processes"). Its signal scope (Landlock ABI ≥ 6) now keeps the
// command from signalling the supervisor as it keeps it from the anchor and the server.
func startConfined(cfg *stageConfig, attr *os.ProcAttr) (*os.Process, error) {
	type started struct {
		proc *os.Process
		err  error
	}
	done := make(chan started, 1)
	go func() {
		// Never unlocked: the runtime ends the thread with this goroutine, and the
		// restrictions made on it with it. New threads the runtime starts meanwhile come from
		// its template thread, not from this one.
		runtime.LockOSThread()
		if err := restrictThread(cfg); err != nil {
			done <- started{err: fmt.Errorf("sandbox: %w", err)}
			return
		}
		proc, err := os.StartProcess(cfg.Path, cfg.Argv, attr)
		done <- started{proc, err}
	}()
	r := <-done
	return r.proc, r.err
}

// stageAnchorGoneSignal is what the supervisor receives when its anchor dies (its
// PR_SET_PDEATHSIG): a signal nothing else sends it, caught, never forwarded.
const stageAnchorGoneSignal = unix.SIGPWR

// stageAnchor is the anchor's life (runSandboxStage): it starts the supervisor in a session
// of its own, out of reach of the group and session kills the server sends the anchor, with
// the configuration, fd 4, and 0, 1, 2; passes on the signals it gets; and returns the
// supervisor's status once it has exited and nothing is left below the anchor. The anchor is
// a subreaper too: if the supervisor dies first (killed by hand), what it leaves comes here,
// and is killed.
func stageAnchor(cfg *stageConfig, status *os.File) int {
	fail := func(err error) int {
		fmt.Fprintf(status, "sandbox: start the supervisor: %v\n", err)
		return stageFailureExit
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("become a subreaper: %w", err))
	}
	sup := *cfg
	sup.Anchor = os.Getpid()
	payload, err := json.Marshal(sup)
	if err != nil {
		return fail(err)
	}
	cr, cw, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	// Forked from this locked thread, which lives as long as the anchor: the kernel ties
	// Pdeathsig to the forking thread.
	proc, err := os.StartProcess(stageExe, stageArgv(!cfg.Profile.restrictsNetwork()), &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, cr, status},
		Sys:   &syscall.SysProcAttr{Setsid: !cfg.Foreground, Pdeathsig: stageAnchorGoneSignal},
	})
	cr.Close()
	if err != nil {
		cw.Close()
		return fail(err)
	}
	status.Close() // the supervisor answers on it now
	cw.Write(payload)
	cw.Close()
	go func() {
		for sig := range sigs {
			if !cfg.Foreground || (sig != unix.SIGINT && sig != unix.SIGQUIT) {
				unix.Kill(proc.Pid, sig.(syscall.Signal))
			}
		}
	}()
	r := startStageReaper(proc.Pid)
	code := stageFailureExit
	if ws, ok := <-r.exit; ok {
		code = exitCodeOfStatus(ws)
	}
	killDescendants(r)
	return code
}

// exitCodeOfStatus is a wait status as the stage reports it: the exit status, or 128+N for a
// death by signal N.
func exitCodeOfStatus(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// pidNamespaceMinPidMax is the least pid_max a pid namespace takes (RESERVED_PIDS + 1).
const pidNamespaceMinPidMax = 301

// capPidNamespace bounds the pids of the stage's own pid namespace, whose pid 1 it is, to
// maxProcs (Linux 6.14 made kernel.pid_max a setting of each pid namespace): every task of
// the sandbox, thread or process, has a pid there. This bound holds for root too, whom
// RLIMIT_NPROC exempts (capProcesses). It must be set while the stage still has
// CAP_SYS_ADMIN in its user namespace, before /proc/sys is made read-only. An older kernel
// has one pid_max, the host's, which a stage of a root server could write (sysctls check the
// user id, not the namespace): there it is never touched, and the cap rests on RLIMIT_NPROC
// alone (docs/sandbox.md §2, "Processes").
func capPidNamespace(maxProcs int) {
	if maxProcs <= 0 || !kernelAtLeast(pidMaxPerNamespaceMajor, pidMaxPerNamespaceMinor) {
		return
	}
	os.WriteFile("/proc/sys/kernel/pid_max", []byte(strconv.Itoa(max(maxProcs+1, pidNamespaceMinPidMax))), 0)
}

// The first Linux release whose kernel.pid_max belongs to each pid namespace.
const (
	pidMaxPerNamespaceMajor = 6
	pidMaxPerNamespaceMinor = 14
)

// kernelAtLeast reports whether the running kernel's release is at least major.minor.
func kernelAtLeast(wantMajor, wantMinor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	rel := unix.ByteSliceToString(u.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(rel, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > wantMajor || major == wantMajor && minor >= wantMinor
}

// capProcesses applies cfg.MaxProcs (docs/sandbox.md §2, "Processes"): RLIMIT_NPROC counts
// the tasks of a user in one user namespace, so in the sandbox's own namespace it counts the
// sandbox's tasks alone, whatever the server's user (root included: the command has no
// capability over the host's user namespace to exceed it with). The stage's own limit is
// stageThreadSlack higher than the command's, which it returns for the caller to set on the
// command once forked. Without a user namespace of its own (Landlock, the network filter
// alone) the limit would count every process of the server's user: nothing is set there.
// The command's limit is returned as {cap, stage's}: the stage sets it on itself just before
// forking the command, which inherits it, and takes its own back after. The command may so
// raise its soft limit by stageThreadSlack at most.
func capProcesses(cfg *stageConfig) (*unix.Rlimit, error) {
	if cfg.MaxProcs <= 0 || !cfg.Namespaces {
		return nil, nil
	}
	own := uint64(cfg.MaxProcs + stageThreadSlack)
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: own, Max: own}); err != nil {
		return nil, fmt.Errorf("cap the processes at %d: %w", cfg.MaxProcs, err)
	}
	return &unix.Rlimit{Cur: uint64(cfg.MaxProcs), Max: own}, nil
}

// exitStage ends the stage at once. It skips what os.Exit runs first: nothing the stage needs,
// and a race-enabled test binary, acting as the stage, would otherwise pause a second at
// every exit.
func exitStage(code int) {
	syscall.Exit(code)
}

// closeOnExecFrom marks every descriptor from first on close-on-exec.
func closeOnExecFrom(first int) error {
	if unix.CloseRange(uint(first), math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) == nil {
		return nil
	}
	entries, err := os.ReadDir("/proc/self/fd") // before Linux 5.11
	if err != nil {
		return fmt.Errorf("list inherited descriptors: %w", err)
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= first {
			syscall.CloseOnExec(fd)
		}
	}
	return nil
}

// readStageConfig reads fd 3 to its end.
func readStageConfig(warm bool) (stageConfig, error) {
	var cfg stageConfig
	var b []byte
	var err error
	if warm {
		if b, err = receiveStdio(); err != nil {
			return cfg, err
		}
		b, err = readWarmConfig(b)
	} else {
		f := os.NewFile(stageConfigFD, "config")
		b, err = io.ReadAll(io.LimitReader(f, maxStageConfig))
		f.Close()
	}
	if err != nil {
		return cfg, fmt.Errorf("sandbox: read the configuration: %w", err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, fmt.Errorf("sandbox: decode the configuration: %w", err)
	}
	if cfg.Profile == nil {
		return cfg, errors.New("sandbox: no profile")
	}
	return cfg, nil
}

// restrictThread makes the calling (locked) thread what the command inherits: no new
// privileges, Landlock where asked (or only its signal scope, in the server's pid namespace),
// no capabilities, then the seccomp filter (all threads).
func restrictThread(cfg *stageConfig) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	switch {
	case cfg.Landlock:
		rules, err := landlockRulesFor(cfg.Profile)
		if err != nil {
			return err
		}
		if err := restrictThreadLandlock(rules); err != nil {
			return err
		}
	case !cfg.PidNS:
		// In the server's pid namespace the command sees, and as the same user may signal,
		// the server, its own anchor and supervisor, and every other process of its user:
		// Landlock's scope stops that (the network filter alone included).
		if err := restrictThreadSignalScope(); err != nil {
			return err
		}
	}
	if err := joinFreshSessionKeyring(); err != nil {
		return err
	}
	if err := dropCapabilities(); err != nil {
		return err
	}
	return installSeccomp(cfg.Seccomp)
}

// joinFreshSessionKeyring gives the calling thread, and what it forks, a new anonymous
// session keyring instead of the server's: the kernel keyrings are shared by every process
// that inherits them, namespaces or not. A kernel without keyrings (ENOSYS) has nothing to
// share. The filter then refuses keyctl, add_key and request_key (seccomp_linux.go).
func joinFreshSessionKeyring() error {
	_, _, errno := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0) // NULL: anonymous
	if errno != 0 && errno != unix.ENOSYS {
		return fmt.Errorf("join a session keyring of its own: %w", errno)
	}
	return nil
}

// dropCapabilities empties the thread's ambient, bounding, effective, permitted and
// inheritable sets, so that nothing it runs can regain one. Where the thread had no
// capabilities to begin with (a server not run as root, without namespaces) the bounding set
// cannot be changed, and needs not be: exec cannot grant what the process never had, with
// no_new_privs set.
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; ; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the last capability
		}
		if errors.Is(err, unix.EPERM) {
			break // no CAP_SETPCAP: nothing to drop (see above)
		}
		if err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	return nil
}

// forwardedSignals are what the stage, as pid 1, passes on to the command's process group.
var forwardedSignals = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2}

// superviseChild is the supervising stage's life: forward signals (sigs) to the command's group,
// reap every process that ends below it, and return the command's status once it ends. As
// pid 1 (anchorGone nil) its exit then ends the namespace and everything left in it; as the
// anchored supervisor it kills every descendant first (killDescendants), and does so as
// well, and returns, when anchorGone fires: the anchor is dead, killed by process/terminate
// or with the server. In the foreground the command shares the stage's group, so the
// terminal's signals reach it without help; only those sent to the stage alone are passed on.
func superviseChild(pid int, foreground bool, sigs <-chan os.Signal, anchorGone <-chan os.Signal) int {
	go func() {
		for sig := range sigs {
			switch {
			case !foreground:
				unix.Kill(-pid, sig.(syscall.Signal))
			case sig != unix.SIGINT && sig != unix.SIGQUIT:
				unix.Kill(pid, sig.(syscall.Signal))
			}
		}
	}()
	r := startStageReaper(pid)
	code := stageFailureExit
	select {
	case ws, ok := <-r.exit:
		if ok {
			code = exitCodeOfStatus(ws)
		}
	case <-anchorGone: // never, as pid 1
		code = 128 + int(unix.SIGKILL)
	}
	if anchorGone != nil {
		killDescendants(r)
	}
	return code
}

// stageReaper reaps every child of the stage, on a goroutine of its own that ends when the
// stage has no child left (the stage exits soon after, in any case).
type stageReaper struct {
	exit   chan unix.WaitStatus // the watched child's status; closed unseen if wait4 failed
	reaped chan struct{}        // a child was reaped (buffered: one pending at most)
	none   chan struct{}        // closed once no child is left
}

// startStageReaper starts reaping; pid is the child whose status exit reports.
func startStageReaper(pid int) *stageReaper {
	r := &stageReaper{exit: make(chan unix.WaitStatus, 1), reaped: make(chan struct{}, 1), none: make(chan struct{})}
	go func() {
		defer close(r.none)
		seen := false
		defer func() {
			if !seen {
				close(r.exit)
			}
		}()
		for {
			var ws unix.WaitStatus
			wpid, err := unix.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return // ECHILD: nothing below the stage any more; no orphan can come now
			}
			if wpid == pid && !seen {
				seen = true
				r.exit <- ws
			}
			select {
			case r.reaped <- struct{}{}:
			default:
			}
		}
	}()
	return r
}

// killDescendants kills every process below the stage, however deep and whatever session it
// made for itself, and returns once none is left, reaped by r. Each pass stops every
// descendant it finds (stopDescendants: a stopped process forks no more, so a fork loop
// cannot outrun it), then kills them all. One forked while it was being stopped is found by
// the next pass: its parent's death hands it to the stage, a subreaper.
func killDescendants(r *stageReaper) {
	for {
		// No child, no descendant: an orphan can only come to the stage from below it. This
		// spares the usual case, a command that left nothing, a reading of all of /proc.
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); errors.Is(err, unix.ECHILD) {
			return
		}
		pids := stopDescendants()
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
		// Some of them are the stage's own children: their deaths are reaped, and
		// whatever they leave comes to the stage for the next pass.
		select {
		case <-r.reaped:
		case <-r.none:
			return
		}
	}
}

// stopDescendants stops, and lists, every process below the stage that /proc shows, reading
// the process tree again until a reading finds none it had not stopped yet.
func stopDescendants() []int {
	self := os.Getpid()
	stopped := map[int]bool{}
	var out []int
	for {
		children := procChildren()
		found := false
		queue := []int{self}
		for len(queue) > 0 {
			parent := queue[0]
			queue = queue[1:]
			for _, pid := range children[parent] {
				if !stopped[pid] {
					stopped[pid], found = true, true
					unix.Kill(pid, unix.SIGSTOP)
					out = append(out, pid)
				}
				queue = append(queue, pid)
			}
		}
		if !found {
			return out
		}
	}
}

// procChildren maps each process of /proc to its children, from the parent field of every
// /proc/PID/stat (the kernel's own children lists, /proc/PID/task/TID/children, exist only
// with CONFIG_PROC_CHILDREN). A process gone meanwhile is left out.
func procChildren() map[int][]int {
	children := map[int][]int{}
	dir, err := os.Open("/proc")
	if err != nil {
		return children
	}
	defer dir.Close()
	names, _ := dir.Readdirnames(-1)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold anything, up to the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	return children
}

// stageErrorText words an error for process/start as the reference does.
func stageErrorText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) && !strings.HasPrefix(err.Error(), "sandbox") {
		return spawnErrorText(errno)
	}
	return err.Error()
}

// stageBridge makes one listener per proxy in the stage's network namespace, sends them to
// the server on stageBridgeFD, waits until the server serves them (awaitBridgeServed) and
// closes its copies (docs/network.md §4). It returns, for the command's environment, each
// proxy's address mapped to its listener's.
func stageBridge(cfg *stageConfig) (map[string]string, error) {
	if !cfg.Namespaces || !cfg.PidNS || !cfg.Profile.restrictsNetwork() || cfg.Seccomp.base() != seccompProxyRouted {
		return nil, errors.New("a bridge outside a namespace stage with a restricted network")
	}
	var lns []*os.File
	defer func() {
		for _, f := range lns {
			f.Close()
		}
	}()
	pairs := make(map[string]string, len(cfg.Bridge))
	for _, addr := range cfg.Bridge {
		f, port, err := bridgeListen()
		if err != nil {
			return nil, err
		}
		lns = append(lns, f)
		pairs[addr] = bridgePortText(port)
	}
	if err := sendBridgeListeners(stageBridgeFD, lns); err != nil {
		return nil, err
	}
	if err := awaitBridgeServed(stageBridgeFD); err != nil {
		return nil, err
	}
	if cfg.Transparent {
		if err := stageTransparent(stageBridgeFD); err != nil {
			return nil, err
		}
	}
	unix.Close(stageBridgeFD)
	return pairs, nil
}

// loopbackUp brings up lo in the new network namespace, so that servers the command starts
// for itself on 127.0.0.1 work.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// sandboxStatusLines is what `exec-server sandbox --status` prints.
func (s *sandboxer) statusLines(w io.Writer) {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "sandbox: %s\n", s.describe())
	if abi := landlockABI(); abi > 0 {
		fmt.Fprintf(bw, "landlock: ABI %d\n", abi)
	} else {
		fmt.Fprintf(bw, "landlock: unavailable\n")
	}
	fmt.Fprintf(bw, "processes: %s\n", s.processCapText())
	fmt.Fprintf(bw, "managed network: %s\n", s.routingText())
	bw.Flush()
}

// routingText says whether a command can be routed through its proxy here
// (enforceManagedNetwork, docs/network.md §4): the bridge needs the namespace sandbox with a
// pid namespace of its own.
func (s *sandboxer) routingText() string {
	switch {
	case s.mechanism() != mechanismNamespaces:
		return "enforceManagedNetwork refused: the bridge needs the namespace sandbox (" + s.describe() + ")"
	case !s.isolatePids:
		return "enforceManagedNetwork refused: the bridge needs a pid namespace of its own (--linux-sandbox-pid-namespace inherit)"
	}
	return "enforceManagedNetwork routes the command through its proxy (a network namespace and the bridge)"
}

// processCapText says how --linux-sandbox-max-processes is enforced here (docs/sandbox.md §2,
// "Processes").
func (s *sandboxer) processCapText() string {
	n := s.maxProcesses()
	switch s.mechanism() {
	case mechanismNamespaces:
		root := "as root, only with a pid namespace of its own on Linux 6.14 or later (its pid_max); not capped otherwise"
		if os.Geteuid() != 0 {
			root = "RLIMIT_NPROC in its user namespace"
		} else if s.isolatePids && kernelAtLeast(pidMaxPerNamespaceMajor, pidMaxPerNamespaceMinor) {
			root = "the pid_max of its pid namespace (RLIMIT_NPROC does not bind root)"
		}
		return fmt.Sprintf("at most %d tasks per sandbox: %s", n, root)
	case mechanismLandlock:
		return "not capped per sandbox under Landlock (no user namespace: RLIMIT_NPROC would count every process of the user)"
	}
	return "no sandbox"
}

// runForeground runs path under profile p as `exec-server sandbox` does: in this process's
// group, on its terminal, and returns the command's exit status.
func (s *sandboxer) runForeground(p *sandboxProfile, path string, argv []string, dir string) (int, error) {
	spec := &launchSpec{path: path, argv: argv, env: os.Environ(), dir: dir}
	if _, err := s.confine(spec, p); err != nil {
		return stageFailureExit, err
	}
	attr := &os.ProcAttr{Dir: dir, Env: spec.env, Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	if spec.stage != nil {
		spec.stage.cfg.Foreground = true
		if err := spec.stage.prepare(attr, spec); err != nil {
			spec.stage.closeOurEnds()
			return stageFailureExit, err
		}
	}
	signal.Ignore(unix.SIGINT, unix.SIGQUIT) // the terminal's signals are the command's to act on
	proc, err := os.StartProcess(spec.path, spec.argv, attr)
	spec.stage.closeChildEnds()
	if err != nil {
		spec.stage.closeOurEnds()
		return stageFailureExit, err
	}
	defer spec.stage.exited()
	if err := spec.stage.await(); err != nil {
		proc.Wait()
		return stageFailureExit, err
	}
	ps, err := proc.Wait()
	if err != nil {
		return stageFailureExit, err
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}
