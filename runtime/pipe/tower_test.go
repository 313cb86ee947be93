package pipe_test

import (
	"errors"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// failTower is a pipe.Tower whose Backward is never reached in these tests.
type failTower struct{}

func (failTower) Forward(_ int, in *tensor.Dense) (*tensor.Dense, error) { return in, nil }
func (failTower) Backward(int, *tensor.Dense) error                      { return errors.New("unreachable") }
func (failTower) Grads() []*tensor.Dense                                 { return nil }

// TestTowerWithoutBackward: OPT_STEP with a Config.Tower whose first-stage
// backward never ran fails the rank, naming the micro-batch.
func TestTowerWithoutBackward(t *testing.T) {
	sp := pipe.Spec{Schedule: "x", Ranks: 1, Stages: 1, Micro: 1, Slots: []int{1}, RankOf: []int{0}, Fingerprint: "test:tower"}
	x, err := pipe.New(pipe.Config{Rank: 0, Spec: sp, Stages: map[int]pipe.Stage{0: noop{}}, Loss: noop{}, Data: noop{}, Tower: failTower{}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	x.OptStep()
	if err := x.Err(); err == nil || !strings.Contains(err.Error(), "the tower's backward of micro 0: the first stage's backward kept no input gradient") {
		t.Errorf("err = %v, want the missing input gradient named", err)
	}
}

// TestWithPreprocess: Input runs the preprocess on the loaded input and
// names the micro-batch when it fails; Target is the source's.
func TestWithPreprocess(t *testing.T) {
	in := tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{1, 2}))
	src := pipe.MicroBatches{Inputs: []*tensor.Dense{in, in}, Targets: []*tensor.Dense{in, in}}
	double := pipe.WithPreprocess(src, func(m int, x *tensor.Dense) (*tensor.Dense, error) {
		if m == 1 {
			return nil, errors.New("bad image")
		}
		return tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{2 * x.Float64s()[0], 2 * x.Float64s()[1]})), nil
	})
	got, err := double.Input(0)
	if err != nil || got.Float64s()[1] != 4 {
		t.Errorf("Input(0) = %v, %v; want [2 4]", got, err)
	}
	if _, err := double.Input(1); err == nil || !strings.Contains(err.Error(), "the preprocess of micro-batch 1: bad image") {
		t.Errorf("Input(1) err = %v, want the preprocess's error named", err)
	}
	if _, err := double.Input(5); err == nil || !strings.Contains(err.Error(), "no input for micro-batch 5") {
		t.Errorf("Input(5) err = %v, want the source's error", err)
	}
	if tg, err := double.Target(0); err != nil || tg != in {
		t.Errorf("Target(0) = %v, %v; want the source's", tg, err)
	}
}

// TestTowerRefusedForwardOnly: a forward-only program has no OPT_STEP for
// the tower's backward; New says to use WithPreprocess.
func TestTowerRefusedForwardOnly(t *testing.T) {
	sp := pipe.Spec{Schedule: "x", Ranks: 1, Stages: 1, Micro: 1, Slots: []int{1}, RankOf: []int{0}, Fingerprint: "test:tower", ForwardOnly: true}
	_, err := pipe.New(pipe.Config{Rank: 0, Spec: sp, Stages: map[int]pipe.Stage{0: noop{}}, Loss: noop{}, Data: noop{}, Tower: failTower{}})
	if err == nil || !strings.Contains(err.Error(), "WithPreprocess") {
		t.Errorf("New = %v, want the forward-only refusal", err)
	}
}
