// Package testprog builds compute-only programs for the tests of the
// passes and the verifier: 1F1B-, GPipe-, interleaved-, V- and
// zero-bubble-like orders made by a greedy unit-time simulation (feasible by
// construction), and random orders that may be infeasible. It is test
// infrastructure, independent of gen/schedules on purpose: the passes and
// the verifier are tested against orders no family produced.
package testprog

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
)

// genOpts shapes a greedy compute order.
type genOpts struct {
	limit func(r int) int // live chunks allowed before a rank must run a backward; nil = unlimited
	gpipe bool            // every forward of a rank before any of its backwards
	split bool            // backward as I, with W run when the rank would otherwise idle
	rng   *rand.Rand      // when set, each rank picks among its ready steps at random
}

// greedy builds a compute-only program by simulating unit-time steps: each
// tick, every rank runs one ready step, preferring a backward, then a
// forward (while fewer than limit chunks are live), then a deferred W. Each
// stage runs its forwards and backwards in micro-batch order. The order is
// feasible by construction.
func greedy(pl ir.Placement, M int, o genOpts) ir.Program {
	P, S := pl.Ranks(), pl.Stages()
	p := ir.NewProgram(pl, M)
	fT := slices.Repeat([]int32{-1}, S*M)
	bT := slices.Repeat([]int32{-1}, S*M)
	nextF := make([]int, S)
	nextB := make([]int, S)
	live := make([]int, P)
	var pendingW [][]ir.Step = make([][]ir.Step, P)
	fLeft := make([]int, P)
	for s := range S {
		fLeft[pl.RankOf[s]] += M
	}
	stagesOf := make([][]int, P)
	for r := range P {
		stagesOf[r] = pl.StagesOf(r)
	}
	total := 2 * S * M
	if o.split {
		total = 3 * S * M
	}
	done, relax := 0, false
	var acted bool
	// runW runs rank r's oldest deferred W, which frees its chunk.
	runW := func(r int) {
		w := pendingW[r][0]
		pendingW[r] = pendingW[r][1:]
		p.Ranks[r] = append(p.Ranks[r], w)
		live[r]--
		done++
		acted = true
	}
	for t := int32(0); done < total; t++ {
		acted = false
		for r := range P {
			lim := 1 << 30
			if o.limit != nil && !relax {
				lim = o.limit(r)
			}
			// ready backward with smallest micro (tie: larger stage)
			bs, bm := -1, M
			for _, s := range stagesOf[r] {
				m := nextB[s]
				if m >= M || fT[s*M+m] < 0 || fT[s*M+m] >= t {
					continue
				}
				if s < S-1 && (bT[(s+1)*M+m] < 0 || bT[(s+1)*M+m] >= t) {
					continue
				}
				if m < bm || (m == bm && s > bs) {
					bs, bm = s, m
				}
			}
			fs, fm := -1, M
			for _, s := range stagesOf[r] {
				m := nextF[s]
				if m >= M {
					continue
				}
				if s > 0 && (fT[(s-1)*M+m] < 0 || fT[(s-1)*M+m] >= t) {
					continue
				}
				if m < fm || (m == fm && s < fs) {
					fs, fm = s, m
				}
			}
			if o.rng != nil {
				// pick uniformly among the kinds of ready steps
				var kinds [3]int
				n := 0
				if bs >= 0 {
					kinds[n] = 0
					n++
				}
				if fs >= 0 && (live[r] < lim || n == 0) {
					kinds[n] = 1
					n++
				}
				if len(pendingW[r]) > 0 {
					kinds[n] = 2
					n++
				}
				if n == 0 {
					continue
				}
				switch kinds[o.rng.IntN(n)] {
				case 0:
					fs = -1
				case 1:
					bs = -1
				case 2:
					bs, fs = -1, -1
				}
			}
			switch {
			case o.rng != nil && bs < 0 && fs < 0:
				runW(r)
				continue
			case o.rng != nil && bs >= 0:
			case o.rng != nil:
				bs = -1
			case o.gpipe && fLeft[r] > 0:
				if fs < 0 {
					continue
				}
				bs = -1
			case bs >= 0:
			case fs >= 0 && live[r] < lim:
				bs = -1
			case len(pendingW[r]) > 0:
				runW(r)
				continue
			default:
				continue
			}
			acted = true
			done++
			if bs >= 0 {
				bT[bs*M+bm] = t
				nextB[bs]++
				if o.split {
					p.Ranks[r] = append(p.Ranks[r], ir.Compute(ir.BackwardInput, bs, bm))
					pendingW[r] = append(pendingW[r], ir.Compute(ir.BackwardWeight, bs, bm))
				} else {
					p.Ranks[r] = append(p.Ranks[r], ir.Compute(ir.Backward, bs, bm))
					live[r]--
				}
				continue
			}
			fT[fs*M+fm] = t
			nextF[fs]++
			fLeft[r]--
			live[r]++
			p.Ranks[r] = append(p.Ranks[r], ir.Compute(ir.Forward, fs, fm))
		}
		relax = !acted
		if t > int32(10*total+100) {
			panic(fmt.Sprintf("greedy fixture does not terminate (P=%d S=%d M=%d)", P, S, M))
		}
	}
	return p
}

