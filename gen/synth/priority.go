package synth

import (
	"github.com/ppgen/ppgen/gen/ir"
)

// PriorityOrder is the list scheduler driven by a priority per step
// instead of a Rule: each rank, whenever it is free, starts the ready step
// with the least prio(kind, stage, micro-batch), where an I is ready when
// its F ran and the next stage's I arrived, a W when its I ended, and an F
// when its input arrived (micro-batch m's first F no earlier than
// enter(m)) and its chunk keeps the rank within the cap. Equal priorities
// go to the rank's earlier stage, and on one stage to the I, then the W,
// then the F. Each stage runs each kind in micro-batch order, and the
// cap holds as in Schedule. ErrStuck when every rank waits.
func PriorityOrder(p Problem, prio func(k ir.Kind, s, m int) float64, enter func(m int) float64) (ir.Program, error) {
	c, err := p.check()
	if err != nil {
		return ir.Program{}, err
	}
	l := newLister(&p, c, enter)
	if err := l.finish(prio); err != nil {
		return ir.Program{}, err
	}
	return l.out, nil
}

// finish runs l to its end by prio, as PriorityOrder does.
func (l *lister) finish(prio func(k ir.Kind, s, m int) float64) error {
	for !l.done() {
		for progressed := true; progressed; {
			progressed = false
			for r := range l.free {
				for l.isFree(r) {
					l.ready = l.ready[:0]
					st, ok := priorityPick(l, r, prio)
					if !ok {
						break
					}
					if l.picked != nil {
						l.picked(st, l.ready)
					}
					progressed = true
					l.start(r, st)
				}
			}
		}
		if err := l.advance(); err != nil {
			return err
		}
	}
	return nil
}

// priorityPick is the ready step of rank r with the least priority; with
// l.picked set it also appends every ready step to l.ready.
func priorityPick(l *lister, r int, prio func(k ir.Kind, s, m int) float64) (ir.Step, bool) {
	var best ir.Step
	var bp float64
	found := false
	l.eachReady(r, func(k ir.Kind, s, m int) {
		if l.picked != nil {
			l.ready = append(l.ready, ir.Compute(k, s, m))
		}
		if q := prio(k, s, m); !found || q < bp {
			best, bp, found = ir.Compute(k, s, m), q, true
		}
	})
	return best, found
}

// eachReady calls f with each step rank r may start now: on each of its
// stages in turn, the next I when its F ran and the next stage's I
// arrived, the next W when its I ended, and the next F when its input
// arrived (and its micro-batch may enter) and its chunk keeps the rank
// within the cap.
func (l *lister) eachReady(r int, f func(k ir.Kind, s, m int)) {
	ready := func(x float64) bool { return x != unset && x <= l.t+listEps }
	for _, s := range l.stagesOf[r] {
		if ready(l.readyI(s)) {
			f(ir.BackwardInput, s, l.ni[s])
		}
		if ready(l.readyW(s)) {
			f(ir.BackwardWeight, s, l.nw[s])
		}
		if ready(l.readyF(s)) && l.fits(r, s, 0) {
			f(ir.Forward, s, l.nf[s])
		}
	}
}
