package pipe_test

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// recomputeExec is one rank holding one stage, which recomputes when
// recompute is set (Spec.Recompute).
func recomputeExec(t *testing.T, st *affine, recompute bool) *pipe.Exec {
	t.Helper()
	sp := pipe.Spec{Schedule: "test-recompute", Ranks: 1, Stages: 1, Micro: 2, Slots: []int{2}, RankOf: []int{0}, Fingerprint: "test:recompute"}
	if recompute {
		sp.Recompute = []int{0}
	}
	x, err := pipe.New(pipe.Config{Rank: 0, Spec: sp, Stages: map[int]pipe.Stage{0: st}, Loss: mse{}, Data: &data{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

func op(k pipe.OpKind, micro, slot int) pipe.Op {
	return pipe.Op{Kind: k, Stage: 0, Micro: int32(micro), Peer: -1, Slot: int32(slot), Src: -1}
}

// TestRecompute: with Spec.Recompute an F keeps only the input and
// RECOMPUTE runs the Forward again before the backward, which then gets
// the same losses and parameters as without; each misuse fails the step
// with its reason, and Spec.Validate refuses a stage out of range or
// out of order.
func TestRecompute(t *testing.T) {
	plain := []pipe.Op{op(pipe.OpDataLoad, 0, 0), op(pipe.OpForward, 0, 0), op(pipe.OpDataLoad, 1, 1), op(pipe.OpForward, 1, 1),
		op(pipe.OpBackward, 0, 0), op(pipe.OpBackward, 1, 1), optOp}
	re := []pipe.Op{op(pipe.OpDataLoad, 0, 0), op(pipe.OpForward, 0, 0), op(pipe.OpDataLoad, 1, 1), op(pipe.OpForward, 1, 1),
		op(pipe.OpRecompute, 0, 0), op(pipe.OpBackward, 0, 0), op(pipe.OpRecompute, 1, 1), op(pipe.OpBackward, 1, 1), optOp}
	a, b := &affine{A: 0.5, B: 0.1}, &affine{A: 0.5, B: 0.1}
	xa, xb := recomputeExec(t, a, false), recomputeExec(t, b, true)
	for range 2 {
		if err := pipe.Run(xa, func(x *pipe.Exec) error { return pipe.Interpret(x, plain) }); err != nil {
			t.Fatal(err)
		}
		if err := pipe.Run(xb, func(x *pipe.Exec) error { return pipe.Interpret(x, re) }); err != nil {
			t.Fatal(err)
		}
		if la, lb := xa.Losses(), xb.Losses(); la[0] != lb[0] || la[1] != lb[1] {
			t.Errorf("losses %v with recompute, %v without", lb, la)
		}
	}
	if a.A != b.A || a.B != b.B || b.FwdCalls != 2*a.FwdCalls {
		t.Errorf("params (%v, %v) with recompute, (%v, %v) without; Forward calls %d, %d", b.A, b.B, a.A, a.B, b.FwdCalls, a.FwdCalls)
	}
	for _, tc := range []struct {
		name      string
		recompute bool
		ops       []pipe.Op
		words     string
	}{
		{"a stage that does not recompute", false, []pipe.Op{op(pipe.OpDataLoad, 0, 0), op(pipe.OpForward, 0, 0), op(pipe.OpRecompute, 0, 0)}, "stage 0 does not recompute"},
		{"before its F", true, []pipe.Op{op(pipe.OpDataLoad, 0, 0), op(pipe.OpRecompute, 0, 0)}, "RECOMPUTE follows the chunk's F"},
		{"twice", true, []pipe.Op{op(pipe.OpDataLoad, 0, 0), op(pipe.OpForward, 0, 0), op(pipe.OpRecompute, 0, 0), op(pipe.OpRecompute, 0, 0)}, "a second RECOMPUTE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := recomputeExec(t, &affine{A: 1}, tc.recompute)
			err := pipe.Run(x, func(x *pipe.Exec) error { return pipe.Interpret(x, tc.ops) })
			if err == nil || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("got %v; want an error saying %q", err, tc.words)
			}
		})
	}
	for _, rc := range [][]int{{1}, {-1}, {0, 0}} {
		sp := pipe.Spec{Schedule: "s", Ranks: 1, Stages: 1, Micro: 1, Slots: []int{1}, RankOf: []int{0}, Recompute: rc}
		if err := sp.Validate(); err == nil || !strings.Contains(err.Error(), "Recompute") {
			t.Errorf("Recompute %v: %v", rc, err)
		}
	}
}
