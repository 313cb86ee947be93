package synth

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// listMakespan is the makespan of PriorityOrder's order for rc in the list
// scheduler's own timing.
func listMakespan(t *testing.T, p Problem, rc Recipe) float64 {
	t.Helper()
	c, err := p.check()
	if err != nil {
		t.Fatal(err)
	}
	l := newLister(&p, c, rc.Enter)
	if err := l.finish(rc.Prio); err != nil {
		t.Fatal(err)
	}
	return slices.Max(l.free)
}

// TestPilotRandom: on random problems under random caps and random
// recipes, Pilot's order verifies, runs every step once, keeps every rank
// within the cap, is no faster than the lower bound, ends no later than
// PriorityOrder's order for the same recipe (in the list scheduler's
// timing), is PriorityOrder's own with no budget, and is the same on a
// second call; it is never stuck where PriorityOrder is not.
func TestPilotRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 8))
	built, better, rescued := 0, 0, 0
	for trial := range 60 {
		p, rc := randomRecipe(rng)
		base, err := PriorityOrder(p, rc.Prio, rc.Enter)
		prog, ms, perr := pilot(p, rc, 1<<30)
		if errors.Is(err, ErrStuck) {
			// Pilot may find a way on where PriorityOrder's is stuck.
			if perr == nil {
				rescued++
				checkCapped(t, trial, p, prog)
			} else if !errors.Is(perr, ErrStuck) {
				t.Fatalf("trial %d: %v", trial, perr)
			}
			continue
		}
		if err != nil || perr != nil {
			t.Fatalf("trial %d: %v, %v", trial, err, perr)
		}
		built++
		checkCapped(t, trial, p, prog)
		lm := listMakespan(t, p, rc)
		if ms > lm*(1+1e-9) {
			t.Errorf("trial %d: Pilot ends at %g, after PriorityOrder's %g", trial, ms, lm)
		}
		if ms < lm*(1-1e-9) {
			better++
		}
		if again, _ := Pilot(p, rc, 1<<30); !reflect.DeepEqual(again.Ranks, prog.Ranks) {
			t.Errorf("trial %d: a second call gives another order", trial)
		}
		if none, _ := Pilot(p, rc, 0); !reflect.DeepEqual(none.Ranks, base.Ranks) {
			t.Errorf("trial %d: with no budget, another order than PriorityOrder's", trial)
		}
	}
	t.Logf("%d orders, %d of them faster than PriorityOrder's; %d where PriorityOrder is stuck", built, better, rescued)
	if built < 30 || better < built/4 {
		t.Errorf("Pilot built %d orders of 60, %d faster than PriorityOrder's", built, better)
	}
}

// TestPilotPacksATightCap: W = 0.6·I on the zigzag with V = 8, P = 4,
// M = 16, within two micro-batches' chunks per rank (BENCHMARKS.md's
// row, where Periodic's best is a priority order): Pilot from its recipe
// is faster than Periodic's order, within the cap.
func TestPilotPacksATightCap(t *testing.T) {
	if testing.Short() {
		t.Skip("a second of CPU")
	}
	p, base, rc := tightCapRecipe(t)
	prog, err := Pilot(p, rc, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	checkFaster(t, p, base, prog, "Pilot")
}

// tightCapRecipe is the problem of TestPilotPacksATightCap, Periodic's
// best order for it and that order's recipe.
func tightCapRecipe(t testing.TB) (Problem, ir.Program, Recipe) {
	t.Helper()
	p := Problem{Placement: ir.Zigzag(4, 8), Micro: 16, Cost: sim.Cost{F: []float64{1}, I: []float64{1}, W: []float64{0.6}, B: []float64{1.6}}, Fixed: make([]float64, 4), Cap: 16}
	base, rc, ok, err := PeriodicRecipe(p, 200, 0)
	if err != nil || !ok || rc == nil {
		t.Fatalf("PeriodicRecipe: %v, %v, recipe %v", ok, err, rc != nil)
	}
	return p, base, *rc
}

// checkFaster checks that prog, made by name for p, keeps the cap and is
// faster than base, Periodic's order.
func checkFaster(t *testing.T, p Problem, base, prog ir.Program, name string) {
	t.Helper()
	checkCapped(t, 0, p, prog)
	c, _ := p.Cost.Resolve(p.Placement.Stages())
	rb, _ := sim.Run(base, c)
	rp, err := sim.Run(prog, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Periodic %g, %s %g", rb.Makespan, name, rp.Makespan)
	if !(rp.Makespan < rb.Makespan*(1-1e-9)) {
		t.Errorf("%s %g, not faster than Periodic's %g", name, rp.Makespan, rb.Makespan)
	}
}
