package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/ppgen/ppgen/gen/ir"
)

// MaxSharedRounds bounds RunShared's iterations.
const MaxSharedRounds = 64

// RunShared simulates p with its ranks sharing cores processors (the ranks
// of one process on a machine with fewer cores than ranks): a compute
// step during which n ranks compute, on average over its time, takes its
// cost times max(1, n/cores), as a fair scheduler's time slices give it.
// The strict model cannot stretch a step while it runs, so RunShared
// iterates Run: each round charges every compute step its cost scaled by
// the sharing the previous round's timeline shows (Cost.Each, the mean of
// the last two factors, so that the rounds settle), until the makespan
// moves by less than a part in 10⁴ or MaxSharedRounds rounds have run. c's
// costs are the steps' times alone (a fit of uncontended calls, gen/tune's
// Options.Cores); c.Each, when given, is replaced. cores ≥ the ranks is
// Run.
func RunShared(p ir.Program, c Cost, cores int) (Result, error) {
	if cores < 1 {
		return Result{}, fmt.Errorf("sim: %d cores; want 1 or more", cores)
	}
	c.Each = nil
	res, err := Run(p, c)
	if err != nil || cores >= len(p.Ranks) {
		return res, err
	}
	rc, err := c.Resolve(p.Stages())
	if err != nil {
		return Result{}, err
	}
	factor := map[StepKey]float64{}
	for range MaxSharedRounds {
		busy := Sharing(res.Events)
		each := make(map[StepKey]float64, len(busy))
		for i, n := range busy {
			st := res.Events[i].Step
			if n < 0 || st.Kind.IsOverlap() {
				continue
			}
			k := StepKey{st.Kind, st.Stage, st.Micro}
			f := max(1, n/float64(cores))
			if old, ok := factor[k]; ok {
				f = (f + old) / 2
			}
			factor[k] = f
			each[k] = min(rc.computeCost(st)*f, MaxCost)
		}
		c.Each = each
		next, err := Run(p, c)
		if err != nil {
			return Result{}, err
		}
		done := math.Abs(next.Makespan-res.Makespan) <= 1e-4*res.Makespan
		res = next
		if done {
			return res, nil
		}
	}
	return res, nil
}

// Sharing returns, for each event of a timeline, the number of ranks
// computing during it, its own included, on average over its time: 1 plus
// the other ranks' compute (F, B, I, W, overlap) time inside it over its
// length; -1 for an event that is not a compute step, and 1 for one of
// length 0. A rank's own compute steps do not overlap.
func Sharing(events []Event) []float64 {
	var spans []span
	for _, e := range events {
		if e.Step.Kind.IsCompute() && e.End > e.Start {
			spans = append(spans, span{e.Start, e.End, e.Rank})
		}
	}
	in := overlapIndex(spans)
	out := make([]float64, len(events))
	for i, e := range events {
		switch {
		case !e.Step.Kind.IsCompute():
			out[i] = -1
		case e.End <= e.Start:
			out[i] = 1
		default:
			// Every rank's compute inside [Start, End], less its own.
			out[i] = 1 + (in.integral(e.Start, e.End)-(e.End-e.Start))/(e.End-e.Start)
		}
	}
	return out
}

// span is a compute interval of a rank.
type span struct {
	start, end float64
	rank       int
}

// activity is the number of compute intervals open over time, as a step
// function: at[i] is a boundary, open[i] the count from at[i] to at[i+1],
// and area[i] the integral of the count from at[0] to at[i].
type activity struct {
	at, area []float64
	open     []int
}

func overlapIndex(spans []span) activity {
	type edge struct {
		t float64
		d int
	}
	edges := make([]edge, 0, 2*len(spans))
	for _, s := range spans {
		edges = append(edges, edge{s.start, 1}, edge{s.end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Compare(a.t, b.t) })
	var a activity
	n := 0
	for _, e := range edges {
		if len(a.at) > 0 && a.at[len(a.at)-1] == e.t {
			n += e.d
			a.open[len(a.open)-1] = n
			continue
		}
		area := 0.0
		if k := len(a.at); k > 0 {
			area = a.area[k-1] + float64(a.open[k-1])*(e.t-a.at[k-1])
		}
		n += e.d
		a.at, a.area, a.open = append(a.at, e.t), append(a.area, area), append(a.open, n)
	}
	return a
}

// integral is the count's integral over [from, to].
func (a activity) integral(from, to float64) float64 { return a.upTo(to) - a.upTo(from) }

// upTo is the count's integral from the first boundary to t.
func (a activity) upTo(t float64) float64 {
	// The last boundary at or before t.
	lo, hi := 0, len(a.at)
	for lo < hi {
		m := (lo + hi) / 2
		if a.at[m] <= t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return 0
	}
	i := lo - 1
	return a.area[i] + float64(a.open[i])*(t-a.at[i])
}
