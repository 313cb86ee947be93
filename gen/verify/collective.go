package verify

import (
	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/internal/strict"
	"github.com/ppgen/ppgen/gen/ir"
)

// collectives checks the steps of a collective kind (abi's IsCollective:
// ALL_REDUCE): a rendezvous every rank takes part in, the n-th of each
// rank meeting the n-th of every other. So every rank posts the same
// number of them, and
// the same number before its OPT_STEP (a reduction on one side of the
// optimizer step on one rank and on the other side on another would pair
// an iteration's gradient norm with the next one's). A rank that deviates
// from the count most ranks have is the one reported (the larger count
// when two are equally common: a step missing on one rank is the likelier
// slip). Whether the ranks can reach their collectives at all, given their
// transfers and exchanges, is the strict model's question
// (collectiveModel), with the steps the walk recorded. Every collective
// kind's rule is this one, declared by declareCollective from the kind's
// own file.
func init() {
	declareCollective(abi.AllReduce, collective{
		hint:      "an ALL_REDUCE passes only when every rank is at its own with every transfer before it done: put it after the transfers the other ranks need, as -clip does",
		sideOfOpt: true,
	})
}

// collective is what the file of a collective kind declares beyond the
// kind (declareCollective).
type collective struct {
	// hint is the rule's hint for a deadlock through one of its steps.
	hint string
	// sideOfOpt: every rank posts as many of the kind's steps before its
	// OPT_STEP as the others (ALL_REDUCE: a gradient norm belongs to one
	// iteration's step).
	sideOfOpt bool
	// check, when set, runs after the counts agree, with each rank's
	// indices of the kind's steps.
	check func(c *checker, steps [][]int) error
}

// declareCollective declares the rule of collective kind k (abi's
// IsCollective).
func declareCollective(k abi.Kind, co collective) {
	declareRule(&rule{kind: k, noStage: true, step: collectiveStep,
		check: func(c *checker) error { return c.collectives(k, co) },
		model: func(c *checker, m *strict.Model) *strict.Model { return c.collectiveModel(k, m) },
		hint:  co.hint})
}

// collectiveStep records, in the walk, rank r's collective step st at
// index i: a host step of no stage, whose waits are the rendezvous of
// every rank (collectiveModel).
func collectiveStep(c *checker, r, i int, st *ir.Step) (int, error) {
	if c.collSteps == nil {
		c.collSteps = make(map[abi.Kind][][]int, 1)
	}
	if c.collSteps[st.Kind] == nil {
		c.collSteps[st.Kind] = make([][]int, c.P)
	}
	c.collSteps[st.Kind][r] = append(c.collSteps[st.Kind][r], i)
	return 0, nil
}

func (c *checker) collectives(k abi.Kind, co collective) error {
	p := &c.p
	steps := c.collSteps[k]
	if steps == nil {
		return nil
	}
	before := make([]int, c.P) // per rank: how many come before OPT_STEP (-1: no OPT_STEP)
	for r, idx := range steps {
		before[r] = -1
		if o := c.optAt[r]; o >= 0 {
			before[r] = 0
			for _, i := range idx {
				if i < int(o) {
					before[r]++
				}
			}
		}
	}
	count := make([]int, c.P)
	for r := range count {
		count[r] = len(steps[r])
	}
	want, wantRank := usual(count)
	for r, n := range count {
		switch {
		case n < want:
			return c.fail(r, -1, collStep(k), Missing, "this rank posts %d %s, rank %d posts %d; every rank posts the same collectives in the same order, else the ranks that reach %s %d wait forever", n, k, wantRank, want, k, n)
		case n > want:
			i := steps[r][want]
			return c.fail(r, i, p.Ranks[r][i], Duplicate, "an extra collective: this rank posts %d %s, rank %d posts %d; every rank posts the same collectives in the same order, else this one waits forever", n, k, wantRank, want)
		}
	}
	if !co.sideOfOpt {
		return c.collectiveCheck(co, steps)
	}
	var withOpt []int
	for _, b := range before {
		if b >= 0 {
			withOpt = append(withOpt, b)
		}
	}
	if len(withOpt) == 0 {
		return c.collectiveCheck(co, steps)
	}
	wantBefore, _ := usual(withOpt)
	for r, b := range before {
		if b < 0 || b == wantBefore {
			continue
		}
		ref := 0
		for q, bq := range before {
			if bq == wantBefore {
				ref = q
				break
			}
		}
		i := steps[r][min(b, wantBefore)]
		return c.fail(r, i, p.Ranks[r][i], Order, "%d %s step(s) come before OPT_STEP (step %d) on this rank, %d on rank %d; every rank posts its collectives in the same sequence, on the same side of its optimizer step", b, k, c.optAt[r], wantBefore, ref)
	}
	return c.collectiveCheck(co, steps)
}

// collectiveCheck runs co's own check, if any.
func (c *checker) collectiveCheck(co collective, steps [][]int) error {
	if co.check == nil {
		return nil
	}
	return co.check(c, steps)
}

// usual returns the most common value of xs (the larger of two equally
// common) and the first index holding it.
func usual(xs []int) (v, at int) {
	n := make(map[int]int, 2)
	for _, x := range xs {
		n[x]++
	}
	best := -1
	for x, k := range n {
		if k > n[best] || k == n[best] && x > best {
			best = x
		}
	}
	for i, x := range xs {
		if x == best {
			return best, i
		}
	}
	return best, -1
}

func collStep(k abi.Kind) ir.Step {
	return ir.Step{Kind: k, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None}
}

// collectiveModel returns m with the waits of the steps of collective kind
// k (ALL_REDUCE): each is
// a host step, and rank r's n-th passes only when every rank's host is at
// its n-th with every transfer posted before it completed (the runtime
// drains the comm stream, then calls the trainer's reduction, which returns
// once every rank has contributed). So it waits, for every rank, for the
// host steps before that rank's n-th ALL_REDUCE and the last op of its
// stream before it, as a cross-rank TIE_GRAD waits for its peer's. A
// collective that one rank reaches only after a transfer that another rank
// posts after its own collective is then a cycle the strict model finds.
func (c *checker) collectiveModel(k abi.Kind, m *strict.Model) *strict.Model {
	return c.rendezvousModel(c.collSteps[k], m)
}

// rendezvousModel is collectiveModel for the host steps steps[r] of each
// rank r (as many on every rank), the n-th of every rank meeting.
func (c *checker) rendezvousModel(steps [][]int, m *strict.Model) *strict.Model {
	if len(steps) == 0 || len(steps[0]) == 0 {
		return m
	}
	where := make([][]hostPos, c.P)
	for r, idx := range steps {
		where[r] = c.hostPositions(m, r, idx)
	}
	extra := make(map[int32][]strict.Event, c.P*len(steps[0]))
	for r := range c.P {
		for n, me := range where[r] {
			var ws []strict.Event
			for q := range c.P {
				them := where[q][n]
				if q != r && them.host > 0 {
					ws = append(ws, strict.HostDone(q, int(them.host-1)))
				}
				if them.lastOp >= 0 {
					ws = append(ws, strict.OpDone(them.lastOp))
				}
			}
			extra[m.HostOff[r]+me.host] = ws
		}
	}
	return withWaits(m, extra)
}
