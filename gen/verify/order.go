package verify

import (
	"fmt"

	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/ir"
)

func (c *checker) overlapShape(r, i int, st *ir.Step) error {
	if len(st.Sub) != 2 {
		return c.fail(r, i, *st, Structure, "an overlap holds exactly two sub-steps, this one %d", len(st.Sub))
	}
	isBwd := func(k ir.Kind) bool { return k == ir.Backward || k == ir.BackwardInput || k == ir.BackwardWeight }
	a, b := st.Sub[0].Kind, st.Sub[1].Kind
	ok := (st.Kind == ir.OverlapFB && a == ir.Forward && isBwd(b)) || (st.Kind == ir.OverlapBF && isBwd(a) && b == ir.Forward)
	if !ok {
		want := "(F;B)"
		if st.Kind == ir.OverlapBF {
			want = "(B;F)"
		}
		return c.fail(r, i, *st, Structure, "%s runs a forward and a backward (B, I or W) in the order %s", st.Kind, want)
	}
	return nil
}

// leaf checks one non-overlap step (st, or a sub-step of the overlap top).
func (c *checker) leaf(rw *rankWalk, i int, top, st *ir.Step) error {
	r := rw.r
	k := st.Kind
	if !k.Valid() || k.IsOverlap() {
		return c.fail(r, i, *top, Structure, "%s is not a step kind that may appear here", k)
	}
	if st.Slot < ir.None {
		return c.fail(r, i, *top, Structure, "slot %d is negative (None is %d)", st.Slot, ir.None)
	}
	if k == ir.OptStep {
		if c.optAt[r] >= 0 {
			return c.fail(r, i, *top, Duplicate, "a second OPT_STEP on this rank (the first is step %d); the optimizer steps once per iteration", c.optAt[r])
		}
		c.optAt[r] = int32(i)
		return nil
	}
	s, m := st.Stage, st.Micro
	if s < 0 || s >= c.S {
		return c.fail(r, i, *top, Structure, "stage %d is outside 0..%d", s, c.S-1)
	}
	owner := c.rankOf[s] != r && c.p.OwnerStep(r, *st)
	if c.rankOf[s] != r && !owner {
		if (k == ir.DataLoad || k == ir.MpipeSend) && m >= 0 && m < c.M {
			return c.fail(r, i, *top, Structure, "stage %d lives on rank %d (placement %s), not on rank %d; only micro %d's owner (rank %d) may load its input for another rank's stage (mpipe)", s, c.rankOf[s], c.p.Placement, r, m, c.p.Placement.Owner(m))
		}
		return c.fail(r, i, *top, Structure, "stage %d lives on rank %d (placement %s), not on rank %d; every step runs on its stage's rank", s, c.rankOf[s], c.p.Placement, r)
	}
	if !k.HasMicro() {
		return nil // UNSHARD, RESHARD, REDUCE_GRAD: nothing more to check yet
	}
	if m < 0 || m >= c.M {
		return c.fail(r, i, *top, Structure, "micro-batch %d is outside 0..%d", m, c.M-1)
	}
	first, last := c.route(m)
	if s < first || s > last {
		return c.fail(r, i, *top, Structure, "micro-batch %d runs only stages %d..%d (its model copy), not stage %d", m, first, last, s)
	}
	if k.IsCompute() {
		rw.lastCompute = int32(i)
	}
	if k.IsComm() {
		want := ir.None
		switch k {
		case ir.SendF, ir.DataSend, ir.RecvB:
			if s < last {
				want = c.rankOf[s+1]
			}
		case ir.MpipeSend:
			want = c.rankOf[s] // OwnerStep: s is the first stage of m's route
		case ir.MpipeRecv:
			if s != first {
				return c.fail(r, i, *top, Structure, "MPIPE_FWD_RECV receives the input of micro %d for the first stage of its route (%d), not for stage %d", m, first, s)
			}
			if want = c.p.Placement.Owner(m); want == r {
				return c.fail(r, i, *top, Structure, "micro %d's owner is this rank (%d): it loads the input with DATA_LOAD, not a transfer", m, r)
			}
		default:
			if s > first {
				want = c.rankOf[s-1]
			}
		}
		switch {
		case want == ir.None:
			return c.fail(r, i, *top, Structure, "stage %d has no neighbour to %s (micro %d runs stages %d..%d)", s, map[bool]string{true: "send to", false: "receive from"}[k.IsSend()], m, first, last)
		case want == r:
			return c.fail(r, i, *top, Structure, "a transfer to its own rank: both stages live on rank %d, where colocated stages exchange through the slot (src), not a transfer", r)
		case st.Peer != want:
			if st.Peer == ir.None {
				return c.fail(r, i, *top, Structure, "peer not set; the placement puts the other end on rank %d (use Program.ResolvePeers)", want)
			}
			return c.fail(r, i, *top, Structure, "peer %d, but the placement puts the other end on rank %d", st.Peer, want)
		}
	}
	if k == ir.DataLoad && s != first && s != last {
		return c.fail(r, i, *top, Structure, "DATA_LOAD loads the input on the first stage of micro %d's route (%d) or the labels on its last stage (%d), not on stage %d; ship labels with DATA_SEND/DATA_RECV", m, first, last, s)
	}
	a := atOf(k)
	if owner && a == aLoad {
		a = aOLoad
	}
	if a < 0 {
		return nil // swap steps: range and placement only, for now
	}
	ch := s*c.M + m
	if prev := c.at[a][ch]; prev >= 0 {
		if a == aBwd {
			return c.fail(r, i, *top, Duplicate, "a second backward of stage %d micro %d (step %d ran %s); a chunk has one backward: B, or I then W", s, m, prev, c.stepAt(r, int(prev), ir.Backward, s, m))
		}
		return c.fail(r, i, *top, Duplicate, "%s runs twice on this rank (first at step %d); it may run once", st, prev)
	}
	c.at[a][ch] = int32(i)
	if k == ir.BackwardInput {
		c.bwdIsI[ch] = true
	}
	if k.IsComm() {
		c.opAt[a][ch] = rw.op // walkRank records it under this id
	}
	return nil
}

