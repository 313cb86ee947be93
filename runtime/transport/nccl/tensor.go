package nccl

import (
	"fmt"
	"unsafe"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/transport"
)

// payload is a tensor's dtype, shape and raw native-order bytes (the
// contiguous backing array; keep holds it alive).
type payload struct {
	dt   uint8
	dims []int
	raw  []byte
	keep *tensor.Dense
}

// payloadOf returns the bytes of t (transport.BytesOf), within maxBytes.
func payloadOf(t *tensor.Dense, maxBytes int64) (payload, error) {
	b, err := transport.BytesOf(t)
	if err != nil {
		return payload{}, err
	}
	if int64(len(b.Raw)) > maxBytes {
		return payload{}, fmt.Errorf("tensor of shape %v is %d bytes, over %d (MaxMessageBytes)", b.Dims, len(b.Raw), maxBytes)
	}
	raw := b.Raw
	if raw == nil {
		raw = []byte{}
	}
	return payload{b.Dtype, append([]int(nil), b.Dims...), raw, b.Keep}, nil
}

// bytesOf returns the first n elements of s as bytes, nil when s is shorter.
func bytesOf[E float32 | float64](s []E, n int) []byte {
	if len(s) < n {
		return nil
	}
	if n == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), int(unsafe.Sizeof(E(0)))*n)
}

// newTensor allocates the tensor a header describes and returns its bytes.
// The header was validated (decodeHeader), so the size is within bounds.
func newTensor(h header) (*tensor.Dense, []byte) { return transport.Alloc(h.dt, h.dims) }
