package sim

import (
	"bytes"
	"fmt"
	"math"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/internal/chrometrace"
)

// TraceMeta is what a trace says about where it came from.
type TraceMeta struct {
	Schedule string // schedule family name, e.g. "1f1b"
	Command  string // the invocation that produced it, if any
	Cost     *Cost  // the cost model, if known (written in ParseCost form)
}

// Trace tid values: the threads of each rank's process.
const (
	tidCompute = 0
	tidComm    = 1
	tidSwap    = 2
	tidFSDP    = 3
)

type stepArgs struct {
	Stage int    `json:"stage"`
	Micro int    `json:"micro"`
	Kind  string `json:"kind"`
	Index int    `json:"index"`
	Peer  *int   `json:"peer,omitempty"`
	Slot  *int   `json:"slot,omitempty"`
	Sub   string `json:"sub,omitempty"`
}

type flowArgs struct {
	Channel string `json:"channel"`
}

type traceMetaOut struct {
	Schedule        string    `json:"schedule,omitempty"`
	Command         string    `json:"command,omitempty"`
	Cost            string    `json:"cost,omitempty"`
	Ranks           int       `json:"ranks"`
	Stages          int       `json:"stages"`
	Micro           int       `json:"micro"`
	Placement       string    `json:"placement"`
	TimeUnit        string    `json:"time_unit"`
	Makespan        float64   `json:"makespan"`
	Bubble          float64   `json:"bubble"`
	BubbleSpan      float64   `json:"bubble_span"`
	PeakActivations []int     `json:"peak_activations"`
	Busy            []float64 `json:"busy"`
	// RecomputeCost is, per stage, the share of its R a RECOMPUTE costs
	// (ir.Program.RecomputeCostPart), where one is under 1 (a selective
	// policy): gen/tune divides the RECOMPUTE events by it.
	RecomputeCost []float64 `json:"recompute_cost,omitempty"`
}

