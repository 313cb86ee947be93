package passes

import (
	"fmt"
	"math"
	"sort"

	"github.com/ppgen/ppgen/gen/ir"
)

// FSDPOptions configures FSDP.
type FSDPOptions struct {
	// Window is the most stages a rank holds unsharded at once (at least 1).
	Window int
	// Prefetch is the look-ahead of the all-gathers, in compute steps: each
	// UNSHARD moves up to Prefetch compute steps ahead of the compute step
	// that needs it (0: right before it), so that it can run on the
	// collective stream while those steps compute. A prefetched stage counts
	// as unsharded from its UNSHARD: an UNSHARD moves up only while fewer
	// than Window stages are unsharded, so never above the RESHARD that
	// frees its place in the window, nor above its own stage's last RESHARD.
	// With fewer than Prefetch compute steps before it, it may move up to
	// the start of the rank's steps.
	Prefetch int
}

// FSDP adds the steps of fully sharded data parallelism to a lowered
// program (docs/design.md §5, pass 7): on every rank, UNSHARD s (all-gather stage s's
// parameters) before the first compute step on s that finds it sharded,
// RESHARD s (free them) after its last compute step, REDUCE_GRAD s
// (reduce-scatter its gradients) right after its last backward that
// produces weight gradients (B or W), and at most opt.Window stages
// unsharded at once: when a step needs a stage and Window are already
// unsharded, the one whose next use is farthest away is resharded first
// (the stage the rank needs last; ties go to the lower stage). An overlap
// needs both its stages at once, so it needs Window ≥ 2 when they differ.
// Transfers, data loads and other steps are kept in place.
//
// With opt.Prefetch > 0 it then moves each UNSHARD up by as many compute
// steps as Prefetch asks and the window allows (see FSDPOptions); RESHARD
// and REDUCE_GRAD stay where they are, so the stages resharded are the
// same. Window < 1 and Prefetch < 0 are errors. The input's step lists are
// not modified.
func FSDP(p ir.Program, opt FSDPOptions) (ir.Program, error) {
	if opt.Window < 1 {
		return ir.Program{}, fmt.Errorf("fsdp: window %d; want at least 1 stage unsharded at a time", opt.Window)
	}
	if opt.Prefetch < 0 {
		return ir.Program{}, fmt.Errorf("fsdp: prefetch %d; want 0 (each UNSHARD right before its first use) or the number of compute steps to issue it ahead", opt.Prefetch)
	}
	q := p
	q.Ranks = make([][]ir.Step, len(p.Ranks))
	for r, steps := range p.Ranks {
		out, err := fsdpRank(steps, opt.Window, p.Stages())
		if err != nil {
			return ir.Program{}, fmt.Errorf("fsdp: rank %d: %w", r, err)
		}
		if opt.Prefetch > 0 {
			out = prefetchUnshards(out, opt.Window, opt.Prefetch)
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

// prefetchUnshards moves every UNSHARD of one rank's FSDP output up by at
// most k compute steps (to right before the k-th compute step above it, or
// to the start of the steps when fewer come before), stopping below the
// first point where the window is full or its stage is still unsharded (its
// last RESHARD). UNSHARDs are taken in order, each counted unsharded from
// its new place on, so the later ones see the room the earlier ones took;
// UNSHARDs that land at one point keep their order. Every other step keeps
// its place.
func prefetchUnshards(out []ir.Step, window, k int) []ir.Step {
	n := len(out)
	// cnt[p] is the number of stages unsharded just before step p (point
	// p), as FSDP placed them; ext[p] the stages that moved UNSHARDs make
	// unsharded there too.
	cnt := make([]int, n+1)
	ext := make([]int, n+1)
	var computeAt []int // positions of the compute steps
	c := 0
	for p := range out {
		cnt[p] = c
		switch kind := out[p].Kind; {
		case kind == ir.Unshard:
			c++
		case kind == ir.Reshard:
			c--
		case kind.IsCompute():
			computeAt = append(computeAt, p)
		}
	}
	cnt[n] = c
	ins := make([][]ir.Step, n+1) // the UNSHARDs placed at each point
	for q := range out {
		st := out[q]
		if st.Kind != ir.Unshard {
			continue
		}
		target := 0
		if j := sort.SearchInts(computeAt, q) - k; j >= 0 { // compute steps above q, less k
			target = computeAt[j]
		}
		p := q
		for p > target {
			if prev := out[p-1]; prev.Kind == ir.Reshard && prev.Stage == st.Stage {
				break
			}
			if cnt[p-1]+ext[p-1]+1 > window {
				break // the RESHARD that frees the place comes at p-1 or later
			}
			p--
		}
		for x := p; x <= q; x++ {
			ext[x]++
		}
		ins[p] = append(ins[p], st)
	}
	res := make([]ir.Step, 0, n)
	for p := 0; p <= n; p++ {
		res = append(res, ins[p]...)
		if p < n && out[p].Kind != ir.Unshard {
			res = append(res, out[p])
		}
	}
	return res
}
