package nn

import (
	"slices"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// TestRecomputedLayers: a share of n layers, rounded, at least one, at
// most n.
func TestRecomputedLayers(t *testing.T) {
	for _, tc := range []struct {
		n     int
		share float64
		want  int
	}{{4, 0.5, 2}, {4, 0.25, 1}, {5, 0.5, 3}, {4, 0.01, 1}, {4, 1, 4}, {1, 0.5, 1}} {
		if got := RecomputedLayers(tc.n, tc.share); got != tc.want {
			t.Errorf("RecomputedLayers(%d, %v) = %d, want %d", tc.n, tc.share, got, tc.want)
		}
	}
}

// TestSequentialDropRebuild: Drop clears the contexts of the first share
// of the layers and Rebuild restores them from the input, so that the
// backward after it gives the input and parameter gradients of the
// backward without, bit for bit; misuse is refused with the reason.
func TestSequentialDropRebuild(t *testing.T) {
	build := func() *Sequential {
		rng := NewRand(3)
		var ls []Layer
		for range 2 {
			l, err := NewLinear(4, 4, tensor.Float64, rng)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l, Tanh{})
		}
		return NewSequential(ls...)
	}
	x := tensor.New(tensor.WithShape(2, 4), tensor.WithBacking([]float64{0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8}))
	dy := tensor.New(tensor.WithShape(2, 4), tensor.WithBacking([]float64{1, -1, 0.5, 0.25, -0.5, 2, 0, 1}))
	grads := func(s *Sequential, share float64) ([]float64, [][]float64) {
		_, saved, err := s.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		if share > 0 {
			kept, err := s.Drop(x, saved, share)
			if err != nil {
				t.Fatal(err)
			}
			sv := saved.(*seqSaved)
			k := RecomputedLayers(len(s.Layers), share)
			for i, c := range sv.ctx {
				if (c == nil) != (i < k) {
					t.Errorf("share %v: layer %d context dropped %v; want the first %d dropped", share, i, c == nil, k)
				}
			}
			if saved, err = s.Rebuild(kept); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Rebuild(kept); err == nil || !strings.Contains(err.Error(), "rebuilt already") {
				t.Errorf("a second Rebuild: %v", err)
			}
		}
		dx, err := s.Backward(saved, dy)
		if err != nil {
			t.Fatal(err)
		}
		var gs [][]float64
		for _, p := range s.Params() {
			gs = append(gs, slices.Clone(p.Grad.Float64s()))
		}
		return slices.Clone(dx.Float64s()), gs
	}
	// Two transformer blocks: a stage of blocks recomputes its first ones.
	blocks := func() *Sequential {
		rng := NewRand(5)
		var ls []Layer
		for range 2 {
			b, err := NewTransformerBlock(4, 2, 2, 8, tensor.Float64, rng)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, b)
		}
		return NewSequential(ls...)
	}
	for name, mk := range map[string]func() *Sequential{"linear-tanh": build, "transformer": blocks} {
		dx0, g0 := grads(mk(), 0)
		for _, share := range []float64{0.25, 0.5, 1} {
			dx, g := grads(mk(), share)
			if !slices.Equal(dx, dx0) || !slices.EqualFunc(g, g0, slices.Equal) {
				t.Errorf("%s share %v: gradients differ from the backward without Drop", name, share)
			}
		}
	}
	s := build()
	_, saved, err := s.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		call  func() error
		words string
	}{
		{"share 0", func() error { _, err := s.Drop(x, saved, 0); return err }, "want one in (0, 1]"},
		{"no input", func() error { _, err := s.Drop(nil, saved, 0.5); return err }, "input is nil"},
		{"a foreign context", func() error { _, err := s.Drop(x, "ctx", 0.5); return err }, "saved context is string"},
		{"a foreign kept", func() error { _, err := s.Rebuild(saved); return err }, "want the one this Sequential's Drop returned"},
	} {
		if err := tc.call(); err == nil || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.words)
		}
	}
}
