package passes

import (
	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// Split replaces every full backward B of p by its two halves, I (the input
// gradient) and W (the weight gradient), with the W right after:
//
//	B(s, m)                       ->  I(s, m)  W(s, m)
//	(F(s', m'); B(s, m))OVERLAP_F_B  ->  (F(s', m'); I(s, m))OVERLAP_F_B  W(s, m)
//	(B(s, m); F(s', m'))OVERLAP_B_F  ->  (B -> I as above)                W(s, m)
//
// An overlap keeps its two sub-steps: its backward becomes the I, and the W
// runs right after the composite (DxDwInOverlap describes what that means for
// the gradient send). I and W steps already in p are kept, as is every other
// step, so Split is idempotent. The chunk's slot (if p has slots) is copied to
// both halves.
//
// Split runs on compute-only orders as the "split" pass of Lower (before
// comm insertion, which then sends each I's gradient right after it), but it
// accepts any structurally valid program. The input is not modified.
// The tests invert it (merge, in merge_test.go).
func Split(p ir.Program) (ir.Program, error) {
	if err := checkSteps(p, "split", false); err != nil {
		return ir.Program{}, err
	}
	return splitBackwards(p, false), nil
}

// splitBackwards is Split (onlyOverlaps false) and DxDwInOverlap (true) on a
// checked program.
func splitBackwards(p ir.Program, onlyOverlaps bool) ir.Program {
	q := ir.Program{Placement: p.Placement, Micro: p.Micro, Copies: p.Copies, Ranks: make([][]ir.Step, len(p.Ranks))}
	for r, steps := range p.Ranks {
		n := 0
		for i := range steps {
			if backwardToSplit(&steps[i], onlyOverlaps) >= 0 {
				n++
			}
		}
		if n == 0 {
			q.Ranks[r] = steps
			continue
		}
		out := make([]ir.Step, 0, len(steps)+n)
		for i := range steps {
			st := steps[i]
			k := backwardToSplit(&st, onlyOverlaps)
			if k < 0 {
				out = append(out, st)
				continue
			}
			var b ir.Step
			if st.Kind.IsOverlap() {
				st.Sub = append([]ir.Step(nil), st.Sub...)
				b = st.Sub[k]
				st.Sub[k].Kind = ir.BackwardInput
			} else {
				b = st
				st.Kind = ir.BackwardInput
			}
			w := b
			w.Kind = ir.BackwardWeight
			out = append(out, st, w)
		}
		q.Ranks[r] = out
	}
	return q
}

// backwardToSplit returns which part of st is a full backward to split: 0 for
// a B step itself (when !onlyOverlaps), the sub-step index for an overlap
// holding a B, -1 for none.
func backwardToSplit(st *ir.Step, onlyOverlaps bool) int {
	if st.Kind.IsOverlap() {
		for k := range st.Sub {
			if st.Sub[k].Kind == ir.Backward {
				return k
			}
		}
		return -1
	}
	if st.Kind == ir.Backward && !onlyOverlaps {
		return 0
	}
	return -1
}

// FillW moves the W steps of a compute-only order into time their rank
// would otherwise spend waiting, as zero-bubble schedules place the weight
// gradient: Split puts each W right after its I, and FillW then lets it
// float later, to where it fills a bubble, without changing the order of
// the other steps or of the W steps among themselves (so every stage still
// accumulates its weight gradients in the same order, and training results
// stay bit-identical).
//
// It times the order under the cost model c as the timed comm insertion
// does (a step starts when its rank is free and its inputs exist, plus
// c.Comm across ranks) and walks the ranks in time order. A W reached in a
// rank's order is held back; held Ws run, oldest first, whenever the rank's
// next step cannot start yet and the W ends by the time its input arrives,
// and all of them run before the rank's next forward (alone or in an
// overlap) and at its end. Since no
// W passes a forward, no chunk lives longer across one, and the peak number
// of live chunks per rank does not grow. W steps inside overlaps stay.
//
// The result is returned only when its ideal makespan under c is below the
// input's; otherwise (nothing to fill, a compute cost ≤ 0, an infeasible
// order, which comm insertion then reports) the input comes back. The
// input is not modified.
func FillW(p ir.Program, c sim.Cost) (ir.Program, error) {
	if err := checkSteps(p, "fillw", true); err != nil {
		return ir.Program{}, err
	}
	for _, steps := range p.Ranks {
		for _, st := range steps {
			if st.Kind.IsCompute() && c.StepCost(st) <= 0 {
				return p, nil
			}
		}
	}
	before, ok := idealTimeline(p, c)
	if !ok {
		return p, nil
	}
	q, ok := fillW(p, c)
	if !ok {
		return p, nil
	}
	after, ok := idealTimeline(q, c)
	if !ok || makespanOf(after) >= makespanOf(before) {
		return p, nil
	}
	return q, nil
}

func makespanOf(ends [][]float64) float64 {
	m := 0.0
	for _, e := range ends {
		if len(e) > 0 {
			m = max(m, e[len(e)-1])
		}
	}
	return m
}

// fillW is FillW's placement; false when the order cannot complete.
func fillW(p ir.Program, c sim.Cost) (ir.Program, bool) {
	rankOf := p.Placement.RankOf
	P, S, M := len(p.Ranks), len(rankOf), p.Micro
	fEnd := filledF(S*M, -1)
	bEnd := filledF(S*M, -1)
	type rank struct {
		pos     int
		free    float64
		pending []ir.Step
		out     []ir.Step
		blocked bool
		live    int
	}
	rs := make([]rank, P)
	for r := range rs {
		rs[r].out = make([]ir.Step, 0, len(p.Ranks[r]))
	}
	// ready returns when st's inputs exist, or false when a producer has
	// not run yet.
	ready := func(r int, st ir.Step) (float64, bool) {
		t := 0.0
		for _, cs := range st.Computes() {
			in, ok := deps.Neighbour(&p, &cs) // the chunk's own F and I run earlier on r
			if !ok {
				continue
			}
			end := fEnd[in.Stage*M+in.Micro]
			if in.What == deps.Gradient {
				end = bEnd[in.Stage*M+in.Micro]
			}
			if end < 0 {
				return 0, false
			}
			if in.Rank != r {
				end += c.Comm
			}
			t = max(t, end)
		}
		return t, true
	}
	// Live chunks: a chunk lives from its F to its W (or B).
	starts := func(st ir.Step) (n int) {
		for _, cs := range st.Computes() {
			if cs.Kind == ir.Forward {
				n++
			}
		}
		return n
	}
	ends := func(st ir.Step) (n int) {
		for _, cs := range st.Computes() {
			if cs.Kind == ir.BackwardWeight || cs.Kind == ir.Backward {
				n++
			}
		}
		return n
	}
	limit := 0 // the most chunks any rank of p holds at once
	for _, steps := range p.Ranks {
		live := 0
		for _, st := range steps {
			live += starts(st)
			limit = max(limit, live)
			live -= ends(st)
		}
	}
	runW := func(x *rank) {
		w := x.pending[0]
		x.pending = x.pending[1:]
		x.out = append(x.out, w)
		x.free += c.StepCost(w)
		x.live--
	}
	for {
		r := -1
		for i := range rs {
			x := &rs[i]
			if x.blocked || (x.pos == len(p.Ranks[i]) && len(x.pending) == 0) {
				continue
			}
			if r < 0 || x.free < rs[r].free {
				r = i
			}
		}
		if r < 0 {
			break
		}
		x, steps := &rs[r], p.Ranks[r]
		for x.pos < len(steps) && steps[x.pos].Kind == ir.BackwardWeight {
			x.pending = append(x.pending, steps[x.pos])
			x.pos++
		}
		if x.pos == len(steps) {
			for len(x.pending) > 0 {
				runW(x)
			}
			continue
		}
		st := steps[x.pos]
		t, known := ready(r, st)
		switch {
		case len(x.pending) > 0 && x.live+starts(st) > limit:
			// A forward would hold more chunks than the limit with the
			// held Ws' chunks: they run now, in the gap before it if any.
			runW(x)
		case known && t <= x.free:
			end := x.free + c.StepCost(st)
			x.out = append(x.out, st)
			x.free, x.pos = end, x.pos+1
			x.live += starts(st) - ends(st)
			for _, cs := range st.Computes() {
				switch {
				case cs.Kind == ir.Forward:
					fEnd[cs.Stage*M+cs.Micro] = end
				case cs.Kind.IsBackward():
					bEnd[cs.Stage*M+cs.Micro] = end
				}
			}
			for i := range rs {
				rs[i].blocked = false
			}
		case len(x.pending) > 0 && known && x.free+c.StepCost(x.pending[0]) <= t:
			// A bubble the held W fits in. (While the input's time is
			// unknown the rank waits; it decides, at the same free time,
			// once the producer has run: W has no outputs, so placing it
			// then is as good as placing it now.)
			runW(x)
		case known:
			x.free = t
		default:
			x.blocked = true
		}
	}
	q := ir.Program{Placement: p.Placement, Micro: p.Micro, Copies: p.Copies, Ranks: make([][]ir.Step, P)}
	for r := range rs {
		if rs[r].pos < len(p.Ranks[r]) || len(rs[r].pending) > 0 {
			return ir.Program{}, false
		}
		q.Ranks[r] = rs[r].out
	}
	return q, true
}

func filledF(n int, v float64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = v
	}
	return s
}
