package verify

import (
	"fmt"
	"sync"

	"github.com/ppgen/ppgen/abi"

	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/internal/strict"
	"github.com/ppgen/ppgen/gen/ir"
)

// Options configures Check.
type Options struct {
	// MaxActivations bounds the number of live chunks (activations kept from
	// a chunk's F to its last backward) on any rank; 0 means unlimited.
	MaxActivations int
	// Beside, when not nil, is work of the caller's that Check runs once:
	// on the core its deadlock simulation, which is serial, leaves idle
	// once the FIFO and slot checks beside it are done (on a goroutine of Check's
	// own, done before Check returns), or else before Check returns. It
	// must not write what Check reads (the program). gen measures the
	// lowered program's slot counts and receive distances here.
	Beside func()
}

// Report describes a checked program. Fields a failed check did not reach
// are left empty.
type Report struct {
	// Lowered is true when the program holds transfers; a program without
	// any is checked as compute-only.
	Lowered bool
	// ForwardOnly is true for a forward-only program (ir.Program.ForwardOnly:
	// evaluation or inference): no chunk needs a backward, and a chunk is
	// live only at its F.
	ForwardOnly bool
	Steps       int // steps on all ranks
	Transfers   int // transfer steps on all ranks
	// Batches is the number of batches (BATCH_BEGIN .. BATCH_END) of more
	// than one transfer.
	Batches int
	// PeakActivations is, per rank, the most chunks live at once (rounded
	// up where a selectively recomputed chunk counts a share: PeakLive).
	PeakActivations []int
	// PeakLive is, per rank, the most chunks live at once, where a chunk of
	// a stage that recomputes a share f of its layers (ir.Program's
	// RecomputeShare) counts 1 − f from its F to its RECOMPUTE.
	PeakLive []float64
	// Slots is, per rank, one more than the largest slot used (0 when the
	// program has no slots assigned).
	Slots []int
	// PeakUnsharded is, per rank, the most stages unsharded at once (FSDP);
	// nil when the program has no FSDP steps.
	PeakUnsharded []int
}

// Per-chunk step tables: at[a][stage*M+micro] is the index of that step on
// its rank (every step of a chunk runs on its stage's rank), or -1.
const (
	aF = iota
	aBwd
	aW
	aLoad
	aSendF
	aRecvF
	aSendB
	aRecvB
	aDSend
	aDRecv
	aMSend // MPIPE_FWD_SEND on the micro's owner
	aMRecv // MPIPE_FWD_RECV on the first stage's rank
	aOLoad // DATA_LOAD of an owned micro on its owner (ir.Program.OwnerStep)
	nAt
)

// atOf returns the step table of kind k (aF, ...), or -1: one load, as
// the walk asks it of every step.
func atOf(k ir.Kind) int { return int(atTable[k]) }

var atTable = func() (t [256]int8) {
	for k := range t {
		t[k] = -1
	}
	for k, a := range map[ir.Kind]int8{
		ir.Forward: aF, ir.Backward: aBwd, ir.BackwardInput: aBwd, ir.BackwardWeight: aW,
		ir.DataLoad: aLoad, ir.SendF: aSendF, ir.RecvF: aRecvF, ir.SendB: aSendB, ir.RecvB: aRecvB,
		ir.DataSend: aDSend, ir.DataRecv: aDRecv, ir.MpipeSend: aMSend, ir.MpipeRecv: aMRecv,
	} {
		t[k] = a
	}
	return t
}()

type checker struct {
	p       ir.Program
	opt     Options
	P, S, M int
	rankOf  []int
	lowered bool
	// single: one pipeline (Copies ≤ 1), every route is 0..S-1.
	single bool
	// forwardOnly: ir.Program.ForwardOnly (no backward is expected).
	forwardOnly bool
	// fsdpReduce: the program holds REDUCE_GRAD steps (see fsdpWalk).
	fsdpReduce bool
	// swapState is, per chunk, its swap state (swap.go); nil when the
	// program has no swap steps. Each chunk is its rank's alone.
	swapState []uint8
	hasData   bool
	// mpipeRecv: the program holds MPIPE_FWD_RECV steps (towerModel).
	mpipeRecv bool
	at        [nAt][]int32
	bwdIsI    []bool // per chunk: its backward is an I
	// opAt[a][chunk]: op id of the transfer in table a (aSendF..aDRecv)
	opAt [nAt][]int32
	// comm ops in (rank, index) order: the ids gen/internal/strict uses
	opRank    []int32
	opIdx     []int32
	opStep    []opStep // what match reads of each op's step (opStep)
	opPartner []int32  // set by match
	// pairIdx numbers the (source, destination) rank pairs of match's
	// queues when there are too many ranks for a P×P table (nil: dense).
	pairIdx map[uint64]int32
	// per rank
	lastCompute []int32
	optAt       []int32
	// the strict model of a lowered program, built during the walk
	model   *strict.Model
	hostIdx []int32 // global host step -> index on its rank
	// hasTie: the program holds TIE_GRAD steps; tieSteps are they, for
	// the strict model (tie.go)
	hasTie   bool
	tieSteps []tieStep
	// holds[k]: the program holds a step of kind k, which has a rule
	// (rule.go); ruleState is the rules' own state, by kind.
	holds     [64]bool
	ruleState map[ir.Kind]any
	// dropAtF, when not nil: per chunk, the parts of it (chunkParts a
	// whole chunk) its F drops, which a later step of its rank rebuilds (a
	// rule's prepare sets it): all of them when the F keeps only the
	// stage's input, so the chunk is not live from its F to that step.
	dropAtF []int
	// collSteps are, per collective kind (abi's IsCollective: ALL_REDUCE)
	// and rank, the indices of its steps of the kind (filled by the walk;
	// collective.go); nil for a kind without steps
	collSteps map[abi.Kind][][]int
	// slots: per chunk its slot and live interval; chunk starts in walk order
	slotted bool
	spans   []chunkSpan // per chunk
	starts  [][]int32   // per rank
	// deferred findings, reported by priority after the walk
	order   deferred // first precondition failure
	slotErr deferred // first slot inconsistency
	noSlot  deferred // first chunk step without a slot
	memErr  *Error
	// slotsEarly: match ran the slot check beside the deadlock
	// simulation, and slotsErr is its finding (Check reports it last).
	slotsEarly bool
	slotsErr   error
	rep        Report
	sc         *scratch
	// beside runs Options.Beside the first time it is called, then nothing.
	beside func()
}

