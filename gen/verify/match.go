package verify

import "github.com/ppgen/ppgen/gen/ir"

// match pairs transfers FIFO per (source rank, destination rank, channel)
// and checks that every transfer has a partner that agrees with it.
func (c *checker) match() error {
	P, nOps := c.P, len(c.opRank)
	nKeys := P * P * 3
	cnt := make([]int32, 2*nKeys) // [0,nKeys): sends, [nKeys,2nKeys): receives
	key := make([]int32, nOps)    // into cnt
	ord := make([]int32, nOps)    // position within its key
	for op := range nOps {
		st := c.opStep(int32(op))
		r, ch := int(c.opRank[op]), int(st.Kind.Channel())-1
		k := (r*P+st.Peer)*3 + ch
		if st.Kind.IsRecv() {
			k = nKeys + (st.Peer*P+r)*3 + ch
		}
		key[op], ord[op] = int32(k), cnt[k]
		cnt[k]++
	}
	off := make([]int32, 2*nKeys+1)
	for k, n := range cnt {
		off[k+1] = off[k] + n
	}
	list := make([]int32, nOps)
	for op := range nOps {
		list[off[key[op]]+ord[op]] = int32(op)
	}
	c.opPartner = make([]int32, nOps)
	for op := range nOps {
		k := key[op]
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
		a, b := c.opStep(int32(op)), c.opStep(c.opPartner[op])
		if want := counterpart(a); !want.SameAction(b) {
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
	return nil
}

func (c *checker) opStep(op int32) ir.Step { return c.p.Ranks[c.opRank[op]][c.opIdx[op]] }

// counterpart returns the step a transfer must pair with (peer not set).
func counterpart(st ir.Step) ir.Step {
	switch st.Kind {
	case ir.SendF:
		return ir.Compute(ir.RecvF, st.Stage+1, st.Micro)
	case ir.RecvF:
		return ir.Compute(ir.SendF, st.Stage-1, st.Micro)
	case ir.SendB:
		return ir.Compute(ir.RecvB, st.Stage-1, st.Micro)
	case ir.RecvB:
		return ir.Compute(ir.SendB, st.Stage+1, st.Micro)
	case ir.DataSend:
		return ir.Compute(ir.DataRecv, st.Stage+1, st.Micro)
	case ir.DataRecv:
		return ir.Compute(ir.DataSend, st.Stage-1, st.Micro)
	}
	return st
}

func (c *checker) unmatched(op, mine, theirs int32) error {
	st := c.opStep(op)
	r := int(c.opRank[op])
	want := counterpart(st)
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
