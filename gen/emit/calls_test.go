package emit

import (
	"testing"

	"github.com/ppgen/ppgen/abi"
)

// TestCallsCoverKinds: every step kind has a runtime call with a method and
// an op constant, and no two kinds share a method.
func TestCallsCoverKinds(t *testing.T) {
	have := map[abi.Kind]Call{}
	byMethod := map[string]abi.Kind{}
	for _, c := range Calls() {
		have[c.Kind] = c
		if k, dup := byMethod[c.Method]; dup {
			t.Errorf("%v and %v both call x.%s", k, c.Kind, c.Method)
		}
		byMethod[c.Method] = c.Kind
	}
	for _, k := range abi.Kinds() {
		c, ok := have[k]
		if !ok {
			t.Errorf("%v has no entry in calls: Emit would refuse it", k)
			continue
		}
		if c.Method == "" || c.Op == "" {
			t.Errorf("%v: method %q, op constant %q", k, c.Method, c.Op)
		}
	}
}
