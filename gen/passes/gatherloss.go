package passes

import (
	"errors"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

// gatherLossOption is -gather-loss: one GATHER_LOSS at the end of every
// rank's program (GatherLoss).
var gatherLossOption = Option{
	Name:   "gather-loss",
	Usage:  "on: end every rank's program with a GATHER_LOSS step, after which every rank's Exec.Losses holds every micro-batch's loss (the ranks exchange them), so a trainer logs the step's loss on any rank without a reduction of its own; training and evaluation programs alike",
	Before: "slots",
	Check:  checkGatherLoss,
	Run: func(p ir.Program, v string, _ Options) (ir.Program, error) {
		if err := checkGatherLoss(v); err != nil {
			return ir.Program{}, err
		}
		return GatherLoss(p), nil
	},
}

func init() { declare(&gatherLossOption) }

func checkGatherLoss(v string) error {
	if v != "on" {
		return errors.New(`want on (leave the flag out for none)`)
	}
	return nil
}

// GatherLoss places one GATHER_LOSS at the end of every rank's program
// (-gather-loss): there every rank has run every step, so its losses are
// final and its transfers posted, and the rendezvous of all ranks that the
// step is (gen/verify's collective model) completes once the program
// without it has run. A program that holds GATHER_LOSS steps already (an
// -in file) is left as it is; verify checks that every rank posts the same
// number. p is not modified.
func GatherLoss(p ir.Program) ir.Program {
	return placeOnEveryRank(p, abi.GatherLoss, func(steps []ir.Step, st ir.Step) []ir.Step {
		return append(steps[:len(steps):len(steps)], st)
	})
}
