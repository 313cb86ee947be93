package auto

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/partition"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/pricing"
	"github.com/ppgen/ppgen/gen/sim"
)

// recomputeOption is the lowering option (passes.Options.Set) the
// recompute candidates set: -recompute.
const recomputeOption = "recompute"

// recomputePolicies returns the -recompute values auto tries on a
// program of S stages, least recompute first: the first k stages for
// k = 1, 2, 4, ... below S (under 1F1B-like orders the first stages hold
// the most chunks), then every stage ("full").
func recomputePolicies(S int) []string {
	var out []string
	for k := 1; k < S; k *= 2 {
		stages := make([]string, k)
		for s := range k {
			stages[s] = strconv.Itoa(s)
		}
		out = append(out, "full:"+strings.Join(stages, ","))
	}
	return append(out, "full")
}

// withRecompute returns o with -recompute set to policy, its Set map
// copied.
func withRecompute(o gen.Options, policy string) gen.Options {
	set := maps.Clone(o.Passes.Set)
	if set == nil {
		set = map[string]string{}
	}
	set[recomputeOption] = policy
	o.Passes.Set = set
	return o
}

// recomputeEligible reports whether auto may try recompute at all: under a
// memory limit, without -recompute given and without an option that
// rewrites the compute order.
func recomputeEligible(opt Options, rewrites bool) bool {
	return opt.MemLimit > 0 && !rewrites && !opt.Passes.ForwardOnly && opt.Passes.Set[recomputeOption] == ""
}

// recomputeBinds reports whether the memory limit keeps a faster order
// out: no candidate fits it (best is +Inf), or a family's compute order
// whose bound is under best holds more than the limit. Only then does
// auto try recompute (recomputeTries).
func recomputeBinds(limit float64, tries []*autoTry, best float64) bool {
	for _, t := range tries {
		if !t.synth && t.bound < best && overLimit(t, limit) {
			return true
		}
	}
	return false
}

// overLimit reports whether a try's order holds more than limit: its
// compute order's memory, or its lowered program's once evaluated.
func overLimit(t *autoTry, limit float64) bool {
	if t.evaluated {
		return t.err == nil && t.cand.Skipped != ""
	}
	return t.boundMem > limit*(1+1e-9)
}

// recomputeTries tries recompute policies (recomputePolicies) on the
// families' orders that are over the memory limit and whose compute order
// alone is faster than best: on each, in increasing bound, the least
// recompute at the latest point (RECOMPUTE right before the chunk's first
// backward) that fits the limit, then the same policy with @idle (each
// RECOMPUTE moved into idle time, passes.RecomputeIntoIdle). Recompute only
// adds steps to the compute order, so the order's bound stays a lower
// bound, and the search stops at the first bound over the best makespan
// found. With -partition auto, an order is also tried with the split
// gen/partition finds without the limit (the fastest split, recompute
// bringing it within the limit), that split's own compute order bounding
// it. It returns the tries evaluated (each evaluated, cand set, its
// Recompute the policy), indexed from index on.
func recomputeTries(opt Options, c sim.Cost, tries []*autoTry, best float64, index int) []*autoTry {
	var bases []recomputeBase
	for _, t := range tries {
		if t.synth || t.partitioned || !(t.bound < best) || !overLimit(t, opt.MemLimit) {
			continue
		}
		bases = append(bases, recomputeBase{t: t, layers: t.layers, bound: t.bound})
		if sp := opt.Split; sp != nil && sp.Partition {
			pr, err := sp.search(t.built, 0)
			if err != nil || slices.Equal(pr.Split.Bounds, t.layers.Bounds) {
				continue
			}
			r, _, err := sp.run(t.built, pr.Split)
			if err != nil || !(r.Makespan < best) {
				continue
			}
			bases = append(bases, recomputeBase{t: t, layers: pr.Split, partitioned: true, bound: r.Makespan})
		}
	}
	slices.SortStableFunc(bases, func(a, b recomputeBase) int { return cmp.Compare(a.bound, b.bound) })
	const eps = 1e-9
	var out []*autoTry
	eval := func(b recomputeBase, policy string) *autoTry {
		o := opt
		o.Options = withRecompute(opt.Options, policy)
		t := &autoTry{cfg: b.t.cfg, built: b.t.built, index: index, partitioned: b.partitioned, layers: b.layers,
			bound: b.bound, recompute: policy, evaluated: true, baseIndex: b.t.index}
		index++
		var res gen.Result
		var r sim.Result
		var mem float64
		var err error
		if sp := opt.Split; sp != nil {
			res, r, mem, err = EvaluateSplit(t.cfg, o.Options, sp, b.layers)
		} else {
			res, r, mem, err = Evaluate(t.cfg, o, c)
		}
		if err != nil {
			t.err = err
			return t
		}
		t.res = res
		t.cand = Candidate{Config: res.Config, Makespan: r.Makespan, Bubble: r.Bubble, ActMem: mem, Layers: res.Layers,
			Partitioned: b.partitioned, Recompute: policy}
		if mem > opt.MemLimit*(1+eps) {
			t.cand.Skipped = fmt.Sprintf("activation memory %.4g over the limit %.4g", mem, opt.MemLimit)
		}
		return t
	}
	for _, b := range bases {
		if b.bound > best+eps*max(1, best) {
			break // this bound and every later one: over the best
		}
		cost, err := b.cost(opt, c)
		if err != nil {
			continue
		}
		for _, policy := range recomputePolicies(b.t.built.Stages()) {
			// sim.LowerBound of the order with its RECOMPUTE steps, a
			// bound of both placements; more recompute only adds work.
			pol, err := passes.ParseRecompute(policy)
			if err != nil {
				break
			}
			withR, err := passes.Recompute(b.t.built, pol)
			if err != nil {
				break
			}
			if lb, err := sim.LowerBound(withR, cost, sim.BoundOptions{}); err != nil || lb > best+eps*max(1, best) {
				break
			}
			t := eval(b, policy)
			if t.err != nil {
				break
			}
			if t.cand.Skipped != "" {
				if t.recompute == "full" {
					out = append(out, t) // the least memory the order reaches
				}
				continue // more recompute
			}
			out = append(out, t)
			best = min(best, t.cand.Makespan)
			if idle := eval(b, policy+"@idle"); idle.err == nil {
				out = append(out, idle)
				if idle.cand.Skipped == "" {
					best = min(best, idle.cand.Makespan)
				}
			}
			break
		}
	}
	slices.SortStableFunc(out, func(a, b *autoTry) int { return cmp.Compare(a.baseIndex, b.baseIndex) })
	return out
}

// recomputeBase is an order recomputeTries tries policies on: a family's
// try, with its layers' split (with a model), and the order's bound.
type recomputeBase struct {
	t           *autoTry
	layers      model.Partition
	partitioned bool
	bound       float64
}

// cost is the cost model the base's order runs under (as Evaluate and
// EvaluateSplit price it), for its lower bound.
func (b recomputeBase) cost(opt Options, c sim.Cost) (sim.Cost, error) {
	p := b.t.built
	switch {
	case opt.Split != nil:
		return opt.Split.Pricing.Split(b.layers, partition.Copies(p))
	case opt.StageCost != nil:
		return opt.StageCost(p.Stages(), max(p.Copies, 1))
	}
	return pricing.PerShare(c, max(b.t.cfg.Virtual/max(p.Copies, 1), 1))
}
