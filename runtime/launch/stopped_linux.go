package launch

import (
	"bytes"
	"os"
	"strconv"
)

// stoppedMember returns a process of the process group pgid (a rank's:
// Local starts each rank as the leader of its own group) that a signal
// stopped (SIGSTOP, SIGTSTP: state T in /proc/PID/stat), and whether there
// is one. A stopped rank is alive but silent: its peers fail on their
// timeouts while it never exits, so Local looks for one whenever a rank
// fails, and the group covers a rank's own children (the trainer a
// `sh -c` rank started).
func stoppedMember(pgid int) (int, bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
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
		state, group, ok := parseStat(b)
		if ok && group == pgid && state == 'T' {
			return pid, true
		}
	}
	return 0, false
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