// scratch holds the checker's largest buffers from one Check to the next
// (scratchKeep): the per-chunk tables, the per-step and per-op arrays of
// the strict model and its simulation, and the rank walks' waits, some 9 MB for a lowering at
// P = 64, M = 256, which would otherwise be allocated, cleared and
// collected every time. Check hands them back when it returns: neither its
// Report nor its errors hold them.
type scratch struct {
	block, starts                               []int32
	spans                                       []chunkSpan
	hostIdx, waitOff, opRank, opIdx, opGap, ord []int32
	opStep                                      []opStep
	partner                                     []int32
	waits                                       []strict.Event
	rankWaits                                   [][]strict.Event
	sim                                         *strict.Sim // runModel's
}

var scratchKeep par.Keep[scratch]

// deferred remembers the first failure in (rank, index) order; fn builds
// its error once the walk has filled every table (for "comes later at step k").
type deferred struct {
	rank, index int
	fn          func() error
}

func (d *deferred) note(r, i int, fn func() error) {
	if d.fn == nil || r < d.rank || (r == d.rank && i < d.index) {
		d.rank, d.index, d.fn = r, i, fn
	}
}

// Check verifies p (see the package documentation for what it checks) and
// returns a report and the first problem found: an *Error, or a
// *DeadlockError when the program would hang.
func Check(p ir.Program, opt Options) (Report, error) {
	sc := scratchKeep.Take()
	if sc == nil {
		sc = new(scratch)
	}
	defer scratchKeep.Put(sc) // nothing Check returns holds them
	c := &checker{p: p, opt: opt, forwardOnly: p.ForwardOnly(), sc: sc}
	c.beside = func() {}
	if f := opt.Beside; f != nil {
		c.beside = sync.OnceFunc(f)
		defer c.beside() // when the simulation did not run it
	}
	c.rep.ForwardOnly = c.forwardOnly
	// One walk over the steps checks their structure (returning at once on
	// a malformed step), fills the chunk tables, checks preconditions, builds
	// the strict model and collects peaks and slot intervals; the rest runs
	// on chunks and transfers. Findings are reported in this priority:
	// structure, order, completeness, matching, deadlock, memory, slots.
	if err := c.walk(); err != nil {
		return c.rep, err
	}
	if c.order.fn != nil {
		return c.rep, c.order.fn()
	}
	if err := c.optSteps(); err != nil {
		return c.rep, err
	}
	if err := c.complete(); err != nil {
		return c.rep, err
	}
	// The kinds' own rules (rule.go): TIE_GRAD's, ALL_REDUCE's,
	// RECOMPUTE's, in kind order.
	if err := c.ruleChecks(); err != nil {
		return c.rep, err
	}
	deadlock := c.deadlock
	if c.lowered {
		beside, err := c.match()
		if err != nil {
			return c.rep, err
		}
		if beside != nil {
			deadlock = beside // match ran it already (or runs it still)
		}
	}
	if err := deadlock(); err != nil {
		return c.rep, err
	}
	if c.memErr != nil {
		return c.rep, c.memErr
	}
	if !c.slotsEarly {
		c.slotsErr = c.slots()
	}
	if c.slotsErr != nil {
		return c.rep, c.slotsErr
	}
	return c.rep, nil
}

func (c *checker) fail(r, i int, st ir.Step, code Code, format string, args ...any) *Error {
	return &Error{Rank: r, Index: i, Step: st, Code: code, Reason: fmt.Sprintf(format, args...)}
}

// route is c.p.Route, without the arithmetic for one pipeline (it
// inlines: the walk asks it up to three times a step).
func (c *checker) route(m int) (first, last int) {
	if c.single {
		return 0, c.S - 1
	}
	return c.copyRoute(m)
}

//go:noinline
func (c *checker) copyRoute(m int) (first, last int) { return c.p.Route(m) }
