package synth

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
)

// TestExactBruteForce: on two ranks with one stage each and two
// micro-batches (or one rank with two stages and one), Exact's proved optimum is the least
// makespan over every pair of rank orders (each a permutation of the
// rank's steps with each chunk's F, I, W in that order, run by gen/sim,
// within the cap), on random costs with
// zero-cost steps and latency.
func TestExactBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for trial := range 12 {
		pl := ir.Loop(2, 1)
		if trial%3 == 2 {
			pl = ir.Loop(1, 2)
		}
		S, M := pl.Stages(), 2
		if pl.Ranks() == 1 {
			M = 1
		}
		c := sim.Cost{Comm: float64(rng.IntN(3)) / 2}
		act := make([]float64, S)
		for s := range S {
			c.F = append(c.F, float64(1+rng.IntN(3)))
			c.I = append(c.I, float64(rng.IntN(3)))
			c.W = append(c.W, float64(rng.IntN(3)))
			c.B = append(c.B, c.I[s]+c.W[s])
			act[s] = float64(1 + rng.IntN(2))
		}
		capacity := 0.0
		if trial%2 == 1 {
			capacity = float64(2 + rng.IntN(3))
			for _, a := range act {
				capacity = max(capacity, a*float64(len(pl.StagesOf(0))))
			}
		}
		p := Problem{Placement: pl, Micro: M, Cost: c, Act: act, Cap: capacity}
		rc, err := c.Resolve(S)
		if err != nil {
			t.Fatal(err)
		}
		o, ok, err := Exact(p, 1<<30, 0)
		if err != nil || !ok || !o.Proved || o.Program.Ranks == nil {
			t.Fatalf("trial %d: %+v ok %v err %v", trial, o, ok, err)
		}
		brute := math.Inf(1)
		var steps [][]ir.Step
		for r := range pl.Ranks() {
			var all []ir.Step
			for _, s := range pl.StagesOf(r) {
				for m := range M {
					for _, k := range circleKinds {
						all = append(all, ir.Compute(k, s, m))
					}
				}
			}
			steps = append(steps, all)
		}
		perms := make([][][]ir.Step, len(steps))
		for r, all := range steps {
			permute(all, func(q []ir.Step) {
				if chunkOrdered(q) {
					perms[r] = append(perms[r], append([]ir.Step(nil), q...))
				}
			})
		}
		try := func(ranks [][]ir.Step) {
			q := ir.Program{Placement: pl, Micro: M, Ranks: ranks}
			if _, err := verify.Check(q, verify.Options{}); err != nil {
				return
			}
			res, err := sim.Run(q, rc)
			if err != nil {
				return
			}
			if capacity > 0 {
				for _, x := range res.PeakMemory(act) {
					if x > capacity+1e-9 {
						return
					}
				}
			}
			brute = min(brute, res.Makespan)
		}
		if len(perms) == 1 {
			for _, a := range perms[0] {
				try([][]ir.Step{a})
			}
		} else {
			for _, a := range perms[0] {
				for _, b := range perms[1] {
					try([][]ir.Step{a, b})
				}
			}
		}
		if math.Abs(brute-o.Makespan) > 1e-9 {
			t.Errorf("trial %d (%v, cap %g): exact %g, brute force %g", trial, c, capacity, o.Makespan, brute)
		}
	}
}

// chunkOrdered reports whether each chunk's F, I and W come in that
// order in q (no other order runs: each needs the one before it).
func chunkOrdered(q []ir.Step) bool {
	seen := map[[2]int]int{}
	for _, st := range q {
		k := map[ir.Kind]int{ir.Forward: 0, ir.BackwardInput: 1, ir.BackwardWeight: 2}[st.Kind]
		key := [2]int{st.Stage, st.Micro}
		if seen[key] != k {
			return false
		}
		seen[key] = k + 1
	}
	return true
}

// permute calls f with every permutation of xs (Heap's algorithm).
func permute(xs []ir.Step, f func([]ir.Step)) {
	var gen func(k int)
	gen = func(k int) {
		if k <= 1 {
			f(xs)
			return
		}
		for i := range k {
			gen(k - 1)
			if k%2 == 0 {
				xs[i], xs[k-1] = xs[k-1], xs[i]
			} else {
				xs[0], xs[k-1] = xs[k-1], xs[0]
			}
		}
	}
	gen(len(xs))
}

