package synth

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/verify"
)

// TestPeriodicRandom: on random placements, costs (latency and zero-cost
// steps included) and caps, every order Periodic returns has each chunk's
// F, I and W once, verifies, keeps every rank within the cap, is no faster
// than the lower bound, and is the same on a second call.
func TestPeriodicRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	found := 0
	for trial := range 40 {
		pl, M, c, act, fixed := randomInstance(rng)
		S, P := pl.Stages(), pl.Ranks()
		need := 0.0
		for r := range P {
			one := fixed[r] // one micro-batch's chunks of r: the least any order holds
			for _, s := range pl.StagesOf(r) {
				one += act[s]
			}
			need = max(need, one)
		}
		capacity := need + float64(rng.IntN(12))
		p := Problem{Placement: pl, Micro: M, Cost: c, Act: act, Fixed: fixed, Cap: capacity}
		prog, ok, err := Periodic(p, 30, 0)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if !ok {
			continue
		}
		found++
		if n := prog.NumSteps(); n != 3*S*M {
			t.Fatalf("trial %d: %d steps, want %d", trial, n, 3*S*M)
		}
		if _, err := verify.Check(prog, verify.Options{}); err != nil {
			t.Fatalf("trial %d: %v\n%v", trial, err, prog.Ranks)
		}
		rc, err := c.Resolve(S)
		if err != nil {
			t.Fatal(err)
		}
		r, err := sim.Run(prog, rc)
		if err != nil {
			t.Fatal(err)
		}
		mem := r.PeakMemory(act)
		for rk := range P {
			if mem[rk]+fixed[rk] > capacity+1e-9 {
				t.Errorf("trial %d: rank %d holds %g, over the cap %g", trial, rk, mem[rk]+fixed[rk], capacity)
			}
		}
		bo := sim.BoundOptions{Act: act, Cap: make([]float64, P)}
		for rk := range P {
			bo.Cap[rk] = capacity - fixed[rk]
		}
		lb, err := sim.LowerBound(prog, rc, bo)
		if err != nil {
			t.Fatal(err)
		}
		if r.Makespan < lb*(1-1e-9) {
			t.Errorf("trial %d: makespan %g under the lower bound %g", trial, r.Makespan, lb)
		}
		again, _, _ := Periodic(p, 30, 0)
		if !reflect.DeepEqual(again.Ranks, prog.Ranks) {
			t.Errorf("trial %d: a second call gives another order", trial)
		}
	}
	if found < 20 {
		t.Errorf("Periodic found an order in %d of 40 trials", found)
	}
}

// TestPeriodicPacksATightCap: W = 0.6·I, 32 one-layer stages on the zigzag
// of P = 4 (V = 8), M = 16, within 16 chunks per rank (two micro-batches):
// the steady state beats every list-scheduling rule (docs/design.md §4).
func TestPeriodicPacksATightCap(t *testing.T) {
	pl := ir.Zigzag(4, 8)
	p := Problem{Placement: pl, Micro: 16, Cost: sim.Cost{F: []float64{1}, I: []float64{1}, W: []float64{0.6}, B: []float64{1.6}}, Cap: 16}
	prog, ok, err := Periodic(p, 200, 0)
	if err != nil || !ok {
		t.Fatalf("Periodic: %v, %v", ok, err)
	}
	c, _ := p.Cost.Resolve(pl.Stages())
	r, err := sim.Run(prog, c)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Search(p, Rules(4, 16))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("periodic %g, the best rule %g", r.Makespan, f.Makespan)
	if r.Makespan >= f.Makespan {
		t.Errorf("periodic %g, not below the best rule's %g", r.Makespan, f.Makespan)
	}
}

// TestPeriodicRampsUp: F = I = W = 1 on 32 one-layer stages looped on
// P = 8 (V = 4), M = 32, within 16 chunks per rank (four micro-batches).
// Every rank works 12 per micro-batch, so a strictly periodic order (each
// micro-batch the last one's timing a period T ≥ 12 later) ends no sooner
// than 31 · 12 + 65 = 437, the last micro-batch's chain being 32 F's,
// 32 I's and stage 0's W. Periodic's priority orders start micro-batches
// ahead of the circle while the cap has room, and beat that.
func TestPeriodicRampsUp(t *testing.T) {
	pl := ir.Loop(8, 4)
	p := Problem{Placement: pl, Micro: 32, Cost: sim.Cost{F: []float64{1}, I: []float64{1}, W: []float64{1}, B: []float64{2}}, Cap: 16}
	prog, ok, err := Periodic(p, 200, 0)
	if err != nil || !ok {
		t.Fatalf("Periodic: %v, %v", ok, err)
	}
	if _, err := verify.Check(prog, verify.Options{}); err != nil {
		t.Fatal(err)
	}
	c, _ := p.Cost.Resolve(pl.Stages())
	r, err := sim.Run(prog, c)
	if err != nil {
		t.Fatal(err)
	}
	for rk, m := range r.PeakMemory(nil) {
		if m > 16 {
			t.Errorf("rank %d holds %g chunks, over 16", rk, m)
		}
	}
	t.Logf("periodic %g", r.Makespan)
	if r.Makespan >= 437 {
		t.Errorf("makespan %g, not below a strictly periodic order's least, 437", r.Makespan)
	}
}

