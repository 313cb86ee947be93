package nn

import (
	"math"
	"slices"
	"testing"

	"gorgonia.org/tensor"
)

func scalarParam(dt tensor.Dtype, v float64) *Param {
	return &Param{Name: "p", Value: fromF64(dt, []int{1}, []float64{v}), Grad: fromF64(dt, []int{1}, []float64{0})}
}

// TestOptimizersMatchFormulas runs three steps on one scalar parameter with
// known gradients and compares with the update rules written out.
func TestOptimizersMatchFormulas(t *testing.T) {
	grads := []float64{0.5, -1.5, 2}
	sgdRef := func(lr, mu float64) float64 {
		p, v := 1.0, 0.0
		for i, g := range grads {
			if i == 0 {
				v = g
			} else {
				v = mu*v + g
			}
			p -= lr * v
		}
		return p
	}
	adamRef := func(lr, b1, b2, eps float64) float64 {
		p, m, v := 1.0, 0.0, 0.0
		for i, g := range grads {
			m = b1*m + (1-b1)*g
			v = b2*v + (1-b2)*g*g
			k := float64(i + 1)
			p -= lr * (m / (1 - math.Pow(b1, k))) / (math.Sqrt(v/(1-math.Pow(b2, k))) + eps)
		}
		return p
	}
	for _, dt := range dtypes {
		for _, c := range []struct {
			name string
			opt  Optimizer
			want float64
		}{
			{"sgd", &SGD{LR: 0.1}, sgdRef(0.1, 0)},
			{"sgd-momentum", &SGD{LR: 0.1, Momentum: 0.9}, sgdRef(0.1, 0.9)},
			{"adam", NewAdam(0.01), adamRef(0.01, 0.9, 0.999, 1e-8)},
			{"adam-beta1-0", &Adam{LR: 0.01, Beta1: 0, Beta2: 0.99, Eps: 1e-6}, adamRef(0.01, 0, 0.99, 1e-6)},
		} {
			t.Run(dt.String()+"/"+c.name, func(t *testing.T) {
				p := scalarParam(dt, 1)
				for _, g := range grads {
					ZeroGrad([]*Param{p})
					if dt == tensor.Float32 {
						p.Grad.Data().([]float32)[0] = float32(g)
					} else {
						p.Grad.Data().([]float64)[0] = g
					}
					if err := c.opt.Step([]*Param{p}); err != nil {
						t.Fatal(err)
					}
				}
				got := f64(p.Value)[0]
				tol := 1e-15
				if dt == tensor.Float32 {
					tol = 1e-6
				}
				if math.Abs(got-c.want) > tol*math.Abs(c.want) {
					t.Errorf("parameter %v, want %v", got, c.want)
				}
			})
		}
	}
}

// TestGradientsAccumulate checks that backward adds to Param.Grad and that
// ZeroGrad clears it.
func TestGradientsAccumulate(t *testing.T) {
	for _, dt := range dtypes {
		m := archs[0].build(t, dt, 3)
		rng := NewRand(1)
		x, r := randMatrix(dt, 4, 5, rng), randMatrix(dt, 4, 3, rng)
		runBackward(t, m, x, r, "fused")
		once := make([][]float64, 0)
		for _, p := range m.Params() {
			once = append(once, f64(p.Grad))
		}
		runBackward(t, m, x, r, "split")
		// The second backward adds row by row onto the first one's sums,
		// so the result is 2× up to rounding.
		tol := 1e-14
		if dt == tensor.Float32 {
			tol = 1e-6
		}
		for i, p := range m.Params() {
			double := make([]float64, len(once[i]))
			for j, v := range once[i] {
				double[j] = 2 * v
			}
			if d := maxRelDiff(f64(p.Grad), double, 0); !(d <= tol) {
				t.Fatalf("%v %s: after two backwards %v, want 2×%v", dt, p.Name, f64(p.Grad), once[i])
			}
		}
		m.ZeroGrad()
		for _, p := range m.Params() {
			if slices.ContainsFunc(f64(p.Grad), func(v float64) bool { return v != 0 }) {
				t.Fatalf("%v %s: ZeroGrad left non-zero values", dt, p.Name)
			}
		}
	}
}

