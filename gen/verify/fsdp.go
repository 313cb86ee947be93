package verify

import (
	"fmt"

	"github.com/ppgen/ppgen/gen/ir"
)

// fsdpWalk checks one rank's FSDP steps as the walk meets them (docs/design.md §3):
// a stage that the rank UNSHARDs or RESHARDs anywhere computes only while
// unsharded (after an UNSHARD, before the next RESHARD; a stage with neither
// step keeps its parameters whole, as PyTorch's REDUCE_GRAD-only schedules
// do); UNSHARD and RESHARD alternate per stage and every stage ends
// resharded; when the program reduces gradients at all, every stage that
// computes has one REDUCE_GRAD, after its last backward and before
// OPT_STEP. A program with no FSDP step is not checked.
type fsdpWalk struct {
	managed  []bool  // per stage: the rank UNSHARDs or RESHARDs it
	reduce   bool    // the program holds REDUCE_GRAD steps
	active   []int32 // per stage: index of the UNSHARD in force, or -1
	reshard  []int32 // per stage: index of its last RESHARD, or -1
	reduced  []int32 // per stage: index of its REDUCE_GRAD, or -1
	computed []bool  // per stage: it computed on this rank
	nActive  int
	peak     int
	optAt    int
}

func newFSDPWalk(stages int, steps []ir.Step, reduce bool) *fsdpWalk {
	w := &fsdpWalk{managed: make([]bool, stages), reduce: reduce, active: make([]int32, stages), reshard: make([]int32, stages), reduced: make([]int32, stages), computed: make([]bool, stages), optAt: -1}
	for s := range stages {
		w.active[s], w.reshard[s], w.reduced[s] = -1, -1, -1
	}
	for i := range steps {
		if k, s := steps[i].Kind, steps[i].Stage; (k == ir.Unshard || k == ir.Reshard) && s >= 0 && s < stages {
			w.managed[s] = true
		}
	}
	return w
}

// step checks step i (st) of rank r. Stages are in range (leaf ran first).
func (w *fsdpWalk) step(c *checker, r, i int, st *ir.Step) error {
	switch st.Kind {
	case ir.Unshard:
		if a := w.active[st.Stage]; a >= 0 {
			return c.fail(r, i, *st, FSDP, "stage %d is unsharded already (UNSHARD at step %d); RESHARD it first", st.Stage, a)
		}
		w.active[st.Stage] = int32(i)
		w.nActive++
		w.peak = max(w.peak, w.nActive)
	case ir.Reshard:
		if w.active[st.Stage] < 0 {
			return c.fail(r, i, *st, FSDP, "stage %d is not unsharded here: RESHARD needs an UNSHARD before it", st.Stage)
		}
		w.active[st.Stage] = -1
		w.reshard[st.Stage] = int32(i)
		w.nActive--
	case ir.ReduceGrad:
		if d := w.reduced[st.Stage]; d >= 0 {
			return c.fail(r, i, *st, Duplicate, "a second REDUCE_GRAD of stage %d (the first is step %d); gradients are reduced once per iteration", st.Stage, d)
		}
		if !w.computed[st.Stage] {
			return c.fail(r, i, *st, FSDP, "stage %d has no backward before its REDUCE_GRAD; reduce its gradients after its last backward", st.Stage)
		}
		if w.optAt >= 0 {
			return c.fail(r, i, *st, FSDP, "REDUCE_GRAD of stage %d after OPT_STEP (step %d): the optimizer would step on unreduced gradients", st.Stage, w.optAt)
		}
		w.reduced[st.Stage] = int32(i)
	case ir.OptStep:
		w.optAt = i
	default:
		for _, cs := range st.Computes() {
			s := cs.Stage
			if w.managed[s] && w.active[s] < 0 {
				where := "no UNSHARD of it comes before"
				if w.reshard[s] >= 0 {
					where = fmt.Sprintf("its RESHARD at step %d left it sharded", w.reshard[s])
				}
				return c.fail(r, i, *st, FSDP, "stage %d computes while its parameters are sharded: %s", s, where)
			}
			if d := w.reduced[s]; d >= 0 {
				return c.fail(r, i, *st, FSDP, "stage %d computes after its REDUCE_GRAD at step %d; reduce after its last backward", s, d)
			}
			w.computed[s] = true
		}
	}
	return nil
}

// end checks what the rank owes at the end of its steps.
func (w *fsdpWalk) end(c *checker, r int) error {
	steps := c.p.Ranks[r]
	for s, a := range w.active {
		if a >= 0 {
			return c.fail(r, int(a), steps[a], FSDP, "stage %d is still unsharded at the end of the iteration; RESHARD it after its last use", s)
		}
	}
	for s, ok := range w.computed {
		if ok && w.reduce && w.reduced[s] < 0 {
			return c.fail(r, -1, ir.Step{Kind: ir.ReduceGrad, Stage: s, Micro: ir.None, Peer: ir.None, Slot: ir.None}, Missing, "stage %d computes on rank %d but its gradients are never reduced: REDUCE_GRAD %d after its last backward", s, r, s)
		}
	}
	return nil
}

// The rare step kinds a rank may hold, as bits (see walk).
const (
	hasShardStep  uint8 = 1 << iota // UNSHARD or RESHARD
	hasReduceStep                   // REDUCE_GRAD
	hasSwapStep                     // a SWAP_* step
	hasMpipeRecv                    // an MPIPE_FWD_RECV step (towerModel; the count pass notes it)
)

// extraOf is the bit of an FSDP or swap kind (abi's IsFSDP, IsSwap), 0 for
// the others.
func extraOf(k ir.Kind) uint8 {
	switch {
	case k == ir.ReduceGrad:
		return hasReduceStep
	case k.IsFSDP():
		return hasShardStep
	case k.IsSwap():
		return hasSwapStep
	}
	return 0
}