// stepAt returns the leaf step of kind like k on chunk (s, m) at index i of
// rank r (the sub-step when that step is an overlap).
func (c *checker) stepAt(r, i int, k ir.Kind, s, m int) ir.Step {
	st := c.p.Ranks[r][i]
	for _, sub := range st.Computes() {
		if sub.Stage == s && sub.Micro == m && atOf(sub.Kind) == atOf(k) {
			return sub
		}
	}
	return st
}

// where says where a step that should come before index i is.
func where(at int32, i int) string {
	switch {
	case at < 0:
		return "it never runs on this rank"
	case int(at) == i:
		return "it is the other half of this overlap; the two halves run together and cannot feed each other"
	}
	return fmt.Sprintf("it comes later, at step %d", at)
}

// pre checks step st's preconditions and notes the first failure.
func (c *checker) pre(rw *rankWalk, i int, top, st *ir.Step) {
	r := rw.r
	if err := c.preErr(r, i, top, st); err != nil {
		rw.order.note(r, i, func() error { return c.preErr(r, i, top, st) })
	}
}

// preErr checks that what step st (at index i of rank r; a sub-step of top)
// needs ran earlier on the rank. It runs during the walk, when only earlier
// steps are in the tables, and again at the end to word the failure.
func (c *checker) preErr(r, i int, top, st *ir.Step) error {
	if !st.Kind.HasMicro() || atOf(st.Kind) < 0 {
		return nil
	}
	s, m, M := st.Stage, st.Micro, c.M
	ch := s*M + m
	first, last := c.route(m)
	switch st.Kind {
	case ir.Forward:
		if s == first {
			if s != last && c.before(aLoad, ch, i) && c.before(aMRecv, ch, i) {
				return c.fail(r, i, *top, Structure, "%s takes an input that arrives twice: %s and %s both run on rank %d; an owned micro-batch's input comes from its owner only (mpipe)", st, ir.Compute(ir.DataLoad, s, m), ir.Compute(ir.MpipeRecv, s, m), r)
			}
			if c.hasData && !c.before(aLoad, ch, i) && !c.before(aMRecv, ch, i) {
				if c.at[aMRecv][ch] >= 0 {
					return c.need(r, i, top, st, "its input from its owner", ir.Compute(ir.MpipeRecv, s, m), aMRecv, ch)
				}
				return c.need(r, i, top, st, "its input", ir.Compute(ir.DataLoad, s, m), aLoad, ch)
			}
		} else if err := c.neighbourErr(r, i, top, st); err != nil {
			return err
		}
		if s == last && c.hasData && !c.before(aLoad, ch, i) && !c.before(aDRecv, ch, i) {
			return c.fail(r, i, *top, Order, "%s needs the labels of micro %d for the loss: %s or %s must come earlier on rank %d, but neither does", st, m, ir.Compute(ir.DataLoad, s, m), ir.Compute(ir.DataRecv, s, m), r)
		}
	case ir.Backward, ir.BackwardInput:
		if !c.before(aF, ch, i) {
			return c.need(r, i, top, st, "its forward", ir.Compute(ir.Forward, s, m), aF, ch)
		}
		if err := c.neighbourErr(r, i, top, st); err != nil {
			return err
		}
	case ir.BackwardWeight:
		if !c.before(aBwd, ch, i) || !c.bwdIsI[ch] {
			if x := c.at[aBwd][ch]; x >= 0 && !c.bwdIsI[ch] {
				return c.fail(r, i, *top, Order, "%s follows only an I, but this chunk ran a full B (step %d), which already computed the weight gradient", st, x)
			}
			return c.need(r, i, top, st, "the I of its chunk", ir.Compute(ir.BackwardInput, s, m), aBwd, ch)
		}
	case ir.SendF:
		if !c.before(aF, ch, i) {
			return c.need(r, i, top, st, "the output it sends", ir.Compute(ir.Forward, s, m), aF, ch)
		}
	case ir.SendB:
		if !c.before(aBwd, ch, i) {
			return c.need(r, i, top, st, "the input gradient it sends", c.bwdName(s, m), aBwd, ch)
		}
	case ir.MpipeSend:
		if !c.before(aOLoad, ch, i) {
			return c.need(r, i, top, st, "the input it ships", ir.Compute(ir.DataLoad, s, m), aOLoad, ch)
		}
	case ir.DataSend:
		if !c.before(aLoad, ch, i) && !c.before(aDRecv, ch, i) {
			return c.fail(r, i, *top, Order, "%s ships data this rank does not have yet: %s or %s must come earlier on rank %d", st, ir.Compute(ir.DataLoad, s, m), ir.Compute(ir.DataRecv, s, m), r)
		}
	}
	return nil
}

