package sim_test

import (
	"math/rand/v2"
	"testing"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
)

// withRecompute returns p with a RECOMPUTE of every chunk of the stages on
// (on[s]) that has a backward, on the stage's rank: right before the
// chunk's first backward when early is false, else at a random point
// between its F and that backward.
func withRecompute(p ir.Program, on []bool, early bool, rng *rand.Rand) ir.Program {
	q := p
	q.Ranks = make([][]ir.Step, len(p.Ranks))
	for r, steps := range p.Ranks {
		var out []ir.Step
		fAt := map[[2]int]int{} // chunk -> index in out of its F
		seen := map[[2]int]bool{}
		for _, st := range steps {
			for _, cs := range st.Computes() {
				ch := [2]int{cs.Stage, cs.Micro}
				if cs.Kind == ir.Forward {
					fAt[ch] = len(out)
				}
				if !cs.Kind.IsBackward() || !on[cs.Stage] || seen[ch] {
					continue
				}
				seen[ch] = true
				rec := ir.Step{Kind: abi.Recompute, Stage: cs.Stage, Micro: cs.Micro, Peer: ir.None, Slot: ir.None}
				at := len(out)
				if f, ok := fAt[ch]; ok && early {
					at = f + 1 + rng.IntN(len(out)-f)
				}
				out = append(out[:at], append([]ir.Step{rec}, out[at:]...)...)
				for k, v := range fAt {
					if v >= at {
						fAt[k] = v + 1
					}
				}
			}
			out = append(out, st)
		}
		q.Ranks[r] = out
	}
	return q
}

// TestLowerBoundWithRecompute: a program that recomputes frees a chunk
// between its F and its RECOMPUTE, so the cap terms that count a chunk
// live from its F to its backward do not hold for its stages; with them
// dropped (and the RECOMPUTE's own life counted) the bound stays under the
// makespan of every family's order with random stages recomputing, at the
// latest point and earlier, capped at the order's own peak.
func TestLowerBoundWithRecompute(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 2))
	sizes := []struct{ P, V, M int }{{2, 0, 4}, {4, 0, 8}, {4, 2, 8}}
	checked := 0
	for trial := range 6 {
		for _, fam := range schedules.All() {
			for _, sz := range sizes {
				cfg, _, err := schedules.Normalize(ir.Config{Schedule: fam.Name, Ranks: sz.P, Virtual: sz.V, Micro: sz.M})
				if err != nil {
					continue
				}
				p, err := fam.Build(cfg)
				if err != nil || p.ForwardOnly() {
					continue
				}
				S := p.Stages()
				on := make([]bool, S)
				for s := range on {
					on[s] = trial%3 == 0 || rng.IntN(2) == 0
				}
				p = withRecompute(p, on, trial%2 == 1, rng)
				c := sim.Cost{F: make([]float64, S), B: make([]float64, S), I: make([]float64, S), W: make([]float64, S)}
				for s := range S {
					c.F[s] = 0.1 + 3*rng.Float64()
					c.I[s] = 0.1 + 3*rng.Float64()
					c.W[s] = 3 * rng.Float64()
					c.B[s] = c.I[s] + c.W[s]
				}
				r, err := sim.Run(p, c)
				if err != nil {
					t.Fatalf("%s %+v: %v", fam.Name, sz, err)
				}
				live := make([]int, S)
				act := make([]float64, S)
				for s := range live {
					live[s] = r.PeakActivations[p.Placement.RankOf[s]]
					act[s] = 0.2 + 2*rng.Float64()
				}
				peak := r.PeakMemory(act)
				for _, opt := range []sim.BoundOptions{{MaxLive: live}, {Act: act, Cap: peak}, {MaxLive: live, Act: act, Cap: peak}} {
					lb, err := sim.LowerBound(p, c, opt)
					if err != nil {
						t.Fatal(err)
					}
					if lb > r.Makespan*(1+1e-9) || lb <= 0 {
						t.Errorf("trial %d %s P=%d V=%d M=%d: bound %g, makespan %g", trial, fam.Name, sz.P, cfg.Virtual, sz.M, lb, r.Makespan)
					}
				}
				checked++
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d programs checked", checked)
	}
}

// TestLowerBoundRecomputeCounted: 1F1B at P = 4, M = 8 recomputing every
// stage holds one chunk per rank at its peak; the bound without the
// recompute fix would count each stage-0 chunk live through the whole
// chain under that cap (96, over the makespan 41). It is at most
// the makespan, and at least the rank's work with its RECOMPUTEs (3 · 8 + 8).
func TestLowerBoundRecomputeCounted(t *testing.T) {
	p, err := schedules.Build(ir.Config{Schedule: "1f1b", Ranks: 4, Micro: 8})
	if err != nil {
		t.Fatal(err)
	}
	p = withRecompute(p, []bool{true, true, true, true}, false, nil)
	c := sim.DefaultCost()
	r, err := sim.Run(p, c)
	if err != nil {
		t.Fatal(err)
	}
	live := []int{1, 1, 1, 1}
	for rk, v := range r.PeakActivations {
		if v != 1 {
			t.Fatalf("rank %d peaks at %d chunks, want 1", rk, v)
		}
	}
	lb, err := sim.LowerBound(p, c, sim.BoundOptions{MaxLive: live, Act: []float64{1, 1, 1, 1}, Cap: []float64{1, 1, 1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if lb > r.Makespan || lb < 32 {
		t.Errorf("bound %g, makespan %g; want between 32 and the makespan", lb, r.Makespan)
	}
}
