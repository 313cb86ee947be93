package pipe

import (
	"time"

	"github.com/ppgen/ppgen/internal/chrometrace"
)

// TimelineSpan is one piece of host work a trainer ran around the program
// (Timeline.AddSpan): its optimizer step, the reduction of the gradient
// norm, the gathering of the loss, or the program's whole run. Name says
// which; OPT_STEP and ALL_REDUCE are the steps' own names (abi), the work
// the simulator charges as opt and allreduce.
type TimelineSpan struct {
	Rank       int
	Name       string
	Start, End time.Time
}

// Span names the trainers record (runtime/train) and gen/tune reads.
const (
	SpanProgram   = "program"    // the step's program, pipe.Run
	SpanAllReduce = "ALL_REDUCE" // the gradients' reduction and clipping by their global norm
	SpanOptStep   = "OPT_STEP"   // the optimizer's step and the gradients' zeroing
	SpanLoss      = "loss"       // the step's loss gathered from every rank
)

// AddSpan records a span of host work of rank from start until now. A nil
// Timeline records nothing.
func (t *Timeline) AddSpan(rank int, name string, start time.Time) {
	if t == nil {
		return
	}
	e := TimelineSpan{Rank: rank, Name: name, Start: start, End: time.Now()}
	t.mu.Lock()
	t.spans = append(t.spans, e)
	t.mu.Unlock()
}

// Spans returns a copy of the recorded spans in the order they ended.
func (t *Timeline) Spans() []TimelineSpan {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]TimelineSpan(nil), t.spans...)
}

// appendSpans appends the spans to a trace as complete events of category
// host on thread 2, named by their Name (args.kind too), each rank's named
// first by nameRank.
func (t *Timeline) appendSpans(out []chrometrace.Event, nameRank func(int)) []chrometrace.Event {
	spans := t.Spans()
	byRankStart(spans, func(e TimelineSpan) (int, time.Time) { return e.Rank, e.Start })
	for _, e := range spans {
		nameRank(e.Rank)
		ev := chrometrace.Event{
			Name: e.Name, Cat: "host", Ph: chrometrace.Complete, Pid: e.Rank, Tid: 2,
			Args: map[string]any{"kind": e.Name},
		}
		out = append(out, timed(ev, e.Start, e.End))
	}
	return out
}
