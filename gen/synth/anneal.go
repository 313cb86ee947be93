package synth

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
)

// Anneal improves a priority recipe by simulated annealing in the space of
// priorities: it tabulates rc (every step's priority, every micro-batch's
// entry), and at each move shifts one step's priority by up to
// ±AnnealShift/2 of the recipe's period (recipePeriod), or one entry by
// up to half the busiest rank's work per micro-batch, rebuilds the order
// with PriorityOrder's list scheduler and keeps the move when the order's
// score (its makespan in the list scheduler's timing, plus a thousandth of
// the sum of the ranks' ends and a tenth of the mean end of the I's, so
// that a move that frees a rank earlier or brings the backwards forward
// counts: most moves leave the makespan as it is) is no worse, or, being worse by d, with probability exp(−d/θ),
// θ a constant annealTheta of the first score. The returned recipe is the
// best met (rc's own table when no move improved it) with its makespan in
// the list scheduler's timing.
//
// A priority order is feasible by construction (the list scheduler keeps
// the cap and the dependencies whatever the priorities), so every move
// yields an order, unlike a move on the order itself, which may deadlock
// or break the cap; the list scheduler also re-times everything after the
// change. budget bounds the list scheduler's steps over all moves (each
// move costs the problem's 3·S·M steps, a move that changes no choice
// only the priorities it compares: contests). The W = 0.6·I model on the
// zigzag with V = 8, P = 4, M = 16 within two micro-batches, from
// Periodic's best recipe (200 trials): 392.2 → 386.8 at 5·10⁶ steps
// (TestAnnealPacksATightCap); auto, annealing at 4·10⁷ and rolling out
// after, 387.6 → 380.6. The result depends on the random stream (other
// seeds at 2·10⁷ steps: 381.6–385.8 after the rollouts), so a caller had
// better keep the first recipe's order where it is faster.
// Deterministic: a PCG with a fixed seed per problem size. ErrStuck when
// rc's own order is.
func Anneal(p Problem, rc Recipe, budget int) (Recipe, float64, error) {
	c, err := p.check()
	if err != nil {
		return Recipe{}, 0, err
	}
	pl, M := p.Placement, p.Micro
	S := pl.Stages()
	n := 3 * S * M
	idx := func(k ir.Kind, s, m int) int { return (kindIndex(k)*S+s)*M + m }
	prio, enter := make([]float64, n), make([]float64, M)
	for _, k := range circleKinds {
		for s := range S {
			for m := range M {
				prio[idx(k, s, m)] = rc.Prio(k, s, m)
			}
		}
	}
	for m := range M {
		enter[m] = rc.Enter(m)
	}
	table := func(pr, en []float64) Recipe {
		return Recipe{
			Prio:  func(k ir.Kind, s, m int) float64 { return pr[idx(k, s, m)] },
			Enter: func(m int) float64 { return en[m] },
		}
	}
	cur := table(prio, enter)
	// score is the current recipe's score and its order's makespan, its
	// choices in next; +Inf when it is stuck.
	var now, next contests
	score := func() (float64, float64) {
		l := newLister(&p, c, cur.Enter)
		l.dry = true
		next.reset(n)
		l.picked = func(st ir.Step, ready []ir.Step) {
			w := idx(st.Kind, st.Stage, st.Micro)
			next.wonAt[w] = int32(len(next.won))
			next.won = append(next.won, int32(w))
			for _, o := range ready {
				if y := idx(o.Kind, o.Stage, o.Micro); y != w {
					next.lost = append(next.lost, int32(y))
				}
			}
			next.off = append(next.off, int32(len(next.lost)))
		}
		if l.finish(cur.Prio) != nil {
			return math.Inf(1), math.Inf(1)
		}
		ms, ends, flow := slices.Max(l.free), 0.0, 0.0
		for _, f := range l.free {
			ends += f
		}
		for _, e := range l.endI {
			flow += e
		}
		return ms + ends/1000 + flow/float64(len(l.endI))/10, ms
	}
	held, ms := score()
	if math.IsInf(held, 1) {
		return Recipe{}, 0, ErrStuck
	}
	now, next = next, now
	now.index(n)
	best, bestMS := held, ms
	bestPrio, bestEnter := slices.Clone(prio), slices.Clone(enter)

	period := recipePeriod(prio, S, M)
	work := 0.0 // the busiest rank's work per micro-batch
	for r := range pl.Ranks() {
		w := 0.0
		for _, s := range pl.StagesOf(r) {
			w += at(c.F, s) + at(c.I, s) + at(c.W, s)
		}
		work = max(work, w)
	}
	if budget < 2*n || !(period > 0) {
		return table(bestPrio, bestEnter), bestMS, nil
	}
	rng := rand.New(rand.NewPCG(0x5eed_a11e, uint64(S)<<32|uint64(M)))
	theta := annealTheta * held
	for spent := n; spent < budget; {
		var i int
		var old float64
		entry := rng.IntN(8) == 0
		if entry {
			i = rng.IntN(M)
			old = enter[i]
			enter[i] = max(0, old+(rng.Float64()-0.5)*work)
		} else {
			i = rng.IntN(n)
			old = prio[i]
			prio[i] = old + (rng.Float64()-0.5)*AnnealShift*period
			if k, same := now.same(i, prio); same {
				spent += k // every choice as before: the same order
				continue
			}
		}
		spent += n
		v, vms := score()
		if v <= held || rng.Float64() < math.Exp((held-v)/theta) {
			held = v
			now, next = next, now
			now.index(n)
			if v < best {
				best, bestMS = v, vms
				copy(bestPrio, prio)
				copy(bestEnter, enter)
			}
		} else if entry {
			enter[i] = old
		} else {
			prio[i] = old
		}
	}
	return table(bestPrio, bestEnter), bestMS, nil
}

