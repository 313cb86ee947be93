package synth

import (
	"cmp"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// fillWindow is how many steps after an idle gap Fill looks for one to
// move into it.
const fillWindow = 24

// Fill is the bubble-filling local search: it simulates the order's
// compute steps under c, and for every idle gap of a rank (the rank waits
// before a step), largest first, tries moving into it the first later W,
// then the first later F, then the first later I of that rank (within
// fillWindow steps) that may legally run there: every step it jumps over
// could swap with it (Repair's rule: never two steps of one chunk, nor two
// of one kind on one stage). When none of those helps, it tries moving the
// step the rank waits for (its producer on another rank: the previous
// stage's F, the next stage's I) earlier on that rank, one position at a
// time. A move is kept when eval says the order is valid and its Score
// smaller; after a kept move the order is simulated again. It stops when
// no gap's moves improve or budget evaluations are spent, and returns the
// best order, its score and the evaluations used; deterministic for a
// deterministic eval. p must hold compute steps only (an order before
// lowering).
func Fill(p ir.Program, c sim.Cost, eval func(ir.Program) (Score, bool), budget int) (ir.Program, Score, int) {
	best, ok := eval(p)
	used := 1
	if !ok {
		return p, best, used
	}
	p = p.Clone()
	for used < budget {
		res, err := sim.Run(p, c)
		if err != nil {
			break
		}
		improved := false
		for _, g := range gaps(p, res) {
			if used >= budget {
				break
			}
			steps := p.Ranks[g.rank]
			for _, kind := range [...]ir.Kind{ir.BackwardWeight, ir.Forward, ir.BackwardInput} {
				j := movable(steps, g.index, kind)
				if j < 0 {
					continue
				}
				moveStep(steps, j, g.index)
				sc, ok := eval(p)
				used++
				if ok && sc.less(best) {
					best, improved = sc, true
					break
				}
				moveStep(steps, g.index, j)
				if used >= budget {
					break
				}
			}
			if improved {
				break
			}
			// Else the step that made the rank wait: its producer on
			// another rank, moved earlier there one step at a time.
			q, j := producer(p, p.Ranks[g.rank][g.index])
			if q < 0 || q == g.rank {
				continue
			}
			ps := p.Ranks[q]
			for k := j - 1; k >= 0 && k >= j-fillWindow && used < budget; k-- {
				if !swappable(ps[k], ps[j]) {
					break
				}
				moveStep(ps, j, k)
				sc, ok := eval(p)
				used++
				if ok && sc.less(best) {
					best, improved = sc, true
					break
				}
				moveStep(ps, k, j)
			}
			if improved {
				break
			}
		}
		if !improved {
			break
		}
	}
	return p, best, used
}

// producer returns the rank and index of the step whose output st waits
// for when it comes from another stage: the previous stage's F for an F,
// the next stage's I or B for an I or B (the same stage's F on the last
// stage); -1 when there is none (a first-stage F, a W).
func producer(p ir.Program, st ir.Step) (rank, index int) {
	S := p.Placement.Stages()
	var want ir.Step
	switch st.Kind {
	case ir.Forward:
		if st.Stage == 0 {
			return -1, -1
		}
		want = ir.Compute(ir.Forward, st.Stage-1, st.Micro)
	case ir.BackwardInput, ir.Backward:
		if st.Stage+1 >= S {
			return -1, -1
		}
		want = ir.Compute(st.Kind, st.Stage+1, st.Micro)
	default:
		return -1, -1
	}
	q := p.Placement.RankOf[want.Stage]
	for j, x := range p.Ranks[q] {
		if x.Kind == want.Kind && x.Stage == want.Stage && x.Micro == want.Micro {
			return q, j
		}
	}
	return -1, -1
}

type gap struct {
	rank, index int
	idle        float64
}

// gaps returns the idle gaps of res's ranks, the rank waiting before its
// step index for idle time, largest first (then by rank and index).
func gaps(p ir.Program, res sim.Result) []gap {
	var out []gap
	for r := range p.Ranks {
		end := len(res.Events)
		if r+1 < len(res.Offsets) {
			end = res.Offsets[r+1]
		}
		prev := 0.0
		for _, e := range res.Events[res.Offsets[r]:end] {
			if e.Lane != sim.LaneCompute {
				continue
			}
			if d := e.Start - prev; d > 1e-9*max(1, e.Start) {
				out = append(out, gap{r, e.Index, d})
			}
			prev = e.End
		}
	}
	slices.SortStableFunc(out, func(a, b gap) int {
		if c := cmp.Compare(b.idle, a.idle); c != 0 {
			return c
		}
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return a.index - b.index
	})
	return out
}

// movable returns the first j in (i, i+fillWindow] with steps[j] of the
// kind that may move to position i (it swaps with every step in [i, j)),
// or -1.
func movable(steps []ir.Step, i int, kind ir.Kind) int {
	for j := i + 1; j < len(steps) && j <= i+fillWindow; j++ {
		if steps[j].Kind != kind {
			continue
		}
		ok := true
		for k := i; k < j && ok; k++ {
			ok = swappable(steps[k], steps[j])
		}
		if ok {
			return j
		}
	}
	return -1
}

// moveStep moves steps[from] to position to, shifting the steps between.
func moveStep(steps []ir.Step, from, to int) {
	st := steps[from]
	if from > to {
		copy(steps[to+1:from+1], steps[to:from])
	} else {
		copy(steps[from:to], steps[from+1:to+1])
	}
	steps[to] = st
}
