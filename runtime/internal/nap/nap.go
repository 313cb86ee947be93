// Package nap sleeps for short times precisely. A poll loop that waits for
// a transfer between tests (the MPI transport's MPI_Test, the NCCL
// transport's cudaStreamQuery) wants to sleep tens of microseconds: Go's
// time.Sleep rounds such a sleep up to the runtime timer's granularity,
// about a millisecond on Linux (the scheduler sleeps in epoll_pwait, whose
// timeout is in milliseconds), which turns every wake-up of a waiting rank
// into a millisecond's latency. Sleep blocks the calling thread in
// nanosleep instead (the Go scheduler hands its P to another thread while it
// sleeps), which the kernel ends within its timer slack, ~50 µs.
package nap

import "time"

// Sleep pauses the calling goroutine for about d (at least d).
func Sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	sleep(d)
}
