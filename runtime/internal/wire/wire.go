// Package wire holds what the runtime's transports (runtime/transport's TCP
// and in-process ones, runtime/transport/mpi, runtime/transport/nccl) share
// about a message: the dtype codes, the one view of a tensor's bytes (which
// runtime/value, runtime/pipe and runtime/swap use too), the validation of a
// shape a peer sent, the channel's code on the wire, and the sentinel
// errors. runtime/transport re-exports the errors; the rest is internal to
// runtime/.
package wire

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ppgen/ppgen/runtime/dtype"
	"gorgonia.org/tensor"
)

// Dtype codes on the wire (every transport's headers, runtime/value's
// Dtype, runtime/pipe's multi-tensor codec): runtime/dtype's codes, as
// untyped constants for the byte fields of headers (TestDtypeCodes holds
// them equal).
const (
	Float32 = 1
	Float64 = 2
)

// MaxDims bounds the rank (number of dimensions) of a tensor on the wire.
const MaxDims = 16

// ElemSize is the bytes of one element of dtype code dt, 0 for an unknown
// code.
func ElemSize(dt uint8) int { return dtype.Dtype(dt).Size() }

// Payload is a tensor's bytes as the transports send them: its dtype code,
// shape and element count (1 for a scalar), and the raw native-order bytes
// of its contiguous backing array (N elements; empty, not nil, when N is
// 0). Keep holds the tensor alive while Raw is in use.
type Payload struct {
	Dtype uint8
	Dims  []int
	N     int
	Raw   []byte
	Keep  *tensor.Dense
}

// PayloadOf returns t's bytes for sending, materializing views and
// transposes first (into a new tensor: t is unchanged).
func PayloadOf(t *tensor.Dense) (Payload, error) {
	if t == nil {
		return Payload{}, errors.New("nil tensor")
	}
	if t.IsMaterializable() || t.RequiresIterator() {
		m, ok := t.Materialize().(*tensor.Dense)
		if !ok {
			return Payload{}, fmt.Errorf("cannot materialize tensor of shape %v", t.Shape())
		}
		t = m
	}
	return payload(t)
}

// Plain returns the bytes of t in place, for an operation that writes
// its result into t's own memory (the collectives): t must be a plain
// tensor, not a view, transposed or masked.
func Plain(t *tensor.Dense) (Payload, error) {
	if t == nil {
		return Payload{}, errors.New("nil tensor")
	}
	if t.IsMaterializable() || t.RequiresIterator() || t.IsMasked() {
		return Payload{}, fmt.Errorf("tensor %v is a view, transposed or masked; want a plain tensor", t.Shape())
	}
	return payload(t)
}

// payload reads a contiguous tensor's dtype, shape and bytes.
func payload(t *tensor.Dense) (Payload, error) {
	dims := []int(t.Shape())
	if len(dims) > MaxDims {
		return Payload{}, fmt.Errorf("tensor has %d dimensions, at most %d are supported", len(dims), MaxDims)
	}
	n := 1
	for _, d := range dims {
		if d < 0 {
			return Payload{}, fmt.Errorf("negative dimension in shape %v", t.Shape())
		}
		n *= d
	}
	p := Payload{Dims: dims, N: n, Keep: t}
	have := 0
	switch t.Dtype() {
	case tensor.Float32:
		e := t.Float32s()
		p.Dtype, p.Raw, have = Float32, prefix(e, n), len(e)
	case tensor.Float64:
		e := t.Float64s()
		p.Dtype, p.Raw, have = Float64, prefix(e, n), len(e)
	default:
		return Payload{}, fmt.Errorf("dtype %v; want float32 or float64", t.Dtype())
	}
	if p.Raw == nil {
		return Payload{}, fmt.Errorf("tensor of shape %v has only %d elements", t.Shape(), have)
	}
	return p, nil
}

// prefix is AsBytes of the first n elements of s, nil when s is shorter.
func prefix[E float32 | float64](s []E, n int) []byte {
	if len(s) < n {
		return nil
	}
	return AsBytes(s[:n])
}

// AsBytes views s's elements as their raw native-order bytes (no copy;
// empty, not nil, for an empty s).
func AsBytes[E float32 | float64](s []E) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), int(unsafe.Sizeof(s[0]))*len(s))
}

// Elems views b as elements of E (no copy): false when b is empty, not a
// whole number of elements, or not aligned for E.
func Elems[E float32 | float64](b []byte) ([]E, bool) {
	var z E
	size := int(unsafe.Sizeof(z))
	p := unsafe.Pointer(unsafe.SliceData(b))
	if len(b) == 0 || len(b)%size != 0 || uintptr(p)%uintptr(size) != 0 {
		return nil, false
	}
	return unsafe.Slice((*E)(p), len(b)/size), true
}

// Alloc returns a new tensor of dtype code dt (Float32 or Float64) and
// shape dims, whose product the caller has bounded, with its backing
// array as raw bytes for the caller to fill.
func Alloc(dt uint8, dims []int) (*tensor.Dense, []byte) {
	n := 1
	for _, d := range dims {
		n *= d
	}
	if dt == Float32 {
		return allocOf(tensor.Float32, (*tensor.Dense).Float32s, dims, n)
	}
	return allocOf(tensor.Float64, (*tensor.Dense).Float64s, dims, n)
}

// allocOf is Alloc for the element type E (of tensor dtype d, whose
// backing elems returns), n elements.
func allocOf[E float32 | float64](d tensor.Dtype, elems func(*tensor.Dense) []E, dims []int, n int) (*tensor.Dense, []byte) {
	var t *tensor.Dense
	if len(dims) == 0 {
		t = tensor.New(tensor.Of(d), tensor.WithShape())
	} else {
		t = tensor.New(tensor.WithShape(dims...), tensor.WithBacking(make([]E, n)))
	}
	return t, AsBytes(elems(t))
}
