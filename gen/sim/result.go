package sim

import (
	"cmp"
	"math"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
)

func (s *simulator) result() Result {
	P := len(s.ranks)
	res := Result{
		Busy:            make([]float64, P),
		Span:            make([]float64, P),
		PeakActivations: make([]int, P),
		Events:          s.ev,
		Offsets:         make([]int, P),
	}
	first := make([]float64, P)
	last := make([]float64, P)
	seen := make([]bool, P)
	for e, ev := range s.ev {
		res.Makespan = max(res.Makespan, ev.End)
		if s.cls[e] != clCompute {
			continue
		}
		r := ev.Rank
		res.Busy[r] += ev.End - ev.Start
		if !seen[r] {
			seen[r], first[r] = true, ev.Start
		}
		last[r] = max(last[r], ev.End)
	}
	var busy, span float64
	for r := 0; r < P; r++ {
		res.Offsets[r] = s.ranks[r].off
		if seen[r] {
			res.Span[r] = last[r] - first[r]
		}
		busy += res.Busy[r]
		span += res.Span[r]
	}
	if res.Makespan > 0 {
		res.Bubble = 1 - busy/(float64(P)*res.Makespan)
	}
	if span > 0 {
		res.BubbleSpan = (span - busy) / span
	}
	s.peaks(&res)
	return res
}

// peaks fills PeakActivations by sweeping chunk lifetimes.
func (s *simulator) peaks(res *Result) {
	for r, v := range livePeaks(s.ev, len(res.PeakActivations), s.stages, nil) {
		res.PeakActivations[r] = int(math.Round(v))
	}
}

// PeakMemory returns, for each rank, the peak over the iteration of the
// sum of act[s] over its live chunks, s the chunk's stage (live as
// PeakActivations counts them; a stage past the end of act weighs 0):
// the activation memory of each rank when a chunk of stage s holds act[s].
func (r Result) PeakMemory(act []float64) []float64 {
	if act == nil {
		act = []float64{}
	}
	return livePeaks(r.Events, len(r.Offsets), len(act), act)
}

// livePeaks sweeps the chunk lifetimes of the events of a simulation of P
// ranks and S stages: the peak per rank of the live chunks' weights
// (weight[s] per chunk of stage s; nil: 1 each).
func livePeaks(evs []Event, P, S int, weight []float64) []float64 {
	type life struct {
		rank      int
		stage     int
		start     float64
		fEnd      float64    // end of the chunk's F
		end       [3]float64 // ends of the chunk's W, B and I (NaN when absent)
		offEnd    float64    // end of the offload transfer, or NaN
		loadStart float64    // start of the load transfer, or NaN
	}
	compute := func(ev *Event) bool {
		return ev.Lane == LaneCompute && (ev.Step.Kind.IsCompute() || ev.Step.Kind.IsOverlap())
	}
	nan := math.NaN()
	maxMicro := 0
	for i := range evs {
		ev := &evs[i]
		maxMicro = max(maxMicro, ev.Step.Micro)
		for _, sub := range ev.Step.Sub {
			maxMicro = max(maxMicro, sub.Micro)
		}
	}
	at := newChunkTable(S, maxMicro, len(evs)) // (stage, micro) -> index in lives
	var lives []life
	// Forwards first: a chunk belongs to the rank running its F.
	for i := range evs {
		ev := &evs[i]
		if !compute(ev) {
			continue
		}
		for _, cs := range ev.Step.Computes() {
			if cs.Kind == ir.Forward && at.setFirst(cs.Stage, cs.Micro, len(lives)) {
				lives = append(lives, life{rank: ev.Rank, stage: cs.Stage, start: ev.Start, fEnd: ev.End, end: [3]float64{nan, nan, nan}, offEnd: nan, loadStart: nan})
			}
		}
	}
	backward := false // a forward-only program's chunks end at their F
	for i := range evs {
		ev := &evs[i]
		switch {
		case compute(ev):
			for _, cs := range ev.Step.Computes() {
				j := 2 // I
				switch cs.Kind {
				case ir.Forward:
					continue
				case ir.BackwardWeight:
					j = 0
				case ir.Backward:
					j = 1
				}
				backward = true
				if li := at.get(cs.Stage, cs.Micro); li >= 0 {
					l := &lives[li]
					if math.IsNaN(l.end[j]) || ev.End > l.end[j] {
						l.end[j] = ev.End
					}
				}
			}
		case ev.Lane == LaneSwap:
			li := at.get(ev.Step.Stage, ev.Step.Micro)
			if li < 0 || lives[li].rank != ev.Rank {
				continue
			}
			if ev.Step.Kind == ir.SwapLaunchOffload {
				lives[li].offEnd = ev.End
			} else {
				lives[li].loadStart = ev.Start
			}
		}
	}
	type mark struct {
		t     float64
		delta float64
	}
	marks := make([][]mark, P)
	for _, l := range lives {
		if l.rank < 0 || l.rank >= P {
			continue
		}
		w := 1.0
		if weight != nil {
			w = 0
			if l.stage >= 0 && l.stage < len(weight) {
				w = weight[l.stage]
			}
		}
		end := math.Inf(1) // never freed
		for _, v := range l.end {
			if !math.IsNaN(v) {
				end = v
				break
			}
		}
		if !backward {
			end = l.fEnd
		}
		marks[l.rank] = append(marks[l.rank], mark{l.start, +w}, mark{end, -w})
		if !math.IsNaN(l.offEnd) && !math.IsNaN(l.loadStart) && l.start <= l.offEnd && l.offEnd <= l.loadStart && l.loadStart <= end {
			marks[l.rank] = append(marks[l.rank], mark{l.offEnd, -w}, mark{l.loadStart, +w})
		}
	}
	out := make([]float64, P)
	for r, ms := range marks {
		slices.SortFunc(ms, func(a, b mark) int {
			if c := cmp.Compare(a.t, b.t); c != 0 {
				return c
			}
			return cmp.Compare(a.delta, b.delta)
		})
		cur, peak := 0.0, 0.0
		for _, m := range ms {
			cur += m.delta
			peak = max(peak, cur)
		}
		out[r] = peak
	}
	return out
}
