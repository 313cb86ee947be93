package emit

import (
	"testing"

	"github.com/ppgen/ppgen/abi"
)

// TestCallsCoverKinds: every step kind has a runtime call, and a kind has a
// packed method exactly when abi says its operands travel as one At.
func TestCallsCoverKinds(t *testing.T) {
	have := map[abi.Kind]Call{}
	for _, c := range Calls() {
		have[c.Kind] = c
	}
	for _, k := range abi.Kinds() {
		c, ok := have[k]
		if !ok {
			t.Errorf("%v has no entry in calls: Emit would refuse it", k)
			continue
		}
		if (c.Packed != "") != k.Shape().Packed() {
			t.Errorf("%v: packed method %q, but abi.Shape.Packed = %v", k, c.Packed, k.Shape().Packed())
		}
		if c.Method == "" || c.Op == "" {
			t.Errorf("%v: method %q, op constant %q", k, c.Method, c.Op)
		}
	}
}
