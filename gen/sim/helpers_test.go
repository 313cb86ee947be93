package sim

import (
	"errors"
	"sort"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
)

// gpipe returns the compute-only GPipe order on P ranks (loop placement,
// V = 1) for M micro-batches: every forward, then every backward in micro order.
func gpipe(P, M int) ir.Program {
	p := ir.NewProgram(ir.Loop(P, 1), M)
	for r := 0; r < P; r++ {
		for m := 0; m < M; m++ {
			p.Ranks[r] = append(p.Ranks[r], ir.Compute(ir.Forward, r, m))
		}
		for m := 0; m < M; m++ {
			p.Ranks[r] = append(p.Ranks[r], ir.Compute(ir.Backward, r, m))
		}
	}
	return p
}

// onef1b returns the compute-only 1F1B order: rank r warms up with
// min(P−1−r, M) forwards, alternates F and B, then drains the backwards.
// With split, every B is an I followed by a W.
func onef1b(P, M int, split bool) ir.Program {
	p := ir.NewProgram(ir.Loop(P, 1), M)
	for r := 0; r < P; r++ {
		w := min(P-1-r, M)
		add := func(k ir.Kind, m int) {
			if k == ir.Backward && split {
				p.Ranks[r] = append(p.Ranks[r], ir.Compute(ir.BackwardInput, r, m), ir.Compute(ir.BackwardWeight, r, m))
				return
			}
			p.Ranks[r] = append(p.Ranks[r], ir.Compute(k, r, m))
		}
		for m := 0; m < w; m++ {
			add(ir.Forward, m)
		}
		for i := 0; i < M-w; i++ {
			add(ir.Forward, w+i)
			add(ir.Backward, i)
		}
		for m := M - w; m < M; m++ {
			add(ir.Backward, m)
		}
	}
	return p
}

// naiveComm inserts transfers the naive way: each receive right before its
// consumer, each send right after its producer; colocated neighbours get none.
func naiveComm(p ir.Program) ir.Program {
	q := ir.NewProgram(p.Placement, p.Micro)
	S := p.Stages()
	pl := p.Placement
	for r, steps := range p.Ranks {
		var out []ir.Step
		for _, st := range steps {
			s, m := st.Stage, st.Micro
			switch {
			case st.Kind == ir.Forward && s > 0 && pl.Rank(s-1) != r:
				out = append(out, ir.Comm(ir.RecvF, s, m, pl.Rank(s-1)))
			case st.Kind.IsBackward() && s < S-1 && pl.Rank(s+1) != r:
				out = append(out, ir.Comm(ir.RecvB, s, m, pl.Rank(s+1)))
			}
			out = append(out, st)
			switch {
			case st.Kind == ir.Forward && s < S-1 && pl.Rank(s+1) != r:
				out = append(out, ir.Comm(ir.SendF, s, m, pl.Rank(s+1)))
			case st.Kind.IsBackward() && s > 0 && pl.Rank(s-1) != r:
				out = append(out, ir.Comm(ir.SendB, s, m, pl.Rank(s-1)))
			}
		}
		q.Ranks[r] = out
	}
	return q
}

// hoist applies the comm-insertion repair of docs/internals.md to a
// naively lowered program: while the simulation is stuck, the receive
// matching a stuck rank's head SEND is moved to just before its rank's comm
// head (or before its host's blocked step, when that is earlier).
//
// When several ranks are stuck on a SEND, the one whose head is a SEND_B is
// repaired first (its RECV_B is hoisted on the previous stage's rank): that
// choice reproduces the ideal 1F1B timing, while repairing the lowest stuck
// rank first hoists RECV_Fs and stalls the comm streams (e.g. P=4, M=8 at
// F=1, B=2: makespan 51 instead of 33).
func hoist(t testing.TB, p ir.Program, c Cost) ir.Program {
	t.Helper()
	p = p.Clone()
	for iter := 0; iter < 100000; iter++ {
		_, err := Run(p, c)
		if err == nil {
			return p
		}
		var de *DeadlockError
		if !errors.As(err, &de) {
			t.Fatalf("hoist: %v", err)
		}
		moved := false
		stuck := append([]Stuck(nil), de.Stuck...)
		sort.SliceStable(stuck, func(i, j int) bool { return stuck[i].CommStep.Kind == ir.SendB && stuck[j].CommStep.Kind != ir.SendB })
		for _, st := range stuck {
			if st.Comm < 0 || !st.CommStep.Kind.IsSend() {
				continue
			}
			q, j := st.PeerRank, st.PeerIndex
			target := -1
			for _, o := range de.Stuck {
				if o.Rank == q {
					target = o.Host
					if o.Comm >= 0 && o.Comm < target {
						target = o.Comm
					}
				}
			}
			if target < 0 || target >= j {
				continue
			}
			steps := p.Ranks[q]
			recv := steps[j]
			copy(steps[target+1:j+1], steps[target:j])
			steps[target] = recv
			moved = true
			break
		}
		if !moved {
			t.Fatalf("hoist: stuck and nothing to hoist: %v", err)
		}
	}
	t.Fatalf("hoist: no fixpoint")
	return p
}

// onef1bComm returns 1F1B lowered in closed form: the naive insertion,
// except that in the steady phase each RECV_B(i) comes before the SEND_F of
// the forward that precedes B(i) (what hoist produces, without
// re-simulating; used by the benchmark).
func onef1bComm(P, M int) ir.Program {
	p := ir.NewProgram(ir.Loop(P, 1), M)
	for r := 0; r < P; r++ {
		w := min(P-1-r, M)
		var out []ir.Step
		fwd := func(m int, recvB int) {
			if r > 0 {
				out = append(out, ir.Comm(ir.RecvF, r, m, r-1))
			}
			out = append(out, ir.Compute(ir.Forward, r, m))
			if recvB >= 0 && r < P-1 {
				out = append(out, ir.Comm(ir.RecvB, r, recvB, r+1))
			}
			if r < P-1 {
				out = append(out, ir.Comm(ir.SendF, r, m, r+1))
			}
		}
		bwd := func(m int, recv bool) {
			if recv && r < P-1 {
				out = append(out, ir.Comm(ir.RecvB, r, m, r+1))
			}
			out = append(out, ir.Compute(ir.Backward, r, m))
			if r > 0 {
				out = append(out, ir.Comm(ir.SendB, r, m, r-1))
			}
		}
		for m := 0; m < w; m++ {
			fwd(m, -1)
		}
		for i := 0; i < M-w; i++ {
			fwd(w+i, i)
			bwd(i, false)
		}
		for m := M - w; m < M; m++ {
			bwd(m, true)
		}
		p.Ranks[r] = out
	}
	return p
}

func uniformCost(f, b, w, comm float64) Cost {
	return Cost{F: []float64{f}, B: []float64{b}, W: []float64{w}, Comm: comm}
}
