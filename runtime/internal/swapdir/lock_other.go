//go:build !unix

package swapdir

import "os"

// Lock does nothing where flock(2) is missing: stale directories are not
// detected there.
func Lock(dir string) (*os.File, error) { return nil, nil }

// tryLock never takes a directory for stale where flock(2) is missing.
func tryLock(dir string) (stale bool, unlock func()) { return false, nil }
