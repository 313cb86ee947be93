// Package value is the runtime's neutral view of an array: a [Value] is a
// dtype, a shape and the native-order bytes of its elements, which every
// Go array library can give. It lets a trainer whose model runs on another
// array library (gonum's mat.Dense: package gonumvalue) plug into the
// pipeline runtime through runtime/pipe's value adapters (pipe.FromValues,
// pipe.FromValuesLoss, pipe.FromValuesData).
//
// The runtime itself still keeps gorgonia.org/tensor's *tensor.Dense in its
// slots and on its transports (the step paths are tuned on them, and the
// generated code and the Stage interface name them); the adapters convert
// at the stage boundary, without a copy where the bytes allow it. This
// package's default adapter is that one: [FromDense] makes a *tensor.Dense
// a Value and [ToDense] a Value a *tensor.Dense, reusing the transports'
// reading of a tensor's bytes (runtime/internal/wire's PayloadOf and Alloc).
// docs/internals.md, "Values", has the contract.
package value

import (
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/ppgen/ppgen/runtime/dtype"
)

// Dtype is an element type (runtime/dtype: the codes the transports and
// checkpoints share).
type Dtype = dtype.Dtype

// The element types the runtime carries.
const (
	Float32 = dtype.Float32
	Float64 = dtype.Float64
)

// Limits of a value's layout, checked before anything is allocated.
const (
	// MaxDims is the most dimensions a value has (the transports' bound).
	MaxDims = 16
	// MaxBytes bounds a value's payload: 1 TiB.
	MaxBytes = 1 << 40
)

// Value is an array of another library as the runtime sees it.
//
// Bytes returns the elements in row-major order as native-order bytes:
// len(Bytes()) = product(Shape())·Dtype().Size() (a shape of no dimensions
// is one element). It may alias the value's storage (a contiguous array
// does) or be a copy (a strided view); a value whose Bytes may be a copy
// implements [Aliased]. Callers call Bytes once per use: it may copy.
type Value interface {
	Dtype() Dtype
	Shape() []int
	Bytes() []byte
}

// Aliased is implemented by values whose Bytes are a copy in some states
// (a strided view): Aliased reports whether Bytes returns the storage
// itself, so that writes into the bytes change the value. A Value that does
// not implement it is taken as aliasing.
type Aliased interface {
	Aliased() bool
}

// IsAliased reports whether v's Bytes are its storage (Aliased).
func IsAliased(v Value) bool {
	a, ok := v.(Aliased)
	return !ok || a.Aliased()
}

// Maker makes the values of one library: Make returns a new value of dtype
// dt and shape shape, zero-filled, and its writable bytes (len = Size(dt,
// shape)), which alias the value's storage. The runtime validates dt and
// shape with Size before it calls Make; a Maker returns an error for a
// layout its library cannot hold (gonum's mat.Dense: float64, 2-D).
type Maker interface {
	Make(dt Dtype, shape []int) (v Value, buf []byte, err error)
}

// Viewer is implemented by Makers that can wrap existing bytes without a
// copy: View returns a value of dt and shape whose storage is buf (which
// has the length Size gives), or false where it cannot (buf misaligned for
// the element type, a layout the library cannot view); the caller then
// copies through Make.
type Viewer interface {
	View(dt Dtype, shape []int, buf []byte) (Value, bool)
}

// ErrLayout is wrapped by every error about a dtype, a shape or a byte
// length.
var ErrLayout = errors.New("bad value layout")

// Size returns the payload size in bytes of a value of dtype dt and shape
// shape, checking the dtype, the number of dimensions (at most MaxDims),
// every dimension (>= 0) and the product (no overflow, at most MaxBytes).
func Size(dt Dtype, shape []int) (int, error) {
	es := dt.Size()
	if es == 0 {
		return 0, fmt.Errorf("%w: dtype %v; want float32 or float64", ErrLayout, dt)
	}
	if len(shape) > MaxDims {
		return 0, fmt.Errorf("%w: shape %v has %d dimensions; at most %d are supported", ErrLayout, shape, len(shape), MaxDims)
	}
	// n is the payload; span the product of the dimensions other than
	// zero, bounded too, so that an empty value cannot carry dimensions
	// whose strides overflow.
	n, span := uint64(es), uint64(es)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("%w: shape %v has a negative dimension", ErrLayout, shape)
		}
		hi, lo := bits.Mul64(span, uint64(max(d, 1)))
		if hi != 0 || lo > MaxBytes {
			return 0, fmt.Errorf("%w: shape %v of %v is over %d bytes (or, with a zero dimension, its others would be)", ErrLayout, shape, dt, uint64(MaxBytes))
		}
		span, n = lo, n*uint64(d) // n <= span
	}
	if n > math.MaxInt {
		return 0, fmt.Errorf("%w: shape %v of %v is over this platform's int", ErrLayout, shape, dt)
	}
	return int(n), nil
}

// Parts returns v's dtype, shape and bytes, checked: v is not nil, its
// layout passes Size, and its bytes have that length. It calls each method
// of v once.
func Parts(v Value) (Dtype, []int, []byte, error) {
	if v == nil {
		return 0, nil, nil, fmt.Errorf("%w: nil value", ErrLayout)
	}
	dt, shape := v.Dtype(), v.Shape()
	n, err := Size(dt, shape)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("value %T: %w", v, err)
	}
	b := v.Bytes()
	if len(b) != n {
		return 0, nil, nil, fmt.Errorf("value %T: %w: %v %v has %d bytes, want %d", v, ErrLayout, dt, shape, len(b), n)
	}
	return dt, shape, b, nil
}

// Build returns a value of m's library holding src, of dtype dt and shape
// shape: a view of src when m is a Viewer that can view it (so the value
// aliases src), else a new value that Make returns, with src copied in.
// dt, shape and len(src) are checked first.
func Build(m Maker, dt Dtype, shape []int, src []byte) (Value, error) {
	if m == nil {
		return nil, errors.New("value: nil Maker")
	}
	n, err := Size(dt, shape)
	if err != nil {
		return nil, err
	}
	if len(src) != n {
		return nil, fmt.Errorf("%w: %v %v needs %d bytes, have %d", ErrLayout, dt, shape, n, len(src))
	}
	if vw, ok := m.(Viewer); ok {
		if v, ok := vw.View(dt, shape, src); ok && v != nil {
			return v, nil
		}
	}
	v, buf, err := m.Make(dt, shape)
	if err != nil {
		return nil, fmt.Errorf("%T.Make(%v, %v): %w", m, dt, shape, err)
	}
	if v == nil || len(buf) != n {
		return nil, fmt.Errorf("%T.Make(%v, %v) returned %d bytes (value %T); want %d", m, dt, shape, len(buf), v, n)
	}
	copy(buf, src)
	return v, nil
}

// Convert returns v as a value of m's library (Build of v's parts).
func Convert(m Maker, v Value) (Value, error) {
	dt, shape, b, err := Parts(v)
	if err != nil {
		return nil, err
	}
	return Build(m, dt, shape, b)
}
