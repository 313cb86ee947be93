package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/internal/dense"
)

// float is the set of element types the kernels are instantiated for.
type float interface{ ~float32 | ~float64 }

// NewRand returns a deterministic random source for NewLinear: a PCG
// generator seeded with seed.
func NewRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
}

// checkDtype reports whether dt is a dtype this package computes in.
func checkDtype(dt tensor.Dtype) bool { return dt == tensor.Float32 || dt == tensor.Float64 }

// matrix checks that t is a non-empty 2-D float32/float64 tensor and returns
// a row-major contiguous tensor with the same values (t itself, or a copy
// when t is a view or lazily transposed) and its dimensions.
func matrix(where, what string, t *tensor.Dense) (*tensor.Dense, int, int, error) {
	if t == nil {
		return nil, 0, 0, fmt.Errorf("nn: %s: %s is nil", where, what)
	}
	sh := t.Shape()
	if len(sh) != 2 {
		return nil, 0, 0, fmt.Errorf("nn: %s: %s has shape %v, want a 2-D [batch, features] tensor", where, what, sh)
	}
	if sh[0] <= 0 || sh[1] <= 0 {
		return nil, 0, 0, fmt.Errorf("nn: %s: %s has empty shape %v", where, what, sh)
	}
	if !checkDtype(t.Dtype()) {
		return nil, 0, 0, fmt.Errorf("nn: %s: %s %v has dtype %v, want float32 or float64", where, what, sh, t.Dtype())
	}
	t, err := contiguous(where, what, t)
	if err != nil {
		return nil, 0, 0, err
	}
	return t, sh[0], sh[1], nil
}

// contiguous returns t, or a row-major contiguous copy of it (dense.Flat),
// with what is wrong prefixed by where and what the tensor is.
func contiguous(where, what string, t *tensor.Dense) (*tensor.Dense, error) {
	t, err := dense.Flat(t)
	if err != nil {
		return nil, fmt.Errorf("nn: %s: %s %w", where, what, err)
	}
	return t, nil
}

// data returns the first n elements of t's backing slice. Callers have
// checked t's dtype and layout.
func data[T float](t *tensor.Dense) []T {
	return t.Data().([]T)[:t.Shape().TotalSize()]
}

// newMatrix returns a zeroed rows×cols tensor of dtype dt. Its backing
// slice is one given back (giveBack), cleared, when there is one of its
// length.
func newMatrix(dt tensor.Dtype, rows, cols int) *tensor.Dense {
	if dt == tensor.Float32 {
		return tensor.New(tensor.WithShape(rows, cols), tensor.WithBacking(take[float32](rows*cols)))
	}
	return tensor.New(tensor.WithShape(rows, cols), tensor.WithBacking(take[float64](rows*cols)))
}

// newVector returns a zeroed 1-D tensor of dtype dt.
func newVector(dt tensor.Dtype, n int) *tensor.Dense {
	if dt == tensor.Float32 {
		return tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float32, n)))
	}
	return tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float64, n)))
}

// Buffer reuse. A training step allocates every activation and gradient
// of every micro-batch anew; the ones whose lifetime is clear are given
// back when it ends and taken again by the next of their length:
//
//   - a Sequential's inner outputs (not its last, which its caller holds),
//     when its saved context ends (Sequential.BackwardWeight): the layers
//     that read them (the producer's and the consumer's contexts) are
//     inner layers, done by then; see between;
//   - a Sequential's inner output gradients, once the inner layers that
//     read them are done (Sequential.BackwardInput, BackwardWeight);
//   - a Residual's inner output and inner input gradient, once added
//     (the output only when the inner context does not read it: see
//     keepsOutput);
//   - attention's weights, at the end of its BackwardInput, the one call
//     that reads them, and the scratch of its softmax and backward.
//
// A buffer is given back only by the saved context that holds it, once
// nothing reads it, so micro-batches in flight at once (several saved
// contexts of one layer between their forward and backward) never share
// one, and the stages' goroutines may take and give back at once: bufs
// are sync.Pools, one per element type and length, which the garbage
// collector empties over time. take clears what it takes, so a taken
// buffer is the zeroed slice make returns: reuse changes no result.

// noReuse turns buffer reuse off: the tests' reference to compare with.
// poison, on in test binaries, fills what giveBack hands back with NaN, so
// that anything still reading a buffer given back shows in results: every
// bit-for-bit comparison of the repository's tests runs with it.
var (
	noReuse atomic.Bool
	poison  = testing.Testing()
)

// bufKey names one pool: the element type and the length.
type bufKey struct {
	f32 bool
	n   int
}

var bufs sync.Map // bufKey → *sync.Pool of *[]T

func bufPool[T float](n int) *sync.Pool {
	var z T
	_, f32 := any(z).(float32)
	k := bufKey{f32, n}
	if p, ok := bufs.Load(k); ok {
		return p.(*sync.Pool)
	}
	p, _ := bufs.LoadOrStore(k, new(sync.Pool))
	return p.(*sync.Pool)
}

// take returns a zeroed slice of n elements: one given back, cleared, or a
// new one.
func take[T float](n int) []T {
	if noReuse.Load() {
		return make([]T, n)
	}
	if v := bufPool[T](n).Get(); v != nil {
		s := *v.(*[]T)
		clear(s)
		return s
	}
	return make([]T, n)
}

// giveBackSlice hands s to the next take of its length. The caller holds
// the only reference to s that anything reads any more.
func giveBackSlice[T float](s []T) {
	if len(s) == 0 || noReuse.Load() {
		return
	}
	if poison {
		nan := T(math.NaN())
		for i := range s {
			s[i] = nan
		}
	}
	bufPool[T](len(s)).Put(&s)
}

// giveBack hands t's backing slice to the next take of its length (see
// giveBackSlice); nil tensors and other dtypes are ignored.
func giveBack(t *tensor.Dense) {
	if t == nil {
		return
	}
	switch d := t.Data().(type) {
	case []float64:
		giveBackSlice(d)
	case []float32:
		giveBackSlice(d)
	}
}

// sameShape reports whether a and b have equal shapes.
func sameShape(a, b tensor.Shape) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
