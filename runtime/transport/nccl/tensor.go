package nccl

import (
	"errors"
	"fmt"
	"unsafe"

	"gorgonia.org/tensor"
)

// payload is a tensor's dtype, shape and raw native-order bytes (the
// contiguous backing array; keep holds it alive).
type payload struct {
	dt   uint8
	dims []int
	raw  []byte
	keep *tensor.Dense
}

// payloadOf returns the bytes of t, materializing views first.
func payloadOf(t *tensor.Dense, maxBytes int64) (payload, error) {
	if t == nil {
		return payload{}, errors.New("nil tensor")
	}
	if t.IsMaterializable() || t.RequiresIterator() {
		m, ok := t.Materialize().(*tensor.Dense)
		if !ok {
			return payload{}, fmt.Errorf("cannot materialize tensor of shape %v", t.Shape())
		}
		t = m
	}
	dims := append([]int(nil), t.Shape()...)
	if len(dims) > maxDims {
		return payload{}, fmt.Errorf("tensor has %d dimensions, at most %d are supported", len(dims), maxDims)
	}
	var es int64
	var dt uint8
	switch t.Dtype() {
	case tensor.Float32:
		dt, es = dtFloat32, 4
	case tensor.Float64:
		dt, es = dtFloat64, 8
	default:
		return payload{}, fmt.Errorf("unsupported dtype %v (float32 and float64 are)", t.Dtype())
	}
	n := es
	for _, d := range dims {
		if d < 0 {
			return payload{}, fmt.Errorf("negative dimension in shape %v", dims)
		}
		if n != 0 && int64(d) > maxBytes/n {
			return payload{}, fmt.Errorf("tensor of shape %v is over %d bytes (MaxMessageBytes)", dims, maxBytes)
		}
		n *= int64(d)
	}
	var raw []byte
	have := 0
	if dt == dtFloat32 {
		e := t.Float32s()
		raw, have = bytesOf(e, int(n/es)), len(e)
	} else {
		e := t.Float64s()
		raw, have = bytesOf(e, int(n/es)), len(e)
	}
	if raw == nil && n > 0 {
		return payload{}, fmt.Errorf("tensor of shape %v has only %d elements", dims, have)
	}
	return payload{dt, dims, raw, t}, nil
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
func newTensor(h header) (*tensor.Dense, []byte) {
	n := 1
	for _, d := range h.dims {
		n *= d
	}
	if h.dt == dtFloat32 {
		return newOf(tensor.Float32, (*tensor.Dense).Float32s, h.dims, n)
	}
	return newOf(tensor.Float64, (*tensor.Dense).Float64s, h.dims, n)
}

func newOf[E float32 | float64](d tensor.Dtype, elems func(*tensor.Dense) []E, dims []int, n int) (*tensor.Dense, []byte) {
	var t *tensor.Dense
	if len(dims) == 0 {
		t = tensor.New(tensor.Of(d), tensor.WithShape())
	} else {
		t = tensor.New(tensor.WithShape(dims...), tensor.WithBacking(make([]E, n)))
	}
	s := elems(t)
	return t, bytesOf(s, len(s))
}
