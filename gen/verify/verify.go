package verify

import (
	"fmt"

	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/internal/strict"
	"github.com/ppgen/ppgen/gen/ir"
)

// Options configures Check.
type Options struct {
	// MaxActivations bounds the number of live chunks (activations kept from
	// a chunk's F to its last backward) on any rank; 0 means unlimited.
	MaxActivations int
}

// Report describes a checked program. Fields a failed check did not reach
// are left empty.
type Report struct {
	// Lowered is true when the program holds transfers; a program without
	// any is checked as compute-only.
	Lowered   bool
	Steps     int // steps on all ranks
	Transfers int // transfer steps on all ranks
	// PeakActivations is, per rank, the most chunks live at once.
	PeakActivations []int
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

func atOf(k ir.Kind) int {
	switch k {
	case ir.Forward:
		return aF
	case ir.Backward, ir.BackwardInput:
		return aBwd
	case ir.BackwardWeight:
		return aW
	case ir.DataLoad:
		return aLoad
	case ir.SendF:
		return aSendF
	case ir.RecvF:
		return aRecvF
	case ir.SendB:
		return aSendB
	case ir.RecvB:
		return aRecvB
	case ir.DataSend:
		return aDSend
	case ir.DataRecv:
		return aDRecv
	case ir.MpipeSend:
		return aMSend
	case ir.MpipeRecv:
		return aMRecv
	}
	return -1
}

type checker struct {
	p       ir.Program
	opt     Options
	P, S, M int
	rankOf  []int
	lowered bool
	// single: one pipeline (Copies ≤ 1), every route is 0..S-1.
	single bool
	// fsdpReduce: the program holds REDUCE_GRAD steps (see fsdpWalk).
	fsdpReduce bool
	// swapState is, per chunk, its swap state (swap.go); nil when the
	// program has no swap steps. Each chunk is its rank's alone.
	swapState []uint8
	hasData   bool
	at        [nAt][]int32
	bwdIsI    []bool // per chunk: its backward is an I
	// opAt[a][chunk]: op id of the transfer in table a (aSendF..aDRecv)
	opAt [nAt][]int32
	// comm ops in (rank, index) order: the ids gen/internal/strict uses
	opRank    []int32
	opIdx     []int32
	opPartner []int32 // set by match
	// pairIdx numbers the (source, destination) rank pairs of match's
	// queues when there are too many ranks for a P×P table (nil: dense).
	pairIdx map[uint64]int32
	// per rank
	lastCompute []int32
	optAt       []int32
	// the strict model of a lowered program, built during the walk
	model   *strict.Model
	hostIdx []int32 // global host step -> index on its rank
	// slots: per chunk its slot and live interval; chunk starts in walk order
	slotted bool
	slotOf  []int32
	first   []int32
	last    []int32
	starts  [][]int32 // per rank
	// deferred findings, reported by priority after the walk
	order   deferred // first precondition failure
	slotErr deferred // first slot inconsistency
	noSlot  deferred // first chunk step without a slot
	memErr  *Error
	rep     Report
}

// rankWalk is the state of the walk over one rank. Ranks are walked in
// parallel: every chunk lives on one rank, so each rank writes its own part
// of the chunk tables, and the findings are merged in rank order afterwards.
type rankWalk struct {
	r       int
	op      int32          // global id of the rank's next comm op
	host    int32          // global number of the rank's next host step
	waits   []strict.Event // waits of the rank's host steps, in order
	waitEnd []int32        // per host step of the rank: end of its waits in waits
	order   deferred
	slotErr deferred
	noSlot  deferred
	memErr  *Error
	slotted bool
	starts  []int32
	err     error
}

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
	c := &checker{p: p, opt: opt}
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
	if c.lowered {
		if err := c.match(); err != nil {
			return c.rep, err
		}
	}
	if err := c.deadlock(); err != nil {
		return c.rep, err
	}
	if c.memErr != nil {
		return c.rep, c.memErr
	}
	if err := c.slots(); err != nil {
		return c.rep, err
	}
	return c.rep, nil
}

