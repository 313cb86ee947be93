//go:build !unix

package checkpoint

import "time"

// cpuTime is the CPU time this process has used; here it cannot be read.
func cpuTime() (time.Duration, bool) { return 0, false }
