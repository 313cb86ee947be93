package verify

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/internal/strict"
	"github.com/ppgen/ppgen/gen/ir"
)

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
	batch   batchWalk
	err     error
	// The rank's entries of c.lastCompute, c.rep.Slots and
	// c.rep.PeakActivations, kept here during the walk and stored when it
	// ends: ranks next to each other share cache lines of those arrays,
	// and two workers writing them at every step would bounce the lines.
	lastCompute int32
	slots, peak int
	_           [64]byte // the next rank's walk on other cache lines than these fields
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
	const nTables = nAt + 8 // at, opAt for eight transfer kinds
	sc := c.sc
	sc.block = par.Resize(sc.block, nTables*n) // filled with -1 by the count pass below
	block := sc.block
	next := func() []int32 { t := block[:n:n]; block = block[n:]; return t }
	for a := range c.at {
		c.at[a] = next()
	}
	for _, a := range [...]int{aSendF, aRecvF, aSendB, aRecvB, aDSend, aDRecv, aMSend, aMRecv} {
		c.opAt[a] = next()
	}
	sc.spans = par.Resize(sc.spans, n) // filled with -1 by the count pass below
	c.spans = sc.spans
	c.bwdIsI = make([]bool, n)
	c.lastCompute = make([]int32, c.P)
	c.optAt = make([]int32, c.P)
	c.rep.PeakActivations = make([]int, c.P)
	c.rep.PeakLive = make([]float64, c.P)
	c.rep.Slots = make([]int, c.P)
	c.starts = make([][]int32, c.P)
	// The ranks' chunk starts share one block: rank r's chunks are those
	// of its stages, and its share starts after the earlier ranks' stages.
	sc.starts = par.Resize(sc.starts, n)
	startOff := make([]int, c.P+1)
	for _, r := range c.rankOf {
		startOff[r+1] += c.M
	}
	for r := range c.P {
		startOff[r+1] += startOff[r]
	}
	// Count each rank's comm ops and host steps, to number them globally
	// (in rank order, as a walk rank by rank would) before the parallel walk.
	nSteps := c.rep.Steps
	w := par.Workers(c.P, nSteps)
	opOff := make([]int32, c.P+1)
	hostOff := make([]int32, c.P+1)
	// The same pass notes which ranks hold FSDP and swap steps (rare kinds:
	// abi's IsFSDP and IsSwap, one table load per step, tell) and steps of
	// the kinds with a rule (rule.go), whose prepare then runs.
	wk := walkKinds()
	extras := make([]uint8, c.P)
	ruledKinds := make([]uint64, c.P) // bit k: a step of kind k, which has a rule
	par.ForRanksW(w, c.P, func(_, r int) {
		// The r-th share of the chunk tables' block starts at -1.
		fill(sc.block[len(sc.block)*r/c.P:len(sc.block)*(r+1)/c.P], -1)
		fill(c.spans[len(c.spans)*r/c.P:len(c.spans)*(r+1)/c.P], chunkSpan{-1, -1, -1})
		// A histogram of the rank's kinds: the loop only counts.
		var count [256]int32
		steps := p.Ranks[r]
		for i := range steps {
			count[steps[i].Kind]++
		}
		n := 0
		var ex uint8
		if count[ir.MpipeRecv] != 0 {
			ex = hasMpipeRecv
		}
		var rk uint64
		for k, x := range count {
			if x == 0 {
				continue
			}
			f := &wk[k]
			n += int(f.fl&wkComm) * int(x) // wkComm is bit 0: one for a transfer
			ex |= f.extra
			if f.fl&wkRuled != 0 {
				rk |= 1 << (k & 63) // wkRuled: k < 64
			}
		}
		opOff[r+1], hostOff[r+1] = int32(n), int32(len(steps)-n)
		extras[r], ruledKinds[r] = ex, rk
	})
	var ex uint8
	for r, e := range extras {
		ex |= e
		for k := range c.holds {
			c.holds[k] = c.holds[k] || ruledKinds[r]&(1<<k) != 0
		}
	}
	for _, k := range ruled {
		if rl := rules[k]; int(k) < len(c.holds) && c.holds[k] && rl.prepare != nil {
			rl.prepare(c)
		}
	}
	c.collSteps = nil
	c.mpipeRecv = ex&hasMpipeRecv != 0
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
	// The walk writes every entry of these (a host step's or an op's) but
	// waitOff[0] and opRank, which the model's assembly below fills rank by
	// rank.
	sc.hostIdx, sc.waitOff = par.Resize(sc.hostIdx, nHost), par.Resize(sc.waitOff, nHost+1)
	sc.opRank, sc.opIdx, sc.opGap = par.Resize(sc.opRank, nOps), par.Resize(sc.opIdx, nOps), par.Resize(sc.opGap, nOps)
	sc.opStep = par.Resize(sc.opStep, nOps)
	c.hostIdx, c.opRank, c.opIdx, c.opStep = sc.hostIdx, sc.opRank, sc.opIdx, sc.opStep
	opGap, waitOff := sc.opGap, sc.waitOff
	waitOff[0] = 0
	if len(sc.rankWaits) < c.P {
		sc.rankWaits = append(sc.rankWaits, make([][]strict.Event, c.P-len(sc.rankWaits))...)
	}
	ws := make([]rankWalk, c.P)
	par.ForRanksW(w, c.P, func(_, r int) {
		rw := &ws[r]
		rw.r, rw.op, rw.host = r, opOff[r], hostOff[r]
		rw.starts = sc.starts[startOff[r]:startOff[r]:startOff[r+1]]
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
				c.rep.PeakActivations[q], c.rep.PeakLive[q], c.rep.Slots[q] = 0, 0, 0
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
	sc.waits, sc.partner = par.Resize(sc.waits, nWaits), par.Resize(sc.partner, nOps)
	m := &strict.Model{
		HostOff:   hostOff,
		WaitOff:   waitOff,
		Waits:     sc.waits, // filled below
		OpOff:     opOff,
		OpRank:    c.opRank,
		OpGap:     opGap,
		OpPartner: sc.partner, // filled below
	}
	base := make([]int32, c.P+1)
	for r := range ws {
		base[r+1] = base[r] + int32(len(ws[r].waits))
	}
	par.ForRanksW(w, c.P, func(_, r int) {
		copy(m.Waits[base[r]:], ws[r].waits)
		sc.rankWaits[r] = ws[r].waits[:0]
		for h := hostOff[r] + 1; h <= hostOff[r+1]; h++ {
			waitOff[h] += base[r]
		}
		fill(m.OpPartner[opOff[r]:opOff[r+1]], -1)
		fill(c.opRank[opOff[r]:opOff[r+1]], int32(r)) // the rank's ops, numbered from opOff[r]
	})
	c.batches(m, ws)
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
	c.optAt[r] = -1
	rw.lastCompute = -1
	defer func() {
		c.lastCompute[r], c.rep.Slots[r] = rw.lastCompute, rw.slots
		c.rep.PeakActivations[r] = (rw.peak + chunkParts - 1) / chunkParts
		c.rep.PeakLive[r] = float64(rw.peak) / chunkParts
	}()
	rw.waits = c.sc.rankWaits[r][:0]
	if cap(rw.waits) < len(steps) {
		rw.waits = make([]strict.Event, 0, len(steps))
	}
	live := 0
	nHost := int32(0)
	var fs *fsdpWalk
	if c.rep.PeakUnsharded != nil {
		fs = newFSDPWalk(c.S, steps, c.fsdpReduce)
	}
	rw.batch.open = -1
	// The fast path (fastRun) takes the runs of the kinds most steps are,
	// while no batch is open, in a program without FSDP and swap steps,
	// whose walks it leaves out.
	var fast *[256]walkKind
	if fs == nil && c.swapState == nil {
		fast = walkKinds()
	}
	for i := 0; i < len(steps); i++ {
		if fast != nil && rw.batch.open < 0 {
			if i, nHost, live = c.fastRun(rw, fast, steps, i, nHost, live, opGap); i == len(steps) {
				break
			}
			// steps[i] is of another kind, or leaf finds fault with it:
			// the walk below takes it, and leaf words the fault.
		}
		st := &steps[i]
		if rw.batch.open >= 0 || st.Kind.IsBatch() {
			if err := c.batchMember(rw, i, st); err != nil {
				return err
			}
			if st.Kind.IsBatch() {
				// A host step that waits for nothing: the ops between
				// BATCH_BEGIN and BATCH_END share one gap.
				if err := c.batchStep(rw, i, st); err != nil {
					return err
				}
				c.hostIdx[rw.host] = int32(i)
				rw.host++
				nHost++
				rw.waitEnd[nHost-1] = int32(len(rw.waits))
				continue
			}
		}
		if st.Kind.IsComm() {
			if err := c.leaf(rw, i, st, st); err != nil {
				return err
			}
			opGap[rw.op] = nHost
			c.opIdx[rw.op] = int32(i)
			// leaf checked the ranges: they fit in 32 bits.
			c.opStep[rw.op] = opStep{kind: st.Kind, stage: int32(st.Stage), micro: int32(st.Micro), peer: int32(st.Peer)}
			rw.op++
			c.pre(rw, i, st, st)
			c.slot(rw, i, st, st)
			continue
		}
		c.hostIdx[rw.host] = int32(i)
		rw.host++
		nHost++
		if rl := rules[st.Kind]; rl != nil && rl.noStage {
			// A host step of no stage (ALL_REDUCE): its rule records it,
			// and its waits come from the rule's model.
			if _, err := rl.step(c, r, i, st); err != nil {
				return err
			}
			rw.waitEnd[nHost-1] = int32(len(rw.waits))
			continue
		}
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
				if st.Kind.IsSwap() {
					d, err := c.swapStep(r, i, st)
					if err != nil {
						return err
					}
					live += d * chunkParts
				} else if st.Kind == ir.Backward || st.Kind == ir.BackwardInput || st.Kind == ir.BackwardWeight {
					if err := c.swapUse(r, i, st, st); err != nil {
						return err
					}
				}
			}
			if rl := rules[st.Kind]; rl != nil && rl.step != nil && !rl.noStage {
				d, err := rl.step(c, r, i, st)
				if err != nil {
					return err
				}
				if live += d; d > 0 {
					live = c.peak(rw, i, st, nil, live)
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
		rw.lastCompute = int32(i)
		live = c.peak(rw, i, st, st.Sub, live)
	}
	if err := c.batchEnd(rw); err != nil {
		return err
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
	if o := c.optAt[r]; o >= 0 && rw.lastCompute > o {
		r, o := r, int(o)
		rw.order.note(r, o, func() error {
			lc := c.lastCompute[r]
			return c.fail(r, o, c.p.Ranks[r][o], Order, "OPT_STEP must follow every compute step of its rank, but step %d (%s) runs after it", lc, c.p.Ranks[r][lc])
		})
	}
	return nil
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
// (deps.Of: its RECV_F or RECV_B when the producer lives on another rank,
// DATA_RECV for shipped labels, MPIPE_FWD_RECV for an owned input) as waits
// of the host step just added to the model. Receives that do not come
// earlier are precondition failures, reported elsewhere.
func (c *checker) waits(rw *rankWalk, st *ir.Step) {
	c.waitsAt(rw, st, st.Stage*c.M+st.Micro)
}

// waitsAt is waits for st of chunk ch (leaf checked its stage and micro).
func (c *checker) waitsAt(rw *rankWalk, st *ir.Step, ch int) {
	a, b := deps.Recvs(&c.p, st, rw.r) // Of's remote inputs, in registers
	if a == ir.Invalid {
		return
	}
	if op := c.opAt[atOf(a)][ch]; op >= 0 {
		rw.waits = append(rw.waits, strict.OpDone(op))
	}
	if b == ir.Invalid {
		return
	}
	if op := c.opAt[atOf(b)][ch]; op >= 0 {
		rw.waits = append(rw.waits, strict.OpDone(op))
	}
}

// chunkParts is the walk's unit of live memory: one chunk's activations
// are chunkParts parts, so that a chunk whose F keeps a share of them
// (selective recompute) counts that share.
const chunkParts = 1_000_000

// sharePart is a share f of a chunk in parts.
func sharePart(f float64) int { return int(math.Round(f * chunkParts)) }

// peak counts live chunks (in parts) on rank r through compute step top,
// whose compute steps are subs (top itself, or an overlap's sub-steps,
// which run together), and returns the new count.
func (c *checker) peak(rw *rankWalk, i int, top *ir.Step, subs []ir.Step, live int) int {
	for k := range subs {
		live += c.born(&subs[k])
	}
	if live > rw.peak {
		c.newPeak(rw, i, top, live)
	}
	for k := range subs {
		live -= c.dies(&subs[k])
	}
	return live
}

// born is what compute step sub adds to its rank's live parts: a chunk at
// its F.
func (c *checker) born(sub *ir.Step) int {
	if sub.Kind == ir.Forward {
		return chunkParts
	}
	return 0
}

// dies is what compute step sub takes from its rank's live parts once it
// ran: a chunk ends at its W, or at its B when it has no I; in a
// forward-only program at its F (it saves nothing); until a later step
// rebuilds it, the part the F drops ends at the F (dropAtF).
func (c *checker) dies(sub *ir.Step) int {
	switch sub.Kind {
	case ir.BackwardWeight, ir.Backward:
		return chunkParts
	case ir.Forward:
		if c.forwardOnly {
			return chunkParts
		} else if c.dropAtF != nil {
			return c.dropAtF[sub.Stage*c.M+sub.Micro]
		}
	}
	return 0
}

// newPeak records live, over rank rw.r's peak so far, as its peak at
// step i (top), and notes the memory finding when it is over the limit.
func (c *checker) newPeak(rw *rankWalk, i int, top *ir.Step, live int) {
	rw.peak = live
	if c.opt.MaxActivations > 0 && live > c.opt.MaxActivations*chunkParts && rw.memErr == nil {
		rw.memErr = c.fail(rw.r, i, *top, Memory, "%s chunks are live here (from their F to their last backward), over the limit of %d; run a backward earlier or start fewer forwards in the warm-up", strconv.FormatFloat(float64(live)/chunkParts, 'g', -1, 64), c.opt.MaxActivations)
	}
}

// walkKind is what the walk asks of a step's kind, in one load
// (walkKinds).
type walkKind struct {
	at    int8  // atOf
	extra uint8 // extraOf, for the FSDP and swap kinds
	fl    uint8 // wk* flags
	// needs is, for a transfer that fastRun walks, the table of the step
	// of its chunk that must come earlier on the rank (preErr: SEND_F
	// sends its F's output, SEND_B its backward's input gradient), -1 for
	// none (the receives).
	needs int8
}

const (
	wkComm  uint8 = 1 << iota // IsComm; bit 0, so that the count pass adds it
	wkRuled                   // a kind below 64 with a rule (rule.go), neither a transfer, FSDP nor swap
	wkFast                    // fastRun walks it: F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B
	wkUp                      // a transfer with the next stage's rank (SEND_F, RECV_B); else the previous one's (leaf)
)

// walkKinds is the table of walkKind by kind value. It is built on first
// use, after the rule files' init functions have declared their rules.
var walkKinds = sync.OnceValue(func() *[256]walkKind {
	t := new([256]walkKind)
	for k := range t {
		kind := ir.Kind(k)
		w := &t[k]
		w.at = int8(atOf(kind))
		switch {
		case kind.IsComm():
			w.fl |= wkComm
		case kind.IsFSDP() || kind.IsSwap():
			w.extra = extraOf(kind)
		case rules[k] != nil && k < len(checker{}.holds):
			w.fl |= wkRuled
		}
		switch kind {
		case ir.SendF, ir.RecvB:
			w.fl |= wkUp
		}
		w.needs = -1
		switch kind {
		case ir.SendF:
			w.needs = aF
		case ir.SendB:
			w.needs = aBwd
		}
		switch kind {
		case ir.Forward, ir.Backward, ir.BackwardInput, ir.BackwardWeight,
			ir.SendF, ir.RecvF, ir.SendB, ir.RecvB:
			if rules[k] == nil && w.at >= 0 {
				w.fl |= wkFast
			}
		}
	}
	return t
})

// fill sets every entry of t to v, doubling a filled prefix with copy
// (memmove moves it in wide words).
func fill[T any](t []T, v T) {
	if len(t) == 0 {
		return
	}
	t[0] = v
	for n := 1; n < len(t); n *= 2 {
		copy(t[n:], t[:n])
	}
}

// fastRun walks steps[i:] of rank rw.r as walkRank's loop would, while
// they are of a wkFast kind (F, B, I, W and the transfers of activations,
// gradients and labels; wks is walkKinds) and leaf accepts them, in a
// program without FSDP and swap steps and outside a batch: leaf, pre and
// slot in one pass over each step that works out its chunk, route and
// table once, then the step's op or host step. It returns the index of
// the first step it leaves to walkRank (len(steps) when none), having
// changed nothing for that step, and the rank's host step count and live
// parts (walkRank's nHost and live) after the steps it walked.
//
// pre's test on the way (a transfer's by walkKind.needs, a compute step's
// written out below: its own earlier steps and its cross-stage input,
// deps.Cross) passes only where preErr finds nothing; where it does not
// pass, pre runs and notes what preErr finds (it leaves to preErr the
// first stage's input and the last stage's labels). The cross-stage input
// also gives the slot's src and the waits: the receives deps.RemoteRecvs
// names where it comes from another rank (deps.Recvs there); waitsAt asks
// deps.Recvs of an F without one (an owned input). A chunk's first step
// in a slot starts its span (startSpan); slotChunk takes the rest. A
// transfer goes to its op on a path of its own, apart from the compute
// steps': with the kind tested once, the compiler keeps the loop's values
// in registers (a shared path had it store them for the calls on every
// step).
func (c *checker) fastRun(rw *rankWalk, wks *[256]walkKind, steps []ir.Step, i int, nHost int32, live int, opGap []int32) (int, int32, int) {
	r := rw.r
	S, M := c.S, c.M
	rankOf := c.rankOf[:S]
	for ; i < len(steps); i++ {
		st := &steps[i]
		wk := &wks[st.Kind] // a field is one load where it is read
		s, m := st.Stage, st.Micro
		if wk.fl&wkFast == 0 || st.Slot < ir.None || uint(s) >= uint(S) || uint(m) >= uint(M) || rankOf[s] != r {
			break
		}
		first, last := 0, S-1 // c.route(m): s is in it when single
		if !c.single {
			if first, last = c.copyRoute(m); s < first || s > last {
				break
			}
		}
		ch := s*M + m
		a := int(wk.at)
		at := c.at[a]
		if at[ch] >= 0 {
			break // a duplicate
		}
		if wk.fl&wkComm != 0 {
			// A transfer: leaf's peer, pre by walkKind.needs, the slot
			// (as a compute step's below, with no src), its op.
			want := ir.None
			if wk.fl&wkUp != 0 {
				if s < last {
					want = rankOf[s+1]
				}
			} else if s > first {
				want = rankOf[s-1]
			}
			if want == ir.None || want == r || st.Peer != want {
				break
			}
			at[ch] = int32(i)
			op := rw.op
			c.opAt[a][ch] = op
			if ok := wk.needs < 0 || c.before(int(wk.needs), ch, i); !ok || crossCheck {
				c.fastPreMiss(rw, i, st, ok)
			}
			if sp := &c.spans[ch]; int(sp.slot) == st.Slot && st.Slot >= 0 {
				sp.last = int32(i) // the walk's indices only grow: max(last, i)
			} else if !rw.startSpan(sp, i, ch, st.Slot) {
				c.slotChunk(rw, i, st, st, ch, -1)
			}
			opGap[op] = nHost
			c.opIdx[op] = int32(i)
			// The ranges are checked: they fit in 32 bits.
			c.opStep[op] = opStep{kind: st.Kind, stage: int32(s), micro: int32(m), peer: int32(want)}
			rw.op++
			continue
		}
		at[ch] = int32(i)
		rw.lastCompute = int32(i) // the fast kinds but the transfers compute
		if st.Kind == ir.BackwardInput {
			c.bwdIsI[ch] = true
		}
		// pre
		ok, src := true, -1
		recv := false // the cross-stage input comes over a receive
		grad := false // ... the gradient (else the activation)
		if k := st.Kind; k == ir.BackwardWeight {
			ok = c.before(aBwd, ch, i) && c.bwdIsI[ch]
		} else {
			// F, B or I: its cross-stage input (deps.Cross;
			// neighbourAt's answer without its calls)
			stage, g, cross := deps.Cross(k, s, first, last)
			if k == ir.Forward {
				ok = s != first && (s != last || !c.hasData)
			} else {
				ok = c.before(aF, ch, i)
			}
			if cross {
				grad = g
				if rankOf[stage] == r {
					// the colocated stage's step (deps.AcrossKinds' producer)
					src = stage*M + m
					ok = ok && c.before(crossAt[b2i(g)], src, i)
				} else {
					// the receive that brings it (AcrossKinds' recv), in a lowered program
					recv = true
					ok = ok && (!c.lowered || c.before(crossRecvAt[b2i(g)], ch, i))
				}
			}
		}
		if !ok || crossCheck {
			c.fastPreMiss(rw, i, st, ok)
		}
		// slot: a later step of a chunk in its slot only extends its
		// interval (slotChunk set the slot with the chunk's first step);
		// slotChunk takes the rest
		if sp := &c.spans[ch]; src < 0 && int(sp.slot) == st.Slot && st.Slot >= 0 {
			sp.last = int32(i) // the walk's indices only grow: max(last, i)
		} else if src >= 0 || !rw.startSpan(sp, i, ch, st.Slot) {
			c.slotChunk(rw, i, st, st, ch, src)
		}
		c.hostIdx[rw.host] = int32(i)
		rw.host++
		nHost++
		// waits: the receives of the cross-stage input found
		// remote (deps.RemoteRecvs, which is deps.Recvs there); waitsAt
		// asks deps.Recvs of the steps without one (an owned input).
		w0 := len(rw.waits)
		if recv {
			a, b := deps.RemoteRecvs(grad)
			if op := c.opAt[atOf(a)][ch]; op >= 0 {
				rw.waits = append(rw.waits, strict.OpDone(op))
			}
			if b != ir.Invalid {
				if op := c.opAt[atOf(b)][ch]; op >= 0 {
					rw.waits = append(rw.waits, strict.OpDone(op))
				}
			}
		} else if st.Kind == ir.Forward && src < 0 {
			c.waitsAt(rw, st, ch)
		}
		if crossCheck {
			crossCheckWaits(c, rw, st, ch, w0)
		}
		if live += c.born(st); live > rw.peak {
			c.newPeak(rw, i, st, live)
		}
		live -= c.dies(st)
		rw.waitEnd[nHost-1] = int32(len(rw.waits))
	}
	return i, nHost, live
}

// fastPreMiss is fastRun's pre where its test did not pass (ok false),
// and the tests' cross-check where it did.
func (c *checker) fastPreMiss(rw *rankWalk, i int, st *ir.Step, ok bool) {
	if !ok {
		c.pre(rw, i, st, st)
	} else if crossCheck {
		crossCheckPre(c, rw.r, i, st)
	}
}

// crossCheck, set by the tests (export_test.go), has fastRun ask preErr
// wherever its precondition test passed, and note where preErr finds fault
// (crossCheckPre), and compare its waits with waitsAt's (crossCheckWaits).
var (
	crossCheck       bool
	crossCheckMu     sync.Mutex
	crossCheckFaults []string
)

// crossCheckWaits checks that the waits fastRun added for compute step st
// (of chunk ch) from rw.waits[w0:] are what waitsAt (deps.Recvs) adds.
func crossCheckWaits(c *checker, rw *rankWalk, st *ir.Step, ch, w0 int) {
	got := append([]strict.Event(nil), rw.waits[w0:]...)
	rw.waits = rw.waits[:w0]
	c.waitsAt(rw, st, ch)
	if want := rw.waits[w0:]; !slices.Equal(got, want) {
		crossCheckMu.Lock()
		crossCheckFaults = append(crossCheckFaults, fmt.Sprintf("rank %d %s: fastRun waits for %v, waitsAt for %v", rw.r, st, got, want))
		crossCheckMu.Unlock()
	}
}

func crossCheckPre(c *checker, r, i int, st *ir.Step) {
	if err := c.preErr(r, i, st, st); err != nil {
		crossCheckMu.Lock()
		crossCheckFaults = append(crossCheckFaults, fmt.Sprintf("rank %d step %d %s: the fast test passed, preErr: %v", r, i, st, err))
		crossCheckMu.Unlock()
	}
}
