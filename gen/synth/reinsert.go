package synth

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// Reinsert improves an order by local search over the ranks' sequences
// themselves, where Anneal and Pilot search priorities and the list
// scheduler's choices. Each move takes one step of a rank and puts it up to
// ReinsertReach places earlier or later on its rank (a nearer place more
// often), past steps it may trade places with (swappable: another chunk's,
// not of its own kind on its stage); the move is kept when the rank stays
// within the cap, the order runs without deadlock and its Score
// (makespan, then the ranks' summed ends) is no worse, so the search walks
// the plateaus where one move changes neither. Every order is timed as
// gen/sim times a compute-only program (each step when its rank is free
// and its input has arrived, Cost.Comm plus the transfer time after its
// producer between ranks), the list scheduler's timing; a move re-times
// the order only from the first step it can affect, and a timing that
// passes the best makespan is cut short.
//
// An order of the list scheduler never leaves a rank idle while it has a
// ready step; a reinserted one may (a step moved later keeps a ready one
// waiting behind it), which a tight cap needs: W = 0.6·I on the zigzag with
// V = 8, P = 4, M = 16, within two micro-batches, 380.6 → 373.8 from the
// rolled-out annealed order, and on P = 8, M = 32, V = 4 within four,
// 392.6 → 386.2, at 10⁹ (docs/benchmarks-log.md, "Reinsertion").
//
// work bounds the steps timed, all moves together (a move costs at least
// one, and its cap check an eighth of one per step of the rank): about
// 80 million a second on one core. Deterministic (a PCG stream seeded by
// the problem's size). q must hold every F, I and W of p once, on its
// stage's rank, and run; Reinsert returns the best order and its Score.
func Reinsert(p Problem, q ir.Program, work int) (ir.Program, Score, error) {
	c, err := p.check()
	if err != nil {
		return ir.Program{}, Score{}, err
	}
	e, err := newOrderTimer(&p, c, q)
	if err != nil {
		return ir.Program{}, Score{}, err
	}
	ord := q.Clone()
	best, ok := e.full(ord.Ranks)
	if !ok {
		return ir.Program{}, Score{}, errors.New("synth: reinsert: the order does not run (a rank waits for a step that waits for it)")
	}
	S, M, P := p.Placement.Stages(), p.Micro, p.Placement.Ranks()
	rng := rand.New(rand.NewPCG(0x51ed270b27e3f1c5, uint64(S)<<40|uint64(M)<<20|uint64(P)))
	for e.timed < work {
		e.timed++ // a move costs at least a step's timing
		r := rng.IntN(P)
		steps := ord.Ranks[r]
		if len(steps) < 2 {
			continue
		}
		a := rng.IntN(len(steps))
		d := 1 + rng.IntN(1+rng.IntN(ReinsertReach)) // nearer places more often
		if rng.IntN(2) == 0 {
			d = -d
		}
		b := a + d
		if b < 0 || b >= len(steps) || !canMove(steps, a, b) {
			continue
		}
		moveStep(steps, a, b)
		e.timed += len(steps) / 8 // the cap's scan, some eight times cheaper a step than timing
		if !p.withinCap(r, steps) {
			moveStep(steps, b, a)
			continue
		}
		sc, ok := e.try(ord.Ranks, r, min(a, b), best.Makespan)
		if !ok || best.less(sc) {
			moveStep(steps, b, a)
			continue
		}
		e.keep(ord.Ranks)
		best = sc
	}
	return ord, best, nil
}

// ReinsertReach is how far Reinsert moves a step, in places on its rank.
const ReinsertReach = 16

// canMove reports whether the step at a may move to place b of steps
// (moveStep): it may trade places with every step between.
func canMove(steps []ir.Step, a, b int) bool {
	x := steps[a]
	lo, hi := min(a, b), max(a, b)
	for j := lo; j <= hi; j++ {
		if j != a && !swappable(x, steps[j]) {
			return false
		}
	}
	return true
}

// withinCap reports whether rank r running steps keeps its fixed memory
// plus the activations of its live chunks (from an F's start to its W's)
// within the cap.
func (p *Problem) withinCap(r int, steps []ir.Step) bool {
	if !(p.Cap > 0) {
		return true
	}
	mem, limit := p.fixed(r), p.Cap*(1+1e-9)
	for _, st := range steps {
		switch st.Kind {
		case ir.Forward:
			if mem += p.act(st.Stage); mem > limit {
				return false
			}
		case ir.BackwardWeight:
			mem -= p.act(st.Stage)
		}
	}
	return true
}