// TestExactRandom: on small random problems Exact's order verifies, keeps
// within the cap, is timed as gen/sim times it, is no faster than the
// lower bound and no slower than any rule's order, and a second call
// returns the same; with the best rule's makespan as its upper bound it
// proves that bound or beats it.
func TestExactRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 19))
	proved := 0
	for trial := 0; trial < 200 && proved < 25; trial++ {
		pl, M, c, act, fixed := randomInstance(rng)
		S, P := pl.Stages(), pl.Ranks()
		if 3*S*M > 48 {
			continue
		}
		need := 0.0
		for r := range P {
			one := fixed[r]
			for _, s := range pl.StagesOf(r) {
				one += act[s]
			}
			need = max(need, one)
		}
		p := Problem{Placement: pl, Micro: M, Cost: c, Act: act, Fixed: fixed, Cap: need + float64(rng.IntN(4))}
		rc, err := c.Resolve(S)
		if err != nil {
			t.Fatal(err)
		}
		o, ok, err := Exact(p, 3_000_000, 0)
		if err != nil || !ok {
			t.Fatalf("trial %d: ok %v err %v", trial, ok, err)
		}
		if !o.Proved {
			continue
		}
		proved++
		if _, err := verify.Check(o.Program, verify.Options{}); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		r, err := sim.Run(o.Program, rc)
		if err != nil {
			t.Fatal(err)
		}
		for rk, x := range r.PeakMemory(act) {
			if x+fixed[rk] > p.Cap+1e-9 {
				t.Errorf("trial %d: rank %d holds %g, over the cap %g", trial, rk, x+fixed[rk], p.Cap)
			}
		}
		bo := sim.BoundOptions{Act: act, Cap: make([]float64, P)}
		for rk := range P {
			bo.Cap[rk] = p.Cap - fixed[rk]
		}
		lb, err := sim.LowerBound(o.Program, rc, bo)
		if err != nil {
			t.Fatal(err)
		}
		if o.Makespan < lb*(1-1e-9) {
			t.Errorf("trial %d: exact %g under the lower bound %g", trial, o.Makespan, lb)
		}
		for _, rule := range Rules(P, M) {
			q, err := Schedule(p, rule)
			if err != nil {
				continue
			}
			rr, err := sim.Run(q, rc)
			if err != nil {
				t.Fatal(err)
			}
			if rr.Makespan < o.Makespan*(1-1e-9) {
				t.Errorf("trial %d: rule %v gives %g, under the proved optimum %g", trial, rule, rr.Makespan, o.Makespan)
			}
		}
		again, _, _ := Exact(p, 3_000_000, 0)
		if !reflect.DeepEqual(again.Program.Ranks, o.Program.Ranks) {
			t.Errorf("trial %d: a second call gives another order", trial)
		}
		// With the optimum as the upper bound nothing is found, and the
		// search still proves it.
		if none, _, _ := Exact(p, 3_000_000, o.Makespan); none.Program.Ranks != nil || !none.Proved {
			t.Errorf("trial %d: below the optimum %g: found %v, proved %v", trial, o.Makespan, none.Program.Ranks != nil, none.Proved)
		}
	}
	if proved < 25 {
		t.Errorf("Exact proved %d problems, want 25", proved)
	}
}

// TestExactBeatsTheRules: two ranks on the v placement, F = I = W = 1,
// eight micro-batches within three chunks per rank: the rules' best order
// takes 54, the lower bound says 50, and the proved optimum is 51 (one
// micro-batch through at once, then a period of 6, each rank's F, I and
// W of its two stages without a gap).
func TestExactBeatsTheRules(t *testing.T) {
	pl := ir.VShape(2)
	p := Problem{Placement: pl, Micro: 8, Cost: sim.Cost{F: []float64{1}, I: []float64{1}, W: []float64{1}, B: []float64{2}}, Cap: 3}
	f, err := Search(p, Rules(2, 8))
	if err != nil {
		t.Fatal(err)
	}
	o, ok, err := Exact(p, 2_000_000, f.Makespan)
	if err != nil || !ok || !o.Proved {
		t.Fatalf("ok %v proved %v err %v", ok, o.Proved, err)
	}
	if f.Makespan != 54 || o.Makespan != 51 {
		t.Errorf("rules %g, exact %g; want 54 and 51", f.Makespan, o.Makespan)
	}
}

// TestExactBudget: a search cut short by its node budget says so, and a
// problem over ExactMaxSteps is refused.
func TestExactBudget(t *testing.T) {
	p := Problem{Placement: ir.VShape(3), Micro: 6, Cost: sim.Cost{F: []float64{1}, I: []float64{1}, W: []float64{0.6}, B: []float64{1.6}}, Cap: 4}
	o, ok, err := Exact(p, 1000, 0)
	if err != nil || !ok || o.Proved || o.Nodes > 1001 {
		t.Errorf("budget 1000: ok %v proved %v nodes %d err %v", ok, o.Proved, o.Nodes, err)
	}
	big := Problem{Placement: ir.Loop(8, 4), Micro: 64, Cost: sim.DefaultCost()}
	if _, ok, err := Exact(big, 1000, 0); ok || err != nil {
		t.Errorf("%d steps: ok %v err %v; want refused", 3*32*64, ok, err)
	}
}

// BenchmarkExact: the search that proves TestExactBeatsTheRules's
// optimum (two ranks, v, M = 8, three chunks per rank), from the rules'
// best as its upper bound.
func BenchmarkExact(b *testing.B) {
	p := Problem{Placement: ir.VShape(2), Micro: 8, Cost: sim.Cost{F: []float64{1}, I: []float64{1}, W: []float64{1}, B: []float64{2}}, Cap: 3}
	nodes := 0
	for b.Loop() {
		o, _, err := Exact(p, 2_000_000, 54)
		if err != nil || !o.Proved {
			b.Fatal(err)
		}
		nodes = o.Nodes
	}
	b.ReportMetric(float64(nodes), "nodes/op")
}
