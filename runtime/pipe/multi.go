package pipe

import (
	"errors"
	"fmt"
	"math"

	"github.com/ppgen/ppgen/runtime/internal/wire"
	"gorgonia.org/tensor"
)

// The set codec: several tensors in one carrier tensor, so that a stage
// boundary can carry a set (hidden states and a mask, positions) as one
// message on every transport. Multi (multistage.go) builds the stage
// adapter on it; docs/internals.md "Several tensors per boundary" is the
// contract.
//
// A carrier is a 1-D float64 tensor of words:
//
//	word 0            multiMagic
//	word 1            multiVersion (1)
//	word 2            n, the number of parts (0..MaxParts)
//	per part          its kind (0 none, 1 float32, 2 float64: the
//	                  transports' dtype codes), its rank r (0..MaxPartDims;
//	                  0 for none) and r dims
//	then per part     its elements: a float64 part one per word, a float32
//	                  part two per word in native byte order (the first in
//	                  the word's first four bytes), the last word padded
//	                  with zero bytes
//
// Every header word is an integer held exactly in a float64. The carrier
// has no words beyond the last part's.

// MaxParts is the most tensors a set may have.
const MaxParts = 256

// MaxPartDims is the most dimensions a part may have: the transports'.
const MaxPartDims = wire.MaxDims

// maxPartElems bounds a part's element count, and the product of its
// nonzero dims (1<<40: 8 TiB of float64s).
const maxPartElems = min(1<<40, math.MaxInt)

const (
	multiMagic   = 0x70706d73 // "ppms"
	multiVersion = 1
	partNone     = 0
	partFloat32  = wire.Float32
	partFloat64  = wire.Float64
)

// Pack puts the ordered set ts into one carrier tensor. Each part is a
// float32 or float64 tensor of any shape (a scalar, zero elements), or nil
// (a part without a value: the gradient of a tensor that has none); views
// and transposes are read as their logical layout. The carrier is a new
// tensor: ts may be reused afterwards. Unpack reverses it.
func Pack(ts []*tensor.Dense) (*tensor.Dense, error) {
	if len(ts) > MaxParts {
		return nil, fmt.Errorf("pipe: pack: %d tensors, at most %d (MaxParts)", len(ts), MaxParts)
	}
	parts := make([]wire.Payload, len(ts))
	words := 3 // magic, version, count
	for i, t := range ts {
		words += 2
		if t == nil {
			continue
		}
		if t.Dtype() != tensor.Float32 && t.Dtype() != tensor.Float64 {
			return nil, fmt.Errorf("pipe: pack: tensor %d has dtype %v; want float32 or float64", i, t.Dtype())
		}
		b, err := wire.PayloadOf(t)
		if err != nil {
			return nil, fmt.Errorf("pipe: pack: tensor %d: %w", i, err)
		}
		if _, err := partElems(b.Dims); err != nil {
			return nil, fmt.Errorf("pipe: pack: tensor %d: %w", i, err)
		}
		parts[i] = b
		words += len(b.Dims) + (len(b.Raw)+7)/8
	}
	c, raw := wire.Alloc(wire.Float64, []int{words})
	w := c.Float64s()
	w[0], w[1], w[2] = multiMagic, multiVersion, float64(len(ts))
	k := 3
	for _, b := range parts {
		w[k], w[k+1] = float64(b.Dtype), float64(len(b.Dims))
		k += 2
		for _, d := range b.Dims {
			w[k] = float64(d)
			k++
		}
	}
	off := 8 * k
	for _, b := range parts {
		copy(raw[off:], b.Raw)
		off += (len(b.Raw) + 7) / 8 * 8
	}
	return c, nil
}

// MultiError is the error of Unpack on a malformed carrier: Field names
// the header word or part that is wrong ("magic", "count", "part 2 dim 1",
// "part 2 data", "length").
type MultiError struct {
	Field string
	Err   error
}

func (e *MultiError) Error() string { return "pipe: unpack: " + e.Field + ": " + e.Err.Error() }
func (e *MultiError) Unwrap() error { return e.Err }

// ErrNotCarrier is wrapped by Unpack's error for a tensor that is not a
// carrier at all (another dtype or rank, no magic word).
var ErrNotCarrier = errors.New("not a tensor set made by pipe.Pack")

