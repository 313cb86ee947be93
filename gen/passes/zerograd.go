package passes

import (
	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

// ZeroGrad puts a ZERO_GRAD step of each stage at the start of its rank's
// program, in stage order.
func ZeroGrad(p ir.Program) (ir.Program, error) {
	q := p
	q.Ranks = make([][]ir.Step, len(p.Ranks))
	for r, steps := range p.Ranks {
		var head []ir.Step
		for s, rr := range p.Placement.RankOf {
			if rr == r {
				head = append(head, ir.Step{Kind: abi.ZeroGrad, Stage: s, Micro: ir.None, Peer: ir.None, Slot: ir.None})
			}
		}
		q.Ranks[r] = append(head, steps...)
	}
	return q, nil
}
