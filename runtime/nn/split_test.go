package nn

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"gorgonia.org/tensor"
)

// runBackward does one forward and backward of m on x with output gradient
// r in one of several ways, and returns dx.
func runBackward(t *testing.T, m *Sequential, x, r *tensor.Dense, mode string) *tensor.Dense {
	t.Helper()
	y, saved, err := m.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	if !sameShape(y.Shape(), r.Shape()) {
		t.Fatalf("output %v, gradient %v", y.Shape(), r.Shape())
	}
	switch mode {
	case "fused":
		dx, err := m.Backward(saved, r)
		if err != nil {
			t.Fatal(err)
		}
		return dx
	case "split":
		// BackwardInput, then unrelated work on the same model, then
		// BackwardWeight, as a zero-bubble schedule would do.
		dx, err := m.BackwardInput(saved, r)
		if err != nil {
			t.Fatal(err)
		}
		y2, saved2, err := m.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		_ = y2
		if err := m.BackwardWeight(saved, r); err != nil {
			t.Fatal(err)
		}
		_ = saved2
		return dx
	case "per-layer":
		// Layer-by-layer fused backward by hand, without Sequential's
		// bookkeeping.
		var ctx []any
		h := x
		for _, l := range m.Layers {
			var s any
			h, s, err = l.Forward(h)
			if err != nil {
				t.Fatal(err)
			}
			ctx = append(ctx, s)
		}
		g := r
		for i := len(m.Layers) - 1; i >= 0; i-- {
			dx, err := m.Layers[i].BackwardInput(ctx[i], g)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Layers[i].BackwardWeight(ctx[i], g); err != nil {
				t.Fatal(err)
			}
			g = dx
		}
		return g
	}
	t.Fatalf("mode %q", mode)
	return nil
}

// TestSplitEqualsFused checks that BackwardInput+BackwardWeight give exactly
// the gradients of a fused backward.
func TestSplitEqualsFused(t *testing.T) {
	for _, dt := range dtypes {
		for _, a := range archs {
			t.Run(fmt.Sprintf("%v/%s", dt, a.name), func(t *testing.T) {
				rng := NewRand(5)
				x := randMatrix(dt, 8, 5, rng)
				r := randMatrix(dt, 8, 3, rng)
				var dxs [][]float64
				var grads [][][]float64
				for _, mode := range []string{"fused", "split", "per-layer"} {
					m := a.build(t, dt, 21)
					// Two accumulation rounds to exercise +=.
					dx := runBackward(t, m, x, r, mode)
					runBackward(t, m, x, r, mode)
					dxs = append(dxs, f64(dx))
					var g [][]float64
					for _, p := range m.Params() {
						g = append(g, f64(p.Grad))
					}
					grads = append(grads, g)
				}
				for k := 1; k < len(dxs); k++ {
					if !slices.Equal(dxs[0], dxs[k]) {
						t.Errorf("mode %d: dx differs from fused", k)
					}
					for i := range grads[0] {
						if !slices.Equal(grads[0][i], grads[k][i]) {
							t.Errorf("mode %d: gradient %d differs from fused", k, i)
						}
					}
				}
			})
		}
	}
}

// TestFloat32MatchesFloat64 runs the same model in both dtypes.
func TestFloat32MatchesFloat64(t *testing.T) {
	for _, a := range archs {
		for _, loss := range []Loss{MSE{}, SoftmaxCrossEntropy{}} {
			t.Run(fmt.Sprintf("%s/%T", a.name, loss), func(t *testing.T) {
				type result struct {
					loss         float64
					y, dx        []float64
					grads, after [][]float64
				}
				run := func(dt tensor.Dtype) result {
					rng := NewRand(8)
					m := a.build(t, dt, 31)
					x := randMatrix(dt, 16, 5, rng)
					var tgt *tensor.Dense
					if _, ok := loss.(MSE); ok {
						tgt = randMatrix(dt, 16, 3, rng)
					} else {
						idx := make([]float64, 16)
						for i := range idx {
							idx[i] = float64(rng.IntN(3))
						}
						tgt = fromF64(dt, []int{16}, idx)
					}
					y, saved, err := m.Forward(x)
					if err != nil {
						t.Fatal(err)
					}
					l, dy, err := loss.Loss(y, tgt)
					if err != nil {
						t.Fatal(err)
					}
					dx, err := m.Backward(saved, dy)
					if err != nil {
						t.Fatal(err)
					}
					res := result{loss: l, y: f64(y), dx: f64(dx)}
					for _, p := range m.Params() {
						res.grads = append(res.grads, f64(p.Grad))
					}
					opt := NewAdam(1e-3)
					sgd := &SGD{LR: 0.05, Momentum: 0.9}
					for range 2 {
						if err := opt.Step(m.Params()); err != nil {
							t.Fatal(err)
						}
						if err := sgd.Step(m.Params()); err != nil {
							t.Fatal(err)
						}
					}
					for _, p := range m.Params() {
						res.after = append(res.after, f64(p.Value))
					}
					return res
				}
				r32, r64 := run(tensor.Float32), run(tensor.Float64)
				const tol = 1e-5
				if d := math.Abs(r32.loss-r64.loss) / math.Max(1, math.Abs(r64.loss)); d > tol {
					t.Errorf("loss float32 %v, float64 %v", r32.loss, r64.loss)
				}
				for _, c := range []struct {
					name string
					a, b []float64
				}{{"y", r32.y, r64.y}, {"dx", r32.dx, r64.dx}} {
					if d := maxRelDiff(c.a, c.b, 1e-3); d > tol {
						t.Errorf("%s: float32 and float64 differ by %.3g relative", c.name, d)
					}
				}
				for i := range r64.grads {
					if d := maxRelDiff(r32.grads[i], r64.grads[i], 1e-3); d > tol {
						t.Errorf("gradient %d: float32 and float64 differ by %.3g relative", i, d)
					}
					if d := maxRelDiff(r32.after[i], r64.after[i], 1e-3); d > tol {
						t.Errorf("parameter %d after updates: float32 and float64 differ by %.3g relative", i, d)
					}
				}
			})
		}
	}
}

