package pipe

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"gorgonia.org/tensor"
)

// Spec describes a generated schedule: what every rank's Exec must agree on.
// Generated code defines one as `var Spec = pipe.Spec{...}`.
type Spec struct {
	Schedule    string // schedule family name, e.g. "1f1b"
	Ranks       int    // number of ranks
	Stages      int    // number of (virtual) stages
	Micro       int    // micro-batches per iteration
	Slots       []int  // Slots[r]: buffer slots of rank r
	RankOf      []int  // RankOf[s]: rank holding stage s
	Fingerprint string // hash of the lowered program, checked at the rendezvous
	// Copies is the number of model copies the stages form: 0 or 1 for one
	// pipeline; 2 for dualpipe, whose stages 0..S/2-1 are copy A and
	// S/2..S-1 copy B of the same S/2-stage model. Micro-batches
	// 0..M/2-1 run through copy A only and M/2..M-1 through copy B only;
	// stage s and stage s+S/2 hold the same weights, and OptStep sums their
	// gradients (see CopyGrads) before the optimizer runs.
	Copies int
	// Owned is the number of micro-batches loaded by their owner rank
	// (mpipe; min(Ranks, Micro) or fewer in its min ownership mode, up to
	// Micro in its full one): micro m < Owned is owned by rank m mod
	// Ranks, which loads its
	// input (DataSource.Input) and ships it to the first stage's rank with
	// MpipeSend, where MpipeRecv receives it. 0 for every other schedule.
	Owned int
	// ShipLabels is set when the labels travel along the pipe: the first
	// stage's DATA_LOAD loads them with the input (DataSource.Target), and
	// DataRecv/DataSend (DATA_RECV/DATA_SEND) carry them to the next
	// stage's rank ahead of each activation, so that only the first stage's
	// rank reads data. A micro-batch whose route starts and ends on one rank
	// still loads its labels at the last stage.
	ShipLabels bool
	// ForwardOnly is set for a forward-only program (evaluation, inference:
	// `ppgen gen -forward-only`): it runs forwards and their transfers only.
	// F drops the context the stage returns at once (nothing will run a
	// backward on it); the last stage keeps the loss (Exec.Losses), and its
	// gradient only until the slot's next chunk; the program has no
	// OPT_STEP.
	ForwardOnly bool
	// Layers, for a program generated for a model description (`ppgen gen
	// -model FILE`, docs/model.md), is the split of its layers into the
	// stages: stage s builds layers Layers[s][0] to Layers[s][1]-1 of the
	// file (with two model copies, stage s and s+Stages/2 the same ones).
	// Nil otherwise.
	Layers [][2]int
	// Ties are the stages that share a parameter (`ppgen gen -tie A:B`):
	// each holds a copy, implements Tied, and TIE_GRAD sums the copies'
	// gradients before OPT_STEP (TieGrad).
	Ties []Tie
	// Recompute lists the stages that recompute (`ppgen gen -recompute`),
	// in increasing order: the F of each of their chunks keeps only the
	// stage's input, and Exec.Recompute (RECOMPUTE) re-runs the forward on
	// it before the chunk's backward, to rebuild what the stage saved.
	//
	// It is the one kind of field a step kind adds to Spec: a kind of
	// abi's IsRebuild class has a field named after its Go name listing
	// the stages of its steps, which gen/emit writes and New and Check
	// read through the generated rebuiltStages (kinds_gen.go); nothing
	// else here names the kind.
	Recompute []int
	// RecomputeShare, when not nil, holds per stage the share f of a
	// stage of Recompute that its RECOMPUTE re-runs (selective recompute,
	// `ppgen gen -recompute selective:...`; an entry of 0 or 1 is the
	// whole stage). A stage that implements Recomputable then keeps, after
	// its F, what Recomputable.Drop keeps for that share (the context of
	// its other layers); one that does not keeps only its input and
	// re-runs Forward whole, as under full recompute. It is the share of a
	// chunk's activations the F drops, which PeakLive counts.
	RecomputeShare []float64
	// RecomputeLayers, when not nil, holds per stage the layers (indices
	// within the stage, increasing) a RECOMPUTE of a stage of Recompute
	// re-runs (`ppgen gen -recompute model`: the layers a -model file marks
	// "recompute": true, anywhere in the stage). A nil entry is the first
	// share RecomputeShare of the stage's layers (selective:F). New gives a
	// Recomputable stage its entry and share through Select.
	RecomputeLayers [][]int
	// RecomputeCost, when not nil, holds per stage the share of the
	// stage's R (its forward's time) one RECOMPUTE of it costs in the
	// program (gen/ir's Program.RecomputeCostPart): RecomputeShare's
	// under selective:F, the marked layers' R share under -recompute
	// model, 1 for a stage that recomputes whole or not at all. gen/emit
	// writes it for a program with a selective or model policy; a
	// Timeline writes the entries of the stages that rebuilt through
	// Recomputable into its trace's otherData.recompute_cost, from which
	// `ppgen tune` fits the whole stage's R. Each entry is in (0, 1].
	RecomputeCost []float64
}

