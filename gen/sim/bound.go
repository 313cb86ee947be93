package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
)

// BoundOptions are what LowerBound knows beyond the program's steps and
// costs.
type BoundOptions struct {
	// MaxLive is the memory cap as chunk counts: MaxLive[s] > 0 is the
	// most chunks of stage s that may be live at once on its rank (live as
	// Result.PeakActivations counts them, from the start of the chunk's F
	// to the end of its last backward step). Nil, 0 or a missing entry:
	// no cap on that stage.
	MaxLive []int
	// Act and Cap are the memory cap per rank in activation units: Act[s]
	// is what one live chunk of stage s holds, Cap[r] the most rank r may
	// hold at once (its limit less its stages' params). Cap nil, or
	// Cap[r] <= 0: no cap on rank r; with a cap, a stage of r without a
	// positive Act leaves r without the term.
	Act, Cap []float64
}

// LowerBound returns a lower bound on the makespan of any program that
// runs p's compute steps (the same F, B, I, W and overlap steps) with p's
// placement under the cost c, in any order, lowered in any way: no order
// and no placement of transfers beats it (docs/model.md, "Lower bound",
// argues each term). It is the largest of
//
//   - the chain of one micro-batch: its forwards through every stage of its
//     route, then its backwards (B, or I) back to the first, then the first
//     stage's W when that stage's backward is split, with Comm plus the
//     activation's transfer time (Cost.Act, Cost.BW) on every hop between
//     ranks;
//   - for every rank r: head(r) + work(r) + max(0, tail(r) − wwork(r)),
//     where work(r) is the cost of r's compute steps, head(r) the least
//     forward chain before any F of r may start, tail(r) the least chain of
//     backwards (and the first stage's W) that must follow r's last B or I,
//     and wwork(r) the cost of r's W steps (which may run after it);
//   - with BoundOptions.Cap, for every capped rank r: head_C(r) + work(r) +
//     max(0, tail(r) − wwork(r), tail_F(r), tail_B(r)) with head_C ≥ head:
//     before any backward of r can start no chunk is freed, so r runs only
//     forwards whose chunks fit the cap; after the last backward of one of
//     r's stages (one model copy) only W's of it and backwards of r's other
//     stages, of chunks live then; and, when r's chunks do not all fit at
//     once, after r's last forward only that forward and the live chunks'
//     backwards (docs/model.md, "Lower bound", term 4);
//   - with BoundOptions.Cap on every rank, one route that every micro-batch
//     runs whole, and B or else I and W on each stage: the longest chain
//     through the micro-batches' dependencies and the precedences the cap
//     forces (capChains: a micro-batch's F of stage s waits for the last
//     backward of an earlier micro-batch's chunk that cannot stay live
//     beside its own chunks up to s);
//   - with BoundOptions.MaxLive, for every capped stage s: the earliest
//     start of its F plus ceil(n/K) times the shortest life of one of its
//     chunks (from its F through the rest of the route and back to its own
//     last backward), n the number of micro-batches running s and K the
//     cap; a program that swaps activations (SWAP_* steps) frees memory
//     outside that life, and gets no such term.
//
// Data loads, FSDP steps and the optimizer step are left out (they only add
// time). c is resolved for p's stages; a program without compute steps
// has bound 0.
func LowerBound(p ir.Program, c Cost, opt BoundOptions) (float64, error) {
	S, P := p.Stages(), len(p.Ranks)
	if S == 0 || P == 0 {
		return 0, nil
	}
	c, err := c.Resolve(S)
	if err != nil {
		return 0, err
	}
	type stageKinds struct{ b, i, w, any bool }
	kinds := make([]stageKinds, S)
	work := make([]float64, P)
	wwork := make([]float64, P)
	runs := make([]int, S) // forwards per stage
	swaps, overlaps := false, false
	recomputes := make([]bool, S) // the stage has RECOMPUTE steps
	anyRecompute := false
	for r, steps := range p.Ranks {
		for i := range steps {
			st := &steps[i]
			if st.Kind == ir.SwapLaunchOffload || st.Kind == ir.SwapLaunchLoad {
				swaps = true
			}
			if st.Kind == abi.Recompute && st.Stage >= 0 && st.Stage < S {
				// the rank re-runs the forward: its work, and the
				// chunk is not live from its F to its backward
				work[r] += c.StepCost(*st) * p.RecomputeCostPart(st.Stage)
				recomputes[st.Stage], anyRecompute = true, true
			}
			overlaps = overlaps || st.Kind.IsOverlap()
			subs := st.Computes()
			if len(subs) == 0 {
				continue
			}
			work[r] += c.StepCost(*st)
			if st.Kind == ir.BackwardWeight {
				wwork[r] += c.StepCost(*st)
			}
			for _, sub := range subs {
				if sub.Stage < 0 || sub.Stage >= S {
					return 0, fmt.Errorf("rank %d step %d: %s: stage %d outside 0..%d", r, i, sub, sub.Stage, S-1)
				}
				k := &kinds[sub.Stage]
				switch sub.Kind {
				case ir.Forward:
					runs[sub.Stage]++
				case ir.Backward:
					k.b, k.any = true, true
				case ir.BackwardInput:
					k.i, k.any = true, true
				case ir.BackwardWeight:
					k.w = true
				}
			}
		}
	}
	backward := false
	back := make([]float64, S)      // the backward on the chain of stage s
	chunkBack := make([]float64, S) // the most backward work one chunk of s needs
	wLeft := make([]float64, S)     // its W, left after its I
	wTail := make([]float64, S)
	for s, k := range kinds {
		switch {
		case k.b && k.i:
			back[s] = min(of(c.B, s), of(c.I, s))
		case k.b:
			back[s] = of(c.B, s)
		case k.i:
			back[s] = of(c.I, s)
		}
		if k.i && k.w && !k.b {
			wTail[s] = of(c.W, s)
		}
		if k.b {
			chunkBack[s] = of(c.B, s)
		}
		if k.w {
			wLeft[s] = of(c.W, s)
		}
		if k.i || k.w {
			chunkBack[s] = max(chunkBack[s], of(c.I, s)+of(c.W, s))
		}
		backward = backward || k.any
	}
	rank := p.Placement.RankOf
	hop := func(from, to, act int) float64 {
		if rank[from] == rank[to] {
			return 0
		}
		return c.Comm + c.ActTime(act)
	}
	var recomputeLive []int // MaxLive of the recomputing stages
	if anyRecompute {
		recomputeLive = opt.MaxLive
		opt = withoutRecomputed(opt, recomputes)
	}
	bound := 0.0
	head := make([]float64, P)
	tail := make([]float64, P)
	for r := range head {
		head[r], tail[r] = math.Inf(1), math.Inf(1)
	}
	// One pass per route (one per model copy): the chains of its
	// micro-batches are equal.
	seen := map[[2]int]bool{}
	pre := make([]float64, S)    // earliest start of F(s) on the route
	post := make([]float64, S)   // least chain after B/I(s) ends
	preS := make([]float64, S)   // pre, kept per stage across routes
	postS := make([]float64, S)  // post, likewise
	esBack := make([]float64, S) // earliest start of a backward of s
	from := make([]float64, S)   // least chain from F(s)'s start to the end
	for m := 0; m < max(p.Micro, 1); m++ {
		first, last := p.Route(m)
		if seen[[2]int{first, last}] || first < 0 || last >= S || first > last {
			continue
		}
		seen[[2]int{first, last}] = true
		pre[first] = 0
		for s := first + 1; s <= last; s++ {
			pre[s] = pre[s-1] + of(c.F, s-1) + hop(s-1, s, s-1)
		}
		fwd := pre[last] + of(c.F, last)
		chain := fwd
		if backward {
			post[first] = wTail[first]
			for s := first + 1; s <= last; s++ {
				post[s] = post[s-1] + back[s-1] + hop(s, s-1, s-1)
			}
			chain += back[last] + post[last]
		}
		bound = max(bound, chain)
		if backward {
			e := fwd
			for s := last; s >= first; s-- {
				esBack[s] = e
				from[s] = chain - pre[s]
				preS[s] = pre[s]
				postS[s] = post[s]
				if s > first {
					e += back[s] + hop(s, s-1, s-1)
				}
			}
		}
		for s := first; s <= last; s++ {
			r := rank[s]
			head[r] = min(head[r], pre[s])
			if backward {
				tail[r] = min(tail[r], post[s])
			}
		}
		if !backward || swaps {
			continue
		}
		// The memory cap: a chunk of stage s lives at least from its F
		// through the rest of the route and back to its own backward.
		for s := first; s <= last; s++ {
			if recomputes[s] && s < len(recomputeLive) && recomputeLive[s] > 0 && runs[s] > 0 {
				// A recomputed chunk lives from its RECOMPUTE, which
				// follows the stage's first F, to its last backward.
				k := recomputeLive[s]
				life := c.StepCost(ir.Step{Kind: abi.Recompute, Stage: s})*p.RecomputeCostPart(s) + chunkBack[s]
				bound = max(bound, pre[s]+of(c.F, s)+float64((runs[s]+k-1)/k)*life)
			}
			if s >= len(opt.MaxLive) || opt.MaxLive[s] <= 0 || runs[s] == 0 {
				continue
			}
			life := fwd - pre[s] + back[last]
			for j := last; j > s; j-- {
				life += hop(j, j-1, j-1) + back[j-1]
			}
			if kinds[s].i && kinds[s].w && !kinds[s].b {
				life += of(c.W, s)
			}
			k := opt.MaxLive[s]
			bound = max(bound, pre[s]+float64((runs[s]+k-1)/k)*life)
		}
	}
	for r := range P {
		if math.IsInf(head[r], 1) {
			continue // a rank without stages
		}
		h, t := head[r], 0.0
		if backward && !math.IsInf(tail[r], 1) {
			t = max(0, tail[r]-wwork[r])
		}
		if backward && !swaps && r < len(opt.Cap) && opt.Cap[r] > 0 {
			if mh, mt, ok := capTerms(p.Placement, r, opt, c, chunkBack, wLeft, runs, len(seen) == 1, preS, postS, esBack, from); ok {
				h, t = max(h, mh), max(t, mt)
			}
		}
		bound = max(bound, h+work[r]+t)
	}
	if backward && !swaps && !overlaps && len(seen) == 1 && len(opt.Cap) > 0 {
		// The chains the cap forces (term 6), where every stage runs
		// every micro-batch with B, or with I and W.
		split := make([]bool, S)
		plain := true
		for s, k := range kinds {
			split[s] = k.i && k.w && !k.b
			plain = plain && runs[s] == p.Micro && (split[s] || (k.b && !k.i && !k.w))
		}
		if plain {
			if x, ok := capChains(p, c, opt, split, hop); ok {
				bound = max(bound, x)
			}
		}
	}
	return bound, nil
}

