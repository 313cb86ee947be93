package synth

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// Periodic builds compute orders by modulo scheduling: it times one
// micro-batch's F, I and W steps on a circle of period T per rank (each
// rank runs one step at a time, so the steps' intervals modulo T may not
// overlap), every later micro-batch m the same steps m·T later, and turns
// that timing into orders two ways. Under a tight memory cap this steady
// state packs chunk lives closer than the list scheduler's rules do (the
// W = 0.6·I model at P = 4 on the zigzag with V = 8, M = 16, within two
// micro-batches: 392.2 against the rules' 415.8); with a loose one the
// rules' ramps win and Periodic's orders lose the comparison the caller
// makes.
//
// One micro-batch's steps are placed in chain order (the forwards through
// the route, then the input-gradient backwards back, then each W), each at
// the first free time of its rank on the circle at or after its inputs
// arrive (Cost.Comm plus the transfer time after the producer's end
// between ranks), skipping a free time with a small probability so that
// trials differ. A trial fails when a step finds no free time within one
// period or when a rank's memory on the circle, its fixed memory plus the
// activations of the chunks live (from an F's start to its W's end, each
// life counted once per period it spans), exceeds the cap. Times are in
// ticks (periodicTick: a common divisor of the step costs where the
// circle holds it, else 1/4096 of the busiest rank's work per
// micro-batch), durations rounded up, so the circle's timing is
// conservative and its order feasible: in it every step starts after its
// inputs are ready.
//
// The circles come in two kinds: with the W's on the circle, as above,
// and with only the F's and I's on it (each W timed at its I's end,
// unchecked, the memory left to the orders' cap). A circle with its W's
// gives its unrolled order: every rank's steps of all micro-batches by
// their times (unroll). Every circle also gives priority orders: the list
// scheduler of PriorityOrder, each step's priority its time on the
// circle (a W's later by M + 1, 1 or 1/2 periods: a W as late as the
// cap lets it be, or near its I), micro-batch m entering no earlier than
// (m − slack)·T for slack in periodicSlacks. Those orders start
// micro-batches earlier than the steady state while the cap has room and
// fill the time a circle leaves idle (uniform F = I = W = 1 on 32 one-layer stages looped on P = 8,
// M = 32, within four micro-batches: 422 against the unrolled order's
// 437; W = 0.6·I on the v of P = 16, M = 64, within eight: 402.8 against
// 425.8).
//
// Periods are tried from the busiest rank's work per micro-batch upwards
// in steps of 1 % (after a kind's k-th circle, 2k % further on, for
// circles with other lives), trials trials at each of three skip
// probabilities (rand/v2 PCG with a fixed seed: deterministic), until
// four periods of each kind have given a circle; of all their orders the
// one with the least simulated makespan (sim.Run under the cost, then the
// sum of the ranks' ends, then the first) is returned. The trials look at
// PeriodicWork ticks and the orders' list scheduling at
// PeriodicOrderWork steps at most. ok is false when no period up to
// twice the work gives one within that, or when the ranks times twice the
// work in ticks exceed maxCircleCells. A positive beat stops each kind's
// search at the first period whose repeats after the earliest entry the
// slacks allow alone take at least beat: the caller's best makespan so
// far, which such an order would hardly undercut.
func Periodic(p Problem, trials int, beat float64) (ir.Program, bool, error) {
	q, _, ok, err := PeriodicRecipe(p, trials, beat)
	return q, ok, err
}

// PeriodicRecipe is Periodic that also returns the Recipe of its order
// when PriorityOrder built it (nil for an unrolled circle's order), for
// Pilot to improve.
func PeriodicRecipe(p Problem, trials int, beat float64) (ir.Program, *Recipe, bool, error) {
	c, err := p.check()
	if err != nil {
		return ir.Program{}, nil, false, err
	}
	tm, ok := newTiming(&p, c)
	if !ok {
		return ir.Program{}, nil, false, nil
	}
	q, rc, ok := bestOrder(&p, c, tm.tick, tm.circles(&p, trials, beat))
	return q, rc, ok, nil
}

