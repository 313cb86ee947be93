package sim

import (
	"fmt"

	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/ir"
)

// Lane is the stream of a rank an event runs on.
type Lane uint8

// The lanes of a rank.
const (
	// LaneCompute is the host and its compute stream: F, B, I, W, overlaps,
	// and the host-blocking local steps (DATA_LOAD, RESHARD, REDUCE_GRAD,
	// OPT_STEP, SWAP_WAIT_*).
	LaneCompute Lane = iota
	// LaneComm is the comm stream: SEND/RECV and DATA_SEND/DATA_RECV.
	LaneComm
	// LaneSwap is the swap stream: SWAP_LAUNCH_OFFLOAD and SWAP_LAUNCH_LOAD.
	LaneSwap
	// LaneFSDP is the FSDP collective stream: UNSHARD (the all-gather),
	// which the host issues without waiting and the compute on its stage
	// waits for.
	LaneFSDP
)

// String names the lane ("compute", "comm", "swap", "fsdp").
func (l Lane) String() string {
	switch l {
	case LaneCompute:
		return "compute"
	case LaneComm:
		return "comm"
	case LaneSwap:
		return "swap"
	case LaneFSDP:
		return "fsdp"
	}
	return fmt.Sprintf("Lane(%d)", uint8(l))
}

// Event is the simulated execution of one step.
type Event struct {
	Rank  int     // rank running the step
	Index int     // position of the step in the rank's program
	Lane  Lane    // stream the step runs on
	Step  ir.Step // the step itself
	// Start and End bound the step's execution. For a transfer they bound
	// the matched pair: both halves share Start and End.
	Start, End float64
	// Posted is when the host reached the step (for a transfer, a swap
	// launch or an UNSHARD: when it was posted to its stream); for other
	// steps it is Start or earlier (a compute step may wait for its inputs).
	Posted float64
	// Peer is, for a transfer, the index in Result.Events of the matched
	// half on the peer rank; -1 for every other step.
	Peer int
}

// Result is the outcome of a simulation.
type Result struct {
	// Makespan is the end of the last event (the iteration starts at 0).
	Makespan float64
	// Bubble is the whole-iteration bubble: 1 − Σ Busy / (ranks · Makespan).
	Bubble float64
	// BubbleSpan is the stage-span bubble: with Span[r] from the start of
	// rank r's first compute step to the end of its last, Σ(Span − Busy) / Σ Span.
	BubbleSpan float64
	// Busy[r] is the time rank r spends in model compute (F, B, I, W and
	// overlap steps); data loads, FSDP steps, swaps and transfers do not count.
	Busy []float64
	// Span[r] is rank r's stage span (see BubbleSpan).
	Span []float64
	// PeakActivations[r] is the largest number of chunks (stage, micro) whose
	// activations are live on rank r at once. A chunk is live from the start
	// of its F to the end of its last backward step (its W when it has one,
	// else its B, else its I), excluding the time it is swapped out (from the
	// end of its SWAP_LAUNCH_OFFLOAD transfer to the start of its
	// SWAP_LAUNCH_LOAD transfer). Intervals are half-open: a chunk whose
	// backward ends when another's F starts does not overlap it. Steps of
	// zero length still count: at one instant the rank's steps go in
	// program order, so a chunk is live at least from its F to its last
	// backward in program order, and with every cost 0 the counts are
	// those of the program order (as gen/verify counts them). In a
	// forward-only program (no backward at all) a chunk is live during its F.
	PeakActivations []int
	// PeakLive[r] is PeakActivations[r] before rounding up: a chunk of a
	// stage that recomputes a share f of its layers (ir.Program's
	// RecomputeShare, kept here as RecomputeShare for PeakMemory) counts
	// 1 − f from the end of its F to the start of its RECOMPUTE.
	PeakLive       []float64
	RecomputeShare []float64
	// Events holds one event per step: rank 0's steps in program order,
	// then rank 1's, and so on; Events[Offsets[r]+i] is step i of rank r.
	Events  []Event
	Offsets []int
	// LowerBound is a lower bound on the makespan of any order of the
	// program's compute steps (LowerBound, the function): Run leaves it 0,
	// a caller that reports it sets it. LowerBoundExact says an
	// exhaustive search (gen/synth's Exact) proved it: no order of the
	// program's compute steps is faster, and the best one found takes it.
	LowerBound      float64
	LowerBoundExact bool
}