func (c *checker) fail(r, i int, st ir.Step, code Code, format string, args ...any) *Error {
	return &Error{Rank: r, Index: i, Step: st, Code: code, Reason: fmt.Sprintf(format, args...)}
}

// walk makes the one pass over every step (see Check).
func (c *checker) walk() error {
	p := c.p
	c.P, c.S, c.M = len(p.Ranks), p.Stages(), p.Micro
	c.rankOf = p.Placement.RankOf
	c.rep.Steps = p.NumSteps()
	switch {
	case c.P == 0:
		return &Error{Rank: -1, Index: -1, Code: Structure, Reason: "the program has no ranks"}
	case p.Placement.NumRanks != c.P:
		return &Error{Rank: -1, Index: -1, Code: Structure, Reason: fmt.Sprintf("the placement has %d ranks but the program has %d rank lists", p.Placement.NumRanks, c.P)}
	case c.S == 0:
		return &Error{Rank: -1, Index: -1, Code: Structure, Reason: "the placement has no stages"}
	case c.M <= 0:
		return &Error{Rank: -1, Index: -1, Code: Structure, Reason: fmt.Sprintf("the program has %d micro-batches; want at least 1", c.M)}
	case p.Copies > 1 && (c.S%p.Copies != 0 || c.M%p.Copies != 0):
		return &Error{Rank: -1, Index: -1, Code: Structure, Reason: fmt.Sprintf("%d model copies do not split %d stages and %d micro-batches evenly", p.Copies, c.S, c.M)}
	}
	if err := ir.CheckSize(c.P, c.S, c.M); err != nil {
		return &Error{Rank: -1, Index: -1, Code: Structure, Reason: err.Error()}
	}
	if c.rep.Steps > ir.MaxSteps {
		return &Error{Rank: -1, Index: -1, Code: Structure, Reason: (&ir.LimitError{What: "steps", Value: int64(c.rep.Steps), Min: 1, Max: ir.MaxSteps}).Error()}
	}
	for s, r := range c.rankOf {
		if r < 0 || r >= c.P {
			return &Error{Rank: -1, Index: -1, Code: Structure, Reason: fmt.Sprintf("the placement puts stage %d on rank %d, outside 0..%d", s, r, c.P-1)}
		}
	}
	c.lowered, c.hasData = mode(p)
	c.single = p.Copies <= 1
	n := c.S * c.M
	// One block for the per-chunk tables, all starting at -1.
	const nTables = nAt + 8 + 3 // at, opAt for eight transfer kinds, slotOf/first/last
	block := make([]int32, nTables*n)
	for i := range block {
		block[i] = -1
	}
	next := func() []int32 { t := block[:n:n]; block = block[n:]; return t }
	for a := range c.at {
		c.at[a] = next()
	}
	for _, a := range [...]int{aSendF, aRecvF, aSendB, aRecvB, aDSend, aDRecv, aMSend, aMRecv} {
		c.opAt[a] = next()
	}
	c.slotOf, c.first, c.last = next(), next(), next()
	c.bwdIsI = make([]bool, n)
	c.lastCompute = make([]int32, c.P)
	c.optAt = make([]int32, c.P)
	c.rep.PeakActivations = make([]int, c.P)
	c.rep.Slots = make([]int, c.P)
	c.starts = make([][]int32, c.P)
	// Count each rank's comm ops and host steps, to number them globally
	// (in rank order, as a walk rank by rank would) before the parallel walk.
	nSteps := c.rep.Steps
	w := par.Workers(c.P, nSteps)
	opOff := make([]int32, c.P+1)
	hostOff := make([]int32, c.P+1)
	// The same pass notes which ranks hold FSDP and swap steps (rare kinds:
	// one comparison per step tells).
	extras := make([]uint8, c.P)
	par.ForRanksW(w, c.P, func(_, r int) {
		n := 0
		var ex uint8
		for i := range p.Ranks[r] {
			switch k := p.Ranks[r][i].Kind; {
			case k.IsComm():
				n++
			case k >= ir.Unshard && k <= ir.SwapWaitLoad:
				ex |= extraOf(k)
			}
		}
		opOff[r+1], hostOff[r+1] = int32(n), int32(len(p.Ranks[r])-n)
		extras[r] = ex
	})
	var ex uint8
	for _, e := range extras {
		ex |= e
	}
	if ex&hasSwapStep != 0 {
		c.swapState = make([]uint8, c.S*c.M)
	}
	if ex&(hasShardStep|hasReduceStep) != 0 {
		c.rep.PeakUnsharded = make([]int, c.P)
		c.fsdpReduce = ex&hasReduceStep != 0
	}
	for r := range c.P {
		opOff[r+1] += opOff[r]
		hostOff[r+1] += hostOff[r]
	}
	nOps, nHost := int(opOff[c.P]), int(hostOff[c.P])
	c.hostIdx = make([]int32, nHost)
	c.opRank = make([]int32, nOps)
	c.opIdx = make([]int32, nOps)
	opGap := make([]int32, nOps)
	waitOff := make([]int32, nHost+1)
	ws := make([]rankWalk, c.P)
	par.ForRanksW(w, c.P, func(_, r int) {
		rw := &ws[r]
		rw.r, rw.op, rw.host = r, opOff[r], hostOff[r]
		rw.waitEnd = waitOff[hostOff[r]+1 : hostOff[r+1]+1]
		rw.err = c.walkRank(rw, opGap)
	})
	// Merge in rank order: the first structural error stops the walk there
	// (later ranks keep no findings), else the first deferred finding of
	// each kind is the first rank's.
	for r := range ws {
		rw := &ws[r]
		if rw.err != nil {
			for q := r + 1; q < c.P; q++ {
				c.rep.PeakActivations[q], c.rep.Slots[q] = 0, 0
			}
			return rw.err
		}
		for _, d := range [...]struct{ to, from *deferred }{{&c.order, &rw.order}, {&c.slotErr, &rw.slotErr}, {&c.noSlot, &rw.noSlot}} {
			if d.to.fn == nil && d.from.fn != nil {
				*d.to = *d.from
			}
		}
		if c.memErr == nil {
			c.memErr = rw.memErr
		}
		c.slotted = c.slotted || rw.slotted
		c.starts[r] = rw.starts
	}
	// The strict model: waits concatenated rank by rank.
	nWaits := 0
	for r := range ws {
		nWaits += len(ws[r].waits)
	}
	m := &strict.Model{
		HostOff:   hostOff,
		WaitOff:   waitOff,
		Waits:     make([]strict.Event, nWaits),
		OpOff:     opOff,
		OpRank:    c.opRank,
		OpGap:     opGap,
		OpPartner: make([]int32, nOps),
	}
	base := make([]int32, c.P+1)
	for r := range ws {
		base[r+1] = base[r] + int32(len(ws[r].waits))
	}
	par.ForRanksW(w, c.P, func(_, r int) {
		copy(m.Waits[base[r]:], ws[r].waits)
		for h := hostOff[r] + 1; h <= hostOff[r+1]; h++ {
			waitOff[h] += base[r]
		}
		for op := opOff[r]; op < opOff[r+1]; op++ {
			m.OpPartner[op] = -1
		}
	})
	c.model = m
	c.rep.Lowered = c.lowered
	c.rep.Transfers = nOps
	return nil
}

