package synth

import (
	"cmp"
	"math"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
)

// A Recipe is what PriorityOrder builds an order from: each step's
// priority and each micro-batch's earliest entry.
type Recipe struct {
	Prio  func(k ir.Kind, s, m int) float64
	Enter func(m int) float64
}

// Pilot improves the order PriorityOrder builds from rc by rollouts (the
// pilot method). It runs the same list scheduler, but whenever a free rank
// has a choice to make, among its ready steps (the first PilotChoices by
// priority) or between starting one and idling until the next step ends
// or input arrives, it finishes the schedule from each option by rc alone,
// in simulated time, and takes the option that finishes earliest (rc's own
// choice among equals). Taking rc's choice at the next decision finishes
// as the option chosen before did, so the order never ends later than
// PriorityOrder's (in the list scheduler's timing, gen/sim's for a
// compute-only order). Idling lets a rank keep memory free for a chunk
// that the cap would otherwise block: W = 0.6·I on the zigzag with V = 8,
// P = 4, M = 16, within two micro-batches, 392.2 → 387.6 from Periodic's
// best recipe. budget bounds the steps all rollouts start together; past
// it the rest follows rc. Deterministic; the cap holds as in
// PriorityOrder. ErrStuck only when PriorityOrder is stuck (where it is,
// an option that is not may still be found).
func Pilot(p Problem, rc Recipe, budget int) (ir.Program, error) {
	q, _, err := pilot(p, rc, budget)
	return q, err
}

// pilot is Pilot, with the order's makespan in the list scheduler's
// timing.
func pilot(p Problem, rc Recipe, budget int) (ir.Program, float64, error) {
	c, err := p.check()
	if err != nil {
		return ir.Program{}, 0, err
	}
	l := newLister(&p, c, rc.Enter)
	spent := 0
	// finish is an option's finish: the makespan of the rest by rc from
	// l after change, or +Inf when that is stuck.
	finish := func(change func(n *lister)) float64 {
		n := l.rollout()
		change(n)
		spent += n.left
		if n.finish(rc.Prio) != nil {
			return math.Inf(1)
		}
		return slices.Max(n.free)
	}
	for !l.done() {
		for progressed := true; progressed; {
			progressed = false
			for r := range l.free {
				for l.isFree(r) {
					cs := readySteps(l, r, rc.Prio)
					if len(cs) == 0 {
						break
					}
					progressed = true
					pick, wait := cs[0], math.Inf(1)
					if (len(cs) > 1 || cs[0].Kind == ir.Forward) && spent+(len(cs)+1)*l.left <= budget {
						best := math.Inf(1)
						for _, st := range cs[:min(PilotChoices, len(cs))] {
							if ms := finish(func(n *lister) { n.start(r, st) }); ms < best*(1-1e-12) {
								best, pick = ms, st
							}
						}
						if tn := l.nextEvent(); !math.IsInf(tn, 1) {
							if ms := finish(func(n *lister) { n.free[r] = tn }); ms < best*(1-1e-12) {
								wait = tn
							}
						}
					}
					if !math.IsInf(wait, 1) {
						l.free[r] = wait // idle until then
						break
					}
					l.start(r, pick)
				}
			}
		}
		if err := l.advance(); err != nil {
			return ir.Program{}, 0, err
		}
	}
	return l.out, slices.Max(l.free), nil
}

// PilotChoices is how many of a rank's ready steps, by priority, Pilot
// rolls out at a decision (besides idling).
const PilotChoices = 4

// readySteps returns rank r's ready steps, as priorityPick sees them, by
// priority (ties in priorityPick's order, so the first is its pick).
func readySteps(l *lister, r int, prio func(k ir.Kind, s, m int) float64) []ir.Step {
	var out []ir.Step
	l.eachReady(r, func(k ir.Kind, s, m int) { out = append(out, ir.Compute(k, s, m)) })
	slices.SortStableFunc(out, func(a, b ir.Step) int {
		return cmp.Compare(prio(a.Kind, a.Stage, a.Micro), prio(b.Kind, b.Stage, b.Micro))
	})
	return out
}
