package pipe

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/internal/chrometrace"
)

// Timeline records when the stage calls of one or more ranks start and end,
// and their transfers (Config.Timeline): the measured counterpart of the simulated timeline that
// `ppgen trace` writes. It is safe for concurrent use; the ranks of one
// process may share one.
type Timeline struct {
	mu        sync.Mutex
	events    []TimelineEvent
	transfers []TimelineTransfer
	spans     []TimelineSpan
	epoch     atomic.Uint64 // bumped by Reset: the wrappers restart their counts
	stages    int           // the Spec's stages (New)
	// rshare is, per stage that ran a RECOMPUTE, the share of its R the
	// RECOMPUTE re-ran: its Spec.RecomputeCost (else RecomputeShare)
	// where the stage rebuilt through Recomputable, 1 where it re-ran
	// Forward, -1 where it rebuilt the layers of Spec.RecomputeLayers and
	// the Spec holds no RecomputeCost (a hand-written Spec: their R share
	// is unknown).
	rshare map[int]float64
}

// noteStages records the stages of a Spec a rank runs (New).
func (t *Timeline) noteStages(n int) {
	t.mu.Lock()
	t.stages = max(t.stages, n)
	t.mu.Unlock()
}

// noteRecompute records the share of stage's R its RECOMPUTE re-ran
// (rshare).
func (t *Timeline) noteRecompute(stage int, share float64) {
	t.mu.Lock()
	if t.rshare == nil {
		t.rshare = map[int]float64{}
	}
	t.rshare[stage] = share
	t.mu.Unlock()
}

// recomputeData is WriteTrace's otherData entries for gen/tune, where a
// stage's RECOMPUTE re-ran a share of it: recompute_cost, per stage, the
// share of its R a RECOMPUTE re-ran (1 where unknown or whole), and
// recompute_cost_unknown, the stages that re-ran the layers of
// Spec.RecomputeLayers of a Spec without RecomputeCost.
func (t *Timeline) recomputeData(od map[string]any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	partial := false
	for _, f := range t.rshare {
		partial = partial || f != 1
	}
	if !partial {
		return
	}
	cost := make([]float64, t.stages)
	unknown := []int{}
	for s := range cost {
		cost[s] = 1
		switch f, ok := t.rshare[s]; {
		case ok && f < 0:
			unknown = append(unknown, s)
		case ok:
			cost[s] = f
		}
	}
	od["recompute_cost"] = cost
	if len(unknown) > 0 {
		od["recompute_cost_unknown"] = unknown
	}
}

// TimelineTransfer is one transfer a rank's comm stream ran outside a batch
// (a batch's transfers are one transport call: they are not recorded): a
// send from the transport's Send call until it returned, a receive from
// its Recv call until the tensor arrived, which includes waiting for the
// peer's send. Bytes is the tensor's data.
type TimelineTransfer struct {
	Rank, Peer   int
	Kind         OpKind // SEND_F, RECV_B, ...
	Stage, Micro int    // the step's
	Bytes        int
	Start, End   time.Time
}

// TimelineEvent is one stage call. Seq counts the calls of that kind on
// that stage of that rank since the Timeline was last reset (from 0), which
// is how WriteTrace finds the call's micro-batch in the program.
type TimelineEvent struct {
	Rank, Stage int
	Kind        byte // 'F' (Forward), 'I' (BackwardInput), 'W' (BackwardWeight), 'R' (a RECOMPUTE's Forward or Rebuild)
	Seq         int
	Start, End  time.Time
}

// Reset forgets the recorded calls (call it between iterations to keep one)
// and restarts the per-stage counts. It must not run during a step.
func (t *Timeline) Reset() {
	t.mu.Lock()
	t.events = t.events[:0]
	t.transfers = t.transfers[:0]
	t.spans = t.spans[:0]
	t.mu.Unlock()
	t.epoch.Add(1) // the counters live in the stage wrappers
}

// Events returns a copy of the recorded calls in the order they ended.
func (t *Timeline) Events() []TimelineEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]TimelineEvent(nil), t.events...)
}

