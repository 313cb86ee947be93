package e2e_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/synth"
)

// TestSynthesizedTrainsAsSequential: orders gen/synth builds for an
// LLM-like shape (a cheap embedding on the first stage, a head and loss
// three times a block with four times its activation on the last) on P =
// 4, M = 8 under a memory cap, on the loop (V = 1, 2), v and zigzag (V = 4,
// 8) placements, lower and verify (gen.LowerProgram) and train through
// the runtime equal to a sequential run, over a spread of the rules that
// do not get stuck, a synth.PriorityOrder order (micro-batches in chain
// order, one after another, as far as the cap lets them start), that
// recipe rolled out by synth.Pilot and annealed by synth.Anneal, that
// order reinserted by synth.Reinsert, synth.Periodic's order (found on some placement) and synth.Exact's best
// within a small budget (on the smaller placements).
func TestSynthesizedTrainsAsSequential(t *testing.T) {
	const P, M = 4, 8
	periodic := 0 // placements with a synth.Periodic order
	exact := 0    // with a synth.Exact one
	prio := 0     // with a synth.PriorityOrder one
	pilot := 0    // with a synth.Pilot one
	annealed := 0 // with a synth.Anneal one
	moved := 0    // with a synth.Reinsert one that moved a step
	// A zigzag with one stage moved, as auto's balanced placements are
	// (gen/balance.go): rank 2 holds nine stages, rank 0 seven.
	balanced := ir.Zigzag(P, 8)
	balanced.RankOf[15] = 2
	for _, pl := range []ir.Placement{ir.Loop(P, 1), ir.Loop(P, 2), ir.VShape(P), ir.Zigzag(P, 4), ir.Zigzag(P, 8), balanced} {
		S := pl.Stages()
		F, I, W, act := make([]float64, S), make([]float64, S), make([]float64, S), make([]float64, S)
		for s := range S {
			F[s], I[s], W[s], act[s] = 1, 1, 1, 1
		}
		F[0], I[0], W[0] = 0.3, 0.1, 0.3
		F[S-1], I[S-1], W[S-1], act[S-1] = 3, 3, 3, 4
		c, err := sim.Cost{F: F, I: I, W: W, B: sumOf(I, W)}.Resolve(S)
		if err != nil {
			t.Fatal(err)
		}
		// Within 7, or 2·V where that is more: on zigzag V = 8 one
		// micro-batch holds 11 on rank 0 (seven unit chunks and the
		// head's 4).
		pr := synth.Problem{Placement: pl, Micro: M, Cost: c, Act: act, Cap: max(7, 2*float64(S/P))}
		ran := 0
		var orders []ir.Program
		var names []string
		for i, rule := range synth.Rules(P, M) {
			if i%5 != 0 { // a spread of the rules keeps the test short
				continue
			}
			order, err := synth.Schedule(pr, rule)
			if err != nil {
				continue // stuck under the cap: not a candidate
			}
			orders, names = append(orders, order), append(names, rule.String())
		}
		// The priority list scheduler, each micro-batch's steps in chain
		// order one micro-batch after another (a W after its chunk's I).
		chain := func(k ir.Kind, s, m int) float64 {
			at := map[ir.Kind]int{ir.Forward: s, ir.BackwardInput: 2*S - 1 - s, ir.BackwardWeight: 2*S + s}[k]
			return float64(m*S + at)
		}
		if order, err := synth.PriorityOrder(pr, chain, func(int) float64 { return 0 }); err == nil {
			orders, names = append(orders, order), append(names, "priority")
			prio++
			// That order with steps moved on their ranks (synth.Reinsert:
			// a rank may idle with a step ready).
			if q, _, err := synth.Reinsert(pr, order, 5_000_000); err != nil {
				t.Fatalf("%s reinsert: %v", pl, err)
			} else if !reflect.DeepEqual(q.Ranks, order.Ranks) {
				orders, names = append(orders, q), append(names, "reinsert")
				moved++
			}
		}
		// The same recipe rolled out (synth.Pilot: idling and other
		// choices where they finish earlier).
		if order, err := synth.Pilot(pr, synth.Recipe{Prio: chain, Enter: func(int) float64 { return 0 }}, 1_000_000); err == nil {
			orders, names = append(orders, order), append(names, "pilot")
			pilot++
		}
		// The same recipe annealed (synth.Anneal: priorities moved where
		// the list scheduler's order ends earlier).
		if rc, _, err := synth.Anneal(pr, synth.Recipe{Prio: chain, Enter: func(int) float64 { return 0 }}, 2_000_000); err == nil {
			if order, err := synth.PriorityOrder(pr, rc.Prio, rc.Enter); err == nil {
				orders, names = append(orders, order), append(names, "anneal")
				annealed++
			}
		}
		if order, ok, err := synth.Periodic(pr, 50, 0); err != nil {
			t.Fatal(err)
		} else if ok {
			orders, names = append(orders, order), append(names, "periodic")
			periodic++
		}
		if 3*S*M <= 192 { // synth.Exact's best order within a small budget
			if o, ok, err := synth.Exact(pr, 100_000, 0); err != nil {
				t.Fatal(err)
			} else if ok && o.Program.Ranks != nil {
				orders, names = append(orders, o.Program), append(names, "exact")
				exact++
			}
		}
		for i, order := range orders {
			res, err := gen.LowerProgram(order, gen.Options{})
			if err != nil {
				t.Fatalf("%s %s: %v", pl, names[i], err)
			}
			res.Config = ir.Config{Schedule: "synth", Ranks: P, Virtual: S / P, Micro: M}
			src, err := gen.Emit(res, emit.Options{Package: "p", Table: true, Schedule: "synth"})
			if err != nil {
				t.Fatal(err)
			}
			p := progOf(t, "synth-"+pl.String(), res.Config, gen.Options{}, src, res)
			g := newRig(t, p, inprocWorld(p.spec.Ranks, 20*time.Second), false)
			checkAgainstSequential(t, g, g.train(t, 2, rankFns(p, "interp")), false)
			ran++
		}
		if ran == 0 {
			t.Errorf("%s: every rule stuck under the cap", pl)
		}
	}
	if periodic == 0 {
		t.Errorf("synth.Periodic found no order on any placement")
	}
	if exact == 0 {
		t.Errorf("synth.Exact found no order on any placement")
	}
	if prio == 0 {
		t.Errorf("synth.PriorityOrder stuck on every placement")
	}
	if pilot == 0 {
		t.Errorf("synth.Pilot stuck on every placement")
	}
	if annealed == 0 {
		t.Errorf("synth.Anneal stuck on every placement")
	}
	if moved == 0 {
		t.Errorf("synth.Reinsert moved no step on any placement")
	}
}

func sumOf(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] + b[i]
	}
	return out
}