// Unpack returns the ordered set of tensors c carries (see Pack): new
// tensors, nil for a part without a value. c may come from a peer: every
// count, rank, dim and length is checked against the carrier's size before
// it sizes an allocation, and a malformed carrier is a *MultiError naming
// the field.
func Unpack(c *tensor.Dense) ([]*tensor.Dense, error) {
	if c == nil {
		return nil, &MultiError{"carrier", errors.New("nil tensor")}
	}
	if c.Dtype() != tensor.Float64 || c.Dims() != 1 {
		return nil, &MultiError{"carrier", fmt.Errorf("%w: a %v tensor of shape %v; a carrier is 1-D float64", ErrNotCarrier, c.Dtype(), c.Shape())}
	}
	b, err := wire.PayloadOf(c)
	if err != nil {
		return nil, &MultiError{"carrier", err}
	}
	w := b.Keep.Float64s()[:b.Dims[0]]
	r := multiReader{w: w}
	if v, err := r.int(field{"magic", -1, -1}, 0, math.MaxInt32); err != nil || v != multiMagic {
		return nil, &MultiError{"magic", fmt.Errorf("%w: the first word is %v", ErrNotCarrier, first(w))}
	}
	if _, err := r.int(field{"version", -1, -1}, multiVersion, multiVersion); err != nil {
		return nil, err
	}
	n, err := r.int(field{"count", -1, -1}, 0, MaxParts)
	if err != nil {
		return nil, err
	}
	// The header first, every field checked; then the data, whose length
	// the header implies, against the carrier's.
	kinds := make([]int, n)
	dims := make([][]int, n)
	elems := make([]int, n)
	for i := range n {
		if kinds[i], err = r.int(field{"kind", i, -1}, 0, 2); err != nil {
			return nil, err
		}
		rank, err := r.int(field{"rank", i, -1}, 0, MaxPartDims)
		if err != nil {
			return nil, err
		}
		if kinds[i] == partNone && rank != 0 {
			return nil, &MultiError{field{"rank", i, -1}.String(), fmt.Errorf("%d for a part without a value; want 0", rank)}
		}
		dims[i] = make([]int, rank)
		for j := range rank {
			if dims[i][j], err = r.int(field{"dim", i, j}, 0, maxPartElems); err != nil {
				return nil, err
			}
		}
		if kinds[i] != partNone {
			if elems[i], err = partElems(dims[i]); err != nil {
				return nil, &MultiError{field{"shape", i, -1}.String(), err}
			}
		}
	}
	need := r.k
	for i, e := range elems {
		switch kinds[i] {
		case partFloat32:
			need += (e + 1) / 2
		case partFloat64:
			need += e
		}
		if need > len(w) {
			return nil, &MultiError{fmt.Sprintf("part %d data", i), fmt.Errorf("shape %v of %s needs %d words in all, the carrier has %d", dims[i], kindName(kinds[i]), need, len(w))}
		}
	}
	if need != len(w) {
		return nil, &MultiError{"length", fmt.Errorf("%d words, the header describes %d", len(w), need)}
	}
	out := make([]*tensor.Dense, n)
	off := 8 * r.k
	for i := range n {
		if kinds[i] == partNone {
			continue
		}
		t, raw := wire.Alloc(uint8(kinds[i]), dims[i])
		copy(raw, b.Raw[off:off+len(raw)])
		off += (len(raw) + 7) / 8 * 8
		out[i] = t
	}
	return out, nil
}

// multiReader reads a carrier's header words in order.
type multiReader struct {
	w []float64
	k int
}

// field names a header field: what, of part part (-1: the carrier's),
// dim dim (-1: none). It is formatted only for an error.
type field struct {
	what      string
	part, dim int
}

func (f field) String() string {
	switch {
	case f.part < 0:
		return f.what
	case f.dim < 0:
		return fmt.Sprintf("part %d %s", f.part, f.what)
	}
	return fmt.Sprintf("part %d dim %d", f.part, f.dim)
}

// int reads the next word as an integer in [lo, hi], or fails naming f.
func (r *multiReader) int(f field, lo, hi int) (int, error) {
	if r.k >= len(r.w) {
		return 0, &MultiError{f.String(), fmt.Errorf("the carrier ends at word %d", r.k)}
	}
	v := r.w[r.k]
	if !(v >= float64(lo) && v <= float64(hi)) || v != math.Trunc(v) {
		return 0, &MultiError{f.String(), fmt.Errorf("word %d is %v; want an integer in [%d, %d]", r.k, v, lo, hi)}
	}
	r.k++
	return int(v), nil
}

// partElems returns the element count of a part of shape dims: the product,
// 0 when a dim is 0, at most maxPartElems, as is the product of the nonzero
// dims (so no stride overflows).
func partElems(dims []int) (int, error) {
	p, zero := 1, false
	for _, d := range dims {
		switch {
		case d < 0 || d > maxPartElems:
			return 0, fmt.Errorf("dim %d of shape %v; want 0..%d", d, dims, maxPartElems)
		case d == 0:
			zero = true
		case p > maxPartElems/d:
			return 0, fmt.Errorf("shape %v has more than %d elements", dims, maxPartElems)
		default:
			p *= d
		}
	}
	if zero {
		return 0, nil
	}
	return p, nil
}

func kindName(k int) string {
	switch k {
	case partFloat32:
		return "float32"
	case partFloat64:
		return "float64"
	}
	return "none"
}

func first(w []float64) any {
	if len(w) == 0 {
		return "missing"
	}
	return w[0]
}
