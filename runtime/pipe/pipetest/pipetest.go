// Package pipetest holds a small deterministic model for tests of
// runtime/pipe and of programs running on it: Affine stages (y = a*x + b),
// the MSE loss, a Data source and Sequential, the same training without a
// pipeline, so that a pipelined run can be compared with it bit for bit.
package pipetest

import (
	"fmt"
	"math"
	"sort"

	"gorgonia.org/tensor"
)

// Affine is a test Stage: y = a*x + b elementwise, with learnable scalars a
// and b. It keeps every micro-batch's weight-gradient contribution and sums
// them sorted at the optimizer step, so the result does not depend on the
// order in which a schedule runs the W steps: pipeline and Sequential runs
// must agree bit for bit.
type Affine struct {
	A, B     float64
	GA, GB   []float64 // the weight-gradient contributions since the last Step
	FwdCalls int
	FailAt   func(kind string, call int) error // fault injection: called before each Forward
}

// Float is the element type of MapTo.
type Float interface{ ~float32 | ~float64 }

// MapTo returns f applied to every element of src.
func MapTo[T Float](src []T, f func(i int, v T) T) []T {
	out := make([]T, len(src))
	for i, v := range src {
		out[i] = f(i, v)
	}
	return out
}

// Like returns a tensor of t's shape over data (a scalar when t is one).
func Like(t *tensor.Dense, data any) *tensor.Dense {
	if len(t.Shape()) == 0 {
		switch d := data.(type) {
		case []float32:
			return tensor.New(tensor.FromScalar(d[0]))
		case []float64:
			return tensor.New(tensor.FromScalar(d[0]))
		}
	}
	return tensor.New(tensor.WithShape(t.Shape().Clone()...), tensor.WithBacking(data))
}

// Forward returns a*x + b and keeps x as the saved context.
func (s *Affine) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	s.FwdCalls++
	if s.FailAt != nil {
		if err := s.FailAt("F", s.FwdCalls-1); err != nil {
			return nil, nil, err
		}
	}
	switch x.Dtype() {
	case tensor.Float32:
		a, b := float32(s.A), float32(s.B)
		return Like(x, MapTo(x.Float32s(), func(_ int, v float32) float32 { return a*v + b })), x, nil
	case tensor.Float64:
		return Like(x, MapTo(x.Float64s(), func(_ int, v float64) float64 { return s.A*v + s.B })), x, nil
	}
	return nil, nil, fmt.Errorf("Affine: dtype %v", x.Dtype())
}

// BackwardInput returns a*dy.
func (s *Affine) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	switch dy.Dtype() {
	case tensor.Float32:
		a := float32(s.A)
		return Like(dy, MapTo(dy.Float32s(), func(_ int, v float32) float32 { return a * v })), nil
	default:
		return Like(dy, MapTo(dy.Float64s(), func(_ int, v float64) float64 { return s.A * v })), nil
	}
}

// BackwardWeight records the micro-batch's contribution to the gradients
// of a and b.
func (s *Affine) BackwardWeight(saved any, dy *tensor.Dense) error {
	x := saved.(*tensor.Dense)
	var ga, gb float64
	switch dy.Dtype() {
	case tensor.Float32:
		xs := x.Float32s()
		for i, v := range dy.Float32s() {
			ga += float64(v * xs[i])
			gb += float64(v)
		}
	default:
		xs := x.Float64s()
		for i, v := range dy.Float64s() {
			ga += v * xs[i]
			gb += v
		}
	}
	s.GA = append(s.GA, ga)
	s.GB = append(s.GB, gb)
	return nil
}

// SortedSum is the sum of v in ascending order: the same whatever v's order.
func SortedSum(v []float64) float64 {
	v = append([]float64(nil), v...)
	sort.Float64s(v)
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

// LR is the learning rate of Step.
const LR = 1.0 / 64

// Step is the optimizer step: a and b move by LR times the sorted sum of
// their gradient contributions, which it then forgets.
func (s *Affine) Step() {
	s.A -= LR * SortedSum(s.GA)
	s.B -= LR * SortedSum(s.GB)
	s.GA, s.GB = s.GA[:0], s.GB[:0]
}

// MSE is the test Loss: 0.5*sum((y-t)^2), dy = y - t.
type MSE struct{}

// Loss returns 0.5*sum((y-target)^2) and y - target.
func (MSE) Loss(y, target *tensor.Dense) (float64, *tensor.Dense, error) {
	var loss float64
	switch y.Dtype() {
	case tensor.Float32:
		ts := target.Float32s()
		dy := MapTo(y.Float32s(), func(i int, v float32) float32 { return v - ts[i] })
		for _, d := range dy {
			loss += 0.5 * float64(d) * float64(d)
		}
		return loss, Like(y, dy), nil
	default:
		ts := target.Float64s()
		dy := MapTo(y.Float64s(), func(i int, v float64) float64 { return v - ts[i] })
		for _, d := range dy {
			loss += 0.5 * d * d
		}
		return loss, Like(y, dy), nil
	}
}

// Data is the DataSource: iteration-dependent deterministic micro-batches of
// shape (2, 3).
type Data struct {
	Iter int
	F32  bool
}

func (d *Data) gen(micro, salt int) *tensor.Dense {
	v := make([]float64, 6)
	for i := range v {
		v[i] = float64((d.Iter*7+micro*5+i*3+salt)%9-4) / 4
	}
	if d.F32 {
		w := make([]float32, len(v))
		for i := range v {
			w[i] = float32(v[i])
		}
		return tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(w))
	}
	return tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(v))
}

// Input returns micro-batch micro's input.
func (d *Data) Input(micro int) (*tensor.Dense, error) { return d.gen(micro, 0), nil }

// Target returns micro-batch micro's labels.
func (d *Data) Target(micro int) (*tensor.Dense, error) { return d.gen(micro, 1), nil }

// NewStages returns n Affine stages with distinct parameters.
func NewStages(n int) []*Affine {
	st := make([]*Affine, n)
	for i := range st {
		st[i] = &Affine{A: 1 + float64(i)/8, B: float64(i%3-1) / 8}
	}
	return st
}

// Sequential trains the same model on the same micro-batches without a
// pipeline: the reference. It returns the per-micro losses of each iteration.
func Sequential(stages []*Affine, micro, iters int, f32 bool) [][]float64 {
	var out [][]float64
	for it := range iters {
		d := &Data{Iter: it, F32: f32}
		losses := make([]float64, micro)
		for m := range micro {
			x, _ := d.Input(m)
			saved := make([]any, len(stages))
			for s, st := range stages {
				var err error
				x, saved[s], err = st.Forward(x)
				if err != nil {
					panic(err)
				}
			}
			t, _ := d.Target(m)
			loss, dy, _ := MSE{}.Loss(x, t)
			losses[m] = loss
			for s := len(stages) - 1; s >= 0; s-- {
				dx, _ := stages[s].BackwardInput(saved[s], dy)
				_ = stages[s].BackwardWeight(saved[s], dy)
				dy = dx
			}
		}
		for _, st := range stages {
			st.Step()
		}
		out = append(out, losses)
	}
	return out
}

// SameFloats reports whether a and b are equal element by element, NaN
// equal to NaN.
func SameFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && !(math.IsNaN(a[i]) && math.IsNaN(b[i])) {
			return false
		}
	}
	return true
}
