//go:build unix

package swap

import (
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockDir creates dir's lock file and takes an exclusive flock on it, held
// until the file is closed or the process dies.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// tryLockDir reports whether dir is a tier directory whose lock nobody
// holds (its owner is dead); then the caller holds the lock until it calls
// unlock. A directory without a lock file is not taken for stale.
func tryLockDir(dir string) (stale bool, unlock func()) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR, 0)
	if err != nil {
		return false, nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close() // EWOULDBLOCK: its tier lives
		return false, nil
	}
	return true, func() { f.Close() }
}

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
