package auto

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/passes"
)

// tinyModel is examples/models/tiny.json: four layers, F = I = W = 1
// (R defaults to F), act 1.
func tinyModel() model.Model {
	var m model.Model
	for range 4 {
		m.Layers = append(m.Layers, model.Layer{F: 1, I: 1, W: 1, Act: 1})
	}
	return m
}

// TestSynthBoundCountsRecompute: under a recompute policy the bound
// pilotPlans compares a synthesized order with counts the policy's
// RECOMPUTE work, as the lowered makespans it is compared with do. The
// tiny model at P = 2, M = 4 on synth(loop) V = 2 (stages 0 and 2 on rank
// 0, 1 and 3 on rank 1, a layer each), -recompute full: each rank runs 2
// stages × 4 micro-batches × (F 1 + R 1 + I 1 + W 1) = 32, and rank 1
// waits for stage 0's first F (1) before any of it: 33. Without the
// RECOMPUTE steps the same order's bound (under the cap 3) leaves the R
// out: it is lower.
func TestSynthBoundCountsRecompute(t *testing.T) {
	sp := splitModel(tinyModel(), false)
	pl := synthPlacement{"synth(loop)", 2, false}.placement(2)
	part, err := model.Even(4, pl.Stages())
	if err != nil {
		t.Fatal(err)
	}
	f, err := synthesize(ir.Config{Schedule: Name, Ranks: 2, Micro: 4}, sp, pl, part, 3)
	if err != nil || f == nil {
		t.Fatalf("synthesize: %v, %v", f, err)
	}
	full, err := synthBound(f, sp, "full")
	if err != nil || full != 33 {
		t.Errorf("bound under -recompute full: %v (%v); want 33", full, err)
	}
	plain, err := synthBound(f, sp, "")
	if err != nil || !(plain < full) {
		t.Errorf("bound without recompute: %v (%v); want one below %v, without the R", plain, err, full)
	}
	if none, err := synthBound(f, sp, "none"); err != nil || none != plain {
		t.Errorf("bound under -recompute none: %v (%v); want the plain %v", none, err, plain)
	}
}

// TestAutoSkipsBeatenSynthesis: `-schedule auto -model tiny.json
// -recompute full -mem 3` at P = 2, M = 4 chooses dualpipev V = 2 (30), a
// family; each synthesized placement's bound with its RECOMPUTE work is
// 33, so no order of it can win and the search anneals, rolls out and
// reinserts none of them (it did all three, some 40 s of CPU, before
// familyBest).
func TestAutoSkipsBeatenSynthesis(t *testing.T) {
	var steps []string
	opt := Options{
		Options:  gen.Options{Passes: passes.Options{Set: map[string]string{recomputeOption: "full"}}},
		MemLimit: 3, Split: splitModel(tinyModel(), false),
		Progress: func(step string, _, _ int) { steps = append(steps, step) },
	}
	res, err := Lower(ir.Config{Schedule: Name, Ranks: 2, Micro: 4}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if res.Config.Schedule != "dualpipev" || res.Config.Virtual != 2 {
		t.Errorf("auto chose %s V=%d; want dualpipev V=2", res.Config.Schedule, res.Config.Virtual)
	}
	for _, c := range res.Candidates {
		if c.Config.Schedule == "dualpipev" && c.Config.Virtual == 2 && c.Makespan != 30 {
			t.Errorf("dualpipev V=2: makespan %v; want 30", c.Makespan)
		}
	}
	for _, s := range steps {
		if strings.HasPrefix(s, "annealing") || strings.HasPrefix(s, "rolling out") {
			t.Errorf("progress %q: the synthesized orders cannot beat dualpipev's 30", s)
		}
	}
}
