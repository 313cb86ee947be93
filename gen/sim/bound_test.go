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
		// Two ranks, split backwards, F = I = W = 1, one chunk per rank:
		// micro-batch m's F0 cannot start before m − 1's W0 has ended (its
		// chunk and m − 1's do not fit together), and that chain F0, F1,
		// I1, I0, W0 takes 5: 5M, the one-at-a-time order's makespan
		// (each rank's work is 3M).
		{"one chunk per rank P=2 M=4", oneAtATime(2, 4), Cost{F: []float64{1}, B: []float64{2}, I: []float64{1}, W: []float64{1}},
			BoundOptions{Act: []float64{1, 1}, Cap: []float64{1, 1}}, 20},
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

// TestCapTermsTailAfterLastBackward: tail_B on the first rank of a V at
// P = 2 (stages 0 and 3; stages 1 and 2 on the other rank), stage 0 an
// embedding (F = 0.1, I = 0, W = 0.1, act 1), stages 1 and 2 blocks (F = 1,
// I = 5, W = 1), stage 3 a head (F = I = W = 3, act 4), M = 4, the cap 8
// (two head chunks). After the last I of stage 3 the chain I2, I1, I0, W0
// = 10.1 runs, and the rank may run only W's of the head's live chunks
// (at most 2 · 3 = 6 within the cap, the most work per unit) or the
// embedding's backwards: tail_B = 4.1. After its last forward (of the
// head, the least chain) I3 and that chain follow, 13.1, against the head
// chunks' I + W (2 · 6 = 12): tail_F = 1.1. Before its first backward (I3
// at 5.1) it runs at most the head's forwards from 2.1 (3 of work, one
// chunk) and embedding forwards in the rest of the cap (4 · 0.1):
// head_C = 5.1 − 3.4 = 1.7.
func TestCapTermsTailAfterLastBackward(t *testing.T) {
	pl := ir.VShape(2)
	c, err := Cost{F: []float64{0.1, 1, 1, 3}, I: []float64{0, 5, 5, 3}, W: []float64{0.1, 1, 1, 3}}.Resolve(4)
	if err != nil {
		t.Fatal(err)
	}
	chunkBack := []float64{0.1, 6, 6, 6}
	wLeft := []float64{0.1, 1, 1, 3}
	runs := []int{4, 4, 4, 4}
	pre := []float64{0, 0.1, 1.1, 2.1}
	post := []float64{0.1, 0.1, 5.1, 10.1}    // after I(s): I(s-1) ... I0, then W0
	esBack := []float64{18.1, 13.1, 8.1, 5.1} // F0..F3 = 5.1, then I3, I2, I1
	from := []float64{18.2, 18.1, 17.1, 16.1} // chain from F(s) to W0's end
	opt := BoundOptions{Act: []float64{1, 1, 1, 4}, Cap: []float64{8, 0}}
	head, tail, ok := capTerms(pl, 0, opt, c, chunkBack, wLeft, runs, true, pre, post, esBack, from)
	if !ok || !near(head, 1.7) || !near(tail, 4.1) {
		t.Errorf("head %g, tail %g, ok %v; want 1.7, 4.1 (tail_B; tail_F is 1.1), true", head, tail, ok)
	}
	if _, tail, _ := capTerms(pl, 0, opt, c, chunkBack, wLeft, runs, false, pre, post, esBack, from); !near(tail, 1.1) {
		t.Errorf("without one route (no tail_B): tail %g, want tail_F = 1.1", tail)
	}
}

// oneAtATime is a loop program on P ranks (one stage each) that runs one
// micro-batch at a time through F, I and W.
func oneAtATime(P, M int) ir.Program {
	q := ir.NewProgram(ir.Loop(P, 1), M)
	for m := range M {
		for s := range P {
			q.Ranks[s] = append(q.Ranks[s], ir.Compute(ir.Forward, s, m))
		}
		for s := P - 1; s >= 0; s-- {
			q.Ranks[s] = append(q.Ranks[s], ir.Compute(ir.BackwardInput, s, m), ir.Compute(ir.BackwardWeight, s, m))
		}
	}
	return q
}
