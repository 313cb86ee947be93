package sim_test

import (
	"math/rand/v2"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/schedules"
	"github.com/ppgen/ppgen/gen/sim"
)

// TestLowerBoundBelowEveryFamily is the property: on random per-stage
// costs and latencies, the bound is at most the simulated makespan of every
// catalog family's order, with and without the memory cap each order
// itself keeps (its peak live chunks per rank).
func TestLowerBoundBelowEveryFamily(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 2))
	sizes := []struct{ P, V, M int }{{2, 0, 4}, {4, 0, 8}, {4, 2, 8}, {3, 0, 6}, {4, 0, 16}}
	checked := 0
	for trial := range 12 {
		for _, fam := range schedules.All() {
			for _, sz := range sizes {
				cfg, _, err := schedules.Normalize(ir.Config{Schedule: fam.Name, Ranks: sz.P, Virtual: sz.V, Micro: sz.M})
				if err != nil {
					continue
				}
				p, err := fam.Build(cfg)
				if err != nil {
					continue
				}
				S := p.Stages()
				c := sim.Cost{F: make([]float64, S), B: make([]float64, S), I: make([]float64, S), W: make([]float64, S)}
				for s := range S {
					c.F[s] = 0.1 + 3*rng.Float64()
					c.I[s] = 0.1 + 3*rng.Float64()
					c.W[s] = 3 * rng.Float64()
					c.B[s] = c.I[s] + c.W[s]
				}
				if trial%2 == 1 {
					c.Comm = rng.Float64()
				}
				if trial%3 == 2 {
					c.Act, c.BW = make([]float64, S), 0.5+rng.Float64()
					for s := range c.Act {
						c.Act[s] = rng.Float64()
					}
				}
				r, err := sim.Run(p, c)
				if err != nil {
					t.Fatalf("%s %+v: %v", fam.Name, sz, err)
				}
				live := make([]int, S)
				for s := range live {
					live[s] = r.PeakActivations[p.Placement.RankOf[s]]
				}
				// The rank cap in activation units: random sizes per
				// stage, each rank capped at the order's own weighted peak.
				act := make([]float64, S)
				for s := range act {
					act[s] = 0.2 + 2*rng.Float64()
				}
				peak := r.PeakMemory(act)
				for _, opt := range []sim.BoundOptions{{}, {MaxLive: live}, {Act: act, Cap: peak}, {MaxLive: live, Act: act, Cap: peak}} {
					lb, err := sim.LowerBound(p, c, opt)
					if err != nil {
						t.Fatal(err)
					}
					if lb > r.Makespan*(1+1e-9) {
						t.Errorf("trial %d %s P=%d V=%d M=%d cap %v: bound %g over the makespan %g", trial, fam.Name, sz.P, cfg.Virtual, sz.M, opt.MaxLive, lb, r.Makespan)
					}
					if lb <= 0 {
						t.Errorf("%s: bound %g", fam.Name, lb)
					}
				}
				checked++
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d programs checked", checked)
	}
}

// TestLowerBoundRankCapTight: V-Min at P = 4, M = 16, F = I = W = 1 holds
// four chunks per rank, and under that cap no order is faster. Rank 3
// (stages 3 and 4) can start no backward before 11 (the forward chain
// through 8 stages, then I of stages 7, 6, 5), and until then runs at most
// the 4 forwards whose chunks fit: 7 idle. After its last forward (of stage
// 4, whose chain to the end is F4..F7, I7..I0, W0 = 13) it runs that F and
// at most the 4 live chunks' I and W: 13 − 1 − 8 = 4 idle. 7 + 96 + 4 =
// 107, V-Min's makespan; the bound without the rank cap is 99.
func TestLowerBoundRankCapTight(t *testing.T) {
	p, err := schedules.Build(ir.Config{Schedule: "v-min", Ranks: 4, Virtual: 2, Micro: 16})
	if err != nil {
		t.Fatal(err)
	}
	c := sim.Cost{F: []float64{1}, B: []float64{2}, I: []float64{1}, W: []float64{1}}
	r, err := sim.Run(p, c)
	if err != nil {
		t.Fatal(err)
	}
	act := []float64{1, 1, 1, 1, 1, 1, 1, 1}
	capped := r.PeakMemory(act)
	for i, v := range capped {
		if v != 4 {
			t.Fatalf("rank %d holds %g chunks at its peak, want 4", i, v)
		}
	}
	plain, err := sim.LowerBound(p, c, sim.BoundOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := sim.LowerBound(p, c, sim.BoundOptions{Act: act, Cap: capped})
	if err != nil {
		t.Fatal(err)
	}
	if plain != 99 || lb != 107 || r.Makespan != 107 {
		t.Errorf("bound %g without the cap (want 99), %g with it (want 107); makespan %g (want 107)", plain, lb, r.Makespan)
	}
}