// withoutRecomputed returns opt without the cap terms that a recomputing
// stage (recomputes[s]) breaks: its chunks are not live from their F to
// their backward, so MaxLive gives it no ⌈n/K⌉ · life term (LowerBound
// gives it one from the RECOMPUTE instead), and its Act is 0, which
// leaves its rank without the per-rank cap terms and the program without
// the cap's chains (docs/model.md, "Lower bound", "With recompute").
func withoutRecomputed(opt BoundOptions, recomputes []bool) BoundOptions {
	opt.MaxLive = slices.Clone(opt.MaxLive)
	opt.Act = slices.Clone(opt.Act)
	for s, on := range recomputes {
		if !on {
			continue
		}
		if s < len(opt.MaxLive) {
			opt.MaxLive[s] = 0
		}
		if s < len(opt.Act) {
			opt.Act[s] = 0
		}
	}
	return opt
}

// capTerms returns head_C(r) and max(tail_F(r), tail_B(r)) of
// LowerBound's rank term under the cap opt.Cap[r] (docs/model.md, "Lower
// bound", term 4); ok is false when r has no stage that runs or a stage of
// r has no positive activation.
func capTerms(pl ir.Placement, r int, opt BoundOptions, c Cost, chunkBack, wLeft []float64, runs []int, oneRoute bool, pre, post, esBack, from []float64) (head, tail float64, ok bool) {
	capR := opt.Cap[r]
	demand := 0.0
	first := math.Inf(1) // earliest start of any backward of r
	leastTail := math.Inf(1)
	var stages []int
	for s, rk := range pl.RankOf {
		if rk != r || runs[s] == 0 {
			continue
		}
		if s >= len(opt.Act) || !(opt.Act[s] > 0) {
			return 0, 0, false
		}
		stages = append(stages, s)
		demand += float64(runs[s]) * opt.Act[s]
		first = min(first, esBack[s])
		leastTail = min(leastTail, from[s]-of(c.F, s))
	}
	if len(stages) == 0 {
		return 0, 0, false
	}
	// After the last backward (B or I) of stage s on r, when every
	// micro-batch runs through all of r's stages: no forward of r is left
	// (its micro-batch's backward of s would come later), only the W's of
	// s and the backwards of r's other stages, of chunks live then.
	if oneRoute {
		for _, s := range stages {
			items := make([]knapItem, 0, len(stages))
			for _, o := range stages {
				b := chunkBack[o]
				if o == s {
					b = wLeft[s]
				}
				items = append(items, knapItem{work: float64(runs[o]) * b, perAct: b / opt.Act[o]})
			}
			tail = max(tail, post[s]-knapsack(items, capR))
		}
	}
	// Before first: the forwards of each stage s, at most its n(s) F's
	// and no earlier than its chain lets them start, whose chunks fit.
	fwd := make([]knapItem, 0, len(stages))
	bwd := make([]knapItem, 0, len(stages))
	for _, s := range stages {
		f, a, n := of(c.F, s), opt.Act[s], float64(runs[s])
		fwd = append(fwd, knapItem{work: min(n*f, max(0, first-pre[s])), perAct: f / a})
		bwd = append(bwd, knapItem{work: n * chunkBack[s], perAct: chunkBack[s] / a})
	}
	head = max(0, first-knapsack(fwd, capR))
	if demand > capR*(1+1e-12) {
		// Not every chunk fits at once, so some chunk is freed before r's
		// last forward: the idle time after it is disjoint from head_C's.
		tail = max(tail, leastTail-knapsack(bwd, capR))
	}
	return head, max(0, tail), true
}

// knapItem is the work of one stage's steps that a cap may admit: at most
// work, perAct of it per unit of activation held.
type knapItem struct{ work, perAct float64 }

// knapsack is the most work the items admit within capacity units of
// activation, fractionally (an upper bound on any choice of whole chunks):
// the items with the most work per unit first.
func knapsack(items []knapItem, capacity float64) float64 {
	slices.SortStableFunc(items, func(a, b knapItem) int { return cmp.Compare(b.perAct, a.perAct) })
	total := 0.0
	for _, it := range items {
		if capacity <= 0 {
			break
		}
		if it.work <= 0 || it.perAct <= 0 {
			continue
		}
		w := min(it.work, capacity*it.perAct)
		total += w
		capacity -= w / it.perAct
	}
	return total
}
