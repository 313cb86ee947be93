package synth_test

import (
	"reflect"
	"testing"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/gen/synth"
)

// TestExactBound: the exhaustive search's bound is taken on a small
// program of one copy with B = I + W and no overlap or swap steps, and
// refused otherwise. 1F1B on 2 ranks, M = 4 within 2 chunks per rank
// takes 15; the search, over split orders (a B is an I then its W), proves
// 13: rank 1 waits 1 for its first input, then has 12 of work, and an
// order with the W's split off runs it without a gap.
func TestExactBound(t *testing.T) {
	lower := func(cfg ir.Config, opt gen.Options) ir.Program {
		t.Helper()
		res, err := gen.Lower(cfg, opt)
		if err != nil {
			t.Fatal(err)
		}
		return res.Program
	}
	unit := sim.Cost{F: []float64{1}, B: []float64{2}, I: []float64{1}, W: []float64{1}}
	capped := sim.BoundOptions{Act: []float64{1, 1}, Cap: []float64{2, 2}}
	onef1b := lower(ir.Config{Schedule: "1f1b", Ranks: 2, Micro: 4}, gen.Options{})
	ms, err := sim.Run(onef1b, unit)
	if err != nil {
		t.Fatal(err)
	}
	if ms.Makespan != 15 {
		t.Fatalf("1f1b takes %g, want 15", ms.Makespan)
	}
	for _, tc := range []struct {
		name string
		p    ir.Program
		c    sim.Cost
		ok   bool
	}{
		{"1f1b", onef1b, unit, true},
		{"B over I + W", onef1b, sim.Cost{F: []float64{1}, B: []float64{3}, I: []float64{1}, W: []float64{1}}, false},
		{"overlap", lower(ir.Config{Schedule: "1f1b", Ranks: 2, Micro: 4}, gen.Options{Passes: passes.Options{Overlap: true}}), unit, false},
		{"two copies", lower(ir.Config{Schedule: "dualpipe", Ranks: 2, Micro: 4}, gen.Options{}), unit, false},
		{"too large", lower(ir.Config{Schedule: "1f1b", Ranks: 2, Micro: 64}, gen.Options{}), unit, false},
	} {
		got, ok := synth.ExactBound(tc.p, tc.c, capped, ms.Makespan)
		if ok != tc.ok || (ok && got != 13) {
			t.Errorf("%s: %g, %v; want ok %v at 13", tc.name, got, ok, tc.ok)
		}
	}
	// LowerBound takes the larger of the search's 13 and sim.LowerBound's
	// 15 (unsplit B's cannot beat 1F1B here), exact; without a cap it does
	// not search.
	for _, tc := range []struct {
		opt   sim.BoundOptions
		exact bool
	}{{capped, true}, {sim.BoundOptions{}, false}} {
		lb, exact, err := synth.LowerBound(onef1b, unit, tc.opt, ms.Makespan)
		if err != nil || exact != tc.exact || lb < 13 || lb > ms.Makespan {
			t.Errorf("LowerBound with %+v: %g, %v, %v; want exact %v within [13, 15]", tc.opt, lb, exact, err, tc.exact)
		}
	}
}

// TestMemoryCap: a limit in chunks (no act) is a whole number of them, at
// least one, on every stage and rank; with acts and params each rank's room
// is its limit less its stages' params, and each stage's chunk count that
// room over its act. Acts or params not one per stage are refused.
func TestMemoryCap(t *testing.T) {
	loop := ir.Loop(2, 2) // stages 0, 2 on rank 0; 1, 3 on rank 1
	for _, tc := range []struct {
		name        string
		limit       float64
		act, params []float64
		want        sim.BoundOptions
	}{
		{"chunks", 2.5, nil, nil, sim.BoundOptions{MaxLive: []int{2, 2, 2, 2}, Act: []float64{1, 1, 1, 1}, Cap: []float64{2, 2}}},
		{"under one chunk", 0.3, nil, nil, sim.BoundOptions{MaxLive: []int{1, 1, 1, 1}, Act: []float64{1, 1, 1, 1}, Cap: []float64{1, 1}}},
		{"model", 10, []float64{1, 2, 4, 0}, []float64{1, 3, 1, 1}, sim.BoundOptions{MaxLive: []int{8, 3, 2, 0}, Act: []float64{1, 2, 4, 0}, Cap: []float64{8, 6}}},
		{"params over the limit", 1, []float64{1, 1, 1, 1}, []float64{1, 1, 1, 1}, sim.BoundOptions{MaxLive: []int{1, 1, 1, 1}, Act: []float64{1, 1, 1, 1}, Cap: []float64{0, 0}}},
	} {
		got, err := synth.MemoryCap(loop, tc.limit, tc.act, tc.params)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := synth.MemoryCap(loop, 1, []float64{1, 1}, nil); err == nil {
		t.Error("two acts for four stages: no error")
	}
}
