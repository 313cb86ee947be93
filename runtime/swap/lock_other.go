//go:build !unix

package swap

import "os"

// lockDir does nothing where flock(2) is missing: stale directories are not
// detected there.
func lockDir(dir string) (*os.File, error) { return nil, nil }

// tryLockDir never takes a directory for stale where flock(2) is missing.
func tryLockDir(dir string) (stale bool, unlock func()) { return false, nil }

// terminating are the signals a tier catches to remove its directory
// before the process ends (signals.go).
var terminating = []os.Signal{os.Interrupt}

// raise ends the process as an interrupt would.
func raise(os.Signal) { os.Exit(2) }
