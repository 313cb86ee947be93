package pipe_test

import (
	"strings"
	"testing"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// swapAffine is an affine stage that swaps its saved contexts into a box.
type swapAffine struct {
	*affine
	log *[]string
}

type swapBox struct{ saved any }

func (s *swapAffine) Offload(saved any) (any, error) {
	*s.log = append(*s.log, "offload")
	return &swapBox{saved}, nil
}

func (s *swapAffine) Load(h any) (any, error) {
	*s.log = append(*s.log, "load")
	return h.(*swapBox).saved, nil
}

// swapOps is one rank holding stages 0 and 1, two micro-batches, with chunk
// (0, 0) swapped out between its forward and backward as the swap pass
// places it.
func swapOps(withLoad bool) []pipe.Op {
	op := func(k pipe.OpKind, stage, micro, slot, src int) pipe.Op {
		return pipe.Op{Kind: k, Stage: int32(stage), Micro: int32(micro), Peer: -1, Slot: int32(slot), Src: int32(src)}
	}
	ops := []pipe.Op{
		op(pipe.OpDataLoad, 0, 0, 0, -1), op(pipe.OpForward, 0, 0, 0, -1), op(pipe.OpSwapLaunchOffload, 0, 0, 0, -1),
		op(pipe.OpDataLoad, 1, 0, 2, -1), op(pipe.OpForward, 1, 0, 2, 0), op(pipe.OpSwapWaitOffload, 0, 0, 0, -1),
		op(pipe.OpDataLoad, 0, 1, 1, -1), op(pipe.OpForward, 0, 1, 1, -1),
		op(pipe.OpDataLoad, 1, 1, 3, -1), op(pipe.OpForward, 1, 1, 3, 1),
		op(pipe.OpBackward, 1, 1, 3, -1), op(pipe.OpBackward, 0, 1, 1, 3),
		op(pipe.OpBackward, 1, 0, 2, -1),
	}
	if withLoad {
		ops = append(ops, op(pipe.OpSwapLaunchLoad, 0, 0, 0, -1), op(pipe.OpSwapWaitLoad, 0, 0, 0, -1))
	}
	return append(ops, op(pipe.OpBackward, 0, 0, 0, 2),
		pipe.Op{Kind: pipe.OpOptStep, Stage: -1, Micro: -1, Peer: -1, Slot: -1, Src: -1})
}

// TestSwapSteps: a Swapper stage's saved context goes out at
// SWAP_LAUNCH_OFFLOAD and back at SWAP_LAUNCH_LOAD, and training gives the
// same gradients as without swapping; a backward that finds its chunk out
// fails naming the step.
func TestSwapSteps(t *testing.T) {
	sp := pipe.Spec{Schedule: "test-swap", Ranks: 1, Stages: 2, Micro: 2, Slots: []int{4}, RankOf: []int{0, 0}, Fingerprint: "test:swap"}
	run := func(stages map[int]pipe.Stage, ops []pipe.Op) error {
		x, err := pipe.New(pipe.Config{Spec: sp, Stages: stages, Loss: mse{}, Data: &data{}})
		if err != nil {
			t.Fatal(err)
		}
		return pipe.Interpret(x, ops)
	}
	var log []string
	swapped := newStages(2)
	if err := run(map[int]pipe.Stage{0: &swapAffine{affine: swapped[0], log: &log}, 1: &swapAffine{affine: swapped[1], log: &log}}, swapOps(true)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(log, " "); got != "offload load" {
		t.Errorf("swapper calls: %s", got)
	}
	plain := newStages(2)
	if err := run(map[int]pipe.Stage{0: plain[0], 1: plain[1]}, swapOps(true)); err != nil {
		t.Fatal(err)
	}
	for s := range plain {
		if !sameFloats(swapped[s].GA, plain[s].GA) || !sameFloats(swapped[s].GB, plain[s].GB) {
			t.Errorf("stage %d gradients: %v %v swapped, %v %v plain", s, swapped[s].GA, swapped[s].GB, plain[s].GA, plain[s].GB)
		}
	}
	log = nil
	st := newStages(2)
	err := run(map[int]pipe.Stage{0: &swapAffine{affine: st[0], log: &log}, 1: &swapAffine{affine: st[1], log: &log}}, swapOps(false))
	if err == nil || !strings.Contains(err.Error(), "step 0B0: the chunk's saved activations are swapped out: 0SWAP_LAUNCH_LOAD0 must come first") {
		t.Errorf("backward while out: %v", err)
	}
}