// A timing is a problem's steps and hops in ticks, and lo, the busiest
// rank's work per micro-batch in ticks (the least period).
type timing struct {
	tick          float64
	f, in, w, hop []int
	lo            int
}

// newTiming times p's stages in ticks (periodicTick); false when no step
// costs anything or the circles would not fit maxCircleCells.
func newTiming(p *Problem, c sim.Cost) (*timing, bool) {
	pl := p.Placement
	S, P := pl.Stages(), pl.Ranks()
	work := make([]float64, P)
	small := math.Inf(1)
	for s := range S {
		f, i, w := at(c.F, s), at(c.I, s), at(c.W, s)
		work[pl.RankOf[s]] += f + i + w
		for _, x := range []float64{f, i, w} {
			if x > 0 {
				small = min(small, x)
			}
		}
	}
	busiest := slices.Max(work)
	if !(busiest > 0) || math.IsInf(small, 1) {
		return nil, false
	}
	tm := &timing{tick: periodicTick(c, S, small, busiest), f: make([]int, S), in: make([]int, S), w: make([]int, S), hop: make([]int, S)}
	ticks := func(x float64) int { return max(1, int(math.Ceil(x/tm.tick-1e-9))) }
	for s := range S {
		tm.f[s], tm.in[s], tm.w[s] = ticks(at(c.F, s)), ticks(at(c.I, s)), ticks(at(c.W, s))
		if s+1 < S {
			if h := hopTime(pl, c, s, s+1, s); h > 0 {
				tm.hop[s] = ticks(h) // between stage s and s+1, either way
			}
		}
	}
	for r := range P {
		n := 0
		for _, s := range pl.StagesOf(r) {
			n += tm.f[s] + tm.in[s] + tm.w[s]
		}
		tm.lo = max(tm.lo, n)
	}
	if P*2*tm.lo > maxCircleCells {
		return nil, false // the circles' buffers would be too large
	}
	return tm, true
}

// circles returns the circles Periodic's trials find, with W's first.
func (tm *timing) circles(p *Problem, trials int, beat float64) []*circle {
	pl, M := p.Placement, p.Micro
	S, P, lo := pl.Stages(), pl.Ranks(), tm.lo
	rng := rand.New(rand.NewPCG(0x9e3779b97f4a7c15, uint64(S)<<32|uint64(M)))
	spent := 0
	var circles []*circle
	for _, withW := range []bool{true, false} {
		found := 0
		step := max(1, lo/100)
		for T := lo; T <= 2*lo && found < 4 && spent <= PeriodicWork; T += step {
			if beat > 0 && (float64(M-1)-slices.Max(periodicSlacks))*float64(T)*tm.tick >= beat {
				break
			}
			var period *circle
			buf := newScratch(P, T)
		trials:
			for i, skip := range []float64{0.05, 0.15, 0.3} {
				for j := range trials {
					if ci, ok := tryCircle(*p, pl, T, tm.f, tm.in, tm.w, tm.hop, withW, skip, rng, buf); ok && (period == nil || ci.length < period.length) {
						period = ci
					}
					if i == 0 && j+1 == max(1, trials/4) && period == nil {
						break trials // a period this tight rarely fits: on to the next
					}
					if spent+buf.work > PeriodicWork {
						break trials
					}
				}
			}
			spent += buf.work
			if spent > PeriodicWork && period == nil {
				break
			}
			if period != nil {
				found++
				circles = append(circles, period)
				T += T * 2 * found / 100 // then periods further apart: other lives
			}
		}
	}
	return circles
}

