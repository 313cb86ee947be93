package train_test

import (
	"context"
	"testing"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/train"
	"github.com/ppgen/ppgen/runtime/transport"
)

// BenchmarkStep: a step of the 8-layer test model on 1f1b at P=4, M=8,
// four ranks in-process, through the loop (train.Run: the program, the
// norm's and the loss's all-reduces, clipping, AdamW, the record) and
// through a hand-written loop over the same stages (pipe.RunAll, then
// AdamW on every rank: no reduction, no record). The model is tiny (6×6
// layers), so the difference is the loop's cost per step at its worst
// ratio. BENCHMARKS.md has the figures.
func BenchmarkStep(b *testing.B) {
	b.Run("loop", func(b *testing.B) {
		c := config(onef1b, 1, b.N)
		c.LR = nn.ConstantLR{Value: 0.001}
		if _, err := train.Run(context.Background(), c); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("direct", func(b *testing.B) {
		sp := onef1b.Spec
		trs := transport.NewInProc(sp.Ranks)
		xs := make([]*pipe.Exec, sp.Ranks)
		params := make([][]*nn.Param, sp.Ranks)
		opts := make([]*nn.AdamW, sp.Ranks)
		srcs := make([]*stepData, sp.Ranks)
		for r := range sp.Ranks {
			held := map[int]pipe.Stage{}
			for _, s := range sp.StagesOf(r) {
				var ls []nn.Layer
				for i := sp.Layers[s][0]; i < sp.Layers[s][1]; i++ {
					l, err := layer(i)
					if err != nil {
						b.Fatal(err)
					}
					ls = append(ls, l)
				}
				seq := nn.NewSequential(ls...)
				held[s] = seq
				params[r] = append(params[r], seq.Params()...)
			}
			opts[r], srcs[r] = nn.NewAdamW(), &stepData{}
			var err error
			xs[r], err = pipe.New(pipe.Config{Rank: r, Spec: sp, Stages: held, Transport: trs[r], Loss: nn.MSE{Scale: 1.0 / float64(sp.Micro)}, Data: srcs[r]})
			if err != nil {
				b.Fatal(err)
			}
			defer xs[r].Close()
		}
		b.ResetTimer()
		for step := range b.N {
			for r := range sp.Ranks {
				var err error
				if srcs[r].cur, err = data(sp.Micro)(step, 0); err != nil {
					b.Fatal(err)
				}
			}
			if err := pipe.RunAll(xs, onef1b.Ranks); err != nil {
				b.Fatal(err)
			}
			for r := range sp.Ranks {
				if err := opts[r].Step(params[r]); err != nil {
					b.Fatal(err)
				}
				nn.ZeroGrad(params[r])
			}
		}
	})
}

// stepData is a DataSource whose micro-batches change every step.
type stepData struct{ cur pipe.DataSource }

func (d *stepData) Input(m int) (*tensor.Dense, error)  { return d.cur.Input(m) }
func (d *stepData) Target(m int) (*tensor.Dense, error) { return d.cur.Target(m) }
