package main

// What the soak measures of the server from outside, through /proc: its resident memory, its
// open descriptors, its threads, its children (live and zombie), and the processes that carry
// a check's marker in their environment, wherever they have been re-parented to.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// markerVar is the environment variable every process a check starts carries, with a value
// of the check's own; a process that has it is one of ours whatever its parent now is.
const markerVar = "SOAK_MARK"

// usage is one reading of a process's resources.
type usage struct {
	rss     int64 // bytes resident (VmRSS)
	threads int
	fds     int
}

// readUsage reads pid's resident memory, threads and open descriptors.
func readUsage(pid int) (usage, error) {
	var u usage
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	if u.rss, u.threads, err = parseStatus(b); err != nil {
		return u, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return u, err
	}
	u.fds = len(fds)
	return u, nil
}

// parseStatus takes VmRSS (kB) and Threads from a /proc/PID/status text.
func parseStatus(b []byte) (rss int64, threads int, err error) {
	seenRSS, seenThreads := false, false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) == 0 {
			continue
		}
		switch key {
		case "VmRSS":
			kb, perr := strconv.ParseInt(fields[0], 10, 64)
			if perr != nil {
				return 0, 0, fmt.Errorf("VmRSS %q: %w", val, perr)
			}
			rss, seenRSS = kb<<10, true
		case "Threads":
			n, perr := strconv.Atoi(fields[0])
			if perr != nil {
				return 0, 0, fmt.Errorf("Threads %q: %w", val, perr)
			}
			threads, seenThreads = n, true
		}
	}
	if !seenRSS || !seenThreads {
		return 0, 0, errors.New("no VmRSS or Threads line")
	}
	return rss, threads, nil
}

// procStat is what /proc/PID/stat says of a process that the soak needs.
type procStat struct {
	pid   int
	comm  string
	state byte // R, S, D, Z, …
	ppid  int
}

// parseStat parses a /proc/PID/stat line. comm is in parentheses and may hold spaces and
// parentheses itself, so the fields after it are found from the last ')'.
func parseStat(b []byte) (procStat, error) {
	var st procStat
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return st, errors.New("no (comm)")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return st, fmt.Errorf("pid: %w", err)
	}
	rest := strings.Fields(string(b[closing+1:]))
	if len(rest) < 2 || len(rest[0]) != 1 {
		return st, errors.New("no state and ppid after (comm)")
	}
	ppid, err := strconv.Atoi(rest[1])
	if err != nil {
		return st, fmt.Errorf("ppid: %w", err)
	}
	return procStat{pid: pid, comm: string(b[open+1 : closing]), state: rest[0][0], ppid: ppid}, nil
}

// allProcs lists every process in /proc. Processes that end while it reads are skipped.
func allProcs() ([]procStat, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := make([]procStat, 0, len(entries))
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		if st, err := parseStat(b); err == nil {
			out = append(out, st)
		}
	}
	return out, nil
}

// family is a process's children, split by state.
type family struct {
	live    int // children not yet exited, the watchdog excepted
	zombies int // exited children nobody has reaped
}

// children counts pid's children. The watchdog (a child of the server by design) is not
// counted among the live ones: it lives as long as the server.
func children(pid, watchdog int) (family, error) {
	procs, err := allProcs()
	if err != nil {
		return family{}, err
	}
	var f family
	for _, p := range procs {
		switch {
		case p.ppid != pid:
		case p.state == 'Z':
			f.zombies++
		case p.pid != watchdog:
			f.live++
		}
	}
	return f, nil
}

// findWatchdog returns the pid of the server's watchdog child (argv[1] is the watchdog's
// hidden argument), or 0 while it has none.
func findWatchdog(server int) int {
	procs, err := allProcs()
	if err != nil {
		return 0
	}
	for _, p := range procs {
		if p.ppid != server {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
		if err == nil && bytes.Contains(cmdline, []byte("\x00__exec-server-watchdog")) {
			return p.pid
		}
	}
	return 0
}

// marked lists the processes, zombies excepted, whose environment holds markerVar=value.
func marked(value string) ([]procStat, error) {
	procs, err := allProcs()
	if err != nil {
		return nil, err
	}
	want := []byte(markerVar + "=" + value + "\x00")
	var out []procStat
	for _, p := range procs {
		if p.state == 'Z' {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.pid))
		if err != nil {
			continue // gone meanwhile, or not ours to read
		}
		if bytes.HasPrefix(env, want) || bytes.Contains(env, append([]byte{0}, want...)) {
			out = append(out, p)
		}
	}
	return out, nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	st, err := parseStat(b)
	return err == nil && st.state != 'Z'
}