// walkRank walks rank rw.r (see walk), numbering its host steps and comm
// ops from rw.host and rw.op.
func (c *checker) walkRank(rw *rankWalk, opGap []int32) error {
	r := rw.r
	steps := c.p.Ranks[r]
	c.lastCompute[r], c.optAt[r] = -1, -1
	rw.waits = make([]strict.Event, 0, len(steps))
	live := 0
	nHost := int32(0)
	var fs *fsdpWalk
	if c.rep.PeakUnsharded != nil {
		fs = newFSDPWalk(c.S, steps, c.fsdpReduce)
	}
	for i := range steps {
		st := &steps[i]
		if st.Kind.IsComm() {
			if err := c.leaf(rw, i, st, st); err != nil {
				return err
			}
			opGap[rw.op] = nHost
			c.opRank[rw.op] = int32(r)
			c.opIdx[rw.op] = int32(i)
			rw.op++
			c.pre(rw, i, st, st)
			c.slot(rw, i, st, st)
			continue
		}
		c.hostIdx[rw.host] = int32(i)
		rw.host++
		nHost++
		if !st.Kind.IsOverlap() {
			if err := c.leaf(rw, i, st, st); err != nil {
				return err
			}
			if fs != nil {
				if err := fs.step(c, r, i, st); err != nil {
					return err
				}
			}
			if c.swapState != nil {
				if k := st.Kind; k >= ir.SwapLaunchOffload && k <= ir.SwapWaitLoad {
					d, err := c.swapStep(r, i, st)
					if err != nil {
						return err
					}
					live += d
				} else if st.Kind == ir.Backward || st.Kind == ir.BackwardInput || st.Kind == ir.BackwardWeight {
					if err := c.swapUse(r, i, st, st); err != nil {
						return err
					}
				}
			}
			c.pre(rw, i, st, st)
			c.slot(rw, i, st, st)
			if st.Kind.IsCompute() {
				c.waits(rw, st)
				live = c.peak(rw, i, st, steps[i:i+1], live)
			}
			rw.waitEnd[nHost-1] = int32(len(rw.waits))
			continue
		}
		if err := c.overlapShape(r, i, st); err != nil {
			return err
		}
		for k := range st.Sub {
			if err := c.leaf(rw, i, st, &st.Sub[k]); err != nil {
				return err
			}
		}
		if fs != nil {
			if err := fs.step(c, r, i, st); err != nil {
				return err
			}
		}
		if c.swapState != nil {
			for k := range st.Sub {
				if sub := &st.Sub[k]; sub.Kind != ir.Forward {
					if err := c.swapUse(r, i, st, sub); err != nil {
						return err
					}
				}
			}
		}
		for k := range st.Sub {
			c.pre(rw, i, st, &st.Sub[k])
			c.slot(rw, i, st, &st.Sub[k])
			c.waits(rw, &st.Sub[k])
		}
		rw.waitEnd[nHost-1] = int32(len(rw.waits))
		c.lastCompute[r] = int32(i)
		live = c.peak(rw, i, st, st.Sub, live)
	}
	if fs != nil {
		c.rep.PeakUnsharded[r] = fs.peak
		if err := fs.end(c, r); err != nil {
			return err
		}
	}
	if c.swapState != nil {
		if err := c.swapEnd(r); err != nil {
			return err
		}
	}
	if o := c.optAt[r]; o >= 0 && c.lastCompute[r] > o {
		r, o := r, int(o)
		rw.order.note(r, o, func() error {
			lc := c.lastCompute[r]
			return c.fail(r, o, c.p.Ranks[r][o], Order, "OPT_STEP must follow every compute step of its rank, but step %d (%s) runs after it", lc, c.p.Ranks[r][lc])
		})
	}
	return nil
}

