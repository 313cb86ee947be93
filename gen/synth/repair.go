package synth

import "github.com/ppgen/ppgen/gen/ir"

// Repair is the local search: it swaps adjacent compute steps of a rank
// (never two steps of one chunk, nor two of the same kind on one stage,
// whose order the dependency model fixes), keeping a swap when eval says
// the order is valid and faster (its memory within the cap, no deadlock),
// pass after pass over the ranks and positions in order, until a pass
// improves nothing or budget evaluations are spent. It returns the best
// order, its cost and the evaluations used; deterministic for a
// deterministic eval.
func Repair(p ir.Program, eval func(ir.Program) (float64, bool), budget int) (ir.Program, float64, int) {
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
				ms, ok := eval(p)
				used++
				if ok && ms < best*(1-1e-9) {
					best, improved = ms, true
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