// orderTimer times a compute order of F, I and W steps as gen/sim times a
// compute-only program, and re-times it after a change on one rank from
// the first place the change can affect. It keeps the timing of the order
// it last kept: each rank's starts and ends by place, and each F's and
// I's end and place. A trial writes its own ends, stamped with its number,
// so that dropping it costs nothing: an end reads as the trial's when
// stamped so, as the kept one when its step lies before the trial's first
// re-timed place on its rank, and as not yet known otherwise.
type orderTimer struct {
	M          int
	rankOf     []int
	f, in, w   []float64 // by stage
	hopF, hopB []float64 // by stage: the latency of its F's input, of its I's
	// By step (endIndex: the F's, then the I's, each by stage·M +
	// micro-batch): the kept order's ends and places, a trial's ends and
	// the trial that wrote them.
	kept, trial  []float64
	place        []int32
	stamps       []uint32
	stamp        uint32
	n            int         // S·M: where the I's start
	free         []float64   // by rank: when it is free
	next         []int       // by rank: its next step to time
	last         int         // the last stage
	start, end   [][]float64 // the kept order's timing, by rank and place
	tstart, tend [][]float64 // a trial's, from from[rank] on
	from         []int
	timed        int // steps timed, all trials together
}

// newOrderTimer checks that q holds p's F, I and W steps, each once on its
// stage's rank, and returns a timer for its orders.
func newOrderTimer(p *Problem, c sim.Cost, q ir.Program) (*orderTimer, error) {
	pl, M := p.Placement, p.Micro
	S, P := pl.Stages(), pl.Ranks()
	if len(q.Ranks) != P || q.Micro != M || q.Stages() != S {
		return nil, fmt.Errorf("synth: reinsert: an order of %d ranks, %d stages, %d micro-batches for a problem of %d, %d, %d", len(q.Ranks), q.Stages(), q.Micro, P, S, M)
	}
	seen := make([]bool, 3*S*M)
	for r, steps := range q.Ranks {
		for i, st := range steps {
			k := kindIndex(st.Kind)
			if !st.Kind.IsCompute() || st.Kind.IsOverlap() || st.Kind == ir.Backward || st.Stage < 0 || st.Stage >= S || st.Micro < 0 || st.Micro >= M || pl.RankOf[st.Stage] != r || seen[(k*S+st.Stage)*M+st.Micro] {
				return nil, fmt.Errorf("synth: reinsert: rank %d step %d (%s): want each F, I and W of the problem once, on its stage's rank", r, i, st)
			}
			seen[(k*S+st.Stage)*M+st.Micro] = true
		}
	}
	if i := slices.Index(seen, false); i >= 0 {
		return nil, fmt.Errorf("synth: reinsert: the order lacks %s", ir.Compute(circleKinds[i/(S*M)], i/M%S, i%M))
	}
	n := S * M
	e := &orderTimer{M: M, rankOf: pl.RankOf, f: make([]float64, S), in: make([]float64, S), w: make([]float64, S),
		hopF: make([]float64, S), hopB: make([]float64, S),
		kept: make([]float64, 2*n), trial: make([]float64, 2*n), place: make([]int32, 2*n), stamps: make([]uint32, 2*n), n: n,
		free: make([]float64, P), next: make([]int, P), last: S - 1, from: make([]int, P),
		start: make([][]float64, P), end: make([][]float64, P), tstart: make([][]float64, P), tend: make([][]float64, P)}
	for s := range S {
		e.f[s], e.in[s], e.w[s] = at(c.F, s), at(c.I, s), at(c.W, s)
		if s > 0 {
			e.hopF[s] = hopTime(pl, c, s-1, s, s-1)
		}
		if s < S-1 {
			e.hopB[s] = hopTime(pl, c, s+1, s, s)
		}
	}
	for r, steps := range q.Ranks {
		n := len(steps)
		e.start[r], e.end[r], e.tstart[r], e.tend[r] = make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	}
	return e, nil
}

// full times the whole order and keeps its timing; false on a deadlock.
func (e *orderTimer) full(ranks [][]ir.Step) (Score, bool) {
	clear(e.from)
	sc, ok := e.resume(ranks, -1)
	if ok {
		e.keep(ranks)
	}
	return sc, ok
}

