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

// counted counts its layer's Forward calls.
type counted struct {
	Layer
	forwards int
}

func (c *counted) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	c.forwards++
	return c.Layer.Forward(x)
}

// sel is a selection of a Sequential's layers to recompute: a share
// (layers nil) or the layers.
type sel struct {
	share  float64
	layers []int
}

// TestSequentialDropRebuild: Drop clears the contexts of exactly the
// selected layers (the first share, or layers anywhere in the stage) and
// Rebuild restores them from the inputs of their runs, so that the
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
			ls = append(ls, &counted{Layer: l}, &counted{Layer: Tanh{}})
		}
		return NewSequential(ls...)
	}
	x := tensor.New(tensor.WithShape(2, 4), tensor.WithBacking([]float64{0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8}))
	dy := tensor.New(tensor.WithShape(2, 4), tensor.WithBacking([]float64{1, -1, 0.5, 0.25, -0.5, 2, 0, 1}))
	grads := func(s *Sequential, sl *sel) ([]float64, [][]float64) {
		if sl != nil {
			if err := s.Select(sl.share, sl.layers); err != nil {
				t.Fatal(err)
			}
		}
		_, saved, err := s.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		if sl != nil {
			kept, err := s.Drop(x, saved)
			if err != nil {
				t.Fatal(err)
			}
			want := sl.layers
			if want == nil {
				want = []int{}
				for i := range RecomputedLayers(len(s.Layers), sl.share) {
					want = append(want, i)
				}
			}
			sv := saved.(*seqSaved)
			for i, c := range sv.ctx {
				if (c == nil) != slices.Contains(want, i) {
					t.Errorf("%v: layer %d context dropped %v; want layers %v dropped", *sl, i, c == nil, want)
				}
			}
			if saved, err = s.Rebuild(kept); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Rebuild(kept); err == nil || !strings.Contains(err.Error(), "rebuilt already") {
				t.Errorf("a second Rebuild: %v", err)
			}
			for i, l := range s.Layers {
				runs := 1
				if slices.Contains(want, i) {
					runs = 2 // its Forward, then Rebuild's
				}
				if c, ok := l.(*counted); ok && c.forwards != runs {
					t.Errorf("%v: layer %d ran Forward %d times; want 2 for the layers %v, 1 for the others", *sl, i, c.forwards, want)
				}
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
	for _, tc := range []struct {
		name string
		mk   func() *Sequential
		sels []sel
	}{
		{"linear-tanh", build, []sel{{share: 0.25}, {share: 0.5}, {share: 1},
			{layers: []int{1}}, {layers: []int{3}}, {layers: []int{1, 2}}, {layers: []int{0, 2}}, {layers: []int{1, 3}}, {layers: []int{0, 2, 3}}}},
		{"transformer", blocks, []sel{{share: 0.5}, {share: 1}, {layers: []int{1}}}},
	} {
		dx0, g0 := grads(tc.mk(), nil)
		for _, sl := range tc.sels {
			dx, g := grads(tc.mk(), &sl)
			if !slices.Equal(dx, dx0) || !slices.EqualFunc(g, g0, slices.Equal) {
				t.Errorf("%s %v: gradients differ from the backward without Drop", tc.name, sl)
			}
		}
	}
	s := build()
	_, unselected, err := s.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Select(0, []int{1, 3}); err != nil {
		t.Fatal(err)
	}
	_, saved, err := s.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		call  func() error
		words string
	}{
		{"share 0", func() error { return build().Select(0, nil) }, "want one in (0, 1]"},
		{"a layer outside", func() error { return build().Select(0, []int{4}) }, "want increasing indices of the Sequential's 4 layers (0..3)"},
		{"layers out of order", func() error { return build().Select(0, []int{2, 1}) }, "want increasing indices"},
		{"no layer", func() error { return build().Select(0, []int{}) }, "no layer selected"},
		{"Drop before Select", func() error {
			u := build()
			_, sv, err := u.Forward(x)
			if err != nil {
				return err
			}
			_, err = u.Drop(x, sv)
			return err
		}, "call Select before Forward"},
		{"Forward before Select", func() error { _, err := s.Drop(x, unselected); return err }, "kept no input of layer 1"},
		{"no input", func() error { _, err := s.Drop(nil, saved); return err }, "input is nil"},
		{"a foreign context", func() error { _, err := s.Drop(x, "ctx"); return err }, "saved context is string"},
		{"a foreign kept", func() error { _, err := s.Rebuild(saved); return err }, "want the one this Sequential's Drop returned"},
	} {
		if err := tc.call(); err == nil || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.words)
		}
	}
}