// TestPeriodicTick: the circle's tick divides every cost where the costs
// have a common divisor the circle holds, and is never finer than 1/4096
// of the busiest rank's work per micro-batch.
func TestPeriodicTick(t *testing.T) {
	for _, tc := range []struct {
		name    string
		costs   []float64 // F, I, W of each stage
		busiest float64
		want    float64
	}{
		{"W = 0.6·I", []float64{1, 1, 0.6}, 2.6, 0.2},
		{"an LLM-like split", []float64{3.3, 3, 3.3, 4, 4, 4, 5, 5, 5}, 27, 0.1},
		{"thirds", []float64{1.0 / 3, 2.0 / 3, 1}, 2, 1.0 / 3},
		{"no common divisor", []float64{math.Pi, 1, 1}, 2 + math.Pi, (2 + math.Pi) / 4096},
		{"a divisor finer than the circle", []float64{1e-7, 1, 1}, 2, 2.0 / 4096},
	} {
		S := len(tc.costs) / 3
		c := sim.Cost{F: make([]float64, S), I: make([]float64, S), W: make([]float64, S)}
		small := math.Inf(1)
		for s := range S {
			c.F[s], c.I[s], c.W[s] = tc.costs[3*s], tc.costs[3*s+1], tc.costs[3*s+2]
		}
		for _, x := range tc.costs {
			small = min(small, x)
		}
		if got := periodicTick(c, S, small, tc.busiest); math.Abs(got-tc.want) > 1e-12*tc.want {
			t.Errorf("%s: tick %g, want %g", tc.name, got, tc.want)
		}
	}
}

// TestPriorityOrderRandom: on random placements, costs, caps and
// priorities, every order PriorityOrder builds has each chunk's F, I and
// W once, verifies, keeps every rank within the cap, is no faster than
// the lower bound and is the same on a second call; it fails only with
// ErrStuck.
func TestPriorityOrderRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 17))
	built := 0
	for trial := range 60 {
		pl, M, c, act, fixed := randomInstance(rng)
		S, P := pl.Stages(), pl.Ranks()
		need := 0.0
		for r := range P {
			one := fixed[r]
			for _, s := range pl.StagesOf(r) {
				one += act[s]
			}
			need = max(need, one)
		}
		capacity := need + float64(rng.IntN(8))
		p := Problem{Placement: pl, Micro: M, Cost: c, Act: act, Fixed: fixed, Cap: capacity}
		var off [3][]float64
		for k := range off {
			off[k] = make([]float64, S)
			for s := range S {
				off[k][s] = rng.Float64() * float64(3*S)
			}
		}
		period, gap := float64(1+rng.IntN(3*S)), rng.Float64()*2
		kinds := map[ir.Kind]int{ir.Forward: 0, ir.BackwardInput: 1, ir.BackwardWeight: 2}
		prio := func(k ir.Kind, s, m int) float64 { return off[kinds[k]][s] + float64(m)*period }
		enter := func(m int) float64 { return float64(m) * gap }
		prog, err := PriorityOrder(p, prio, enter)
		if errors.Is(err, ErrStuck) {
			continue
		}
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		built++
		if n := prog.NumSteps(); n != 3*S*M {
			t.Fatalf("trial %d: %d steps, want %d", trial, n, 3*S*M)
		}
		if _, err := verify.Check(prog, verify.Options{}); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		rc, err := c.Resolve(S)
		if err != nil {
			t.Fatal(err)
		}
		r, err := sim.Run(prog, rc)
		if err != nil {
			t.Fatal(err)
		}
		for rk, m := range r.PeakMemory(act) {
			if m+fixed[rk] > capacity+1e-9 {
				t.Errorf("trial %d: rank %d holds %g, over the cap %g", trial, rk, m+fixed[rk], capacity)
			}
		}
		bo := sim.BoundOptions{Act: act, Cap: make([]float64, P)}
		for rk := range P {
			bo.Cap[rk] = capacity - fixed[rk]
		}
		lb, err := sim.LowerBound(prog, rc, bo)
		if err != nil {
			t.Fatal(err)
		}
		if r.Makespan < lb*(1-1e-9) {
			t.Errorf("trial %d: makespan %g under the lower bound %g", trial, r.Makespan, lb)
		}
		again, _ := PriorityOrder(p, prio, enter)
		if !reflect.DeepEqual(again.Ranks, prog.Ranks) {
			t.Errorf("trial %d: a second call gives another order", trial)
		}
	}
	if built < 30 {
		t.Errorf("PriorityOrder built an order in %d of 60 trials", built)
	}
}
