package passes

import (
	"fmt"

	"github.com/ppgen/ppgen/gen/ir"
)

// OwnedData is mpipe's data pass (hyper-parallel's MPipe transpose with no
// preprocess layers): the first NT = min(P, M) micro-batches are owned by
// the ranks, micro m by rank m (ir.Placement.Owner). Each owner that does not
// hold the first stage loads its micro-batch's input during its warm-up idle
// time and ships it there, so the first stage's rank no longer loads those
// inputs one after another on its critical path:
//
//   - on the owner, a prefix DATA_LOAD(0, m), MPIPE_FWD_SEND(0, m);
//   - on the first stage's rank, a prefix MPIPE_FWD_RECV(0, m) for every
//     such m in increasing order, in place of its DATA_LOAD(0, m).
//
// Every owner's first transfer is its send and the first stage's rank takes
// the receives first, in micro-batch order, so the exchange cannot deadlock
// under the rendezvous model (gen/verify proves it). The receives are posted
// at the head and completed by the comm stream while the rank computes.
//
// It runs after InsertData (it moves the loads that pass placed). A program
// that already holds MPIPE_FWD_RECV steps is returned as it is, so the pass
// is idempotent; programs with several model copies are refused.
func OwnedData(p ir.Program) (ir.Program, error) {
	if p.Copies > 1 {
		return ir.Program{}, &Error{Pass: "mpipe", Rank: -1, Index: -1, Reason: fmt.Sprintf("owned-micro data loading takes one pipeline, not %d model copies", p.Copies)}
	}
	S, P := p.Stages(), len(p.Ranks)
	if S == 0 || P != p.Placement.NumRanks {
		return ir.Program{}, &Error{Pass: "mpipe", Rank: -1, Index: -1, Reason: fmt.Sprintf("placement has %d stages and %d ranks, the program %d rank lists", S, p.Placement.NumRanks, P)}
	}
	for _, steps := range p.Ranks {
		for _, st := range steps {
			if st.Kind == ir.MpipeRecv || st.Kind == ir.MpipeSend {
				return p, nil
			}
		}
	}
	r0 := p.Placement.Rank(0)
	var moved []int
	for m := range min(P, p.Micro) {
		if o := p.Placement.Owner(m); o != r0 {
			moved = append(moved, m)
		}
	}
	if len(moved) == 0 {
		return p, nil
	}
	isMoved := make([]bool, p.Micro)
	for _, m := range moved {
		isMoved[m] = true
	}
	q := ir.Program{Placement: p.Placement, Micro: p.Micro, Copies: p.Copies, Ranks: make([][]ir.Step, P)}
	for r, steps := range p.Ranks {
		var head []ir.Step
		switch {
		case r == r0:
			for _, m := range moved {
				head = append(head, ir.Comm(ir.MpipeRecv, 0, m, p.Placement.Owner(m)))
			}
		default:
			for _, m := range moved {
				if p.Placement.Owner(m) == r {
					head = append(head, ir.Compute(ir.DataLoad, 0, m), ir.Comm(ir.MpipeSend, 0, m, r0))
				}
			}
		}
		out := make([]ir.Step, 0, len(head)+len(steps))
		out = append(out, head...)
		for _, st := range steps {
			if r == r0 && st.Kind == ir.DataLoad && st.Stage == 0 && st.Micro >= 0 && st.Micro < p.Micro && isMoved[st.Micro] {
				if S == 1 {
					// One stage: the load also brings the labels; keep it
					// (a single-stage program has one rank and moves nothing).
					out = append(out, st)
				}
				continue
			}
			out = append(out, st)
		}
		q.Ranks[r] = out
	}
	return q, nil
}
