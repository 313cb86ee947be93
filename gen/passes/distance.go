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
	rankOf := p.Placement.RankOf
	// pending[kind][chunk]: compute count when the receive was posted, or -1.
	var pending [3][]int32
	for i := range pending {
		pending[i] = filled(S*M, -1)
	}
	slot := func(k ir.Kind) int {
		switch k {
		case ir.RecvF:
			return 0
		case ir.RecvB:
			return 1
		case ir.DataRecv:
			return 2
		}
		return -1
	}
	sums := make([]int, 2*len(p.Ranks)) // per rank: sum, count
	par.ForRanks(len(p.Ranks), p.NumSteps(), func(r int) {
		mine := func(s *ir.Step) bool {
			return s.Stage >= 0 && s.Stage < S && s.Micro >= 0 && s.Micro < M && rankOf[s.Stage] == r
		}
		computes := int32(0)
		rs, rn := 0, 0
		nSlots := 0 // SlotCounts' count, for slots
		take := func(i int, ch int) {
			if v := pending[i][ch]; v >= 0 {
				rs += int(computes - v)
				rn++
				pending[i][ch] = -1
			}
		}
		steps := p.Ranks[r]
		for j := range steps {
			st := &steps[j]
			nSlots = max(nSlots, st.Slot+1)
			for k := range st.Sub {
				nSlots = max(nSlots, st.Sub[k].Slot+1)
			}
			if k := slot(st.Kind); k >= 0 {
				if mine(st) {
					pending[k][st.Stage*M+st.Micro] = computes
				}
				continue
			}
			if !st.Kind.IsCompute() {
				continue
			}
			subs := st.Sub
			if !st.Kind.IsOverlap() {
				subs = steps[j : j+1]
			}
			for k := range subs {
				c := &subs[k]
				if !mine(c) {
					continue
				}
				ch := c.Stage*M + c.Micro
				switch c.Kind {
				case ir.Forward:
					take(0, ch)
					take(2, ch)
				case ir.Backward, ir.BackwardInput:
					take(1, ch)
				}
			}
			computes++
		}
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
