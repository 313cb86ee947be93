package e2e_test

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/emit"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/tune"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// TestTimelineTuneModel: a pipe.Timeline of a -recompute model program
// (markedModel's marks, every layer F 1: stage 0 re-runs layers 1 and 3
// of 4, R share 0.5; stage 1 all of them, whole; stage 2 layer 2, R
// share 0.25) writes the Spec's RecomputeCost, which the emitted file
// carries, into its trace, and `ppgen tune` (gen/tune) fits each stage's
// whole R without -recompute-cost: with every R call set to 300 µs,
// 300 / 0.5 = 600 µs, 300 µs and 300 / 0.25 = 1200 µs. With the Spec's
// RecomputeCost left out (a hand-written Spec) tune refuses stage 0,
// naming the flag.
func TestTimelineTuneModel(t *testing.T) {
	cfg := ir.Config{Schedule: "1f1b", Ranks: 3, Micro: 6}
	opt := gen.Options{Passes: passes.Options{Set: map[string]string{"recompute": "model"}}}
	opt.Passes.Marked = markedModel(t, cfg.Ranks).EvenMarks
	src, res, err := gen.Generate(cfg, opt, emit.Options{Package: "p", Table: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := "RecomputeCost:   []float64{0.5, 1.0, 0.25},"; !bytes.Contains(src, []byte(want)) {
		t.Fatalf("the emitted Spec lacks %q", want)
	}
	p := progOf(t, "1f1b-model", cfg, opt, src, res)
	for _, tc := range []struct {
		name string
		cost []float64
		err  string
	}{
		{name: "generated Spec", cost: p.spec.RecomputeCost},
		{name: "without RecomputeCost", err: "stage 0 has RECOMPUTE calls of the layers a -model file marks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := p
			q.spec.RecomputeCost = tc.cost
			tl := &pipe.Timeline{}
			trainNN(t, q, nil, tl)
			var buf bytes.Buffer
			if err := tl.WriteTrace(&buf, "1f1b-model", q.ops); err != nil {
				t.Fatal(err)
			}
			fit, err := tune.Read(bytes.NewReader(setRDur(t, buf.Bytes(), 300)), tune.Options{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "-recompute-cost") {
					t.Fatalf("tune: %v; want an error containing %q and naming -recompute-cost", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for s, want := range []struct{ r, share float64 }{{0.6, 0.5}, {0.3, 1}, {1.2, 0.25}} {
				if g := fit.Stages[s]; g.RCalls != e2eSteps*cfg.Micro || g.RShare != want.share || math.Abs(g.R-want.r) > 1e-9 {
					t.Errorf("stage %d: R %g ms from %d calls of share %g; want %g from %d of share %g", s, g.R, g.RCalls, g.RShare, want.r, e2eSteps*cfg.Micro, want.share)
				}
			}
		})
	}
}

// setRDur returns the Chrome trace with the dur of every R call set to
// dur µs (the measured ones vary).
func setRDur(t *testing.T, trace []byte, dur float64) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(trace, &doc); err != nil {
		t.Fatal(err)
	}
	events, _ := doc["traceEvents"].([]any)
	n := 0
	for _, e := range events {
		ev, _ := e.(map[string]any)
		if args, _ := ev["args"].(map[string]any); args != nil && args["kind"] == "R" && ev["ph"] == "X" {
			ev["dur"] = dur
			n++
		}
	}
	if n == 0 {
		t.Fatal("the trace holds no R call")
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
