package passes

import "github.com/ppgen/ppgen/gen/ir"

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
	sum, n := recvDistance(p, nil)
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n)
}

// RecvDistances returns RecvDistance per rank (0 for a rank without receives).
func RecvDistances(p ir.Program) []float64 {
	out := make([]float64, len(p.Ranks))
	recvDistance(p, out)
	return out
}

// recvDistance returns the sum of distances and the number of receives
// counted; when perRank is non-nil it also fills the per-rank means.
func recvDistance(p ir.Program, perRank []float64) (sum, n int) {
	S, M := p.Stages(), p.Micro
	if S <= 0 || M <= 0 {
		return 0, 0
	}
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
	inRange := func(s ir.Step) bool { return s.Stage >= 0 && s.Stage < S && s.Micro >= 0 && s.Micro < M }
	for r, steps := range p.Ranks {
		computes := int32(0)
		rs, rn := 0, 0
		take := func(i int, ch int) {
			if v := pending[i][ch]; v >= 0 {
				rs += int(computes - v)
				rn++
				pending[i][ch] = -1
			}
		}
		for _, st := range steps {
			if k := slot(st.Kind); k >= 0 {
				if inRange(st) {
					pending[k][st.Stage*M+st.Micro] = computes
				}
				continue
			}
			if !st.Kind.IsCompute() {
				continue
			}
			for _, c := range st.Computes() {
				if !inRange(c) {
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
		sum += rs
		n += rn
		if perRank != nil && rn > 0 {
			perRank[r] = float64(rs) / float64(rn)
		}
	}
	return sum, n
}
