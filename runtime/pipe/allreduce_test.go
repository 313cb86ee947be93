package pipe_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/pipe"
)

var reduceOp = pipe.Op{Kind: pipe.OpAllReduce, Stage: -1, Micro: -1, Peer: -1, Slot: -1, Src: -1}

// reduceExec is one rank holding one stage, with hook as its
// Config.AllReduce.
func reduceExec(t *testing.T, hook func(n int) error) *pipe.Exec {
	t.Helper()
	sp := pipe.Spec{Schedule: "test-reduce", Ranks: 1, Stages: 1, Micro: 1, Slots: []int{1}, RankOf: []int{0}, Fingerprint: "test:reduce"}
	x, err := pipe.New(pipe.Config{Rank: 0, Spec: sp, Stages: map[int]pipe.Stage{0: &affine{A: 1}}, Loss: mse{}, Data: &data{}, AllReduce: hook})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

// TestAllReduceNumbers: the hook gets each ALL_REDUCE's number in the
// iteration, from 0 again in every iteration.
func TestAllReduceNumbers(t *testing.T) {
	var got []int
	x := reduceExec(t, func(n int) error { got = append(got, n); return nil })
	ops := []pipe.Op{reduceOp, reduceOp, optOp, reduceOp}
	for range 2 {
		if err := pipe.Run(x, func(x *pipe.Exec) error { return pipe.Interpret(x, ops) }); err != nil {
			t.Fatal(err)
		}
	}
	if want := []int{0, 1, 2, 0, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("the hook got %v; want %v", got, want)
	}
}

// TestAllReduceMisuse: each misuse fails the step, naming it and the fix.
func TestAllReduceMisuse(t *testing.T) {
	failed := errors.New("the reduction failed")
	for _, tc := range []struct {
		name  string
		hook  func(int) error
		ops   []pipe.Op
		words string
	}{
		{"no hook", nil, []pipe.Op{reduceOp}, "pipe.Config.AllReduce is nil"},
		{"the hook fails", func(int) error { return failed }, []pipe.Op{reduceOp}, "ALL_REDUCE: reduction 0 of the iteration: the reduction failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := reduceExec(t, tc.hook)
			err := pipe.Run(x, func(x *pipe.Exec) error { return pipe.Interpret(x, tc.ops) })
			if err == nil || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("got %v; want an error saying %q", err, tc.words)
			}
		})
	}
}
