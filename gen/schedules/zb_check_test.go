package schedules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// This file holds the test-only tools of the zero-bubble family tests: a
// feasibility checker and a unit-time simulator. Both are written from the
// dependency rules alone and share nothing with the builders.

// zbtSpan says which stages micro-batch m runs through: lo..hi, inclusive.
// Every family but dualpipe runs every micro-batch through every stage.
type zbtSpan func(m int) (lo, hi int)

func zbtAllStages(prog ir.Program) zbtSpan {
	s := prog.Stages()
	return func(int) (int, int) { return 0, s - 1 }
}

// zbtDualSpan is the dualpipe representation: micro-batches below M/2 run
// through copy A (stages 0..P-1), the others through copy B (P..2P-1).
func zbtDualSpan(prog ir.Program) zbtSpan {
	p, m := prog.Placement.Ranks(), prog.Micro
	return func(mb int) (int, int) {
		if mb < m/2 {
			return 0, p - 1
		}
		return p, 2*p - 1
	}
}

type zbtKey struct{ stage, micro int }

// zbtCheck checks a compute-only program: every step is F, B, I, W or an
// OVERLAP_F_B / OVERLAP_B_F of two of them on the rank the placement gives
// its stage; each (stage, micro) a micro-batch runs through has exactly one F
// and one backward (one B, or one I and one W) and no other pair has any; and
// the program completes when ranks advance while their next step's
// dependencies are met:
//
//	F(s, m)       after F(s-1, m) (none at the micro-batch's first stage)
//	I/B(s, m)     after F(s, m) and I/B(s+1, m) (only F at its last stage)
//	W(s, m)       after I(s, m)
//	overlap       after both sub-steps' dependencies (neither may depend on the other)
func zbtCheck(prog ir.Program, span zbtSpan) error {
	pl := prog.Placement
	stages, m := pl.Stages(), prog.Micro
	if len(prog.Ranks) != pl.Ranks() {
		return fmt.Errorf("%d rank programs for %d ranks", len(prog.Ranks), pl.Ranks())
	}
	count := map[zbtKey][4]int{} // F, B, I, W
	slot := map[ir.Kind]int{ir.Forward: 0, ir.Backward: 1, ir.BackwardInput: 2, ir.BackwardWeight: 3}
	for r, steps := range prog.Ranks {
		for i, st := range steps {
			subs := []ir.Step{st}
			if st.Kind.IsOverlap() {
				if len(st.Sub) != 2 {
					return fmt.Errorf("rank %d step %d %s: an overlap needs two sub-steps", r, i, st)
				}
				subs = st.Sub
			}
			for _, c := range subs {
				k, ok := slot[c.Kind]
				if !ok {
					return fmt.Errorf("rank %d step %d %s: %s is not F, B, I or W", r, i, st, c.Kind)
				}
				if c.Stage < 0 || c.Stage >= stages || c.Micro < 0 || c.Micro >= m {
					return fmt.Errorf("rank %d step %d %s: stage or micro-batch out of range", r, i, st)
				}
				if pl.Rank(c.Stage) != r {
					return fmt.Errorf("rank %d step %d %s: stage %d lives on rank %d", r, i, st, c.Stage, pl.Rank(c.Stage))
				}
				n := count[zbtKey{c.Stage, c.Micro}]
				n[k]++
				count[zbtKey{c.Stage, c.Micro}] = n
			}
		}
	}
	for mb := 0; mb < m; mb++ {
		lo, hi := span(mb)
		for s := 0; s < stages; s++ {
			n := count[zbtKey{s, mb}]
			want := [4]int{}
			if s >= lo && s <= hi {
				want = [4]int{1, 1, 0, 0}
				if n[2] > 0 || n[3] > 0 {
					want = [4]int{1, 0, 1, 1}
				}
			}
			if n != want {
				return fmt.Errorf("(stage %d, micro %d): F, B, I, W counts %v, want %v", s, mb, n, want)
			}
		}
	}
	// Execute: advance ranks while their next step's dependencies are met.
	doneF, doneB, doneI := map[zbtKey]bool{}, map[zbtKey]bool{}, map[zbtKey]bool{}
	depsMet := func(c ir.Step) bool {
		lo, hi := span(c.Micro)
		k := zbtKey{c.Stage, c.Micro}
		switch c.Kind {
		case ir.Forward:
			return c.Stage == lo || doneF[zbtKey{c.Stage - 1, c.Micro}]
		case ir.Backward, ir.BackwardInput:
			next := zbtKey{c.Stage + 1, c.Micro}
			return doneF[k] && (c.Stage == hi || doneB[next] || doneI[next])
		case ir.BackwardWeight:
			return doneI[k]
		}
		return false
	}
	pos := make([]int, len(prog.Ranks))
	for moved := true; moved; {
		moved = false
		for r, steps := range prog.Ranks {
			for pos[r] < len(steps) {
				subs := steps[pos[r]].Computes()
				ok := true
				for _, c := range subs {
					ok = ok && depsMet(c)
				}
				if !ok {
					break
				}
				for _, c := range subs {
					k := zbtKey{c.Stage, c.Micro}
					switch c.Kind {
					case ir.Forward:
						doneF[k] = true
					case ir.Backward:
						doneB[k] = true
					case ir.BackwardInput:
						doneI[k] = true
					}
				}
				pos[r]++
				moved = true
			}
		}
	}
	var stuck []string
	for r, steps := range prog.Ranks {
		if pos[r] < len(steps) {
			stuck = append(stuck, fmt.Sprintf("rank %d at step %d %s", r, pos[r], steps[pos[r]]))
		}
	}
	if len(stuck) > 0 {
		return fmt.Errorf("deadlock: %s", strings.Join(stuck, "; "))
	}
	return nil
}

