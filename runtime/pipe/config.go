package pipe

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/transport"
)

// Config and construction of an Exec, its lifecycle (Reset, Sync, Close) and
// its error state. The step methods are in compute.go and transfer.go, the
// slots they work on in slots.go, the interpreter in interpret.go.

// Config configures one rank's Exec.
type Config struct {
	Rank int
	Spec Spec
	// Stages are the stages this rank holds, by stage index: exactly the s
	// with Spec.RankOf[s] == Rank.
	Stages map[int]Stage
	// Loss is required on the rank holding the last stage.
	Loss Loss
	// Data is required on the ranks that read micro-batches
	// (Spec.ReadsData): those holding the first stage of a route, the last
	// one (unless Spec.ShipLabels brings its labels from another rank), and
	// mpipe's owners (Spec.Owned).
	Data DataSource
	// Tower, if set, is this rank's replica of a trainable preprocess
	// (tower.go, docs/mpipe.md): its Forward runs in each input load this
	// rank makes, its backward and the sum of the replicas' gradients at
	// OPT_STEP, before OptStep. Every rank of the world gives one, or none.
	Tower Tower
	// TowerAtFirst runs Tower on the first stage's rank only, for every
	// micro-batch (mpipe without owner backward; docs/mpipe.md): owners
	// load and ship raw inputs, the first stage's rank runs the tower's
	// forward on each input it loads or receives and its backward at
	// OPT_STEP, and no gradient goes back to the owners. Every rank sets
	// it alike.
	TowerAtFirst bool
	// Transport is required when Spec.Ranks > 1; its Rank and World must
	// match, and the fingerprint it checked with its peers (a
	// transport.Fingerprinter's) must be Spec.Fingerprint or a combination
	// holding it (Fingerprints): one world's transport serves the Execs of
	// every program it was opened for. The Exec does not close it, but
	// aborts it when the rank fails.
	Transport transport.Transport
	// OptStep, if set, runs at the OPT_STEP step (the optimizer update of this
	// rank's stages).
	OptStep func() error
	// AllReduce runs at each ALL_REDUCE step (allreduce.go), with n the
	// step's number in this iteration (0 for the first): a reduction every
	// rank takes part in, which the trainer does through runtime/collective
	// on its world (a -clip program's global gradient norm). Required when
	// the program holds ALL_REDUCE steps.
	AllReduce func(n int) error
	// SerialOverlap runs the two halves of every overlap step (OverlapFB,
	// OverlapBF) one after the other, in sub-step order, even when they are
	// on different stage objects. Set it when this rank's stages share state
	// that is not safe for concurrent use (tied weights, a shared workspace).
	SerialOverlap bool
	// KeepReceived stops the Exec from handing received inputs and output
	// gradients back to the transport (transport.Recycler) at the end of
	// their chunk's backward, so every receive gets fresh memory. Set it
	// when a Stage keeps its x or dy after the chunk's backward (a cache, a
	// debugging copy that is not a copy); see Stage.
	KeepReceived bool
	// Logger receives failures (Error) and lifecycle (Debug). Default: discard.
	Logger *slog.Logger
	// Timeline, if set, records when each stage call (Forward,
	// BackwardInput, BackwardWeight) starts and ends, and each transfer
	// outside a batch: the measured timeline, which Timeline.WriteTrace
	// writes as a Chrome trace. The stages are wrapped for it; the step
	// methods are unchanged, so it costs nothing when nil (the comm
	// stream checks it once per transfer). Ranks of one process may share
	// one.
	Timeline *Timeline
}

