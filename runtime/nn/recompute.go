package nn

import (
	"fmt"
	"math"
	"slices"

	"gorgonia.org/tensor"
)

// seqKept is what a Sequential's chunk keeps between its F and its
// RECOMPUTE under selective recompute (Drop): the saved context with the
// selected layers' contexts dropped, and the input of each run of them
// (the stage input for a run from layer 0), from which Rebuild re-runs it.
type seqKept struct {
	sv   *seqSaved
	runs []seqRun
}

// seqRun is a maximal run of selected layers first..end-1 and its input.
type seqRun struct {
	first, end int
	in         *tensor.Dense
}

// RecomputedLayers returns how many of n layers a share of a stage
// recomputes (selective:F, the first of them): the share of n rounded to
// the nearest, at least 1 (a share recomputes something) and at most n.
func RecomputedLayers(n int, share float64) int {
	return min(max(int(math.Round(share*float64(n))), 1), n)
}

// Select names the layers Drop drops and Rebuild re-runs (pipe's New calls
// it before any Forward): layers, indices into s.Layers in increasing
// order, anywhere in the stage (`ppgen gen -recompute model`); when
// layers is nil, the first RecomputedLayers(len(s.Layers), share)
// (selective:F). From then on Forward keeps the input of each maximal run
// of selected layers. With it a Sequential is a pipe.Recomputable.
func (s *Sequential) Select(share float64, layers []int) error {
	const where = "Sequential.Select"
	if s == nil {
		return fmt.Errorf("nn: %s: nil *Sequential", where)
	}
	n := len(s.Layers)
	if n == 0 {
		return fmt.Errorf("nn: %s: the Sequential has no layers to recompute", where)
	}
	on := make([]bool, n)
	if layers == nil {
		if !(share > 0 && share <= 1) {
			return fmt.Errorf("nn: %s: share %v, want one in (0, 1]", where, share)
		}
		for i := range RecomputedLayers(n, share) {
			on[i] = true
		}
	}
	for i, l := range layers {
		if l < 0 || l >= n || (i > 0 && l <= layers[i-1]) {
			return fmt.Errorf("nn: %s: layers %v: want increasing indices of the Sequential's %d layers (0..%d)", where, layers, n, n-1)
		}
		on[l] = true
	}
	if !slices.Contains(on, true) {
		return fmt.Errorf("nn: %s: no layer selected; give the layers to recompute, or a share in (0, 1]", where)
	}
	s.recompute = on
	return nil
}

// runStart reports whether layer i > 0 begins a run of selected layers,
// whose input Forward keeps.
func (s *Sequential) runStart(i int) bool {
	return i > 0 && s.recompute != nil && s.recompute[i] && !s.recompute[i-1]
}

// Drop lets the chunk of saved (the context of this Sequential's Forward
// on x) keep only what its backward needs beyond the layers Select named:
// it drops those layers' contexts and keeps the input of each maximal run
// of them (x for a run from layer 0), from which Rebuild re-runs it. Under
// `ppgen gen -recompute selective:F` or `model` a stage holds, between its
// F and its RECOMPUTE, the contexts of its other layers and those inputs.
func (s *Sequential) Drop(x *tensor.Dense, saved any) (any, error) {
	const where = "Sequential.Drop"
	sv, err := s.saved(where, saved)
	if err != nil {
		return nil, err
	}
	if sv.inputDone {
		return nil, fmt.Errorf("nn: %s: the backward already ran on this saved context", where)
	}
	if x == nil {
		return nil, fmt.Errorf("nn: %s: input is nil; Rebuild re-runs the dropped layers from it", where)
	}
	if s.recompute == nil || len(s.recompute) != len(s.Layers) {
		return nil, fmt.Errorf("nn: %s: no layers selected (%d of %d); call Select before Forward", where, len(s.recompute), len(s.Layers))
	}
	kp := &seqKept{sv: sv}
	for i := 0; i < len(s.Layers); i++ {
		if !s.recompute[i] {
			continue
		}
		r := seqRun{first: i, in: x}
		if i > 0 {
			if i >= len(sv.runIn) || sv.runIn[i] == nil {
				return nil, fmt.Errorf("nn: %s: the Forward kept no input of layer %d; call Select before Forward", where, i)
			}
			r.in = sv.runIn[i]
		}
		for i < len(s.Layers) && s.recompute[i] {
			sv.ctx[i] = nil
			sv.outs[i] = nil // left to the garbage collector: the next layer's context may still read it
			i++
		}
		r.end = i
		kp.runs = append(kp.runs, r)
	}
	sv.runIn = nil
	return kp, nil
}

// Rebuild re-runs each run of layers Drop dropped on the input it kept and
// returns the saved context Forward returned: the same values, as the
// layers' forwards are deterministic.
func (s *Sequential) Rebuild(kept any) (any, error) {
	const where = "Sequential.Rebuild"
	kp, ok := kept.(*seqKept)
	if !ok || kp == nil {
		return nil, fmt.Errorf("nn: %s: kept context is %T, want the one this Sequential's Drop returned", where, kept)
	}
	if _, err := s.saved(where, kp.sv); err != nil {
		return nil, err
	}
	if kp.runs == nil {
		return nil, fmt.Errorf("nn: %s: the kept context was rebuilt already", where)
	}
	for _, r := range kp.runs {
		y := r.in
		for i := r.first; i < r.end; i++ {
			l := s.Layers[i]
			var err error
			if y, kp.sv.ctx[i], err = l.Forward(y); err != nil {
				return nil, layerErr(where, i, l, err)
			}
			if i < r.end-1 && s.between(i) {
				kp.sv.outs[i] = y // read by the run's next layer only, rebuilt with it
			}
		}
	}
	kp.runs = nil
	return kp.sv, nil
}
