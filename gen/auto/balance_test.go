package auto

import (
	"slices"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/partition"
	"github.com/ppgen/ppgen/gen/synth"
	"github.com/ppgen/ppgen/gen/verify"
	"github.com/ppgen/ppgen/internal/long"
)

// TestBalancePlan: on the LLM-like model at P = 4, M = 8 within 18.5, the
// zigzag with V = 8 leaves rank 0 the most work whatever the split (the
// embedding's stage, the head's and six blocks). balancePlan moves a
// stage off it: the busiest rank of the new placement has less work, its
// order is faster, verifies and keeps the limit, every rank keeps a
// stage, and the search is deterministic. On the uniform model no move
// lowers the busiest rank, and it returns nil. That in the long suite;
// by default the same on the LLM-like model with 16 blocks (18 layers) on
// the zigzag with V = 4 (16 stages; rank 0 again holds the embedding's
// stage and the head's), M = 4, within two micro-batches of a rank's
// share (10.5).
func TestBalancePlan(t *testing.T) {
	llm := readExampleModel(t, "llm.json")
	cfg, V := ir.Config{Ranks: 4, Micro: 4}, 4
	if long.Enabled() {
		cfg.Micro, V = 8, 8
	} else {
		llm = llmBlocks(llm, 16)
	}
	limit := 2 * totalAct(llm) / float64(cfg.Ranks)
	top := func(t *testing.T, sp *SplitModel, pl ir.Placement) *plan {
		t.Helper()
		part, err := partition.Placed(sp.Model, pl)
		if err != nil {
			t.Fatal(err)
		}
		f, err := synthesize(cfg, sp, pl, part, limit)
		if err != nil || f == nil {
			t.Fatalf("%v, %v", f, err)
		}
		return &plan{pk: synthPlacement{"synth(zigzag)", V, true}, pl: pl, best: f, bestLow: synth.Score{Makespan: f.ms}}
	}
	run := func(sp *SplitModel) func(ir.Program, model.Partition) (synth.Score, bool) {
		return func(q ir.Program, part model.Partition) (synth.Score, bool) {
			r, mem, err := sp.run(q, part)
			if err != nil || mem > limit*(1+1e-9) {
				return synth.Score{}, false
			}
			return synth.Score{Makespan: r.Makespan, Finish: synth.RankFinish(r)}, true
		}
	}

	sp := splitModel(llm, true)
	from := top(t, sp, ir.Zigzag(4, V))
	bp, err := balancePlan(cfg, sp, from, limit, run(sp))
	if err != nil || bp == nil {
		t.Fatalf("balancePlan: %v, %v", bp, err)
	}
	busiest := func(pl ir.Placement, part model.Partition) float64 {
		l, err := rankLoads(sp, pl, part)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Max(l)
	}
	if b, a := busiest(from.pl, from.best.part), busiest(bp.pl, bp.best.part); !(a < b) {
		t.Errorf("busiest rank %g after, %g before", a, b)
	}
	if !(bp.bestLow.Makespan < from.bestLow.Makespan) {
		t.Errorf("balanced %g, not below %g", bp.bestLow.Makespan, from.bestLow.Makespan)
	}
	if bp.pk.name != BalancedName || !slices.Equal(bp.best.prog.Placement.RankOf, bp.pl.RankOf) {
		t.Errorf("plan %s on %v, its order on %v", bp.pk.name, bp.pl, bp.best.prog.Placement)
	}
	if _, err := ir.Table(4, bp.pl.RankOf); err != nil {
		t.Error(err)
	}
	if _, err := verify.Check(bp.best.prog, verify.Options{}); err != nil {
		t.Error(err)
	}
	if _, mem, err := sp.run(bp.best.prog, bp.best.part); err != nil || mem > limit*(1+1e-9) {
		t.Errorf("memory %g, %v; want at most %g", mem, err, limit)
	}
	again, err := balancePlan(cfg, sp, from, limit, run(sp))
	if err != nil || again == nil || !slices.Equal(again.pl.RankOf, bp.pl.RankOf) || again.bestLow.Makespan != bp.bestLow.Makespan {
		t.Errorf("not deterministic: %v then %v", bp.pl, again)
	}
	t.Logf("M=%d within %g: %g on %v → %g on %v", cfg.Micro, limit, from.bestLow.Makespan, from.pl, bp.bestLow.Makespan, bp.pl)

	uni := splitModel(readExampleModel(t, "uniform.json"), true)
	bu, err := balancePlan(cfg, uni, top(t, uni, ir.Zigzag(4, V)), limit, run(uni))
	if err != nil || bu != nil {
		t.Errorf("uniform model: %v, %v; want no move", bu, err)
	}
}

// llmBlocks is the LLM-like model m (an embedding, blocks, a head) with
// its first n blocks only.
func llmBlocks(m model.Model, n int) model.Model {
	m.Layers = append(slices.Clone(m.Layers[:1+n]), m.Layers[len(m.Layers)-1])
	return m
}