// zbtResult is what zbtSim measures.
type zbtResult struct {
	makespan      int
	first, last   []int // per rank: start of its first step, end of its last
	busy          []int // per rank: compute time
	peak          []int // per rank: most live chunks (F run, B or W not yet)
	wholeIdle     int   // Σ_r (makespan - busy_r)
	spanIdle      int   // Σ_r (last_r - first_r - busy_r)
	maxPeak       int
	totalBusy     int
	wholeBubble   float64 // wholeIdle / (P · makespan)
	spanBubble    float64 // spanIdle / Σ_r (last_r - first_r)
	overlapCount  int
	backwardCount int
}

// zbtCost is the unit cost model of the tests: F = I = W = 1, B = 2, an
// overlap the sum of its sub-steps (F&B = F+B), no comm.
func zbtCost(st ir.Step) int {
	switch st.Kind {
	case ir.Forward, ir.BackwardInput, ir.BackwardWeight:
		return 1
	case ir.Backward:
		return 2
	}
	c := 0
	for _, s := range st.Sub {
		c += zbtCost(s)
	}
	return c
}

// zbtSim runs a feasible program compute-only: a step starts when its rank
// is free and the steps it depends on have ended (rules of zbtCheck).
func zbtSim(t *testing.T, prog ir.Program, span zbtSpan) zbtResult {
	t.Helper()
	ranks := len(prog.Ranks)
	res := zbtResult{first: make([]int, ranks), last: make([]int, ranks), busy: make([]int, ranks), peak: make([]int, ranks)}
	endF, endG, endI := map[zbtKey]int{}, map[zbtKey]int{}, map[zbtKey]int{} // endG: B or I (gradient out)
	free := make([]int, ranks)
	live := make([]int, ranks)
	pos := make([]int, ranks)
	for r := range res.first {
		res.first[r] = -1
	}
	for moved := true; moved; {
		moved = false
		for r, steps := range prog.Ranks {
			for pos[r] < len(steps) {
				st := steps[pos[r]]
				start, ok := free[r], true
				need := func(m map[zbtKey]int, k zbtKey) {
					e, found := m[k]
					if !found {
						ok = false
					}
					start = max(start, e)
				}
				for _, c := range st.Computes() {
					lo, hi := span(c.Micro)
					switch c.Kind {
					case ir.Forward:
						if c.Stage != lo {
							need(endF, zbtKey{c.Stage - 1, c.Micro})
						}
					case ir.Backward, ir.BackwardInput:
						need(endF, zbtKey{c.Stage, c.Micro})
						if c.Stage != hi {
							need(endG, zbtKey{c.Stage + 1, c.Micro})
						}
					case ir.BackwardWeight:
						need(endI, zbtKey{c.Stage, c.Micro})
					}
				}
				if !ok {
					break
				}
				end := start + zbtCost(st)
				if res.first[r] < 0 {
					res.first[r] = start
				}
				res.last[r] = end
				res.busy[r] += zbtCost(st)
				free[r] = end
				if st.Kind.IsOverlap() {
					res.overlapCount++
				}
				for _, c := range st.Computes() {
					k := zbtKey{c.Stage, c.Micro}
					switch c.Kind {
					case ir.Forward:
						endF[k] = end
						live[r]++
						res.peak[r] = max(res.peak[r], live[r])
					case ir.Backward:
						endG[k] = end
						live[r]--
						res.backwardCount++
					case ir.BackwardInput:
						endG[k], endI[k] = end, end
						res.backwardCount++
					case ir.BackwardWeight:
						live[r]--
					}
				}
				pos[r]++
				moved = true
			}
		}
	}
	for r, steps := range prog.Ranks {
		if pos[r] < len(steps) {
			t.Fatalf("simulation stuck on rank %d at step %d %s (run zbtCheck first)", r, pos[r], steps[pos[r]])
		}
	}
	spanSum := 0
	for r := range prog.Ranks {
		res.makespan = max(res.makespan, res.last[r])
		res.totalBusy += res.busy[r]
		res.maxPeak = max(res.maxPeak, res.peak[r])
		res.spanIdle += res.last[r] - res.first[r] - res.busy[r]
		spanSum += res.last[r] - res.first[r]
	}
	res.wholeIdle = ranks*res.makespan - res.totalBusy
	res.wholeBubble = float64(res.wholeIdle) / float64(ranks*res.makespan)
	res.spanBubble = float64(res.spanIdle) / float64(spanSum)
	return res
}

