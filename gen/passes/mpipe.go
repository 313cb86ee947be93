package passes

import (
	"fmt"

	"github.com/ppgen/ppgen/gen/ir"
)

// Ownership modes of mpipe's owned micro-batches (passes.Options.MpipeOwners,
// ppgen's -mpipe-owners; docs/mpipe.md).
const (
	// OwnersMin: micro m < NT = min(P, M) is owned by rank m; each owner
	// loads (and runs the preprocess of) one micro-batch, in the idle time
	// before its first input arrives, and the first stage's rank patches
	// the overflow micro-batches m ≥ NT by loading them itself
	// (hyper-parallel's "min").
	OwnersMin = "min"
	// OwnersFull: every micro-batch is owned, micro m by rank m mod NT
	// (hyper-parallel's "full"): the first stage's rank loads only the ones
	// it owns, and every rank loads M/NT of them.
	OwnersFull = "full"
)

// ParseOwners checks an ownership mode: "" (the default, OwnersMin),
// OwnersMin or OwnersFull. It returns the mode, "" made OwnersMin.
func ParseOwners(s string) (string, error) {
	switch s {
	case "", OwnersMin:
		return OwnersMin, nil
	case OwnersFull:
		return OwnersFull, nil
	}
	return "", fmt.Errorf("mpipe ownership mode %q: want %s (micro m < min(P, M) owned by rank m, the first stage's rank loads the rest) or %s (every micro m owned by rank m mod min(P, M))", s, OwnersMin, OwnersFull)
}

// OwnedData is mpipe's data pass in the OwnersMin mode; see OwnedDataMode.
func OwnedData(p ir.Program) (ir.Program, error) { return OwnedDataMode(p, OwnersMin) }

// OwnedDataMode is mpipe's data pass (hyper-parallel's MPipe transpose; its
// preprocess, when the model has one, runs in the owner's load): the owned
// micro-batches (mode: OwnersMin or OwnersFull) are owned by the ranks,
// micro m by rank m mod NT, NT = min(P, M) (ir.Placement.Owner). Each owner
// that does not hold the first stage loads its micro-batches' inputs at
// the head of its program, before its first input can arrive, and ships
// them there, so the first stage's rank no longer loads those inputs on its
// critical path:
//
//   - on the owner, a prefix DATA_LOAD(0, m), MPIPE_FWD_SEND(0, m) for each
//     micro-batch m it owns, in increasing order;
//   - on the first stage's rank, a prefix MPIPE_FWD_RECV(0, m) for every
//     such m in increasing order, in place of its DATA_LOAD(0, m).
//
// Every rank's exchanges with the first stage's rank come before any other
// transfer of its, and both sides take them in micro-batch order: the
// exchanges form one block that every rank's comm stream begins with, in
// one global order, so they cannot deadlock under the rendezvous model
// (gen/verify proves it). The receives are posted at the head and completed
// by the comm stream while the rank computes; each holds a buffer slot of
// the first stage's rank until its F.
//
// It runs after InsertData (it moves the loads that pass placed). A program
// that already holds MPIPE_FWD_RECV steps is returned as it is, so the pass
// is idempotent; programs with several model copies are refused.
func OwnedDataMode(p ir.Program, mode string) (ir.Program, error) {
	mode, err := ParseOwners(mode)
	if err != nil {
		return ir.Program{}, &Error{Pass: "mpipe", Rank: -1, Index: -1, Reason: err.Error()}
	}
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
	owned := min(P, p.Micro)
	if mode == OwnersFull {
		if p.Micro < P {
			return ir.Program{}, &Error{Pass: "mpipe", Rank: p.Micro, Index: -1, Reason: fmt.Sprintf("ownership mode %s: rank %d would own no micro-batch (M = %d < P = %d); every rank owns and loads its share in this mode, so use M ≥ P, or the %s mode", OwnersFull, p.Micro, p.Micro, P, OwnersMin)}
		}
		owned = p.Micro
	}
	var moved []int
	for m := range owned {
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
