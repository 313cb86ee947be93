package pipe

import "fmt"

// ZeroGrad runs ZERO_GRAD of stage (scratch): it checks the stage is on
// this rank and does nothing else.
//
//go:noinline
func (x *Exec) ZeroGrad(stage int) {
	if x.failedNow() {
		return
	}
	if stage < 0 || stage >= len(x.stages) || x.stages[stage] == nil {
		x.stepFail(OpZeroGrad, stage, -1, -1, fmt.Errorf("stage %d is not on this rank", stage))
	}
}
