package sim

import (
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// TestLowerBoundTight: cases where the bound is derived by hand and equals
// the makespan.
func TestLowerBoundTight(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    ir.Program
		c    Cost
		opt  BoundOptions
		want float64
	}{
		// 1F1B, F=1, B=2, no latency: the last rank starts after P−1
		// forwards, works M·3, and its last B is followed by P−1 Bs:
		// (P−1)·1 + 3M + (P−1)·2 = 3(M+P−1), 1F1B's makespan.
		{"1f1b P=4 M=8", onef1b(4, 8, false), DefaultCost(), BoundOptions{}, 33},
		{"1f1b P=3 M=5", onef1b(3, 5, false), DefaultCost(), BoundOptions{}, 21},
		// GPipe P=2 M=2: 1 + 6 + 2.
		{"gpipe P=2 M=2", gpipe(2, 2), DefaultCost(), BoundOptions{}, 9},
		// One rank, one chunk live at a time, P=1 M=3, F=1, B=2: each chunk
		// lives 3, three of them one after another: 9 (also the work).
		{"one rank capped", onef1b(1, 3, false), DefaultCost(), BoundOptions{MaxLive: []int{1}}, 9},
		// Two ranks, stage 0 may hold one chunk: each chunk of stage 0
		// lives F0+F1+B1+B0 = 6, four in turn: 24; the work bound is 12.
		{"capped P=2 M=4", gpipeCapped(2, 4), DefaultCost(), BoundOptions{MaxLive: []int{1, 0}}, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LowerBound(tc.p, tc.c, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if !near(got, tc.want) {
				t.Errorf("bound %g, want %g", got, tc.want)
			}
			r := mustRun(t, tc.p, tc.c)
			if !near(r.Makespan, tc.want) {
				t.Errorf("makespan %g, want %g (the bound is tight here)", r.Makespan, tc.want)
			}
		})
	}
}

// gpipeCapped is P ranks running the micro-batches one at a time through
// the pipeline: F of every stage, then B of every stage, micro by micro.
func gpipeCapped(P, M int) ir.Program {
	p := ir.NewProgram(ir.Loop(P, 1), M)
	for r := range P {
		for m := range M {
			p.Ranks[r] = append(p.Ranks[r], ir.Compute(ir.Forward, r, m), ir.Compute(ir.Backward, r, m))
		}
	}
	return p
}

// TestPeakMemoryWeights: with weight 1 per stage the weighted peak is the
// live-chunk count; with weights it sums them.
func TestPeakMemoryWeights(t *testing.T) {
	r := mustRun(t, onef1b(4, 8, true), DefaultCost())
	ones := r.PeakMemory([]float64{1, 1, 1, 1})
	for i, v := range r.PeakActivations {
		if !near(ones[i], float64(v)) {
			t.Errorf("rank %d: weighted peak %g, live chunks %d", i, ones[i], v)
		}
	}
	// 1F1B's rank r holds P−r chunks of its one stage at its peak.
	w := r.PeakMemory([]float64{0.5, 2, 0, 3})
	for i, want := range []float64{4 * 0.5, 3 * 2, 0, 1 * 3} {
		if !near(w[i], want) {
			t.Errorf("rank %d: weighted peak %g, want %g", i, w[i], want)
		}
	}
}
