package launch

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// stoppedProcesses calls f with the pid and process group of every process
// of this host that a signal stopped (SIGSTOP, SIGTSTP: state T in
// /proc/PID/stat) until f returns true.
func stoppedProcesses(f func(pid, pgrp int) bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		if state, group, ok := parseStat(b); ok && state == 'T' && f(pid, group) {
			return
		}
	}
}

// stoppedMember returns a process of the process group pgid (a rank's:
// Local starts each rank as the leader of its own group) that a signal
// stopped, and whether there is one. A stopped rank is alive but silent:
// its peers fail on their timeouts while it never exits, so Local looks
// for one once a rank has exited, and the group covers a rank's own
// children (the trainer a `sh -c` rank started).
func stoppedMember(pgid int) (int, bool) {
	found := 0
	stoppedProcesses(func(pid, pgrp int) bool {
		if pgrp == pgid {
			found = pid
		}
		return found != 0
	})
	return found, found != 0
}

// StoppedPeer looks on this host for a rank of this process's job that a
// signal stopped (SIGSTOP, SIGTSTP: state T in /proc/PID/stat) and returns
// its rank and pid. A process is of this job when its environment holds the
// same job variables as this one's (jobVars: OpenMPI's job number, PMIx's
// namespace, SLURM's job and step, MASTER_ADDR, MASTER_PORT, PPGEN_TOKEN),
// one at least set; its rank is the first rank variable set, in FromEnv's
// order. A stopped rank is alive but silent: the transports' timeouts of
// the ranks waiting on it, or on a rank waiting on it, would blame the
// rank they waited on; transport.NewProgressError asks StoppedPeer first,
// so that on one host the stopped rank is named whichever rank times out
// first (over MPI, which has no heartbeats, that is the only way to tell).
// Processes of other users cannot be read: ranks of one job run as one
// user.
func StoppedPeer() (rank, pid int, ok bool) {
	self := jobKey(os.Getenv)
	if self == "" {
		return 0, 0, false
	}
	me := os.Getpid()
	stoppedProcesses(func(p, _ int) bool {
		if p == me {
			return false
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/environ")
		if err != nil {
			return false
		}
		env := map[string]string{}
		for _, kv := range bytes.Split(b, []byte{0}) {
			if k, v, ok := strings.Cut(string(kv), "="); ok {
				env[k] = v
			}
		}
		get := func(k string) string { return env[k] }
		if jobKey(get) != self {
			return false
		}
		for _, s := range sources {
			if v, set := env[s.rank]; set {
				if r, err := strconv.Atoi(v); err == nil && r >= 0 {
					rank, pid, ok = r, p, true
				}
				break
			}
		}
		return ok
	})
	return rank, pid, ok
}

// parseStat reads the state and the process group of a /proc/PID/stat
// line: "pid (comm) state ppid pgrp ...", comm possibly holding spaces and
// parentheses (so the fields follow the last ')').
func parseStat(b []byte) (state byte, pgrp int, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	g, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], g, true
}
