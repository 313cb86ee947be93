package passes

import (
	"fmt"
	"strings"

	"github.com/ppgen/ppgen/gen/ir"
)

// ForwardOnly returns the forward-only program (evaluation, inference) of
// the compute order p: its forwards in order, each overlap replaced by its
// forward sub-step, every B, I and W dropped. Lowered with the other passes
// it gets the forward transfers, the data loads and slots, and no OPT_STEP
// (Pipeline leaves it out): ir.Program.ForwardOnly holds for the result, and
// gen/verify checks it as such. The family's order is kept, so each rank
// runs its forwards as in training; the warm-up limits that bound a
// training schedule's live activations do not matter, as a forward-only
// chunk keeps nothing once its output has left.
func ForwardOnly(p ir.Program) (ir.Program, error) {
	if p.HasComm() {
		return ir.Program{}, &Error{Pass: "forward-only", Rank: -1, Index: -1, Reason: "forward-only takes a compute order (F, B, I, W); this program already has transfers"}
	}
	q := p
	q.Ranks = make([][]ir.Step, len(p.Ranks))
	for r, steps := range p.Ranks {
		out := make([]ir.Step, 0, len(steps)/2+1)
		for i, st := range steps {
			switch {
			case st.Kind == ir.Forward:
				out = append(out, st)
			case st.Kind.IsOverlap():
				for _, sub := range st.Sub {
					if sub.Kind == ir.Forward {
						out = append(out, sub)
					}
				}
			case st.Kind.IsBackward(), st.Kind == ir.BackwardWeight:
			default:
				return ir.Program{}, &Error{Pass: "forward-only", Rank: r, Index: i, Step: st, Reason: fmt.Sprintf("%s is not a compute step; forward-only takes a compute order", st.Kind)}
			}
		}
		q.Ranks[r] = out
	}
	return q, nil
}

// checkForwardOnly refuses the options that rewrite or add to backwards,
// which a forward-only program has none of.
func checkForwardOnly(opt Options) error {
	var bad []string
	for _, o := range []struct {
		on   bool
		flag string
	}{
		{opt.Split, "-split"}, {opt.Overlap, "-overlap"}, {opt.DxDwInOverlap, "-dxdw-in-overlap"}, {opt.FillW, "W fill"},
		{opt.Swap > 0, "-swap"}, {opt.FSDP > 0, "-fsdp"},
	} {
		if o.on {
			bad = append(bad, o.flag)
		}
	}
	if len(bad) > 0 {
		return &Error{Pass: "forward-only", Rank: -1, Index: -1, Reason: fmt.Sprintf("the program has no backward for %s to work on; drop %s or -forward-only", strings.Join(bad, ", "), strings.Join(bad, ", "))}
	}
	return nil
}
