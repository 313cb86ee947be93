package verify

import (
	"github.com/ppgen/ppgen/gen/internal/strict"
	"github.com/ppgen/ppgen/gen/ir"
)

// tieStep is one TIE_GRAD step: its rank and index, and its peer's (the
// step of the other rank of its tie), -1 for a tie within one rank.
type tieStep struct {
	rank, index int
	peer        int // index into c.tieSteps of the other end, or -1
}

// ties checks the TIE_GRAD steps against the program's ties
// (ir.Program.Ties, `-tie A:B`): the ties are valid (ir.CheckTies); each tie
// has one TIE_GRAD on the rank of each of its stages, naming that stage, or
// one naming its first stage when both live on one rank; each comes after
// the last backward producing weight gradients (B or W) of the stages it
// sums on its rank and before OPT_STEP; and no other TIE_GRAD exists (a
// forward-only program has none). It records the steps for the strict
// model (tieModel), in which a cross-rank exchange is a rendezvous.
func init() {
	declareRule(&rule{kind: ir.TieGrad, prepare: func(c *checker) { c.hasTie = true }, check: (*checker).ties, model: (*checker).tieModel,
		hint: "a TIE_GRAD passes only when both ranks of its tie are at theirs with every transfer before them done: put each after its rank's transfers, in the same order of ties on every rank, as -tie does"})
}

func (c *checker) ties() error {
	p := &c.p
	if !c.hasTie && len(p.Ties) == 0 {
		return nil
	}
	var found []tieStep
	for r, steps := range p.Ranks {
		for i := range steps {
			if steps[i].Kind == ir.TieGrad {
				found = append(found, tieStep{rank: r, index: i, peer: -1})
			}
		}
	}
	if len(found) == 0 && len(p.Ties) == 0 {
		return nil
	}
	if err := ir.CheckTies(p.Ties, c.S); err != nil {
		return &Error{Rank: -1, Index: -1, Code: Structure, Reason: err.Error()}
	}
	if c.forwardOnly && len(found) > 0 {
		f := found[0]
		return c.fail(f.rank, f.index, p.Ranks[f.rank][f.index], Structure, "in a forward-only program (no backward anywhere): there are no gradients to sum; drop TIE_GRAD, or add the backwards")
	}
	at := make(map[int]int, len(found)) // stage -> index into found
	for n, f := range found {
		st := p.Ranks[f.rank][f.index]
		t, ok := ir.TieOf(p.Ties, st.Stage)
		switch {
		case !ok && len(p.Ties) == 0:
			return c.fail(f.rank, f.index, st, Structure, "TIE_GRAD, but the program declares no tie; declare the tied stages with -tie A:B")
		case !ok:
			return c.fail(f.rank, f.index, st, Structure, "stage %d is in no tie (the ties are %v); TIE_GRAD names a stage of a tie", st.Stage, p.Ties)
		case c.rankOf[t.A] == c.rankOf[t.B] && st.Stage != t.A:
			return c.fail(f.rank, f.index, st, Structure, "both stages of tie %s live on rank %d, where one TIE_GRAD naming stage %d sums them", t, f.rank, t.A)
		}
		if prev, dup := at[st.Stage]; dup {
			return c.fail(f.rank, f.index, st, Duplicate, "a second TIE_GRAD of stage %d (the first is step %d); a tie's gradients are summed once per iteration", st.Stage, found[prev].index)
		}
		at[st.Stage] = n
		// After the last weight gradient of every stage it sums, before
		// OPT_STEP.
		for _, s := range []int{st.Stage, t.Other(st.Stage)} {
			if c.rankOf[s] != f.rank {
				continue
			}
			if last, ok := c.lastGrad(s); ok && last > f.index {
				return c.fail(f.rank, f.index, st, Order, "the gradient of stage %d is not final here: step %d (%s) adds to it later; sum a tie after its stages' last backward", s, last, p.Ranks[f.rank][last])
			}
		}
		if o := c.optAt[f.rank]; o >= 0 && int(o) < f.index {
			return c.fail(f.rank, f.index, st, Order, "after OPT_STEP (step %d): the optimizer would step on the unsummed gradient; TIE_GRAD goes before it", o)
		}
	}
	for _, t := range p.Ties {
		want := []int{t.A, t.B}
		if c.rankOf[t.A] == c.rankOf[t.B] {
			want = want[:1]
		}
		for _, s := range want {
			if _, ok := at[s]; !ok {
				r := c.rankOf[s]
				return c.fail(r, -1, ir.Step{Kind: ir.TieGrad, Stage: s, Micro: ir.None, Peer: ir.None, Slot: ir.None}, Missing, "never runs, but stages %d and %d are tied (%s): rank %d sums stage %d's tied gradients with TIE_GRAD %d before OPT_STEP", t.A, t.B, t, r, s, s)
			}
		}
		if len(want) == 2 {
			a, b := at[t.A], at[t.B]
			found[a].peer, found[b].peer = b, a
		}
	}
	c.tieSteps = found
	return nil
}

// lastGrad returns the index of the last step on its rank that adds to
// stage s's weight gradients (a B, or a W), and whether there is one.
func (c *checker) lastGrad(s int) (int, bool) {
	last := int32(-1)
	for m := range c.M {
		ch := s*c.M + m
		if w := c.at[aW][ch]; w > last {
			last = w
		}
		if b := c.at[aBwd][ch]; b > last && !c.bwdIsI[ch] {
			last = b
		}
	}
	return int(last), last >= 0
}

// tieModel returns m with the waits of the TIE_GRAD steps: each is a host
// step, and one of a cross-rank tie passes only when both ranks are at their
// TIE_GRAD with every transfer posted before it completed (the runtime
// drains the comm stream, then sends and receives the gradients; docs/design.md
// §6). So it waits for the peer's host to have run the steps before its
// TIE_GRAD, for the last op of its own stream before it and for the last op
// of the peer's stream before the peer's TIE_GRAD. A tie on one rank waits
// for nothing. Any misplaced exchange that a rank could wait on forever is
// then a cycle the strict model finds.
func (c *checker) tieModel(m *strict.Model) *strict.Model {
	if len(c.tieSteps) == 0 {
		return m
	}
	where := make([]hostPos, len(c.tieSteps))
	for n, f := range c.tieSteps {
		where[n] = c.hostPositions(m, f.rank, []int{f.index})[0]
	}
	extra := make(map[int32][]strict.Event, len(c.tieSteps))
	for n, f := range c.tieSteps {
		if f.peer < 0 {
			continue
		}
		me, peer := where[n], where[f.peer]
		h := m.HostOff[f.rank] + me.host
		var ws []strict.Event
		if peer.host > 0 {
			ws = append(ws, strict.HostDone(c.tieSteps[f.peer].rank, int(peer.host-1)))
		}
		if me.lastOp >= 0 {
			ws = append(ws, strict.OpDone(me.lastOp))
		}
		if peer.lastOp >= 0 {
			ws = append(ws, strict.OpDone(peer.lastOp))
		}
		extra[h] = ws
	}
	return withWaits(m, extra)
}
