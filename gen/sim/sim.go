package sim

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

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
	// backward ends when another's F starts does not overlap it.
	PeakActivations []int
	// Events holds one event per step: rank 0's steps in program order,
	// then rank 1's, and so on; Events[Offsets[r]+i] is step i of rank r.
	Events  []Event
	Offsets []int
}

// Summary is the JSON-friendly digest of a Result.
type Summary struct {
	Makespan        float64   `json:"makespan"`
	Bubble          float64   `json:"bubble"`
	BubbleSpan      float64   `json:"bubble_span"`
	PeakActivations []int     `json:"peak_activations"`
	Busy            []float64 `json:"busy"`
}

// Summary returns the digest of the result.
func (r Result) Summary() Summary {
	s := Summary{Makespan: r.Makespan, Bubble: r.Bubble, BubbleSpan: r.BubbleSpan,
		PeakActivations: append([]int{}, r.PeakActivations...), Busy: append([]float64{}, r.Busy...)}
	return s
}

// JSON returns the Summary as indented JSON, followed by a newline.
func (r Result) JSON() ([]byte, error) {
	return marshalIndent(r.Summary())
}

// Peak returns the largest PeakActivations over all ranks.
func (r Result) Peak() int {
	m := 0
	for _, v := range r.PeakActivations {
		m = max(m, v)
	}
	return m
}

// ErrStuck is wrapped by every error saying that a program cannot complete
// (a deadlock, an unmatched transfer, a step waiting for one that never runs).
var ErrStuck = errors.New("program cannot complete")

// DeadlockError reports a program whose simulation stopped with ranks that
// still have steps left. It wraps ErrStuck.
type DeadlockError struct {
	Stuck []Stuck // the ranks that did not finish, in rank order
}

// Stuck is the state of one rank that did not finish.
type Stuck struct {
	Rank int
	// Host is the index of the step the host is blocked at, or the length
	// of the rank's program when the host reached its end.
	Host     int
	HostStep ir.Step // the step at Host (zero when the host is done)
	// HostWaits says what the host step waits for ("" when the host is done).
	HostWaits string
	// Comm is the index of the first transfer of the rank that did not
	// complete (the head of its comm stream), or -1 when all completed.
	Comm     int
	CommStep ir.Step // the step at Comm (zero when Comm is -1)
	// PeerRank and PeerIndex locate the half matched to CommStep on its peer.
	PeerRank, PeerIndex int
	// CommWaits says why the head transfer cannot complete ("" when Comm is -1).
	CommWaits string
}