// sliceRows returns rows [lo, hi) of a 1-D or 2-D float64 tensor as a new
// tensor.
func sliceRows(x *tensor.Dense, lo, hi int) *tensor.Dense {
	sh := x.Shape()
	cols := 1
	if len(sh) == 2 {
		cols = sh[1]
	}
	v := f64(x)[lo*cols : hi*cols]
	if len(sh) == 1 {
		return fromF64(x.Dtype(), []int{hi - lo}, v)
	}
	return fromF64(x.Dtype(), []int{hi - lo, cols}, v)
}

// TestMicroBatchAccumulation checks the loss-scale convention: gradients
// accumulated over micro-batches with Scale = rows_m/N equal those of one
// full-batch backward with Scale 1, and the micro-batch losses add up to the
// full-batch loss. The model is cut into two stages and run as a
// zero-bubble schedule would: all forwards, then all BackwardInputs (in
// reverse), then the BackwardWeights in another order.
func TestMicroBatchAccumulation(t *testing.T) {
	const n = 16
	for _, c := range []struct {
		name  string
		loss  func(scale float64) Loss
		sizes []int
	}{
		{"mse/4x4", func(s float64) Loss { return MSE{Scale: s} }, []int{4, 4, 4, 4}},
		{"ce/4x4", func(s float64) Loss { return SoftmaxCrossEntropy{Scale: s} }, []int{4, 4, 4, 4}},
		{"mse/uneven", func(s float64) Loss { return MSE{Scale: s} }, []int{3, 5, 7, 1}},
		{"ce/uneven", func(s float64) Loss { return SoftmaxCrossEntropy{Scale: s} }, []int{6, 2, 3, 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := NewRand(13)
			build := func() (*Sequential, *Sequential) {
				r := NewRand(77)
				s0 := NewSequential(newLin(t, 5, 8, tensor.Float64, r), Tanh{})
				s1 := NewSequential(newLin(t, 8, 6, tensor.Float64, r), GELU{}, newLin(t, 6, 3, tensor.Float64, r))
				return s0, s1
			}
			x := randMatrix(tensor.Float64, n, 5, rng)
			var tgt *tensor.Dense
			if _, ok := c.loss(1).(MSE); ok {
				tgt = randMatrix(tensor.Float64, n, 3, rng)
			} else {
				idx := make([]float64, n)
				for i := range idx {
					idx[i] = float64(rng.IntN(3))
				}
				tgt = fromF64(tensor.Float64, []int{n, 1}, idx)
			}

			// Full batch, Scale 1 (the plain mean).
			f0, f1 := build()
			h, sv0, err := f0.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			y, sv1, err := f1.Forward(h)
			if err != nil {
				t.Fatal(err)
			}
			fullLoss, dy, err := c.loss(1).Loss(y, tgt)
			if err != nil {
				t.Fatal(err)
			}
			dh, err := f1.Backward(sv1, dy)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f0.Backward(sv0, dh); err != nil {
				t.Fatal(err)
			}

			// Micro-batches.
			m0, m1 := build()
			type mb struct {
				s0, s1  any
				dy, dh  *tensor.Dense
				lossVal float64
			}
			var mbs []mb
			lo := 0
			for _, sz := range c.sizes {
				xm, tm := sliceRows(x, lo, lo+sz), sliceRows(tgt, lo, lo+sz)
				lo += sz
				h, s0, err := m0.Forward(xm)
				if err != nil {
					t.Fatal(err)
				}
				y, s1, err := m1.Forward(h)
				if err != nil {
					t.Fatal(err)
				}
				l, dy, err := c.loss(float64(sz)/n).Loss(y, tm)
				if err != nil {
					t.Fatal(err)
				}
				mbs = append(mbs, mb{s0: s0, s1: s1, dy: dy, lossVal: l})
			}
			var microLoss float64
			for i := len(mbs) - 1; i >= 0; i-- {
				b := &mbs[i]
				microLoss += b.lossVal
				if b.dh, err = m1.BackwardInput(b.s1, b.dy); err != nil {
					t.Fatal(err)
				}
				if _, err = m0.BackwardInput(b.s0, b.dh); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range []int{2, 0, 3, 1} {
				if err := m1.BackwardWeight(mbs[i].s1, mbs[i].dy); err != nil {
					t.Fatal(err)
				}
				if err := m0.BackwardWeight(mbs[i].s0, mbs[i].dh); err != nil {
					t.Fatal(err)
				}
			}

			if d := math.Abs(microLoss-fullLoss) / math.Abs(fullLoss); d > 1e-12 {
				t.Errorf("sum of micro-batch losses %v, full-batch loss %v (rel %.3g)", microLoss, fullLoss, d)
			}
			full := append(f0.Params(), f1.Params()...)
			micro := append(m0.Params(), m1.Params()...)
			var worst float64
			for i := range full {
				d := maxRelDiff(f64(micro[i].Grad), f64(full[i].Grad), 0)
				worst = math.Max(worst, d)
				if d > 1e-12 || math.IsNaN(d) {
					t.Errorf("%s: accumulated gradient differs from full batch by %.3g relative", full[i].Name, d)
				}
			}
			t.Logf("worst relative gradient difference %.3g, loss difference %.3g", worst, math.Abs(microLoss-fullLoss)/math.Abs(fullLoss))
		})
	}
}
