//go:build unix

package launch_test

import (
	"os"
	"syscall"
)

// stopSelf stops this process (SIGSTOP).
func stopSelf() { syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
