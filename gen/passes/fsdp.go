package passes

import (
	"fmt"
	"math"

	"github.com/ppgen/ppgen/gen/ir"
)

// FSDP adds the steps of fully sharded data parallelism to a lowered
// program (DESIGN §5, pass 5): on every rank, UNSHARD s (all-gather stage s's
// parameters) before the first compute step on s that finds it sharded,
// RESHARD s (free them) after its last compute step, REDUCE_GRAD s
// (reduce-scatter its gradients) right after its last backward that
// produces weight gradients (B or W), and at most window stages unsharded at
// once: when a step needs a stage and window are already unsharded, the one
// whose next use is farthest away is resharded first (the stage the rank
// needs last; ties go to the lower stage). An overlap needs both its stages
// at once, so it needs window ≥ 2 when they differ. window < 1 is an error;
// transfers, data loads and other steps are kept in place. The input's step
// lists are not modified.
func FSDP(p ir.Program, window int) (ir.Program, error) {
	if window < 1 {
		return ir.Program{}, fmt.Errorf("fsdp: window %d; want at least 1 stage unsharded at a time", window)
	}
	q := p
	q.Ranks = make([][]ir.Step, len(p.Ranks))
	for r, steps := range p.Ranks {
		out, err := fsdpRank(steps, window, p.Stages())
		if err != nil {
			return ir.Program{}, fmt.Errorf("fsdp: rank %d: %w", r, err)
		}
		q.Ranks[r] = out
	}
	return q, nil
}

// fsdpRank is FSDP for one rank's steps.
func fsdpRank(steps []ir.Step, window, stages int) ([]ir.Step, error) {
	uses := make([][]int, stages) // step indices that compute on each stage
	lastGrad := make([]int, stages)
	for s := range lastGrad {
		lastGrad[s] = -1
	}
	for i := range steps {
		for _, cs := range steps[i].Computes() {
			if cs.Stage < 0 || cs.Stage >= stages {
				return nil, fmt.Errorf("step %d (%s): stage %d outside 0..%d", i, steps[i], cs.Stage, stages-1)
			}
			if u := uses[cs.Stage]; len(u) == 0 || u[len(u)-1] != i {
				uses[cs.Stage] = append(uses[cs.Stage], i)
			}
			if cs.Kind == ir.Backward || cs.Kind == ir.BackwardWeight {
				lastGrad[cs.Stage] = i
			}
		}
	}
	next := make([]int, stages) // index into uses[s] of the next use
	nextUse := func(s, i int) int {
		for next[s] < len(uses[s]) && uses[s][next[s]] < i {
			next[s]++
		}
		if next[s] < len(uses[s]) {
			return uses[s][next[s]]
		}
		return math.MaxInt
	}
	active := make([]bool, stages)
	nActive := 0
	out := make([]ir.Step, 0, len(steps)+3*stages)
	fsdpStep := func(k ir.Kind, s int) ir.Step {
		return ir.Step{Kind: k, Stage: s, Micro: ir.None, Peer: ir.None, Slot: ir.None}
	}
	for i := range steps {
		cs := steps[i].Computes()
		need := func(s int) bool {
			for _, c := range cs {
				if c.Stage == s {
					return true
				}
			}
			return false
		}
		for _, c := range cs {
			s := c.Stage
			if active[s] {
				continue
			}
			for nActive >= window {
				victim, far := -1, -1
				for v := range stages {
					if !active[v] || need(v) {
						continue
					}
					if n := nextUse(v, i); n > far {
						victim, far = v, n
					}
				}
				if victim < 0 {
					return nil, fmt.Errorf("step %d (%s) computes on %d stages at once, more than the window of %d unsharded stages; raise the window", i, steps[i], len(cs), window)
				}
				out = append(out, fsdpStep(ir.Reshard, victim))
				active[victim] = false
				nActive--
			}
			out = append(out, fsdpStep(ir.Unshard, s))
			active[s] = true
			nActive++
		}
		out = append(out, steps[i])
		for _, c := range cs {
			s := c.Stage
			if !active[s] {
				continue // both sub-steps of an overlap on one stage
			}
			if lastGrad[s] == i {
				out = append(out, fsdpStep(ir.ReduceGrad, s))
			}
			if u := uses[s]; u[len(u)-1] == i {
				out = append(out, fsdpStep(ir.Reshard, s))
				active[s] = false
				nActive--
			}
		}
	}
	return out, nil
}
