package passes

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
)

// rankLines is the text form of p without the placement and micro header,
// for table tests.
func rankLines(p ir.Program) string {
	var b strings.Builder
	for r, steps := range p.Ranks {
		fmt.Fprintf(&b, "rank %d:", r)
		for _, st := range steps {
			b.WriteString(" " + st.String())
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func TestSplit(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"1f1b", "rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1",
			"rank 0: 0F0 0F1 0I0 0W0 0I1 0W1\nrank 1: 1F0 1I0 1W0 1F1 1I1 1W1\n"},
		{"already split", "rank 0: 0F0 0I0 0F1 0I1 0W0 0W1\nrank 1: 1F0 1I0 1W0 1F1 1I1 1W1",
			"rank 0: 0F0 0I0 0F1 0I1 0W0 0W1\nrank 1: 1F0 1I0 1W0 1F1 1I1 1W1\n"},
		{"overlaps", "rank 0: 0F0 0F1 (0B0;0F2)OVERLAP_B_F (0F3;0B1)OVERLAP_F_B 0B2 0B3",
			"rank 0: 0F0 0F1 (0I0;0F2)OVERLAP_B_F 0W0 (0F3;0I1)OVERLAP_F_B 0W1 0I2 0W2 0I3 0W3\n"},
		{"overlap with I kept", "rank 0: 0F0 0F1 (0I0;0F2)OVERLAP_B_F 0B1 0W0 0B2",
			"rank 0: 0F0 0F1 (0I0;0F2)OVERLAP_B_F 0I1 0W1 0W0 0I2 0W2\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(tt.in)
			before := ir.FormatText(p)
			q, err := Split(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := rankLines(q); got != tt.want {
				t.Errorf("Split:\n%s\nwant\n%s", got, tt.want)
			}
			if ir.FormatText(p) != before {
				t.Error("Split modified its input")
			}
			again, err := Split(q)
			if err != nil || rankLines(again) != rankLines(q) {
				t.Errorf("Split is not idempotent:\n%s", rankLines(again))
			}
		})
	}
}

func TestSplitKeepsSlots(t *testing.T) {
	p := mustParse("rank 0: 0F0 (0B0;0F1)OVERLAP_B_F 0B1")
	p.Ranks[0][0].Slot = 0
	p.Ranks[0][1].Sub[0].Slot, p.Ranks[0][1].Sub[1].Slot = 0, 1
	p.Ranks[0][2].Slot = 1
	q, err := Split(p)
	if err != nil {
		t.Fatal(err)
	}
	var slots []int
	for _, st := range q.Ranks[0] {
		for _, c := range chunksOf(st) {
			slots = append(slots, c.Slot)
		}
	}
	if fmt.Sprint(slots) != "[0 0 1 0 1 1]" {
		t.Errorf("slots %v, want [0 0 1 0 1 1] (0F0 (0I0;0F1) 0W0 0I1 0W1)", slots)
	}
	if p.Ranks[0][1].Sub[0].Kind != ir.Backward {
		t.Error("Split wrote into its input's sub-steps")
	}
}

func TestMerge(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"pairs", "rank 0: 0F0 0F1 0I0 0W0 0I1 0W1", "rank 0: 0F0 0F1 0B0 0B1\n"},
		{"deferred W stays split", "rank 0: 0F0 0I0 0F1 0I1 0W0 0W1", "rank 0: 0F0 0I0 0F1 0I1 0W0 0W1\n"},
		{"one W follows its I", "rank 0: 0F0 0I0 0F1 0I1 0W1 0W0", "rank 0: 0F0 0I0 0F1 0B1 0W0\n"},
		{"W of another chunk", "rank 0: 0F0 0F1 0I0 0W1", "rank 0: 0F0 0F1 0I0 0W1\n"},
		{"overlaps", "rank 0: 0F0 0F1 (0I0;0F2)OVERLAP_B_F 0W0 (0F3;0I1)OVERLAP_F_B 0W1 0I2 0W2 0I3 0W3",
			"rank 0: 0F0 0F1 (0B0;0F2)OVERLAP_B_F (0F3;0B1)OVERLAP_F_B 0B2 0B3\n"},
		{"overlap with a W half", "rank 0: 0F0 0I0 0F1 (0W0;0F2)OVERLAP_B_F 0B1 0B2",
			"rank 0: 0F0 0I0 0F1 (0W0;0F2)OVERLAP_B_F 0B1 0B2\n"},
		{"nothing to merge", "rank 0: 0F0 0B0", "rank 0: 0F0 0B0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(tt.in)
			before := ir.FormatText(p)
			q, err := merge(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := rankLines(q); got != tt.want {
				t.Errorf("merge:\n%s\nwant\n%s", got, tt.want)
			}
			if ir.FormatText(p) != before {
				t.Error("merge modified its input")
			}
		})
	}
	// Different slots on the two halves: not the same chunk's buffer, kept.
	p := mustParse("rank 0: 0F0 0I0 0W0")
	p.Ranks[0][1].Slot, p.Ranks[0][2].Slot = 0, 1
	if q, _ := merge(p); len(q.Ranks[0]) != 3 {
		t.Errorf("merged an I and a W with different slots: %s", rankLines(q))
	}
}

