package synth

import (
	"fmt"
	"math"
	"slices"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// MemoryCap is the cap a per-rank memory limit puts on a program of
// placement pl, as sim.LowerBound and LowerBound take it, both as live
// chunks per stage (MaxLive) and per rank (Act, Cap): act[s] is what one
// live chunk of stage s holds and params[s] what stage s holds throughout,
// in the limit's units; each rank may hold its limit less its stages'
// params. A nil act counts a chunk as one unit, the limit as a whole
// number of chunks (at least one); nil params hold nothing. act and
// params, when given, have one entry per stage.
func MemoryCap(pl ir.Placement, limit float64, act, params []float64) (sim.BoundOptions, error) {
	S := pl.Stages()
	if (act != nil && len(act) != S) || (params != nil && len(params) != S) {
		return sim.BoundOptions{}, fmt.Errorf("memory cap: %d acts and %d params for %d stages", len(act), len(params), S)
	}
	if act == nil {
		limit = float64(max(1, int(min(limit, float64(ir.MaxChunks)))))
		act = make([]float64, S)
		for s := range act {
			act[s] = 1
		}
	}
	rankParams := make([]float64, pl.Ranks())
	if params != nil {
		for s, rk := range pl.RankOf {
			rankParams[rk] += params[s]
		}
	}
	opt := sim.BoundOptions{MaxLive: make([]int, S), Act: act, Cap: make([]float64, len(rankParams))}
	for rk, p := range rankParams {
		opt.Cap[rk] = max(limit-p, 0)
	}
	for s := range S {
		if act[s] > 0 {
			k := (limit - rankParams[pl.RankOf[s]]) / act[s]
			opt.MaxLive[s] = max(1, int(min(k, float64(ir.MaxChunks))))
		}
	}
	return opt, nil
}

// LowerBound is sim.LowerBound of p under cost and the cap of opt,
// raised, under a cap (opt.Cap) on a small program, to what Exact proves
// (exact true): the least makespan of any order of p's stages' compute
// steps within the cap, or makespan, p's own, when no order is faster.
// Without a cap the bound's terms are seldom loose, and no search is run.
func LowerBound(p ir.Program, cost sim.Cost, opt sim.BoundOptions, makespan float64) (bound float64, exact bool, err error) {
	lb, err := sim.LowerBound(p, cost, opt)
	if err != nil {
		return 0, false, err
	}
	if opt.Cap == nil {
		return lb, false, nil
	}
	if best, ok := exactBound(p, cost, opt, makespan); ok {
		return max(lb, best), true, nil
	}
	return lb, false, nil
}

// exactNodes is the search nodes exactBound spends at most (under a
// second of CPU).
const exactNodes = 2_000_000

// exactMaxSteps is the most compute steps (3 · stages · micro-batches)
// exactBound searches.
const exactMaxSteps = 128

// exactBound runs Exact on the compute steps of p (one model copy, every
// backward split or B = I + W, no swaps) with the cap of opt per rank,
// below makespan. ok: the search finished, and the optimum, or makespan
// when no order beats it, is a lower bound of any order.
func exactBound(p ir.Program, cost sim.Cost, opt sim.BoundOptions, makespan float64) (float64, bool) {
	S, M := p.Stages(), p.Micro
	if p.Copies > 1 || 3*S*M > exactMaxSteps || !(makespan > 0) {
		return 0, false
	}
	c, err := cost.Resolve(S)
	if err != nil {
		return 0, false
	}
	for s := range S {
		b, i, w := c.StepCost(ir.Compute(ir.Backward, s, 0)), c.StepCost(ir.Compute(ir.BackwardInput, s, 0)), c.StepCost(ir.Compute(ir.BackwardWeight, s, 0))
		if math.Abs(b-i-w) > 1e-9*max(1, b) {
			return 0, false // an unsplit B is not an I then a W here
		}
	}
	for _, steps := range p.Ranks {
		for _, st := range steps {
			switch st.Kind {
			case ir.OverlapFB, ir.OverlapBF, ir.SwapLaunchOffload, ir.SwapWaitOffload, ir.SwapLaunchLoad, ir.SwapWaitLoad, abi.Recompute:
				return 0, false // overlap, swap and recompute steps: another model
			}
		}
	}
	pr := Problem{Placement: p.Placement, Micro: M, Cost: c}
	if opt.Cap != nil {
		// opt.Cap is each rank's limit less its params: one cap for all
		// ranks, less a fixed part on the ranks with less room.
		pr.Act, pr.Cap, pr.Fixed = opt.Act, slices.Max(opt.Cap), make([]float64, len(opt.Cap))
		for r, x := range opt.Cap {
			pr.Fixed[r] = pr.Cap - x
		}
	}
	o, ok, err := Exact(pr, exactNodes, makespan)
	if err != nil || !ok || !o.Proved {
		return 0, false
	}
	if o.Program.Ranks != nil {
		return o.Makespan, true
	}
	return makespan, true
}
