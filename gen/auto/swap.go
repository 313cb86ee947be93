package auto

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/sim"
)

// This file is `-swap auto`: under Options.MemLimit, with Options.SwapAuto,
// the search also lowers the families' orders with activation swapping
// (passes.Swap) at the distances it chooses (swapTries), beside the
// recompute policies (recomputeTries). A program either swaps or recomputes
// a chunk (passes.Recompute refuses SWAP_* steps), so the two are
// alternatives per order, and the fastest candidate that fits wins.

// swapEligible reports whether auto may try swap distances: with
// Options.SwapAuto under a memory limit, without a -swap or a -recompute
// policy given (-recompute none leaves swap alone to try) and without an
// option that rewrites the compute order.
func swapEligible(opt Options, rewrites bool) bool {
	noPolicy := opt.Passes.Set[recomputeOption] == "" || opt.Passes.Set[recomputeOption] == "none"
	return opt.SwapAuto && opt.MemLimit > 0 && !rewrites && !opt.Passes.ForwardOnly && noPolicy && opt.Passes.Swap == 0
}

// checkSwapAuto refuses Options.SwapAuto with a given -swap N: the search
// chooses N itself.
func checkSwapAuto(opt Options) error {
	if opt.SwapAuto && opt.Passes.Swap != 0 {
		return fmt.Errorf("schedule auto: -swap auto and -swap %d: give one (auto chooses the distance, or every candidate swaps at %d)", opt.Passes.Swap, opt.Passes.Swap)
	}
	return nil
}

// swapTries tries activation swapping on the orders recomputeTries tries
// recompute on (limitBases: over the memory limit, compute order alone
// faster than best), in increasing bound, and stops at the first bound
// over the best makespan found: swapping only adds steps and waits to the
// compute order, so its makespan stays a lower bound. On each order the
// distances are passes.SwapDistances of its compute order, the -swap
// values at which the chunks swapped change, less those whose compute
// order with its swap steps is already slower than best (swapBounded);
// more chunks swapped hold less memory and move more. It lowers the
// smallest distance left first (the
// most swapped, the least memory the order reaches by swapping): when
// that does not fit, the order is reported with it and left; otherwise it
// bisects the distances for the largest that fits (the fewest transfers),
// about log2 of their number lowerings. It returns the tries evaluated
// that fit, and the smallest distance's of the orders where none does
// (each evaluated, cand set, its Swap the distance), indexed from index
// on, in the families' order.
func swapTries(opt Options, c sim.Cost, tries []*autoTry, best float64, index int) []*autoTry {
	const eps = 1e-9
	var out []*autoTry
	eval := func(b recomputeBase, n int) *autoTry {
		o := opt
		o.Passes.Swap = n
		t := evalLimited(o, c, b, index, "", n)
		index++
		return t
	}
	fits := func(t *autoTry) bool { return t.err == nil && t.cand.Skipped == "" }
	for _, b := range limitBases(opt, tries, best) {
		if b.bound > best+eps*max(1, best) {
			break // this bound and every later one: over the best
		}
		dists := swapBounded(b, opt, c, best)
		if len(dists) == 0 {
			continue // no chunk waits 2 compute steps for its backward, or every swap is over best
		}
		// dists is largest first; fit is monotone along it (each smaller
		// distance swaps a superset): find the first index that fits.
		lo, hi := 0, len(dists)-1
		least := eval(b, dists[hi])
		if !fits(least) {
			out = append(out, least) // why, or the least memory the order reaches
			continue
		}
		found := least
		for lo < hi {
			mid := (lo + hi) / 2
			if t := eval(b, dists[mid]); fits(t) {
				found, hi = t, mid
			} else {
				lo = mid + 1
			}
		}
		out = append(out, found)
		best = min(best, found.cand.Makespan)
	}
	slices.SortStableFunc(out, func(a, b *autoTry) int { return cmp.Compare(a.baseIndex, b.baseIndex) })
	return out
}

// swapBounded returns the distances swapTries lowers on b's order,
// largest first: passes.SwapDistances of its compute order, less those
// whose compute order with its swap steps, simulated under the cost the
// order runs by (its transfers on the swap stream), is over best. That
// makespan bounds the lowered program's from below (lowering only adds
// transfers, which wait), so a distance over it cannot win; it is cheap
// (compute steps only) where the transfers are dear and every swap
// lowered would lose.
func swapBounded(b recomputeBase, opt Options, c sim.Cost, best float64) []int {
	const eps = 1e-9
	cost, err := b.cost(opt, c)
	if err != nil {
		return nil
	}
	var out []int
	for _, n := range passes.SwapDistances(b.t.built) {
		q, err := passes.Swap(b.t.built, n)
		if err != nil {
			continue
		}
		r, err := sim.Run(q, cost)
		if err != nil || r.Makespan > best+eps*max(1, best) {
			continue
		}
		out = append(out, n)
	}
	return out
}
