package gen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/model"
	"github.com/ppgen/ppgen/gen/partition"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/pricing"
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

// TestLatencyLayout: with transfer latency (the LLM-like example model,
// comm = 0.2 and 1) a program lowered with Options.CommCost runs in the
// least makespan of its three layouts (the default cost's, the model's
// compute costs', the whole model's), and the third, latency-aware one is
// the fastest on some of them (V-shape orders above all). `go test ./gen
// -run TestLatencyLayout -v` prints each case (BENCHMARKS.md, "Transfer
// layouts with latency").
func TestLatencyLayout(t *testing.T) {
	m := readExampleModel(t, "llm.json")
	type fam struct {
		name    string
		virtual int
	}
	fams := []fam{{"1f1b", 1}, {"zb-h2", 1}, {"interleaved-zb", 2}, {"zbv", 2}, {"v-half", 2}, {"v-min", 2}, {"dualpipev", 2}}
	wins, cases := 0, 0
	for _, comm := range []float64{0.2, 1} {
		m.Comm = comm
		for _, P := range []int{4, 8} {
			for _, f := range fams {
				cfg, compute, err := Build(ir.Config{Schedule: f.name, Ranks: P, Micro: 4 * P, Virtual: f.virtual})
				if err != nil {
					t.Fatal(err)
				}
				part, err := model.Even(len(m.Layers), compute.Stages()/partition.Copies(compute))
				if err != nil {
					t.Fatal(err)
				}
				full, err := pricing.OfModel(m).Split(part, 1)
				if err != nil {
					t.Fatal(err)
				}
				if full, err = full.Resolve(compute.Stages()); err != nil {
					t.Fatal(err)
				}
				noLat := full
				noLat.Comm, noLat.Act, noLat.BW = 0, nil, 0
				var ms [3]float64
				for i, lc := range []*sim.Cost{nil, &noLat, &full} {
					q, _, err := passes.Lower(compute, passes.Options{Comm: passes.CommOptions{Cost: lc}})
					if err != nil {
						t.Fatalf("%s: layout %d: %v", cfg.Schedule, i, err)
					}
					ms[i] = run(t, q, full)
				}
				res, err := lowerCompute(compute, Options{CommCost: func(ir.Program) (sim.Cost, error) { return full, nil }})
				if err != nil {
					t.Fatalf("%s: %v", cfg.Schedule, err)
				}
				got := run(t, res.Program, full)
				least := min(ms[0], ms[1], ms[2])
				if math.Abs(got-least) > 1e-9*least {
					t.Errorf("comm %g %s V=%d P=%d: lowered %g; the layouts give %v", comm, f.name, f.virtual, P, got, ms)
				}
				cases++
				mark := ""
				if ms[2] < min(ms[0], ms[1])*(1-1e-9) {
					wins++
					mark = fmt.Sprintf("  %.1f %% faster", 100*(1-ms[2]/min(ms[0], ms[1])))
				}
				t.Logf("comm %-3g %-14s V=%d P=%d M=%2d: default %7.1f  compute costs %7.1f  with latency %7.1f%s", comm, f.name, f.virtual, P, 4*P, ms[0], ms[1], ms[2], mark)
			}
		}
	}
	t.Logf("the latency-aware layout is the fastest in %d of %d cases", wins, cases)
	if wins == 0 {
		t.Errorf("the latency-aware layout is never the fastest: the third lowering buys nothing")
	}
}

// readExampleModel reads a model description of examples/models.
func readExampleModel(t *testing.T, name string) model.Model {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "examples", "models", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := model.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
