package nn

import (
	"math"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// adamWReference is torch.optim.AdamW's documented algorithm (amsgrad off,
// maximize off) written out in float64 over plain slices, independent of
// the implementation: for t = 1, 2, ...
//
//	θ ← θ - γλθ
//	m ← β1·m + (1-β1)·g
//	v ← β2·v + (1-β2)·g²
//	m̂ = m/(1-β1^t), v̂ = v/(1-β2^t)
//	θ ← θ - γ·m̂/(√v̂ + ε)
func adamWReference(theta []float64, grads [][]float64, lr, b1, b2, eps, wd float64) []float64 {
	p := append([]float64(nil), theta...)
	m := make([]float64, len(p))
	v := make([]float64, len(p))
	for t, g := range grads {
		for i := range p {
			p[i] -= lr * wd * p[i]
			m[i] = b1*m[i] + (1-b1)*g[i]
			v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
			mHat := m[i] / (1 - math.Pow(b1, float64(t+1)))
			vHat := v[i] / (1 - math.Pow(b2, float64(t+1)))
			p[i] -= lr * mHat / (math.Sqrt(vHat) + eps)
		}
	}
	return p
}

func vectorParam(dt tensor.Dtype, name string, v []float64) *Param {
	return &Param{Name: name, Value: fromF64(dt, []int{len(v)}, v), Grad: fromF64(dt, []int{len(v)}, make([]float64, len(v)))}
}

func setGrad(p *Param, g []float64) {
	switch p.Grad.Dtype() {
	case tensor.Float32:
		d := p.Grad.Data().([]float32)
		for i := range g {
			d[i] = float32(g[i])
		}
	default:
		copy(p.Grad.Data().([]float64), g)
	}
}

// TestAdamWMatchesPyTorchAlgorithm steps AdamW with PyTorch's defaults and
// with other settings on a 3-element parameter and compares every step
// with the reference loop; a zero gradient only decays the weights.
func TestAdamWMatchesPyTorchAlgorithm(t *testing.T) {
	theta := []float64{1, -0.5, 2}
	grads := [][]float64{{0.5, -1.5, 2}, {0.1, 0.2, -0.3}, {-2, 0, 1e-3}, {0.7, -0.7, 0.25}}
	zeros := [][]float64{{0, 0, 0}, {0, 0, 0}, {0, 0, 0}}
	for _, c := range []struct {
		name  string
		opt   *AdamW
		grads [][]float64
	}{
		{"defaults", NewAdamW(), grads},
		{"large-lr-decay", &AdamW{LR: 0.1, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.5}, grads},
		{"no-decay", &AdamW{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, grads},
		{"zero-grad-decay-only", &AdamW{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1}, zeros},
	} {
		for _, dt := range dtypes {
			t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
				opt := *c.opt
				p := vectorParam(dt, "p", theta)
				tol := 1e-15
				if dt == tensor.Float32 {
					tol = 1e-6
				}
				for k := range c.grads {
					setGrad(p, c.grads[k])
					if err := opt.Step([]*Param{p}); err != nil {
						t.Fatal(err)
					}
					want := adamWReference(theta, c.grads[:k+1], opt.LR, opt.Beta1, opt.Beta2, opt.Eps, opt.WeightDecay)
					if d := maxRelDiff(f64(p.Value), want, 1e-300); d > tol {
						t.Fatalf("step %d: parameter %v, reference %v (relative difference %.3g)", k+1, f64(p.Value), want, d)
					}
				}
			})
		}
	}
}

// TestAdamWHandValues checks the first steps against values worked out by
// hand, and the decay-only closed form.
func TestAdamWHandValues(t *testing.T) {
	// Defaults, θ = 1, g = 0.5: decay gives 1 - 1e-3·1e-2 = 0.99999;
	// m̂ = 0.5, v̂ = 0.25, so the step is 1e-3·0.5/(0.5+1e-8).
	p := vectorParam(tensor.Float64, "p", []float64{1})
	setGrad(p, []float64{0.5})
	opt := NewAdamW()
	if err := opt.Step([]*Param{p}); err != nil {
		t.Fatal(err)
	}
	want := 0.99999 - 1e-3*0.5/(0.5+1e-8)
	if got := f64(p.Value)[0]; math.Abs(got-want) > 1e-15 || math.Abs(got-0.99899000002) > 1e-12 {
		t.Errorf("first step: %.17g, want %.17g (≈ 0.99899000002)", got, want)
	}
	// Zero gradients: the moments stay 0 and the update is 0/(0+ε), so
	// k steps multiply θ by (1 - γλ)^k.
	q := vectorParam(tensor.Float64, "q", []float64{3, -4})
	decayOnly := &AdamW{LR: 0.05, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.2}
	for range 5 {
		if err := decayOnly.Step([]*Param{q}); err != nil {
			t.Fatal(err)
		}
	}
	f := math.Pow(1-0.05*0.2, 5)
	if d := maxRelDiff(f64(q.Value), []float64{3 * f, -4 * f}, 0); d > 1e-15 {
		t.Errorf("decay only: %v, want %v", f64(q.Value), []float64{3 * f, -4 * f})
	}
}

func TestAdamWRejects(t *testing.T) {
	p := vectorParam(tensor.Float64, "p", []float64{1})
	for _, c := range []struct {
		opt  *AdamW
		want string
	}{
		{&AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: -1}, "WeightDecay -1 is negative"},
		{&AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: math.NaN()}, "WeightDecay is NaN"},
		{&AdamW{LR: 1e-3, Beta1: 1, Beta2: 0.999, Eps: 1e-8}, "must lie in [0, 1)"},
		{&AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.999}, "Eps 0 must be positive"},
	} {
		if err := c.opt.Step([]*Param{p}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error with %q", *c.opt, err, c.want)
		}
	}
	if got := f64(p.Value)[0]; got != 1 {
		t.Errorf("a refused step changed the parameter to %v", got)
	}
}
