package synth

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
)

// TestUnitCostsOneStage: on one stage per rank at F = I = W = 1 with no
// cap, the rules find ZB-H1's makespan 3M+P-1 (M ≥ P), which no order on
// that placement beats: every rank works 3M units and the last one cannot
// start before P-1.
func TestUnitCostsOneStage(t *testing.T) {
	for _, tc := range []struct{ P, M int }{{2, 4}, {4, 8}, {4, 16}, {8, 16}} {
		c, _ := sim.Cost{F: []float64{1}, I: []float64{1}, W: []float64{1}}.Resolve(0)
		p := Problem{Placement: ir.Loop(tc.P, 1), Micro: tc.M, Cost: c}
		f, err := Search(p, Rules(tc.P, tc.M))
		if err != nil {
			t.Fatal(err)
		}
		if want := float64(3*tc.M + tc.P - 1); f.Makespan != want {
			t.Errorf("P=%d M=%d: makespan %g (rule %v), want %g", tc.P, tc.M, f.Makespan, f.Rule, want)
		}
		if _, err := verify.Check(f.Program, verify.Options{}); err != nil {
			t.Errorf("P=%d M=%d: %v", tc.P, tc.M, err)
		}
	}
}

// TestRandomCosts is the property test: on random small problems (loop V
// = 1, 2, v and zigzag V = 4; random per-stage F, I, W and activation sizes; a random
// cap at least one chunk), every order a rule builds verifies, runs every
// F, I and W once, keeps every rank's memory within the cap, and its
// simulated makespan is at least sim.LowerBound; Search's is the least of
// them.
func TestRandomCosts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 40 {
		pl, M, c, act, fixed := randomInstance(rng)
		S, P := pl.Stages(), pl.Ranks()
		c, err := c.Resolve(S)
		if err != nil {
			t.Fatal(err)
		}
		need := 0.0
		for r := range P {
			for _, s := range pl.StagesOf(r) {
				need = max(need, fixed[r]+act[s])
			}
		}
		capacity := 0.0
		if rng.IntN(4) > 0 {
			capacity = need + float64(rng.IntN(12))
		}
		p := Problem{Placement: pl, Micro: M, Cost: c, Act: act, Fixed: fixed, Cap: capacity}
		rules := Rules(P, M)
		best := -1.0
		for _, rule := range rules {
			prog, err := Schedule(p, rule)
			if errors.Is(err, ErrStuck) {
				continue
			}
			if err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
			if n := prog.NumSteps(); n != 3*S*M {
				t.Fatalf("trial %d %v: %d steps, want %d", trial, rule, n, 3*S*M)
			}
			if _, err := verify.Check(prog, verify.Options{}); err != nil {
				t.Fatalf("trial %d %v: %v\n%v", trial, rule, err, prog.Ranks)
			}
			r, err := sim.Run(prog, c)
			if err != nil {
				t.Fatal(err)
			}
			mem := r.PeakMemory(act)
			for rk := range P {
				if capacity > 0 && mem[rk]+fixed[rk] > capacity+1e-9 {
					t.Errorf("trial %d %v: rank %d holds %g, over the cap %g", trial, rule, rk, mem[rk]+fixed[rk], capacity)
				}
			}
			var bo sim.BoundOptions // the cap as chunk counts of each stage alone, and per rank
			if capacity > 0 {
				bo.MaxLive, bo.Act, bo.Cap = make([]int, S), act, make([]float64, P)
				for s := range S {
					bo.MaxLive[s] = int((capacity - fixed[pl.RankOf[s]]) / act[s])
				}
				for rk := range P {
					bo.Cap[rk] = capacity - fixed[rk]
				}
			}
			lb, err := sim.LowerBound(prog, c, bo)
			if err != nil {
				t.Fatal(err)
			}
			if r.Makespan < lb*(1-1e-9) {
				t.Errorf("trial %d %v: makespan %g under the lower bound %g", trial, rule, r.Makespan, lb)
			}
			if best < 0 || r.Makespan < best {
				best = r.Makespan
			}
		}
		f, err := Search(p, rules)
		if best < 0 {
			if !errors.Is(err, ErrStuck) {
				t.Errorf("trial %d: every rule stuck, Search: %v", trial, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if f.Makespan != best {
			t.Errorf("trial %d: Search %g, the best rule %g", trial, f.Makespan, best)
		}
	}
}

// randomInstance draws a problem's parts: a placement (loop with V = 1
// or 2, v, or zigzag with V = 4) on 1 to 4 ranks, 1 to 8 micro-batches,
// per-stage F > 0, I and W ≥ 0 (B = I + W) in quarters, a latency, each
// stage's activation size and each rank's fixed memory.
func randomInstance(rng *rand.Rand) (pl ir.Placement, M int, c sim.Cost, act, fixed []float64) {
	P := 1 + rng.IntN(4)
	M = 1 + rng.IntN(8)
	switch rng.IntN(4) {
	case 0:
		pl = ir.Loop(P, 1)
	case 1:
		pl = ir.Loop(P, 2)
	case 2:
		pl = ir.VShape(P)
	default:
		pl = ir.Zigzag(P, 4)
	}
	S := pl.Stages()
	c = sim.Cost{Comm: float64(rng.IntN(3)) / 4}
	act = make([]float64, S)
	for s := range S {
		c.F = append(c.F, float64(1+rng.IntN(8))/4)
		c.I = append(c.I, float64(rng.IntN(8))/4)
		c.W = append(c.W, float64(rng.IntN(8))/4)
		c.B = append(c.B, c.I[s]+c.W[s])
		act[s] = float64(1 + rng.IntN(4))
	}
	fixed = make([]float64, P)
	for r := range P {
		fixed[r] = float64(rng.IntN(3))
	}
	return pl, M, c, act, fixed
}

// TestCapTooSmall: a cap below one chunk is refused with the rank named.
func TestCapTooSmall(t *testing.T) {
	p := Problem{Placement: ir.Loop(2, 1), Micro: 2, Cost: sim.DefaultCost(), Act: []float64{2, 3}, Cap: 2.5}
	if _, err := Schedule(p, Rule{}); err == nil {
		t.Fatal("no error for a cap below rank 1's one chunk")
	}
}

// TestBadProblems: malformed problems are refused with an error, never a
// panic.
func TestBadProblems(t *testing.T) {
	table, err := ir.Table(3, []int{0, 1, 1})
	if err == nil {
		table.NumRanks = 4 // rank 3 holds no stage
	}
	for _, p := range []Problem{
		{Placement: ir.Loop(2, 1), Micro: 0, Cost: sim.DefaultCost()},
		{Placement: table, Micro: 2, Cost: sim.DefaultCost()},
		{Placement: ir.Loop(2, 1), Micro: 2, Cost: sim.DefaultCost(), Act: []float64{1, -1}},
		{Placement: ir.Loop(2, 1), Micro: 2, Cost: sim.DefaultCost(), Act: []float64{1}},
		{Placement: ir.Loop(2, 1), Micro: 2, Cost: sim.DefaultCost(), Cap: -1},
	} {
		if _, err := Schedule(p, Rule{}); err == nil {
			t.Errorf("%+v: no error", p)
		}
	}
}

// TestRepair: the local search from the order of a poor rule (one
// micro-batch in flight, each W right after its I) at unit costs keeps a
// valid order, never a slower one, and finds a faster one (on rank 0,
// F(0, m+1) before W(0, m) lets the next micro-batch start a unit
// earlier).
func TestRepair(t *testing.T) {
	const P, M = 3, 4
	c0, _ := sim.Cost{F: []float64{1}, I: []float64{1}, W: []float64{1}}.Resolve(0)
	p, err := Schedule(Problem{Placement: ir.Loop(P, 1), Micro: M, Cost: c0}, Rule{InFlight: 1, EagerW: true})
	if err != nil {
		t.Fatal(err)
	}
	c := sim.DefaultCost()
	eval := func(q ir.Program) (Score, bool) {
		r, err := sim.Run(q, c)
		if err != nil {
			return Score{}, false
		}
		fin := 0.0
		for i := range r.Offsets {
			end := len(r.Events)
			if i+1 < len(r.Offsets) {
				end = r.Offsets[i+1]
			}
			fin += r.Events[end-1].End
		}
		return Score{Makespan: r.Makespan, Finish: fin}, true
	}
	start, _ := eval(p)
	q, sc, used := Repair(p, eval, 500)
	if _, err := verify.Check(q, verify.Options{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := eval(q); got != sc {
		t.Errorf("Repair says %v, the order simulates to %v", sc, got)
	}
	if !(sc.Makespan < start.Makespan) || used > 500 {
		t.Errorf("makespan %g from %g in %d evaluations; want an improvement within 500", sc.Makespan, start.Makespan, used)
	}
}

// TestFill: P = 2, M = 2, F = I = W = 1, each rank running micro-batch 0's
// F, I, W and then micro-batch 1's: 10. Rank 0's largest gap is before
// I(0, 0) (it waits 1..3 for rank 1's I); no later W may move there (W(0, 0)
// would pass its own I, W(0, 1) the earlier W of its stage), F(0, 1) may:
// rank 1 then runs micro-batch 1's F at 4 instead of 6, and the order takes
// 8. Nothing else moves: the gaps left have no step behind them that may
// run earlier.
func TestFill(t *testing.T) {
	pl := ir.Loop(2, 1)
	p := ir.NewProgram(pl, 2)
	for r := range 2 {
		for m := range 2 {
			p.Ranks[r] = append(p.Ranks[r], ir.Compute(ir.Forward, r, m), ir.Compute(ir.BackwardInput, r, m), ir.Compute(ir.BackwardWeight, r, m))
		}
	}
	c, eval := unitMakespan()
	if sc, _ := eval(p); sc.Makespan != 10 {
		t.Fatalf("start: %g, want 10", sc.Makespan)
	}
	q, sc, used := Fill(p, c, eval, 100)
	if _, err := verify.Check(q, verify.Options{}); err != nil {
		t.Fatal(err)
	}
	want := []ir.Step{ir.Compute(ir.Forward, 0, 0), ir.Compute(ir.Forward, 0, 1), ir.Compute(ir.BackwardInput, 0, 0),
		ir.Compute(ir.BackwardWeight, 0, 0), ir.Compute(ir.BackwardInput, 0, 1), ir.Compute(ir.BackwardWeight, 0, 1)}
	if sc.Makespan != 8 || !slices.EqualFunc(q.Ranks[0], want, ir.Step.Equal) || !slices.EqualFunc(q.Ranks[1], p.Ranks[1], ir.Step.Equal) {
		t.Errorf("makespan %g after %d evaluations, rank 0 %v, rank 1 %v; want 8, %v and rank 1 unchanged", sc.Makespan, used, q.Ranks[0], q.Ranks[1], want)
	}
	if got, _ := eval(p); got.Makespan != 10 {
		t.Errorf("Fill changed its argument: %g", got.Makespan)
	}
}

// TestFillPullsTheProducer: P = 2, M = 2, F = I = W = 1; rank 0 runs both
// F's first, rank 1 runs W(1, 0) between F(1, 1) and I(1, 1): 8. Rank 0
// waits 5..6 for I(1, 1) before its I(0, 1), and no later step of rank 0
// may run there; its producer I(1, 1) may move before W(1, 0) on rank 1,
// and the order takes 7, the lower bound (rank 1 starts at 1 and works 6).
func TestFillPullsTheProducer(t *testing.T) {
	p := ir.NewProgram(ir.Loop(2, 1), 2)
	F, I, W := ir.Forward, ir.BackwardInput, ir.BackwardWeight
	p.Ranks[0] = []ir.Step{ir.Compute(F, 0, 0), ir.Compute(F, 0, 1), ir.Compute(I, 0, 0), ir.Compute(W, 0, 0), ir.Compute(I, 0, 1), ir.Compute(W, 0, 1)}
	p.Ranks[1] = []ir.Step{ir.Compute(F, 1, 0), ir.Compute(I, 1, 0), ir.Compute(F, 1, 1), ir.Compute(W, 1, 0), ir.Compute(I, 1, 1), ir.Compute(W, 1, 1)}
	c, eval := unitMakespan()
	if sc, _ := eval(p); sc.Makespan != 8 {
		t.Fatalf("start: %g, want 8", sc.Makespan)
	}
	q, sc, _ := Fill(p, c, eval, 100)
	if _, err := verify.Check(q, verify.Options{}); err != nil {
		t.Fatal(err)
	}
	want := []ir.Step{ir.Compute(F, 1, 0), ir.Compute(I, 1, 0), ir.Compute(F, 1, 1), ir.Compute(I, 1, 1), ir.Compute(W, 1, 0), ir.Compute(W, 1, 1)}
	if sc.Makespan != 7 || !slices.EqualFunc(q.Ranks[1], want, ir.Step.Equal) {
		t.Errorf("makespan %g, rank 1 %v; want 7, %v", sc.Makespan, q.Ranks[1], want)
	}
}

// unitMakespan is the cost F = I = W = 1 on two stages and an eval that
// scores an order by its simulated makespan under it.
func unitMakespan() (sim.Cost, func(ir.Program) (Score, bool)) {
	c, _ := sim.Cost{F: []float64{1}, I: []float64{1}, W: []float64{1}}.Resolve(2)
	return c, func(q ir.Program) (Score, bool) {
		r, err := sim.Run(q, c)
		if err != nil {
			return Score{}, false
		}
		return Score{Makespan: r.Makespan}, true
	}
}

// BenchmarkSchedule: the list scheduler under eight rules on 16 ranks,
// the zigzag with V = 4 (64 stages of F = 4, I = 4, W = 2.4, act 4),
// M = 64, within 64 per rank: a placement's share of auto's rules search
// on a 256-layer model (BENCHMARKS.md).
func BenchmarkSchedule(b *testing.B) {
	pl := ir.Zigzag(16, 4)
	act := make([]float64, pl.Stages())
	for i := range act {
		act[i] = 4
	}
	p := Problem{Placement: pl, Micro: 64, Cost: sim.Cost{F: []float64{4}, I: []float64{4}, W: []float64{2.4}, B: []float64{6.4}}, Cap: 64, Act: act}
	rules := Rules(16, 64)[:8]
	for b.Loop() {
		for _, r := range rules {
			if _, err := Schedule(p, r); err != nil && !errors.Is(err, ErrStuck) {
				b.Fatal(err)
			}
		}
	}
}
