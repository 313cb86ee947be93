package train_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// TestTimelineRecomputeCost: a Timeline of the generated marked program
// (-recompute model with marked.json: stages 0..2 re-run their second
// layer, act 2 of the stage's 3 but F 1 of its 2) writes the generated
// Spec's RecomputeCost, the marked layers' R share 0.5, into the trace's
// otherData (gen/tune fits the whole stage's R from it:
// e2e's TestTimelineTuneModel); with the Spec's RecomputeCost left out
// (a hand-written Spec) it names the stages whose R share it does not
// know.
func TestTimelineRecomputeCost(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cost      []float64
		want, not string
	}{
		{"generated Spec", marked.Spec.RecomputeCost, `"recompute_cost":[0.5,0.5,0.5,1]`, "recompute_cost_unknown"},
		{"without RecomputeCost", nil, `"recompute_cost":[1,1,1,1],"recompute_cost_unknown":[0,1,2]`, "0.5"},
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
			i := strings.Index(buf.String(), `"otherData"`)
			if i < 0 {
				t.Fatalf("the trace has no otherData:\n%s", buf.String())
			}
			other := buf.String()[i:]
			if !strings.Contains(other, tc.want) || strings.Contains(other, tc.not) {
				t.Errorf("the trace's %s; want %s, not %s", other, tc.want, tc.not)
			}
		})
	}
}