func (e *DeadlockError) Error() string {
	var b strings.Builder
	b.WriteString("sim: program cannot complete (deadlock under the strict model); ")
	b.WriteString(fmt.Sprintf("%d stuck rank(s): ", len(e.Stuck)))
	const limit = 8
	for i, s := range e.Stuck {
		if i == limit {
			b.WriteString(fmt.Sprintf("; and %d more", len(e.Stuck)-limit))
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(s.String())
	}
	return b.String()
}

// Unwrap returns ErrStuck.
func (e *DeadlockError) Unwrap() error { return ErrStuck }

// String describes the stuck rank in one line.
func (s Stuck) String() string {
	var parts []string
	if s.HostWaits != "" {
		parts = append(parts, fmt.Sprintf("host blocked at step %d %s, %s", s.Host, s.HostStep, s.HostWaits))
	} else {
		parts = append(parts, "host done")
	}
	if s.Comm >= 0 {
		parts = append(parts, fmt.Sprintf("comm head step %d %s %s", s.Comm, s.CommStep, s.CommWaits))
	}
	return fmt.Sprintf("rank %d: %s", s.Rank, strings.Join(parts, "; "))
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
	stages int
	c      Cost
	ranks  []rankState
	ev     []Event
	cls    []class
	dur    []float64
	done   []bool
	deps   [][]dep
	match  []int
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

type chunkKey struct {
	kind         ir.Kind
	stage, micro int
}

type chunkRankKey struct {
	rank int
	chunkKey
}

func newSimulator(p ir.Program, c Cost) (*simulator, error) {
	P := len(p.Ranks)
	if P == 0 {
		return nil, fmt.Errorf("sim: program has no ranks")
	}
	stages := p.Stages()
	if stages == 0 { // no placement: take the stages the steps name
		for _, steps := range p.Ranks {
			for _, st := range steps {
				stages = max(stages, st.Stage+1)
				for _, sub := range st.Sub {
					stages = max(stages, sub.Stage+1)
				}
			}
		}
	}
	rc, err := c.Resolve(stages)
	if err != nil {
		return nil, fmt.Errorf("sim: cost: %w", err)
	}
	s := &simulator{p: p, c: rc, stages: stages, ranks: make([]rankState, P)}
	total := 0
	for r, steps := range p.Ranks {
		s.ranks[r] = rankState{n: len(steps), off: total}
		total += len(steps)
	}
	s.ev = make([]Event, total)
	s.cls = make([]class, total)
	s.dur = make([]float64, total)
	s.done = make([]bool, total)
	s.deps = make([][]dep, total)
	s.match = make([]int, total)

	// Validate kinds and micro numbers, and size the chunk tables.
	maxMicro := 0
	for r, steps := range p.Ranks {
		for i, st := range steps {
			for _, x := range append([]ir.Step{st}, st.Sub...) {
				if !validKind(x.Kind) {
					return nil, fmt.Errorf("sim: rank %d step %d %s: invalid step kind %d", r, i, st, uint8(x.Kind))
				}
				if x.Kind.HasMicro() && x.Micro < 0 {
					return nil, fmt.Errorf("sim: rank %d step %d %s: %s needs a micro-batch number ≥ 0, has %d", r, i, st, x.Kind, x.Micro)
				}
				maxMicro = max(maxMicro, x.Micro)
			}
		}
	}
	idx := &indexes{
		compute: map[ir.Kind]*chunkTable{},
		recv:    map[ir.Kind]*chunkTable{},
		recvDup: map[chunkRankKey]int{},
	}
	for _, k := range []ir.Kind{ir.Forward, ir.Backward, ir.BackwardInput, ir.BackwardWeight} {
		idx.compute[k] = newChunkTable(stages, maxMicro, total)
	}
	for _, k := range []ir.Kind{ir.RecvF, ir.RecvB, ir.DataRecv, ir.MpipeRecv} {
		idx.recv[k] = newChunkTable(stages, maxMicro, total)
	}
	launchSeen := map[chunkRankKey]int{}

	// Classify and cost every step; index compute steps and receives.
	for r, steps := range p.Ranks {
		rs := &s.ranks[r]
		for i, st := range steps {
			e := rs.off + i
			s.ev[e] = Event{Rank: r, Index: i, Step: st, Peer: -1}
			s.match[e] = -1
			where := func() string { return fmt.Sprintf("sim: rank %d step %d %s", r, i, st) }
			k := st.Kind
			if k.HasStage() && (st.Stage < 0 || st.Stage >= stages) {
				return nil, fmt.Errorf("%s: stage %d outside 0..%d", where(), st.Stage, stages-1)
			}
			switch {
			case k.IsOverlap():
				if len(st.Sub) != 2 {
					return nil, fmt.Errorf("%s: an overlap step needs exactly 2 sub-steps, has %d", where(), len(st.Sub))
				}
				var d [2]float64
				for j, sub := range st.Sub {
					if !sub.Kind.IsCompute() || sub.Kind.IsOverlap() {
						return nil, fmt.Errorf("%s: overlap sub-step %s is not F, B, I or W", where(), sub)
					}
					if sub.Stage < 0 || sub.Stage >= stages {
						return nil, fmt.Errorf("%s: sub-step %s: stage %d outside 0..%d", where(), sub, sub.Stage, stages-1)
					}
					d[j] = rc.computeCost(sub)
				}
				s.cls[e] = clCompute
				s.dur[e] = max(d[0], d[1]) + rc.Overlap*min(d[0], d[1])
			case k.IsCompute():
				s.cls[e] = clCompute
				s.dur[e] = rc.computeCost(st)
			case k.IsComm():
				s.cls[e] = clComm
				s.dur[e] = rc.transfer(st)
				s.ev[e].Lane = LaneComm
				rs.comm = append(rs.comm, i)
				if t := idx.recv[k]; t != nil && !t.setFirst(st.Stage, st.Micro, e) {
					if first := t.get(st.Stage, st.Micro); first >= 0 && s.ev[first].Rank != r {
						key := chunkRankKey{r, chunkKey{k, st.Stage, st.Micro}}
						if _, dup := idx.recvDup[key]; !dup {
							idx.recvDup[key] = e
						}
					}
				}
			case k == ir.SwapLaunchOffload || k == ir.SwapLaunchLoad:
				s.cls[e] = clLaunch
				s.dur[e] = rc.Swap
				s.ev[e].Lane = LaneSwap
				launchSeen[chunkRankKey{r, chunkKey{k, st.Stage, st.Micro}}] = e
			case k == ir.Unshard:
				s.cls[e] = clGather
				s.dur[e] = rc.Unshard
				s.ev[e].Lane = LaneFSDP
			case k == ir.SwapWaitOffload || k == ir.SwapWaitLoad:
				s.cls[e] = clWait
				lk := ir.SwapLaunchOffload
				if k == ir.SwapWaitLoad {
					lk = ir.SwapLaunchLoad
				}
				if le, ok := launchSeen[chunkRankKey{r, chunkKey{lk, st.Stage, st.Micro}}]; ok {
					s.deps[e] = []dep{{ev: le}}
				} else {
					s.deps[e] = []dep{{ev: -1, why: fmt.Sprintf("waits for a %d%s%d that no earlier step of rank %d starts", st.Stage, lk, st.Micro, r)}}
				}
			default:
				s.cls[e] = clLocal
				switch k {
				case ir.DataLoad:
					s.dur[e] = rc.DataLoad
				case ir.ReduceGrad:
					s.dur[e] = rc.Reduce
				case ir.OptStep:
					s.dur[e] = rc.Opt
				}
			}
			if k.IsOverlap() {
				for _, cs := range st.Sub {
					idx.compute[cs.Kind].setFirst(cs.Stage, cs.Micro, e)
				}
			} else if k.IsCompute() {
				idx.compute[k].setFirst(st.Stage, st.Micro, e)
			}
		}
	}
	if err := s.matchComm(); err != nil {
		return nil, err
	}

	// Dependencies of compute steps, and who watches whom: rank q watches
	// rank r when a step of q depends on one of r or they are comm peers.
	w := newWatchers(P)
	addWatch := w.add
	flat := make([]dep, 0, 3*total)
	gather := make([]int, stages) // per stage: the rank's latest UNSHARD so far, or -1
	for r, steps := range p.Ranks {
		off := s.ranks[r].off
		for i := range gather {
			gather[i] = -1
		}
		for i, st := range steps {
			e := off + i
			if s.cls[e] == clGather {
				gather[st.Stage] = e
				continue
			}
			if s.cls[e] == clComm {
				addWatch(s.ev[s.match[e]].Rank, r)
				continue
			}
			if s.cls[e] != clCompute {
				continue
			}
			subs := st.Sub
			if !st.Kind.IsOverlap() {
				subs = []ir.Step{st}
			}
			first := len(flat)
			for _, cs := range subs {
				from := len(flat)
				var err error
				flat, err = s.computeDeps(r, cs, stages, idx, flat)
				if err != nil {
					return nil, fmt.Errorf("sim: rank %d step %d %s: %w", r, i, st, err)
				}
				// Drop what the other half of the same overlap produces.
				kept := flat[:from]
				for _, d := range flat[from:] {
					if d.ev != e {
						kept = append(kept, d)
					}
				}
				flat = kept
			}
			// The parameters: the latest UNSHARD of each stage it computes on.
			for j, cs := range subs {
				if g := gather[cs.Stage]; g >= 0 && (j == 0 || cs.Stage != subs[0].Stage) {
					flat = append(flat, dep{ev: g})
				}
			}
			s.deps[e] = flat[first:len(flat):len(flat)]
			for _, d := range s.deps[e] {
				if d.ev >= 0 {
					addWatch(s.ev[d.ev].Rank, r)
				}
			}
		}
	}
	s.watch = w.lists()
	return s, nil
}

var validKinds = func() (t [256]bool) {
	for _, k := range ir.Kinds() {
		t[k] = true
	}
	return t
}()

func validKind(k ir.Kind) bool { return validKinds[k] }

// indexes locate the steps of each chunk.
type indexes struct {
	compute map[ir.Kind]*chunkTable // first event running F/B/I/W of (stage, micro)
	recv    map[ir.Kind]*chunkTable // first RECV_F/RECV_B/DATA_RECV of (stage, micro) on any rank
	recvDup map[chunkRankKey]int    // first receive on a rank other than the table's
}

// recvOn returns the first receive of kind k for (stage, micro) on rank r, or -1.
func (s *simulator) recvOn(idx *indexes, r int, k ir.Kind, stage, micro int) int {
	if e := idx.recv[k].get(stage, micro); e >= 0 {
		if s.ev[e].Rank == r {
			return e
		}
		if d, ok := idx.recvDup[chunkRankKey{r, chunkKey{k, stage, micro}}]; ok {
			return d
		}
	}
	return -1
}

func (c Cost) computeCost(st ir.Step) float64 {
	switch st.Kind {
	case ir.Forward:
		return of(c.F, st.Stage)
	case ir.Backward:
		return of(c.B, st.Stage)
	case ir.BackwardInput:
		return of(c.I, st.Stage)
	case ir.BackwardWeight:
		return of(c.W, st.Stage)
	}
	return 0
}

// computeDeps appends to ds what compute step cs (run on rank r) waits for: the receive of its own chunk when the rank has one, else the producer
// step of its input (latency Comm when it runs on another rank), plus the
// earlier steps of the same chunk (F before B/I, I before W).
func (s *simulator) computeDeps(r int, cs ir.Step, stages int, idx *indexes, ds []dep) ([]dep, error) {
	// producer adds the step of one of kinds on stage that produces cs's
	// input; act is the stage whose output activation is that input's
	// size (the producer's for F, the consumer's for a backward).
	producer := func(kinds []ir.Kind, stage, act int, what string) error {
		for _, k := range kinds {
			if pe := idx.compute[k].get(stage, cs.Micro); pe >= 0 {
				lat := 0.0
				if s.ev[pe].Rank != r {
					lat = s.c.Comm + s.c.ActTime(act)
				}
				ds = append(ds, dep{ev: pe, lat: lat})
				return nil
			}
		}
		return fmt.Errorf("%s needs %s of stage %d micro %d, which no rank runs (%w)", cs, what, stage, cs.Micro, ErrStuck)
	}
	// The micro-batch's route: all stages, or its model copy's (ir.Program.Route).
	first, last := 0, stages-1
	if s.p.Copies > 1 {
		first, last = s.p.Route(cs.Micro)
	}
	switch cs.Kind {
	case ir.Forward:
		if re := s.recvOn(idx, r, ir.RecvF, cs.Stage, cs.Micro); re >= 0 {
			ds = append(ds, dep{ev: re})
		} else if cs.Stage > first {
			if err := producer([]ir.Kind{ir.Forward}, cs.Stage-1, cs.Stage-1, "the forward F"); err != nil {
				return nil, err
			}
		}
		if re := s.recvOn(idx, r, ir.DataRecv, cs.Stage, cs.Micro); re >= 0 {
			ds = append(ds, dep{ev: re}) // labels for the loss (as gen/verify models it)
		}
		if re := s.recvOn(idx, r, ir.MpipeRecv, cs.Stage, cs.Micro); re >= 0 {
			ds = append(ds, dep{ev: re}) // the input its owner loaded (mpipe)
		}
	case ir.Backward, ir.BackwardInput:
		if err := producer([]ir.Kind{ir.Forward}, cs.Stage, -1, "the forward F"); err != nil {
			return nil, err
		}
		if re := s.recvOn(idx, r, ir.RecvB, cs.Stage, cs.Micro); re >= 0 {
			ds = append(ds, dep{ev: re})
		} else if cs.Stage < last {
			if err := producer([]ir.Kind{ir.Backward, ir.BackwardInput}, cs.Stage+1, cs.Stage, "the backward B or I"); err != nil {
				return nil, err
			}
		}
	case ir.BackwardWeight:
		if err := producer([]ir.Kind{ir.BackwardInput, ir.Backward}, cs.Stage, -1, "the input backward I"); err != nil {
			return nil, err
		}
	}
	return ds, nil
}

type channelKey struct {
	src, dst int
	ch       ir.Channel
}

// matchComm pairs sends and receives FIFO per (source rank, destination
// rank, channel) and reports the first transfer without a partner.
func (s *simulator) matchComm() error {
	P := len(s.p.Ranks)
	sends := map[channelKey][]int{}
	recvs := map[channelKey][]int{}
	var keys []channelKey
	seen := map[channelKey]bool{}
	for r, steps := range s.p.Ranks {
		off := s.ranks[r].off
		for _, i := range s.ranks[r].comm {
			st := steps[i]
			peer := st.Peer
			if peer < 0 || peer >= P {
				peer = s.p.Placement.PeerOfStep(st)
			}
			if peer < 0 || peer >= P {
				return fmt.Errorf("sim: rank %d step %d %s: no peer rank (Peer = %d, and the placement names none for stage %d); ranks are 0..%d", r, i, st, st.Peer, st.Stage, P-1)
			}
			var key channelKey
			if st.Kind.IsSend() {
				key = channelKey{r, peer, st.Kind.Channel()}
				sends[key] = append(sends[key], off+i)
			} else {
				key = channelKey{peer, r, st.Kind.Channel()}
				recvs[key] = append(recvs[key], off+i)
			}
			if !seen[key] {
				seen[key] = true
				keys = append(keys, key)
			}
		}
	}
	for _, key := range keys {
		ss, rr := sends[key], recvs[key]
		for n := 0; n < min(len(ss), len(rr)); n++ {
			s.match[ss[n]], s.match[rr[n]] = rr[n], ss[n]
			s.ev[ss[n]].Peer, s.ev[rr[n]].Peer = rr[n], ss[n]
		}
	}
	for e := range s.ev {
		if s.cls[e] != clComm || s.match[e] >= 0 {
			continue
		}
		ev := s.ev[e]
		dir := "send"
		if ev.Step.Kind.IsRecv() {
			dir = "receive"
		}
		var key channelKey
		peer := ev.Step.Peer
		if peer < 0 || peer >= P {
			peer = s.p.Placement.PeerOfStep(ev.Step)
		}
		if ev.Step.Kind.IsSend() {
			key = channelKey{ev.Rank, peer, ev.Step.Kind.Channel()}
		} else {
			key = channelKey{peer, ev.Rank, ev.Step.Kind.Channel()}
		}
		return fmt.Errorf("sim: rank %d step %d %s: %s has no matching partner on rank %d: rank %d sends %d %s transfer(s) to rank %d, which receives %d (%w)",
			ev.Rank, ev.Index, ev.Step, dir, peer, key.src, len(sends[key]), key.ch, key.dst, len(recvs[key]), ErrStuck)
	}
	return nil
}

func (s *simulator) enqueue(r int) {
	if !s.queued[r] {
		s.queued[r] = true
		s.queue = append(s.queue, r)
	}
}

func (s *simulator) run() {
	P := len(s.ranks)
	s.queued = make([]bool, P)
	for r := 0; r < P; r++ {
		s.enqueue(r)
	}
	for len(s.queue) > 0 {
		r := s.queue[0]
		s.queue = s.queue[1:]
		s.queued[r] = false
		progressed := false
		for {
			a := s.advanceHost(r)
			b := s.advanceComm(r)
			if !a && !b {
				break
			}
			progressed = true
		}
		if progressed {
			for _, q := range s.watch[r] {
				s.enqueue(q)
			}
		}
	}
}

// advanceHost runs rank r's host as far as it can go.
func (s *simulator) advanceHost(r int) bool {
	rs := &s.ranks[r]
	progressed := false
	for rs.host < rs.n {
		e := rs.off + rs.host
		ev := &s.ev[e]
		ev.Posted = rs.h
		switch s.cls[e] {
		case clComm:
			// Posted; completes on the comm stream (advanceComm).
		case clLaunch:
			ev.Start = max(rs.h, rs.swapFree)
			ev.End = ev.Start + s.dur[e]
			rs.swapFree = ev.End
			s.done[e] = true
		case clGather:
			ev.Start = max(rs.h, rs.fsdpFree)
			ev.End = ev.Start + s.dur[e]
			rs.fsdpFree = ev.End
			s.done[e] = true
		case clLocal:
			ev.Start, ev.End = rs.h, rs.h+s.dur[e]
			rs.h = ev.End
			s.done[e] = true
		case clCompute, clWait:
			t := rs.h
			for _, d := range s.deps[e] {
				if d.ev < 0 || !s.done[d.ev] {
					return progressed
				}
				t = max(t, s.ev[d.ev].End+d.lat)
			}
			if s.cls[e] == clWait {
				ev.Start, ev.End = rs.h, t
			} else {
				ev.Start, ev.End = t, t+s.dur[e]
			}
			rs.h = ev.End
			s.done[e] = true
		}
		rs.host++
		progressed = true
	}
	return progressed
}

// advanceComm completes the transfers at the head of rank r's comm stream
// whose partners are at the head of their streams.
func (s *simulator) advanceComm(r int) bool {
	rs := &s.ranks[r]
	progressed := false
	for rs.commPos < len(rs.comm) {
		i := rs.comm[rs.commPos]
		if i >= rs.host {
			break // not posted yet
		}
		e := rs.off + i
		m := s.match[e]
		q := s.ev[m].Rank
		qs := &s.ranks[q]
		j := m - qs.off
		if qs.commPos >= len(qs.comm) || qs.comm[qs.commPos] != j || j >= qs.host {
			break
		}
		t := max(s.ev[e].Posted, rs.commFree, s.ev[m].Posted, qs.commFree)
		end := t + s.dur[e]
		s.ev[e].Start, s.ev[e].End = t, end
		s.ev[m].Start, s.ev[m].End = t, end
		s.done[e], s.done[m] = true, true
		rs.commFree, qs.commFree = end, end
		rs.commPos++
		qs.commPos++
		progressed = true
		if q != r {
			s.enqueue(q)
		}
	}
	return progressed
}

// stuck returns a DeadlockError when some rank did not finish.
func (s *simulator) stuck() error {
	var out []Stuck
	for r := range s.ranks {
		rs := &s.ranks[r]
		if rs.host == rs.n && rs.commPos == len(rs.comm) {
			continue
		}
		st := Stuck{Rank: r, Host: rs.host, Comm: -1, PeerRank: -1, PeerIndex: -1}
		if rs.host < rs.n {
			e := rs.off + rs.host
			st.HostStep = s.ev[e].Step
			st.HostWaits = s.hostWaits(e)
		}
		if rs.commPos < len(rs.comm) {
			i := rs.comm[rs.commPos]
			e := rs.off + i
			m := s.match[e]
			q := s.ev[m].Rank
			qs := &s.ranks[q]
			st.Comm, st.CommStep = i, s.ev[e].Step
			st.PeerRank, st.PeerIndex = q, m-qs.off
			partner := fmt.Sprintf("its partner %s (rank %d step %d)", s.ev[m].Step, q, st.PeerIndex)
			switch {
			case i >= rs.host:
				st.CommWaits = "is not posted yet (the host has not reached it)"
			case qs.comm[qs.commPos] != st.PeerIndex:
				head := qs.comm[qs.commPos]
				st.CommWaits = fmt.Sprintf("waits for %s, which is queued behind rank %d's comm head step %d %s", partner, q, head, s.p.Ranks[q][head])
			default:
				st.CommWaits = fmt.Sprintf("waits for %s, which rank %d's host has not posted (blocked at step %d)", partner, q, qs.host)
			}
		}
		out = append(out, st)
	}
	if len(out) == 0 {
		return nil
	}
	return &DeadlockError{Stuck: out}
}

func (s *simulator) hostWaits(e int) string {
	var waits []string
	for _, d := range s.deps[e] {
		switch {
		case d.ev < 0:
			waits = append(waits, d.why)
		case !s.done[d.ev]:
			w := s.ev[d.ev]
			state := "not run yet"
			if s.cls[d.ev] == clComm {
				state = "not complete"
			}
			waits = append(waits, fmt.Sprintf("waits for %s (rank %d step %d), %s", w.Step, w.Rank, w.Index, state))
		}
	}
	if len(waits) == 0 {
		return "ready" // cannot happen once run has finished
	}
	return strings.Join(waits, ", and ")
}

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
	type life struct {
		rank      int
		start     float64
		end       [3]float64 // ends of the chunk's W, B and I (NaN when absent)
		offEnd    float64    // end of the offload transfer, or NaN
		loadStart float64    // start of the load transfer, or NaN
	}
	nan := math.NaN()
	maxMicro := 0
	for _, ev := range s.ev {
		maxMicro = max(maxMicro, ev.Step.Micro)
		for _, sub := range ev.Step.Sub {
			maxMicro = max(maxMicro, sub.Micro)
		}
	}
	at := newChunkTable(s.stages, maxMicro, len(s.ev)) // (stage, micro) -> index in lives
	var lives []life
	// Forwards first: a chunk belongs to the rank running its F.
	for e, ev := range s.ev {
		if s.cls[e] != clCompute {
			continue
		}
		for _, cs := range ev.Step.Computes() {
			if cs.Kind == ir.Forward && at.setFirst(cs.Stage, cs.Micro, len(lives)) {
				lives = append(lives, life{rank: ev.Rank, start: ev.Start, end: [3]float64{nan, nan, nan}, offEnd: nan, loadStart: nan})
			}
		}
	}
	for e, ev := range s.ev {
		switch s.cls[e] {
		case clCompute:
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
				if li := at.get(cs.Stage, cs.Micro); li >= 0 {
					l := &lives[li]
					if math.IsNaN(l.end[j]) || ev.End > l.end[j] {
						l.end[j] = ev.End
					}
				}
			}
		case clLaunch:
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
		delta int
	}
	marks := make([][]mark, len(res.PeakActivations))
	for _, l := range lives {
		end := math.Inf(1) // never freed
		for _, v := range l.end {
			if !math.IsNaN(v) {
				end = v
				break
			}
		}
		marks[l.rank] = append(marks[l.rank], mark{l.start, +1}, mark{end, -1})
		if !math.IsNaN(l.offEnd) && !math.IsNaN(l.loadStart) && l.start <= l.offEnd && l.offEnd <= l.loadStart && l.loadStart <= end {
			marks[l.rank] = append(marks[l.rank], mark{l.offEnd, -1}, mark{l.loadStart, +1})
		}
	}
	for r, ms := range marks {
		sort.Slice(ms, func(i, j int) bool {
			if ms[i].t != ms[j].t {
				return ms[i].t < ms[j].t
			}
			return ms[i].delta < ms[j].delta
		})
		cur, peak := 0, 0
		for _, m := range ms {
			cur += m.delta
			peak = max(peak, cur)
		}
		res.PeakActivations[r] = peak
	}
}
