package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"gorgonia.org/tensor"
)

var dtypes = []tensor.Dtype{tensor.Float32, tensor.Float64}

// randMatrix returns a rows×cols tensor of dtype dt with values from
// U(-1, 1) drawn in float64, so equal rng states give equal values up to
// rounding.
func randMatrix(dt tensor.Dtype, rows, cols int, rng *rand.Rand) *tensor.Dense {
	v := make([]float64, rows*cols)
	for i := range v {
		v[i] = 2*rng.Float64() - 1
	}
	return fromF64(dt, []int{rows, cols}, v)
}

func fromF64(dt tensor.Dtype, shape []int, v []float64) *tensor.Dense {
	if dt == tensor.Float32 {
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = float32(x)
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(f))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float64(nil), v...)))
}

// f64 returns a copy of t's values as float64.
func f64(t *tensor.Dense) []float64 {
	switch d := t.Data().(type) {
	case []float32:
		out := make([]float64, len(d))
		for i, x := range d {
			out[i] = float64(x)
		}
		return out
	case []float64:
		return append([]float64(nil), d...)
	}
	panic("bad dtype")
}

// maxRelDiff returns max|a-b| / max(floor, max|b|).
func maxRelDiff(a, b []float64, floor float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d, m float64
	for i := range a {
		d = math.Max(d, math.Abs(a[i]-b[i]))
		m = math.Max(m, math.Abs(b[i]))
	}
	return d / math.Max(floor, m)
}

func newLin(t testing.TB, in, out int, dt tensor.Dtype, rng *rand.Rand) *Linear {
	t.Helper()
	l, err := NewLinear(in, out, dt, rng)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// arch builds a model from a seed.
type arch struct {
	name  string
	build func(t testing.TB, dt tensor.Dtype, seed uint64) *Sequential
}

func mlp(act func() Layer, sizes ...int) func(t testing.TB, dt tensor.Dtype, seed uint64) *Sequential {
	return func(t testing.TB, dt tensor.Dtype, seed uint64) *Sequential {
		rng := NewRand(seed)
		var ls []Layer
		for i := 0; i+1 < len(sizes); i++ {
			if i > 0 {
				ls = append(ls, act())
			}
			ls = append(ls, newLin(t, sizes[i], sizes[i+1], dt, rng))
		}
		return NewSequential(ls...)
	}
}

var archs = []arch{
	{"linear-tanh-linear", mlp(func() Layer { return Tanh{} }, 5, 7, 3)},
	{"linear-relu-linear", mlp(func() Layer { return ReLU{} }, 5, 7, 3)},
	{"linear-gelu-linear-gelu-linear", mlp(func() Layer { return GELU{} }, 5, 6, 4, 3)},
	{"nested-ending-in-activation", func(t testing.TB, dt tensor.Dtype, seed uint64) *Sequential {
		rng := NewRand(seed)
		inner := NewSequential(newLin(t, 5, 6, dt, rng), Tanh{}, newLin(t, 6, 4, dt, rng))
		return NewSequential(inner, GELU{}, newLin(t, 4, 3, dt, rng), Tanh{})
	}},
}
