package passes

import (
	"fmt"

	"github.com/ppgen/ppgen/gen/ir"
)

// ShipLabels makes the labels of every micro-batch travel along the pipe
// with its activations instead of being loaded by the last stage's rank, so
// that only the first stage's rank reads data (docs/design.md §5, pass 6,
// "labels"): right before every SEND_F(s, m) it
// puts DATA_SEND(s, m), right before every RECV_F(s+1, m) DATA_RECV(s+1, m)
// (on the data channel, in the same order as the activations, so the two
// streams pair up alike and the program stays deadlock-free), and it drops
// the last stage's DATA_LOAD(S-1, m). The first stage's DATA_LOAD then loads
// the labels as well as the input (pipe.Spec.ShipLabels).
//
// A micro-batch whose first and last stage share a rank (a V placement)
// keeps its labels' DATA_LOAD: there is nothing to ship. Every hop of a
// shipped micro-batch's route must cross ranks, since a label that arrives
// at a rank can only leave it as the data of the same stage; a route with
// two neighbouring stages on one rank (and its ends on different ranks) is
// refused. It runs after the data and comm passes; a program that already
// holds data transfers is returned as it is.
func ShipLabels(p ir.Program) (ir.Program, error) {
	S := p.Stages()
	if S == 0 || len(p.Ranks) != p.Placement.NumRanks {
		return ir.Program{}, &Error{Pass: "labels", Rank: -1, Index: -1, Reason: fmt.Sprintf("placement has %d stages and %d ranks, the program %d rank lists", S, p.Placement.NumRanks, len(p.Ranks))}
	}
	for _, steps := range p.Ranks {
		for _, st := range steps {
			if st.Kind == ir.DataSend || st.Kind == ir.DataRecv {
				return p, nil
			}
		}
	}
	rankOf := p.Placement.RankOf
	ship := make([]bool, max(p.Micro, 0))
	for m := range ship {
		first, last := p.Route(m)
		if rankOf[first] == rankOf[last] {
			continue
		}
		for s := first; s < last; s++ {
			if rankOf[s] == rankOf[s+1] {
				return ir.Program{}, &Error{Pass: "labels", Rank: rankOf[s], Index: -1,
					Reason: fmt.Sprintf("micro %d's stages %d and %d are both on rank %d: shipping labels needs every hop of a route to cross ranks (placement %s); load them on the last stage's rank instead", m, s, s+1, rankOf[s], p.Placement)}
			}
		}
		ship[m] = true
	}
	shipped := func(m int) bool { return m >= 0 && m < len(ship) && ship[m] }
	q := ir.Program{Placement: p.Placement, Micro: p.Micro, Copies: p.Copies, Ranks: make([][]ir.Step, len(p.Ranks))}
	for r, steps := range p.Ranks {
		out := make([]ir.Step, 0, len(steps)+len(steps)/2)
		for _, st := range steps {
			switch {
			case st.Kind == ir.DataLoad && shipped(st.Micro):
				if _, last := p.Route(st.Micro); st.Stage == last {
					continue // the labels come with the activations
				}
			case st.Kind == ir.SendF && shipped(st.Micro):
				out = append(out, ir.Comm(ir.DataSend, st.Stage, st.Micro, st.Peer))
			case st.Kind == ir.RecvF && shipped(st.Micro):
				out = append(out, ir.Comm(ir.DataRecv, st.Stage, st.Micro, st.Peer))
			}
			out = append(out, st)
		}
		q.Ranks[r] = out
	}
	return q, nil
}
