package verify

import (
	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/internal/strict"
	"github.com/ppgen/ppgen/gen/ir"
)

// collectives checks the ALL_REDUCE steps (abi's IsCollective): a
// reduction every rank takes part in, the n-th of each rank meeting the
// n-th of every other. So every rank posts the same number of them, and
// the same number before its OPT_STEP (a reduction on one side of the
// optimizer step on one rank and on the other side on another would pair
// an iteration's gradient norm with the next one's). A rank that deviates
// from the count most ranks have is the one reported (the larger count
// when two are equally common: a step missing on one rank is the likelier
// slip). Whether the ranks can reach their collectives at all, given their
// transfers and exchanges, is the strict model's question
// (collectiveModel), with the steps the walk recorded.
func init() {
	declareRule(&rule{kind: abi.AllReduce, noStage: true, step: collectiveStep, check: (*checker).collectives, model: (*checker).collectiveModel,
		hint: "an ALL_REDUCE passes only when every rank is at its own with every transfer before it done: put it after the transfers the other ranks need, as -clip does"})
}

// collectiveStep records, in the walk, rank r's ALL_REDUCE at index i: a
// host step of no stage, whose waits are the rendezvous of every rank
// (collectiveModel).
func collectiveStep(c *checker, r, i int, _ *ir.Step) (int, error) {
	c.collSteps[r] = append(c.collSteps[r], i)
	return 0, nil
}

func (c *checker) collectives() error {
	p := &c.p
	has := false
	for _, idx := range c.collSteps {
		has = has || len(idx) > 0
	}
	if !has {
		c.collSteps = nil
		return nil
	}
	before := make([]int, c.P) // per rank: how many come before OPT_STEP (-1: no OPT_STEP)
	for r, idx := range c.collSteps {
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
		count[r] = len(c.collSteps[r])
	}
	want, wantRank := usual(count)
	for r, n := range count {
		switch {
		case n < want:
			return c.fail(r, -1, collStep(), Missing, "this rank posts %d ALL_REDUCE, rank %d posts %d; every rank posts the same collectives in the same order, else the ranks that reach ALL_REDUCE %d wait forever", n, wantRank, want, n)
		case n > want:
			i := c.collSteps[r][want]
			return c.fail(r, i, p.Ranks[r][i], Duplicate, "an extra collective: this rank posts %d ALL_REDUCE, rank %d posts %d; every rank posts the same collectives in the same order, else this one waits forever", n, wantRank, want)
		}
	}
	var withOpt []int
	for _, b := range before {
		if b >= 0 {
			withOpt = append(withOpt, b)
		}
	}
	if len(withOpt) == 0 {
		return nil
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
		i := c.collSteps[r][min(b, wantBefore)]
		return c.fail(r, i, p.Ranks[r][i], Order, "%d ALL_REDUCE step(s) come before OPT_STEP (step %d) on this rank, %d on rank %d; every rank posts its collectives in the same sequence, on the same side of its optimizer step", b, c.optAt[r], wantBefore, ref)
	}
	return nil
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

func collStep() ir.Step {
	return ir.Step{Kind: abi.AllReduce, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None}
}

// collectiveModel returns m with the waits of the ALL_REDUCE steps: each is
// a host step, and rank r's n-th passes only when every rank's host is at
// its n-th with every transfer posted before it completed (the runtime
// drains the comm stream, then calls the trainer's reduction, which returns
// once every rank has contributed). So it waits, for every rank, for the
// host steps before that rank's n-th ALL_REDUCE and the last op of its
// stream before it, as a cross-rank TIE_GRAD waits for its peer's. A
// collective that one rank reaches only after a transfer that another rank
// posts after its own collective is then a cycle the strict model finds.
func (c *checker) collectiveModel(m *strict.Model) *strict.Model {
	if len(c.collSteps) == 0 || len(c.collSteps[0]) == 0 {
		return m
	}
	where := make([][]hostPos, c.P)
	for r, idx := range c.collSteps {
		where[r] = c.hostPositions(m, r, idx)
	}
	extra := make(map[int32][]strict.Event, c.P*len(c.collSteps[0]))
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
