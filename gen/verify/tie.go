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
	where := make([]meetPos, len(c.tieSteps))
	for n, f := range c.tieSteps {
		where[n] = c.meetPos(m, f.rank, f.index)
	}
	extra := make(map[int32][]strict.Event, len(c.tieSteps))
	for n, f := range c.tieSteps {
		if f.peer < 0 {
			continue
		}
		extra[m.HostOff[f.rank]+where[n].host] = append(where[n].ownWaits(), where[f.peer].peerWaits(c.tieSteps[f.peer].rank)...)
	}
	return withWaits(m, extra)
}

// meetPos is where a step that meets another rank's (TIE_GRAD, OPT_STEP
// with model copies) stands in the strict model: its host index on its
// rank and the global id of the last comm op of its rank before it (-1
// when none).
type meetPos struct{ host, lastOp int32 }

// meetPos returns the position of step index of rank r in m.
func (c *checker) meetPos(m *strict.Model, r, index int) meetPos {
	ops := int32(0)
	for i := range index {
		if c.p.Ranks[r][i].Kind.IsComm() {
			ops++
		}
	}
	last := int32(-1)
	if ops > 0 {
		last = m.OpOff[r] + ops - 1
	}
	return meetPos{int32(index) - ops, last}
}

// ownWaits is what a meeting step waits for on its own rank: the last op
// of its comm stream before it (the runtime drains the stream first).
func (p meetPos) ownWaits() []strict.Event {
	if p.lastOp >= 0 {
		return []strict.Event{strict.OpDone(p.lastOp)}
	}
	return nil
}

// peerWaits is what a meeting step waits for of the peer step p on rank
// r: r's host past the steps before p, and r's comm stream drained up to
// p.
func (p meetPos) peerWaits(r int) []strict.Event {
	var ws []strict.Event
	if p.host > 0 {
		ws = append(ws, strict.HostDone(r, int(p.host-1)))
	}
	if p.lastOp >= 0 {
		ws = append(ws, strict.OpDone(p.lastOp))
	}
	return ws
}

// withWaits returns m with extra's events added to the waits of the host
// steps they are keyed by (global host index).
func withWaits(m *strict.Model, extra map[int32][]strict.Event) *strict.Model {
	if len(extra) == 0 {
		return m
	}
	n := 0
	for _, ws := range extra {
		n += len(ws)
	}
	out := *m
	out.WaitOff = make([]int32, len(m.WaitOff))
	out.Waits = make([]strict.Event, 0, len(m.Waits)+n)
	for h := range len(m.WaitOff) - 1 {
		out.Waits = append(out.Waits, m.Waits[m.WaitOff[h]:m.WaitOff[h+1]]...)
		out.Waits = append(out.Waits, extra[int32(h)]...)
		out.WaitOff[h+1] = int32(len(out.Waits))
	}
	return &out
}
