package partition

import (
	"errors"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
)

// TestCompare: on the LLM-like model the split found beats the even one,
// its stages cover the layers in order on the placement's ranks, each
// bound is under its makespan, and an error of Lower is returned.
func TestCompare(t *testing.T) {
	m := llm(14)
	cfg := ir.Config{Schedule: "1f1b", Ranks: 4, Virtual: 1, Micro: 8}
	compute := build(t, cfg.Schedule, cfg.Ranks, cfg.Virtual, cfg.Micro)
	lowered := 0
	s := Schedule{Config: cfg, Compute: compute, Lower: func(part model.Partition) (ir.Program, float64, float64, error) {
		lowered++
		ev, err := Evaluate(m, part, compute, Options{})
		return compute, ev.Makespan, ev.Mem, err
	}}
	rep, err := Compare(m, s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if lowered != 2 || rep.Schedule != "1f1b" || rep.Micro != 8 || rep.Copies != 1 || rep.LayerCount != 16 || len(rep.Stages) != 4 || rep.Evals == 0 {
		t.Errorf("lowered %d times; report %+v", lowered, rep)
	}
	next := 0
	for i, st := range rep.Stages {
		if st.Stage != i || st.Rank != compute.Placement.RankOf[i] || st.First != next || st.End <= st.First || st.F <= 0 || st.Layers == "" {
			t.Errorf("stage %d: %+v after layer %d", i, st, next)
		}
		next = st.End
	}
	if next != rep.LayerCount {
		t.Errorf("stages end at %d of %d layers", next, rep.LayerCount)
	}
	if !(rep.Makespan < rep.EvenMakespan) || rep.LowerBound > rep.Makespan || rep.EvenBound > rep.EvenMakespan || !(rep.Mem > 0) {
		t.Errorf("makespan %g (bound %g), even %g (bound %g), mem %g", rep.Makespan, rep.LowerBound, rep.EvenMakespan, rep.EvenBound, rep.Mem)
	}
	broken := errors.New("broken")
	s.Lower = func(model.Partition) (ir.Program, float64, float64, error) { return ir.Program{}, 0, 0, broken }
	if _, err := Compare(m, s, Options{}); !errors.Is(err, broken) {
		t.Errorf("Lower failing: %v", err)
	}
}
