package verify

import (
	"github.com/ppgen/ppgen/gen/internal/strict"
	"github.com/ppgen/ppgen/gen/ir"
)

// The OPT_STEP exchanges of a trainable preprocess (mpipe's tower:
// pipe.Config.Tower, docs/schedules.md's mpipe). A program that ships
// owned inputs (MPIPE_FWD_RECV steps) may run with a Tower, and then
// every rank's OPT_STEP is a rendezvous: once its comm stream drained, the
// first stage's rank sends each owned micro-batch's input gradient to its
// owner, the owners run the tower's backward, and the replicas' gradients
// are summed across every rank before the optimizer steps. So in the
// strict model each rank's OPT_STEP waits, as an ALL_REDUCE does, for the
// host steps before every rank's OPT_STEP and for the last op each rank's
// stream posted before it (towerModel). A program whose rank waits, before
// its OPT_STEP, on a transfer another rank posts after its own (OPT_STEP
// not last, a send after it) is then a cycle the deadlock check reports.
// Programs without MPIPE_FWD_RECV, or without OPT_STEP (forward-only), are
// not changed.
func init() {
	declareRule(&rule{kind: ir.OptStep, model: (*checker).towerModel,
		hint: "in a program that ships owned inputs (mpipe), OPT_STEP is a rendezvous of every rank when a trainable tower runs (its gradients go back to the owners and are summed): put OPT_STEP last on every rank, after every transfer, as ppgen lowers it"})
}

// towerModel returns m with the waits of the tower's exchanges at every
// rank's OPT_STEP, when the program ships owned inputs and every rank
// has an OPT_STEP.
func (c *checker) towerModel(m *strict.Model) *strict.Model {
	// The walk's count pass noted whether the program holds one (no
	// look at the chunk table on the simulation's serial path).
	if !c.mpipeRecv {
		return m
	}
	at := make([][]int, c.P)
	for r, o := range c.optAt {
		if o < 0 {
			return m // forward-only, or a rank without one: the opt checks say so
		}
		at[r] = []int{int(o)}
	}
	return c.rendezvousModel(at, m)
}
