package synth

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// TestReinsertRandom: on random problems (uneven costs, comm, random caps)
// from random recipes' orders, Reinsert's order runs every step once within
// the cap and verifies, gen/sim times it at the Score Reinsert reports (its
// incremental timing agrees with a whole simulation), it is never slower
// than the order it started from, a second call gives the same order, and
// with no work it is that order. Of the orders above their lower bound,
// at least a third get faster.
func TestReinsertRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 70))
	var g gains
	for trial := range 40 {
		p, rc := randomRecipe(rng)
		base, err := PriorityOrder(p, rc.Prio, rc.Enter)
		if errors.Is(err, ErrStuck) {
			continue
		}
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		c, err := p.check()
		if err != nil {
			t.Fatal(err)
		}
		r0, err := sim.Run(base, c)
		if err != nil {
			t.Fatal(err)
		}
		steps := base.NumSteps()
		q, sc, err := Reinsert(p, base, 2000*steps)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		checkCapped(t, trial, p, q)
		r, err := sim.Run(q, c)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(r.Makespan-sc.Makespan) > 1e-9*r.Makespan || math.Abs(RankFinish(r)-sc.Finish) > 1e-9*sc.Finish {
			t.Errorf("trial %d: Reinsert reports %+v, gen/sim times its order at %g, %g", trial, sc, r.Makespan, RankFinish(r))
		}
		if r.Makespan > r0.Makespan*(1+1e-9) {
			t.Errorf("trial %d: reinserted %g, after the first order's %g", trial, r.Makespan, r0.Makespan)
		}
		g.add(p, base, r0.Makespan, r.Makespan)
		if again, _, _ := Reinsert(p, base, 2000*steps); !reflect.DeepEqual(again.Ranks, q.Ranks) {
			t.Errorf("trial %d: a second call gives another order", trial)
		}
		if none, _, _ := Reinsert(p, base, 0); !reflect.DeepEqual(none.Ranks, base.Ranks) {
			t.Errorf("trial %d: with no work, another order than the first", trial)
		}
	}
	g.check(t, "Reinsert")
}

// TestReinsertPacksATightCap: on the row of TestPilotPacksATightCap,
// reinserting Periodic's best order gives a faster order within the cap.
func TestReinsertPacksATightCap(t *testing.T) {
	if testing.Short() {
		t.Skip("two seconds of CPU")
	}
	p, base, _ := tightCapRecipe(t)
	prog, _, err := Reinsert(p, base, 100_000_000)
	if err != nil {
		t.Fatal(err)
	}
	checkFaster(t, p, base, prog, "reinserted")
}

// TestReinsertRefuses: an order that is not one of the problem's F, I and
// W steps each once on its stage's rank, or that deadlocks, is refused
// naming what is wrong.
func TestReinsertRefuses(t *testing.T) {
	p := Problem{Placement: ir.Loop(2, 1), Micro: 2, Cost: sim.Cost{F: []float64{1}, I: []float64{1}, W: []float64{1}, B: []float64{2}}}
	good, err := Schedule(p, Rule{})
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(q *ir.Program)) ir.Program {
		q := good.Clone()
		f(&q)
		return q
	}
	for _, tc := range []struct {
		name string
		q    ir.Program
		want string
	}{
		{"a step missing", edit(func(q *ir.Program) { q.Ranks[0] = q.Ranks[0][1:] }), "the order lacks"},
		{"a step twice", edit(func(q *ir.Program) { q.Ranks[0][1] = q.Ranks[0][0] }), "want each F, I and W of the problem once"},
		{"on another rank", edit(func(q *ir.Program) { q.Ranks[1][0].Stage = 0 }), "want each F, I and W of the problem once"},
		{"a full backward", edit(func(q *ir.Program) { q.Ranks[0][0].Kind = ir.Backward }), "want each F, I and W"},
		{"another size", ir.NewProgram(ir.Loop(3, 1), 2), "an order of 3 ranks"},
		{"a deadlock", edit(func(q *ir.Program) { // rank 0 runs its I's before its F's
			var f, rest []ir.Step
			for _, st := range q.Ranks[0] {
				if st.Kind == ir.Forward {
					f = append(f, st)
				} else {
					rest = append(rest, st)
				}
			}
			q.Ranks[0] = append(rest, f...)
		}), "does not run"},
	} {
		if _, _, err := Reinsert(p, tc.q, 1000); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// BenchmarkReinsert: Reinsert from Periodic's best order on the row of
// TestPilotPacksATightCap (1,536 steps on 4 ranks), 10⁸ steps timed per
// run; steps/s is the rate reinsertWork is spent at.
func BenchmarkReinsert(b *testing.B) {
	p, base, _ := tightCapRecipe(b)
	const work = 100_000_000
	for b.Loop() {
		if _, _, err := Reinsert(p, base, work); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(work)*float64(b.N)/b.Elapsed().Seconds(), "steps/s")
}
