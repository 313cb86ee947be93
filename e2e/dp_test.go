package e2e_test

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/gen/passes"
	"github.com/ppgen/ppgen/gen/verify"
	"github.com/ppgen/ppgen/generated/fsdpswap"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/mesh"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/transport"
)

// dpShare is replica d's block of the global batch.
type dpShare struct {
	d   *e2eData
	off int
}

func (s dpShare) Input(m int) (*tensor.Dense, error)  { return s.d.Input(s.off + m) }
func (s dpShare) Target(m int) (*tensor.Dense, error) { return s.d.Target(s.off + m) }

// trainBlocks trains the model sequentially on the global batch of
// blocks·micro micro-batches, its gradients summed per block and the blocks
// in replica order (runtime/collective's reduction order).
func trainBlocks(t *testing.T, stages []*nn.Sequential, micro, blocks int) {
	t.Helper()
	ps := params(stages)
	opt := &nn.SGD{LR: e2eLR}
	loss := nn.MSE{Scale: 1 / float64(micro*blocks)}
	var data e2eData
	for step := range e2eSteps {
		data.set(step, micro*blocks)
		var total [][]float64
		for b := range blocks {
			for m := b * micro; m < (b+1)*micro; m++ {
				x := data.in[m]
				saved := make([]any, len(stages))
				var err error
				for s, st := range stages {
					if x, saved[s], err = st.Forward(x); err != nil {
						t.Fatal(err)
					}
				}
				_, dy, err := loss.Loss(x, data.target[m])
				if err != nil {
					t.Fatal(err)
				}
				for s := len(stages) - 1; s >= 0; s-- {
					if dy, err = stages[s].Backward(saved[s], dy); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i, p := range ps {
				g := append([]float64(nil), p.Grad.Float64s()...)
				if b == 0 {
					total = append(total, g)
					continue
				}
				for j := range g {
					total[i][j] += g[j]
				}
			}
			nn.ZeroGrad(ps)
		}
		for i, p := range ps {
			copy(p.Grad.Float64s(), total[i])
		}
		if err := opt.Step(ps); err != nil {
			t.Fatal(err)
		}
		nn.ZeroGrad(ps)
	}
}

// TestFSDPPeakIsVerified runs FSDP programs at DP = 2 on real sharded
// stages (nn.FSDPGroup over a runtime/mesh DP group) and checks that
//   - every rank's shards equal sequential training on the whole global
//     batch (float64, ≤ 1e-12);
//   - the measured peak of stages gathered at once on each rank equals the
//     verifier's FSDP peak for that rank (Report.PeakUnsharded, `ppgen
//     verify`'s "peak unsharded stages per rank");
//   - the resident sharded bytes (parameters + gradients) are half of the
//     unsharded ones, padded: ⌈L/2⌉ elements per stage of L.
func TestFSDPPeakIsVerified(t *testing.T) {
	type tc struct {
		name   string
		spec   pipe.Spec
		ops    [][]pipe.Op
		report verify.Report
	}
	var cases []tc
	{
		p := loweredProgram(t)
		rep, err := verify.Check(p, verify.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, tc{"fsdpswap", fsdpswap.Spec, fsdpswap.Program, rep})
	}
	for _, c := range []struct {
		cfg      ir.Config
		window   int
		prefetch int
	}{
		{ir.Config{Schedule: "interleaved", Ranks: 2, Virtual: 2, Micro: 4}, 1, 0},
		{ir.Config{Schedule: "interleaved", Ranks: 2, Virtual: 2, Micro: 4}, 2, 1},
		{ir.Config{Schedule: "1f1b", Ranks: 3, Micro: 6}, 1, 1},
	} {
		opt := gen.Options{Passes: passes.Options{FSDP: c.window, FSDPPrefetch: c.prefetch}}
		l := lowered(t, c.cfg, opt)
		res, err := gen.Lower(c.cfg, opt)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, tc{fmt.Sprintf("%s-fsdp%d-prefetch%d", l.name, c.window, c.prefetch), l.spec, l.ops, res.Report})
	}
	const dp = 2
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp := c.spec
			if len(c.report.PeakUnsharded) != sp.Ranks {
				t.Fatalf("the verifier reports no FSDP peak: %v", c.report.PeakUnsharded)
			}
			m, err := mesh.New(sp.Ranks, dp)
			if err != nil {
				t.Fatal(err)
			}
			ref := e2eStages(t, sp.Stages)
			trainBlocks(t, ref, sp.Micro, dp)
			world := transport.NewInProc(m.World(), transport.InProcTimeout(30*time.Second))
			xs := make([]*pipe.Exec, m.World())
			groups := make([]*nn.FSDPGroup, m.World())
			shards := make([]map[int]*nn.FSDP, m.World())
			fns := make([]func(*pipe.Exec) error, m.World())
			data := &e2eData{}
			for w := range xs {
				pipeT, dpT, err := m.Groups(world[w])
				if err != nil {
					t.Fatal(err)
				}
				pp, d := m.Coords(w)
				comm, err := collective.New(dpT, abi.ActChannel)
				if err != nil {
					t.Fatal(err)
				}
				g, err := nn.NewFSDPGroup(comm)
				if err != nil {
					t.Fatal(err)
				}
				groups[w], shards[w] = g, map[int]*nn.FSDP{}
				model := e2eStages(t, sp.Stages)
				held := map[int]pipe.Stage{}
				for _, s := range sp.StagesOf(pp) {
					f, err := g.Wrap(model[s], fmt.Sprintf("stage %d", s))
					if err != nil {
						t.Fatal(err)
					}
					held[s], shards[w][s] = f, f
				}
				xs[w], err = pipe.New(pipe.Config{
					Rank: pp, Spec: sp, Stages: held, Transport: pipeT,
					Loss:    nn.MSE{Scale: 1 / float64(sp.Micro*dp)},
					Data:    dpShare{data, d * sp.Micro},
					OptStep: g.OptStep(&nn.SGD{LR: e2eLR}),
				})
				if err != nil {
					t.Fatal(err)
				}
				ops := c.ops[pp]
				fns[w] = func(x *pipe.Exec) error { return pipe.Interpret(x, ops) }
				defer world[w].Close()
				defer xs[w].Close()
			}
			for step := range e2eSteps {
				data.set(step, sp.Micro*dp)
				for _, x := range xs {
					x.Reset()
				}
				if err := pipe.RunAll(xs, fns); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
			for w := range xs {
				pp, d := m.Coords(w)
				st := groups[w].Stats()
				if st.PeakGathered != c.report.PeakUnsharded[pp] {
					t.Errorf("rank %d (pp %d): measured peak of gathered stages %d, the verifier's FSDP peak %d", w, pp, st.PeakGathered, c.report.PeakUnsharded[pp])
				}
				if st.Gathered != 0 {
					t.Errorf("rank %d: %d stages still gathered after the iterations", w, st.Gathered)
				}
				var shardBytes, fullBytes int64
				worst := 0.0
				for _, s := range sp.StagesOf(pp) {
					var flat []float64
					for _, p := range ref[s].Params() {
						flat = append(flat, p.Value.Float64s()...)
					}
					k := (len(flat) + dp - 1) / dp
					shardBytes += 8 * int64(k)
					fullBytes += 8 * int64(len(flat))
					got := shards[w][s].Shard.Value.Float64s()
					for i := range k {
						want := 0.0
						if j := d*k + i; j < len(flat) {
							want = flat[j]
						}
						worst = math.Max(worst, relDiff(got[i], want))
					}
				}
				if worst > 1e-12 {
					t.Errorf("rank %d: shards differ from sequential training by %.3g (relative)", w, worst)
				}
				if st.ParamBytes != shardBytes || st.GradBytes != shardBytes || 2*shardBytes < fullBytes || 2*shardBytes-fullBytes >= 8*int64(dp*len(sp.StagesOf(pp))) {
					t.Errorf("rank %d: resident parameters %d and gradients %d bytes; want %d each, half of the unsharded %d (padded)", w, st.ParamBytes, st.GradBytes, shardBytes, fullBytes)
				}
				t.Logf("rank %d (pp %d, dp %d): %v; unsharded %d bytes of parameters; verifier's peak %d", w, pp, d, st, fullBytes, c.report.PeakUnsharded[pp])
			}
		})
	}
}

