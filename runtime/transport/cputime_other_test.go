//go:build !unix

package transport

import "time"

// cpuTime returns 0: the process's CPU time is read on unix only.
func cpuTime() time.Duration { return 0 }
