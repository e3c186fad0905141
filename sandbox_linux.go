package main

// The Linux sandbox (docs/sandbox.md §2): a sandboxed process runs inside the sandbox stage, a
// re-exec of this binary (/proc/self/exe, dispatched on argv before anything else runs) that
// confines itself and then starts the command.
//
//	server ── /proc/self/exe __exec-server-sandbox ──▶ stage ──fork+exec──▶ command
//	           fd 3: stageConfig (JSON), read to EOF
//	           fd 4: status: EOF once the command runs, or one line, the error
//
//	mechanism   when                              the stage
//	namespaces  user namespaces work              user+mount+ipc(+pid)(+net) namespaces: the
//	                                              file system view of sandbox_mount_linux.go,
//	                                              loopback up, then no_new_privs, every
//	                                              capability dropped, seccomp; as pid 1 it
//	                                              forks the command, forwards signals, reaps
//	landlock    no user namespaces, Landlock      no_new_privs, Landlock, seccomp on its
//	                                              locked thread, then execs the command
//	none        neither                           a profile that confines files fails closed
//
// A profile that only takes the network away (external, or an unrestricted file system) gets
// the seccomp filter alone, exec'd in place; one that restricts nothing runs as is. Every
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

// The stage's descriptors beyond 0, 1, 2.
const (
	stageConfigFD = 3
	stageStatusFD = 4
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
	// Foreground: the command stays in the stage's process group, on the caller's terminal
	// (`exec-server sandbox`), instead of leading a group or session of its own.
	Foreground bool  `json:"foreground,omitempty"`
	ShmSize    int64 `json:"shmSize,omitempty"` // bytes of /dev/shm; 0: defaultShmSize
}

// sandboxer is a server's sandbox: the mechanism this host offers (probed once) and the
// mount points it made for protected names that did not exist.
type sandboxer struct {
	isolatePids bool   // --linux-sandbox-pid-namespace isolate
	shmSize     int64  // --linux-sandbox-shm-size; 0: defaultShmSize
	force       string // a mechanism to use instead of probing (tests, and `sandbox --mechanism`)

	once     sync.Once
	mech     sandboxMechanism
	probeErr error

	synthetic syntheticDirs

	live    liveStages // network-enabled stages running now, refused as peers (peer_linux.go)
	secrets []string   // files the server holds as secrets, denied to every stage (peer_linux.go)
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
		case mechanismLandlock:
			if _, err := landlockRulesFor(p); err != nil {
				return "", errInvalidParams("sandbox intent cannot be enforced on this executor: %v", err)
			}
			cfg.Landlock = true
		default:
			return "", errInvalidParams("sandbox intent cannot be enforced on this executor: %s", s.describe())
		}
	}
	st := &sandboxStage{cfg: cfg, live: &s.live}
	if cfg.Namespaces {
		if st.release, err = s.synthetic.acquire(p.Protected); err != nil {
			return "", errInternal("sandbox: %v", err)
		}
	}
	spec.stage = st
	spec.path, spec.argv = stageExe, []string{"exec-server-sandbox", sandboxStageArg}
	return "linuxSeccomp", nil
}