// OneF1B is the 1F1B order for P ranks and M micro-batches.
func OneF1B(P, M int) ir.Program {
	return greedy(ir.Loop(P, 1), M, genOpts{limit: func(r int) int { return P - r }})
}

// GPipe is the GPipe order (all forwards, then all backwards).
func GPipe(P, M int) ir.Program {
	return greedy(ir.Loop(P, 1), M, genOpts{gpipe: true})
}

// Interleaved is an interleaved-1F1B-like order with V stages per rank (loop placement).
func Interleaved(P, V, M int) ir.Program {
	return greedy(ir.Loop(P, V), M, genOpts{limit: func(r int) int { return V*P + P - 2*r }})
}

// VShape is a V-placement order (two stages per rank, the turn on the last rank).
func VShape(P, M int, split bool) ir.Program {
	return greedy(ir.VShape(P), M, genOpts{limit: func(r int) int { return 2 * P }, split: split})
}

// ZBLike is a 1F1B order with split backwards and deferred W.
func ZBLike(P, M int) ir.Program {
	return greedy(ir.Loop(P, 1), M, genOpts{limit: func(r int) int { return P - r }, split: true})
}

// MustParse parses a program in text form or panics (fixtures only).
func MustParse(text string) ir.Program {
	p, err := ir.ParseText(text)
	if err != nil {
		panic(err)
	}
	return p
}

// RandomFeasible is a random feasible compute order: greedy with random choices.
func RandomFeasible(rng *rand.Rand, pl ir.Placement, M int) ir.Program {
	return greedy(pl, M, genOpts{rng: rng, split: rng.IntN(2) == 0})
}

// RandomOrder is a random per-rank order that respects only each rank's own
// dependencies (F before the chunk's backward, I before W, colocated stages
// in pipeline order); across ranks it may be infeasible.
func RandomOrder(rng *rand.Rand, pl ir.Placement, M int, split bool) ir.Program {
	P, S := pl.Ranks(), pl.Stages()
	p := ir.NewProgram(pl, M)
	for r := range P {
		type node struct {
			st   ir.Step
			deps int
			next []int
		}
		var nodes []node
		id := map[[3]int]int{}
		add := func(k ir.Kind, s, m int) {
			id[[3]int{int(k), s, m}] = len(nodes)
			nodes = append(nodes, node{st: ir.Compute(k, s, m)})
		}
		bk := ir.Backward
		if split {
			bk = ir.BackwardInput
		}
		for _, s := range pl.StagesOf(r) {
			for m := range M {
				add(ir.Forward, s, m)
				add(bk, s, m)
				if split {
					add(ir.BackwardWeight, s, m)
				}
			}
		}
		edge := func(a, b [3]int) {
			x, okx := id[a]
			y, oky := id[b]
			if okx && oky {
				nodes[x].next = append(nodes[x].next, y)
				nodes[y].deps++
			}
		}
		for _, s := range pl.StagesOf(r) {
			for m := range M {
				edge([3]int{int(ir.Forward), s, m}, [3]int{int(bk), s, m})
				if split {
					edge([3]int{int(bk), s, m}, [3]int{int(ir.BackwardWeight), s, m})
				}
				if s > 0 && pl.RankOf[s-1] == r {
					edge([3]int{int(ir.Forward), s - 1, m}, [3]int{int(ir.Forward), s, m})
				}
				if s < S-1 && pl.RankOf[s+1] == r {
					edge([3]int{int(bk), s + 1, m}, [3]int{int(bk), s, m})
				}
			}
		}
		var ready []int
		for i := range nodes {
			if nodes[i].deps == 0 {
				ready = append(ready, i)
			}
		}
		for len(ready) > 0 {
			k := rng.IntN(len(ready))
			x := ready[k]
			ready[k] = ready[len(ready)-1]
			ready = ready[:len(ready)-1]
			p.Ranks[r] = append(p.Ranks[r], nodes[x].st)
			for _, y := range nodes[x].next {
				nodes[y].deps--
				if nodes[y].deps == 0 {
					ready = append(ready, y)
				}
			}
		}
	}
	return p
}

// FuseRandom pairs adjacent (F, B/I) steps of different chunks into
// OVERLAP_F_B with probability 1/2 each (adjacent steps never depend on each
// other locally, so the pair is locally valid; across ranks it may not be).
func FuseRandom(rng *rand.Rand, p ir.Program) ir.Program {
	q := ir.NewProgram(p.Placement, p.Micro)
	q.Copies = p.Copies
	for r, steps := range p.Ranks {
		for i := 0; i < len(steps); i++ {
			a := steps[i]
			if i+1 < len(steps) && a.Kind == ir.Forward && steps[i+1].Kind.IsBackward() && rng.IntN(2) == 0 {
				b := steps[i+1]
				if b.Stage != a.Stage || b.Micro != a.Micro {
					q.Ranks[r] = append(q.Ranks[r], ir.Overlap(ir.OverlapFB, a, b))
					i++
					continue
				}
			}
			q.Ranks[r] = append(q.Ranks[r], a)
		}
	}
	return q
}