// Exec executes one rank's steps. Its step methods must be called from one
// goroutine (the host thread); Err, Losses and Fail may be called from any.
type Exec struct {
	// Hot fields first: what every step reads.
	// state is stFailed once the rank failed; stSlow makes every step take
	// its slow path (set only by FuzzExecPaths, which compares the paths).
	// The steps read it once: nonzero means "not the fast path".
	state  atomic.Uint32
	slots  []slotState
	stages []Stage         // by stage index; nil where not on this rank
	ends   []uint8         // per stage: routeStart|routeEnd bits
	micro  int             // spec.Micro
	losses []atomic.Uint64 // math.Float64bits of each micro's loss
	loss   Loss
	data   DataSource
	last   int
	copies int // spec.Copies, 0 or 1 for one pipeline
	per    int // stages per copy (Stages/copies)
	// The fields above are the steps'; kept first, most at offsets below
	// 128 (x86's one-byte displacements), the steps' code stays short.
	// Another field goes below them.

	// raw is stages as the Config gave them (stages may be wrapped for a
	// Timeline): the optional interfaces (Swapper, Sharded, CopyGrads) are
	// looked up here.
	raw  []Stage
	tied []bool // per stage: its TIE_GRAD ran this iteration (tie.go)
	// reduceHook is Config.AllReduce; reduced counts this iteration's
	// ALL_REDUCE steps (allreduce.go).
	reduceHook func(n int) error
	reduced    int
	gathered   bool // a GATHER_LOSS ran this iteration (gatherloss.go)

	rank    int
	spec    Spec
	tr      transport.Transport
	optHook func() error
	log     *slog.Logger
	tl      *Timeline // Config.Timeline: also records the comm stream's transfers

	// prevPeer[s] and nextPeer[s]: the rank of stage s-1 and s+1 when a
	// transfer with it is valid (there is a transport and the stage is on
	// another rank); -1 otherwise. checkPeer explains a mismatch.
	prevPeer, nextPeer []int

	group         []int // stageGroups(stages): overlap halves on one group run one after the other
	serialOverlap bool

	mu  sync.Mutex
	err error

	// mem counts the saved contexts the rank holds (recompute.go,
	// PeakLive).
	mem memCount

	// ownIn is the input an owner loaded for micro ownMicro (mpipe),
	// until MpipeSend ships it.
	ownIn    *tensor.Dense
	ownMicro int
	// tower is Config.Tower; towerDy[m] the input gradient of micro m's
	// first-stage chunk, kept for the tower's backward at OPT_STEP.
	tower   Tower
	towerDy []*tensor.Dense
	// towerAtFirst is Config.TowerAtFirst.
	towerAtFirst bool

	// batch is the open batch (BatchBegin .. BatchEnd), nil when none;
	// batches[:nBatch] are this iteration's, reused by the next (batch.go).
	batch   *opBatch
	batches []*opBatch
	nBatch  int
	// rec is the transport's Recycler (nil without one, or with
	// Config.KeepReceived); lent, two per slot, the received tensors it
	// gets back (transfer.go, recycle).
	rec  transport.Recycler
	lent []lentRecv

	comm     chan commOp
	inflight sync.WaitGroup
	commDone chan struct{}
	closed   bool
}

