package synth

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
	"github.com/ppgen/ppgen/internal/long"
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
		p := Problem{Placement: pl, Micro: M, Cost: c, Act: act, Fixed: fixed, Cap: oneMicroBatch(pl, act, fixed) + float64(rng.IntN(4))}
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
// is slower than a hand-written one of 51, and Exact finds 51 and proves
// it (the lower bound's terms say 50).
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
	// The optimum, written out by hand: micro-batch 0 straight through,
	// micro-batch 1 right behind it, then every rank runs F, I, W of its
	// two stages without a gap, one micro-batch every 6, each rank
	// holding at most 3 chunks; gen/sim times it at 51.
	hand := ir.Program{Placement: pl, Micro: 8, Ranks: [][]ir.Step{
		handSteps("F0.0 F0.1 F3.0 I3.0 W3.0 F0.2 I0.0 W0.0 F3.1 I3.1 W3.1 F0.3 I0.1 W0.1 F3.2 I3.2 W3.2 F0.4 I0.2 W0.2 F3.3 I3.3 W3.3 F0.5 I0.3 W0.3 F3.4 I3.4 W3.4 F0.6 I0.4 W0.4 F3.5 I3.5 W3.5 F0.7 I0.5 W0.5 F3.6 I3.6 I0.6 W0.6 F3.7 I3.7 W3.6 W3.7 I0.7 W0.7"),
		handSteps("F1.0 F2.0 F1.1 I2.0 I1.0 W1.0 F2.1 W2.0 F1.2 I2.1 I1.1 W1.1 F2.2 W2.1 F1.3 I2.2 I1.2 W1.2 F2.3 W2.2 F1.4 I2.3 I1.3 W1.3 F2.4 W2.3 F1.5 I2.4 I1.4 W1.4 F2.5 W2.4 F1.6 I2.5 I1.5 W1.5 F2.6 W2.5 F1.7 I2.6 I1.6 W1.6 F2.7 W2.6 I2.7 I1.7 W1.7 W2.7"),
	}}
	if _, err := verify.Check(hand, verify.Options{}); err != nil {
		t.Fatal(err)
	}
	rc, err := p.Cost.Resolve(4)
	if err != nil {
		t.Fatal(err)
	}
	hr, err := sim.Run(hand, rc)
	if err != nil {
		t.Fatal(err)
	}
	if hr.Makespan != 51 || max(hr.PeakActivations[0], hr.PeakActivations[1]) > 3 {
		t.Fatalf("the hand-written order takes %g with peaks %v; want 51 within 3", hr.Makespan, hr.PeakActivations)
	}
	// 51 is below the rules' best; below it, nothing (the search is
	// checked against brute force in TestExactBruteForce).
	if f.Makespan <= 51 || o.Makespan != 51 {
		t.Errorf("rules %g, exact %g; want the rules over 51 and exact 51", f.Makespan, o.Makespan)
	}
}

// handSteps parses steps written KIND STAGE.MICRO, space-separated.
func handSteps(text string) []ir.Step {
	var out []ir.Step
	for _, w := range strings.Fields(text) {
		var s, m int
		if _, err := fmt.Sscanf(w[1:], "%d.%d", &s, &m); err != nil {
			panic(err)
		}
		k := map[byte]ir.Kind{'F': ir.Forward, 'I': ir.BackwardInput, 'W': ir.BackwardWeight}[w[0]]
		out = append(out, ir.Compute(k, s, m))
	}
	return out
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

// TestLowerBoundUnderTheOptimum: on random problems under tight caps (one
// micro-batch's chunks per rank, or up to two units more), small enough
// for Exact to prove its optimum, sim.LowerBound with the cap never
// exceeds the optimum (term 6 of docs/model.md's "Lower bound", the chains
// the cap forces, included). It logs how close the bound comes. 150
// problems by default, 400 in the long suite.
func TestLowerBoundUnderTheOptimum(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	trials, least := 150, 25
	if long.Enabled() {
		trials, least = 400, 60
	}
	proved, ratio := 0, 0.0
	for range trials {
		pl, M, c, act, fixed := randomInstance(rng)
		if M < 3 || 3*pl.Stages()*M > 60 {
			continue
		}
		capacity := oneMicroBatch(pl, act, fixed) + float64(rng.IntN(3))
		p := Problem{Placement: pl, Micro: M, Cost: c, Act: act, Fixed: fixed, Cap: capacity}
		f, err := Search(p, Rules(pl.Ranks(), M))
		if err != nil {
			continue
		}
		o, ok, err := Exact(p, 3_000_000, f.Makespan)
		if err != nil {
			t.Fatal(err)
		}
		if !ok || !o.Proved {
			continue
		}
		opt := f.Makespan
		if o.Program.Ranks != nil {
			opt = o.Makespan
		}
		rc, err := c.Resolve(pl.Stages())
		if err != nil {
			t.Fatal(err)
		}
		bo := sim.BoundOptions{Act: act, Cap: make([]float64, pl.Ranks())}
		for r := range bo.Cap {
			bo.Cap[r] = capacity - fixed[r]
		}
		lb, err := sim.LowerBound(f.Program, rc, bo)
		if err != nil {
			t.Fatal(err)
		}
		if lb > opt*(1+1e-9) {
			t.Errorf("%v, M = %d, cap %g: bound %g over the proved optimum %g", pl, M, capacity, lb, opt)
		}
		proved++
		ratio += lb / opt
	}
	t.Logf("%d proved optima; the bound is %.3f of the optimum on average", proved, ratio/float64(proved))
	if proved < least {
		t.Errorf("only %d problems of %d proved", proved, trials)
	}
}
