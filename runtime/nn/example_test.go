package nn_test

import (
	"fmt"

	"github.com/ppgen/ppgen/runtime/nn"
	"gorgonia.org/tensor"
)

// Training over M micro-batches: each micro-batch's loss gets Scale = 1/M,
// so the accumulated gradients are those of the full-batch mean loss.
func Example_microBatches() {
	rng := nn.NewRand(1)
	l1, _ := nn.NewLinear(2, 8, tensor.Float64, rng)
	l2, _ := nn.NewLinear(8, 1, tensor.Float64, rng)
	model := nn.NewSequential(l1, nn.Tanh{}, l2)
	opt := &nn.SGD{LR: 0.1, Momentum: 0.9}

	// Four micro-batches of two rows: y = x0 - x1.
	xs := [][]float64{{0, 1, 1, 0}, {1, 1, 0.5, 0}, {0, 0.5, 1, 0.5}, {0.2, 0.9, 0.7, 0.1}}
	const M = 4
	loss := nn.MSE{Scale: 1.0 / M}
	for step := range 3 {
		model.ZeroGrad()
		var total float64
		for _, xv := range xs {
			x := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking(append([]float64(nil), xv...)))
			t := tensor.New(tensor.WithShape(2, 1), tensor.WithBacking([]float64{xv[0] - xv[1], xv[2] - xv[3]}))
			y, saved, err := model.Forward(x)
			if err != nil {
				panic(err)
			}
			l, dy, err := loss.Loss(y, t)
			if err != nil {
				panic(err)
			}
			total += l
			if _, err := model.BackwardInput(saved, dy); err != nil { // B
				panic(err)
			}
			if err := model.BackwardWeight(saved, dy); err != nil { // W, possibly much later
				panic(err)
			}
		}
		if err := opt.Step(model.Params()); err != nil {
			panic(err)
		}
		fmt.Printf("step %d: full-batch mean loss %.4f\n", step, total)
	}
	for _, p := range model.Params() {
		fmt.Println(p.Name, p.Value.Shape())
	}
	// Output:
	// step 0: full-batch mean loss 0.1875
	// step 1: full-batch mean loss 0.1245
	// step 2: full-batch mean loss 0.0779
	// 0.weight (2, 8)
	// 0.bias (8)
	// 2.weight (8, 1)
	// 2.bias (1)
}