// route is c.p.Route, without the arithmetic for one pipeline.
func (c *checker) route(m int) (first, last int) {
	if c.single {
		return 0, c.S - 1
	}
	return c.p.Route(m)
}

// mode reports whether the program holds transfers (it is lowered) and data
// steps, stopping as soon as both are known.
func mode(p ir.Program) (lowered, data bool) {
	for _, steps := range p.Ranks {
		for i := range steps {
			switch k := steps[i].Kind; {
			case k.IsComm():
				lowered = true
				data = data || k == ir.DataRecv || k == ir.MpipeRecv
			case k == ir.DataLoad:
				data = true
			}
			if lowered && data {
				return
			}
		}
	}
	return
}

// waits adds, in a lowered program, the receives compute step st consumes
// (its RECV_F or RECV_B, and DATA_RECV for the labels) as waits of the host
// step just added to the model. Receives that do not come earlier are
// precondition failures, reported elsewhere.
func (c *checker) waits(rw *rankWalk, st *ir.Step) {
	r := rw.r
	s := st.Stage
	ch := s*c.M + st.Micro
	switch st.Kind {
	case ir.Forward:
		if first, _ := c.route(st.Micro); s > first && c.rankOf[s-1] != r {
			if op := c.opAt[aRecvF][ch]; op >= 0 {
				rw.waits = append(rw.waits, strict.OpDone(op))
			}
		}
		if op := c.opAt[aDRecv][ch]; op >= 0 {
			rw.waits = append(rw.waits, strict.OpDone(op))
		}
		if op := c.opAt[aMRecv][ch]; op >= 0 {
			rw.waits = append(rw.waits, strict.OpDone(op))
		}
	case ir.Backward, ir.BackwardInput:
		if _, last := c.route(st.Micro); s < last && c.rankOf[s+1] != r {
			if op := c.opAt[aRecvB][ch]; op >= 0 {
				rw.waits = append(rw.waits, strict.OpDone(op))
			}
		}
	}
}

