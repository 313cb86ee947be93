package tune

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/internal/chrometrace"
)

// The host spans a trainer records around the program (runtime/pipe's
// Timeline.AddSpan: category host, args.kind): the kinds tune fits.
const (
	spanOpt       = "OPT_STEP"
	spanAllReduce = "ALL_REDUCE"
	spanLoss      = "loss"
)

// span is one host span of the trace: its rank, kind, start and duration.
type span struct {
	rank   int
	kind   string
	ts, ms float64 // start (µs) and duration (ms)
}

// spanOf reads a host event: an optimizer step, a reduction or a loss
// gathering (ok), or other host work (the program's run), skipped.
func spanOf(e chrometrace.Event) (span, bool, error) {
	args, _ := e.ArgMap()
	kind, _ := args["kind"].(string)
	if kind != spanOpt && kind != spanAllReduce && kind != spanLoss {
		return span{}, false, nil
	}
	if e.Pid < 0 || e.Pid > ir.MaxIndex {
		return span{}, false, fmt.Errorf("pid (the rank) %d; want 0 to %d", e.Pid, ir.MaxIndex)
	}
	if e.Ts == nil || math.IsNaN(*e.Ts) || math.IsInf(*e.Ts, 0) {
		return span{}, false, errors.New("no finite ts")
	}
	dur := 0.0
	if e.Dur != nil {
		dur = *e.Dur
	}
	if !(dur >= 0 && dur <= MaxDur) {
		return span{}, false, fmt.Errorf("dur = %g µs; want a finite duration in [0, %g]", dur, float64(MaxDur))
	}
	return span{rank: e.Pid, kind: kind, ts: *e.Ts, ms: dur / 1e3}, true, nil
}

// fitHost fits opt and allreduce (Fit.Opt, Fit.AllReduce) to the spans:
// opt the largest of the ranks' median OPT_STEP spans; allreduce the
// median reduction less comm, a reduction (the n-th ALL_REDUCE or loss
// span of every rank, by start) taking its shortest span. steps and
// reductions count what they are fitted to.
func fitHost(spans []span, comm float64) (opt float64, steps int, allreduce float64, reductions int) {
	slices.SortStableFunc(spans, func(a, b span) int { return cmp.Compare(a.ts, b.ts) })
	type ofRank struct {
		kind string
		rank int
	}
	type nth struct {
		kind string
		n    int
	}
	byRank := map[int][]float64{} // rank → its OPT_STEP spans
	seen := map[ofRank]int{}      // the spans of a kind a rank has so far
	red := map[nth][]float64{}    // the n-th reduction's spans, one per rank
	var order []nth
	for _, s := range spans {
		if s.kind == spanOpt {
			byRank[s.rank] = append(byRank[s.rank], s.ms)
			steps++
			continue
		}
		key := nth{s.kind, seen[ofRank{s.kind, s.rank}]}
		seen[ofRank{s.kind, s.rank}]++
		if _, ok := red[key]; !ok {
			order = append(order, key)
		}
		red[key] = append(red[key], s.ms)
	}
	for _, ms := range byRank {
		opt = max(opt, median(ms))
	}
	if len(order) > 0 {
		least := make([]float64, len(order))
		for i, key := range order {
			least[i] = slices.Min(red[key])
		}
		allreduce = max(median(least)-comm, 0)
	}
	return min(opt, sim.MaxCost), steps, min(allreduce, sim.MaxCost), len(order)
}