// TestFSDPFailureNamesRank: a rank of one DP group that fails mid-iteration
// fails every rank of the mesh, each naming it.
func TestFSDPFailureNamesRank(t *testing.T) {
	sp := fsdpswap.Spec
	m, _ := mesh.New(sp.Ranks, 2)
	world := transport.NewInProc(m.World(), transport.InProcTimeout(30*time.Second))
	xs := make([]*pipe.Exec, m.World())
	data := &e2eData{}
	data.set(0, 2*sp.Micro)
	for w := range xs {
		pipeT, dpT, _ := m.Groups(world[w])
		pp, d := m.Coords(w)
		comm, _ := collective.New(dpT, abi.ActChannel)
		g, _ := nn.NewFSDPGroup(comm)
		model := e2eStages(t, sp.Stages)
		held := map[int]pipe.Stage{}
		for _, s := range sp.StagesOf(pp) {
			f, err := g.Wrap(model[s], fmt.Sprintf("stage %d", s))
			if err != nil {
				t.Fatal(err)
			}
			held[s] = f
		}
		var err error
		xs[w], err = pipe.New(pipe.Config{Rank: pp, Spec: sp, Stages: held, Transport: pipeT,
			Loss: nn.MSE{Scale: 1}, Data: dpShare{data, d * sp.Micro}, OptStep: g.OptStep(&nn.SGD{LR: e2eLR})})
		if err != nil {
			t.Fatal(err)
		}
		defer xs[w].Close()
	}
	const victim = 5 // pp 2, dp 1
	errs := make([]error, m.World())
	var wg sync.WaitGroup
	for w := range xs {
		pp, _ := m.Coords(w)
		wg.Go(func() {
			if w == victim {
				xs[w].Fail(errors.New("disk full"))
			}
			errs[w] = pipe.Run(xs[w], fsdpswap.Ranks[pp])
		})
	}
	wg.Wait()
	for w, err := range errs {
		var pe *transport.PeerError
		if w == victim {
			if err == nil {
				t.Errorf("rank %d (the victim) succeeded", w)
			}
			continue
		}
		if !errors.As(err, &pe) || pe.Peer != victim {
			t.Errorf("world rank %d: %v; want an error naming world rank %d", w, err, victim)
		}
	}
}