// bestOrder builds every circle's orders, simulates them on all cores
// (each writes only its own result) and returns the best, the first among
// equals; false when none runs. A circle's orders are its unrolled one,
// for a circle with its W's, and PriorityOrder's over the grid of entry
// slacks and W biases. When the whole grid of every circle would take
// more than PeriodicOrderWork steps, each circle gets the grid's first
// order (and its unrolled one), and only the circle with the best of those
// the rest of the grid, within that budget.
func bestOrder(p *Problem, c sim.Cost, tick float64, circles []*circle) (ir.Program, *Recipe, bool) {
	pl, M := p.Placement, p.Micro
	steps := 3 * pl.Stages() * M
	type order struct {
		ci    *circle
		bias  float64 // a W's priority after its time, in periods; <0: unroll
		slack float64
		prog  ir.Program
		rc    *Recipe
		sc    Score
		ok    bool
	}
	biases := []float64{float64(M + 1), 1, 0.5}
	run := func(orders []*order) {
		par.ForRanks(len(orders), len(orders)*steps, func(i int) {
			o := orders[i]
			if o.bias < 0 {
				o.prog = o.ci.unroll(pl, M)
			} else {
				ci, bias, slack := o.ci, o.bias, o.slack
				rc := &Recipe{Prio: func(k ir.Kind, s, m int) float64 {
					x := float64(ci.start[kindIndex(k)][s] + m*ci.T)
					if k == ir.BackwardWeight {
						x += bias * float64(ci.T)
					}
					return x
				}, Enter: func(m int) float64 { return max(0, (float64(m)-slack)*float64(ci.T)*tick) }}
				q, err := PriorityOrder(*p, rc.Prio, rc.Enter)
				if err != nil {
					return // stuck: the entries let the cap fill
				}
				o.prog, o.rc = q, rc
			}
			r, err := sim.Run(o.prog, c)
			if err != nil {
				return // not expected: both build orders that run
			}
			o.sc, o.ok = Score{Makespan: r.Makespan, Finish: RankFinish(r)}, true
		})
	}
	best := func(orders []*order) *order {
		var b *order
		for _, o := range orders {
			if o.ok && (b == nil || o.sc.less(b.sc)) {
				b = o
			}
		}
		return b
	}
	var orders []*order
	for _, ci := range circles {
		if ci.withW {
			orders = append(orders, &order{ci: ci, bias: -1})
		}
	}
	if (len(orders)+len(circles)*len(biases)*len(periodicSlacks))*steps <= PeriodicOrderWork {
		for _, slack := range periodicSlacks {
			for _, bias := range biases {
				for _, ci := range circles {
					orders = append(orders, &order{ci: ci, bias: bias, slack: slack})
				}
			}
		}
		run(orders)
	} else {
		for _, ci := range circles {
			orders = append(orders, &order{ci: ci, bias: biases[0], slack: periodicSlacks[0]})
		}
		run(orders)
		var rest []*order
		if b := best(orders); b != nil {
			for _, slack := range periodicSlacks {
				for _, bias := range biases {
					if bias != biases[0] || slack != periodicSlacks[0] {
						rest = append(rest, &order{ci: b.ci, bias: bias, slack: slack})
					}
				}
			}
		}
		if n := max(0, PeriodicOrderWork/steps-len(orders)); len(rest) > n {
			rest = rest[:n]
		}
		run(rest)
		orders = append(orders, rest...)
	}
	if b := best(orders); b != nil {
		return b.prog, b.rc, true
	}
	return ir.Program{}, nil, false
}

// periodicSlacks are how many periods before its time on the circle a
// micro-batch may enter in Periodic's priority orders, those that most
// often gave the best order first (on the "Uneven models" rows of
// BENCHMARKS.md), as the W biases are.
var periodicSlacks = []float64{4, 1, 3, 2, 6, 2.5, 1.5, 0, 0.75, 0.5, 8, 12}

// PeriodicOrderWork bounds the steps of the orders Periodic builds from
// its circles, all together (about a second of CPU): past it, only the
// most promising circle gets the whole grid (bestOrder).
const PeriodicOrderWork = 2_000_000

