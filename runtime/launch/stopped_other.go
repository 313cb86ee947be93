//go:build !linux

package launch

// stoppedMember finds no stopped process where there is no /proc to read
// the processes' states from: a stopped rank is then blamed only by its
// peers' transports (their heartbeat timeouts name it), not by Local.
func stoppedMember(pgid int) (int, bool) { return 0, false }

// StoppedPeer finds no stopped rank where there is no /proc to read the
// processes' states and environments from.
func StoppedPeer() (rank, pid int, ok bool) { return 0, 0, false }