// zbtBuild builds a program through the registry (Normalize included) and
// fails the test on error.
func zbtBuild(t *testing.T, name string, p, v, m int, opts ir.Options) ir.Program {
	t.Helper()
	prog, err := Build(ir.Config{Schedule: name, Ranks: p, Virtual: v, Micro: m, Options: opts})
	if err != nil {
		t.Fatalf("%s P=%d V=%d M=%d: %v", name, p, v, m, err)
	}
	if prog.Placement.Ranks() != p || prog.Micro != m {
		t.Fatalf("%s P=%d V=%d M=%d: program has %d ranks and %d micro-batches", name, p, v, m, prog.Placement.Ranks(), prog.Micro)
	}
	return prog
}

// zbtSpanOf returns the span rule of a family.
func zbtSpanOf(name string, prog ir.Program) zbtSpan {
	if name == "dualpipe" {
		return zbtDualSpan(prog)
	}
	return zbtAllStages(prog)
}

// The checker itself must catch broken programs.
func TestZBCheckerCatches(t *testing.T) {
	good := zbtBuild(t, "zb-h1", 3, 1, 4, ir.Options{})
	span := zbtAllStages(good)
	if err := zbtCheck(good, span); err != nil {
		t.Fatalf("zb-h1 P=3 M=4: %v", err)
	}
	mutate := func(name string, f func(p ir.Program)) {
		t.Helper()
		p := good.Clone()
		f(p)
		if err := zbtCheck(p, span); err == nil {
			t.Errorf("%s: checker accepted a broken program", name)
		}
	}
	mutate("W before its I", func(p ir.Program) {
		steps := p.Ranks[2] // last rank: F0 I0 ...; put W0 first
		for i, st := range steps {
			if st.Kind == ir.BackwardWeight && st.Micro == 0 {
				copy(steps[1:i+1], steps[0:i])
				steps[0] = ir.Compute(ir.BackwardWeight, 2, 0)
				return
			}
		}
	})
	mutate("I before the next stage's I", func(p ir.Program) {
		steps := p.Ranks[0]
		for i, st := range steps {
			if st.Kind == ir.BackwardInput {
				steps[0], steps[i] = steps[i], steps[0]
				return
			}
		}
	})
	mutate("dropped W", func(p ir.Program) { p.Ranks[1] = p.Ranks[1][:len(p.Ranks[1])-1] })
	mutate("duplicated F", func(p ir.Program) { p.Ranks[1] = append(p.Ranks[1], p.Ranks[1][0]) })
	mutate("stage on the wrong rank", func(p ir.Program) { p.Ranks[0][0].Stage = 1 })
	mutate("B and I for one chunk", func(p ir.Program) {
		for i, st := range p.Ranks[1] {
			if st.Kind == ir.BackwardWeight {
				p.Ranks[1][i] = ir.Compute(ir.Backward, st.Stage, st.Micro)
				return
			}
		}
	})
	mutate("overlap whose halves depend on each other", func(p ir.Program) {
		last := p.Ranks[2]
		// Fuse F(2,0) and I(2,0) into one composite at the front.
		last[0] = ir.Overlap(ir.OverlapFB, last[0], last[1])
		p.Ranks[2] = append(last[:1], last[2:]...)
	})
}
