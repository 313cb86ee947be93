// Package dense checks the layout of gorgonia tensors that the runtime reads
// as flat slices of float32 or float64 (runtime/nn's kernels, runtime/swap's
// copies).
package dense

import (
	"fmt"

	"gorgonia.org/tensor"
)

// Flat returns t, or a row-major contiguous copy of it when t is a view,
// after checking that its backing slice is a []float32 or []float64 holding
// at least its elements. The error starts with t's shape and says what is
// wrong; callers prefix what the tensor is ("nn: Linear.Forward: input").
func Flat(t *tensor.Dense) (*tensor.Dense, error) {
	sh := t.Shape()
	if t.IsMasked() {
		return nil, fmt.Errorf("%v is masked; masked tensors are not supported", sh)
	}
	if t.RequiresIterator() {
		m, ok := t.Materialize().(*tensor.Dense)
		if !ok {
			return nil, fmt.Errorf("%v could not be materialized", sh)
		}
		t = m
	}
	if o := t.DataOrder(); !o.IsRowMajor() || !o.IsContiguous() {
		return nil, fmt.Errorf("%v has data order %v, want row-major contiguous", sh, o)
	}
	n := sh.TotalSize()
	var have int
	switch d := t.Data().(type) {
	case []float32:
		have = len(d)
	case []float64:
		have = len(d)
	default:
		return nil, fmt.Errorf("%v has backing %T, want []float32 or []float64", sh, d)
	}
	if have < n {
		return nil, fmt.Errorf("%v has %d backing elements, want %d", sh, have, n)
	}
	return t, nil
}
