package metrics

import (
	"math"
	"slices"
	"time"

	"github.com/ppgen/ppgen/runtime/pipe"
)

// Bubble returns the measured bubble fraction of a step of wall time wall
// on the ranks whose compute times are busy: 1 - Σbusy/(len(busy)·wall),
// the share of the ranks' time spent not computing (waiting for a peer,
// communicating, idle in the schedule's warmup and cooldown). It is NaN
// when wall is not positive or busy is empty.
func Bubble(wall time.Duration, busy []time.Duration) float64 {
	if wall <= 0 || len(busy) == 0 {
		return math.NaN()
	}
	var sum time.Duration
	for _, b := range busy {
		sum += b
	}
	return 1 - float64(sum)/(float64(len(busy))*float64(wall))
}

// Busy returns, for each of ranks, its compute time in events (a
// runtime/pipe Timeline's stage calls of one step): the length of the union
// of the rank's call intervals, so the two halves of an overlap step that
// run at once count once. A rank with no event has 0.
func Busy(events []pipe.TimelineEvent, ranks []int) []time.Duration {
	type span struct{ start, end time.Time }
	by := make(map[int][]span, len(ranks))
	for _, e := range events {
		if e.End.After(e.Start) {
			by[e.Rank] = append(by[e.Rank], span{e.Start, e.End})
		}
	}
	out := make([]time.Duration, len(ranks))
	for i, r := range ranks {
		s := by[r]
		slices.SortFunc(s, func(a, b span) int { return a.start.Compare(b.start) })
		var cur span
		for j, x := range s {
			switch {
			case j == 0:
				cur = x
			case x.start.After(cur.end):
				out[i] += cur.end.Sub(cur.start)
				cur = x
			case x.end.After(cur.end):
				cur.end = x.end
			}
		}
		if len(s) > 0 {
			out[i] += cur.end.Sub(cur.start)
		}
	}
	return out
}
