package ir

import "fmt"

// Options are the family options that shape a compute order (docs/design.md
// §4). The options that rewrite one (split, overlap, dx/dw in overlap) are
// passes, set in passes.Options.
type Options struct {
	LessMemory bool // interleaved: smaller warm-up (fewer live activations, more bubble); interleaved-zb: never above PyTorch's memory
}

// Config is what a user asks for: a schedule family on P ranks with V stages
// per rank and M micro-batches.
type Config struct {
	Schedule string
	Ranks    int // P
	Virtual  int // V; 0 means the family's default
	Micro    int // M
	// Placement overrides the family's default placement when non-nil.
	Placement *Placement
	Options   Options
	// Cost, when non-nil, is the cost model the order is built for, for the
	// families whose order depends on step costs (interleaved-zb); the
	// others ignore it. nil: F = I = W = 1 on every stage, no latency.
	Cost *Costs
}

// Costs is the part of the cost model (gen/sim's Cost) that shapes a
// compute order: how long the compute steps of each stage take and the
// latency of a cross-rank dependency. F, I and W hold one value (every
// stage) or one per stage; gen/gencmd fills them from -cost or -model for
// the commands that simulate.
type Costs struct {
	F, I, W []float64
	Comm    float64
}

// Program is a schedule: one ordered step list per rank.
type Program struct {
	Placement Placement
	Micro     int      // number of micro-batches M
	Ranks     [][]Step // Ranks[r] is rank r's program
	// Copies is the number of independent pipelines (model copies) the
	// stages form. 0 or 1: one pipeline, every micro-batch runs all stages
	// 0..S-1. C > 1 (C dividing S and M): the S stages form C equal
	// contiguous pipelines (stages k·S/C .. (k+1)·S/C-1) and the M
	// micro-batches C equal contiguous groups; micro-batch m runs only the
	// stages of pipeline m/(M/C) (see Route). The text and CSV forms do not
	// write it: ParseText, ParseCSV and Infer infer it from the stages each
	// micro-batch computes.
	Copies int
	// Ties are the tied stage pairs (-tie A:B, passes.Tie): each rank
	// holding a stage of a tie runs TIE_GRAD before OPT_STEP. The text and
	// CSV forms do not write them (the TIE_GRAD steps show where they are).
	Ties []Tie
	// RecomputeShare is, per stage, the share of the stage's layers (and
	// of a chunk's activations and forward time) its RECOMPUTE steps
	// re-run under a selective policy (-recompute selective:...): its F
	// drops that share of the chunk's activations and keeps the rest. nil,
	// or an entry outside (0, 1): the whole stage (full recompute). The
	// text and CSV forms do not write it (a RECOMPUTE read from them is
	// full).
	RecomputeShare []float64
	// RecomputeCost is, per stage, the share of the stage's R (its
	// forward's time, -cost or -model's R) a RECOMPUTE of it costs, where
	// that differs from RecomputeShare (-recompute model: the marked
	// layers' R over the stage's, their act giving RecomputeShare). nil, or
	// an entry outside (0, 1]: RecomputePart's.
	RecomputeCost []float64
	// RecomputeLayers is, per stage, the layers (indices within the
	// stage, increasing) a RECOMPUTE of it re-runs when they are not the
	// first RecomputeShare of its layers (-recompute model: the layers a
	// -model file marks, anywhere in the stage); the runtime's
	// Spec.RecomputeLayers. nil, or a nil entry: the first share.
	RecomputeLayers [][]int
}

// Mark is what -recompute model recomputes of one stage: the layers a
// -model file marks "recompute": true (gen/model's Marks).
type Mark struct {
	// Layers are the marked layers, indices within the stage in
	// increasing order; nil when none is, or every one (the stage
	// recomputes whole).
	Layers []int
	// Share is the marked layers' share of the stage's activations (a
	// chunk's memory; Program.RecomputeShare): 0 when none is marked, 1
	// when every one is.
	Share float64
	// Cost is the marked layers' share of the stage's R
	// (Program.RecomputeCost).
	Cost float64
}

// RecomputePart returns the share of stage s that a RECOMPUTE of it
// re-runs: RecomputeShare[s] when that is in (0, 1), else 1 (the whole
// stage).
func (p *Program) RecomputePart(s int) float64 {
	if s >= 0 && s < len(p.RecomputeShare) {
		if f := p.RecomputeShare[s]; f > 0 && f < 1 {
			return f
		}
	}
	return 1
}

// RecomputeCostPart returns the share of stage s's R that a RECOMPUTE of
// it costs: RecomputeCost[s] when that is in (0, 1], else RecomputePart.
func (p *Program) RecomputeCostPart(s int) float64 {
	if s >= 0 && s < len(p.RecomputeCost) {
		if f := p.RecomputeCost[s]; f > 0 && f <= 1 {
			return f
		}
	}
	return p.RecomputePart(s)
}

// NewProgram returns an empty program for the placement and micro-batch count.
func NewProgram(p Placement, micro int) Program {
	return Program{Placement: p, Micro: micro, Ranks: make([][]Step, p.Ranks())}
}

// Route returns the first and last stage micro-batch m runs: 0 and S-1 for
// one pipeline (Copies ≤ 1), or when Copies does not divide both S and M or m
// is outside 0..M-1; otherwise the bounds of pipeline m/(M/Copies).
func (p *Program) Route(m int) (first, last int) {
	S, C := p.Stages(), p.Copies
	if C <= 1 || S%C != 0 || p.Micro%C != 0 || m < 0 || m >= p.Micro {
		return 0, S - 1
	}
	per := S / C
	first = m / (p.Micro / C) * per
	return first, first + per - 1
}

