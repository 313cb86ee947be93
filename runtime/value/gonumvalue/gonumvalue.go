// Package gonumvalue is the second array-library adapter of package value:
// gonum's *mat.Dense as a value.Value, so that a model written on
// gonum.org/v1/gonum/mat trains through the pipeline runtime
// (runtime/pipe's FromValues; examples/mlp -backend gonum).
//
// A mat.Dense is float64 and 2-D: a value of float32, or of another number
// of dimensions, has no mat.Dense, and Maker refuses it (so a gonum model
// trains in float64). mat.Dense holds no empty matrix, so Maker refuses a
// zero dimension too. A Matrix is row-major; its Bytes alias the matrix
// when its rows are contiguous (Stride == Cols, or one row) and are a copy
// of a strided view otherwise (Aliased reports which).
package gonumvalue

import (
	"fmt"

	"gonum.org/v1/gonum/mat"

	"github.com/ppgen/ppgen/runtime/internal/wire"
	"github.com/ppgen/ppgen/runtime/value"
)

// Matrix is a *mat.Dense as a value.Value (float64, shape [rows, cols]).
type Matrix struct{ M *mat.Dense }

// Of returns m as a Value.
func Of(m *mat.Dense) Matrix { return Matrix{m} }

// Dtype returns value.Float64.
func (Matrix) Dtype() value.Dtype { return value.Float64 }

// Shape returns [rows, cols] ([0, 0] for a nil or empty matrix).
func (v Matrix) Shape() []int {
	if v.M == nil {
		return []int{0, 0}
	}
	r, c := v.M.Dims()
	return []int{r, c}
}

// Aliased reports whether Bytes returns the matrix's storage: its rows are
// contiguous.
func (v Matrix) Aliased() bool {
	if v.M == nil {
		return true
	}
	raw := v.M.RawMatrix()
	return raw.Rows <= 1 || raw.Stride == raw.Cols
}

// Bytes returns the elements row by row as native-order bytes: the matrix's
// own storage when Aliased, else a copy.
func (v Matrix) Bytes() []byte {
	if v.M == nil || v.M.IsEmpty() {
		return []byte{}
	}
	raw := v.M.RawMatrix()
	n := raw.Rows * raw.Cols
	if v.Aliased() {
		return wire.AsBytes(raw.Data[:n])
	}
	out := make([]float64, 0, n)
	for r := range raw.Rows {
		out = append(out, raw.Data[r*raw.Stride:r*raw.Stride+raw.Cols]...)
	}
	return wire.AsBytes(out)
}

// Dense returns v as a *mat.Dense: the matrix itself for a Matrix, else
// (float64, 2-D, no zero dimension) a new matrix with v's bytes copied in.
func Dense(v value.Value) (*mat.Dense, error) {
	if m, ok := v.(Matrix); ok && m.M != nil {
		return m.M, nil
	}
	dt, shape, b, err := value.Parts(v)
	if err != nil {
		return nil, fmt.Errorf("gonumvalue.Dense: %w", err)
	}
	nv, buf, err := Maker{}.Make(dt, shape)
	if err != nil {
		return nil, fmt.Errorf("gonumvalue.Dense: %w", err)
	}
	copy(buf, b)
	return nv.(Matrix).M, nil
}

// Maker makes Matrix values (value.Maker) and views aligned bytes without a
// copy (value.Viewer).
type Maker struct{}

// layout checks that dt and shape have a mat.Dense: float64, 2-D, both
// dimensions positive.
func layout(dt value.Dtype, shape []int) (rows, cols int, err error) {
	if _, err := value.Size(dt, shape); err != nil {
		return 0, 0, err
	}
	switch {
	case dt != value.Float64:
		return 0, 0, fmt.Errorf("%w: gonum's mat.Dense is float64, not %v (train a gonum model in float64)", value.ErrLayout, dt)
	case len(shape) != 2:
		return 0, 0, fmt.Errorf("%w: shape %v: a mat.Dense is 2-D", value.ErrLayout, shape)
	case shape[0] == 0 || shape[1] == 0:
		return 0, 0, fmt.Errorf("%w: shape %v: a mat.Dense has no zero dimension", value.ErrLayout, shape)
	}
	return shape[0], shape[1], nil
}

// Make returns a new zero rows×cols matrix and its bytes.
func (Maker) Make(dt value.Dtype, shape []int) (value.Value, []byte, error) {
	r, c, err := layout(dt, shape)
	if err != nil {
		return nil, nil, err
	}
	m := mat.NewDense(r, c, nil)
	return Matrix{m}, wire.AsBytes(m.RawMatrix().Data), nil
}

// View returns a matrix whose storage is buf, or false where buf is not
// 8-byte aligned or the layout has no mat.Dense.
func (Maker) View(dt value.Dtype, shape []int, buf []byte) (value.Value, bool) {
	r, c, err := layout(dt, shape)
	if err != nil || len(buf) != 8*r*c {
		return nil, false
	}
	data, ok := wire.Elems[float64](buf)
	if !ok {
		return nil, false
	}
	return Matrix{mat.NewDense(r, c, data)}, true
}
