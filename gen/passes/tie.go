package passes

import (
	"fmt"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
)

// Tie places the gradient exchange of tied stages (`-tie A:B`,
// ir.Program.Ties): for each tie, in increasing order of its first stage, a
// TIE_GRAD step on the rank of A naming A and one on the rank of B naming B,
// or one step naming A when both stages live on one rank (the sum is then
// local). Each goes at the end of its rank's program, before OPT_STEP when
// the program has one (beforeOptStep): after every backward and transfer of
// the rank, so after the last weight gradient of its stage.
//
// Why it cannot deadlock (docs/design.md §6): everything before the TIE_GRAD
// steps is the program without them, which completes; the TIE_GRAD steps
// come after every host step and transfer of their rank, so each rank's host
// reaches its first one with its comm stream drained. An exchange completes
// once both ranks are at it with drained streams (gen/verify's model of it),
// and every rank meets the ties in the same increasing order, so the
// lowest unfinished tie always has both its ranks at it.
//
// A forward-only program has no gradients: Tie leaves it as it is, without
// ties (evaluation reads two equal copies). A program with two model copies
// (dualpipe) or FSDP steps is refused: the first already sums twin stages'
// gradients at OPT_STEP, the second shards the gradients a tie would sum.
// A program that holds TIE_GRAD steps already (an -in file) keeps them and
// gets the ties; verify checks them.
func Tie(p ir.Program, ties []ir.Tie) (ir.Program, error) {
	if len(ties) == 0 {
		return p, nil
	}
	fail := func(format string, args ...any) (ir.Program, error) {
		return ir.Program{}, &Error{Pass: "tie", Rank: -1, Index: -1, Reason: fmt.Sprintf(format, args...)}
	}
	if err := ir.CheckTies(ties, p.Stages()); err != nil {
		return fail("%v", err)
	}
	if p.ForwardOnly() {
		return p, nil
	}
	if p.Copies > 1 {
		return fail("the program runs %d model copies (dualpipe), whose twin stages' gradients OPT_STEP sums already; tie stages of a one-pipeline schedule (dualpipev, zbv, 1f1b, ...)", p.Copies)
	}
	has := false
	for _, steps := range p.Ranks {
		for _, st := range steps {
			if st.Kind.IsFSDP() {
				return fail("-tie with FSDP steps (-fsdp): a tie sums whole gradients, and FSDP shards them across the data-parallel group; drop -fsdp or -tie")
			}
			has = has || st.Kind == ir.TieGrad
		}
	}
	sorted := slices.Clone(ties)
	slices.SortFunc(sorted, func(a, b ir.Tie) int { return a.A - b.A })
	q := p
	q.Ties = sorted
	if has {
		return q, nil
	}
	add := make([][]ir.Step, len(p.Ranks))
	for _, t := range sorted {
		ra, rb := p.Placement.Rank(t.A), p.Placement.Rank(t.B)
		add[ra] = append(add[ra], tieStep(t.A))
		if rb != ra {
			add[rb] = append(add[rb], tieStep(t.B))
		}
	}
	q.Ranks = slices.Clone(p.Ranks)
	for r, extra := range add {
		if len(extra) == 0 {
			continue
		}
		q.Ranks[r] = beforeOptStep(p.Ranks[r], extra...)
	}
	return q, nil
}

func tieStep(stage int) ir.Step {
	return ir.Step{Kind: ir.TieGrad, Stage: stage, Micro: ir.None, Peer: ir.None, Slot: ir.None}
}

// DropTies returns p without its TIE_GRAD steps (a compute order read with
// -in may hold them; lowering places them anew). p is not modified.
func DropTies(p ir.Program) ir.Program {
	q := p
	q.Ranks = make([][]ir.Step, len(p.Ranks))
	for r, steps := range p.Ranks {
		q.Ranks[r] = slices.DeleteFunc(slices.Clone(steps), func(st ir.Step) bool { return st.Kind == ir.TieGrad })
	}
	return q
}
