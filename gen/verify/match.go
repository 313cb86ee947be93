package verify

import (
	"slices"
	"sync"

	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
)

// match pairs transfers FIFO per (source rank, destination rank, channel)
// and checks that every transfer has a partner that agrees with it.
//
// Fast path: every transfer has exactly one counterpart (deps.Counterpart:
// SEND_F(s,m) and RECV_F(s+1,m), ...) by construction of the chunk tables. When each one's
// FIFO position on its (source, destination, channel) queue equals its
// counterpart's, FIFO pairs exactly the counterparts and all is well. Else
// matchSlow pairs FIFO explicitly and words the first failure.
//
// The counterparts go into the strict model's partners first. When every
// transfer has one and there is more than one worker, the deadlock check
// (runModel) runs on that model beside the FIFO check: it is what deadlock
// would decide if the fast path holds, and then match returns its verdict
// as deadlock; otherwise deadlock is nil, the model's partners are left to
// deadlock, and the speculative run is dropped.
func (c *checker) match() (deadlock func() error, err error) {
	P, nOps := c.P, len(c.opRank)
	// A queue's ops all live on one rank (its source for the sends, its
	// destination for the receives), so ranks find their ops'
	// counterparts and number their queues in parallel, then check their
	// counterparts' positions.
	ops, partner := c.model.OpOff, c.model.OpPartner
	w := par.Workers(P, c.rep.Steps)
	found := make([]bool, P)
	c.sc.ord = par.Resize(c.sc.ord, nOps)
	ord := c.sc.ord // position within its queue, written for every op
	// The same pass over each rank's ops numbers them within their
	// queues: the rank's queues are told apart by peer and queueClass, in
	// a table of 6P counters per worker that each rank leaves zeroed
	// behind it.
	counts := make([][]int32, w)
	par.ForRanksW(w, P, func(wk, r int) {
		cnt := counts[wk]
		if cnt == nil {
			cnt = make([]int32, queueClasses*P)
			counts[wk] = cnt
		}
		found[r] = c.counterparts(ops[r], ops[r+1], partner, ord, cnt)
	})
	speculate := w > 1 && !slices.Contains(found, false)
	if speculate {
		w-- // this goroutine runs the model
	}
	fast := found
	fifo := func() {
		// Every op's position equals its counterpart's.
		par.ForRanksW(w, P, func(_, r int) {
			mine, pos := partner[ops[r]:ops[r+1]], ord[ops[r]:ops[r+1]]
			for i, q := range mine {
				if q < 0 || ord[q] != pos[i] {
					fast[r] = false
					return
				}
			}
		})
	}
	var dead error
	if speculate {
		// The simulation, serial and the longer of the two, runs here at
		// once; the FIFO check, the slot check (which reads only what the
		// walk found; Check reports its finding in its turn) and then the
		// caller's own work (Options.Beside, when the FIFO check passes)
		// fill the other core.
		var beside sync.WaitGroup
		beside.Go(func() {
			fifo()
			c.slotsErr, c.slotsEarly = c.slots(), true
			if !slices.Contains(fast, false) {
				c.beside()
			}
		})
		dead = c.runModel(c.model)
		beside.Wait()
	} else {
		fifo()
	}
	if !slices.Contains(fast, false) {
		c.opPartner = partner
		if !speculate {
			return nil, nil
		}
		return func() error { return dead }, nil
	}
	c.opPartner = make([]int32, nOps)
	return nil, c.matchSlow(ord)
}

// counterparts sets partner[op] to the counterpart of each op in
// [lo, hi) (deps.CounterpartOf), or -1 where it has none, and ord[op] to
// its position within its FIFO queue, counted in cnt (queueClasses
// counters per peer, zero on entry and on return), and reports whether
// every op has a counterpart.
func (c *checker) counterparts(lo, hi int32, partner, ord, cnt []int32) bool {
	steps, out, pos := c.opStep[lo:hi], partner[lo:hi], ord[lo:hi]
	all := true
	for i := range steps {
		st := &steps[i]
		q := int32(-1)
		if k, ds := deps.CounterpartOf(st.kind); k.IsComm() {
			q = c.at1(atOf(k), int(st.stage)+ds, int(st.micro))
		}
		out[i] = q
		all = all && q >= 0
		k := int(st.peer)*queueClasses + int(queueClass[st.kind])
		pos[i] = cnt[k]
		cnt[k]++
	}
	for i := range steps {
		cnt[int(steps[i].peer)*queueClasses+int(queueClass[steps[i].kind])] = 0
	}
	return all
}

// queueClasses is the number of queues between a rank and one peer: a
// send queue and a receive queue per channel.
const queueClasses = 6

// queueClass tells a transfer kind's queues with one peer apart:
// 2·(channel-1) for a send, one more for a receive.
var queueClass = func() (t [256]uint8) {
	for k := range t {
		if kind := ir.Kind(k); kind.IsComm() {
			t[k] = 2 * uint8(kind.Channel()-1)
			if kind.IsRecv() {
				t[k]++
			}
		}
	}
	return t
}()

// at1 returns the op id of the transfer in table a for chunk (s, m), or -1.
func (c *checker) at1(a, s, m int) int32 {
	if s < 0 || s >= c.S {
		return -1
	}
	return c.opAt[a][s*c.M+m]
}