// peak counts live chunks on rank r through compute step top, whose compute
// steps are subs (top itself, or an overlap's sub-steps, which run
// together), and returns the new count.
func (c *checker) peak(rw *rankWalk, i int, top *ir.Step, subs []ir.Step, live int) int {
	r := rw.r
	for k := range subs {
		if subs[k].Kind == ir.Forward {
			live++
		}
	}
	if live > c.rep.PeakActivations[r] {
		c.rep.PeakActivations[r] = live
		if c.opt.MaxActivations > 0 && live > c.opt.MaxActivations && rw.memErr == nil {
			rw.memErr = c.fail(r, i, *top, Memory, "%d chunks are live here (from their F to their last backward), over the limit of %d; run a backward earlier or start fewer forwards in the warm-up", live, c.opt.MaxActivations)
		}
	}
	for k := range subs {
		// a chunk ends at its W, or at its B when it has no I
		if k := subs[k].Kind; k == ir.BackwardWeight || k == ir.Backward {
			live--
		}
	}
	return live
}

func (c *checker) overlapShape(r, i int, st *ir.Step) error {
	if len(st.Sub) != 2 {
		return c.fail(r, i, *st, Structure, "an overlap holds exactly two sub-steps, this one %d", len(st.Sub))
	}
	isBwd := func(k ir.Kind) bool { return k == ir.Backward || k == ir.BackwardInput || k == ir.BackwardWeight }
	a, b := st.Sub[0].Kind, st.Sub[1].Kind
	ok := (st.Kind == ir.OverlapFB && a == ir.Forward && isBwd(b)) || (st.Kind == ir.OverlapBF && isBwd(a) && b == ir.Forward)
	if !ok {
		want := "(F;B)"
		if st.Kind == ir.OverlapBF {
			want = "(B;F)"
		}
		return c.fail(r, i, *st, Structure, "%s runs a forward and a backward (B, I or W) in the order %s", st.Kind, want)
	}
	return nil
}