// Trace renders the result as a Chrome trace-event JSON object that loads in
// Perfetto (ui.perfetto.dev) and chrome://tracing. One cost unit is one
// millisecond: ts and dur are microseconds, rounded to nanoseconds.
//
// Each rank is a process (pid = rank, process_name "rank N") with threads
// "compute" (tid 0: compute and the host-blocking local steps), "comm"
// (tid 1: transfers) and "swap" (tid 2: swap launches), and, when the
// program has UNSHARD steps, "fsdp" (tid 3: the all-gathers on the FSDP
// collective stream). Every step is a
// complete event ("ph":"X") named by its text form with args {stage, micro,
// kind, index} (plus peer and slot when set, and sub for overlaps, whose
// stage and micro are those of the first sub-step). Each matched transfer
// adds a flow ("ph":"s" on the send, "ph":"f" with "bp":"e" on the receive)
// with a sequential id. The summary metrics and meta go to "otherData".
//
// The output is deterministic: metadata first (ranks, then threads, in
// order), then the steps in Result.Events order, then the flows in send
// order; one event per line (internal/chrometrace writes the file, as it
// writes the measured trace of runtime/pipe.Timeline).
func Trace(r Result, p ir.Program, meta TraceMeta) ([]byte, error) {
	P := len(r.Offsets)
	threads := []string{"compute", "comm", "swap"}
	for _, ev := range r.Events {
		if ev.Lane == LaneFSDP {
			threads = append(threads, "fsdp")
			break
		}
	}
	var evs []chrometrace.Event
	for rank := 0; rank < P; rank++ {
		evs = append(evs, chrometrace.ProcessName(rank, fmt.Sprintf("rank %d", rank)), chrometrace.ProcessSortIndex(rank, rank))
		for tid, name := range threads {
			evs = append(evs, chrometrace.ThreadName(rank, tid, name), chrometrace.ThreadSortIndex(rank, tid, tid))
		}
	}
	for _, ev := range r.Events {
		st := ev.Step
		args := stepArgs{Stage: st.Stage, Micro: st.Micro, Kind: st.Kind.String(), Index: ev.Index}
		if st.Kind.IsOverlap() && len(st.Sub) > 0 {
			args.Stage, args.Micro = st.Sub[0].Stage, st.Sub[0].Micro
			args.Sub = st.Sub[0].String()
			for _, s := range st.Sub[1:] {
				args.Sub += ";" + s.String()
			}
		}
		if st.Peer >= 0 {
			args.Peer = chrometrace.Int(st.Peer)
		}
		if st.Slot >= 0 {
			args.Slot = chrometrace.Int(st.Slot)
		}
		evs = append(evs, chrometrace.Event{
			Name: st.String(), Cat: traceCat(st.Kind), Ph: chrometrace.Complete, Pid: ev.Rank, Tid: laneTid(ev.Lane),
			Ts: usPtr(ev.Start), Dur: usPtr(ev.End - ev.Start), Args: args,
		})
	}
	id := 0
	for _, ev := range r.Events {
		if ev.Lane != LaneComm || !ev.Step.Kind.IsSend() || ev.Peer < 0 || ev.Peer >= len(r.Events) {
			continue
		}
		rv := r.Events[ev.Peer]
		ch := flowArgs{ev.Step.Kind.Channel().String()}
		name := fmt.Sprintf("%s -> %s", ev.Step, rv.Step)
		evs = append(evs,
			chrometrace.Event{Name: name, Cat: "flow", Ph: chrometrace.FlowStart, Pid: ev.Rank, Tid: tidComm, Ts: usPtr(ev.Start), ID: chrometrace.Int(id), Args: ch},
			chrometrace.Event{Name: name, Cat: "flow", Ph: chrometrace.FlowEnd, BP: "e", Pid: rv.Rank, Tid: tidComm, Ts: usPtr(rv.Start), ID: chrometrace.Int(id), Args: ch})
		id++
	}

	om := traceMetaOut{
		Schedule: meta.Schedule, Command: meta.Command,
		Ranks: P, Stages: p.Stages(), Micro: p.Micro, Placement: p.Placement.String(), TimeUnit: "1 cost unit = 1 ms",
		Makespan: round9(r.Makespan), Bubble: r.Bubble, BubbleSpan: r.BubbleSpan,
		PeakActivations: append([]int{}, r.PeakActivations...), Busy: make([]float64, len(r.Busy)),
	}
	for i, b := range r.Busy {
		om.Busy[i] = round9(b)
	}
	for s := range p.Stages() {
		if p.RecomputeCostPart(s) < 1 {
			om.RecomputeCost = make([]float64, p.Stages())
			for s := range om.RecomputeCost {
				om.RecomputeCost[s] = p.RecomputeCostPart(s)
			}
			break
		}
	}
	if meta.Cost != nil {
		om.Cost = meta.Cost.String()
	}
	for _, v := range []float64{om.Bubble, om.BubbleSpan} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("sim: trace: result holds a non-finite metric %v", v)
		}
	}

	var buf bytes.Buffer
	if err := (chrometrace.File{DisplayTimeUnit: "ms", OtherData: om, Events: evs}).Write(&buf); err != nil {
		return nil, fmt.Errorf("sim: trace: %w", err)
	}
	return buf.Bytes(), nil
}

func laneTid(l Lane) int {
	switch l {
	case LaneComm:
		return tidComm
	case LaneSwap:
		return tidSwap
	case LaneFSDP:
		return tidFSDP
	}
	return tidCompute
}

// traceCat groups step kinds for trace filtering and colours.
func traceCat(k ir.Kind) string {
	switch {
	case k.IsCompute():
		return "compute"
	case k == ir.DataSend || k == ir.DataRecv || k == ir.DataLoad || k == ir.MpipeSend || k == ir.MpipeRecv:
		return "data"
	case k.IsComm() || k == ir.TieGrad || k.IsCollective():
		return "comm"
	case k == ir.Unshard || k == ir.Reshard || k == ir.ReduceGrad:
		return "fsdp"
	case k == ir.SwapLaunchOffload || k == ir.SwapLaunchLoad || k == ir.SwapWaitOffload || k == ir.SwapWaitLoad:
		return "swap"
	}
	return "host"
}

// usPtr converts cost units (ms) to microseconds rounded to nanoseconds.
func usPtr(v float64) *float64 {
	us := math.Round(v*1e6) / 1e3
	if us == 0 {
		us = 0 // no "-0"
	}
	return &us
}
