package passes

import (
	"github.com/ppgen/ppgen/gen/internal/par"
	"github.com/ppgen/ppgen/gen/ir"
)

// RecvDistance returns the mean, over all receives (RECV_F, RECV_B,
// DATA_RECV) of the program, of the number of compute steps between a
// receive's post and its first consumer: 0 when the receive sits right before
// its consumer (only transfers and local steps between them), k when k compute
// steps run while it is outstanding. A compute step consumes RECV_F(s, m) and
// DATA_RECV(s, m) when it is (or holds) F(s, m), and RECV_B(s, m) when it is
// B(s, m) or I(s, m). Receives without a consumer are not counted. It is 0
// when the program has no receives.
//
// Larger distances mean buffers held longer and, under rendezvous, ranks
// forced to post early; late placement minimises it.
func RecvDistance(p ir.Program) float64 {
	sum, n := recvDistance(p, nil, nil)
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n)
}

// RecvDistances returns RecvDistance per rank (0 for a rank without receives).
func RecvDistances(p ir.Program) []float64 {
	out := make([]float64, len(p.Ranks))
	recvDistance(p, out, nil)
	return out
}

// recvDistance returns the sum of distances and the number of receives
// counted; when perRank is non-nil it also fills the per-rank means, and
// when slots is non-nil the slot counts of SlotCounts, from the same walk
// over the steps (Measure: one pass over the program's memory, not two). A
// receive counts on its stage's rank (where verify requires it, with its
// consumer), so ranks touch disjoint chunks and go in parallel.
func recvDistance(p ir.Program, perRank []float64, slots []int) (sum, n int) {
	S, M := p.Stages(), p.Micro
	if S <= 0 || M <= 0 {
		if slots != nil {
			copy(slots, SlotCounts(p))
		}
		return 0, 0
	}
	// pending[recv*S*M + chunk]: 1 + the compute count when the receive
	// was posted, or 0 (none pending: fresh memory needs no fill).
	pending := make([]int32, 3*S*M)
	sums := make([]int, 2*len(p.Ranks)) // per rank: sum, count
	par.ForRanks(len(p.Ranks), p.NumSteps(), func(r int) {
		d := distWalk{M: M, r: r, rankOf: p.Placement.RankOf, pending: pending}
		rs, rn, nSlots := d.rank(p.Ranks[r])
		sums[2*r], sums[2*r+1] = rs, rn
		if slots != nil {
			slots[r] = nSlots
		}
		if perRank != nil && rn > 0 {
			perRank[r] = float64(rs) / float64(rn)
		}
	})
	for r := range p.Ranks {
		sum += sums[2*r]
		n += sums[2*r+1]
	}
	return sum, n
}

// distWalk is recvDistance's walk of one rank, r: a method with the
// loop's values in locals (a closure's captured counters live in memory),
// the rare steps (overlaps, sub-steps' slots) out of line.
type distWalk struct {
	M, r   int
	rankOf []int
	// pending[recv*S*M + chunk] (recv: distClass's index): 1 + the compute
	// count when the receive was posted, or 0 (none pending).
	pending []int32
}

// rank walks steps, rank d.r's: the sum of its receives' distances, their
// count, and SlotCounts' count.
func (d *distWalk) rank(steps []ir.Step) (rs, rn, nSlots int) {
	M, r, rankOf, pending := d.M, d.r, d.rankOf, d.pending
	SM := len(rankOf) * M
	computes := int32(1) // 1 + the compute steps so far
	for j := range steps {
		st := &steps[j]
		nSlots = max(nSlots, st.Slot+1)
		if st.Sub != nil {
			nSlots = subSlots(st, nSlots)
		}
		cl := distClass[st.Kind]
		if cl == 0 {
			continue
		}
		if cl&distOverlap != 0 {
			s, n := d.consumeSubs(st, computes)
			rs, rn = rs+s, rn+n
			computes++
			continue
		}
		s, m := st.Stage, st.Micro
		if uint(s) < uint(len(rankOf)) && uint(m) < uint(M) && rankOf[s] == r {
			ch := s*M + m
			switch {
			case cl&distRecv != 0:
				pending[int(cl&distRecvIdx)*SM+ch] = computes
				continue
			case cl&distF != 0:
				if v := pending[ch]; v > 0 {
					rs += int(computes - v)
					rn++
					pending[ch] = 0
				}
				if v := pending[2*SM+ch]; v > 0 {
					rs += int(computes - v)
					rn++
					pending[2*SM+ch] = 0
				}
			case cl&distB != 0:
				if v := pending[SM+ch]; v > 0 {
					rs += int(computes - v)
					rn++
					pending[SM+ch] = 0
				}
			}
		}
		if cl&distCompute != 0 {
			computes++
		}
	}
	return rs, rn, nSlots
}

// consumeSubs takes the receives an overlap's compute sub-steps consume
// (posted before compute count computes): their distances' sum and count.
//
//go:noinline
func (d *distWalk) consumeSubs(st *ir.Step, computes int32) (rs, rn int) {
	subs := st.Sub
	SM := len(d.rankOf) * d.M
	take := func(i int) {
		if v := d.pending[i]; v > 0 {
			rs += int(computes - v)
			rn++
			d.pending[i] = 0
		}
	}
	for k := range subs {
		c := &subs[k]
		if cl := distClass[c.Kind]; cl&(distF|distB) != 0 && uint(c.Stage) < uint(len(d.rankOf)) && uint(c.Micro) < uint(d.M) && d.rankOf[c.Stage] == d.r {
			ch := c.Stage*d.M + c.Micro
			if cl&distF != 0 {
				take(ch)
				take(2*SM + ch)
			} else {
				take(SM + ch)
			}
		}
	}
	return rs, rn
}

// subSlots is max(n, 1 + the largest slot of st's sub-steps). (Apart, and
// taking st, so that the walk's loop keeps no sub-step slice in registers.)
//
//go:noinline
func subSlots(st *ir.Step, n int) int {
	for k := range st.Sub {
		n = max(n, st.Sub[k].Slot+1)
	}
	return n
}

// distClass is what recvDistance needs of a kind, one table load a step:
// a receive it counts (distRecv, with its index in pending), a compute
// step (distCompute), an overlap (distOverlap, also a compute step), and
// what a compute step consumes (distF: RECV_F and DATA_RECV; distB: RECV_B).
var distClass = func() (t [256]uint8) {
	for k := range t {
		kind := ir.Kind(k)
		switch kind {
		case ir.RecvF:
			t[k] = distRecv | 0
		case ir.RecvB:
			t[k] = distRecv | 1
		case ir.DataRecv:
			t[k] = distRecv | 2
		}
		if !kind.IsCompute() {
			continue
		}
		t[k] |= distCompute
		if kind.IsOverlap() {
			t[k] |= distOverlap
		}
		switch kind {
		case ir.Forward:
			t[k] |= distF
		case ir.Backward, ir.BackwardInput:
			t[k] |= distB
		}
	}
	return t
}()

const (
	distRecvIdx = 3 // the receive's index in pending: RECV_F 0, RECV_B 1, DATA_RECV 2
	distRecv    = 1 << 2
	distCompute = 1 << 3
	distOverlap = 1 << 4
	distF       = 1 << 5
	distB       = 1 << 6
)
