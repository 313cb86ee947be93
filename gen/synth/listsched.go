package synth

import (
	"math"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// lister is the list schedulers' engine, shared by Schedule and
// PriorityOrder: it runs the ranks in simulated time under the cost (a
// step starts when its rank is free and its inputs have arrived, as gen/sim
// times a compute-only order) and, whenever a rank is free, asks pick for
// the step it starts. It keeps what both need: each stage's F's, I's and
// W's started so far (each kind in micro-batch order), the end of every F
// and I, each rank's memory (its fixed memory plus the activations of its
// chunks live from their F's start to their W's start: a rank runs one
// step at a time, so that is the live set at its next step) and when it is
// free.
type lister struct {
	p          *Problem
	c          sim.Cost
	pl         ir.Placement
	S, M       int
	hopF, hopB []float64 // by stage: the latency of its F's input, of its backward's
	endF, endI []float64 // by stage·M + micro-batch; unset until started
	nf, ni, nw []int     // by stage: F's, I's and W's started
	stagesOf   [][]int
	mem, free  []float64 // by rank
	enter      func(m int) float64
	out        ir.Program
	t          float64 // the current time
	left       int     // steps not started
	dry        bool    // out is not kept (Pilot's rollouts)
	// picked, when set, is told of each step finish starts and the ready
	// steps it was chosen from (Anneal's contests); ready is their buffer.
	picked func(st ir.Step, ready []ir.Step)
	ready  []ir.Step
}

func newLister(p *Problem, c sim.Cost, enter func(m int) float64) *lister {
	pl, M := p.Placement, p.Micro
	S, P := pl.Stages(), pl.Ranks()
	l := &lister{p: p, c: c, pl: pl, S: S, M: M,
		hopF: make([]float64, S), hopB: make([]float64, S),
		endF: make([]float64, S*M), endI: make([]float64, S*M),
		nf: make([]int, S), ni: make([]int, S), nw: make([]int, S),
		stagesOf: make([][]int, P), mem: make([]float64, P), free: make([]float64, P),
		enter: enter, out: ir.NewProgram(pl, M), left: 3 * S * M}
	for i := range l.endF {
		l.endF[i], l.endI[i] = unset, unset
	}
	for s, r := range pl.RankOf {
		l.stagesOf[r] = append(l.stagesOf[r], s)
		if s > 0 {
			l.hopF[s] = hopTime(pl, c, s-1, s, s-1)
		}
		if s < S-1 {
			l.hopB[s] = hopTime(pl, c, s+1, s, s)
		}
	}
	for r := range P {
		l.mem[r] = p.fixed(r)
		l.out.Ranks[r] = make([]ir.Step, 0, 3*M*len(l.stagesOf[r]))
	}
	return l
}

// readyF, readyI and readyW return when the next F, I or W of stage s
// may start (math.Inf(1): not yet known; unset: none left).
func (l *lister) readyF(s int) float64 {
	m := l.nf[s]
	if m >= l.M {
		return unset
	}
	if s == 0 {
		return l.enter(m)
	}
	e := l.endF[(s-1)*l.M+m]
	if e == unset {
		return math.Inf(1)
	}
	return e + l.hopF[s]
}

func (l *lister) readyI(s int) float64 {
	m := l.ni[s]
	if x, wait := l.waiting(m, l.nf[s]); wait {
		return x
	}
	e := l.endF[s*l.M+m]
	if s < l.S-1 {
		g := l.endI[(s+1)*l.M+m]
		if g == unset {
			return math.Inf(1)
		}
		e = max(e, g+l.hopB[s])
	}
	return e
}

func (l *lister) readyW(s int) float64 {
	m := l.nw[s]
	if x, wait := l.waiting(m, l.ni[s]); wait {
		return x
	}
	return l.endI[s*l.M+m]
}

// waiting reports whether a stage's next step m of a kind, whose input
// steps on the stage have started before only for micro-batches below
// started, cannot be timed yet: unset when none is left, math.Inf(1)
// when its input has not started.
func (l *lister) waiting(m, started int) (float64, bool) {
	switch {
	case m >= l.M:
		return unset, true
	case m >= started:
		return math.Inf(1), true
	}
	return 0, false
}

// fits reports whether a chunk of stage s keeps rank r within the cap.
func (l *lister) fits(r, s int, extra float64) bool {
	return l.p.Cap <= 0 || l.mem[r]+l.p.act(s)+extra <= l.p.Cap*(1+1e-9)
}

// free reports whether rank r is free at the current time: the callers'
// loop (Schedule, PriorityOrder) asks its rule for a step while it is,
// then calls advance, until done; a direct call there, not a callback,
// keeps the rules' search as fast as a scheduler of its own.
func (l *lister) isFree(r int) bool { return l.free[r] <= l.t+listEps }

// done reports whether every step has started.
func (l *lister) done() bool { return l.left == 0 }

// advance moves the time to the next end of a step or arrival of an
// input at an idle rank; ErrStuck when there is none with steps left.
func (l *lister) advance() error {
	if l.left == 0 {
		return nil
	}
	next := l.nextEvent()
	if math.IsInf(next, 1) {
		return ErrStuck
	}
	l.t = next
	return nil
}

// nextEvent is the first time after now at which a busy rank ends its
// step or an input arrives at an idle rank (where advance moves the
// time): +Inf when nothing is pending.
func (l *lister) nextEvent() float64 {
	next := math.Inf(1)
	for q := range l.free {
		if l.free[q] > l.t+listEps {
			next = min(next, l.free[q])
			continue
		}
		// Idle: woken by the earliest known arrival of an input.
		for _, s := range l.stagesOf[q] {
			for _, x := range []float64{l.readyF(s), l.readyI(s)} {
				if x > l.t+listEps && !math.IsInf(x, 1) {
					next = min(next, x)
				}
			}
		}
	}
	return next
}

// listEps is the list schedulers' tolerance on times.
const listEps = 1e-12

// start runs st on rank r from the current time.
func (l *lister) start(r int, st ir.Step) {
	t := l.t
	l.left--
	s, k := st.Stage, st.Stage*l.M+st.Micro
	var d float64
	switch st.Kind {
	case ir.Forward:
		d = at(l.c.F, s)
		l.endF[k] = t + d
		l.nf[s]++
		l.mem[r] += l.p.act(s)
	case ir.BackwardInput:
		d = at(l.c.I, s)
		l.endI[k] = t + d
		l.ni[s]++
	case ir.BackwardWeight:
		d = at(l.c.W, s)
		l.nw[s]++
		l.mem[r] -= l.p.act(s)
	}
	l.free[r] = t + d
	if !l.dry {
		l.out.Ranks[r] = append(l.out.Ranks[r], st)
	}
}

// rollout returns a copy of l that keeps no order (dry), for Pilot to
// finish in simulated time; l is unchanged.
func (l *lister) rollout() *lister {
	n := *l
	n.endF, n.endI = slices.Clone(l.endF), slices.Clone(l.endI)
	n.nf, n.ni, n.nw = slices.Clone(l.nf), slices.Clone(l.ni), slices.Clone(l.nw)
	n.mem, n.free = slices.Clone(l.mem), slices.Clone(l.free)
	n.out, n.dry = ir.Program{}, true
	n.picked, n.ready = nil, nil // no hooks, no shared buffer
	return &n
}
