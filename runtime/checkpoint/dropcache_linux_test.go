//go:build linux && (amd64 || arm64)

package checkpoint

import (
	"os"
	"syscall"
)

// dropCache drops path's pages from the page cache (posix_fadvise
// POSIX_FADV_DONTNEED over the whole file); dirty pages stay.
func dropCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	const dontNeed = 4 // POSIX_FADV_DONTNEED
	if _, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, dontNeed, 0, 0); e != 0 {
		return e
	}
	return nil
}