// kindIndex is a compute kind's index in circle.start.
func kindIndex(k ir.Kind) int {
	switch k {
	case ir.BackwardInput:
		return 1
	case ir.BackwardWeight:
		return 2
	}
	return 0
}

// A circle is one micro-batch's steps timed on the period: start[k] for
// the k-th of (F of each stage, I of each stage, W of each stage).
type circle struct {
	T      int
	start  [3][]int // F, I, W by stage
	length int      // from the first F's start to the last step's end
	withW  bool     // the W's hold their own times on the circle
}

var circleKinds = [3]ir.Kind{ir.Forward, ir.BackwardInput, ir.BackwardWeight}

// unroll orders every rank's steps of M micro-batches by their times on
// the circle, micro-batch m shifted by m·T (ties, which only steps of
// zero cost could make, in chain order).
func (ci *circle) unroll(pl ir.Placement, M int) ir.Program {
	type timed struct {
		t    int
		seq  int
		step ir.Step
	}
	S := pl.Stages()
	per := make([][]timed, pl.Ranks())
	for m := range M {
		for k, kind := range circleKinds {
			for s := range S {
				r := pl.RankOf[s]
				per[r] = append(per[r], timed{ci.start[k][s] + m*ci.T, (m*3+k)*S + s, ir.Compute(kind, s, m)})
			}
		}
	}
	q := ir.Program{Placement: pl, Micro: M, Ranks: make([][]ir.Step, pl.Ranks())}
	for r, ts := range per {
		slices.SortFunc(ts, func(a, b timed) int {
			if c := cmp.Compare(a.t, b.t); c != 0 {
				return c
			}
			return cmp.Compare(a.seq, b.seq)
		})
		for _, x := range ts {
			q.Ranks[r] = append(q.Ranks[r], x.step)
		}
	}
	return q
}

// periodicTick returns the tick Periodic times in: the largest that every
// positive step cost of c is a whole multiple of, so that the circle times
// the steps exactly, as long as the busiest rank's work per micro-batch is
// at most maxPeriodTicks of it. That tick is the greatest common divisor
// of the costs counted in units of 10^-d, for the least d ≤ 6 that makes
// them all whole (3.3, 4 and 5: 0.1), else the largest small/k
// (k = 1 .. 16) that divides them; failing both, busiest/maxPeriodTicks,
// the durations then rounded up, a tick at most each.
func periodicTick(c sim.Cost, S int, small, busiest float64) float64 {
	costs := make([]float64, 0, 3*S)
	for s := range S {
		for _, x := range []float64{at(c.F, s), at(c.I, s), at(c.W, s)} {
			if x > 0 {
				costs = append(costs, x)
			}
		}
	}
	fine := busiest / maxPeriodTicks
	whole := func(tick float64) bool {
		for _, x := range costs {
			if n := x / tick; math.Round(n) < 1 || math.Abs(n-math.Round(n)) > 1e-6*n {
				return false
			}
		}
		return true
	}
	for d, unit := 0, 1.0; d <= 6; d, unit = d+1, unit/10 {
		g := int64(0)
		for _, x := range costs {
			n := x / unit
			if n > 1<<40 || math.Round(n) < 1 || math.Abs(n-math.Round(n)) > 1e-6*n {
				g = 0
				break
			}
			g = gcd(g, int64(math.Round(n)))
		}
		if g > 0 {
			if tick := float64(g) * unit; tick >= fine && whole(tick) {
				return tick
			}
			break // the costs' divisor is finer than the circle holds
		}
	}
	for k := 1; k <= 16; k++ {
		if tick := small / float64(k); tick >= fine && whole(tick) {
			return tick
		}
	}
	return fine
}

// maxPeriodTicks bounds the ticks of the busiest rank's work per
// micro-batch in Periodic's circles.
const maxPeriodTicks = 4096

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// scratch is tryCircle's memory, kept across the trials of one period:
// each rank's busy ticks and memory on the circle.
type scratch struct {
	busy [][]bool
	mem  [][]float64
	base []float64 // each rank's memory held through every tick
	work int       // ticks looked at, the trial's cost
}

