package sim

import (
	"math"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// TestCostEach: Cost.Each gives the steps it holds their own durations
// and leaves the others their stage's cost. GPipe at P=1, M=3 runs its
// steps one after the other, so the makespan is their sum, worked by
// hand; a value out of range is refused.
func TestCostEach(t *testing.T) {
	p := gpipe(1, 3) // F0..F2, then B0..B2 on one rank
	c := Cost{F: []float64{1}, B: []float64{2}}
	for _, tc := range []struct {
		name string
		each map[StepKey]float64
		want float64
	}{
		{"none", nil, 3*1 + 3*2},
		{"one F", map[StepKey]float64{{ir.Forward, 0, 1}: 4}, 1 + 4 + 1 + 3*2},
		{"an F and a B", map[StepKey]float64{{ir.Forward, 0, 0}: 0.5, {ir.Backward, 0, 2}: 7}, 0.5 + 2*1 + 2 + 2 + 7},
		{"a step the program lacks", map[StepKey]float64{{ir.Forward, 0, 9}: 100, {ir.BackwardInput, 0, 0}: 100}, 3*1 + 3*2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := c
			c.Each = tc.each
			res, err := Run(p, c)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(res.Makespan-tc.want) > 1e-12 {
				t.Errorf("makespan %g, want %g", res.Makespan, tc.want)
			}
		})
	}
	c.Each = map[StepKey]float64{{ir.Forward, 0, 1}: math.NaN()}
	if _, err := Run(p, c); err == nil || !strings.Contains(err.Error(), "micro-batch 1") {
		t.Errorf("a NaN duration: err = %v; want one naming micro-batch 1", err)
	}
}
