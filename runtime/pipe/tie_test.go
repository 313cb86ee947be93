package pipe_test

import (
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// tiedAffine is an affine stage holding tied gradients g (pipe.Tied).
type tiedAffine struct {
	*affine
	g []*tensor.Dense
}

func (s *tiedAffine) TiedGrads() []*tensor.Dense { return s.g }

func vec(v ...float64) *tensor.Dense {
	return tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(v))
}

// tieExec is one rank holding stages 0..n-1 with Spec.Ties ties; stage s's
// tied gradient is grads[s].
func tieExec(t *testing.T, ties []pipe.Tie, grads ...*tensor.Dense) (*pipe.Exec, []*tiedAffine) {
	t.Helper()
	n := len(grads)
	sp := pipe.Spec{Schedule: "test-tie", Ranks: 1, Stages: n, Micro: 1, Slots: []int{1}, RankOf: make([]int, n), Fingerprint: "test:tie", Ties: ties}
	held := map[int]pipe.Stage{}
	var st []*tiedAffine
	for s := range n {
		a := &tiedAffine{affine: &affine{A: 1}, g: []*tensor.Dense{grads[s]}}
		st = append(st, a)
		held[s] = a
	}
	x, err := pipe.New(pipe.Config{Rank: 0, Spec: sp, Stages: held, Loss: mse{}, Data: &data{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x, st
}

func tieOp(s int) pipe.Op {
	return pipe.Op{Kind: pipe.OpTieGrad, Stage: int32(s), Micro: -1, Peer: -1, Slot: -1, Src: -1}
}

var optOp = pipe.Op{Kind: pipe.OpOptStep, Stage: -1, Micro: -1, Peer: -1, Slot: -1, Src: -1}

// TestTieGradLocal: a tie within one rank sums both copies' gradients into
// both (A's + B's), once.
func TestTieGradLocal(t *testing.T) {
	x, st := tieExec(t, []pipe.Tie{{A: 0, B: 1}}, vec(1, 0.25), vec(2, 0.5))
	if err := pipe.Run(x, func(x *pipe.Exec) error { return pipe.Interpret(x, []pipe.Op{tieOp(0), optOp}) }); err != nil {
		t.Fatal(err)
	}
	for s, a := range st {
		if got := a.g[0].Float64s(); got[0] != 3 || got[1] != 0.75 {
			t.Errorf("stage %d's tied gradient is %v after TIE_GRAD; want [3 0.75]", s, got)
		}
	}
}

// TestTieGradMisuse: each misuse fails the step, naming what to do.
func TestTieGradMisuse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ties  []pipe.Tie
		grads []*tensor.Dense
		ops   []pipe.Op
		words string
	}{
		{"a tie on one rank named by its second stage", []pipe.Tie{{A: 0, B: 1}}, []*tensor.Dense{vec(1), vec(2)}, []pipe.Op{tieOp(1), optOp}, "TIE_GRAD 0 sums them"},
		{"twice", []pipe.Tie{{A: 0, B: 1}}, []*tensor.Dense{vec(1), vec(2)}, []pipe.Op{tieOp(0), tieOp(0), optOp}, "summed already"},
		{"OPT_STEP without it", []pipe.Tie{{A: 0, B: 1}}, []*tensor.Dense{vec(1), vec(2)}, []pipe.Op{optOp}, "TIE_GRAD 0 comes before OPT_STEP"},
		{"a stage in no tie", []pipe.Tie{{A: 0, B: 1}}, []*tensor.Dense{vec(1), vec(2), vec(3)}, []pipe.Op{tieOp(2)}, "in no tie"},
		{"shapes differ", []pipe.Tie{{A: 0, B: 1}}, []*tensor.Dense{vec(1), vec(2, 3)}, []pipe.Op{tieOp(0)}, "stage 0 and float64 (2) on stage 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, _ := tieExec(t, tc.ties, tc.grads...)
			err := pipe.Run(x, func(x *pipe.Exec) error { return pipe.Interpret(x, tc.ops) })
			if err == nil || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("got %v; want an error saying %q", err, tc.words)
			}
		})
	}
}

// TestTiedSpec: Spec.Validate refuses bad ties, and pipe.New a tied stage
// that is not a pipe.Tied.
func TestTiedSpec(t *testing.T) {
	base := pipe.Spec{Schedule: "t", Ranks: 1, Stages: 3, Micro: 1, Slots: []int{1}, RankOf: []int{0, 0, 0}}
	for _, tc := range []struct {
		ties  []pipe.Tie
		words string
	}{
		{[]pipe.Tie{{A: 0, B: 3}}, "outside"},
		{[]pipe.Tie{{A: 1, B: 1}}, "itself"},
		{[]pipe.Tie{{A: 0, B: 1}, {A: 1, B: 2}}, "one tie"},
	} {
		sp := base
		sp.Ties = tc.ties
		if err := sp.Validate(); err == nil || !strings.Contains(err.Error(), tc.words) {
			t.Errorf("ties %v: %v; want an error saying %q", tc.ties, err, tc.words)
		}
	}
	sp := base
	sp.Ties = []pipe.Tie{{A: 0, B: 2}}
	held := map[int]pipe.Stage{0: &tiedAffine{affine: &affine{}}, 1: &affine{}, 2: &affine{}}
	_, err := pipe.New(pipe.Config{Rank: 0, Spec: sp, Stages: held, Loss: mse{}, Data: &data{}})
	if err == nil || !strings.Contains(err.Error(), "stage 2") || !strings.Contains(err.Error(), "pipe.Tied") {
		t.Fatalf("pipe.New with untied stage 2: %v; want an error naming stage 2 and pipe.Tied", err)
	}
}
