package pipe_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

// generated maps each program of fakegen_test.go to its rank functions.
var generated = map[string][]func(*pipe.Exec) error{
	"twoRank1F1B":     twoRank1F1BRanks[:],
	"threeRankGPipe":  threeRankGPipeRanks[:],
	"threeRank1F1B":   threeRank1F1BRanks[:],
	"twoRankLoop1F1B": twoRankLoop1F1BRanks[:],
	"twoRankVZB":      twoRankVZBRanks[:],
	"oneRankLocal":    oneRankLocalRanks[:],
}

var generatedSpecs = map[string]pipe.Spec{
	"twoRank1F1B":     twoRank1F1BSpec,
	"threeRankGPipe":  threeRankGPipeSpec,
	"threeRank1F1B":   threeRank1F1BSpec,
	"twoRankLoop1F1B": twoRankLoop1F1BSpec,
	"twoRankVZB":      twoRankVZBSpec,
	"oneRankLocal":    oneRankLocalSpec,
}

func progByName(t testing.TB, name string) prog {
	for _, d := range progDefs {
		if d.name == name {
			return lower(d)
		}
	}
	t.Fatalf("no program %q", name)
	return prog{}
}

// rankFns returns the per-rank functions running p in the given mode:
// "straight" (the generated calls), "interp" (Interpret) or "keyed"
// (InterpretKeyed).
func rankFns(p prog, mode string) []func(*pipe.Exec) error {
	if mode == "straight" {
		return generated[p.def.name]
	}
	fns := make([]func(*pipe.Exec) error, len(p.ops))
	for r, ops := range p.ops {
		if mode == "interp" {
			fns[r] = func(x *pipe.Exec) error { return pipe.Interpret(x, ops) }
		} else {
			fns[r] = func(x *pipe.Exec) error { return pipe.InterpretKeyed(x, ops) }
		}
	}
	return fns
}

func inprocWorld(n int, timeout time.Duration) []transport.Transport {
	return transport.NewInProc(n, transport.InProcTimeout(timeout))
}

// tcpWorld connects n TCP ranks (goroutines) on 127.0.0.1.
func tcpWorld(t testing.TB, n int, fp string, mod func(r int, c *transport.TCPConfig)) []transport.Transport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	trs := make([]*transport.TCP, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		cfg := transport.TCPConfig{Rank: r, World: n, MasterAddr: ln.Addr().String(), Token: "t0k3n", Fingerprint: fp,
			Timeout: 20 * time.Second, RendezvousTimeout: 10 * time.Second}
		if r == 0 {
			cfg.Listener = ln
		}
		if mod != nil {
			mod(r, &cfg)
		}
		wg.Go(func() { trs[r], errs[r] = transport.DialTCP(context.Background(), cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	out := make([]transport.Transport, n)
	for r, tr := range trs {
		out[r] = tr
	}
	return out
}

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
	g := &rig{p: p, stages: newStages(p.spec.Stages), data: &data{f32: f32}, trs: trs}
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
					s.step()
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
		g.data.iter = it
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
	ref := newStages(g.p.spec.Stages)
	want := sequential(ref, g.p.spec.Micro, len(got), f32)
	for it := range want {
		if !sameFloats(got[it], want[it]) {
			t.Errorf("iteration %d losses:\n got %v\nwant %v", it, got[it], want[it])
		}
	}
	for s := range ref {
		if g.stages[s].a != ref[s].a || g.stages[s].b != ref[s].b {
			t.Errorf("stage %d params: got (%v, %v), want (%v, %v)", s, g.stages[s].a, g.stages[s].b, ref[s].a, ref[s].b)
		}
	}
}

// TestPipelineMatchesSequential runs every program, over both transports,
// as straight-line calls, through Interpret and through InterpretKeyed, for
// three iterations, and requires the losses and parameters to equal a
// sequential run exactly.
func TestPipelineMatchesSequential(t *testing.T) {
	for _, d := range progDefs {
		p := lower(d)
		for _, tk := range []string{"inproc", "tcp"} {
			for _, mode := range []string{"straight", "interp", "keyed"} {
				t.Run(fmt.Sprintf("%s/%s/%s", d.name, tk, mode), func(t *testing.T) {
					var trs []transport.Transport
					if tk == "inproc" {
						trs = inprocWorld(d.ranks, 20*time.Second)
					} else {
						trs = tcpWorld(t, d.ranks, p.spec.Fingerprint, nil)
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
	p := progByName(t, "twoRankVZB")
	g := newRig(t, p, tcpWorld(t, p.spec.Ranks, p.spec.Fingerprint, nil), true)
	got := g.train(t, 2, rankFns(p, "straight"))
	checkAgainstSequential(t, g, got, true)
}

func TestGeneratedSpecsMatchLowering(t *testing.T) {
	for _, d := range progDefs {
		p := lower(d)
		gs := generatedSpecs[d.name]
		if fmt.Sprint(gs) != fmt.Sprint(p.spec) {
			t.Errorf("%s: generated spec %v, lowering %v", d.name, gs, p.spec)
		}
	}
}

// TestLossesIncludePerMicro checks the loss sink and Reset.
func TestLossesAndReset(t *testing.T) {
	p := progByName(t, "twoRank1F1B")
	g := newRig(t, p, inprocWorld(2, 10*time.Second), false)
	g.train(t, 1, rankFns(p, "straight"))
	last := g.xs[1]
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
