package sim

import (
	"math"

	"github.com/ppgen/ppgen/gen/ir"
)

// capChains is LowerBound's term of the chains a memory cap forces
// (docs/model.md, "Lower bound", term 6): the longest path through every
// micro-batch's dependencies plus the precedences the cap adds. On rank r
// with cap C, when micro-batch m's F of stage s starts, m's chunks of r's
// stages up to s are all live (their backwards wait for s's), A(s) of
// activation in all; a chunk of a stage s' ≤ s of r from an earlier
// micro-batch has had its F by then, and holds act(s') until its last
// backward ends. At most k = ⌊(C − A(s)) / act(s')⌋ of them fit beside
// m's, and each stage ends its backwards in micro-batch order, so the last
// backward of s' for micro-batch m − k − 1 has ended before F(s, m)
// starts. With the chains (F through the stages with their hops,
// backwards back, W after I) and each stage's steps of a kind in
// micro-batch order, those edges make a graph whose longest path no order
// within the cap beats. ok is false when the term does not apply: more
// than one route, a stage some micro-batch skips, B mixed with I and W on
// a stage, overlap steps, or a rank without a cap or with a stage of no
// activation.
func capChains(p ir.Program, c Cost, opt BoundOptions, split []bool, hop func(from, to, act int) float64) (float64, bool) {
	S, M, P := p.Stages(), p.Micro, len(p.Ranks)
	pl := p.Placement
	for m := range M {
		if first, last := p.Route(m); first != 0 || last != S-1 {
			return 0, false
		}
	}
	if len(opt.Act) < S || len(opt.Cap) < P {
		return 0, false
	}
	for r := range P {
		if !(opt.Cap[r] > 0) {
			return 0, false
		}
	}
	for s := range S {
		if !(opt.Act[s] > 0) {
			return 0, false
		}
	}
	// edges[s]: the stages s' and distances j of the cap's edges into F(s, ·).
	type edge struct{ stage, back int }
	edges := make([][]edge, S)
	for s := range S {
		r := pl.RankOf[s]
		held := 0.0 // A(s)
		for _, o := range pl.StagesOf(r) {
			if o <= s {
				held += opt.Act[o]
			}
		}
		room := opt.Cap[r] - held
		if room < -1e-9*opt.Cap[r] {
			return 0, false // one micro-batch does not fit: not this term's to say
		}
		for _, o := range pl.StagesOf(r) {
			// k of o's earlier chunks fit beside m's; the (k+1)-th back
			// must be gone (none when k reaches M − 1, or the sizes are
			// not finite).
			if q := max(0, room) / opt.Act[o]; o <= s && q < float64(M-1) {
				k := int(math.Floor(q + 1e-9))
				edges[s] = append(edges[s], edge{o, k + 1})
			}
		}
	}
	back := func(s int) float64 {
		if split[s] {
			return of(c.I, s)
		}
		return of(c.B, s)
	}
	// End times, micro-batch by micro-batch: F's, then backwards, then W's
	// (every edge goes to a later step of the same micro-batch or to a
	// later micro-batch).
	endF := make([]float64, S*M)
	endB := make([]float64, S*M)
	last := make([]float64, S*M) // the end of the chunk's last backward
	best := 0.0
	for m := range M {
		for s := range S {
			t := 0.0
			if s > 0 {
				t = endF[(s-1)*M+m] + hop(s-1, s, s-1)
			}
			if m > 0 {
				t = max(t, endF[s*M+m-1])
			}
			for _, e := range edges[s] {
				if m-e.back >= 0 {
					t = max(t, last[e.stage*M+m-e.back])
				}
			}
			endF[s*M+m] = t + of(c.F, s)
		}
		for s := S - 1; s >= 0; s-- {
			t := endF[s*M+m]
			if s < S-1 {
				t = max(t, endB[(s+1)*M+m]+hop(s+1, s, s))
			}
			if m > 0 {
				t = max(t, endB[s*M+m-1])
			}
			endB[s*M+m] = t + back(s)
			last[s*M+m] = endB[s*M+m]
		}
		for s := range S {
			if split[s] {
				t := endB[s*M+m]
				if m > 0 {
					t = max(t, last[s*M+m-1])
				}
				last[s*M+m] = t + of(c.W, s)
			}
			best = max(best, last[s*M+m])
		}
	}
	return best, true
}
