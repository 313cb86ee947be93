package passes

import (
	"fmt"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
)

// Swap adds activation swapping (docs/design.md §5, pass 8): every chunk whose
// forward and first backward (B or I) on its rank have at least gap compute
// steps between them gets its saved activations moved off the working
// memory in between, in four steps that each let a compute step hide the
// transfer:
//
//	sF m  SWAP_LAUNCH_OFFLOAD  <compute>  SWAP_WAIT_OFFLOAD  ...
//	      SWAP_LAUNCH_LOAD  <compute>  SWAP_WAIT_LOAD  sB m (or sI m)
//
// The offload starts right after the forward and must be complete after the
// next compute step; the load starts before the compute step that precedes
// the backward and must be complete before the backward. gap must be at
// least 2, so that the chunk is out for at least one compute step; a
// compute step inside an overlap counts once. Other steps keep their order.
// The input's step lists are not modified.
func Swap(p ir.Program, gap int) (ir.Program, error) {
	if gap < 2 {
		return ir.Program{}, fmt.Errorf("swap: gap %d; want at least 2 compute steps between a chunk's forward and its backward", gap)
	}
	q := p
	q.Ranks = make([][]ir.Step, len(p.Ranks))
	for r, steps := range p.Ranks {
		q.Ranks[r] = swapRank(steps, gap, p.Stages(), p.Micro)
	}
	return q, nil
}

// SwapDistances returns the -swap values at which the set of chunks Swap
// offloads from p changes, largest first: each distinct number (at least 2)
// of compute steps between a chunk's forward and its first backward on its
// rank. Swap(p, gap) offloads the same chunks as Swap(p, d) for d the
// least of them at or above gap (none above the largest).
func SwapDistances(p ir.Program) []int {
	seen := map[int]bool{}
	for _, steps := range p.Ranks {
		_, fAt, bAt := computePositions(steps)
		for k, f := range fAt {
			if b, ok := bAt[k]; ok && b-f-1 >= 2 {
				seen[b-f-1] = true
			}
		}
	}
	out := make([]int, 0, len(seen))
	for g := range seen {
		out = append(out, g)
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

// computePositions returns the indices of a rank's compute steps and, for
// each chunk, the position (in that list) of its forward and of its first
// B or I: the distances Swap measures.
func computePositions(steps []ir.Step) (compute []int, fAt, bAt map[[2]int]int) {
	fAt = map[[2]int]int{}
	bAt = map[[2]int]int{}
	for i := range steps {
		cs := steps[i].Computes()
		if len(cs) == 0 {
			continue
		}
		pos := len(compute)
		compute = append(compute, i)
		for _, c := range cs {
			k := [2]int{c.Stage, c.Micro}
			switch c.Kind {
			case ir.Forward:
				fAt[k] = pos
			case ir.Backward, ir.BackwardInput:
				if _, seen := bAt[k]; !seen {
					bAt[k] = pos
				}
			}
		}
	}
	return compute, fAt, bAt
}

// swapRank is Swap for one rank's steps.
func swapRank(steps []ir.Step, gap, stages, micro int) []ir.Step {
	compute, fAt, bAt := computePositions(steps)
	// before[i] and after[i]: the swap steps that go before and after step i.
	before := map[int][]ir.Step{}
	after := map[int][]ir.Step{}
	swapStep := func(k ir.Kind, c [2]int) ir.Step {
		return ir.Step{Kind: k, Stage: c[0], Micro: c[1], Peer: ir.None, Slot: ir.None}
	}
	for s := range stages {
		for m := range micro {
			c := [2]int{s, m}
			f, okF := fAt[c]
			b, okB := bAt[c]
			if !okF || !okB || b-f-1 < gap {
				continue
			}
			after[compute[f]] = append(after[compute[f]], swapStep(ir.SwapLaunchOffload, c))
			after[compute[f+1]] = append(after[compute[f+1]], swapStep(ir.SwapWaitOffload, c))
			before[compute[b-1]] = append(before[compute[b-1]], swapStep(ir.SwapLaunchLoad, c))
			before[compute[b]] = append(before[compute[b]], swapStep(ir.SwapWaitLoad, c))
		}
	}
	if len(before) == 0 && len(after) == 0 {
		return append([]ir.Step(nil), steps...)
	}
	out := make([]ir.Step, 0, len(steps)+4*len(after))
	for i := range steps {
		out = append(out, before[i]...)
		out = append(out, steps[i])
		out = append(out, after[i]...)
	}
	return out
}
