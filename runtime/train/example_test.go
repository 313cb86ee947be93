package train_test

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"

	"gorgonia.org/tensor"

	"github.com/ppgen/ppgen/runtime/nn"
	"github.com/ppgen/ppgen/runtime/pipe"
	"github.com/ppgen/ppgen/runtime/train"
	"github.com/ppgen/ppgen/runtime/train/internal/testprog"
)

// Train an 8-layer MLP with a generated 1f1b program at P=4 (its Spec.Layers,
// from `ppgen gen -model`, puts two layers on each stage), four ranks in
// this process, with AdamW, clipping at norm 1 and a cosine decay.
func Example() {
	res, err := train.Run(context.Background(), train.Config{
		Train: train.Program{Spec: testprog.OneF1BSpec, Ranks: testprog.OneF1BRanks[:]},
		Layer: func(i int) (nn.Layer, error) { // layer i, seeded by i
			lin, err := nn.NewLinear(4, 4, tensor.Float64, nn.NewRand(uint64(i)))
			return nn.NewSequential(lin, nn.Tanh{}), err
		},
		Loss: func(scale float64) pipe.Loss { return nn.MSE{Scale: scale} },
		Data: func(step, replica int) (pipe.DataSource, error) { // a pure function of the step
			rng := rand.New(rand.NewPCG(uint64(step), uint64(replica)))
			var b pipe.MicroBatches
			for range testprog.OneF1BSpec.Micro {
				x := tensor.New(tensor.WithShape(2, 4), tensor.WithBacking([]float64{rng.Float64(), 0, 1, 0, 0, 1, 0, rng.Float64()}))
				b.Inputs, b.Targets = append(b.Inputs, x), append(b.Targets, x) // learn the identity
			}
			return b, nil
		},
		Steps: 20,
		LR:    nn.CosineDecay{Peak: 0.05, Min: 0.005, Warmup: 2, Total: 20},
		Clip:  1,
	})
	if err != nil {
		log.Fatal(err)
	}
	first, last := res.Records[0], res.Records[len(res.Records)-1]
	fmt.Printf("step %d loss %.3f\nstep %d loss %.3f\n", first.Step, first.Loss, last.Step, last.Loss)
	// Output:
	// step 1 loss 0.404
	// step 20 loss 0.027
}
