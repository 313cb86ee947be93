package gen

import (
	"math/rand/v2"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/sim"
)

// TestCommCostKeepsTheComputeTimeline: under uneven per-stage costs (some
// with a first stage of I = 0, an embedding) and no transfer latency, a
// program lowered with Options.CommCost runs in its compute order's
// makespan (the timed order laid out for those costs), and with latency it
// is never slower than the default layout. Without CommCost some of these
// programs lose time to their transfers.
func TestCommCostKeepsTheComputeTimeline(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 14))
	lost := 0
	checked := 0
	for trial := range 6 {
		for _, name := range []string{"1f1b", "zbv", "v-min", "v-half", "interleaved", "zb-h1", "dualpipev"} {
			cfg, compute, err := Build(ir.Config{Schedule: name, Ranks: 4, Micro: 8})
			if err != nil {
				t.Fatal(err)
			}
			S := compute.Stages()
			c := sim.Cost{F: make([]float64, S), I: make([]float64, S), W: make([]float64, S), B: make([]float64, S)}
			for s := range S {
				c.F[s], c.I[s], c.W[s] = 0.2+2*rng.Float64(), 0.2+2*rng.Float64(), 0.2+2*rng.Float64()
				c.B[s] = c.I[s] + c.W[s]
			}
			if trial%2 == 1 {
				c.Comm = 0.3 * rng.Float64()
			}
			if trial%3 == 2 { // an embedding: no input gradient
				c.I[0], c.B[0] = 0, c.W[0]
			}
			opt := Options{CommCost: func(ir.Program) (sim.Cost, error) { return c, nil }}
			with, err := lowerCompute(compute, opt)
			if err != nil {
				t.Fatalf("%s: %v", cfg.Schedule, err)
			}
			without, err := lowerCompute(compute, Options{})
			if err != nil {
				t.Fatal(err)
			}
			rc := run(t, compute, c)
			rw, ro := run(t, with.Program, c), run(t, without.Program, c)
			if rw > ro*(1+1e-12) {
				t.Errorf("trial %d %s: %g with CommCost, %g without", trial, name, rw, ro)
			}
			if c.Comm == 0 {
				checked++
				if rw > rc*(1+1e-9) {
					t.Errorf("trial %d %s, no latency: lowered %g, the compute order %g", trial, name, rw, rc)
				}
				if ro > rc*(1+1e-9) {
					lost++
				}
			}
		}
	}
	t.Logf("%d programs without latency, %d of them slower lowered without CommCost", checked, lost)
	if checked == 0 || lost == 0 {
		t.Errorf("%d programs without latency, %d of them slower lowered without CommCost: the test shows nothing", checked, lost)
	}
}

func run(t *testing.T, p ir.Program, c sim.Cost) float64 {
	t.Helper()
	r, err := sim.Run(p, c)
	if err != nil {
		t.Fatal(err)
	}
	return r.Makespan
}
