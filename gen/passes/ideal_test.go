package passes

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/internal/testprog"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// TestIdealTimelineAgreesWithSim: the timed comm order's ideal timeline and
// gen/sim read their dependencies from one model (gen/internal/deps), so
// on a compute-only program (where sim charges a cross-rank input Comm plus
// its transfer time, as the ideal timeline does) every step ends at the
// same time in both.
func TestIdealTimelineAgreesWithSim(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 6))
	cases := []struct {
		name string
		p    ir.Program
	}{
		{"1f1b", oneF1B(4, 8)},
		{"gpipe", gpipe(3, 5)},
		{"interleaved", interleaved(2, 2, 4)},
		{"v split", vshape(3, 6, true)},
		{"zb", zbLike(4, 8)},
		{"random", testprog.RandomFeasible(rng, ir.Loop(3, 2), 5)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Uneven stages, so a dependency on the wrong stage shows.
			S := tc.p.Stages()
			c := sim.Cost{B: []float64{2}, I: []float64{1.25}, W: []float64{0.75}, Comm: 0.3, DataLoad: 0.1, BW: 8}
			for s := range S {
				c.F = append(c.F, 1+0.25*float64(s%3))
				c.Act = append(c.Act, float64(1+s))
			}
			rc, err := c.Resolve(S)
			if err != nil {
				t.Fatal(err)
			}
			p := insertDataShared(tc.p) // with its data loads, as the pass times it
			ends, ok := idealTimeline(p, rc)
			if !ok {
				t.Fatal("ideal timeline: stuck")
			}
			res, err := sim.Run(p, rc)
			if err != nil {
				t.Fatal(err)
			}
			for r, steps := range p.Ranks {
				for j := range steps {
					if got, want := ends[r][j], res.Events[res.Offsets[r]+j].End; math.Abs(got-want) > 1e-9 {
						t.Fatalf("rank %d step %d %s: ideal end %v, sim end %v", r, j, steps[j], got, want)
					}
				}
			}
		})
	}
}

// TestIdealTimelineAsBefore: idealTimelineInto, which reads each step into
// a compact record before its serial part, gives bit for bit the end times
// of the implementation before that change (idealTimelineRef, kept here as
// the reference), with overlaps, splits, data loads, latency and transfer
// sizes, on fresh and reused scratch; and it is stuck where that one is.
func TestIdealTimelineAsBefore(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 36))
	withOverlaps, err := Overlap(oneF1B(4, 8))
	if err != nil {
		t.Fatal(err)
	}
	stuck := oneF1B(3, 4)
	// Rank 1's first backward before the forwards: it waits for a gradient
	// that needs those forwards, so the timeline is stuck.
	stuck.Ranks[1] = append([]ir.Step{stuck.Ranks[1][len(stuck.Ranks[1])-1]}, stuck.Ranks[1][:len(stuck.Ranks[1])-1]...)
	cases := []ir.Program{oneF1B(4, 8), gpipe(3, 5), interleaved(2, 2, 4), interleaved(4, 2, 8), vshape(3, 6, true), zbLike(4, 8), withOverlaps, stuck}
	for range 20 {
		cases = append(cases, testprog.RandomFeasible(rng, ir.Loop(2+rng.IntN(4), 1+rng.IntN(2)), 1+rng.IntN(8)))
	}
	sc := new(timelineScratch) // reused across the cases
	stuckRuns := 0
	for i, p := range cases {
		S := p.Stages()
		for _, bw := range []float64{0, 8} {
			c := sim.Cost{B: []float64{2}, I: []float64{1.25}, W: []float64{0.75}, Comm: 0.3, DataLoad: 0.1, BW: bw, Overlap: 0.4}
			for s := range S {
				c.F = append(c.F, 1+0.25*float64(s%3))
				if bw > 0 {
					c.Act = append(c.Act, float64(1+s))
				}
			}
			rc, err := c.Resolve(S)
			if err != nil {
				t.Fatal(err)
			}
			q := insertDataShared(p)
			want, wok := idealTimelineRef(q, rc)
			got, ok := idealTimelineInto(q, rc, sc)
			if ok != wok {
				t.Fatalf("case %d (BW %v): ok = %v, want %v", i, bw, ok, wok)
			}
			if !ok {
				stuckRuns++
				continue
			}
			for r := range want {
				for j := range want[r] {
					if got[r][j] != want[r][j] {
						t.Fatalf("case %d (BW %v) rank %d step %d %s: end %v, want %v", i, bw, r, j, q.Ranks[r][j], got[r][j], want[r][j])
					}
				}
			}
		}
	}
	if stuckRuns == 0 {
		t.Error("no case was stuck: the stuck path was not compared")
	}
}

