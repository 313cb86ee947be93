package gen

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
)

// TestMPipeShortensTheHead: with a DATA_LOAD cost, mpipe (interleaved with
// owned-micro loading) takes the owned loads off rank 0's warm-up, so its
// makespan is below interleaved's: by (min(P, M)-1) loads less the
// transfers when V ≥ 2, by at least one with V = 1 (whose steady state hides
// the others). With free loads and transfers the two are equal.
func TestMPipeShortensTheHead(t *testing.T) {
	for _, tc := range []struct{ P, V, M int }{{4, 2, 8}, {8, 2, 16}, {4, 1, 8}, {4, 2, 3}} {
		run := func(schedule, cost string) float64 {
			t.Helper()
			res, err := Lower(ir.Config{Schedule: schedule, Ranks: tc.P, Virtual: tc.V, Micro: tc.M}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			c, err := sim.ParseCost(cost, 0)
			if err != nil {
				t.Fatal(err)
			}
			r, err := sim.Run(res.Program, c)
			if err != nil {
				t.Fatal(err)
			}
			return r.Makespan
		}
		const load, comm = 0.5, 0.05
		cost := "data=0.5,comm=0.05"
		inter, mp := run("interleaved", cost), run("mpipe", cost)
		// With V ≥ 2 every owned load was on rank 0's warm-up path; with
		// V = 1 the steady state hides all but one of them.
		owned := 1
		if tc.V > 1 {
			owned = min(tc.P, tc.M) - 1
		}
		gain := inter - mp
		t.Logf("P=%d V=%d M=%d: interleaved %.3f, mpipe %.3f (gain %.3f)", tc.P, tc.V, tc.M, inter, mp, gain)
		if gain < float64(owned)*(load-comm)-1e-9 {
			t.Errorf("P=%d V=%d M=%d: interleaved %.3f, mpipe %.3f: gain %.3f, want at least %d·(load-comm) = %.3f",
				tc.P, tc.V, tc.M, inter, mp, gain, owned, float64(owned)*(load-comm))
		}
		if a, b := run("interleaved", ""), run("mpipe", ""); a != b {
			t.Errorf("P=%d V=%d M=%d: free loads and transfers: interleaved %.3f, mpipe %.3f; want equal", tc.P, tc.V, tc.M, a, b)
		}
	}
}

// TestEveryScheduleShipsLabels: every family but mpipe lowers with shipped
// labels over a grid of P, V and M and verifies (deadlock-free, every F of a
// last stage after its labels); a lowered program loads labels on a last
// stage only where the route starts on the same rank, and its makespan at
// comm = 0 equals the one with loaded labels (the data transfers pair up
// with the activations').
func TestEveryScheduleShipsLabels(t *testing.T) {
	checked := 0
	for _, f := range schedules.All() {
		if f.ComputeOnly != "" {
			continue
		}
		for P := 1; P <= 5; P++ {
			for _, V := range legalVirtuals(f) {
				for _, M := range []int{1, P, 2*P + 1} {
					cfg := ir.Config{Schedule: f.Name, Ranks: P, Virtual: V, Micro: M}
					if _, _, err := Build(cfg); err != nil {
						continue
					}
					res, err := Lower(cfg, Options{Passes: passes.Options{ShipLabels: true}})
					if f.OwnedData {
						if err == nil || !strings.Contains(err.Error(), "owners load only inputs") {
							t.Errorf("%s P=%d: err = %v, want the refusal", f.Name, P, err)
						}
						continue
					}
					if err != nil {
						t.Errorf("%s P=%d V=%d M=%d: %v", f.Name, P, V, M, err)
						continue
					}
					p := res.Program
					for r, steps := range p.Ranks {
						for _, st := range steps {
							if st.Kind != ir.DataLoad {
								continue
							}
							first, last := p.Route(st.Micro)
							if st.Stage == last && st.Stage != first && p.Placement.Rank(first) != r {
								t.Errorf("%s P=%d V=%d M=%d: rank %d loads the labels %s though they are shipped", f.Name, P, V, M, r, st)
							}
						}
					}
					plain, err := Lower(cfg, Options{})
					if err != nil {
						t.Fatal(err)
					}
					a, err := sim.Run(plain.Program, sim.DefaultCost())
					if err != nil {
						t.Fatal(err)
					}
					b, err := sim.Run(p, sim.DefaultCost())
					if err != nil {
						t.Fatal(err)
					}
					if a.Makespan != b.Makespan {
						t.Errorf("%s P=%d V=%d M=%d: makespan %g with shipped labels, %g without", f.Name, P, V, M, b.Makespan, a.Makespan)
					}
					checked++
				}
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d configurations checked", checked)
	}
}
