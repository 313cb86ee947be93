package synth

import (
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// Score is what Repair minimises: the makespan, then (to move across the
// plateaus where one swap does not change it) the sum of the ranks'
// finishing times.
type Score struct{ Makespan, Finish float64 }

// RankFinish is a simulation's Score.Finish: the sum over ranks of the end
// of each rank's last event.
func RankFinish(r sim.Result) float64 {
	s := 0.0
	for i := range r.Offsets {
		end := len(r.Events)
		if i+1 < len(r.Offsets) {
			end = r.Offsets[i+1]
		}
		if end > r.Offsets[i] {
			s += r.Events[end-1].End
		}
	}
	return s
}

func (a Score) less(b Score) bool {
	const eps = 1e-9
	if d := a.Makespan - b.Makespan; d < -eps*max(1, b.Makespan) || d > eps*max(1, b.Makespan) {
		return d < 0
	}
	return a.Finish < b.Finish-eps*max(1, b.Finish)
}

// Repair is the local search: it swaps adjacent compute steps of a rank
// (never two steps of one chunk, nor two of the same kind on one stage,
// whose order the dependency model fixes), keeping a swap when eval says
// the order is valid (its memory within the cap, no deadlock) and its
// Score smaller, pass after pass over the ranks and positions in order,
// until a pass improves nothing or budget evaluations are spent. It
// returns the best order, its score and the evaluations used;
// deterministic for a deterministic eval.
func Repair(p ir.Program, eval func(ir.Program) (Score, bool), budget int) (ir.Program, Score, int) {
	best, ok := eval(p)
	used := 1
	if !ok {
		return p, best, used
	}
	p = p.Clone()
	for improved := true; improved && used < budget; {
		improved = false
		for r := range p.Ranks {
			steps := p.Ranks[r]
			for i := 0; i+1 < len(steps) && used < budget; i++ {
				a, b := steps[i], steps[i+1]
				if !swappable(a, b) {
					continue
				}
				steps[i], steps[i+1] = b, a
				sc, ok := eval(p)
				used++
				if ok && sc.less(best) {
					best, improved = sc, true
					continue
				}
				steps[i], steps[i+1] = a, b
			}
		}
	}
	return p, best, used
}

// swappable reports whether two adjacent steps of a rank may trade places:
// both plain compute steps of different chunks, and not two of one kind on
// one stage (each stage runs its F's, I's and W's in micro-batch order).
func swappable(a, b ir.Step) bool {
	if a.Kind.IsOverlap() || b.Kind.IsOverlap() || !a.Kind.IsCompute() || !b.Kind.IsCompute() {
		return false
	}
	if a.Stage == b.Stage && (a.Micro == b.Micro || a.Kind == b.Kind) {
		return false
	}
	return true
}