// leaf checks one non-overlap step (st, or a sub-step of the overlap top).
func (c *checker) leaf(rw *rankWalk, i int, top, st *ir.Step) error {
	r := rw.r
	k := st.Kind
	if !k.Valid() || k.IsOverlap() {
		return c.fail(r, i, *top, Structure, "%s is not a step kind that may appear here", k)
	}
	if st.Slot < ir.None {
		return c.fail(r, i, *top, Structure, "slot %d is negative (None is %d)", st.Slot, ir.None)
	}
	if k == ir.OptStep {
		if c.optAt[r] >= 0 {
			return c.fail(r, i, *top, Duplicate, "a second OPT_STEP on this rank (the first is step %d); the optimizer steps once per iteration", c.optAt[r])
		}
		c.optAt[r] = int32(i)
		return nil
	}
	s, m := st.Stage, st.Micro
	if s < 0 || s >= c.S {
		return c.fail(r, i, *top, Structure, "stage %d is outside 0..%d", s, c.S-1)
	}
	owner := c.rankOf[s] != r && c.p.OwnerStep(r, *st)
	if c.rankOf[s] != r && !owner {
		if (k == ir.DataLoad || k == ir.MpipeSend) && m >= 0 && m < c.M {
			return c.fail(r, i, *top, Structure, "stage %d lives on rank %d (placement %s), not on rank %d; only micro %d's owner (rank %d) may load its input for another rank's stage (mpipe)", s, c.rankOf[s], c.p.Placement, r, m, c.p.Placement.Owner(m))
		}
		return c.fail(r, i, *top, Structure, "stage %d lives on rank %d (placement %s), not on rank %d; every step runs on its stage's rank", s, c.rankOf[s], c.p.Placement, r)
	}
	if !k.HasMicro() {
		return nil // UNSHARD, RESHARD, REDUCE_GRAD: nothing more to check yet
	}
	if m < 0 || m >= c.M {
		return c.fail(r, i, *top, Structure, "micro-batch %d is outside 0..%d", m, c.M-1)
	}
	first, last := c.route(m)
	if s < first || s > last {
		return c.fail(r, i, *top, Structure, "micro-batch %d runs only stages %d..%d (its model copy), not stage %d", m, first, last, s)
	}
	if k.IsCompute() {
		c.lastCompute[r] = int32(i)
	}
	if k.IsComm() {
		want := ir.None
		switch k {
		case ir.SendF, ir.DataSend, ir.RecvB:
			if s < last {
				want = c.rankOf[s+1]
			}
		case ir.MpipeSend:
			want = c.rankOf[s] // OwnerStep: s is the first stage of m's route
		case ir.MpipeRecv:
			if s != first {
				return c.fail(r, i, *top, Structure, "MPIPE_FWD_RECV receives the input of micro %d for the first stage of its route (%d), not for stage %d", m, first, s)
			}
			if want = c.p.Placement.Owner(m); want == r {
				return c.fail(r, i, *top, Structure, "micro %d's owner is this rank (%d): it loads the input with DATA_LOAD, not a transfer", m, r)
			}
		default:
			if s > first {
				want = c.rankOf[s-1]
			}
		}
		switch {
		case want == ir.None:
			return c.fail(r, i, *top, Structure, "stage %d has no neighbour to %s (micro %d runs stages %d..%d)", s, map[bool]string{true: "send to", false: "receive from"}[k.IsSend()], m, first, last)
		case want == r:
			return c.fail(r, i, *top, Structure, "a transfer to its own rank: both stages live on rank %d, where colocated stages exchange through the slot (src), not a transfer", r)
		case st.Peer != want:
			if st.Peer == ir.None {
				return c.fail(r, i, *top, Structure, "peer not set; the placement puts the other end on rank %d (use Program.ResolvePeers)", want)
			}
			return c.fail(r, i, *top, Structure, "peer %d, but the placement puts the other end on rank %d", st.Peer, want)
		}
	}
	if k == ir.DataLoad && s != first && s != last {
		return c.fail(r, i, *top, Structure, "DATA_LOAD loads the input on the first stage of micro %d's route (%d) or the labels on its last stage (%d), not on stage %d; ship labels with DATA_SEND/DATA_RECV", m, first, last, s)
	}
	a := atOf(k)
	if owner && a == aLoad {
		a = aOLoad
	}
	if a < 0 {
		return nil // swap steps: range and placement only, for now
	}
	ch := s*c.M + m
	if prev := c.at[a][ch]; prev >= 0 {
		if a == aBwd {
			return c.fail(r, i, *top, Duplicate, "a second backward of stage %d micro %d (step %d ran %s); a chunk has one backward: B, or I then W", s, m, prev, c.stepAt(r, int(prev), ir.Backward, s, m))
		}
		return c.fail(r, i, *top, Duplicate, "%s runs twice on this rank (first at step %d); it may run once", st, prev)
	}
	c.at[a][ch] = int32(i)
	if k == ir.BackwardInput {
		c.bwdIsI[ch] = true
	}
	if k.IsComm() {
		c.opAt[a][ch] = rw.op // walkRank records it under this id
	}
	return nil
}

