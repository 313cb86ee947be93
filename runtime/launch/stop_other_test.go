//go:build !unix

package launch_test

import "time"

// stopSelf hangs this process where there is no SIGSTOP.
func stopSelf() { time.Sleep(time.Hour) }
