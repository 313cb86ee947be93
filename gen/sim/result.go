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
		if s.cls[e] != clCompute && !ev.Step.Kind.IsRebuild() {
			continue // a rebuild (RECOMPUTE) re-runs a forward: model compute too
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

// peaks fills PeakActivations and PeakLive by sweeping chunk lifetimes.
func (s *simulator) peaks(res *Result) {
	res.RecomputeShare = s.p.RecomputeShare
	res.PeakLive = livePeaks(s.ev, len(res.PeakActivations), s.stages, nil, s.p.RecomputeShare)
	for r, v := range res.PeakLive {
		res.PeakActivations[r] = int(math.Ceil(v - 1e-9))
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
	return livePeaks(r.Events, len(r.Offsets), len(act), act, r.RecomputeShare)
}

// livePeaks sweeps the chunk lifetimes of the events of a simulation of P
// ranks and S stages: the peak per rank of the live chunks' weights
// (weight[s] per chunk of stage s; nil: 1 each), where a recomputed chunk
// of stage s drops the share share[s] of its weight (ir.Program's
// RecomputeShare; all of it when share is nil or that is outside (0, 1))
// from the end of its F to the start of its RECOMPUTE.
//
// Lifetimes are half-open in time, and at one instant t the marks go in the
// order the rank ran them: first the ends of events of positive length
// that end at t (they end before anything at t begins), then every other
// mark at t in program order (event index; an event's start before its
// end). So a chunk whose backward ends when another's F starts does not
// overlap it, while zero-length steps still count: a chunk is live at
// least from its F's start to its last backward's end in program order,
// and all-zero costs give the live counts of the program order itself.
func livePeaks(evs []Event, P, S int, weight, share []float64) []float64 {
	type life struct {
		rank      int
		stage     int
		start     instant
		fEnd      instant    // end of the chunk's F
		end       [3]instant // ends of the chunk's W, B and I (t NaN when absent)
		offEnd    instant    // end of the offload transfer, or t NaN
		loadStart instant    // start of the load transfer, or t NaN
		recStart  instant    // start of its rebuild (IsRebuild: RECOMPUTE), or t NaN
	}
	compute := func(ev *Event) bool {
		return ev.Lane == LaneCompute && (ev.Step.Kind.IsCompute() || ev.Step.Kind.IsOverlap())
	}
	none := instant{t: math.NaN()}
	maxMicro := 0
	for i := range evs {
		ev := &evs[i]
		maxMicro = max(maxMicro, ev.Step.Micro)
		for _, sub := range ev.Step.Sub {
			maxMicro = max(maxMicro, sub.Micro)
		}
	}
	at := newChunkTable(S, maxMicro, len(evs)) // (stage, micro) -> index in lives
	lives := make([]life, 0, S*(maxMicro+1))
	// Forwards first: a chunk belongs to the rank running its F.
	for i := range evs {
		ev := &evs[i]
		if !compute(ev) {
			continue
		}
		for _, cs := range ev.Step.Computes() {
			if cs.Kind == ir.Forward && at.setFirst(cs.Stage, cs.Micro, len(lives)) {
				lives = append(lives, life{rank: ev.Rank, stage: cs.Stage, start: startOf(evs, i), fEnd: endOf(evs, i),
					end: [3]instant{none, none, none}, offEnd: none, loadStart: none, recStart: none})
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
					if e := endOf(evs, i); math.IsNaN(l.end[j].t) || l.end[j].before(e) {
						l.end[j] = e
					}
				}
			}
		case ev.Step.Kind.IsRebuild():
			if li := at.get(ev.Step.Stage, ev.Step.Micro); li >= 0 && lives[li].rank == ev.Rank {
				lives[li].recStart = startOf(evs, i)
			}
		case ev.Lane == LaneSwap:
			li := at.get(ev.Step.Stage, ev.Step.Micro)
			if li < 0 || lives[li].rank != ev.Rank {
				continue
			}
			if ev.Step.Kind == ir.SwapLaunchOffload {
				lives[li].offEnd = endOf(evs, i)
			} else {
				lives[li].loadStart = startOf(evs, i)
			}
		}
	}
	type mark struct {
		at    instant
		delta float64
	}
	marks := make([][]mark, P)
	perRank := make([]int, P)
	for _, l := range lives {
		if l.rank >= 0 && l.rank < P {
			perRank[l.rank]++
		}
	}
	for r := range marks {
		marks[r] = make([]mark, 0, 2*perRank[r])
	}
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
		end := instant{t: math.Inf(1)} // never freed
		for _, v := range l.end {
			if !math.IsNaN(v.t) {
				end = v
				break
			}
		}
		if !backward {
			end = l.fEnd
		}
		if end.before(l.start) {
			// a backward that ends before its F starts (a malformed
			// order): the chunk is still live for an instant
			end = l.start
			end.key |= 1
		}
		marks[l.rank] = append(marks[l.rank], mark{l.start, +w}, mark{end, -w})
		if !math.IsNaN(l.offEnd.t) && !math.IsNaN(l.loadStart.t) &&
			l.start.before(l.offEnd) && !l.loadStart.before(l.offEnd) && l.loadStart.before(end) {
			marks[l.rank] = append(marks[l.rank], mark{l.offEnd, -w}, mark{l.loadStart, +w})
		}
		if !math.IsNaN(l.recStart.t) && l.fEnd.before(l.recStart) && l.recStart.before(end) {
			// its F dropped the activations (a selective policy's share of
			// them); its rebuild (RECOMPUTE) restores them
			d := w
			if l.stage >= 0 && l.stage < len(share) && share[l.stage] > 0 && share[l.stage] < 1 {
				d = w * share[l.stage]
			}
			marks[l.rank] = append(marks[l.rank], mark{l.fEnd, -d}, mark{l.recStart, +d})
		}
	}
	out := make([]float64, P)
	for r, ms := range marks {
		slices.SortFunc(ms, func(a, b mark) int {
			if c := a.at.compare(b.at); c != 0 {
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

// instant is a point of the sweep in livePeaks: a time t, and where it
// falls among the marks at t, packed in key for a cheap sort: the end of
// an event of positive length (unsettled: the top bit clear) goes before
// all else at t, then the rest by event index (program order on one rank;
// bits 1 up), an event's start (bit 0 clear) before its end.
type instant struct {
	t   float64
	key int64
}

// settledBit marks an instant that is not the end of an event of positive
// length.
const settledBit = 1 << 62

// startOf is the instant event i starts.
func startOf(evs []Event, i int) instant {
	return instant{t: evs[i].Start, key: settledBit | int64(i)<<1}
}

// endOf is the instant event i ends.
func endOf(evs []Event, i int) instant {
	if evs[i].End > evs[i].Start {
		return instant{t: evs[i].End, key: int64(i)<<1 | 1}
	}
	return instant{t: evs[i].End, key: settledBit | int64(i)<<1 | 1}
}

func (a instant) compare(b instant) int {
	if c := cmp.Compare(a.t, b.t); c != 0 {
		return c
	}
	return cmp.Compare(a.key, b.key)
}

func (a instant) before(b instant) bool { return a.compare(b) < 0 }
