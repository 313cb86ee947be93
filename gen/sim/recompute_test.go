package sim

import (
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// TestRecomputeCost: a RECOMPUTE step costs its stage's R, F when R is not
// given, and shows in the makespan: one rank, F=1 B=2, F0 R0 B0 takes 4
// (R = F) or 5.5 (R=2.5); R round-trips through ParseCost and String; the
// peak activations and Busy know RECOMPUTE.
func TestRecomputeCost(t *testing.T) {
	p, err := ir.ParseText("rank 0: 0F0 0RECOMPUTE0 0B0\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec string
		want float64
	}{{"F=1,B=2", 4}, {"F=1,B=2,R=2.5", 5.5}} {
		c, err := ParseCost(tc.spec, 1)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(p, c)
		if err != nil {
			t.Fatal(err)
		}
		if res.Makespan != tc.want {
			t.Errorf("%s: makespan %v; want %v", tc.spec, res.Makespan, tc.want)
		}
		back, err := ParseCost(c.String(), 1)
		if err != nil || back.String() != c.String() {
			t.Errorf("%s: String %q does not round-trip: %v", tc.spec, c.String(), err)
		}
	}
	// The peak counts a chunk from its F's start to its F's end and again
	// from its RECOMPUTE, and Busy counts RECOMPUTE as compute.
	for _, tc := range []struct {
		text       string
		peak       int
		busy, span float64
	}{
		{"rank 0: 0F0 0F1 0B0 0B1\n", 2, 6, 6},
		{"rank 0: 0F0 0F1 0RECOMPUTE0 0B0 0RECOMPUTE1 0B1\n", 1, 8, 8},
	} {
		p, err := ir.ParseText(tc.text)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(p, DefaultCost())
		if err != nil {
			t.Fatal(err)
		}
		if res.PeakActivations[0] != tc.peak || res.Busy[0] != tc.busy || res.Makespan != tc.span {
			t.Errorf("%s: peak %d, busy %v, makespan %v; want %d, %v, %v", tc.text, res.PeakActivations[0], res.Busy[0], res.Makespan, tc.peak, tc.busy, tc.span)
		}
	}
	// Selective (RecomputeShare 0.25): a RECOMPUTE costs a quarter of R,
	// and a chunk keeps 3/4 from its F's end to its RECOMPUTE: the second
	// F runs with 1.75 chunks live, rounded up to 2 in PeakActivations.
	sel, err := ir.ParseText("rank 0: 0F0 0F1 0RECOMPUTE0 0B0 0RECOMPUTE1 0B1\n")
	if err != nil {
		t.Fatal(err)
	}
	sel.RecomputeShare = []float64{0.25}
	c, err := ParseCost("F=1,B=2,R=2", 1)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(sel, c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Makespan != 7 || res.PeakLive[0] != 1.75 || res.PeakActivations[0] != 2 {
		t.Errorf("selective 0.25: makespan %v, peak %v (%v); want 7, 2 (1.75)", res.Makespan, res.PeakActivations, res.PeakLive)
	}
	if mem := res.PeakMemory([]float64{4}); mem[0] != 7 {
		t.Errorf("selective 0.25: PeakMemory %v; want [7] (1.75 chunks of 4)", mem)
	}
	if _, err := ParseCost("R=1:2", 3); err == nil {
		t.Errorf("R with 2 values for 3 stages: no error")
	}
}