// kindStages is a Spec field of stages named after a kind (rebuiltStages).
type kindStages struct {
	kind   OpKind
	stages []int
}

// Describe says which schedule the Spec is, for people: its family, ranks
// P, stages per rank V (or stages S when they do not divide evenly) and
// micro-batches M, e.g. "zbv (P=4, V=2, M=8)", "forward-only" when it is.
// It is printable text of at most transport.MaxScheduleLen bytes (a long or
// odd Schedule name is cut and its control characters replaced), so it can
// be a TCPConfig's Schedule: ranks that refuse each other at the
// rendezvous then name the schedule each runs.
func (s Spec) Describe() string {
	name := strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s.Schedule, "?"))
	if name == "" {
		name = "unnamed"
	}
	const maxName = 64
	if len(name) > maxName {
		cut := maxName
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		name = name[:cut] + ".."
	}
	shape := fmt.Sprintf("P=%d, S=%d, M=%d", s.Ranks, s.Stages, s.Micro)
	if s.Ranks > 0 && s.Stages%s.Ranks == 0 {
		shape = fmt.Sprintf("P=%d, V=%d, M=%d", s.Ranks, s.Stages/s.Ranks, s.Micro)
	}
	if s.ForwardOnly {
		shape += ", forward-only"
	}
	return name + " (" + shape + ")"
}

