package emit

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

// TestEmitsEveryKind: Emit writes each step kind's call as abi's row names
// it, x.<Kind.Method>(...), and no fused call takes a kind's method name.
func TestEmitsEveryKind(t *testing.T) {
	for _, k := range abi.Kinds() {
		if k.IsOverlap() {
			f := op{method: k.Method(), kind: k, sub: []op{{kind: ir.Forward}, {kind: ir.BackwardInput}}}
			if got := string(f.overlapCall()); !strings.HasPrefix(got, "x."+k.Method()+"(") || !strings.Contains(got, "pipe.OpBackwardInput, ") {
				t.Errorf("%v: overlap call %s", k, got)
			}
			continue
		}
		o := op{method: k.Method(), kind: k, stage: 0, micro: 0, peer: ir.None, slot: 0, src: ir.None}
		st := o.stmt()
		got := string(st.code)
		if st.code == nil {
			got = "x." + st.method + "(at)"
		}
		if !strings.HasPrefix(got, "x."+k.Method()+"(") {
			t.Errorf("%v: emitted %s, want a call of x.%s", k, got, k.Method())
		}
	}
	for _, f := range fusions {
		if k, ok := kindOfMethod(f.Method); ok {
			t.Errorf("fused call x.%s has the name of %v's method", f.Method, k)
		}
	}
}

func kindOfMethod(name string) (abi.Kind, bool) {
	for _, k := range abi.Kinds() {
		if k.Method() == name {
			return k, true
		}
	}
	return abi.Invalid, false
}