// stepAt returns the leaf step of kind like k on chunk (s, m) at index i of
// rank r (the sub-step when that step is an overlap).
func (c *checker) stepAt(r, i int, k ir.Kind, s, m int) ir.Step {
	st := c.p.Ranks[r][i]
	for _, sub := range st.Computes() {
		if sub.Stage == s && sub.Micro == m && atOf(sub.Kind) == atOf(k) {
			return sub
		}
	}
	return st
}

// where says where a step that should come before index i is.
func where(at int32, i int) string {
	switch {
	case at < 0:
		return "it never runs on this rank"
	case int(at) == i:
		return "it is the other half of this overlap; the two halves run together and cannot feed each other"
	}
	return fmt.Sprintf("it comes later, at step %d", at)
}

// pre checks step st's preconditions and notes the first failure.
func (c *checker) pre(rw *rankWalk, i int, top, st *ir.Step) {
	r := rw.r
	if err := c.preErr(r, i, top, st); err != nil {
		rw.order.note(r, i, func() error { return c.preErr(r, i, top, st) })
	}
}

// preErr checks that what step st (at index i of rank r; a sub-step of top)
// needs ran earlier on the rank. It runs during the walk, when only earlier
// steps are in the tables, and again at the end to word the failure.
func (c *checker) preErr(r, i int, top, st *ir.Step) error {
	if !st.Kind.HasMicro() || atOf(st.Kind) < 0 {
		return nil
	}
	s, m, M := st.Stage, st.Micro, c.M
	ch := s*M + m
	first, last := c.route(m)
	before := func(a, chunk int) bool { x := c.at[a][chunk]; return x >= 0 && int(x) < i }
	need := func(what string, want ir.Step, a, chunk int) error {
		return c.fail(r, i, *top, Order, "%s needs %s: %s must come earlier on rank %d, but %s", st, what, want, r, where(c.at[a][chunk], i))
	}
	switch st.Kind {
	case ir.Forward:
		switch {
		case s == first:
			if c.hasData && !before(aLoad, ch) && !before(aMRecv, ch) {
				if c.at[aMRecv][ch] >= 0 {
					return need("its input from its owner", ir.Compute(ir.MpipeRecv, s, m), aMRecv, ch)
				}
				return need("its input", ir.Compute(ir.DataLoad, s, m), aLoad, ch)
			}
		case c.rankOf[s-1] == r:
			if !before(aF, ch-M) {
				return need("its input from the colocated stage", ir.Compute(ir.Forward, s-1, m), aF, ch-M)
			}
		case c.lowered:
			if !before(aRecvF, ch) {
				return need(fmt.Sprintf("its input from stage %d on rank %d", s-1, c.rankOf[s-1]), ir.Compute(ir.RecvF, s, m), aRecvF, ch)
			}
		}
		if s == last && c.hasData && !before(aLoad, ch) && !before(aDRecv, ch) {
			return c.fail(r, i, *top, Order, "%s needs the labels of micro %d for the loss: %s or %s must come earlier on rank %d, but neither does", st, m, ir.Compute(ir.DataLoad, s, m), ir.Compute(ir.DataRecv, s, m), r)
		}
	case ir.Backward, ir.BackwardInput:
		if !before(aF, ch) {
			return need("its forward", ir.Compute(ir.Forward, s, m), aF, ch)
		}
		switch {
		case s == last:
		case c.rankOf[s+1] == r:
			if !before(aBwd, ch+M) {
				return need("its output gradient from the colocated stage", c.bwdName(s+1, m), aBwd, ch+M)
			}
		case c.lowered:
			if !before(aRecvB, ch) {
				return need(fmt.Sprintf("its output gradient from stage %d on rank %d", s+1, c.rankOf[s+1]), ir.Compute(ir.RecvB, s, m), aRecvB, ch)
			}
		}
	case ir.BackwardWeight:
		if !before(aBwd, ch) || !c.bwdIsI[ch] {
			if x := c.at[aBwd][ch]; x >= 0 && !c.bwdIsI[ch] {
				return c.fail(r, i, *top, Order, "%s follows only an I, but this chunk ran a full B (step %d), which already computed the weight gradient", st, x)
			}
			return need("the I of its chunk", ir.Compute(ir.BackwardInput, s, m), aBwd, ch)
		}
	case ir.SendF:
		if !before(aF, ch) {
			return need("the output it sends", ir.Compute(ir.Forward, s, m), aF, ch)
		}
	case ir.SendB:
		if !before(aBwd, ch) {
			return need("the input gradient it sends", c.bwdName(s, m), aBwd, ch)
		}
	case ir.MpipeSend:
		if !before(aOLoad, ch) {
			return need("the input it ships", ir.Compute(ir.DataLoad, s, m), aOLoad, ch)
		}
	case ir.DataSend:
		if !before(aLoad, ch) && !before(aDRecv, ch) {
			return c.fail(r, i, *top, Order, "%s ships data this rank does not have yet: %s or %s must come earlier on rank %d", st, ir.Compute(ir.DataLoad, s, m), ir.Compute(ir.DataRecv, s, m), r)
		}
	}
	return nil
}

