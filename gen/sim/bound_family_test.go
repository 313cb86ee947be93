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
				for _, opt := range []sim.BoundOptions{{}, {MaxLive: live}} {
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
