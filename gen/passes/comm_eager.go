package passes

import (
	"github.com/ppgen/ppgen/gen/internal/deps"
	"github.com/ppgen/ppgen/gen/ir"
)

// insertCommEager places receives after the rule of PyTorch's
// torch.distributed.pipelining (_add_send_recv in schedules.py), for
// comparison only. Its output equals PyTorch's own lowering for GPipe only
// (a comparison over 92 configs found 12 equal, all GPipe): the rule below
// is PyTorch's idea, not a copy of its output.
//
// PyTorch walks the compute-only schedule in lock-step rounds, visiting the
// ranks in ascending order each round. A rank whose next action is ready
// appends it to its output; if the action has a cross-rank edge it also
// appends the SEND to its own output and, at the same moment, the matching
// RECV to the end of the consumer rank's output. An action is ready when its
// input is there: F(s, m) needs s == 0, or RECV_F(s, m) or F(s-1, m) already in
// this rank's output; B/I(s, m) needs the last stage, or RECV_B(s, m) or
// B/I(s+1, m) already in this rank's output; anything else is always ready;
// for an overlap every sub-step must be ready. A rank that is not ready just
// waits for a later round. So every receive is posted right after whatever
// compute the consumer rank had reached when the producer ran: as early as
// possible, often long before its consumer.
//
// Differences from PyTorch: colocated neighbours get no transfer (PyTorch has
// a TODO there and sends to itself), and an order that never becomes ready
// is reported as a *CycleError instead of an assertion.
//
// Every transfer pair gets the same (round, rank) time on both ranks and
// every dependency points to an earlier time, so the result is deadlock-free
// under the strict model too.
func insertCommEager(p ir.Program) (ir.Program, error) {
	rankOf := p.Placement.RankOf
	P, S, M := len(p.Ranks), len(rankOf), p.Micro
	// Per chunk: has the receive been posted on its rank; has F / B-or-I run.
	recvF := make([]bool, S*M)
	recvB := make([]bool, S*M)
	fDone := make([]bool, S*M)
	bDone := make([]bool, S*M)
	ptr := make([]int, P)
	out := make([][]ir.Step, P)
	for r := range P {
		out[r] = make([]ir.Step, 0, 2*len(p.Ranks[r]))
	}
	// ready: c's cross-stage input (deps.Neighbour) is there, run on this
	// rank or received; a step without one is always ready.
	ready := func(r int, c ir.Step) bool {
		in, ok := deps.Neighbour(&p, &c)
		if !ok {
			return true
		}
		done, recv := fDone, recvF
		if in.What == deps.Gradient {
			done, recv = bDone, recvB
		}
		if in.Rank == r {
			return done[in.Stage*M+in.Micro]
		}
		return recv[c.Stage*M+c.Micro]
	}
	left := p.NumSteps()
	for left > 0 {
		progress := false
		for r := range P {
			if ptr[r] == len(p.Ranks[r]) {
				continue
			}
			st := p.Ranks[r][ptr[r]]
			ok := true
			for _, c := range st.Computes() {
				ok = ok && ready(r, c)
			}
			if !ok {
				continue
			}
			out[r] = append(out[r], st)
			for _, c := range st.Computes() {
				ch := c.Stage*M + c.Micro
				switch c.Kind {
				case ir.Forward:
					fDone[ch] = true
				case ir.Backward, ir.BackwardInput:
					bDone[ch] = true
				}
				if k, ok := needsSend(&p, r, &c); ok {
					if k == ir.SendF {
						q := rankOf[c.Stage+1]
						out[r] = append(out[r], ir.Comm(ir.SendF, c.Stage, c.Micro, q))
						out[q] = append(out[q], ir.Comm(ir.RecvF, c.Stage+1, c.Micro, r))
						recvF[ch+M] = true
					} else {
						q := rankOf[c.Stage-1]
						out[r] = append(out[r], ir.Comm(ir.SendB, c.Stage, c.Micro, q))
						out[q] = append(out[q], ir.Comm(ir.RecvB, c.Stage-1, c.Micro, r))
						recvB[ch-M] = true
					}
				}
			}
			ptr[r]++
			left--
			progress = true
		}
		if !progress {
			return ir.Program{}, eagerCycle(p, ptr)
		}
	}
	return ir.Program{Placement: p.Placement, Micro: p.Micro, Copies: p.Copies, Ranks: out}, nil
}

// eagerCycle names the ring of ranks whose next steps wait for one another.
func eagerCycle(p ir.Program, ptr []int) error {
	P := len(p.Ranks)
	// waitFor[r]: the rank and step whose output r's next step needs.
	waitFor := make([]int, P)
	on := make([]ir.Step, P)
	for r := range P {
		waitFor[r] = -1
		if ptr[r] == len(p.Ranks[r]) {
			continue
		}
		for _, c := range p.Ranks[r][ptr[r]].Computes() {
			if in, ok := deps.Neighbour(&p, &c); ok {
				waitFor[r], on[r] = in.Rank, ir.Compute(in.Kind, in.Stage, in.Micro)
				break
			}
		}
	}
	e := &CycleError{Pass: "comm"}
	seen := make([]int, P)
	for start := range P {
		if waitFor[start] < 0 || seen[start] != 0 {
			continue
		}
		var path []int
		r := start
		for r >= 0 && seen[r] == 0 {
			seen[r] = start + 1
			path = append(path, r)
			r = waitFor[r]
		}
		if r < 0 || seen[r] != start+1 {
			continue
		}
		i := 0
		for path[i] != r {
			i++
		}
		for _, q := range path[i:] {
			e.Cycle = append(e.Cycle, Blocked{Rank: q, Index: ptr[q], Step: p.Ranks[q][ptr[q]], On: on[q], Peer: waitFor[q]})
		}
		return e
	}
	// No ring: a rank waits for one that finished without producing (an
	// inconsistent program); report the first such wait.
	for r := range P {
		if waitFor[r] >= 0 {
			e.Chain = true
			e.Cycle = append(e.Cycle, Blocked{Rank: r, Index: ptr[r], Step: p.Ranks[r][ptr[r]], On: on[r], Peer: waitFor[r]})
			return e
		}
	}
	return e
}
