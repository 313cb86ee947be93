package nn

import (
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// TestGradCheckTiedHead: the head's input and table gradients, alone and
// in a character model whose head shares the embedding's token table (the
// finite difference of a table entry sees both of its uses, so the shared
// gradient must hold the sum of both layers' contributions).
func TestGradCheckTiedHead(t *testing.T) {
	f := tensor.Float64
	rng := NewRand(4)
	t.Run("head", func(t *testing.T) {
		e := must(NewEmbedding(7, 3, 2, f, rng))
		h := must(NewTiedHead(e.Token))
		randomize(h, 21)
		checkLayerGrads(t, h, randMatrix(f, 4, 3, rng))
	})
	t.Run("tied-model", func(t *testing.T) {
		e := must(NewEmbedding(6, 4, 3, f, rng))
		m := NewSequential(e, must(NewTransformerBlock(4, 2, 3, 8, f, rng)), must(NewRMSNorm(4, f)), must(NewTiedHead(e.Token)))
		randomize(m, 22)
		checkGrads(t, m, tokens(f, 6, 6, 9), false)
	})
}

// TestTiedHeadForward: the logits are the dot products of each row with
// each table row, computed here by hand.
func TestTiedHeadForward(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		table := &Param{Name: "token", Value: fromF64(dt, []int{3, 2}, []float64{1, 2, 3, 4, 5, 6}), Grad: fromF64(dt, []int{3, 2}, make([]float64, 6))}
		h := must(NewTiedHead(table))
		x := fromF64(dt, []int{2, 2}, []float64{1, -1, 0.5, 2})
		y, saved, err := h.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		want := []float64{1 - 2, 3 - 4, 5 - 6, 0.5 + 4, 1.5 + 8, 2.5 + 12}
		for i, v := range f64(y) {
			if v != want[i] {
				t.Errorf("%v: y[%d] = %v, want %v", dt, i, v, want[i])
			}
		}
		if _, err := h.Backward(saved, fromF64(dt, []int{2, 3}, make([]float64, 6))); err != nil {
			t.Fatal(err)
		}
		if _, err := h.BackwardInput(saved, fromF64(dt, []int{2, 3}, make([]float64, 6))); err == nil || !strings.Contains(err.Error(), "released") {
			t.Errorf("%v: a second backward on a released context: %v, want an error saying so", dt, err)
		}
	}
}

// TestTiedHeadErrors: bad tables and inputs are errors that name them.
func TestTiedHeadErrors(t *testing.T) {
	f := tensor.Float64
	vec := &Param{Name: "v", Value: fromF64(f, []int{3}, []float64{1, 2, 3}), Grad: fromF64(f, []int{3}, make([]float64, 3))}
	if _, err := NewTiedHead(vec); err == nil || !strings.Contains(err.Error(), "(vocab, dim)") {
		t.Errorf("a vector table: %v", err)
	}
	if _, err := NewTiedHead(nil); err == nil {
		t.Error("a nil table: no error")
	}
	table := &Param{Name: "token", Value: fromF64(f, []int{3, 2}, make([]float64, 6)), Grad: fromF64(f, []int{3, 2}, make([]float64, 6))}
	h := must(NewTiedHead(table))
	if _, _, err := h.Forward(fromF64(f, []int{2, 3}, make([]float64, 6))); err == nil || !strings.Contains(err.Error(), "want float64 (rows, 2)") {
		t.Errorf("an input of 3 columns: %v", err)
	}
	var zero TiedHead
	if _, _, err := zero.Forward(fromF64(f, []int{2, 2}, make([]float64, 4))); err == nil || !strings.Contains(err.Error(), "NewTiedHead") {
		t.Errorf("a zero TiedHead: %v", err)
	}
}
