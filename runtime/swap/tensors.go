package swap

import (
	"fmt"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/internal/dense"
	"github.com/ppgen/ppgen/runtime/internal/wire"
)

// meta describes one distinct tensor of an offload: what Load needs to
// rebuild it.
type meta struct {
	dt    tensor.Dtype
	shape tensor.Shape
	n     int // elements
}

// bytes returns the size of the tensor's data.
func (m meta) bytes() int64 { return int64(m.n) * int64(m.dt.Size()) }

// plan is the layout of one offload: the distinct tensors of the caller's
// list (a tensor listed twice is moved once), and for each list entry the
// index of its distinct tensor, or -1 for a nil entry.
type plan struct {
	metas []meta
	index []int
	bytes int64
}

// planOf checks ts and lays them out. It returns the distinct tensors as
// row-major contiguous tensors (a view that needs an iterator is copied).
func planOf(ts []*tensor.Dense) (plan, []*tensor.Dense, error) {
	p := plan{index: make([]int, len(ts))}
	var src []*tensor.Dense
	seen := make(map[*tensor.Dense]int, len(ts))
	for i, t := range ts {
		if t == nil {
			p.index[i] = -1
			continue
		}
		if k, ok := seen[t]; ok {
			p.index[i] = k
			continue
		}
		c, m, err := check(t)
		if err != nil {
			return plan{}, nil, fmt.Errorf("tensor %d: %w", i, err)
		}
		seen[t] = len(src)
		p.index[i] = len(src)
		src = append(src, c)
		p.metas = append(p.metas, m)
		p.bytes += m.bytes()
	}
	return p, src, nil
}

// check returns t as a row-major contiguous tensor and its meta, or why it
// cannot be swapped. A tensor that makes gorgonia panic (an uninitialized
// *tensor.Dense, say) is reported as an error.
func check(t *tensor.Dense) (c *tensor.Dense, m meta, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, m, err = nil, meta{}, fmt.Errorf("invalid tensor: %v", r)
		}
	}()
	if t.Dtype().Type == nil {
		return nil, meta{}, fmt.Errorf("tensor has no dtype (not made with tensor.New?)")
	}
	sh := t.Shape()
	if dt := t.Dtype(); dt != tensor.Float32 && dt != tensor.Float64 {
		return nil, meta{}, fmt.Errorf("%v %v: dtype not supported, want float32 or float64", dt, sh)
	}
	if n := sh.TotalSize(); n == 0 && len(sh) > 0 {
		// No data to move (and gorgonia's Data panics on an empty tensor).
		return t, meta{dt: t.Dtype(), shape: sh.Clone()}, nil
	}
	if t.IsScalar() {
		return nil, meta{}, fmt.Errorf("%v scalar: scalars are not supported, want a tensor of at least one dimension", t.Dtype())
	}
	f, err := dense.Flat(t)
	if err != nil {
		return nil, meta{}, fmt.Errorf("%v %w", t.Dtype(), err)
	}
	t = f
	n := sh.TotalSize()
	return t, meta{dt: t.Dtype(), shape: sh.Clone(), n: n}, nil
}

// dataBytes returns the bytes of the first n elements of a checked tensor's
// backing slice, without copying.
func dataBytes(t *tensor.Dense, n int) []byte {
	if n == 0 {
		return nil
	}
	switch d := t.Data().(type) {
	case []float32:
		return wire.AsBytes(d[:n])
	case []float64:
		return wire.AsBytes(d[:n])
	}
	return nil
}

// alloc returns a new backing slice for m and a byte view of it. Allocating
// the element type keeps the slice aligned for it.
func alloc(m meta) (backing any, view []byte) {
	if m.dt == tensor.Float32 {
		s := make([]float32, m.n)
		return s, wire.AsBytes(s)
	}
	s := make([]float64, m.n)
	return s, wire.AsBytes(s)
}

// build returns the tensor of m over backing (from alloc).
func build(m meta, backing any) *tensor.Dense {
	return tensor.New(tensor.WithShape(m.shape.Clone()...), tensor.WithBacking(backing))
}

// SizeOf returns the data bytes of ts: the sum over the distinct non-nil
// tensors (a tensor listed twice counts once) of elements × element size.
// It is what Offload moves for ts.
func SizeOf(ts []*tensor.Dense) int64 {
	var n int64
	seen := make(map[*tensor.Dense]bool, len(ts))
	for _, t := range ts {
		if t == nil || seen[t] || t.Dtype().Type == nil {
			continue
		}
		seen[t] = true
		n += int64(t.Shape().TotalSize()) * int64(t.Dtype().Size())
	}
	return n
}
