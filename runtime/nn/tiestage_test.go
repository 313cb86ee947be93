package nn

import (
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// TestTie: a TiedStage is its stage, and returns its tied parameters'
// gradients (the same tensors, in the order given); Tie refuses parameters
// the stage does not hold, repeats, and no parameters at all.
func TestTie(t *testing.T) {
	rng := NewRand(1)
	a, err := NewLinear(3, 3, tensor.Float64, rng)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewLinear(3, 2, tensor.Float64, rng)
	if err != nil {
		t.Fatal(err)
	}
	seq := NewSequential(a, Tanh{}, b)
	ts, err := Tie(seq, b.Bias, a.Weight)
	if err != nil {
		t.Fatal(err)
	}
	if g := ts.TiedGrads(); len(g) != 2 || g[0] != b.Bias.Grad || g[1] != a.Weight.Grad {
		t.Errorf("TiedGrads = %v; want b's bias gradient, then a's weight gradient", g)
	}
	if len(ts.Params()) != len(seq.Params()) {
		t.Errorf("a TiedStage has %d params; its stage %d", len(ts.Params()), len(seq.Params()))
	}
	x := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{1, 2, 3, 4, 5, 6}))
	y1, _, err1 := ts.Forward(x)
	y2, _, err2 := seq.Forward(x)
	if err1 != nil || err2 != nil || !y1.Shape().Eq(y2.Shape()) {
		t.Errorf("Forward through the TiedStage: %v %v, %v %v", y1, err1, y2, err2)
	}
	other, _ := NewLinear(3, 3, tensor.Float64, rng)
	for _, tc := range []struct {
		params []*Param
		words  string
	}{
		{nil, "no parameters"},
		{[]*Param{other.Weight}, "not one of the stage's parameters"},
		{[]*Param{a.Weight, a.Weight}, "listed twice"},
		{[]*Param{nil}, "nil *Param"},
	} {
		if _, err := Tie(seq, tc.params...); err == nil || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("Tie(%v): %v; want an error saying %q", tc.params, err, tc.words)
		}
	}
	if _, err := Tie(nil, a.Weight); err == nil {
		t.Error("Tie(nil): no error")
	}
}
