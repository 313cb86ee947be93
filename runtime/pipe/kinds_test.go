package pipe

import (
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/abi"
)

// TestEveryKindDispatched: for every kind of abi's table, Exec has the
// method the kind's row names (abi.Kind.Method) with the signature of its
// shape, and Interpret's tables (kinds_gen.go) call exactly that method.
func TestEveryKindDispatched(t *testing.T) {
	exec := reflect.TypeFor[*Exec]()
	sigs := map[abi.Shape]any{
		abi.ArgsLocal:   (*Exec).F,
		abi.ArgsComm:    (*Exec).F,
		abi.ArgsCompute: (*Exec).F,
		abi.ArgsStage:   (*Exec).Unshard,
		abi.ArgsNone:    (*Exec).OptStep,
		abi.ArgsOverlap: (*Exec).OverlapFB,
	}
	for _, k := range abi.Kinds() {
		m, ok := exec.MethodByName(k.Method())
		if !ok {
			t.Errorf("%v: Exec has no method %s (abi's row names it)", k, k.Method())
			continue
		}
		want := reflect.TypeOf(sigs[k.Shape()])
		if k == abi.OverlapBF { // the backward sub-step's kind comes first
			want = reflect.TypeOf((*Exec).OverlapBF)
		}
		if m.Type != want {
			t.Errorf("%v: Exec.%s is %v, want %v for its shape", k, k.Method(), m.Type, want)
		}
		var f any
		switch {
		case packedSteps[k] != nil:
			f = packedSteps[k]
		case stageSteps[k] != nil:
			f = stageSteps[k]
		case bareSteps[k] != nil:
			f = bareSteps[k]
		}
		if k.Shape() == abi.ArgsOverlap {
			if f != nil {
				t.Errorf("%v: an overlap in a dispatch table", k)
			}
			continue
		}
		if f == nil {
			t.Errorf("%v: Interpret has no method for it: run go generate ./runtime/pipe", k)
			continue
		}
		name := runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
		if !strings.HasSuffix(name, ".(*Exec)."+k.Method()) {
			t.Errorf("%v: Interpret calls %s, want Exec.%s", k, name, k.Method())
		}
	}
}
