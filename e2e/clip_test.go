package e2e_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/abi"
	"github.com/ppgen/ppgen/gen"
	"github.com/ppgen/ppgen/gen/ir"
	"github.com/ppgen/ppgen/generated/dualpipe"
	"github.com/ppgen/ppgen/runtime/collective"
	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
)

// copyModel is a model of n stages of tieWidth (a Linear and a Tanh each),
// stage k's Linear drawn from seed 200+k, so that two calls build equal
// models.
func copyModel(t testing.TB, n int, dt tensor.Dtype) []*nn.Sequential {
	t.Helper()
	var out []*nn.Sequential
	for k := range n {
		l, err := nn.NewLinear(tieWidth, tieWidth, dt, nn.NewRand(uint64(200+k)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, nn.NewSequential(l, nn.Tanh{}))
	}
	return out
}

// TestCopiesClipMatchesSequential: dualpipe runs two copies of the model
// (Spec.Copies = 2, stage s and s+Stages/2 holding model stage s); clipping
// by the global norm with copy 1's parameters skipped (nn.NormShare) gives
// every rank the sequential model's norm, and both copies end equal to the
// sequential model trained with clipping.
func TestCopiesClipMatchesSequential(t *testing.T) {
	const iters, maxNorm = 3, 0.05
	p := prog{"dualpipe", ir.Config{Schedule: "dualpipe", Ranks: 4, Micro: 8}, gen.Options{}, dualpipe.Spec, dualpipe.Ranks[:], dualpipe.Program}
	sp := p.spec
	if sp.Copies != 2 {
		t.Fatalf("dualpipe lowered with %d copies, want 2", sp.Copies)
	}
	per := sp.Stages / 2
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		t.Run(fmt.Sprint(dt), func(t *testing.T) {
			tol := 1e-12
			if dt == tensor.Float32 {
				tol = 1e-5
			}
			ref := copyModel(t, per, dt)
			_, wantNorms := tieSequential(t, ref, dt, sp.Micro, iters, maxNorm)
			if slices.Max(wantNorms) <= maxNorm {
				t.Fatalf("norms %v never above %v: the clipping is not tested", wantNorms, maxNorm)
			}
			stages := append(copyModel(t, per, dt), copyModel(t, per, dt)...)
			trs := inprocWorld(sp.Ranks, 20*time.Second)
			norms := make([][]float64, sp.Ranks)
			it := 0
			src := tieSource{dt, sp.Micro, &it}
			xs := make([]*pipe.Exec, sp.Ranks)
			for r := range sp.Ranks {
				held := map[int]pipe.Stage{}
				var ps []*nn.Param
				var share nn.NormShare
				for s, rr := range sp.RankOf {
					if rr == r {
						held[s] = stages[s]
						ps = append(ps, stages[s].Params()...)
						if s >= per {
							share.Skip = append(share.Skip, stages[s].Params()...)
						}
					}
				}
				all, err := collective.New(trs[r], abi.GradChannel)
				if err != nil {
					t.Fatal(err)
				}
				opt := &nn.SGD{LR: 0.1}
				x, err := pipe.New(pipe.Config{Rank: r, Spec: sp, Stages: held, Transport: trs[r], Data: src,
					Loss: nn.MSE{Scale: 1 / float64(sp.Micro)},
					OptStep: func() error {
						norm, err := nn.ClipGradNorm(all, share.Counted(ps), ps, maxNorm)
						if err != nil {
							return err
						}
						norms[r] = append(norms[r], norm)
						if err := opt.Step(ps); err != nil {
							return err
						}
						nn.ZeroGrad(ps)
						return nil
					}})
				if err != nil {
					t.Fatal(err)
				}
				xs[r] = x
				t.Cleanup(func() { x.Close(); trs[r].Close() })
			}
			for it = range iters {
				if err := pipe.RunAll(xs, rankFns(p, "straight")); err != nil {
					t.Fatalf("iteration %d: %v", it, err)
				}
			}
			for r := range norms {
				for k := range wantNorms {
					if relErr(norms[r][k], wantNorms[k]) > tol {
						t.Errorf("rank %d iteration %d: global norm %.17g, sequential %.17g", r, k, norms[r][k], wantNorms[k])
					}
				}
			}
			for s, st := range stages {
				a, b := st.Params(), ref[s%per].Params()
				for i := range a {
					if e := normErr(tieFloats(a[i].Value), tieFloats(b[i].Value)); e > tol {
						t.Errorf("stage %d %s: %.3g from the sequential model", s, a[i].Name, e)
					}
				}
			}
		})
	}
}
