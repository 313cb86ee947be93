package nn

import (
	"fmt"
	"math/rand/v2"

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

// newMatrix returns a zeroed rows×cols tensor of dtype dt.
func newMatrix(dt tensor.Dtype, rows, cols int) *tensor.Dense {
	if dt == tensor.Float32 {
		return tensor.New(tensor.WithShape(rows, cols), tensor.WithBacking(make([]float32, rows*cols)))
	}
	return tensor.New(tensor.WithShape(rows, cols), tensor.WithBacking(make([]float64, rows*cols)))
}

// newVector returns a zeroed 1-D tensor of dtype dt.
func newVector(dt tensor.Dtype, n int) *tensor.Dense {
	if dt == tensor.Float32 {
		return tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float32, n)))
	}
	return tensor.New(tensor.WithShape(n), tensor.WithBacking(make([]float64, n)))
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
