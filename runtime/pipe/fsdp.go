package pipe

import "fmt"

// Sharded is implemented by stages whose parameters are sharded across a
// data-parallel group (FSDP). A schedule lowered with FSDP steps
// (`ppgen gen -fsdp N`) calls Unshard before a stage computes (gather its
// parameters), Reshard after its last use for a while (free them), and
// ReduceGrad once per iteration after its last backward (reduce-scatter its
// gradients), before OptStep. ppgen's verifier proves the order; the stage
// does the collectives, and should fail a Forward or backward that finds it
// sharded. For a stage that does not implement Sharded the three steps do
// nothing, so one generated schedule serves sharded and plain stages.
type Sharded interface {
	Unshard() error
	Reshard() error
	ReduceGrad() error
}

// Unshard runs UNSHARD of stage: Sharded.Unshard.
//
//go:noinline
func (x *Exec) Unshard(stage int) { x.fsdpStep(OpUnshard, stage, Sharded.Unshard) }

// Reshard runs RESHARD of stage: Sharded.Reshard.
//
//go:noinline
func (x *Exec) Reshard(stage int) { x.fsdpStep(OpReshard, stage, Sharded.Reshard) }

// ReduceGrad runs REDUCE_GRAD of stage: Sharded.ReduceGrad.
//
//go:noinline
func (x *Exec) ReduceGrad(stage int) { x.fsdpStep(OpReduceGrad, stage, Sharded.ReduceGrad) }

func (x *Exec) fsdpStep(k OpKind, stage int, f func(Sharded) error) {
	if x.failedNow() || !x.ownStage(k, stage) {
		return
	}
	if sh, ok := x.raw[stage].(Sharded); ok {
		if err := f(sh); err != nil {
			x.stepFail(k, stage, -1, -1, err)
		}
	}
}

// ownStage reports whether stage is one of this rank's, failing step k of
// stage when it is not (out of range, or on another rank).
func (x *Exec) ownStage(k OpKind, stage int) bool {
	switch {
	case stage < 0 || stage >= len(x.stages):
		x.stepFail(k, stage, -1, -1, fmt.Errorf("stage %d outside [0, %d)", stage, len(x.stages)))
		return false
	case x.stages[stage] == nil:
		x.stepFail(k, stage, -1, -1, fmt.Errorf("stage %d is on rank %d, not on this rank", stage, x.spec.RankOf[stage]))
		return false
	}
	return true
}