// neighbourErr checks that the cross-stage input of F, B or I step st (on
// rank r; deps.Neighbour) comes earlier on the rank: the
// colocated stage's step, or in a lowered program the receive that brings
// it from another rank.
func (c *checker) neighbourErr(r, i int, top, st *ir.Step) error {
	a, x, need, _ := c.neighbourAt(r, st)
	if !need || c.before(a, x, i) {
		return nil
	}
	m := st.Micro
	in, _ := deps.Neighbour(&c.p, st) // to word the failure
	what, from := "its input", ir.Compute(ir.Forward, in.Stage, m)
	if in.What == deps.Gradient {
		what, from = "its output gradient", c.bwdName(in.Stage, m)
	}
	if in.Rank == r {
		what += " from the colocated stage"
	} else {
		what, from = fmt.Sprintf("%s from stage %d on rank %d", what, in.Stage, in.Rank), ir.Compute(in.Recv, st.Stage, m)
	}
	return c.need(r, i, top, st, what, from, a, x)
}

// neighbourAt returns the table a and chunk x of the step that must come
// before F, B or I step st on rank r for its cross-stage input
// (deps.Neighbour): the colocated stage's step (local: x is then the chunk
// st reads as its src), or in a lowered program the receive that brings
// it; need is false when there is none to check.
func (c *checker) neighbourAt(r int, st *ir.Step) (a, x int, need, local bool) {
	stage, rank, _, grad, ok := deps.Across(&c.p, st) // deps.Neighbour, in registers
	if !ok {
		return 0, 0, false, false
	}
	producer, recv := deps.AcrossKinds(grad)
	switch {
	case rank == r:
		return atOf(producer), stage*c.M + st.Micro, true, true
	case c.lowered:
		return atOf(recv), st.Stage*c.M + st.Micro, true, false
	}
	return 0, 0, false, false
}

// crossAt and crossRecvAt are, by deps.Cross's grad, the tables of the
// step that produces a cross-stage input and of the receive that brings it
// from another rank (deps.AcrossKinds).
var crossAt, crossRecvAt = func() (p, q [2]int) {
	for g := range 2 {
		producer, recv := deps.AcrossKinds(g == 1)
		p[g], q[g] = atOf(producer), atOf(recv)
	}
	return p, q
}()

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// before reports whether the step of table a for chunk ran before index i
// on the rank being walked.
func (c *checker) before(a, chunk, i int) bool { x := c.at[a][chunk]; return x >= 0 && int(x) < i }

