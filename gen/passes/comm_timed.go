package passes

import (
	"math"
	"slices"
	"sync"

	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// insertCommTimed places the transfers of a compute-only program (data loads
// included) by an ideal timeline: the program is timed with the cost model as
// if communication never waited (a cross-rank input arrives at its
// producer's end plus c.Comm), and every transfer gets the key
// (producer end, producer rank, producer step, sub-step). Each rank's comm
// ops go in key order; a send sits right after the host steps that end by
// its key time (its producer included), and a receive sits right after the
// host steps of its own rank that end by that time, which is the latest
// position that does not delay the data.
//
// Because every rank's comm stream is a subsequence of one global order, and
// with positive compute costs every host step before a transfer's position
// ended before the transfer's time (so its own receives have smaller keys),
// induction over the keys shows every transfer completes: the program is
// deadlock-free under the strict model and, with Comm = 0, runs in the ideal
// timeline's makespan. A compute step of cost 0 (a layer without an input
// gradient, an embedding's I) is timed at a millionth of the largest
// compute cost, which the argument needs and the timeline hardly notices.
// ok is false when the argument does not apply (no positive compute cost,
// an infeasible order, a missing producer); the caller then uses the late
// placement, which also gives the precise error.
func insertCommTimed(p ir.Program, c sim.Cost) (ir.Program, bool) {
	rankOf := p.Placement.RankOf
	P, S, M := len(p.Ranks), len(rankOf), p.Micro
	nHost := 0
	for _, steps := range p.Ranks {
		nHost += len(steps)
	}
	c, ok := positiveCompute(c) // every compute step now takes time, overlaps too
	if !ok {
		return ir.Program{}, false
	}
	// The ideal timeline and everything below up to the key times (the
	// chunk tables, the transfers but for their times, the runs of each
	// rank) read p alone: with more than one worker the timeline runs on
	// one while this goroutine does the rest on another, and the key times
	// are filled in when both are done.
	sc := timedKeep.Take()
	if sc == nil {
		sc = new(timedScratch)
	}
	defer timedKeep.Put(sc)
	var ends [][]float64
	timeline := func() { ends, ok = idealTimelineInto(p, c, &sc.timeline) }
	var wg sync.WaitGroup
	beside := par.Workers(P, nHost) > 1
	if beside {
		wg.Go(timeline)
	} else {
		timeline()
		if !ok {
			return ir.Program{}, false
		}
	}
	// One walk over the steps: where each chunk's forward and
	// input-gradient step run, and the transfers, in producer order (rank
	// by rank, step by step), but for their consumers, which the chunk
	// table gives once it is complete.
	atBlock := par.Resize(sc.at, 2*S*M)
	sc.at = atBlock
	for i := range atBlock {
		atBlock[i] = chunkAt{-1, -1}
	}
	fAt, bAt := atBlock[:S*M:S*M], atBlock[S*M:]
	nSend := make([]int32, P)
	sendOff := make([]int32, P+1)
	built := collectTransfers(&p, fAt, bAt, sendOff, sc.ts[:0])
	for r := range P {
		nSend[r] = sendOff[r+1] - sendOff[r]
	}
	sc.ts = built
	// ts is never assigned again, so the closures below capture it by
	// value (a slice they would otherwise reload through a pointer at
	// every use); so is ends' copy (endsOf, below).
	ts := built
	nRecv := make([]int32, P)
	for i := range ts {
		x := &ts[i]
		var cons chunkAt
		if x.kind == ir.SendF {
			cons = fAt[int(x.stage+1)*M+int(x.micro)]
		} else {
			cons = bAt[int(x.stage-1)*M+int(x.micro)]
		}
		if cons.rank < 0 {
			wg.Wait()
			return ir.Program{}, false
		}
		x.dst, x.consume = cons.rank, cons.index
		nRecv[cons.rank]++
	}
	// Each rank's transfers (both halves), in key order. ts is in producer
	// order (rank by rank, step by step), so per rank the sends and the
	// receives from each source rank form runs that are sorted but for ties
	// inside one step; an insertion sort fixes those in linear time and a
	// merge of the few runs (one per neighbour) gives the rank's order.
	off := make([]int32, P+1)
	for r := range P {
		off[r+1] = off[r] + nSend[r] + nRecv[r]
	}
	// The buffers below are written in full before they are read.
	sc.runs, sc.mine = par.Resize(sc.runs, 2*len(ts)), par.Resize(sc.mine, 2*len(ts))
	runsBuf := sc.runs // per rank: its sends, then its receives by source
	fillS := make([]int32, P)
	fillR := make([]int32, P)
	for r := range P {
		fillS[r], fillR[r] = off[r], off[r]+nSend[r]
	}
	for i := range ts {
		x := &ts[i]
		runsBuf[fillS[x.src]] = int32(i)
		fillS[x.src]++
		runsBuf[fillR[x.dst]] = int32(i)
		fillR[x.dst]++
	}
	mineBuf := sc.mine
	sc.ops = par.Resize(sc.ops, 2*len(ts))
	opsBuf := sc.ops
	ops := make([][]placed, P)
	// sendNext[i] is the key time of the op after transfer i's send in its
	// rank's comm stream (+Inf: none): the slide of i's receive reads it.
	sc.sendNext = par.Resize(sc.sendNext, len(ts))
	sendNext := sc.sendNext
	wg.Wait()
	if !ok {
		return ir.Program{}, false
	}
	endsOf := ends
	// The key times: each transfer's producer end; the keys apart, for
	// the sort and the merges below to read 16 bytes a transfer.
	sc.keys = par.Resize(sc.keys, len(ts))
	keys := sc.keys
	// inOrder[r]: rank r's transfers come in key order (no two sub-steps
	// of one step out of it), and so does every run taken from them.
	inOrder := make([]bool, P)
	par.ForRanks(P, nHost, func(r int) {
		lo, hi := sendOff[r], sendOff[r+1]
		inOrder[r] = keyRank(keys[lo:hi], ts[lo:hi], endsOf[r])
	})
	par.ForRanks(P, nHost, func(r int) {
		lo, hi := off[r], off[r+1]
		mid := lo + nSend[r]
		sends := runsBuf[lo:mid]
		if !inOrder[r] {
			sortByKey(sends, keys)
		}
		// The receives, one run per source rank, merged one by one into
		// what the earlier ones gave, writing by turns to mineBuf and to
		// the front of runsBuf's receives, where the runs already merged
		// lay (mergeByKey never writes past the element of the run it
		// reads); then the sends, the longest run, once (into mineBuf: the
		// receives merged lie there right after the sends' place, or in
		// runsBuf).
		rest, recvs, inMine := runsBuf[mid:hi], []int32(nil), false
		for len(rest) > 0 {
			n, src := 1, ts[rest[0]].src
			for n < len(rest) && ts[rest[n]].src == src {
				n++
			}
			run := rest[:n]
			rest = rest[n:]
			if !inOrder[src] {
				sortByKey(run, keys)
			}
			if recvs == nil {
				recvs = run
				continue
			}
			dst := runsBuf[mid:hi]
			if !inMine {
				dst = mineBuf[mid:hi]
			}
			recvs = mergeByKey(dst, recvs, run, keys)
			inMine = !inMine
		}
		merged := sends
		if len(recvs) > 0 {
			merged = mergeByKey(mineBuf[lo:hi], sends, recvs, keys)
		}
		ops[r] = placeRank(opsBuf[lo:hi:hi], merged, ts, keys, endsOf[r], int32(r), sendNext)
	})
	// Slide each receive later, past host steps but never past another
	// transfer of its rank (the comm-stream order stays the key order), while
	// the new post time (the end of the host step it passes) is no later than
	// the next transfer due on either end and the receive stays before its
	// consumer: it then delays nothing in the ideal timeline, and the
	// induction above still holds. Then assemble the rank's program. Ranks
	// only read each other's (fixed) key times, so they go in parallel.
	q := ir.Program{Placement: p.Placement, Micro: p.Micro, Copies: p.Copies, Ranks: make([][]ir.Step, P)}
	bad := make([]bool, P)
	par.ForRanks(P, nHost, func(r int) {
		out, ok := assembleRank(p.Ranks[r], ops[r], endsOf[r], sendNext)
		bad[r] = !ok
		q.Ranks[r] = out
	})
	for _, b := range bad {
		if b {
			return ir.Program{}, false
		}
	}
	return q, true
}

// keyRank sets keys, the keys of one rank's transfers ts (producer ends e),
// and reports whether they come in key order.
func keyRank(keys []transferKey, ts []transfer, e []float64) bool {
	keys = keys[:len(ts)]
	inOrder := true
	var prev transferKey
	for i := range ts {
		k := transferKey{e[ts[i].j], ts[i].tie}
		if i > 0 && !(prev.t < k.t || (prev.t == k.t && prev.tie < k.tie)) {
			inOrder = false
		}
		keys[i], prev = k, k
	}
	return inOrder
}

// placeRank places rank r's comm ops, merged (its transfers in key order),
// in list: a send right after the host steps that end by its key time, a
// receive there too but no later than its consumer. Key times grow along
// the list, so one pointer walks the rank's end times e. sendNext gets, for
// each send, the key time of the op after it. (A function of its own: the
// loop keeps its values in registers.)
func placeRank(list []placed, merged []int32, ts []transfer, keys []transferKey, e []float64, r int32, sendNext []float64) []placed {
	list = list[:len(merged)]
	u, pend := 0, int32(-1) // pend: the last send, its next op's time not yet known
	for k, i := range merged {
		x := &ts[i]
		t := keys[i].t
		for u < len(e) && e[u] <= t {
			u++
		}
		if pend >= 0 {
			sendNext[pend] = t
			pend = -1
		}
		// Field by field (a composite literal goes through the stack);
		// cons is read only for a receive.
		op := &list[k]
		op.t, op.x, op.micro = t, i, x.micro
		switch {
		case x.src == r:
			op.at, op.kind, op.stage, op.peer, op.recv = int32(u), x.kind, x.stage, x.dst, false
			pend = i
			continue
		case x.kind == ir.SendB:
			op.kind, op.stage = ir.RecvB, x.stage-1
		default:
			op.kind, op.stage = ir.RecvF, x.stage+1
		}
		op.at, op.cons, op.peer, op.recv = min(int32(u), x.consume), x.consume, x.src, true
	}
	if pend >= 0 {
		sendNext[pend] = math.Inf(1)
	}
	return list
}

// assembleRank returns a rank's program: its host steps with its comm ops
// list (placeRank's) among them, each receive first slid later while the
// host step it passes ends by the next transfer due on either end (its
// rank's next op, sendNext of its send) and it stays before its rank's
// next op and its consumer. It is false when the positions are out of key
// order (the argument fails).
func assembleRank(steps []ir.Step, list []placed, e []float64, sendNext []float64) ([]ir.Step, bool) {
	if !slideRecvs(list, e, sendNext) {
		return nil, false
	}
	out := make([]ir.Step, len(steps)+len(list), len(steps)+len(list)+1) // +1: room for OPT_STEP
	interleave(out, steps, list)
	return out, true
}

// slideRecvs sets each receive's final position in list (see
// assembleRank); it is false when the positions are out of order or past
// the host steps (e has one end time a host step). (The two loops of
// assembleRank in functions of their own keep their few values in
// registers.)
func slideRecvs(list []placed, e []float64, sendNext []float64) bool {
	j := int32(0)
	for k := range list {
		op := &list[k]
		at := op.at
		if op.recv {
			// The bounds: the consumer, the send's next op; and this rank's
			// next op (its position before its own slide).
			lim, limT := op.cons, sendNext[op.x]
			if k+1 < len(list) {
				next := &list[k+1]
				lim, limT = min(lim, next.at), min(limT, next.t)
			}
			for at < lim && e[at] <= limT {
				at++
			}
			op.at = at
		}
		if at < j {
			return false
		}
		j = at
	}
	return int(j) <= len(e)
}

// interleave writes to out (fresh: every Sub nil) the host steps with the
// ops of list before the host steps at their positions (in order).
// Fields are set one by one: a step without sub-steps then pays no write
// barrier while a GC runs, and one with them only a pointer's.
func interleave(out, steps []ir.Step, list []placed) {
	out = out[:len(steps)+len(list)]
	o, j := 0, 0
	for k := range list {
		op := &list[k]
		for ; j < int(op.at); j++ {
			copyStep(&out[o], &steps[j])
			o++
		}
		d := &out[o]
		d.Kind, d.Stage, d.Micro, d.Peer, d.Slot = op.kind, int(op.stage), int(op.micro), int(op.peer), ir.None
		o++
	}
	for ; j < len(steps); j++ {
		copyStep(&out[o], &steps[j])
		o++
	}
}

// collectTransfers is insertCommTimed's walk over the steps of p: it sets
// where each chunk's forward (fAt) and input-gradient step (bAt) run, and
// appends to ts the transfers, in producer order (rank by rank, step by
// step), but for their consumers and key times; sendOff[r+1] is the end of
// rank r's. (A function of its own: the loop keeps its values in
// registers.)
func collectTransfers(p *ir.Program, fAt, bAt []chunkAt, sendOff []int32, ts []transfer) []transfer {
	M := p.Micro
	nt := newNeighbourTable(p)
	for r, steps := range p.Ranks {
		for j := range steps {
			subs := ir.ComputesAt(steps, j)
			for sub := range subs {
				cs := &subs[sub]
				k := cs.Stage*M + cs.Micro
				switch cs.Kind {
				case ir.Forward:
					fAt[k] = chunkAt{int32(r), int32(j)}
				case ir.Backward, ir.BackwardInput:
					bAt[k] = chunkAt{int32(r), int32(j)}
				}
				var kind ir.Kind
				if e := nt.entry(cs); e != nil {
					if !e.consOK || int(e.cons) == r {
						continue
					}
					kind = sendKinds[neighbourClass[cs.Kind]]
				} else {
					sk, ok := needsSend(p, r, cs)
					if !ok {
						continue
					}
					kind = sk
				}
				// The key of a transfer: (time, tie). Ties: activations
				// before gradients, activations from later ranks first and
				// gradients from earlier ranks first, so a rank that
				// receives and sends in one instant sends first (its receive
				// is then posted later); then producer step and sub-step.
				// Any total order both ends agree on is safe.
				tie := uint64(kind)<<56 | uint64(tieRank(kind, int32(r))+1<<23)<<32 | uint64(j)<<2 | uint64(sub)
				ts = append(ts, transfer{tie: tie, src: int32(r), j: int32(j), sub: int32(sub),
					kind: kind, stage: int32(cs.Stage), micro: int32(cs.Micro)})
			}
		}
		sendOff[r+1] = int32(len(ts))
	}
	return ts
}

// idealTimeline times a program without transfers: each rank runs its steps
// in order, and a compute step starts when its rank is free and its
// cross-stage input (deps.Neighbour) exists (F(s,m) after F(s-1,m), B/I(s,m) after
// B/I(s+1,m), plus c.Comm when the producer runs on another rank). It returns every step's end time, or
// false when some rank can never proceed.
// positiveCompute returns c with every F, B, I and W of at most 0 raised
// to a millionth of the largest of them (false when none is positive).
func positiveCompute(c sim.Cost) (sim.Cost, bool) {
	lists := []*[]float64{&c.F, &c.B, &c.I, &c.W}
	largest := 0.0
	for _, xs := range lists {
		for _, x := range *xs {
			largest = max(largest, x)
		}
	}
	if !(largest > 0) {
		return c, false
	}
	for _, xs := range lists {
		if slices.ContainsFunc(*xs, func(x float64) bool { return x <= 0 }) {
			*xs = slices.Clone(*xs)
			for i, x := range *xs {
				if x <= 0 {
					(*xs)[i] = largest * 1e-6
				}
			}
		}
	}
	return c, true
}

func idealTimeline(p ir.Program, c sim.Cost) ([][]float64, bool) {
	return idealTimelineInto(p, c, new(timelineScratch))
}

// idealTimelineInto is idealTimeline with its buffers, the end times
// returned included, taken from sc (grown as needed): they stay valid until
// sc's next use.
//
// The timeline proper is serial: it hops from rank to rank as steps wait
// for one another. What it needs of each step (its cost, the keys it waits
// for and ends, the latency it adds) is first read off the program rank by
// rank, in parallel, into a compact record (timedStep), so that the serial
// part reads a few words a step rather than the step and its
// neighbourhood.
func idealTimelineInto(p ir.Program, c sim.Cost, sc *timelineScratch) ([][]float64, bool) {
	rankOf := p.Placement.RankOf
	P, S, M := len(p.Ranks), len(rankOf), p.Micro
	SM := S * M
	// chunkEnd[k] is the end of chunk k's F, chunkEnd[S*M+k] of its B or
	// I (or W, which comes later), or -1 while it has not run.
	sc.chunkEnd = par.Resize(sc.chunkEnd, 2*SM)
	chunkEnd := sc.chunkEnd
	for i := range chunkEnd {
		chunkEnd[i] = -1
	}
	// Ranks waiting for a key of chunkEnd, as linked lists.
	sc.head = par.Resize(sc.head, 2*SM)
	head := sc.head
	for i := range head {
		head[i] = -1
	}
	next := make([]int32, P)
	ends := make([][]float64, P)
	recs := make([][]timedStep, P)
	multi := make([][]timedSub, P)
	pos := make([]int, P)
	free := make([]float64, P)
	work := make([]int32, 0, P)
	n := 0
	for r := range P {
		n += len(p.Ranks[r])
	}
	sc.ends = par.Resize(sc.ends, n) // each entry written as its step is timed
	sc.recs = par.Resize(sc.recs, n)
	if len(sc.multi) < P {
		sc.multi = make([][]timedSub, P)
	}
	// latency[s]: what a transfer of stage s's activation (or of the
	// gradient with respect to it) adds, from another rank; latency[S]:
	// the latency of a transfer without a size.
	latency := make([]float64, S+1)
	for s := range S {
		latency[s] = c.Comm + c.ActTime(s)
	}
	latency[S] = c.Comm + c.ActTime(-1)
	n = 0
	for r := range P {
		k := len(p.Ranks[r])
		ends[r] = sc.ends[n : n+k : n+k]
		recs[r] = sc.recs[n : n+k : n+k]
		n += k
		work = append(work, int32(r))
	}
	rc := recorder{p: &p, nt: newNeighbourTable(&p), c: &c, latency: latency, S: S, M: M}
	// costOf[k*S+s] is StepCost of a step of kind k (not an overlap) on
	// stage s: a function of the two alone when c.Each is nil (a
	// per-micro-batch replay), which every step would otherwise ask of the
	// cost model anew.
	if c.Each == nil {
		sc.costOf = par.Resize(sc.costOf, int(numKinds)*S)
		rc.costOf = sc.costOf
		for _, k := range ir.Kinds() {
			for s := range S {
				rc.costOf[int(k)*S+s] = c.StepCost(ir.Step{Kind: k, Stage: s, Micro: 0, Peer: ir.None, Slot: ir.None})
			}
		}
	}
	par.ForRanks(P, n, func(r int) {
		more := rc.rank(r, recs[r], sc.multi[r][:0])
		sc.multi[r] = more
		multi[r] = more
	})
	wake := func(key int32) {
		for w := head[key]; w >= 0; w = next[w] {
			work = append(work, w)
		}
		head[key] = -1
	}
	for len(work) > 0 {
		r := int(work[len(work)-1])
		work = work[:len(work)-1]
		rec, e, i := recs[r], ends[r], pos[r]
		start := free[r]
	advance:
		for i < len(rec) {
			st := &rec[i]
			switch w := st.wait; {
			case w >= 0:
				t := chunkEnd[w]
				if t < 0 {
					next[r] = head[w]
					head[w] = int32(r)
					break advance
				}
				start = max(start, t+st.lat)
			case w == multiSubs:
				for x := st.end; ; x++ {
					s := &multi[r][x]
					if s.wait >= 0 {
						t := chunkEnd[s.wait]
						if t < 0 {
							next[r] = head[s.wait]
							head[s.wait] = int32(r)
							start = free[r] // as it was before this step
							break advance
						}
						start = max(start, t+s.lat)
					}
					if !s.more {
						break
					}
				}
			}
			end := start + st.cost
			e[i] = end
			free[r] = end
			start = end
			i++
			switch {
			case st.end >= 0 && st.wait != multiSubs:
				chunkEnd[st.end] = end
				wake(st.end)
			case st.wait == multiSubs:
				for x := st.end; ; x++ {
					s := &multi[r][x]
					if s.end >= 0 {
						chunkEnd[s.end] = end
						wake(s.end)
					}
					if !s.more {
						break
					}
				}
			}
		}
		pos[r] = i
	}
	for r := range P {
		if pos[r] < len(p.Ranks[r]) {
			return nil, false
		}
	}
	return ends, true
}

// numKinds is one more than the largest valid kind.
var numKinds = slices.Max(ir.Kinds()) + 1

// recorder reads off a program what idealTimelineInto needs of each step,
// rank by rank (the loop in a function of its own keeps its values in
// registers across its calls).
type recorder struct {
	p       *ir.Program
	nt      neighbourTable
	c       *sim.Cost
	costOf  []float64 // StepCost per (kind, stage) (see idealTimelineInto), or nil
	latency []float64 // per stage, and at S the latency without a size
	S, M    int
}

// rank fills rec, the records of rank r's steps, and returns more with the
// sub-steps of its overlaps appended.
func (x *recorder) rank(r int, rec []timedStep, more []timedSub) []timedSub {
	steps := x.p.Ranks[r]
	rec = rec[:len(steps)]
	S := x.S
	for j := range steps {
		st := &steps[j]
		k := st.Kind
		var cost float64
		if x.costOf != nil && k.Valid() && !k.IsOverlap() && st.Stage >= 0 && st.Stage < S {
			cost = x.costOf[int(k)*S+st.Stage]
		} else {
			cost = x.c.StepCost(*st)
		}
		switch {
		case k.IsOverlap():
			// Its sub-steps go to more, the record pointing at them.
			rec[j] = timedStep{cost: cost, wait: multiSubs, end: int32(len(more))}
			for i := range st.Sub {
				more = append(more, x.sub(r, &st.Sub[i]))
				more[len(more)-1].more = i+1 < len(st.Sub)
			}
			if len(st.Sub) == 0 {
				rec[j].wait = -1
				rec[j].end = -1
			}
		case k.IsCompute():
			ts := x.sub(r, st)
			rec[j] = timedStep{cost: cost, lat: ts.lat, wait: ts.wait, end: ts.end}
		default:
			rec[j] = timedStep{cost: cost, wait: -1, end: -1}
		}
	}
	return more
}

// sub returns what the timeline needs of compute sub-step cs of rank r.
func (x *recorder) sub(r int, cs *ir.Step) timedSub {
	ts := timedSub{wait: -1, end: -1}
	S, M := x.S, x.M
	SM := S * M
	// Its cross-stage input: the activation of F(s-1) or the gradient of
	// B/I(s+1). The chunk's own F and I run earlier on this rank, and a
	// compute-only program ships no labels or inputs.
	var stage, rank, act int
	var grad, ok bool
	if e := x.nt.entry(cs); e != nil { // nt.across without the call
		stage, rank, act, grad, ok = int(e.stage), int(e.rank), int(e.act), e.grad, e.ok
	} else {
		stage, rank, act, grad, ok = deps.Across(x.p, cs)
	}
	if ok { // deps.Neighbour, in registers
		ts.wait = int32(stage*M + cs.Micro)
		if grad {
			ts.wait += int32(SM)
		}
		if rank != r {
			// The transfer: its latency and, with a bandwidth, the size of
			// the activation (F) or of the gradient with respect to cs's
			// output (a backward); no size: latency only.
			if act < 0 || act >= S {
				act = S
			}
			ts.lat = x.latency[act]
		}
	}
	k := int32(cs.Stage*M + cs.Micro)
	switch {
	case cs.Kind == ir.Forward:
		ts.end = k
	case cs.Kind.IsBackward():
		ts.end = int32(SM) + k
	}
	return ts
}

// timedStep is what idealTimelineInto needs of a step: its cost and, for a
// single compute step, the key of chunkEnd it waits for (-1: none), the
// latency that wait adds (0 when the producer is on this rank), and the
// key it ends (-1: none). For an overlap, wait is multiSubs and end the
// index of its first sub-step in its rank's timedSub list.
type timedStep struct {
	cost, lat float64
	wait, end int32
}

// multiSubs is timedStep.wait for a step whose compute sub-steps (an
// overlap's) are listed apart.
const multiSubs = -2

// timedSub is what idealTimelineInto needs of one compute sub-step of an
// overlap: as timedStep, and whether the step has another after it.
type timedSub struct {
	lat       float64
	wait, end int32
	more      bool
}

func tieRank(k ir.Kind, src int32) int32 {
	if k == ir.SendF {
		return -src
	}
	return src
}

// timedScratch holds insertCommTimed's buffers from one call to the next
// (timedKeep): at P = 64, M = 256 they come to some 10 MB a lowering, which
// would otherwise be allocated, cleared and collected every time.
type timedScratch struct {
	at         []chunkAt
	ts         []transfer
	keys       []transferKey
	runs, mine []int32
	ops        []placed
	sendNext   []float64
	timeline   timelineScratch
}

// timelineScratch holds idealTimelineInto's buffers.
type timelineScratch struct {
	chunkEnd, ends []float64
	head           []int32
	recs           []timedStep
	costOf         []float64
	multi          [][]timedSub // per rank: the sub-steps of its overlaps
}

var timedKeep par.Keep[timedScratch]

// chunkAt is where a chunk's step runs: its rank and index there.
type chunkAt struct{ rank, index int32 }

// placed is one op of a rank's comm stream in insertCommTimed.
type placed struct {
	t     float64 // its key time
	at    int32   // host step index the op goes before (a receive: before its slide)
	cons  int32   // a receive: index of its consuming host step
	x     int32   // the transfer
	stage int32   // the op's step: Stage, Micro, Peer, Kind
	micro int32
	peer  int32
	kind  ir.Kind
	recv  bool
}

// transfer is one send/receive pair of the timed comm order.
type transfer struct {
	tie          uint64 // see insertCommTimed
	src, j, sub  int32
	dst, consume int32
	stage, micro int32
	kind         ir.Kind // SEND_F or SEND_B
}

// transferKey is a transfer's key: its key time, then its tie (see
// insertCommTimed); keys[i] is ts[i]'s.
type transferKey struct {
	t   float64
	tie uint64
}

// keyLess orders transfers a and b by their keys.
func keyLess(keys []transferKey, a, b int32) bool {
	x, y := &keys[a], &keys[b]
	return x.t < y.t || (x.t == y.t && x.tie < y.tie)
}

// mergeByKey writes the key-ordered merge of the key-ordered transfer index
// lists a and b to dst and returns it (len(a)+len(b) long). dst may be the
// memory that holds the lists before b, up to b: the element written at
// i+j never lies past b[j], which is read first.
func mergeByKey(dst, a, b []int32, keys []transferKey) []int32 {
	dst = dst[:len(a)+len(b)]
	i, j := 0, 0
	if len(a) > 0 && len(b) > 0 {
		// The heads and their keys stay in locals: one key load an element.
		xa, xb := a[0], b[0]
		ka, kb := keys[xa], keys[xb]
		for {
			if kb.t < ka.t || (kb.t == ka.t && kb.tie < ka.tie) {
				dst[i+j] = xb
				if j++; j == len(b) {
					break
				}
				xb = b[j]
				kb = keys[xb]
			} else {
				dst[i+j] = xa
				if i++; i == len(a) {
					break
				}
				xa = a[i]
				ka = keys[xa]
			}
		}
	}
	for ; i < len(a); i++ {
		dst[i+j] = a[i]
	}
	copy(dst[i+j:], b[j:])
	return dst
}

// sortByKey sorts the transfer indexes a by keyLess (runs are short and
// nearly sorted: insertion sort).
func sortByKey(a []int32, keys []transferKey) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && keyLess(keys, a[j], a[j-1]); j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// insertDataCommFast is insertDataComm (Lower's fused "data+comm" pass) with
// the timed order reading the program with loads without copying the ranks
// that get none; the result is the same.
func insertDataCommFast(p ir.Program, opt CommOptions) (ir.Program, error) {
	if opt.Order != Timed {
		return insertDataComm(p, opt)
	}
	if err := checkSteps(p, "comm", true); err != nil {
		return ir.Program{}, err
	}
	if q, ok := insertCommTimed(insertDataShared(p), opt.cost()); ok {
		return q, nil
	}
	return insertCommLate(p, newDataLoads(p))
}

// copyStep copies st to d (fresh: Sub nil) field by field: a step without
// sub-steps then needs no write barrier, and one with them only a
// pointer's (which, unlike a whole step's copy, keeps the caller's values
// in registers).
func copyStep(d, st *ir.Step) {
	d.Kind, d.Stage, d.Micro, d.Peer, d.Slot = st.Kind, st.Stage, st.Micro, st.Peer, st.Slot
	if st.Sub != nil {
		d.Sub = st.Sub
	}
}
