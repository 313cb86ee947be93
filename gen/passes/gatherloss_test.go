package passes

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
)

// TestGatherLoss: -gather-loss on ends every rank's program with one
// GATHER_LOSS, training and forward-only programs alike, and leaves a
// program that holds one as it is; values other than "on" are refused.
func TestGatherLoss(t *testing.T) {
	for _, fwd := range []bool{false, true} {
		q, _, err := Lower(oneF1B(3, 4), Options{ForwardOnly: fwd, Set: map[string]string{"gather-loss": "on"}})
		if err != nil {
			t.Fatal(err)
		}
		for r, steps := range q.Ranks {
			n := 0
			for _, st := range steps {
				if st.Kind == abi.GatherLoss {
					n++
				}
			}
			if n != 1 || steps[len(steps)-1].Kind != abi.GatherLoss {
				t.Errorf("forward-only %v: rank %d has %d GATHER_LOSS, last step %s; want one, last", fwd, r, n, steps[len(steps)-1])
			}
		}
		if again := GatherLoss(q); len(again.Ranks[0]) != len(q.Ranks[0]) {
			t.Errorf("GatherLoss of a program with GATHER_LOSS added steps")
		}
	}
	if _, _, err := Lower(oneF1B(2, 2), Options{Set: map[string]string{"gather-loss": "yes"}}); err == nil || !strings.Contains(err.Error(), "want on") {
		t.Errorf("-gather-loss yes: %v; want an error asking for on", err)
	}
}
