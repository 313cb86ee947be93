package swap

import (
	"fmt"
	"sync"
)

// hostMedium keeps offloaded bytes in buffers it allocates and owns. The
// buffers are allocated as the tensors' element type, so Load hands them to
// the rebuilt tensors without a second copy.
type hostMedium struct {
	mu   sync.Mutex
	data map[uint64][]any
}

func newHostMedium() *hostMedium { return &hostMedium{data: make(map[uint64][]any)} }

func (h *hostMedium) put(id uint64, _ string, metas []meta, src [][]byte) error {
	bufs := make([]any, len(metas))
	for i, m := range metas {
		b, view := alloc(m)
		copy(view, src[i])
		bufs[i] = b
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.data == nil {
		return fmt.Errorf("host memory is released")
	}
	h.data[id] = bufs
	return nil
}

func (h *hostMedium) get(id uint64, _ string, metas []meta) ([]any, error) {
	h.mu.Lock()
	bufs, ok := h.data[id]
	delete(h.data, id)
	h.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no data in host memory for offload #%d", id)
	}
	if len(bufs) != len(metas) {
		return nil, fmt.Errorf("host memory holds %d tensors for offload #%d, want %d", len(bufs), id, len(metas))
	}
	return bufs, nil
}

func (h *hostMedium) drop(id uint64) error {
	h.mu.Lock()
	delete(h.data, id)
	h.mu.Unlock()
	return nil
}

func (h *hostMedium) close() error {
	h.mu.Lock()
	h.data = nil
	h.mu.Unlock()
	return nil
}

func (h *hostMedium) String() string { return "host tier" }
