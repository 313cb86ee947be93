package nn

import (
	"fmt"
	"math"
	"testing"

	"gorgonia.org/tensor"
)

// Gradient checks by central finite differences in float64.

const (
	fdStep = 1e-5
	fdTol  = 1e-6
)

// fdClose reports whether analytic a matches numeric n to fdTol relative.
func fdClose(a, n float64) bool {
	return math.Abs(a-n) <= fdTol*math.Max(math.Abs(a), math.Abs(n))+1e-9
}

// objective returns Σ y⊙r for one forward pass.
func objective(t *testing.T, l Layer, x *tensor.Dense, r []float64) float64 {
	y, _, err := l.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	var s float64
	for i, v := range f64(y) {
		s += v * r[i]
	}
	return s
}

// central perturbs v[i] by ±fdStep and returns the central difference of f.
func central(v []float64, i int, f func() float64) float64 {
	old := v[i]
	v[i] = old + fdStep
	fp := f()
	v[i] = old - fdStep
	fm := f()
	v[i] = old
	return (fp - fm) / (2 * fdStep)
}

// checkLayerGrads checks dx and every parameter gradient of l at x against
// finite differences of Σ y⊙r.
func checkLayerGrads(t *testing.T, l Layer, x *tensor.Dense) {
	t.Helper()
	checkGrads(t, l, x, true)
}

// checkGrads is checkLayerGrads, of the parameter gradients only when
// withInput is false (an input that is not differentiable: token ids).
func checkGrads(t *testing.T, l Layer, x *tensor.Dense, withInput bool) {
	t.Helper()
	rng := NewRand(99)
	y, saved, err := l.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	r := randMatrix(tensor.Float64, y.Shape()[0], y.Shape()[1], rng)
	ZeroGrad(l.Params())
	dx, err := l.BackwardInput(saved, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.BackwardWeight(saved, r); err != nil {
		t.Fatal(err)
	}
	rv := f64(r)
	f := func() float64 { return objective(t, l, x, rv) }
	xd, dxd := x.Data().([]float64), f64(dx)
	bad := 0
	for i := range xd {
		if !withInput {
			break
		}
		if n := central(xd, i, f); !fdClose(dxd[i], n) {
			bad++
			t.Errorf("dx[%d] = %.12g, finite difference %.12g", i, dxd[i], n)
		}
	}
	for _, p := range l.Params() {
		vd, gd := p.Value.Data().([]float64), p.Grad.Data().([]float64)
		for i := range vd {
			if n := central(vd, i, f); !fdClose(gd[i], n) {
				bad++
				t.Errorf("grad %s[%d] = %.12g, finite difference %.12g", p.Name, i, gd[i], n)
			}
		}
	}
	if bad > 0 {
		t.Logf("%d mismatches", bad)
	}
}

func TestGradCheckLayers(t *testing.T) {
	rng := NewRand(1)
	// Inputs for ReLU stay away from its kink at 0.
	awayFromZero := func(rows, cols int) *tensor.Dense {
		x := randMatrix(tensor.Float64, rows, cols, rng)
		for i, v := range x.Data().([]float64) {
			x.Data().([]float64)[i] = math.Copysign(0.1+math.Abs(v), v)
		}
		return x
	}
	cases := []struct {
		name string
		l    Layer
		x    *tensor.Dense
	}{
		{"linear", newLin(t, 4, 3, tensor.Float64, rng), randMatrix(tensor.Float64, 5, 4, rng)},
		{"linear-1x1", newLin(t, 1, 1, tensor.Float64, rng), randMatrix(tensor.Float64, 1, 1, rng)},
		{"linear-wide", newLin(t, 9, 11, tensor.Float64, rng), randMatrix(tensor.Float64, 3, 9, rng)},
		{"relu", ReLU{}, awayFromZero(4, 5)},
		{"tanh", Tanh{}, randMatrix(tensor.Float64, 4, 5, rng)},
		{"gelu", GELU{}, randMatrix(tensor.Float64, 4, 5, rng)},
	}
	// Non-zero biases, so they matter in the forward pass.
	for _, c := range cases {
		if lin, ok := c.l.(*Linear); ok {
			for i := range lin.Bias.Value.Data().([]float64) {
				lin.Bias.Value.Data().([]float64)[i] = rng.Float64() - 0.5
			}
		}
	}
	for _, a := range archs {
		cases = append(cases, struct {
			name string
			l    Layer
			x    *tensor.Dense
		}{a.name, a.build(t, tensor.Float64, 7), randMatrix(tensor.Float64, 6, 5, rng)})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkLayerGrads(t, c.l, c.x) })
	}
}