// New validates cfg and returns the rank's Exec. It starts the rank's comm
// goroutine when there is a transport; Close stops it.
func New(cfg Config) (*Exec, error) {
	sp := cfg.Spec
	if err := sp.Validate(); err != nil {
		return nil, fmt.Errorf("pipe: invalid Spec: %w", err)
	}
	r := cfg.Rank
	if sp.Stages > atMax || sp.Micro > atMax || sp.Ranks > atMax || slices.Max(append([]int{0}, sp.Slots...)) > atMax {
		return nil, fmt.Errorf("pipe: Spec has %d stages, %d micro-batches, %d ranks and up to %d slots per rank; at most %d of each (a step's arguments are packed in 16 bits each, see At)",
			sp.Stages, sp.Micro, sp.Ranks, slices.Max(append([]int{0}, sp.Slots...)), atMax)
	}
	if r < 0 || r >= sp.Ranks {
		return nil, fmt.Errorf("pipe: rank %d outside [0, %d)", r, sp.Ranks)
	}
	want := sp.StagesOf(r)
	stages := make([]Stage, sp.Stages)
	for s, st := range cfg.Stages {
		switch {
		case s < 0 || s >= sp.Stages:
			return nil, fmt.Errorf("pipe: rank %d: Config.Stages has stage %d, outside [0, %d)", r, s, sp.Stages)
		case sp.RankOf[s] != r:
			return nil, fmt.Errorf("pipe: rank %d: Config.Stages has stage %d, which Spec.RankOf places on rank %d (this rank holds stages %v)", r, s, sp.RankOf[s], want)
		case st == nil:
			return nil, fmt.Errorf("pipe: rank %d: Config.Stages[%d] is nil", r, s)
		}
		stages[s] = st
	}
	for _, s := range want {
		if stages[s] == nil {
			return nil, fmt.Errorf("pipe: rank %d: holds stages %v per Spec.RankOf, but Config.Stages lacks stage %d", r, want, s)
		}
	}
	last := sp.Stages - 1
	copies, per := max(sp.Copies, 1), sp.Stages/max(sp.Copies, 1)
	ofCopy := ""
	if copies > 1 {
		ofCopy = " of a model copy"
	}
	for _, s := range want {
		isLast := (s+1)%per == 0
		if isLast && cfg.Loss == nil {
			return nil, fmt.Errorf("pipe: rank %d holds the last stage (%d)%s but Config.Loss is nil", r, s, ofCopy)
		}
		// With shipped labels the last stage's rank reads no data, unless
		// the route also starts there (nothing to ship).
		if sp.loadsAt(s) && cfg.Data == nil {
			return nil, fmt.Errorf("pipe: rank %d holds the first or the last stage (%d)%s but Config.Data is nil", r, s, ofCopy)
		}
		if _, ok := stages[s].(CopyGrads); copies > 1 && !ok {
			return nil, fmt.Errorf("pipe: rank %d: stage %d is a %T, which does not implement pipe.CopyGrads (Grads() []*tensor.Dense): the schedule runs %d model copies, whose gradients OptStep sums", r, s, stages[s], copies)
		}
	}
	if err := requireTied(sp, r, stages); err != nil {
		return nil, err
	}
	if r < sp.Owned && cfg.Data == nil {
		return nil, fmt.Errorf("pipe: rank %d owns micro-batch %d (Spec.Owned = %d, mpipe) but Config.Data is nil: an owner loads the input of the micro-batches it owns", r, r, sp.Owned)
	}
	switch {
	case cfg.Tower != nil && copies > 1:
		return nil, fmt.Errorf("pipe: rank %d: Config.Tower with Spec.Copies = %d: a tower feeds one pipeline", r, copies)
	case cfg.Tower != nil && sp.ForwardOnly:
		return nil, fmt.Errorf("pipe: rank %d: Config.Tower in a forward-only program, which has no OPT_STEP to run the tower's backward at: pass the tower's forward as a frozen preprocess (WithPreprocess) instead", r)
	}
	if cfg.Transport != nil {
		if cfg.Transport.Rank() != r || cfg.Transport.World() != sp.Ranks {
			return nil, fmt.Errorf("pipe: rank %d of %d: transport is rank %d of %d", r, sp.Ranks, cfg.Transport.Rank(), cfg.Transport.World())
		}
		if fp, ok := cfg.Transport.(transport.Fingerprinter); ok && !fingerprintCovers(fp.Fingerprint(), sp.Fingerprint) {
			return nil, fmt.Errorf("pipe: rank %d: transport checked schedule fingerprint %q with its peers, Spec has %q (a world running several programs checks pipe.Fingerprints of all of them)", r, fp.Fingerprint(), sp.Fingerprint)
		}
	} else if sp.Ranks > 1 {
		return nil, fmt.Errorf("pipe: rank %d: Config.Transport is nil but Spec has %d ranks", r, sp.Ranks)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	raw := stages
	if err := selectLayers(sp, r, raw); err != nil {
		return nil, err
	}
	if cfg.Timeline != nil {
		cfg.Timeline.noteStages(sp.Stages)
		stages = cfg.Timeline.wrap(r, raw)
	}
	if sp.ForwardOnly {
		// A forward-only program keeps no context: the stages' are dropped
		// as they return, off the steps' hot path.
		stages = slices.Clone(stages)
		for s, st := range stages {
			if st != nil {
				stages[s] = evalStage{Stage: st, raw: raw[s]}
			}
		}
	}
	x := &Exec{
		rank: r, spec: sp, last: last, copies: copies, per: per, stages: stages, raw: raw, micro: sp.Micro,
		loss: cfg.Loss, data: cfg.Data, tr: cfg.Transport, optHook: cfg.OptStep, reduceHook: cfg.AllReduce, log: log, tl: cfg.Timeline,
		group: stageGroups(raw), serialOverlap: cfg.SerialOverlap,
		slots:  make([]slotState, sp.Slots[r]),
		losses: make([]atomic.Uint64, sp.Micro), tied: make([]bool, sp.Stages),
	}
	if cfg.Tower != nil {
		x.tower, x.towerDy, x.towerAtFirst = cfg.Tower, make([]*tensor.Dense, sp.Micro), cfg.TowerAtFirst
		if x.data != nil && (!cfg.TowerAtFirst || sp.RankOf[0] == r) {
			x.data = WithPreprocess(x.data, cfg.Tower.Forward)
		}
	}
	x.ends = make([]uint8, sp.Stages)
	for s := range x.ends {
		if s%per == 0 {
			x.ends[s] |= routeStart
			if sp.ShipLabels {
				x.ends[s] |= loadsLabels
			}
		}
		if (s+1)%per == 0 {
			x.ends[s] |= routeEnd | loadsLabels
		}
	}
	for _, r := range sp.rebuiltStages() {
		for _, s := range r.stages {
			x.ends[s] |= keepsInput
		}
	}
	x.prevPeer, x.nextPeer = make([]int, sp.Stages), make([]int, sp.Stages)
	for s := range sp.Stages {
		x.prevPeer[s], x.nextPeer[s] = -1, -1
		if x.tr == nil {
			continue
		}
		if !x.routeFirst(s) && sp.RankOf[s-1] != r {
			x.prevPeer[s] = sp.RankOf[s-1]
		}
		if !x.routeLast(s) && sp.RankOf[s+1] != r {
			x.nextPeer[s] = sp.RankOf[s+1]
		}
	}
	x.spec.Slots = slices.Clone(sp.Slots)
	x.spec.RankOf = slices.Clone(sp.RankOf)
	x.spec.Ties = slices.Clone(sp.Ties)
	for i := range x.slots {
		s := &x.slots[i]
		s.actDone = make(chan struct{}, 1)
		s.gradDone = make(chan struct{}, 1)
		s.dataDone = make(chan struct{}, 1)
		s.clearChunk()
	}
	for i := range x.losses {
		x.losses[i].Store(nanBits)
	}
	if x.tr != nil {
		// Enough room for every transfer of an iteration, so posting does not
		// block; if it ever did, the host would only wait for ops ahead of it.
		n := 4*sp.Micro*len(want) + 64
		if rec, ok := x.tr.(transport.Recycler); ok && !cfg.KeepReceived {
			x.rec, x.lent = rec, make([]lentRecv, 2*len(x.slots))
		}
		x.comm = make(chan commOp, n)
		x.commDone = make(chan struct{})
		go x.commLoop()
	}
	log.Debug("exec ready", "rank", r, "stages", want, "slots", sp.Slots[r], "schedule", sp.Schedule)
	return x, nil
}

// Rank returns the rank this Exec runs.
func (x *Exec) Rank() int { return x.rank }

// Spec returns the schedule description.
func (x *Exec) Spec() Spec { return x.spec }

// The bits of Exec.state.
const (
	stFailed uint32 = 1 << iota
	stSlow
)

// failedNow reports whether the rank has failed.
func (x *Exec) failedNow() bool { return x.state.Load()&stFailed != 0 }

// Err returns the first error, or nil. It does not wait for posted comm ops;
// Sync does.
func (x *Exec) Err() error {
	if !x.failedNow() {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

// Fail records err as this rank's failure (if it is the first) and aborts the
// transport so peers fail too. Trainers use it for failures outside steps.
func (x *Exec) Fail(err error) {
	if err == nil {
		return
	}
	var se *StepError
	if !errors.As(err, &se) {
		err = &StepError{Rank: x.rank, Peer: -1, Err: err}
	}
	x.fail(err)
}

func (x *Exec) fail(err error) {
	x.mu.Lock()
	if x.err != nil {
		x.mu.Unlock()
		return
	}
	x.err = err
	x.state.Or(stFailed)
	x.mu.Unlock()
	x.log.Error("rank failed", "rank", x.rank, "err", err)
	if x.tr != nil {
		x.tr.Abort(err)
	}
}

func (x *Exec) stepFail(k OpKind, stage, micro, peer int, err error) {
	x.fail(&StepError{Rank: x.rank, Step: stepName(k, stage, micro), Peer: peer, Err: err})
}

func (x *Exec) stepFailf(k OpKind, stage, micro, peer int, format string, args ...any) {
	x.stepFail(k, stage, micro, peer, fmt.Errorf(format, args...))
}

// Sync waits until every posted transfer has completed (or failed) and
// returns Err.
func (x *Exec) Sync() error {
	x.dropBatch()
	x.inflight.Wait()
	return x.Err()
}

// Reset prepares the next iteration: it waits for posted transfers, empties
// the slots and forgets the losses. A failure is not reset: an Exec that
// failed stays failed (its transport is aborted).
func (x *Exec) Reset() {
	x.batch = nil
	x.inflight.Wait()
	x.nBatch = 0
	x.reduced, x.gathered = 0, false
	clear(x.tied)
	for i := range x.slots {
		s := &x.slots[i]
		// A completion signal is left only for a receive posted and never
		// waited for, which keeps its pending flag. (The receive may not
		// have been posted at all, after Close: hence no blocking wait.)
		if s.flags&actPending != 0 {
			select {
			case <-s.actDone:
			default:
			}
		}
		if s.flags&gradPending != 0 {
			select {
			case <-s.gradDone:
			default:
			}
		}
		if s.flags&dataPending != 0 {
			select {
			case <-s.dataDone:
			default:
			}
		}
		s.clearChunk()
	}
	x.ownIn = nil
	clear(x.lent)
	for i := range x.losses {
		if x.losses[i].Load() != nanBits { // Load is cheaper than Store
			x.losses[i].Store(nanBits)
		}
	}
}

var nanBits = math.Float64bits(math.NaN())

// Losses returns a copy of the per-micro-batch losses of the current
// iteration, computed on the rank holding the last stage; NaN elsewhere and
// for micro-batches not (yet) computed. After a GATHER_LOSS every rank
// holds every loss (LossesGathered).
func (x *Exec) Losses() []float64 {
	out := make([]float64, len(x.losses))
	for i := range x.losses {
		out[i] = math.Float64frombits(x.losses[i].Load())
	}
	return out
}

// Close waits for posted transfers and stops the comm goroutine. It does not
// close the transport. Steps posted afterwards fail with ErrClosed.
func (x *Exec) Close() error {
	if x.closed {
		return x.Err()
	}
	x.closed = true
	x.inflight.Wait()
	if x.comm != nil {
		close(x.comm)
		<-x.commDone
	}
	return x.Err()
}

// valid reports whether stage is on this rank, micro in range, and slot a
