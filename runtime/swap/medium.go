package swap

// medium is where a tier keeps offloaded bytes. A tier calls put from the
// offload's goroutine and get from Load; calls for different ids may run
// concurrently, calls for one id never do.
type medium interface {
	// put stores src[i], the bytes of the distinct tensor metas[i], under
	// id; tag is the handle's label, which a medium may record to check
	// the data it gives back. It must not keep src after it returns.
	put(id uint64, tag string, metas []meta, src [][]byte) error
	// get returns new backing slices for metas holding the bytes put under
	// id (with the same tag), and forgets id.
	get(id uint64, tag string, metas []meta) ([]any, error)
	// drop forgets id's bytes, if any.
	drop(id uint64) error
	// close forgets everything; the medium is not used afterwards.
	close() error
	// String names the medium in errors: "host", "file tier under DIR".
	String() string
}