func TestGradCheckLosses(t *testing.T) {
	rng := NewRand(2)
	const rows, classes = 5, 4
	idx := make([]float64, rows)
	for i := range idx {
		idx[i] = float64(rng.IntN(classes))
	}
	soft := randMatrix(tensor.Float64, rows, classes, rng)
	for r := range rows { // rows of positive probabilities summing to 1
		row := soft.Data().([]float64)[r*classes : (r+1)*classes]
		var s float64
		for j := range row {
			row[j] = math.Abs(row[j]) + 0.05
			s += row[j]
		}
		for j := range row {
			row[j] /= s
		}
	}
	onehot := make([]float64, rows*classes)
	for r, k := range idx {
		onehot[r*classes+int(k)] = 1
	}
	cases := []struct {
		name   string
		loss   Loss
		target *tensor.Dense
	}{
		{"mse", MSE{}, randMatrix(tensor.Float64, rows, classes, rng)},
		{"mse-scaled", MSE{Scale: 0.25}, randMatrix(tensor.Float64, rows, classes, rng)},
		{"mse-float32-target", MSE{}, randMatrix(tensor.Float32, rows, classes, rng)},
		{"ce-index-1d", SoftmaxCrossEntropy{}, fromF64(tensor.Float64, []int{rows}, idx)},
		{"ce-index-2d-scaled", SoftmaxCrossEntropy{Scale: 1.0 / 3}, fromF64(tensor.Float64, []int{rows, 1}, idx)},
		{"ce-index-float32", SoftmaxCrossEntropy{}, fromF64(tensor.Float32, []int{rows}, idx)},
		{"ce-onehot", SoftmaxCrossEntropy{}, fromF64(tensor.Float64, []int{rows, classes}, onehot)},
		{"ce-soft", SoftmaxCrossEntropy{Scale: 0.5}, soft},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			y := randMatrix(tensor.Float64, rows, classes, rng)
			for i := range y.Data().([]float64) {
				y.Data().([]float64)[i] *= 3
			}
			_, dy, err := c.loss.Loss(y, c.target)
			if err != nil {
				t.Fatal(err)
			}
			yd, dyd := y.Data().([]float64), f64(dy)
			f := func() float64 {
				l, _, err := c.loss.Loss(y, c.target)
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			for i := range yd {
				if n := central(yd, i, f); !fdClose(dyd[i], n) {
					t.Errorf("dy[%d] = %.12g, finite difference %.12g", i, dyd[i], n)
				}
			}
		})
	}
}

// Loss is runtime/pipe's Loss interface, restated to check conformance.
type Loss interface {
	Loss(y, target *tensor.Dense) (loss float64, dy *tensor.Dense, err error)
}

// Stage is runtime/pipe's Stage interface, restated to check conformance.
type Stage interface {
	Forward(x *tensor.Dense) (y *tensor.Dense, saved any, err error)
	BackwardInput(saved any, dy *tensor.Dense) (dx *tensor.Dense, err error)
	BackwardWeight(saved any, dy *tensor.Dense) error
}

var (
	_ Stage     = (*Sequential)(nil)
	_ Stage     = (*Linear)(nil)
	_ Layer     = ReLU{}
	_ Layer     = Tanh{}
	_ Layer     = GELU{}
	_ Layer     = (*Sequential)(nil)
	_ Loss      = MSE{}
	_ Loss      = SoftmaxCrossEntropy{}
	_ Optimizer = (*SGD)(nil)
	_ Optimizer = (*Adam)(nil)
)

// TestGradCheckModelAndLoss checks parameter gradients of a whole model
// under a loss.
func TestGradCheckModelAndLoss(t *testing.T) {
	rng := NewRand(3)
	for _, c := range []struct {
		loss   Loss
		target *tensor.Dense
	}{
		{MSE{Scale: 0.5}, randMatrix(tensor.Float64, 6, 3, rng)},
		{SoftmaxCrossEntropy{}, fromF64(tensor.Float64, []int{6}, []float64{0, 2, 1, 1, 0, 2})},
	} {
		for _, a := range archs {
			t.Run(fmt.Sprintf("%T/%s", c.loss, a.name), func(t *testing.T) {
				m := a.build(t, tensor.Float64, 11)
				x := randMatrix(tensor.Float64, 6, 5, rng)
				f := func() float64 {
					y, _, err := m.Forward(x)
					if err != nil {
						t.Fatal(err)
					}
					l, _, err := c.loss.Loss(y, c.target)
					if err != nil {
						t.Fatal(err)
					}
					return l
				}
				y, saved, err := m.Forward(x)
				if err != nil {
					t.Fatal(err)
				}
				_, dy, err := c.loss.Loss(y, c.target)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := m.Backward(saved, dy); err != nil {
					t.Fatal(err)
				}
				for _, p := range m.Params() {
					vd, gd := p.Value.Data().([]float64), p.Grad.Data().([]float64)
					for i := range vd {
						if n := central(vd, i, f); !fdClose(gd[i], n) {
							t.Errorf("grad %s[%d] = %.12g, finite difference %.12g", p.Name, i, gd[i], n)
						}
					}
				}
			})
		}
	}
}