// sandboxStage is one stage being started: its configuration, and the pipes that carry it
// and its verdict.
type sandboxStage struct {
	cfg       stageConfig
	release   func()      // gives back the synthetic mount points, once the stage has exited
	live      *liveStages // where started registers a network-enabled stage (peer_linux.go)
	childEnds []*os.File
	config    *os.File // our end of fd 3
	status    *os.File // our end of fd 4
	payload   []byte
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
	sys := attr.Sys
	if st.cfg.Namespaces {
		uid, gid := os.Getuid(), os.Getgid()
		sys.Cloneflags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWIPC
		if st.cfg.PidNS {
			sys.Cloneflags |= unix.CLONE_NEWPID
		}
		if st.cfg.Profile.restrictsNetwork() {
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
	if st.cfg.PidNS && !st.cfg.Probe {
		// The stage's child takes the terminal: the stage itself stays out of it.
		sys.Setctty = false
	}
	return nil
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
	st.exited()
}

// await waits for the stage's verdict: nil once the command runs, or the error that stopped it.
func (st *sandboxStage) await() error {
	if st == nil {
		return nil
	}
	defer st.status.Close()
	msg, err := io.ReadAll(io.LimitReader(st.status, 4096))
	switch {
	case err != nil:
		return errInternal("sandbox: read the stage's status: %v", err)
	case len(msg) == 0:
		return nil
	}
	return errInternal("%s", strings.TrimSpace(string(msg)))
}

// exited gives back what confine took for the stage, once it is gone.
func (st *sandboxStage) exited() {
	if st != nil && st.release != nil {
		st.release()
		st.release = nil
	}
}

// isSandboxStage reports whether this process was started as the sandbox stage.
func isSandboxStage() bool {
	return len(os.Args) > 1 && os.Args[1] == sandboxStageArg
}

// runSandboxStage is the stage's main. It never returns to the caller's code: it exits
// with the command's status (128+N for a death by signal N), or stageFailureExit after
// writing why to fd 4.
func runSandboxStage() {
	runtime.LockOSThread() // every per-thread restriction is made on this thread, and the command forked from it
	// As pid 1 the stage outlives the command's start, and only this thread gives up its
	// capabilities: the Go runtime's other threads keep those the user namespace gave the
	// stage (CAP_SYS_ADMIN over the view's mounts). The command runs as the same user, so
	// /proc/1/mem, ptrace or pidfd_getfd on the stage would let it write code that one of those
	// threads runs, and remount the view read-write. Not dumpable, the stage is out of reach of
	// anything without CAP_SYS_PTRACE in its namespace. The command gets its own dumpable flag
	// back from execve.
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
	cfg, err := readStageConfig()
	if err != nil {
		fail(err)
	}
	if cfg.Namespaces {
		if err := buildMountView(&cfg); err != nil {
			fail(fmt.Errorf("sandbox: %w", err))
		}
		if cfg.Profile.restrictsNetwork() {
			if err := loopbackUp(); err != nil {
				fail(fmt.Errorf("sandbox: bring up loopback: %w", err))
			}
		}
	}
	if err := os.Chdir(cfg.Dir); err != nil {
		fail(err)
	}
	if err := restrictThread(&cfg); err != nil {
		fail(fmt.Errorf("sandbox: %w", err))
	}
	if cfg.Probe {
		exitStage(0)
	}
	if !cfg.PidNS {
		// Exec in place: the command inherits this thread's restrictions, and fd 4, close on
		// exec, reports success by closing.
		err := syscall.Exec(cfg.Path, cfg.Argv, os.Environ())
		fail(err)
	}
	sys := &syscall.SysProcAttr{Setpgid: !cfg.TTY, Setsid: cfg.TTY, Setctty: cfg.TTY, Ctty: 0}
	if cfg.Foreground {
		sys = &syscall.SysProcAttr{}
	}
	proc, err := os.StartProcess(cfg.Path, cfg.Argv, &os.ProcAttr{
		Env: os.Environ(), Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: sys,
	})
	if err != nil {
		fail(err)
	}
	status.Close()
	exitStage(superviseChild(proc.Pid, cfg.Foreground))
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
func readStageConfig() (stageConfig, error) {
	var cfg stageConfig
	f := os.NewFile(stageConfigFD, "config")
	b, err := io.ReadAll(io.LimitReader(f, maxStageConfig))
	f.Close()
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
	case cfg.Namespaces && !cfg.PidNS:
		// In the server's pid namespace the command sees, and as the same user may signal,
		// the server and every other process of its user: Landlock's scope stops that.
		if err := restrictThreadSignalScope(); err != nil {
			return err
		}
	}
	if err := dropCapabilities(); err != nil {
		return err
	}
	return installSeccomp(cfg.Seccomp)
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

// superviseChild is pid 1's life: forward signals to the command's group, reap every
// process that ends in the namespace, and return the command's status once it ends (which
// ends the namespace, and everything left in it). In the foreground the command shares the
// stage's group, so the terminal's signals reach it without help; only those sent to the
// stage alone are passed on.
func superviseChild(pid int, foreground bool) int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
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
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return stageFailureExit
		}
		if wpid != pid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// stageErrorText words an error for process/start as the reference does.
func stageErrorText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) && !strings.HasPrefix(err.Error(), "sandbox") {
		return spawnErrorText(errno)
	}
	return err.Error()
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
	bw.Flush()
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