// try re-times the order after a change on rank r at places lo and later.
// Rank r's places before lo keep their times, and so does every other
// rank's step that started before rank r's place lo could: nothing it
// waited for changed. ok is false on a deadlock, or when a step ends past
// limit (limit ≥ 0: the caller's best makespan, which the order then
// cannot beat). The caller then calls keep, or undoes its change (the
// trial's timing is dropped with nothing to restore).
func (e *orderTimer) try(ranks [][]ir.Step, r, lo int, limit float64) (Score, bool) {
	t0 := 0.0
	if lo > 0 {
		t0 = e.end[r][lo-1]
	}
	for q, starts := range e.start {
		if q == r {
			e.from[q] = lo
		} else {
			e.from[q], _ = slices.BinarySearch(starts, t0)
		}
	}
	return e.resume(ranks, limit)
}

// keep makes the last trial's timing the kept one (ranks: its order).
func (e *orderTimer) keep(ranks [][]ir.Step) {
	for q, f := range e.from {
		copy(e.start[q][f:], e.tstart[q][f:])
		copy(e.end[q][f:], e.tend[q][f:])
		for i, st := range ranks[q][f:] {
			if st.Kind != ir.BackwardWeight {
				j := e.endIndex(st.Kind, st.Stage*e.M+st.Micro)
				e.kept[j], e.place[j] = e.trial[j], int32(f+i)
			}
		}
	}
}

// endIndex is the index of F or I k (stage·M + micro-batch) in the
// timer's per-step arrays.
func (e *orderTimer) endIndex(kind ir.Kind, k int) int {
	if kind == ir.BackwardInput {
		return e.n + k
	}
	return k
}

// endOf is the end of step j (endIndex) of stage s in the trial under
// way, -1 when not yet timed.
func (e *orderTimer) endOf(j, s int) float64 {
	switch {
	case e.stamps[j] == e.stamp:
		return e.trial[j]
	case int(e.place[j]) < e.from[e.rankOf[s]]:
		return e.kept[j]
	}
	return -1
}

// resume times every rank's steps from its place from on, the places
// before timed as kept, writing the trial's timing.
func (e *orderTimer) resume(ranks [][]ir.Step, limit float64) (Score, bool) {
	if e.stamp++; e.stamp == 0 { // wrapped: no end may look stamped by this trial
		clear(e.stamps)
		e.stamp = 1
	}
	left := 0
	for q, steps := range ranks {
		f := e.from[q]
		e.next[q], e.free[q] = f, 0
		if f > 0 {
			e.free[q] = e.end[q][f-1]
		}
		left += len(steps) - f
	}
	cut := limit * (1 + 1e-9)
	for left > 0 {
		progressed := false
		for r, steps := range ranks {
			for e.next[r] < len(steps) {
				st := steps[e.next[r]]
				s, k := st.Stage, st.Stage*e.M+st.Micro
				var ready, d float64
				switch st.Kind {
				case ir.Forward:
					if s > 0 {
						if ready = e.endOf(k-e.M, s-1); ready >= 0 {
							ready += e.hopF[s]
						}
					}
					d = e.f[s]
				case ir.BackwardInput:
					ready = e.endOf(k, s)
					if ready >= 0 && s < e.last {
						if g := e.endOf(e.n+k+e.M, s+1); g < 0 {
							ready = -1
						} else {
							ready = max(ready, g+e.hopB[s])
						}
					}
					d = e.in[s]
				default:
					ready, d = e.endOf(e.n+k, s), e.w[s]
				}
				if ready < 0 {
					break // its input has not run yet
				}
				begin := max(ready, e.free[r])
				end := begin + d
				if limit >= 0 && end > cut {
					return Score{}, false
				}
				e.tstart[r][e.next[r]], e.tend[r][e.next[r]] = begin, end
				e.free[r] = end
				if st.Kind != ir.BackwardWeight {
					j := e.endIndex(st.Kind, k)
					e.trial[j], e.stamps[j] = end, e.stamp
				}
				e.next[r]++
				left--
				e.timed++
				progressed = true
			}
		}
		if !progressed {
			return Score{}, false
		}
	}
	var sc Score
	for _, x := range e.free {
		sc.Makespan = max(sc.Makespan, x)
		sc.Finish += x
	}
	return sc, true
}