func idealTimelineRef(p ir.Program, c sim.Cost) ([][]float64, bool) {
	sc := new(timelineScratch)
	var fEnd, bEnd []float64
	rankOf := p.Placement.RankOf
	P, S, M := len(p.Ranks), len(rankOf), p.Micro
	fEnd, bEnd = make([]float64, S*M), make([]float64, S*M)
	for i := range fEnd {
		fEnd[i], bEnd[i] = -1, -1
	}
	// Ranks waiting for a chunk's F (key k) or B/I (key S*M+k), as linked lists.
	sc.head = par.Resize(sc.head, 2*S*M)
	head := sc.head
	for i := range head {
		head[i] = -1
	}
	next := make([]int32, P)
	ends := make([][]float64, P)
	pos := make([]int, P)
	free := make([]float64, P)
	work := make([]int32, 0, P)
	n := 0
	for r := range P {
		n += len(p.Ranks[r])
	}
	sc.ends = par.Resize(sc.ends, n) // each entry written as its step is timed
	n = 0
	for r := range P {
		ends[r] = sc.ends[n : n+len(p.Ranks[r]) : n+len(p.Ranks[r])]
		n += len(p.Ranks[r])
		work = append(work, int32(r))
	}
	wake := func(key int) {
		for w := head[key]; w >= 0; w = next[w] {
			work = append(work, w)
		}
		head[key] = -1
	}
	for len(work) > 0 {
		r := int(work[len(work)-1])
		work = work[:len(work)-1]
	advance:
		for pos[r] < len(p.Ranks[r]) {
			st := &p.Ranks[r][pos[r]]
			subs := ir.ComputesAt(p.Ranks[r], pos[r])
			start := free[r]
			for x := range subs {
				cs := &subs[x]
				// Its cross-stage input: the activation of F(s-1) or the
				// gradient of B/I(s+1). The chunk's own F and I run earlier
				// on this rank, and a compute-only program ships no labels
				// or inputs.
				in, ok := deps.Neighbour(&p, cs)
				if !ok {
					continue
				}
				have, wk := fEnd, in.Stage*M+in.Micro
				if in.What == deps.Gradient {
					have, wk = bEnd, wk+S*M
				}
				t := have[in.Stage*M+in.Micro]
				if t < 0 {
					next[r] = head[wk]
					head[wk] = int32(r)
					break advance
				}
				if in.Rank != r {
					// The transfer: its latency and, with a bandwidth,
					// the size of the activation (F) or of the gradient
					// with respect to cs's output (a backward).
					t += c.Comm + c.ActTime(in.Act)
				}
				start = max(start, t)
			}
			end := start + c.StepCost(*st)
			ends[r][pos[r]] = end
			free[r] = end
			pos[r]++
			for x := range subs {
				cs := &subs[x]
				k := cs.Stage*M + cs.Micro
				switch {
				case cs.Kind == ir.Forward:
					fEnd[k] = end
					wake(k)
				case cs.Kind.IsBackward():
					bEnd[k] = end
					wake(S*M + k)
				}
			}
		}
	}
	for r := range P {
		if pos[r] < len(p.Ranks[r]) {
			return nil, false
		}
	}
	return ends, true
}
