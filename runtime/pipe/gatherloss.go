package pipe

import (
	"fmt"
	"math"

	"gorgonia.org/tensor"
)

// lossTag is the stage of the tags GATHER_LOSS exchanges its losses under
// (on abi.GradChannel, after the rank's transfers drained): no transfer of
// a stage has it.
const lossTag = -1

// GatherLoss runs GATHER_LOSS (`ppgen gen -gather-loss`): afterwards every
// rank's Losses holds every micro-batch's loss of the iteration, not only
// the rank holding the last stage, so a trainer logs the step's loss on any
// rank without a reduction of its own (LossesGathered). Every rank posts it
// at the end of its program, in the same order as its other collectives
// (ppgen's verifier proves it). It waits for this rank's posted transfers,
// then exchanges its losses with every other rank in turn, in increasing
// rank order (the lower rank of a pair sends first, so a transport whose
// sends wait for their receive does not hang): P−1 exchanges of Micro
// numbers, sent and kept bit for bit. A loss is taken from the rank that
// computed it (the others hold NaN for it).
//
//go:noinline
func (x *Exec) GatherLoss() {
	if x.failedNow() {
		return
	}
	k := OpGatherLoss
	if x.batch != nil {
		x.stepFail(k, -1, -1, -1, fmt.Errorf("inside BATCH_BEGIN .. BATCH_END, which holds only transfers (BATCH_END first)"))
		return
	}
	x.inflight.Wait()
	if x.failedNow() {
		return
	}
	for peer := range x.spec.Ranks {
		if peer == x.rank || x.tr == nil {
			continue
		}
		mine := tensor.New(tensor.WithShape(len(x.losses)), tensor.WithBacking(x.Losses()))
		theirs, err := x.swapGrads(lossTag, lossTag, peer, []*tensor.Dense{mine})
		if err == nil && (theirs[0].Dtype() != tensor.Float64 || theirs[0].Len() != len(x.losses)) {
			err = fmt.Errorf("got %v %v, want %d float64 losses (ranks run different programs?)", theirs[0].Dtype(), theirs[0].Shape(), len(x.losses))
		}
		if err != nil {
			x.stepFail(k, -1, -1, peer, fmt.Errorf("gathering the losses: %w", err))
			return
		}
		for i, l := range theirs[0].Float64s() {
			if b := math.Float64bits(l); b != nanBits && x.losses[i].Load() == nanBits {
				x.losses[i].Store(b)
			}
		}
		if x.rec != nil {
			x.rec.Recycle(theirs[0])
		}
	}
	x.gathered = true
}

// LossesGathered reports whether a GATHER_LOSS ran in the current
// iteration: Losses then holds every micro-batch's loss on every rank,
// where without one each is on the rank that computed it alone (and a sum
// of every rank's Losses would count each loss once per rank).
func (x *Exec) LossesGathered() bool { return x.gathered }
