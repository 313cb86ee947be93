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

// Config configures one rank's Exec.
type Config struct {
	Rank int
	Spec Spec
	// Stages are the stages this rank holds, by stage index: exactly the s
	// with Spec.RankOf[s] == Rank.
	Stages map[int]Stage
	// Loss is required on the rank holding the last stage.
	Loss Loss
	// Data is required on the ranks that read micro-batches: those holding
	// the first stage of a route, the last one (unless Spec.ShipLabels
	// brings its labels from another rank), and mpipe's owners (Spec.Owned).
	Data DataSource
	// Transport is required when Spec.Ranks > 1; its Rank and World must
	// match. The Exec does not close it, but aborts it when the rank fails.
	Transport transport.Transport
	// OptStep, if set, runs at the OPT_STEP step (the optimizer update of this
	// rank's stages).
	OptStep func() error
	// SerialOverlap runs the two halves of every overlap step (OverlapFB,
	// OverlapBF) one after the other, in sub-step order, even when they are
	// on different stage objects. Set it when this rank's stages share state
	// that is not safe for concurrent use (tied weights, a shared workspace).
	SerialOverlap bool
	// Logger receives failures (Error) and lifecycle (Debug). Default: discard.
	Logger *slog.Logger
	// Timeline, if set, records when each stage call (Forward,
	// BackwardInput, BackwardWeight) starts and ends: the measured
	// timeline, which Timeline.WriteTrace writes as a Chrome trace. The
	// stages are wrapped for it; the step methods are unchanged, so it
	// costs nothing when nil. Ranks of one process may share one.
	Timeline *Timeline
}

// slotState is one buffer slot: the state of the chunk (stage, micro) it
// currently holds. The fields the step fast paths test come first (key,
// flags), then the chunk's tensors, then the receive hand-off with the comm
// goroutine.
type slotState struct {
	// key is keyOf(stage, micro) of the chunk the slot holds, 0 when it
	// holds none, so that one comparison checks "live and holds (stage,
	// micro)". Only a claim sets it, after checking that stage is on this
	// rank and micro in range: a slot whose key matches names a valid chunk.
	key   uint64
	flags slotFlags // host-only, like key

	// x is the loaded input until the chunk's F, which lets go of it (the
	// stage keeps what its backward needs in saved); y the output, kept
	// for SEND_F and a colocated next stage; dy, dx the gradients; saved
	// the stage's context (a Swapper's handle while swapped out).
	x, y, dy, dx, target *tensor.Dense
	saved                any

	// Receives: the host sets actPending/gradPending when posting and clears
	// it once it has waited; the comm goroutine stores the tensor in
	// ract/rgrad and then signals *Done (capacity 1, reused).
	ract, rgrad       *tensor.Dense
	actDone, gradDone chan struct{}
	// rdata/dataDone: the same for a DATA_RECV of the chunk's labels
	// (Spec.ShipLabels), flagged dataPending.
	rdata    *tensor.Dense
	dataDone chan struct{}

	_ [8]byte // to 128 bytes: slot addresses by shift, no multiply
}

// slotFlags is a slot's chunk progress.
type slotFlags uint8

const (
	fwdDone     slotFlags = 1 << iota // F ran
	inDone                            // I or B ran (dx valid)
	wDone                             // W or B ran
	actPending                        // a RecvAct is posted and not yet waited for
	gradPending                       // a RecvGrad is posted and not yet waited for
	swappedOut                        // the saved context is offloaded (a Swapper's handle)
	dataPending                       // a RecvData of the labels is posted and not yet waited for

	pending = actPending | gradPending | dataPending
)

// liveKey marks a chunk key; stage and micro take bits 32..62 and 0..30.
const liveKey = 1 << 63

// keyable reports whether keyOf(stage, micro) is exact (one-to-one): both
// are in [0, 2^31). New rejects Specs with more stages or micro-batches, so
// every valid chunk, and stage+1 of every valid stage, is keyable.
func keyable(stage, micro int) bool { return uint64(stage)|uint64(micro) < 1<<31 }

// keyOf packs a keyable (stage, micro) into a slot key.
func keyOf(stage, micro int) uint64 { return liveKey | uint64(stage)<<32 | uint64(micro) }

func (s *slotState) live() bool { return s.key != 0 }
func (s *slotState) stage() int { return int(s.key>>32) & math.MaxInt32 }
func (s *slotState) micro() int { return int(s.key) & math.MaxInt32 }

// start makes the slot hold the chunk of key k, empty.
func (s *slotState) start(k uint64) {
	s.key, s.flags = k, 0
	s.x, s.y, s.dy, s.dx, s.target, s.saved = nil, nil, nil, nil, nil, nil
	s.ract, s.rgrad, s.rdata = nil, nil, nil
}

func (s *slotState) clearChunk() { s.start(0) }

func (s *slotState) holds(stage, micro int) bool {
	return keyable(stage, micro) && s.key == keyOf(stage, micro)
}

// commOp is one posted transfer.
type commOp struct {
	recv         bool
	ch           transport.Channel
	kind         OpKind
	peer         int32
	stage, micro int32
	slot         int32
	t            *tensor.Dense // sends: the tensor captured at post time
}

