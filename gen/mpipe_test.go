package gen

import (
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
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