// opKey returns the index of op's FIFO queue: sends in [0, nKeys), receives
// in [nKeys, 2nKeys), each by (source rank, destination rank, channel).
func (c *checker) opKey(op, nKeys int) int {
	st, r := &c.opStep[op], int(c.opRank[op])
	if st.kind.IsRecv() {
		return nKeys + c.pair(int(st.peer), r)*3 + int(st.kind.Channel()) - 1
	}
	return c.pair(r, int(st.peer))*3 + int(st.kind.Channel()) - 1
}

// densePairs is the most ranks for which matchSlow numbers the (source,
// destination) pairs densely.
const densePairs = 256

// opEnds returns the source and destination rank of transfer op.
func (c *checker) opEnds(op int) (src, dst int) {
	st, r := &c.opStep[op], int(c.opRank[op])
	if st.kind.IsRecv() {
		return int(st.peer), r
	}
	return r, int(st.peer)
}

// pair returns the number of the (source, destination) pair in match.
func (c *checker) pair(src, dst int) int {
	if c.pairIdx == nil {
		return src*c.P + dst
	}
	return int(c.pairIdx[uint64(src)<<32|uint64(uint32(dst))])
}

// matchSlow pairs FIFO explicitly and reports the first transfer (in rank,
// index order) without a partner or with the wrong one; ord is each op's
// position within its queue.
func (c *checker) matchSlow(ord []int32) error {
	// Queues are numbered by (source, destination) pair: densely for a
	// few ranks, and by the pairs that occur for many (a P×P table would
	// dwarf the program: 65535 ranks make 4·10⁹ pairs).
	P, nOps := c.P, len(c.opRank)
	nPairs := P * P
	c.pairIdx = nil
	if P > densePairs {
		c.pairIdx = make(map[uint64]int32)
		for op := range nOps {
			src, dst := c.opEnds(op)
			k := uint64(src)<<32 | uint64(uint32(dst))
			if _, ok := c.pairIdx[k]; !ok {
				c.pairIdx[k] = int32(len(c.pairIdx))
			}
		}
		nPairs = len(c.pairIdx)
	}
	nKeys := nPairs * 3
	cnt := make([]int32, 2*nKeys) // ops per queue: [0,nKeys) sends, [nKeys,2nKeys) receives
	for op := range nOps {
		cnt[c.opKey(op, nKeys)]++
	}
	off := make([]int32, 2*nKeys+1)
	for k, n := range cnt {
		off[k+1] = off[k] + n
	}
	list := make([]int32, nOps)
	for op := range nOps {
		list[off[c.opKey(op, nKeys)]+ord[op]] = int32(op)
	}
	for op := range nOps {
		k := int32(c.opKey(op, nKeys))
		other := k + int32(nKeys)
		if k >= int32(nKeys) {
			other = k - int32(nKeys)
		}
		if ord[op] >= cnt[other] {
			c.opPartner[op] = -1
			return c.unmatched(int32(op), cnt[k], cnt[other])
		}
		c.opPartner[op] = list[off[other]+ord[op]]
	}
	for op := range nOps {
		a, b := c.stepOf(int32(op)), c.stepOf(c.opPartner[op])
		if want := deps.Counterpart(a); !want.SameAction(b) {
			q := c.opPartner[op]
			src, dst := c.opRank[op], c.opRank[q]
			if a.Kind.IsRecv() {
				src, dst = dst, src
			}
			return c.fail(int(c.opRank[op]), int(c.opIdx[op]), a, Mismatch,
				"pairs (FIFO, transfer #%d on the %s channel from rank %d to rank %d) with rank %d step %d (%s), but it must meet %s; sends and receives between two ranks must come in the same order on both",
				ord[op]+1, a.Kind.Channel(), src, dst, c.opRank[q], c.opIdx[q], b, want)
		}
	}
	// FIFO pairs everything with its counterpart after all (the fast path
	// only gives up; this cannot happen with consistent tables).
	return nil
}

// opStep is what match reads of a transfer's step, recorded by the walk
// once leaf has checked it: four words a transfer, read in op order, where
// the steps themselves (eight words each, among the host steps) would take
// four times the memory traffic.
type opStep struct {
	kind               ir.Kind
	stage, micro, peer int32
}

// stepOf returns op's step.
func (c *checker) stepOf(op int32) ir.Step { return c.p.Ranks[c.opRank[op]][c.opIdx[op]] }

func (c *checker) unmatched(op, mine, theirs int32) error {
	st := c.stepOf(op)
	r := int(c.opRank[op])
	want := deps.Counterpart(st)
	side, other := "sends", "receives"
	src, dst := r, st.Peer
	if st.Kind.IsRecv() {
		side, other = other, side
		src, dst = dst, src
	}
	return c.fail(r, int(c.opIdx[op]), st, Unmatched,
		"has no partner: on the %s channel from rank %d to rank %d there are %d %s but only %d %s, and no %s on rank %d pairs with this one; a transfer without a partner never completes",
		st.Kind.Channel(), src, dst, mine, side, theirs, other, want, st.Peer)
}
