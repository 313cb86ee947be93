package passes

import (
	"slices"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

// Clip places the reduction that clipping by the global gradient norm needs
// (`-clip`, Options.ClipNorm): one ALL_REDUCE on every rank, right before
// its OPT_STEP, or at the end of a rank without one. It runs after "tie"
// and "opt", so the step follows every backward, W, REDUCE_GRAD and
// TIE_GRAD of its rank: the gradients it measures are final. At the step
// the runtime calls the trainer's reduction (pipe.Config.AllReduce), which
// sums the ranks' squared gradients through runtime/collective.
//
// Why it cannot deadlock: every rank has exactly one, after all of its
// transfers and exchanges, so each rank's host reaches it with its comm
// stream drained once the program without it has run, and the rendezvous
// of all ranks (gen/verify's model of it) then completes.
//
// A forward-only program has no gradients: Clip leaves it as it is. A
// program that holds ALL_REDUCE steps already (an -in file) keeps them;
// verify checks that every rank posts the same sequence.
func Clip(p ir.Program) ir.Program {
	if p.ForwardOnly() {
		return p
	}
	for _, steps := range p.Ranks {
		for _, st := range steps {
			if st.Kind.IsCollective() {
				return p
			}
		}
	}
	q := p
	q.Ranks = make([][]ir.Step, len(p.Ranks))
	reduce := ir.Step{Kind: abi.AllReduce, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None}
	for r, steps := range p.Ranks {
		at := len(steps)
		if i := slices.IndexFunc(steps, func(st ir.Step) bool { return st.Kind == ir.OptStep }); i >= 0 {
			at = i
		}
		q.Ranks[r] = slices.Concat(steps[:at], []ir.Step{reduce}, steps[at:])
	}
	return q
}
