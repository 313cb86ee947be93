package auto

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
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

// recomputeTries tries recompute policies on the families' orders that
// are over the memory limit and whose compute order alone is faster than
// best: on each, in increasing bound, the greedy policy (greedyRecompute)
// at the latest point (RECOMPUTE right before the chunk's first
// backward), and when that does not fit, the least of recomputePolicies
// that fits; then the idleTries fastest that fit again with @idle (each
// RECOMPUTE moved into idle time, passes.RecomputeIntoIdle). Recompute
// only adds steps to the compute order, so the order's bound stays a lower
// bound: the search stops at the first bound over the best makespan found,
// and skips a policy whose sim.LowerBound with its RECOMPUTE steps is over
// it. With -partition auto, an order is also tried with the split
// gen/partition finds without the limit (the fastest split, recompute
// bringing it within the limit), that split's own compute order bounding
// it. It returns the tries evaluated (each evaluated, cand set, its
// Recompute the policy), indexed from index on, in the families' order.
func recomputeTries(opt Options, c sim.Cost, tries []*autoTry, best float64, index int) []*autoTry {
	bases := limitBases(opt, tries, best)
	const eps = 1e-9
	var out []*autoTry
	eval := func(b recomputeBase, policy string) *autoTry {
		o := opt
		o.Options = withRecompute(opt.Options, policy)
		t := evalLimited(o, c, b, index, policy, 0)
		index++
		return t
	}
	// fit is a policy that fit at the latest point, and its bound.
	type fit struct {
		b  recomputeBase
		t  *autoTry
		lb float64
	}
	var fits []fit
	for _, b := range bases {
		if b.bound > best+eps*max(1, best) {
			break // this bound and every later one: over the best
		}
		cost, err := b.cost(opt, c)
		if err != nil {
			continue
		}
		// boundOf is sim.LowerBound of the order with the policy's
		// RECOMPUTE steps, a bound of both placements; ok when it is
		// within best.
		boundOf := func(policy string) (float64, bool) {
			pol, err := passes.ParseRecompute(policy)
			if err != nil {
				return 0, false
			}
			if pol, err = pol.Resolve(b.t.built, b.marked(opt)); err != nil {
				return 0, false
			}
			withR, err := passes.Recompute(b.t.built, pol)
			if err != nil {
				return 0, false
			}
			lb, err := sim.LowerBound(withR, cost, sim.BoundOptions{})
			return lb, err == nil && lb <= best+eps*max(1, best)
		}
		// try lowers the policy at the latest point and, when that fits
		// and is over its bound, with @idle; it reports whether it fit.
		try := func(policy string, lb float64) bool {
			t := eval(b, policy)
			if t.err != nil || t.cand.Skipped != "" {
				if t.err != nil || t.recompute == "full" {
					out = append(out, t) // why, or the least memory the order reaches
				}
				return false
			}
			out = append(out, t)
			best = min(best, t.cand.Makespan)
			fits = append(fits, fit{b, t, lb})
			return true
		}
		greedy := greedyRecompute(opt, b, cost)
		if greedy != "" {
			if lb, ok := boundOf(greedy); ok && try(greedy, lb) {
				continue // it fits: the first stages would recompute more of the rest
			}
		}
		if b.hasMarks(opt) && greedy != modelPolicy {
			// every stage's marked layers, the least recompute work
			// per byte the model names
			if lb, ok := boundOf(modelPolicy); ok && try(modelPolicy, lb) {
				continue
			}
		}
		for _, policy := range recomputePolicies(b.t.built.Stages()) {
			// more recompute only adds work: no later policy is under best
			lb, ok := boundOf(policy)
			if !ok {
				break
			}
			if policy == greedy || try(policy, lb) {
				break
			}
		}
	}
	// @idle (passes.RecomputeIntoIdle, hundreds of simulations per
	// lowering) on the fastest fits whose bound leaves room under the best.
	slices.SortStableFunc(fits, func(a, b fit) int { return cmp.Compare(a.t.cand.Makespan, b.t.cand.Makespan) })
	tried := 0
	for _, f := range fits {
		if tried == idleTries {
			break
		}
		if f.lb >= best*(1-eps) {
			continue // no placement of its RECOMPUTE steps beats the best
		}
		tried++
		if idle := eval(f.b, f.t.recompute+"@idle"); idle.err == nil {
			out = append(out, idle)
			if idle.cand.Skipped == "" {
				best = min(best, idle.cand.Makespan)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b *autoTry) int { return cmp.Compare(a.baseIndex, b.baseIndex) })
	return out
}

// idleTries is how many policies recomputeTries lowers again with @idle:
// the fastest at the latest point whose bound is under the best.
const idleTries = 2

// greedyRecompute returns the -recompute policy that brings b's compute
// order within the limit by recomputing the stages of its fullest rank,
// one step at a time, each time simulating the order with its RECOMPUTE
// steps (the latest point) under cost. A step raises one of the fullest
// rank's stages: the least recomputed first, then the largest activation;
// a stage with layers the -model file marks "recompute": true first
// recomputes those (selective:S=model: their act freed for their R), then
// whole. It returns "" when the order does not fit even with every stage
// recomputed, or fits without. It aims at the ranks the limit binds,
// which recomputePolicies' first stages miss where a late stage holds the
// most (the LLM-like model's head). Where recomputing the last stage it
// added whole (a stage without marks) over-pays, it recomputes the least
// share of it (selectiveShares) that fits: a selective policy
// (selective:S=1,...,L=F), less recompute work for the same limit.
func greedyRecompute(opt Options, b recomputeBase, cost sim.Cost) string {
	p := b.t.built
	S := p.Stages()
	act := make([]float64, S)
	for s := range act {
		act[s] = 1
	}
	if sp := opt.Split; sp != nil {
		a, _, err := partition.StageMemory(sp.Model, b.layers, partition.Copies(p))
		if err != nil || len(a) != S {
			return ""
		}
		act = a
	}
	marks := b.marks(opt)
	vEff := float64(max(b.t.cfg.Virtual/max(p.Copies, 1), 1))
	// memOf simulates p under pol and returns its memory per rank.
	memOf := func(pol passes.RecomputePolicy) ([]float64, error) {
		q, err := passes.Recompute(p, pol)
		if err != nil {
			return nil, err
		}
		r, err := sim.Run(q, cost)
		if err != nil {
			return nil, err
		}
		if sp := opt.Split; sp != nil {
			return partition.Memory(sp.Model, b.layers, q, r)
		}
		mem := make([]float64, len(r.PeakLive))
		for rk, n := range r.PeakLive {
			mem[rk] = n / vEff
		}
		return mem, nil
	}
	fits := func(mem []float64) bool { return slices.Max(mem) <= opt.MemLimit*(1+1e-9) }
	// level per stage: levelNone, levelMarked (its marked layers), levelFull.
	level := make([]int, S)
	hasMarks := func(s int) bool { return s < len(marks) && marks[s].Share > 0 && marks[s].Share < 1 }
	last := -1 // the stage raised last
	for range 2*S + 1 {
		g := greedyPolicy{level: level, marks: marks}
		mem, err := memOf(g.policy())
		if err != nil {
			return ""
		}
		if fits(mem) {
			if last < 0 {
				return ""
			}
			if !hasMarks(last) {
				for _, f := range selectiveShares {
					g.last, g.share = last, f
					if m, err := memOf(g.policy()); err == nil && fits(m) {
						return g.value(S)
					}
				}
				g.share = 0
			}
			return g.value(S)
		}
		full := 0
		for rk := range mem {
			if mem[rk] > mem[full] {
				full = rk
			}
		}
		next := -1
		for s, rk := range p.Placement.RankOf {
			if rk == full && level[s] < levelFull && (next < 0 || level[s] < level[next] || (level[s] == level[next] && act[s] > act[next])) {
				next = s
			}
		}
		if next < 0 {
			return "" // the fullest rank recomputes every stage
		}
		if level[next] == levelNone && hasMarks(next) {
			level[next] = levelMarked
		} else {
			level[next] = levelFull
		}
		last = next
	}
	return ""
}

// The levels of recompute greedyRecompute raises a stage through.
const (
	levelNone = iota
	levelMarked
	levelFull
)

// greedyPolicy is a step of greedyRecompute: each stage's level, the
// model's marks, and share (when not 0) for stage last, recomputing that
// share of it in place of the whole.
type greedyPolicy struct {
	level []int
	marks []ir.Mark
	last  int
	share float64
}

// policy is g's policy, resolved: the stages at levelMarked take their
// marks.
func (g greedyPolicy) policy() passes.RecomputePolicy {
	var pol passes.RecomputePolicy
	for s, l := range g.level {
		switch {
		case l == levelMarked:
			mk := g.marks[s]
			pol.Stages = append(pol.Stages, s)
			pol.Shares = append(pol.Shares, mk.Share)
			pol.Costs = append(pol.Costs, mk.Cost)
			pol.Layers = append(pol.Layers, mk.Layers)
		case l == levelFull:
			f := 1.0
			if s == g.last && g.share > 0 {
				f = g.share
			}
			pol.Stages = append(pol.Stages, s)
			pol.Shares = append(pol.Shares, f)
			pol.Costs = append(pol.Costs, 0)
			pol.Layers = append(pol.Layers, nil)
		}
	}
	return pol
}

// value is g's -recompute value for a program of S stages: full or
// full:S,... when every listed stage recomputes whole, else
// selective:S=F,... with F model for a stage's marked layers.
func (g greedyPolicy) value(S int) string {
	var stages []int
	var items []string
	whole := true
	for s, l := range g.level {
		switch {
		case l == levelMarked:
			items = append(items, strconv.Itoa(s)+"=model")
			whole = false
		case l == levelFull && s == g.last && g.share > 0:
			items = append(items, strconv.Itoa(s)+"="+strconv.FormatFloat(g.share, 'g', -1, 64))
			whole = false
		case l == levelFull:
			items = append(items, strconv.Itoa(s)+"=1")
		default:
			continue
		}
		stages = append(stages, s)
	}
	if whole {
		return recomputeValue(stages, S)
	}
	return "selective:" + strings.Join(items, ",")
}

// selectiveShares are the shares of its last stage greedyRecompute tries,
// least first.
var selectiveShares = []float64{0.25, 0.5, 0.75}

// recomputeValue is the -recompute value of the sorted stages of S.
func recomputeValue(stages []int, S int) string {
	if len(stages) == S {
		return "full"
	}
	f := make([]string, len(stages))
	for i, s := range stages {
		f[i] = strconv.Itoa(s)
	}
	return "full:" + strings.Join(f, ",")
}

// limitBases returns the orders recomputeTries (and swapTries) try on, in
// increasing bound: the families' orders over the memory limit whose
// compute order alone is faster than best, each with its split, and with
// -partition auto also with the split gen/partition finds without the
// limit (the fastest split, recompute or swap bringing it within the
// limit), that split's own compute order bounding it.
func limitBases(opt Options, tries []*autoTry, best float64) []recomputeBase {
	var bases []recomputeBase
	for _, t := range tries {
		if t.synth || t.partitioned || !(t.bound < best) || !overLimit(t, opt.MemLimit) {
			continue
		}
		bases = append(bases, recomputeBase{t: t, layers: t.layers, bound: t.bound})
		if sp := opt.Split; sp != nil && sp.Partition {
			pr, err := sp.search(t.built, 0, "")
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
	return bases
}

// recomputeBase is an order recomputeTries tries policies on: a family's
// try, with its layers' split (with a model), and the order's bound.
type recomputeBase struct {
	t           *autoTry
	layers      model.Partition
	partitioned bool
	bound       float64
}

// modelPolicy is the -recompute value of every stage's marked layers.
const modelPolicy = "model"

// marked is passes.Options.Marked for the base's split: the marks of the
// model's layers in its stages (nil without a model).
func (b recomputeBase) marked(opt Options) func(stages, copies int) ([]ir.Mark, error) {
	if opt.Split == nil {
		return nil
	}
	return opt.Split.Model.MarksOf(b.layers)
}

// marks returns the base's stages' marks (model.Marks of its split), nil
// when there is no model or it marks no layer.
func (b recomputeBase) marks(opt Options) []ir.Mark {
	marked := b.marked(opt)
	if marked == nil {
		return nil
	}
	p := b.t.built
	marks, err := marked(p.Stages(), partition.Copies(p))
	if err != nil {
		return nil
	}
	return marks
}

// hasMarks reports whether some stage of the base recomputes only some
// of its layers under -recompute model.
func (b recomputeBase) hasMarks(opt Options) bool {
	return slices.ContainsFunc(b.marks(opt), func(mk ir.Mark) bool { return mk.Share > 0 })
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

// evalLimited lowers and simulates the order of base b under o (the
// options with the try's recompute policy or swap distance set, which t
// records as well) for a search under -mem: the try numbered index, its
// candidate marked skipped when its activation memory is over the limit.
func evalLimited(o Options, c sim.Cost, b recomputeBase, index int, policy string, swap int) *autoTry {
	const eps = 1e-9
	t := &autoTry{cfg: b.t.cfg, built: b.t.built, index: index, partitioned: b.partitioned, layers: b.layers,
		bound: b.bound, recompute: policy, swap: swap, evaluated: true, baseIndex: b.t.index}
	var res gen.Result
	var r sim.Result
	var mem float64
	var err error
	if sp := o.Split; sp != nil {
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
		Partitioned: b.partitioned, Recompute: policy, Swap: swap}
	if mem > o.MemLimit*(1+eps) {
		t.cand.Skipped = fmt.Sprintf("activation memory %.4g over the limit %.4g", mem, o.MemLimit)
	}
	return t
}