// familyOrders returns the compute orders of every lowerable family on a
// small grid (default V), plus the test fixtures, by name.
func familyOrders(t *testing.T) map[string]ir.Program {
	t.Helper()
	out := map[string]ir.Program{}
	for _, f := range schedules.All() {
		if f.ComputeOnly != "" {
			continue
		}
		for _, P := range []int{1, 2, 3, 4} {
			for _, M := range []int{1, P, 2*P + 1} {
				v := f.DefaultVirtual
				cfg := ir.Config{Schedule: f.Name, Ranks: P, Virtual: v, Micro: M}
				p, err := schedules.Build(cfg)
				if err != nil {
					continue
				}
				out[fmt.Sprintf("%s P=%d M=%d", f.Name, P, M)] = p
			}
		}
	}
	for P := 1; P <= 4; P++ {
		for name, p := range families(P, 2*P) {
			out[fmt.Sprintf("fixture %s P=%d", name, P)] = p
		}
	}
	return out
}

// TestMergeInvertsSplit: merge(Split(p)) == p on every family's order and
// fixture (I/W-split families included: their W that follows its I merges
// back only if p had a B there, so the test compares with merge(p)).
func TestMergeInvertsSplit(t *testing.T) {
	for name, p := range familyOrders(t) {
		s, err := Split(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m, err := merge(s)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, _ := merge(p)
		if rankLines(m) != rankLines(want) {
			t.Errorf("%s: merge(Split(p)) differs from merge(p):\n%s\nwant\n%s", name, rankLines(m), rankLines(want))
		}
		if !hasSplit(p) && rankLines(m) != rankLines(p) {
			t.Errorf("%s: merge(Split(p)) != p:\n%s\nwant\n%s", name, rankLines(m), rankLines(p))
		}
		for _, steps := range s.Ranks {
			for _, st := range steps {
				for _, c := range chunksOf(st) {
					if c.Kind == ir.Backward {
						t.Fatalf("%s: Split left %s", name, st)
					}
				}
			}
		}
	}
}

func hasSplit(p ir.Program) bool {
	for _, steps := range p.Ranks {
		for _, st := range steps {
			for _, c := range chunksOf(st) {
				if c.Kind == ir.BackwardInput || c.Kind == ir.BackwardWeight {
					return true
				}
			}
		}
	}
	return false
}

func TestSplitMergeErrors(t *testing.T) {
	bad := mustParse("rank 0: 0F0 0B0\nrank 1: 1F0 1B0")
	bad.Ranks[0][1].Stage = 1 // stage 1 lives on rank 1
	for name, fn := range map[string]func(ir.Program) (ir.Program, error){
		"split": Split, "merge": merge, "overlap": Overlap, "dxdw": DxDwInOverlap,
	} {
		_, err := fn(bad)
		want := name + ": rank 0 step 1 (1B0): stage 1 lives on rank 1"
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: err = %v, want prefix %q", name, err, want)
		}
	}
}

// TestSplitRandomOrders: on random feasible orders (some with overlaps),
// the split order lowers too (a W right after its I adds no wait), and
// merge undoes Split.
func TestSplitRandomOrders(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		P := 1 + rng.IntN(4)
		pl := ir.Loop(P, 1+rng.IntN(2))
		if rng.IntN(3) == 0 {
			pl = ir.VShape(P)
		}
		p := fuseRandom(rng, randomFeasible(rng, pl, 1+rng.IntN(2*P)))
		if _, _, err := Lower(p, Options{}); err != nil {
			continue // fusing made the order infeasible
		}
		s, err := Split(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Lower(s, Options{}); err != nil {
			t.Fatalf("case %d: Split order does not lower: %v\n%s", i, err, ir.FormatText(s))
		}
		m, _ := merge(s)
		want, _ := merge(p)
		if rankLines(m) != rankLines(want) {
			t.Fatalf("case %d: merge(Split(p)) != merge(p)\n%s\nwant\n%s", i, rankLines(m), rankLines(want))
		}
	}
}

