//go:build unix

package swap

import (
	"os"
	"syscall"
	"time"
)

// terminating are the signals whose default action ends the process and
// that a tier catches to remove its directory first (signals.go).
var terminating = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// raise sends sig to this process again, its default action restored, and
// exits with the shell's status for it if the process outlives it.
func raise(sig os.Signal) {
	s, _ := sig.(syscall.Signal)
	_ = syscall.Kill(os.Getpid(), s)
	time.Sleep(time.Second)
	os.Exit(128 + int(s))
}
