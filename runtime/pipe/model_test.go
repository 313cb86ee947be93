package pipe_test

import (
	"fmt"
	"math"
	"sort"

	"gorgonia.org/tensor"
)

// affine is a test Stage: y = a*x + b elementwise, with learnable scalars a
// and b. It keeps every micro-batch's weight-gradient contribution and sums
// them sorted at the optimizer step, so the result does not depend on the
// order in which a schedule runs the W steps: pipeline and sequential runs
// must agree bit for bit.
type affine struct {
	a, b     float64
	ga, gb   []float64
	fwdCalls int
	failAt   func(kind string, call int) error // fault injection
}

type float interface{ ~float32 | ~float64 }

func mapTo[T float](src []T, f func(i int, v T) T) []T {
	out := make([]T, len(src))
	for i, v := range src {
		out[i] = f(i, v)
	}
	return out
}

func like(t *tensor.Dense, data any) *tensor.Dense {
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

func (s *affine) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	s.fwdCalls++
	if s.failAt != nil {
		if err := s.failAt("F", s.fwdCalls-1); err != nil {
			return nil, nil, err
		}
	}
	switch x.Dtype() {
	case tensor.Float32:
		a, b := float32(s.a), float32(s.b)
		return like(x, mapTo(x.Float32s(), func(_ int, v float32) float32 { return a*v + b })), x, nil
	case tensor.Float64:
		return like(x, mapTo(x.Float64s(), func(_ int, v float64) float64 { return s.a*v + s.b })), x, nil
	}
	return nil, nil, fmt.Errorf("affine: dtype %v", x.Dtype())
}

func (s *affine) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	switch dy.Dtype() {
	case tensor.Float32:
		a := float32(s.a)
		return like(dy, mapTo(dy.Float32s(), func(_ int, v float32) float32 { return a * v })), nil
	default:
		return like(dy, mapTo(dy.Float64s(), func(_ int, v float64) float64 { return s.a * v })), nil
	}
}

func (s *affine) BackwardWeight(saved any, dy *tensor.Dense) error {
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
	s.ga = append(s.ga, ga)
	s.gb = append(s.gb, gb)
	return nil
}

func sortedSum(v []float64) float64 {
	v = append([]float64(nil), v...)
	sort.Float64s(v)
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

const lr = 1.0 / 64

func (s *affine) step() {
	s.a -= lr * sortedSum(s.ga)
	s.b -= lr * sortedSum(s.gb)
	s.ga, s.gb = s.ga[:0], s.gb[:0]
}

// mse is the test Loss: 0.5*sum((y-t)^2), dy = y - t.
type mse struct{}

func (mse) Loss(y, target *tensor.Dense) (float64, *tensor.Dense, error) {
	var loss float64
	switch y.Dtype() {
	case tensor.Float32:
		ts := target.Float32s()
		dy := mapTo(y.Float32s(), func(i int, v float32) float32 { return v - ts[i] })
		for _, d := range dy {
			loss += 0.5 * float64(d) * float64(d)
		}
		return loss, like(y, dy), nil
	default:
		ts := target.Float64s()
		dy := mapTo(y.Float64s(), func(i int, v float64) float64 { return v - ts[i] })
		for _, d := range dy {
			loss += 0.5 * d * d
		}
		return loss, like(y, dy), nil
	}
}

// data is the DataSource: iteration-dependent deterministic micro-batches of
// shape (2, 3).
type data struct {
	iter int
	f32  bool
}

func (d *data) gen(micro, salt int) *tensor.Dense {
	v := make([]float64, 6)
	for i := range v {
		v[i] = float64((d.iter*7+micro*5+i*3+salt)%9-4) / 4
	}
	if d.f32 {
		w := make([]float32, len(v))
		for i := range v {
			w[i] = float32(v[i])
		}
		return tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(w))
	}
	return tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(v))
}

func (d *data) Input(micro int) (*tensor.Dense, error)  { return d.gen(micro, 0), nil }
func (d *data) Target(micro int) (*tensor.Dense, error) { return d.gen(micro, 1), nil }

func newStages(n int) []*affine {
	st := make([]*affine, n)
	for i := range st {
		st[i] = &affine{a: 1 + float64(i)/8, b: float64(i%3-1) / 8}
	}
	return st
}

// sequential trains the same model on the same micro-batches without a
// pipeline: the reference. It returns the per-micro losses of each iteration.
func sequential(stages []*affine, micro, iters int, f32 bool) [][]float64 {
	var out [][]float64
	for it := range iters {
		d := &data{iter: it, f32: f32}
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
			loss, dy, _ := mse{}.Loss(x, t)
			losses[m] = loss
			for s := len(stages) - 1; s >= 0; s-- {
				dx, _ := stages[s].BackwardInput(saved[s], dy)
				_ = stages[s].BackwardWeight(saved[s], dy)
				dy = dx
			}
		}
		for _, st := range stages {
			st.step()
		}
		out = append(out, losses)
	}
	return out
}

func sameFloats(a, b []float64) bool {
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