// Runs reports whether micro-batch micro runs stage stage: whether the stage
// is on the micro-batch's route.
func (p *Program) Runs(stage, micro int) bool {
	if p.Copies <= 1 {
		return true
	}
	first, last := p.Route(micro)
	return stage >= first && stage <= last
}

// Stages returns the number of virtual stages.
func (p Program) Stages() int { return p.Placement.Stages() }

// NumSteps returns the total number of steps on all ranks.
func (p Program) NumSteps() int {
	n := 0
	for _, r := range p.Ranks {
		n += len(r)
	}
	return n
}

// Clone returns a deep copy of the program.
func (p Program) Clone() Program {
	q := p
	q.Placement.RankOf = append([]int(nil), p.Placement.RankOf...)
	q.Ranks = make([][]Step, len(p.Ranks))
	for r, steps := range p.Ranks {
		q.Ranks[r] = make([]Step, len(steps))
		for i, s := range steps {
			q.Ranks[r][i] = s.clone()
		}
	}
	return q
}

func (s Step) clone() Step {
	if s.Sub != nil {
		s.Sub = append([]Step(nil), s.Sub...)
	}
	return s
}

// ComputeOnly returns a copy of the program with only its compute steps (F, B, I, W, overlaps).
func (p Program) ComputeOnly() Program {
	q := NewProgram(p.Placement, p.Micro)
	q.Copies, q.Ties = p.Copies, p.Ties
	for r, steps := range p.Ranks {
		for _, s := range steps {
			if s.Kind.IsCompute() {
				q.Ranks[r] = append(q.Ranks[r], s.clone())
			}
		}
	}
	return q
}

// HasComm reports whether any rank's program holds a transfer step.
func (p Program) HasComm() bool {
	for _, steps := range p.Ranks {
		for _, s := range steps {
			if s.Kind.IsComm() {
				return true
			}
		}
	}
	return false
}

// ForwardOnly reports whether p is a forward-only program (evaluation or
// inference): it computes forwards and no backward at all (no B, I, W or
// overlap; so no gradient transfers either). Such a program keeps no saved
// activations and steps no optimizer: gen/verify does not ask for each
// chunk's backward, and refuses OPT_STEP in it.
func (p Program) ForwardOnly() bool {
	f := false
	for _, steps := range p.Ranks {
		for _, s := range steps {
			switch k := s.Kind; {
			case k == Forward:
				f = true
			case k == BackwardWeight, k.IsBackward(), k.IsOverlap(), k == RecvB, k == SendB:
				return false
			}
		}
	}
	return f
}

// PeerOf returns the peer rank a transfer step of kind k on stage s talks to:
// the next stage's rank for SEND_F and DATA_SEND, the previous one's for
// RECV_F, DATA_RECV and SEND_B, the next one's for RECV_B. It returns None
// when that stage does not exist.
func (p Placement) PeerOf(k Kind, s int) int {
	switch k {
	case SendF, DataSend, RecvB:
		return p.Rank(s + 1)
	case RecvF, DataRecv, SendB:
		return p.Rank(s - 1)
	case MpipeSend:
		return p.Rank(s)
	}
	return None
}

// Owner returns the rank that owns micro-batch m under mpipe's owned-micro
// data loading: m mod P. The owner loads m's input and, when it does not
// hold the first stage itself, ships it there with MPIPE_FWD_SEND.
func (p Placement) Owner(m int) int {
	if p.NumRanks <= 0 || m < 0 {
		return None
	}
	return m % p.NumRanks
}

// PeerOfStep returns the peer rank of a transfer step: PeerOf for every
// kind but MPIPE_FWD_RECV, whose peer is the owner of its micro-batch.
func (p Placement) PeerOfStep(st Step) int {
	if st.Kind == MpipeRecv {
		return p.Owner(st.Micro)
	}
	return p.PeerOf(st.Kind, st.Stage)
}

// ResolvePeers fills the Peer field of every transfer step from the placement
// (the text and CSV forms do not carry peers).
func (p *Program) ResolvePeers() error {
	for r, steps := range p.Ranks {
		for i := range steps {
			st := &steps[i]
			if !st.Kind.IsComm() {
				continue
			}
			peer := p.Placement.PeerOfStep(*st)
			if peer == None {
				return fmt.Errorf("rank %d step %d %s: stage %d has no neighbour for %s (stages are 0..%d)", r, i, st, st.Stage, st.Kind, p.Stages()-1)
			}
			st.Peer = peer
		}
	}
	return nil
}

// OwnerStep reports whether st, on rank r, is a step mpipe's owned-micro data
// loading runs on the owner of a micro-batch for a stage the owner does not
// hold: DATA_LOAD(first, m) or MPIPE_FWD_SEND(first, m) on rank Owner(m),
// where first is the first stage of m's route. Such steps name a stage of
// another rank and have no buffer slot.
func (p *Program) OwnerStep(r int, st Step) bool {
	if st.Kind != DataLoad && st.Kind != MpipeSend {
		return false
	}
	S := p.Stages()
	if st.Stage < 0 || st.Stage >= S || st.Micro < 0 || st.Micro >= p.Micro || p.Placement.RankOf[st.Stage] == r {
		return false
	}
	first, _ := p.Route(st.Micro)
	return st.Stage == first && p.Placement.Owner(st.Micro) == r
}
