package synth

import (
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
