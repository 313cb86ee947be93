package train_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/tune"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// TestTimelineTuneMarked: a Timeline of the marked program (-recompute
// model with marked.json: stage 0..2 recompute their second layer, whose
// act is 2 of the stage's 3 but whose F is 1 of its 2) writes the
// program's Spec.RecomputeCost, the marked layers' R share 0.5, into the
// trace's otherData, so `ppgen tune` fits each stage's whole R without
// -recompute-cost: with every R call set to 300 µs, 300 / 0.5 = 600 µs.
// The same run with the Spec's RecomputeCost left out (a hand-written
// Spec) is refused, naming the flag.
func TestTimelineTuneMarked(t *testing.T) {
	for _, tc := range []struct {
		name string
		cost []float64
		err  string
	}{
		{name: "generated Spec", cost: marked.Spec.RecomputeCost},
		{name: "without RecomputeCost", cost: nil, err: "-recompute-cost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := marked
			p.Spec.RecomputeCost = tc.cost
			c := config(p, 1, 1)
			c.Timeline = &pipe.Timeline{}
			run(t, c)
			var buf bytes.Buffer
			if err := c.Timeline.WriteTrace(&buf, "marked", nil); err != nil {
				t.Fatal(err)
			}
			trace := setRDur(t, buf.Bytes(), 300)
			fit, err := tune.Read(bytes.NewReader(trace), tune.Options{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("tune: %v; want an error naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for s := range 3 {
				if g := fit.Stages[s]; g.RCalls != 8 || g.RShare != 0.5 || g.R < 0.6-1e-9 || g.R > 0.6+1e-9 {
					t.Errorf("stage %d: R %g ms from %d calls of share %g; want 0.6 from 8 of share 0.5", s, g.R, g.RCalls, g.RShare)
				}
			}
			if g := fit.Stages[3]; g.RCalls != 0 {
				t.Errorf("stage 3 recomputes nothing, but has %d R calls", g.RCalls)
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
	if n != 3*8 {
		t.Fatalf("the trace holds %d R calls, want 24 (stages 0..2, 8 micro-batches)", n)
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
