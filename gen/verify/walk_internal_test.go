package verify

import (
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// TestWalkKinds: the walk's one-load table agrees with what it stands for
// (abi's classes, atOf, extraOf, the rules), and the kinds fastRun walks
// are leaves with a chunk table and no rule.
func TestWalkKinds(t *testing.T) {
	wks := walkKinds()
	for k := range wks {
		kind, w := ir.Kind(k), wks[k]
		if int(w.at) != atOf(kind) {
			t.Errorf("%s: at %d, atOf %d", kind, w.at, atOf(kind))
		}
		if comm := w.fl&wkComm != 0; comm != kind.IsComm() {
			t.Errorf("%s: wkComm %v, IsComm %v", kind, comm, kind.IsComm())
		}
		if (kind.IsFSDP() || kind.IsSwap()) && w.extra != extraOf(kind) || !(kind.IsFSDP() || kind.IsSwap()) && w.extra != 0 {
			t.Errorf("%s: extra %d, extraOf %d", kind, w.extra, extraOf(kind))
		}
		ruled := !kind.IsComm() && !kind.IsFSDP() && !kind.IsSwap() && rules[k] != nil
		if got := w.fl&wkRuled != 0; got != ruled {
			t.Errorf("%s: wkRuled %v, want %v", kind, got, ruled)
		}
		if w.fl&wkFast != 0 && (!kind.Valid() || kind.IsOverlap() || kind.IsBatch() || !kind.HasMicro() || w.at < 0 || rules[k] != nil || kind.IsCompute() == kind.IsComm()) {
			t.Errorf("%s: fastRun walks it, but it is not a leaf of a chunk table without a rule", kind)
		}
		if w.needs >= 0 && (w.fl&wkFast == 0 || !kind.IsSend()) {
			t.Errorf("%s: needs %d, but it is not a send fastRun walks", kind, w.needs)
		}
	}
	for _, k := range []ir.Kind{ir.Forward, ir.Backward, ir.BackwardInput, ir.BackwardWeight, ir.SendF, ir.RecvF, ir.SendB, ir.RecvB} {
		if wks[k].fl&wkFast == 0 {
			t.Errorf("%s: not on the fast path", k)
		}
	}
}