// annealTheta is Anneal's temperature, as a fraction of the first score:
// a move worse by d is kept with probability exp(−d/θ). Colder did better
// than cooling from hotter at the budgets auto spends (W = 0.6·I on the
// zigzag with V = 8, P = 4, M = 16 within two micro-batches, 6·10⁷ steps
// from the 64-trial recipe, scored before the I's mean end counted: 382.4
// at a constant 10⁻⁴, 389.7 cooling geometrically from 5·10⁻³ to 10⁻⁴).
const annealTheta = 1e-4

// AnnealShift is the widest shift of one step's priority in Anneal, in
// periods of the recipe (the move is uniform in ±AnnealShift/2).
const AnnealShift = 0.25

// recipePeriod is the scale of Anneal's moves: the median of the positive
// gaps between a step's priorities for consecutive micro-batches (a
// circle's period for Periodic's recipes), or an eighth of the spread of
// one micro-batch's priorities where that is larger (a recipe whose
// micro-batches are close but its steps far apart); 0 when both are.
func recipePeriod(prio []float64, S, M int) float64 {
	lo, hi := math.Inf(1), math.Inf(-1) // one micro-batch's priorities
	for ks := range 3 * S {
		if x := prio[ks*M]; !math.IsInf(x, 0) {
			lo, hi = min(lo, x), max(hi, x)
		}
	}
	var gaps []float64
	for ks := range 3 * S {
		for m := 1; m < M; m++ {
			if g := prio[ks*M+m] - prio[ks*M+m-1]; g > 0 && !math.IsInf(g, 0) {
				gaps = append(gaps, g)
			}
		}
	}
	span := max(0, hi-lo) / 8
	if len(gaps) == 0 {
		return span
	}
	slices.Sort(gaps)
	return max(gaps[len(gaps)/2], span)
}

// contests are the choices a run of the list scheduler made: for each,
// the step it started and the others ready on that rank then (by step
// index), and for each step the choice that started it and those it lost.
// A change of one step's priority leaves the order as it is when the step
// still beats every step it beat and still loses to every step it lost
// to: every choice then goes as before (same).
type contests struct {
	won     []int32 // by choice: the step started
	off     []int32 // by choice: its losers are lost[off[d]:off[d+1]]
	lost    []int32
	wonAt   []int32 // by step: the choice that started it
	lostOff []int32 // by step: the choices it lost are lostAt[lostOff[i]:lostOff[i+1]]
	lostAt  []int32
}

// reset empties cs for a run of n steps.
func (cs *contests) reset(n int) {
	cs.won, cs.lost = cs.won[:0], cs.lost[:0]
	cs.off = append(cs.off[:0], 0)
	if len(cs.wonAt) != n {
		cs.wonAt = make([]int32, n)
	}
}

// index builds lostOff and lostAt from a finished run's choices.
func (cs *contests) index(n int) {
	cs.lostOff = slices.Grow(cs.lostOff[:0], n+1)[:n+1]
	clear(cs.lostOff)
	for _, y := range cs.lost {
		cs.lostOff[y+1]++
	}
	for i := range n {
		cs.lostOff[i+1] += cs.lostOff[i]
	}
	cs.lostAt = slices.Grow(cs.lostAt[:0], len(cs.lost))[:len(cs.lost)]
	fill := slices.Clone(cs.lostOff[:n])
	for d := range cs.won {
		for _, y := range cs.lost[cs.off[d]:cs.off[d+1]] {
			cs.lostAt[fill[y]] = int32(d)
			fill[y]++
		}
	}
}

// same reports whether, with prio, step i still wins the choice that
// started it and loses every choice it lost (strictly: a tie may go
// either way), and how many priorities it compared.
func (cs *contests) same(i int, prio []float64) (int, bool) {
	p, k := prio[i], 1
	d := cs.wonAt[i]
	for _, y := range cs.lost[cs.off[d]:cs.off[d+1]] {
		k++
		if !(p < prio[y]) {
			return k, false
		}
	}
	for _, d := range cs.lostAt[cs.lostOff[i]:cs.lostOff[i+1]] {
		k++
		if !(p > prio[cs.won[d]]) {
			return k, false
		}
	}
	return k, true
}