func TestParamNames(t *testing.T) {
	rng := NewRand(1)
	inner := NewSequential(newLin(t, 2, 3, tensor.Float64, rng), ReLU{})
	m := NewSequential(Tanh{}, inner, newLin(t, 3, 1, tensor.Float64, rng))
	var names []string
	for _, p := range m.Params() {
		names = append(names, p.Name)
	}
	want := []string{"1.0.weight", "1.0.bias", "2.weight", "2.bias"}
	if !slices.Equal(names, want) {
		t.Errorf("names %v, want %v", names, want)
	}
	if a, b := m.Params(), m.Params(); !slices.Equal(a, b) {
		t.Errorf("Params returns different pointers on each call")
	}
}

// TestInitDeterministic checks that equal seeds give equal layers, and that
// float32 layers hold the float64 values rounded.
func TestInitDeterministic(t *testing.T) {
	a := newLin(t, 7, 5, tensor.Float64, NewRand(3))
	b := newLin(t, 7, 5, tensor.Float64, NewRand(3))
	c := newLin(t, 7, 5, tensor.Float32, NewRand(3))
	d := newLin(t, 7, 5, tensor.Float64, NewRand(4))
	av := a.Weight.Value.Data().([]float64)
	if !slices.Equal(av, b.Weight.Value.Data().([]float64)) {
		t.Error("same seed, different weights")
	}
	if slices.Equal(av, d.Weight.Value.Data().([]float64)) {
		t.Error("different seeds, same weights")
	}
	lim := math.Sqrt(6.0 / 12)
	for i, v := range c.Weight.Value.Data().([]float32) {
		if v != float32(av[i]) {
			t.Fatalf("float32 weight %d = %v, want %v", i, v, float32(av[i]))
		}
		if math.Abs(av[i]) > lim {
			t.Fatalf("weight %v outside ±%v", av[i], lim)
		}
	}
}

// TestNonContiguousInputs checks that views and transposed tensors are read
// by value.
func TestNonContiguousInputs(t *testing.T) {
	rng := NewRand(6)
	l := newLin(t, 3, 2, tensor.Float64, rng)
	big := randMatrix(tensor.Float64, 6, 3, rng)
	ref := sliceRows(big, 2, 5)
	want, _, err := l.Forward(ref)
	if err != nil {
		t.Fatal(err)
	}
	v, err := big.Slice(tensor.S(2, 5))
	if err != nil {
		t.Fatal(err)
	}
	colView, err := randMatrix(tensor.Float64, 3, 5, rng).Slice(nil, tensor.S(1, 4))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]*tensor.Dense{"row view": v.(*tensor.Dense)}
	// A lazily transposed tensor holding ref's values.
	lazy := tensor.New(tensor.WithShape(3, 3), tensor.WithBacking(make([]float64, 9)))
	for i := range 3 {
		for j := range 3 {
			lazy.Data().([]float64)[j*3+i] = f64(ref)[i*3+j]
		}
	}
	if err := lazy.T(); err != nil {
		t.Fatal(err)
	}
	cases["lazy transpose"] = lazy
	if !lazy.RequiresIterator() {
		t.Fatal("test setup: transposed tensor does not need an iterator")
	}
	for name, x := range cases {
		got, _, err := l.Forward(x)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(f64(got), f64(want)) {
			t.Errorf("%s: output %v, want %v", name, f64(got), f64(want))
		}
	}
	// A strided column view: must give the same result as its copy.
	cv := colView.(*tensor.Dense)
	if !cv.RequiresIterator() {
		t.Fatal("test setup: column view does not need an iterator")
	}
	got, _, err := l.Forward(cv)
	if err != nil {
		t.Fatal(err)
	}
	want2, _, err := l.Forward(cv.Materialize().(*tensor.Dense))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f64(got), f64(want2)) {
		t.Errorf("column view: output %v, want %v", f64(got), f64(want2))
	}
}
