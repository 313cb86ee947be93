//go:build unix

package transport

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time, user and system, this process has used
// (0 if unknown).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
