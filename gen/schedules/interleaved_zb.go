package schedules

import (
	"fmt"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// interleavedZBName is the one zero-bubble family that takes less-memory.
const interleavedZBName = "interleaved-zb"

func init() {
	Register(Family{
		Name:           interleavedZBName,
		Summary:        "interleaved 1F1B with B split into I and W at PyTorch's ZB1P memory, W's placed for the cost model (-cost); option less-memory",
		Constraints:    "as interleaved: any ranks ≥ 1, virtual ≥ 1 and micro ≥ 1",
		DefaultVirtual: 2,
		UsesCost:       true,
		Build:          buildInterleavedZB,
	})
}

// buildInterleavedZB returns the interleaved order with every B split into
// its input-gradient half I and its weight-gradient half W, the W's placed
// where they cost the least time under the cost model cfg.Cost (F = I = W
// = 1 when nil), within a limit on live chunks that is PyTorch's
// ScheduleInterleavedZeroBubble's (ZB1P) own peak.
//
// Memory. The forwards and I's follow the interleaved order (its groups,
// table and mirrored backwards). With the less-memory warm-up
// w_r = (V-1)·G₀ + (P-1-r), which is PyTorch's, rank r holds at most
// c_r = min(V·M, w_r + 1) chunks before its W's are counted; the limit L is
// the largest, c₀ = min(V·M, (V-1)·G₀ + P): V·P chunks (P full-stage
// micro-batches) when M is a multiple of P ≥ ... , which is what PyTorch's
// order holds on every rank. With the less-memory option rank r is held to
// its own c_r instead, so the later ranks keep fewer chunks (interleaved
// -less-memory's per-rank figures), at the same largest peak.
//
// Candidates. Within the limit the order is the fastest, under the cost
// model, of up to four orders (the first among equals, so at unit costs
// the result is PyTorch's order wherever nothing beats it):
//
//   - the less-memory skeleton with PyTorch's rule for W: rank r defers its
//     first d_r = limit − w_r − 1 W's (r for the default limit), then runs
//     one W after every I, and the d_r deferred ones at its end;
//   - the same skeleton with zbFill (a W wherever the next F or I would
//     wait, in unit time, and before a forward at the limit);
//   - both again on a wider skeleton: interleaved's default warm-up
//     (V-1)·G₀ + 2·(P-1-r) cut at the limit less one, whose spare forwards
//     cover a gradient's round trip under comm latency at the price of
//     fewer deferred W's.
//
// Each is simulated compute-only by gen/sim under the cost model (F, I, W
// per stage, comm as the latency of every cross-rank dependency), so the
// order changes with the costs where that pays: at F = 1, I = 0.5, W = 1.5
// on P = 8, V = 2, M = 16 it runs in 103 units where the zbFill order of
// before took 112.5. With V = 1 the order is ZB-H1's memory (P chunks)
// by the same rules.
func buildInterleavedZB(cfg ir.Config) (ir.Program, error) {
	const name = interleavedZBName
	p, err := zbLoopProgram(name, cfg, 0)
	if err != nil {
		return ir.Program{}, err
	}
	cost, err := izbCost(cfg.Cost, p.Stages())
	if err != nil {
		return ir.Program{}, fmt.Errorf("%s: cost model: %w", name, err)
	}
	ranks, v, m := cfg.Ranks, cfg.Virtual, cfg.Micro
	groups := interleavedGroups(ranks, m)
	table := interleavedTable(groups, v)
	n := len(table) // V·M chunks per rank
	lean := make([]int, ranks)
	limits := make([]int, ranks)
	limit := 0
	for r := range lean {
		lean[r] = interleavedWarmup(ranks, v, m, r, groups[0], true)
		limits[r] = min(n, lean[r]+1)
		limit = max(limit, limits[r])
	}
	if !cfg.Options.LessMemory {
		for r := range limits {
			limits[r] = limit
		}
	}
	wide := make([]int, ranks)
	widen := false
	for r := range wide {
		wide[r] = max(lean[r], min(interleavedWarmup(ranks, v, m, r, groups[0], false), limits[r]-1))
		widen = widen || wide[r] != lean[r]
	}
	warmups := [][]int{lean}
	if widen {
		warmups = append(warmups, wide)
	}
	var best [][]ir.Step
	bestSpan := 0.0
	for _, warm := range warmups {
		skel := make([][]ir.Step, ranks)
		for r := range skel {
			skel[r] = interleavedRankOrder(table, ranks, v, r, warm[r], ir.BackwardInput)
		}
		filled, err := zbFillRanks(p.Placement, m, skel, limits)
		if err != nil {
			return ir.Program{}, fmt.Errorf("%s: %w", name, err)
		}
		for _, order := range [][][]ir.Step{izbDeferW(skel, warm, limits), filled} {
			cand := ir.Program{Placement: p.Placement, Micro: m, Ranks: order}
			if r, ok := izbOverLimit(cand, limits); ok {
				return ir.Program{}, fmt.Errorf("%s: a candidate order holds more than %d chunks on rank %d; this is a bug in the family", name, limits[r], r)
			}
			res, err := sim.Run(cand, cost)
			if err != nil {
				return ir.Program{}, fmt.Errorf("%s: a candidate order does not run (a bug in the family): %w", name, err)
			}
			if best == nil || res.Makespan < bestSpan-1e-9*max(1, bestSpan) {
				best, bestSpan = order, res.Makespan
			}
		}
	}
	p.Ranks = best
	return p, nil
}

// izbCost is the sim cost model of c for a program of the given number of
// stages: c's F, I and W (1 where not given) and its comm.
func izbCost(c *ir.Costs, stages int) (sim.Cost, error) {
	one := []float64{1}
	sc := sim.Cost{F: one, I: one, W: one}
	if c != nil {
		for _, f := range []struct {
			dst *[]float64
			src []float64
		}{{&sc.F, c.F}, {&sc.I, c.I}, {&sc.W, c.W}} {
			if f.src != nil {
				*f.dst = f.src
			}
		}
		sc.Comm = c.Comm
	}
	return sc.Resolve(stages)
}

// izbDeferW places the W's of the skeleton by PyTorch's ZB1P rule: rank r,
// whose skeleton starts with warm[r] forwards, defers its first
// d_r = limits[r] − warm[r] − 1 W's (none when negative), then runs the
// oldest pending W right after every I, and the deferred ones at its end,
// oldest first. The peak of rank r is then at most limits[r]: after its
// k-th I (k from 0) it has run warm[r] + k + 1 forwards at most and
// max(0, k − d_r + 1) W's.
func izbDeferW(skel [][]ir.Step, warm, limits []int) [][]ir.Step {
	out := make([][]ir.Step, len(skel))
	for r, steps := range skel {
		d := max(0, limits[r]-warm[r]-1)
		order := make([]ir.Step, 0, len(steps)*3/2)
		var pending []ir.Step
		k := 0
		for _, st := range steps {
			order = append(order, st)
			if st.Kind != ir.BackwardInput {
				continue
			}
			pending = append(pending, ir.Compute(ir.BackwardWeight, st.Stage, st.Micro))
			if k >= d {
				order = append(order, pending[0])
				pending = pending[1:]
			}
			k++
		}
		out[r] = append(order, pending...)
	}
	return out
}

// izbOverLimit reports the first rank of p that holds more than limits[r]
// chunks (F run, W not yet) at some point of its order.
func izbOverLimit(p ir.Program, limits []int) (int, bool) {
	for r, steps := range p.Ranks {
		live := 0
		for _, st := range steps {
			switch st.Kind {
			case ir.Forward:
				if live++; live > limits[r] {
					return r, true
				}
			case ir.BackwardWeight:
				live--
			}
		}
	}
	return 0, false
}