// Validate checks the Spec's internal consistency.
func (s Spec) Validate() error {
	if s.Ranks < 1 {
		return fmt.Errorf("Ranks = %d, want >= 1", s.Ranks)
	}
	if s.Stages < 1 {
		return fmt.Errorf("Stages = %d, want >= 1", s.Stages)
	}
	if s.Micro < 1 {
		return fmt.Errorf("Micro = %d, want >= 1", s.Micro)
	}
	if len(s.RankOf) != s.Stages {
		return fmt.Errorf("len(RankOf) = %d, want Stages = %d", len(s.RankOf), s.Stages)
	}
	for st, r := range s.RankOf {
		if r < 0 || r >= s.Ranks {
			return fmt.Errorf("RankOf[%d] = %d, outside [0, %d)", st, r, s.Ranks)
		}
	}
	if len(s.Slots) != s.Ranks {
		return fmt.Errorf("len(Slots) = %d, want Ranks = %d", len(s.Slots), s.Ranks)
	}
	for r, n := range s.Slots {
		if n < 0 {
			return fmt.Errorf("Slots[%d] = %d < 0", r, n)
		}
	}
	switch {
	case s.Owned < 0 || s.Owned > s.Micro:
		return fmt.Errorf("Owned = %d, want 0..Micro = %d (mpipe owns at most every micro-batch)", s.Owned, s.Micro)
	case s.Owned > 0 && s.ShipLabels:
		return fmt.Errorf("Owned = %d with ShipLabels: owners load only inputs, shipped labels start on the first stage's rank", s.Owned)
	case s.Owned > 0 && s.Copies > 1:
		return fmt.Errorf("Owned = %d with Copies = %d: owned-micro loading takes one pipeline", s.Owned, s.Copies)
	case s.Copies < 0 || s.Copies > 2:
		return fmt.Errorf("Copies = %d, want 0, 1 or 2 (dualpipe's two model copies)", s.Copies)
	case s.Copies == 2 && (s.Stages%2 != 0 || s.Micro%2 != 0):
		return fmt.Errorf("Copies = 2 needs an even number of stages and of micro-batches, not %d and %d", s.Stages, s.Micro)
	case s.Layers != nil && len(s.Layers) != s.Stages:
		return fmt.Errorf("len(Layers) = %d, want Stages = %d", len(s.Layers), s.Stages)
	}
	for _, r := range s.rebuiltStages() {
		for i, st := range r.stages {
			if st < 0 || st >= s.Stages || (i > 0 && st <= r.stages[i-1]) {
				return fmt.Errorf("%s = %v: want stages of 0..%d in increasing order", r.kind.GoName(), r.stages, s.Stages-1)
			}
		}
	}
	if s.RecomputeShare != nil && len(s.RecomputeShare) != s.Stages {
		return fmt.Errorf("len(RecomputeShare) = %d, want Stages = %d (or nil)", len(s.RecomputeShare), s.Stages)
	}
	for st, f := range s.RecomputeShare {
		if !(f >= 0 && f <= 1) {
			return fmt.Errorf("RecomputeShare[%d] = %v, want a share in [0, 1]", st, f)
		}
	}
	if s.RecomputeCost != nil && len(s.RecomputeCost) != s.Stages {
		return fmt.Errorf("len(RecomputeCost) = %d, want Stages = %d (or nil); regenerate the program (go generate) or give one share per stage", len(s.RecomputeCost), s.Stages)
	}
	for st, f := range s.RecomputeCost {
		if !(f > 0 && f <= 1) {
			return fmt.Errorf("RecomputeCost[%d] = %v, want a share of the stage's R in (0, 1] (1: the whole stage)", st, f)
		}
	}
	if err := checkRecomputeLayers(&s); err != nil {
		return err
	}
	for st, l := range s.Layers {
		if l[0] < 0 || l[1] <= l[0] {
			return fmt.Errorf("Layers[%d] = %v: want a non-empty range first..end-1", st, l)
		}
	}
	return checkTies(s)
}

// CopyGrads is implemented by the stages of a program with two model copies
// (Spec.Copies = 2). Grads returns the stage's weight gradients, as
// BackwardWeight accumulated them since the last optimizer step, in a fixed
// order; the stage holding the same weights in the other copy returns the
// same shapes. OptStep adds the other copy's gradients to them in place,
// then runs the optimizer hook, so both copies take the same step.
type CopyGrads interface {
	Grads() []*tensor.Dense
}

// StagesOf returns the stages placed on rank r, in increasing order.
func (s Spec) StagesOf(r int) []int {
	var out []int
	for st, rr := range s.RankOf {
		if rr == r {
			out = append(out, st)
		}
	}
	return out
}

// ReadsData reports whether rank r reads micro-batches, so that its
// Config.Data is required (and a trainer gives the others none): it holds
// the first stage of a route (inputs) or the last one (labels, unless
// ShipLabels brings them from a first stage on another rank), or it owns
// micro-batches (mpipe's Owned).
func (s Spec) ReadsData(r int) bool {
	for st, rr := range s.RankOf {
		if rr == r && s.loadsAt(st) {
			return true
		}
	}
	return r < min(s.Owned, s.Ranks)
}

