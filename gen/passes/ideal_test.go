package passes

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ppgen/ppgen/gen/internal/testprog"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// TestIdealTimelineAgreesWithSim: the timed comm order's ideal timeline and
// gen/sim read their dependencies from one model (gen/internal/deps), so
// on a compute-only program (where sim charges a cross-rank input Comm plus
// its transfer time, as the ideal timeline does) every step ends at the
// same time in both.
func TestIdealTimelineAgreesWithSim(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 6))
	cases := []struct {
		name string
		p    ir.Program
	}{
		{"1f1b", oneF1B(4, 8)},
		{"gpipe", gpipe(3, 5)},
		{"interleaved", interleaved(2, 2, 4)},
		{"v split", vshape(3, 6, true)},
		{"zb", zbLike(4, 8)},
		{"random", testprog.RandomFeasible(rng, ir.Loop(3, 2), 5)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Uneven stages, so a dependency on the wrong stage shows.
			S := tc.p.Stages()
			c := sim.Cost{B: []float64{2}, I: []float64{1.25}, W: []float64{0.75}, Comm: 0.3, DataLoad: 0.1, BW: 8}
			for s := range S {
				c.F = append(c.F, 1+0.25*float64(s%3))
				c.Act = append(c.Act, float64(1+s))
			}
			rc, err := c.Resolve(S)
			if err != nil {
				t.Fatal(err)
			}
			p := insertDataShared(tc.p) // with its data loads, as the pass times it
			ends, ok := idealTimeline(p, rc)
			if !ok {
				t.Fatal("ideal timeline: stuck")
			}
			res, err := sim.Run(p, rc)
			if err != nil {
				t.Fatal(err)
			}
			for r, steps := range p.Ranks {
				for j := range steps {
					if got, want := ends[r][j], res.Events[res.Offsets[r]+j].End; math.Abs(got-want) > 1e-9 {
						t.Fatalf("rank %d step %d %s: ideal end %v, sim end %v", r, j, steps[j], got, want)
					}
				}
			}
		})
	}
}