// need words the failure of step st (index i of rank r, a sub-step of top)
// whose input want (table a, chunk) does not come before it.
func (c *checker) need(r, i int, top, st *ir.Step, what string, want ir.Step, a, chunk int) error {
	return c.fail(r, i, *top, Order, "%s needs %s: %s must come earlier on rank %d, but %s", st, what, want, r, where(c.at[a][chunk], i))
}

// bwdName names the backward of a chunk as it runs (B or I), B when it never runs.
func (c *checker) bwdName(s, m int) ir.Step {
	if c.bwdIsI[s*c.M+m] {
		return ir.Compute(ir.BackwardInput, s, m)
	}
	return ir.Compute(ir.Backward, s, m)
}

// optSteps checks that OPT_STEP runs on every rank or on none: a rank
// without it would never update its weights while the others do.
func (c *checker) optSteps() error {
	with, without := -1, -1
	for r, o := range c.optAt {
		if o >= 0 && with < 0 {
			with = r
		}
		if o < 0 && without < 0 {
			without = r
		}
	}
	opt := ir.Step{Kind: ir.OptStep, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None}
	if c.forwardOnly && with >= 0 {
		return &Error{Rank: with, Index: int(c.optAt[with]), Step: opt, Code: Structure,
			Reason: "in a forward-only program (no backward anywhere): there are no gradients to step; drop OPT_STEP, or add the backwards"}
	}
	if with < 0 || without < 0 {
		return nil
	}
	return &Error{Rank: without, Index: -1, Step: opt, Code: Missing,
		Reason: fmt.Sprintf("never runs on this rank, but rank %d steps its optimizer (step %d); OPT_STEP runs on every rank or on none, else this rank's weights are never updated", with, c.optAt[with])}
}

// complete checks that every chunk on a micro-batch's route has its forward
// and backward (leaf rejects chunks outside it).
func (c *checker) complete() error {
	if c.single && c.allComplete() {
		return nil
	}
	for s := range c.S {
		r := c.rankOf[s]
		for m := range c.M {
			if !c.p.Runs(s, m) {
				continue
			}
			ch := s*c.M + m
			switch {
			case c.at[aF][ch] < 0:
				return &Error{Rank: r, Index: -1, Step: ir.Compute(ir.Forward, s, m), Code: Missing, Reason: fmt.Sprintf("never runs; every (stage, micro) needs one forward on rank %d", r)}
			case c.at[aBwd][ch] < 0 && !c.forwardOnly:
				return &Error{Rank: r, Index: -1, Step: ir.Compute(ir.Backward, s, m), Code: Missing, Reason: fmt.Sprintf("never runs: micro-batch %d's backward of stage %d (%s, or %s then %s) is missing, though its forward %s runs at step %d; every (stage, micro) needs B, or I then W, on rank %d", m, s, ir.Compute(ir.Backward, s, m), ir.Compute(ir.BackwardInput, s, m), ir.Compute(ir.BackwardWeight, s, m), ir.Compute(ir.Forward, s, m), c.at[aF][ch], r)}
			case c.bwdIsI[ch] && c.at[aW][ch] < 0:
				return &Error{Rank: r, Index: -1, Step: ir.Compute(ir.BackwardWeight, s, m), Code: Missing, Reason: fmt.Sprintf("never runs, but %s ran at step %d; an I needs its W", ir.Compute(ir.BackwardInput, s, m), c.at[aBwd][ch])}
			}
		}
	}
	return nil
}

// allComplete reports whether every chunk has its forward and backward
// (and a W after an I), as complete's loop checks them chunk by chunk,
// for a program of one pipeline, where every chunk is on its micro-batch's
// route: one pass over the tables, which complete repeats to word the
// first failure only when there is one.
func (c *checker) allComplete() bool {
	f, b, w := c.at[aF], c.at[aBwd], c.at[aW]
	if c.forwardOnly {
		b = f // no backward is expected: ask the forward twice
	}
	b, w, isI := b[:len(f)], w[:len(f)], c.bwdIsI[:len(f)]
	bad := int32(0)
	for ch, x := range f {
		z := int32(0)
		if isI[ch] {
			z = w[ch]
		}
		bad |= x | b[ch] | z // a sign bit: a step that never ran
	}
	return bad >= 0
}