// loadsAt reports whether stage st's DATA_LOAD reads data on its rank: it
// is the first stage of a route, or the last one and the labels are not
// shipped to it from another rank.
func (s Spec) loadsAt(st int) bool {
	per := s.Stages / max(s.Copies, 1)
	first, last := st%per == 0, (st+1)%per == 0
	return first || (last && (!s.ShipLabels || s.RankOf[st-per+1] == s.RankOf[st]))
}

// Stage is one model chunk (a virtual stage) on gorgonia tensors.
//
// Forward returns the output and a context that the backward steps of the
// same chunk receive. BackwardInput returns the gradient with respect to the
// input (nil is allowed on stage 0); BackwardWeight accumulates the weight
// gradients. A full backward (B) calls BackwardInput then BackwardWeight.
// Tensors returned by a Stage must not be mutated afterwards: they may be in
// flight to a peer. runtime/nn types satisfy this interface structurally.
//
// A received input x and a received output gradient dy are lent: at the end
// of the chunk's backward (its B, or its W after I) the Exec hands them back
// to the transport (transport.Recycler), whose later receives reuse their
// memory. So a Stage must not keep x or dy, or a view of them, after that
// backward returns (keeping them in saved is fine: the slot drops it then).
// Returning them, or views of them, as y or dx is allowed (the Exec then
// does not recycle them). Config.KeepReceived turns recycling off.
type Stage interface {
	Forward(x *tensor.Dense) (y *tensor.Dense, saved any, err error)
	BackwardInput(saved any, dy *tensor.Dense) (dx *tensor.Dense, err error)
	BackwardWeight(saved any, dy *tensor.Dense) error
}

// Loss turns the last stage's output and the labels into a scalar loss and
// the output gradient dy.
type Loss interface {
	Loss(y, target *tensor.Dense) (loss float64, dy *tensor.Dense, err error)
}

// DataSource gives the current iteration's micro-batches: Input(m) is the
// input of micro m (loaded on stage 0's rank), Target(m) its labels (loaded on
// the last stage's rank). A trainer advances it between iterations.
type DataSource interface {
	Input(micro int) (*tensor.Dense, error)
	Target(micro int) (*tensor.Dense, error)
}

// MicroBatches is a DataSource over fixed slices (either may be nil on ranks
// that do not need it).
type MicroBatches struct {
	Inputs, Targets []*tensor.Dense
}

// Input returns Inputs[micro].
func (b MicroBatches) Input(micro int) (*tensor.Dense, error) {
	if micro < 0 || micro >= len(b.Inputs) {
		return nil, fmt.Errorf("no input for micro-batch %d (have %d)", micro, len(b.Inputs))
	}
	return b.Inputs[micro], nil
}

// Target returns Targets[micro].
func (b MicroBatches) Target(micro int) (*tensor.Dense, error) {
	if micro < 0 || micro >= len(b.Targets) {
		return nil, fmt.Errorf("no target for micro-batch %d (have %d)", micro, len(b.Targets))
	}
	return b.Targets[micro], nil
}

// Releaser is implemented by stages that can reuse what a saved context
// holds once it is known that no backward will read it: Release ends the
// context Forward returned, which no call takes afterwards. A forward-only
// program (an evaluation) calls it on each context as Forward returns
// (runtime/nn's Sequential hands the context's buffers back for its next
// forward). A stage that does not implement it leaves its contexts to the
// garbage collector.
type Releaser interface {
	Release(saved any) error
}

// evalStage is a stage of a forward-only program (Spec.ForwardOnly): its
// Forward drops the context, which no backward will read, after Release of
// the stage as configured (raw, under a Timeline's wrapper), where it is a
// Releaser.
type evalStage struct {
	Stage
	raw Stage
}

func (e evalStage) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	y, saved, err := e.Stage.Forward(x)
	if err != nil {
		return y, nil, err
	}
	if r, ok := e.raw.(Releaser); ok {
		if err := r.Release(saved); err != nil {
			return nil, nil, fmt.Errorf("releasing a forward-only context: %w", err)
		}
	}
	return y, nil, nil
}
