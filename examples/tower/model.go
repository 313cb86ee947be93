package main

import (
	"fmt"
	"sort"

	"gorgonia.org/tensor"
)

// lr is the learning rate of every parameter.
const lr = 1.0 / 64

// affine is a body stage: y = a·x + b elementwise. It keeps each
// micro-batch's gradient contribution and sums them sorted at step, so the
// pipeline's order of backwards does not change a bit.
type affine struct {
	a, b   float64
	ga, gb []float64
}

func newBody(n int) []*affine {
	st := make([]*affine, n)
	for i := range st {
		st[i] = &affine{a: 1 - float64(i%3)/16, b: float64(i%3-1) / 16}
	}
	return st
}

func mapTensor(x *tensor.Dense, f func(float64) float64) *tensor.Dense {
	in := x.Float64s()
	out := make([]float64, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return tensor.New(tensor.WithShape(x.Shape()...), tensor.WithBacking(out))
}

func (s *affine) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	return mapTensor(x, func(v float64) float64 { return s.a*v + s.b }), x, nil
}

func (s *affine) BackwardInput(_ any, dy *tensor.Dense) (*tensor.Dense, error) {
	return mapTensor(dy, func(v float64) float64 { return s.a * v }), nil
}

func (s *affine) BackwardWeight(saved any, dy *tensor.Dense) error {
	x := saved.(*tensor.Dense).Float64s()
	var ga, gb float64
	for i, v := range dy.Float64s() {
		ga += v * x[i]
		gb += v
	}
	s.ga, s.gb = append(s.ga, ga), append(s.gb, gb)
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

func (s *affine) step() {
	s.a -= lr * sortedSum(s.ga)
	s.b -= lr * sortedSum(s.gb)
	s.ga, s.gb = s.ga[:0], s.gb[:0]
}

// affineTower is the tower: y = a·x + b elementwise, a pipe.Tower (one
// replica per rank). Forward keeps the input of each micro-batch for
// Backward; Grads are 1-element tensors the runtime sums across the ranks.
type affineTower struct {
	a, b   float64
	ga, gb *tensor.Dense
	kept   map[int]*tensor.Dense
}

func newTower() *affineTower {
	return &affineTower{a: 0.75, b: 0.125, ga: tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{0})),
		gb: tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{0})), kept: map[int]*tensor.Dense{}}
}

func (t *affineTower) Forward(m int, x *tensor.Dense) (*tensor.Dense, error) {
	t.kept[m] = x
	return mapTensor(x, func(v float64) float64 { return t.a*v + t.b }), nil
}

// frozen is the tower as a frozen preprocess (pipe.WithPreprocess): it
// keeps nothing.
func (t *affineTower) frozen(_ int, x *tensor.Dense) (*tensor.Dense, error) {
	return mapTensor(x, func(v float64) float64 { return t.a*v + t.b }), nil
}

func (t *affineTower) Backward(m int, dy *tensor.Dense) error {
	x, ok := t.kept[m]
	if !ok {
		return fmt.Errorf("micro-batch %d: Forward kept nothing", m)
	}
	delete(t.kept, m)
	xs := x.Float64s()
	for i, v := range dy.Float64s() {
		t.ga.Float64s()[0] += v * xs[i]
		t.gb.Float64s()[0] += v
	}
	return nil
}

func (t *affineTower) Grads() []*tensor.Dense { return []*tensor.Dense{t.ga, t.gb} }

func (t *affineTower) step() {
	t.a -= lr * t.ga.Float64s()[0]
	t.b -= lr * t.gb.Float64s()[0]
	t.ga.Float64s()[0], t.gb.Float64s()[0] = 0, 0
}

// mse is the loss: 0.5·Σ(y-t)², dy = y - t.
type mse struct{}

func (mse) Loss(y, target *tensor.Dense) (float64, *tensor.Dense, error) {
	ys, ts := y.Float64s(), target.Float64s()
	d := make([]float64, len(ys))
	var l float64
	for i := range ys {
		d[i] = ys[i] - ts[i]
		l += d[i] * d[i] / 2
	}
	return l, tensor.New(tensor.WithShape(y.Shape()...), tensor.WithBacking(d)), nil
}

// sequential trains the same model without a pipeline, the tower (unless
// towerKind is none) before the body, and returns each iteration's losses.
func sequential(body []*affine, tower *affineTower, towerKind string, micro, iters int) [][]float64 {
	var out [][]float64
	for it := range iters {
		losses := make([]float64, micro)
		for m := range micro {
			x := gen(it, m, 0)
			if towerKind != "none" {
				x, _ = tower.Forward(m, x)
			}
			saved := make([]any, len(body))
			for s, st := range body {
				x, saved[s], _ = st.Forward(x)
			}
			var dy *tensor.Dense
			losses[m], dy, _ = mse{}.Loss(x, gen(it, m, 1))
			for s := len(body) - 1; s >= 0; s-- {
				dx, _ := body[s].BackwardInput(saved[s], dy)
				_ = body[s].BackwardWeight(saved[s], dy)
				dy = dx
			}
			if towerKind == "owner" || towerKind == "first" {
				_ = tower.Backward(m, dy)
			} else if towerKind == "frozen" {
				delete(tower.kept, m)
			}
		}
		for _, st := range body {
			st.step()
		}
		if towerKind == "owner" || towerKind == "first" {
			tower.step()
		}
		out = append(out, losses)
	}
	return out
}
