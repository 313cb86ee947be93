package nn

import (
	"fmt"
	"math"

	"gorgonia.org/tensor"
)

// seqKept is what a Sequential's chunk keeps between its F and its
// RECOMPUTE under selective recompute (Drop): the saved context with the
// first k layers' contexts dropped, and the stage input they are re-run
// from.
type seqKept struct {
	sv *seqSaved
	in *tensor.Dense
	k  int
}

// RecomputedLayers returns how many of n layers a share of a stage
// recomputes: the share of n rounded to the nearest, at least 1 (a share
// recomputes something) and at most n.
func RecomputedLayers(n int, share float64) int {
	return min(max(int(math.Round(share*float64(n))), 1), n)
}

// Drop lets the chunk of saved (the context of this Sequential's Forward
// on x) keep only what its backward needs beyond the first share of the
// layers (RecomputedLayers of them): it drops those layers' contexts and
// keeps x, from which Rebuild re-runs them. With it a Sequential is a
// pipe.Recomputable: under `ppgen gen -recompute selective:F` a stage
// holds, between its F and its RECOMPUTE, the contexts of its last layers
// only.
func (s *Sequential) Drop(x *tensor.Dense, saved any, share float64) (any, error) {
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
	if !(share > 0 && share <= 1) {
		return nil, fmt.Errorf("nn: %s: share %v, want one in (0, 1]", where, share)
	}
	k := RecomputedLayers(len(s.Layers), share)
	clear(sv.ctx[:k])
	clear(sv.outs[:k]) // left to the garbage collector: layer k's context may still read output k-1
	return &seqKept{sv: sv, in: x, k: k}, nil
}

// Rebuild re-runs the layers Drop dropped on the input it kept and
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
	if kp.in == nil {
		return nil, fmt.Errorf("nn: %s: the kept context was rebuilt already", where)
	}
	y := kp.in
	for i := range kp.k {
		l := s.Layers[i]
		var err error
		if y, kp.sv.ctx[i], err = l.Forward(y); err != nil {
			return nil, layerErr(where, i, l, err)
		}
		if i < kp.k-1 && s.between(i) {
			kp.sv.outs[i] = y
		}
	}
	kp.in = nil
	return kp.sv, nil
}
