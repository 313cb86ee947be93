package nn

import (
	"math"
	"slices"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// randomize sets every parameter of l to U(-0.5, 0.5) (gains and biases
// included, so that each one matters in the forward pass).
func randomize(l Layer, seed uint64) {
	rng := NewRand(seed)
	for _, p := range l.Params() {
		switch d := p.Value.Data().(type) {
		case []float64:
			for i := range d {
				d[i] = rng.Float64() - 0.5
			}
		case []float32:
			for i := range d {
				d[i] = float32(rng.Float64() - 0.5)
			}
		}
	}
}

// must returns v, and panics (failing the test) on a constructor's error.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// tokens returns [rows, 1] token ids drawn from [0, vocab).
func tokens(dt tensor.Dtype, rows, vocab int, seed uint64) *tensor.Dense {
	rng := NewRand(seed)
	v := make([]float64, rows)
	for i := range v {
		v[i] = float64(rng.IntN(vocab))
	}
	return fromF64(dt, []int{rows, 1}, v)
}

func TestGradCheckTransformerLayers(t *testing.T) {
	f := tensor.Float64
	rng := NewRand(3)
	cases := []struct {
		name string
		l    Layer
		x    *tensor.Dense
	}{
		{"rmsnorm", must(NewRMSNorm(5, f)), randMatrix(f, 4, 5, rng)},
		{"attention-core-1-head", CausalAttention{Heads: 1, SeqLen: 4}, randMatrix(f, 8, 9, rng)},
		{"attention-core-2-heads", CausalAttention{Heads: 2, SeqLen: 3}, randMatrix(f, 6, 12, rng)},
		{"self-attention", must(NewSelfAttention(4, 2, 3, f, rng)), randMatrix(f, 6, 4, rng)},
		{"residual-mlp", &Residual{Inner: must(NewMLPBlock(4, 6, f, rng))}, randMatrix(f, 5, 4, rng)},
		{"transformer-block", must(NewTransformerBlock(4, 2, 3, 8, f, rng)), randMatrix(f, 6, 4, rng)},
	}
	for i, c := range cases {
		randomize(c.l, uint64(10+i))
		t.Run(c.name, func(t *testing.T) { checkLayerGrads(t, c.l, c.x) })
	}
	t.Run("embedding", func(t *testing.T) {
		e := must(NewEmbedding(7, 3, 4, f, rng))
		checkGrads(t, e, tokens(f, 8, 7, 5), false)
	})
	// The whole model of a character LM, embedding to logits, against
	// finite differences of its parameters.
	t.Run("model", func(t *testing.T) {
		m := NewSequential(must(NewEmbedding(6, 4, 3, f, rng)), must(NewTransformerBlock(4, 2, 3, 8, f, rng)),
			must(NewRMSNorm(4, f)), must(NewLinear(4, 6, f, rng)))
		checkGrads(t, m, tokens(f, 6, 6, 9), false)
	})
}

// TestAttentionIsCausal: a row's output depends on its own and earlier rows
// of its sequence only; sequences are independent.
func TestAttentionIsCausal(t *testing.T) {
	const T, heads, d = 4, 2, 4
	a := CausalAttention{Heads: heads, SeqLen: T}
	x := randMatrix(tensor.Float64, 2*T, 3*d, NewRand(1))
	y0 := f64(must3(t, a, x))
	for row := range 2 * T {
		xd := x.Data().([]float64)
		old := xd[row*3*d]
		xd[row*3*d] += 1 // the row's first query, no: key/value too below
		for j := d; j < 3*d; j++ {
			xd[row*3*d+j] += 0.5
		}
		y1 := f64(must3(t, a, x))
		for r := range 2 * T {
			changed := !slices.Equal(y0[r*d:(r+1)*d], y1[r*d:(r+1)*d])
			sameSeq := r/T == row/T
			if want := sameSeq && r >= row; changed != want {
				t.Errorf("perturbing row %d changed row %d: %v, want %v", row, r, changed, want)
			}
		}
		xd[row*3*d] = old
		for j := d; j < 3*d; j++ {
			xd[row*3*d+j] -= 0.5
		}
		y0 = f64(must3(t, a, x))
	}
}

func must3(t *testing.T, l Layer, x *tensor.Dense) *tensor.Dense {
	t.Helper()
	y, _, err := l.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// TestTransformerSplitEqualsFused: BackwardInput then BackwardWeight gives
// exactly the gradients of Backward, and float32 follows float64.
func TestTransformerSplitEqualsFused(t *testing.T) {
	for _, dt := range dtypes {
		build := func() *Sequential {
			rng := NewRand(4)
			return NewSequential(must(NewEmbedding(11, 8, 4, dt, rng)), must(NewTransformerBlock(8, 2, 4, 16, dt, rng)),
				must(NewTransformerBlock(8, 2, 4, 16, dt, rng)), must(NewRMSNorm(8, dt)), must(NewLinear(8, 11, dt, rng)))
		}
		x := tokens(dt, 8, 11, 2)
		grads := func(split bool) [][]float64 {
			m := build()
			y, saved, err := m.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			_, dy, err := SoftmaxCrossEntropy{}.Loss(y, tokens(dt, 8, 11, 3))
			if err != nil {
				t.Fatal(err)
			}
			if split {
				if _, err := m.BackwardInput(saved, dy); err != nil {
					t.Fatal(err)
				}
				if err := m.BackwardWeight(saved, dy); err != nil {
					t.Fatal(err)
				}
			} else if _, err := m.Backward(saved, dy); err != nil {
				t.Fatal(err)
			}
			var out [][]float64
			for _, p := range m.Params() {
				out = append(out, f64(p.Grad))
			}
			return out
		}
		a, b := grads(true), grads(false)
		for i := range a {
			if !slices.Equal(a[i], b[i]) {
				t.Errorf("%v: gradient %d differs between split and fused backward", dt, i)
			}
		}
	}
}

func TestTransformerErrors(t *testing.T) {
	f := tensor.Float64
	rng := NewRand(1)
	e := must(NewEmbedding(5, 3, 2, f, rng))
	a := CausalAttention{Heads: 2, SeqLen: 2}
	for _, c := range []struct {
		name string
		run  func() error
		want string
	}{
		{"id not integer", func() error { _, _, err := e.Forward(fromF64(f, []int{2, 1}, []float64{1, 2.5})); return err }, "row 1 holds token id 2.5"},
		{"id out of range", func() error { _, _, err := e.Forward(fromF64(f, []int{2, 1}, []float64{5, 0})); return err }, "row 0 holds token id 5, want an integer in [0, 5)"},
		{"id negative", func() error { _, _, err := e.Forward(fromF64(f, []int{2, 1}, []float64{0, -1})); return err }, "token id -1"},
		{"ids not in sequences", func() error { _, _, err := e.Forward(fromF64(f, []int{3, 1}, []float64{0, 1, 2})); return err }, "3 rows is not a whole number of sequences of 2 tokens"},
		{"attention columns", func() error { _, _, err := a.Forward(randMatrix(f, 2, 9, rng)); return err }, "9 columns, want 3·d with d a multiple of Heads=2"},
		{"attention rows", func() error { _, _, err := a.Forward(randMatrix(f, 3, 12, rng)); return err }, "3 rows is not a whole number of sequences of 2 tokens"},
		{"attention heads", func() error { _, _, err := CausalAttention{SeqLen: 2}.Forward(randMatrix(f, 2, 12, rng)); return err }, "Heads=0 and SeqLen=2 must be positive"},
		{"self-attention heads", func() error { _, err := NewSelfAttention(6, 4, 2, f, rng); return err }, "dim=6 is not a multiple of heads=4"},
		{"rmsnorm width", func() error {
			_, _, err := must(NewRMSNorm(4, f)).Forward(randMatrix(f, 2, 3, rng))
			return err
		}, "want float64 (rows, 4)"},
		{"residual shape", func() error {
			_, _, err := (&Residual{Inner: newLin(t, 3, 2, f, rng)}).Forward(randMatrix(f, 2, 3, rng))
			return err
		}, "a residual needs the same shape"},
		{"embedding size", func() error { _, err := NewEmbedding(0, 3, 2, f, rng); return err }, "vocab=0 must be positive"},
		{"attention context reuse", func() error {
			_, s, err := a.Forward(randMatrix(f, 2, 12, rng))
			if err != nil {
				return err
			}
			dy := randMatrix(f, 2, 4, rng)
			if _, err := a.Backward(s, dy); err != nil {
				return err
			}
			_, err = a.BackwardInput(s, dy)
			return err
		}, "already released"},
	} {
		err := c.run()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

// TestRMSNormUnitRMS: with a gain of ones every output row has RMS 1 (up
// to Eps).
func TestRMSNormUnitRMS(t *testing.T) {
	n := must(NewRMSNorm(6, tensor.Float64))
	y := f64(must3(t, n, randMatrix(tensor.Float64, 3, 6, NewRand(2))))
	for r := range 3 {
		var ss float64
		for _, v := range y[r*6 : (r+1)*6] {
			ss += v * v
		}
		if rms := math.Sqrt(ss / 6); math.Abs(rms-1) > 1e-4 {
			t.Errorf("row %d: RMS %v, want 1", r, rms)
		}
	}
}