// Summary is the JSON-friendly digest of a Result.
type Summary struct {
	Makespan        float64   `json:"makespan"`
	Bubble          float64   `json:"bubble"`
	BubbleSpan      float64   `json:"bubble_span"`
	PeakActivations []int     `json:"peak_activations"`
	Busy            []float64 `json:"busy"`
	LowerBound      float64   `json:"lower_bound"`
	LowerBoundExact bool      `json:"lower_bound_exact,omitempty"`
}

// Summary returns the digest of the result.
func (r Result) Summary() Summary {
	s := Summary{Makespan: r.Makespan, Bubble: r.Bubble, BubbleSpan: r.BubbleSpan,
		PeakActivations: append([]int{}, r.PeakActivations...), Busy: append([]float64{}, r.Busy...),
		LowerBound: r.LowerBound, LowerBoundExact: r.LowerBoundExact}
	return s
}

// Peak returns the largest PeakActivations over all ranks.
func (r Result) Peak() int {
	m := 0
	for _, v := range r.PeakActivations {
		m = max(m, v)
	}
	return m
}

// class is how the simulator treats a step.
type class uint8

const (
	clCompute class = iota // model compute: waits for deps, blocks the host
	clLocal                // host-blocking local step with a fixed cost
	clComm                 // transfer: posted, runs on the comm stream
	clLaunch               // swap launch: posted, runs on the swap stream
	clGather               // UNSHARD: posted, runs on the FSDP stream
	clWait                 // swap wait: blocks the host until its launch ends
	clMeet                 // TIE_GRAD, ALL_REDUCE: blocks the host; across ranks a rendezvous (tie.go, collective.go)
)

// dep is a step that must end (plus lat) before a step may start.
type dep struct {
	ev  int // global event index; -1: never satisfied
	lat float64
	why string // for a never-satisfied dep: what is missing
}

type rankState struct {
	n        int // number of steps
	off      int // global index of step 0
	host     int // next step the host reaches
	h        float64
	comm     []int // step indices of transfers, in order
	commPos  int
	commFree float64
	swapFree float64
	fsdpFree float64
}

type simulator struct {
	p      ir.Program
	dp     ir.Program   // p as the dependency model reads it (computeDeps)
	ins    []deps.Input // scratch for computeDeps
	stages int
	c      Cost
	ranks  []rankState
	ev     []Event
	cls    []class
	dur    []float64
	done   []bool
	deps   [][]dep
	match  []int
	// Batches (BATCH_BEGIN and the run of transfers after it): for each
	// transfer event in one, the events first..end-1 of its batch; nil
	// when the program has none.
	bFirst, bEnd []int
	// peers[e] are, for a rendezvous event (the TIE_GRAD of a cross-rank
	// tie, an ALL_REDUCE), the other members' events, -1 for a member
	// that never posts it; nil when the program has none.
	peers  [][]int
	watch  [][]int
	queue  []int
	queued []bool
}

// Run simulates the program under the strict execution model of
// docs/internals.md with the costs of c (see the package documentation for
// the exact timing rules). It returns an error wrapping ErrStuck when the
// program cannot complete, and other errors for malformed input; it never
// hangs or panics on user input.
func Run(p ir.Program, c Cost) (Result, error) {
	s, err := newSimulator(p, c)
	if err != nil {
		return Result{}, err
	}
	s.run()
	if err := s.stuck(); err != nil {
		return Result{}, err
	}
	return s.result(), nil
}
