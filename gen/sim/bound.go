package sim

import (
	"fmt"
	"math"

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
//   - with BoundOptions.Cap, for every capped rank r whose chunks do not
//     all fit its cap at once: head'(r) + work(r) + max(0, tail(r) −
//     wwork(r), tail'(r)), where head'(r) is the earliest start of any
//     backward of r less the most forward work whose chunks fit the cap
//     (until a backward runs no chunk is freed), and tail'(r) the least
//     chain from one of r's forwards to the end less that forward and the
//     most backward work of the chunks that fit the cap (after r's last
//     forward only the live chunks' backwards are left to run on r);
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
	swaps := false
	for r, steps := range p.Ranks {
		for i := range steps {
			st := &steps[i]
			if st.Kind == ir.SwapLaunchOffload || st.Kind == ir.SwapLaunchLoad {
				swaps = true
			}
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
			if mh, mt, ok := capTerms(p.Placement, r, opt, c, chunkBack, runs, esBack, from); ok {
				h, t = max(h, mh), max(t, mt)
			}
		}
		bound = max(bound, h+work[r]+t)
	}
	return bound, nil
}

// capTerms returns head'(r) and tail'(r) of LowerBound's rank term under
// the cap opt.Cap[r] (docs/model.md, "Lower bound", term 4); ok is false
// when the cap holds all of r's chunks at once or a stage of r has no
// positive activation.
func capTerms(pl ir.Placement, r int, opt BoundOptions, c Cost, chunkBack []float64, runs []int, esBack, from []float64) (head, tail float64, ok bool) {
	capR := opt.Cap[r]
	demand := 0.0
	ratioF, ratioB := 0.0, 0.0 // most forward (backward) work per unit of activation
	first := math.Inf(1)       // earliest start of any backward of r
	leastTail := math.Inf(1)
	any := false
	for s, rk := range pl.RankOf {
		if rk != r || runs[s] == 0 {
			continue
		}
		if s >= len(opt.Act) || !(opt.Act[s] > 0) {
			return 0, 0, false
		}
		any = true
		a := opt.Act[s]
		demand += float64(runs[s]) * a
		f := of(c.F, s)
		ratioF, ratioB = max(ratioF, f/a), max(ratioB, chunkBack[s]/a)
		first = min(first, esBack[s])
		leastTail = min(leastTail, from[s]-f)
	}
	if !any || demand <= capR*(1+1e-12) {
		return 0, 0, false
	}
	return max(0, first-capR*ratioF), max(0, leastTail-capR*ratioB), true
}