// maxCircleCells bounds P·T, the size of a period's buffers (scratch).
const maxCircleCells = 1 << 24

func newScratch(P, T int) *scratch {
	sc := &scratch{busy: make([][]bool, P), mem: make([][]float64, P), base: make([]float64, P)}
	for r := range P {
		sc.busy[r], sc.mem[r] = make([]bool, T), make([]float64, T)
	}
	return sc
}

// PeriodicWork bounds the ticks Periodic's trials look at in all (about a
// second of CPU); once spent it returns the best order found so far.
const PeriodicWork = 200_000_000

// tryCircle is one trial of Periodic at period T.
func tryCircle(p Problem, pl ir.Placement, T int, f, in, w, hop []int, withW bool, skip float64, rng *rand.Rand, sc *scratch) (*circle, bool) {
	S := pl.Stages()
	busy := sc.busy
	for r := range busy {
		clear(busy[r])
	}
	free := func(r, t, d int) bool {
		for x := range d {
			if busy[r][(t+x)%T] {
				sc.work += x + 1
				return false
			}
		}
		sc.work += d
		return true
	}
	place := func(r, e, d int) int {
		first := -1
		for t := e; t < e+T; t++ {
			if !free(r, t, d) {
				continue
			}
			if first < 0 {
				first = t
			}
			if rng.Float64() >= skip {
				first = t
				break
			}
		}
		if first >= 0 {
			for x := range d {
				busy[r][(first+x)%T] = true
			}
		}
		return first
	}
	ci := &circle{T: T, withW: withW}
	for k := range ci.start {
		ci.start[k] = make([]int, S)
	}
	e := 0
	for s := range S {
		t := 0
		if s > 0 {
			if t = place(pl.RankOf[s], e+hop[s-1], f[s]); t < 0 {
				return nil, false
			}
		} else {
			for x := range f[0] {
				busy[pl.RankOf[0]][x%T] = true
			}
		}
		ci.start[0][s], e = t, t+f[s]
	}
	for s := S - 1; s >= 0; s-- {
		ready := e
		if s < S-1 {
			ready += hop[s]
		}
		t := place(pl.RankOf[s], ready, in[s])
		if t < 0 {
			return nil, false
		}
		ci.start[1][s], e = t, t+in[s]
	}
	for s := range S {
		t := ci.start[1][s] + in[s]
		if withW {
			if t = place(pl.RankOf[s], t, w[s]); t < 0 {
				return nil, false
			}
		}
		ci.start[2][s] = t
		ci.length = max(ci.length, t+w[s])
	}
	if p.Cap > 0 && withW {
		// Each rank's memory on the circle: a chunk live for L ticks
		// holds its act through L / T whole turns, and once more over
		// the L mod T ticks from its start (a difference array, so the
		// check costs S + P·T, not the lives' length).
		diff, base := sc.mem, sc.base
		for r := range diff {
			clear(diff[r])
			base[r] = p.fixed(r)
		}
		for s := range S {
			a, r := p.act(s), pl.RankOf[s]
			from, life := ci.start[0][s], ci.start[2][s]+w[s]-ci.start[0][s]
			base[r] += float64(life/T) * a
			if rem := life % T; rem > 0 {
				x, y := from%T, from%T+rem
				diff[r][x] += a
				if y < T {
					diff[r][y] -= a
				} else {
					diff[r][0] += a
					diff[r][y-T] -= a
				}
			}
		}
		sc.work += S + len(diff)*T
		for r := range diff {
			cur, peak := 0.0, 0.0
			for _, d := range diff[r] {
				cur += d
				peak = max(peak, cur)
			}
			if base[r]+peak > p.Cap*(1+1e-9) {
				return nil, false
			}
		}
	}
	return ci, true
}
