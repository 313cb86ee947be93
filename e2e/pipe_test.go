package e2e_test

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/pipe/pipetest"
	"github.com/ppgen/ppgen/runtime/transport"
)

// rankFns returns the per-rank functions running p in the given mode:
// "straight" (the generated calls), "interp" (Interpret) or "keyed"
// (interpretKeyed, bench_test.go).
func rankFns(p prog, mode string) []func(*pipe.Exec) error {
	if mode == "straight" {
		return p.straight
	}
	fns := make([]func(*pipe.Exec) error, len(p.ops))
	for r, ops := range p.ops {
		if mode == "interp" {
			fns[r] = func(x *pipe.Exec) error { return pipe.Interpret(x, ops) }
		} else {
			fns[r] = func(x *pipe.Exec) error { return interpretKeyed(x, ops) }
		}
	}
	return fns
}

var (
	inprocWorld = pipetest.InProcWorld
	tcpWorld    = pipetest.TCPWorld
)

// rig is one in-process world running a program with affine stages.
type rig struct {
	p      prog
	stages []*affine
	data   *data
	trs    []transport.Transport
	xs     []*pipe.Exec
}

func newRig(t testing.TB, p prog, trs []transport.Transport, f32 bool) *rig {
	t.Helper()
	g := &rig{p: p, stages: tame(newStages(p.spec.Stages)), data: &data{F32: f32}, trs: trs}
	for r := range p.spec.Ranks {
		stages := map[int]pipe.Stage{}
		var mine []*affine
		for s, rr := range p.spec.RankOf {
			if rr == r {
				stages[s] = g.stages[s]
				mine = append(mine, g.stages[s])
			}
		}
		x, err := pipe.New(pipe.Config{
			Rank: r, Spec: p.spec, Stages: stages, Loss: mse{}, Data: g.data, Transport: trs[r],
			OptStep: func() error {
				for _, s := range mine {
					s.Step()
				}
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		g.xs = append(g.xs, x)
	}
	t.Cleanup(func() {
		for _, x := range g.xs {
			x.Close()
		}
		var wg sync.WaitGroup
		for _, tr := range trs {
			wg.Go(func() { tr.Close() })
		}
		wg.Wait()
	})
	return g
}

// train runs iters iterations and returns the losses of each.
func (g *rig) train(t testing.TB, iters int, fns []func(*pipe.Exec) error) [][]float64 {
	t.Helper()
	var out [][]float64
	lastRank := g.p.spec.RankOf[g.p.spec.Stages-1]
	for it := range iters {
		g.data.Iter = it
		if err := pipe.RunAll(g.xs, fns); err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		out = append(out, g.xs[lastRank].Losses())
		for r, x := range g.xs {
			if r != lastRank && !math.IsNaN(x.Losses()[0]) {
				t.Errorf("rank %d has losses but does not hold the last stage", r)
			}
		}
	}
	return out
}

func checkAgainstSequential(t *testing.T, g *rig, got [][]float64, f32 bool) {
	t.Helper()
	ref := tame(newStages(g.p.spec.Stages))
	want := sequential(ref, g.p.spec.Micro, len(got), f32)
	for it := range want {
		if !sameFloats(got[it], want[it]) {
			t.Errorf("iteration %d losses:\n got %v\nwant %v", it, got[it], want[it])
		}
	}
	for s := range ref {
		if g.stages[s].A != ref[s].A || g.stages[s].B != ref[s].B {
			t.Errorf("stage %d params: got (%v, %v), want (%v, %v)", s, g.stages[s].A, g.stages[s].B, ref[s].A, ref[s].B)
		}
	}
}

// TestPipelineMatchesSequential runs every program, over both transports,
// as straight-line calls (the catalog's generated code), through Interpret
// and through interpretKeyed, for three iterations, and requires the losses
// and parameters to equal a sequential run exactly.
func TestPipelineMatchesSequential(t *testing.T) {
	for _, p := range programs(t) {
		for _, tk := range []string{"inproc", "tcp"} {
			for _, mode := range []string{"straight", "interp", "keyed"} {
				if mode == "straight" && p.straight == nil {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%s", p.name, tk, mode), func(t *testing.T) {
					var trs []transport.Transport
					if tk == "inproc" {
						trs = inprocWorld(p.spec.Ranks, 20*time.Second)
					} else {
						trs = tcpWorld(t, p.spec.Ranks, p.spec.Fingerprint, nil)
					}
					g := newRig(t, p, trs, false)
					got := g.train(t, 3, rankFns(p, mode))
					checkAgainstSequential(t, g, got, false)
				})
			}
		}
	}
}

func TestPipelineFloat32OverTCP(t *testing.T) {
	p := progByName(t, "zbv")
	g := newRig(t, p, tcpWorld(t, p.spec.Ranks, p.spec.Fingerprint, nil), true)
	got := g.train(t, 2, rankFns(p, "straight"))
	checkAgainstSequential(t, g, got, true)
}

// TestLossesAndReset checks the loss sink and Reset.
func TestLossesAndReset(t *testing.T) {
	p := progByName(t, "onef1b")
	g := newRig(t, p, inprocWorld(p.spec.Ranks, 10*time.Second), false)
	g.train(t, 1, rankFns(p, "straight"))
	last := g.xs[p.spec.RankOf[p.spec.Stages-1]]
	for m, l := range last.Losses() {
		if math.IsNaN(l) {
			t.Errorf("micro %d: no loss", m)
		}
	}
	last.Reset()
	for m, l := range last.Losses() {
		if !math.IsNaN(l) {
			t.Errorf("micro %d: loss %v after Reset", m, l)
		}
	}
}
