package passes

import (
	"fmt"

	"github.com/ppgen/ppgen/gen/internal/strict"
	"github.com/ppgen/ppgen/gen/ir"
)

// CommOptions configures InsertComm.
type CommOptions struct {
	// Eager places receives the way PyTorch's _add_send_recv does (see
	// insertCommEager): every receive as early as the producer's progress
	// allows. It exists to compare against; the default places receives as
	// late as rendezvous safety allows.
	Eager bool
}

// InsertComm adds the point-to-point transfers of a compute-only program.
//
// For every edge between stages on different ranks: F(s, m) whose stage s+1
// lives elsewhere is followed by sSEND_F m, and the consumer F(s+1, m) gets
// (s+1)RECV_F m before it; B or I of (s, m) whose stage s-1 lives elsewhere is
// followed by sSEND_B m, and B/I(s-1, m) gets (s-1)RECV_B m before it.
// Colocated neighbours (consecutive stages on one rank, the turn of a V)
// exchange through their slots and get no transfer. Peers come from the
// placement. Compute steps inside an overlap count as the composite: its
// receives go before it, its sends after it, in sub-step order.
//
// Placement (docs/internals.md, "Comm insertion"): sends go right after their
// producer and receives start right before their consumer; the pass then runs
// the strict execution model, and whenever every rank is stuck it takes a
// rank whose comm-stream head is a SEND to peer p and hoists the matching
// RECV on p to just before p's comm head, the latest position that unblocks
// it. Heads that are gradient sends (SEND_B) are served first, since
// hoisting a RECV_B costs no buffer (its chunk is resident since its F)
// while hoisting a RECV_F starts a chunk early; ties go to the lowest rank.
// When every stuck rank's head is a receive, no placement of transfers can
// run this compute order, and InsertComm returns a *CycleError naming the
// ring of ranks and the step each waits at.
//
// The cost is O(steps) plus O(ranks) per hoist. The result is deadlock-free
// by construction; gen/verify re-checks it.
func InsertComm(p ir.Program, opt CommOptions) (ir.Program, error) {
	if err := checkSteps(p, "comm", true); err != nil {
		return ir.Program{}, err
	}
	if opt.Eager {
		return insertCommEager(p)
	}
	return insertCommLate(p)
}

// commOp is a transfer created by the pass.
type commOp struct {
	kind         ir.Kind
	stage, micro int32
	host         int32 // index (in the input program) of the compute step that produces or consumes it
}

// needsRecv returns the receive compute step c on rank r consumes, if any.
func needsRecv(rankOf []int, r int, c ir.Step) (ir.Kind, bool) {
	switch c.Kind {
	case ir.Forward:
		if c.Stage > 0 && rankOf[c.Stage-1] != r {
			return ir.RecvF, true
		}
	case ir.Backward, ir.BackwardInput:
		if c.Stage < len(rankOf)-1 && rankOf[c.Stage+1] != r {
			return ir.RecvB, true
		}
	}
	return ir.Invalid, false
}

// needsSend returns the send that follows compute step c on rank r, if any.
func needsSend(rankOf []int, r int, c ir.Step) (ir.Kind, bool) {
	switch c.Kind {
	case ir.Forward:
		if c.Stage < len(rankOf)-1 && rankOf[c.Stage+1] != r {
			return ir.SendF, true
		}
	case ir.Backward, ir.BackwardInput:
		if c.Stage > 0 && rankOf[c.Stage-1] != r {
			return ir.SendB, true
		}
	}
	return ir.Invalid, false
}

