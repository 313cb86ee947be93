// Package swapdir names, locks and cleans the directories of runtime/swap's
// file tiers, for runtime/swap, which makes them, and runtime/launch,
// which removes those its ranks left (the launcher links no tensor
// library, so it cannot import runtime/swap).
//
// A tier's directory is named Prefix+PID+"-"+RANDOM and holds a lock file
// (LockName) on which its tier keeps an exclusive flock(2) while it lives.
// The kernel releases the lock when its process dies, however it dies, so
// a directory whose lock can be taken is stale. The PID in the name is only
// a hint for a reader; a reused PID cannot make a live directory look
// stale, nor a stale one live. A tier creates its directory under a
// NewPrefix name first and renames it once its lock is held, so no other
// tier ever sees it unlocked. On systems without flock (Windows) nothing
// is taken for stale.
package swapdir

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The names of a tier's directory and of its lock file.
const (
	Prefix    = "ppgen-swap-"
	NewPrefix = ".ppgen-swap-new-"
	LockName  = "lock"
)

// staleNew is the age from which a directory still under its first name,
// with a free lock, is taken for stale.
const staleNew = time.Minute

// RemoveStale removes the tier directories under parent, other than own,
// whose lock nobody holds: their tiers' processes are gone. Directories
// without a lock file (made by another program, or by an older ppgen) are
// left alone; failures are logged, not returned: they are not the
// caller's. It returns the directories it removed, for the caller to
// report.
func RemoveStale(parent, own string) []string {
	es, err := os.ReadDir(parent)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range es {
		name := e.Name()
		if !e.IsDir() || !(strings.HasPrefix(name, Prefix) || strings.HasPrefix(name, NewPrefix)) {
			continue
		}
		dir := filepath.Join(parent, name)
		if dir == own {
			continue
		}
		if strings.HasPrefix(name, NewPrefix) {
			// Its tier may be between creating the lock file and locking
			// it: only an old one is taken for stale.
			if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < staleNew {
				continue
			}
		}
		stale, unlock := tryLock(dir)
		if !stale {
			continue
		}
		err := os.RemoveAll(dir)
		unlock()
		if err != nil {
			slog.Warn("swap: cannot remove the stale directory of a dead process", "dir", dir, "err", err)
			continue
		}
		removed = append(removed, dir)
	}
	return removed
}
