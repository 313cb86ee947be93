//go:build linux

package nap

import (
	"syscall"
	"time"
)

func sleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var rem syscall.Timespec
		if err := syscall.Nanosleep(&ts, &rem); err != syscall.EINTR {
			return
		}
		ts = rem // interrupted by a signal (Go's preemption): sleep the rest
	}
}