// Transfers returns a copy of the recorded transfers in the order they
// ended.
func (t *Timeline) Transfers() []TimelineTransfer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]TimelineTransfer(nil), t.transfers...)
}

func (t *Timeline) addTransfer(rank int, op *commOp, bytes int, start time.Time) {
	e := TimelineTransfer{Rank: rank, Peer: int(op.peer), Kind: op.x.kind, Stage: int(op.stage), Micro: int(op.micro), Bytes: bytes, Start: start, End: time.Now()}
	t.mu.Lock()
	t.transfers = append(t.transfers, e)
	t.mu.Unlock()
}

func (t *Timeline) add(e TimelineEvent) {
	t.mu.Lock()
	t.events = append(t.events, e)
	t.mu.Unlock()
}

// wrap returns the stages of rank r wrapped to record their calls.
func (t *Timeline) wrap(r int, stages []Stage) []Stage {
	out := make([]Stage, len(stages))
	for s, st := range stages {
		if st != nil {
			out[s] = &timedStage{inner: st, tl: t, rank: r, stage: s}
		}
	}
	return out
}

// timedStage is a Stage that records its calls in a Timeline.
type timedStage struct {
	inner       Stage
	tl          *Timeline
	rank, stage int
	mu          sync.Mutex
	epoch       uint64
	seq         [4]int // F, I, W, R
}

func (s *timedStage) record(kind byte, k int, start time.Time) {
	end := time.Now()
	s.mu.Lock()
	if e := s.tl.epoch.Load(); e != s.epoch {
		s.epoch, s.seq = e, [4]int{}
	}
	seq := s.seq[k]
	s.seq[k]++
	s.mu.Unlock()
	s.tl.add(TimelineEvent{Rank: s.rank, Stage: s.stage, Kind: kind, Seq: seq, Start: start, End: end})
}

func (s *timedStage) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	start := time.Now()
	y, saved, err := s.inner.Forward(x)
	s.record('F', 0, start)
	return y, saved, err
}

func (s *timedStage) BackwardInput(saved any, dy *tensor.Dense) (*tensor.Dense, error) {
	start := time.Now()
	dx, err := s.inner.BackwardInput(saved, dy)
	s.record('I', 1, start)
	return dx, err
}

func (s *timedStage) BackwardWeight(saved any, dy *tensor.Dense) error {
	start := time.Now()
	err := s.inner.BackwardWeight(saved, dy)
	s.record('W', 2, start)
	return err
}

