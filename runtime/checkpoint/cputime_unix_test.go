//go:build unix

package checkpoint

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) this process has used so
// far, every thread's; ok is false where it cannot be read.
func cpuTime() (d time.Duration, ok bool) {
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) != nil {
		return 0, false
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano()), true
}