// peakLive returns the most chunks (F to W or B) any rank holds at once.
func peakLive(p ir.Program) int {
	peak := 0
	for _, steps := range p.Ranks {
		live := 0
		for _, st := range steps {
			for _, c := range st.Computes() {
				if c.Kind == ir.Forward {
					live++
				}
			}
			peak = max(peak, live)
			for _, c := range st.Computes() {
				if c.Kind == ir.BackwardWeight || c.Kind == ir.Backward {
					live--
				}
			}
		}
	}
	return peak
}

// TestFillW: on 1F1B with split backwards, FillW reaches ZB-H1's makespan
// (P=4, M=8 at F=I=W=1: 27 instead of 30) with 1F1B's peak of live chunks.
func TestFillW(t *testing.T) {
	c := sim.DefaultCost()
	p, err := schedules.Build(ir.Config{Schedule: "1f1b", Ranks: 4, Micro: 8})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := Split(p)
	f, err := FillW(s, c)
	if err != nil {
		t.Fatal(err)
	}
	want := "" +
		"rank 0: 0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 0F7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7\n" +
		"rank 1: 1F0 1F1 1F2 1I0 1F3 1I1 1W0 1F4 1I2 1W1 1F5 1I3 1W2 1F6 1I4 1W3 1F7 1I5 1W4 1I6 1W5 1I7 1W6 1W7\n" +
		"rank 2: 2F0 2F1 2I0 2F2 2I1 2F3 2I2 2W0 2F4 2I3 2W1 2F5 2I4 2W2 2F6 2I5 2W3 2F7 2I6 2W4 2I7 2W5 2W6 2W7\n" +
		"rank 3: 3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 3F6 3I6 3W3 3F7 3I7 3W4 3W5 3W6 3W7\n"
	if got := rankLines(f); got != want {
		t.Errorf("FillW:\n%s\nwant\n%s", got, want)
	}
	zb, err := schedules.Build(ir.Config{Schedule: "zb-h1", Ranks: 4, Micro: 8})
	if err != nil {
		t.Fatal(err)
	}
	mf, mz, ms := idealMakespan(t, f, c), idealMakespan(t, zb, c), idealMakespan(t, s, c)
	if mf != 27 || mf != mz || ms != 30 {
		t.Errorf("makespans: FillW %v, zb-h1 %v, split 1F1B %v; want 27, 27, 30", mf, mz, ms)
	}
	if peakLive(f) != peakLive(p) {
		t.Errorf("peak live chunks %d, 1F1B's %d", peakLive(f), peakLive(p))
	}
	// Nothing to fill: the input comes back.
	if g, _ := FillW(p, c); rankLines(g) != rankLines(p) {
		t.Errorf("FillW changed an order without W steps:\n%s", rankLines(g))
	}
	// Costs it cannot time: unchanged.
	zero := c
	zero.W = []float64{0}
	if g, _ := FillW(s, zero); rankLines(g) != rankLines(s) {
		t.Error("FillW moved steps under a zero W cost")
	}
}

func idealMakespan(t *testing.T, p ir.Program, c sim.Cost) float64 {
	t.Helper()
	ends, ok := idealTimeline(p, c)
	if !ok {
		t.Fatalf("infeasible order:\n%s", rankLines(p))
	}
	return makespanOf(ends)
}

// TestFillWProperties: on every family's split order, FillW never lengthens
// the ideal makespan nor raises the peak of live chunks, keeps each rank's
// non-W steps and its W steps in their order, and its result lowers with
// the timed comm order to exactly its ideal makespan.
func TestFillWProperties(t *testing.T) {
	c := sim.DefaultCost()
	improved := 0
	for name, p := range familyOrders(t) {
		s, err := Split(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := FillW(s, c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		before, after := idealMakespan(t, s, c), idealMakespan(t, f, c)
		if after > before {
			t.Errorf("%s: makespan %v -> %v", name, before, after)
		}
		if after < before {
			improved++
		}
		if peakLive(f) > peakLive(s) {
			t.Errorf("%s: peak live chunks %d -> %d", name, peakLive(s), peakLive(f))
		}
		for r := range s.Ranks {
			split := func(steps []ir.Step) (w, other string) {
				for _, st := range steps {
					if st.Kind == ir.BackwardWeight {
						w += st.String() + " "
					} else {
						other += st.String() + " "
					}
				}
				return w, other
			}
			w0, o0 := split(s.Ranks[r])
			w1, o1 := split(f.Ranks[r])
			if w0 != w1 || o0 != o1 {
				t.Fatalf("%s rank %d: FillW reordered steps other than moving Ws later:\n%s\n%s", name, r, rankLines(s), rankLines(f))
			}
		}
		q, _, err := Lower(f, Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := sim.Run(q, c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Makespan != after {
			t.Errorf("%s: lowered makespan %v, ideal %v", name, got.Makespan, after)
		}
	}
	if improved < 10 {
		t.Errorf("FillW improved only %d orders", improved)
	}
}