// WriteTrace writes the recorded calls as a Chrome trace (Perfetto,
// chrome://tracing): one process per rank, one complete event per stage
// call, at wall-clock time in µs (so traces of several processes line up
// when merged). With the ranks' programs as data (the generated Program
// table, one []Op per rank), each call is named by its step as `ppgen trace`
// names the simulated one ("3F17"; a full backward B shows as its I and W
// halves, "3I17" and "3W17"); with nil, by kind and count ("3F#5"). The
// transfers are events of category comm on thread 1, named by their step
// ("3SEND_F17"), with args stage, micro, peer, kind ("send" or "recv"),
// op (the step's kind, "SEND_F") and bytes; the spans (AddSpan) are events
// of category host on thread 2. The file is written by internal/chrometrace (its one-line
// form), the writer of the simulated trace too.
func (t *Timeline) WriteTrace(w io.Writer, name string, programs [][]Op) error {
	events := t.Events()
	byRankStart(events, func(e TimelineEvent) (int, time.Time) { return e.Rank, e.Start })
	micros := microsOf(programs)
	out := make([]chrometrace.Event, 0, len(events)+8)
	seen := map[int]bool{}
	nameRank := func(rank int) { // the process name, before the rank's first event
		if !seen[rank] {
			seen[rank] = true
			pn := chrometrace.ProcessName(rank, fmt.Sprintf("rank %d", rank))
			pn.Ts = chrometrace.Float(0)
			out = append(out, pn)
		}
	}
	for _, e := range events {
		nameRank(e.Rank)
		label := fmt.Sprintf("%d%c#%d", e.Stage, e.Kind, e.Seq)
		args := map[string]any{"stage": e.Stage, "kind": string(e.Kind), "seq": e.Seq}
		if m, ok := micros[microKey{e.Rank, e.Stage, e.Kind, e.Seq}]; ok {
			label = fmt.Sprintf("%d%c%d", e.Stage, e.Kind, m)
			args["micro"] = m
		}
		ev := chrometrace.Event{
			Name: label, Cat: "compute", Ph: chrometrace.Complete, Pid: e.Rank, Tid: 0,
			Args: args,
		}
		out = append(out, timed(ev, e.Start, e.End))
	}
	transfers := t.Transfers()
	byRankStart(transfers, func(e TimelineTransfer) (int, time.Time) { return e.Rank, e.Start })
	for _, e := range transfers {
		nameRank(e.Rank)
		dir := "send"
		if e.Kind.IsRecv() {
			dir = "recv"
		}
		ev := chrometrace.Event{
			Name: fmt.Sprintf("%d%s%d", e.Stage, e.Kind, e.Micro), Cat: "comm", Ph: chrometrace.Complete, Pid: e.Rank, Tid: 1,
			Args: map[string]any{"stage": e.Stage, "micro": e.Micro, "peer": e.Peer, "kind": dir, "op": e.Kind.String(), "bytes": e.Bytes},
		}
		out = append(out, timed(ev, e.Start, e.End))
	}
	out = t.appendSpans(out, nameRank)
	od := map[string]any{"schedule": name, "source": "measured (pipe.Timeline)"}
	t.recomputeData(od)
	f := chrometrace.File{DisplayTimeUnit: "ms", Events: out, OtherData: od}
	if err := f.WriteCompact(w); err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	return nil
}

// byRankStart sorts trace records by rank, then start time, keeping the
// order of equal ones (the events, transfers and spans WriteTrace writes).
func byRankStart[T any](s []T, key func(T) (int, time.Time)) {
	slices.SortStableFunc(s, func(a, b T) int {
		ra, sa := key(a)
		rb, sb := key(b)
		if ra != rb {
			return cmp.Compare(ra, rb)
		}
		return sa.Compare(sb)
	})
}

// timed sets ev's start and, when not zero, its duration, in the trace's
// microseconds.
func timed(ev chrometrace.Event, start, end time.Time) chrometrace.Event {
	ev.Ts = chrometrace.Float(float64(start.UnixNano()) / 1e3)
	if d := float64(end.Sub(start).Nanoseconds()) / 1e3; d != 0 {
		ev.Dur = chrometrace.Float(d)
	}
	return ev
}

type microKey struct {
	rank, stage int
	kind        byte
	seq         int
}

// microsOf maps each stage call of the programs to its micro-batch: the
// k-th F of stage s on rank r is the k-th F op of s in r's program, the
// k-th R its k-th rebuild op (abi's IsRebuild: RECOMPUTE, which records an
// R call of its own); a B op makes one I and one W call.
func microsOf(programs [][]Op) map[microKey]int {
	m := map[microKey]int{}
	for r, ops := range programs {
		count := map[[2]int]int{} // (stage, kind) -> calls so far
		call := func(stage int, kind byte, micro int) {
			k := [2]int{stage, int(kind)}
			m[microKey{r, stage, kind, count[k]}] = micro
			count[k]++
		}
		for _, op := range ops {
			s, mi := int(op.Stage), int(op.Micro)
			switch op.Kind {
			case OpForward:
				call(s, 'F', mi)
			case OpBackward:
				call(s, 'I', mi)
				call(s, 'W', mi)
			case OpBackwardInput:
				call(s, 'I', mi)
			case OpBackwardWeight:
				call(s, 'W', mi)
			default:
				if op.Kind.IsRebuild() { // an R call of its own (Recompute)
					call(s, 'R', mi)
				}
			}
		}
	}
	return m
}
