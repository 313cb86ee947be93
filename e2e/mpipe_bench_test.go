package e2e_test

import (
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/sim"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// The measured figure of docs/mpipe.md: per chunk F = 10 ms, B = 20 ms
// (I = W = 10 ms), and a frozen preprocess of 5 ms (0.5·F of stage 0) in
// each input load; the same costs, in ms, for gen/sim. Long enough that a
// sleep's lateness (the Go timer's millisecond, more on a loaded machine)
// stays a small part of each.
const (
	benchF, benchI, benchW, benchPre = 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 5 * time.Millisecond
	benchCost                        = "F=10,B=20,W=10,pre=5"
)

// waitFor sleeps until d after start: the stages only wait, so eight ranks
// need no CPU to overlap (a spinning wait would compete for the cores).
func waitFor(start time.Time, d time.Duration) { time.Sleep(time.Until(start.Add(d))) }

// waitStage is a pipe.Stage that takes fixed durations and passes its input on.
type waitStage struct{}

func (waitStage) Forward(x *tensor.Dense) (*tensor.Dense, any, error) {
	waitFor(time.Now(), benchF)
	return x.Clone().(*tensor.Dense), nil, nil
}

func (waitStage) BackwardInput(_ any, dy *tensor.Dense) (*tensor.Dense, error) {
	waitFor(time.Now(), benchI)
	return dy.Clone().(*tensor.Dense), nil
}

func (waitStage) BackwardWeight(any, *tensor.Dense) error {
	waitFor(time.Now(), benchW)
	return nil
}

// BenchmarkMPipeTower runs interleaved and mpipe (min and full ownership)
// at P = 8, M = 32, V = 2 in process with waitStage stages and a frozen
// preprocess of benchPre in each input load, one iteration of each in
// turn per b.N round (alternated, so machine noise hits all three alike),
// and reports each one's mean iteration time (ms/iter) next to its
// simulated makespan under benchCost (sim-ms):
//
//	go test -run '^$' -bench MPipeTower -benchtime 4x ./e2e/
func BenchmarkMPipeTower(b *testing.B) {
	type tcase struct {
		name, schedule, mode string
		p                    prog
		xs                   []*pipe.Exec
		fns                  []func(*pipe.Exec) error
		total                time.Duration
		sim                  float64
	}
	cases := []*tcase{{name: "interleaved", schedule: "interleaved"}, {name: "mpipe-min", schedule: "mpipe", mode: passes.OwnersMin}, {name: "mpipe-full", schedule: "mpipe", mode: passes.OwnersFull}}
	cost, err := sim.ParseCost(benchCost, 0)
	if err != nil {
		b.Fatal(err)
	}
	pre := pipe.Preprocess(func(_ int, in *tensor.Dense) (*tensor.Dense, error) {
		waitFor(time.Now(), benchPre)
		return in, nil
	})
	for _, c := range cases {
		cfg := ir.Config{Schedule: c.schedule, Ranks: 8, Virtual: 2, Micro: 32}
		opt := gen.Options{Passes: passes.Options{MpipeOwners: c.mode}}
		c.p = lowered(b, cfg, opt)
		res, err := gen.Lower(cfg, opt)
		if err != nil {
			b.Fatal(err)
		}
		r, err := sim.Run(res.Program, cost)
		if err != nil {
			b.Fatal(err)
		}
		c.sim = r.Makespan
		trs := inprocWorld(c.p.spec.Ranks, time.Minute)
		for rk := range c.p.spec.Ranks {
			stages := map[int]pipe.Stage{}
			for s, rr := range c.p.spec.RankOf {
				if rr == rk {
					stages[s] = waitStage{}
				}
			}
			x, err := pipe.New(pipe.Config{Rank: rk, Spec: c.p.spec, Stages: stages, Loss: mse{}, Data: pipe.WithPreprocess(&data{}, pre), Transport: trs[rk]})
			if err != nil {
				b.Fatal(err)
			}
			c.xs = append(c.xs, x)
		}
		c.fns = rankFns(c.p, "interp")
		b.Cleanup(func() {
			for i, x := range c.xs {
				x.Close()
				trs[i].Close()
			}
		})
		if err := pipe.RunAll(c.xs, c.fns); err != nil { // warm-up
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		for _, c := range cases {
			start := time.Now()
			if err := pipe.RunAll(c.xs, c.fns); err != nil {
				b.Fatal(err)
			}
			c.total += time.Since(start)
		}
	}
	for _, c := range cases {
		ms := float64(c.total.Microseconds()) / 1e3 / float64(b.N)
		b.ReportMetric(ms, c.name+"-ms/iter")
		b.ReportMetric(c.sim, c.name+"-sim-ms")
		b.Logf("%s: measured %.1f ms/iter, simulated %.1f ms (ratio %.3f)", c.name, ms, c.sim, ms/c.sim)
	}
}
