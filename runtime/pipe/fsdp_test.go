package pipe_test

import (
	"errors"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// shardedAffine is an affine stage with FSDP hooks: it refuses to compute
// while sharded and logs the hooks' calls.
type shardedAffine struct {
	*affine
	name    string
	sharded bool
	log     *[]string
}

func (s *shardedAffine) Unshard() error {
	s.sharded = false
	*s.log = append(*s.log, s.name+" unshard")
	return nil
}

func (s *shardedAffine) Reshard() error {
	s.sharded = true
	*s.log = append(*s.log, s.name+" reshard")
	return nil
}

func (s *shardedAffine) ReduceGrad() error {
	*s.log = append(*s.log, s.name+" reduce")
	return nil
}

func (s *shardedAffine) check() error {
	if s.sharded {
		return errors.New(s.name + " computes while sharded")
	}
	return nil
}

func (s *shardedAffine) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	if err := s.check(); err != nil {
		return nil, nil, err
	}
	return s.affine.Forward(x)
}

func (s *shardedAffine) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.affine.BackwardInput(saved, dy)
}

func (s *shardedAffine) BackwardWeight(saved any, dy *tensor.Dense) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.affine.BackwardWeight(saved, dy)
}

// fsdpOps is one rank holding stages 0 and 1 (local neighbours, src slots),
// two micro-batches, with UNSHARD, RESHARD and REDUCE_GRAD as the FSDP pass
// places them at a window of 2 stages.
func fsdpOps(dropUnshard1 bool) []pipe.Op {
	op := func(k pipe.OpKind, stage, micro, slot, src int) pipe.Op {
		return pipe.Op{Kind: k, Stage: int32(stage), Micro: int32(micro), Peer: -1, Slot: int32(slot), Src: int32(src)}
	}
	fs := func(k pipe.OpKind, stage int) pipe.Op {
		return pipe.Op{Kind: k, Stage: int32(stage), Micro: -1, Peer: -1, Slot: -1, Src: -1}
	}
	ops := []pipe.Op{
		op(pipe.OpDataLoad, 0, 0, 0, -1), fs(pipe.OpUnshard, 0), op(pipe.OpForward, 0, 0, 0, -1),
		op(pipe.OpDataLoad, 1, 0, 2, -1), fs(pipe.OpUnshard, 1), op(pipe.OpForward, 1, 0, 2, 0),
		op(pipe.OpBackward, 1, 0, 2, -1), op(pipe.OpBackward, 0, 0, 0, 2),
		op(pipe.OpDataLoad, 0, 1, 1, -1), op(pipe.OpForward, 0, 1, 1, -1),
		op(pipe.OpDataLoad, 1, 1, 3, -1), op(pipe.OpForward, 1, 1, 3, 1),
		op(pipe.OpBackward, 1, 1, 3, -1), fs(pipe.OpReduceGrad, 1), fs(pipe.OpReshard, 1),
		op(pipe.OpBackward, 0, 1, 1, 3), fs(pipe.OpReduceGrad, 0), fs(pipe.OpReshard, 0),
		{Kind: pipe.OpOptStep, Stage: -1, Micro: -1, Peer: -1, Slot: -1, Src: -1},
	}
	if dropUnshard1 {
		ops = append(ops[:4:4], ops[5:]...)
	}
	return ops
}

// TestFSDPSteps: the runtime calls a Sharded stage's hooks where the
// program says, so a stage computes only unsharded; a program that forgets
// an UNSHARD fails at the stage's first compute; stages that are not
// Sharded ignore the steps.
func TestFSDPSteps(t *testing.T) {
	sp := pipe.Spec{Schedule: "test-fsdp", Ranks: 1, Stages: 2, Micro: 2, Slots: []int{4}, RankOf: []int{0, 0}, Fingerprint: "test:fsdp"}
	newExec := func(stages map[int]pipe.Stage) *pipe.Exec {
		x, err := pipe.New(pipe.Config{Spec: sp, Stages: stages, Loss: mse{}, Data: &data{}})
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	var log []string
	st := newStages(2)
	s0 := &shardedAffine{affine: st[0], name: "0", sharded: true, log: &log}
	s1 := &shardedAffine{affine: st[1], name: "1", sharded: true, log: &log}
	x := newExec(map[int]pipe.Stage{0: s0, 1: s1})
	if err := pipe.Interpret(x, fsdpOps(false)); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(log, ", "), "0 unshard, 1 unshard, 1 reduce, 1 reshard, 0 reduce, 0 reshard"; got != want {
		t.Errorf("hooks: %s\nwant  %s", got, want)
	}
	if len(s0.GA) != 2 || len(s1.GA) != 2 {
		t.Errorf("backwards: %d and %d, want 2 each", len(s0.GA), len(s1.GA))
	}

	log = nil
	s1.sharded = true
	x = newExec(map[int]pipe.Stage{0: &shardedAffine{affine: st[0], name: "0", sharded: true, log: &log}, 1: s1})
	err := pipe.Interpret(x, fsdpOps(true))
	if err == nil || !strings.Contains(err.Error(), "step 1F0") || !strings.Contains(err.Error(), "1 computes while sharded") {
		t.Errorf("without 1UNSHARD: %v", err)
	}

	x = newExec(map[int]pipe.Stage{0: &affine{A: 1}, 1: &affine{A: 1}})
	if err := pipe.Interpret(x, fsdpOps(false)); err != nil {
		t.Errorf("plain stages: %v", err)
	}
	x = newExec(map[int]pipe.Stage{0: &affine{A: 1}, 1: &affine{A: 1}})
	x.Unshard(5)
	if err := x.Err(); err == nil || !strings.Contains(err.Error(), "step 5UNSHARD: stage 5 outside [0, 2)") {
		t.Errorf("Unshard(5): %v", err)
	}
}
