//go:build unix

package swapdir

import (
	"os"
	"path/filepath"
	"syscall"
)

// Lock creates dir's lock file and takes an exclusive flock on it, held
// until the file is closed or the process dies.
func Lock(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, LockName), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// tryLock reports whether dir is a tier directory whose lock nobody
// holds (its owner is dead); then the caller holds the lock until it calls
// unlock. A directory without a lock file is not taken for stale.
func tryLock(dir string) (stale bool, unlock func()) {
	f, err := os.OpenFile(filepath.Join(dir, LockName), os.O_RDWR, 0)
	if err != nil {
		return false, nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close() // EWOULDBLOCK: its tier lives
		return false, nil
	}
	return true, func() { f.Close() }
}