func insertCommLate(p ir.Program) (ir.Program, error) {
	rankOf := p.Placement.RankOf
	P, S, M := len(p.Ranks), len(rankOf), p.Micro
	nHost := p.NumSteps()
	ops := make([]commOp, 0, nHost)
	// Per chunk (stage*M+micro): the op id of its SEND_F / SEND_B.
	sendF := filled(S*M, -1)
	sendB := filled(S*M, -1)
	b := strict.NewBuilder(nHost, nHost)
	var waits [2]int32
	for r := range P {
		b.StartRank()
		for j, st := range p.Ranks[r] {
			nw := 0
			for _, c := range st.Computes() {
				if k, ok := needsRecv(rankOf, r, c); ok {
					waits[nw] = b.Op()
					nw++
					ops = append(ops, commOp{kind: k, stage: int32(c.Stage), micro: int32(c.Micro), host: int32(j)})
				}
			}
			b.Host()
			for _, w := range waits[:nw] {
				b.Wait(strict.OpDone(w))
			}
			for _, c := range st.Computes() {
				if k, ok := needsSend(rankOf, r, c); ok {
					id := b.Op()
					ops = append(ops, commOp{kind: k, stage: int32(c.Stage), micro: int32(c.Micro), host: int32(j)})
					tab := sendF
					if k == ir.SendB {
						tab = sendB
					}
					ch := c.Stage*M + c.Micro
					if tab[ch] >= 0 {
						return ir.Program{}, &Error{Pass: "comm", Rank: r, Index: j, Step: st, Reason: fmt.Sprintf("%s runs twice; every (stage, micro) has one forward and one backward", c)}
					}
					tab[ch] = id
				}
			}
		}
	}
	m := b.Model()
	// Pair every receive with its send; check both ends exist exactly once.
	for id, o := range ops {
		if o.kind != ir.RecvF && o.kind != ir.RecvB {
			continue
		}
		var src int32
		var prod ir.Step
		if o.kind == ir.RecvF {
			src = sendF[int(o.stage-1)*M+int(o.micro)]
			prod = ir.Compute(ir.Forward, int(o.stage-1), int(o.micro))
		} else {
			src = sendB[int(o.stage+1)*M+int(o.micro)]
			prod = ir.Compute(ir.Backward, int(o.stage+1), int(o.micro))
		}
		r := int(m.OpRank[id])
		if src < 0 {
			return ir.Program{}, &Error{Pass: "comm", Rank: r, Index: int(o.host), Step: p.Ranks[r][o.host], Reason: fmt.Sprintf("needs the output of %s (or I), which no rank runs", prod)}
		}
		if m.OpPartner[src] >= 0 {
			return ir.Program{}, &Error{Pass: "comm", Rank: r, Index: int(o.host), Step: p.Ranks[r][o.host], Reason: fmt.Sprintf("consumes %s's output a second time; every (stage, micro) has one forward and one backward", prod)}
		}
		m.OpPartner[id], m.OpPartner[src] = src, int32(id)
	}
	for id, o := range ops {
		if m.OpPartner[id] < 0 {
			r := int(m.OpRank[id])
			cons := ir.Compute(ir.Forward, int(o.stage+1), int(o.micro))
			if o.kind == ir.SendB {
				cons = ir.Compute(ir.Backward, int(o.stage-1), int(o.micro))
			}
			return ir.Program{}, &Error{Pass: "comm", Rank: r, Index: int(o.host), Step: p.Ranks[r][o.host], Reason: fmt.Sprintf("its output goes to %s (or I) on rank %d, which never runs it", cons, m.OpRank[id])}
		}
	}

	sim := strict.NewSim(m)
	for !sim.Run() {
		cand, candF := int32(-1), int32(-1)
		for r := range P {
			op, posted := sim.Head(r)
			if op < 0 || !posted {
				continue
			}
			if k := ops[op].kind; k == ir.SendB {
				cand = op
				break
			} else if k == ir.SendF && candF < 0 {
				candF = op
			}
		}
		if cand < 0 {
			cand = candF
		}
		if cand < 0 {
			return ir.Program{}, cycleError(p, sim, ops)
		}
		if !sim.Hoist(m.OpPartner[cand]) {
			// Cannot happen for a model built as above; report it rather than loop.
			o := ops[cand]
			r := int(m.OpRank[cand])
			return ir.Program{}, &Error{Pass: "comm", Rank: r, Index: int(o.host), Step: p.Ranks[r][o.host], Reason: "internal error: could not hoist the receive matching " + opStep(o, -1).String()}
		}
	}

	q := ir.Program{Placement: p.Placement, Micro: p.Micro, Ranks: make([][]ir.Step, P)}
	for r := range P {
		order := sim.Order(r)
		steps := p.Ranks[r]
		out := make([]ir.Step, 0, len(steps)+len(order))
		k := 0
		for j, st := range steps {
			for k < len(order) && sim.Gap(order[k]) <= j {
				out = append(out, opStep(ops[order[k]], m.OpRank[m.OpPartner[order[k]]]))
				k++
			}
			out = append(out, st)
		}
		for ; k < len(order); k++ {
			out = append(out, opStep(ops[order[k]], m.OpRank[m.OpPartner[order[k]]]))
		}
		q.Ranks[r] = out
	}
	return q, nil
}

func opStep(o commOp, peer int32) ir.Step {
	return ir.Comm(o.kind, int(o.stage), int(o.micro), int(peer))
}

// cycleError describes a stuck simulation in which no head is a send.
func cycleError(p ir.Program, sim *strict.Sim, ops []commOp) error {
	waits, ring := sim.Stuck()
	e := &CycleError{Pass: "comm", Chain: !ring}
	for _, w := range waits {
		bl := Blocked{Rank: w.Rank, Index: w.Host, Peer: w.Peer}
		if w.Host < len(p.Ranks[w.Rank]) {
			bl.Step = p.Ranks[w.Rank][w.Host]
		}
		if w.Op >= 0 {
			// The head is a receive; name the peer's step producing it.
			if src := sim.Partner(w.Op); src >= 0 && w.Peer >= 0 {
				bl.On = p.Ranks[w.Peer][ops[src].host]
			}
			if bl.Index >= len(p.Ranks[w.Rank]) {
				bl.Index = int(ops[w.Op].host)
				bl.Step = p.Ranks[w.Rank][bl.Index]
			}
		}
		e.Cycle = append(e.Cycle, bl)
	}
	return e
}

func filled(n int, v int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = v
	}
	return s
}
