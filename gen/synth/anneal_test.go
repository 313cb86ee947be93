package synth

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestAnnealRandom: on random problems under random caps and random
// recipes, Anneal's recipe builds an order that runs every step once
// within the cap, ends no later than the first recipe's order (in the
// list scheduler's timing) and at the makespan Anneal reports; with no
// budget it is the first recipe's order, and a second call gives the same
// order. Where the first recipe is stuck, Anneal says so. Most of these
// small problems' first orders are at the lower bound already; of those
// that are not, at least a third get faster.
func TestAnnealRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 2))
	var g gains
	for trial := range 40 {
		p, rc := randomRecipe(rng)
		base, err := PriorityOrder(p, rc.Prio, rc.Enter)
		steps := 3 * p.Placement.Stages() * p.Micro
		ra, ms, aerr := Anneal(p, rc, 3000*steps)
		if errors.Is(err, ErrStuck) {
			if !errors.Is(aerr, ErrStuck) {
				t.Fatalf("trial %d: PriorityOrder stuck, Anneal: %v", trial, aerr)
			}
			continue
		}
		if err != nil || aerr != nil {
			t.Fatalf("trial %d: %v, %v", trial, err, aerr)
		}
		prog, err := PriorityOrder(p, ra.Prio, ra.Enter)
		if err != nil {
			t.Fatalf("trial %d: the annealed recipe: %v", trial, err)
		}
		checkCapped(t, trial, p, prog)
		first, got := listMakespan(t, p, rc), listMakespan(t, p, ra)
		if got != ms {
			t.Errorf("trial %d: Anneal reports %g, its recipe's order ends at %g", trial, ms, got)
		}
		if got > first*(1+1e-9) {
			t.Errorf("trial %d: annealed %g, after the first recipe's %g", trial, got, first)
		}
		g.add(p, base, first, got)
		again, _, _ := Anneal(p, rc, 3000*steps)
		if q, _ := PriorityOrder(p, again.Prio, again.Enter); !reflect.DeepEqual(q.Ranks, prog.Ranks) {
			t.Errorf("trial %d: a second call gives another order", trial)
		}
		none, _, _ := Anneal(p, rc, 0)
		if q, _ := PriorityOrder(p, none.Prio, none.Enter); !reflect.DeepEqual(q.Ranks, base.Ranks) {
			t.Errorf("trial %d: with no budget, another order than the first recipe's", trial)
		}
	}
	g.check(t, "Anneal")
}

// TestAnnealPacksATightCap: on the row of TestPilotPacksATightCap,
// annealing Periodic's best recipe gives a faster order within the cap.
func TestAnnealPacksATightCap(t *testing.T) {
	if testing.Short() {
		t.Skip("two seconds of CPU")
	}
	p, base, rc := tightCapRecipe(t)
	ra, _, err := Anneal(p, rc, 5_000_000)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := PriorityOrder(p, ra.Prio, ra.Enter)
	if err != nil {
		t.Fatal(err)
	}
	checkFaster(t, p, base, prog, "annealed")
}