// Exec executes one rank's steps. Its step methods must be called from one
// goroutine (the host thread); Err, Losses and Fail may be called from any.
type Exec struct {
	// Hot fields first: what every step reads.
	failed atomic.Bool
	slots  []slotState
	stages []Stage // by stage index; nil where not on this rank
	// raw is stages as the Config gave them (stages may be wrapped for a
	// Timeline): the optional interfaces (Swapper, Sharded, CopyGrads) are
	// looked up here.
	raw    []Stage
	micro  int // spec.Micro
	last   int
	copies int             // spec.Copies, 0 or 1 for one pipeline
	per    int             // stages per copy (Stages/copies)
	ends   []uint8         // per stage: routeStart|routeEnd bits
	losses []atomic.Uint64 // math.Float64bits of each micro's loss
	loss   Loss
	data   DataSource

	rank    int
	spec    Spec
	tr      transport.Transport
	optHook func() error
	log     *slog.Logger

	// prevPeer[s] and nextPeer[s]: the rank of stage s-1 and s+1 when a
	// transfer with it is valid (there is a transport and the stage is on
	// another rank); -1 otherwise. checkPeer explains a mismatch.
	prevPeer, nextPeer []int

	group         []int // stageGroups(stages): overlap halves on one group run one after the other
	serialOverlap bool

	mu  sync.Mutex
	err error

	// ownIn is the input an owner loaded for micro ownMicro (mpipe),
	// until SendInput ships it.
	ownIn    *tensor.Dense
	ownMicro int

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
		isFirst, isLast := s%per == 0, (s+1)%per == 0
		if isLast && cfg.Loss == nil {
			return nil, fmt.Errorf("pipe: rank %d holds the last stage (%d)%s but Config.Loss is nil", r, s, ofCopy)
		}
		// With shipped labels the last stage's rank reads no data, unless
		// the route also starts there (nothing to ship).
		if (isFirst || (isLast && (!sp.ShipLabels || sp.RankOf[s-per+1] == r))) && cfg.Data == nil {
			return nil, fmt.Errorf("pipe: rank %d holds the first or the last stage (%d)%s but Config.Data is nil", r, s, ofCopy)
		}
		if _, ok := stages[s].(CopyGrads); copies > 1 && !ok {
			return nil, fmt.Errorf("pipe: rank %d: stage %d is a %T, which does not implement pipe.CopyGrads (Grads() []*tensor.Dense): the schedule runs %d model copies, whose gradients OptStep sums", r, s, stages[s], copies)
		}
	}
	if r < sp.Owned && cfg.Data == nil {
		return nil, fmt.Errorf("pipe: rank %d owns micro-batch %d (Spec.Owned = %d, mpipe) but Config.Data is nil: an owner loads the input of the micro-batches it owns", r, r, sp.Owned)
	}
	if cfg.Transport != nil {
		if cfg.Transport.Rank() != r || cfg.Transport.World() != sp.Ranks {
			return nil, fmt.Errorf("pipe: rank %d of %d: transport is rank %d of %d", r, sp.Ranks, cfg.Transport.Rank(), cfg.Transport.World())
		}
		if fp, ok := cfg.Transport.(transport.Fingerprinter); ok && fp.Fingerprint() != sp.Fingerprint {
			return nil, fmt.Errorf("pipe: rank %d: transport checked schedule fingerprint %q with its peers, Spec has %q", r, fp.Fingerprint(), sp.Fingerprint)
		}
	} else if sp.Ranks > 1 {
		return nil, fmt.Errorf("pipe: rank %d: Config.Transport is nil but Spec has %d ranks", r, sp.Ranks)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	raw := stages
	if cfg.Timeline != nil {
		stages = cfg.Timeline.wrap(r, raw)
	}
	x := &Exec{
		rank: r, spec: sp, last: last, copies: copies, per: per, stages: stages, raw: raw, micro: sp.Micro,
		loss: cfg.Loss, data: cfg.Data, tr: cfg.Transport, optHook: cfg.OptStep, log: log,
		group: stageGroups(raw), serialOverlap: cfg.SerialOverlap,
		slots:  make([]slotState, sp.Slots[r]),
		losses: make([]atomic.Uint64, sp.Micro),
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

// Err returns the first error, or nil. It does not wait for posted comm ops;
// Sync does.
func (x *Exec) Err() error {
	if !x.failed.Load() {
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
	x.failed.Store(true)
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
	x.inflight.Wait()
	return x.Err()
}

// Reset prepares the next iteration: it waits for posted transfers, empties
// the slots and forgets the losses. A failure is not reset: an Exec that
// failed stays failed (its transport is aborted).
func (x *Exec) Reset() {
	x.inflight.Wait()
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
	for i := range x.losses {
		if x.losses[i].Load() != nanBits { // Load is cheaper than Store
			x.losses[i].Store(nanBits)
		}
	}
}

var nanBits = math.Float64bits(math.NaN())

// Losses returns a copy of the per-micro-batch losses of the current
// iteration, computed on the rank holding the last stage; NaN elsewhere and
// for micro-batches not (yet) computed.
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
// slot of this rank. It is the hot-path check; badArgs explains a failure.
func (x *Exec) valid(stage, micro, slot int) bool {
	return uint(stage) < uint(len(x.stages)) && x.stages[stage] != nil &&
		uint(micro) < uint(x.micro) && uint(slot) < uint(len(x.slots)) && x.onRoute(stage, micro)
}

// The bits of Exec.ends.
const (
	routeStart  uint8 = 1 << iota // the stage begins its micro-batches' route
	routeEnd                      // the stage ends it (computes their loss)
	loadsLabels                   // its DATA_LOAD loads the labels: routeEnd, or routeStart with Spec.ShipLabels
)

// routeFirst reports whether stage begins micro-batches' route: stage 0,
// or the first stage of a model copy. Any int is allowed.
func (x *Exec) routeFirst(stage int) bool {
	return uint(stage) < uint(len(x.ends)) && x.ends[stage]&routeStart != 0
}

// routeLast reports whether stage ends micro-batches' route (it computes
// their loss): the last stage, or the last stage of a model copy.
func (x *Exec) routeLast(stage int) bool {
	return uint(stage) < uint(len(x.ends)) && x.ends[stage]&routeEnd != 0
}

// onRoute reports whether micro-batch micro runs stage (always, for one
// pipeline). Both must be in range.
func (x *Exec) onRoute(stage, micro int) bool {
	return x.copies <= 1 || stage/x.per == micro/(x.micro/x.copies)
}

func (x *Exec) badArgs(k OpKind, stage, micro, slot, peer int) {
	var err error
	switch {
	case stage < 0 || stage >= len(x.stages):
		err = fmt.Errorf("stage %d outside [0, %d)", stage, len(x.stages))
	case x.stages[stage] == nil:
		err = fmt.Errorf("stage %d is on rank %d, not on this rank", stage, x.spec.RankOf[stage])
	case micro < 0 || micro >= x.micro:
		err = fmt.Errorf("micro-batch %d outside [0, %d)", micro, x.micro)
	case !x.onRoute(stage, micro):
		k := micro / (x.micro / x.copies)
		err = fmt.Errorf("micro-batch %d runs model copy %d (stages %d-%d), not stage %d", micro, k, k*x.per, (k+1)*x.per-1, stage)
	default:
		err = fmt.Errorf("slot %d outside [0, %d)", slot, len(x.slots))
	}
	x.stepFail(k, stage, micro, peer, err)
}

// claim makes slot s hold chunk (stage, micro), starting the chunk if the
// slot held another one.
// The caller has checked valid(stage, micro, slot).
func (x *Exec) claim(k OpKind, s *slotState, slot int, stage, micro int, peer int) bool {
	if s.holds(stage, micro) {
		return true
	}
	if s.flags&pending != 0 {
		x.stepFailf(k, stage, micro, peer, "slot %d still has a pending receive for chunk (stage %d, micro %d)", slot, s.stage(), s.micro())
		return false
	}
	s.start(keyOf(stage, micro))
	return true
}

func (x *Exec) notHeld(k OpKind, s *slotState, slot, stage, micro, peer int) {
	if !s.live() {
		x.stepFailf(k, stage, micro, peer, "slot %d holds no chunk (the chunk's first step did not run or used another slot)", slot)
		return
	}
	x.stepFailf(k, stage, micro, peer, "slot %d holds chunk (stage %d, micro %d)", slot, s.stage(), s.micro())
}

// post hands a transfer to the comm goroutine.
func (x *Exec) post(op commOp) bool {
	if x.closed {
		x.stepFail(op.kind, int(op.stage), int(op.micro), int(op.peer), ErrClosed)
		return false
	}
	x.inflight.Add(1)
	x.comm <- op
	return true
}

// checkPeer verifies a transfer's peer against the placement: want is the
// stage on the other end.
func (x *Exec) checkPeer(k OpKind, stage, micro, peer, other int) bool {
	if x.tr == nil {
		x.stepFailf(k, stage, micro, peer, "no transport")
		return false
	}
	if other < 0 || other > x.last || (other < stage && x.routeFirst(stage)) || (other > stage && x.routeLast(stage)) {
		x.stepFailf(k, stage, micro, peer, "stage %d has no neighbour stage %d", stage, other)
		return false
	}
	if want := x.spec.RankOf[other]; peer != want || peer == x.rank {
		x.stepFailf(k, stage, micro, peer, "peer rank %d, but stage %d is on rank %d", peer, other, want)
		return false
	}
	return true
}

// Every step method has a fast path and a slow path. The fast path tests, in
// as few comparisons as it can, that every check of the step passes, and
// only then changes state; when any check fails (or the step is unusual) it
// hands the unchanged state to the slow path, which runs the checks one by
// one, in order, and reports the first that fails. So both paths do exactly
// the same, and the fast path never has to explain an error. Every step
// method is go:noinline (see Backward).

// Load loads the input (stage 0, or the first stage of micro's model copy)
// and/or the labels (the last stage of micro's route) of micro into slot.
//
//go:noinline
func (x *Exec) Load(a At) {
	stage, micro, slot, _ := a.Fields()
	if x.failed.Load() {
		return
	}
	// stage begins or ends a route, so keyable; it is on this rank iff its
	// Stage is set, which a slot holding it already proves.
	var ends uint8
	if uint(stage) < uint(len(x.ends)) {
		ends = x.ends[stage]
	}
	if first, last := ends&routeStart != 0, ends&loadsLabels != 0; ends != 0 && uint(micro) < uint(x.micro) && uint(slot) < uint(len(x.slots)) {
		s := &x.slots[slot]
		k := keyOf(stage, micro)
		if s.key == k || (s.flags&pending == 0 && x.stages[stage] != nil && x.onRoute(stage, micro)) {
			if s.key != k {
				s.start(k)
			}
			if first {
				in, err := x.data.Input(micro)
				if err != nil || in == nil {
					x.dataFail(stage, micro, err, "input")
					return
				}
				s.x = in
			}
			if last {
				t, err := x.data.Target(micro)
				if err != nil || t == nil {
					x.dataFail(stage, micro, err, "target")
					return
				}
				s.target = t
			}
			return
		}
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, slot, _ = a.Unpack()
	x.dataLoadSlow(stage, micro, slot)
}

// DataLoad is Load with its arguments unpacked (stage, micro, slot), for
// hand-written programs and the interpreter; generated code calls Load.
func (x *Exec) DataLoad(stage, micro, slot int) {
	if a, ok := PackAt(stage, micro, slot, -1); ok {
		x.Load(a)
		return
	}
	x.unpackable(OpDataLoad, stage, micro, slot, -1)
}

func (x *Exec) dataLoadSlow(stage, micro, slot int) {
	if x.ownerLoad(stage, micro, slot) {
		return
	}
	if !x.valid(stage, micro, slot) {
		x.badArgs(OpDataLoad, stage, micro, slot, -1)
		return
	}
	if !x.routeFirst(stage) && !x.routeLast(stage) {
		x.stepFailf(OpDataLoad, stage, micro, -1, "only the first and the last stage of a model copy load data (stage 0 and %d for one pipeline)", x.last)
		return
	}
	s := &x.slots[slot]
	if !x.claim(OpDataLoad, s, slot, stage, micro, -1) {
		return
	}
	x.load(s, stage, micro)
}

// load is DataLoad once the slot holds the chunk.
func (x *Exec) load(s *slotState, stage, micro int) {
	if x.routeFirst(stage) {
		in, err := x.data.Input(micro)
		if err != nil || in == nil {
			x.dataFail(stage, micro, err, "input")
			return
		}
		s.x = in
	}
	if x.ends[stage]&loadsLabels != 0 {
		t, err := x.data.Target(micro)
		if err != nil || t == nil {
			x.dataFail(stage, micro, err, "target")
			return
		}
		s.target = t
	}
}

func (x *Exec) dataFail(stage, micro int, err error, what string) {
	if err == nil {
		err = errors.New("data source returned a nil " + what)
	}
	x.stepFail(OpDataLoad, stage, micro, -1, err)
}

// RecvF posts the receive of x of (stage, micro) from peer into slot.
//
//go:noinline
func (x *Exec) RecvF(a At) {
	stage, micro, peer, slot := a.Fields()
	if x.failed.Load() {
		return
	}
	if keyable(stage, micro) && uint(slot) < uint(len(x.slots)) && uint(stage) < uint(len(x.prevPeer)) &&
		peer >= 0 && x.prevPeer[stage] == peer {
		// Held: the key proves stage and micro valid; else claim: stage on
		// this rank, micro in range, no receive pending for the old chunk.
		s := &x.slots[slot]
		k := keyOf(stage, micro)
		if (s.key == k && s.flags&(actPending|fwdDone) == 0) ||
			(s.key != k && s.flags&pending == 0 && x.stages[stage] != nil && uint(micro) < uint(x.micro) && x.onRoute(stage, micro)) {
			if s.key != k {
				s.start(k)
			}
			s.flags |= actPending
			x.post(commOp{recv: true, ch: transport.Act, kind: OpRecvAct, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: int32(slot)})
			return
		}
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, peer, slot = a.Unpack()
	if !x.valid(stage, micro, slot) {
		x.badArgs(OpRecvAct, stage, micro, slot, peer)
		return
	}
	if !x.checkPeer(OpRecvAct, stage, micro, peer, stage-1) {
		return
	}
	s := &x.slots[slot]
	if !x.claim(OpRecvAct, s, slot, stage, micro, peer) {
		return
	}
	if s.flags&(actPending|fwdDone) != 0 {
		x.stepFailf(OpRecvAct, stage, micro, peer, "input of the chunk already received or used")
		return
	}
	s.flags |= actPending
	x.post(commOp{recv: true, ch: transport.Act, kind: OpRecvAct, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: int32(slot)})
}

// RecvAct is RecvF with its arguments unpacked (stage, micro, peer, slot), for
// hand-written programs and the interpreter; generated code calls RecvF.
func (x *Exec) RecvAct(stage, micro, peer, slot int) {
	if a, ok := PackAt(stage, micro, peer, slot); ok {
		x.RecvF(a)
		return
	}
	x.unpackable(OpRecvAct, stage, micro, peer, slot)
}

// SendF posts the send of y of (stage, micro) in slot to peer.
//
//go:noinline
func (x *Exec) SendF(a At) {
	stage, micro, peer, slot := a.Fields()
	if x.failed.Load() {
		return
	}
	if s := x.heldSlot(stage, micro, peer, slot, x.nextPeer); s != nil && s.y != nil {
		x.post(commOp{ch: transport.Act, kind: OpSendAct, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: int32(slot), t: s.y})
		return
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, peer, slot = a.Unpack()
	if !x.valid(stage, micro, slot) {
		x.badArgs(OpSendAct, stage, micro, slot, peer)
		return
	}
	if !x.checkPeer(OpSendAct, stage, micro, peer, stage+1) {
		return
	}
	s := &x.slots[slot]
	if !s.holds(stage, micro) {
		x.notHeld(OpSendAct, s, slot, stage, micro, peer)
		return
	}
	if s.y == nil {
		x.stepFailf(OpSendAct, stage, micro, peer, "no output in slot %d: F(%d, %d) has not run", slot, stage, micro)
		return
	}
	x.post(commOp{ch: transport.Act, kind: OpSendAct, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: int32(slot), t: s.y})
}

// SendAct is SendF with its arguments unpacked (stage, micro, peer, slot), for
// hand-written programs and the interpreter; generated code calls SendF.
func (x *Exec) SendAct(stage, micro, peer, slot int) {
	if a, ok := PackAt(stage, micro, peer, slot); ok {
		x.SendF(a)
		return
	}
	x.unpackable(OpSendAct, stage, micro, peer, slot)
}

// heldSlot is the common fast-path check of SendAct, RecvGrad and SendGrad:
// slot holds (stage, micro) and peer is the rank peers[stage] (x.nextPeer or
// x.prevPeer). It returns the slot, or nil.
func (x *Exec) heldSlot(stage, micro, peer, slot int, peers []int) *slotState {
	if !keyable(stage, micro) || uint(slot) >= uint(len(x.slots)) || uint(stage) >= uint(len(peers)) ||
		peer < 0 || peers[stage] != peer {
		return nil
	}
	if s := &x.slots[slot]; s.key == keyOf(stage, micro) {
		return s
	}
	return nil
}

// RecvB posts the receive of dy of (stage, micro) from peer into slot.
//
//go:noinline
func (x *Exec) RecvB(a At) {
	stage, micro, peer, slot := a.Fields()
	if x.failed.Load() {
		return
	}
	if s := x.heldSlot(stage, micro, peer, slot, x.nextPeer); s != nil && s.flags&(gradPending|inDone) == 0 {
		s.flags |= gradPending
		x.post(commOp{recv: true, ch: transport.Grad, kind: OpRecvGrad, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: int32(slot)})
		return
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, peer, slot = a.Unpack()
	if !x.valid(stage, micro, slot) {
		x.badArgs(OpRecvGrad, stage, micro, slot, peer)
		return
	}
	if !x.checkPeer(OpRecvGrad, stage, micro, peer, stage+1) {
		return
	}
	s := &x.slots[slot]
	if !s.holds(stage, micro) {
		x.notHeld(OpRecvGrad, s, slot, stage, micro, peer)
		return
	}
	if s.flags&(gradPending|inDone) != 0 {
		x.stepFailf(OpRecvGrad, stage, micro, peer, "output gradient of the chunk already received or used")
		return
	}
	s.flags |= gradPending
	x.post(commOp{recv: true, ch: transport.Grad, kind: OpRecvGrad, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: int32(slot)})
}

// RecvGrad is RecvB with its arguments unpacked (stage, micro, peer, slot), for
// hand-written programs and the interpreter; generated code calls RecvB.
func (x *Exec) RecvGrad(stage, micro, peer, slot int) {
	if a, ok := PackAt(stage, micro, peer, slot); ok {
		x.RecvB(a)
		return
	}
	x.unpackable(OpRecvGrad, stage, micro, peer, slot)
}

// SendB posts the send of dx of (stage, micro) in slot to peer.
//
//go:noinline
func (x *Exec) SendB(a At) {
	stage, micro, peer, slot := a.Fields()
	if x.failed.Load() {
		return
	}
	if s := x.heldSlot(stage, micro, peer, slot, x.prevPeer); s != nil && s.dx != nil {
		x.post(commOp{ch: transport.Grad, kind: OpSendGrad, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: int32(slot), t: s.dx})
		return
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, peer, slot = a.Unpack()
	if !x.valid(stage, micro, slot) {
		x.badArgs(OpSendGrad, stage, micro, slot, peer)
		return
	}
	if !x.checkPeer(OpSendGrad, stage, micro, peer, stage-1) {
		return
	}
	s := &x.slots[slot]
	if !s.holds(stage, micro) {
		x.notHeld(OpSendGrad, s, slot, stage, micro, peer)
		return
	}
	if s.dx == nil {
		x.stepFailf(OpSendGrad, stage, micro, peer, "no input gradient in slot %d: B or I of (%d, %d) has not run", slot, stage, micro)
		return
	}
	x.post(commOp{ch: transport.Grad, kind: OpSendGrad, peer: int32(peer), stage: int32(stage), micro: int32(micro), slot: int32(slot), t: s.dx})
}

// SendGrad is SendB with its arguments unpacked (stage, micro, peer, slot), for
// hand-written programs and the interpreter; generated code calls SendB.
func (x *Exec) SendGrad(stage, micro, peer, slot int) {
	if a, ok := PackAt(stage, micro, peer, slot); ok {
		x.SendB(a)
		return
	}
	x.unpackable(OpSendGrad, stage, micro, peer, slot)
}

// F runs F(stage, micro) into slot. Its input is y of slot src (the
// previous stage on this rank) when src >= 0; otherwise the slot's loaded
// input (stage 0) or completed receive. On the last stage it also computes
// the loss and keeps dy.
//
//go:noinline
func (x *Exec) F(a At) {
	stage, micro, slot, src := a.Fields()
	if src == atNone {
		src = -1
	}
	if x.failed.Load() {
		return
	}
	if keyable(stage, micro) && uint(slot) < uint(len(x.slots)) {
		s := &x.slots[slot]
		k := keyOf(stage, micro)
		var in *tensor.Dense
		var ends uint8 // x.ends[stage], read once stage is known valid
		if src >= 0 {
			// Slot src holding (stage-1, micro) proves micro valid; stage
			// must be on this rank, and the slot free to claim (no pending
			// receive) or holding the chunk before its F.
			if uint(src) < uint(len(x.slots)) && src != slot && stage > 0 && uint(stage) < uint(len(x.ends)) {
				if p := &x.slots[src]; p.key == keyOf(stage-1, micro) && x.stages[stage] != nil &&
					((s.key == k && s.flags&fwdDone == 0) || (s.key != k && s.flags&pending == 0)) {
					in, ends = p.y, x.ends[stage]
				}
			}
		} else if s.key == k && s.flags&(fwdDone|actPending) == 0 && uint(stage) < uint(len(x.ends)) {
			// The slot holding (stage, micro) proves both valid. A pending
			// receive takes the slow path, which waits for it.
			if ends = x.ends[stage]; ends&routeStart != 0 {
				in = s.x
			} else {
				in = s.ract
			}
		}
		// The last stage's F needs the labels, which only a DataLoad into
		// the slot already holding the chunk can have put there.
		last := ends&routeEnd != 0
		if in != nil && (!last || (s.key == k && s.target != nil)) {
			if s.key != k {
				s.start(k)
			} else if src < 0 && ends&routeStart == 0 {
				s.ract = nil
			}
			y, saved, err := x.stages[stage].Forward(in)
			if err != nil || y == nil {
				x.forwardFail(stage, micro, err)
				return
			}
			// The input is the stage's to keep (in saved) or drop: the
			// slot lets go of it, so a swapped-out chunk leaves nothing
			// of its own behind.
			s.x, s.y, s.saved = nil, y, saved
			s.flags |= fwdDone
			if last {
				loss, dy, err := x.loss.Loss(y, s.target)
				if err != nil || dy == nil {
					x.lossFail(stage, micro, err)
					return
				}
				x.losses[micro].Store(math.Float64bits(loss))
				s.dy = dy
			}
			return
		}
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, slot, src = a.Unpack()
	x.forwardSlow(stage, micro, slot, src)
}

// Forward is F with its arguments unpacked (stage, micro, slot, src), for
// hand-written programs and the interpreter; generated code calls F.
func (x *Exec) Forward(stage, micro, slot, src int) {
	if a, ok := PackAt(stage, micro, slot, src); ok {
		x.F(a)
		return
	}
	x.unpackable(OpForward, stage, micro, slot, src)
}

func (x *Exec) forwardFail(stage, micro int, err error) {
	if err == nil {
		err = errors.New("stage returned a nil output")
	}
	x.stepFail(OpForward, stage, micro, -1, err)
}

func (x *Exec) lossFail(stage, micro int, err error) {
	if err == nil {
		err = errors.New("loss returned a nil gradient")
	}
	x.stepFail(OpForward, stage, micro, -1, fmt.Errorf("loss: %w", err))
}

func (x *Exec) forwardSlow(stage, micro, slot, src int) {
	if !x.valid(stage, micro, slot) {
		x.badArgs(OpForward, stage, micro, slot, -1)
		return
	}
	s := &x.slots[slot]
	var in *tensor.Dense
	switch {
	case src >= 0:
		if src >= len(x.slots) || src == slot {
			x.stepFailf(OpForward, stage, micro, -1, "source slot %d invalid (slot %d, %d slots)", src, slot, len(x.slots))
			return
		}
		if x.routeFirst(stage) {
			x.stepFailf(OpForward, stage, micro, -1, "source slot %d, but stage %d begins its micro-batches' route: its input is a data load", src, stage)
			return
		}
		p := &x.slots[src]
		if !p.holds(stage-1, micro) || p.y == nil {
			x.stepFailf(OpForward, stage, micro, -1, "source slot %d holds no output of F(%d, %d)", src, stage-1, micro)
			return
		}
		if !x.claim(OpForward, s, slot, stage, micro, -1) {
			return
		}
		in = p.y
	case x.routeFirst(stage):
		if !s.holds(stage, micro) || (s.x == nil && s.flags&actPending == 0 && s.ract == nil) {
			if x.owner(micro) >= 0 && x.owner(micro) != x.rank {
				x.stepFailf(OpForward, stage, micro, -1, "no input in slot %d: RecvInput(%d, %d) from its owner, rank %d, into it was not posted", slot, stage, micro, x.owner(micro))
				return
			}
			x.stepFailf(OpForward, stage, micro, -1, "no input in slot %d: DataLoad(0, %d) into it has not run", slot, micro)
			return
		}
		if in = x.takeInput(s); in == nil {
			return // the receive failed: the rank has failed
		}
	default:
		if !s.holds(stage, micro) || (s.flags&actPending == 0 && s.ract == nil) {
			x.stepFailf(OpForward, stage, micro, -1, "no input in slot %d: RecvAct(%d, %d) into it was not posted", slot, stage, micro)
			return
		}
		if s.flags&actPending != 0 {
			<-s.actDone
			s.flags &^= actPending
			if x.failed.Load() {
				return
			}
		}
		in, s.ract = s.ract, nil
	}
	if s.flags&fwdDone != 0 {
		x.stepFailf(OpForward, stage, micro, -1, "F already ran for this chunk")
		return
	}
	x.forward(s, slot, stage, micro, in)
}

// forward runs the checked F of the chunk (stage, micro) in s (slot) on
// input in.
func (x *Exec) forward(s *slotState, slot, stage, micro int, in *tensor.Dense) {
	y, saved, err := x.stages[stage].Forward(in)
	if err != nil || y == nil {
		x.forwardFail(stage, micro, err)
		return
	}
	s.x, s.y, s.saved = nil, y, saved // as in F: the slot lets go of the input
	s.flags |= fwdDone
	if x.routeLast(stage) {
		if s.flags&dataPending != 0 && !x.takeLabels(s) {
			return
		}
		if s.target == nil {
			x.stepFailf(OpForward, stage, micro, -1, "no labels in slot %d: DataLoad(%d, %d) into it has not run", slot, stage, micro)
			return
		}
		loss, dy, err := x.loss.Loss(y, s.target)
		if err != nil || dy == nil {
			x.lossFail(stage, micro, err)
			return
		}
		x.losses[micro].Store(math.Float64bits(loss))
		s.dy = dy
	}
}

// B runs the full backward B(stage, micro) of the chunk in slot: input
// gradient, then weight gradient. dy is dx of slot src (the next stage on
// this rank) when src >= 0; otherwise the completed receive, or on the last
// stage the loss gradient.
//
// The step methods are kept out of line (go:noinline) on purpose: generated
// rank functions hold hundreds of thousands of calls, and inlining even a
// small wrapper into each multiplies the compiler's work. Their fast paths
// are small enough now that the compiler would otherwise inline some.
//
//go:noinline
func (x *Exec) B(a At) {
	stage, micro, slot, src := a.Fields()
	if src == atNone {
		src = -1
	}
	if x.failed.Load() {
		return
	}
	// A slot holding (stage, micro) proves both valid.
	if keyable(stage, micro) && uint(slot) < uint(len(x.slots)) {
		if s := &x.slots[slot]; s.key == keyOf(stage, micro) && s.flags&(fwdDone|inDone|swappedOut) == fwdDone {
			if dy := x.fastDy(s, stage, micro, slot, src); dy != nil {
				sg := x.stages[stage]
				dx, err := sg.BackwardInput(s.saved, dy)
				if err != nil {
					x.stepFail(OpBackward, stage, micro, -1, err)
					return
				}
				s.dy, s.dx = dy, dx
				s.flags |= inDone
				if err := sg.BackwardWeight(s.saved, dy); err != nil {
					x.stepFail(OpBackward, stage, micro, -1, err)
					return
				}
				s.flags |= wDone
				s.x, s.y, s.dy, s.saved = nil, nil, nil, nil
				return
			}
		}
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, slot, src = a.Unpack()
	x.backwardSlow(OpBackward, stage, micro, slot, src)
}

// Backward is B with its arguments unpacked (stage, micro, slot, src), for
// hand-written programs and the interpreter; generated code calls B.
func (x *Exec) Backward(stage, micro, slot, src int) {
	if a, ok := PackAt(stage, micro, slot, src); ok {
		x.B(a)
		return
	}
	x.unpackable(OpBackward, stage, micro, slot, src)
}

// I runs I(stage, micro): the input gradient only. dy as for
// Backward. BackwardWeight must follow for the weight gradient.
//
//go:noinline
func (x *Exec) I(a At) {
	stage, micro, slot, src := a.Fields()
	if src == atNone {
		src = -1
	}
	if x.failed.Load() {
		return
	}
	if keyable(stage, micro) && uint(slot) < uint(len(x.slots)) {
		if s := &x.slots[slot]; s.key == keyOf(stage, micro) && s.flags&(fwdDone|inDone|swappedOut) == fwdDone {
			if dy := x.fastDy(s, stage, micro, slot, src); dy != nil {
				dx, err := x.stages[stage].BackwardInput(s.saved, dy)
				if err != nil {
					x.stepFail(OpBackwardInput, stage, micro, -1, err)
					return
				}
				s.dy, s.dx = dy, dx
				s.flags |= inDone
				return
			}
		}
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, slot, src = a.Unpack()
	x.backwardSlow(OpBackwardInput, stage, micro, slot, src)
}

// BackwardInput is I with its arguments unpacked (stage, micro, slot, src), for
// hand-written programs and the interpreter; generated code calls I.
func (x *Exec) BackwardInput(stage, micro, slot, src int) {
	if a, ok := PackAt(stage, micro, slot, src); ok {
		x.I(a)
		return
	}
	x.unpackable(OpBackwardInput, stage, micro, slot, src)
}

// fastDy returns the output gradient for the backward of the chunk (stage,
// micro) that s = &x.slots[slot] holds, between its F and its backward, with
// source slot src; nil when the slow path must find it (an error, or a
// receive still to wait for). It consumes a completed receive.
func (x *Exec) fastDy(s *slotState, stage, micro, slot, src int) *tensor.Dense {
	switch {
	case src >= 0:
		if uint(src) < uint(len(x.slots)) && src != slot {
			if p := &x.slots[src]; p.key == keyOf(stage+1, micro) {
				return p.dx
			}
		}
		return nil
	case x.routeLast(stage):
		return s.dy
	case s.flags&gradPending != 0:
		return nil
	}
	dy := s.rgrad
	s.rgrad = nil
	return dy
}

// backward runs B or I (k) by its method.
func (x *Exec) backward(k OpKind, stage, micro, slot, src int) {
	if k == OpBackward {
		x.Backward(stage, micro, slot, src)
	} else {
		x.BackwardInput(stage, micro, slot, src)
	}
}

// heldChunk returns the slot holding chunk (stage, micro) for step k of
// this rank (no peer), or nil after reporting why there is none: arguments
// no valid step has, or a slot holding another chunk (or none).
func (x *Exec) heldChunk(k OpKind, stage, micro, slot int) *slotState {
	if !x.valid(stage, micro, slot) {
		x.badArgs(k, stage, micro, slot, -1)
		return nil
	}
	s := &x.slots[slot]
	if !s.holds(stage, micro) {
		x.notHeld(k, s, slot, stage, micro, -1)
		return nil
	}
	return s
}

func (x *Exec) backwardSlow(k OpKind, stage, micro, slot, src int) {
	s := x.heldChunk(k, stage, micro, slot)
	if s == nil {
		return
	}
	if s.flags&(fwdDone|inDone) != fwdDone {
		x.stepFailf(k, stage, micro, -1, "chunk in slot %d is not between its F and its backward (F ran: %v, backward ran: %v)", slot, s.flags&fwdDone != 0, s.flags&inDone != 0)
		return
	}
	if s.flags&swappedOut != 0 {
		x.stepFailf(k, stage, micro, -1, "the chunk's saved activations are swapped out: SWAP_LAUNCH_LOAD of (%d, %d) must come first", stage, micro)
		return
	}
	var dy *tensor.Dense
	switch {
	case src >= 0:
		if src >= len(x.slots) || src == slot {
			x.stepFailf(k, stage, micro, -1, "source slot %d invalid (slot %d, %d slots)", src, slot, len(x.slots))
			return
		}
		if x.routeLast(stage) {
			x.stepFailf(k, stage, micro, -1, "source slot %d, but stage %d ends its micro-batches' route: its output gradient is the loss's", src, stage)
			return
		}
		p := &x.slots[src]
		if !p.holds(stage+1, micro) || p.dx == nil {
			x.stepFailf(k, stage, micro, -1, "source slot %d holds no input gradient of (%d, %d)", src, stage+1, micro)
			return
		}
		dy = p.dx
	case x.routeLast(stage):
		dy = s.dy
	default:
		if s.flags&gradPending == 0 && s.rgrad == nil {
			x.stepFailf(k, stage, micro, -1, "no output gradient in slot %d: RecvGrad(%d, %d) into it was not posted", slot, stage, micro)
			return
		}
		if s.flags&gradPending != 0 {
			<-s.gradDone
			s.flags &^= gradPending
			if x.failed.Load() {
				return
			}
		}
		dy, s.rgrad = s.rgrad, nil
	}
	x.backwardRun(k, s, stage, micro, dy)
}

// backwardRun runs the checked B or I of the chunk (stage, micro) in s with
// output gradient dy.
func (x *Exec) backwardRun(k OpKind, s *slotState, stage, micro int, dy *tensor.Dense) {
	sg := x.stages[stage]
	dx, err := sg.BackwardInput(s.saved, dy)
	if err != nil {
		x.stepFail(k, stage, micro, -1, err)
		return
	}
	s.dy, s.dx = dy, dx
	s.flags |= inDone
	if k == OpBackward {
		if err := sg.BackwardWeight(s.saved, dy); err != nil {
			x.stepFail(k, stage, micro, -1, err)
			return
		}
		s.flags |= wDone
		s.x, s.y, s.dy, s.saved = nil, nil, nil, nil
	}
}

// W runs W(stage, micro): the weight gradient of a chunk whose I
// ran.
//
//go:noinline
func (x *Exec) W(a At) {
	stage, micro, slot, _ := a.Fields()
	if x.failed.Load() {
		return
	}
	if keyable(stage, micro) && uint(slot) < uint(len(x.slots)) {
		if s := &x.slots[slot]; s.key == keyOf(stage, micro) && s.flags&(inDone|wDone|swappedOut) == inDone {
			x.backwardWeight(s, stage, micro)
			return
		}
	}
	// The slow path reports with the fields as given (0xffff as -1).
	stage, micro, slot, _ = a.Unpack()
	s := x.heldChunk(OpBackwardWeight, stage, micro, slot)
	if s == nil {
		return
	}
	if s.flags&(inDone|wDone) == inDone {
		x.stepFailf(OpBackwardWeight, stage, micro, -1, "the chunk's saved activations are swapped out: SWAP_LAUNCH_LOAD of (%d, %d) must come first", stage, micro)
		return
	}
	x.stepFailf(OpBackwardWeight, stage, micro, -1, "chunk in slot %d is not between its I and its W (I ran: %v, W ran: %v)", slot, s.flags&inDone != 0, s.flags&wDone != 0)
}

// BackwardWeight is W with its arguments unpacked (stage, micro, slot), for
// hand-written programs and the interpreter; generated code calls W.
func (x *Exec) BackwardWeight(stage, micro, slot int) {
	if a, ok := PackAt(stage, micro, slot, -1); ok {
		x.W(a)
		return
	}
	x.unpackable(OpBackwardWeight, stage, micro, slot, -1)
}

func (x *Exec) backwardWeight(s *slotState, stage, micro int) {
	if err := x.stages[stage].BackwardWeight(s.saved, s.dy); err != nil {
		x.stepFail(OpBackwardWeight, stage, micro, -1, err)
		return
	}
	s.flags |= wDone
	s.x, s.y, s.dy, s.saved = nil, nil, nil, nil
}

// OptStep runs the optimizer hook, if any; with two model copies
// (Spec.Copies = 2) it first sums their gradients (see CopyGrads).
//
//go:noinline
func (x *Exec) OptStep() {
	if x.failed.Load() {
		return
	}
	if x.copies > 1 {
		if err := x.syncCopies(); err != nil {
			x.stepFail(OpOptStep, 0, 0, -1, fmt.Errorf("summing the model copies' gradients: %w", err))
			return
		}
	}
	if x.optHook == nil {
		return
	}
	if err := x.optHook(); err != nil {
		x.stepFail(OpOptStep, 0, 0, -1, err)
	}
}

// commLoop is the rank's comm stream: it runs posted transfers one at a time
// in program order.
func (x *Exec) commLoop() {
	defer close(x.commDone)
	for op := range x.comm {
		x.runComm(&op)
		x.inflight.Done()
	}
}

func (x *Exec) runComm(op *commOp) {
	if !op.recv {
		if !x.failed.Load() {
			if err := x.tr.Send(int(op.peer), op.ch, transport.Tag{Stage: op.stage, Micro: op.micro}, op.t); err != nil {
				x.stepFail(op.kind, int(op.stage), int(op.micro), int(op.peer), err)
			}
		}
		return
	}
	s := &x.slots[op.slot]
	var got *tensor.Dense
	if !x.failed.Load() {
		want := transport.Tag{Stage: op.stage - 1, Micro: op.micro}
		switch {
		case op.ch == transport.Grad:
			want.Stage = op.stage + 1
		case op.kind == OpRecvInput:
			want.Stage = op.stage // an owner's input for this stage
		}
		tag, t, err := x.tr.Recv(int(op.peer), op.ch)
		if err == nil && tag != want {
			err = fmt.Errorf("received the %s of stage %d micro %d, expected stage %d micro %d (ranks run different schedules?)",
				op.ch, tag.Stage, tag.Micro, want.Stage, want.Micro)
		}
		if err != nil {
			x.stepFail(op.kind, int(op.stage), int(op.micro), int(op.peer), err)
		} else {
			got = t
		}
	}
	switch {
	case op.kind == OpRecvData:
		s.rdata = got
		s.dataDone <- struct{}{}
	case op.ch != transport.Grad:
		s.ract = got
		s.actDone <- struct{}{}
	default:
		s.rgrad = got
		s.gradDone <- struct{}{}
	}
}

// unpackable reports a step called through an unpacked method (Forward,
// SendAct, ...) with an argument that has no At field: below -1 or above
// 65534, so outside every valid Spec. It names the argument as the slow paths
// would.
func (x *Exec) unpackable(k OpKind, stage, micro, c, d int) {
	if x.failed.Load() {
		return
	}
	slot, peer, src := c, -1, d
	comm, other := true, stage+1 // other: the neighbour stage of a transfer
	switch k {
	case OpRecvAct, OpSendGrad:
		slot, peer, src, other = d, c, -1, stage-1
	case OpSendAct, OpRecvGrad:
		slot, peer, src = d, c, -1
	default:
		comm = false
	}
	switch {
	case !x.valid(stage, micro, slot):
		x.badArgs(k, stage, micro, slot, peer)
	case comm && !x.checkPeer(k, stage, micro, peer, other):
	case src < -1 || src >= len(x.slots):
		x.stepFailf(k, stage, micro, peer, "source slot %d invalid (slot %d, %d slots)", src, slot, len(x.slots))
	default:
		x.stepFailf(k, stage, micro, peer, "arguments (%d, %d, %d, %d) outside what any step can take", stage, micro, c, d)
	}
}
