package passes

import (
	"fmt"
	"slices"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

// Clip places the reduction that clipping by the global gradient norm needs
// (`-clip`, Options.ClipNorm): one ALL_REDUCE on every rank, right before
// its OPT_STEP, or at the end of a rank without one. It runs after "tie"
// and "opt", so the step follows every backward, W, REDUCE_GRAD and
// TIE_GRAD of its rank: the gradients it measures are final, and every
// transfer (beforeOptStep). At the
// step the runtime calls the trainer's reduction (pipe.Config.AllReduce),
// which sums the ranks' squared gradients through runtime/collective.
//
// Why it cannot deadlock: every rank has exactly one, after all of its
// transfers and exchanges, so each rank's host reaches it with its comm
// stream drained once the program without it has run, and the rendezvous
// of all ranks (gen/verify's model of it) then completes.
//
// A forward-only program has no gradients: Clip leaves it as it is. A
// program that holds ALL_REDUCE steps already (an -in file with its
// transfers) keeps them; verify checks that every rank posts the same
// sequence.
func Clip(p ir.Program) ir.Program {
	if p.ForwardOnly() {
		return p
	}
	return placeOnEveryRank(p, abi.AllReduce, func(steps []ir.Step, st ir.Step) []ir.Step { return beforeOptStep(steps, st) })
}

// placeOnEveryRank gives every rank of p one operand-less step of kind k,
// placed in the rank's steps by place, unless p holds a step of k already
// (an -in file that carries its collectives: verify checks that every rank
// posts the same sequence). The collective passes (Clip, GatherLoss) share
// it. p is not modified.
func placeOnEveryRank(p ir.Program, k abi.Kind, place func(steps []ir.Step, st ir.Step) []ir.Step) ir.Program {
	for _, steps := range p.Ranks {
		if slices.ContainsFunc(steps, func(st ir.Step) bool { return st.Kind == k }) {
			return p
		}
	}
	q := p
	q.Ranks = make([][]ir.Step, len(p.Ranks))
	st := ir.Step{Kind: k, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None}
	for r, steps := range p.Ranks {
		q.Ranks[r] = place(steps, st)
	}
	return q
}

// DropCollectives returns p without its ALL_REDUCE steps when clip is set
// (a compute order read with -in may hold them; with -clip lowering places
// them anew). Without clip a compute order that holds one is refused: it
// cannot say where a collective goes among the transfers lowering adds.
// p is not modified.
func DropCollectives(p ir.Program, clip bool) (ir.Program, error) {
	for r, steps := range p.Ranks {
		i := slices.IndexFunc(steps, func(st ir.Step) bool { return st.Kind == abi.AllReduce })
		if i < 0 {
			continue
		}
		if !clip {
			return p, &Error{Pass: "clip", Rank: r, Index: i, Step: steps[i], Reason: fmt.Sprintf("%s in a compute order: where a collective goes among the transfers lowering adds is lowering's choice; give -clip (one before OPT_STEP on every rank), or a program with its transfers", steps[i].Kind)}
		}
		q := p
		q.Ranks = make([][]ir.Step, len(p.Ranks))
		for r, steps := range p.Ranks {
			q.Ranks[r] = slices.DeleteFunc(slices.Clone(steps), func(st ir.Step) bool { return st.Kind == abi.AllReduce })
		}
		return q, nil
	}
	return p, nil
}
