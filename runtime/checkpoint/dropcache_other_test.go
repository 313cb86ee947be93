//go:build !(linux && (amd64 || arm64))

package checkpoint

import "errors"

// dropCache would drop path's pages from the page cache; here it cannot.
func dropCache(string) error {
	return errors.New("posix_fadvise is wired for linux/amd64 and linux/arm64 only")
}