// bwdName names the backward of a chunk as it runs (B or I), B when it never runs.
func (c *checker) bwdName(s, m int) ir.Step {
	if c.bwdIsI[s*c.M+m] {
		return ir.Compute(ir.BackwardInput, s, m)
	}
	return ir.Compute(ir.Backward, s, m)
}

// optSteps checks that OPT_STEP runs on every rank or on none: a rank
// without it would never update its weights while the others do.
func (c *checker) optSteps() error {
	with, without := -1, -1
	for r, o := range c.optAt {
		if o >= 0 && with < 0 {
			with = r
		}
		if o < 0 && without < 0 {
			without = r
		}
	}
	if with < 0 || without < 0 {
		return nil
	}
	opt := ir.Step{Kind: ir.OptStep, Stage: ir.None, Micro: ir.None, Peer: ir.None, Slot: ir.None}
	return &Error{Rank: without, Index: -1, Step: opt, Code: Missing,
		Reason: fmt.Sprintf("never runs on this rank, but rank %d steps its optimizer (step %d); OPT_STEP runs on every rank or on none, else this rank's weights are never updated", with, c.optAt[with])}
}

// complete checks that every chunk on a micro-batch's route has its forward
// and backward (leaf rejects chunks outside it).
func (c *checker) complete() error {
	for s := range c.S {
		r := c.rankOf[s]
		for m := range c.M {
			if !c.p.Runs(s, m) {
				continue
			}
			ch := s*c.M + m
			switch {
			case c.at[aF][ch] < 0:
				return &Error{Rank: r, Index: -1, Step: ir.Compute(ir.Forward, s, m), Code: Missing, Reason: fmt.Sprintf("never runs; every (stage, micro) needs one forward on rank %d", r)}
			case c.at[aBwd][ch] < 0:
				return &Error{Rank: r, Index: -1, Step: ir.Compute(ir.Backward, s, m), Code: Missing, Reason: fmt.Sprintf("stage %d micro %d has no backward; every (stage, micro) needs B, or I then W, on rank %d", s, m, r)}
			case c.bwdIsI[ch] && c.at[aW][ch] < 0:
				return &Error{Rank: r, Index: -1, Step: ir.Compute(ir.BackwardWeight, s, m), Code: Missing, Reason: fmt.Sprintf("never runs, but %s ran at step %d; an I needs its W", ir.Compute(ir.BackwardInput, s, m), c.at[aBwd][ch])}
			}
		}
	}
	return nil
}
