package passes

import (
	"cmp"
	"math"
	"sort"

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
// timeline's makespan. ok is false when the argument does not apply (a
// compute cost ≤ 0, an infeasible order, a missing producer); the caller then
// uses the late placement, which also gives the precise error.
func insertCommTimed(p ir.Program, c sim.Cost) (ir.Program, bool) {
	rankOf := p.Placement.RankOf
	P, S, M := len(p.Ranks), len(rankOf), p.Micro
	for _, steps := range p.Ranks {
		for _, st := range steps {
			if st.Kind.IsCompute() && c.StepCost(st) <= 0 {
				return ir.Program{}, false
			}
		}
	}
	ends, ok := idealTimeline(p, c)
	if !ok {
		return ir.Program{}, false
	}
	// Where each chunk's forward and input-gradient step run.
	type at struct{ rank, index int32 }
	fAt := make([]at, S*M)
	bAt := make([]at, S*M)
	for i := range fAt {
		fAt[i], bAt[i] = at{-1, -1}, at{-1, -1}
	}
	type transfer struct {
		t            float64
		src, j, sub  int32
		dst, consume int32
		kind         ir.Kind // SEND_F or SEND_B
		stage, micro int32
	}
	var ts []transfer
	for r, steps := range p.Ranks {
		for j, st := range steps {
			for _, cs := range st.Computes() {
				k := cs.Stage*M + cs.Micro
				switch cs.Kind {
				case ir.Forward:
					fAt[k] = at{int32(r), int32(j)}
				case ir.Backward, ir.BackwardInput:
					bAt[k] = at{int32(r), int32(j)}
				}
			}
		}
	}
	for r, steps := range p.Ranks {
		for j, st := range steps {
			for sub, cs := range st.Computes() {
				kind, ok := needsSend(rankOf, r, cs)
				if !ok {
					continue
				}
				var cons at
				if kind == ir.SendF {
					cons = fAt[(cs.Stage+1)*M+cs.Micro]
				} else {
					cons = bAt[(cs.Stage-1)*M+cs.Micro]
				}
				if cons.rank < 0 {
					return ir.Program{}, false
				}
				ts = append(ts, transfer{t: ends[r][j], src: int32(r), j: int32(j), sub: int32(sub),
					dst: cons.rank, consume: cons.index, kind: kind, stage: int32(cs.Stage), micro: int32(cs.Micro)})
			}
		}
	}
	// The key of transfer x: (time, tie). Ties: activations before
	// gradients, activations from later ranks first and gradients from
	// earlier ranks first, so a rank that receives and sends in one instant
	// sends first (its receive is then posted later); then producer step and
	// sub-step. Any total order both ends agree on is safe.
	tie := make([]uint64, len(ts))
	for i, x := range ts {
		tie[i] = uint64(x.kind)<<56 | uint64(tieRank(x.kind, x.src)+1<<23)<<32 | uint64(x.j)<<2 | uint64(x.sub)
	}
	less := func(a, b int32) int {
		return cmp.Or(cmp.Compare(ts[a].t, ts[b].t), cmp.Compare(tie[a], tie[b]))
	}
	// Each rank's transfers (both halves), in key order. ts is in producer
	// order (rank by rank, step by step), so per rank the sends and the
	// receives from each source rank form runs that are sorted but for ties
	// inside one step; an insertion sort fixes those in linear time and a
	// merge of the few runs (one per neighbour) gives the rank's order.
	runs := make([][][]int32, P) // runs[r]: rank r's sends, then one run per source
	for i, x := range ts {
		if rs := runs[x.src]; len(rs) == 0 {
			runs[x.src] = append(runs[x.src], nil)
		}
		runs[x.src][0] = append(runs[x.src][0], int32(i))
		rs := runs[x.dst]
		if len(rs) == 0 {
			rs = append(rs, nil)
		}
		if last := len(rs) - 1; last == 0 || ts[rs[last][0]].src != x.src {
			rs = append(rs, nil)
		}
		rs[len(rs)-1] = append(rs[len(rs)-1], int32(i))
		runs[x.dst] = rs
	}
	mine := make([][]int32, P)
	for r, rs := range runs {
		n := 0
		for _, run := range rs {
			insertionSort(run, less)
			n += len(run)
		}
		merged := make([]int32, 0, n)
		for len(merged) < n {
			best := -1
			for k, run := range rs {
				if len(run) > 0 && (best < 0 || less(run[0], rs[best][0]) < 0) {
					best = k
				}
			}
			merged = append(merged, rs[best][0])
			rs[best] = rs[best][1:]
		}
		mine[r] = merged
	}
	// upper returns how many of rank r's host steps end by time t.
	upper := func(r int32, t float64) int {
		e := ends[r]
		return sort.Search(len(e), func(i int) bool { return e[i] > t })
	}
	type placed struct {
		at   int     // host step index the op goes before
		cons int     // for a receive: index of its consuming host step
		t    float64 // the transfer's key time
		peer int32   // index of the other half in ops[step.Peer]
		step ir.Step
	}
	sendPos := make([]int32, len(ts))
	recvPos := make([]int32, len(ts))
	ops := make([][]placed, P)
	for r, list := range mine {
		ops[r] = make([]placed, len(list))
		for k, i := range list {
			x := &ts[i]
			if x.src == int32(r) {
				sendPos[i] = int32(k)
				ops[r][k] = placed{at: upper(x.src, x.t), t: x.t, step: ir.Comm(x.kind, int(x.stage), int(x.micro), int(x.dst))}
				continue
			}
			recvPos[i] = int32(k)
			recvKind, recvStage := ir.RecvF, int(x.stage)+1
			if x.kind == ir.SendB {
				recvKind, recvStage = ir.RecvB, int(x.stage)-1
			}
			ops[r][k] = placed{at: min(upper(x.dst, x.t), int(x.consume)), cons: int(x.consume), t: x.t,
				step: ir.Comm(recvKind, recvStage, int(x.micro), int(x.src))}
		}
	}
	for i, x := range ts {
		ops[x.src][sendPos[i]].peer = recvPos[i]
		ops[x.dst][recvPos[i]].peer = sendPos[i]
	}
	// Slide each receive later, past host steps but never past another
	// transfer of its rank (the comm-stream order stays the key order), while
	// the new post time (the end of the host step it passes) is no later than
	// the next transfer due on either end and the receive stays before its
	// consumer: it then delays nothing in the ideal timeline, and the
	// induction above still holds.
	next := func(r, k int) (int, float64) {
		if k+1 < len(ops[r]) {
			return ops[r][k+1].at, ops[r][k+1].t
		}
		return len(p.Ranks[r]), math.Inf(1)
	}
	for r := range ops {
		for k := range ops[r] {
			op := &ops[r][k]
			if !op.step.Kind.IsRecv() {
				continue
			}
			limitAt, limitT := next(r, k)
			_, senderNext := next(op.step.Peer, int(op.peer))
			limitT = min(limitT, senderNext)
			limitAt = min(limitAt, op.cons)
			for op.at < limitAt && ends[r][op.at] <= limitT {
				op.at++
			}
		}
	}
	q := ir.Program{Placement: p.Placement, Micro: p.Micro, Ranks: make([][]ir.Step, P)}
	for r, steps := range p.Ranks {
		out := make([]ir.Step, 0, len(steps)+len(ops[r])+1) // +1: room for OPT_STEP
		k := 0
		for j := 0; j <= len(steps); j++ {
			for ; k < len(ops[r]) && ops[r][k].at == j; k++ {
				out = append(out, ops[r][k].step)
			}
			if k < len(ops[r]) && ops[r][k].at < j {
				return ir.Program{}, false // positions out of key order: the argument fails
			}
			if j < len(steps) {
				out = append(out, steps[j])
			}
		}
		q.Ranks[r] = out
	}
	return q, true
}

// idealTimeline times a program without transfers: each rank runs its steps
// in order, and a compute step starts when its rank is free and its inputs
// exist (F(s,m) after F(s-1,m), B/I(s,m) after B/I(s+1,m), plus c.Comm when
// the producer runs on another rank). It returns every step's end time, or
// false when some rank can never proceed.
func idealTimeline(p ir.Program, c sim.Cost) ([][]float64, bool) {
	rankOf := p.Placement.RankOf
	P, S, M := len(p.Ranks), len(rankOf), p.Micro
	fEnd := make([]float64, S*M)
	bEnd := make([]float64, S*M)
	for i := range fEnd {
		fEnd[i], bEnd[i] = -1, -1
	}
	// Ranks waiting for a chunk's F (key k) or B/I (key S*M+k), as linked lists.
	head := make([]int32, 2*S*M)
	for i := range head {
		head[i] = -1
	}
	next := make([]int32, P)
	ends := make([][]float64, P)
	pos := make([]int, P)
	free := make([]float64, P)
	work := make([]int32, 0, P)
	for r := range P {
		ends[r] = make([]float64, len(p.Ranks[r]))
		work = append(work, int32(r))
	}
	wake := func(key int) {
		for w := head[key]; w >= 0; w = next[w] {
			work = append(work, w)
		}
		head[key] = -1
	}
	for len(work) > 0 {
		r := int(work[len(work)-1])
		work = work[:len(work)-1]
	advance:
		for pos[r] < len(p.Ranks[r]) {
			st := p.Ranks[r][pos[r]]
			start := free[r]
			for _, cs := range st.Computes() {
				var key, from int
				var have []float64
				switch {
				case cs.Kind == ir.Forward && cs.Stage > 0:
					key, from, have = (cs.Stage-1)*M+cs.Micro, cs.Stage-1, fEnd
				case cs.Kind.IsBackward() && cs.Stage < S-1:
					key, from, have = (cs.Stage+1)*M+cs.Micro, cs.Stage+1, bEnd
				default:
					continue
				}
				t := have[key]
				if t < 0 {
					wk := key
					if cs.Kind.IsBackward() {
						wk += S * M
					}
					next[r] = head[wk]
					head[wk] = int32(r)
					break advance
				}
				if rankOf[from] != r {
					t += c.Comm
				}
				start = max(start, t)
			}
			end := start + c.StepCost(st)
			ends[r][pos[r]] = end
			free[r] = end
			pos[r]++
			for _, cs := range st.Computes() {
				k := cs.Stage*M + cs.Micro
				switch {
				case cs.Kind == ir.Forward:
					fEnd[k] = end
					wake(k)
				case cs.Kind.IsBackward():
					bEnd[k] = end
					wake(S*M + k)
				}
			}
		}
	}
	for r := range P {
		if pos[r] < len(p.Ranks[r]) {
			return nil, false
		}
	}
	return ends, true
}

func tieRank(k ir.Kind, src int32) int32 {
	if k == ir.SendF {
		return -src
	}
	return src
}

// insertionSort sorts a nearly sorted run in place.
func insertionSort(a []int32, cmp func(a, b int32) int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && cmp(a[j], a[j-1]) < 0; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}
